//! The `cresolver` command line.

use alloy::primitives::U256;
use anyhow::Context as _;
use clap::{Parser, Subcommand};

mod cli;
use cli::dry_run::{DryRunArgs, dry_run_cmd};
use cli::replay_cmd::{ReplayArgs, replay_cmd};
use cli::rounds::{RoundsCmd, rounds_export, rounds_retry, rounds_show};
use cli::{ConfigArgs, connect, endpoints, shutdown_signal};
#[cfg(feature = "devnet")]
use cresolver::agent::{AgentBehaviour, DeterminationMode, FailureMode};
use cresolver::node::Node;
use cresolver::store::RoundState;
use std::io::Read as _;
use std::path::PathBuf;
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
#[derive(Debug, clap::Args)]
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
