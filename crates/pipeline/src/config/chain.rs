//! The `[chain]` section: the endpoints, the market contract, and how the watcher scans,
//! waits for confirmations and judges the endpoints' health; and the defaults that depend
//! on the chain id.

use super::duration;
use alloy::primitives::Address;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::time::Duration;
use validator::{Validate, ValidationError};

/// The chain: its endpoints, the market contract, and how the watcher scans, waits for
/// confirmations and judges the endpoints' health.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, Validate)]
#[serde(deny_unknown_fields, default)]
#[schemars(transform = duration::legacy_keys)]
#[validate(schema(function = "endpoints"))]
pub struct ChainSection {
    /// `http(s)://` (polling with eth_getLogs) or `ws(s)://` (a newHeads subscription
    /// wakes the watcher; polling underneath). Used when `rpc_urls` is empty.
    pub rpc_url: String,
    /// Several endpoints of the same chain, in order of preference: reads go to the first
    /// one in service, signed transactions to all in service (replaces `rpc_url`).
    pub rpc_urls: Vec<String>,
    /// An endpoint trailing the best head of all endpoints by more blocks is not used.
    pub max_endpoint_lag_blocks: u64,
    /// Reconnection attempts of alloy's websocket client before the node builds a new
    /// client (it does so without limit).
    pub ws_reconnect_attempts: u32,
    /// Pause between those reconnection attempts (`"3s"`).
    #[serde(with = "humantime_serde")]
    #[schemars(with = "duration::Text", extend("x-legacy-unit" = "ms"))]
    pub ws_retry_interval: Duration,
    /// Expected chain id; checked at start when set.
    pub chain_id: Option<u64>,
    /// The market contract whose resolution requests the node serves (`--market-address`).
    #[schemars(with = "Option<cresolver_core::schema::HexAddress>")]
    pub market_address: Option<Address>,
    /// Multicall3 address for batched reads (none: concurrent calls).
    #[schemars(with = "Option<cresolver_core::schema::HexAddress>")]
    pub multicall_address: Option<Address>,
    /// Act only on logs at least this deep; default per chain id (0 on anvil/hardhat).
    pub confirmations: Option<u64>,
    /// First block to scan when there is no checkpoint (default: 0 on a dev chain, else
    /// the head at the node's first start, which is remembered). No request below it is
    /// ever acted on, and a rewind after a reorg never goes below it.
    pub start_block: Option<u64>,
    /// How deep a block must be to count as final where the endpoint does not serve the
    /// `finalized` block tag (default per chain id: see
    /// `chain::finality::default_finality_depth`). A confirmed resolution is watched
    /// until its block is final, and re-sent if a reorg removes it before then.
    pub finality_depth: Option<u64>,
    /// How often the watcher polls for new logs and the endpoints are probed (`"2s"`);
    /// the finality watch looks at confirmed rounds at a new head, at most this often.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "duration::Text", extend("x-legacy-unit" = "ms"))]
    #[validate(custom(function = "at_least_1ms"))]
    pub poll_interval: Duration,
    /// Largest eth_getLogs range; halved on "range too large" errors.
    // (schemars puts the bound into the schema too: the loader refuses 0 from a file or
    // a variable before `validate`, which checks a config built in code)
    #[validate(range(min = 1, message = "must be at least 1"))]
    pub max_block_range: u64,
    /// Deadline of one JSON-RPC call, its transport retries included (`"10s"`).
    #[serde(with = "humantime_serde")]
    #[schemars(with = "duration::Text", extend("x-legacy-unit" = "ms"))]
    #[validate(custom(function = "at_least_1ms"))]
    pub rpc_timeout: Duration,
    /// Longest wait between retries of the watcher and of rounds after a transient
    /// error (`"5s"`; the poll interval when that is larger).
    #[serde(with = "humantime_serde")]
    #[schemars(with = "duration::Text", extend("x-legacy-unit" = "ms"))]
    pub max_backoff: Duration,
    /// `/health/ready` fails when the newest head is older than this (`"60s"`; default:
    /// 60 s, none on a dev chain, which mines only on demand).
    #[serde(with = "humantime_serde")]
    #[schemars(with = "Option<duration::Text>", extend("x-legacy-unit" = "secs"))]
    pub max_head_age: Option<Duration>,
    /// `/health/ready` fails when the watcher is more than this many blocks behind the
    /// head (beyond the confirmations).
    pub max_lag_blocks: u64,
}

impl Default for ChainSection {
    fn default() -> Self {
        Self {
            rpc_url: "http://127.0.0.1:8545".into(),
            rpc_urls: vec![],
            max_endpoint_lag_blocks: 5,
            ws_reconnect_attempts: 10,
            ws_retry_interval: Duration::from_secs(3),
            chain_id: None,
            market_address: None,
            multicall_address: None,
            confirmations: None,
            start_block: None,
            finality_depth: None,
            poll_interval: Duration::from_secs(2),
            max_block_range: 5_000,
            rpc_timeout: Duration::from_secs(10),
            max_backoff: Duration::from_secs(5),
            max_head_age: None,
            max_lag_blocks: 50,
        }
    }
}

impl ChainSection {
    /// The endpoints in order of preference: `rpc_urls`, or `rpc_url` alone.
    pub fn endpoints(&self) -> Vec<String> {
        if self.rpc_urls.is_empty() {
            vec![self.rpc_url.clone()]
        } else {
            self.rpc_urls.clone()
        }
    }
}

/// A duration the node divides time by: at least a millisecond.
pub(super) fn at_least_1ms(d: &Duration) -> Result<(), ValidationError> {
    if d.as_millis() >= 1 {
        Ok(())
    } else {
        Err(ValidationError::new("range").with_message("must be at least 1ms".into()))
    }
}

/// The endpoints in use (`rpc_urls`, else `rpc_url`) are `http(s)://` or `ws(s)://`
/// URLs. (A struct-level check: which key is checked depends on the other one; the
/// error's code names the key.)
fn endpoints(c: &ChainSection) -> Result<(), ValidationError> {
    let key = if c.rpc_urls.is_empty() {
        "rpc_url"
    } else {
        "rpc_urls"
    };
    for (i, u) in c.endpoints().iter().enumerate() {
        let message = match url::Url::parse(u) {
            Err(e) => format!("entry {} is not a URL: {e}", i + 1),
            Ok(url) if !matches!(url.scheme(), "http" | "https" | "ws" | "wss") => {
                format!("entry {} must be http(s):// or ws(s)://", i + 1)
            }
            Ok(_) => continue,
        };
        return Err(ValidationError::new(key).with_message(message.into()));
    }
    Ok(())
}

/// Default confirmation depth for a chain.
pub fn default_confirmations(chain_id: u64) -> u64 {
    match chain_id {
        31337 | 1337 => 0,
        1 => 12,
        11155111 | 17000 | 560048 => 3,
        _ => 5,
    }
}

/// Whether a chain id is a local development chain.
pub fn is_dev_chain(chain_id: u64) -> bool {
    matches!(chain_id, 31337 | 1337)
}
