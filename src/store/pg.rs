//! The shared store of a cluster: the same [`RoundStore`] on PostgreSQL, so that any
//! number of nodes share one database that decides who drives which round.
//!
//! - **Schema** versioned in [`MIGRATIONS`], applied at start under an advisory lock
//!   (several nodes may start at once); a database newer than the binary is refused.
//! - **Leases with fencing.** A node claims an unfinished round that is unheld, released
//!   past its back-off, or whose lease expired, with one conditional `UPDATE` that bumps
//!   the round's `term`; it renews the lease while it works. Every write for a round
//!   (state, progress, outcome, nonce reservation, attempts) runs in a transaction that
//!   first locks the round's row and checks that this node still holds it at the term it
//!   claimed: a node that lost its lease writes nothing ([`StoreError::LeaseLost`]).
//!   Lease times are the database's clock, so nodes' clocks do not matter.
//! - **Shared keys.** A nonce is reserved under a row lock of its key (`tx_keys`), so
//!   nodes that share a signing key never reserve the same nonce.
//!
//! Timestamps shown to operators (`created_at`, `updated_at`) stay unix seconds, as in
//! SQLite; lease times are milliseconds of the database clock.

use super::txs::{ATTEMPT_SELECT, AttemptRow, NONCE_SELECT, NonceRow};
use super::{
    ARCHIVE_SQL, AttemptRecord, DONE_SQL, KeyRef, Lease, LogRef, MinedAt, NonceRecord, NonceState,
    PastAttempt, RequestDecision, RoundRecord, RoundRow, RoundState, RoundStore, RoundSummary,
    SELECT, StoreError, SummaryRow, TxPayload, Watched, corrupt, now, parse_market,
};
use alloy::primitives::{Address, B256, U256};
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Mutex;
use std::time::Duration;
use tokio_postgres::{NoTls, Row, Transaction};

mod done;
use done::{renew_in, reopen_submission_in};

/// The oldest PostgreSQL the store is tested against (`server_version_num`).
pub const MIN_SERVER_VERSION: i32 = 120_000;

/// The database clock in milliseconds.
const NOW_MS: &str = "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT";

/// Versioned migrations: (version, what it does, SQL). Append only.
pub const MIGRATIONS: &[(i32, &str, &str)] = &[
    (
        1,
        "rounds, logs, checkpoints, progress, leases, nonces and attempts",
        "
CREATE TABLE seen_logs (
    tx_hash TEXT NOT NULL, log_index BIGINT NOT NULL, market TEXT NOT NULL, market_id TEXT NOT NULL,
    block_number BIGINT NOT NULL, block_hash TEXT NOT NULL, PRIMARY KEY (tx_hash, log_index));
CREATE TABLE rounds (
    id BIGSERIAL UNIQUE,
    market TEXT NOT NULL, market_id TEXT NOT NULL, state TEXT NOT NULL, attempt INTEGER NOT NULL,
    workflow TEXT NOT NULL, request_tx TEXT, request_block BIGINT, reason TEXT, submit_tx TEXT,
    raw_tx BYTEA, outcome TEXT, created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL,
    holder TEXT, term BIGINT NOT NULL DEFAULT 0, lease_until BIGINT, last_holder TEXT,
    PRIMARY KEY (market, market_id));
CREATE INDEX rounds_open ON rounds (lease_until) WHERE state NOT IN ('confirmed', 'failed', 'skipped');
CREATE TABLE checkpoints (key TEXT PRIMARY KEY, block_number BIGINT NOT NULL, block_hash TEXT NOT NULL);
CREATE TABLE round_progress (
    market TEXT NOT NULL, market_id TEXT NOT NULL, attempt INTEGER NOT NULL, progress TEXT NOT NULL,
    updated_at BIGINT NOT NULL, PRIMARY KEY (market, market_id));
CREATE TABLE tx_keys (signer TEXT NOT NULL, chain_id BIGINT NOT NULL, PRIMARY KEY (signer, chain_id));
CREATE TABLE tx_nonces (
    signer TEXT NOT NULL, chain_id BIGINT NOT NULL, nonce BIGINT NOT NULL,
    market TEXT NOT NULL, market_id TEXT NOT NULL, to_addr TEXT NOT NULL, calldata BYTEA NOT NULL,
    gas_limit BIGINT NOT NULL, state TEXT NOT NULL, mined_tx TEXT, mined_block BIGINT,
    detail TEXT, created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL,
    PRIMARY KEY (signer, chain_id, nonce));
CREATE INDEX tx_nonces_market ON tx_nonces (market, market_id);
CREATE TABLE tx_attempts (
    signer TEXT NOT NULL, chain_id BIGINT NOT NULL, nonce BIGINT NOT NULL, seq INTEGER NOT NULL,
    tx_hash TEXT NOT NULL, raw BYTEA NOT NULL, max_fee TEXT NOT NULL, max_priority_fee TEXT NOT NULL,
    gas_limit BIGINT NOT NULL, sent_block BIGINT, created_at BIGINT NOT NULL,
    PRIMARY KEY (signer, chain_id, nonce, seq));
",
    ),
    (
        2,
        "finality: the mined block's hash, finalized rounds, earlier attempts kept; node settings",
        "
ALTER TABLE tx_nonces ADD COLUMN mined_hash TEXT;
DROP INDEX rounds_open;
CREATE INDEX rounds_open ON rounds (lease_until) WHERE state NOT IN ('confirmed', 'finalized', 'failed', 'skipped');
CREATE INDEX rounds_confirmed ON rounds (updated_at) WHERE state = 'confirmed';
CREATE TABLE node_settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE round_attempts (
    market TEXT NOT NULL, market_id TEXT NOT NULL, attempt INTEGER NOT NULL, state TEXT NOT NULL,
    reason TEXT, request_tx TEXT, request_block BIGINT, submit_tx TEXT, outcome TEXT,
    ended_at BIGINT NOT NULL, PRIMARY KEY (market, market_id, attempt));
",
    ),
];

/// Settings of the PostgreSQL store.
#[derive(Debug, Clone)]
pub struct PgSettings {
    /// This node's name as a lease holder (unique per running node).
    pub node_id: String,
    /// How long a claimed round stays this node's without a renewal.
    pub lease: Duration,
    /// Connections in the pool.
    pub max_connections: usize,
    /// A PEM file of the CA(s) that sign the server's certificate, trusted besides the
    /// system's roots (`sslmode=require`/`verify-full`).
    pub ca_file: Option<std::path::PathBuf>,
}

/// How the connection is protected, from the URL's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tls {
    /// No `sslmode`, or `disable`: plain TCP.
    Off,
    /// `prefer`: TLS (verified) when the server offers it.
    Prefer,
    /// `require`, `verify-ca`, `verify-full`: TLS, the certificate verified against the
    /// roots and the host name, or no connection.
    Require,
}

/// Splits `sslmode` off a URL (tokio-postgres knows only disable/prefer/require).
fn split_sslmode(url: &str) -> Result<(String, Tls), String> {
    let Ok(mut u) = url::Url::parse(url) else {
        return Ok((url.to_string(), Tls::Off));
    };
    let mut mode = Tls::Off;
    let mut kept = Vec::new();
    for (k, v) in u.query_pairs() {
        if k == "sslmode" {
            mode = match v.as_ref() {
                "disable" => Tls::Off,
                "prefer" | "allow" => Tls::Prefer,
                "require" | "verify-ca" | "verify-full" => Tls::Require,
                other => return Err(format!("unknown sslmode {other:?}")),
            };
        } else {
            kept.push((k.into_owned(), v.into_owned()));
        }
    }
    if kept.is_empty() {
        u.set_query(None);
    } else {
        u.query_pairs_mut().clear().extend_pairs(kept);
    }
    Ok((u.to_string(), mode))
}

/// A rustls client trusting the system's roots and `ca_file`.
fn tls_connector(
    ca_file: Option<&std::path::Path>,
) -> Result<tokio_postgres_rustls::MakeRustlsConnect, String> {
    use rustls::pki_types::{CertificateDer, pem::PemObject};
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    if let Some(path) = ca_file {
        let certs = CertificateDer::pem_file_iter(path)
            .map_err(|e| format!("store.ca_file {}: {e}", path.display()))?;
        let mut n = 0;
        for cert in certs {
            let cert = cert.map_err(|e| format!("store.ca_file {}: {e}", path.display()))?;
            roots
                .add(cert)
                .map_err(|e| format!("store.ca_file {}: {e}", path.display()))?;
            n += 1;
        }
        if n == 0 {
            return Err(format!(
                "store.ca_file {} holds no PEM certificate",
                path.display()
            ));
        }
    }
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

/// The PostgreSQL store.
pub struct PgStore {
    pool: Pool,
    node: String,
    lease: Duration,
    /// The rounds this node holds, with the term it claimed them at (the fencing token).
    held: Mutex<HashMap<(Address, U256), i64>>,
}

/// A connection URL without its password (for every message that shows it).
pub fn redact_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if u.has_host() => {
            let _ = u.set_password(None);
            u.set_query(None);
            u.to_string()
        }
        _ => "(a connection string that is not a URL)".into(),
    }
}

fn pg_err(e: tokio_postgres::Error) -> StoreError {
    // tokio-postgres' messages carry no connection parameters; the database's own
    // message (code, detail) is what an operator needs
    let detail = e
        .as_db_error()
        .map(|d| format!("{} ({})", d.message(), d.code().code()))
        .unwrap_or_else(|| {
            let mut s = e.to_string();
            let mut src = std::error::Error::source(&e);
            while let Some(c) = src {
                s.push_str(": ");
                s.push_str(&c.to_string());
                src = c.source();
            }
            s
        });
    StoreError::Postgres(detail)
}

fn pool_err(e: deadpool_postgres::PoolError) -> StoreError {
    match e {
        deadpool_postgres::PoolError::Backend(e) => pg_err(e),
        e => StoreError::Postgres(format!("connection pool: {e}")),
    }
}

const FINAL: &str = DONE_SQL;

/// SQLite's `?n` placeholders as PostgreSQL's `$n` (the SQL both backends share).
fn pg_sql(sql: &str) -> String {
    sql.replace('?', "$")
}

impl PgStore {
    /// Connects, checks the server's version and applies the migrations. Errors name the
    /// URL without its password.
    pub async fn connect(url: &str, settings: PgSettings) -> Result<Self, StoreError> {
        let shown = redact_url(url);
        let invalid = |error: String| StoreError::Connect {
            url: shown.clone(),
            error,
        };
        let (url, tls) = split_sslmode(url).map_err(&invalid)?;
        let mut cfg = tokio_postgres::Config::from_str(&url)
            .map_err(|e| invalid(format!("not a PostgreSQL connection URL: {e}")))?;
        cfg.ssl_mode(match tls {
            Tls::Off => tokio_postgres::config::SslMode::Disable,
            Tls::Prefer => tokio_postgres::config::SslMode::Prefer,
            Tls::Require => tokio_postgres::config::SslMode::Require,
        });
        cfg.connect_timeout(Duration::from_secs(5))
            .keepalives(true)
            .keepalives_idle(Duration::from_secs(10))
            .tcp_user_timeout(Duration::from_secs(15))
            // a stalled server ends a statement instead of a round's progress
            .options("-c statement_timeout=15000 -c lock_timeout=10000")
            .application_name("cresolver");
        let mc = ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        };
        let mgr = match tls {
            Tls::Off => Manager::from_config(cfg, NoTls, mc),
            Tls::Prefer | Tls::Require => Manager::from_config(
                cfg,
                tls_connector(settings.ca_file.as_deref()).map_err(&invalid)?,
                mc,
            ),
        };
        let pool = Pool::builder(mgr)
            .max_size(settings.max_connections.max(2))
            .wait_timeout(Some(Duration::from_secs(10)))
            .create_timeout(Some(Duration::from_secs(5)))
            .recycle_timeout(Some(Duration::from_secs(5)))
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(|e| invalid(e.to_string()))?;
        let store = Self {
            pool,
            node: settings.node_id,
            lease: settings.lease,
            held: Mutex::new(HashMap::new()),
        };
        let connect_err = |e: StoreError| StoreError::Connect {
            url: shown.clone(),
            error: e.to_string(),
        };
        let client = store
            .pool
            .get()
            .await
            .map_err(pool_err)
            .map_err(connect_err)?;
        let version: String = client
            .query_one("SHOW server_version_num", &[])
            .await
            .map_err(pg_err)
            .map_err(connect_err)?
            .try_get(0)
            .map_err(|e| corrupt("column", e))?;
        let num: i32 = version.trim().parse().unwrap_or(0);
        if num < MIN_SERVER_VERSION {
            return Err(StoreError::Connect {
                url: shown,
                error: format!(
                    "PostgreSQL server version {version} is not supported: use PostgreSQL 12 or newer"
                ),
            });
        }
        drop(client);
        store.migrate().await.map_err(connect_err)?;
        Ok(store)
    }

    /// This node's name as a lease holder.
    pub fn node_id(&self) -> &str {
        &self.node
    }

    /// Applies the migrations the database does not have yet, one transaction, under an
    /// advisory lock so that nodes starting together apply each once.
    async fn migrate(&self) -> Result<(), StoreError> {
        let mut client = self.pool.get().await.map_err(pool_err)?;
        let tx = client.transaction().await.map_err(pg_err)?;
        tx.execute("SELECT pg_advisory_xact_lock(7370657263)", &[])
            .await
            .map_err(pg_err)?;
        let exists: bool = tx
            .query_one("SELECT to_regclass('schema_migrations') IS NOT NULL", &[])
            .await
            .map_err(pg_err)?
            .try_get(0)
            .map_err(|e| corrupt("column", e))?;
        if !exists {
            tx.batch_execute(
                "CREATE TABLE schema_migrations (
                    version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
            )
            .await
            .map_err(pg_err)?;
        }
        let have: Option<i32> = tx
            .query_one("SELECT MAX(version) FROM schema_migrations", &[])
            .await
            .map_err(pg_err)?
            .try_get(0)
            .map_err(|e| corrupt("column", e))?;
        let have = have.unwrap_or(0);
        let newest = MIGRATIONS.last().map_or(0, |m| m.0);
        if have > newest {
            return Err(StoreError::Corrupt(format!(
                "the database schema is version {have}, newer than this binary's {newest}: upgrade the node"
            )));
        }
        for (version, description, sql) in MIGRATIONS.iter().filter(|m| m.0 > have) {
            tx.batch_execute(sql).await.map_err(pg_err)?;
            tx.execute(
                "INSERT INTO schema_migrations (version, description) VALUES ($1, $2)",
                &[version, description],
            )
            .await
            .map_err(pg_err)?;
            tracing::info!(version, description, "database migration applied");
        }
        tx.commit().await.map_err(pg_err)?;
        Ok(())
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.pool.get().await.map_err(pool_err)
    }

    fn term_of(&self, market: Address, market_id: U256) -> Option<i64> {
        self.held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(market, market_id))
            .copied()
    }

    fn forget(&self, market: Address, market_id: U256) {
        self.held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&(market, market_id));
    }

    /// Locks the round's row and checks this node still holds it at its term: the fence
    /// of every write for a round.
    async fn fence(
        &self,
        tx: &Transaction<'_>,
        market: Address,
        market_id: U256,
    ) -> Result<(), StoreError> {
        let lost = StoreError::LeaseLost(market, market_id);
        let Some(term) = self.term_of(market, market_id) else {
            return Err(lost);
        };
        let row = tx
            .query_opt(
                "SELECT holder, term FROM rounds WHERE market = $1 AND market_id = $2 FOR UPDATE",
                &[&market.to_string(), &market_id.to_string()],
            )
            .await
            .map_err(pg_err)?
            .ok_or(StoreError::NoRound(market, market_id))?;
        let holder: Option<String> = col(&row, 0)?;
        let t: i64 = col(&row, 1)?;
        if holder.as_deref() != Some(self.node.as_str()) || t != term {
            self.forget(market, market_id);
            return Err(lost);
        }
        Ok(())
    }

    /// One statement for a round, in a transaction fenced by this node's lease.
    async fn fenced_execute(
        &self,
        market: Address,
        market_id: U256,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<(), StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_err)?;
        self.fence(&tx, market, market_id).await?;
        tx.execute(sql, params).await.map_err(pg_err)?;
        tx.commit().await.map_err(pg_err)
    }

    /// The round a reserved nonce belongs to.
    async fn nonce_round(
        &self,
        tx: &Transaction<'_>,
        key: KeyRef,
        nonce: u64,
    ) -> Result<(Address, U256), StoreError> {
        let row = tx
            .query_opt(
                "SELECT market, market_id FROM tx_nonces WHERE signer = $1 AND chain_id = $2 AND nonce = $3",
                &[&key.signer.to_string(), &(key.chain_id as i64), &(nonce as i64)],
            )
            .await
            .map_err(pg_err)?
            .ok_or_else(|| corrupt("tx_nonces", format!("nonce {nonce} is not reserved")))?;
        parse_market(&col::<String>(&row, 0)?, &col::<String>(&row, 1)?)
    }

    /// A round's reservations under any key (only the pending ones with `pending`),
    /// oldest first.
    async fn round_nonces(
        &self,
        market: Address,
        market_id: U256,
        pending: bool,
    ) -> Result<Vec<(KeyRef, NonceRecord)>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT signer, chain_id, nonce FROM tx_nonces WHERE market = $1 AND market_id = $2
                 AND (NOT $3 OR state = 'pending') ORDER BY created_at, nonce",
                &[&market.to_string(), &market_id.to_string(), &pending],
            )
            .await
            .map_err(pg_err)?;
        drop(client);
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            let signer: String = col(&r, 0)?;
            let key = KeyRef {
                signer: Address::from_str(&signer).map_err(|e| corrupt("signer", e))?,
                chain_id: col::<i64>(&r, 1)? as u64,
            };
            let nonce = col::<i64>(&r, 2)? as u64;
            if let Some(rec) = self.nonce_record(key, nonce).await? {
                out.push((key, rec));
            }
        }
        Ok(out)
    }

    async fn upsert_round(
        &self,
        tx: &Transaction<'_>,
        market: Address,
        market_id: U256,
        workflow: &str,
        request: Option<(B256, u64)>,
        unresolved_on_chain: bool,
    ) -> Result<RequestDecision, StoreError> {
        let (m, id) = (market.to_string(), market_id.to_string());
        let existing = tx
            .query_opt(
                "SELECT state FROM rounds WHERE market = $1 AND market_id = $2 FOR UPDATE",
                &[&m, &id],
            )
            .await
            .map_err(pg_err)?;
        let req_tx = request.map(|(h, _)| h.to_string());
        let req_block = request.map(|(_, b)| b as i64);
        let t = now() as i64;
        match existing {
            None => {
                // two nodes may insert the same market at once: the loser sees it handled
                let n = tx
                    .execute(
                        "INSERT INTO rounds (market, market_id, state, attempt, workflow, request_tx, request_block, created_at, updated_at)
                         VALUES ($1, $2, 'requested', 1, $3, $4, $5, $6, $6) ON CONFLICT DO NOTHING",
                        &[&m, &id, &workflow, &req_tx, &req_block, &t],
                    )
                    .await
                    .map_err(pg_err)?;
                Ok(if n == 1 {
                    RequestDecision::New
                } else {
                    RequestDecision::AlreadyHandled(RoundState::Requested)
                })
            }
            Some(row) => {
                let state: String = col(&row, 0)?;
                if state == "failed" {
                    tx.execute(&pg_sql(ARCHIVE_SQL), &[&m, &id, &t])
                        .await
                        .map_err(pg_err)?;
                    tx.execute(
                        "UPDATE rounds SET state = 'requested', attempt = attempt + 1, workflow = $3,
                         request_tx = COALESCE($4, request_tx), request_block = COALESCE($5, request_block),
                         reason = NULL, updated_at = $6, holder = NULL, lease_until = NULL
                         WHERE market = $1 AND market_id = $2",
                        &[&m, &id, &workflow, &req_tx, &req_block, &t],
                    )
                    .await
                    .map_err(pg_err)?;
                    Ok(RequestDecision::Reopened)
                } else {
                    let state = RoundState::from_str(&state)?;
                    if !(unresolved_on_chain && state.is_resolved()) {
                        return Ok(RequestDecision::AlreadyHandled(state));
                    }
                    if state == RoundState::Confirmed {
                        reopen_submission_in(tx, market, market_id, super::RESUBMIT_REASON, None)
                            .await?;
                        return Ok(RequestDecision::Resubmit);
                    }
                    renew_in(tx, market, market_id, workflow, request, state).await?;
                    Ok(RequestDecision::Renewed)
                }
            }
        }
    }
}

/// A column of a row, typed; a column of another type is a corrupt-data error, not a
/// panic (`Row::get` panics).
fn col<'a, T: tokio_postgres::types::FromSql<'a>>(r: &'a Row, i: usize) -> Result<T, StoreError> {
    r.try_get(i).map_err(|e| corrupt("column", e))
}

fn read_round(r: &Row) -> Result<RoundRecord, StoreError> {
    RoundRow {
        market: col(r, 0)?,
        market_id: col(r, 1)?,
        state: col(r, 2)?,
        attempt: col::<i32>(r, 3)? as i64,
        workflow: col(r, 4)?,
        request_tx: col(r, 5)?,
        request_block: col(r, 6)?,
        reason: col(r, 7)?,
        submit_tx: col(r, 8)?,
        raw_tx: col(r, 9)?,
        outcome: col(r, 10)?,
        created_at: col(r, 11)?,
        updated_at: col(r, 12)?,
        holder: col(r, 13)?,
    }
    .parse()
}

fn read_nonce(r: &Row) -> Result<NonceRecord, StoreError> {
    NonceRow {
        nonce: col(r, 0)?,
        state: col(r, 1)?,
        market: col(r, 2)?,
        market_id: col(r, 3)?,
        to: col(r, 4)?,
        calldata: col(r, 5)?,
        gas_limit: col(r, 6)?,
        mined_tx: col(r, 7)?,
        mined_block: col(r, 8)?,
        detail: col(r, 9)?,
        created_at: col(r, 10)?,
        updated_at: col(r, 11)?,
        mined_hash: col(r, 12)?,
    }
    .parse()
}

fn read_attempt(r: &Row) -> Result<AttemptRecord, StoreError> {
    AttemptRow {
        nonce: col(r, 0)?,
        seq: col::<i32>(r, 1)? as i64,
        tx_hash: col(r, 2)?,
        raw: col(r, 3)?,
        max_fee: col(r, 4)?,
        max_priority_fee: col(r, 5)?,
        gas_limit: col(r, 6)?,
        sent_block: col(r, 7)?,
        created_at: col(r, 8)?,
    }
    .parse()
}

fn key_params(key: &KeyRef) -> (String, i64) {
    (key.signer.to_string(), key.chain_id as i64)
}

#[async_trait::async_trait]
impl RoundStore for PgStore {
    async fn record_request_judged(
        &self,
        market: Address,
        market_id: U256,
        workflow: &str,
        log: &LogRef,
        unresolved_on_chain: bool,
    ) -> Result<RequestDecision, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_err)?;
        let inserted = tx
            .execute(
                "INSERT INTO seen_logs (tx_hash, log_index, market, market_id, block_number, block_hash)
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
                &[
                    &log.tx_hash.to_string(),
                    &(log.log_index as i64),
                    &market.to_string(),
                    &market_id.to_string(),
                    &(log.block_number as i64),
                    &log.block_hash.to_string(),
                ],
            )
            .await
            .map_err(pg_err)?;
        if inserted == 0 {
            return Ok(RequestDecision::DuplicateLog);
        }
        let d = self
            .upsert_round(
                &tx,
                market,
                market_id,
                workflow,
                Some((log.tx_hash, log.block_number)),
                unresolved_on_chain,
            )
            .await?;
        tx.commit().await.map_err(pg_err)?;
        Ok(d)
    }

    async fn log_seen(&self, log: &LogRef) -> Result<bool, StoreError> {
        self.done_log_seen(log).await
    }

    async fn manual_request_judged(
        &self,
        market: Address,
        market_id: U256,
        workflow: &str,
        unresolved_on_chain: bool,
    ) -> Result<RequestDecision, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_err)?;
        let d = self
            .upsert_round(&tx, market, market_id, workflow, None, unresolved_on_chain)
            .await?;
        tx.commit().await.map_err(pg_err)?;
        Ok(d)
    }

    async fn set_state(
        &self,
        market: Address,
        market_id: U256,
        state: RoundState,
        reason: Option<&str>,
    ) -> Result<(), StoreError> {
        self.fenced_execute(
            market,
            market_id,
            "UPDATE rounds SET state = $3, reason = $4, updated_at = $5 WHERE market = $1 AND market_id = $2",
            &[
                &market.to_string(),
                &market_id.to_string(),
                &state.as_str(),
                &reason,
                &(now() as i64),
            ],
        )
        .await
    }

    async fn save_progress(
        &self,
        market: Address,
        market_id: U256,
        attempt: u32,
        state: RoundState,
        progress: &serde_json::Value,
    ) -> Result<(), StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_err)?;
        self.fence(&tx, market, market_id).await?;
        let (m, id, t) = (market.to_string(), market_id.to_string(), now() as i64);
        tx.execute(
            "UPDATE rounds SET state = $3, updated_at = $4 WHERE market = $1 AND market_id = $2",
            &[&m, &id, &state.as_str(), &t],
        )
        .await
        .map_err(pg_err)?;
        tx.execute(
            "INSERT INTO round_progress (market, market_id, attempt, progress, updated_at) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (market, market_id) DO UPDATE SET attempt = $3, progress = $4, updated_at = $5",
            &[&m, &id, &(attempt as i32), &progress.to_string(), &t],
        )
        .await
        .map_err(pg_err)?;
        tx.commit().await.map_err(pg_err)
    }

    async fn progress(
        &self,
        market: Address,
        market_id: U256,
        attempt: u32,
    ) -> Result<Option<serde_json::Value>, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                "SELECT progress FROM round_progress WHERE market = $1 AND market_id = $2 AND attempt = $3",
                &[&market.to_string(), &market_id.to_string(), &(attempt as i32)],
            )
            .await
            .map_err(pg_err)?;
        row.map(|r| {
            serde_json::from_str(col::<&str>(&r, 0)?).map_err(|e| corrupt("round progress", e))
        })
        .transpose()
    }

    async fn set_request_block(
        &self,
        market: Address,
        market_id: U256,
        block: u64,
    ) -> Result<(), StoreError> {
        self.fenced_execute(
            market,
            market_id,
            "UPDATE rounds SET request_block = $3, updated_at = $4 WHERE market = $1 AND market_id = $2",
            &[
                &market.to_string(),
                &market_id.to_string(),
                &(block as i64),
                &(now() as i64),
            ],
        )
        .await
    }

    async fn set_outcome(
        &self,
        market: Address,
        market_id: U256,
        outcome: &serde_json::Value,
    ) -> Result<(), StoreError> {
        self.fenced_execute(
            market,
            market_id,
            "UPDATE rounds SET outcome = $3, updated_at = $4 WHERE market = $1 AND market_id = $2",
            &[
                &market.to_string(),
                &market_id.to_string(),
                &outcome.to_string(),
                &(now() as i64),
            ],
        )
        .await
    }

    async fn get(
        &self,
        market: Address,
        market_id: U256,
    ) -> Result<Option<RoundRecord>, StoreError> {
        let client = self.client().await?;
        client
            .query_opt(
                &format!("{SELECT} WHERE market = $1 AND market_id = $2"),
                &[&market.to_string(), &market_id.to_string()],
            )
            .await
            .map_err(pg_err)?
            .map(|r| read_round(&r))
            .transpose()
    }

    async fn list_summaries(
        &self,
        limit: usize,
        before: Option<i64>,
    ) -> Result<(Vec<RoundSummary>, Option<i64>), StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                &format!(
                    "SELECT id, market, market_id, state, attempt, workflow, request_tx, request_block, reason, submit_tx,
                        created_at, updated_at, holder, last_holder,
                        CASE WHEN lease_until > {NOW_MS} THEN lease_until - {NOW_MS} END
                     FROM rounds WHERE id < $1 ORDER BY id DESC LIMIT $2"
                ),
                &[&before.unwrap_or(i64::MAX), &(limit as i64)],
            )
            .await
            .map_err(pg_err)?;
        let mut out = Vec::with_capacity(rows.len());
        let mut last = None;
        for r in rows {
            let row = SummaryRow {
                cursor: col(&r, 0)?,
                market: col(&r, 1)?,
                market_id: col(&r, 2)?,
                state: col(&r, 3)?,
                attempt: col::<i32>(&r, 4)? as i64,
                workflow: col(&r, 5)?,
                request_tx: col(&r, 6)?,
                request_block: col(&r, 7)?,
                reason: col(&r, 8)?,
                submit_tx: col(&r, 9)?,
                created_at: col(&r, 10)?,
                updated_at: col(&r, 11)?,
                holder: col(&r, 12)?,
                driven_by: col(&r, 13)?,
                lease_ms: col(&r, 14)?,
            };
            last = Some(row.cursor);
            out.push(row.parse()?);
        }
        let next = (out.len() == limit).then_some(last).flatten();
        Ok((out, next))
    }

    async fn unfinished(&self) -> Result<Vec<RoundRecord>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                &format!("{SELECT} WHERE state NOT IN {FINAL} ORDER BY created_at, id"),
                &[],
            )
            .await
            .map_err(pg_err)?;
        rows.iter().map(read_round).collect()
    }

    async fn count_by_state(&self) -> Result<Vec<(RoundState, u64)>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query("SELECT state, COUNT(*) FROM rounds GROUP BY state", &[])
            .await
            .map_err(pg_err)?;
        rows.iter()
            .map(|r| {
                let s: String = col(r, 0)?;
                Ok((RoundState::from_str(&s)?, col::<i64>(r, 1)? as u64))
            })
            .collect()
    }

    async fn probe_write(&self) -> Result<(), StoreError> {
        self.set_checkpoint(&format!("health:probe:{}", self.node), now(), B256::ZERO)
            .await
    }

    async fn checkpoint(&self, key: &str) -> Result<Option<(u64, B256)>, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                "SELECT block_number, block_hash FROM checkpoints WHERE key = $1",
                &[&key],
            )
            .await
            .map_err(pg_err)?;
        row.map(|r| {
            let h: String = col(&r, 1)?;
            Ok((
                col::<i64>(&r, 0)? as u64,
                B256::from_str(&h).map_err(|e| corrupt("checkpoint hash", e))?,
            ))
        })
        .transpose()
    }

    async fn set_checkpoint(&self, key: &str, block: u64, hash: B256) -> Result<(), StoreError> {
        let client = self.client().await?;
        client
            .execute(
                "INSERT INTO checkpoints (key, block_number, block_hash) VALUES ($1, $2, $3)
                 ON CONFLICT (key) DO UPDATE SET block_number = excluded.block_number, block_hash = excluded.block_hash",
                &[&key, &(block as i64), &hash.to_string()],
            )
            .await
            .map_err(pg_err)?;
        Ok(())
    }

    async fn reserve_nonce(
        &self,
        key: KeyRef,
        chain_pending: u64,
        payload: &TxPayload,
    ) -> Result<u64, StoreError> {
        let (signer, chain) = key_params(&key);
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_err)?;
        self.fence(&tx, payload.market, payload.market_id).await?;
        // the key's row lock: nodes sharing the key reserve one at a time
        tx.execute(
            "INSERT INTO tx_keys (signer, chain_id) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            &[&signer, &chain],
        )
        .await
        .map_err(pg_err)?;
        tx.execute(
            "SELECT 1 FROM tx_keys WHERE signer = $1 AND chain_id = $2 FOR UPDATE",
            &[&signer, &chain],
        )
        .await
        .map_err(pg_err)?;
        let highest: Option<i64> = tx
            .query_one(
                "SELECT MAX(nonce) FROM tx_nonces WHERE signer = $1 AND chain_id = $2",
                &[&signer, &chain],
            )
            .await
            .map_err(pg_err)?
            .try_get(0)
            .map_err(|e| corrupt("column", e))?;
        let nonce = highest.map_or(chain_pending, |h| chain_pending.max(h as u64 + 1));
        let t = now() as i64;
        tx.execute(
            "INSERT INTO tx_nonces (signer, chain_id, nonce, market, market_id, to_addr, calldata, gas_limit, state, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'pending', $9, $9)",
            &[
                &signer,
                &chain,
                &(nonce as i64),
                &payload.market.to_string(),
                &payload.market_id.to_string(),
                &payload.to.to_string(),
                &payload.calldata.as_ref(),
                &(payload.gas_limit as i64),
                &t,
            ],
        )
        .await
        .map_err(pg_err)?;
        tx.execute(
            "UPDATE rounds SET state = 'submitted', reason = NULL, updated_at = $3 WHERE market = $1 AND market_id = $2",
            &[&payload.market.to_string(), &payload.market_id.to_string(), &t],
        )
        .await
        .map_err(pg_err)?;
        tx.commit().await.map_err(pg_err)?;
        Ok(nonce)
    }

    async fn add_attempt(
        &self,
        key: KeyRef,
        market: Address,
        market_id: U256,
        a: &AttemptRecord,
    ) -> Result<(), StoreError> {
        let (signer, chain) = key_params(&key);
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_err)?;
        self.fence(&tx, market, market_id).await?;
        tx.execute(
            "INSERT INTO tx_attempts (signer, chain_id, nonce, seq, tx_hash, raw, max_fee, max_priority_fee, gas_limit, sent_block, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
            &[
                &signer,
                &chain,
                &(a.nonce as i64),
                &(a.seq as i32),
                &a.tx_hash.to_string(),
                &a.raw.as_ref(),
                &a.max_fee_per_gas.to_string(),
                &a.max_priority_fee_per_gas.to_string(),
                &(a.gas_limit as i64),
                &a.sent_block.map(|b| b as i64),
                &(a.created_at as i64),
            ],
        )
        .await
        .map_err(pg_err)?;
        tx.execute(
            "UPDATE rounds SET submit_tx = $3, updated_at = $4 WHERE market = $1 AND market_id = $2",
            &[
                &market.to_string(),
                &market_id.to_string(),
                &a.tx_hash.to_string(),
                &(now() as i64),
            ],
        )
        .await
        .map_err(pg_err)?;
        tx.commit().await.map_err(pg_err)
    }

    async fn mark_attempt_sent(
        &self,
        key: KeyRef,
        nonce: u64,
        seq: u32,
        block: u64,
    ) -> Result<(), StoreError> {
        let (signer, chain) = key_params(&key);
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_err)?;
        let (market, market_id) = self.nonce_round(&tx, key, nonce).await?;
        self.fence(&tx, market, market_id).await?;
        tx.execute(
            "UPDATE tx_attempts SET sent_block = COALESCE(sent_block, $5)
             WHERE signer = $1 AND chain_id = $2 AND nonce = $3 AND seq = $4",
            &[
                &signer,
                &chain,
                &(nonce as i64),
                &(seq as i32),
                &(block as i64),
            ],
        )
        .await
        .map_err(pg_err)?;
        tx.commit().await.map_err(pg_err)
    }

    async fn finish_nonce(
        &self,
        key: KeyRef,
        nonce: u64,
        state: NonceState,
        mined: Option<MinedAt>,
        detail: Option<&str>,
    ) -> Result<(), StoreError> {
        let (signer, chain) = key_params(&key);
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_err)?;
        let (market, market_id) = self.nonce_round(&tx, key, nonce).await?;
        self.fence(&tx, market, market_id).await?;
        tx.execute(
            "UPDATE tx_nonces SET state = $4, mined_tx = $5, mined_block = $6, detail = $7, updated_at = $8, mined_hash = $9
             WHERE signer = $1 AND chain_id = $2 AND nonce = $3",
            &[
                &signer,
                &chain,
                &(nonce as i64),
                &state.as_str(),
                &mined.map(|m| m.tx.to_string()),
                &mined.map(|m| m.block as i64),
                &detail,
                &(now() as i64),
                &mined.map(|m| m.block_hash.to_string()),
            ],
        )
        .await
        .map_err(pg_err)?;
        if let Some(MinedAt { tx: h, .. }) = mined {
            tx.execute(
                "UPDATE rounds SET submit_tx = $3 WHERE market = $1 AND market_id = $2",
                &[&market.to_string(), &market_id.to_string(), &h.to_string()],
            )
            .await
            .map_err(pg_err)?;
        }
        tx.commit().await.map_err(pg_err)
    }

    async fn pending_nonce_of(
        &self,
        key: KeyRef,
        market: Address,
        market_id: U256,
    ) -> Result<Option<NonceRecord>, StoreError> {
        let (signer, chain) = key_params(&key);
        let client = self.client().await?;
        client
            .query_opt(
                &format!(
                    "{NONCE_SELECT} WHERE signer = $1 AND chain_id = $2 AND market = $3 AND market_id = $4 AND state = 'pending'
                     ORDER BY nonce LIMIT 1"
                ),
                &[&signer, &chain, &market.to_string(), &market_id.to_string()],
            )
            .await
            .map_err(pg_err)?
            .map(|r| read_nonce(&r))
            .transpose()
    }

    async fn nonce_record(
        &self,
        key: KeyRef,
        nonce: u64,
    ) -> Result<Option<NonceRecord>, StoreError> {
        let (signer, chain) = key_params(&key);
        let client = self.client().await?;
        client
            .query_opt(
                &format!("{NONCE_SELECT} WHERE signer = $1 AND chain_id = $2 AND nonce = $3"),
                &[&signer, &chain, &(nonce as i64)],
            )
            .await
            .map_err(pg_err)?
            .map(|r| read_nonce(&r))
            .transpose()
    }

    async fn pending_nonces(&self, key: KeyRef) -> Result<Vec<NonceRecord>, StoreError> {
        let (signer, chain) = key_params(&key);
        let client = self.client().await?;
        let rows = client
            .query(
                &format!(
                    "{NONCE_SELECT} WHERE signer = $1 AND chain_id = $2 AND state = 'pending' ORDER BY nonce"
                ),
                &[&signer, &chain],
            )
            .await
            .map_err(pg_err)?;
        rows.iter().map(read_nonce).collect()
    }

    async fn attempts(&self, key: KeyRef, nonce: u64) -> Result<Vec<AttemptRecord>, StoreError> {
        let (signer, chain) = key_params(&key);
        let client = self.client().await?;
        let rows = client
            .query(
                &format!(
                    "{ATTEMPT_SELECT} WHERE signer = $1 AND chain_id = $2 AND nonce = $3 ORDER BY seq"
                ),
                &[&signer, &chain, &(nonce as i64)],
            )
            .await
            .map_err(pg_err)?;
        rows.iter().map(read_attempt).collect()
    }

    async fn tx_history(
        &self,
        market: Address,
        market_id: U256,
    ) -> Result<Vec<(NonceRecord, Vec<AttemptRecord>)>, StoreError> {
        let mut out = Vec::new();
        for (key, rec) in self.round_nonces(market, market_id, false).await? {
            let attempts = self.attempts(key, rec.nonce).await?;
            out.push((rec, attempts));
        }
        Ok(out)
    }

    async fn highest_nonce(&self, key: KeyRef) -> Result<Option<u64>, StoreError> {
        let (signer, chain) = key_params(&key);
        let client = self.client().await?;
        let h: Option<i64> = client
            .query_one(
                "SELECT MAX(nonce) FROM tx_nonces WHERE signer = $1 AND chain_id = $2",
                &[&signer, &chain],
            )
            .await
            .map_err(pg_err)?
            .try_get(0)
            .map_err(|e| corrupt("column", e))?;
        Ok(h.map(|h| h as u64))
    }

    async fn pending_nonces_of_round(
        &self,
        market: Address,
        market_id: U256,
    ) -> Result<Vec<(KeyRef, NonceRecord)>, StoreError> {
        self.round_nonces(market, market_id, true).await
    }

    async fn renew_round(
        &self,
        market: Address,
        market_id: U256,
        workflow: &str,
        request: Option<(B256, u64)>,
        from: RoundState,
    ) -> Result<bool, StoreError> {
        self.done_renew(market, market_id, workflow, request, from)
            .await
    }

    async fn reopen_submission(
        &self,
        market: Address,
        market_id: U256,
        reason: &str,
        outcome: Option<&serde_json::Value>,
    ) -> Result<bool, StoreError> {
        self.done_reopen(market, market_id, reason, outcome).await
    }

    async fn set_finalized(
        &self,
        market: Address,
        market_id: U256,
        outcome: Option<&serde_json::Value>,
    ) -> Result<bool, StoreError> {
        self.done_finalize(market, market_id, outcome).await
    }

    async fn awaiting_finality(&self, limit: usize) -> Result<Vec<Watched>, StoreError> {
        self.done_watched(limit).await
    }

    async fn past_attempts(
        &self,
        market: Address,
        market_id: U256,
    ) -> Result<Vec<PastAttempt>, StoreError> {
        self.done_past(market, market_id).await
    }

    async fn setting_or_init(&self, key: &str, candidate: &str) -> Result<String, StoreError> {
        self.done_setting(key, candidate).await
    }

    fn shared(&self) -> bool {
        true
    }

    fn node_id(&self) -> &str {
        &self.node
    }

    fn lease_duration(&self) -> Duration {
        self.lease
    }

    async fn claim(
        &self,
        market: Address,
        market_id: U256,
        ignore_backoff: bool,
    ) -> Result<Option<Lease>, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_err)?;
        let (m, id) = (market.to_string(), market_id.to_string());
        let Some(row) = tx
            .query_opt(
                &format!(
                    "SELECT holder, state, lease_until IS NULL OR lease_until < {NOW_MS}
                     FROM rounds WHERE market = $1 AND market_id = $2 FOR UPDATE"
                ),
                &[&m, &id],
            )
            .await
            .map_err(pg_err)?
        else {
            return Ok(None);
        };
        let prev: Option<String> = col(&row, 0)?;
        let state: String = col(&row, 1)?;
        let expired: bool = col(&row, 2)?;
        let ours = prev.as_deref() == Some(self.node.as_str());
        let free = expired || ours || (prev.is_none() && ignore_backoff);
        if RoundState::from_str(&state)?.is_final() || !free {
            return Ok(None);
        }
        let term: i64 = tx
            .query_one(
                &format!(
                    "UPDATE rounds SET holder = $3, last_holder = $3, term = term + 1, lease_until = {NOW_MS} + $4
                     WHERE market = $1 AND market_id = $2 RETURNING term"
                ),
                &[&m, &id, &self.node, &(self.lease.as_millis() as i64)],
            )
            .await
            .map_err(pg_err)?
            .try_get(0)
            .map_err(|e| corrupt("column", e))?;
        tx.commit().await.map_err(pg_err)?;
        self.held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((market, market_id), term);
        Ok(Some(Lease {
            term: term as u64,
            taken_from: prev.filter(|p| p != &self.node),
        }))
    }

    async fn renew(&self, market: Address, market_id: U256) -> Result<bool, StoreError> {
        let Some(term) = self.term_of(market, market_id) else {
            return Ok(false);
        };
        let client = self.client().await?;
        let n = client
            .execute(
                &format!(
                    "UPDATE rounds SET lease_until = {NOW_MS} + $4
                     WHERE market = $1 AND market_id = $2 AND holder = $3 AND term = $5"
                ),
                &[
                    &market.to_string(),
                    &market_id.to_string(),
                    &self.node,
                    &(self.lease.as_millis() as i64),
                    &term,
                ],
            )
            .await
            .map_err(pg_err)?;
        if n == 0 {
            self.forget(market, market_id);
        }
        Ok(n == 1)
    }

    async fn release(
        &self,
        market: Address,
        market_id: U256,
        retry_after: Option<Duration>,
    ) -> Result<(), StoreError> {
        let Some(term) = self.term_of(market, market_id) else {
            return Ok(());
        };
        self.forget(market, market_id);
        let client = self.client().await?;
        let after = retry_after.map(|d| d.as_millis() as i64);
        client
            .execute(
                &format!(
                    "UPDATE rounds SET holder = NULL,
                       lease_until = CASE WHEN $5::BIGINT IS NULL THEN NULL ELSE {NOW_MS} + $5::BIGINT END
                     WHERE market = $1 AND market_id = $2 AND holder = $3 AND term = $4"
                ),
                &[
                    &market.to_string(),
                    &market_id.to_string(),
                    &self.node,
                    &term,
                    &after,
                ],
            )
            .await
            .map_err(pg_err)?;
        Ok(())
    }

    async fn claimable(
        &self,
        markets: &[Address],
        limit: usize,
    ) -> Result<Vec<(Address, U256)>, StoreError> {
        let client = self.client().await?;
        let markets: Vec<String> = markets.iter().map(|m| m.to_string()).collect();
        let rows = client
            .query(
                &format!(
                    "SELECT market, market_id FROM rounds
                     WHERE state NOT IN {FINAL} AND market = ANY($3)
                       AND (lease_until IS NULL OR lease_until < {NOW_MS} OR holder = $2)
                     ORDER BY id LIMIT $1"
                ),
                &[&(limit as i64), &self.node, &markets],
            )
            .await
            .map_err(pg_err)?;
        rows.iter()
            .map(|r| parse_market(&col::<String>(r, 0)?, &col::<String>(r, 1)?))
            .collect()
    }

    async fn fence_ok(&self, market: Address, market_id: U256) -> Result<bool, StoreError> {
        let Some(term) = self.term_of(market, market_id) else {
            return Ok(false);
        };
        let client = self.client().await?;
        let row = client
            .query_opt(
                "SELECT 1 FROM rounds WHERE market = $1 AND market_id = $2 AND holder = $3 AND term = $4",
                &[&market.to_string(), &market_id.to_string(), &self.node, &term],
            )
            .await
            .map_err(pg_err)?;
        if row.is_none() {
            self.forget(market, market_id);
        }
        Ok(row.is_some())
    }

    fn held(&self) -> usize {
        self.held.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}
