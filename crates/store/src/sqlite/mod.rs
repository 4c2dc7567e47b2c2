//! The SQLite backend: one embedded database file in the data dir ([`Store`]), served
//! to async code as [`SqliteStore`], which implements every capability trait once
//! (`rounds`, `txs`, `leases`, `finality`, `settings`). Every call runs its statements
//! on tokio's blocking pool, so a write never stalls an async worker thread. One node
//! holds every round: its leases are kept in memory and its fence always holds.

use crate::RoundKey;
use crate::column::{Addr, Hash, Json, Num};
use crate::{RoundRecord, StoreError};
use alloy_primitives::Bytes;
use parking_lot::{Mutex, MutexGuard};
use rusqlite::Connection;
use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

mod finality;
mod leases;
mod rounds;
mod schema;
mod settings;
#[cfg(test)]
mod tests;
mod txs;

#[cfg(test)]
use rounds::upsert_round;

/// The database file. Cheap operations behind a mutex. Every write survives the
/// process's crash when it returns; the ones made with [`Store::in_durable_tx`] (a
/// signed transaction before its broadcast, a manual request, a node setting) are on
/// disk, and with them every write before them. A power loss can take back only the
/// writes since the last of those: the round is then at an earlier step and does it
/// again.
pub struct Store {
    conn: Mutex<Connection>,
}

impl Store {
    /// Opens (creating if needed) `cresolver.sqlite3` in `data_dir`.
    pub fn open(data_dir: &Path) -> Result<Self, StoreError> {
        std::fs::create_dir_all(data_dir).map_err(|source| StoreError::DataDir {
            path: data_dir.display().to_string(),
            source,
        })?;
        let conn = Connection::open(data_dir.join("cresolver.sqlite3"))?;
        conn.busy_timeout(schema::OPEN_BUSY)?;
        // Two openers of a new file can both hold its read lock and both want to write
        // (the switch to WAL, or the migration's write lock): SQLite then answers one of
        // them "busy" at once, without waiting (the busy timeout would deadlock). The
        // migration leaves nothing behind when it fails, so it is tried again.
        let deadline = std::time::Instant::now() + schema::OPEN_BUSY;
        loop {
            match schema::migrate(&conn) {
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
        schema::migrate(&conn)?;
        Ok(Self {
            conn: Mutex::new(conn),
        })
    }

    /// Runs `f` in one write transaction (`BEGIN IMMEDIATE`), committed when it returns
    /// `Ok`.
    pub(crate) fn in_tx<T>(
        &self,
        f: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut conn = self.conn();
        // IMMEDIATE: the write lock is taken (waiting out another process's, the busy
        // timeout) before the first read. A deferred transaction that read and then
        // writes while another connection holds the lock is refused at once, without
        // the wait ("database is locked"): a CLI or `sqlite3` on the file would fail the
        // node's writes.
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
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
        tests::SYNCED.with(|n| n.set(n.get() + 1));
        // (dropped before `_restore`: a transaction that did not commit rolls back first)
        let tx =
            rusqlite::Transaction::new_unchecked(&conn, rusqlite::TransactionBehavior::Immediate)?;
        let out = f(&tx)?;
        tx.commit()?;
        Ok(out)
    }

    /// The connection (one statement at a time, each its own transaction).
    pub(crate) fn conn(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave SQLite inconsistent (each statement
        // is atomic), so a poisoned lock is safe to reuse.
        self.conn.lock()
    }
}

/// The embedded SQLite store behind [`crate::RoundStore`]: the database file, and the
/// rounds this node holds.
#[derive(Clone)]
pub struct SqliteStore {
    db: Arc<Store>,
    held: Arc<Mutex<HashSet<RoundKey>>>,
}

impl SqliteStore {
    /// Serves `store` to async code; this node holds no round yet.
    pub fn new(store: Store) -> Self {
        Self {
            db: Arc::new(store),
            held: Default::default(),
        }
    }

    /// Opens (creating if needed) the store file in `data_dir` ([`Store::open`]).
    pub fn open(data_dir: &Path) -> Result<Self, StoreError> {
        Store::open(data_dir).map(Self::new)
    }

    /// Runs `f` with the database on tokio's blocking pool (or on this thread outside a
    /// tokio runtime: synchronous code, see [`crate::block_on`]).
    async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Store) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let db = self.db.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => match rt.spawn_blocking(move || f(&db)).await {
                Ok(r) => r,
                Err(e) => Err(StoreError::Task(e)),
            },
            Err(_) => f(&db),
        }
    }

    fn held_set(&self) -> MutexGuard<'_, HashSet<RoundKey>> {
        self.held.lock()
    }
}

/// An `UPDATE` of one round: it must have found the round.
fn touched(rows: usize, round: RoundKey) -> Result<(), StoreError> {
    if rows == 0 {
        return Err(StoreError::NoRound(round));
    }
    Ok(())
}

/// The `rounds` columns [`read_round`] reads.
const SELECT: &str = "SELECT market, market_id, state, attempt, workflow, request_tx, request_block, reason, submit_tx, raw_tx, outcome, created_at, updated_at, holder FROM rounds";

/// A [`SELECT`] row.
fn read_round(r: &rusqlite::Row<'_>) -> rusqlite::Result<RoundRecord> {
    Ok(RoundRecord {
        market: r.get::<_, Addr>(0)?.0,
        market_id: r.get::<_, Num>(1)?.into(),
        state: r.get(2)?,
        attempt: r.get(3)?,
        workflow: r.get(4)?,
        request_tx: r.get::<_, Option<Hash>>(5)?.map(|h| h.0),
        request_block: opt_uint(r, 6)?,
        reason: r.get(7)?,
        submit_tx: r.get::<_, Option<Hash>>(8)?.map(|h| h.0),
        raw_tx: r.get::<_, Option<Vec<u8>>>(9)?.map(Bytes::from),
        outcome: r.get::<_, Option<Json>>(10)?.map(|o| o.0),
        created_at: uint(r, 11)?,
        updated_at: uint(r, 12)?,
        holder: r.get(13)?,
    })
}

/// Rows read with `read`, as a list.
fn collect<T>(rows: impl Iterator<Item = rusqlite::Result<T>>) -> Result<Vec<T>, StoreError> {
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// An integer column as the `u64` it was written from (stored `as i64`).
fn uint(r: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<u64> {
    Ok(r.get::<_, i64>(i)? as u64)
}

/// A nullable integer column as the `u64` it was written from.
fn opt_uint(r: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<Option<u64>> {
    Ok(r.get::<_, Option<i64>>(i)?.map(|v| v as u64))
}
