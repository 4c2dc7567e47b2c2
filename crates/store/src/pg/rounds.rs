//! Rounds on PostgreSQL: requests (de-duplicated by their log, decided by
//! [`crate::decide`]), states, progress, outcomes, listings and the watcher's
//! checkpoints; every write for a round is fenced by its lease. [`PgStore`]'s
//! [`Requests`], [`Checkpoints`], [`Rounds`] and [`Overview`].

use super::finality::{archive_in, renew_in, reopen_submission_in};
use super::{NOW_MS, PgStore, col, pg_err};
use crate::RoundKey;
use crate::column::{Addr, Hash, Json, Num};
use crate::stage::DONE_SQL;
use crate::{
    Checkpoints, LogRef, Overview, RESUBMIT_REASON, RequestDecision, Requests, RoundRecord,
    RoundSummary, Rounds, SUMMARY_REASON_BYTES, Stage, StoreError, UpdatedBetween, decide, now,
    truncate,
};
use alloy_primitives::{B256, Bytes};
use deadpool_postgres::Transaction;
use tokio_postgres::Row;

/// Records a request for a market's round in `tx`: the round's stage (if any, its row
/// locked) and the chain's word decide ([`decide`]), then the decision's writes are
/// made. Two nodes may insert the same market at once: the loser sees it handled.
async fn upsert_round(
    tx: &Transaction<'_>,
    round: RoundKey,
    workflow: &str,
    request: Option<(B256, u64)>,
    unresolved_on_chain: bool,
) -> Result<RequestDecision, StoreError> {
    let (market, market_id) = (round.market, round.id.get());
    let (m, id) = (Addr(market), Num(market_id));
    let existing: Option<Stage> = tx
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
    let req_tx = request.map(|(h, _)| Hash(h));
    let req_block = request.map(|(_, b)| b as i64);
    let t = now() as i64;
    let decision = decide(existing, unresolved_on_chain);
    match decision {
        RequestDecision::New => {
            let n = tx
                .execute(
                    &tx.prepare_cached("INSERT INTO rounds (market, market_id, state, attempt, workflow, request_tx, request_block, created_at, updated_at)
                     VALUES ($1, $2, 'requested', 1, $3, $4, $5, $6, $6) ON CONFLICT DO NOTHING").await.map_err(pg_err)?,
                    &[&m, &id, &workflow, &req_tx, &req_block, &t],
                )
                .await
                .map_err(pg_err)?;
            if n == 0 {
                return Ok(RequestDecision::AlreadyHandled(Stage::Requested));
            }
        }
        RequestDecision::Reopened => {
            archive_in(tx, round, t).await?;
            tx.execute(
                &tx.prepare_cached(
                    "UPDATE rounds SET state = 'requested', attempt = attempt + 1, workflow = $3,
                 request_tx = COALESCE($4, request_tx), request_block = COALESCE($5, request_block),
                 reason = NULL, updated_at = $6, holder = NULL, lease_until = NULL
                 WHERE market = $1 AND market_id = $2",
                )
                .await
                .map_err(pg_err)?,
                &[&m, &id, &workflow, &req_tx, &req_block, &t],
            )
            .await
            .map_err(pg_err)?;
        }
        RequestDecision::Resubmit => {
            reopen_submission_in(tx, round, RESUBMIT_REASON, None).await?;
        }
        RequestDecision::Renewed => {
            if let Some(from) = existing {
                renew_in(tx, round, workflow, request, from).await?;
            }
        }
        RequestDecision::AlreadyHandled(_) | RequestDecision::DuplicateLog => {}
    }
    Ok(decision)
}

/// The `rounds` columns [`read_round`] reads.
const SELECT: &str = "SELECT market, market_id, state, attempt, workflow, request_tx, request_block, reason, submit_tx, raw_tx, outcome, created_at, updated_at, holder FROM rounds";

/// A [`SELECT`] row.
fn read_round(r: &Row) -> Result<RoundRecord, StoreError> {
    Ok(RoundRecord {
        market: col::<Addr>(r, 0)?.0,
        market_id: col::<Num>(r, 1)?.into(),
        state: col(r, 2)?,
        attempt: col::<i32>(r, 3)? as u32,
        workflow: col(r, 4)?,
        request_tx: col::<Option<Hash>>(r, 5)?.map(|h| h.0),
        request_block: col::<Option<i64>>(r, 6)?.map(|b| b as u64),
        reason: col(r, 7)?,
        submit_tx: col::<Option<Hash>>(r, 8)?.map(|h| h.0),
        raw_tx: col::<Option<Vec<u8>>>(r, 9)?.map(Bytes::from),
        outcome: col::<Option<Json>>(r, 10)?.map(|o| o.0),
        created_at: col::<i64>(r, 11)? as u64,
        updated_at: col::<i64>(r, 12)? as u64,
        holder: col(r, 13)?,
    })
}

/// A summary row: the page cursor (the id) and the summary; holder and lease only while
/// the round is unfinished.
fn read_summary(r: &Row) -> Result<(i64, RoundSummary), StoreError> {
    let state: Stage = col(r, 3)?;
    let open = !state.is_final();
    let summary = RoundSummary {
        market: col::<Addr>(r, 1)?.0,
        market_id: col::<Num>(r, 2)?.into(),
        state,
        attempt: col::<i32>(r, 4)? as u32,
        workflow: col(r, 5)?,
        request_tx: col::<Option<Hash>>(r, 6)?.map(|h| h.0),
        request_block: col::<Option<i64>>(r, 7)?.map(|b| b as u64),
        reason: col::<Option<String>>(r, 8)?.map(|r| truncate(r, SUMMARY_REASON_BYTES)),
        submit_tx: col::<Option<Hash>>(r, 9)?.map(|h| h.0),
        created_at: col::<i64>(r, 10)? as u64,
        updated_at: col::<i64>(r, 11)? as u64,
        holder: col::<Option<String>>(r, 12)?.filter(|_| open),
        driven_by: col(r, 13)?,
        lease_ms: col::<Option<i64>>(r, 14)?
            .filter(|_| open)
            .map(|m| m as u64),
    };
    Ok((col(r, 0)?, summary))
}

#[async_trait::async_trait]
impl Requests for PgStore {
    async fn record_request_judged(
        &self,
        round: RoundKey,
        workflow: &str,
        log: &LogRef,
        unresolved_on_chain: bool,
    ) -> Result<RequestDecision, StoreError> {
        let (market, market_id) = (round.market, round.id.get());
        let mut client = self.client().await?;
        let (tx_hash, m, id) = (Hash(log.tx_hash), Addr(market), Num(market_id));
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
                &[&tx_hash, &index, &m, &id, &block, &Hash(log.block_hash), &workflow, &(now() as i64)],
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
                &[&tx_hash, &index, &m, &id, &block, &Hash(log.block_hash)],
            )
            .await
            .map_err(pg_err)?;
        if inserted == 0 {
            return Ok(RequestDecision::DuplicateLog);
        }
        let request = Some((log.tx_hash, log.block_number));
        let d = upsert_round(&tx, round, workflow, request, unresolved_on_chain).await?;
        tx.commit().await.map_err(pg_err)?;
        Ok(d)
    }

    async fn log_seen(&self, log: &LogRef) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                &client
                    .prepare_cached("SELECT 1 FROM seen_logs WHERE tx_hash = $1 AND log_index = $2")
                    .await
                    .map_err(pg_err)?,
                &[&Hash(log.tx_hash), &(log.log_index as i64)],
            )
            .await
            .map_err(pg_err)?;
        Ok(row.is_some())
    }

    async fn manual_request_judged(
        &self,
        round: RoundKey,
        workflow: &str,
        unresolved_on_chain: bool,
    ) -> Result<RequestDecision, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_err)?;
        let d = upsert_round(&tx, round, workflow, None, unresolved_on_chain).await?;
        tx.commit().await.map_err(pg_err)?;
        Ok(d)
    }
}

#[async_trait::async_trait]
impl Checkpoints for PgStore {
    async fn checkpoint(&self, key: &str) -> Result<Option<(u64, B256)>, StoreError> {
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
        row.map(|r| Ok((col::<i64>(&r, 0)? as u64, col::<Hash>(&r, 1)?.0)))
            .transpose()
    }

    async fn set_checkpoint(&self, key: &str, block: u64, hash: B256) -> Result<(), StoreError> {
        let client = self.client().await?;
        client
            .execute(
                &client.prepare_cached("INSERT INTO checkpoints (key, block_number, block_hash) VALUES ($1, $2, $3)
                 ON CONFLICT (key) DO UPDATE SET block_number = excluded.block_number, block_hash = excluded.block_hash").await.map_err(pg_err)?,
                &[&key, &(block as i64), &Hash(hash)],
            )
            .await
            .map_err(pg_err)?;
        Ok(())
    }
}

#[async_trait::async_trait]
impl Rounds for PgStore {
    async fn set_state(
        &self,
        round: RoundKey,
        state: Stage,
        reason: Option<&str>,
    ) -> Result<(), StoreError> {
        let (market, market_id) = (round.market, round.id.get());
        self.fenced_execute(
            round,
            "UPDATE rounds SET state = $3, reason = $4, updated_at = $5 WHERE market = $1 AND market_id = $2",
            &[
                &Addr(market),
                &Num(market_id),
                &state,
                &reason,
                &(now() as i64),
            ],
        )
        .await
    }

    async fn save_progress(
        &self,
        round: RoundKey,
        attempt: u32,
        state: Stage,
        progress: &serde_json::Value,
    ) -> Result<(), StoreError> {
        let (market, market_id) = (round.market, round.id.get());
        let (m, id, t) = (Addr(market), Num(market_id), now() as i64);
        // the state and the progress in one fenced statement (one round trip): the
        // progress is written only if the fenced update of the round touched it
        self.fenced_statement(
            round,
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
                &state,
                &t,
                &(attempt as i32),
                &Json(progress.clone()),
            ],
        )
        .await
    }

    async fn progress(
        &self,
        round: RoundKey,
        attempt: u32,
    ) -> Result<Option<serde_json::Value>, StoreError> {
        let (market, market_id) = (round.market, round.id.get());
        let client = self.client().await?;
        let row = client
            .query_opt(
                &client.prepare_cached("SELECT progress FROM round_progress WHERE market = $1 AND market_id = $2 AND attempt = $3").await.map_err(pg_err)?,
                &[&Addr(market), &Num(market_id), &(attempt as i32)],
            )
            .await
            .map_err(pg_err)?;
        row.map(|r| Ok(col::<Json>(&r, 0)?.0)).transpose()
    }

    async fn set_request_block(&self, round: RoundKey, block: u64) -> Result<(), StoreError> {
        let (market, market_id) = (round.market, round.id.get());
        self.fenced_execute(
            round,
            "UPDATE rounds SET request_block = $3, updated_at = $4 WHERE market = $1 AND market_id = $2",
            &[
                &Addr(market),
                &Num(market_id),
                &(block as i64),
                &(now() as i64),
            ],
        )
        .await
    }

    async fn set_outcome(
        &self,
        round: RoundKey,
        outcome: &serde_json::Value,
    ) -> Result<(), StoreError> {
        let (market, market_id) = (round.market, round.id.get());
        self.fenced_execute(
            round,
            "UPDATE rounds SET outcome = $3, updated_at = $4 WHERE market = $1 AND market_id = $2",
            &[
                &Addr(market),
                &Num(market_id),
                &Json(outcome.clone()),
                &(now() as i64),
            ],
        )
        .await
    }

    async fn set_outcome_and_state(
        &self,
        round: RoundKey,
        outcome: &serde_json::Value,
        state: Stage,
        reason: Option<&str>,
    ) -> Result<(), StoreError> {
        let (market, market_id) = (round.market, round.id.get());
        self.fenced_execute(
            round,
            "UPDATE rounds SET outcome = $3, state = $4, reason = $5, updated_at = $6 WHERE market = $1 AND market_id = $2",
            &[
                &Addr(market),
                &Num(market_id),
                &Json(outcome.clone()),
                &state,
                &reason,
                &(now() as i64),
            ],
        )
        .await
    }

    async fn get(&self, round: RoundKey) -> Result<Option<RoundRecord>, StoreError> {
        let (market, market_id) = (round.market, round.id.get());
        let client = self.client().await?;
        client
            .query_opt(
                &client
                    .prepare_cached(&format!("{SELECT} WHERE market = $1 AND market_id = $2"))
                    .await
                    .map_err(pg_err)?,
                &[&Addr(market), &Num(market_id)],
            )
            .await
            .map_err(pg_err)?
            .map(|r| read_round(&r))
            .transpose()
    }

    async fn unfinished(&self) -> Result<Vec<RoundRecord>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                &client
                    .prepare_cached(&format!(
                        "{SELECT} WHERE state NOT IN {DONE_SQL} ORDER BY created_at, id"
                    ))
                    .await
                    .map_err(pg_err)?,
                &[],
            )
            .await
            .map_err(pg_err)?;
        rows.iter().map(read_round).collect()
    }
}

#[async_trait::async_trait]
impl Overview for PgStore {
    async fn list_summaries_updated(
        &self,
        limit: usize,
        before: Option<i64>,
        between: UpdatedBetween,
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
        let rows = rows
            .iter()
            .map(read_summary)
            .collect::<Result<Vec<_>, _>>()?;
        let next = (rows.len() == limit)
            .then(|| rows.last().map(|r| r.0))
            .flatten();
        Ok((rows.into_iter().map(|r| r.1).collect(), next))
    }

    async fn count_by_state(&self) -> Result<Vec<(Stage, u64)>, StoreError> {
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
            .map(|r| Ok((col(r, 0)?, col::<i64>(r, 1)? as u64)))
            .collect()
    }

    async fn probe_write(&self) -> Result<(), StoreError> {
        self.set_checkpoint(&format!("health:probe:{}", self.node), now(), B256::ZERO)
            .await
    }
}
