//! What the node is built from besides the stages' settings (`cresolver_pipeline::stages`):
//! its store and its transaction manager, each from the node configuration.

use crate::NodeError;
use cresolver_pipeline::config::{NodeConfig, default_confirmations};
use cresolver_store::{RoundStore, SqliteStore, Store};
use cresolver_submit::txm::TxmConfig;
use cresolver_submit::txm::fees::FeePolicy;
use std::sync::Arc;
use std::time::Duration;

/// The node's store: the shared PostgreSQL database of `[store] url`, or the embedded
/// SQLite file in the data dir.
pub async fn open_store(cfg: &NodeConfig) -> Result<Arc<dyn RoundStore>, NodeError> {
    if cfg.store.is_postgres() {
        let settings = crate::preflight::pg_config(cfg);
        let node_id = settings.node_id.clone();
        let store = cresolver_store::PgStore::connect(cfg.store.url.trim(), settings).await?;
        tracing::info!(
            database = %cresolver_store::pg::redact_url(&cfg.store.url),
            node_id,
            lease = ?cfg.store.lease,
            "shared PostgreSQL store: rounds are split between the nodes by leases"
        );
        Ok(Arc::new(store))
    } else {
        Ok(Arc::new(SqliteStore::new(Store::open(&cfg.node.data_dir)?)))
    }
}

/// The transaction manager settings of a node config: confirmations as the watcher's
/// (per-chain default), fees from `[submit]`.
pub fn txm_config(cfg: &NodeConfig, chain_id: u64) -> TxmConfig {
    TxmConfig {
        confirmations: cfg
            .chain
            .confirmations
            .unwrap_or(default_confirmations(chain_id)),
        fees: FeePolicy {
            bump_percent: cfg.submit.fee_bump_percent,
            max_fee_cap: (cfg.submit.max_fee_per_gas_gwei * 1e9) as u128,
            bump_after_blocks: cfg.submit.bump_after_blocks,
        },
        poll_interval: cfg
            .chain
            .poll_interval
            .clamp(Duration::from_millis(10), Duration::from_secs(2)),
        wait_bound: cfg.submit.receipt_timeout.max(Duration::from_secs(1)),
    }
}

/// An exclusive lock on a SQLite data dir (`cresolver.lock` in it), held while this
/// value lives: a second `cresolver node` or `resolve` on the same dir is refused.
#[derive(Debug)]
pub struct DataDirLock {
    _file: std::fs::File,
}

/// Takes the data dir's lock for a process that writes its SQLite store (`what`: the
/// command, shown to a second one); `None` for a PostgreSQL store, which nodes share. The
/// data dir is checked as the start-up check does, then created if missing.
pub fn lock_data_dir(cfg: &NodeConfig, what: &str) -> Result<Option<DataDirLock>, NodeError> {
    use std::io::{Read as _, Seek as _, Write as _};
    if cfg.store.is_postgres() {
        return Ok(None);
    }
    crate::preflight::check_data_dir(cfg)?;
    let dir = &cfg.node.data_dir;
    let path = dir.join("cresolver.lock");
    let lock_err = |error: std::io::Error| NodeError::DataDirLock {
        path: path.clone(),
        error,
    };
    std::fs::create_dir_all(dir).map_err(lock_err)?;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(lock_err)?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = holder.trim();
            return Err(NodeError::DataDirBusy {
                path: dir.clone(),
                holder: if holder.is_empty() {
                    "it says nothing of itself".into()
                } else {
                    holder.to_string()
                },
            });
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(lock_err(e)),
    }
    let since = time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default();
    let note = format!(
        "pid {}, `cresolver {what}`, since {since}\n",
        std::process::id()
    );
    file.set_len(0)
        .and_then(|()| file.rewind())
        .and_then(|()| file.write_all(note.as_bytes()))
        .map_err(lock_err)?;
    Ok(Some(DataDirLock { _file: file }))
}
