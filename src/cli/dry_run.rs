//! `cresolver dry-run`: the full pipeline for real, the submission simulated.

use super::*;

#[derive(Debug, Args)]
pub struct DryRunArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Market id to dry-run (required unless --watch).
    #[arg(long, value_name = "N", required_unless_present = "watch")]
    pub market: Option<U256>,
    /// Run as a watcher: dry-run every new ResolutionRequested until Ctrl-C.
    #[arg(long, conflicts_with = "market")]
    pub watch: bool,
    /// With --watch: first block to scan (default: the head).
    #[arg(long, requires = "watch", value_name = "BLOCK")]
    pub from_block: Option<u64>,
    /// With --market: read the market and judge the round at this block, as the node does
    /// at the block of the market's ResolutionRequested (default: the head). With
    /// --watch every request is judged at its own block.
    #[arg(long, conflicts_with = "watch", value_name = "BLOCK")]
    pub at_block: Option<u64>,
    /// Resolver address to simulate from (default: the address of the configured key).
    #[arg(long, value_name = "ADDR")]
    pub from: Option<Address>,
    /// Print JSON (one object per market; one line per market with --watch).
    #[arg(long)]
    pub json: bool,
}

impl DryRunArgs {
    /// Runs the pipeline and simulates the submission.
    pub async fn run(self) -> anyhow::Result<ExitCode> {
        dry_run_cmd(self).await
    }
}

/// `cresolver dry-run`: runs the pipeline for a market (or every new request with
/// `--watch`) and simulates the submission instead of sending it.
async fn dry_run_cmd(a: DryRunArgs) -> anyhow::Result<ExitCode> {
    let cfg = a.config.load()?;
    let from = match a.from {
        Some(f) => f,
        None => match cresolver_pipeline::wallet::signer(&cfg.signer) {
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
        let rx = tokio_util::sync::CancellationToken::new();
        let tx = rx.clone();
        tokio::spawn(async move {
            shutdown_signal().await;
            tx.cancel();
        });
        eprintln!(
            "dry-run: watching market {market} for ResolutionRequested (simulating as {from}); Ctrl-C to stop"
        );
        let json = a.json;
        std::sync::Arc::new(runner)
            .watch(&cfg, a.from_block, rx, |id, r| match r {
                Ok(rep) if json => match serde_json::to_string(&rep) {
                    Ok(line) => println!("{line}"),
                    Err(e) => eprintln!("market {id}: cannot print the dry-run: {e}"),
                },
                Ok(rep) => println!("{}", cresolver_pipeline::dryrun::render(&rep)),
                Err(e) => eprintln!("market {id}: dry-run failed: {e}"),
            })
            .await?;
        return Ok(ExitCode::SUCCESS);
    }
    let id = a
        .market
        .context("--market N is required (or run with --watch)")?;
    let r = runner.run_at(id.into(), a.at_block).await?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print!("{}", cresolver_pipeline::dryrun::render(&r));
    }
    Ok(if r.would_submit() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
