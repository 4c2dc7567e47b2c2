//! The capabilities around leases: which node drives which round ([`Leases`]), and the
//! check that this node still holds a round before it acts for it ([`Fence`]).

use crate::RoundKey;
use crate::{Lease, StoreError};
use alloy_primitives::Address;
use std::time::Duration;

/// Which node drives which round: claims, renewals and releases of a round's lease,
/// and the rounds a node may claim. Used by the node's scheduler (its claim loop and
/// each round's lease keeper). On SQLite one node holds every round.
#[async_trait::async_trait]
pub trait Leases: Send + Sync {
    /// Whether several nodes share this store (PostgreSQL): rounds are then claimed
    /// from the store by whichever node has room, not only from this node's triggers.
    fn shared(&self) -> bool {
        false
    }
    /// This node's name as a lease holder.
    fn node_id(&self) -> &str;
    /// How long a lease lasts without a renewal.
    fn lease_duration(&self) -> Duration {
        Duration::from_secs(15)
    }
    /// Claims an unfinished round that is unheld (and past a back-off set at release,
    /// unless `ignore_backoff`), whose lease expired, or that this node holds; bumps
    /// its term. `None`: another node holds it, or it is final or unknown.
    async fn claim(
        &self,
        round: RoundKey,
        ignore_backoff: bool,
    ) -> Result<Option<Lease>, StoreError>;
    /// Extends this node's lease; `false` when it was lost.
    async fn renew(&self, round: RoundKey) -> Result<bool, StoreError>;
    /// Gives the round up; with `retry_after`, no node claims it from the store before
    /// that (a round paused on a transient error keeps its back-off cluster-wide).
    async fn release(
        &self,
        round: RoundKey,
        retry_after: Option<Duration>,
    ) -> Result<(), StoreError>;
    /// Unfinished rounds that a node may claim now, oldest first: unheld and past any
    /// back-off, with an expired lease, or held by this node's id (a restarted node with
    /// a fixed `store.node_id` takes its own rounds back at once).
    /// Only rounds of `markets` (the markets this node has a workflow for).
    async fn claimable(
        &self,
        markets: &[Address],
        limit: usize,
    ) -> Result<Vec<RoundKey>, StoreError>;
    /// How many rounds this node holds.
    fn held(&self) -> usize;
}

/// The fence of a round's side effects outside the store. Used by the transaction
/// manager (through [`super::TxStore`]) before every broadcast: a node that lost a
/// round's lease (paused, partitioned) sends nothing for it.
#[async_trait::async_trait]
pub trait Fence: Send + Sync {
    /// Whether this node still holds the round at the term it claimed (checked before
    /// every broadcast).
    async fn fence_ok(&self, round: RoundKey) -> Result<bool, StoreError>;
}
