//! The node's settings on SQLite (`node_settings`): the first writer of a key wins.
//! [`SqliteStore`]'s [`Settings`].

use super::SqliteStore;
use crate::{Settings, StoreError};
use rusqlite::params;

#[async_trait::async_trait]
impl Settings for SqliteStore {
    async fn setting_or_init(&self, key: &str, candidate: &str) -> Result<String, StoreError> {
        let (key, candidate) = (key.to_string(), candidate.to_string());
        // on disk before anyone acts on the value
        self.run(move |db| {
            db.in_durable_tx(|tx| {
                tx.prepare_cached(
                    "INSERT INTO node_settings (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO NOTHING",
                )?
                .execute(params![key, candidate])?;
                Ok(tx
                    .prepare_cached("SELECT value FROM node_settings WHERE key = ?1")?
                    .query_row(params![key], |r| r.get(0))?)
            })
        })
        .await
    }
}
