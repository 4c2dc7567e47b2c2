//! Done rounds on PostgreSQL: the finality watch's transitions and new attempts of done
//! rounds. Nothing here is fenced by a lease: each change is conditional on the state
//! it leaves (and `renew_in` locks the row first). [`PgStore`]'s [`Finality`].

use super::{PgStore, col, pg_err, read_market};
use crate::RoundKey;
use crate::column::{Addr, Hash, Json, Num};
use crate::{Finality, KeyRef, MinedAt, PastAttempt, Stage, StoreError, Watched, now};
use alloy_primitives::B256;
use deadpool_postgres::Transaction;
use tokio_postgres::Row;

/// Keeps the round's current attempt in its history (`round_attempts`) before a new
/// one replaces it.
pub(super) async fn archive_in(
    tx: &Transaction<'_>,
    round: RoundKey,
    at: i64,
) -> Result<(), StoreError> {
    let (market, market_id) = (round.market, round.id.get());
    let stmt = tx
        .prepare_cached(
            "INSERT INTO round_attempts (market, market_id, attempt, state, reason, request_tx, request_block, submit_tx, outcome, ended_at)
             SELECT market, market_id, attempt, state, reason, request_tx, request_block, submit_tx, outcome, CAST($3 AS BIGINT) FROM rounds
             WHERE market = $1 AND market_id = $2 ON CONFLICT DO NOTHING",
        )
        .await
        .map_err(pg_err)?;
    tx.execute(&stmt, &[&Addr(market), &Num(market_id), &at])
        .await
        .map_err(pg_err)?;
    Ok(())
}

/// [`Finality::renew_round`] inside a transaction.
pub(super) async fn renew_in(
    tx: &Transaction<'_>,
    round: RoundKey,
    workflow: &str,
    request: Option<(B256, u64)>,
    from: Stage,
) -> Result<bool, StoreError> {
    let (market, market_id) = (round.market, round.id.get());
    let (m, id, t) = (Addr(market), Num(market_id), now() as i64);
    let state: Option<Stage> = tx
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
    if state != Some(from) {
        return Ok(false);
    }
    archive_in(tx, round, t).await?;
    tx.execute(
        &tx.prepare_cached(
            "UPDATE rounds SET state = 'requested', attempt = attempt + 1, workflow = $3, request_tx = $4,
             request_block = $5, reason = NULL, submit_tx = NULL, raw_tx = NULL, outcome = NULL,
             updated_at = $6, holder = NULL, lease_until = NULL WHERE market = $1 AND market_id = $2",
        )
        .await
        .map_err(pg_err)?,
        &[
            &m,
            &id,
            &workflow,
            &request.map(|(h, _)| Hash(h)),
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
    round: RoundKey,
    reason: &str,
    outcome: Option<&serde_json::Value>,
) -> Result<bool, StoreError> {
    let (market, market_id) = (round.market, round.id.get());
    let (m, id, t) = (Addr(market), Num(market_id), now() as i64);
    let n = tx
        .execute(
            &tx.prepare_cached(
                "UPDATE rounds SET state = 'submitted', reason = $3, outcome = COALESCE($4, outcome), updated_at = $5,
                 holder = NULL, lease_until = NULL WHERE market = $1 AND market_id = $2 AND state = 'confirmed'",
            )
            .await
            .map_err(pg_err)?,
            &[&m, &id, &reason, &outcome.cloned().map(Json), &t],
        )
        .await
        .map_err(pg_err)?;
    if n == 0 {
        return Ok(false);
    }
    // the key and nonce whose attempt resolved the round
    let mined = tx
        .query_opt(
            &tx.prepare_cached(
                "SELECT n.signer, n.chain_id, n.nonce FROM tx_nonces n JOIN rounds r
                 ON r.market = n.market AND r.market_id = n.market_id AND n.mined_tx = r.submit_tx
                 WHERE n.market = $1 AND n.market_id = $2 AND n.state = 'mined'
                 ORDER BY n.updated_at DESC LIMIT 1",
            )
            .await
            .map_err(pg_err)?,
            &[&m, &id],
        )
        .await
        .map_err(pg_err)?;
    if let Some(row) = mined {
        let (signer, chain, nonce): (String, i64, i64) =
            (col(&row, 0)?, col(&row, 1)?, col(&row, 2)?);
        // pending again, its attempts never broadcast (so the drive re-sends them)
        tx.execute(
            &tx.prepare_cached(
                "UPDATE tx_nonces SET state = 'pending', mined_tx = NULL, mined_block = NULL, mined_hash = NULL,
                 detail = $4, updated_at = $5 WHERE signer = $1 AND chain_id = $2 AND nonce = $3",
            )
            .await
            .map_err(pg_err)?,
            &[&signer, &chain, &nonce, &reason, &t],
        )
        .await
        .map_err(pg_err)?;
        tx.execute(
            &tx.prepare_cached(
                "UPDATE tx_attempts SET sent_block = NULL WHERE signer = $1 AND chain_id = $2 AND nonce = $3",
            )
            .await
            .map_err(pg_err)?,
            &[&signer, &chain, &nonce],
        )
        .await
        .map_err(pg_err)?;
    }
    Ok(true)
}

/// A watched round: the round, and the nonce whose attempt resolved it when the store
/// holds one with where it was mined.
fn read_watched(r: &Row) -> Result<Watched, StoreError> {
    let RoundKey {
        market,
        id: market_id,
    } = read_market(r, 0)?;
    let signer: Option<Addr> = col(r, 3)?;
    let chain_id: Option<i64> = col(r, 4)?;
    let nonce: Option<i64> = col(r, 5)?;
    let tx: Option<Hash> = col(r, 6)?;
    let block: Option<i64> = col(r, 7)?;
    let hash: Option<Hash> = col(r, 8)?;
    let mined = match (signer, chain_id, nonce, tx, block, hash) {
        (Some(signer), Some(chain_id), Some(nonce), Some(tx), Some(block), Some(hash)) => Some((
            KeyRef {
                signer: signer.0,
                chain_id: chain_id as u64,
            },
            nonce as u64,
            MinedAt {
                tx: tx.0,
                block: block as u64,
                block_hash: hash.0,
            },
        )),
        _ => None,
    };
    Ok(Watched {
        market,
        market_id,
        attempt: col::<i32>(r, 2)? as u32,
        mined,
        mined_block: block.map(|b| b as u64),
    })
}

/// An archived attempt.
fn read_past(r: &Row) -> Result<PastAttempt, StoreError> {
    Ok(PastAttempt {
        attempt: col::<i32>(r, 0)? as u32,
        state: col(r, 1)?,
        reason: col(r, 2)?,
        request_tx: col::<Option<Hash>>(r, 3)?.map(|h| h.0),
        request_block: col::<Option<i64>>(r, 4)?.map(|b| b as u64),
        submit_tx: col::<Option<Hash>>(r, 5)?.map(|h| h.0),
        outcome: col::<Option<Json>>(r, 6)?.map(|o| o.0),
        ended_at: col::<i64>(r, 7)? as u64,
    })
}

#[async_trait::async_trait]
impl Finality for PgStore {
    async fn renew_round(
        &self,
        round: RoundKey,
        workflow: &str,
        request: Option<(B256, u64)>,
        from: Stage,
    ) -> Result<bool, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_err)?;
        let done = renew_in(&tx, round, workflow, request, from).await?;
        tx.commit().await.map_err(pg_err)?;
        Ok(done)
    }

    async fn reopen_submission(
        &self,
        round: RoundKey,
        reason: &str,
        outcome: Option<&serde_json::Value>,
    ) -> Result<bool, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_err)?;
        let done = reopen_submission_in(&tx, round, reason, outcome).await?;
        tx.commit().await.map_err(pg_err)?;
        Ok(done)
    }

    async fn set_finalized(
        &self,
        round: RoundKey,
        outcome: Option<&serde_json::Value>,
    ) -> Result<bool, StoreError> {
        let (market, market_id) = (round.market, round.id.get());
        let client = self.client().await?;
        let n = client
            .execute(
                &client
                    .prepare_cached(
                        "UPDATE rounds SET state = 'finalized', outcome = COALESCE($3, outcome), updated_at = $4
                         WHERE market = $1 AND market_id = $2 AND state = 'confirmed'",
                    )
                    .await
                    .map_err(pg_err)?,
                &[
                    &Addr(market),
                    &Num(market_id),
                    &outcome.cloned().map(Json),
                    &(now() as i64),
                ],
            )
            .await
            .map_err(pg_err)?;
        Ok(n > 0)
    }

    async fn awaiting_finality(&self, limit: usize) -> Result<Vec<Watched>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                &client
                    .prepare_cached(
                        "SELECT r.market, r.market_id, r.attempt, n.signer, n.chain_id, n.nonce, n.mined_tx, n.mined_block, n.mined_hash
                         FROM rounds r LEFT JOIN tx_nonces n ON n.market = r.market AND n.market_id = r.market_id
                         AND n.state = 'mined' AND n.mined_tx = r.submit_tx
                         WHERE r.state = 'confirmed' ORDER BY r.updated_at, r.market_id LIMIT $1",
                    )
                    .await
                    .map_err(pg_err)?,
                &[&(limit as i64)],
            )
            .await
            .map_err(pg_err)?;
        rows.iter().map(read_watched).collect()
    }

    async fn past_attempts(&self, round: RoundKey) -> Result<Vec<PastAttempt>, StoreError> {
        let (market, market_id) = (round.market, round.id.get());
        let client = self.client().await?;
        let rows = client
            .query(
                &client
                    .prepare_cached(
                        "SELECT attempt, state, reason, request_tx, request_block, submit_tx, outcome, ended_at
                         FROM round_attempts WHERE market = $1 AND market_id = $2 ORDER BY attempt",
                    )
                    .await
                    .map_err(pg_err)?,
                &[&Addr(market), &Num(market_id)],
            )
            .await
            .map_err(pg_err)?;
        rows.iter().map(read_past).collect()
    }
}
