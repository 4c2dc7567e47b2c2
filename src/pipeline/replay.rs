//! Replay: re-runs markets that were resolved (or not) and compares with what happened
//! on chain. Never sends a transaction.
//!
//! - **From a transcript** ([`replay_transcript`], deterministic, no network to workers
//!   or an LLM): the recorded answers and challenge responses go through the
//!   workflow's quorum rule, evaluator and tally. The rubric recomputes its scores; the
//!   LLM evaluator's recorded raw reply goes through the same parser (a recorded
//!   fallback goes through the workflow's fallback policy). With the recorded workflow
//!   the report bytes come out bit for bit as recorded; with another workflow
//!   ([`workflow_changes`]) every changed parameter is named.
//! - **Live** ([`replay_live`]): today's workers are asked again, with the market read at
//!   the request's block (historic `eth_call`).
//!
//! The chain side ([`onchain_outcome`]): `getMarket` says whether the market is resolved;
//! the `MarketResolved` log gives the transaction, whose calldata (`resolveMarket`, or a
//! forwarder `report`) gives the weights and scores that went on chain. Log scans
//! ([`scan_logs`]) are chunked and halve their range when the provider refuses one.
//!
//! A market *agrees* when the replay ends where the chain did: the same resolution with
//! the same weights and scores (when the submitted report is known), or no resolution
//! (quorum not met, round failed) for a market that is unresolved.

use crate::chain::bindings::{ICREsolverMarket, IKeystoneForwarder};
use crate::chain::reader::{MarketSnapshot, read_market};
use crate::evaluate::{EvalInput, Evaluation, Fallback, llm, neutral, rubric};
use crate::resolve::report::split_raw_report;
use crate::resolve::{Dimensions, decode_report};
use crate::round::{Engine, RoundError, RoundOutcome};
use crate::transcript::{TallyRecord, Transcript};
use crate::workers::ChallengeOutcome;
use crate::workers::challenge::{challenges_for, votes};
use crate::workers::registry::ProtocolKind;
use crate::workflow::{EvaluatorKind, Workflow};
use alloy::consensus::Transaction as _;
use alloy::primitives::{Address, B256, Bytes, U256};
use alloy::providers::{DynProvider, Provider};
use alloy::rpc::types::{Filter, Log};
use alloy::sol_types::{SolCall, SolEvent};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("RPC error: {0}")]
    Rpc(String),
    #[error("invalid block range: --from-block {from} is after --to-block {to}")]
    BadRange { from: u64, to: u64 },
    #[error(transparent)]
    Live(#[from] crate::live::LiveError),
}

// ─── Log scans ──────────────────────────────────────────────────────────────────────

/// `eth_getLogs` of `filter` over `from..=to` in chunks of at most `max_range` blocks,
/// halving the chunk when the provider says the range is too large.
/// `on_progress(last_block_done)` is called after each chunk.
pub async fn scan_logs(
    provider: &DynProvider,
    filter: &Filter,
    from: u64,
    to: u64,
    max_range: u64,
    on_progress: &mut (dyn FnMut(u64) + Send),
) -> Result<Vec<Log>, ReplayError> {
    if from > to {
        return Err(ReplayError::BadRange { from, to });
    }
    let mut scanner = crate::chain::scan::LogScanner::new(max_range);
    let mut out = Vec::new();
    let mut start = from;
    while start <= to {
        let (end, logs) = scanner
            .next_chunk(provider, filter, start, to)
            .await
            .map_err(ReplayError::Rpc)?;
        out.extend(logs);
        on_progress(end);
        if end == u64::MAX {
            break;
        }
        start = end + 1;
    }
    Ok(out)
}

/// A `ResolutionRequested` log: the first request of a market in a scan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RequestRef {
    pub market_id: U256,
    pub block: u64,
    pub tx: Option<B256>,
}

/// The first `ResolutionRequested` of every market in `from..=to`, in chain order.
pub async fn scan_requests(
    provider: &DynProvider,
    market: Address,
    market_id: Option<U256>,
    from: u64,
    to: u64,
    max_range: u64,
    on_progress: &mut (dyn FnMut(u64) + Send),
) -> Result<Vec<RequestRef>, ReplayError> {
    let mut filter = Filter::new()
        .address(market)
        .event_signature(ICREsolverMarket::ResolutionRequested::SIGNATURE_HASH);
    if let Some(id) = market_id {
        filter = filter.topic1(B256::from(id));
    }
    let logs = scan_logs(provider, &filter, from, to, max_range, on_progress).await?;
    let mut out: Vec<RequestRef> = Vec::new();
    for log in logs {
        let Ok(ev) = ICREsolverMarket::ResolutionRequested::decode_log(&log.inner) else {
            tracing::warn!(tx = ?log.transaction_hash, "undecodable ResolutionRequested log: skipped");
            continue;
        };
        let Some(block) = log.block_number else {
            continue;
        };
        if out.iter().all(|r| r.market_id != ev.data.marketId) {
            out.push(RequestRef {
                market_id: ev.data.marketId,
                block,
                tx: log.transaction_hash,
            });
        }
    }
    Ok(out)
}

// ─── The chain side ─────────────────────────────────────────────────────────────────

/// A report as it went (or would go) on chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReportView {
    pub market_id: U256,
    pub workers: Vec<Address>,
    pub weights: Vec<U256>,
    /// `(resQuality, srcQuality, analysisDepth)` per worker.
    pub dim_scores: Vec<u8>,
    pub resolution: bool,
}

impl ReportView {
    pub fn from_tally(t: &TallyRecord) -> Self {
        Self {
            market_id: t.market_id,
            workers: t.workers.iter().map(|w| w.address).collect(),
            weights: t.workers.iter().map(|w| U256::from(w.weight)).collect(),
            dim_scores: t
                .workers
                .iter()
                .flat_map(|w| {
                    [
                        w.scores.res_quality,
                        w.scores.src_quality,
                        w.scores.analysis_depth,
                    ]
                })
                .collect(),
            resolution: t.resolution,
        }
    }

    /// Decodes CRE report body bytes.
    pub fn from_report_bytes(bytes: &[u8]) -> Option<Self> {
        let r = decode_report(bytes).ok()?;
        Some(Self {
            market_id: r.market_id,
            workers: r.workers,
            weights: r.weights,
            dim_scores: r.dim_scores,
            resolution: r.resolution,
        })
    }

    /// The report a resolving transaction carried: `resolveMarket` calldata, or a
    /// forwarder `report(receiver, rawReport, …)`. `None` for any other call.
    pub fn from_calldata(input: &[u8]) -> Option<Self> {
        if input.starts_with(&ICREsolverMarket::resolveMarketCall::SELECTOR) {
            let c = ICREsolverMarket::resolveMarketCall::abi_decode(input).ok()?;
            return Some(Self {
                market_id: c.marketId,
                workers: c.workers,
                weights: c.weights,
                dim_scores: c.dimScores,
                resolution: c.resolution,
            });
        }
        if input.starts_with(&IKeystoneForwarder::reportCall::SELECTOR) {
            let c = IKeystoneForwarder::reportCall::abi_decode(input).ok()?;
            let (_, body) = split_raw_report(&c.rawReport).ok()?;
            return Self::from_report_bytes(body);
        }
        None
    }
}

/// What happened on chain to a market.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OnChain {
    /// `false` when the chain was not consulted (`--offline`).
    pub checked: bool,
    pub resolved: bool,
    pub resolution: Option<bool>,
    pub tx: Option<B256>,
    pub block: Option<u64>,
    pub resolver: Option<Address>,
    /// The report the resolving transaction carried, when its call is recognised.
    pub report: Option<ReportView>,
    pub note: Option<String>,
}

impl OnChain {
    fn unchecked() -> Self {
        Self {
            checked: false,
            resolved: false,
            resolution: None,
            tx: None,
            block: None,
            resolver: None,
            report: None,
            note: None,
        }
    }

    /// `YES`, `NO`, `unresolved` or `not checked`.
    pub fn label(&self) -> String {
        match (self.checked, self.resolved, self.resolution) {
            (false, _, _) => "not checked".into(),
            (true, true, Some(r)) => yes_no(r).into(),
            (true, true, None) => "resolved".into(),
            (true, false, _) => "unresolved".into(),
        }
    }
}

fn yes_no(b: bool) -> &'static str {
    if b { "YES" } else { "NO" }
}

/// Reads the market's fate: resolved or not (now), and when resolved the
/// `MarketResolved` log (searched from `from_block`) and the report its transaction
/// carried.
pub async fn onchain_outcome(
    provider: &DynProvider,
    market: Address,
    market_id: U256,
    from_block: u64,
    max_range: u64,
) -> Result<OnChain, ReplayError> {
    let m = ICREsolverMarket::new(market, provider.clone())
        .getMarket(market_id)
        .call()
        .await
        .map_err(|e| ReplayError::Rpc(format!("getMarket({market_id}) on {market}: {e}")))?;
    let mut out = OnChain {
        checked: true,
        resolved: m.resolved,
        resolution: m.resolved.then_some(m.resolution),
        ..OnChain::unchecked()
    };
    if !m.resolved {
        return Ok(out);
    }
    let head = provider
        .get_block_number()
        .await
        .map_err(|e| ReplayError::Rpc(format!("eth_blockNumber: {e}")))?;
    let filter = Filter::new()
        .address(market)
        .event_signature(ICREsolverMarket::MarketResolved::SIGNATURE_HASH)
        .topic1(B256::from(market_id));
    let logs = scan_logs(
        provider,
        &filter,
        from_block.min(head),
        head,
        max_range,
        &mut |_| {},
    )
    .await?;
    let Some(log) = logs.first() else {
        out.note = Some(format!(
            "resolved, but no MarketResolved log since block {from_block}: weights not compared"
        ));
        return Ok(out);
    };
    if let Ok(ev) = ICREsolverMarket::MarketResolved::decode_log(&log.inner) {
        out.resolver = Some(ev.data.resolver);
        out.resolution = Some(ev.data.resolution);
    }
    out.block = log.block_number;
    out.tx = log.transaction_hash;
    if let Some(tx) = log.transaction_hash {
        match provider.get_transaction_by_hash(tx).await {
            Ok(Some(t)) => {
                out.report = ReportView::from_calldata(t.input());
                if out.report.is_none() {
                    out.note = Some(format!(
                        "resolved by transaction {tx} through a call that is neither resolveMarket nor a forwarder report: weights not compared"
                    ));
                }
            }
            Ok(None) => out.note = Some(format!("transaction {tx} not found")),
            Err(e) => {
                return Err(ReplayError::Rpc(format!(
                    "eth_getTransactionByHash({tx}): {e}"
                )));
            }
        }
    }
    Ok(out)
}

/// Compares the transcript's market with the chain's at `block`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChainCheck {
    pub block: u64,
    /// The transcript's worker set, order, reputations and question match the chain.
    pub consistent: bool,
    pub differences: Vec<String>,
}

/// Reads the market at `block` (historic `eth_call`) and compares it with the
/// transcript's snapshot. A read failure (e.g. state pruned on a non-archive node) is
/// reported in `differences`, not as an error.
pub async fn chain_check(
    provider: &DynProvider,
    t: &Transcript,
    block: u64,
    multicall: Option<Address>,
) -> ChainCheck {
    let snap = match read_market(
        provider,
        t.market.market,
        t.market.market_id,
        Some(block),
        multicall,
    )
    .await
    {
        Ok(s) => s,
        Err(e) => {
            return ChainCheck {
                block,
                consistent: false,
                differences: vec![format!(
                    "cannot read the market at block {block}: {e} (historic state needs an archive RPC)"
                )],
            };
        }
    };
    let differences = snapshot_differences(t, &snap);
    ChainCheck {
        block,
        consistent: differences.is_empty(),
        differences,
    }
}

fn snapshot_differences(t: &Transcript, snap: &MarketSnapshot) -> Vec<String> {
    let mut d = Vec::new();
    if snap.question != t.market.question {
        d.push("question differs".to_string());
    }
    let rec: Vec<Address> = t.market.workers.iter().map(|w| w.address).collect();
    let chain: Vec<Address> = snap.workers.iter().map(|w| w.address).collect();
    if rec != chain {
        d.push(format!(
            "worker set differs: transcript {} worker(s), chain {} worker(s) (or another order)",
            rec.len(),
            chain.len()
        ));
        return d;
    }
    for (i, (r, c)) in t.market.workers.iter().zip(&snap.workers).enumerate() {
        if r.reputation != c.reputation {
            d.push(format!(
                "worker #{} {}: reputation differs (transcript {:?}, chain {:?})",
                i + 1,
                r.address,
                r.reputation,
                c.reputation
            ));
        }
    }
    d
}

// ─── Replaying a round ──────────────────────────────────────────────────────────────

/// How a replayed round ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum ReplayStatus {
    /// A resolution, with the tally and report.
    Resolved,
    /// Fewer valid answers than the quorum rule needs: the round would fail.
    NoQuorum,
    /// The round would fail (evaluation under a `fail` fallback, a tie under `fail`, …).
    Failed { reason: String },
    /// The round could not be replayed (no transcript, needs `--live`, read error).
    Unavailable { reason: String },
}

/// The quorum verdict of a replay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QuorumVerdict {
    pub rule: String,
    pub registered: usize,
    pub required: usize,
    pub valid: usize,
    pub met: bool,
}

/// A replayed round.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Replayed {
    #[serde(flatten)]
    pub status: ReplayStatus,
    pub quorum: Option<QuorumVerdict>,
    pub evaluation: Option<Evaluation>,
    /// The 8 scores per registered worker (`None`: non-responder).
    pub scores: Vec<Option<Dimensions>>,
    pub tally: Option<TallyRecord>,
    pub report: Option<Bytes>,
    pub notes: Vec<String>,
}

impl Replayed {
    fn ended(status: ReplayStatus, quorum: Option<QuorumVerdict>, notes: Vec<String>) -> Self {
        Self {
            status,
            quorum,
            evaluation: None,
            scores: vec![],
            tally: None,
            report: None,
            notes,
        }
    }

    /// An unavailable replay.
    pub fn unavailable(reason: impl Into<String>) -> Self {
        Self::ended(
            ReplayStatus::Unavailable {
                reason: reason.into(),
            },
            None,
            vec![],
        )
    }

    /// `YES`, `NO`, `no quorum`, `failed`, `-`.
    pub fn label(&self) -> String {
        match (&self.status, &self.tally) {
            (ReplayStatus::Resolved, Some(t)) => yes_no(t.resolution).into(),
            (ReplayStatus::Resolved, None) => "resolved".into(),
            (ReplayStatus::NoQuorum, _) => "no quorum".into(),
            (ReplayStatus::Failed { .. }, _) => "failed".into(),
            (ReplayStatus::Unavailable { .. }, _) => "-".into(),
        }
    }

    /// The replayed report, decoded.
    pub fn view(&self) -> Option<ReportView> {
        self.tally.as_ref().map(ReportView::from_tally)
    }

    /// A replay of a live round.
    pub fn from_live(
        wf: &Workflow,
        result: &Result<RoundOutcome, RoundError>,
        registered: usize,
    ) -> Self {
        match result {
            Ok(o) => Self {
                status: ReplayStatus::Resolved,
                quorum: Some(QuorumVerdict {
                    rule: wf.quorum.rule.to_string(),
                    registered: o.resolve.registered,
                    required: o.resolve.required,
                    valid: o.resolve.valid,
                    met: o.resolve.quorum_met,
                }),
                evaluation: Some(o.evaluation.clone()),
                scores: o.scores.clone(),
                tally: Some(o.tally.clone()),
                report: Some(o.report.clone()),
                notes: vec![],
            },
            Err(RoundError::QuorumNotMet(stage)) => Self::ended(
                ReplayStatus::NoQuorum,
                Some(QuorumVerdict {
                    rule: wf.quorum.rule.to_string(),
                    registered: stage.registered,
                    required: stage.required,
                    valid: stage.valid,
                    met: false,
                }),
                vec![],
            ),
            Err(RoundError::NoWorkers) => Self::ended(
                ReplayStatus::Failed {
                    reason: RoundError::NoWorkers.to_string(),
                },
                Some(QuorumVerdict {
                    rule: wf.quorum.rule.to_string(),
                    registered,
                    required: wf.quorum.rule.required(registered),
                    valid: 0,
                    met: false,
                }),
                vec![],
            ),
            Err(e) => Self::ended(
                ReplayStatus::Failed {
                    reason: e.to_string(),
                },
                None,
                vec![],
            ),
        }
    }
}

/// Re-runs quorum, evaluation and tally from a transcript under `wf` — deterministic,
/// offline. See the module documentation for how each evaluator is replayed.
pub fn replay_transcript(t: &Transcript, wf: &Workflow) -> Replayed {
    let mut notes = Vec::new();
    let Some(stage) = t.resolve_stage() else {
        return Replayed::unavailable("the transcript records no resolve stage");
    };
    let n = stage.results.len();
    let valid = stage.results.iter().filter(|r| r.outcome.is_ok()).count();
    let rule = wf.quorum.rule;
    let quorum = QuorumVerdict {
        rule: rule.to_string(),
        registered: n,
        required: rule.required(n),
        valid,
        met: rule.is_met(valid, n),
    };
    if n == 0 {
        return Replayed::ended(
            ReplayStatus::Failed {
                reason: RoundError::NoWorkers.to_string(),
            },
            Some(quorum),
            notes,
        );
    }
    if !quorum.met {
        return Replayed::ended(ReplayStatus::NoQuorum, Some(quorum), notes);
    }
    let Ok(market_id) = u64::try_from(t.market.market_id) else {
        return Replayed::unavailable("market id does not fit the worker protocol's number");
    };

    // Challenges: the recorded defences (they answered the recorded texts).
    let recorded = t.outcome.as_ref().map(|o| &o.challenges);
    let challenges: Vec<Option<ChallengeOutcome>> = match (wf.challenge.enabled, recorded) {
        (false, _) => vec![None; n],
        (true, Some(c)) => c.clone(),
        (true, None) => {
            notes.push(
                "the recorded round stopped before the challenge stage: evaluated without defences (re-asking needs --live)"
                    .into(),
            );
            vec![None; n]
        }
    };
    if wf.challenge.enabled && !t.workflow.challenge.enabled {
        notes.push(
            "challenges are enabled but the recorded round had none: evaluated without defences (re-asking needs --live)"
                .into(),
        );
    }
    if wf.challenge.enabled {
        let determinations = votes(stage.results.iter().filter_map(|r| r.answer()));
        let templates = wf.challenge.templates();
        // Only A2A workers are sent the template texts; other protocols record what they
        // asked in their own form (a Factagora round 2, a round-table /challenge).
        let speaks_a2a = |i: usize| {
            t.discovery
                .get(i)
                .and_then(|d| d.protocol)
                .is_none_or(|k| k == ProtocolKind::A2a)
        };
        let differ = stage
            .results
            .iter()
            .zip(&challenges)
            .enumerate()
            .any(|(i, (r, c))| match (r.answer(), c) {
                (Some(a), Some(c)) if speaks_a2a(i) => {
                    challenges_for(&templates, &t.question, a, &determinations) != c.challenges
                }
                _ => false,
            });
        if differ {
            notes.push(
                "the workflow's challenge texts for these answers differ from the recorded ones: the recorded defences are evaluated with the recorded texts (re-asking needs --live)"
                    .into(),
            );
        }
    }

    // The evaluator's input, built by the engine's own function.
    // the recorded round's order of workers in the prompt (its evaluator labels)
    let recorded_order = t.outcome.as_ref().map(|o| o.evaluation.order.clone());
    let (input, slot_of) = crate::round::evaluation_input(
        market_id,
        &t.question,
        t.reference_time,
        stage,
        &challenges,
        recorded_order.as_deref().filter(|o| !o.is_empty()),
    );
    let evaluation = match wf.evaluator.kind {
        EvaluatorKind::Rubric => rubric::score_all(&input),
        EvaluatorKind::Llm => match replay_llm(t, wf, &input) {
            Ok(ev) => ev,
            Err(ReplayEnd::Failed(reason)) => {
                return Replayed::ended(ReplayStatus::Failed { reason }, Some(quorum), notes);
            }
            Err(ReplayEnd::Unavailable(reason)) => {
                return Replayed::ended(ReplayStatus::Unavailable { reason }, Some(quorum), notes);
            }
        },
    };
    if let Some(rec) = t.outcome.as_ref().map(|o| &o.evaluation)
        && rec.evaluator != evaluation.evaluator
    {
        notes.push(format!(
            "scored by `{}` (the recorded round was scored by `{}`)",
            evaluation.evaluator, rec.evaluator
        ));
    }
    let reputations: Vec<_> = t.market.workers.iter().map(|w| w.reputation).collect();
    match crate::round::decide(
        t.market.market_id,
        stage,
        &slot_of,
        &evaluation,
        &reputations,
        wf.tally.tie,
    ) {
        Ok(d) => Replayed {
            status: ReplayStatus::Resolved,
            quorum: Some(quorum),
            report: Some(d.report),
            tally: Some(d.tally.clone()),
            evaluation: Some(evaluation),
            scores: d.scores,
            notes,
        },
        Err(e) => Replayed {
            status: ReplayStatus::Failed {
                reason: RoundError::Tally(e).to_string(),
            },
            quorum: Some(quorum),
            evaluation: Some(evaluation),
            scores: vec![None; n],
            tally: None,
            report: None,
            notes,
        },
    }
}

enum ReplayEnd {
    Failed(String),
    Unavailable(String),
}

/// The LLM evaluator, replayed from the recorded reply.
fn replay_llm(t: &Transcript, wf: &Workflow, input: &EvalInput) -> Result<Evaluation, ReplayEnd> {
    let Some(rec) = t.outcome.as_ref().map(|o| &o.evaluation) else {
        return Err(ReplayEnd::Unavailable(
            "the workflow's evaluator is `llm` but the transcript records no evaluation: replay with --live".into(),
        ));
    };
    let fallback = |reason: String| -> Result<Evaluation, ReplayEnd> {
        match wf.evaluator.fallback {
            Fallback::Rubric => {
                let mut ev = rubric::score_all(input);
                ev.fallback_reason = Some(reason);
                ev.attempts = rec.attempts.clone();
                Ok(ev)
            }
            Fallback::Neutral => Ok(neutral(input, Some(reason), rec.attempts.clone())),
            Fallback::Fail => Err(ReplayEnd::Failed(
                crate::evaluate::EvalError::Failed(reason).to_string(),
            )),
        }
    };
    match (&rec.raw_reply, &rec.fallback_reason) {
        (Some(raw), _) => match llm::parse_scores(raw, input) {
            Ok(scores) => Ok(Evaluation {
                order: Vec::new(),
                prompt_cuts: Vec::new(),
                notes: Vec::new(),
                scores,
                evaluator: "llm".into(),
                fallback_reason: None,
                attempts: rec.attempts.clone(),
                raw_reply: Some(raw.clone()),
            }),
            Err(e) => fallback(format!(
                "the recorded LLM reply does not fit the replayed input: {e}"
            )),
        },
        // The LLM failed at the time: the workflow's fallback policy decides.
        (None, Some(reason)) => fallback(reason.clone()),
        (None, None) => Err(ReplayEnd::Unavailable(format!(
            "the workflow's evaluator is `llm` but the recorded round was scored by `{}` without an LLM reply: replay with --live",
            rec.evaluator
        ))),
    }
}

// ─── Workflow changes ───────────────────────────────────────────────────────────────

/// A workflow parameter that differs from the recorded one.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ParamChange {
    /// Dotted key, as in the workflow file (`tally.tie`, `quorum.rule`).
    pub parameter: String,
    pub recorded: Value,
    pub replayed: Value,
    /// Whether an offline replay reflects the change (timeouts, endpoints and
    /// submission settings need `--live` or do not change the report).
    pub reflected_offline: bool,
}

/// Parameters a transcript replay cannot reflect.
const LIVE_ONLY: [&str; 10] = [
    "name",
    "trigger.",
    "resolve.",
    "quorum.grace_ms",
    "challenge.timeout_ms",
    "challenge.max_body_bytes",
    "evaluator.llm.",
    "submit.",
    "challenge.disagreement",
    "challenge.unanimity",
];

/// Every parameter of `now` that differs from `recorded`.
pub fn workflow_changes(recorded: &Workflow, now: &Workflow) -> Vec<ParamChange> {
    let mut a = BTreeMap::new();
    let mut b = BTreeMap::new();
    flatten(
        "",
        &serde_json::to_value(recorded).unwrap_or_default(),
        &mut a,
    );
    flatten("", &serde_json::to_value(now).unwrap_or_default(), &mut b);
    let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    keys.into_iter()
        .filter_map(|k| {
            let (x, y) = (
                a.get(k).cloned().unwrap_or(Value::Null),
                b.get(k).cloned().unwrap_or(Value::Null),
            );
            (x != y).then(|| ParamChange {
                parameter: k.clone(),
                reflected_offline: !LIVE_ONLY.iter().any(|p| k.starts_with(p)),
                recorded: x,
                replayed: y,
            })
        })
        .collect()
}

fn flatten(prefix: &str, v: &Value, out: &mut BTreeMap<String, Value>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, x) in m {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, x, out);
            }
        }
        other => {
            out.insert(prefix.to_string(), other.clone());
        }
    }
}

// ─── Comparing ──────────────────────────────────────────────────────────────────────

/// One difference between the replay and a baseline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Difference {
    /// `resolution`, `outcome`, `workers`, `weight`, `resQuality`, `srcQuality`, `analysisDepth`.
    pub what: String,
    /// 1-based position in registration order, for per-worker differences.
    pub slot: Option<usize>,
    pub worker: Option<Address>,
    pub baseline: String,
    pub replayed: String,
}

/// Differences of `replayed` against `baseline` (both optional reports: `None` means
/// "no resolution").
pub fn differences(
    baseline: Option<&ReportView>,
    replayed: Option<&ReportView>,
) -> Vec<Difference> {
    let top = |what: &str, b: String, r: String| Difference {
        what: what.into(),
        slot: None,
        worker: None,
        baseline: b,
        replayed: r,
    };
    let (b, r) = match (baseline, replayed) {
        (None, None) => return vec![],
        (Some(b), None) => {
            return vec![top(
                "outcome",
                format!("resolved {}", yes_no(b.resolution)),
                "no resolution".into(),
            )];
        }
        (None, Some(r)) => {
            return vec![top(
                "outcome",
                "no resolution".into(),
                format!("resolved {}", yes_no(r.resolution)),
            )];
        }
        (Some(b), Some(r)) => (b, r),
    };
    let mut out = Vec::new();
    if b.resolution != r.resolution {
        out.push(top(
            "resolution",
            yes_no(b.resolution).into(),
            yes_no(r.resolution).into(),
        ));
    }
    if b.workers != r.workers {
        out.push(top(
            "workers",
            format!("{:?}", b.workers),
            format!("{:?}", r.workers),
        ));
        return out;
    }
    const NAMES: [&str; 3] = ["resQuality", "srcQuality", "analysisDepth"];
    for (i, w) in b.workers.iter().enumerate() {
        let (bw, rw) = (b.weights.get(i), r.weights.get(i));
        if bw != rw {
            out.push(Difference {
                what: "weight".into(),
                slot: Some(i + 1),
                worker: Some(*w),
                baseline: bw.map(|x| x.to_string()).unwrap_or_default(),
                replayed: rw.map(|x| x.to_string()).unwrap_or_default(),
            });
        }
        for (d, name) in NAMES.iter().enumerate() {
            let (bs, rs) = (b.dim_scores.get(3 * i + d), r.dim_scores.get(3 * i + d));
            if bs != rs {
                out.push(Difference {
                    what: (*name).into(),
                    slot: Some(i + 1),
                    worker: Some(*w),
                    baseline: bs.map(|x| x.to_string()).unwrap_or_default(),
                    replayed: rs.map(|x| x.to_string()).unwrap_or_default(),
                });
            }
        }
    }
    out
}

/// A replayed market, compared.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MarketReplay {
    pub market: Address,
    pub market_id: U256,
    /// `transcript` or `live`.
    pub source: String,
    /// Where the transcript came from (a file, or the store).
    pub transcript: Option<String>,
    pub request: Option<RequestRef>,
    pub on_chain: OnChain,
    pub replayed: Replayed,
    pub agree: bool,
    /// Why (not) — one line.
    pub verdict: String,
    pub workflow_changes: Vec<ParamChange>,
    /// Against the report that went on chain (when known).
    pub differences_vs_chain: Option<Vec<Difference>>,
    /// Against the transcript's recorded outcome (when replayed from one).
    pub differences_vs_transcript: Option<Vec<Difference>>,
    /// Whether the replayed report bytes equal the transcript's, bit for bit.
    pub report_identical: Option<bool>,
    pub chain_check: Option<ChainCheck>,
}

impl MarketReplay {
    /// A market that could not be replayed.
    pub fn unavailable(
        market: Address,
        market_id: U256,
        request: Option<RequestRef>,
        on_chain: OnChain,
        reason: String,
    ) -> Self {
        Self {
            market,
            market_id,
            source: "none".into(),
            transcript: None,
            request,
            on_chain,
            agree: false,
            verdict: reason.clone(),
            replayed: Replayed::unavailable(reason),
            workflow_changes: vec![],
            differences_vs_chain: None,
            differences_vs_transcript: None,
            report_identical: None,
            chain_check: None,
        }
    }
}

/// What a replayed market is compared with.
pub struct Compared<'a> {
    pub market: Address,
    pub market_id: U256,
    pub source: &'a str,
    pub transcript_name: Option<String>,
    pub transcript: Option<&'a Transcript>,
    pub request: Option<RequestRef>,
    pub on_chain: OnChain,
    pub replayed: Replayed,
    pub workflow_changes: Vec<ParamChange>,
    pub chain_check: Option<ChainCheck>,
}

/// Compares a replay with the chain (and with the transcript) and decides agreement.
pub fn compare(c: Compared<'_>) -> MarketReplay {
    let replayed_view = c.replayed.view();
    let recorded_outcome = c.transcript.and_then(|t| t.outcome.as_ref());
    let differences_vs_transcript = c.transcript.map(|_| {
        differences(
            recorded_outcome
                .map(|o| ReportView::from_tally(&o.tally))
                .as_ref(),
            replayed_view.as_ref(),
        )
    });
    let report_identical = match (recorded_outcome, &c.replayed.report) {
        (Some(o), Some(r)) => Some(o.report == *r),
        (Some(_), None) | (None, Some(_)) if c.transcript.is_some() => Some(false),
        _ => None,
    };
    let differences_vs_chain =
        if c.on_chain.checked && (!c.on_chain.resolved || c.on_chain.report.is_some()) {
            Some(differences(
                c.on_chain.report.as_ref(),
                replayed_view.as_ref(),
            ))
        } else {
            None
        };
    let resolves = matches!(c.replayed.status, ReplayStatus::Resolved);
    let (agree, verdict) = match &c.replayed.status {
        ReplayStatus::Unavailable { reason } => (false, format!("not replayed: {reason}")),
        _ if !c.on_chain.checked => {
            // Offline: the transcript is the baseline.
            let same = differences_vs_transcript
                .as_ref()
                .is_some_and(|d| d.is_empty())
                && report_identical != Some(false);
            let confirmed = c
                .transcript
                .and_then(|t| t.confirmation.as_ref())
                .and_then(|x| x.resolution);
            let conf_ok = match (confirmed, &replayed_view) {
                (Some(r), Some(v)) => r == v.resolution,
                (Some(_), None) => false,
                _ => true,
            };
            if same && conf_ok {
                (
                    true,
                    "replay equals the recorded round (chain not checked)".into(),
                )
            } else {
                (
                    false,
                    "replay differs from the recorded round (chain not checked)".into(),
                )
            }
        }
        _ if c.on_chain.resolved => match (&replayed_view, c.on_chain.resolution) {
            (Some(v), Some(r)) if v.resolution != r => (
                false,
                format!(
                    "resolved {} on chain, replay says {}",
                    yes_no(r),
                    yes_no(v.resolution)
                ),
            ),
            (Some(_), _) => match &differences_vs_chain {
                Some(d) if d.is_empty() => (
                    true,
                    "same resolution, weights and scores as on chain".into(),
                ),
                Some(d) => (
                    false,
                    format!(
                        "same resolution, but {} weight/score difference(s) with the submitted report",
                        d.len()
                    ),
                ),
                None => (
                    true,
                    "same resolution (the submitted weights are unknown)".into(),
                ),
            },
            (None, _) => (
                false,
                format!("resolved on chain, replay ends with {}", c.replayed.label()),
            ),
        },
        _ if resolves => (
            false,
            format!(
                "unresolved on chain, replay resolves {}",
                c.replayed.label()
            ),
        ),
        _ => (
            true,
            format!(
                "unresolved on chain, replay ends with {} too",
                c.replayed.label()
            ),
        ),
    };
    MarketReplay {
        market: c.market,
        market_id: c.market_id,
        source: c.source.into(),
        transcript: c.transcript_name,
        request: c.request,
        on_chain: c.on_chain,
        replayed: c.replayed,
        agree,
        verdict,
        workflow_changes: c.workflow_changes,
        differences_vs_chain,
        differences_vs_transcript,
        report_identical,
        chain_check: c.chain_check,
    }
}

/// Options of a replay run.
pub struct ReplayOptions {
    /// Largest `eth_getLogs` range (halved on refusal).
    pub max_range: u64,
    pub multicall: Option<Address>,
    /// Skip every chain read; compare with the transcript only.
    pub offline: bool,
}

/// Replays one market from its transcript (`workflow`: the workflow to replay under,
/// default the recorded one) and compares with the chain unless `offline`.
pub async fn replay_from_transcript(
    provider: Option<&DynProvider>,
    t: &Transcript,
    name: String,
    workflow: Option<&Workflow>,
    opts: &ReplayOptions,
) -> Result<MarketReplay, ReplayError> {
    let wf = workflow.unwrap_or(&t.workflow);
    let replayed = replay_transcript(t, wf);
    let request = t.request_block().map(|block| RequestRef {
        market_id: t.market.market_id,
        block,
        tx: t
            .request
            .as_ref()
            .and_then(|r| r.tx)
            .or(t.round.as_ref().and_then(|r| r.request_tx)),
    });
    let (on_chain, chain_check) = match provider {
        Some(p) if !opts.offline => {
            let check_block = request.as_ref().map_or(t.market.block, |r| r.block);
            let on_chain = onchain_outcome(
                p,
                t.market.market,
                t.market.market_id,
                check_block,
                opts.max_range,
            )
            .await?;
            (
                on_chain,
                Some(chain_check(p, t, check_block, opts.multicall).await),
            )
        }
        _ => (OnChain::unchecked(), None),
    };
    Ok(compare(Compared {
        market: t.market.market,
        market_id: t.market.market_id,
        source: "transcript",
        transcript_name: Some(name),
        transcript: Some(t),
        request,
        on_chain,
        replayed,
        workflow_changes: workflow
            .map(|w| workflow_changes(&t.workflow, w))
            .unwrap_or_default(),
        chain_check,
    }))
}

/// Replays one market live: today's workers, the market read at `request.block`.
pub async fn replay_live(
    ctx: &crate::live::LiveContext<'_>,
    engine: &Engine,
    market: Address,
    request: RequestRef,
    transcript: Option<(&Transcript, String)>,
    opts: &ReplayOptions,
) -> Result<MarketReplay, ReplayError> {
    let live =
        crate::live::run_live(ctx, engine, market, request.market_id, Some(request.block)).await?;
    let replayed = Replayed::from_live(&engine.workflow, &live.result, live.snapshot.workers.len());
    let on_chain = onchain_outcome(
        ctx.provider,
        market,
        request.market_id,
        request.block,
        opts.max_range,
    )
    .await?;
    let (t, name) = match transcript {
        Some((t, n)) => (Some(t), Some(n)),
        None => (None, None),
    };
    Ok(compare(Compared {
        market,
        market_id: request.market_id,
        source: "live",
        transcript_name: name,
        transcript: t,
        request: Some(request),
        on_chain,
        replayed,
        workflow_changes: t
            .map(|t| workflow_changes(&t.workflow, &engine.workflow))
            .unwrap_or_default(),
        chain_check: None,
    }))
}

// ─── Output ─────────────────────────────────────────────────────────────────────────

/// The whole run, for `--json`.
#[derive(Debug, Clone, Serialize)]
pub struct ReplaySummary {
    pub markets: Vec<MarketReplay>,
    pub all_agree: bool,
}

impl ReplaySummary {
    pub fn new(markets: Vec<MarketReplay>) -> Self {
        Self {
            all_agree: markets.iter().all(|m| m.agree),
            markets,
        }
    }
}

fn short_diffs(d: &[Difference], weights: bool) -> String {
    let parts: Vec<String> = d
        .iter()
        .filter(|x| (x.what == "weight") == weights && x.slot.is_some())
        .map(|x| {
            let slot = x.slot.unwrap_or(0);
            if weights {
                format!("#{slot} {}→{}", x.baseline, x.replayed)
            } else {
                let dim = match x.what.as_str() {
                    "resQuality" => "res",
                    "srcQuality" => "src",
                    _ => "depth",
                };
                format!("#{slot} {dim} {}→{}", x.baseline, x.replayed)
            }
        })
        .collect();
    if parts.is_empty() {
        "=".into()
    } else {
        parts.join(", ")
    }
}

/// The table: market, on-chain outcome, replayed outcome, agree?, weight and score
/// differences (against the submitted report, else the transcript), report bytes;
/// then one line of detail per market that needs it.
pub fn render_table(s: &ReplaySummary) -> String {
    let header = [
        "MARKET", "ON CHAIN", "REPLAYED", "AGREE", "WEIGHTS", "SCORES", "REPORT",
    ];
    let mut rows: Vec<[String; 7]> = Vec::new();
    for m in &s.markets {
        let diffs = m
            .differences_vs_chain
            .as_ref()
            .or(m.differences_vs_transcript.as_ref());
        let (w, sc) = match diffs {
            Some(d) if d.iter().any(|x| x.what == "workers") => {
                ("worker set".to_string(), "-".to_string())
            }
            Some(d) if m.replayed.tally.is_some() => (short_diffs(d, true), short_diffs(d, false)),
            _ => ("-".into(), "-".into()),
        };
        let report = match (m.report_identical, m.source.as_str()) {
            (Some(true), _) => "identical".to_string(),
            (Some(false), _) => "differs".to_string(),
            (None, "none") => "no transcript".to_string(),
            _ => "-".to_string(),
        };
        rows.push([
            m.market_id.to_string(),
            m.on_chain.label(),
            m.replayed.label(),
            if m.agree { "yes" } else { "NO" }.to_string(),
            w,
            sc,
            report,
        ]);
    }
    let mut widths = header.map(str::len);
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    let line = |cells: Vec<&str>, out: &mut String| {
        let mut l = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                l.push_str(c);
            } else {
                let _ = write!(l, "{c:<w$}  ", w = widths[i]);
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(header.to_vec(), &mut out);
    for r in &rows {
        line(r.iter().map(String::as_str).collect(), &mut out);
    }
    for m in &s.markets {
        let mut details = vec![m.verdict.clone()];
        for c in &m.workflow_changes {
            details.push(format!(
                "workflow parameter `{}` changed: {} → {}{}",
                c.parameter,
                c.recorded,
                c.replayed,
                if c.reflected_offline || m.source == "live" {
                    ""
                } else {
                    " (not reflected by a transcript replay)"
                }
            ));
        }
        if let Some(d) = &m.differences_vs_transcript
            && m.differences_vs_chain.is_some()
            && !d.is_empty()
        {
            details.push(format!(
                "{} difference(s) with the transcript's recorded tally",
                d.len()
            ));
        }
        if let Some(d) = m
            .differences_vs_chain
            .as_ref()
            .or(m.differences_vs_transcript.as_ref())
        {
            for x in d.iter().filter(|x| x.slot.is_none()) {
                details.push(format!("{}: {} → {}", x.what, x.baseline, x.replayed));
            }
        }
        if let ReplayStatus::Failed { reason } = &m.replayed.status {
            details.push(format!("replayed round fails: {reason}"));
        }
        details.extend(m.replayed.notes.iter().cloned());
        if let Some(n) = &m.on_chain.note {
            details.push(n.clone());
        }
        if let Some(c) = &m.chain_check {
            details.extend(
                c.differences
                    .iter()
                    .map(|d| format!("chain at block {}: {d}", c.block)),
            );
        }
        let _ = writeln!(out, "\nmarket {} ({}):", m.market_id, m.market);
        for d in details {
            let _ = writeln!(out, "  - {d}");
        }
    }
    let agree = s.markets.iter().filter(|m| m.agree).count();
    let _ = writeln!(
        out,
        "\n{agree} of {} market(s) agree with the chain",
        s.markets.len()
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(weights: &[u64], scores: &[u8], resolution: bool) -> ReportView {
        ReportView {
            market_id: U256::from(1),
            workers: (1..=weights.len() as u8)
                .map(Address::repeat_byte)
                .collect(),
            weights: weights.iter().map(|w| U256::from(*w)).collect(),
            dim_scores: scores.to_vec(),
            resolution,
        }
    }

    #[test]
    fn differences_name_worker_and_field() {
        let a = view(&[100, 50], &[1, 2, 3, 4, 5, 6], true);
        let b = view(&[100, 60], &[1, 2, 3, 4, 9, 6], false);
        let d = differences(Some(&a), Some(&b));
        let what: Vec<(&str, Option<usize>)> =
            d.iter().map(|x| (x.what.as_str(), x.slot)).collect();
        assert_eq!(
            what,
            vec![
                ("resolution", None),
                ("weight", Some(2)),
                ("srcQuality", Some(2))
            ]
        );
        assert!(differences(Some(&a), Some(&a)).is_empty());
        assert_eq!(differences(Some(&a), None)[0].what, "outcome");
    }

    #[test]
    fn workflow_changes_name_the_parameter() {
        let a = Workflow::default_named("x");
        let mut b = a.clone();
        b.tally.tie = crate::resolve::TieRule::No;
        b.resolve.timeout_ms = 5;
        let c = workflow_changes(&a, &b);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].parameter, "resolve.timeout_ms");
        assert!(!c[0].reflected_offline);
        assert_eq!(c[1].parameter, "tally.tie");
        assert_eq!(c[1].recorded, serde_json::json!("yes"));
        assert!(c[1].reflected_offline);
    }

    #[test]
    fn calldata_decoding() {
        let call = ICREsolverMarket::resolveMarketCall {
            marketId: U256::from(3),
            workers: vec![Address::repeat_byte(1)],
            weights: vec![U256::from(7)],
            dimScores: vec![1, 2, 3],
            resolution: true,
        };
        let v = ReportView::from_calldata(&call.abi_encode()).unwrap();
        assert_eq!(v.weights, vec![U256::from(7)]);
        assert!(ReportView::from_calldata(&[1, 2, 3, 4]).is_none());
    }
}
