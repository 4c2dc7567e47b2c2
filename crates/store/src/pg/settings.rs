//! The node's settings on PostgreSQL (`node_settings`, shared by a cluster): the first
//! writer of a key wins. [`PgStore`]'s [`Settings`].

use super::{PgStore, col, pg_err};
use crate::{Settings, StoreError};

#[async_trait::async_trait]
impl Settings for PgStore {
    async fn setting_or_init(&self, key: &str, candidate: &str) -> Result<String, StoreError> {
        let client = self.client().await?;
        client
            .execute(
                &client
                    .prepare_cached(
                        "INSERT INTO node_settings (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING",
                    )
                    .await
                    .map_err(pg_err)?,
                &[&key, &candidate],
            )
            .await
            .map_err(pg_err)?;
        let row = client
            .query_one(
                &client
                    .prepare_cached("SELECT value FROM node_settings WHERE key = $1")
                    .await
                    .map_err(pg_err)?,
                &[&key],
            )
            .await
            .map_err(pg_err)?;
        col(&row, 0)
    }
}
