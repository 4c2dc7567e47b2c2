//! One follow of a reserved nonce ([`TxManager::drive`]): the state its loop carries
//! from one look to the next, and one method per concern of a look — the receipts of
//! our attempts, a nonce the chain used otherwise, an attempt never accepted, a
//! replacement with higher fees, an attempt dropped from the pool.

use super::fees::{self, Bump, BumpReason, Fees};
use super::{Head, Sent, TxError, TxManager, TxOutcome, crash_point, gwei};
use alloy::primitives::B256;
use alloy::providers::Provider;
use alloy::rpc::types::TransactionReceipt;
use cresolver_core::MarketId;
use cresolver_metrics::{TxAttemptKind, TxEventKind};
use cresolver_store::{AttemptRecord, NonceRecord, NonceState};
use std::time::{Duration, Instant};

/// What a look at the nonce decided.
pub(super) enum Step {
    /// The nonce ended.
    Done(TxOutcome),
    /// Sleep one poll interval or until a new head, then look again.
    Wait,
    /// Look again at once.
    Again,
}

/// What one look read from the chain: the head, the receipts of our attempts when the
/// look reads them along with it, and the newest block's number and hash when no
/// confirmations are waited for.
type Look = (
    Head,
    Option<Option<(AttemptRecord, TransactionReceipt)>>,
    Option<(u64, B256)>,
);

/// The state of one follow of a nonce, carried from one look to the next.
pub(super) struct Follow<'a> {
    /// The manager that follows the nonce.
    txm: &'a TxManager,
    /// The nonce followed.
    nonce: u64,
    /// When the follow started (the bound of [`TxManager::wait`] counts from it).
    pub(super) started: Instant,
    /// Blocks that must be on top of the receipt's block.
    need: u64,
    /// When the chain's count first passed our nonce with none of our attempts found.
    lost_since: Option<Instant>,
    /// (attempt, block) where we last saw one of our attempts included.
    included: Option<(B256, u64)>,
    /// The head of the last look (`None`: the next look reads the receipts).
    last_head: Option<u64>,
    /// New heads, when the manager has a feed of them.
    pub(super) wake: Option<tokio::sync::watch::Receiver<u64>>,
    /// When the pool was last asked whether it still has the newest attempt.
    last_pool_check: Instant,
    /// Whether a node refused the newest attempt as underpriced (replace it).
    force_bump: bool,
    /// Whether reaching the fee cap was logged already.
    at_cap_logged: bool,
}

impl<'a> Follow<'a> {
    /// A follow of `nonce` that starts now.
    pub(super) fn new(txm: &'a TxManager, nonce: u64) -> Self {
        Self {
            txm,
            nonce,
            started: Instant::now(),
            need: txm.cfg.confirmations,
            lost_since: None,
            included: None,
            last_head: None,
            wake: txm.head_waker(),
            last_pool_check: Instant::now(),
            force_bump: false,
            at_cap_logged: false,
        }
    }

    /// One look at a nonce that has attempts: its receipts (on a new head, or while
    /// one is included or the nonce is mined), then its newest attempt.
    pub(super) async fn turn(
        &mut self,
        rec: &NonceRecord,
        attempts: &[AttemptRecord],
    ) -> Result<Step, TxError> {
        let (head, prefetched, latest) = self.look(attempts).await?;
        let new_head = self.last_head != Some(head.number);
        self.last_head = Some(head.number);
        if (new_head || self.included.is_some() || rec.state == NonceState::Mined)
            && let Some(step) = self
                .check_receipts(rec, attempts, head, prefetched, latest)
                .await?
        {
            return Ok(step);
        }
        let Some(newest) = attempts.last() else {
            return Ok(Step::Again);
        };
        self.tend_newest(rec, newest, head).await
    }

    /// Reads the head. A look that will look for a receipt (the first, or one woken by
    /// a new head) reads the head and the receipts together (one round trip). With no
    /// confirmations to wait for, the newest block's hash goes with them: a receipt in
    /// that block needs no second read to know its block is canonical (with
    /// confirmations, the receipt's block is never the newest when closed).
    async fn look(&self, attempts: &[AttemptRecord]) -> Result<Look, TxError> {
        let txm = self.txm;
        let newer = self.wake.as_ref().map(|rx| *rx.borrow());
        Ok(if self.last_head.is_none() || newer > self.last_head {
            let latest = async {
                match self.need {
                    0 => txm.latest_block().await.ok().flatten(),
                    _ => None,
                }
            };
            let (h, m, l) = tokio::join!(txm.head(false), txm.mined_attempt(attempts), latest);
            (h?, Some(m?), l)
        } else {
            (txm.head(false).await?, None, None)
        })
    }

    /// Looks for a receipt of our attempts: one deep enough on the canonical chain
    /// closes the nonce as mined; one still shallow waits; none after one was seen is
    /// a reorg (the attempt is re-broadcast); none at all asks whether the chain used
    /// the nonce otherwise ([`Self::check_lost`]). `None`: go on with the newest attempt.
    async fn check_receipts(
        &mut self,
        rec: &NonceRecord,
        attempts: &[AttemptRecord],
        head: Head,
        prefetched: Option<Option<(AttemptRecord, TransactionReceipt)>>,
        latest: Option<(u64, B256)>,
    ) -> Result<Option<Step>, TxError> {
        let (txm, nonce, need) = (self.txm, self.nonce, self.need);
        let mined = match prefetched {
            Some(m) => m,
            None => txm.mined_attempt(attempts).await?,
        };
        if let Some((a, r)) = mined {
            let block = r.block_number.unwrap_or(head.number);
            if self.included.map(|(_, b)| b) != Some(block) {
                tracing::info!(market_id = %rec.payload.market_id, nonce, tx = %a.tx_hash, block, need, "transaction included; waiting for confirmations");
                self.included = Some((a.tx_hash, block));
            }
            self.lost_since = None;
            // (a block that changed under us is looked at again at the next head)
            if head.number >= block.saturating_add(need)
                && txm
                    .close_if_canonical(txm.key, nonce, a.tx_hash, block, &r, latest)
                    .await?
            {
                txm.metrics.tx_event(&txm.signer_label, TxEventKind::Mined);
                txm.refresh_backlog();
                return Ok(Some(Step::Done(TxOutcome::Mined {
                    nonce,
                    attempt: a,
                    receipt: Box::new(r),
                })));
            }
            return Ok(Some(Step::Wait));
        }
        if let Some((tx, block)) = self.included.take() {
            tracing::warn!(market_id = %rec.payload.market_id, nonce, %tx, block, "reorg: our transaction is no longer on the canonical chain; re-broadcasting it");
            txm.metrics
                .tx_event(&txm.signer_label, TxEventKind::Reorged);
            if let Some(a) = attempts.iter().find(|a| a.tx_hash == tx) {
                txm.metrics
                    .tx_attempt(&txm.signer_label, TxAttemptKind::Rebroadcast);
                let _ = txm.broadcast(&rec.payload, a, head.number).await?;
            }
        }
        self.check_lost(rec.payload.market_id, attempts, head).await
    }

    /// Not mined: has the chain used the nonce for something else? The nonce ends
    /// `Lost` when the key's deep count passed it, none of our attempts is in a block,
    /// and that held for a grace period. `None`: the nonce is still ours to send.
    async fn check_lost(
        &mut self,
        market_id: MarketId,
        attempts: &[AttemptRecord],
        head: Head,
    ) -> Result<Option<Step>, TxError> {
        let (txm, nonce) = (self.txm, self.nonce);
        let mined_count = txm.deep_count(txm.key.signer, head.number).await?;
        if mined_count > nonce {
            // One of ours may have been mined between the two reads, or its
            // receipt may not be indexed yet (a node updates the account's
            // count before its receipts, a load balancer mixes backends): look
            // the attempts up by hash, and declare the nonce lost only when
            // that holds for a grace period.
            if txm.mined_attempt(attempts).await?.is_some()
                || txm.any_attempt_in_a_block(attempts).await?
            {
                self.last_head = None;
                return Ok(Some(Step::Wait));
            }
            let since = *self.lost_since.get_or_insert_with(Instant::now);
            if since.elapsed() < txm.lost_grace() {
                self.last_head = None;
                return Ok(Some(Step::Wait));
            }
            let detail = format!(
                "the chain used nonce {nonce} for a transaction that is none of our {} attempt(s)",
                attempts.len()
            );
            tracing::warn!(market_id = %market_id, nonce, "{detail}");
            txm.store
                .finish_nonce(txm.key, nonce, NonceState::Lost, None, Some(&detail))
                .await?;
            txm.metrics.tx_event(&txm.signer_label, TxEventKind::Lost);
            txm.refresh_backlog();
            return Ok(Some(Step::Done(TxOutcome::Lost { nonce })));
        }
        self.lost_since = None;
        txm.refresh_backlog();
        Ok(None)
    }

    /// Tends the newest attempt: sends it when no node accepted it yet, replaces it
    /// when it needs higher fees, re-broadcasts it when the pool dropped it.
    async fn tend_newest(
        &mut self,
        rec: &NonceRecord,
        newest: &AttemptRecord,
        head: Head,
    ) -> Result<Step, TxError> {
        let current = Fees {
            max_fee_per_gas: newest.max_fee_per_gas,
            max_priority_fee_per_gas: newest.max_priority_fee_per_gas,
        };
        let Some(sent_block) = newest.sent_block else {
            // stored, never accepted by a node (a crash, or a refused broadcast)
            let sent = self
                .txm
                .broadcast(&rec.payload, newest, head.number)
                .await?;
            self.after_send(&sent);
            return Ok(Step::Wait);
        };
        let reason = if self.force_bump {
            Some(BumpReason::Refused)
        } else {
            fees::needs_bump(
                current,
                head.next_base_fee,
                sent_block,
                head.number,
                &self.txm.cfg.fees,
            )
        };
        if let Some(reason) = reason {
            return self.replace(rec, newest, current, reason, head).await;
        }
        if self.last_pool_check.elapsed() >= self.txm.cfg.poll_interval.max(Duration::from_secs(1))
        {
            self.last_pool_check = Instant::now();
            return self.check_pool(rec, newest, head).await;
        }
        Ok(Step::Wait)
    }

    /// What a broadcast's answer asks of the next look: a replacement when a node
    /// refused the attempt as underpriced, the receipts again when the nonce is used.
    fn after_send(&mut self, sent: &Sent) {
        match sent {
            Sent::Underpriced(_) => self.force_bump = true,
            Sent::NonceTooLow => self.last_head = None,
            _ => {}
        }
    }

    /// Replaces the newest attempt (fees `current`) at the same nonce with both fees
    /// raised, under the key's lock: signed, stored, then broadcast. At the fee cap
    /// nothing is signed (logged once).
    async fn replace(
        &mut self,
        rec: &NonceRecord,
        newest: &AttemptRecord,
        current: Fees,
        reason: BumpReason,
        head: Head,
    ) -> Result<Step, TxError> {
        let (txm, nonce) = (self.txm, self.nonce);
        self.force_bump = false;
        let _guard = txm.lock.lock().await;
        let estimate = txm.estimate().await?;
        match fees::bump(current, estimate, head.next_base_fee, &txm.cfg.fees) {
            Bump::Replace(f) => {
                let a = txm.sign(nonce, newest.seq + 1, &rec.payload, f).await?;
                txm.store
                    .add_attempt(txm.key, rec.payload.key(), &a)
                    .await?;
                crash_point("replaced");
                txm.metrics
                    .tx_attempt(&txm.signer_label, TxAttemptKind::Replacement);
                let sent = txm.broadcast(&rec.payload, &a, head.number).await?;
                tracing::warn!(market_id = %rec.payload.market_id, nonce, ?reason, replaces = %newest.tx_hash, tx = %a.tx_hash,
                    max_fee_gwei = %gwei(f.max_fee_per_gas), tip_gwei = %gwei(f.max_priority_fee_per_gas),
                    next_base_fee_gwei = %gwei(head.next_base_fee), result = ?sent, "transaction replaced with higher fees");
                if matches!(sent, Sent::Underpriced(_)) {
                    self.force_bump = true;
                }
                self.last_head = None;
                Ok(Step::Again)
            }
            Bump::AtCap => {
                if !self.at_cap_logged {
                    tracing::error!(market_id = %rec.payload.market_id, nonce, max_fee_gwei = %gwei(current.max_fee_per_gas),
                        next_base_fee_gwei = %gwei(head.next_base_fee), "cannot replace the transaction: the fee cap (submit.max_fee_per_gas_gwei) is reached");
                    self.at_cap_logged = true;
                }
                Ok(Step::Wait)
            }
        }
    }

    /// Asks the node whether its pool still has the newest attempt; one it dropped is
    /// re-broadcast.
    async fn check_pool(
        &mut self,
        rec: &NonceRecord,
        newest: &AttemptRecord,
        head: Head,
    ) -> Result<Step, TxError> {
        let txm = self.txm;
        let known = txm
            .provider
            .get_transaction_by_hash(newest.tx_hash)
            .await
            .map_err(|e| {
                TxError::Rpc(cresolver_chain::RpcFailure::new(
                    "eth_getTransactionByHash",
                    e,
                ))
            })?;
        if known.is_some() {
            return Ok(Step::Wait);
        }
        tracing::warn!(market_id = %rec.payload.market_id, nonce = self.nonce, tx = %newest.tx_hash, "transaction dropped from the pool; re-broadcasting it");
        txm.metrics
            .tx_attempt(&txm.signer_label, TxAttemptKind::Rebroadcast);
        let sent = txm.broadcast(&rec.payload, newest, head.number).await?;
        self.after_send(&sent);
        Ok(Step::Again)
    }
}
