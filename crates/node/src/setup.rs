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
        let node_id = cfg.node_id();
        let store = cresolver_store::PgStore::connect(
            cfg.store.url.trim(),
            cresolver_store::PgConfig {
                node_id: node_id.clone(),
                lease: Duration::from_secs(cfg.store.lease_secs),
                max_connections: cfg.store.max_connections,
                ca_file: cfg.store.ca_file.clone(),
            },
        )
        .await?;
        tracing::info!(
            database = %cresolver_store::pg::redact_url(&cfg.store.url),
            node_id,
            lease_secs = cfg.store.lease_secs,
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
        poll_interval: Duration::from_millis(cfg.chain.poll_interval_ms.clamp(10, 2_000)),
        wait_bound: Duration::from_millis(cfg.submit.receipt_timeout_ms.max(1_000)),
    }
}
