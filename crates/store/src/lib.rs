//! cresolver-store, the round store: an embedded SQLite database in the data dir that makes the node
//! exactly-once (or a PostgreSQL database a cluster shares). It remembers every trigger
//! log seen (de-duplicated by tx hash and log index), one round per market with its
//! state (requested → discovered → answered → challenged → evaluated → submitted →
//! confirmed, or failed/skipped with a reason), the signed submission transaction
//! *before* it is broadcast, and the watcher's checkpoint. The transaction manager's
//! nonces and attempts are [`NonceRecord`]s and [`AttemptRecord`]s.
//!
//! The store's operations are small capability traits ([`round_store`]), each
//! implemented once per backend: [`SqliteStore`] (`sqlite/`) and [`PgStore`] (`pg/`),
//! each with its own SQL, reading typed columns ([`column`]) and following one request
//! decision table ([`decide`]).

mod column;
mod decide;
pub mod pg;
mod records;
mod round_store;
mod sqlite;
mod stage;

pub use decide::{RESUBMIT_REASON, RequestDecision, decide};
pub use pg::{PgConfig, PgFailure, PgStore};
pub use records::{
    AttemptRecord, KeyRef, MinedAt, NonceRecord, NonceState, PastAttempt, TxPayload, Watched,
};
pub use round_store::{
    Checkpoints, Fence, Finality, FinalityStore, Leases, Nonces, Overview, Requests, RoundStore,
    RoundTxs, Rounds, Settings, TxStore,
};
pub use sqlite::{SqliteStore, Store};
pub use stage::Stage;

use alloy_primitives::{Address, B256, Bytes};
use cresolver_core::LogRef;
pub use cresolver_core::{MarketId, RoundKey};
use serde::Serialize;
use std::time::{SystemTime, UNIX_EPOCH};

/// A round as stored.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct RoundRecord {
    /// The market contract.
    #[schema(value_type = String, pattern = "^0x[0-9a-fA-F]{40}$")]
    pub market: Address,
    /// The market's id in its contract.
    #[schema(value_type = String, pattern = "^0x[0-9a-f]+$")]
    pub market_id: MarketId,
    /// Where the round is.
    pub state: Stage,
    /// 1 for the first round of a market; a new request after a failure adds one.
    pub attempt: u32,
    /// The name of the workflow that runs the round.
    pub workflow: String,
    /// The transaction of the request log that started it (`None`: a manual request).
    #[schema(required = true, value_type = Option<String>, pattern = "^0x[0-9a-f]{64}$")]
    pub request_tx: Option<B256>,
    /// The block the round is judged at: its request log's, or for a manual request
    /// the head at its first run.
    #[schema(required = true)]
    pub request_block: Option<u64>,
    /// Why the round is in its state (a failure, a skip, a reopening).
    #[schema(required = true)]
    pub reason: Option<String>,
    /// Its newest signed submission transaction.
    #[schema(required = true, value_type = Option<String>, pattern = "^0x[0-9a-f]{64}$")]
    pub submit_tx: Option<B256>,
    /// That transaction's signed bytes.
    #[serde(skip)]
    pub raw_tx: Option<Bytes>,
    /// The round's outcome/transcript as JSON, once evaluated.
    #[schema(required = true, value_type = Option<Object>)]
    pub outcome: Option<serde_json::Value>,
    /// When the round was first recorded, in unix seconds.
    pub created_at: u64,
    /// When the round last changed, in unix seconds.
    pub updated_at: u64,
    /// The node that holds the round's lease (drives it), while it is unfinished.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
}

/// A node's claim on a round (see [`pg`]): the term is the fencing token every write
/// of the round is checked against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The round's term at this claim: one more than at the claim before.
    pub term: u64,
    /// The node that held the round before, when its lease expired (a takeover).
    pub taken_from: Option<String>,
}

/// Which rounds a listing keeps, by when they last changed (`updated_at`, unix seconds):
/// at or after `since`, and before `until`. The default keeps every round.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UpdatedBetween {
    /// Only rounds updated at or after this time.
    pub since: Option<u64>,
    /// Only rounds updated before this time.
    pub until: Option<u64>,
}

impl RoundRecord {
    /// The round's identity.
    pub fn key(&self) -> RoundKey {
        RoundKey {
            market: self.market,
            id: self.market_id,
        }
    }
}

impl RoundSummary {
    /// The round's identity.
    pub fn key(&self) -> RoundKey {
        RoundKey {
            market: self.market,
            id: self.market_id,
        }
    }
}

impl UpdatedBetween {
    /// The bounds as SQL integers: `since` (0 when open) and `until` (`i64::MAX` when open).
    pub(crate) fn sql_bounds(self) -> (i64, i64) {
        let clamp = |t: u64| i64::try_from(t).unwrap_or(i64::MAX);
        (
            self.since.map_or(0, clamp),
            self.until.map_or(i64::MAX, clamp),
        )
    }
}

/// A round without its transcript: what `GET /rounds` lists.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct RoundSummary {
    /// The market contract.
    #[schema(value_type = String, pattern = "^0x[0-9a-fA-F]{40}$")]
    pub market: Address,
    /// The market's id in its contract.
    #[schema(value_type = String, pattern = "^0x[0-9a-f]+$")]
    pub market_id: MarketId,
    /// Where the round is.
    pub state: Stage,
    /// 1 for the first round of a market; a new request after a failure adds one.
    pub attempt: u32,
    /// The name of the workflow that runs the round.
    pub workflow: String,
    /// The transaction of the request log that started it (`None`: a manual request).
    #[schema(required = true, value_type = Option<String>, pattern = "^0x[0-9a-f]{64}$")]
    pub request_tx: Option<B256>,
    /// The block the round is judged at.
    #[schema(required = true)]
    pub request_block: Option<u64>,
    /// Why the round is in its state, cut to [`SUMMARY_REASON_BYTES`].
    #[schema(required = true)]
    pub reason: Option<String>,
    /// Its newest signed submission transaction.
    #[schema(required = true, value_type = Option<String>, pattern = "^0x[0-9a-f]{64}$")]
    pub submit_tx: Option<B256>,
    /// When the round was first recorded, in unix seconds.
    pub created_at: u64,
    /// When the round last changed, in unix seconds.
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

/// `s` cut to at most `max` bytes at a character boundary, with `…` appended when it
/// was cut.
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

/// Why a store call failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The data directory of the SQLite store cannot be created.
    #[error("cannot create data dir {path}: {source}")]
    DataDir {
        /// The directory.
        path: String,
        /// Why it cannot be created.
        source: std::io::Error,
    },
    /// SQLite refused a statement or the database file.
    #[error("database error: {0}")]
    Sqlite(rusqlite::Error),
    /// A stored value does not parse (what it is, and why).
    #[error("database holds unexpected data: {0}")]
    Corrupt(String),
    /// A value cannot be encoded for the store (JSON).
    #[error("cannot encode a value for the store: {0}")]
    Encode(#[source] serde_json::Error),
    /// A write for a round that the store does not hold.
    #[error("no round for market {} / {}", .0.market, .0.id)]
    NoRound(RoundKey),
    /// The blocking task that ran a SQLite call panicked or was cancelled.
    #[error("store task failed: {0}")]
    Task(#[source] tokio::task::JoinError),
    /// PostgreSQL refused a statement, or the connection pool failed.
    #[error("PostgreSQL: {0}")]
    Postgres(pg::PgFailure),
    /// The PostgreSQL store cannot connect, or the server is unfit (why, also kept as
    /// the source).
    #[error(
        "cannot use the database at {url}: {error} (check store.url, and that the server runs and accepts this user)"
    )]
    Connect {
        /// The connection URL, without its password.
        url: String,
        /// What went wrong.
        #[source]
        error: Box<dyn std::error::Error + Send + Sync>,
    },
    /// This node no longer holds the round (another node claimed it): nothing was written.
    #[error("the lease of market {} / {} was lost to another node: this node stops the round", .0.market, .0.id)]
    LeaseLost(RoundKey),
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

impl From<rusqlite::Error> for StoreError {
    /// A column that does not convert is corrupt data ([`StoreError::Corrupt`]); any
    /// other failure is SQLite's.
    fn from(e: rusqlite::Error) -> Self {
        match e {
            rusqlite::Error::FromSqlConversionFailure(i, _, why) => {
                StoreError::Corrupt(format!("column {i}: {why}"))
            }
            e => StoreError::Sqlite(e),
        }
    }
}

/// Runs a store call to its end on this thread, for code that is not async (the CLI's
/// synchronous parts, tests): `block_on(store.get(market, id))`. Outside a tokio
/// runtime the SQLite store does its work on this thread; inside one it is still done
/// on the blocking pool, and this thread waits.
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    futures::executor::block_on(f)
}
