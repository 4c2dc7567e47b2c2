//! Node configuration: a TOML file, every key overridable by environment variables
//! (`CRESOLVER__SECTION__KEY`), the common ones by command-line flags. Secrets (the
//! signing key, the API token) are only ever named here, never stored: they are read from
//! the environment or a key file and never logged.

use alloy::primitives::Address;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

mod load;
mod protocols;

pub use load::{ENV_PREFIX, Origin, Provenance};

/// Blocks the watcher rescans when the block hash at its checkpoint changed.
pub const REORG_WINDOW: u64 = 64;

/// A node's configuration (`node.toml`): one table per section.
#[derive(Debug, Clone, Serialize, Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct NodeConfig {
    /// `[chain]`: the endpoints, the market and how the chain is watched.
    pub chain: ChainSection,
    /// `[node]`: the data directory, the workflows and the round limit.
    pub node: NodeSection,
    /// `[signer]`: where the resolver's signing key comes from.
    pub signer: SignerSection,
    /// `[submit]`: where and how resolutions are sent.
    pub submit: SubmitTargets,
    /// `[discovery]`: how workers' registration files are fetched.
    pub discovery: DiscoverySection,
    /// `[api]`: the HTTP API.
    pub api: ApiSection,
    /// `[protocols]`: the agent protocols spoken besides A2A.
    pub protocols: ProtocolsSection,
    /// `[store]`: where the rounds are kept.
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

/// Where the node keeps its rounds. Empty `url`: the embedded SQLite file in
/// `node.data_dir` (one node). A `postgres://` URL: a database that any number of nodes
/// share; they split the rounds between them with leases (see `store::pg`). The URL's
/// password is never shown; it can also come from `CRESOLVER__STORE__URL`.
#[derive(Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct StoreSection {
    /// Empty: the embedded SQLite file in `node.data_dir`; `postgres://user:password@host/db`
    /// (with `?sslmode=verify-full` for TLS): a database shared by a cluster.
    pub url: String,
    /// This node's name in the cluster (lease holder). Empty: the host name and a random
    /// suffix, new at every start. A fixed name lets a restarted node take back its own
    /// rounds at once instead of after their leases expire; two running nodes must never
    /// share one.
    pub node_id: String,
    /// How long a node's claim on a round lasts without a renewal (renewed every third).
    pub lease_secs: u64,
    /// Connections to PostgreSQL per node.
    pub max_connections: usize,
    /// With `?sslmode=require` (or `verify-full`) in the URL, a PEM file of the CA that
    /// signed the server's certificate, trusted besides the system's roots. The
    /// certificate and the host name are always verified when TLS is used.
    #[schemars(extend("x-path" = true))]
    pub ca_file: Option<PathBuf>,
}

impl Default for StoreSection {
    fn default() -> Self {
        Self {
            url: String::new(),
            node_id: String::new(),
            lease_secs: 15,
            max_connections: 16,
            ca_file: None,
        }
    }
}

impl std::fmt::Debug for StoreSection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreSection")
            .field("url", &cresolver_store::pg::redact_url(&self.url))
            .field("node_id", &self.node_id)
            .field("lease_secs", &self.lease_secs)
            .field("max_connections", &self.max_connections)
            .field("ca_file", &self.ca_file)
            .finish()
    }
}

impl StoreSection {
    /// Whether the store is a shared PostgreSQL database.
    pub fn is_postgres(&self) -> bool {
        let u = self.url.trim();
        u.starts_with("postgres://") || u.starts_with("postgresql://")
    }
}

pub use protocols::{
    AgoraSection, ChorusSection, FactagoraSection, ProtocolsSection, RoundtableSection,
};

/// The chain: its endpoints, the market contract, and how the watcher scans, waits for
/// confirmations and judges the endpoints' health.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
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
    /// Pause between those reconnection attempts, in ms.
    pub ws_retry_interval_ms: u64,
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
    /// How often the watcher polls for new logs and the endpoints are probed, in ms.
    pub poll_interval_ms: u64,
    /// Largest eth_getLogs range; halved on "range too large" errors.
    pub max_block_range: u64,
    /// Deadline of one JSON-RPC call (its transport retries included), in ms.
    pub rpc_timeout_ms: u64,
    /// Longest wait between retries of the watcher and of rounds after a transient
    /// error, in ms (the poll interval when that is larger).
    pub max_backoff_ms: u64,
    /// `/health/ready` fails when the newest head is older than this many seconds
    /// (default: 60, none on a dev chain, which mines only on demand).
    pub max_head_age_secs: Option<u64>,
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
            ws_retry_interval_ms: 3_000,
            chain_id: None,
            market_address: None,
            multicall_address: None,
            confirmations: None,
            start_block: None,
            finality_depth: None,
            poll_interval_ms: 2_000,
            max_block_range: 5_000,
            rpc_timeout_ms: 10_000,
            max_backoff_ms: 5_000,
            max_head_age_secs: None,
            max_lag_blocks: 50,
        }
    }
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

/// The node itself: where it keeps its data, which workflows it runs, how many rounds
/// at once.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct NodeSection {
    /// Where the node keeps its SQLite store (and a DON member its `don.sqlite`).
    #[schemars(extend("x-path" = true))]
    pub data_dir: PathBuf,
    /// Workflow files to run (the first one drives rounds of the configured market).
    #[schemars(extend("x-path" = true))]
    pub workflows: Vec<PathBuf>,
    /// Rounds running at once, across markets.
    pub max_concurrent_rounds: usize,
}

impl Default for NodeSection {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("./cresolver-data"),
            workflows: vec![PathBuf::from("workflows/cresolver-resolution.toml")],
            max_concurrent_rounds: 8,
        }
    }
}

/// Where the resolver's signing key comes from: a hex key (env var or file) or an
/// encrypted keystore with its password (env var or file). Only names are written here.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct SignerSection {
    /// Env var holding the hex private key.
    pub private_key_env: String,
    /// Or a file holding it (first line, hex).
    #[schemars(extend("x-path" = true))]
    pub key_file: Option<PathBuf>,
    /// Or an encrypted JSON keystore (the format `cast wallet import` writes). When set
    /// (or `account`), it is the key, whatever the env var holds.
    #[schemars(extend("x-path" = true))]
    pub keystore: Option<PathBuf>,
    /// Or a foundry account name: `~/.foundry/keystores/<account>` (`--account`).
    pub account: Option<String>,
    /// Env var holding the keystore's password.
    pub password_env: String,
    /// Or a file holding it (first line).
    #[schemars(extend("x-path" = true))]
    pub password_file: Option<PathBuf>,
}

impl Default for SignerSection {
    fn default() -> Self {
        Self {
            private_key_env: "CRESOLVER_PRIVATE_KEY".into(),
            key_file: None,
            keystore: None,
            account: None,
            password_env: "CRESOLVER_KEYSTORE_PASSWORD".into(),
            password_file: None,
        }
    }
}

impl SignerSection {
    /// The keystore file to use, if one is configured: `keystore`, or foundry's
    /// `~/.foundry/keystores/<account>`.
    pub fn keystore_path(&self) -> Option<PathBuf> {
        if let Some(p) = &self.keystore {
            return Some(p.clone());
        }
        let name = self.account.as_deref()?.trim();
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_default();
        Some(home.join(".foundry").join("keystores").join(name))
    }
}

/// Where resolutions go (the forwarder and receiver of `report` mode) and how the
/// transaction manager prices, replaces and follows their transactions.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct SubmitTargets {
    /// Forwarder for `report` mode.
    #[schemars(with = "Option<cresolver_core::schema::HexAddress>")]
    pub forwarder: Option<Address>,
    /// Receiver for `report` mode.
    #[schemars(with = "Option<cresolver_core::schema::HexAddress>")]
    pub receiver: Option<Address>,
    /// Added to the gas estimate, in percent.
    pub gas_margin_percent: u64,
    /// Ignored since the transaction manager follows every attempt until it is mined;
    /// kept so that older configs still load.
    pub max_send_attempts: u32,
    /// How long a round follows its transaction before it yields and is retried later
    /// (the nonce stays reserved and is followed again).
    pub receipt_timeout_ms: u64,
    /// Replace a transaction that is not mined after this many blocks.
    pub bump_after_blocks: u64,
    /// Raise both EIP-1559 fees by at least this much for a replacement (geth needs 10).
    pub fee_bump_percent: u64,
    /// Never sign a max fee per gas above this, in gwei.
    pub max_fee_per_gas_gwei: f64,
}

impl Default for SubmitTargets {
    fn default() -> Self {
        Self {
            forwarder: None,
            receiver: None,
            gas_margin_percent: 25,
            max_send_attempts: 3,
            receipt_timeout_ms: 120_000,
            bump_after_blocks: 3,
            fee_bump_percent: 20,
            max_fee_per_gas_gwei: 500.0,
        }
    }
}

/// How workers are discovered: which endpoints are allowed and how registration files
/// are fetched.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct DiscoverySection {
    /// Allow worker endpoints on loopback/private/link-local addresses (demo and tests only).
    pub allow_private_endpoints: bool,
    /// The gateway `ipfs://` token URIs are fetched through.
    pub ipfs_gateway: String,
    /// How long fetching one registration file may take, in ms.
    pub fetch_timeout_ms: u64,
    /// The largest registration file read.
    pub max_metadata_bytes: usize,
}

impl Default for DiscoverySection {
    fn default() -> Self {
        Self {
            allow_private_endpoints: false,
            ipfs_gateway: "https://ipfs.io/ipfs/".into(),
            fetch_timeout_ms: 5_000,
            max_metadata_bytes: 64 * 1024,
        }
    }
}

/// The node's HTTP API: its listen address and the token of its trigger.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ApiSection {
    /// Listen address of the HTTP API; empty disables it.
    pub listen: String,
    /// Env var holding the bearer token of `POST /resolve` (unset: the trigger is disabled).
    pub token_env: String,
}

impl Default for ApiSection {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:9464".into(),
            token_env: "CRESOLVER_API_TOKEN".into(),
        }
    }
}

/// A configuration that cannot be loaded or used, or a signing key that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The layers could not be turned into a configuration (the message names the key).
    #[error("config: {0}")]
    Load(String),
    /// The configuration file does not exist.
    #[error("config file {path} not found")]
    NotFound {
        /// The file named.
        path: PathBuf,
    },
    /// The configuration file cannot be read.
    #[error("cannot read config file {path}: {error}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The operating system's refusal.
        error: std::io::Error,
    },
    /// The configuration file is not TOML.
    #[error("config file {path} is not valid TOML: {message}")]
    Toml {
        /// The file.
        path: PathBuf,
        /// The parser's message (line, column and the text around it).
        message: String,
    },
    /// A key's value is refused: `at` names the key and where it came from.
    #[error("config: {at} {message}")]
    Value {
        /// The key and where its value came from: "`chain.chain_id` (in node.toml)".
        at: String,
        /// What is wrong and what a valid value looks like.
        message: String,
    },
    /// An environment variable names no key.
    #[error(
        "config: the environment variable {var} names no key of node.toml (`{key}`){hint} (the keys there: {known})"
    )]
    UnknownEnv {
        /// The variable.
        var: String,
        /// The key it would set.
        key: String,
        /// ": did you mean `chain`?", or empty.
        hint: String,
        /// The keys of the table it reaches.
        known: String,
    },
    /// A key holds a value the node cannot use.
    #[error("config: `{key}` {message}")]
    Invalid {
        /// The dotted key (`chain.rpc_url`).
        key: &'static str,
        /// What is wrong with its value.
        message: String,
    },
    /// No signing key is configured.
    #[error(
        "no signing key: set the env var {env} to the resolver's hex private key, or set signer.key_file (dry-run and replay need no key)"
    )]
    NoKey {
        /// The env var the key is read from.
        env: String,
    },
    /// The signing key is not a hex private key.
    #[error("signing key from {source_name} is not a valid hex private key")]
    BadKey {
        /// Where the key came from (`env var …`, `key file …`).
        source_name: String,
    },
    /// A key or password file could not be read.
    #[error("cannot read key file {path}: {error}")]
    KeyFile {
        /// The file.
        path: String,
        /// The I/O error.
        error: String,
    },
    /// The configured keystore file does not exist.
    #[error(
        "keystore {path} not found: import the key with `cast wallet import <name> --interactive` (then --account <name>), or point signer.keystore at the file"
    )]
    KeystoreMissing {
        /// The keystore file.
        path: String,
    },
    /// The keystore's password is configured nowhere.
    #[error("keystore {path} needs its password: set the env var {env}, or signer.password_file")]
    NoKeystorePassword {
        /// The keystore file.
        path: String,
        /// The env var the password is read from.
        env: String,
    },
    /// The password does not decrypt the keystore.
    #[error(
        "wrong password for keystore {path} (password from {source_name}): check it, or re-import the key with `cast wallet import`"
    )]
    KeystorePassword {
        /// The keystore file.
        path: String,
        /// Where the password came from (`env var …`, `password file …`).
        source_name: String,
    },
    /// The keystore file is not an encrypted JSON keystore.
    #[error(
        "keystore {path} is not a readable encrypted JSON keystore ({error}): import the key again with `cast wallet import`"
    )]
    KeystoreInvalid {
        /// The keystore file.
        path: String,
        /// Why it could not be read.
        error: String,
    },
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
                at: cfg.origin_of(key),
                message,
            },
            other => other,
        })?;
        Ok(cfg)
    }

    /// Checks the values serde cannot: endpoint URLs and schemes, non-zero intervals
    /// and limits, fee bounds, the store URL, the lease and the IPFS gateway.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let key = if self.chain.rpc_urls.is_empty() {
            "chain.rpc_url"
        } else {
            "chain.rpc_urls"
        };
        for (i, u) in self.rpc_urls().iter().enumerate() {
            let url = url::Url::parse(u).map_err(|e| ConfigError::Invalid {
                key,
                message: format!("entry {} is not a URL: {e}", i + 1),
            })?;
            if !matches!(url.scheme(), "http" | "https" | "ws" | "wss") {
                return Err(ConfigError::Invalid {
                    key,
                    message: format!("entry {} must be http(s):// or ws(s)://", i + 1),
                });
            }
        }
        if self.chain.max_block_range == 0 {
            return Err(ConfigError::Invalid {
                key: "chain.max_block_range",
                message: "must be at least 1".into(),
            });
        }
        if self.chain.poll_interval_ms == 0 {
            return Err(ConfigError::Invalid {
                key: "chain.poll_interval_ms",
                message: "must be at least 1".into(),
            });
        }
        if self.chain.rpc_timeout_ms == 0 {
            return Err(ConfigError::Invalid {
                key: "chain.rpc_timeout_ms",
                message: "must be at least 1".into(),
            });
        }
        if self.node.max_concurrent_rounds == 0 {
            return Err(ConfigError::Invalid {
                key: "node.max_concurrent_rounds",
                message: "must be at least 1".into(),
            });
        }
        if self.node.workflows.is_empty() {
            return Err(ConfigError::Invalid {
                key: "node.workflows",
                message: "must list at least one workflow file".into(),
            });
        }
        if !(self.submit.max_fee_per_gas_gwei.is_finite() && self.submit.max_fee_per_gas_gwei > 0.0)
        {
            return Err(ConfigError::Invalid {
                key: "submit.max_fee_per_gas_gwei",
                message: "must be a positive number of gwei".into(),
            });
        }
        if self.submit.fee_bump_percent < 10 {
            return Err(ConfigError::Invalid {
                key: "submit.fee_bump_percent",
                message: "must be at least 10 (nodes refuse smaller replacements)".into(),
            });
        }
        if !self.store.url.trim().is_empty() && !self.store.is_postgres() {
            return Err(ConfigError::Invalid {
                key: "store.url",
                message: "must be a postgres:// URL, or empty for the embedded SQLite store".into(),
            });
        }
        if self.store.lease_secs < 2 {
            return Err(ConfigError::Invalid {
                key: "store.lease_secs",
                message: "must be at least 2".into(),
            });
        }
        if url::Url::parse(&self.discovery.ipfs_gateway).is_err() {
            return Err(ConfigError::Invalid {
                key: "discovery.ipfs_gateway",
                message: "is not a URL".into(),
            });
        }
        Ok(())
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
            poll_interval: std::time::Duration::from_millis(self.chain.poll_interval_ms),
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
        if self.chain.rpc_urls.is_empty() {
            vec![self.chain.rpc_url.clone()]
        } else {
            self.chain.rpc_urls.clone()
        }
    }

    /// How the endpoint pool judges and reconnects endpoints.
    pub fn pool_config(&self) -> cresolver_chain::pool::PoolConfig {
        cresolver_chain::pool::PoolConfig {
            timeout: self.rpc_timeout(),
            max_lag_blocks: self.chain.max_endpoint_lag_blocks,
            ws_retries: self.chain.ws_reconnect_attempts,
            ws_retry_interval: std::time::Duration::from_millis(self.chain.ws_retry_interval_ms),
        }
    }

    /// The deadline of one JSON-RPC call on one endpoint.
    pub fn rpc_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.chain.rpc_timeout_ms)
    }

    /// The cap of retry backoffs: `chain.max_backoff_ms`, or the poll interval if larger.
    pub fn max_backoff(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.chain.max_backoff_ms.max(self.chain.poll_interval_ms))
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
        self.chain.market_address.ok_or(ConfigError::Invalid {
            key: "chain.market_address",
            message: "is not set: pass --market-address, set it in the config file, or CRESOLVER__CHAIN__MARKET_ADDRESS".into(),
        })
    }

    /// Reads the signing key: a configured keystore (`signer.keystore`, `--account`),
    /// else the env var, else the key file. The key never leaves the signer.
    pub fn signer(&self) -> Result<alloy::signers::local::PrivateKeySigner, ConfigError> {
        if let Some(path) = self.signer.keystore_path() {
            return self.keystore_signer(&path);
        }
        let (text, source_name) = match std::env::var(&self.signer.private_key_env) {
            Ok(v) if !v.trim().is_empty() => {
                (v, format!("env var {}", self.signer.private_key_env))
            }
            _ => match &self.signer.key_file {
                Some(p) => (
                    std::fs::read_to_string(p).map_err(|e| ConfigError::KeyFile {
                        path: p.display().to_string(),
                        error: e.to_string(),
                    })?,
                    format!("key file {}", p.display()),
                ),
                None => {
                    return Err(ConfigError::NoKey {
                        env: self.signer.private_key_env.clone(),
                    });
                }
            },
        };
        let line = text.lines().next().unwrap_or("").trim().to_string();
        line.parse()
            .map_err(|_| ConfigError::BadKey { source_name })
    }
}

impl NodeConfig {
    /// Decrypts the keystore at `path` with the password from `signer.password_env` or
    /// `signer.password_file`.
    fn keystore_signer(
        &self,
        path: &Path,
    ) -> Result<alloy::signers::local::PrivateKeySigner, ConfigError> {
        use secrecy::{ExposeSecret, SecretString};
        let shown = path.display().to_string();
        if !path.is_file() {
            return Err(ConfigError::KeystoreMissing { path: shown });
        }
        let env = &self.signer.password_env;
        let (password, source_name): (SecretString, String) = match std::env::var(env) {
            Ok(v) if !v.is_empty() => (v.into(), format!("env var {env}")),
            _ => match &self.signer.password_file {
                Some(f) => {
                    let text = std::fs::read_to_string(f).map_err(|e| ConfigError::KeyFile {
                        path: f.display().to_string(),
                        error: e.to_string(),
                    })?;
                    let line = text.lines().next().unwrap_or("").to_string();
                    (line.into(), format!("password file {}", f.display()))
                }
                None => {
                    return Err(ConfigError::NoKeystorePassword {
                        path: shown,
                        env: env.clone(),
                    });
                }
            },
        };
        alloy::signers::local::PrivateKeySigner::decrypt_keystore(
            path,
            password.expose_secret().as_bytes(),
        )
        .map_err(|e| {
            let text = e.to_string();
            if text.to_lowercase().contains("mac mismatch") {
                ConfigError::KeystorePassword {
                    path: shown.clone(),
                    source_name,
                }
            } else {
                ConfigError::KeystoreInvalid {
                    path: shown.clone(),
                    error: text,
                }
            }
        })
    }
}

#[cfg(test)]
mod tests;
