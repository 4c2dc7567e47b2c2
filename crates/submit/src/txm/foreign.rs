//! Nonces that *another* key reserved for a round this node now drives (a cluster whose
//! nodes hold different keys, after a takeover): followed and re-broadcast, never
//! re-signed.

use super::{Foreign, TxError, TxManager};
use alloy::providers::Provider;
use cresolver_metrics::TxAttemptKind;
use cresolver_store::{KeyRef, NonceRecord, NonceState, StoreError};

impl TxManager {
    /// Looks at a nonce that *another* key reserved for a round this node now drives (a
    /// cluster whose nodes hold different keys, after a takeover). This node cannot
    /// re-sign it, but it re-broadcasts the stored bytes (while it holds the round) and
    /// follows their receipts: `Mined` once one is `confirmations` deep on the canonical
    /// chain (the reservation is closed), `Lost` when that key's nonce was used by
    /// something else, `Pending` otherwise.
    pub async fn check_foreign(&self, key: KeyRef, rec: &NonceRecord) -> Result<Foreign, TxError> {
        let attempts = self.store.attempts(key, rec.nonce).await?;
        let head = self.head(false).await?;
        if let Some((a, r)) = self.mined_attempt(&attempts).await? {
            let block = r.block_number.unwrap_or(head.number);
            if head.number < block.saturating_add(self.cfg.confirmations) {
                return Ok(Foreign::Pending);
            }
            if !self
                .close_if_canonical(key, rec.nonce, a.tx_hash, block, &r, None)
                .await?
            {
                return Ok(Foreign::Pending);
            }
            return Ok(Foreign::Mined(Box::new(r)));
        }
        let mined_count = self.deep_count(key.signer, head.number).await?;
        if mined_count > rec.nonce {
            if self.any_attempt_in_a_block(&attempts).await? {
                return Ok(Foreign::Pending);
            }
            let detail = format!(
                "the chain used nonce {} of key {} for a transaction that is none of its {} attempt(s)",
                rec.nonce,
                key.signer,
                attempts.len()
            );
            self.store
                .finish_nonce(key, rec.nonce, NonceState::Lost, None, Some(&detail))
                .await?;
            return Ok(Foreign::Lost);
        }
        if let Some(newest) = attempts.last() {
            let p = &rec.payload;
            if !self.store.fence_ok(p.key()).await? {
                return Err(TxError::Store(StoreError::LeaseLost(p.key())));
            }
            self.metrics
                .tx_attempt(&key.signer.to_string(), TxAttemptKind::Rebroadcast);
            if let Err(e) = self.provider.send_raw_transaction(&newest.raw).await {
                tracing::debug!(nonce = rec.nonce, signer = %key.signer, error = %e, "re-broadcast of another key's transaction");
            }
        }
        Ok(Foreign::Pending)
    }
}
