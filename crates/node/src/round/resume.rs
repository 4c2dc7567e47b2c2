//! The first step of every drive: where a round that ran before picks up. A nonce it
//! reserved is followed (never a second payload signed), a transaction another node's
//! key signed for it is re-broadcast and waited for, and a transaction mined before the
//! round concluded concludes it; any other round starts at `read`.

use super::{Next, Round, StepError, Steps};
use cresolver_pipeline::transcript::Transcript;
use cresolver_store::RoundKey;
use cresolver_store::{KeyRef, NonceRecord, Stage};
use cresolver_submit::txm::{Foreign, TxManager};
use serde::Deserialize;

impl Steps<'_> {
    /// Where the round goes first. A round that resumes after its outcome takes its
    /// stored transcript with it (read once here); one that starts at `read` builds its
    /// own at discovery.
    pub(super) async fn resume(&self, round: &mut Round<'_>) -> Result<Next, StepError> {
        let next = self.resume_at(round).await?;
        if !matches!(next, Next::Read) {
            round.transcript = match round.rec.outcome.as_ref().map(Transcript::deserialize) {
                Some(Ok(t)) => Some(t),
                Some(Err(e)) => {
                    tracing::warn!(market_id = %round.market_id, error = %e, "the stored transcript does not parse: the round goes on without it");
                    None
                }
                None => None,
            };
        }
        Ok(next)
    }

    /// The step a round that ran before resumes at.
    async fn resume_at(&self, round: &Round<'_>) -> Result<Next, StepError> {
        let market_id = round.market_id;
        if let Some(txm) = self.submission.txm()
            && let Some(next) = self.pending(round, txm).await?
        {
            return Ok(next);
        }
        // A nonce of this round mined while the round was not concluded: the process
        // stopped, or a store write failed, between the two writes. The round concludes
        // from that receipt, never as "resolved on chain by someone else" (which would
        // leave our resolution unwatched by the finality watch).
        if round.stage == Stage::Submitted
            && let Some(receipt) = self.mined_receipt_of_round(round).await?
        {
            tracing::info!(market_id = %market_id, tx = %receipt.transaction_hash, "the round's transaction was mined before the round concluded: concluding it now");
            return Ok(Next::Conclude(Box::new(receipt)));
        }
        Ok(Next::Read)
    }

    /// The round's pending nonces: its own key's is followed; another key's is waited
    /// for (see [`Self::foreign`]).
    async fn pending(&self, round: &Round<'_>, txm: &TxManager) -> Result<Option<Next>, StepError> {
        let (market, market_id) = (round.market(), round.market_id);
        // A nonce is reserved for this round: follow it, never sign a second payload.
        // (The round's pending reservations under every key, read once.)
        let pending = self
            .store
            .pending_nonces_of_round(RoundKey::new(market, market_id))
            .await?;
        if let Some((_, n)) = pending
            .iter()
            .filter(|(key, _)| *key == txm.key())
            .min_by_key(|(_, n)| n.nonce)
        {
            tracing::info!(market_id = %market_id, nonce = n.nonce, state = round.stage.as_str(), "resuming a reserved transaction");
            return Ok(Some(Next::Follow(n.nonce)));
        }
        for (key, n) in pending {
            if key != txm.key()
                && let Some(next) = self.foreign(round, txm, key, &n).await?
            {
                return Ok(Some(next));
            }
        }
        Ok(None)
    }

    /// A nonce another node's key reserved (a takeover in a cluster of different keys):
    /// its signed bytes are re-broadcast and followed before this node signs anything
    /// of its own, for at most `foreign_wait` after the reservation.
    async fn foreign(
        &self,
        round: &Round<'_>,
        txm: &TxManager,
        key: KeyRef,
        n: &NonceRecord,
    ) -> Result<Option<Next>, StepError> {
        let market_id = round.market_id;
        match txm
            .check_foreign(key, n)
            .await
            .map_err(StepError::retry_tx)?
        {
            Foreign::Mined(receipt) => {
                tracing::info!(market_id = %market_id, signer = %key.signer, nonce = n.nonce, "the previous holder's transaction is mined");
                Ok(Some(Next::Conclude(receipt)))
            }
            Foreign::Lost => Ok(None),
            Foreign::Pending => {
                // since it was reserved, or reopened by the finality watch
                let age = cresolver_store::now().saturating_sub(n.created_at.max(n.updated_at));
                if age < self.foreign_wait.as_secs() {
                    return Err(StepError::retry(format!(
                        "waiting for the resolution that key {} signed at nonce {} (re-broadcast), {age} s after it was reserved or reopened",
                        key.signer, n.nonce
                    )));
                }
                tracing::warn!(market_id = %market_id, signer = %key.signer, nonce = n.nonce, age, "the previous holder's transaction was not mined in time: this node signs its own (a pre-flight shows whether the market is still open; should both land, the second reverts on chain with AlreadyResolved)");
                Ok(None)
            }
        }
    }
}
