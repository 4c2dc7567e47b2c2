//! The capability of the node's settings kept in the store ([`Settings`]).

use crate::StoreError;

/// The node's settings kept in the store (shared by a cluster). Used by the node at
/// start.
#[async_trait::async_trait]
pub trait Settings: Send + Sync {
    /// A node setting: the value stored under `key`, or `candidate` stored and returned
    /// when there is none (the first writer wins; a cluster shares it).
    async fn setting_or_init(&self, key: &str, candidate: &str) -> Result<String, StoreError>;
}
