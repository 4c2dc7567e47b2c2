//! The development harness's commands: `cresolver agent` and `cresolver demo`.

use super::*;
use cresolver_devnet::agent::{AgentBehaviour, DeterminationMode, FailureMode};

/// `cresolver agent`.
#[derive(Debug, clap::Args)]
pub struct AgentArgs {
    /// Listen address.
    #[arg(long, default_value = "127.0.0.1:8700")]
    pub listen: String,
    /// Name shown in answers and /health.
    #[arg(long, default_value = "reference-agent")]
    pub name: String,
    /// How to decide: yes, no, or hash (from the question, like the reference mock).
    #[arg(long, value_enum, default_value_t = DeterminationMode::Hash)]
    pub determination: DeterminationMode,
    /// Fixed confidence in [0,1] (default: from the question hash).
    #[arg(long)]
    pub confidence: Option<f64>,
    /// Delay before every answer, in milliseconds.
    #[arg(long, default_value_t = 0)]
    pub latency_ms: u64,
    /// Misbehave on purpose.
    #[arg(long, value_enum)]
    pub failure: Option<FailureMode>,
}

impl AgentArgs {
    /// Runs the reference worker until Ctrl-C.
    pub async fn run(self) -> anyhow::Result<ExitCode> {
        agent_cmd(self).await
    }
}

/// Runs the reference worker until Ctrl-C.
async fn agent_cmd(a: AgentArgs) -> anyhow::Result<ExitCode> {
    if let Some(c) = a.confidence {
        anyhow::ensure!(
            c.is_finite() && (0.0..=1.0).contains(&c),
            "--confidence must be in [0, 1]"
        );
    }
    let behaviour = AgentBehaviour {
        name: a.name,
        determination: a.determination,
        confidence: a.confidence,
        latency: Duration::from_millis(a.latency_ms),
        failure: a.failure,
    };
    let listener = tokio::net::TcpListener::bind(&a.listen)
        .await
        .with_context(|| {
            format!(
                "cannot listen on {} (port in use? pick another with --listen)",
                a.listen
            )
        })?;
    eprintln!(
        "reference agent listening on http://{}",
        listener.local_addr()?
    );
    cresolver_devnet::agent::serve(listener, behaviour, shutdown_signal()).await?;
    Ok(ExitCode::SUCCESS)
}

/// `cresolver demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Number of reference workers (1-10).
    #[arg(long, default_value_t = 3)]
    pub workers: usize,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
}

impl DemoArgs {
    /// A whole resolution on a local anvil chain.
    pub async fn run(self) -> anyhow::Result<ExitCode> {
        demo_cmd(self.workers, self.json).await
    }
}

/// A whole resolution on a local anvil chain.
async fn demo_cmd(workers: usize, json: bool) -> anyhow::Result<ExitCode> {
    let summary = cresolver_devnet::demo::run(cresolver_devnet::demo::DemoOptions {
        workers,
        progress: !json,
        ..Default::default()
    })
    .await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print!("{}", cresolver_devnet::demo::render(&summary));
    }
    Ok(if summary.state.is_confirmed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `cresolver devnet …`.
#[derive(Debug, Subcommand)]
pub enum DevnetCmd {
    /// Start a local network that stays up: anvil, the contracts, reference workers and a
    /// node with its API and status page, in a data dir it keeps. Runs until Ctrl-C; run
    /// again, it resumes with the same chain, markets and rounds.
    ///
    /// The first start seeds three markets: 0 resolved, 1 whose round failed (its workers
    /// refuse while <data-dir>/refuse exists) and 2 open, not yet requested. It writes
    /// <data-dir>/node.toml, so other commands can look at the running node:
    /// `cresolver rounds list --config devnet/node.toml`.
    Up(UpArgs),
}

/// `cresolver devnet up`.
#[derive(Debug, clap::Args)]
pub struct UpArgs {
    /// The data dir (kept; a second run resumes from it).
    #[arg(long, default_value = "devnet")]
    pub data_dir: PathBuf,
    /// Reference workers per market (1-9).
    #[arg(long, default_value_t = 3)]
    pub workers: usize,
    /// Anvil's port (first start; later runs keep the recorded one).
    #[arg(long, default_value_t = 8545)]
    pub anvil_port: u16,
    /// The node's API and status page (first start).
    #[arg(long, default_value = "127.0.0.1:9464")]
    pub api_listen: String,
    /// The first worker's port; the others follow (first start).
    #[arg(long, default_value_t = 8701)]
    pub worker_port: u16,
}

impl DevnetCmd {
    /// Runs a `cresolver devnet` command.
    pub async fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            DevnetCmd::Up(a) => a.run().await,
        }
    }
}

impl UpArgs {
    /// Starts the local network (or resumes it) and runs until Ctrl-C.
    pub async fn run(self) -> anyhow::Result<ExitCode> {
        up_cmd(self).await
    }
}

async fn up_cmd(a: UpArgs) -> anyhow::Result<ExitCode> {
    use cresolver_devnet::up;
    let opts = up::UpOptions {
        data_dir: a.data_dir.clone(),
        workers: a.workers,
        anvil_port: a.anvil_port,
        api_listen: a.api_listen,
        worker_port: a.worker_port,
        node_exe: std::env::current_exe().context("cannot find the cresolver binary")?,
    };
    eprintln!("devnet: starting in {}", a.data_dir.display());
    let mut running = up::start(&opts).await?;
    if running.fresh {
        eprintln!("devnet: first start: contracts deployed, workers registered; seeding markets");
        if let Err(e) =
            cresolver_devnet::up_seed::seed(&mut running, &|m| eprintln!("devnet: {m}")).await
        {
            running.stop().await;
            return Err(e.into());
        }
    }
    print!("{}", banner(&running, &a.data_dir));
    println!(
        "devnet ready: Ctrl-C stops it (the chain's state is kept in the data dir); run `cresolver devnet up` again to resume"
    );
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    running.run_until(devnet_shutdown()).await?;
    eprintln!("devnet stopped; its state is in {}", a.data_dir.display());
    Ok(ExitCode::SUCCESS)
}

/// Ctrl-C, SIGTERM, or SIGHUP (its terminal closed): the node and anvil run in process
/// groups of their own, so they stop only when `devnet up` stops them.
async fn devnet_shutdown() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::hangup()) {
        Ok(mut hup) => {
            tokio::select! {
                _ = shutdown_signal() => {}
                _ = hup.recv() => {}
            }
        }
        Err(_) => shutdown_signal().await,
    }
}

/// What `devnet up` prints once it runs: where everything is, the dev keys, what to try.
fn banner(r: &cresolver_devnet::up::Running, shown: &std::path::Path) -> String {
    use std::fmt::Write as _;
    let s = &r.state;
    let d = shown.display();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\ncresolver devnet ({})",
        if r.fresh { "new" } else { "resumed" }
    );
    let _ = writeln!(out, "  data dir     {}", r.dir.display());
    let _ = writeln!(out, "  RPC URL      {} (chain {})", r.rpc_url(), s.chain_id);
    let _ = writeln!(out, "  market       {}", s.contracts.market);
    let _ = writeln!(out, "  identity     {}", s.contracts.identity);
    let _ = writeln!(out, "  status page  {}", r.status_url());
    let _ = writeln!(
        out,
        "  node         --config {d}/node.toml, log {d}/node.log"
    );
    if let Some(m) = s.markets {
        let _ = writeln!(
            out,
            "  markets      {} resolved; {} failed (its workers refuse while {d}/refuse exists); {} open, not requested",
            m.resolved, m.failed, m.open
        );
    }
    for w in &s.workers {
        let _ = writeln!(
            out,
            "  {:<12} http://127.0.0.1:{} agent {} owner {}{}",
            w.name,
            w.port,
            w.agent_id,
            w.owner,
            if w.refuses {
                " (refuses while the switch exists)"
            } else {
                ""
            }
        );
    }
    let _ = writeln!(
        out,
        "\nDev accounts: anvil's well-known keys, funded on this chain only (never use them elsewhere):"
    );
    let last = r.signers.len().saturating_sub(1);
    for (i, k) in r.signers.iter().enumerate() {
        let role = match i {
            0 => "market owner; the node's resolver key".to_string(),
            i if i <= s.workers.len() => format!("owns {}", s.workers[i - 1].name),
            i if i == last => "free: request resolutions with it".into(),
            _ => "free".into(),
        };
        let _ = writeln!(
            out,
            "  ({i:>2}) {} {}  {role}",
            k.address(),
            alloy::hex::encode_prefixed(k.to_bytes())
        );
    }
    let _ = writeln!(out, "\nTry (README, \"A five-minute tour\"):");
    for c in [
        format!("cresolver rounds list --config {d}/node.toml"),
        format!("cresolver market show 1 --config {d}/node.toml"),
        format!("export CRESOLVER_API_TOKEN=$(cat {d}/api-token)"),
        format!("rm {d}/refuse && cresolver rounds retry 1 --config {d}/node.toml"),
    ] {
        let _ = writeln!(out, "  {c}");
    }
    let _ = writeln!(out, "  open {}", r.status_url());
    out
}
