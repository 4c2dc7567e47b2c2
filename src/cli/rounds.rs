//! `cresolver rounds`: the node's stored rounds — list, show, export, retry.

use super::*;
use cresolver_store::{MarketId, RoundKey};

/// A round's state as `--state` takes it: every stage of the store's [`Stage`], by the
/// name the store, the API and the metrics use.
///
/// [`Stage`]: cresolver_store::Stage
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateArg(pub cresolver_store::Stage);

/// Every stage, in the order a round passes them.
const STATES: [StateArg; cresolver_store::Stage::ALL.len()] = {
    let mut out = [StateArg(cresolver_store::Stage::Requested); cresolver_store::Stage::ALL.len()];
    let mut i = 0;
    while i < out.len() {
        out[i] = StateArg(cresolver_store::Stage::ALL[i]);
        i += 1;
    }
    out
};

impl clap::ValueEnum for StateArg {
    fn value_variants<'a>() -> &'a [Self] {
        &STATES
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.0.as_str()))
    }
}

/// `cresolver rounds …`.
#[derive(Debug, Subcommand)]
pub enum RoundsCmd {
    /// List stored rounds, newest first, as a table or JSON (SQLite or PostgreSQL store).
    ///
    /// Filters: --state (repeatable), --market-address, --since / --until (unix seconds
    /// or RFC 3339, on the round's last update), --limit.
    List(ListArgs),
    /// Show one stored round: state, request, submission and its transcript.
    Show(ShowArgs),
    /// Write every stored round's transcript, one JSON file per round, into a directory.
    ///
    /// With --market-address (or chain.market_address in the config), only that market's
    /// rounds are written. Files are named `<market address>-<market id>.json` and hold the transcript (see
    /// docs/transcript.md) with the store record under `round`. Rounds that never reached
    /// discovery have no transcript and are listed, not written.
    Export(ExportArgs),
    /// Run a failed (or unfinished) round again now.
    ///
    /// Asks the running node through its API (POST /resolve on api.listen, with the bearer
    /// token from the env var named by api.token_env): the node reopens a failed round and
    /// runs it at once. When no node answers there, the round is reopened in the store and
    /// the node runs it when it starts (a node that answers without the token set is
    /// refused: it would not see the round until it restarts). A confirmed, finalized or skipped round is run again
    /// only when the chain (chain.rpc_url) says the market is unresolved: a finalized or
    /// skipped one as a new attempt (the old one is kept), a confirmed one by re-sending
    /// its transaction.
    Retry(RetryArgs),
}

impl RoundsCmd {
    /// Runs the command.
    pub async fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            RoundsCmd::List(a) => a.run().await,
            RoundsCmd::Show(a) => a.run().await,
            RoundsCmd::Export(a) => a.run().await,
            RoundsCmd::Retry(a) => a.run().await,
        }
    }
}

impl ListArgs {
    /// Lists the stored rounds the filters select.
    pub async fn run(self) -> anyhow::Result<ExitCode> {
        rounds_list(
            &self.config,
            &self.states,
            self.since.as_deref(),
            self.until.as_deref(),
            self.limit,
            self.json,
        )
        .await
    }
}

impl ShowArgs {
    /// Shows one stored round.
    pub async fn run(self) -> anyhow::Result<ExitCode> {
        rounds_show(&self.config, self.market_id, self.json).await
    }
}

impl ExportArgs {
    /// Writes the stored rounds' transcripts.
    pub async fn run(self) -> anyhow::Result<ExitCode> {
        rounds_export(&self.config, &self.out).await
    }
}

impl RetryArgs {
    /// Runs the round again (through the node, or in the store); an error says what to
    /// check about the config.
    pub async fn run(self) -> anyhow::Result<ExitCode> {
        rounds_retry(&self.config, self.market_id, self.api.clone())
            .await
            .map_err(|e| self.config.explain(e))
    }
}

/// `cresolver rounds list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub config: BaseConfigArgs,
    /// Only rounds in this state (repeatable).
    #[arg(long = "state", value_name = "STATE", value_enum)]
    pub states: Vec<StateArg>,
    /// Only rounds updated at or after this time (unix seconds or RFC 3339).
    #[arg(long, value_name = "TIME")]
    pub since: Option<String>,
    /// Only rounds updated before this time (unix seconds or RFC 3339).
    #[arg(long, value_name = "TIME")]
    pub until: Option<String>,
    /// At most this many rounds.
    #[arg(long, default_value_t = 50)]
    pub limit: usize,
    /// Print JSON (one array) instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `cresolver rounds show`.
#[derive(Debug, Args)]
pub struct ShowArgs {
    #[command(flatten)]
    pub config: BaseConfigArgs,
    /// Market id.
    pub market_id: MarketId,
    /// Print the exported transcript document (JSON) instead of a summary.
    #[arg(long)]
    pub json: bool,
}

/// `cresolver rounds export`.
#[derive(Debug, Args)]
pub struct ExportArgs {
    #[command(flatten)]
    pub config: BaseConfigArgs,
    /// Output directory (created if missing; files in it are overwritten).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

/// `cresolver rounds retry`.
#[derive(Debug, Args)]
pub struct RetryArgs {
    #[command(flatten)]
    pub config: BaseConfigArgs,
    /// Market id.
    pub market_id: MarketId,
    /// Base URL of the node's API (default: http://<api.listen>).
    #[arg(long, value_name = "URL")]
    pub api: Option<String>,
}

/// `cresolver rounds retry`: asks the running node to run the round again, or reopens it
/// in the store for the node to run when it starts; a done round only when the chain
/// says the market is unresolved.
async fn rounds_retry(
    config: &BaseConfigArgs,
    id: MarketId,
    api: Option<String>,
) -> anyhow::Result<ExitCode> {
    let cfg = config.load()?;
    let market = cfg.market()?;
    let store = open_store(&cfg).await?;
    let Some(rec) = store.get(RoundKey::new(market, id)).await? else {
        anyhow::bail!("no round for market {id} on {market} in the store");
    };
    let unresolved = if rec.state.is_resolved() {
        use cresolver_chain::watcher::{ChainWord, judge_request};
        let rpc = cfg.rpc_urls().into_iter().next().unwrap_or_default();
        let provider = cresolver_chain::connect(&rpc).await.map_err(|e| {
            anyhow::anyhow!(
                "{e}: the chain decides whether a {} round is retried",
                rec.state.as_str()
            )
        })?;
        match judge_request(&provider, RoundKey::new(market, id), None).await {
            Ok(ChainWord::Unresolved) => true,
            Ok(ChainWord::Resolved(why)) => anyhow::bail!(
                "the round of market {id} is {} and {why}: there is nothing to retry",
                rec.state.as_str()
            ),
            Err(e) => anyhow::bail!("cannot read market {id} on chain: {e} (try again)"),
        }
    } else {
        false
    };
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
    if token.is_none()
        && !cfg.store.is_postgres()
        && !cfg.api.listen.is_empty()
        && node_answers(&base).await
    {
        // a running node would not see a round reopened in its SQLite store until it
        // restarts (a shared store's claim loop finds it)
        anyhow::bail!(
            "a node is running at {base}: set {} to its API token so that it runs the round of market {id} now (reopening it in the store under a running node would wait for its restart)",
            cfg.api.token_env
        );
    }
    let decision = store
        .manual_request_judged(RoundKey::new(market, id), &rec.workflow, unresolved)
        .await?;
    let now = store.get(RoundKey::new(market, id)).await?.map(|r| r.state);
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

/// Whether a node's API answers `GET /health/live` at `base`.
async fn node_answers(base: &str) -> bool {
    let url = format!("{}/health/live", base.trim_end_matches('/'));
    reqwest::Client::new()
        .get(&url)
        .timeout(std::time::Duration::from_secs(2))
        .send()
        .await
        .is_ok()
}

/// `cresolver rounds show`: one stored round, as a summary or as its exported document.
async fn rounds_show(
    config: &BaseConfigArgs,
    id: MarketId,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let cfg = config.load()?;
    let store = open_store(&cfg).await?;
    let rec = find_round(&cfg, store.as_ref(), id).await?;
    let txs = store.tx_history(rec.key()).await?;
    let past = store.past_attempts(rec.key()).await?;
    if json {
        print_round_document(&rec, &txs, &past)?;
        return Ok(ExitCode::SUCCESS);
    }
    print_round_record(&rec, &past);
    print_transactions(&txs);
    let Ok(doc) = cresolver_pipeline::transcript::export_document(&rec) else {
        println!("transcript: none (the round did not reach discovery)");
        return Ok(ExitCode::SUCCESS);
    };
    let t = Transcript::from_value(doc, Path::new("store"))?;
    print_transcript(&t);
    Ok(ExitCode::SUCCESS)
}

/// The stored round of market `id`: on the configured market contract, or on the one
/// contract of the store that has such a round.
async fn find_round(
    cfg: &NodeConfig,
    store: &dyn RoundStore,
    id: MarketId,
) -> anyhow::Result<cresolver_store::RoundRecord> {
    Ok(match cfg.chain.market_address {
        Some(m) => store
            .get(RoundKey::new(m, id))
            .await?
            .with_context(|| format!("no round for market {id} on {m} in the store"))?,
        None => {
            let mut all: Vec<_> = all_rounds(store)
                .await?
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
    })
}

/// The transaction history of a round, as the store keeps it: each nonce with its attempts.
type TxHistory = [(
    cresolver_store::NonceRecord,
    Vec<cresolver_store::AttemptRecord>,
)];

/// Prints the round's exported transcript document (or its store record alone when it
/// has no transcript yet), with its transactions and earlier attempts, as JSON.
fn print_round_document(
    rec: &cresolver_store::RoundRecord,
    txs: &TxHistory,
    past: &[cresolver_store::PastAttempt],
) -> anyhow::Result<()> {
    let mut doc = match cresolver_pipeline::transcript::export_document(rec) {
        Ok(d) => d,
        // No transcript yet: the store record alone.
        Err(_) => serde_json::json!({
            "round": cresolver_pipeline::transcript::RoundInfo::from(rec)
        }),
    };
    doc["transactions"] =
        serde_json::to_value(cresolver_pipeline::transcript::TransactionRecord::of_history(txs))?;
    if !past.is_empty() {
        doc["previous_attempts"] = serde_json::to_value(past)?;
    }
    println!("{}", serde_json::to_string_pretty(&doc)?);
    Ok(())
}

/// Prints what the store record says: state, attempt, reason, earlier attempts, the
/// request and the submission.
fn print_round_record(rec: &cresolver_store::RoundRecord, past: &[cresolver_store::PastAttempt]) {
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
    for a in past {
        println!(
            "earlier attempt {}: {}{}",
            a.attempt,
            a.state.as_str(),
            a.reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        );
    }
    match (rec.request_tx, rec.request_block) {
        (Some(tx), Some(b)) => println!("request: tx {tx} in block {b}"),
        _ => println!("request: manual"),
    }
    if let Some(tx) = rec.submit_tx {
        println!("submission: tx {tx}");
    }
}

/// Prints each nonce of the round's transactions with its attempts (fees, sent block,
/// which one was mined).
fn print_transactions(txs: &TxHistory) {
    for (n, attempts) in txs {
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
}

/// Prints what the round's transcript says: the question, finality, each worker's
/// answer, the quorum, the evaluation and tally, and the receipt.
fn print_transcript(t: &Transcript) {
    println!("question: {}", t.question);
    println!(
        "transcript: version {}, market read at block {}",
        t.version, t.market.block
    );
    if let Some(f) = &t.finality {
        println!(
            "finality: {}{}{}",
            f.status,
            f.finalized_block
                .map(|b| format!(" (finalized block {b})"))
                .unwrap_or_default(),
            if f.reorgs.is_empty() {
                String::new()
            } else {
                format!(", {} reorg(s) seen and re-sent", f.reorgs.len())
            }
        );
    }
    print_workers(t);
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
}

/// Prints each worker's answer of the resolve stage (with its weight and scores when the
/// round was tallied) and the quorum; nothing when the transcript has no resolve stage.
fn print_workers(t: &Transcript) {
    let Some(stage) = t.resolve_stage() else {
        return;
    };
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
                    w.weight, w.scores.res_quality, w.scores.src_quality, w.scores.analysis_depth
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

/// `cresolver rounds export`: writes each stored round's transcript into `out`, one file
/// per round, and lists the rounds without one.
async fn rounds_export(config: &BaseConfigArgs, out: &Path) -> anyhow::Result<ExitCode> {
    let cfg = config.load()?;
    let store = open_store(&cfg).await?;
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let mut written = 0usize;
    let mut skipped = Vec::new();
    for rec in all_rounds(store.as_ref()).await? {
        if cfg.chain.market_address.is_some_and(|m| m != rec.market) {
            continue;
        }
        match cresolver_pipeline::transcript::export_document(&rec) {
            Ok(doc) => {
                let path = out.join(cresolver_pipeline::transcript::export_file_name(rec.key()));
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

/// A time given as unix seconds or RFC 3339, in unix seconds.
fn parse_time(s: &str) -> anyhow::Result<u64> {
    if let Ok(n) = s.trim().parse::<u64>() {
        return Ok(n);
    }
    let t = time::OffsetDateTime::parse(s.trim(), &time::format_description::well_known::Rfc3339)
        .with_context(|| {
        format!("{s:?} is neither unix seconds nor an RFC 3339 time (e.g. 2026-11-26T12:00:00Z)")
    })?;
    u64::try_from(t.unix_timestamp()).context("a time before 1970")
}

/// Unix seconds as an RFC 3339 time (the number itself when it is out of range).
fn rfc3339(secs: u64) -> String {
    i64::try_from(secs)
        .ok()
        .and_then(|s| time::OffsetDateTime::from_unix_timestamp(s).ok())
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| secs.to_string())
}

/// `cresolver rounds list`: the store keeps the rounds updated within --since/--until
/// (by `updated_at`, whatever their age); the states and the market are filtered here.
async fn rounds_list(
    config: &BaseConfigArgs,
    states: &[StateArg],
    since: Option<&str>,
    until: Option<&str>,
    limit: usize,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let wanted: Vec<cresolver_store::Stage> = states.iter().map(|s| s.0).collect();
    let between = cresolver_store::UpdatedBetween {
        since: since.map(parse_time).transpose()?,
        until: until.map(parse_time).transpose()?,
    };
    let cfg = config.load()?;
    let store = open_store(&cfg).await?;
    let mut out = Vec::new();
    let mut before = None;
    'pages: loop {
        let (page, next) = store.list_summaries_updated(200, before, between).await?;
        for r in page {
            let keep = (wanted.is_empty() || wanted.contains(&r.state))
                && cfg.chain.market_address.is_none_or(|m| m == r.market);
            if keep {
                out.push(r);
                if out.len() >= limit {
                    break 'pages;
                }
            }
        }
        match next {
            Some(n) => before = Some(n),
            None => break,
        }
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<12} {:<10} {:>7} {:<20} {:<25} REASON",
        "MARKET ID", "STATE", "ATTEMPT", "WORKFLOW", "UPDATED"
    );
    for r in &out {
        println!(
            "{:<12} {:<10} {:>7} {:<20} {:<25} {}",
            r.market_id,
            r.state.as_str(),
            r.attempt,
            r.workflow,
            rfc3339(r.updated_at),
            r.reason.as_deref().unwrap_or("")
        );
    }
    if out.is_empty() {
        eprintln!("no stored round matches");
    }
    Ok(ExitCode::SUCCESS)
}
