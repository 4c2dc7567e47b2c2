//! Running a real node in-process against the anvil harness: config, start/stop, and
//! waiting for a round's final state.

use super::chain::MarketSetup;
use alloy::primitives::{Address, U256};
use alloy::providers::Provider;
use alloy::rpc::types::Filter;
use alloy::sol_types::SolEvent;
use cresolver_chain::bindings::ICREsolverMarket;
use cresolver_node::{Node, RoundReport};
use cresolver_pipeline::config::NodeConfig;
use cresolver_store::RoundKey;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A temporary directory that is removed when the test ends (pass or fail); derefs to
/// its path.
pub struct TmpDir(tempfile::TempDir);

impl std::ops::Deref for TmpDir {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        self.0.path()
    }
}

impl AsRef<std::path::Path> for TmpDir {
    fn as_ref(&self) -> &std::path::Path {
        self.0.path()
    }
}

/// A fresh temporary directory (kept after the test when `CRESOLVER_TEST_KEEP` is set,
/// for a reader who wants its logs and files).
pub fn tmpdir(tag: &str) -> TmpDir {
    let prefix = format!("cresolver-e2e-{tag}-");
    let mut b = tempfile::Builder::new();
    b.prefix(&prefix);
    if std::env::var_os("CRESOLVER_TEST_KEEP").is_some() {
        b.disable_cleanup(true);
    }
    TmpDir(b.tempdir().unwrap())
}

/// Writes the default workflow with `edit` applied to its text.
pub fn workflow_file(dir: &std::path::Path, edit: impl Fn(String) -> String) -> PathBuf {
    let p = dir.join("wf.toml");
    std::fs::write(
        &p,
        edit(cresolver_devnet::demo::DEFAULT_WORKFLOW.to_string()),
    )
    .unwrap();
    p
}

pub fn node_config(s: &MarketSetup, dir: &std::path::Path, wf: PathBuf) -> NodeConfig {
    let mut cfg = NodeConfig::default();
    cfg.chain.rpc_url = s.dev.rpc_url();
    cfg.chain.market_address = Some(s.dev.contracts.market);
    cfg.chain.multicall_address = Some(s.dev.contracts.multicall);
    cfg.chain.poll_interval = std::time::Duration::from_millis(100);
    cfg.node.data_dir = dir.join("data");
    cfg.node.workflows = vec![wf];
    cfg.discovery.allow_private_endpoints = true;
    cfg.api.listen = String::new();
    cfg
}

pub struct Running {
    pub node: Arc<Node>,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), cresolver_node::NodeError>>,
}

pub async fn start(cfg: NodeConfig, signer: alloy::signers::local::PrivateKeySigner) -> Running {
    let node = Node::build(cfg, Some(signer)).await.unwrap();
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(node.clone().run(
        async move {
            let _ = rx.await;
        },
        Duration::from_secs(5),
    ));
    Running { node, stop, task }
}

impl Running {
    pub async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

pub async fn wait_final(node: &Node, market: Address, id: U256) -> RoundReport {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = node.report(RoundKey::new(market, id)).await.unwrap();
        if r.state.is_final() && r.reason.as_deref() != Some("no such round") {
            return r;
        }
        assert!(Instant::now() < deadline, "round did not finish: {r:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub async fn resolved_events(s: &MarketSetup) -> Vec<ICREsolverMarket::MarketResolved> {
    let f = Filter::new()
        .address(s.dev.contracts.market)
        .event_signature(ICREsolverMarket::MarketResolved::SIGNATURE_HASH)
        .from_block(0u64);
    s.dev
        .provider
        .get_logs(&f)
        .await
        .unwrap()
        .iter()
        .map(|l| {
            ICREsolverMarket::MarketResolved::decode_log(&l.inner)
                .unwrap()
                .data
        })
        .collect()
}

/// The account's mined transaction count.
pub async fn nonce(s: &MarketSetup, who: Address) -> u64 {
    s.dev
        .provider
        .get_transaction_count(who)
        .latest()
        .await
        .unwrap()
}

/// The node binary as a child process (killed on drop), signing with dev account 0.
/// `crash_at` sets the `CRESOLVER_TEST_CRASH_AT` hook (the process exits with 97 there).
pub fn node_process(
    s: &MarketSetup,
    dir: &std::path::Path,
    wf: &std::path::Path,
    crash_at: Option<&str>,
) -> tokio::process::Child {
    node_process_with(s, dir, wf, crash_at, &[])
}

/// [`node_process`] with extra `CRESOLVER__…` environment settings.
pub fn node_process_with(
    s: &MarketSetup,
    dir: &std::path::Path,
    wf: &std::path::Path,
    crash_at: Option<&str>,
    env: &[(&str, &str)],
) -> tokio::process::Child {
    let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_cresolver"));
    // an RPC URL among the settings replaces anvil's own
    let rpc = env
        .iter()
        .find(|(k, _)| *k == "CRESOLVER__CHAIN__RPC_URL")
        .map_or(s.dev.rpc_url(), |(_, v)| v.to_string());
    c.args([
        "node",
        "--rpc-url",
        &rpc,
        "--market-address",
        &s.dev.contracts.market.to_string(),
    ])
    .arg("--data-dir")
    .arg(dir.join("data"))
    .arg("--workflow")
    .arg(wf)
    .env(
        "CRESOLVER_PRIVATE_KEY",
        alloy::hex::encode(s.dev.signers[0].to_bytes()),
    )
    .env("CRESOLVER__DISCOVERY__ALLOW_PRIVATE_ENDPOINTS", "true")
    .env("CRESOLVER__CHAIN__POLL_INTERVAL_MS", "100")
    .env("CRESOLVER__API__LISTEN", "127.0.0.1:0")
    .env("CRESOLVER_LOG", "warn")
    .env_remove("CRESOLVER_TEST_CRASH_AFTER_SIGN")
    .env_remove("CRESOLVER_TEST_CRASH_AT")
    .stdout(std::process::Stdio::null())
    // the log, for tests that check what it says (and for a failing test's reader)
    .stderr(std::fs::File::create(dir.join("node.log")).unwrap())
    .kill_on_drop(true);
    for (k, v) in env {
        c.env(k, v);
    }
    if let Some(point) = crash_at {
        c.env("CRESOLVER_TEST_CRASH_AT", point);
    }
    c.spawn().unwrap()
}

pub use super::ports::free_port;
