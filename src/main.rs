//! The `cresolver` command line.

use anyhow::Context as _;
use clap::{Parser, Subcommand};

mod cli;
use cli::dry_run::DryRunArgs;
use cli::node::{ConfigCheckArgs, NodeArgs, ResolveArgs};
use cli::replay_cmd::ReplayArgs;
use cli::rounds::RoundsCmd;
use std::io::Read as _;
use std::path::PathBuf;
use std::process::ExitCode;

/// mimalloc: per-thread heaps without glibc malloc's arena locks, which a profile of
/// 1,000 concurrent rounds showed contended (futex waits) and at ~20 % of the CPU.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// cresolver — resolution orchestrator for AI-resolved prediction markets.
///
/// Watches a market contract for ResolutionRequested, asks the market's registered
/// workers (found through the ERC-8004 identity registry) to resolve the question,
/// challenges them, scores them (LLM or offline rubric), and submits the weighted
/// result on chain — directly with resolveMarket, or as a CRE report.
///
/// Start with `cresolver demo` (a whole round on a local anvil chain) or `cresolver devnet
/// up` (a local network that stays up), both part of the default `devnet` feature, which a
/// production build may leave out; `cresolver market` drives the contracts on any chain.
#[derive(Debug, Parser)]
#[command(name = "cresolver", version = cresolver_node::build_info::long_version(), about, long_about)]
struct Cli {
    /// Log format on stderr.
    #[arg(
        long,
        global = true,
        env = "CRESOLVER_LOG_FORMAT",
        default_value = "text",
        value_enum
    )]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

/// How log lines are written on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    // human-readable lines (coloured on a terminal)
    Text,
    // one JSON object per line
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the resolver node: watch the chain, resolve every requested market once.
    ///
    /// Needs the resolver key in $CRESOLVER_PRIVATE_KEY (or signer.key_file). Serves
    /// GET /health, /metrics, /rounds, /rounds/{id} and POST /resolve on api.listen.
    Node(NodeArgs),
    /// Resolve one market now (exit 0 only when the resolution is confirmed on chain).
    Resolve(ResolveArgs),
    /// Configuration.
    #[command(subcommand)]
    Config(ConfigCmd),
    /// Run the reference worker (an A2A agent with deterministic, configurable behaviour).
    #[cfg(feature = "devnet")]
    Agent(cli::devnet::AgentArgs),
    /// A local network that stays up: anvil, the contracts, reference workers and a node.
    #[cfg(feature = "devnet")]
    #[command(subcommand)]
    Devnet(cli::devnet::DevnetCmd),
    /// The contracts on any chain: deploy, create, join, request, show, register a worker,
    /// authorize a resolver.
    #[command(subcommand)]
    Market(cli::market::MarketCmd),
    /// Run a whole resolution on a local anvil chain: deploy, workers, market, node, summary.
    #[cfg(feature = "devnet")]
    Demo(cli::devnet::DemoArgs),
    /// Recompute a round's tally from JSON (audit tool): resolution, weights, scores, report bytes.
    ///
    /// Input: {"market_id":N,"tie":"yes|no|fail","workers":[{"address":"0x..","responded":bool,
    /// "determination":bool,"abstain":bool (optional: scored, no vote),"confidence":f,
    /// "scores":{8 dimensions},"reputation":{"resQuality":..,"srcQuality":..,"analysisDepth":..,
    /// "count":..}}]}. Exit code 2 on invalid input.
    Tally(TallyArgs),
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
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    ///
    /// For example: `cresolver completions bash > /etc/bash_completion.d/cresolver`.
    Completions(CompletionsArgs),
    /// Write man pages for cresolver and every subcommand into a directory.
    Man(ManArgs),
    /// Print the command-line reference as Markdown (the book's CLI chapter is this).
    #[command(hide = true)]
    CliReference,
}

#[derive(Debug, Subcommand)]
enum ConfigCmd {
    /// Run the node's start-up checks without starting: the signing key, the store, every
    /// RPC endpoint and the chain id, the workflows and their markets, the DON section.
    ///
    /// Refuses what `cresolver node` refuses, with the same message and a non-zero exit;
    /// prints a line per item checked, then "config ok". Nothing is created: the SQLite
    /// data dir is only tested for writing, a PostgreSQL database is connected to without
    /// creating a table. The LLM endpoints of the workflows and the DON's other members
    /// are probed too; one that does not answer is a warning (the node starts without it).
    /// A running node's data dir lock is not checked (it may run beside the node).
    Check(ConfigCheckArgs),
    /// Print the JSON Schema of node.toml (with --workflow: of a workflow file).
    ///
    /// Editors check a TOML file against it as it is typed when its first line names it:
    /// `#:schema ./node.schema.json` (taplo, Even Better TOML; a path relative to the
    /// file, or a URL). docs/reference/ holds both schemas.
    Schema(ConfigSchemaArgs),
}

impl ConfigCmd {
    async fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            ConfigCmd::Check(a) => a.run().await,
            ConfigCmd::Schema(a) => a.run(),
        }
    }
}

/// `cresolver config schema`.
#[derive(Debug, clap::Args)]
struct ConfigSchemaArgs {
    /// The schema of a workflow file instead.
    #[arg(long)]
    workflow: bool,
}

impl ConfigSchemaArgs {
    /// Prints the schema (a closed pipe, `| head`, ends the output quietly).
    fn run(self) -> anyhow::Result<ExitCode> {
        let schema = if self.workflow {
            cresolver_pipeline::workflow::Workflow::schema()
        } else {
            cresolver_pipeline::config::NodeConfig::schema()
        };
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stdout(),
            "{}",
            serde_json::to_string_pretty(schema)?
        );
        Ok(ExitCode::SUCCESS)
    }
}

#[derive(Debug, Subcommand)]
enum WorkflowCmd {
    /// Validate workflow files and print the effective settings (defaults filled in).
    Check(WorkflowCheckArgs),
}

/// `cresolver workflow check`.
#[derive(Debug, clap::Args)]
struct WorkflowCheckArgs {
    /// Workflow TOML files.
    #[arg(required = true)]
    files: Vec<PathBuf>,
}

impl WorkflowCheckArgs {
    /// Loads each workflow file and prints its effective settings (defaults filled in)
    /// as TOML.
    fn run(self) -> anyhow::Result<ExitCode> {
        for f in &self.files {
            let wf = cresolver_pipeline::workflow::Workflow::load(f)?;
            println!("# {} — ok", f.display());
            println!("{}", toml::to_string_pretty(&wf)?);
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// `cresolver completions`.
#[derive(Debug, clap::Args)]
struct CompletionsArgs {
    /// The shell.
    shell: clap_complete::Shell,
}

impl CompletionsArgs {
    /// Prints the completion script of the shell.
    fn run(self) -> anyhow::Result<ExitCode> {
        let mut cmd = <Cli as clap::CommandFactory>::command();
        clap_complete::generate(self.shell, &mut cmd, "cresolver", &mut std::io::stdout());
        Ok(ExitCode::SUCCESS)
    }
}

/// `cresolver man`.
#[derive(Debug, clap::Args)]
struct ManArgs {
    /// Output directory (created if missing).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

impl ManArgs {
    /// Writes the man pages.
    fn run(self) -> anyhow::Result<ExitCode> {
        man_pages(&self.out)
    }
}

/// `cresolver tally`.
#[derive(Debug, clap::Args)]
struct TallyArgs {
    /// Input file, or `-` for standard input.
    #[arg(long, short)]
    input: String,
}

/// Targets that are never logged, whatever `CRESOLVER_LOG` asks: alloy's HTTP and
/// websocket transports put the whole endpoint URL (a provider's key is often in its
/// path or query) into their spans. Their failures still reach the log as the node's
/// own errors, with the URL redacted.
const SILENCED: &str = "alloy_transport_http=off,alloy_transport_ws=off";

fn init_logging(format: LogFormat, default: &str) {
    let asked = std::env::var("CRESOLVER_LOG").unwrap_or_else(|_| default.to_string());
    let filter = tracing_subscriber::EnvFilter::try_new(format!("{asked},{SILENCED}"))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("{default},{SILENCED}")));
    use std::io::IsTerminal;
    // colours only for a terminal: a log file or a journal gets plain text
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    if format == LogFormat::Json {
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
        Command::Demo(_) => "warn",
        _ => "info,alloy=warn,hyper=warn,reqwest=warn",
    };
    init_logging(cli.log_format, default);
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
            eprintln!("error: {}", cresolver_chain::causes(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Node(a) => a.run().await,
        Command::Resolve(a) => a.run().await,
        Command::Config(cmd) => cmd.run().await,
        #[cfg(feature = "devnet")]
        Command::Agent(a) => a.run().await,
        #[cfg(feature = "devnet")]
        Command::Demo(a) => a.run().await,
        #[cfg(feature = "devnet")]
        Command::Devnet(cmd) => cmd.run().await,
        Command::Market(cmd) => cmd.run().await,
        Command::Tally(a) => a.run(),
        Command::Replay(a) => a.run().await,
        Command::DryRun(a) => a.run().await,
        Command::Rounds(cmd) => cmd.run().await,
        Command::Completions(a) => a.run(),
        Command::Man(a) => a.run(),
        Command::CliReference => {
            print!("{}", cli_reference());
            Ok(ExitCode::SUCCESS)
        }
        Command::Workflow(WorkflowCmd::Check(a)) => a.run(),
    }
}

impl TallyArgs {
    /// Prints the recomputed tally as JSON (`-`: the input from standard input), or the
    /// error with exit code 2 when the input is invalid.
    fn run(self) -> anyhow::Result<ExitCode> {
        let input = self.input.as_str();
        let text = if input == "-" {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .context("reading standard input")?;
            s
        } else {
            std::fs::read_to_string(input).with_context(|| format!("reading {input}"))?
        };
        match crate::cli::tally::run(&text) {
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
}

/// The command-line reference chapter: every command, its arguments and options, from
/// the same definitions `--help` prints (clap-markdown renders them).
fn cli_reference() -> String {
    let options = clap_markdown::MarkdownOptions::new()
        .title("Command-line reference".to_string())
        .show_footer(false)
        .show_table_of_contents(true);
    let body = clap_markdown::help_markdown_custom::<Cli>(&options);
    // the chapter says where it comes from; the hidden command itself is not listed
    let intro = "Generated from the command definitions (`--help` prints the same text). \
                 Every command also has `--help`, `cresolver man --out DIR` writes man pages, and \
                 `cresolver completions SHELL` prints shell completions.\n\n";
    let body = escape_placeholders(&body);
    match body.split_once('\n') {
        Some((title, rest)) => format!("{title}\n\n{intro}{}", rest.trim_start()),
        None => body,
    }
}

/// `<`, outside code spans, as `&lt;` unless it opens one of the tags clap-markdown
/// writes itself: a help text's `<data-dir>` would otherwise be read as HTML.
fn escape_placeholders(markdown: &str) -> String {
    const TAGS: [&str; 8] = ["a ", "/a>", "li>", "/li>", "ul>", "/ul>", "code>", "/code>"];
    markdown
        .split('`')
        .enumerate()
        .map(|(i, part)| {
            if i % 2 == 1 {
                return part.to_string();
            }
            let mut out = String::with_capacity(part.len());
            for (j, piece) in part.split('<').enumerate() {
                if j > 0 {
                    let tag = TAGS.iter().any(|t| piece.starts_with(t));
                    out.push_str(if tag { "<" } else { "&lt;" });
                }
                out.push_str(piece);
            }
            out
        })
        .collect::<Vec<_>>()
        .join("`")
}

/// `cresolver man --out DIR`: one page per command (`cresolver.1`, `cresolver-node.1`,
/// `cresolver-rounds-list.1`, …), each titled and named as its file.
fn man_pages(out: &std::path::Path) -> anyhow::Result<ExitCode> {
    use anyhow::Context as _;
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let mut cmd = <Cli as clap::CommandFactory>::command();
    // the usage lines of the subcommands read `cresolver rounds list`, not `list`
    cmd.build();
    let mut written = 0;
    let mut stack = vec![(String::from("cresolver"), cmd)];
    while let Some((name, cmd)) = stack.pop() {
        for sub in cmd.get_subcommands() {
            if sub.get_name() != "help" {
                let page = format!("{name}-{}", sub.get_name());
                stack.push((page.clone(), sub.clone().display_name(page)));
            }
        }
        let mut page = Vec::new();
        clap_mangen::Man::new(cmd.display_name(name.clone()))
            .title(name.clone())
            .render(&mut page)?;
        let path = out.join(format!("{name}.1"));
        std::fs::write(&path, page).with_context(|| format!("cannot write {}", path.display()))?;
        written += 1;
    }
    eprintln!("{written} man pages written to {}", out.display());
    Ok(ExitCode::SUCCESS)
}
