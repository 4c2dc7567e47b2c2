//! Rounds on SQLite: requests (de-duplicated by their log, decided by
//! [`crate::decide`]), states, progress, outcomes, listings and the watcher's
//! checkpoints. [`SqliteStore`]'s [`Requests`], [`Checkpoints`], [`Rounds`] and
//! [`Overview`].

use super::finality::{archive_in, renew_in, reopen_submission_in};
use super::{SELECT, SqliteStore, collect, opt_uint, read_round, touched, uint};
use crate::RoundKey;
use crate::column::{Addr, Hash, Json, Num};
use crate::stage::DONE_SQL;
use crate::{
    Checkpoints, LogRef, Overview, RESUBMIT_REASON, RequestDecision, Requests, RoundRecord,
    RoundSummary, Rounds, SUMMARY_REASON_BYTES, Stage, StoreError, UpdatedBetween, decide, now,
    truncate,
};
use alloy_primitives::B256;
use rusqlite::{OptionalExtension, params};

const SET_CHECKPOINT: &str = "INSERT INTO checkpoints (key, block_number, block_hash) VALUES (?1, ?2, ?3)
     ON CONFLICT(key) DO UPDATE SET block_number = excluded.block_number, block_hash = excluded.block_hash";

/// Records a request for a market's round in `tx`: the round's stage (if any) and the
/// chain's word decide ([`decide`]), then the decision's writes are made.
pub(crate) fn upsert_round(
    tx: &rusqlite::Transaction<'_>,
    round: RoundKey,
    workflow: &str,
    request: Option<(B256, u64)>,
    unresolved_on_chain: bool,
) -> Result<RequestDecision, StoreError> {
    let (market, market_id) = (round.market, round.id.get());
    let (m, id) = (Addr(market), Num(market_id));
    let existing: Option<Stage> = tx
        .prepare_cached("SELECT state FROM rounds WHERE market = ?1 AND market_id = ?2")?
        .query_row(params![m, id], |r| r.get(0))
        .optional()?;
    let req_tx = request.map(|(h, _)| Hash(h));
    let req_block = request.map(|(_, b)| b as i64);
    let t = now() as i64;
    let decision = decide(existing, unresolved_on_chain);
    match decision {
        RequestDecision::New => {
            tx.prepare_cached("INSERT INTO rounds (market, market_id, state, attempt, workflow, request_tx, request_block, created_at, updated_at)
                 VALUES (?1, ?2, 'requested', 1, ?3, ?4, ?5, ?6, ?6)")?
                .execute(params![m, id, workflow, req_tx, req_block, t])?;
        }
        RequestDecision::Reopened => {
            archive_in(tx, round, t)?;
            tx.prepare_cached("UPDATE rounds SET state = 'requested', attempt = attempt + 1, workflow = ?3, request_tx = COALESCE(?4, request_tx),
                 request_block = COALESCE(?5, request_block), reason = NULL, updated_at = ?6, holder = NULL, lease_until = NULL
                 WHERE market = ?1 AND market_id = ?2")?
                .execute(params![m, id, workflow, req_tx, req_block, t])?;
        }
        RequestDecision::Resubmit => {
            reopen_submission_in(tx, round, RESUBMIT_REASON, None)?;
        }
        RequestDecision::Renewed => {
            if let Some(from) = existing {
                renew_in(tx, round, workflow, request, from)?;
            }
        }
        RequestDecision::AlreadyHandled(_) | RequestDecision::DuplicateLog => {}
    }
    Ok(decision)
}

#[async_trait::async_trait]
impl Requests for SqliteStore {
    async fn record_request_judged(
        &self,
        round: RoundKey,
        workflow: &str,
        log: &LogRef,
        unresolved_on_chain: bool,
    ) -> Result<RequestDecision, StoreError> {
        let (market, market_id) = (round.market, round.id.get());
        let (workflow, log) = (workflow.to_string(), log.clone());
        self.run(move |db| {
            db.in_tx(|tx| {
                let inserted = tx.prepare_cached("INSERT OR IGNORE INTO seen_logs (tx_hash, log_index, market, market_id, block_number, block_hash)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)")?.execute(params![
                        Hash(log.tx_hash),
                        log.log_index as i64,
                        Addr(market),
                        Num(market_id),
                        log.block_number as i64,
                        Hash(log.block_hash)
                    ])?;
                if inserted == 0 {
                    return Ok(RequestDecision::DuplicateLog);
                }
                let request = Some((log.tx_hash, log.block_number));
                upsert_round(tx, round, &workflow, request, unresolved_on_chain)
            })
        })
        .await
    }

    async fn log_seen(&self, log: &LogRef) -> Result<bool, StoreError> {
        let (tx_hash, index) = (Hash(log.tx_hash), log.log_index as i64);
        self.run(move |db| {
            Ok(db
                .conn()
                .prepare_cached("SELECT 1 FROM seen_logs WHERE tx_hash = ?1 AND log_index = ?2")?
                .exists(params![tx_hash, index])?)
        })
        .await
    }

    async fn manual_request_judged(
        &self,
        round: RoundKey,
        workflow: &str,
        unresolved_on_chain: bool,
    ) -> Result<RequestDecision, StoreError> {
        let workflow = workflow.to_string();
        // the caller answers the operator that it is recorded
        self.run(move |db| {
            db.in_durable_tx(|tx| upsert_round(tx, round, &workflow, None, unresolved_on_chain))
        })
        .await
    }
}

#[async_trait::async_trait]
impl Checkpoints for SqliteStore {
    async fn checkpoint(&self, key: &str) -> Result<Option<(u64, B256)>, StoreError> {
        let key = key.to_string();
        self.run(move |db| {
            Ok(db
                .conn()
                .prepare_cached("SELECT block_number, block_hash FROM checkpoints WHERE key = ?1")?
                .query_row(params![key], |r| Ok((uint(r, 0)?, r.get::<_, Hash>(1)?.0)))
                .optional()?)
        })
        .await
    }

    async fn set_checkpoint(&self, key: &str, block: u64, hash: B256) -> Result<(), StoreError> {
        let key = key.to_string();
        self.run(move |db| {
            db.conn().prepare_cached(SET_CHECKPOINT)?.execute(params![
                key,
                block as i64,
                Hash(hash)
            ])?;
            Ok(())
        })
        .await
    }
}

#[async_trait::async_trait]
impl Rounds for SqliteStore {
    async fn set_state(
        &self,
        round: RoundKey,
        state: Stage,
        reason: Option<&str>,
    ) -> Result<(), StoreError> {
        let (market, market_id) = (round.market, round.id.get());
        let reason = reason.map(str::to_string);
        self.run(move |db| {
            let n = db.conn().prepare_cached("UPDATE rounds SET state = ?3, reason = ?4, updated_at = ?5 WHERE market = ?1 AND market_id = ?2")?
                .execute(params![Addr(market), Num(market_id), state, reason, now() as i64])?;
            touched(n, round)
        })
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
        let progress = Json(progress.clone());
        self.run(move |db| {
            db.in_tx(|tx| {
                let (m, id, t) = (Addr(market), Num(market_id), now() as i64);
                let n = tx.prepare_cached("UPDATE rounds SET state = ?3, updated_at = ?4 WHERE market = ?1 AND market_id = ?2")?
                    .execute(params![m, id, state, t])?;
                touched(n, round)?;
                tx.prepare_cached("INSERT INTO round_progress (market, market_id, attempt, progress, updated_at) VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT (market, market_id) DO UPDATE SET attempt = ?3, progress = ?4, updated_at = ?5")?
                    .execute(params![m, id, attempt as i64, progress, t])?;
                Ok(())
            })
        })
        .await
    }

    async fn progress(
        &self,
        round: RoundKey,
        attempt: u32,
    ) -> Result<Option<serde_json::Value>, StoreError> {
        let (market, market_id) = (round.market, round.id.get());
        self.run(move |db| {
            let progress: Option<Json> = db
                .conn()
                .prepare_cached("SELECT progress FROM round_progress WHERE market = ?1 AND market_id = ?2 AND attempt = ?3")?
                .query_row(params![Addr(market), Num(market_id), attempt as i64], |r| r.get(0))
                .optional()?;
            Ok(progress.map(|p| p.0))
        })
        .await
    }

    async fn set_request_block(&self, round: RoundKey, block: u64) -> Result<(), StoreError> {
        let (market, market_id) = (round.market, round.id.get());
        self.run(move |db| {
            let n = db.conn().prepare_cached("UPDATE rounds SET request_block = ?3, updated_at = ?4 WHERE market = ?1 AND market_id = ?2")?
                .execute(params![Addr(market), Num(market_id), block as i64, now() as i64])?;
            touched(n, round)
        })
        .await
    }

    async fn set_outcome(
        &self,
        round: RoundKey,
        outcome: &serde_json::Value,
    ) -> Result<(), StoreError> {
        let (market, market_id) = (round.market, round.id.get());
        let outcome = Json(outcome.clone());
        self.run(move |db| {
            db.conn().prepare_cached("UPDATE rounds SET outcome = ?3, updated_at = ?4 WHERE market = ?1 AND market_id = ?2")?
                .execute(params![Addr(market), Num(market_id), outcome, now() as i64])?;
            Ok(())
        })
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
        let (outcome, reason) = (Json(outcome.clone()), reason.map(str::to_string));
        self.run(move |db| {
            let n = db.conn().prepare_cached("UPDATE rounds SET outcome = ?3, state = ?4, reason = ?5, updated_at = ?6 WHERE market = ?1 AND market_id = ?2")?
                .execute(params![Addr(market), Num(market_id), outcome, state, reason, now() as i64])?;
            touched(n, round)
        })
        .await
    }

    async fn get(&self, round: RoundKey) -> Result<Option<RoundRecord>, StoreError> {
        let (market, market_id) = (round.market, round.id.get());
        self.run(move |db| {
            Ok(db
                .conn()
                .prepare_cached(&format!("{SELECT} WHERE market = ?1 AND market_id = ?2"))?
                .query_row(params![Addr(market), Num(market_id)], read_round)
                .optional()?)
        })
        .await
    }

    async fn unfinished(&self) -> Result<Vec<RoundRecord>, StoreError> {
        self.run(|db| {
            let conn = db.conn();
            let mut stmt = conn.prepare_cached(&format!(
                "{SELECT} WHERE state NOT IN {DONE_SQL} ORDER BY created_at, market_id"
            ))?;
            collect(stmt.query_map([], read_round)?)
        })
        .await
    }
}

/// A summary row: the page cursor (the rowid) and the summary.
fn read_summary(r: &rusqlite::Row<'_>) -> rusqlite::Result<(i64, RoundSummary)> {
    let state: Stage = r.get(3)?;
    let open = !state.is_final();
    let summary = RoundSummary {
        market: r.get::<_, Addr>(1)?.0,
        market_id: r.get::<_, Num>(2)?.into(),
        state,
        attempt: r.get(4)?,
        workflow: r.get(5)?,
        request_tx: r.get::<_, Option<Hash>>(6)?.map(|h| h.0),
        request_block: opt_uint(r, 7)?,
        reason: r
            .get::<_, Option<String>>(8)?
            .map(|r| truncate(r, SUMMARY_REASON_BYTES)),
        submit_tx: r.get::<_, Option<Hash>>(9)?.map(|h| h.0),
        created_at: uint(r, 10)?,
        updated_at: uint(r, 11)?,
        holder: r.get::<_, Option<String>>(12)?.filter(|_| open),
        lease_ms: None,
        driven_by: None,
    };
    Ok((r.get(0)?, summary))
}

#[async_trait::async_trait]
impl Overview for SqliteStore {
    async fn list_summaries_updated(
        &self,
        limit: usize,
        before: Option<i64>,
        between: UpdatedBetween,
    ) -> Result<(Vec<RoundSummary>, Option<i64>), StoreError> {
        let (since, until) = between.sql_bounds();
        self.run(move |db| {
            let conn = db.conn();
            let mut stmt = conn.prepare_cached(
                "SELECT rowid, market, market_id, state, attempt, workflow, request_tx, request_block, reason, submit_tx, created_at, updated_at, holder
                 FROM rounds WHERE rowid < ?1 AND updated_at >= ?3 AND updated_at < ?4
                 ORDER BY rowid DESC LIMIT ?2",
            )?;
            let params = params![before.unwrap_or(i64::MAX), limit as i64, since, until];
            let rows = collect(stmt.query_map(params, read_summary)?)?;
            let next = (rows.len() == limit).then(|| rows.last().map(|r| r.0)).flatten();
            Ok((rows.into_iter().map(|r| r.1).collect(), next))
        })
        .await
    }

    async fn count_by_state(&self) -> Result<Vec<(Stage, u64)>, StoreError> {
        self.run(|db| {
            let conn = db.conn();
            let mut stmt =
                conn.prepare_cached("SELECT state, COUNT(*) FROM rounds GROUP BY state")?;
            collect(stmt.query_map([], |r| Ok((r.get(0)?, uint(r, 1)?)))?)
        })
        .await
    }

    async fn probe_write(&self) -> Result<(), StoreError> {
        // synced, so that a disk that fails its fsync fails the probe
        self.run(|db| {
            db.in_durable_tx(|tx| {
                tx.prepare_cached(SET_CHECKPOINT)?.execute(params![
                    "health:probe",
                    now() as i64,
                    Hash(B256::ZERO)
                ])?;
                Ok(())
            })
        })
        .await
    }
}
