//! The command line: one module per command family, with its arguments, its work and
//! its rendering; this module holds what they share (config flags, connecting, the store,
//! progress bars, the shutdown signal). `main.rs` parses and dispatches.

#[cfg(feature = "devnet")]
pub mod devnet;
pub mod dry_run;
pub mod market;
pub mod node;
pub mod replay_cmd;
pub mod rounds;
pub mod tally;

use alloy::primitives::{Address, U256};
use alloy::providers::{DynProvider, Provider as _};
use anyhow::Context as _;
use clap::{Args, Subcommand};
use cresolver_pipeline::config::{NodeConfig, Overrides};
use cresolver_pipeline::dryrun::DryRunner;
use cresolver_pipeline::live::LiveContext;
use cresolver_pipeline::replay::{self, MarketReplay, ReplayOptions, ReplaySummary};
use cresolver_pipeline::round::Engine;
use cresolver_pipeline::transcript::Transcript;
use cresolver_pipeline::workflow::Workflow;
use cresolver_store::RoundStore;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// Where the node configuration comes from (file < env CRESOLVER__SECTION__KEY < flags).
#[derive(Debug, Args, Clone)]
pub struct ConfigArgs {
    #[command(flatten)]
    pub base: BaseConfigArgs,
    /// Workflow files (repeatable); default workflows/cresolver-resolution.toml.
    #[arg(long = "workflow", short = 'w')]
    pub workflows: Vec<PathBuf>,
}

/// The configuration of a command that signs (`node`, `resolve`, `config check`): the
/// node configuration and the signing account.
#[derive(Debug, Args, Clone)]
pub struct SigningConfigArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Sign with a foundry keystore account: ~/.foundry/keystores/NAME (as `cast wallet
    /// import NAME` made it); the password comes from CRESOLVER_KEYSTORE_PASSWORD or
    /// signer.password_file.
    #[arg(long, value_name = "NAME")]
    pub account: Option<String>,
}

impl SigningConfigArgs {
    /// The node configuration these flags select, with their workflow files and account.
    pub fn load(&self) -> anyhow::Result<NodeConfig> {
        self.config
            .base
            .load_full(self.config.workflows.clone(), self.account.clone())
    }

    /// The config file named on the command line, if any.
    pub fn file(&self) -> Option<&Path> {
        self.config.base.config.as_deref()
    }
}

/// The node configuration flags other than the workflows and the signing account.
#[derive(Debug, Args, Clone)]
pub struct BaseConfigArgs {
    /// Node config file (TOML). Every key can also be set as CRESOLVER__SECTION__KEY.
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// RPC URL: http(s):// (polling) or ws(s):// (subscription).
    #[arg(long)]
    pub rpc_url: Option<String>,
    /// The market contract.
    #[arg(long)]
    pub market_address: Option<Address>,
    /// Where the round store lives.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
}

impl BaseConfigArgs {
    /// The node configuration these flags select, with `workflows` as the workflow files
    /// and `account` as the signing account.
    fn load_full(
        &self,
        workflows: Vec<PathBuf>,
        account: Option<String>,
    ) -> anyhow::Result<NodeConfig> {
        let o = Overrides {
            rpc_url: self.rpc_url.clone(),
            market_address: self.market_address,
            data_dir: self.data_dir.clone(),
            workflows,
            account,
        };
        Ok(NodeConfig::load(self.config.as_deref(), &o)?)
    }

    /// The node configuration these flags select, with `workflows` as the workflow files.
    pub fn load_with(&self, workflows: Vec<PathBuf>) -> anyhow::Result<NodeConfig> {
        self.load_full(workflows, None)
    }

    /// The node configuration these flags select, without workflow files of their own.
    pub fn load(&self) -> anyhow::Result<NodeConfig> {
        self.load_with(vec![])
    }

    /// `error` with a hint when no config file was named (the command then runs on the
    /// defaults, the env vars and the flags alone, which is rarely what was meant).
    pub fn explain(&self, error: anyhow::Error) -> anyhow::Error {
        if self.config.is_some() {
            return error;
        }
        error.context(
            "no config: pass --config FILE (the node's node.toml), or set what the command needs with flags (--rpc-url, --market-address, --data-dir) or CRESOLVER__SECTION__KEY env vars",
        )
    }
}

impl ConfigArgs {
    /// The node configuration these flags select, with their workflow files.
    pub fn load(&self) -> anyhow::Result<NodeConfig> {
        self.base.load_with(self.workflows.clone())
    }
}

/// Every Ctrl-C or SIGTERM, as it comes: the first asks for an orderly shutdown, a
/// second one for an immediate stop (see `cresolver node`).
pub fn shutdown_signals() -> tokio::sync::mpsc::UnboundedReceiver<()> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            if let (Ok(mut term), Ok(mut int)) = (
                signal(SignalKind::terminate()),
                signal(SignalKind::interrupt()),
            ) {
                loop {
                    let got = tokio::select! {
                        s = term.recv() => s.is_some(),
                        s = int.recv() => s.is_some(),
                    };
                    if !got || tx.send(()).is_err() {
                        return;
                    }
                }
            }
        }
        while tokio::signal::ctrl_c().await.is_ok() {
            if tx.send(()).is_err() {
                return;
            }
        }
    });
    rx
}

/// Completes on Ctrl-C or, on Unix, SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
    tracing::info!("shutdown requested");
}

/// A progress bar of `len` steps labelled `what` on stderr; hidden when stderr is not a
/// terminal.
pub fn progress(len: u64, what: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(len);
    if let Ok(style) =
        ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} ({elapsed}, eta {eta})")
    {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_message(what.to_string());
    pb
}

/// The node's store, as the node opens it: the shared PostgreSQL database of
/// `store.url` (its password never shown), or the SQLite file in the data dir, which
/// must exist already (a command that reads rounds does not create an empty store).
pub async fn open_store(cfg: &NodeConfig) -> anyhow::Result<std::sync::Arc<dyn RoundStore>> {
    if !cfg.store.is_postgres() {
        let db = cfg.node.data_dir.join("cresolver.sqlite3");
        anyhow::ensure!(
            db.is_file(),
            "no round store at {} (point --data-dir or node.data_dir at the node's data dir, or store.url at the cluster's database)",
            db.display()
        );
    }
    Ok(cresolver_node::open_store(cfg).await?)
}

/// Every round of the store (newest first), page by page.
pub async fn all_rounds(
    store: &dyn RoundStore,
) -> anyhow::Result<Vec<cresolver_store::RoundRecord>> {
    let mut out = Vec::new();
    let mut cursor = None;
    loop {
        let (page, next) = store.list_summaries(500, cursor).await?;
        for sum in page {
            if let Some(rec) = store.get(sum.key()).await? {
                out.push(rec);
            }
        }
        match next {
            Some(n) => cursor = Some(n),
            None => return Ok(out),
        }
    }
}

/// Connects to the configured endpoints (`chain.rpc_urls`, or `chain.rpc_url`) and reads
/// the chain id.
pub async fn connect(cfg: &NodeConfig) -> anyhow::Result<(alloy::providers::DynProvider, u64)> {
    let (_pool, provider, chain_id) =
        cresolver_chain::connect_pool_checked(&cfg.rpc_urls(), cfg.pool_config()).await?;
    Ok((provider, chain_id))
}

/// The configured endpoints as they may be printed (no keys, no paths).
pub fn endpoints(cfg: &NodeConfig) -> String {
    cfg.rpc_urls()
        .iter()
        .map(|u| cresolver_chain::redact_url(u))
        .collect::<Vec<_>>()
        .join(", ")
}
