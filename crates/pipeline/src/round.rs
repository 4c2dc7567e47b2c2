//! A round, end to end without the chain: fan out the question under quorum, challenge
//! the responders, evaluate, tally, encode the report. The node, replay and dry-run all
//! drive rounds through [`Engine::run`]. What a round has passed ([`RoundProgress`]:
//! answers, defences, evaluation, ratifying votes) is handed to the caller after each
//! stage, and a round given its recorded progress continues from there without asking
//! its workers or the LLM again.

use crate::workflow::{EvaluatorKind, Workflow};
use alloy::primitives::{Address, Bytes};
use cresolver_core::{
    Dimensions, MarketId, MarketIdTooLarge, Reputation, TallyError, TallyOutcome,
};
use cresolver_evaluate::{
    EvalError, Evaluation, Evaluator, LlmConfig, LlmEvaluator, RubricEvaluator,
};
use cresolver_metrics::{WorkerCallOutcome, WorkerStage};
pub use cresolver_store::{Stage, StoreError};
use cresolver_workers::fanout::{
    RatifyResult, ResolveStage, WorkerSlot, challenge_stage, ratify_stage, resolve_stage,
};
use cresolver_workers::{
    ChallengeOutcome, ResolveRequest, StageClient, StageConfig, WorkerFailure,
};
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

mod call_label;
mod decision;
mod progress;
pub use progress::{ProgressOutOfOrder, RoundProgress};

use call_label::failure_outcome;
use decision::random_order;
pub use decision::{Decision, decide, evaluate, evaluation_input, evaluation_slots, responders};

/// What a round is asked to resolve.
#[derive(Debug, Clone)]
pub struct RoundInput {
    /// The market's id (narrowed to the worker protocols' number only in the requests).
    pub market_id: MarketId,
    /// The market's question, as the workers are asked it.
    pub question: String,
    /// The market's deadline, in Unix seconds (`None`: it does not fit a `u64`).
    pub deadline: Option<u64>,
    /// Unix seconds the round is judged at (the request's block time).
    pub reference_time: u64,
    /// Every registered worker, in registration order.
    pub workers: Vec<WorkerSlot>,
    /// Reputation per worker, aligned with `workers`.
    pub reputations: Vec<Reputation>,
}

/// Everything a finished round saw and decided (also what a transcript records).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoundOutcome {
    /// The resolve stage: every worker's answer or failure, and the quorum.
    pub resolve: ResolveStage,
    /// Per worker (slot order): its defence, or `None` when it was not challenged.
    pub challenges: Vec<Option<ChallengeOutcome>>,
    /// Scores per worker (slot order); `None` for non-responders.
    pub scores: Vec<Option<Dimensions>>,
    /// The evaluator's scores and how it reached them.
    pub evaluation: Evaluation,
    /// The weighted vote over every registered worker.
    pub tally: TallyOutcome,
    /// The encoded report the submission carries.
    pub report: Bytes,
    /// Ratifying votes on the outcome (`challenge.ratify`, protocols that have one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ratification: Vec<RatifyResult>,
}

impl RoundOutcome {
    /// The worker calls of the round as `(stage, outcome)` metric labels: one per resolve
    /// result and one per challenged worker (workers not challenged are not counted).
    pub fn worker_calls(&self) -> impl Iterator<Item = (WorkerStage, WorkerCallOutcome)> + '_ {
        let outcome = |f: Option<&WorkerFailure>| f.map_or(WorkerCallOutcome::Ok, failure_outcome);
        let resolve = self
            .resolve
            .results
            .iter()
            .map(move |r| (WorkerStage::Resolve, outcome(r.outcome.as_ref().err())));
        let challenge = self
            .challenges
            .iter()
            .flatten()
            .map(move |c| (WorkerStage::Challenge, outcome(c.failure.as_ref())));
        resolve.chain(challenge)
    }
}

/// Why a round ended without an outcome.
#[derive(Debug, thiserror::Error)]
pub enum RoundError {
    /// The market has no registered workers.
    #[error("the market has no registered workers")]
    NoWorkers,
    /// The market id does not fit the worker protocols' number.
    #[error(transparent)]
    MarketIdTooLarge(#[from] MarketIdTooLarge),
    /// Too few workers answered validly; the stage says who failed and why.
    #[error("{}", quorum_message(.0))]
    QuorumNotMet(Box<ResolveStage>),
    /// The evaluator failed (under a `fail` fallback) or is misconfigured.
    #[error(transparent)]
    Evaluation(#[from] EvalError),
    /// The tally failed (a tie under the `fail` rule, no responder, zero total weight,
    /// a score out of range).
    #[error("tally failed: {0}")]
    Tally(#[from] TallyError),
    /// The input's workers and reputations are not aligned.
    #[error("worker list and reputation list differ in length ({workers} vs {reputations})")]
    Misaligned {
        /// How many workers the input has.
        workers: usize,
        /// How many reputations it has.
        reputations: usize,
    },
    /// The persist callback did not store a stage; the round stopped there.
    #[error("the round's progress at {} could not be stored: it stopped there", stage.as_str())]
    NotPersisted {
        /// The stage whose progress was not stored.
        stage: Stage,
        /// Why.
        #[source]
        source: StoreError,
    },
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

/// A workflow the engine cannot be built from.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The env var named by `evaluator.llm.api_key_env` is not set.
    #[error(
        "environment variable {0} (named by evaluator.llm.api_key_env) is not set: export it, or remove api_key_env for an endpoint without auth"
    )]
    MissingApiKey(String),
    /// `evaluator.llm.base_url` is not a URL.
    #[error("evaluator.llm.base_url: {0}")]
    BadUrl(String),
}

/// Runs rounds of one workflow. Cheap to share across tasks (`Arc`).
pub struct Engine {
    /// The workflow the engine runs.
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
            StageConfig {
                timeout: workflow.resolve_timeout(),
                max_body_bytes: workflow.resolve.max_body_bytes,
                connect_retries: workflow.resolve.connect_retries,
                retry_backoff: Duration::from_millis(workflow.resolve.retry_backoff_ms),
            },
            permits.clone(),
        );
        let challenge_client = StageClient::new(
            http,
            StageConfig {
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

    /// The name of the engine's evaluator (`rubric`, `llm`).
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
        self.run_resumable(input, &mut RoundProgress::default(), &|stage, _| {
            observe(stage);
            Box::pin(async { Ok(()) })
        })
        .await
    }

    /// Runs one round from `progress` (what an earlier, interrupted run of it recorded):
    /// recorded stages are taken as they are, the rest are run, and `persist` is told
    /// the progress after each stage completes: it stores it before it returns `Ok`.
    /// On an error the round stops there, before the next stage asks anyone anything
    /// ([`RoundError::NotPersisted`], with that error). Progress that does not
    /// [`fit`](RoundProgress::fits) the input is ignored. `progress` is left at the last
    /// stage stored (or the one resumed from), also when the round stops.
    pub async fn run_resumable(
        &self,
        input: &RoundInput,
        progress: &mut RoundProgress,
        persist: &Persist<'_>,
    ) -> Result<RoundOutcome, RoundError> {
        starting_progress(input, progress)?;
        let request = ResolveRequest {
            market_id: input.market_id.to_u64()?,
            question: input.question.clone(),
            deadline: input.deadline,
            context: None,
        };
        let stage = self.resolve(input, &request, progress, persist).await?;
        let challenges = self
            .challenge(input, &request, &stage, progress, persist)
            .await?;
        let (evaluation, slot_of) = self
            .evaluation(input, &stage, &challenges, progress, persist)
            .await?;
        let Decision {
            scores,
            tally: outcome,
            report,
        } = decide(
            input.market_id,
            &stage,
            &slot_of,
            &evaluation,
            &input.reputations,
            self.workflow.tally.tie,
        )?;
        let ratification = self
            .ratify(
                input,
                &request,
                &stage,
                outcome.resolution,
                progress,
                persist,
            )
            .await?;
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

/// The caller's persist callback: stores the progress after a stage, or says why it
/// could not.
pub type Persist<'a> =
    dyn Fn(Stage, &RoundProgress) -> BoxFuture<'static, Result<(), StoreError>> + Sync + 'a;

/// Checks `input` and the progress to start from: `progress` stays when it
/// [fits](RoundProgress::fits) the input, else it starts empty (with a warning).
fn starting_progress(input: &RoundInput, progress: &mut RoundProgress) -> Result<(), RoundError> {
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
            market = %input.market_id,
            "recorded progress does not match the market's workers: running the round from the start"
        );
        *progress = RoundProgress::default();
    }
    Ok(())
}

/// Hands `progress` to `persist` after `stage`; [`RoundError::NotPersisted`], with
/// the store's error, when it was not stored.
async fn save(
    persist: &Persist<'_>,
    stage: Stage,
    progress: &RoundProgress,
) -> Result<(), RoundError> {
    persist(stage, progress)
        .await
        .map_err(|source| RoundError::NotPersisted { stage, source })
}

impl Engine {
    /// The resolve stage: the recorded one, or the question fanned out to every worker
    /// under the workflow's quorum rule. A stage that misses quorum ends the round
    /// ([`RoundError::QuorumNotMet`]) and is not persisted.
    async fn resolve(
        &self,
        input: &RoundInput,
        request: &ResolveRequest,
        progress: &mut RoundProgress,
        persist: &Persist<'_>,
    ) -> Result<ResolveStage, RoundError> {
        if let Some(stage) = progress.resolve() {
            return Ok(stage.clone());
        }
        let wf = &self.workflow;
        let stage = resolve_stage(
            &self.resolve_client,
            &input.workers,
            request,
            wf.quorum.rule,
            wf.grace(),
        )
        .await;
        log_resolve_stage(input.market_id, &stage);
        if !stage.quorum_met {
            return Err(RoundError::QuorumNotMet(Box::new(stage)));
        }
        let next = RoundProgress::Answered {
            resolve: stage.clone(),
        };
        save(persist, Stage::Answered, &next).await?;
        *progress = next;
        Ok(stage)
    }

    /// The challenge stage: the recorded defences, or every responder challenged with
    /// the others' answers (no one when the workflow disables challenges). One entry
    /// per worker, in slot order.
    async fn challenge(
        &self,
        input: &RoundInput,
        request: &ResolveRequest,
        stage: &ResolveStage,
        progress: &mut RoundProgress,
        persist: &Persist<'_>,
    ) -> Result<Vec<Option<ChallengeOutcome>>, RoundError> {
        if let Some(c) = progress.challenges() {
            return Ok(c.to_vec());
        }
        let wf = &self.workflow;
        let c = if wf.challenge.enabled {
            challenge_stage(
                &self.challenge_client,
                &wf.challenge.templates(),
                request,
                &input.workers,
                stage,
            )
            .await
        } else {
            vec![None; input.workers.len()]
        };
        let next = RoundProgress::Challenged {
            resolve: stage.clone(),
            challenges: c.clone(),
        };
        save(persist, Stage::Challenged, &next).await?;
        *progress = next;
        Ok(c)
    }

    /// The evaluation stage, with the slot of each evaluated worker: the recorded
    /// evaluation, or the responders scored by the engine's evaluator. The evaluator
    /// sees the responders in a fresh random order, labelled `W1…` in that order (a
    /// worker cannot know its label); a resumed round keeps its recorded order.
    async fn evaluation(
        &self,
        input: &RoundInput,
        stage: &ResolveStage,
        challenges: &[Option<ChallengeOutcome>],
        progress: &mut RoundProgress,
        persist: &Persist<'_>,
    ) -> Result<(Evaluation, Vec<usize>), RoundError> {
        let order = match progress.evaluation() {
            Some(e) if !e.order.is_empty() => e.order.clone(),
            Some(_) => responders(stage),
            None => random_order(responders(stage)),
        };
        let slot_of = evaluation_slots(stage, Some(&order));
        if let Some(e) = progress.evaluation() {
            return Ok((e.clone(), slot_of));
        }
        let e = evaluate(
            self.evaluator.as_ref(),
            input.market_id,
            &input.question,
            input.reference_time,
            stage,
            challenges,
            Some(&order),
        )
        .await?;
        let next = RoundProgress::Evaluated {
            resolve: stage.clone(),
            challenges: challenges.to_vec(),
            evaluation: Box::new(e.clone()),
            ratification: None,
        };
        save(persist, Stage::Evaluated, &next).await?;
        *progress = next;
        Ok((e, slot_of))
    }

    /// The ratifying votes on the tallied `resolution`: the recorded ones, or (when the
    /// workflow asks for them) a vote of the responders whose protocol has one, else
    /// none. Dissent and failed votes are logged and recorded, never counted.
    async fn ratify(
        &self,
        input: &RoundInput,
        request: &ResolveRequest,
        stage: &ResolveStage,
        resolution: bool,
        progress: &mut RoundProgress,
        persist: &Persist<'_>,
    ) -> Result<Vec<RatifyResult>, RoundError> {
        if let Some(votes) = progress.ratification() {
            return Ok(votes.to_vec());
        }
        if !self.workflow.challenge.ratify {
            return Ok(vec![]);
        }
        let votes = ratify_stage(
            &self.challenge_client,
            request,
            &input.workers,
            stage,
            resolution,
        )
        .await;
        log_ratification(input.market_id, &votes);
        let mut next = progress.clone();
        if let RoundProgress::Evaluated { ratification, .. } = &mut next {
            *ratification = Some(votes.clone());
        }
        save(persist, Stage::Evaluated, &next).await?;
        *progress = next;
        Ok(votes)
    }
}

/// Logs a finished resolve stage: its counts, then each excluded worker once with its
/// typed reason (the operator's log says why, not only how many).
fn log_resolve_stage(market_id: MarketId, stage: &ResolveStage) {
    tracing::info!(
        market = %market_id,
        valid = stage.valid,
        registered = stage.registered,
        required = stage.required,
        "resolve stage done"
    );
    for r in &stage.results {
        if let Err(f) = &r.outcome {
            tracing::info!(
                market = %market_id,
                worker = %r.address,
                reason = f.kind(),
                detail = %f,
                "worker excluded from the round"
            );
        }
    }
}

/// Logs each dissenting or failed ratifying vote.
fn log_ratification(market_id: MarketId, votes: &[RatifyResult]) {
    for v in votes {
        match &v.outcome {
            Ok(r) if !r.approve => tracing::info!(
                market = %market_id,
                worker = %v.address,
                reason = r.dissent_reason.as_deref().unwrap_or(""),
                "worker dissents from the outcome (recorded, not counted)"
            ),
            Ok(_) => {}
            Err(e) => tracing::info!(
                market = %market_id,
                worker = %v.address,
                error = %e,
                "ratifying vote failed (recorded, not counted)"
            ),
        }
    }
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
                market_id: MarketId::from(7u64),
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
                (WorkerStage::Resolve, WorkerCallOutcome::Ok),
                (WorkerStage::Resolve, WorkerCallOutcome::Ok),
                (WorkerStage::Resolve, WorkerCallOutcome::Timeout),
                (WorkerStage::Challenge, WorkerCallOutcome::Ok),
                (WorkerStage::Challenge, WorkerCallOutcome::InvalidJson),
            ]
        );
    }
}
