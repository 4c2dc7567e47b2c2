//! What the node's HTTP API and its status page share: the handlers' state, the manual
//! trigger they hand to the node, the JSON error body and the parsing of a market id.

use alloy::primitives::{Address, U256};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use cresolver_metrics::Metrics;
use cresolver_store::MarketId;
use cresolver_store::RoundStore;
use parking_lot::RwLock;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc;

/// A request, made over HTTP, to resolve a market of the node's market contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ManualTrigger {
    /// The market to resolve.
    pub market_id: MarketId,
}

/// What the handlers share.
#[derive(Clone)]
pub struct ApiState {
    /// The round store the read endpoints answer from.
    pub store: Arc<dyn RoundStore>,
    /// The registry `GET /metrics` renders.
    pub metrics: Arc<Metrics>,
    /// Where `POST /resolve` sends its requests (the node judges them).
    pub trigger: mpsc::Sender<ManualTrigger>,
    /// Bearer token for `POST /resolve`; `None` disables the endpoint.
    pub token: Option<secrecy::SecretString>,
    /// The node's market contract.
    pub market: Address,
    /// When the API started (`/health`'s `uptime_s`).
    pub started: Instant,
    /// What the node keeps current for `/health` (chain id, markets, the last processed
    /// block, a cluster's lease counts).
    pub health: Arc<RwLock<NodeHealth>>,
    /// The chain as the node's head probe sees it (`None`: no chain, e.g. tests of the API alone).
    pub chain: Option<Arc<cresolver_chain::health::ChainHealth>>,
    /// Cancelled when the node stops: ends the status page's event streams, so that the
    /// server's graceful shutdown does not wait for open browser tabs.
    pub stop: tokio_util::sync::CancellationToken,
    /// This node's DON membership, when it is a member: `/status/don` shows its consensus.
    pub don: Option<Arc<cresolver_don::Don>>,
}

/// The node's part of `GET /health`, kept current by the node.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct NodeHealth {
    /// The chain id the node serves.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chain_id: Option<u64>,
    /// The market contracts the node's workflows watch.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub markets: Vec<String>,
    /// The last block the watcher has fully processed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_processed_block: Option<u64>,
    /// A cluster node's lease counts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterHealth>,
}

/// A cluster node's view of its leases, in `/health`.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct ClusterHealth {
    /// This node's id in the cluster.
    pub node_id: String,
    /// The lease length, in seconds.
    pub lease_secs: u64,
    /// Rounds this node holds the lease of now.
    pub leases_held: u64,
    /// Leases claimed since the start.
    pub leases_claimed: u64,
    /// Rounds taken over after another node's lease expired.
    pub takeovers: u64,
    /// Leases lost.
    pub leases_lost: u64,
}

/// Every error the API answers: `{"error": message}`.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// What went wrong, in a sentence.
    pub error: String,
}

/// A JSON `{"error": message}` answer.
pub fn error(status: StatusCode, message: impl Into<String>) -> Response {
    let body = ErrorBody {
        error: message.into(),
    };
    (status, axum::Json(body)).into_response()
}

/// A decimal `U256`: ASCII digits only (no sign, no `0x`, no spaces).
pub fn parse_decimal(s: &str) -> Option<U256> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    U256::from_str_radix(s, 10).ok()
}
