//! The `run` step: the engine asks the workers, challenges and evaluates them, each
//! stage persisted (as the round's [`Stage`] and its progress) before the next asks
//! anyone anything; a resumed round skips the stages its progress passed. A DON member
//! goes on to agree, also when its own round missed the quorum; any other node submits.

use super::{Next, Round, StepError, step};
use crate::{Halt, Node};
use alloy::primitives::{Address, U256};
use cresolver_pipeline::round::{RoundError, RoundInput, RoundProgress};
use cresolver_store::{RoundStore, Stage};
use futures::future::BoxFuture;
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Instant;
use tracing::Instrument;

/// The engine's persistence of a round: each stage's progress is stored before the
/// engine goes on, and the stage reached is shared with the drive.
struct Persist {
    store: Arc<dyn RoundStore>,
    market: Address,
    market_id: U256,
    attempt: u32,
    halt: Halt,
    reached: Arc<Mutex<Stage>>,
}

impl Persist {
    /// Stores `progress` at `stage`; `false` stops the engine before the next stage
    /// (and the drive with the halt: a lost lease, or a pause that is retried).
    fn save(&self, stage: Stage, progress: &RoundProgress) -> BoxFuture<'static, bool> {
        let value = serde_json::to_value(progress);
        let (store, halt, reached) = (self.store.clone(), self.halt.clone(), self.reached.clone());
        let (market, market_id, attempt) = (self.market, self.market_id, self.attempt);
        Box::pin(async move {
            let value = match value {
                Ok(v) => v,
                Err(e) => {
                    tracing::error!(error = %e, "cannot encode round progress");
                    halt.pause("cannot encode the round's progress".into());
                    return false;
                }
            };
            match store
                .save_progress(market, market_id, attempt, stage, &value)
                .await
            {
                Ok(()) => {
                    *reached.lock() = stage;
                    cresolver_submit::txm::crash_point(stage.as_str());
                    true
                }
                // another node drives the round now
                Err(e) if e.is_lease_lost() => {
                    halt.token.cancel();
                    false
                }
                // the round pauses and is retried
                Err(e) => {
                    halt.pause(format!("cannot persist the round's progress: {e}"));
                    false
                }
            }
        })
    }
}

impl Node {
    /// Runs (or resumes) the engine over the discovered input.
    pub(super) async fn run_engine(
        &self,
        round: &mut Round<'_>,
        input: RoundInput,
    ) -> Result<Next, StepError> {
        let (market, market_id) = (round.market(), round.market_id);
        let progress = self.progress(round).await?;
        let persist = Persist {
            store: self.store.clone(),
            market,
            market_id,
            attempt: round.rec.attempt,
            halt: round.halt.clone(),
            reached: Arc::new(Mutex::new(round.stage)),
        };
        let save = |stage: Stage, progress: &RoundProgress| persist.save(stage, progress);
        let started = Instant::now();
        let result = round
            .p
            .engine
            .run_resumable(&input, progress, &save)
            .instrument(step("engine", market_id))
            .await;
        self.metrics
            .observe_stage("resolve+evaluate", started.elapsed().as_secs_f64());
        round.stage = *persist.reached.lock();
        let transcript = round
            .transcript
            .as_mut()
            .ok_or_else(|| StepError::fail("the round ran before it was discovered"))?;
        let outcome = match result {
            Ok(o) => o,
            // the halt says why (a lost lease, or a pause that is retried)
            Err(RoundError::NotPersisted) => return Err(round.halt.step()),
            Err(RoundError::QuorumNotMet(stage)) if self.don.is_some() => {
                // a DON member whose own round missed its quorum still observes (the
                // failures it saw): the quorum is the aggregate's to decide
                // (stored by `agree`, while the member's observation goes out)
                transcript.resolve = Some(*stage);
                return Ok(Next::Agree(input.reputations));
            }
            Err(e) => {
                if let RoundError::QuorumNotMet(stage) = &e {
                    transcript.resolve = Some((**stage).clone());
                }
                self.save_transcript(round).await?;
                return Err(StepError::fail_with(e));
            }
        };
        for (stage, label) in outcome.worker_calls() {
            self.metrics.worker_call(stage, label);
        }
        if self.don.is_none() {
            return Ok(Next::Submit(Box::new(outcome)));
        }
        // stored by `agree`, while the member's observation goes out: the observation
        // is the side effect, and the DON's journal holds it before it leaves; a restart
        // runs the round again from its stored progress
        transcript.outcome = Some(outcome);
        Ok(Next::Agree(input.reputations))
    }

    /// What an interrupted run of this attempt recorded: its workers and the LLM are
    /// not asked again for a stage it passed.
    async fn progress(&self, round: &Round<'_>) -> Result<RoundProgress, StepError> {
        let stored = self
            .store
            .progress(round.market(), round.market_id, round.rec.attempt)
            .await?;
        let progress = stored
            .and_then(|v| match serde_json::from_value::<RoundProgress>(v) {
                Ok(p) => Some(p),
                Err(e) => {
                    tracing::warn!(market_id = %round.market_id, error = %e, "unreadable round progress: running the round from the start");
                    None
                }
            })
            .unwrap_or_default();
        if let Some(passed) = progress.stage() {
            tracing::info!(market_id = %round.market_id, passed = passed.as_str(), "resuming the round where it stopped; its workers are not asked again for the stages passed");
        }
        Ok(progress)
    }
}
