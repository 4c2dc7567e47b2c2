//! Lease keeping for a shared store: a round is claimed before it is driven, its lease
//! renewed every third of its duration while the drive runs, and released after it (with
//! the back-off of a paused round). The drive stops when the lease is lost: a renewal
//! refused, or none made within two thirds of the lease (the node then cannot know it
//! still holds the round). A local store's claim is the in-process one.

use alloy::primitives::Address;
use cresolver_metrics::{LeaseEvent, Metrics};
use cresolver_store::{MarketId, RoundKey};
use cresolver_store::{RoundStore, StoreError};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

/// Claims, keeps and releases rounds' leases in one store.
pub(crate) struct Keeper<'a> {
    /// The round store.
    pub store: &'a Arc<dyn RoundStore>,
    /// Counts claims, takeovers and leases held.
    pub metrics: &'a Metrics,
}

/// A round this node holds, its lease renewed until it is released (or dropped).
pub(crate) struct Held {
    market: Address,
    market_id: MarketId,
    /// Cancelled when the lease is lost.
    lost: CancellationToken,
    /// The renewal task (shared stores), aborted when the round is let go.
    _renewal: Option<AbortOnDropHandle<()>>,
}

impl Held {
    /// Resolves when the lease is lost.
    pub async fn lost(&self) {
        self.lost.cancelled().await;
    }
}

impl Keeper<'_> {
    /// Claims the round (`direct`: a trigger, a retry or an operator, which the
    /// back-off of a released round does not hold up). `None`: another node holds it,
    /// or it is final.
    pub async fn claim(&self, round: RoundKey, direct: bool) -> Result<Option<Held>, StoreError> {
        let (market, market_id) = (round.market, round.id);
        let claimed_at = Instant::now();
        let Some(lease) = self
            .store
            .claim(RoundKey::new(market, market_id), direct)
            .await?
        else {
            return Ok(None);
        };
        if self.store.shared() {
            self.metrics.lease_event(LeaseEvent::Claimed);
            if let Some(prev) = &lease.taken_from {
                self.metrics.lease_event(LeaseEvent::Takeover);
                tracing::warn!(market_id = %market_id, from = %prev, term = lease.term, "taking over a round whose holder's lease expired; continuing from its persisted stage");
            } else {
                tracing::debug!(market_id = %market_id, term = lease.term, "lease claimed");
            }
        }
        self.metrics.set_leases_held(self.store.held() as u64);
        let lost = CancellationToken::new();
        // aborted with the Held, also when the node drops the drive (RoundKey::new(shutdown, a test))
        let renewal = self.store.shared().then(|| {
            AbortOnDropHandle::new(tokio::spawn(renew(
                self.store.clone(),
                RoundKey::new(market, market_id),
                claimed_at,
                lost.clone(),
            )))
        });
        Ok(Some(Held {
            market,
            market_id,
            lost,
            _renewal: renewal,
        }))
    }

    /// Lets the round go, whatever the drive's outcome: after a lost lease the
    /// conditional update touches nothing (the term moved on) and this node forgets its
    /// claim; after a renewal that could not be made in time it frees the round for
    /// another node. `retry_after`: the back-off of a paused round.
    pub async fn release(&self, held: Held, retry_after: Option<Duration>) {
        let (market, market_id) = (held.market, held.market_id);
        drop(held);
        if let Err(e) = self
            .store
            .release(RoundKey::new(market, market_id), retry_after)
            .await
        {
            tracing::warn!(market_id = %market_id, error = %e, "cannot release the round's lease: it expires by itself");
        }
        self.metrics.set_leases_held(self.store.held() as u64);
    }
}

/// Renews a lease every third of its duration until aborted; cancels `lost` when the
/// store refuses (another node holds the round) or when no renewal succeeded for
/// two thirds of the lease (the node cannot know it still holds it, so it stops first).
async fn renew(
    store: Arc<dyn RoundStore>,
    round: RoundKey,
    claimed_at: Instant,
    lost: CancellationToken,
) {
    let (market, market_id) = (round.market, round.id);
    let lease = store.lease_duration();
    let every = lease / 3;
    // The drive stops at two thirds of a lease after the last renewal that succeeded,
    // counted from when it was *sent* (the database set the expiry after that) and
    // checked on time, not only after the next attempt returns.
    let mut deadline = claimed_at + lease * 2 / 3;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = tokio::time::sleep_until(deadline.into()) => {}
        }
        let sent = Instant::now();
        let budget = deadline.saturating_duration_since(sent).min(every);
        match tokio::time::timeout(budget, store.renew(RoundKey::new(market, market_id))).await {
            Ok(Ok(true)) => deadline = sent + lease * 2 / 3,
            Ok(Ok(false)) => {
                tracing::warn!(market_id = %market_id, "lease renewal refused: another node holds the round");
                lost.cancel();
                return;
            }
            Ok(Err(e)) => {
                tracing::warn!(market_id = %market_id, error = %e, "cannot renew the round's lease")
            }
            Err(_) => {
                tracing::warn!(market_id = %market_id, "renewing the round's lease timed out")
            }
        }
        if Instant::now() >= deadline {
            tracing::warn!(market_id = %market_id, "the lease could not be renewed in time: stopping the round before it expires");
            lost.cancel();
            return;
        }
    }
}
