//! The `submit` step: the outcome's call on this node's key. The pre-flight runs while
//! the transcript with the outcome is stored and the transaction manager reads the
//! chain; then the transaction manager persists the nonce before it signs, and the
//! round follows it.

use super::{Carried, Ending, Next, Round, StepError, Steps, step};
use cresolver_pipeline::round::RoundOutcome;
use cresolver_pipeline::transcript::SubmissionRecord;
use cresolver_store::{Stage, TxPayload};
use cresolver_submit::txm::{ChainView, TxManager};
use cresolver_submit::{Prepared, SubmitError};
use tracing::Instrument;

impl Steps<'_> {
    /// Prepares the outcome's call and hands it to the transaction manager.
    pub(super) async fn submit(
        &self,
        round: &mut Round<'_>,
        carried: Carried<RoundOutcome>,
    ) -> Result<Next, StepError> {
        let market_id = round.market_id;
        let Carried {
            what: outcome,
            mut transcript,
        } = carried;
        let tally = outcome.tally.clone();
        transcript.outcome = Some(outcome);
        let txm = self.submission.txm();
        let view = async {
            match txm {
                // a failed read is only a read not made ahead: the submission makes it
                Some(txm) => txm.chain_view().await.ok(),
                None => None,
            }
        };
        let (prepared, saved, view) = tokio::join!(
            round
                .p
                .submitter
                .prepare(&transcript.market, &tally)
                .instrument(step("prepare", market_id)),
            self.save_transcript(round, &transcript),
            view,
        );
        saved?;
        let prepared = match prepared {
            Ok(x) => x,
            Err(SubmitError::AlreadyResolved { .. }) => {
                return Ok(Ending::skipped(
                    "the market was resolved on chain meanwhile",
                ));
            }
            Err(e) => return Err(StepError::from_submit(e)),
        };
        let Some(txm) = txm else {
            // the call it would have sent stays in the transcript
            transcript.submission = Some(SubmissionRecord::from(&prepared));
            self.save_transcript(round, &transcript).await?;
            return Err(StepError::fail(
                "no signing key: the node can simulate but not submit",
            ));
        };
        // the ending completes the transcript with the call sent (from its reservation)
        round.transcript = Some(transcript);
        self.send(round, txm, &prepared, view).await
    }

    /// Hands a prepared transaction of the round to the transaction manager (which
    /// persists its nonce before signing); the round follows that nonce next.
    pub(super) async fn send(
        &self,
        round: &mut Round<'_>,
        txm: &TxManager,
        prepared: &Prepared,
        view: Option<ChainView>,
    ) -> Result<Next, StepError> {
        let payload = TxPayload {
            market: round.market(),
            market_id: round.market_id,
            to: prepared.to,
            calldata: prepared.calldata.clone(),
            gas_limit: prepared.gas_limit,
        };
        let nonce = txm
            .submit_with(payload, view)
            .instrument(step("send", round.market_id))
            .await
            .map_err(StepError::from_tx)?;
        round.stage = Stage::Submitted;
        Ok(Next::Follow(nonce))
    }
}
