//! Evaluate: scores every valid responder on the 8 dimensions. Two evaluators share the
//! [`Evaluator`] trait: an LLM behind any OpenAI-compatible endpoint, and an offline,
//! deterministic rubric. The LLM one falls back as the workflow says ([`fall_back`]);
//! a replay scores with the rubric or the recorded LLM reply ([`recorded`]).

pub mod llm;
pub mod recorded;
pub mod rubric;

use alloy_primitives::Address;
use cresolver_core::{Dimensions, MarketId};
use cresolver_workers::ResolveAnswer;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

pub use llm::{LlmConfig, LlmEvaluator};
pub use rubric::RubricEvaluator;

/// One valid responder as the evaluator sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalWorker {
    /// Opaque label used in prompts (`W1`, `W2`, …) instead of the address.
    pub label: String,
    /// The worker's on-chain address (never shown to the model).
    pub address: Address,
    /// The worker's validated resolve answer.
    pub answer: ResolveAnswer,
    /// The challenge texts the worker was asked to defend its answer against.
    pub challenges: Vec<String>,
    /// Responses matched to `challenges` by position (possibly fewer).
    pub responses: Vec<String>,
}

/// Everything an evaluator may look at.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalInput {
    /// The market whose round is evaluated (a JSON number, as the worker protocols carry it).
    #[serde(with = "cresolver_core::round_key::as_number")]
    pub market_id: MarketId,
    /// The market's question, as the workers received it.
    pub question: String,
    /// The valid responders, in the order their scores are returned.
    pub workers: Vec<EvalWorker>,
    /// Unix seconds the round is judged at (the request's block time), for timeliness.
    pub reference_time: u64,
}

/// Scores for each input worker, in input order, each 0–100 and whole.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evaluation {
    /// One score set per input worker, in input order.
    pub scores: Vec<Dimensions>,
    /// Which evaluator produced the scores: `llm`, `rubric` or `neutral`.
    pub evaluator: String,
    /// Why the configured evaluator was not used, when a fallback produced the scores.
    pub fallback_reason: Option<String>,
    /// Failed attempts before the result (for transcripts and logs).
    pub attempts: Vec<String>,
    /// The raw reply of the model that produced the scores, if any.
    pub raw_reply: Option<String>,
    /// The slots of the evaluated workers in the order the evaluator saw them, labelled
    /// `W1…` in that order: a fresh random order per round, never shown to a worker,
    /// recorded so that a replay builds the same prompt. Empty in transcripts from
    /// before it existed (slot order).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub order: Vec<usize>,
    /// Workers whose text was cut to fit the prompt budget, and by how much.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prompt_cuts: Vec<String>,
    /// What the evaluator set aside (the rubric: instruction-like text, markup, JSON
    /// fragments, which earn nothing), per worker label.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// Why an evaluator produced no scores.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EvalError {
    /// The LLM could not score and the fallback policy fails the round; holds the reason.
    #[error("evaluation failed and the fallback policy is `fail`: {0}")]
    Failed(String),
    /// The evaluator cannot run as configured (a bad endpoint, a recorded round that
    /// cannot be replayed); holds what is wrong.
    #[error("evaluator misconfigured: {0}")]
    Config(String),
}

/// What to do when the LLM evaluator cannot produce valid scores.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Fallback {
    /// Score with the offline rubric.
    #[default]
    Rubric,
    /// Every dimension 50 (the reference's behaviour for an unscored worker).
    Neutral,
    /// Fail the round.
    Fail,
}

/// An evaluator of a round's responders.
pub trait Evaluator: Send + Sync {
    /// A short name (`llm`, `rubric`) for logs and transcripts.
    fn name(&self) -> &'static str;
    /// Scores every worker of `input`, or says why it cannot.
    fn evaluate<'a>(&'a self, input: &'a EvalInput)
    -> BoxFuture<'a, Result<Evaluation, EvalError>>;
}

/// The workflow's fallback policy, applied when the LLM evaluator could not score (now,
/// or in the recorded round a replay replays): the rubric, neutral scores, or a failed
/// round.
pub fn fall_back(
    policy: Fallback,
    input: &EvalInput,
    reason: String,
    attempts: Vec<String>,
) -> Result<Evaluation, EvalError> {
    match policy {
        Fallback::Rubric => {
            let mut ev = rubric::score_all(input);
            ev.fallback_reason = Some(reason);
            ev.attempts = attempts;
            Ok(ev)
        }
        Fallback::Neutral => Ok(neutral(input, Some(reason), attempts)),
        Fallback::Fail => Err(EvalError::Failed(reason)),
    }
}

/// Neutral scores for every worker.
pub fn neutral(input: &EvalInput, reason: Option<String>, attempts: Vec<String>) -> Evaluation {
    Evaluation {
        order: Vec::new(),
        prompt_cuts: Vec::new(),
        notes: Vec::new(),
        scores: vec![Dimensions::uniform(50.0); input.workers.len()],
        evaluator: "neutral".into(),
        fallback_reason: reason,
        attempts,
        raw_reply: None,
    }
}
