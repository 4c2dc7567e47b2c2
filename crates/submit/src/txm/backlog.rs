//! The key's backlog gauges (the age of its oldest pending nonce, and how many nonces
//! the pending ones span), refreshed off the caller's path: a refresh is a
//! store read that a round ending should not wait for.

use super::TxManager;
use std::sync::atomic::{AtomicU64, Ordering};

/// Orders refreshes that finish out of order: only one newer than the last applied
/// sets the gauges.
#[derive(Debug, Default)]
pub(super) struct Order {
    started: AtomicU64,
    applied: parking_lot::Mutex<u64>,
}

impl TxManager {
    /// Refreshes the backlog gauges in the background.
    pub(super) fn refresh_backlog(&self) {
        let seq = self.backlog.started.fetch_add(1, Ordering::Relaxed) + 1;
        let (store, metrics, key) = (self.store.clone(), self.metrics.clone(), self.key);
        let (label, order) = (self.signer_label.clone(), self.backlog.clone());
        tokio::spawn(async move {
            let Ok(pending) = store.pending_nonces(key).await else {
                return;
            };
            let oldest = pending
                .iter()
                .map(|n| cresolver_store::now().saturating_sub(n.created_at))
                .max()
                .unwrap_or(0);
            let gap = match (pending.last(), pending.first()) {
                (Some(hi), Some(lo)) => hi.nonce - lo.nonce + 1,
                _ => 0,
            };
            let mut applied = order.applied.lock();
            if *applied < seq {
                *applied = seq;
                metrics.set_tx_backlog(&label, oldest, gap);
            }
        });
    }
}
