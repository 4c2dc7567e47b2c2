//! The PostgreSQL side of [`crate::done`]: the finality watch's transitions, new
//! attempts of done rounds and node settings, with the SQL the SQLite store runs (its
//! `?n` placeholders as `$n`). Like there, nothing here is fenced by a lease: each
//! change is conditional on the state it leaves (and `renew_in` locks the row first).
//! [`PgStore`]'s [`Finality`] and [`Settings`].

use super::{Finality, PgStore, Settings, col, pg_err, pg_sql};
use crate::done::sql;
use crate::{
    ARCHIVE_SQL, LogRef, PAST_SQL, PastAttempt, PastRow, Stage, StoreError, WATCHED_SQL, Watched,
    WatchedRow, now,
};
use alloy_primitives::{Address, B256, U256};
use deadpool_postgres::Transaction;

/// Keeps the round's current attempt in its history (`ARCHIVE_SQL`) before it is renewed.
pub(super) async fn archive_in(
    tx: &Transaction<'_>,
    market: &str,
    market_id: &str,
    at: i64,
) -> Result<(), StoreError> {
    let stmt = tx
        .prepare_cached(&pg_sql(ARCHIVE_SQL))
        .await
        .map_err(pg_err)?;
    tx.execute(&stmt, &[&market, &market_id, &at])
        .await
        .map_err(pg_err)?;
    Ok(())
}

/// [`Finality::renew_round`] inside a transaction.
pub(super) async fn renew_in(
    tx: &Transaction<'_>,
    market: Address,
    market_id: U256,
    workflow: &str,
    request: Option<(B256, u64)>,
    from: Stage,
) -> Result<bool, StoreError> {
    let (m, id, t) = (market.to_string(), market_id.to_string(), now() as i64);
    let state: Option<String> = tx
        .query_opt(
            &tx.prepare_cached(
                "SELECT state FROM rounds WHERE market = $1 AND market_id = $2 FOR UPDATE",
            )
            .await
            .map_err(pg_err)?,
            &[&m, &id],
        )
        .await
        .map_err(pg_err)?
        .map(|r| col(&r, 0))
        .transpose()?;
    if state.as_deref() != Some(from.as_str()) {
        return Ok(false);
    }
    archive_in(tx, &m, &id, t).await?;
    tx.execute(
        &tx.prepare_cached(&pg_sql(sql::RENEW))
            .await
            .map_err(pg_err)?,
        &[
            &m,
            &id,
            &workflow,
            &request.map(|(h, _)| h.to_string()),
            &request.map(|(_, b)| b as i64),
            &t,
        ],
    )
    .await
    .map_err(pg_err)?;
    Ok(true)
}

/// [`Finality::reopen_submission`] inside a transaction.
pub(super) async fn reopen_submission_in(
    tx: &Transaction<'_>,
    market: Address,
    market_id: U256,
    reason: &str,
    outcome: Option<&serde_json::Value>,
) -> Result<bool, StoreError> {
    let (m, id, t) = (market.to_string(), market_id.to_string(), now() as i64);
    let n = tx
        .execute(
            &tx.prepare_cached(&pg_sql(sql::REOPEN_ROUND))
                .await
                .map_err(pg_err)?,
            &[&m, &id, &reason, &outcome.map(|o| o.to_string()), &t],
        )
        .await
        .map_err(pg_err)?;
    if n == 0 {
        return Ok(false);
    }
    let mined = tx
        .query_opt(
            &tx.prepare_cached(&pg_sql(sql::MINED_NONCE))
                .await
                .map_err(pg_err)?,
            &[&m, &id],
        )
        .await
        .map_err(pg_err)?;
    if let Some(row) = mined {
        let (signer, chain, nonce): (String, i64, i64) =
            (col(&row, 0)?, col(&row, 1)?, col(&row, 2)?);
        tx.execute(
            &tx.prepare_cached(&pg_sql(sql::REOPEN_NONCE))
                .await
                .map_err(pg_err)?,
            &[&signer, &chain, &nonce, &reason, &t],
        )
        .await
        .map_err(pg_err)?;
        tx.execute(
            &tx.prepare_cached(&pg_sql(sql::UNSEND_ATTEMPTS))
                .await
                .map_err(pg_err)?,
            &[&signer, &chain, &nonce],
        )
        .await
        .map_err(pg_err)?;
    }
    Ok(true)
}

/// The bodies of the store interface's done-round calls.
impl PgStore {
    pub(super) async fn done_log_seen(&self, log: &LogRef) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                &client
                    .prepare_cached(&pg_sql(sql::LOG_SEEN))
                    .await
                    .map_err(pg_err)?,
                &[&log.tx_hash.to_string(), &(log.log_index as i64)],
            )
            .await
            .map_err(pg_err)?;
        Ok(row.is_some())
    }

    pub(super) async fn done_renew(
        &self,
        market: Address,
        market_id: U256,
        workflow: &str,
        request: Option<(B256, u64)>,
        from: Stage,
    ) -> Result<bool, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_err)?;
        let done = renew_in(&tx, market, market_id, workflow, request, from).await?;
        tx.commit().await.map_err(pg_err)?;
        Ok(done)
    }

    pub(super) async fn done_reopen(
        &self,
        market: Address,
        market_id: U256,
        reason: &str,
        outcome: Option<&serde_json::Value>,
    ) -> Result<bool, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_err)?;
        let done = reopen_submission_in(&tx, market, market_id, reason, outcome).await?;
        tx.commit().await.map_err(pg_err)?;
        Ok(done)
    }

    pub(super) async fn done_finalize(
        &self,
        market: Address,
        market_id: U256,
        outcome: Option<&serde_json::Value>,
    ) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let n = client
            .execute(
                &client
                    .prepare_cached(&pg_sql(sql::FINALIZE))
                    .await
                    .map_err(pg_err)?,
                &[
                    &market.to_string(),
                    &market_id.to_string(),
                    &outcome.map(|o| o.to_string()),
                    &(now() as i64),
                ],
            )
            .await
            .map_err(pg_err)?;
        Ok(n > 0)
    }

    pub(super) async fn done_watched(&self, limit: usize) -> Result<Vec<Watched>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                &client
                    .prepare_cached(&pg_sql(WATCHED_SQL))
                    .await
                    .map_err(pg_err)?,
                &[&(limit as i64)],
            )
            .await
            .map_err(pg_err)?;
        rows.iter()
            .map(|r| {
                WatchedRow {
                    market: col(r, 0)?,
                    market_id: col(r, 1)?,
                    attempt: col::<i32>(r, 2)? as i64,
                    signer: col(r, 3)?,
                    chain_id: col(r, 4)?,
                    nonce: col(r, 5)?,
                    mined_tx: col(r, 6)?,
                    mined_block: col(r, 7)?,
                    mined_hash: col(r, 8)?,
                }
                .parse()
            })
            .collect()
    }

    pub(super) async fn done_past(
        &self,
        market: Address,
        market_id: U256,
    ) -> Result<Vec<PastAttempt>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                &client
                    .prepare_cached(&pg_sql(PAST_SQL))
                    .await
                    .map_err(pg_err)?,
                &[&market.to_string(), &market_id.to_string()],
            )
            .await
            .map_err(pg_err)?;
        rows.iter()
            .map(|r| {
                PastRow {
                    attempt: col::<i32>(r, 0)? as i64,
                    state: col(r, 1)?,
                    reason: col(r, 2)?,
                    request_tx: col(r, 3)?,
                    request_block: col(r, 4)?,
                    submit_tx: col(r, 5)?,
                    outcome: col(r, 6)?,
                    ended_at: col(r, 7)?,
                }
                .parse()
            })
            .collect()
    }

    pub(super) async fn done_setting(
        &self,
        key: &str,
        candidate: &str,
    ) -> Result<String, StoreError> {
        let client = self.client().await?;
        client
            .execute(
                &client
                    .prepare_cached(&pg_sql(sql::SETTING_INIT))
                    .await
                    .map_err(pg_err)?,
                &[&key, &candidate],
            )
            .await
            .map_err(pg_err)?;
        let row = client
            .query_one(
                &client
                    .prepare_cached(&pg_sql(sql::SETTING))
                    .await
                    .map_err(pg_err)?,
                &[&key],
            )
            .await
            .map_err(pg_err)?;
        col(&row, 0)
    }
}

#[async_trait::async_trait]
impl Finality for PgStore {
    async fn renew_round(
        &self,
        market: Address,
        market_id: U256,
        workflow: &str,
        request: Option<(B256, u64)>,
        from: Stage,
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
}

#[async_trait::async_trait]
impl Settings for PgStore {
    async fn setting_or_init(&self, key: &str, candidate: &str) -> Result<String, StoreError> {
        self.done_setting(key, candidate).await
    }
}
