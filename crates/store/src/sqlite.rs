//! The SQLite backend: one embedded database file in the data dir, its schema and
//! migrations, and every store operation as a transaction behind one mutex.

use super::*;
use rusqlite::{Connection, OptionalExtension, params};
use std::path::Path;
use std::sync::Mutex;

/// The store. Cheap operations behind a mutex. Every write survives the process's crash
/// when it returns; the ones made with [`Store::in_durable_tx`] (a signed transaction
/// before its broadcast, a manual request, a node setting) are on disk, and with them
/// every write before them. A power loss can take back only the writes since the last
/// of those: the round is then at an earlier step and does it again.
pub struct Store {
    pub(crate) conn: Mutex<Connection>,
}

/// An `UPDATE` of one round: it must have found the round.
fn touched(rows: usize, market: Address, market_id: U256) -> Result<(), StoreError> {
    if rows == 0 {
        return Err(StoreError::NoRound(market, market_id));
    }
    Ok(())
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

const SET_CHECKPOINT: &str = "INSERT INTO checkpoints (key, block_number, block_hash) VALUES (?1, ?2, ?3)
     ON CONFLICT(key) DO UPDATE SET block_number = excluded.block_number, block_hash = excluded.block_hash";

/// The states where a round's drive is over, as SQL (both backends).
pub(crate) const DONE_SQL: &str = "('confirmed', 'finalized', 'failed', 'skipped')";

/// How many compiled statements a connection keeps (the store has fewer kinds).
const STATEMENT_CACHE: usize = 128;

/// How long opening the file waits for another process that holds it.
const OPEN_BUSY: std::time::Duration = std::time::Duration::from_secs(5);

/// The schema version this binary writes (`PRAGMA user_version`).
const SQLITE_VERSION: i64 = 3;

/// Creates the tables, then applies what a file of an older version lacks: version 2
/// adds the lease columns (holder, term, lease_until) to `rounds`; version 3 the mined
/// block's hash to `tx_nonces` (the finality watch) and `round_attempts`.
fn migrate(conn: &Connection) -> Result<(), StoreError> {
    // Commits survive the process's crash at once (they are in the WAL file); the
    // writes that must survive a power loss before what follows them take
    // `in_durable_tx`, whose fsync of the WAL puts every earlier commit on disk too.
    conn.execute_batch("PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;")?;
    // every statement is compiled once per connection (`prepare_cached`): room for all
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    // one writer at a time: two processes opening the same file at once (a node and the
    // CLI) must not both apply a step
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let applied = (|| {
        conn.execute_batch(SCHEMA_TABLES)?;
        conn.execute_batch(txs::SCHEMA)?;
        let v: i64 = conn
            .prepare_cached("PRAGMA user_version")?
            .query_row([], |r| r.get(0))?;
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
        conn.busy_timeout(OPEN_BUSY)?;
        // Two openers of a new file can both hold its read lock and both want to write
        // (the switch to WAL, or the migration's write lock): SQLite then answers one of
        // them "busy" at once, without waiting (the busy timeout would deadlock). The
        // migration leaves nothing behind when it fails, so it is tried again.
        let deadline = std::time::Instant::now() + OPEN_BUSY;
        loop {
            match migrate(&conn) {
                Err(StoreError::Sqlite(rusqlite::Error::SqliteFailure(e, _)))
                    if e.code == rusqlite::ErrorCode::DatabaseBusy
                        && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                other => break other?,
            }
        }
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
    pub(crate) fn in_tx<T>(
        &self,
        f: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let out = f(&tx)?;
        tx.commit()?;
        Ok(out)
    }

    /// [`Self::in_tx`] committed with `synchronous = FULL`: the WAL is synced, so this
    /// transaction and every one committed before it are on disk when it returns. For a
    /// write that must not be lost once what follows it happens (a broadcast, a reply).
    pub(crate) fn in_durable_tx<T>(
        &self,
        f: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        /// Puts the connection back to `synchronous = NORMAL` however the transaction
        /// ended (committed, rolled back, or a panic); a failure to do so only costs
        /// speed, so it is logged, not returned.
        struct Restore<'c>(&'c Connection);
        impl Drop for Restore<'_> {
            fn drop(&mut self) {
                if let Err(e) = self.0.execute_batch("PRAGMA synchronous = NORMAL") {
                    tracing::warn!(error = %e, "cannot set the SQLite store back to synchronous = NORMAL");
                }
            }
        }
        let conn = self.conn();
        conn.execute_batch("PRAGMA synchronous = FULL")?;
        let _restore = Restore(&conn);
        #[cfg(test)]
        crate::tests::SYNCED.with(|n| n.set(n.get() + 1));
        // (dropped before `_restore`: a transaction that did not commit rolls back first)
        let tx = conn.unchecked_transaction()?;
        let out = f(&tx)?;
        tx.commit()?;
        Ok(out)
    }

    pub(crate) fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
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
        let inserted = tx.prepare_cached("INSERT OR IGNORE INTO seen_logs (tx_hash, log_index, market, market_id, block_number, block_hash)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)")?.execute(params![
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
            .prepare_cached(done::sql::LOG_SEEN)?
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
        // the caller answers the operator that it is recorded
        self.in_durable_tx(|tx| {
            upsert_round(tx, market, market_id, workflow, None, unresolved_on_chain)
        })
    }

    /// Moves a round to `state` (with an optional reason).
    pub fn set_state(
        &self,
        market: Address,
        market_id: U256,
        state: Stage,
        reason: Option<&str>,
    ) -> Result<(), StoreError> {
        let n = self.conn().prepare_cached("UPDATE rounds SET state = ?3, reason = ?4, updated_at = ?5 WHERE market = ?1 AND market_id = ?2")?.execute(params![market.to_string(), market_id.to_string(), state.as_str(), reason, now() as i64],
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
        state: Stage,
        progress: &serde_json::Value,
    ) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let t = now() as i64;
        let n = tx.prepare_cached("UPDATE rounds SET state = ?3, updated_at = ?4 WHERE market = ?1 AND market_id = ?2")?.execute(params![market.to_string(), market_id.to_string(), state.as_str(), t],
        )?;
        touched(n, market, market_id)?;
        tx.prepare_cached("INSERT INTO round_progress (market, market_id, attempt, progress, updated_at) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (market, market_id) DO UPDATE SET attempt = ?3, progress = ?4, updated_at = ?5")?.execute(params![market.to_string(), market_id.to_string(), attempt as i64, progress.to_string(), t],
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
        let n = self.conn().prepare_cached("UPDATE rounds SET request_block = ?3, updated_at = ?4 WHERE market = ?1 AND market_id = ?2")?.execute(params![market.to_string(), market_id.to_string(), block as i64, now() as i64],
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
        self.conn().prepare_cached("UPDATE rounds SET outcome = ?3, updated_at = ?4 WHERE market = ?1 AND market_id = ?2")?.execute(params![
                market.to_string(),
                market_id.to_string(),
                outcome.to_string(),
                now() as i64
            ],
        )?;
        Ok(())
    }

    /// A round's last transcript (JSON text) and the state it ends in, in one statement.
    pub fn set_outcome_and_state(
        &self,
        market: Address,
        market_id: U256,
        outcome: &str,
        state: Stage,
        reason: Option<&str>,
    ) -> Result<(), StoreError> {
        let n = self.conn().prepare_cached("UPDATE rounds SET outcome = ?3, state = ?4, reason = ?5, updated_at = ?6 WHERE market = ?1 AND market_id = ?2")?.execute(params![market.to_string(), market_id.to_string(), outcome, state.as_str(), reason, now() as i64],
        )?;
        touched(n, market, market_id)
    }

    /// The round of a market, if there is one.
    pub fn get(&self, market: Address, market_id: U256) -> Result<Option<RoundRecord>, StoreError> {
        let conn = self.conn();
        let mut stmt =
            conn.prepare_cached(&format!("{SELECT} WHERE market = ?1 AND market_id = ?2"))?;
        let row = stmt
            .query_row(params![market.to_string(), market_id.to_string()], read_row)
            .optional()?;
        row.transpose()
    }

    /// Rounds, most recently updated first.
    pub fn list(&self, limit: usize) -> Result<Vec<RoundRecord>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(&format!(
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
        self.list_summaries_updated(limit, before, crate::UpdatedBetween::default())
    }

    /// [`Self::list_summaries`], keeping only the rounds last updated within `between`.
    pub fn list_summaries_updated(
        &self,
        limit: usize,
        before: Option<i64>,
        between: crate::UpdatedBetween,
    ) -> Result<(Vec<RoundSummary>, Option<i64>), StoreError> {
        let (since, until) = between.sql_bounds();
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(
            "SELECT rowid, market, market_id, state, attempt, workflow, request_tx, request_block, reason, submit_tx, created_at, updated_at, holder
             FROM rounds WHERE rowid < ?1 AND updated_at >= ?3 AND updated_at < ?4
             ORDER BY rowid DESC LIMIT ?2",
        )?;
        let params = params![before.unwrap_or(i64::MAX), limit as i64, since, until];
        let rows = stmt.query_map(params, |r| {
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
        let mut stmt = conn.prepare_cached(&format!(
            "{SELECT} WHERE state NOT IN {DONE_SQL} ORDER BY created_at, market_id"
        ))?;
        let rows = stmt.query_map([], read_row)?;
        rows.map(|r| r.map_err(StoreError::from).and_then(|x| x))
            .collect()
    }

    /// Number of rounds per state.
    pub fn count_by_state(&self) -> Result<Vec<(Stage, u64)>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached("SELECT state, COUNT(*) FROM rounds GROUP BY state")?;
        let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?;
        rows.map(|r| {
            let (s, n) = r?;
            Ok((Stage::from_str(&s)?, n as u64))
        })
        .collect()
    }

    /// A write that changes nothing of note (readiness probe): fails when the database
    /// is read-only, full or locked beyond the busy timeout.
    pub fn probe_write(&self) -> Result<(), StoreError> {
        // synced, so that a disk that fails its fsync fails the probe
        self.in_durable_tx(|tx| {
            tx.prepare_cached(SET_CHECKPOINT)?.execute(params![
                "health:probe",
                now() as i64,
                B256::ZERO.to_string()
            ])?;
            Ok(())
        })
    }

    /// The block number and hash stored under `key`, if any.
    pub fn checkpoint(&self, key: &str) -> Result<Option<(u64, B256)>, StoreError> {
        let conn = self.conn();
        let row: Option<(i64, String)> = conn
            .prepare_cached("SELECT block_number, block_hash FROM checkpoints WHERE key = ?1")?
            .query_row(params![key], |r| Ok((r.get(0)?, r.get(1)?)))
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

    /// Stores `block` and its `hash` under `key`, replacing what was there.
    pub fn set_checkpoint(&self, key: &str, block: u64, hash: B256) -> Result<(), StoreError> {
        self.conn()
            .prepare_cached(SET_CHECKPOINT)?
            .execute(params![key, block as i64, hash.to_string()])?;
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
            .prepare_cached(&format!("UPDATE rounds SET holder = ?3, term = term + 1 WHERE market = ?1 AND market_id = ?2
                 AND state NOT IN {DONE_SQL} RETURNING term"))?.query_row(params![market.to_string(), market_id.to_string(), node],
                |r| r.get(0),
            )
            .optional()?;
        Ok(term.map(|t| t as u64))
    }

    /// Clears a round's holder.
    pub fn release(&self, market: Address, market_id: U256) -> Result<(), StoreError> {
        self.conn()
            .prepare_cached("UPDATE rounds SET holder = NULL WHERE market = ?1 AND market_id = ?2")?
            .execute(params![market.to_string(), market_id.to_string()])?;
        Ok(())
    }
}

pub(crate) const SELECT: &str = "SELECT market, market_id, state, attempt, workflow, request_tx, request_block, reason, submit_tx, raw_tx, outcome, created_at, updated_at, holder FROM rounds";

pub(crate) fn upsert_round(
    tx: &rusqlite::Transaction<'_>,
    market: Address,
    market_id: U256,
    workflow: &str,
    request: Option<(B256, u64)>,
    unresolved_on_chain: bool,
) -> Result<RequestDecision, StoreError> {
    let existing: Option<(String, i64)> = tx
        .prepare_cached("SELECT state, attempt FROM rounds WHERE market = ?1 AND market_id = ?2")?
        .query_row(params![market.to_string(), market_id.to_string()], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .optional()?;
    let (req_tx, req_block) = match request {
        Some((h, b)) => (Some(h.to_string()), Some(b as i64)),
        None => (None, None),
    };
    let t = now() as i64;
    match existing {
        None => {
            tx.prepare_cached("INSERT INTO rounds (market, market_id, state, attempt, workflow, request_tx, request_block, created_at, updated_at)
                 VALUES (?1, ?2, 'requested', 1, ?3, ?4, ?5, ?6, ?6)")?.execute(params![market.to_string(), market_id.to_string(), workflow, req_tx, req_block, t],
            )?;
            Ok(RequestDecision::New)
        }
        Some((state, _)) if state == "failed" => {
            tx.prepare_cached(ARCHIVE_SQL)?.execute(params![
                market.to_string(),
                market_id.to_string(),
                t
            ])?;
            tx.prepare_cached("UPDATE rounds SET state = 'requested', attempt = attempt + 1, workflow = ?3, request_tx = COALESCE(?4, request_tx),
                 request_block = COALESCE(?5, request_block), reason = NULL, updated_at = ?6, holder = NULL, lease_until = NULL
                 WHERE market = ?1 AND market_id = ?2")?.execute(params![market.to_string(), market_id.to_string(), workflow, req_tx, req_block, t],
            )?;
            Ok(RequestDecision::Reopened)
        }
        Some((state, _)) => {
            let state = Stage::from_str(&state)?;
            if !(unresolved_on_chain && state.is_resolved()) {
                return Ok(RequestDecision::AlreadyHandled(state));
            }
            if state == Stage::Confirmed {
                reopen_submission_in(tx, market, market_id, RESUBMIT_REASON, None)?;
                return Ok(RequestDecision::Resubmit);
            }
            renew_in(tx, market, market_id, workflow, request, state)?;
            Ok(RequestDecision::Renewed)
        }
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
