//! A resolution request's identity: the position of the `ResolutionRequested` log that
//! asked for it. The watcher reads it off the chain, the store keys rounds and their
//! de-duplication by it, and a round's transcript records it.

use alloy_primitives::B256;

/// A trigger log's identity and position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRef {
    pub tx_hash: B256,
    pub log_index: u64,
    pub block_number: u64,
    pub block_hash: B256,
}
