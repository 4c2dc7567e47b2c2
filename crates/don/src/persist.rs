//! What a member remembers across a restart, in its own SQLite file: its signed
//! observation of each execution (made once: the workers are never asked again for it),
//! the one report it signed for each execution (written before the signature leaves, and
//! never replaced: a restarted member cannot sign a second, different report), the attempt
//! it reached, and the agreement it saw.

use crate::agreed::Agreed;
use crate::wire::SignedObservation;
use alloy::primitives::{B256, Bytes};
use rusqlite::{Connection, OptionalExtension, params};
use std::path::Path;
use std::sync::Mutex;

#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    #[error("DON state database: {0}")]
    Sql(#[from] rusqlite::Error),
    #[error("DON state database holds unreadable JSON: {0}")]
    Json(#[from] serde_json::Error),
}

/// The one report this member signed for an execution.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Lock {
    pub digest: B256,
    pub report: Bytes,
    pub signature: Bytes,
    pub observations: Vec<SignedObservation>,
    pub attempt: u32,
}

pub struct Persist {
    conn: Mutex<Connection>,
}

const SCHEMA: &str = "
PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;
CREATE TABLE IF NOT EXISTS don_own_observations (
    execution_id TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS don_locks (
    execution_id TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS don_attempts (
    execution_id TEXT PRIMARY KEY, attempt INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS don_agreements (
    execution_id TEXT PRIMARY KEY, body TEXT NOT NULL);
";

impl Persist {
    pub fn open(path: &Path) -> Result<Self, PersistError> {
        let conn = Connection::open(path)?;
        conn.execute_batch(SCHEMA)?;
        Ok(Self {
            conn: Mutex::new(conn),
        })
    }

    pub fn in_memory() -> Result<Self, PersistError> {
        let conn = Connection::open_in_memory()?;
        conn.execute_batch(SCHEMA)?;
        Ok(Self {
            conn: Mutex::new(conn),
        })
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn get<T: serde::de::DeserializeOwned>(
        &self,
        table: &str,
        exec: &B256,
    ) -> Result<Option<T>, PersistError> {
        let body: Option<String> = self
            .conn()
            .query_row(
                &format!("SELECT body FROM {table} WHERE execution_id = ?1"),
                params![exec.to_string()],
                |r| r.get(0),
            )
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
        conn.execute(
            &format!("INSERT OR IGNORE INTO {table} (execution_id, body) VALUES (?1, ?2)"),
            params![exec.to_string(), body],
        )?;
        let stored: String = conn.query_row(
            &format!("SELECT body FROM {table} WHERE execution_id = ?1"),
            params![exec.to_string()],
            |r| r.get(0),
        )?;
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

    pub fn lock(&self, exec: &B256) -> Result<Option<Lock>, PersistError> {
        self.get("don_locks", exec)
    }

    /// Records the report this member is about to sign, unless it already signed one:
    /// returns the stored lock, which the caller compares with its own.
    pub fn lock_once(&self, exec: &B256, lock: &Lock) -> Result<Lock, PersistError> {
        self.put_once("don_locks", exec, lock)
    }

    pub fn attempt(&self, exec: &B256) -> Result<u32, PersistError> {
        Ok(self
            .conn()
            .query_row(
                "SELECT attempt FROM don_attempts WHERE execution_id = ?1",
                params![exec.to_string()],
                |r| r.get::<_, u32>(0),
            )
            .optional()?
            .unwrap_or(0))
    }

    pub fn set_attempt(&self, exec: &B256, attempt: u32) -> Result<(), PersistError> {
        self.conn().execute(
            "INSERT INTO don_attempts (execution_id, attempt) VALUES (?1, ?2)
             ON CONFLICT (execution_id) DO UPDATE SET attempt = MAX(attempt, excluded.attempt)",
            params![exec.to_string(), attempt],
        )?;
        Ok(())
    }

    pub fn agreed(&self, exec: &B256) -> Result<Option<Agreed>, PersistError> {
        self.get("don_agreements", exec)
    }

    pub fn save_agreed(&self, exec: &B256, a: &Agreed) -> Result<Agreed, PersistError> {
        self.put_once("don_agreements", exec, a)
    }
}
