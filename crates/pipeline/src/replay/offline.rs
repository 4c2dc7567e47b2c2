//! A round replayed from its transcript: the recorded answers and defences through the
//! engine's own evaluation and decision, deterministic and offline.

use super::*;
use cresolver_workers::fanout::ResolveStage;

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
    Failed {
        /// The round's error.
        reason: String,
    },
    /// The round could not be replayed (no transcript, needs `--live`, read error).
    Unavailable {
        /// Why not.
        reason: String,
    },
}

/// The quorum verdict of a replay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QuorumVerdict {
    /// The workflow's quorum rule (`bft`, `majority`, `all`, a number).
    pub rule: String,
    /// Registered workers.
    pub registered: usize,
    /// Valid answers the rule requires.
    pub required: usize,
    /// Valid answers recorded.
    pub valid: usize,
    /// Whether the rule is met.
    pub met: bool,
}

/// A replayed round.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Replayed {
    /// How it ended.
    #[serde(flatten)]
    pub status: ReplayStatus,
    /// The quorum verdict, when the resolve stage was replayed.
    pub quorum: Option<QuorumVerdict>,
    /// The replayed evaluation.
    pub evaluation: Option<Evaluation>,
    /// The 8 scores per registered worker (`None`: non-responder).
    pub scores: Vec<Option<Dimensions>>,
    /// The replayed tally, when the round resolves.
    pub tally: Option<TallyRecord>,
    /// The replayed report bytes, when the round resolves.
    pub report: Option<Bytes>,
    /// What the replay could not reflect, or did differently from the recorded round.
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
    let quorum = quorum_verdict(wf, stage);
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
    let market_id = t.market.market_id;
    if market_id.to_u64().is_err() {
        return Replayed::unavailable("market id does not fit the worker protocol's number");
    }
    let challenges = replayed_challenges(t, wf, stage, &mut notes);

    // The evaluator's input, built by the engine's own function.
    // the recorded round's order of workers in the prompt (its evaluator labels)
    let recorded_order = t.outcome.as_ref().map(|o| o.evaluation.order.clone());
    // The evaluation stage of the engine, with the rubric or the recorded LLM reply as
    // the evaluator (nothing is asked again).
    let order = recorded_order.as_deref().filter(|o| !o.is_empty());
    let evaluator = match replay_evaluator(t, wf) {
        Ok(e) => e,
        Err(reason) => {
            return Replayed::ended(ReplayStatus::Unavailable { reason }, Some(quorum), notes);
        }
    };
    // both evaluators are ready at once (no I/O): the future completes when first polled
    let evaluated = futures::executor::block_on(crate::round::evaluate(
        evaluator.as_ref(),
        market_id,
        &t.question,
        t.reference_time,
        stage,
        &challenges,
        order,
    ));
    let evaluation = match evaluated {
        Ok(e) => e,
        Err(e) => {
            let reason = e.to_string();
            return Replayed::ended(ReplayStatus::Failed { reason }, Some(quorum), notes);
        }
    };
    if let Some(rec) = t.outcome.as_ref().map(|o| &o.evaluation)
        && rec.evaluator != evaluation.evaluator
    {
        notes.push(format!(
            "scored by `{}` (the recorded round was scored by `{}`)",
            evaluation.evaluator, rec.evaluator
        ));
    }
    replayed_decision(t, wf, stage, quorum, evaluation, notes)
}

/// The quorum verdict of `wf`'s rule over the recorded resolve stage.
fn quorum_verdict(wf: &Workflow, stage: &ResolveStage) -> QuorumVerdict {
    let n = stage.results.len();
    let valid = stage.results.iter().filter(|r| r.outcome.is_ok()).count();
    let rule = wf.quorum.rule;
    QuorumVerdict {
        rule: rule.to_string(),
        registered: n,
        required: rule.required(n),
        valid,
        met: rule.is_met(valid, n),
    }
}

/// The defences a replay evaluates: the recorded ones (they answered the recorded
/// texts), none when `wf` disables challenges. Adds a note when the replay cannot
/// evaluate what `wf` would have asked.
fn replayed_challenges(
    t: &Transcript,
    wf: &Workflow,
    stage: &ResolveStage,
    notes: &mut Vec<String>,
) -> Vec<Option<ChallengeOutcome>> {
    let n = stage.results.len();
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
    if wf.challenge.enabled && challenge_texts_differ(t, wf, stage, &challenges) {
        notes.push(
            "the workflow's challenge texts for these answers differ from the recorded ones: the recorded defences are evaluated with the recorded texts (re-asking needs --live)"
                .into(),
        );
    }
    challenges
}

/// Whether `wf`'s challenge texts for the recorded answers differ from the texts an
/// A2A worker was recorded answering.
fn challenge_texts_differ(
    t: &Transcript,
    wf: &Workflow,
    stage: &ResolveStage,
    challenges: &[Option<ChallengeOutcome>],
) -> bool {
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
    stage
        .results
        .iter()
        .zip(challenges)
        .enumerate()
        .any(|(i, (r, c))| match (r.answer(), c) {
            (Some(a), Some(c)) if speaks_a2a(i) => {
                challenges_for(&templates, &t.question, a, &determinations) != c.challenges
            }
            _ => false,
        })
}

/// The evaluator a replay scores with: the rubric, or the recorded LLM reply under
/// `wf`'s fallback. `Err` says why an `llm` workflow cannot be replayed offline.
fn replay_evaluator(t: &Transcript, wf: &Workflow) -> Result<Box<dyn Evaluator>, String> {
    match wf.evaluator.kind {
        EvaluatorKind::Rubric => Ok(Box::new(RubricEvaluator)),
        EvaluatorKind::Llm => {
            let Some(rec) = t.outcome.as_ref().map(|o| &o.evaluation) else {
                return Err("the workflow's evaluator is `llm` but the transcript records no evaluation: replay with --live".into());
            };
            let recorded = RecordedLlm {
                raw_reply: rec.raw_reply.clone(),
                fallback_reason: rec.fallback_reason.clone(),
                attempts: rec.attempts.clone(),
                fallback: wf.evaluator.fallback,
            };
            if !recorded.replayable() {
                return Err(format!(
                    "the workflow's evaluator is `llm` but the recorded round was scored by `{}` without an LLM reply: replay with --live",
                    rec.evaluator
                ));
            }
            Ok(Box::new(recorded))
        }
    }
}

/// The replayed round's end: the engine's decision over the replayed `evaluation`,
/// resolved, or failed when the tally fails.
fn replayed_decision(
    t: &Transcript,
    wf: &Workflow,
    stage: &ResolveStage,
    quorum: QuorumVerdict,
    evaluation: Evaluation,
    notes: Vec<String>,
) -> Replayed {
    let slot_of = evaluation.order.clone();
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
            scores: vec![None; stage.results.len()],
            tally: None,
            report: None,
            notes,
        },
    }
}
