//! What a member remembers across a restart, in its own SQLite file: its signed
//! observation of each execution (made once: the workers are never asked again for it),
//! the consensus log of each execution (every input its Tendermint instance took, written
//! before any vote that input causes leaves, so a restarted member replays to the same
//! round, lock and votes and never casts a different vote in a round it voted in), the one
//! report it signed for each execution (only after the set was decided; never replaced),
//! and the agreement it saw.

use crate::agreed::Agreed;
use crate::wire::SignedObservation;
use alloy::primitives::{B256, Bytes};
use parking_lot::Mutex;
use rusqlite::{Connection, OptionalExtension, params};
use std::path::Path;

/// Why the state file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    /// SQLite failed.
    #[error("DON state database: {0}")]
    Sql(#[from] rusqlite::Error),
    /// A stored row does not decode (or a value does not encode) as JSON.
    #[error("DON state database holds unreadable JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// The group commit this write was part of failed.
    #[error(transparent)]
    Batch(std::sync::Arc<PersistError>),
    /// The journal's writer thread or the blocking pool is gone (the node is stopping).
    #[error("the DON state file's writer has stopped")]
    Closed,
}

/// One write of the state file (the journal group-commits them).
#[derive(Debug, Clone)]
pub enum Write {
    /// Entries appended to an execution's consensus log (JSON, in order).
    Log(B256, Vec<String>),
    /// The report this member signs for an execution (insert once).
    Lock(B256, Box<Lock>),
    /// This member's observation of an execution (insert once).
    Observation(B256, Box<SignedObservation>),
    /// An execution's agreement (insert once).
    Agreed(B256, Box<Agreed>),
}

/// The one report this member signed for an execution.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Lock {
    /// The forwarder's digest of the report, which the signature signs.
    pub digest: B256,
    /// The raw report built from the decided set.
    pub report: Bytes,
    /// This member's signature of `digest`.
    pub signature: Bytes,
    /// The decided set of signed observations the report was built from.
    pub observations: Vec<SignedObservation>,
    /// The consensus round that decided the set.
    pub attempt: u32,
}

/// The member's state file (see the module documentation): one connection writes (the
/// journal's), another reads, so that a read never waits behind a commit's fsync (WAL
/// lets readers run beside the writer).
pub struct Persist {
    conn: Mutex<Connection>,
    /// The read connection (`None` in memory: the writer's is used).
    reader: Option<Mutex<Connection>>,
}

const SCHEMA: &str = "
PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;
CREATE TABLE IF NOT EXISTS don_own_observations (
    execution_id TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS don_locks (
    execution_id TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS don_agreements (
    execution_id TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS don_consensus_log (
    execution_id TEXT NOT NULL, seq INTEGER NOT NULL, body TEXT NOT NULL,
    PRIMARY KEY (execution_id, seq));
";

/// The most entries one execution's consensus log may hold: past it the instance stops
/// taking inputs (and says so); about 60 rounds of 31 members.
pub const MAX_LOG_ENTRIES: usize = 4_096;

impl Persist {
    /// Opens (or creates) the state file at `path` and its tables.
    pub fn open(path: &Path) -> Result<Self, PersistError> {
        let conn = Connection::open(path)?;
        conn.execute_batch(SCHEMA)?;
        let reader = Connection::open_with_flags(
            path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        Ok(Self {
            conn: Mutex::new(conn),
            reader: Some(Mutex::new(reader)),
        })
    }

    /// A state database in memory, lost when dropped (for tests).
    pub fn in_memory() -> Result<Self, PersistError> {
        let conn = Connection::open_in_memory()?;
        conn.execute_batch(SCHEMA)?;
        Ok(Self {
            conn: Mutex::new(conn),
            reader: None,
        })
    }

    pub(crate) fn conn(&self) -> parking_lot::MutexGuard<'_, Connection> {
        self.conn.lock()
    }

    /// The connection reads use.
    fn read_conn(&self) -> parking_lot::MutexGuard<'_, Connection> {
        self.reader.as_ref().unwrap_or(&self.conn).lock()
    }

    fn get<T: serde::de::DeserializeOwned>(
        &self,
        table: &str,
        exec: &B256,
    ) -> Result<Option<T>, PersistError> {
        let body: Option<String> = self
            .read_conn()
            .prepare_cached(&format!("SELECT body FROM {table} WHERE execution_id = ?1"))?
            .query_row(params![exec.to_string()], |r| r.get(0))
            .optional()?;
        Ok(body.map(|b| serde_json::from_str(&b)).transpose()?)
    }

    /// Inserts unless a row exists; returns what is stored afterwards.
    fn put_once<T: serde::Serialize + serde::de::DeserializeOwned>(
        &self,
        table: &str,
        exec: &B256,
        value: &T,
    ) -> Result<T, PersistError> {
        let body = serde_json::to_string(value)?;
        let conn = self.conn();
        conn.prepare_cached(&format!(
            "INSERT OR IGNORE INTO {table} (execution_id, body) VALUES (?1, ?2)"
        ))?
        .execute(params![exec.to_string(), body])?;
        let stored: String = conn
            .prepare_cached(&format!("SELECT body FROM {table} WHERE execution_id = ?1"))?
            .query_row(params![exec.to_string()], |r| r.get(0))?;
        Ok(serde_json::from_str(&stored)?)
    }

    /// This member's observation of `exec`, if it made one.
    pub fn own_observation(&self, exec: &B256) -> Result<Option<SignedObservation>, PersistError> {
        self.get("don_own_observations", exec)
    }

    /// Stores this member's observation unless one is stored; returns the stored one.
    pub fn save_own_observation(
        &self,
        exec: &B256,
        o: &SignedObservation,
    ) -> Result<SignedObservation, PersistError> {
        self.put_once("don_own_observations", exec, o)
    }

    /// The report this member signed for `exec`, if it signed one.
    pub fn lock(&self, exec: &B256) -> Result<Option<Lock>, PersistError> {
        self.get("don_locks", exec)
    }

    /// Records the report this member is about to sign, unless it already signed one:
    /// returns the stored lock, which the caller compares with its own.
    pub fn lock_once(&self, exec: &B256, lock: &Lock) -> Result<Lock, PersistError> {
        self.put_once("don_locks", exec, lock)
    }

    /// Appends entries to an execution's consensus log, in one transaction (durable
    /// before this returns).
    pub fn log_append(&self, exec: &B256, entries: &[String]) -> Result<(), PersistError> {
        if entries.is_empty() {
            return Ok(());
        }
        let lines = Write::Log(*exec, entries.to_vec());
        self.commit(&[&lines], true)
    }

    /// Commits writes of any executions in one transaction: the journal's group commit.
    /// A `durable` commit runs with `synchronous = FULL` (one fsync of the WAL, which puts
    /// every earlier commit on disk too): for writes that something sent next depends on.
    /// Others survive the process's crash at once (they are in the WAL) and a power loss
    /// from the next durable commit on, as the round store's writes do.
    pub fn commit(&self, writes: &[&Write], durable: bool) -> Result<(), PersistError> {
        let conn = self.conn();
        let _restore = if durable {
            conn.prepare_cached("PRAGMA synchronous = FULL")?
                .execute([])?;
            Some(Restore(&conn))
        } else {
            None
        };
        // (dropped before `_restore`: a transaction that did not commit rolls back first)
        // IMMEDIATE: a reader of the file in another process (the CLI) makes this wait
        // (the busy timeout) instead of failing at its first write after a read
        let tx =
            rusqlite::Transaction::new_unchecked(&conn, rusqlite::TransactionBehavior::Immediate)?;
        for w in writes {
            match w {
                Write::Log(exec, entries) => append_log(&tx, exec, entries)?,
                Write::Lock(exec, l) => insert_once(&tx, "don_locks", exec, l.as_ref())?,
                Write::Observation(exec, o) => {
                    insert_once(&tx, "don_own_observations", exec, o.as_ref())?;
                }
                Write::Agreed(exec, a) => insert_once(&tx, "don_agreements", exec, a.as_ref())?,
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// An execution's consensus log, in order.
    pub fn log(&self, exec: &B256) -> Result<Vec<String>, PersistError> {
        let conn = self.read_conn();
        let mut stmt = conn.prepare_cached(
            "SELECT body FROM don_consensus_log WHERE execution_id = ?1 ORDER BY seq",
        )?;
        let rows = stmt.query_map(params![exec.to_string()], |r| r.get::<_, String>(0))?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    /// The agreement stored for `exec`, if any.
    pub fn agreed(&self, exec: &B256) -> Result<Option<Agreed>, PersistError> {
        self.get("don_agreements", exec)
    }

    /// Stores an agreement unless one is stored; returns the stored one.
    pub fn save_agreed(&self, exec: &B256, a: &Agreed) -> Result<Agreed, PersistError> {
        self.put_once("don_agreements", exec, a)
    }
}

/// Puts the connection back to `synchronous = NORMAL` however a durable commit ended
/// (committed, rolled back, or a panic); a failure only costs speed, so it is logged.
struct Restore<'c>(&'c Connection);

impl Drop for Restore<'_> {
    fn drop(&mut self) {
        let normal = self
            .0
            .prepare_cached("PRAGMA synchronous = NORMAL")
            .and_then(|mut s| s.execute([]));
        if let Err(e) = normal {
            tracing::warn!(error = %e, "cannot set the DON state file back to synchronous = NORMAL");
        }
    }
}

/// Appends entries after an execution's last logged one.
fn append_log(
    tx: &rusqlite::Transaction<'_>,
    exec: &B256,
    entries: &[String],
) -> Result<(), PersistError> {
    let key = exec.to_string();
    let next: i64 = tx
        .prepare_cached(
            "SELECT COALESCE(MAX(seq), -1) + 1 FROM don_consensus_log WHERE execution_id = ?1",
        )?
        .query_row(params![key], |r| r.get(0))?;
    let mut stmt = tx.prepare_cached(
        "INSERT INTO don_consensus_log (execution_id, seq, body) VALUES (?1, ?2, ?3)",
    )?;
    for (i, e) in entries.iter().enumerate() {
        stmt.execute(params![key, next + i as i64, e])?;
    }
    Ok(())
}

/// Inserts a row unless the execution has one (the first write stays).
fn insert_once<T: serde::Serialize>(
    tx: &rusqlite::Transaction<'_>,
    table: &str,
    exec: &B256,
    value: &T,
) -> Result<(), PersistError> {
    let body = serde_json::to_string(value)?;
    tx.prepare_cached(&format!(
        "INSERT OR IGNORE INTO {table} (execution_id, body) VALUES (?1, ?2)"
    ))?
    .execute(params![exec.to_string(), body])?;
    Ok(())
}
