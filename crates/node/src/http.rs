//! What the node's HTTP API and its status page share: the handlers' state, the manual
//! trigger they hand to the node, the JSON error body and the parsing of a market id.

use alloy::primitives::{Address, U256};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use cresolver_metrics::Metrics;
use cresolver_store::RoundStore;
use serde_json::{Value, json};
use std::sync::{Arc, RwLock};
use std::time::Instant;
use tokio::sync::mpsc;

/// A request, made over HTTP, to resolve a market of the node's market contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ManualTrigger {
    pub market_id: U256,
}

/// What the handlers share.
#[derive(Clone)]
pub struct ApiState {
    pub store: Arc<dyn RoundStore>,
    pub metrics: Arc<Metrics>,
    pub trigger: mpsc::Sender<ManualTrigger>,
    /// Bearer token for `POST /resolve`; `None` disables the endpoint.
    pub token: Option<secrecy::SecretString>,
    /// The node's market contract.
    pub market: Address,
    pub started: Instant,
    /// Extra health fields the node keeps current (chain id, last block, …), merged into
    /// `/health`. Must be a JSON object to be merged; anything else is ignored.
    pub health: Arc<RwLock<Value>>,
    /// The chain as the node's head probe sees it (`None`: no chain, e.g. tests of the API alone).
    pub chain: Option<Arc<cresolver_chain::health::ChainHealth>>,
    /// Cancelled when the node stops: ends the status page's event streams, so that the
    /// server's graceful shutdown does not wait for open browser tabs.
    pub stop: tokio_util::sync::CancellationToken,
    /// This node's DON membership, when it is a member: `/status/don` shows its consensus.
    pub don: Option<Arc<cresolver_don::Don>>,
}

/// A JSON `{"error": message}` answer.
pub fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, axum::Json(json!({ "error": message.into() }))).into_response()
}

/// A decimal `U256`: ASCII digits only (no sign, no `0x`, no spaces).
pub fn parse_decimal(s: &str) -> Option<U256> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    U256::from_str_radix(s, 10).ok()
}
