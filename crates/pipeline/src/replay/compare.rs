//! Comparing a replay with the chain and with the recorded round: workflow parameter
//! changes, differences in outcome, weights and scores.

use super::*;
use cresolver_core::MarketId;
use cresolver_core::RoundKey;

// ─── Workflow changes ───────────────────────────────────────────────────────────────

/// A workflow parameter that differs from the recorded one.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ParamChange {
    /// Dotted key, as in the workflow file (`tally.tie`, `quorum.rule`).
    pub parameter: String,
    /// Its value in the recorded workflow (`null`: absent).
    pub recorded: Value,
    /// Its value in the replayed workflow (`null`: absent).
    pub replayed: Value,
    /// Whether an offline replay reflects the change (timeouts, endpoints and
    /// submission settings need `--live` or do not change the report).
    pub reflected_offline: bool,
}

/// Parameters a transcript replay cannot reflect.
pub(super) const LIVE_ONLY: [&str; 10] = [
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

pub(super) fn flatten(prefix: &str, v: &Value, out: &mut BTreeMap<String, Value>) {
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
    /// The worker, for per-worker differences.
    pub worker: Option<Address>,
    /// The baseline's value.
    pub baseline: String,
    /// The replay's value.
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
    /// The market contract.
    pub market: Address,
    /// The market's id.
    pub market_id: MarketId,
    /// `transcript` or `live`.
    pub source: String,
    /// Where the transcript came from (a file, or the store).
    pub transcript: Option<String>,
    /// The request that started the round, when known.
    pub request: Option<RequestRef>,
    /// What happened on chain.
    pub on_chain: OnChain,
    /// How the replayed round ended.
    pub replayed: Replayed,
    /// Whether the replay ends where the chain did (or the recorded round, offline).
    pub agree: bool,
    /// Why (not) — one line.
    pub verdict: String,
    /// The parameters of the replayed workflow that differ from the recorded one.
    pub workflow_changes: Vec<ParamChange>,
    /// Against the report that went on chain (when known).
    pub differences_vs_chain: Option<Vec<Difference>>,
    /// Against the transcript's recorded outcome (when replayed from one).
    pub differences_vs_transcript: Option<Vec<Difference>>,
    /// Whether the replayed report bytes equal the transcript's, bit for bit.
    pub report_identical: Option<bool>,
    /// The transcript's market compared with the chain's at the request's block.
    pub chain_check: Option<ChainCheck>,
}

impl MarketReplay {
    /// A market that could not be replayed.
    pub fn unavailable(
        market: Address,
        market_id: MarketId,
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
    /// The market contract.
    pub market: Address,
    /// The market's id.
    pub market_id: MarketId,
    /// `transcript` or `live`.
    pub source: &'a str,
    /// Where the transcript came from (a file, or the store).
    pub transcript_name: Option<String>,
    /// The recorded round, the baseline when the chain is not checked.
    pub transcript: Option<&'a Transcript>,
    /// The request that started the round, when known.
    pub request: Option<RequestRef>,
    /// What happened on chain.
    pub on_chain: OnChain,
    /// How the replayed round ended.
    pub replayed: Replayed,
    /// The parameters of the replayed workflow that differ from the recorded one.
    pub workflow_changes: Vec<ParamChange>,
    /// The transcript's market compared with the chain's.
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
    let (agree, verdict) = match &c.replayed.status {
        ReplayStatus::Unavailable { reason } => (false, format!("not replayed: {reason}")),
        _ if !c.on_chain.checked => offline_verdict(
            &c,
            replayed_view.as_ref(),
            differences_vs_transcript.as_deref(),
            report_identical,
        ),
        _ if c.on_chain.resolved => {
            resolved_verdict(&c, replayed_view.as_ref(), differences_vs_chain.as_deref())
        }
        _ => unresolved_verdict(&c.replayed),
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

/// Agreement and verdict when the chain was not checked: the transcript is the
/// baseline (same report, and the confirmed resolution when one is recorded).
fn offline_verdict(
    c: &Compared<'_>,
    replayed_view: Option<&ReportView>,
    differences_vs_transcript: Option<&[Difference]>,
    report_identical: Option<bool>,
) -> (bool, String) {
    let same =
        differences_vs_transcript.is_some_and(|d| d.is_empty()) && report_identical != Some(false);
    let confirmed = c
        .transcript
        .and_then(|t| t.confirmation.as_ref())
        .and_then(|x| x.resolution);
    let conf_ok = match (confirmed, replayed_view) {
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

/// Agreement and verdict for a market resolved on chain: the same resolution, and the
/// same weights and scores when the submitted report is known.
fn resolved_verdict(
    c: &Compared<'_>,
    replayed_view: Option<&ReportView>,
    differences_vs_chain: Option<&[Difference]>,
) -> (bool, String) {
    match (replayed_view, c.on_chain.resolution) {
        (Some(v), Some(r)) if v.resolution != r => (
            false,
            format!(
                "resolved {} on chain, replay says {}",
                yes_no(r),
                yes_no(v.resolution)
            ),
        ),
        (Some(_), _) => match differences_vs_chain {
            Some([]) => (
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
    }
}

/// Agreement and verdict for a market unresolved on chain: the replay agrees when it
/// does not resolve either.
fn unresolved_verdict(replayed: &Replayed) -> (bool, String) {
    if matches!(replayed.status, ReplayStatus::Resolved) {
        (
            false,
            format!("unresolved on chain, replay resolves {}", replayed.label()),
        )
    } else {
        (
            true,
            format!(
                "unresolved on chain, replay ends with {} too",
                replayed.label()
            ),
        )
    }
}

/// Options of a replay run.
pub struct ReplayOptions {
    /// Largest `eth_getLogs` range (halved on refusal).
    pub max_range: u64,
    /// Multicall3 for batched reads (`None`: concurrent calls).
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
                RoundKey::new(t.market.market, t.market.market_id),
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
    let live = crate::live::run_live(
        ctx,
        engine,
        RoundKey::new(market, request.market_id),
        Some(request.block),
    )
    .await?;
    let replayed = Replayed::from_live(&engine.workflow, &live.result, live.snapshot.workers.len());
    let on_chain = onchain_outcome(
        ctx.provider,
        RoundKey::new(market, request.market_id),
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
