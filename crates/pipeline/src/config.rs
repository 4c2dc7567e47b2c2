//! Node configuration: a TOML file, every key overridable by environment variables
//! (`CRESOLVER__SECTION__KEY`), the common ones by command-line flags. Secrets (the
//! signing key, the API token) are only ever named here, never stored: they are read from
//! the environment or a key file (by `crate::wallet` for the signing key) and never logged.
//!
//! One module per section (`chain`, `node`, `signer`, `submit`, `discovery`, `api`,
//! `protocols`, `store`; `[don]` is `cresolver_don`'s), each holding its schema, its
//! defaults and its checks, declared beside the fields with `validator`; `duration` reads
//! durations as text (`"2s"`) and the older whole-number keys (`poll_interval_ms`);
//! `load` layers the file, the environment and the flags; `error` says what is wrong.
//!
//! Why these crates: `humantime` (with `humantime-serde`) is the common reading of
//! `"2s"`/`"1m 30s"` in Rust tools, kept by the chrono maintainers, where a local parser
//! would be one more grammar to document; `validator` declares a check on the field it
//! checks, with the message the operator reads (`garde` has no per-check message, so the
//! messages that say what to do could not have been kept), and schemars reads its
//! `range`/`length`/`url` rules into the schema, so editors see those bounds too.

use alloy::primitives::Address;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use validator::Validate;

mod api;
mod chain;
mod discovery;
pub mod duration;
mod error;
mod load;
mod node;
mod protocols;
mod signer;
mod store;
mod submit;

pub use api::ApiSection;
pub use chain::{ChainSection, default_confirmations, is_dev_chain};
pub use discovery::DiscoverySection;
pub use error::ConfigError;
pub use load::{ENV_PREFIX, Origin, Provenance};
pub use node::NodeSection;
pub use protocols::{
    AgoraSection, ChorusSection, FactagoraSection, ProtocolsSection, RoundtableSection,
};
pub use signer::SignerSection;
pub use store::StoreSection;
pub use submit::SubmitTargets;

/// Blocks the watcher rescans when the block hash at its checkpoint changed.
pub const REORG_WINDOW: u64 = 64;

/// A node's configuration (`node.toml`): one table per section.
#[derive(Debug, Clone, Serialize, Deserialize, Default, JsonSchema, Validate)]
#[serde(deny_unknown_fields, default)]
pub struct NodeConfig {
    /// `[chain]`: the endpoints, the market and how the chain is watched.
    #[validate(nested)]
    pub chain: ChainSection,
    /// `[node]`: the data directory, the workflows and the round limit.
    #[validate(nested)]
    pub node: NodeSection,
    /// `[signer]`: where the resolver's signing key comes from.
    pub signer: SignerSection,
    /// `[submit]`: where and how resolutions are sent.
    #[validate(nested)]
    pub submit: SubmitTargets,
    /// `[discovery]`: how workers' registration files are fetched.
    #[validate(nested)]
    pub discovery: DiscoverySection,
    /// `[api]`: the HTTP API.
    pub api: ApiSection,
    /// `[protocols]`: the agent protocols spoken besides A2A.
    pub protocols: ProtocolsSection,
    /// `[store]`: where the rounds are kept.
    #[validate(nested)]
    pub store: StoreSection,
    /// A resolver DON: this node is one member (see `cresolver_don`). Absent: the node
    /// decides and submits alone, as before.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub don: Option<cresolver_don::DonConfig>,
    /// Where each key's value came from (filled in by [`NodeConfig::load`]; see
    /// [`NodeConfig::origin_of`]).
    #[serde(skip)]
    pub provenance: Provenance,
}

/// Flags that override the file and the environment.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--rpc-url`: the one endpoint to use (replaces `chain.rpc_url` and `chain.rpc_urls`).
    pub rpc_url: Option<String>,
    /// `--market-address`: replaces `chain.market_address`.
    pub market_address: Option<Address>,
    /// `--data-dir`: replaces `node.data_dir`.
    pub data_dir: Option<PathBuf>,
    /// `--workflow` (repeatable): replaces `node.workflows` when not empty.
    pub workflows: Vec<PathBuf>,
    /// A foundry account name (`--account`): the key is `~/.foundry/keystores/<name>`.
    pub account: Option<String>,
}

impl NodeConfig {
    /// Loads `file` (optional), then `CRESOLVER__SECTION__KEY` env vars, then the flags.
    /// Relative paths in the file are resolved from the file's directory.
    pub fn load(file: Option<&Path>, overrides: &Overrides) -> Result<Self, ConfigError> {
        Self::load_from(file, load::process_env(), overrides)
    }

    /// [`NodeConfig::load`] with the environment given (`(name, value)` pairs; only
    /// those named `CRESOLVER__…` are read).
    pub fn load_from(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
        overrides: &Overrides,
    ) -> Result<Self, ConfigError> {
        let layers = load::layers(file, env, overrides)?;
        let mut cfg: NodeConfig = serde_path_to_error::deserialize(layers.value).map_err(|e| {
            let key = e.path().to_string();
            ConfigError::Value {
                at: layers.provenance.describe(&key),
                message: e.into_inner().to_string(),
            }
        })?;
        cfg.provenance = layers.provenance;
        cfg.validate().map_err(|e| match e {
            ConfigError::Invalid { key, message } => ConfigError::Value {
                at: cfg.origin_of(&key),
                message,
            },
            other => other,
        })?;
        Ok(cfg)
    }

    /// Checks the values serde cannot, with the checks each section declares beside its
    /// fields: endpoint URLs and schemes, non-zero intervals and limits, fee bounds, the
    /// store URL, the lease and the IPFS gateway. The error names the first key refused.
    pub fn validate(&self) -> Result<(), ConfigError> {
        match Validate::validate(self) {
            Ok(()) => Ok(()),
            Err(errors) => {
                let (key, message) = error::first_invalid(&errors)
                    .unwrap_or_else(|| (String::new(), errors.to_string()));
                Err(ConfigError::Invalid { key, message })
            }
        }
    }

    /// The watcher settings of this config for `market`'s workflow `workflow` on chain
    /// `chain_id`, starting at `start_block` when there is no checkpoint (the one place
    /// the node and `dry-run --watch` take them from).
    pub fn watcher_config(
        &self,
        market: alloy::primitives::Address,
        workflow: &str,
        chain_id: u64,
        start_block: u64,
    ) -> cresolver_chain::watcher::WatcherConfig {
        cresolver_chain::watcher::WatcherConfig {
            market,
            workflow: workflow.to_string(),
            confirmations: self
                .chain
                .confirmations
                .unwrap_or(default_confirmations(chain_id)),
            start_block,
            poll_interval: self.chain.poll_interval,
            max_range: self.chain.max_block_range,
            reorg_window: REORG_WINDOW,
            max_backoff: self.max_backoff(),
        }
    }

    /// This node's name as a lease holder: `store.node_id`, or the host name with a
    /// random suffix.
    pub fn node_id(&self) -> String {
        let configured = self.store.node_id.trim();
        if !configured.is_empty() {
            return configured.to_string();
        }
        let host = std::env::var("HOSTNAME")
            .ok()
            .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "node".into());
        let suffix = uuid::Uuid::new_v4().simple().to_string();
        format!("{host}-{}", &suffix[..8])
    }

    /// The chain's endpoints in order of preference: `rpc_urls`, or `rpc_url` alone.
    pub fn rpc_urls(&self) -> Vec<String> {
        self.chain.endpoints()
    }

    /// How the endpoint pool judges and reconnects endpoints.
    pub fn pool_config(&self) -> cresolver_chain::pool::PoolConfig {
        cresolver_chain::pool::PoolConfig {
            timeout: self.rpc_timeout(),
            max_lag_blocks: self.chain.max_endpoint_lag_blocks,
            ws_retries: self.chain.ws_reconnect_attempts,
            ws_retry_interval: self.chain.ws_retry_interval,
        }
    }

    /// The deadline of one JSON-RPC call on one endpoint.
    pub fn rpc_timeout(&self) -> std::time::Duration {
        self.chain.rpc_timeout
    }

    /// The cap of retry backoffs: `chain.max_backoff`, or the poll interval if larger.
    pub fn max_backoff(&self) -> std::time::Duration {
        self.chain.max_backoff.max(self.chain.poll_interval)
    }

    /// The JSON Schema of `node.toml`, derived from these types.
    pub fn schema() -> &'static serde_json::Value {
        static SCHEMA: std::sync::LazyLock<serde_json::Value> =
            std::sync::LazyLock::new(crate::schema::generate::<NodeConfig>);
        &SCHEMA
    }

    /// Where a key's value came from, for error messages: "`chain.chain_id` (in
    /// /etc/cresolver/node.toml)", "`chain.chain_id` (from CRESOLVER__CHAIN__CHAIN_ID)",
    /// "`chain.market_address` (from --market-address)" or "`chain.chain_id` (default)".
    /// `key` is dotted; a key a loaded file's table holds is "in" the file.
    pub fn origin_of(&self, key: &str) -> String {
        self.provenance.describe(key)
    }

    /// The market address, or an error saying how to set it.
    pub fn market(&self) -> Result<Address, ConfigError> {
        self.chain.market_address.ok_or_else(|| ConfigError::Invalid {
            key: "chain.market_address".into(),
            message: "is not set: pass --market-address, set it in the config file, or CRESOLVER__CHAIN__MARKET_ADDRESS".into(),
        })
    }
}

#[cfg(test)]
mod tests;
