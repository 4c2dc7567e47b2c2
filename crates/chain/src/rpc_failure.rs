//! A call to the chain that failed, kept typed until it is shown: what was called and
//! alloy's error (or the node's error object for one call of a batch).

use std::borrow::Cow;

/// Why a call to the chain failed.
#[derive(Debug, thiserror::Error)]
pub enum RpcCause {
    /// The transport, or the node's answer to the request.
    #[error(transparent)]
    Transport(#[from] alloy::transports::TransportError),
    /// A contract binding's call.
    #[error(transparent)]
    Contract(#[from] alloy::contract::Error),
    /// The node's error object for one call of a batch (Multicall3).
    #[error("{message} (code {code})")]
    Node {
        /// The node's message.
        message: String,
        /// The JSON-RPC error code.
        code: i64,
    },
    /// The node answered, without what was asked for (a block it does not have).
    #[error("not found")]
    NotFound,
    /// The node answered something other than what was asked for (logs of another block).
    #[error("an answer that does not match the request")]
    Mismatch,
}

/// A call to the chain that failed: what was called, and why.
#[derive(Debug, thiserror::Error)]
#[error("{call}: {cause}")]
pub struct RpcFailure {
    /// What was called (`eth_blockNumber`, `getMarket at block 7`).
    pub call: Cow<'static, str>,
    /// Why it failed (boxed: alloy's errors are large, and this one travels in
    /// `Result`s).
    pub cause: Box<RpcCause>,
}

impl RpcFailure {
    /// A failure of `call` for `cause`.
    pub fn new(call: impl Into<Cow<'static, str>>, cause: impl Into<RpcCause>) -> Self {
        Self {
            call: call.into(),
            cause: Box::new(cause.into()),
        }
    }

    /// Whether the node said the state of the block asked for is not available (pruned
    /// by a full node).
    pub fn is_pruned_state(&self) -> bool {
        crate::is_pruned_state(&self.cause.to_string())
    }
}
