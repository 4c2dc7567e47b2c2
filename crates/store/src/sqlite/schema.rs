//! The SQLite schema (its tables, as created since the first version) and the
//! migrations a file of an older version gets when it is opened.

use crate::StoreError;
use rusqlite::Connection;

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

const TX_TABLES: &str = "
CREATE TABLE IF NOT EXISTS tx_nonces (
    signer TEXT NOT NULL, chain_id INTEGER NOT NULL, nonce INTEGER NOT NULL,
    market TEXT NOT NULL, market_id TEXT NOT NULL, to_addr TEXT NOT NULL, calldata BLOB NOT NULL,
    gas_limit INTEGER NOT NULL, state TEXT NOT NULL, mined_tx TEXT, mined_block INTEGER,
    detail TEXT, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL,
    PRIMARY KEY (signer, chain_id, nonce));
CREATE INDEX IF NOT EXISTS tx_nonces_market ON tx_nonces (market, market_id);
CREATE TABLE IF NOT EXISTS tx_attempts (
    signer TEXT NOT NULL, chain_id INTEGER NOT NULL, nonce INTEGER NOT NULL, seq INTEGER NOT NULL,
    tx_hash TEXT NOT NULL, raw BLOB NOT NULL, max_fee TEXT NOT NULL, max_priority_fee TEXT NOT NULL,
    gas_limit INTEGER NOT NULL, sent_block INTEGER, created_at INTEGER NOT NULL,
    PRIMARY KEY (signer, chain_id, nonce, seq));
";

/// How many compiled statements a connection keeps (the store has fewer kinds).
const STATEMENT_CACHE: usize = 128;

/// How long opening the file waits for another process that holds it.
pub(super) const OPEN_BUSY: std::time::Duration = std::time::Duration::from_secs(5);

/// The schema version this binary writes (`PRAGMA user_version`).
const SQLITE_VERSION: i64 = 3;

/// Creates the tables, then applies what a file of an older version lacks: version 2
/// adds the lease columns (holder, term, lease_until) to `rounds`; version 3 the mined
/// block's hash to `tx_nonces` (the finality watch) and `round_attempts`.
pub(super) fn migrate(conn: &Connection) -> Result<(), StoreError> {
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
        conn.execute_batch(TX_TABLES)?;
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
