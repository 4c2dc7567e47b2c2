//! The round store: an embedded SQLite database in the data dir that makes the node
//! exactly-once. It remembers every trigger log seen (de-duplicated by tx hash and log
//! index), one round per market with its state (requested → discovered → answered →
//! challenged → evaluated → submitted → confirmed, or failed/skipped with a reason), the
//! signed submission transaction *before* it is broadcast, and the watcher's checkpoint.
//! The transaction manager's nonces and attempts live in [`txs`].

mod done;
pub mod pg;
mod round_store;
mod txs;
pub(crate) use done::{
    ARCHIVE_SQL, PAST_SQL, PastRow, WATCHED_SQL, WatchedRow, renew_in, reopen_submission_in,
};
pub use done::{PastAttempt, RESUBMIT_REASON, Watched};
pub use pg::{PgSettings, PgStore};
pub use round_store::{RoundStore, SqliteStore};
pub use txs::{AttemptRecord, KeyRef, MinedAt, NonceRecord, NonceState, TxPayload};

use alloy::primitives::{Address, B256, Bytes, U256};
use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;
use std::path::Path;
use std::str::FromStr;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

/// Where a round is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RoundState {
    Requested,
    Discovered,
    Answered,
    Challenged,
    Evaluated,
    /// A nonce is reserved for the round's transaction (see [`txs`]): its attempts may or
    /// may not have been broadcast or mined; it is not yet `confirmations` deep.
    Submitted,
    /// Our transaction resolved the market and is `confirmations` deep; the finality
    /// watch follows it until its block is final (a reorg before then reopens the round
    /// at `submitted`).
    Confirmed,
    /// Our transaction's block is final (the chain's `finalized` block, or
    /// `finality_depth` deep): nothing more happens.
    Finalized,
    Failed,
    /// Nothing to do: the market was already resolved by someone else.
    Skipped,
}

impl RoundState {
    pub fn as_str(self) -> &'static str {
        match self {
            RoundState::Requested => "requested",
            RoundState::Discovered => "discovered",
            RoundState::Answered => "answered",
            RoundState::Challenged => "challenged",
            RoundState::Evaluated => "evaluated",
            RoundState::Submitted => "submitted",
            RoundState::Confirmed => "confirmed",
            RoundState::Finalized => "finalized",
            RoundState::Failed => "failed",
            RoundState::Skipped => "skipped",
        }
    }

    /// States where the round's drive is over: nothing more happens unless a new request
    /// reopens the round, or (for `confirmed`) the finality watch sees its transaction
    /// reorged away.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            RoundState::Confirmed
                | RoundState::Finalized
                | RoundState::Failed
                | RoundState::Skipped
        )
    }

    /// Our transaction resolved the market and is deep enough: `confirmed`, or
    /// `finalized` once its block is final.
    pub fn is_confirmed(self) -> bool {
        matches!(self, RoundState::Confirmed | RoundState::Finalized)
    }

    /// Done states where the market was (or was found) resolved: a new request is served
    /// only when the chain says the market is unresolved.
    pub fn is_resolved(self) -> bool {
        matches!(
            self,
            RoundState::Confirmed | RoundState::Finalized | RoundState::Skipped
        )
    }

    pub const ALL: [RoundState; 10] = [
        RoundState::Requested,
        RoundState::Discovered,
        RoundState::Answered,
        RoundState::Challenged,
        RoundState::Evaluated,
        RoundState::Submitted,
        RoundState::Confirmed,
        RoundState::Finalized,
        RoundState::Failed,
        RoundState::Skipped,
    ];
}

impl FromStr for RoundState {
    type Err = StoreError;
    fn from_str(s: &str) -> Result<Self, StoreError> {
        RoundState::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| StoreError::Corrupt(format!("unknown round state {s:?}")))
    }
}

/// A round as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RoundRecord {
    pub market: Address,
    pub market_id: U256,
    pub state: RoundState,
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
    pub state: RoundState,
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

pub(crate) fn truncate(mut s: String, max: usize) -> String {
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
    AlreadyHandled(RoundState),
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

/// A trigger log's identity and position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRef {
    pub tx_hash: B256,
    pub log_index: u64,
    pub block_number: u64,
    pub block_hash: B256,
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

/// The store. Cheap operations behind a mutex; every write is durable when it returns.
pub struct Store {
    conn: Mutex<Connection>,
}

/// An `UPDATE` of one round: it must have found the round.
fn touched(rows: usize, market: Address, market_id: U256) -> Result<(), StoreError> {
    if rows == 0 {
        return Err(StoreError::NoRound(market, market_id));
    }
    Ok(())
}

pub(crate) fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

const SCHEMA_TABLES: &str = "
CREATE TABLE IF NOT EXISTS seen_logs (
    tx_hash TEXT NOT NULL, log_index INTEGER NOT NULL, market TEXT NOT NULL, market_id TEXT NOT NULL,
    block_number INTEGER NOT NULL, block_hash TEXT NOT NULL, PRIMARY KEY (tx_hash, log_index));
CREATE TABLE IF NOT EXISTS rounds (
    market TEXT NOT NULL, market_id TEXT NOT NULL, state TEXT NOT NULL, attempt INTEGER NOT NULL,
    workflow TEXT NOT NULL, request_tx TEXT, request_block INTEGER, reason TEXT, submit_tx TEXT,
    raw_tx BLOB, outcome TEXT, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL,
    PRIMARY KEY (market, market_id));
CREATE TABLE IF NOT EXISTS checkpoints (
    key TEXT PRIMARY KEY, block_number INTEGER NOT NULL, block_hash TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS round_progress (
    market TEXT NOT NULL, market_id TEXT NOT NULL, attempt INTEGER NOT NULL, progress TEXT NOT NULL,
    updated_at INTEGER NOT NULL, PRIMARY KEY (market, market_id));
CREATE TABLE IF NOT EXISTS node_settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS round_attempts (
    market TEXT NOT NULL, market_id TEXT NOT NULL, attempt INTEGER NOT NULL, state TEXT NOT NULL,
    reason TEXT, request_tx TEXT, request_block INTEGER, submit_tx TEXT, outcome TEXT,
    ended_at INTEGER NOT NULL, PRIMARY KEY (market, market_id, attempt));
";

/// The states where a round's drive is over, as SQL (both backends).
pub(crate) const DONE_SQL: &str = "('confirmed', 'finalized', 'failed', 'skipped')";

/// The schema version this binary writes (`PRAGMA user_version`).
const SQLITE_VERSION: i64 = 3;

/// Creates the tables, then applies what a file of an older version lacks: version 2
/// adds the lease columns (holder, term, lease_until) to `rounds`; version 3 the mined
/// block's hash to `tx_nonces` (the finality watch) and `round_attempts`.
fn migrate(conn: &Connection) -> Result<(), StoreError> {
    conn.execute_batch("PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;")?;
    // one writer at a time: two processes opening the same file at once (a node and the
    // CLI) must not both apply a step
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let applied = (|| {
        conn.execute_batch(SCHEMA_TABLES)?;
        conn.execute_batch(txs::SCHEMA)?;
        let v: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if v > SQLITE_VERSION {
            return Err(StoreError::Corrupt(format!(
                "the database schema is version {v}, newer than this binary's {SQLITE_VERSION}: upgrade the node"
            )));
        }
        if v < 2 {
            let has_holder: bool = conn
                .prepare("SELECT 1 FROM pragma_table_info('rounds') WHERE name = 'holder'")?
                .exists([])?;
            if !has_holder {
                conn.execute_batch(
                    "ALTER TABLE rounds ADD COLUMN holder TEXT;
                     ALTER TABLE rounds ADD COLUMN term INTEGER NOT NULL DEFAULT 0;
                     ALTER TABLE rounds ADD COLUMN lease_until INTEGER;",
                )?;
            }
        }
        if v < 3 {
            let has_hash: bool = conn
                .prepare("SELECT 1 FROM pragma_table_info('tx_nonces') WHERE name = 'mined_hash'")?
                .exists([])?;
            if !has_hash {
                conn.execute_batch("ALTER TABLE tx_nonces ADD COLUMN mined_hash TEXT;")?;
            }
        }
        if v < SQLITE_VERSION {
            conn.execute_batch(&format!("PRAGMA user_version = {SQLITE_VERSION}"))?;
        }
        Ok(())
    })();
    match applied {
        Ok(()) => conn.execute_batch("COMMIT")?,
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            return Err(e);
        }
    }
    Ok(())
}

impl Store {
    /// Opens (creating if needed) `cresolver.sqlite3` in `data_dir`.
    pub fn open(data_dir: &Path) -> Result<Self, StoreError> {
        std::fs::create_dir_all(data_dir).map_err(|source| StoreError::DataDir {
            path: data_dir.display().to_string(),
            source,
        })?;
        let conn = Connection::open(data_dir.join("cresolver.sqlite3"))?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        migrate(&conn)?;
        Ok(Self {
            conn: Mutex::new(conn),
        })
    }

    /// A throwaway in-memory store (tests, dry runs).
    pub fn in_memory() -> Result<Self, StoreError> {
        let conn = Connection::open_in_memory()?;
        migrate(&conn)?;
        Ok(Self {
            conn: Mutex::new(conn),
        })
    }

    /// Runs `f` in one transaction, committed when it returns `Ok`.
    fn in_tx<T>(
        &self,
        f: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let out = f(&tx)?;
        tx.commit()?;
        Ok(out)
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave SQLite inconsistent (each statement
        // is atomic), so a poisoned lock is safe to reuse.
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a trigger log and decides whether it starts a round. Idempotent.
    pub fn record_request(
        &self,
        market: Address,
        market_id: U256,
        workflow: &str,
        log: &LogRef,
    ) -> Result<RequestDecision, StoreError> {
        self.record_request_judged(market, market_id, workflow, log, false)
    }

    /// [`Self::record_request`]; `unresolved_on_chain`: the caller read the chain and the
    /// market is unresolved, so a done round is served again (see [`RequestDecision`]),
    /// in the same transaction that records the log.
    pub fn record_request_judged(
        &self,
        market: Address,
        market_id: U256,
        workflow: &str,
        log: &LogRef,
        unresolved_on_chain: bool,
    ) -> Result<RequestDecision, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let inserted = tx.execute(
            "INSERT OR IGNORE INTO seen_logs (tx_hash, log_index, market, market_id, block_number, block_hash)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                log.tx_hash.to_string(),
                log.log_index as i64,
                market.to_string(),
                market_id.to_string(),
                log.block_number as i64,
                log.block_hash.to_string()
            ],
        )?;
        if inserted == 0 {
            return Ok(RequestDecision::DuplicateLog);
        }
        let d = upsert_round(
            &tx,
            market,
            market_id,
            workflow,
            Some((log.tx_hash, log.block_number)),
            unresolved_on_chain,
        )?;
        tx.commit()?;
        Ok(d)
    }

    /// Whether this exact log was recorded before.
    pub fn log_seen(&self, log: &LogRef) -> Result<bool, StoreError> {
        Ok(self
            .conn()
            .prepare(done::sql::LOG_SEEN)?
            .exists(params![log.tx_hash.to_string(), log.log_index as i64])?)
    }

    /// Records a request that came without a log (HTTP trigger, CLI).
    pub fn manual_request(
        &self,
        market: Address,
        market_id: U256,
        workflow: &str,
    ) -> Result<RequestDecision, StoreError> {
        self.manual_request_judged(market, market_id, workflow, false)
    }

    /// [`Self::manual_request`] with the chain's word (see [`Self::record_request_judged`]).
    pub fn manual_request_judged(
        &self,
        market: Address,
        market_id: U256,
        workflow: &str,
        unresolved_on_chain: bool,
    ) -> Result<RequestDecision, StoreError> {
        self.in_tx(|tx| upsert_round(tx, market, market_id, workflow, None, unresolved_on_chain))
    }

    /// Moves a round to `state` (with an optional reason).
    pub fn set_state(
        &self,
        market: Address,
        market_id: U256,
        state: RoundState,
        reason: Option<&str>,
    ) -> Result<(), StoreError> {
        let n = self.conn().execute(
            "UPDATE rounds SET state = ?3, reason = ?4, updated_at = ?5 WHERE market = ?1 AND market_id = ?2",
            params![market.to_string(), market_id.to_string(), state.as_str(), reason, now() as i64],
        )?;
        touched(n, market, market_id)
    }

    /// Records what attempt `attempt` of a round has passed and moves the round to
    /// `state`, in one transaction (see `round::RoundProgress`).
    pub fn save_progress(
        &self,
        market: Address,
        market_id: U256,
        attempt: u32,
        state: RoundState,
        progress: &serde_json::Value,
    ) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let t = now() as i64;
        let n = tx.execute(
            "UPDATE rounds SET state = ?3, updated_at = ?4 WHERE market = ?1 AND market_id = ?2",
            params![market.to_string(), market_id.to_string(), state.as_str(), t],
        )?;
        touched(n, market, market_id)?;
        tx.execute(
            "INSERT INTO round_progress (market, market_id, attempt, progress, updated_at) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (market, market_id) DO UPDATE SET attempt = ?3, progress = ?4, updated_at = ?5",
            params![market.to_string(), market_id.to_string(), attempt as i64, progress.to_string(), t],
        )?;
        tx.commit()?;
        Ok(())
    }

    /// What attempt `attempt` of a round recorded as passed (None: nothing, or only an
    /// earlier attempt's).
    pub fn progress(
        &self,
        market: Address,
        market_id: U256,
        attempt: u32,
    ) -> Result<Option<serde_json::Value>, StoreError> {
        let raw: Option<String> = self
            .conn()
            .query_row(
                "SELECT progress FROM round_progress WHERE market = ?1 AND market_id = ?2 AND attempt = ?3",
                params![market.to_string(), market_id.to_string(), attempt as i64],
                |r| r.get(0),
            )
            .optional()?;
        raw.map(|r| {
            serde_json::from_str(&r)
                .map_err(|e| StoreError::Corrupt(format!("round progress: {e}")))
        })
        .transpose()
    }

    /// Records the block a round without a request log (a manual request) is judged at.
    pub fn set_request_block(
        &self,
        market: Address,
        market_id: U256,
        block: u64,
    ) -> Result<(), StoreError> {
        let n = self.conn().execute(
            "UPDATE rounds SET request_block = ?3, updated_at = ?4 WHERE market = ?1 AND market_id = ?2",
            params![market.to_string(), market_id.to_string(), block as i64, now() as i64],
        )?;
        touched(n, market, market_id)
    }

    /// Stores the round's outcome/transcript JSON.
    pub fn set_outcome(
        &self,
        market: Address,
        market_id: U256,
        outcome: &serde_json::Value,
    ) -> Result<(), StoreError> {
        self.conn().execute(
            "UPDATE rounds SET outcome = ?3, updated_at = ?4 WHERE market = ?1 AND market_id = ?2",
            params![
                market.to_string(),
                market_id.to_string(),
                outcome.to_string(),
                now() as i64
            ],
        )?;
        Ok(())
    }

    pub fn get(&self, market: Address, market_id: U256) -> Result<Option<RoundRecord>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare(&format!("{SELECT} WHERE market = ?1 AND market_id = ?2"))?;
        let row = stmt
            .query_row(params![market.to_string(), market_id.to_string()], read_row)
            .optional()?;
        row.transpose()
    }

    /// Rounds, most recently updated first.
    pub fn list(&self, limit: usize) -> Result<Vec<RoundRecord>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare(&format!(
            "{SELECT} ORDER BY updated_at DESC, market_id DESC LIMIT ?1"
        ))?;
        let rows = stmt.query_map(params![limit as i64], read_row)?;
        rows.map(|r| r.map_err(StoreError::from).and_then(|x| x))
            .collect()
    }

    /// A page of round summaries (no transcript, no raw bytes), newest first by
    /// insertion; `before` is the cursor a previous page returned. Reasons are cut to
    /// [`SUMMARY_REASON_BYTES`]. Returns the page and the cursor of the next one.
    pub fn list_summaries(
        &self,
        limit: usize,
        before: Option<i64>,
    ) -> Result<(Vec<RoundSummary>, Option<i64>), StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT rowid, market, market_id, state, attempt, workflow, request_tx, request_block, reason, submit_tx, created_at, updated_at, holder
             FROM rounds WHERE rowid < ?1 ORDER BY rowid DESC LIMIT ?2",
        )?;
        let rows = stmt.query_map(params![before.unwrap_or(i64::MAX), limit as i64], |r| {
            Ok(SummaryRow {
                cursor: r.get(0)?,
                market: r.get(1)?,
                market_id: r.get(2)?,
                state: r.get(3)?,
                attempt: r.get(4)?,
                workflow: r.get(5)?,
                request_tx: r.get(6)?,
                request_block: r.get(7)?,
                reason: r.get(8)?,
                submit_tx: r.get(9)?,
                created_at: r.get(10)?,
                updated_at: r.get(11)?,
                holder: r.get(12)?,
                driven_by: None,
                lease_ms: None,
            })
        })?;
        let mut out = Vec::new();
        let mut last = None;
        for row in rows {
            let row = row?;
            last = Some(row.cursor);
            out.push(row.parse()?);
        }
        let next = (out.len() == limit).then_some(last).flatten();
        Ok((out, next))
    }

    /// Rounds that are not final (to resume after a restart).
    pub fn unfinished(&self) -> Result<Vec<RoundRecord>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare(&format!(
            "{SELECT} WHERE state NOT IN {DONE_SQL} ORDER BY created_at, market_id"
        ))?;
        let rows = stmt.query_map([], read_row)?;
        rows.map(|r| r.map_err(StoreError::from).and_then(|x| x))
            .collect()
    }

    /// Number of rounds per state.
    pub fn count_by_state(&self) -> Result<Vec<(RoundState, u64)>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare("SELECT state, COUNT(*) FROM rounds GROUP BY state")?;
        let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?;
        rows.map(|r| {
            let (s, n) = r?;
            Ok((RoundState::from_str(&s)?, n as u64))
        })
        .collect()
    }

    /// A write that changes nothing of note (readiness probe): fails when the database
    /// is read-only, full or locked beyond the busy timeout.
    pub fn probe_write(&self) -> Result<(), StoreError> {
        self.set_checkpoint("health:probe", now(), B256::ZERO)
    }

    pub fn checkpoint(&self, key: &str) -> Result<Option<(u64, B256)>, StoreError> {
        let conn = self.conn();
        let row: Option<(i64, String)> = conn
            .query_row(
                "SELECT block_number, block_hash FROM checkpoints WHERE key = ?1",
                params![key],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        row.map(|(n, h)| {
            Ok((
                n as u64,
                B256::from_str(&h)
                    .map_err(|e| StoreError::Corrupt(format!("checkpoint hash: {e}")))?,
            ))
        })
        .transpose()
    }

    pub fn set_checkpoint(&self, key: &str, block: u64, hash: B256) -> Result<(), StoreError> {
        self.conn().execute(
            "INSERT INTO checkpoints (key, block_number, block_hash) VALUES (?1, ?2, ?3)
             ON CONFLICT(key) DO UPDATE SET block_number = excluded.block_number, block_hash = excluded.block_hash",
            params![key, block as i64, hash.to_string()],
        )?;
        Ok(())
    }
}

impl Store {
    /// Makes `node` the holder of an unfinished round with a new term. SQLite serves one
    /// node, so every claim of an unfinished round is granted (the holder is shown to
    /// operators; fencing between nodes is the PostgreSQL store's). `None`: no such
    /// round, or it is final.
    pub fn claim(
        &self,
        market: Address,
        market_id: U256,
        node: &str,
    ) -> Result<Option<u64>, StoreError> {
        let conn = self.conn();
        let term: Option<i64> = conn
            .query_row(
                &format!("UPDATE rounds SET holder = ?3, term = term + 1 WHERE market = ?1 AND market_id = ?2
                 AND state NOT IN {DONE_SQL} RETURNING term"),
                params![market.to_string(), market_id.to_string(), node],
                |r| r.get(0),
            )
            .optional()?;
        Ok(term.map(|t| t as u64))
    }

    /// Clears a round's holder.
    pub fn release(&self, market: Address, market_id: U256) -> Result<(), StoreError> {
        self.conn().execute(
            "UPDATE rounds SET holder = NULL WHERE market = ?1 AND market_id = ?2",
            params![market.to_string(), market_id.to_string()],
        )?;
        Ok(())
    }
}

pub(crate) const SELECT: &str = "SELECT market, market_id, state, attempt, workflow, request_tx, request_block, reason, submit_tx, raw_tx, outcome, created_at, updated_at, holder FROM rounds";

fn upsert_round(
    tx: &rusqlite::Transaction<'_>,
    market: Address,
    market_id: U256,
    workflow: &str,
    request: Option<(B256, u64)>,
    unresolved_on_chain: bool,
) -> Result<RequestDecision, StoreError> {
    let existing: Option<(String, i64)> = tx
        .query_row(
            "SELECT state, attempt FROM rounds WHERE market = ?1 AND market_id = ?2",
            params![market.to_string(), market_id.to_string()],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    let (req_tx, req_block) = match request {
        Some((h, b)) => (Some(h.to_string()), Some(b as i64)),
        None => (None, None),
    };
    let t = now() as i64;
    match existing {
        None => {
            tx.execute(
                "INSERT INTO rounds (market, market_id, state, attempt, workflow, request_tx, request_block, created_at, updated_at)
                 VALUES (?1, ?2, 'requested', 1, ?3, ?4, ?5, ?6, ?6)",
                params![market.to_string(), market_id.to_string(), workflow, req_tx, req_block, t],
            )?;
            Ok(RequestDecision::New)
        }
        Some((state, _)) if state == "failed" => {
            tx.execute(
                ARCHIVE_SQL,
                params![market.to_string(), market_id.to_string(), t],
            )?;
            tx.execute(
                "UPDATE rounds SET state = 'requested', attempt = attempt + 1, workflow = ?3, request_tx = COALESCE(?4, request_tx),
                 request_block = COALESCE(?5, request_block), reason = NULL, updated_at = ?6, holder = NULL, lease_until = NULL
                 WHERE market = ?1 AND market_id = ?2",
                params![market.to_string(), market_id.to_string(), workflow, req_tx, req_block, t],
            )?;
            Ok(RequestDecision::Reopened)
        }
        Some((state, _)) => {
            let state = RoundState::from_str(&state)?;
            if !(unresolved_on_chain && state.is_resolved()) {
                return Ok(RequestDecision::AlreadyHandled(state));
            }
            if state == RoundState::Confirmed {
                reopen_submission_in(tx, market, market_id, RESUBMIT_REASON, None)?;
                return Ok(RequestDecision::Resubmit);
            }
            renew_in(tx, market, market_id, workflow, request, state)?;
            Ok(RequestDecision::Renewed)
        }
    }
}

type RowResult = Result<RoundRecord, StoreError>;

/// A stored value that does not parse.
pub(crate) fn corrupt(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("{what}: {e}"))
}

/// An optional hash column.
pub(crate) fn parse_hash(h: Option<String>, what: &str) -> Result<Option<B256>, StoreError> {
    h.map(|h| B256::from_str(&h))
        .transpose()
        .map_err(|e| corrupt(what, e))
}

/// A market and a market id as the stores keep them (text).
pub(crate) fn parse_market(market: &str, market_id: &str) -> Result<(Address, U256), StoreError> {
    Ok((
        Address::from_str(market).map_err(|e| corrupt("market", e))?,
        U256::from_str(market_id).map_err(|e| corrupt("market_id", e))?,
    ))
}

/// A round summary row as either backend reads it, before its text is parsed.
pub(crate) struct SummaryRow {
    /// The page cursor (SQLite's rowid, PostgreSQL's id).
    pub cursor: i64,
    pub market: String,
    pub market_id: String,
    pub state: String,
    pub attempt: i64,
    pub workflow: String,
    pub request_tx: Option<String>,
    pub request_block: Option<i64>,
    pub reason: Option<String>,
    pub submit_tx: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    pub holder: Option<String>,
    pub driven_by: Option<String>,
    pub lease_ms: Option<i64>,
}

impl SummaryRow {
    /// The summary: reasons cut to [`SUMMARY_REASON_BYTES`]; holder and lease only while
    /// the round is unfinished.
    pub(crate) fn parse(self) -> Result<RoundSummary, StoreError> {
        let (market, market_id) = parse_market(&self.market, &self.market_id)?;
        let state = RoundState::from_str(&self.state)?;
        let open = !state.is_final();
        Ok(RoundSummary {
            market,
            market_id,
            state,
            attempt: self.attempt as u32,
            workflow: self.workflow,
            request_tx: parse_hash(self.request_tx, "request_tx")?,
            request_block: self.request_block.map(|b| b as u64),
            reason: self.reason.map(|r| truncate(r, SUMMARY_REASON_BYTES)),
            submit_tx: parse_hash(self.submit_tx, "submit_tx")?,
            created_at: self.created_at as u64,
            updated_at: self.updated_at as u64,
            holder: self.holder.filter(|_| open),
            lease_ms: self.lease_ms.filter(|_| open).map(|m| m as u64),
            driven_by: self.driven_by,
        })
    }
}

/// A `rounds` row ([`SELECT`]'s columns) as either backend reads it, before its text
/// is parsed: the one place a stored round becomes a [`RoundRecord`].
pub(crate) struct RoundRow {
    pub market: String,
    pub market_id: String,
    pub state: String,
    pub attempt: i64,
    pub workflow: String,
    pub request_tx: Option<String>,
    pub request_block: Option<i64>,
    pub reason: Option<String>,
    pub submit_tx: Option<String>,
    pub raw_tx: Option<Vec<u8>>,
    pub outcome: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    pub holder: Option<String>,
}

impl RoundRow {
    pub(crate) fn parse(self) -> RowResult {
        let (market, market_id) = parse_market(&self.market, &self.market_id)?;
        Ok(RoundRecord {
            market,
            market_id,
            state: RoundState::from_str(&self.state)?,
            attempt: self.attempt as u32,
            workflow: self.workflow,
            request_tx: parse_hash(self.request_tx, "request_tx")?,
            request_block: self.request_block.map(|b| b as u64),
            reason: self.reason,
            submit_tx: parse_hash(self.submit_tx, "submit_tx")?,
            raw_tx: self.raw_tx.map(Bytes::from),
            outcome: self
                .outcome
                .map(|o| serde_json::from_str(&o))
                .transpose()
                .map_err(|e| corrupt("outcome", e))?,
            created_at: self.created_at as u64,
            updated_at: self.updated_at as u64,
            holder: self.holder,
        })
    }
}

fn read_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RowResult> {
    Ok(RoundRow {
        market: r.get(0)?,
        market_id: r.get(1)?,
        state: r.get(2)?,
        attempt: r.get(3)?,
        workflow: r.get(4)?,
        request_tx: r.get(5)?,
        request_block: r.get(6)?,
        reason: r.get(7)?,
        submit_tx: r.get(8)?,
        raw_tx: r.get(9)?,
        outcome: r.get(10)?,
        created_at: r.get(11)?,
        updated_at: r.get(12)?,
        holder: r.get(13)?,
    }
    .parse())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(i: u8) -> LogRef {
        LogRef {
            tx_hash: B256::repeat_byte(i),
            log_index: 0,
            block_number: i as u64,
            block_hash: B256::repeat_byte(0xb0 + i),
        }
    }

    #[test]
    fn one_round_per_market_and_log_dedupe() {
        let s = Store::in_memory().unwrap();
        let m = Address::repeat_byte(1);
        let id = U256::from(7);
        assert_eq!(
            s.record_request(m, id, "wf", &log(1)).unwrap(),
            RequestDecision::New
        );
        assert_eq!(
            s.record_request(m, id, "wf", &log(1)).unwrap(),
            RequestDecision::DuplicateLog
        );
        assert_eq!(
            s.record_request(m, id, "wf", &log(2)).unwrap(),
            RequestDecision::AlreadyHandled(RoundState::Requested)
        );
        s.set_state(m, id, RoundState::Failed, Some("quorum not met"))
            .unwrap();
        assert_eq!(
            s.record_request(m, id, "wf", &log(3)).unwrap(),
            RequestDecision::Reopened
        );
        let r = s.get(m, id).unwrap().unwrap();
        assert_eq!(
            (r.state, r.attempt, r.reason.clone()),
            (RoundState::Requested, 2, None)
        );
        assert_eq!(r.request_tx, Some(B256::repeat_byte(3)));
        assert_eq!(s.unfinished().unwrap().len(), 1);
        s.set_state(m, id, RoundState::Confirmed, None).unwrap();
        assert!(s.unfinished().unwrap().is_empty());
        assert_eq!(
            s.manual_request(m, id, "wf").unwrap(),
            RequestDecision::AlreadyHandled(RoundState::Confirmed)
        );
        assert_eq!(
            s.count_by_state().unwrap(),
            vec![(RoundState::Confirmed, 1)]
        );
    }

    #[test]
    fn many_openers_of_a_new_file_migrate_it_once() {
        // a node and the CLI (or a test) may open a fresh or old file at the same moment
        let dir = std::env::temp_dir().join(format!("cresolver-store-race-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let d = dir.clone();
                std::thread::spawn(move || Store::open(&d).map(|_| ()))
            })
            .collect();
        for h in handles {
            h.join().unwrap().unwrap();
        }
        let s = Store::open(&dir).unwrap();
        s.manual_request(Address::ZERO, U256::from(1), "wf")
            .unwrap();
        assert_eq!(s.claim(Address::ZERO, U256::from(1), "n").unwrap(), Some(1));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn persists_across_reopen() {
        let dir = std::env::temp_dir().join(format!("cresolver-store-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        {
            let s = Store::open(&dir).unwrap();
            s.set_checkpoint("k", 42, B256::repeat_byte(4)).unwrap();
            s.manual_request(Address::ZERO, U256::from(1), "wf")
                .unwrap();
        }
        let s = Store::open(&dir).unwrap();
        assert_eq!(s.checkpoint("k").unwrap(), Some((42, B256::repeat_byte(4))));
        assert_eq!(s.unfinished().unwrap().len(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
