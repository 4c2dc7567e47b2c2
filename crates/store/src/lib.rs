//! cresolver-store, the round store: an embedded SQLite database in the data dir that makes the node
//! exactly-once. It remembers every trigger log seen (de-duplicated by tx hash and log
//! index), one round per market with its state (requested → discovered → answered →
//! challenged → evaluated → submitted → confirmed, or failed/skipped with a reason), the
//! signed submission transaction *before* it is broadcast, and the watcher's checkpoint.
//! The transaction manager's nonces and attempts live in [`txs`].

mod done;
pub mod pg;
mod round_store;
mod stage;
pub use stage::Stage;
mod txs;
pub(crate) use done::{
    ARCHIVE_SQL, PAST_SQL, PastRow, WATCHED_SQL, WatchedRow, renew_in, reopen_submission_in,
};
pub use done::{PastAttempt, RESUBMIT_REASON, Watched};
pub use pg::{PgSettings, PgStore};
pub use round_store::{RoundStore, SqliteStore};
pub use txs::{AttemptRecord, KeyRef, MinedAt, NonceRecord, NonceState, TxPayload};

use alloy_primitives::{Address, B256, Bytes, U256};
use cresolver_core::LogRef;
use serde::Serialize;
use std::str::FromStr;
use std::time::{SystemTime, UNIX_EPOCH};

/// A round as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RoundRecord {
    pub market: Address,
    pub market_id: U256,
    pub state: Stage,
    /// 1 for the first round of a market; a new request after a failure adds one.
    pub attempt: u32,
    pub workflow: String,
    pub request_tx: Option<B256>,
    pub request_block: Option<u64>,
    pub reason: Option<String>,
    pub submit_tx: Option<B256>,
    #[serde(skip)]
    pub raw_tx: Option<Bytes>,
    /// The round's outcome/transcript as JSON, once evaluated.
    pub outcome: Option<serde_json::Value>,
    pub created_at: u64,
    pub updated_at: u64,
    /// The node that holds the round's lease (drives it), while it is unfinished.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
}

/// A node's claim on a round (see [`pg`]): the term is the fencing token every write
/// of the round is checked against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub term: u64,
    /// The node that held the round before, when its lease expired (a takeover).
    pub taken_from: Option<String>,
}

/// A round without its transcript: what `GET /rounds` lists.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RoundSummary {
    pub market: Address,
    pub market_id: U256,
    pub state: Stage,
    pub attempt: u32,
    pub workflow: String,
    pub request_tx: Option<B256>,
    pub request_block: Option<u64>,
    pub reason: Option<String>,
    pub submit_tx: Option<B256>,
    pub created_at: u64,
    pub updated_at: u64,
    /// The node driving the round (unfinished rounds of a cluster, or of this node).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    /// How long the holder's lease still runs, in milliseconds (a cluster only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_ms: Option<u64>,
    /// The node that claimed the round last: the one that drove it to its end, for a
    /// final round (a cluster only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driven_by: Option<String>,
}

/// Longest reason a summary carries.
pub const SUMMARY_REASON_BYTES: usize = 512;

pub fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push('…');
    }
    s
}

/// What recording a request decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestDecision {
    /// This exact log was seen before.
    DuplicateLog,
    /// A new round was created.
    New,
    /// The market's failed round was reopened for another attempt.
    Reopened,
    /// A done round (`finalized`, `skipped`) of a market the chain says is unresolved:
    /// a new attempt was started (the old one is kept in `round_attempts`).
    Renewed,
    /// A `confirmed` round of a market the chain says is unresolved (its transaction left
    /// the canonical chain): reopened at the submission stage, the same nonce re-sent.
    Resubmit,
    /// The market already has a round in progress or finished: nothing to do, unless
    /// the round is done (`confirmed`, `finalized`, `skipped`) and the chain says the
    /// market is unresolved (see [`RoundStore::renew_round`]).
    AlreadyHandled(Stage),
}

impl RequestDecision {
    /// Whether a round should be (re)started.
    pub fn starts_round(self) -> bool {
        matches!(
            self,
            RequestDecision::New
                | RequestDecision::Reopened
                | RequestDecision::Renewed
                | RequestDecision::Resubmit
        )
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot create data dir {path}: {source}")]
    DataDir {
        path: String,
        source: std::io::Error,
    },
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("database holds unexpected data: {0}")]
    Corrupt(String),
    #[error("no round for market {0} / {1}")]
    NoRound(Address, U256),
    #[error("store task failed: {0}")]
    Task(String),
    #[error("PostgreSQL: {0}")]
    Postgres(String),
    #[error(
        "cannot use the database at {url}: {error} (check store.url, and that the server runs and accepts this user)"
    )]
    Connect { url: String, error: String },
    /// This node no longer holds the round (another node claimed it): nothing was written.
    #[error("the lease of market {0} / {1} was lost to another node: this node stops the round")]
    LeaseLost(Address, U256),
}

impl StoreError {
    /// Whether the error is a lost lease (the round is someone else's now).
    pub fn is_lease_lost(&self) -> bool {
        matches!(self, StoreError::LeaseLost(..))
    }
}

/// Unix seconds now (0 before 1970: a clock that far off is not worth a panic).
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

mod rows;
mod sqlite;
pub(crate) use rows::*;
pub use sqlite::Store;
pub(crate) use sqlite::{DONE_SQL, SELECT};

#[cfg(test)]
mod tests;
