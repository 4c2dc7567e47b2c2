//! The `cresolver` command line.

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use std::io::Read as _;
use std::path::PathBuf;
use std::process::ExitCode;

/// cresolver — resolution orchestrator for AI-resolved prediction markets.
///
/// Watches a market contract for ResolutionRequested, asks the market's registered
/// workers (found through ERC-8004) to resolve the question, challenges them, scores
/// them, and submits the weighted result on chain.
#[derive(Debug, Parser)]
#[command(name = "cresolver", version, about, long_about)]
struct Cli {
    /// Log format: `text` (default) or `json`.
    #[arg(long, global = true, default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Recompute a round's tally from JSON (audit tool): resolution, weights, scores, report bytes.
    ///
    /// Input: {"market_id":N,"tie":"yes|no|fail","workers":[{"address":"0x..","responded":bool,
    /// "determination":bool,"confidence":f,"scores":{8 dimensions},"reputation":{"resQuality":..,
    /// "srcQuality":..,"analysisDepth":..,"count":..}}]}. Exit code 2 on invalid input.
    Tally {
        /// Input file, or `-` for standard input.
        #[arg(long, short)]
        input: String,
    },
    /// Workflow definition files.
    #[command(subcommand)]
    Workflow(WorkflowCmd),
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

fn init_logging(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("CRESOLVER_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(&cli.log_format);
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
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
