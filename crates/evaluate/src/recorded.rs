//! The LLM evaluator of a recorded round, for replays: the recorded reply goes through
//! the same parser as a live reply, against the replayed input; a reply that no longer
//! fits it, or a round whose LLM had failed, goes through the workflow's fallback policy.
//! No model is called.

use super::{EvalError, EvalInput, Evaluation, Evaluator, Fallback, fall_back, llm};
use futures::future::BoxFuture;

/// What a round recorded of its LLM evaluation.
#[derive(Debug, Clone)]
pub struct RecordedLlm {
    /// The model's raw reply, when it gave one.
    pub raw_reply: Option<String>,
    /// Why the LLM was not used at the time, when it failed.
    pub fallback_reason: Option<String>,
    /// The failed attempts recorded before the result.
    pub attempts: Vec<String>,
    /// The replaying workflow's fallback policy.
    pub fallback: Fallback,
}

impl RecordedLlm {
    /// Whether the record can be replayed at all: a reply, or the reason the LLM failed.
    pub fn replayable(&self) -> bool {
        self.raw_reply.is_some() || self.fallback_reason.is_some()
    }
}

impl Evaluator for RecordedLlm {
    fn name(&self) -> &'static str {
        "llm"
    }

    fn evaluate<'a>(
        &'a self,
        input: &'a EvalInput,
    ) -> BoxFuture<'a, Result<Evaluation, EvalError>> {
        Box::pin(async move {
            let attempts = self.attempts.clone();
            match (&self.raw_reply, &self.fallback_reason) {
                (Some(raw), _) => match llm::parse_scores(raw, input) {
                    Ok(scores) => Ok(Evaluation {
                        order: Vec::new(),
                        prompt_cuts: Vec::new(),
                        notes: Vec::new(),
                        scores,
                        evaluator: "llm".into(),
                        fallback_reason: None,
                        attempts,
                        raw_reply: Some(raw.clone()),
                    }),
                    Err(e) => fall_back(
                        self.fallback,
                        input,
                        format!("the recorded LLM reply does not fit the replayed input: {e}"),
                        attempts,
                    ),
                },
                // the LLM failed at the time: the workflow's fallback policy decides
                (None, Some(reason)) => fall_back(self.fallback, input, reason.clone(), attempts),
                (None, None) => Err(EvalError::Config(
                    "the recorded round has no LLM reply and no reason it failed: replay with --live"
                        .into(),
                )),
            }
        })
    }
}
