//! A resolution request's identity: the position of the `ResolutionRequested` log that
//! asked for it. The watcher reads it off the chain, the store keys rounds and their
//! de-duplication by it, and a round's transcript records it.

use alloy_primitives::B256;

/// A trigger log's identity and position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRef {
    /// The hash of the transaction that emitted the log.
    pub tx_hash: B256,
    /// The log's index in its block.
    pub log_index: u64,
    /// The number of the block holding the log.
    pub block_number: u64,
    /// The hash of that block.
    pub block_hash: B256,
}
