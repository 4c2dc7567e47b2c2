//! A round, end to end without the chain: fan out the question under quorum, challenge
//! the responders, evaluate, tally, encode the report. The node, replay and dry-run all
//! drive rounds through [`Engine::run`]. What a round has passed ([`RoundProgress`]:
//! answers, defences, evaluation, ratifying votes) is handed to the caller after each
//! stage, and a round given its recorded progress continues from there without asking
//! its workers or the LLM again.

use crate::workflow::{EvaluatorKind, Workflow};
use alloy::primitives::{Address, Bytes, U256};
use cresolver_core::tally::Vote;
use cresolver_core::{Dimensions, Reputation, TallyError, TallyOutcome, TallyWorker, tally};
use cresolver_evaluate::{
    EvalError, EvalInput, EvalWorker, Evaluation, Evaluator, LlmConfig, LlmEvaluator,
    RubricEvaluator,
};
pub use cresolver_store::Stage;
use cresolver_workers::fanout::{
    RatifyResult, ResolveStage, WorkerSlot, challenge_stage, ratify_stage, resolve_stage,
};
use cresolver_workers::{
    ChallengeOutcome, ResolveRequest, StageClient, StageLimits, WorkerFailure,
};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

/// What a round is asked to resolve.
#[derive(Debug, Clone)]
pub struct RoundInput {
    pub market_id: u64,
    pub question: String,
    pub deadline: Option<u64>,
    /// Unix seconds the round is judged at (the request's block time).
    pub reference_time: u64,
    /// Every registered worker, in registration order.
    pub workers: Vec<WorkerSlot>,
    /// Reputation per worker, aligned with `workers`.
    pub reputations: Vec<Reputation>,
}

/// The stages a round has passed, as the caller persists them (see
/// [`Engine::run_resumable`]). Each stage is recorded only once it is complete.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RoundProgress {
    /// The resolve stage, recorded once it met quorum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolve: Option<ResolveStage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub challenges: Option<Vec<Option<ChallengeOutcome>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evaluation: Option<Evaluation>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ratification: Option<Vec<RatifyResult>>,
}

impl RoundProgress {
    /// Whether this progress belongs to a round over `input`'s workers (same addresses
    /// in the same order, and every recorded stage of that length).
    pub fn fits(&self, input: &RoundInput) -> bool {
        let n = input.workers.len();
        let same_workers = |addrs: &mut dyn Iterator<Item = Address>| {
            addrs.eq(input.workers.iter().map(|w| w.address))
        };
        self.resolve
            .as_ref()
            .is_none_or(|r| same_workers(&mut r.results.iter().map(|r| r.address)))
            && self.challenges.as_ref().is_none_or(|c| c.len() == n)
            && (self.resolve.is_some() || self.challenges.is_none())
            && (self.challenges.is_some() || self.evaluation.is_none())
    }

    /// The last stage this progress passed (`None`: not even the resolve stage).
    /// A ratification belongs to the evaluated stage.
    pub fn stage(&self) -> Option<Stage> {
        if self.evaluation.is_some() || self.ratification.is_some() {
            Some(Stage::Evaluated)
        } else if self.challenges.is_some() {
            Some(Stage::Challenged)
        } else if self.resolve.is_some() {
            Some(Stage::Answered)
        } else {
            None
        }
    }
}

/// Everything a finished round saw and decided (also what a transcript records).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoundOutcome {
    pub resolve: ResolveStage,
    /// Per worker (slot order): its defence, or `None` when it was not challenged.
    pub challenges: Vec<Option<ChallengeOutcome>>,
    /// Scores per worker (slot order); `None` for non-responders.
    pub scores: Vec<Option<Dimensions>>,
    pub evaluation: Evaluation,
    pub tally: TallyOutcome,
    pub report: Bytes,
    /// Ratifying votes on the outcome (`challenge.ratify`, protocols that have one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ratification: Vec<RatifyResult>,
}

impl RoundOutcome {
    /// The worker calls of the round as `(stage, outcome)` metric labels: one per resolve
    /// result and one per challenged worker (workers not challenged are not counted).
    pub fn worker_calls(&self) -> impl Iterator<Item = (&'static str, &'static str)> + '_ {
        let resolve = self.resolve.results.iter().map(|r| {
            let label = match &r.outcome {
                Ok(_) => "ok",
                Err(f) => f.kind(),
            };
            ("resolve", label)
        });
        let challenge = self
            .challenges
            .iter()
            .flatten()
            .map(|c| ("challenge", c.failure.as_ref().map_or("ok", |f| f.kind())));
        resolve.chain(challenge)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RoundError {
    #[error("the market has no registered workers")]
    NoWorkers,
    #[error("{}", quorum_message(.0))]
    QuorumNotMet(Box<ResolveStage>),
    #[error(transparent)]
    Evaluation(#[from] EvalError),
    #[error("tally failed: {0}")]
    Tally(#[from] TallyError),
    #[error("worker list and reputation list differ in length ({workers} vs {reputations})")]
    Misaligned { workers: usize, reputations: usize },
    #[error("the round's progress could not be stored: it stopped before its next stage")]
    NotPersisted,
}

fn quorum_message(stage: &ResolveStage) -> String {
    let mut s = format!(
        "quorum not met: {} of {} registered workers answered validly, {} required",
        stage.valid, stage.registered, stage.required
    );
    for r in &stage.results {
        if let Err(f) = &r.outcome {
            let _ = write!(s, "; {}: {f}", r.address);
        }
    }
    s
}

/// Failures of a stage, per worker, for reports.
pub fn failures(stage: &ResolveStage) -> Vec<(Address, WorkerFailure)> {
    stage
        .results
        .iter()
        .filter_map(|r| r.outcome.clone().err().map(|f| (r.address, f)))
        .collect()
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(
        "environment variable {0} (named by evaluator.llm.api_key_env) is not set: export it, or remove api_key_env for an endpoint without auth"
    )]
    MissingApiKey(String),
    #[error("evaluator.llm.base_url: {0}")]
    BadUrl(String),
}

/// Runs rounds of one workflow. Cheap to share across tasks (`Arc`).
pub struct Engine {
    pub workflow: Workflow,
    resolve_client: StageClient,
    challenge_client: StageClient,
    evaluator: Arc<dyn Evaluator>,
}

impl Engine {
    /// Builds the engine and its evaluator from the workflow. Worker calls go through
    /// `net`'s address policy at every connection; the LLM endpoint (the operator's
    /// choice) does not.
    pub fn new(
        workflow: Workflow,
        net: &cresolver_workers::netguard::NetPolicy,
    ) -> Result<Self, EngineError> {
        let http = StageClient::default_http();
        let evaluator: Arc<dyn Evaluator> = match workflow.evaluator.kind {
            EvaluatorKind::Rubric => Arc::new(RubricEvaluator),
            EvaluatorKind::Llm => {
                let llm = workflow.evaluator.llm.clone().unwrap_or_default();
                let api_key = match &llm.api_key_env {
                    Some(var) => Some(secrecy::SecretString::from(
                        std::env::var(var).map_err(|_| EngineError::MissingApiKey(var.clone()))?,
                    )),
                    None => None,
                };
                let base_url = url::Url::parse(&llm.base_url)
                    .map_err(|e| EngineError::BadUrl(e.to_string()))?;
                Arc::new(LlmEvaluator::new(
                    LlmConfig {
                        base_url,
                        model: llm.model,
                        api_key,
                        timeout: Duration::from_millis(llm.timeout_ms),
                        retries: llm.retries,
                        retry_backoff: Duration::from_millis(llm.retry_backoff_ms),
                        max_tokens: llm.max_tokens,
                        max_reply_bytes: llm.max_reply_bytes,
                        max_prompt_chars: llm.max_prompt_chars,
                        fallback: workflow.evaluator.fallback,
                    },
                    http.clone(),
                ))
            }
        };
        Ok(Self::with_evaluator(workflow, net.http_client(), evaluator))
    }

    /// Builds the engine with a given evaluator and HTTP client.
    pub fn with_evaluator(
        workflow: Workflow,
        http: reqwest::Client,
        evaluator: Arc<dyn Evaluator>,
    ) -> Self {
        let permits = Arc::new(Semaphore::new(workflow.resolve.concurrency));
        let resolve_client = StageClient::new(
            http.clone(),
            StageLimits {
                timeout: workflow.resolve_timeout(),
                max_body_bytes: workflow.resolve.max_body_bytes,
                connect_retries: workflow.resolve.connect_retries,
                retry_backoff: Duration::from_millis(workflow.resolve.retry_backoff_ms),
            },
            permits.clone(),
        );
        let challenge_client = StageClient::new(
            http,
            StageLimits {
                timeout: Duration::from_millis(workflow.challenge.timeout_ms),
                max_body_bytes: workflow.challenge.max_body_bytes,
                connect_retries: workflow.resolve.connect_retries,
                retry_backoff: Duration::from_millis(workflow.resolve.retry_backoff_ms),
            },
            permits,
        );
        Self {
            workflow,
            resolve_client,
            challenge_client,
            evaluator,
        }
    }

    pub fn evaluator_name(&self) -> &'static str {
        self.evaluator.name()
    }

    /// Runs one round.
    pub async fn run(&self, input: &RoundInput) -> Result<RoundOutcome, RoundError> {
        self.run_observed(input, &|_| {}).await
    }

    /// Runs one round, telling `observe` as each stage completes.
    pub async fn run_observed(
        &self,
        input: &RoundInput,
        observe: &(dyn Fn(Stage) + Sync),
    ) -> Result<RoundOutcome, RoundError> {
        self.run_resumable(input, RoundProgress::default(), &|stage, _| {
            observe(stage);
            Box::pin(async { true })
        })
        .await
    }

    /// Runs one round from `progress` (what an earlier, interrupted run of it recorded):
    /// recorded stages are taken as they are, the rest are run, and `persist` is told
    /// the progress after each stage completes: it stores it before it returns `true`.
    /// On `false` the round stops there, before the next stage asks anyone anything
    /// ([`RoundError::NotPersisted`]). Progress that does not
    /// [`fit`](RoundProgress::fits) the input is ignored.
    pub async fn run_resumable(
        &self,
        input: &RoundInput,
        mut progress: RoundProgress,
        persist: &(
             dyn Fn(Stage, &RoundProgress) -> futures::future::BoxFuture<'static, bool> + Sync
         ),
    ) -> Result<RoundOutcome, RoundError> {
        if input.workers.is_empty() {
            return Err(RoundError::NoWorkers);
        }
        if input.workers.len() != input.reputations.len() {
            return Err(RoundError::Misaligned {
                workers: input.workers.len(),
                reputations: input.reputations.len(),
            });
        }
        if !progress.fits(input) {
            tracing::warn!(
                market = input.market_id,
                "recorded progress does not match the market's workers: running the round from the start"
            );
            progress = RoundProgress::default();
        }
        let wf = &self.workflow;
        let request = ResolveRequest {
            market_id: input.market_id,
            question: input.question.clone(),
            deadline: input.deadline,
            context: None,
        };
        let stage = match progress.resolve.clone() {
            Some(stage) => stage,
            None => {
                let stage = resolve_stage(
                    &self.resolve_client,
                    &input.workers,
                    &request,
                    wf.quorum.rule,
                    wf.grace(),
                )
                .await;
                tracing::info!(
                    market = input.market_id,
                    valid = stage.valid,
                    registered = stage.registered,
                    required = stage.required,
                    "resolve stage done"
                );
                // each excluded worker once, with its typed reason (the operator's log
                // says why, not only how many)
                for r in &stage.results {
                    if let Err(f) = &r.outcome {
                        tracing::info!(
                            market = input.market_id,
                            worker = %r.address,
                            reason = f.kind(),
                            detail = %f,
                            "worker excluded from the round"
                        );
                    }
                }
                if !stage.quorum_met {
                    return Err(RoundError::QuorumNotMet(Box::new(stage)));
                }
                progress.resolve = Some(stage.clone());
                if !persist(Stage::Answered, &progress).await {
                    return Err(RoundError::NotPersisted);
                }
                stage
            }
        };
        let challenges = match progress.challenges.clone() {
            Some(c) => c,
            None => {
                let c = if wf.challenge.enabled {
                    challenge_stage(
                        &self.challenge_client,
                        &wf.challenge.templates(),
                        &request,
                        &input.workers,
                        &stage,
                    )
                    .await
                } else {
                    vec![None; input.workers.len()]
                };
                progress.challenges = Some(c.clone());
                if !persist(Stage::Challenged, &progress).await {
                    return Err(RoundError::NotPersisted);
                }
                c
            }
        };

        // The evaluator sees the responders in a fresh random order, labelled W1… in
        // that order (a worker cannot know its label); a resumed round keeps its order.
        let order = match progress.evaluation.as_ref() {
            Some(e) if !e.order.is_empty() => e.order.clone(),
            Some(_) => responders(&stage),
            None => random_order(responders(&stage)),
        };
        let slot_of = evaluation_slots(&stage, Some(&order));
        let evaluation = match progress.evaluation.clone() {
            Some(e) => e,
            None => {
                let e = evaluate(
                    self.evaluator.as_ref(),
                    input.market_id,
                    &input.question,
                    input.reference_time,
                    &stage,
                    &challenges,
                    Some(&order),
                )
                .await?;
                progress.evaluation = Some(e.clone());
                if !persist(Stage::Evaluated, &progress).await {
                    return Err(RoundError::NotPersisted);
                }
                e
            }
        };
        let Decision {
            scores,
            tally: outcome,
            report,
        } = decide(
            U256::from(input.market_id),
            &stage,
            &slot_of,
            &evaluation,
            &input.reputations,
            wf.tally.tie,
        )?;
        let ratification = if let Some(votes) = progress.ratification.clone() {
            votes
        } else if wf.challenge.ratify {
            let votes = ratify_stage(
                &self.challenge_client,
                &request,
                &input.workers,
                &stage,
                outcome.resolution,
            )
            .await;
            for v in &votes {
                match &v.outcome {
                    Ok(r) if !r.approve => tracing::info!(
                        market = input.market_id,
                        worker = %v.address,
                        reason = r.dissent_reason.as_deref().unwrap_or(""),
                        "worker dissents from the outcome (recorded, not counted)"
                    ),
                    Ok(_) => {}
                    Err(e) => tracing::info!(
                        market = input.market_id,
                        worker = %v.address,
                        error = %e,
                        "ratifying vote failed (recorded, not counted)"
                    ),
                }
            }
            progress.ratification = Some(votes.clone());
            if !persist(Stage::Evaluated, &progress).await {
                return Err(RoundError::NotPersisted);
            }
            votes
        } else {
            vec![]
        };
        Ok(RoundOutcome {
            resolve: stage,
            challenges,
            scores,
            evaluation,
            tally: outcome,
            report,
            ratification,
        })
    }
}

/// The slots of the valid responders, in slot order.
pub fn responders(stage: &ResolveStage) -> Vec<usize> {
    (0..stage.results.len())
        .filter(|&i| stage.results[i].answer().is_some())
        .collect()
}

/// `slots` in a random order.
fn random_order(mut slots: Vec<usize>) -> Vec<usize> {
    use rand::seq::SliceRandom;
    slots.shuffle(&mut rand::thread_rng());
    slots
}

/// The evaluator's input for a resolve stage and its defences: the responders in
/// `order` (slots; `None` or an order that is not a permutation of the responders: slot
/// order), labelled `W1…` in that order, each with its answer and its challenges and
/// responses. Returns the slot of each evaluated worker. The one place this input is
/// built (live rounds and replays alike).
pub fn evaluation_input(
    market_id: u64,
    question: &str,
    reference_time: u64,
    stage: &ResolveStage,
    challenges: &[Option<ChallengeOutcome>],
    order: Option<&[usize]>,
) -> (EvalInput, Vec<usize>) {
    let order = evaluation_slots(stage, order);
    let mut workers = Vec::with_capacity(order.len());
    for &i in &order {
        let r = &stage.results[i];
        let Some(answer) = r.answer() else { continue };
        let (ch, resp) = match challenges.get(i).and_then(Option::as_ref) {
            Some(c) => (c.challenges.clone(), c.responses.clone()),
            None => (vec![], vec![]),
        };
        workers.push(EvalWorker {
            label: format!("W{}", workers.len() + 1),
            address: r.address,
            answer: answer.clone(),
            challenges: ch,
            responses: resp,
        });
    }
    let input = EvalInput {
        market_id,
        question: question.to_string(),
        workers,
        reference_time,
    };
    (input, order)
}

/// The slots the evaluator sees, in order: `order` when it is a permutation of the
/// responders, else the responders in slot order.
pub fn evaluation_slots(stage: &ResolveStage, order: Option<&[usize]>) -> Vec<usize> {
    let valid = responders(stage);
    match order {
        Some(o)
            if {
                let mut sorted = o.to_vec();
                sorted.sort_unstable();
                sorted == valid
            } =>
        {
            o.to_vec()
        }
        _ => valid,
    }
}

/// The evaluation stage: the responders (in `order`, see [`evaluation_input`]) scored by
/// `evaluator`, the order recorded with the scores. Live rounds run it with the
/// workflow's evaluator, replays with the rubric or the recorded LLM reply.
pub async fn evaluate(
    evaluator: &dyn Evaluator,
    market_id: u64,
    question: &str,
    reference_time: u64,
    stage: &ResolveStage,
    challenges: &[Option<ChallengeOutcome>],
    order: Option<&[usize]>,
) -> Result<Evaluation, EvalError> {
    let (input, slot_of) = evaluation_input(
        market_id,
        question,
        reference_time,
        stage,
        challenges,
        order,
    );
    let mut e = evaluator.evaluate(&input).await?;
    e.order = slot_of;
    Ok(e)
}

/// What a round decides from its answers and their evaluation.
#[derive(Debug, Clone)]
pub struct Decision {
    /// Scores per slot (`None`: not evaluated).
    pub scores: Vec<Option<Dimensions>>,
    pub tally: TallyOutcome,
    pub report: Bytes,
}

/// The pure half of a round: scores placed by slot, the tally over every registered
/// worker (non-responders with weight 0) and the report bytes. Used by live rounds and
/// replays alike.
pub fn decide(
    market_id: U256,
    stage: &ResolveStage,
    slot_of: &[usize],
    evaluation: &Evaluation,
    reputations: &[Reputation],
    tie: cresolver_core::TieRule,
) -> Result<Decision, TallyError> {
    let mut scores: Vec<Option<Dimensions>> = vec![None; stage.results.len()];
    for (k, &i) in slot_of.iter().enumerate() {
        if let Some(slot) = scores.get_mut(i) {
            *slot = evaluation.scores.get(k).copied();
        }
    }
    let workers: Vec<TallyWorker> = stage
        .results
        .iter()
        .zip(&scores)
        .zip(reputations)
        .map(|((r, s), rep)| TallyWorker {
            address: r.address,
            vote: r.answer().map(|a| Vote {
                position: a.position(),
                confidence: a.confidence,
            }),
            scores: s.unwrap_or_default(),
            reputation: *rep,
        })
        .collect();
    let tally = tally(market_id, &workers, tie)?;
    let report = tally.report();
    Ok(Decision {
        scores,
        tally,
        report,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use cresolver_workers::ResolveAnswer;
    use cresolver_workers::fanout::{ResolveResult, ResolveStage};

    #[test]
    fn worker_calls_count_resolves_and_challenged_workers_only() {
        let answer = ResolveAnswer {
            determination: true,
            confidence: 0.9,
            evidence: "e".into(),
            sources: vec![],
            abstain: false,
            notes: vec![],
            cuts: vec![],
        };
        let result = |i: u8, outcome| ResolveResult {
            address: Address::repeat_byte(i),
            outcome,
            elapsed_ms: 10,
        };
        let outcome = RoundOutcome {
            resolve: ResolveStage {
                results: vec![
                    result(1, Ok(answer.clone())),
                    result(2, Ok(answer)),
                    result(3, Err(WorkerFailure::Timeout { after_ms: 5000 })),
                ],
                registered: 3,
                required: 2,
                valid: 2,
                quorum_met: true,
            },
            challenges: vec![
                Some(ChallengeOutcome {
                    challenges: vec!["c".into()],
                    responses: vec!["r".into()],
                    failure: None,
                }),
                Some(ChallengeOutcome {
                    challenges: vec!["c".into()],
                    responses: vec![],
                    failure: Some(WorkerFailure::InvalidJson {
                        detail: "eof".into(),
                    }),
                }),
                None,
            ],
            scores: vec![],
            evaluation: Evaluation {
                order: Vec::new(),
                prompt_cuts: Vec::new(),
                notes: Vec::new(),
                scores: vec![],
                evaluator: "rubric".into(),
                fallback_reason: None,
                attempts: vec![],
                raw_reply: None,
            },
            tally: TallyOutcome {
                market_id: U256::from(7),
                resolution: true,
                yes_weight: 1.0,
                no_weight: 0.0,
                tie: false,
                workers: vec![],
            },
            report: Bytes::new(),
            ratification: vec![],
        };
        let calls: Vec<_> = outcome.worker_calls().collect();
        assert_eq!(
            calls,
            [
                ("resolve", "ok"),
                ("resolve", "ok"),
                ("resolve", "timeout"),
                ("challenge", "ok"),
                ("challenge", "invalid_json"),
            ]
        );
    }
}
