//! Done rounds on SQLite and what follows them: the finality watch's conditional
//! transitions (`confirmed` → `finalized`, `confirmed` → `submitted` when a reorg
//! removed the resolution) and new attempts of done rounds (the old attempt kept in
//! `round_attempts`). None of these holds a lease: every transition is conditional on
//! the state it leaves. [`SqliteStore`]'s [`Finality`].

use super::{SqliteStore, collect, opt_uint, uint};
use crate::RoundKey;
use crate::column::{Addr, Hash, Json, Num};
use crate::{Finality, KeyRef, MinedAt, PastAttempt, Stage, StoreError, Watched, now};
use alloy_primitives::B256;
use rusqlite::{OptionalExtension, Transaction, params};

/// Copies a round's current attempt into `round_attempts` before a new one replaces it.
pub(super) fn archive_in(tx: &Transaction<'_>, round: RoundKey, at: i64) -> Result<(), StoreError> {
    let (market, market_id) = (round.market, round.id.get());
    tx.prepare_cached(
        "INSERT INTO round_attempts (market, market_id, attempt, state, reason, request_tx, request_block, submit_tx, outcome, ended_at)
         SELECT market, market_id, attempt, state, reason, request_tx, request_block, submit_tx, outcome, ?3 FROM rounds
         WHERE market = ?1 AND market_id = ?2 ON CONFLICT DO NOTHING",
    )?
    .execute(params![Addr(market), Num(market_id), at])?;
    Ok(())
}

/// [`Finality::renew_round`] inside a transaction.
pub(super) fn renew_in(
    tx: &Transaction<'_>,
    round: RoundKey,
    workflow: &str,
    request: Option<(B256, u64)>,
    from: Stage,
) -> Result<bool, StoreError> {
    let (market, market_id) = (round.market, round.id.get());
    let (m, id, t) = (Addr(market), Num(market_id), now() as i64);
    let current: Option<Stage> = tx
        .prepare_cached("SELECT state FROM rounds WHERE market = ?1 AND market_id = ?2")?
        .query_row(params![m, id], |r| r.get(0))
        .optional()?;
    if current != Some(from) {
        return Ok(false);
    }
    archive_in(tx, round, t)?;
    tx.prepare_cached(
        "UPDATE rounds SET state = 'requested', attempt = attempt + 1, workflow = ?3, request_tx = ?4,
         request_block = ?5, reason = NULL, submit_tx = NULL, raw_tx = NULL, outcome = NULL,
         updated_at = ?6, holder = NULL, lease_until = NULL WHERE market = ?1 AND market_id = ?2",
    )?
    .execute(params![
        m,
        id,
        workflow,
        request.map(|(h, _)| Hash(h)),
        request.map(|(_, b)| b as i64),
        t
    ])?;
    Ok(true)
}

/// [`Finality::reopen_submission`] inside a transaction.
pub(super) fn reopen_submission_in(
    tx: &Transaction<'_>,
    round: RoundKey,
    reason: &str,
    outcome: Option<&serde_json::Value>,
) -> Result<bool, StoreError> {
    let (market, market_id) = (round.market, round.id.get());
    let (m, id, t) = (Addr(market), Num(market_id), now() as i64);
    let n = tx
        .prepare_cached(
            "UPDATE rounds SET state = 'submitted', reason = ?3, outcome = COALESCE(?4, outcome), updated_at = ?5,
             holder = NULL, lease_until = NULL WHERE market = ?1 AND market_id = ?2 AND state = 'confirmed'",
        )?
        .execute(params![m, id, reason, outcome.cloned().map(Json), t])?;
    if n == 0 {
        return Ok(false);
    }
    // the key and nonce whose attempt resolved the round
    let mined: Option<(String, i64, i64)> = tx
        .prepare_cached(
            "SELECT n.signer, n.chain_id, n.nonce FROM tx_nonces n JOIN rounds r
             ON r.market = n.market AND r.market_id = n.market_id AND n.mined_tx = r.submit_tx
             WHERE n.market = ?1 AND n.market_id = ?2 AND n.state = 'mined'
             ORDER BY n.updated_at DESC LIMIT 1",
        )?
        .query_row(params![m, id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    if let Some((signer, chain_id, nonce)) = mined {
        // pending again, its attempts never broadcast (so the drive re-sends them)
        tx.prepare_cached(
            "UPDATE tx_nonces SET state = 'pending', mined_tx = NULL, mined_block = NULL, mined_hash = NULL,
             detail = ?4, updated_at = ?5 WHERE signer = ?1 AND chain_id = ?2 AND nonce = ?3",
        )?
        .execute(params![signer, chain_id, nonce, reason, t])?;
        tx.prepare_cached(
            "UPDATE tx_attempts SET sent_block = NULL WHERE signer = ?1 AND chain_id = ?2 AND nonce = ?3",
        )?
        .execute(params![signer, chain_id, nonce])?;
    }
    Ok(true)
}

/// A watched round: the round, and the nonce whose attempt resolved it when the store
/// holds one with where it was mined.
fn read_watched(r: &rusqlite::Row<'_>) -> rusqlite::Result<Watched> {
    let signer: Option<Addr> = r.get(3)?;
    let chain_id = opt_uint(r, 4)?;
    let nonce = opt_uint(r, 5)?;
    let tx: Option<Hash> = r.get(6)?;
    let block = opt_uint(r, 7)?;
    let hash: Option<Hash> = r.get(8)?;
    let mined = match (signer, chain_id, nonce, tx, block, hash) {
        (Some(signer), Some(chain_id), Some(nonce), Some(tx), Some(block), Some(hash)) => Some((
            KeyRef {
                signer: signer.0,
                chain_id,
            },
            nonce,
            MinedAt {
                tx: tx.0,
                block,
                block_hash: hash.0,
            },
        )),
        _ => None,
    };
    Ok(Watched {
        market: r.get::<_, Addr>(0)?.0,
        market_id: r.get::<_, Num>(1)?.into(),
        attempt: r.get(2)?,
        mined,
        mined_block: block,
    })
}

/// An archived attempt.
fn read_past(r: &rusqlite::Row<'_>) -> rusqlite::Result<PastAttempt> {
    Ok(PastAttempt {
        attempt: r.get(0)?,
        state: r.get(1)?,
        reason: r.get(2)?,
        request_tx: r.get::<_, Option<Hash>>(3)?.map(|h| h.0),
        request_block: opt_uint(r, 4)?,
        submit_tx: r.get::<_, Option<Hash>>(5)?.map(|h| h.0),
        outcome: r.get::<_, Option<Json>>(6)?.map(|o| o.0),
        ended_at: uint(r, 7)?,
    })
}

#[async_trait::async_trait]
impl Finality for SqliteStore {
    async fn renew_round(
        &self,
        round: RoundKey,
        workflow: &str,
        request: Option<(B256, u64)>,
        from: Stage,
    ) -> Result<bool, StoreError> {
        let workflow = workflow.to_string();
        self.run(move |db| db.in_tx(|tx| renew_in(tx, round, &workflow, request, from)))
            .await
    }

    async fn reopen_submission(
        &self,
        round: RoundKey,
        reason: &str,
        outcome: Option<&serde_json::Value>,
    ) -> Result<bool, StoreError> {
        let (reason, outcome) = (reason.to_string(), outcome.cloned());
        self.run(move |db| {
            db.in_tx(|tx| reopen_submission_in(tx, round, &reason, outcome.as_ref()))
        })
        .await
    }

    async fn set_finalized(
        &self,
        round: RoundKey,
        outcome: Option<&serde_json::Value>,
    ) -> Result<bool, StoreError> {
        let (market, market_id) = (round.market, round.id.get());
        let outcome = outcome.cloned().map(Json);
        self.run(move |db| {
            let n = db
                .conn()
                .prepare_cached(
                    "UPDATE rounds SET state = 'finalized', outcome = COALESCE(?3, outcome), updated_at = ?4
                     WHERE market = ?1 AND market_id = ?2 AND state = 'confirmed'",
                )?
                .execute(params![Addr(market), Num(market_id), outcome, now() as i64])?;
            Ok(n > 0)
        })
        .await
    }

    async fn awaiting_finality(&self, limit: usize) -> Result<Vec<Watched>, StoreError> {
        self.run(move |db| {
            let conn = db.conn();
            let mut stmt = conn.prepare_cached(
                "SELECT r.market, r.market_id, r.attempt, n.signer, n.chain_id, n.nonce, n.mined_tx, n.mined_block, n.mined_hash
                 FROM rounds r LEFT JOIN tx_nonces n ON n.market = r.market AND n.market_id = r.market_id
                 AND n.state = 'mined' AND n.mined_tx = r.submit_tx
                 WHERE r.state = 'confirmed' ORDER BY r.updated_at, r.market_id LIMIT ?1",
            )?;
            collect(stmt.query_map(params![limit as i64], read_watched)?)
        })
        .await
    }

    async fn past_attempts(&self, round: RoundKey) -> Result<Vec<PastAttempt>, StoreError> {
        let (market, market_id) = (round.market, round.id.get());
        self.run(move |db| {
            let conn = db.conn();
            let mut stmt = conn.prepare_cached(
                "SELECT attempt, state, reason, request_tx, request_block, submit_tx, outcome, ended_at
                 FROM round_attempts WHERE market = ?1 AND market_id = ?2 ORDER BY attempt",
            )?;
            collect(stmt.query_map(params![Addr(market), Num(market_id)], read_past)?)
        })
        .await
    }
}
