//! The shared store of a cluster: the same [`crate::RoundStore`] on PostgreSQL, so that any
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
//!
//! Each capability trait is implemented here once, with PostgreSQL's own SQL: `rounds`
//! ([`crate::Requests`], [`crate::Checkpoints`], [`crate::Rounds`],
//! [`crate::Overview`]), `txs` ([`crate::Nonces`], [`crate::RoundTxs`]), `leases`
//! ([`crate::Leases`], [`crate::Fence`], with the write fence in `fence`), `finality`
//! and `settings`.

use crate::RoundKey;
use crate::column::{Addr, Num};
use crate::{KeyRef, StoreError};
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::str::FromStr;
use std::time::Duration;
use tokio_postgres::{NoTls, Row};

mod fence;
mod finality;
mod leases;
mod rounds;
mod schema;
mod settings;
mod tls;
mod txs;
pub use schema::MIGRATIONS;
use tls::{Tls, split_sslmode, tls_connector};

/// The oldest PostgreSQL the store is tested against (`server_version_num`).
pub const MIN_SERVER_VERSION: i32 = 120_000;

/// The database clock in milliseconds.
const NOW_MS: &str = "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT";

/// Settings of the PostgreSQL store.
#[derive(Debug, Clone)]
pub struct PgConfig {
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

/// The PostgreSQL store.
pub struct PgStore {
    pool: Pool,
    node: String,
    lease: Duration,
    /// The rounds this node holds, with the term it claimed them at (the fencing token).
    held: Mutex<HashMap<RoundKey, i64>>,
    /// The round of each nonce this node reserved and has not ended (a reservation's
    /// round never changes), so ending one needs no lookup first; a nonce not in it (a
    /// restart, a takeover) is looked up. Emptied should it pass [`NONCE_ROUNDS_CAP`].
    nonce_rounds: Mutex<HashMap<(KeyRef, u64), RoundKey>>,
}

/// More reservations than a node has open at once.
const NONCE_ROUNDS_CAP: usize = 4_096;

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

/// What PostgreSQL or its connection pool refused, kept typed.
#[derive(Debug)]
pub enum PgFailure {
    /// The database refused a statement, or the connection failed.
    Db(tokio_postgres::Error),
    /// The connection pool could not hand out a connection.
    Pool(deadpool_postgres::PoolError),
}

impl std::fmt::Display for PgFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            // tokio-postgres' messages carry no connection parameters; the database's
            // own message (code, detail) is what an operator needs
            PgFailure::Db(e) => match e.as_db_error() {
                Some(d) => write!(f, "{} ({})", d.message(), d.code().code()),
                None => {
                    write!(f, "{e}")?;
                    let mut src = std::error::Error::source(e);
                    while let Some(c) = src {
                        write!(f, ": {c}")?;
                        src = c.source();
                    }
                    Ok(())
                }
            },
            PgFailure::Pool(e) => write!(f, "connection pool: {e}"),
        }
    }
}

// (the display shows the whole chain: no further source)
impl std::error::Error for PgFailure {}

fn pg_err(e: tokio_postgres::Error) -> StoreError {
    StoreError::Postgres(PgFailure::Db(e))
}

fn pool_err(e: deadpool_postgres::PoolError) -> StoreError {
    match e {
        deadpool_postgres::PoolError::Backend(e) => pg_err(e),
        e => StoreError::Postgres(PgFailure::Pool(e)),
    }
}

impl PgStore {
    /// Connects, checks the server's version and applies the migrations. Errors name the
    /// URL without its password.
    pub async fn connect(url: &str, settings: PgConfig) -> Result<Self, StoreError> {
        let (store, _) = Self::connect_unmigrated(url, settings).await?;
        let connect_err = |e: StoreError| StoreError::Connect {
            url: redact_url(url),
            error: Box::new(e),
        };
        store.migrate().await.map_err(connect_err)?;
        Ok(store)
    }

    /// What `connect` checks, without applying a migration or writing anything: the URL,
    /// the TLS settings, the connection (user and password) and the server's version.
    /// Returns the server's version and whether the database holds the node's tables
    /// already (`false`: the node creates them at its first start).
    pub async fn probe(url: &str, settings: PgConfig) -> Result<(String, bool), StoreError> {
        let (store, version) = Self::connect_unmigrated(url, settings).await?;
        let client = store.pool.get().await.map_err(pool_err)?;
        let exists: bool = client
            .query_one("SELECT to_regclass('schema_migrations') IS NOT NULL", &[])
            .await
            .map_err(pg_err)?
            .try_get(0)
            .map_err(|e| StoreError::Corrupt(format!("column: {e}")))?;
        Ok((version, exists))
    }

    /// Connects and checks the server's version (no migration); returns the store and
    /// the server's version.
    async fn connect_unmigrated(
        url: &str,
        settings: PgConfig,
    ) -> Result<(Self, String), StoreError> {
        let shown = redact_url(url);
        let invalid = |error: Box<dyn std::error::Error + Send + Sync>| StoreError::Connect {
            url: shown.clone(),
            error,
        };
        let (url, tls) = split_sslmode(url).map_err(|e| invalid(Box::new(e)))?;
        let mut cfg = tokio_postgres::Config::from_str(&url)
            .map_err(|e| invalid(format!("not a PostgreSQL connection URL: {e}").into()))?;
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
                tls_connector(settings.ca_file.as_deref()).map_err(|e| invalid(Box::new(e)))?,
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
            .map_err(|e| invalid(Box::new(e)))?;
        let store = Self {
            pool,
            node: settings.node_id,
            lease: settings.lease,
            held: Mutex::new(HashMap::new()),
            nonce_rounds: Mutex::new(HashMap::new()),
        };
        let connect_err = |e: StoreError| StoreError::Connect {
            url: shown.clone(),
            error: Box::new(e),
        };
        let client = store
            .pool
            .get()
            .await
            .map_err(pool_err)
            .map_err(connect_err)?;
        let version: String = client
            .query_one(
                &client
                    .prepare_cached("SHOW server_version_num")
                    .await
                    .map_err(pg_err)?,
                &[],
            )
            .await
            .map_err(pg_err)
            .map_err(connect_err)?
            .try_get(0)
            .map_err(|e| StoreError::Corrupt(format!("column: {e}")))?;
        let num: i32 = version.trim().parse().unwrap_or(0);
        if num < MIN_SERVER_VERSION {
            return Err(StoreError::Connect {
                url: shown,
                error: format!(
                    "PostgreSQL server version {version} is not supported: use PostgreSQL 12 or newer"
                )
                .into(),
            });
        }
        drop(client);
        Ok((store, version))
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
        tx.execute(
            &tx.prepare_cached("SELECT pg_advisory_xact_lock(7370657263)")
                .await
                .map_err(pg_err)?,
            &[],
        )
        .await
        .map_err(pg_err)?;
        let exists: bool = tx
            .query_one(
                &tx.prepare_cached("SELECT to_regclass('schema_migrations') IS NOT NULL")
                    .await
                    .map_err(pg_err)?,
                &[],
            )
            .await
            .map_err(pg_err)?
            .try_get(0)
            .map_err(|e| StoreError::Corrupt(format!("column: {e}")))?;
        if !exists {
            tx.batch_execute(
                "CREATE TABLE schema_migrations (
                    version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
            )
            .await
            .map_err(pg_err)?;
        }
        let have: Option<i32> = tx
            .query_one(
                &tx.prepare_cached("SELECT MAX(version) FROM schema_migrations")
                    .await
                    .map_err(pg_err)?,
                &[],
            )
            .await
            .map_err(pg_err)?
            .try_get(0)
            .map_err(|e| StoreError::Corrupt(format!("column: {e}")))?;
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
                &tx.prepare_cached(
                    "INSERT INTO schema_migrations (version, description) VALUES ($1, $2)",
                )
                .await
                .map_err(pg_err)?,
                &[version, description],
            )
            .await
            .map_err(pg_err)?;
            tracing::info!(version, description, "database migration applied");
        }
        tx.commit().await.map_err(pg_err)?;
        // a storage setting, not the schema: its failure is only a warning
        if let Err(e) = client.batch_execute(schema::LZ4_JSON).await {
            tracing::warn!(error = %pg_err(e), "cannot switch the rounds' JSON to lz4 compression; pglz is kept");
        }
        Ok(())
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.pool.get().await.map_err(pool_err)
    }

    fn term_of(&self, round: RoundKey) -> Option<i64> {
        self.held.lock().get(&round).copied()
    }

    fn forget(&self, round: RoundKey) {
        self.held.lock().remove(&round);
    }
}

/// A column of a row, typed; a column of another type is a corrupt-data error, not a
/// panic (`Row::get` panics).
fn col<'a, T: tokio_postgres::types::FromSql<'a>>(r: &'a Row, i: usize) -> Result<T, StoreError> {
    r.try_get(i).map_err(|e| {
        let name = r.columns().get(i).map_or("column", |c| c.name());
        StoreError::Corrupt(format!("{name}: {e}"))
    })
}

/// The key (signer, chain id) in columns `at` and `at + 1` of a keyed row.
fn read_key(r: &Row, at: usize) -> Result<KeyRef, StoreError> {
    Ok(KeyRef {
        signer: col::<Addr>(r, at)?.0,
        chain_id: col::<i64>(r, at + 1)? as u64,
    })
}

/// A market and a market id in columns `at` and `at + 1` of a row.
fn read_market(r: &Row, at: usize) -> Result<RoundKey, StoreError> {
    Ok(RoundKey::new(
        col::<Addr>(r, at)?.0,
        col::<Num>(r, at + 1)?.0,
    ))
}
