//! Rounds on PostgreSQL: requests (de-duplicated by their log), states, progress,
//! outcomes, listings and the watcher's checkpoints; every write for a round is fenced by
//! its lease. [`PgStore`]'s [`Requests`], [`Checkpoints`], [`Rounds`] and [`Overview`].

use super::*;

impl PgStore {
    pub(super) async fn rounds_record_request_judged(
        &self,
        market: Address,
        market_id: U256,
        workflow: &str,
        log: &LogRef,
        unresolved_on_chain: bool,
    ) -> Result<RequestDecision, StoreError> {
        let mut client = self.client().await?;
        let (tx_hash, m, id) = (
            log.tx_hash.to_string(),
            market.to_string(),
            market_id.to_string(),
        );
        let (index, block) = (log.log_index as i64, log.block_number as i64);
        // The common case, a new log for a market without a round, is one statement
        // (one round trip, its own transaction): the log is taken only when the market
        // has no round in the statement's snapshot, and the round is inserted only when
        // the log was. Both or neither are committed, as in the transaction below; a
        // round inserted meanwhile by another node makes the insert do nothing, which is
        // the answer the transaction below gives in that race ("already handled"). Any
        // other case (a seen log, a market with a round) takes nothing here and goes
        // the long way.
        let fast = client
            .query_one(
                &client.prepare_cached(
                    "WITH s AS (
                       INSERT INTO seen_logs (tx_hash, log_index, market, market_id, block_number, block_hash)
                       SELECT $1::text, $2::bigint, $3::text, $4::text, $5::bigint, $6::text
                       WHERE NOT EXISTS (SELECT 1 FROM rounds WHERE market = $3::text AND market_id = $4::text)
                       ON CONFLICT DO NOTHING RETURNING 1),
                     i AS (
                       INSERT INTO rounds (market, market_id, state, attempt, workflow, request_tx, request_block, created_at, updated_at)
                       SELECT $3::text, $4::text, 'requested', 1, $7::text, $1::text, $5::bigint, $8::bigint, $8::bigint
                       WHERE EXISTS (SELECT 1 FROM s)
                       ON CONFLICT DO NOTHING RETURNING 1)
                     SELECT (SELECT count(*) FROM s), (SELECT count(*) FROM i)",
                )
                .await
                .map_err(pg_err)?,
                &[&tx_hash, &index, &m, &id, &block, &log.block_hash.to_string(), &workflow, &(now() as i64)],
            )
            .await
            .map_err(pg_err)?;
        match (col::<i64>(&fast, 0)?, col::<i64>(&fast, 1)?) {
            (1, 1) => return Ok(RequestDecision::New),
            (1, _) => return Ok(RequestDecision::AlreadyHandled(Stage::Requested)),
            _ => {}
        }
        let tx = client.transaction().await.map_err(pg_err)?;
        let inserted = tx
            .execute(
                &tx.prepare_cached("INSERT INTO seen_logs (tx_hash, log_index, market, market_id, block_number, block_hash)
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING").await.map_err(pg_err)?,
                &[&tx_hash, &index, &m, &id, &block, &log.block_hash.to_string()],
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

    pub(super) async fn rounds_manual_request_judged(
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

    pub(super) async fn rounds_set_state(
        &self,
        market: Address,
        market_id: U256,
        state: Stage,
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

    pub(super) async fn rounds_save_progress(
        &self,
        market: Address,
        market_id: U256,
        attempt: u32,
        state: Stage,
        progress: &serde_json::Value,
    ) -> Result<(), StoreError> {
        let (m, id, t) = (market.to_string(), market_id.to_string(), now() as i64);
        // the state and the progress in one fenced statement (one round trip): the
        // progress is written only if the fenced update of the round touched it
        self.fenced_statement(
            market,
            market_id,
            "WITH r AS (UPDATE rounds SET state = $3::text, updated_at = $4::bigint
                        WHERE market = $1::text AND market_id = $2::text
                          AND holder = $7::text AND term = $8::bigint
                        RETURNING market)
             INSERT INTO round_progress (market, market_id, attempt, progress, updated_at)
             SELECT $1::text, $2::text, $5::integer, $6::text, $4::bigint FROM r
             ON CONFLICT (market, market_id) DO UPDATE
               SET attempt = EXCLUDED.attempt, progress = EXCLUDED.progress, updated_at = EXCLUDED.updated_at",
            &[
                &m,
                &id,
                &state.as_str(),
                &t,
                &(attempt as i32),
                &progress.to_string(),
            ],
        )
        .await
    }

    pub(super) async fn rounds_progress(
        &self,
        market: Address,
        market_id: U256,
        attempt: u32,
    ) -> Result<Option<serde_json::Value>, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                &client.prepare_cached("SELECT progress FROM round_progress WHERE market = $1 AND market_id = $2 AND attempt = $3").await.map_err(pg_err)?,
                &[&market.to_string(), &market_id.to_string(), &(attempt as i32)],
            )
            .await
            .map_err(pg_err)?;
        row.map(|r| {
            serde_json::from_str(col::<&str>(&r, 0)?).map_err(|e| corrupt("round progress", e))
        })
        .transpose()
    }

    pub(super) async fn rounds_set_request_block(
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

    pub(super) async fn rounds_set_outcome(
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

    pub(super) async fn rounds_set_outcome_and_state(
        &self,
        market: Address,
        market_id: U256,
        outcome: &serde_json::Value,
        state: Stage,
        reason: Option<&str>,
    ) -> Result<(), StoreError> {
        self.fenced_execute(
            market,
            market_id,
            "UPDATE rounds SET outcome = $3, state = $4, reason = $5, updated_at = $6 WHERE market = $1 AND market_id = $2",
            &[
                &market.to_string(),
                &market_id.to_string(),
                &outcome.to_string(),
                &state.as_str(),
                &reason,
                &(now() as i64),
            ],
        )
        .await
    }

    pub(super) async fn rounds_get(
        &self,
        market: Address,
        market_id: U256,
    ) -> Result<Option<RoundRecord>, StoreError> {
        let client = self.client().await?;
        client
            .query_opt(
                &client
                    .prepare_cached(&format!("{SELECT} WHERE market = $1 AND market_id = $2"))
                    .await
                    .map_err(pg_err)?,
                &[&market.to_string(), &market_id.to_string()],
            )
            .await
            .map_err(pg_err)?
            .map(|r| read_round(&r))
            .transpose()
    }

    pub(super) async fn rounds_list_summaries(
        &self,
        limit: usize,
        before: Option<i64>,
        between: crate::UpdatedBetween,
    ) -> Result<(Vec<RoundSummary>, Option<i64>), StoreError> {
        let (since, until) = between.sql_bounds();
        let client = self.client().await?;
        let rows = client
            .query(
                &client.prepare_cached(&format!(
                    "SELECT id, market, market_id, state, attempt, workflow, request_tx, request_block, reason, submit_tx,
                        created_at, updated_at, holder, last_holder,
                        CASE WHEN lease_until > {NOW_MS} THEN lease_until - {NOW_MS} END
                     FROM rounds WHERE id < $1 AND updated_at >= $3 AND updated_at < $4
                     ORDER BY id DESC LIMIT $2"
                )).await.map_err(pg_err)?,
                &[&before.unwrap_or(i64::MAX), &(limit as i64), &since, &until],
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

    pub(super) async fn rounds_unfinished(&self) -> Result<Vec<RoundRecord>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                &client
                    .prepare_cached(&format!(
                        "{SELECT} WHERE state NOT IN {FINAL} ORDER BY created_at, id"
                    ))
                    .await
                    .map_err(pg_err)?,
                &[],
            )
            .await
            .map_err(pg_err)?;
        rows.iter().map(read_round).collect()
    }

    pub(super) async fn rounds_count_by_state(&self) -> Result<Vec<(Stage, u64)>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                &client
                    .prepare_cached("SELECT state, COUNT(*) FROM rounds GROUP BY state")
                    .await
                    .map_err(pg_err)?,
                &[],
            )
            .await
            .map_err(pg_err)?;
        rows.iter()
            .map(|r| {
                let s: String = col(r, 0)?;
                Ok((Stage::from_str(&s)?, col::<i64>(r, 1)? as u64))
            })
            .collect()
    }

    pub(super) async fn rounds_checkpoint(
        &self,
        key: &str,
    ) -> Result<Option<(u64, B256)>, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                &client
                    .prepare_cached(
                        "SELECT block_number, block_hash FROM checkpoints WHERE key = $1",
                    )
                    .await
                    .map_err(pg_err)?,
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

    pub(super) async fn rounds_set_checkpoint(
        &self,
        key: &str,
        block: u64,
        hash: B256,
    ) -> Result<(), StoreError> {
        let client = self.client().await?;
        client
            .execute(
                &client.prepare_cached("INSERT INTO checkpoints (key, block_number, block_hash) VALUES ($1, $2, $3)
                 ON CONFLICT (key) DO UPDATE SET block_number = excluded.block_number, block_hash = excluded.block_hash").await.map_err(pg_err)?,
                &[&key, &(block as i64), &hash.to_string()],
            )
            .await
            .map_err(pg_err)?;
        Ok(())
    }
}

#[async_trait::async_trait]
impl Requests for PgStore {
    async fn record_request_judged(
        &self,
        market: Address,
        market_id: U256,
        workflow: &str,
        log: &LogRef,
        unresolved_on_chain: bool,
    ) -> Result<RequestDecision, StoreError> {
        self.rounds_record_request_judged(market, market_id, workflow, log, unresolved_on_chain)
            .await
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
        self.rounds_manual_request_judged(market, market_id, workflow, unresolved_on_chain)
            .await
    }
}

#[async_trait::async_trait]
impl Checkpoints for PgStore {
    async fn checkpoint(&self, key: &str) -> Result<Option<(u64, B256)>, StoreError> {
        self.rounds_checkpoint(key).await
    }

    async fn set_checkpoint(&self, key: &str, block: u64, hash: B256) -> Result<(), StoreError> {
        self.rounds_set_checkpoint(key, block, hash).await
    }
}

#[async_trait::async_trait]
impl Rounds for PgStore {
    async fn set_state(
        &self,
        market: Address,
        market_id: U256,
        state: Stage,
        reason: Option<&str>,
    ) -> Result<(), StoreError> {
        self.rounds_set_state(market, market_id, state, reason)
            .await
    }

    async fn save_progress(
        &self,
        market: Address,
        market_id: U256,
        attempt: u32,
        state: Stage,
        progress: &serde_json::Value,
    ) -> Result<(), StoreError> {
        self.rounds_save_progress(market, market_id, attempt, state, progress)
            .await
    }

    async fn progress(
        &self,
        market: Address,
        market_id: U256,
        attempt: u32,
    ) -> Result<Option<serde_json::Value>, StoreError> {
        self.rounds_progress(market, market_id, attempt).await
    }

    async fn set_request_block(
        &self,
        market: Address,
        market_id: U256,
        block: u64,
    ) -> Result<(), StoreError> {
        self.rounds_set_request_block(market, market_id, block)
            .await
    }

    async fn set_outcome(
        &self,
        market: Address,
        market_id: U256,
        outcome: &serde_json::Value,
    ) -> Result<(), StoreError> {
        self.rounds_set_outcome(market, market_id, outcome).await
    }

    async fn set_outcome_and_state(
        &self,
        market: Address,
        market_id: U256,
        outcome: &serde_json::Value,
        state: Stage,
        reason: Option<&str>,
    ) -> Result<(), StoreError> {
        self.rounds_set_outcome_and_state(market, market_id, outcome, state, reason)
            .await
    }

    async fn get(
        &self,
        market: Address,
        market_id: U256,
    ) -> Result<Option<RoundRecord>, StoreError> {
        self.rounds_get(market, market_id).await
    }

    async fn unfinished(&self) -> Result<Vec<RoundRecord>, StoreError> {
        self.rounds_unfinished().await
    }
}

#[async_trait::async_trait]
impl Overview for PgStore {
    async fn list_summaries_updated(
        &self,
        limit: usize,
        before: Option<i64>,
        between: crate::UpdatedBetween,
    ) -> Result<(Vec<RoundSummary>, Option<i64>), StoreError> {
        self.rounds_list_summaries(limit, before, between).await
    }

    async fn count_by_state(&self) -> Result<Vec<(Stage, u64)>, StoreError> {
        self.rounds_count_by_state().await
    }

    async fn probe_write(&self) -> Result<(), StoreError> {
        self.set_checkpoint(&format!("health:probe:{}", self.node), now(), B256::ZERO)
            .await
    }
}
