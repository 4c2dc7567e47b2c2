//! `cresolver node`, `cresolver resolve` and `cresolver config check`: the first two
//! start as the third checks (one start-up path, `cresolver_node::preflight`).

use super::*;
use cresolver_node::{Node, Preflight};
use cresolver_store::RoundKey;

/// How long in-flight rounds get to reach a persisted state after the first Ctrl-C or
/// SIGTERM.
const DRAIN: Duration = Duration::from_secs(30);

/// `cresolver node`.
#[derive(Debug, Args)]
pub struct NodeArgs {
    #[command(flatten)]
    config: SigningConfigArgs,
}

impl NodeArgs {
    /// Runs the resolver node until Ctrl-C or SIGTERM; a second one during the drain
    /// stops it at once, naming the rounds left (they resume when the node starts again).
    pub async fn run(self) -> anyhow::Result<ExitCode> {
        node_cmd(&self.config).await
    }
}

/// `cresolver resolve`.
#[derive(Debug, Args)]
pub struct ResolveArgs {
    #[command(flatten)]
    config: SigningConfigArgs,
    /// Market id.
    #[arg(long)]
    market: U256,
    /// Print a JSON summary instead of text.
    #[arg(long)]
    json: bool,
}

impl ResolveArgs {
    /// Resolves one market now; exit 0 only when the resolution is confirmed.
    pub async fn run(self) -> anyhow::Result<ExitCode> {
        resolve_cmd(&self.config, self.market, self.json).await
    }
}

/// `cresolver config check`.
#[derive(Debug, Args)]
pub struct ConfigCheckArgs {
    #[command(flatten)]
    config: SigningConfigArgs,
}

impl ConfigCheckArgs {
    /// The node's start-up checks without starting.
    pub async fn run(self) -> anyhow::Result<ExitCode> {
        config_check(&self.config).await
    }
}

/// Runs the resolver node until Ctrl-C or SIGTERM (see [`NodeArgs::run`]).
async fn node_cmd(config: &SigningConfigArgs) -> anyhow::Result<ExitCode> {
    let cfg = config.load()?;
    let signer = cresolver_node::signer(&cfg)?;
    let _lock = cresolver_node::lock_data_dir(&cfg, "node")?;
    tracing::info!(resolver = %signer.address(), "starting node");
    let node = Node::build(cfg, Some(signer)).await?;
    let mut signals = shutdown_signals();
    let (first_tx, first_rx) = tokio::sync::oneshot::channel::<()>();
    let mut first_tx = Some(first_tx);
    let run = node.clone().run(
        async move {
            let _ = first_rx.await;
        },
        DRAIN,
    );
    tokio::pin!(run);
    loop {
        tokio::select! {
            r = &mut run => {
                r?;
                return Ok(ExitCode::SUCCESS);
            }
            s = signals.recv() => {
                if s.is_none() {
                    run.await?;
                    return Ok(ExitCode::SUCCESS);
                }
                if let Some(tx) = first_tx.take() {
                    tracing::info!("shutdown requested: in-flight rounds get up to {} s to reach a persisted state (Ctrl-C or SIGTERM again stops at once)", DRAIN.as_secs());
                    let _ = tx.send(());
                    continue;
                }
                stop_now(&node);
            }
        }
    }
}

/// The second signal: says which rounds are left and ends the process at once (every
/// stage a round passed is persisted; the rest of it runs again when the node starts).
fn stop_now(node: &Node) -> ! {
    let left = node.rounds_in_flight();
    if left.is_empty() {
        eprintln!("second signal: stopping now; no round was in flight");
    } else {
        let ids: Vec<String> = left
            .iter()
            .map(|k| format!("market {} on {}", k.id, k.market))
            .collect();
        eprintln!(
            "second signal: stopping now; {} round(s) left unfinished: {}. They resume from their last persisted stage when the node starts again.",
            left.len(),
            ids.join(", ")
        );
    }
    std::process::exit(1)
}

/// Resolves one market now; exit 0 only when the resolution is confirmed.
async fn resolve_cmd(
    config: &SigningConfigArgs,
    market: U256,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let cfg = config.load()?;
    let signer = cresolver_node::signer(&cfg)?;
    let _lock = cresolver_node::lock_data_dir(&cfg, "resolve")?;
    let node = Node::build(cfg, Some(signer)).await?;
    let market_addr = node.default_pipeline().market;
    node.request(market.into()).await?;
    let mut report = node.run_round(RoundKey::new(market_addr, market)).await?;
    // Transient trouble: the node retries in the background; wait for a final state.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    while !report.state.is_final() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        report = node.report(RoundKey::new(market_addr, market)).await?;
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "market {market}: {}{}{}",
            report.state.as_str(),
            report
                .reason
                .as_ref()
                .map(|r| format!(" — {r}"))
                .unwrap_or_default(),
            report
                .tx_hash
                .map(|t| format!(" (tx {t})"))
                .unwrap_or_default()
        );
    }
    Ok(if report.state.is_confirmed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `cresolver config check`: the node's start-up without starting (the same checks, in
/// the same order, with the same errors), printing a line per item checked, then
/// "config ok" only when the node would start.
async fn config_check(config: &SigningConfigArgs) -> anyhow::Result<ExitCode> {
    match config.file() {
        Some(f) => println!("config: {}", f.display()),
        None => println!("config: no file (defaults, CRESOLVER__… env vars and flags)"),
    }
    let cfg = config.load()?;
    let mut seen = Preflight::default();
    let checked = check_as_node(&cfg, &mut seen).await;
    for c in &seen.items {
        println!("{c}");
    }
    checked?;
    match seen.warnings() {
        0 => println!("config ok"),
        n => println!("config ok ({n} warning(s) above: the node starts, but see to them)"),
    }
    Ok(ExitCode::SUCCESS)
}

/// What `cresolver node` checks before it runs: its key, then [`Node::check`].
async fn check_as_node(
    cfg: &NodeConfig,
    seen: &mut Preflight,
) -> Result<(), cresolver_node::NodeError> {
    let signer = cresolver_node::signer(cfg)?;
    seen.ok("signer", signer.address().to_string());
    Node::check(cfg, Some(&signer), seen).await
}
