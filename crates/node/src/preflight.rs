//! The node's start-up checks, one path for `Node::build` and `cresolver config check`:
//! whatever the node refuses at start, the check refuses with the same message. Each
//! step records what it checked in a [`Preflight`] (one line per item); the node logs
//! it, `config check` prints it.
//!
//! What the check does without a side effect: the SQLite data dir is only tested for
//! writing (a file created and removed at once, in the data dir or, when that does not
//! exist yet, in the nearest directory above it); a PostgreSQL store is connected to and
//! its version read, and no table is created. What the node does not wait for at start,
//! the check probes and reports as warnings: an RPC endpoint of several that does not
//! answer (the node starts without it), a workflow's LLM endpoint (rounds retry, or fall
//! back as the workflow says) and the DON's other members (peers may start later; the
//! DON tolerates `f` of them down).

use crate::{NodeError, Pipeline};
use alloy::primitives::Address;
use alloy::providers::{DynProvider, Provider as _};
use alloy::signers::local::PrivateKeySigner;
use cresolver_pipeline::config::NodeConfig;
use cresolver_pipeline::wallet::WalletError;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// One thing start-up checked, and what it found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// The item: `store`, `rpc http://…`, `market 0x…`.
    pub item: String,
    /// What was found.
    pub found: String,
    /// A finding that does not stop the node (an endpoint that does not answer).
    pub warning: bool,
}

impl std::fmt::Display for Checked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.warning {
            write!(f, "warning: {}: {}", self.item, self.found)
        } else {
            write!(f, "{}: {}", self.item, self.found)
        }
    }
}

/// What start-up checked, one line per item, in order.
#[derive(Debug, Clone, Default)]
pub struct Preflight {
    /// The items checked so far.
    pub items: Vec<Checked>,
}

impl Preflight {
    /// Records an item that passed.
    pub fn ok(&mut self, item: impl Into<String>, found: impl Into<String>) {
        self.items.push(Checked {
            item: item.into(),
            found: found.into(),
            warning: false,
        });
    }

    /// Records a finding that does not stop the node.
    pub fn warn(&mut self, item: impl Into<String>, found: impl Into<String>) {
        self.items.push(Checked {
            item: item.into(),
            found: found.into(),
            warning: true,
        });
    }

    /// How many findings are warnings.
    pub fn warnings(&self) -> usize {
        self.items.iter().filter(|c| c.warning).count()
    }

    /// Logs each item: warnings as warnings, the others at debug level.
    pub fn log(&self) {
        for c in &self.items {
            if c.warning {
                tracing::warn!(item = %c.item, "{}", c.found);
            } else {
                tracing::debug!(item = %c.item, "start-up check: {}", c.found);
            }
        }
    }
}

/// The resolver's signing key, as the node reads it at start (`cresolver node`,
/// `resolve` and `config check` all call this): an error names the key of the config it
/// came from and what to do.
pub fn signer(cfg: &NodeConfig) -> Result<PrivateKeySigner, NodeError> {
    cresolver_pipeline::wallet::signer(&cfg.signer).map_err(|error| {
        let (key, hint) = signer_key(cfg, &error);
        NodeError::Signer {
            origin: cfg.origin_of(key),
            hint,
            error: Box::new(error),
        }
    })
}

/// Which key of `[signer]` an error of `wallet::signer` is about, and what to do
/// (`: …`; empty where the error's own message says it).
fn signer_key(cfg: &NodeConfig, error: &WalletError) -> (&'static str, &'static str) {
    let keystore_key = if cfg.signer.keystore.is_none() && cfg.signer.account.is_some() {
        "signer.account"
    } else {
        "signer.keystore"
    };
    match error {
        WalletError::NoKey { .. } => ("signer.private_key_env", ""),
        WalletError::BadKey { source_name } if source_name.starts_with("env var") => (
            "signer.private_key_env",
            ": the key is 64 hex digits, with or without 0x",
        ),
        WalletError::BadKey { .. } => (
            "signer.key_file",
            ": the file's first line is the key: 64 hex digits, with or without 0x",
        ),
        WalletError::KeyFile { path, .. }
            if cfg.signer.password_file.as_ref().is_some_and(|p| p == path) =>
        {
            (
                "signer.password_file",
                ": check the path, and that the user the node runs as can read it",
            )
        }
        WalletError::KeyFile { .. } => (
            "signer.key_file",
            ": check the path, and that the user the node runs as can read it",
        ),
        WalletError::NoKeystorePassword { .. } => ("signer.password_env", ""),
        WalletError::KeystorePassword { source_name, .. }
            if source_name.starts_with("password file") =>
        {
            ("signer.password_file", "")
        }
        WalletError::KeystorePassword { .. } => ("signer.password_env", ""),
        // the keystore's own messages say what to do
        _ => (keystore_key, ""),
    }
}

/// Checks the SQLite data dir as the node will use it, without creating it: an existing
/// dir must take a new file (one is created and removed at once), and its store file,
/// if any, must open for writing; a missing dir must be creatable (the nearest existing
/// directory above it takes a new file). Returns what was found.
pub fn check_data_dir(cfg: &NodeConfig) -> Result<String, NodeError> {
    let dir = &cfg.node.data_dir;
    let refused = |problem: String| NodeError::DataDir {
        path: dir.clone(),
        origin: cfg.origin_of("node.data_dir"),
        problem,
    };
    if dir.exists() {
        if !dir.is_dir() {
            return Err(refused("is not a directory".into()));
        }
        writable(dir).map_err(|e| refused(format!("is not writable ({e})")))?;
        let db = dir.join("cresolver.sqlite3");
        if db.exists() {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&db)
                .map_err(|e| {
                    refused(format!(
                        "holds {} but it cannot be written ({e})",
                        db.display()
                    ))
                })?;
            return Ok(format!("SQLite store {} (exists, writable)", db.display()));
        }
        return Ok(format!(
            "SQLite store in {} (the dir is writable; the store is created at the node's first start)",
            dir.display()
        ));
    }
    let above = dir
        .ancestors()
        .skip(1)
        .map(|p| {
            if p.as_os_str().is_empty() {
                Path::new(".")
            } else {
                p
            }
        })
        .find(|p| p.exists())
        .unwrap_or(Path::new("."));
    if !above.is_dir() {
        return Err(refused(format!(
            "cannot be created: {} is not a directory",
            above.display()
        )));
    }
    writable(above).map_err(|e| {
        refused(format!(
            "does not exist and cannot be created: {} is not writable ({e})",
            above.display()
        ))
    })?;
    Ok(format!(
        "SQLite store in {} (does not exist yet; the node creates it at its first start)",
        dir.display()
    ))
}

/// Whether a new file can be made in `dir` (made and removed at once).
fn writable(dir: &Path) -> std::io::Result<()> {
    let probe: PathBuf = dir.join(format!(".cresolver-write-check-{}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)?;
    std::fs::remove_file(&probe)
}

/// The PostgreSQL settings of a node config.
pub(crate) fn pg_config(cfg: &NodeConfig) -> cresolver_store::PgConfig {
    cresolver_store::PgConfig {
        node_id: cfg.node_id(),
        lease: cfg.store.lease,
        max_connections: cfg.store.max_connections,
        ca_file: cfg.store.ca_file.clone(),
    }
}

/// Checks the store without creating anything (see [`check_data_dir`]; PostgreSQL: the
/// connection, the user and the server's version, no table created).
pub async fn check_store(cfg: &NodeConfig, seen: &mut Preflight) -> Result<(), NodeError> {
    if cfg.store.is_postgres() {
        let mut settings = pg_config(cfg);
        settings.max_connections = 1;
        let (version, tables) =
            cresolver_store::PgStore::probe(cfg.store.url.trim(), settings).await?;
        seen.ok(
            "store",
            format!(
                "PostgreSQL {} (server version {version}; {})",
                cresolver_store::pg::redact_url(&cfg.store.url),
                if tables {
                    "holds the node's tables"
                } else {
                    "empty: the node creates its tables at its first start"
                }
            ),
        );
    } else {
        seen.ok("store", check_data_dir(cfg)?);
    }
    Ok(())
}

/// Connects to every configured endpoint and reads the chain id: none answering, or
/// two serving different chains, or a chain other than `chain.chain_id`, is refused;
/// an endpoint of several that does not answer is a warning (the node starts without
/// it and takes it into service once it answers).
pub(crate) async fn connect(
    cfg: &NodeConfig,
    seen: &mut Preflight,
) -> Result<(Arc<cresolver_chain::pool::RpcPool>, DynProvider, u64), NodeError> {
    let (pool, provider, chain_id) =
        cresolver_chain::connect_pool_checked(&cfg.rpc_urls(), cfg.pool_config()).await?;
    for v in pool.views() {
        match v.head {
            Some(head) if v.reason.is_none() => seen.ok(
                format!("rpc {}", v.name),
                format!("chain {chain_id}, head block {head}"),
            ),
            _ => seen.warn(
                format!("rpc {}", v.name),
                format!(
                    "does not answer ({}): the node starts without it, and uses it once it answers",
                    v.reason.as_deref().unwrap_or("no head")
                ),
            ),
        }
    }
    if let Some(expected) = cfg.chain.chain_id {
        if expected != chain_id {
            return Err(NodeError::ChainId {
                expected,
                actual: chain_id,
                origin: cfg.origin_of("chain.chain_id"),
            });
        }
        seen.ok("chain id", format!("{chain_id}, as chain.chain_id says"));
    }
    Ok((pool, provider, chain_id))
}

/// Where a pipeline's market address came from, for error messages.
fn market_origin(cfg: &NodeConfig, p: &Pipeline) -> String {
    if p.workflow.trigger.address.is_some() {
        format!("[trigger].address of workflow {:?}", p.workflow.name)
    } else {
        cfg.origin_of("chain.market_address")
    }
}

/// Checks that each workflow's market address holds a CREsolver market on this chain:
/// code at the address, and an answer to `marketCount()` (which only the market serves).
pub(crate) async fn check_markets(
    cfg: &NodeConfig,
    provider: &DynProvider,
    chain_id: u64,
    pipelines: &[Pipeline],
    seen: &mut Preflight,
) -> Result<(), NodeError> {
    for p in pipelines {
        let read = |error: String| NodeError::MarketRead {
            address: p.market,
            error: cresolver_chain::redact_error(&error),
        };
        let code = provider
            .get_code_at(p.market)
            .await
            .map_err(|e| read(e.to_string()))?;
        if code.is_empty() {
            return Err(NodeError::NoMarket {
                address: p.market,
                chain_id,
                origin: market_origin(cfg, p),
            });
        }
        let market = cresolver_chain::bindings::ICREsolverMarket::new(p.market, provider.clone());
        let count = match market.marketCount().call().await {
            Ok(n) => n,
            Err(alloy::contract::Error::TransportError(e)) if e.as_error_resp().is_none() => {
                return Err(read(e.to_string()));
            }
            Err(e) => {
                return Err(NodeError::NotMarket {
                    address: p.market,
                    origin: market_origin(cfg, p),
                    error: cresolver_chain::redact_error(&e.to_string()),
                });
            }
        };
        seen.ok(
            format!("market {}", p.market),
            format!(
                "a CREsolver market with {count} markets (workflow {})",
                p.workflow.name
            ),
        );
    }
    Ok(())
}

/// Records each workflow the node runs, with its market and submission mode.
pub(crate) fn note_workflows(cfg: &NodeConfig, pipelines: &[Pipeline], seen: &mut Preflight) {
    for (p, path) in pipelines.iter().zip(&cfg.node.workflows) {
        seen.ok(
            format!("workflow {}", p.workflow.name),
            format!(
                "{} ({:?} submission, market {})",
                path.display(),
                p.submitter.mode(),
                p.market
            ),
        );
    }
}

/// What the node does not wait for at start, probed for `config check` and reported as
/// warnings when it does not answer: each workflow's LLM endpoint (an HTTP answer of any
/// status counts) and the DON's other members (a TCP connection to their endpoint).
pub(crate) async fn probe_peers(
    cfg: &NodeConfig,
    pipelines: &[Pipeline],
    me: Option<Address>,
    seen: &mut Preflight,
) {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap_or_default();
    let mut llms: Vec<&str> = Vec::new();
    for p in pipelines {
        let ev = &p.workflow.evaluator;
        if ev.kind == cresolver_pipeline::workflow::EvaluatorKind::Llm
            && let Some(llm) = &ev.llm
            && !llms.contains(&llm.base_url.as_str())
        {
            llms.push(&llm.base_url);
        }
    }
    for base in llms {
        let shown = cresolver_chain::redact_url(base);
        match http.get(base).send().await {
            Ok(r) => seen.ok(
                format!("llm {shown}"),
                format!("answers (HTTP {})", r.status().as_u16()),
            ),
            Err(e) => seen.warn(
                format!("llm {shown}"),
                format!(
                    "does not answer ({}): rounds that need it wait for it; check [evaluator.llm] base_url",
                    cresolver_chain::redact_error(&e.to_string())
                ),
            ),
        }
    }
    let Some(don) = &cfg.don else { return };
    for m in don.members.iter().filter(|m| Some(m.address) != me) {
        let host = m.url.host_str().unwrap_or_default().to_string();
        let port = m.url.port_or_known_default().unwrap_or(80);
        let item = format!("don member {}", m.address);
        let tcp = tokio::time::timeout(
            Duration::from_secs(3),
            tokio::net::TcpStream::connect((host.as_str(), port)),
        )
        .await;
        match tcp {
            Ok(Ok(_)) => seen.ok(item, format!("{} answers", m.url)),
            Ok(Err(e)) => seen.warn(
                item,
                format!(
                    "{} does not answer ({e}): a peer may be down; the node starts without it",
                    m.url
                ),
            ),
            Err(_) => seen.warn(
                item,
                format!(
                    "{} does not answer within 3 s: a peer may be down; the node starts without it",
                    m.url
                ),
            ),
        }
    }
}
