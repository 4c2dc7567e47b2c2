//! The `run` step: the engine asks the workers, challenges and evaluates them, each
//! stage persisted (as the round's [`Stage`] and its progress) before the next asks
//! anyone anything; a resumed round skips the stages its progress passed. A DON member
//! goes on to agree, also when its own round missed the quorum; any other node submits.

use super::{Carried, Next, Round, StepError, Steps, step};
use alloy::primitives::Address;
use cresolver_metrics::TimedStage;
use cresolver_pipeline::round::{RoundError, RoundInput, RoundProgress};
use cresolver_store::{MarketId, RoundKey};
use cresolver_store::{RoundStore, Stage, StoreError};
use futures::future::BoxFuture;
use std::sync::Arc;
use std::time::Instant;
use tracing::Instrument;

/// The engine's persistence of a round: each stage's progress is stored before the
/// engine goes on; an error (a lost lease among them) stops it there, and comes back
/// as the engine's [`RoundError::NotPersisted`].
struct Persist {
    store: Arc<dyn RoundStore>,
    market: Address,
    market_id: MarketId,
    attempt: u32,
}

impl Persist {
    /// Stores `progress` at `stage`.
    fn save(
        &self,
        stage: Stage,
        progress: &RoundProgress,
    ) -> BoxFuture<'static, Result<(), StoreError>> {
        let value = serde_json::to_value(progress);
        let store = self.store.clone();
        let (market, market_id, attempt) = (self.market, self.market_id, self.attempt);
        Box::pin(async move {
            let value = value.map_err(StoreError::Encode)?;
            store
                .save_progress(RoundKey::new(market, market_id), attempt, stage, &value)
                .await?;
            cresolver_submit::txm::crash_point(stage.as_str());
            Ok(())
        })
    }
}

impl Steps<'_> {
    /// Runs (or resumes) the engine over the discovered input.
    pub(super) async fn run_engine(
        &self,
        round: &mut Round<'_>,
        carried: Carried<RoundInput>,
    ) -> Result<Next, StepError> {
        let Carried {
            what: input,
            mut transcript,
        } = carried;
        let (market, market_id) = (round.market(), round.market_id);
        let mut progress = self.progress(round).await?;
        let persist = Persist {
            store: self.store.clone(),
            market,
            market_id,
            attempt: round.rec.attempt,
        };
        let save = |stage: Stage, progress: &RoundProgress| persist.save(stage, progress);
        let started = Instant::now();
        let result = round
            .p
            .engine
            .run_resumable(&input, &mut progress, &save)
            .instrument(step("engine", market_id))
            .await;
        self.metrics
            .observe_stage(TimedStage::ResolveEvaluate, started.elapsed().as_secs_f64());
        // the last stage stored (the stored stage when none was)
        round.stage = progress.stage().unwrap_or(round.stage);
        let outcome = match result {
            Ok(o) => o,
            // a lost lease stops the round; any other store error pauses it, retried
            Err(RoundError::NotPersisted { source, .. }) => return Err(source.into()),
            Err(RoundError::QuorumNotMet(stage)) if self.submission.is_don() => {
                // a DON member whose own round missed its quorum still observes (the
                // failures it saw): the quorum is the aggregate's to decide
                // (stored by `agree`, while the member's observation goes out)
                transcript.resolve = Some(*stage);
                return Ok(Next::Agree(Carried::next(input.reputations, transcript)));
            }
            Err(e) => {
                if let RoundError::QuorumNotMet(stage) = &e {
                    transcript.resolve = Some((**stage).clone());
                }
                self.save_transcript(round, &transcript).await?;
                return Err(StepError::fail_with(e));
            }
        };
        for (stage, label) in outcome.worker_calls() {
            self.metrics.worker_call(stage, label);
        }
        if !self.submission.is_don() {
            return Ok(Next::Submit(Carried::next(outcome, transcript)));
        }
        // stored by `agree`, while the member's observation goes out: the observation
        // is the side effect, and the DON's journal holds it before it leaves; a restart
        // runs the round again from its stored progress
        transcript.outcome = Some(outcome);
        Ok(Next::Agree(Carried::next(input.reputations, transcript)))
    }

    /// What an interrupted run of this attempt recorded: its workers and the LLM are
    /// not asked again for a stage it passed.
    async fn progress(&self, round: &Round<'_>) -> Result<RoundProgress, StepError> {
        let stored = self.store.progress(round.key(), round.rec.attempt).await?;
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
