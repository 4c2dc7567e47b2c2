//! The `follow` and `conclude` steps: the round's reserved nonce is followed until one
//! of its attempts is mined deep enough (or the chain used the nonce otherwise, when the
//! same payload is re-simulated and signed at a fresh nonce), and the receipt decides
//! how the round ends: confirmed, skipped (someone else resolved the market) or failed.
//! The ending completes the transcript with the confirmation and every attempt.

use super::{Ending, Next, Round, StepError, Steps, step};
use alloy::primitives::Address;
use alloy::providers::Provider;
use alloy::rpc::types::TransactionReceipt;
use cresolver_metrics::TimedStage;
use cresolver_pipeline::transcript::{
    ConfirmationRecord, ConfirmationStatus, SubmissionRecord, TransactionRecord, Transcript,
};
use cresolver_store::RoundKey;
use cresolver_store::{NonceState, Stage};
use cresolver_submit::Confirmed;
use cresolver_submit::txm::{TxManager, TxOutcome};
use std::time::Instant;
use tracing::Instrument;

/// How many times a round signs again with a fresh nonce when its nonce was used by
/// another transaction of the key, before it fails.
const MAX_FRESH_NONCES: u32 = 3;

impl Steps<'_> {
    /// Follows the round's reserved nonce to a mined receipt, or to a fresh nonce when
    /// the key's nonce was used elsewhere (at most [`MAX_FRESH_NONCES`] times).
    pub(super) async fn follow(
        &self,
        round: &mut Round<'_>,
        nonce: u64,
    ) -> Result<Next, StepError> {
        let Some(txm) = self.submission.txm() else {
            return Err(StepError::retry("no transaction manager"));
        };
        round.stage = Stage::Submitted;
        let started = Instant::now();
        let outcome = txm
            .drive(nonce)
            .instrument(step("mine", round.market_id))
            .await;
        self.metrics
            .observe_stage(TimedStage::Submit, started.elapsed().as_secs_f64());
        match outcome.map_err(StepError::from_tx)? {
            TxOutcome::Mined { receipt, .. } => Ok(Next::Conclude(receipt)),
            TxOutcome::Lost { nonce: lost } => self.fresh_nonce(round, txm, lost).await,
        }
    }

    /// The chain used the round's nonce `lost` for another transaction of the key: the
    /// round is skipped when someone else resolved the market, else the same payload,
    /// re-simulated exactly as it will be sent, is signed at a fresh nonce.
    async fn fresh_nonce(
        &self,
        round: &mut Round<'_>,
        txm: &TxManager,
        lost: u64,
    ) -> Result<Next, StepError> {
        let market_id = round.market_id;
        if self.resolved_on_chain(round).await? {
            let reason = format!(
                "nonce {lost} of the resolver key was used by another transaction, and the market is resolved on chain by someone else"
            );
            return Ok(Next::End(Ending::Concluded {
                confirmation: ConfirmationRecord {
                    status: ConfirmationStatus::Skipped,
                    tx_hash: None,
                    block_number: None,
                    resolution: None,
                    resolver: None,
                    gas_used: None,
                    detail: Some(reason.clone()),
                },
                from: txm.key().signer,
                stage: Stage::Skipped,
                reason: Some(reason),
            }));
        }
        round.fresh_nonces += 1;
        if round.fresh_nonces > MAX_FRESH_NONCES {
            return Err(StepError::fail(format!(
                "the resolver key's nonce was used by other transactions {MAX_FRESH_NONCES} times in a row: is another process signing with this key?"
            )));
        }
        let Some(rec) = self.store.nonce_record(txm.key(), lost).await? else {
            return Err(StepError::retry(format!(
                "nonce {lost} vanished from the store"
            )));
        };
        let call = alloy::rpc::types::TransactionRequest::default()
            .from(txm.key().signer)
            .to(rec.payload.to)
            .input(rec.payload.calldata.clone().into());
        if let Err(e) = self.provider.call(call).await {
            return Err(match e.as_error_resp().and_then(|r| r.as_revert_data()) {
                Some(d) => StepError::fail_from(
                    "re-simulation after a lost nonce reverted",
                    cresolver_chain::decode_revert(&d),
                ),
                None => StepError::retry_from("re-simulating after a lost nonce", e),
            });
        }
        tracing::warn!(market_id = %market_id, lost, "signing the resolution again with a fresh nonce");
        let nonce = txm.submit(rec.payload).await.map_err(StepError::from_tx)?;
        Ok(Next::Follow(nonce))
    }

    /// The receipt of the round's newest mined transaction, under any key, if the chain
    /// still has it (one whose block a reorg removed is not mined any more: the round
    /// goes on as if it had none).
    pub(super) async fn mined_receipt_of_round(
        &self,
        round: &Round<'_>,
    ) -> Result<Option<TransactionReceipt>, StepError> {
        let history = self.store.tx_history(round.key()).await?;
        let mined = history
            .iter()
            .rev()
            .filter(|(n, _)| n.state == NonceState::Mined)
            .filter_map(|(n, _)| n.mined_tx);
        for tx in mined {
            match self.provider.get_transaction_receipt(tx).await {
                Ok(Some(r)) => return Ok(Some(r)),
                Ok(None) => {
                    tracing::warn!(market_id = %round.market_id, %tx, "the round's mined transaction is not on the chain any more (a reorg)");
                }
                Err(e) => {
                    return Err(StepError::retry_from(
                        format!("eth_getTransactionReceipt {tx}"),
                        e,
                    ));
                }
            }
        }
        Ok(None)
    }

    /// Whether the round's market is resolved at the head.
    pub(super) async fn resolved_on_chain(&self, round: &Round<'_>) -> Result<bool, StepError> {
        cresolver_chain::bindings::ICREsolverMarket::new(round.market(), self.provider.clone())
            .getMarket(round.market_id.get())
            .call()
            .await
            .map(|m| m.resolved)
            .map_err(|e| StepError::retry_from("reading the market", e))
    }

    /// Ends a round whose transaction was mined deep enough.
    pub(super) async fn conclude(
        &self,
        round: &mut Round<'_>,
        receipt: &TransactionReceipt,
    ) -> Result<Next, StepError> {
        let market_id = round.market_id;
        let tx = receipt.transaction_hash;
        let e = match round.p.submitter.confirm(market_id, receipt) {
            Ok(Confirmed {
                tx_hash,
                resolution,
                block_number,
                resolver,
                gas_used,
            }) => {
                tracing::info!(market_id = %market_id, tx = %tx_hash, block = block_number, resolution, "market resolved");
                return Ok(Next::End(Ending::Concluded {
                    confirmation: ConfirmationRecord {
                        status: ConfirmationStatus::Confirmed,
                        tx_hash: Some(tx_hash),
                        block_number: Some(block_number),
                        resolution: Some(resolution),
                        resolver: Some(resolver),
                        gas_used: Some(gas_used),
                        detail: None,
                    },
                    from: receipt.from,
                    stage: Stage::Confirmed,
                    reason: None,
                }));
            }
            Err(e) => e,
        };
        // A DON member's transmission that lost the race to another member's delivery of
        // the same report: the DON's report is delivered.
        if let Some(by) = self.delivered_by_another_member(round).await? {
            tracing::info!(market_id = %market_id, %tx, transmitter = %by, "the forwarder delivered the DON's report; this member's transmission of it was mined after it and reverted");
            let detail = format!(
                "delivered through the forwarder by member {by}; this member's transmission {tx} was mined after it and reverted ({e})"
            );
            return Ok(self.delivered(round, by, receipt.from, detail));
        }
        // Our transaction did not resolve it; maybe someone else did.
        let (stage, reason) = if self.resolved_on_chain(round).await? {
            (
                Stage::Skipped,
                format!("resolved on chain by another transaction; ours: {e}"),
            )
        } else {
            (Stage::Failed, e.to_string())
        };
        tracing::warn!(market_id = %market_id, %tx, state = stage.as_str(), %reason, "our transaction did not resolve the market");
        Ok(Next::End(Ending::Concluded {
            confirmation: ConfirmationRecord {
                status: ConfirmationStatus::Failed,
                tx_hash: Some(tx),
                block_number: None,
                resolution: None,
                resolver: None,
                gas_used: None,
                detail: Some(e.to_string()),
            },
            from: receipt.from,
            stage,
            reason: Some(reason),
        }))
    }

    /// Ends a round in `stage`: the receipt's outcome, every transaction attempt and,
    /// when the transcript was stored before the pre-flight's gas was known, the call
    /// the round sent (`from` signed it; from its reservation) go into transcript `t`,
    /// written together with the stage.
    pub(super) async fn finish_transcript(
        &self,
        round: &Round<'_>,
        mut t: Transcript,
        confirmation: ConfirmationRecord,
        from: Address,
        stage: Stage,
        reason: Option<&str>,
    ) -> Result<(), StepError> {
        let (market, market_id) = (round.market(), round.market_id);
        let history = self
            .store
            .tx_history(RoundKey::new(market, market_id))
            .await?;
        if t.submission.is_none() {
            // the nonce whose attempt was mined, else the last one reserved
            let sent = history
                .iter()
                .find(|(n, _)| n.mined_tx.is_some() && n.mined_tx == confirmation.tx_hash)
                .or(history.last());
            t.submission = sent.map(|(n, _)| SubmissionRecord {
                to: n.payload.to,
                calldata: n.payload.calldata.clone(),
                gas_limit: n.payload.gas_limit,
                from,
                mode: round.p.submitter.mode(),
            });
        }
        if let Some(d) = t.don.as_mut() {
            // a DON member's own transmission (its member key signs its transactions):
            // after a restart, the stored transcript predates the send
            if d.transmitter.is_none() && confirmation.tx_hash.is_some() {
                d.transmitter = Some(from);
            }
        }
        t.confirmation = Some(confirmation);
        t.transactions = Some(TransactionRecord::of_history(&history));
        let v = serde_json::to_value(&t)
            .map_err(|e| StepError::retry_from("cannot encode the transcript", e))?;
        self.store
            .set_outcome_and_state(RoundKey::new(market, market_id), &v, stage, reason)
            .instrument(step("save_transcript", market_id))
            .await?;
        Ok(())
    }
}
