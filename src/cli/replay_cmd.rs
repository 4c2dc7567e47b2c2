//! `cresolver replay`: re-run historical markets from transcripts (or live) and compare
//! with what happened on chain.

use super::*;
use cresolver_pipeline::dispatch::{Concurrency, dispatch};
use cresolver_store::RoundKey;

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("markets").required(true).args(["transcript", "market", "from_block"])))]
pub struct ReplayArgs {
    #[command(flatten)]
    pub config: BaseConfigArgs,
    /// Replay the round recorded in this transcript file (from `cresolver rounds export`).
    #[arg(long, value_name = "FILE")]
    pub transcript: Option<PathBuf>,
    /// Replay this market id of the configured market contract.
    #[arg(long, value_name = "N")]
    pub market: Option<U256>,
    /// Replay every market whose resolution was requested from this block on.
    #[arg(long, value_name = "A")]
    pub from_block: Option<u64>,
    /// Last block of the scan (default: the head). Also bounds the request search of --market.
    #[arg(long, value_name = "B")]
    pub to_block: Option<u64>,
    /// Replay under this workflow file instead of the recorded one; every changed
    /// parameter is listed (for --live without a transcript: the workflow to run).
    #[arg(long, short = 'w', value_name = "FILE")]
    pub workflow: Option<PathBuf>,
    /// Ask today's workers (and the LLM, if the workflow uses one) instead of using the
    /// recorded answers.
    #[arg(long, conflicts_with = "offline")]
    pub live: bool,
    /// Directory of exported transcripts to replay --market / ranges from (default: the
    /// node's store in the data dir).
    #[arg(long, value_name = "DIR")]
    pub transcripts: Option<PathBuf>,
    /// With --transcript: read nothing from the chain and compare with the recorded round only.
    #[arg(long, requires = "transcript")]
    pub offline: bool,
    /// Print JSON instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// The transcripts `replay --market/--from-block` can use: exported files, or the store.
pub enum TranscriptSource {
    /// The transcripts of a directory, each with its file name.
    Files(Vec<(Transcript, String)>),
    /// The node's SQLite store, and the path of its file.
    Store(cresolver_store::SqliteStore, PathBuf),
    /// Neither a directory nor a store: no market has a transcript.
    None,
}

impl TranscriptSource {
    /// The transcripts of `dir` (every `.json` file, in name order), else the store in the
    /// data dir of `cfg` if there is one.
    pub fn open(dir: Option<&PathBuf>, cfg: &NodeConfig) -> anyhow::Result<Self> {
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
            return Ok(Self::Store(
                cresolver_store::SqliteStore::open(&cfg.node.data_dir)?,
                db,
            ));
        }
        Ok(Self::None)
    }

    /// The transcript of market `id` on `market`, with the name of where it comes from;
    /// `None` when the source has none (a stored round without an outcome has none).
    pub async fn get(&self, round: RoundKey) -> anyhow::Result<Option<(Transcript, String)>> {
        match self {
            Self::Files(files) => Ok(files.iter().find(|(t, _)| t.market.key() == round).cloned()),
            Self::Store(store, db) => {
                let Some(rec) = cresolver_store::Rounds::get(store, round).await? else {
                    return Ok(None);
                };
                if rec.outcome.is_none() {
                    return Ok(None);
                }
                let name = format!("{} (round {})", db.display(), round.id);
                let doc = cresolver_pipeline::transcript::export_document(&rec)?;
                Ok(Some((Transcript::from_value(doc, Path::new(&name))?, name)))
            }
            Self::None => Ok(None),
        }
    }

    /// Where the transcripts come from, for messages.
    pub fn describe(&self) -> String {
        match self {
            Self::Files(f) => format!("{} transcript file(s)", f.len()),
            Self::Store(_, db) => format!("the store {}", db.display()),
            Self::None => {
                "no transcript source (no --transcripts and no store in the data dir)".into()
            }
        }
    }
}

impl ReplayArgs {
    /// Runs the replay; an error is printed with what to check (exit status 2).
    pub async fn run(self) -> anyhow::Result<ExitCode> {
        let base = self.config.clone();
        match replay_cmd(self).await {
            Ok(code) => Ok(code),
            Err(e) => {
                eprintln!("error: {:#}", base.explain(e));
                Ok(ExitCode::from(2))
            }
        }
    }
}

/// `cresolver replay`: replays one transcript file, or the markets of the configured
/// contract (one id, or every request of a block range), and prints how each replay
/// compares with the chain; fails when any of them disagrees.
async fn replay_cmd(a: ReplayArgs) -> anyhow::Result<ExitCode> {
    let cfg = a.config.load()?;
    let wf_override = a.workflow.as_deref().map(Workflow::load).transpose()?;
    let opts = ReplayOptions {
        max_range: cfg.chain.max_block_range,
        multicall: cfg.chain.multicall_address,
        offline: a.offline,
    };
    let markets = if let Some(path) = &a.transcript {
        vec![replay_transcript_file(&a, &cfg, path, wf_override.as_ref(), &opts).await?]
    } else {
        replay_markets(&a, cfg, wf_override, opts).await?
    };
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

/// `replay --transcript FILE`: the recorded round replayed offline, against the chain
/// (which must be the chain it was recorded on), or live (`--live`).
async fn replay_transcript_file(
    a: &ReplayArgs,
    cfg: &NodeConfig,
    path: &Path,
    wf_override: Option<&Workflow>,
    opts: &ReplayOptions,
) -> anyhow::Result<MarketReplay> {
    let t = Transcript::load(path)?;
    let name = path.display().to_string();
    if a.offline {
        return Ok(replay::replay_from_transcript(None, &t, name, wf_override, opts).await?);
    }
    let (provider, chain_id) = connect(cfg).await?;
    if let Some(c) = t.chain_id {
        anyhow::ensure!(
            c == chain_id,
            "transcript {name} was recorded on chain {c} but the RPC {} is chain {chain_id}",
            endpoints(cfg)
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
        let wf = wf_override.cloned().unwrap_or_else(|| t.workflow.clone());
        live_replay(
            &provider,
            cfg,
            wf,
            t.market.market,
            request,
            Some((&t, name)),
            opts,
        )
        .await
    } else {
        Ok(replay::replay_from_transcript(Some(&provider), &t, name, wf_override, opts).await?)
    }
}

/// `replay --market N` or `replay --from-block A`: finds the requests to replay on the
/// configured market contract and replays each of them.
async fn replay_markets(
    a: &ReplayArgs,
    cfg: NodeConfig,
    wf_override: Option<Workflow>,
    opts: ReplayOptions,
) -> anyhow::Result<Vec<MarketReplay>> {
    let market = cfg.market()?;
    let source = TranscriptSource::open(a.transcripts.as_ref(), &cfg)?;
    let (provider, chain_id) = connect(&cfg).await?;
    let head = provider
        .get_block_number()
        .await
        .context("eth_blockNumber")?;
    let to = a.to_block.unwrap_or(head).min(head);
    let scan = RequestScan {
        provider: &provider,
        cfg: &cfg,
        market,
        to,
    };
    let requests = match a.market {
        Some(id) => scan.of_market(id, a.from_block, &source).await?,
        None => scan.of_range(a.from_block, head, a.json, &source).await?,
    };
    let ctx = std::sync::Arc::new(MarketsReplay {
        provider,
        cfg,
        source,
        wf_override,
        opts,
        market,
        chain_id,
        live: a.live,
    });
    ctx.replay_all(requests).await
}

/// Where the requests of a `--market` / range replay are searched: the market contract
/// on the chain, up to block `to`.
struct RequestScan<'a> {
    provider: &'a DynProvider,
    cfg: &'a NodeConfig,
    market: Address,
    to: u64,
}

impl RequestScan<'_> {
    /// The request of market `id`: the one its transcript recorded, or else the
    /// ResolutionRequested events found from `from_block` (or chain.start_block) on.
    async fn of_market(
        &self,
        id: U256,
        from_block: Option<u64>,
        source: &TranscriptSource,
    ) -> anyhow::Result<Vec<replay::RequestRef>> {
        let (market, to) = (self.market, self.to);
        // With a transcript, its request (a manual one: the block the node read at).
        let known = source
            .get(RoundKey::new(market, id))
            .await?
            .map(|(t, _)| replay::RequestRef {
                market_id: id.into(),
                block: t.request_block().unwrap_or(t.market.block),
                tx: t.request.as_ref().and_then(|r| r.tx),
            });
        if let Some(r) = known {
            return Ok(vec![r]);
        }
        let from = from_block.or(self.cfg.chain.start_block).unwrap_or(0);
        let pb = progress(to.saturating_sub(from) + 1, "searching the request");
        let found = replay::scan_requests(
            self.provider,
            market,
            Some(id.into()),
            from,
            to,
            self.cfg.chain.max_block_range,
            &mut |done| pb.set_position(done.saturating_sub(from) + 1),
        )
        .await?;
        pb.finish_and_clear();
        anyhow::ensure!(
            !found.is_empty(),
            "no ResolutionRequested for market {id} on {market} in blocks {from}..{to}"
        );
        Ok(found)
    }

    /// Every request of the blocks `from_block` (default 0) to `to`; unless `json`, says
    /// on stderr how many were found and where their transcripts come from.
    async fn of_range(
        &self,
        from_block: Option<u64>,
        head: u64,
        json: bool,
        source: &TranscriptSource,
    ) -> anyhow::Result<Vec<replay::RequestRef>> {
        let to = self.to;
        let from = from_block.unwrap_or(0);
        anyhow::ensure!(
            from <= to,
            "--from-block {from} is after --to-block {to} (the head is {head})"
        );
        let pb = progress(to - from + 1, "scanning blocks");
        let found = replay::scan_requests(
            self.provider,
            self.market,
            None,
            from,
            to,
            self.cfg.chain.max_block_range,
            &mut |done| pb.set_position(done.saturating_sub(from) + 1),
        )
        .await?;
        pb.finish_and_clear();
        if !json {
            eprintln!(
                "{} market(s) requested in blocks {from}..{to}; transcripts from {}",
                found.len(),
                source.describe()
            );
        }
        Ok(found)
    }
}

/// How many markets a range replay runs at once.
const REPLAY_CONCURRENCY: usize = 4;

/// What every market of a `--market` / range replay shares.
struct MarketsReplay {
    provider: DynProvider,
    cfg: NodeConfig,
    source: TranscriptSource,
    wf_override: Option<Workflow>,
    opts: ReplayOptions,
    market: Address,
    chain_id: u64,
    live: bool,
}

impl MarketsReplay {
    /// Replays every request, a few at a time: each requested market is a job for the
    /// one dispatcher, and the comparison with the chain is the sink. The results keep
    /// the order of the requests.
    async fn replay_all(
        self: std::sync::Arc<Self>,
        requests: Vec<replay::RequestRef>,
    ) -> anyhow::Result<Vec<MarketReplay>> {
        // A few at a time (each reads the chain, --live asks workers).
        let pb = progress(requests.len() as u64, "replaying markets");
        let (jobs_tx, jobs_rx) = tokio::sync::mpsc::channel(REPLAY_CONCURRENCY);
        let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
        let asked = requests.len();
        let feed = tokio::spawn(async move {
            for job in requests.into_iter().enumerate() {
                if jobs_tx.send(job).await.is_err() {
                    return;
                }
            }
        });
        let bar = pb.clone();
        dispatch(
            jobs_rx,
            Concurrency::AtMost(REPLAY_CONCURRENCY),
            std::future::pending(),
            move |(i, req): (usize, replay::RequestRef)| {
                let (ctx, done, bar) = (self.clone(), done_tx.clone(), bar.clone());
                async move {
                    let r = ctx.replay_one(req).await;
                    bar.inc(1);
                    let _ = done.send((i, r));
                }
            },
        )
        .await;
        let _ = feed.await;
        let mut results: Vec<_> = std::iter::from_fn(|| done_rx.try_recv().ok()).collect();
        results.sort_by_key(|(i, _)| *i);
        // a job that panicked sends nothing: never print a table missing a market
        anyhow::ensure!(
            results.len() == asked,
            "{} of {asked} market replay(s) ended without a result (see the log above)",
            asked - results.len()
        );
        let mut markets = Vec::with_capacity(asked);
        for (_, r) in results {
            markets.push(r?);
        }
        pb.finish_and_clear();
        Ok(markets)
    }

    /// One requested market: replayed live, or from its transcript, or marked
    /// unavailable with the reason; then compared with the chain.
    async fn replay_one(&self, req: replay::RequestRef) -> anyhow::Result<MarketReplay> {
        let (provider, market, chain_id, opts) =
            (&self.provider, self.market, self.chain_id, &self.opts);
        let id = req.market_id;
        let t = self.source.get(RoundKey::new(market, id)).await?;
        let mismatch = t.as_ref().and_then(|(t, name)| {
            t.chain_id
                .filter(|c| *c != chain_id)
                .map(|c| (c, name.clone()))
        });
        Ok(if let Some((c, name)) = mismatch {
            let on_chain = replay::onchain_outcome(
                provider,
                RoundKey::new(market, id),
                req.block,
                opts.max_range,
            )
            .await?;
            MarketReplay::unavailable(
                market,
                id,
                Some(req),
                on_chain,
                format!("transcript {name} was recorded on chain {c}, the RPC is chain {chain_id}"),
            )
        } else if self.live {
            let wf = match (&self.wf_override, &t) {
                (Some(w), _) => w.clone(),
                (None, Some((t, _))) => t.workflow.clone(),
                (None, None) => {
                    let p = self
                        .cfg
                        .node
                        .workflows
                        .first()
                        .context("no workflow configured: pass --workflow FILE")?;
                    Workflow::load(p)?
                }
            };
            let tr = t.as_ref().map(|(t, n)| (t, n.clone()));
            live_replay(provider, &self.cfg, wf, market, req, tr, opts).await?
        } else if let Some((t, name)) = &t {
            replay::replay_from_transcript(
                Some(provider),
                t,
                name.clone(),
                self.wf_override.as_ref(),
                opts,
            )
            .await?
        } else {
            let on_chain = replay::onchain_outcome(
                provider,
                RoundKey::new(market, id),
                req.block,
                opts.max_range,
            )
            .await?;
            MarketReplay::unavailable(
                market,
                id,
                Some(req),
                on_chain,
                format!(
                    "no transcript for market {id} in {} (export with `cresolver rounds export`, point --transcripts at them, or use --live)",
                    self.source.describe()
                ),
            )
        })
    }
}

/// Replays a market live: today's workers of `workflow` asked about `request`, the market
/// read at the request's block, compared with the chain (and with `transcript`, if given).
pub async fn live_replay(
    provider: &DynProvider,
    cfg: &NodeConfig,
    workflow: Workflow,
    market: Address,
    request: replay::RequestRef,
    transcript: Option<(&Transcript, String)>,
    opts: &ReplayOptions,
) -> anyhow::Result<MarketReplay> {
    let discovery = cresolver_pipeline::stages::discovery_config(cfg)?;
    let net = discovery.net_policy();
    let engine = Engine::new(workflow, &net)?;
    let http = net.http_client();
    let ctx = LiveContext {
        provider,
        multicall: cfg.chain.multicall_address,
        discovery: &discovery,
        http: &http,
    };
    Ok(replay::replay_live(&ctx, &engine, market, request, transcript, opts).await?)
}
