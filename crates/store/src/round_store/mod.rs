//! The store as the node's async code uses it, as small capability traits, one per
//! concept: [`Requests`] (trigger logs and manual requests), [`Checkpoints`] (the
//! watcher's), [`Rounds`] (a round's state, progress and outcome), [`Overview`] (lists
//! and counts for operators), [`Nonces`] (one key's nonces and attempts), [`RoundTxs`]
//! (a round's transactions under any key), [`Fence`] (the lease check before a
//! broadcast), [`Leases`] (which node drives which round), [`Finality`] (done rounds)
//! and [`Settings`]. [`RoundStore`] is all of them together, so that the PostgreSQL
//! store stands behind the same calls as [`crate::SqliteStore`], the embedded SQLite
//! store; each trait is implemented once per backend (`sqlite/`, `pg/`). A component
//! takes only the traits it uses: an `Arc<dyn RoundStore>` coerces to an
//! `Arc<dyn Nonces>`, or to an `Arc<dyn TxStore>` (trait upcasting).
//!
//! A write survives the process's crash when the call returns. A signed attempt
//! ([`Nonces::add_attempt`], before its broadcast), a manual request and a node setting
//! also survive a power loss, and so does every write before them; a power loss can
//! take back later writes only, which puts a round back at a step it does again (on
//! SQLite; PostgreSQL commits every write to disk).

mod finality;
mod leases;
mod rounds;
mod settings;
mod txs;

pub use finality::Finality;
pub use leases::{Fence, Leases};
pub use rounds::{Checkpoints, Overview, Requests, Rounds};
pub use settings::Settings;
pub use txs::{Nonces, RoundTxs};

/// What the transaction manager (`cresolver_submit::txm`) uses: one key's nonces and
/// attempts ([`Nonces`]) and the lease check before every broadcast ([`Fence`]).
pub trait TxStore: Nonces + Fence {}

impl<T: Nonces + Fence> TxStore for T {}

/// What the finality watch uses: the done rounds' transitions ([`Finality`]) and a
/// round's stored record ([`Rounds`]).
pub trait FinalityStore: Finality + Rounds {}

impl<T: Finality + Rounds> FinalityStore for T {}

/// Every store operation the node, the watcher, the transaction manager and the API
/// use: all the capability traits together. Implemented for every type that implements
/// them all; a caller that holds an `Arc<dyn RoundStore>` hands each component the
/// part it takes (`Arc<dyn TxStore>`, `Arc<dyn Nonces>`, …).
pub trait RoundStore:
    Requests
    + Checkpoints
    + Rounds
    + Overview
    + TxStore
    + RoundTxs
    + Leases
    + FinalityStore
    + Settings
    + 'static
{
}

impl<T> RoundStore for T where
    T: Requests
        + Checkpoints
        + Rounds
        + Overview
        + TxStore
        + RoundTxs
        + Leases
        + FinalityStore
        + Settings
        + 'static
{
}
