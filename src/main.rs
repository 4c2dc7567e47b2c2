//! The `cresolver` command line.

use alloy::primitives::{Address, U256};
use alloy::providers::{DynProvider, Provider as _};
use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
#[cfg(feature = "devnet")]
use cresolver::agent::{AgentBehaviour, DeterminationMode, FailureMode};
use cresolver::config::{NodeConfig, Overrides};
use cresolver::dryrun::DryRunner;
use cresolver::live::LiveContext;
use cresolver::node::Node;
use cresolver::replay::{self, MarketReplay, ReplayOptions, ReplaySummary};
use cresolver::round::Engine;
use cresolver::store::{RoundState, Store};
use cresolver::transcript::Transcript;
use cresolver::workflow::Workflow;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::{IsTerminal as _, Read as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// cresolver — resolution orchestrator for AI-resolved prediction markets.
///
/// Watches a market contract for ResolutionRequested, asks the market's registered
/// workers (found through the ERC-8004 identity registry) to resolve the question,
/// challenges them, scores them (LLM or offline rubric), and submits the weighted
/// result on chain — directly with resolveMarket, or as a CRE report.
///
/// Start with `cresolver demo` (a whole round on a local anvil chain; part of the default
/// `devnet` feature, which a production build may leave out).
#[derive(Debug, Parser)]
#[command(name = "cresolver", version, about, long_about)]
struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
    #[command(subcommand)]
    command: Command,
}

/// Where the node configuration comes from (file < env CRESOLVER__SECTION__KEY < flags).
#[derive(Debug, Args, Clone)]
struct ConfigArgs {
    #[command(flatten)]
    base: BaseConfigArgs,
    /// Workflow files (repeatable); default workflows/cresolver-resolution.toml.
    #[arg(long = "workflow", short = 'w')]
    workflows: Vec<PathBuf>,
}

/// The node configuration flags other than the workflows.
#[derive(Debug, Args, Clone)]
struct BaseConfigArgs {
    /// Node config file (TOML). Every key can also be set as CRESOLVER__SECTION__KEY.
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// RPC URL: http(s):// (polling) or ws(s):// (subscription).
    #[arg(long)]
    rpc_url: Option<String>,
    /// The market contract.
    #[arg(long)]
    market_address: Option<Address>,
    /// Where the round store lives.
    #[arg(long)]
    data_dir: Option<PathBuf>,
}

impl BaseConfigArgs {
    fn load_with(&self, workflows: Vec<PathBuf>) -> anyhow::Result<NodeConfig> {
        let o = Overrides {
            rpc_url: self.rpc_url.clone(),
            market_address: self.market_address,
            data_dir: self.data_dir.clone(),
            workflows,
        };
        Ok(NodeConfig::load(self.config.as_deref(), &o)?)
    }

    fn load(&self) -> anyhow::Result<NodeConfig> {
        self.load_with(vec![])
    }
}

impl ConfigArgs {
    fn load(&self) -> anyhow::Result<NodeConfig> {
        self.base.load_with(self.workflows.clone())
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the resolver node: watch the chain, resolve every requested market once.
    ///
    /// Needs the resolver key in $CRESOLVER_PRIVATE_KEY (or signer.key_file). Serves
    /// GET /health, /metrics, /rounds, /rounds/{id} and POST /resolve on api.listen.
    Node {
        #[command(flatten)]
        config: ConfigArgs,
    },
    /// Resolve one market now (exit 0 only when the resolution is confirmed on chain).
    Resolve {
        #[command(flatten)]
        config: ConfigArgs,
        /// Market id.
        #[arg(long)]
        market: U256,
        /// Print a JSON summary instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Configuration.
    #[command(subcommand)]
    Config(ConfigCmd),
    /// Run the reference worker (an A2A agent with deterministic, configurable behaviour).
    #[cfg(feature = "devnet")]
    Agent(AgentArgs),
    /// Run a whole resolution on a local anvil chain: deploy, workers, market, node, summary.
    #[cfg(feature = "devnet")]
    Demo {
        /// Number of reference workers (1-10).
        #[arg(long, default_value_t = 3)]
        workers: usize,
        /// Print the summary as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Recompute a round's tally from JSON (audit tool): resolution, weights, scores, report bytes.
    ///
    /// Input: {"market_id":N,"tie":"yes|no|fail","workers":[{"address":"0x..","responded":bool,
    /// "determination":bool,"abstain":bool (optional: scored, no vote),"confidence":f,
    /// "scores":{8 dimensions},"reputation":{"resQuality":..,"srcQuality":..,"analysisDepth":..,
    /// "count":..}}]}. Exit code 2 on invalid input.
    Tally {
        /// Input file, or `-` for standard input.
        #[arg(long, short)]
        input: String,
    },
    /// Workflow definition files.
    #[command(subcommand)]
    Workflow(WorkflowCmd),
    /// Re-run historical markets and compare with what happened on chain (never sends).
    ///
    /// Pick the markets with --transcript FILE, --market N, or --from-block A [--to-block B]
    /// (a chunked scan of ResolutionRequested logs). Each market is replayed from its
    /// transcript — deterministic, no network to workers or an LLM: recorded answers and
    /// defences go through the workflow's quorum rule, evaluator (rubric recomputed, the
    /// recorded LLM reply re-parsed) and tally — or with --live by asking today's workers,
    /// with the market read at the request's block (historic eth_call). Transcripts for
    /// --market and ranges come from --transcripts DIR, else from the node's store.
    ///
    /// Prints a table (market, on-chain outcome, replayed outcome, agree?, weight and score
    /// differences, report bytes vs the transcript) or --json. Exit status: 0 when every
    /// market agrees, 1 when any disagrees or could not be replayed, 2 on bad input or an
    /// RPC failure.
    Replay(ReplayArgs),
    /// Run the full pipeline for real but simulate the submission instead of sending it.
    ///
    /// Reads the market, discovers and asks its workers, evaluates and tallies, then runs
    /// eth_call and a gas estimate of the exact transaction from the resolver address
    /// (--from, else the configured key's address). When that address is not an authorized
    /// resolver, the simulation is repeated under a state override that authorizes it
    /// (flagged in the output). Nothing is signed or sent, no nonce moves, no store is
    /// written; no private key is needed. Exit status 0 only when the simulation as
    /// configured succeeds (in --watch mode: 0 after a clean shutdown).
    DryRun(DryRunArgs),
    /// The node's stored rounds and their transcripts.
    #[command(subcommand)]
    Rounds(RoundsCmd),
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("markets").required(true).args(["transcript", "market", "from_block"])))]
struct ReplayArgs {
    #[command(flatten)]
    config: BaseConfigArgs,
    /// Replay the round recorded in this transcript file (from `cresolver rounds export`).
    #[arg(long, value_name = "FILE")]
    transcript: Option<PathBuf>,
    /// Replay this market id of the configured market contract.
    #[arg(long, value_name = "N")]
    market: Option<U256>,
    /// Replay every market whose resolution was requested from this block on.
    #[arg(long, value_name = "A")]
    from_block: Option<u64>,
    /// Last block of the scan (default: the head). Also bounds the request search of --market.
    #[arg(long, value_name = "B")]
    to_block: Option<u64>,
    /// Replay under this workflow file instead of the recorded one; every changed
    /// parameter is listed (for --live without a transcript: the workflow to run).
    #[arg(long, short = 'w', value_name = "FILE")]
    workflow: Option<PathBuf>,
    /// Ask today's workers (and the LLM, if the workflow uses one) instead of using the
    /// recorded answers.
    #[arg(long, conflicts_with = "offline")]
    live: bool,
    /// Directory of exported transcripts to replay --market / ranges from (default: the
    /// node's store in the data dir).
    #[arg(long, value_name = "DIR")]
    transcripts: Option<PathBuf>,
    /// With --transcript: read nothing from the chain and compare with the recorded round only.
    #[arg(long, requires = "transcript")]
    offline: bool,
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct DryRunArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// Market id to dry-run (required unless --watch).
    #[arg(long, value_name = "N", required_unless_present = "watch")]
    market: Option<U256>,
    /// Run as a watcher: dry-run every new ResolutionRequested until Ctrl-C.
    #[arg(long, conflicts_with = "market")]
    watch: bool,
    /// With --watch: first block to scan (default: the head).
    #[arg(long, requires = "watch", value_name = "BLOCK")]
    from_block: Option<u64>,
    /// With --market: read the market and judge the round at this block, as the node does
    /// at the block of the market's ResolutionRequested (default: the head). With
    /// --watch every request is judged at its own block.
    #[arg(long, conflicts_with = "watch", value_name = "BLOCK")]
    at_block: Option<u64>,
    /// Resolver address to simulate from (default: the address of the configured key).
    #[arg(long, value_name = "ADDR")]
    from: Option<Address>,
    /// Print JSON (one object per market; one line per market with --watch).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Subcommand)]
enum RoundsCmd {
    /// Show one stored round: state, request, submission and its transcript.
    Show {
        #[command(flatten)]
        config: BaseConfigArgs,
        /// Market id.
        market_id: U256,
        /// Print the exported transcript document (JSON) instead of a summary.
        #[arg(long)]
        json: bool,
    },
    /// Write every stored round's transcript, one JSON file per round, into a directory.
    ///
    /// With --market-address (or chain.market_address in the config), only that market's
    /// rounds are written. Files are named <market address>-<market id>.json and hold the transcript (see
    /// docs/transcript.md) with the store record under `round`. Rounds that never reached
    /// discovery have no transcript and are listed, not written.
    Export {
        #[command(flatten)]
        config: BaseConfigArgs,
        /// Output directory (created if missing; files in it are overwritten).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
    /// Run a failed (or unfinished) round again now.
    ///
    /// Asks the running node through its API (POST /resolve on api.listen, with the bearer
    /// token from the env var named by api.token_env): the node reopens a failed round and
    /// runs it at once. When no node answers there, the round is reopened in the store and
    /// the node runs it when it starts. A confirmed or skipped round is not run again.
    Retry {
        #[command(flatten)]
        config: BaseConfigArgs,
        /// Market id.
        market_id: U256,
        /// Base URL of the node's API (default: http://<api.listen>).
        #[arg(long, value_name = "URL")]
        api: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
enum ConfigCmd {
    /// Validate the node config and its workflow files, and reach the RPC.
    Check {
        #[command(flatten)]
        config: ConfigArgs,
    },
}

#[derive(Debug, Subcommand)]
enum WorkflowCmd {
    /// Validate workflow files and print the effective settings (defaults filled in).
    Check {
        /// Workflow TOML files.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
}

#[cfg(feature = "devnet")]
#[derive(Debug, Args)]
struct AgentArgs {
    /// Listen address.
    #[arg(long, default_value = "127.0.0.1:8700")]
    listen: String,
    /// Name shown in answers and /health.
    #[arg(long, default_value = "reference-agent")]
    name: String,
    /// How to decide: yes, no, or hash (from the question, like the reference mock).
    #[arg(long, value_enum, default_value_t = DeterminationMode::Hash)]
    determination: DeterminationMode,
    /// Fixed confidence in [0,1] (default: from the question hash).
    #[arg(long)]
    confidence: Option<f64>,
    /// Delay before every answer, in milliseconds.
    #[arg(long, default_value_t = 0)]
    latency_ms: u64,
    /// Misbehave on purpose.
    #[arg(long, value_enum)]
    failure: Option<FailureMode>,
}

fn init_logging(format: &str, default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("CRESOLVER_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    use std::io::IsTerminal;
    // colours only for a terminal: a log file or a journal gets plain text
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The demo prints its own progress; its logs stay quiet unless CRESOLVER_LOG asks.
    let default = match cli.command {
        #[cfg(feature = "devnet")]
        Command::Demo { .. } => "warn",
        _ => "info,alloy=warn,hyper=warn,reqwest=warn",
    };
    init_logging(&cli.log_format, default);
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn shutdown_signal() {
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

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Node { config } => {
            let cfg = config.load()?;
            let signer = cfg.signer()?;
            tracing::info!(resolver = %signer.address(), "starting node");
            let node = Node::build(cfg, Some(signer)).await?;
            node.run(shutdown_signal(), Duration::from_secs(30)).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Resolve {
            config,
            market,
            json,
        } => {
            let cfg = config.load()?;
            let signer = cfg.signer()?;
            let node = Node::build(cfg, Some(signer)).await?;
            let market_addr = node.pipelines[0].market;
            node.request(market).await?;
            let mut report = node.run_round(market_addr, market).await?;
            // Transient trouble: the node retries in the background; wait for a final state.
            let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
            while !report.state.is_final() && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(500)).await;
                report = node.report(market_addr, market).await?;
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
            Ok(if report.state == RoundState::Confirmed {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::Config(ConfigCmd::Check { config }) => {
            let cfg = config.load()?;
            for w in &cfg.node.workflows {
                cresolver::workflow::Workflow::load(w)?;
                println!("workflow {}: ok", w.display());
            }
            let (provider, chain_id) = connect(&cfg).await?;
            use alloy::providers::Provider;
            let head = provider
                .get_block_number()
                .await
                .context("eth_blockNumber")?;
            println!(
                "rpc {}: chain {chain_id}, head block {head}",
                endpoints(&cfg)
            );
            if let Some(m) = cfg.chain.market_address {
                let code = provider.get_code_at(m).await.context("eth_getCode")?;
                anyhow::ensure!(
                    !code.is_empty(),
                    "no contract at market address {m} on chain {chain_id}"
                );
                let market = cresolver::chain::bindings::ICREsolverMarket::new(m, provider.clone());
                let count = market
                    .marketCount()
                    .call()
                    .await
                    .context("marketCount() on the market address")?;
                println!("market {m}: {count} markets");
            }
            match cfg.signer() {
                Ok(s) => println!("signer: {}", s.address()),
                Err(e) => println!("signer: none ({e})"),
            }
            println!("config ok");
            Ok(ExitCode::SUCCESS)
        }
        #[cfg(feature = "devnet")]
        Command::Agent(a) => {
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
            cresolver::agent::serve(listener, behaviour, shutdown_signal()).await?;
            Ok(ExitCode::SUCCESS)
        }
        #[cfg(feature = "devnet")]
        Command::Demo { workers, json } => {
            let summary = cresolver::demo::run(cresolver::demo::DemoOptions {
                workers,
                progress: !json,
                ..Default::default()
            })
            .await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&summary)?);
            } else {
                print!("{}", cresolver::demo::render(&summary));
            }
            Ok(if summary.state == RoundState::Confirmed {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::Tally { input } => {
            let text = if input == "-" {
                let mut s = String::new();
                std::io::stdin()
                    .read_to_string(&mut s)
                    .context("reading standard input")?;
                s
            } else {
                std::fs::read_to_string(&input).with_context(|| format!("reading {input}"))?
            };
            match cresolver::tally_cli::run(&text) {
                Ok(out) => {
                    println!("{}", serde_json::to_string_pretty(&out)?);
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    Ok(ExitCode::from(2))
                }
            }
        }
        Command::Replay(args) => match replay_cmd(args).await {
            Ok(code) => Ok(code),
            Err(e) => {
                eprintln!("error: {e:#}");
                Ok(ExitCode::from(2))
            }
        },
        Command::DryRun(args) => dry_run_cmd(args).await,
        Command::Rounds(RoundsCmd::Show {
            config,
            market_id,
            json,
        }) => rounds_show(&config, market_id, json),
        Command::Rounds(RoundsCmd::Export { config, out }) => rounds_export(&config, &out),
        Command::Rounds(RoundsCmd::Retry {
            config,
            market_id,
            api,
        }) => rounds_retry(&config, market_id, api).await,
        Command::Workflow(WorkflowCmd::Check { files }) => {
            for f in files {
                let wf = cresolver::workflow::Workflow::load(&f)?;
                println!("# {} — ok", f.display());
                println!("{}", toml::to_string_pretty(&wf)?);
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The transcripts `replay --market/--from-block` can use: exported files, or the store.
enum TranscriptSource {
    Files(Vec<(Transcript, String)>),
    Store(Store, PathBuf),
    None,
}

impl TranscriptSource {
    fn open(dir: Option<&PathBuf>, cfg: &NodeConfig) -> anyhow::Result<Self> {
        if let Some(dir) = dir {
            let mut files = Vec::new();
            let entries = std::fs::read_dir(dir)
                .with_context(|| format!("cannot read transcript directory {}", dir.display()))?;
            let mut paths: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "json"))
                .collect();
            paths.sort();
            for p in paths {
                let t = Transcript::load(&p)?;
                files.push((t, p.display().to_string()));
            }
            return Ok(Self::Files(files));
        }
        let db = cfg.node.data_dir.join("cresolver.sqlite3");
        if db.is_file() {
            return Ok(Self::Store(Store::open(&cfg.node.data_dir)?, db));
        }
        Ok(Self::None)
    }

    fn get(&self, market: Address, id: U256) -> anyhow::Result<Option<(Transcript, String)>> {
        match self {
            Self::Files(files) => Ok(files
                .iter()
                .find(|(t, _)| t.market.market == market && t.market.market_id == id)
                .cloned()),
            Self::Store(store, db) => {
                let Some(rec) = store.get(market, id)? else {
                    return Ok(None);
                };
                if rec.outcome.is_none() {
                    return Ok(None);
                }
                let name = format!("{} (round {id})", db.display());
                let doc = cresolver::transcript::export_document(&rec)?;
                Ok(Some((Transcript::from_value(doc, Path::new(&name))?, name)))
            }
            Self::None => Ok(None),
        }
    }

    fn describe(&self) -> String {
        match self {
            Self::Files(f) => format!("{} transcript file(s)", f.len()),
            Self::Store(_, db) => format!("the store {}", db.display()),
            Self::None => {
                "no transcript source (no --transcripts and no store in the data dir)".into()
            }
        }
    }
}

fn progress(len: u64, what: &str) -> ProgressBar {
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

async fn replay_cmd(a: ReplayArgs) -> anyhow::Result<ExitCode> {
    let cfg = a.config.load()?;
    let wf_override = a.workflow.as_deref().map(Workflow::load).transpose()?;
    let opts = ReplayOptions {
        max_range: cfg.chain.max_block_range,
        multicall: cfg.chain.multicall_address,
        offline: a.offline,
    };
    let mut markets = Vec::new();
    if let Some(path) = &a.transcript {
        let t = Transcript::load(path)?;
        let name = path.display().to_string();
        if a.offline {
            markets.push(
                replay::replay_from_transcript(None, &t, name, wf_override.as_ref(), &opts).await?,
            );
        } else {
            let (provider, chain_id) = connect(&cfg).await?;
            if let Some(c) = t.chain_id {
                anyhow::ensure!(
                    c == chain_id,
                    "transcript {name} was recorded on chain {c} but the RPC {} is chain {chain_id}",
                    endpoints(&cfg)
                );
            }
            if a.live {
                // A manual request has no request block: the block the node read at.
                let block = t.request_block().unwrap_or(t.market.block);
                let request = replay::RequestRef {
                    market_id: t.market.market_id,
                    block,
                    tx: t.request.as_ref().and_then(|r| r.tx),
                };
                let wf = wf_override.clone().unwrap_or_else(|| t.workflow.clone());
                markets.push(
                    live_replay(
                        &provider,
                        &cfg,
                        wf,
                        t.market.market,
                        request,
                        Some((&t, name)),
                        &opts,
                    )
                    .await?,
                );
            } else {
                markets.push(
                    replay::replay_from_transcript(
                        Some(&provider),
                        &t,
                        name,
                        wf_override.as_ref(),
                        &opts,
                    )
                    .await?,
                );
            }
        }
    } else {
        let market = cfg.market()?;
        let source = TranscriptSource::open(a.transcripts.as_ref(), &cfg)?;
        let (provider, chain_id) = connect(&cfg).await?;
        let head = provider
            .get_block_number()
            .await
            .context("eth_blockNumber")?;
        let to = a.to_block.unwrap_or(head).min(head);
        let requests = match a.market {
            Some(id) => {
                // With a transcript, its request (a manual one: the block the node read at).
                let known = source.get(market, id)?.map(|(t, _)| replay::RequestRef {
                    market_id: id,
                    block: t.request_block().unwrap_or(t.market.block),
                    tx: t.request.as_ref().and_then(|r| r.tx),
                });
                match known {
                    Some(r) => vec![r],
                    None => {
                        let from = a.from_block.or(cfg.chain.start_block).unwrap_or(0);
                        let pb = progress(to.saturating_sub(from) + 1, "searching the request");
                        let found = replay::scan_requests(
                            &provider,
                            market,
                            Some(id),
                            from,
                            to,
                            cfg.chain.max_block_range,
                            &mut |done| pb.set_position(done.saturating_sub(from) + 1),
                        )
                        .await?;
                        pb.finish_and_clear();
                        anyhow::ensure!(
                            !found.is_empty(),
                            "no ResolutionRequested for market {id} on {market} in blocks {from}..{to}"
                        );
                        found
                    }
                }
            }
            None => {
                let from = a.from_block.unwrap_or(0);
                anyhow::ensure!(
                    from <= to,
                    "--from-block {from} is after --to-block {to} (the head is {head})"
                );
                let pb = progress(to - from + 1, "scanning blocks");
                let found = replay::scan_requests(
                    &provider,
                    market,
                    None,
                    from,
                    to,
                    cfg.chain.max_block_range,
                    &mut |done| pb.set_position(done.saturating_sub(from) + 1),
                )
                .await?;
                pb.finish_and_clear();
                if !a.json {
                    eprintln!(
                        "{} market(s) requested in blocks {from}..{to}; transcripts from {}",
                        found.len(),
                        source.describe()
                    );
                }
                found
            }
        };
        let pb = progress(requests.len() as u64, "replaying markets");
        for req in requests {
            let id = req.market_id;
            let t = source.get(market, id)?;
            let mismatch = t.as_ref().and_then(|(t, name)| {
                t.chain_id
                    .filter(|c| *c != chain_id)
                    .map(|c| (c, name.clone()))
            });
            let m = if let Some((c, name)) = mismatch {
                let on_chain =
                    replay::onchain_outcome(&provider, market, id, req.block, opts.max_range)
                        .await?;
                MarketReplay::unavailable(
                    market,
                    id,
                    Some(req),
                    on_chain,
                    format!(
                        "transcript {name} was recorded on chain {c}, the RPC is chain {chain_id}"
                    ),
                )
            } else if a.live {
                let wf = match (&wf_override, &t) {
                    (Some(w), _) => w.clone(),
                    (None, Some((t, _))) => t.workflow.clone(),
                    (None, None) => {
                        let p = cfg
                            .node
                            .workflows
                            .first()
                            .context("no workflow configured: pass --workflow FILE")?;
                        Workflow::load(p)?
                    }
                };
                let tr = t.as_ref().map(|(t, n)| (t, n.clone()));
                live_replay(&provider, &cfg, wf, market, req, tr, &opts).await?
            } else if let Some((t, name)) = &t {
                replay::replay_from_transcript(
                    Some(&provider),
                    t,
                    name.clone(),
                    wf_override.as_ref(),
                    &opts,
                )
                .await?
            } else {
                let on_chain =
                    replay::onchain_outcome(&provider, market, id, req.block, opts.max_range)
                        .await?;
                MarketReplay::unavailable(
                    market,
                    id,
                    Some(req),
                    on_chain,
                    format!(
                        "no transcript for market {id} in {} (export with `cresolver rounds export`, point --transcripts at them, or use --live)",
                        source.describe()
                    ),
                )
            };
            markets.push(m);
            pb.inc(1);
        }
        pb.finish_and_clear();
    }
    let summary = ReplaySummary::new(markets);
    if a.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print!("{}", replay::render_table(&summary));
    }
    Ok(if summary.all_agree {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

async fn live_replay(
    provider: &DynProvider,
    cfg: &NodeConfig,
    workflow: Workflow,
    market: Address,
    request: replay::RequestRef,
    transcript: Option<(&Transcript, String)>,
    opts: &ReplayOptions,
) -> anyhow::Result<MarketReplay> {
    let engine = Engine::new(workflow)?;
    let discovery = cresolver::node::discovery_config(cfg)?;
    let http = cresolver::workers::StageClient::default_http();
    let ctx = LiveContext {
        provider,
        multicall: cfg.chain.multicall_address,
        discovery: &discovery,
        http: &http,
    };
    Ok(replay::replay_live(&ctx, &engine, market, request, transcript, opts).await?)
}

async fn dry_run_cmd(a: DryRunArgs) -> anyhow::Result<ExitCode> {
    let cfg = a.config.load()?;
    let from = match a.from {
        Some(f) => f,
        None => match cfg.signer() {
            Ok(s) => s.address(),
            Err(e) => anyhow::bail!(
                "dry-run needs the resolver address to simulate from: pass --from ADDR (no key is needed), or configure the resolver key ({e})"
            ),
        },
    };
    let (provider, chain_id) = connect(&cfg).await?;
    if let Some(expected) = cfg.chain.chain_id {
        anyhow::ensure!(
            expected == chain_id,
            "RPC chain id is {chain_id} but the config expects {expected}"
        );
    }
    let wf_path = cfg
        .node
        .workflows
        .first()
        .context("no workflow configured: pass --workflow FILE")?;
    let workflow = Workflow::load(wf_path)?;
    let market = match workflow.trigger.address.or(cfg.chain.market_address) {
        Some(m) => m,
        None => cfg.market()?,
    };
    let runner = DryRunner::new(provider, &cfg, workflow, market, from)?;
    if a.watch {
        let (tx, rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            shutdown_signal().await;
            let _ = tx.send(true);
        });
        eprintln!(
            "dry-run: watching market {market} for ResolutionRequested (simulating as {from}); Ctrl-C to stop"
        );
        let json = a.json;
        runner
            .watch(&cfg, a.from_block, rx, |id, r| match r {
                Ok(rep) if json => match serde_json::to_string(&rep) {
                    Ok(line) => println!("{line}"),
                    Err(e) => eprintln!("market {id}: cannot print the dry-run: {e}"),
                },
                Ok(rep) => println!("{}", cresolver::dryrun::render(&rep)),
                Err(e) => eprintln!("market {id}: dry-run failed: {e}"),
            })
            .await?;
        return Ok(ExitCode::SUCCESS);
    }
    let id = a
        .market
        .context("--market N is required (or run with --watch)")?;
    let r = runner.run_at(id, a.at_block).await?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print!("{}", cresolver::dryrun::render(&r));
    }
    Ok(if r.would_submit() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn open_store(cfg: &NodeConfig) -> anyhow::Result<Store> {
    let db = cfg.node.data_dir.join("cresolver.sqlite3");
    anyhow::ensure!(
        db.is_file(),
        "no round store at {} (point --data-dir or node.data_dir at the node's data dir)",
        db.display()
    );
    Ok(Store::open(&cfg.node.data_dir)?)
}

async fn rounds_retry(
    config: &BaseConfigArgs,
    id: U256,
    api: Option<String>,
) -> anyhow::Result<ExitCode> {
    use cresolver::store::RoundState;
    let cfg = config.load()?;
    let market = cfg.market()?;
    let store = open_store(&cfg)?;
    let Some(rec) = store.get(market, id)? else {
        anyhow::bail!("no round for market {id} on {market} in the store");
    };
    if matches!(rec.state, RoundState::Confirmed | RoundState::Skipped) {
        anyhow::bail!(
            "the round of market {id} is {}: there is nothing to retry",
            rec.state.as_str()
        );
    }
    let token = std::env::var(&cfg.api.token_env)
        .ok()
        .filter(|t| !t.is_empty());
    let base = api.unwrap_or_else(|| format!("http://{}", cfg.api.listen));
    if let Some(token) = &token
        && !cfg.api.listen.is_empty()
    {
        let url = format!("{}/resolve", base.trim_end_matches('/'));
        let resp = reqwest::Client::new()
            .post(&url)
            .bearer_auth(token)
            .json(&serde_json::json!({ "market_id": id.to_string() }))
            .timeout(std::time::Duration::from_secs(10))
            .send()
            .await;
        match resp {
            Ok(r) if r.status().is_success() => {
                println!("the node at {base} runs the round of market {id} now");
                return Ok(ExitCode::SUCCESS);
            }
            Ok(r) => {
                let status = r.status();
                let body: String = r
                    .text()
                    .await
                    .unwrap_or_default()
                    .chars()
                    .take(300)
                    .collect();
                anyhow::bail!("the node at {base} refused the retry ({status}): {body}");
            }
            // no node there: reopen in the store below
            Err(e) if e.is_connect() => {}
            Err(e) => anyhow::bail!("cannot reach the node at {base}: {e}"),
        }
    }
    let decision = store.manual_request(market, id, &rec.workflow)?;
    let now = store.get(market, id)?.map(|r| r.state);
    println!(
        "round of market {id}: {} ({decision:?}); a node runs it when it starts{}",
        now.map_or("?", |s| s.as_str()),
        if token.is_none() {
            format!(
                " (set {} to have a running node run it at once)",
                cfg.api.token_env
            )
        } else {
            String::new()
        }
    );
    Ok(ExitCode::SUCCESS)
}

fn rounds_show(config: &BaseConfigArgs, id: U256, json: bool) -> anyhow::Result<ExitCode> {
    let cfg = config.load()?;
    let store = open_store(&cfg)?;
    let rec = match cfg.chain.market_address {
        Some(m) => store
            .get(m, id)?
            .with_context(|| format!("no round for market {id} on {m} in the store"))?,
        None => {
            let mut all: Vec<_> = store
                .list(i64::MAX as usize)?
                .into_iter()
                .filter(|r| r.market_id == id)
                .collect();
            match all.len() {
                0 => anyhow::bail!("no round for market {id} in the store"),
                1 => all.remove(0),
                n => anyhow::bail!(
                    "{n} market contracts have a round {id}: pass --market-address to pick one"
                ),
            }
        }
    };
    let txs = store.tx_history(rec.market, rec.market_id)?;
    if json {
        let mut doc = match cresolver::transcript::export_document(&rec) {
            Ok(d) => d,
            // No transcript yet: the store record alone.
            Err(_) => serde_json::json!({
                "round": cresolver::transcript::RoundInfo::from(&rec)
            }),
        };
        doc["transactions"] = cresolver::transcript::transactions_json(&txs);
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "market {} on {}: {} (attempt {}, workflow {})",
        rec.market_id,
        rec.market,
        rec.state.as_str(),
        rec.attempt,
        rec.workflow
    );
    if let Some(r) = &rec.reason {
        println!("reason: {r}");
    }
    match (rec.request_tx, rec.request_block) {
        (Some(tx), Some(b)) => println!("request: tx {tx} in block {b}"),
        _ => println!("request: manual"),
    }
    if let Some(tx) = rec.submit_tx {
        println!("submission: tx {tx}");
    }
    for (n, attempts) in &txs {
        println!(
            "nonce {}: {}{}{}",
            n.nonce,
            n.state.as_str(),
            n.mined_block
                .map(|b| format!(" in block {b}"))
                .unwrap_or_default(),
            n.detail
                .as_deref()
                .map(|d| format!(" ({d})"))
                .unwrap_or_default()
        );
        for a in attempts {
            println!(
                "  attempt {}: tx {}, max fee {:.3} gwei, tip {:.3} gwei, {}{}",
                a.seq,
                a.tx_hash,
                a.max_fee_per_gas as f64 / 1e9,
                a.max_priority_fee_per_gas as f64 / 1e9,
                a.sent_block
                    .map(|b| format!("sent at block {b}"))
                    .unwrap_or_else(|| "stored, not sent".into()),
                if n.mined_tx == Some(a.tx_hash) {
                    ", mined"
                } else {
                    ""
                }
            );
        }
    }
    let Ok(doc) = cresolver::transcript::export_document(&rec) else {
        println!("transcript: none (the round did not reach discovery)");
        return Ok(ExitCode::SUCCESS);
    };
    let t = Transcript::from_value(doc, Path::new("store"))?;
    println!("question: {}", t.question);
    println!(
        "transcript: version {}, market read at block {}",
        t.version, t.market.block
    );
    if let Some(stage) = t.resolve_stage() {
        for (i, r) in stage.results.iter().enumerate() {
            let what = match &r.outcome {
                Ok(a) => format!(
                    "{} ({:.0}%)",
                    if a.determination { "YES" } else { "NO" },
                    a.confidence * 100.0
                ),
                Err(f) => format!("no answer: {f}"),
            };
            let tally = t
                .outcome
                .as_ref()
                .and_then(|o| o.tally.workers.get(i))
                .map(|w| {
                    format!(
                        ", weight {}, scores {}/{}/{}",
                        w.weight,
                        w.scores.res_quality,
                        w.scores.src_quality,
                        w.scores.analysis_depth
                    )
                })
                .unwrap_or_default();
            println!(
                "  worker #{} {}: {what} in {} ms{tally}",
                i + 1,
                r.address,
                r.elapsed_ms
            );
        }
        println!(
            "quorum: {} of {} valid, {} required",
            stage.valid, stage.registered, stage.required
        );
    }
    if let Some(o) = &t.outcome {
        println!(
            "evaluator: {}{}",
            o.evaluation.evaluator,
            o.evaluation
                .fallback_reason
                .as_ref()
                .map(|r| format!(" (fallback: {r})"))
                .unwrap_or_default()
        );
        println!(
            "tally: {} (yes {} / no {}{})",
            if o.tally.resolution { "YES" } else { "NO" },
            o.tally.yes_weight,
            o.tally.no_weight,
            if o.tally.tie { ", tie" } else { "" }
        );
        println!("report: {}", o.report);
    }
    if let Some(c) = &t.confirmation {
        println!(
            "receipt: {} (tx {}{})",
            c.status,
            c.tx_hash.map_or("-".to_string(), |h| h.to_string()),
            c.block_number
                .map(|b| format!(", block {b}"))
                .unwrap_or_default()
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn rounds_export(config: &BaseConfigArgs, out: &Path) -> anyhow::Result<ExitCode> {
    let cfg = config.load()?;
    let store = open_store(&cfg)?;
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let mut written = 0usize;
    let mut skipped = Vec::new();
    for rec in store.list(i64::MAX as usize)? {
        if cfg.chain.market_address.is_some_and(|m| m != rec.market) {
            continue;
        }
        match cresolver::transcript::export_document(&rec) {
            Ok(doc) => {
                let path = out.join(cresolver::transcript::export_file_name(
                    rec.market,
                    rec.market_id,
                ));
                std::fs::write(&path, serde_json::to_string_pretty(&doc)? + "\n")
                    .with_context(|| format!("cannot write {}", path.display()))?;
                written += 1;
            }
            Err(_) => skipped.push(format!("{} ({})", rec.market_id, rec.state.as_str())),
        }
    }
    println!("exported {written} round(s) to {}", out.display());
    if !skipped.is_empty() {
        println!(
            "without a transcript (not exported): market(s) {}",
            skipped.join(", ")
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Connects to the configured endpoints (`chain.rpc_urls`, or `chain.rpc_url`) and reads
/// the chain id.
async fn connect(cfg: &NodeConfig) -> anyhow::Result<(alloy::providers::DynProvider, u64)> {
    let (_pool, provider, chain_id) =
        cresolver::chain::connect_pool_checked(&cfg.rpc_urls(), cfg.pool_config()).await?;
    Ok((provider, chain_id))
}

/// The configured endpoints as they may be printed (no keys, no paths).
fn endpoints(cfg: &NodeConfig) -> String {
    cfg.rpc_urls()
        .iter()
        .map(|u| cresolver::chain::redact_url(u))
        .collect::<Vec<_>>()
        .join(", ")
}
