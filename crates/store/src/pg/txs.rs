//! The transaction manager's nonces and attempts on PostgreSQL: a nonce is reserved under
//! the key's row lock, so nodes sharing a signing key never take the same one; every
//! write is fenced by the round's lease. [`PgStore`]'s [`Nonces`] and [`RoundTxs`].

use super::{NONCE_ROUNDS_CAP, PgStore, col, pg_err, read_key, read_market};
use crate::RoundKey;
use crate::column::{Addr, Hash, Num, Wei};
use crate::{
    AttemptRecord, KeyRef, MinedAt, NonceRecord, NonceState, Nonces, RoundTxs, StoreError,
    TxPayload, now,
};
use alloy_primitives::Bytes;
use std::collections::HashMap;
use tokio_postgres::Row;

/// The `tx_nonces` columns [`read_nonce`] reads, then the key (signer 13, chain id 14).
const KEYED_NONCE_SELECT: &str = "SELECT nonce, state, market, market_id, to_addr, calldata, gas_limit, mined_tx, mined_block, detail, created_at, updated_at, mined_hash,
     signer, chain_id FROM tx_nonces";

/// One nonce of a key (`$1` signer, `$2` chain id, `$3` nonce).
const NONCE_SQL: &str = "SELECT nonce, state, market, market_id, to_addr, calldata, gas_limit, mined_tx, mined_block, detail, created_at, updated_at, mined_hash
     FROM tx_nonces WHERE signer = $1 AND chain_id = $2 AND nonce = $3";

/// The `tx_attempts` columns [`read_attempt`] reads, then the key (signer 9, chain id 10).
const KEYED_ATTEMPT_SELECT: &str =
    "SELECT nonce, seq, tx_hash, raw, max_fee, max_priority_fee, gas_limit, sent_block, created_at,
     signer, chain_id FROM tx_attempts";

/// The attempts at one nonce of a key, oldest first (the same parameters).
const ATTEMPTS_SQL: &str =
    "SELECT nonce, seq, tx_hash, raw, max_fee, max_priority_fee, gas_limit, sent_block, created_at
     FROM tx_attempts WHERE signer = $1 AND chain_id = $2 AND nonce = $3 ORDER BY seq";

/// A nonce row (its first 13 columns).
fn read_nonce(r: &Row) -> Result<NonceRecord, StoreError> {
    let RoundKey {
        market,
        id: market_id,
    } = read_market(r, 2)?;
    Ok(NonceRecord {
        nonce: col::<i64>(r, 0)? as u64,
        state: col(r, 1)?,
        payload: TxPayload {
            market,
            market_id,
            to: col::<Addr>(r, 4)?.0,
            calldata: Bytes::from(col::<Vec<u8>>(r, 5)?),
            gas_limit: col::<i64>(r, 6)? as u64,
        },
        mined_tx: col::<Option<Hash>>(r, 7)?.map(|h| h.0),
        mined_block: col::<Option<i64>>(r, 8)?.map(|b| b as u64),
        mined_hash: col::<Option<Hash>>(r, 12)?.map(|h| h.0),
        detail: col(r, 9)?,
        created_at: col::<i64>(r, 10)? as u64,
        updated_at: col::<i64>(r, 11)? as u64,
    })
}

/// An attempt row (its first 9 columns).
fn read_attempt(r: &Row) -> Result<AttemptRecord, StoreError> {
    Ok(AttemptRecord {
        nonce: col::<i64>(r, 0)? as u64,
        seq: col::<i32>(r, 1)? as u32,
        tx_hash: col::<Hash>(r, 2)?.0,
        raw: Bytes::from(col::<Vec<u8>>(r, 3)?),
        max_fee_per_gas: col::<Wei>(r, 4)?.0,
        max_priority_fee_per_gas: col::<Wei>(r, 5)?.0,
        gas_limit: col::<i64>(r, 6)? as u64,
        sent_block: col::<Option<i64>>(r, 7)?.map(|b| b as u64),
        created_at: col::<i64>(r, 8)? as u64,
    })
}

/// A key as parameters (signer, chain id).
fn key_params(key: &KeyRef) -> (Addr, i64) {
    (Addr(key.signer), key.chain_id as i64)
}

impl PgStore {
    /// Runs `f` on the rounds of the nonces this node reserved.
    fn reserved<T>(&self, f: impl FnOnce(&mut HashMap<(KeyRef, u64), RoundKey>) -> T) -> T {
        f(&mut self.nonce_rounds.lock())
    }

    /// The round a reserved nonce belongs to.
    pub(super) async fn nonce_round(
        &self,
        key: KeyRef,
        nonce: u64,
    ) -> Result<RoundKey, StoreError> {
        if let Some(round) = self.reserved(|m| m.get(&(key, nonce)).copied()) {
            return Ok(round);
        }
        let client = self.client().await?;
        let row = client
            .query_opt(
                &client.prepare_cached("SELECT market, market_id FROM tx_nonces WHERE signer = $1 AND chain_id = $2 AND nonce = $3").await.map_err(pg_err)?,
                &[&Addr(key.signer), &(key.chain_id as i64), &(nonce as i64)],
            )
            .await
            .map_err(pg_err)?
            .ok_or_else(|| StoreError::Corrupt(format!("tx_nonces: nonce {nonce} is not reserved")))?;
        read_market(&row, 0)
    }
}

#[async_trait::async_trait]
impl Nonces for PgStore {
    async fn reserve_nonce(
        &self,
        key: KeyRef,
        chain_pending: u64,
        payload: &TxPayload,
    ) -> Result<u64, StoreError> {
        let (signer, chain) = key_params(&key);
        let round = payload.key();
        let (market, market_id) = (round.market, round.id.get());
        let term = self.held_term(round)?;
        let client = self.client().await?;
        // The key's row lock (the row made on first use): nodes sharing the key
        // reserve one at a time. An upsert that updates locks the row whether it was
        // there or not, waiting for a holder that is inserting it.
        let lock = client
            .prepare_cached(
                "INSERT INTO tx_keys (signer, chain_id) VALUES ($1, $2)
                 ON CONFLICT (signer, chain_id) DO UPDATE SET signer = EXCLUDED.signer",
            )
            .await
            .map_err(pg_err)?;
        // The round's move to `submitted`, fenced (held by this node at its term), and
        // the nonce (the larger of the chain's pending count and the key's highest + 1)
        // in one statement; the nonce is taken only if the fenced update moved the round
        // (`HAVING`: the aggregate yields no row then), so a refused fence changes
        // nothing and the transaction may commit either way.
        let reserve = client
            .prepare_cached(
                "WITH r AS (
                   UPDATE rounds SET state = 'submitted', reason = NULL, updated_at = $9::bigint
                   WHERE market = $4::text AND market_id = $5::text
                     AND holder = $10::text AND term = $11::bigint RETURNING 1),
                 n AS (
                   INSERT INTO tx_nonces (signer, chain_id, nonce, market, market_id, to_addr, calldata, gas_limit, state, created_at, updated_at)
                   SELECT $1::text, $2::bigint, GREATEST($3::bigint, COALESCE(MAX(nonce) + 1, $3::bigint)),
                          $4::text, $5::text, $6::text, $7::bytea, $8::bigint, 'pending', $9::bigint, $9::bigint
                   FROM tx_nonces WHERE signer = $1::text AND chain_id = $2::bigint
                   HAVING EXISTS (SELECT 1 FROM r)
                   RETURNING nonce)
                 SELECT (SELECT nonce FROM n), (SELECT count(*) FROM r)",
            )
            .await
            .map_err(pg_err)?;
        let t = now() as i64;
        let (m, id) = (Addr(market), Num(market_id));
        let (to, calldata) = (Addr(payload.to), payload.calldata.as_ref());
        let (pending, gas) = (chain_pending as i64, payload.gas_limit as i64);
        // The transaction's four messages go out together (pipelined: one round trip),
        // so the key's lock is held only while the server runs them, never across a
        // round trip to this node. The server runs them in order; the reservation takes
        // its snapshot when it starts, after the lock is held, so it reads the highest
        // nonce that the previous holder committed. After a failed statement the server
        // refuses the rest and `COMMIT` ends the transaction as a rollback: nothing is
        // left open on the pooled connection, even if this future is dropped (all four
        // are handed to the connection on the first poll).
        let lock_params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&signer, &chain];
        let reserve_params: [&(dyn tokio_postgres::types::ToSql + Sync); 11] = [
            &signer, &chain, &pending, &m, &id, &to, &calldata, &gas, &t, &self.node, &term,
        ];
        let (begun, locked, row, committed) = tokio::join!(
            biased;
            client.batch_execute("BEGIN"),
            client.execute(&lock, &lock_params),
            client.query_one(&reserve, &reserve_params),
            client.batch_execute("COMMIT"),
        );
        begun.map_err(pg_err)?;
        locked.map_err(pg_err)?;
        let row = row.map_err(pg_err)?;
        committed.map_err(pg_err)?;
        let nonce: Option<i64> = col(&row, 0)?;
        let rounds: i64 = col(&row, 1)?;
        match nonce {
            Some(nonce) if rounds == 1 => {
                let nonce = nonce as u64;
                self.reserved(|m| {
                    if m.len() >= NONCE_ROUNDS_CAP {
                        m.clear();
                    }
                    m.insert((key, nonce), round);
                });
                Ok(nonce)
            }
            _ => {
                // the connection back in the pool before the second look
                drop(client);
                Err(self.unfenced(round).await)
            }
        }
    }

    async fn add_attempt(
        &self,
        key: KeyRef,
        round: RoundKey,
        a: &AttemptRecord,
    ) -> Result<(), StoreError> {
        let (market, market_id) = (round.market, round.id.get());
        let (signer, chain) = key_params(&key);
        // the round's pointer to its newest attempt and the attempt in one fenced
        // statement (one round trip): the attempt is stored only if the fenced update of
        // the round touched it
        self.fenced_statement(
            round,
            "WITH r AS (UPDATE rounds SET submit_tx = $3::text, updated_at = $4::bigint
                        WHERE market = $1::text AND market_id = $2::text
                          AND holder = $15::text AND term = $16::bigint
                        RETURNING market)
             INSERT INTO tx_attempts (signer, chain_id, nonce, seq, tx_hash, raw, max_fee, max_priority_fee, gas_limit, sent_block, created_at)
             SELECT $5::text, $6::bigint, $7::bigint, $8::integer, $3::text, $9::bytea, $10::text, $11::text,
                    $12::bigint, $13::bigint, $14::bigint FROM r",
            &[
                &Addr(market),
                &Num(market_id),
                &Hash(a.tx_hash),
                &(now() as i64),
                &signer,
                &chain,
                &(a.nonce as i64),
                &(a.seq as i32),
                &a.raw.as_ref(),
                &Wei(a.max_fee_per_gas),
                &Wei(a.max_priority_fee_per_gas),
                &(a.gas_limit as i64),
                &a.sent_block.map(|b| b as i64),
                &(a.created_at as i64),
            ],
        )
        .await
    }

    async fn mark_attempt_sent(
        &self,
        key: KeyRef,
        round: RoundKey,
        nonce: u64,
        seq: u32,
        block: u64,
    ) -> Result<(), StoreError> {
        let (market, market_id) = (round.market, round.id.get());
        let (signer, chain) = key_params(&key);
        // one fenced statement (one round trip): the round's row is share-locked, and
        // held by this node at its term, while the attempt is marked
        self.fenced_statement(
            round,
            "WITH r AS (SELECT 1 FROM rounds
                        WHERE market = $6::text AND market_id = $7::text
                          AND holder = $8::text AND term = $9::bigint
                        FOR SHARE)
             UPDATE tx_attempts SET sent_block = COALESCE(sent_block, $5::bigint) FROM r
             WHERE signer = $1::text AND chain_id = $2::bigint AND nonce = $3::bigint AND seq = $4::integer",
            &[
                &signer,
                &chain,
                &(nonce as i64),
                &(seq as i32),
                &(block as i64),
                &Addr(market),
                &Num(market_id),
            ],
        )
        .await
    }

    async fn finish_nonce(
        &self,
        key: KeyRef,
        nonce: u64,
        state: NonceState,
        mined: Option<MinedAt>,
        detail: Option<&str>,
    ) -> Result<(), StoreError> {
        let (signer, chain) = key_params(&key);
        let round = self.nonce_round(key, nonce).await?;
        let (market, market_id) = (round.market, round.id.get());
        // the nonce's end and the round's pointer to the mined transaction in one fenced
        // statement (one round trip): the nonce is ended only if the fenced update of the
        // round touched it
        let ended = self
            .fenced_statement(
                round,
                "WITH r AS (UPDATE rounds SET submit_tx = COALESCE($5::text, submit_tx)
                        WHERE market = $10::text AND market_id = $11::text
                          AND holder = $12::text AND term = $13::bigint
                        RETURNING 1)
             UPDATE tx_nonces SET state = $4::text, mined_tx = $5::text, mined_block = $6::bigint,
                    detail = $7::text, updated_at = $8::bigint, mined_hash = $9::text
             FROM r WHERE signer = $1::text AND chain_id = $2::bigint AND nonce = $3::bigint",
                &[
                    &signer,
                    &chain,
                    &(nonce as i64),
                    &state,
                    &mined.map(|m| Hash(m.tx)),
                    &mined.map(|m| m.block as i64),
                    &detail,
                    &(now() as i64),
                    &mined.map(|m| Hash(m.block_hash)),
                    &Addr(market),
                    &Num(market_id),
                ],
            )
            .await;
        if ended.is_ok() {
            self.reserved(|m| m.remove(&(key, nonce)));
        }
        ended
    }

    async fn pending_nonce_of(
        &self,
        key: KeyRef,
        round: RoundKey,
    ) -> Result<Option<NonceRecord>, StoreError> {
        let (market, market_id) = (round.market, round.id.get());
        let (signer, chain) = key_params(&key);
        let client = self.client().await?;
        client
            .query_opt(
                &client.prepare_cached(&format!(
                    "{KEYED_NONCE_SELECT} WHERE signer = $1 AND chain_id = $2 AND market = $3 AND market_id = $4 AND state = 'pending'
                     ORDER BY nonce LIMIT 1"
                )).await.map_err(pg_err)?,
                &[&signer, &chain, &Addr(market), &Num(market_id)],
            )
            .await
            .map_err(pg_err)?
            .map(|r| read_nonce(&r))
            .transpose()
    }

    async fn nonce_record(
        &self,
        key: KeyRef,
        nonce: u64,
    ) -> Result<Option<NonceRecord>, StoreError> {
        let (signer, chain) = key_params(&key);
        let client = self.client().await?;
        client
            .query_opt(
                &client.prepare_cached(NONCE_SQL).await.map_err(pg_err)?,
                &[&signer, &chain, &(nonce as i64)],
            )
            .await
            .map_err(pg_err)?
            .map(|r| read_nonce(&r))
            .transpose()
    }

    async fn pending_nonces(&self, key: KeyRef) -> Result<Vec<NonceRecord>, StoreError> {
        let (signer, chain) = key_params(&key);
        let client = self.client().await?;
        let rows = client
            .query(
                &client.prepare_cached(&format!(
                    "{KEYED_NONCE_SELECT} WHERE signer = $1 AND chain_id = $2 AND state = 'pending' ORDER BY nonce"
                )).await.map_err(pg_err)?,
                &[&signer, &chain],
            )
            .await
            .map_err(pg_err)?;
        rows.iter().map(read_nonce).collect()
    }

    async fn attempts(&self, key: KeyRef, nonce: u64) -> Result<Vec<AttemptRecord>, StoreError> {
        let (signer, chain) = key_params(&key);
        let client = self.client().await?;
        let rows = client
            .query(
                &client.prepare_cached(ATTEMPTS_SQL).await.map_err(pg_err)?,
                &[&signer, &chain, &(nonce as i64)],
            )
            .await
            .map_err(pg_err)?;
        rows.iter().map(read_attempt).collect()
    }

    async fn nonce_with_attempts(
        &self,
        key: KeyRef,
        nonce: u64,
    ) -> Result<(Option<NonceRecord>, Vec<AttemptRecord>), StoreError> {
        let (signer, chain) = key_params(&key);
        let client = self.client().await?;
        let record = client.prepare_cached(NONCE_SQL).await.map_err(pg_err)?;
        let attempts = client.prepare_cached(ATTEMPTS_SQL).await.map_err(pg_err)?;
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] =
            [&signer, &chain, &(nonce as i64)];
        let (record, attempts) = tokio::join!(
            client.query_opt(&record, &params),
            client.query(&attempts, &params)
        );
        let record = record
            .map_err(pg_err)?
            .map(|r| read_nonce(&r))
            .transpose()?;
        let attempts = attempts
            .map_err(pg_err)?
            .iter()
            .map(read_attempt)
            .collect::<Result<_, _>>()?;
        Ok((record, attempts))
    }

    async fn highest_nonce(&self, key: KeyRef) -> Result<Option<u64>, StoreError> {
        let (signer, chain) = key_params(&key);
        let client = self.client().await?;
        let h: Option<i64> = client
            .query_one(
                &client
                    .prepare_cached(
                        "SELECT MAX(nonce) FROM tx_nonces WHERE signer = $1 AND chain_id = $2",
                    )
                    .await
                    .map_err(pg_err)?,
                &[&signer, &chain],
            )
            .await
            .map_err(pg_err)
            .and_then(|r| col(&r, 0))?;
        Ok(h.map(|h| h as u64))
    }
}

#[async_trait::async_trait]
impl RoundTxs for PgStore {
    async fn tx_history(
        &self,
        round: RoundKey,
    ) -> Result<Vec<(NonceRecord, Vec<AttemptRecord>)>, StoreError> {
        let (market, market_id) = (round.market, round.id.get());
        let (m, id) = (Addr(market), Num(market_id));
        let client = self.client().await?;
        let nonces = client
            .prepare_cached(&format!(
                "{KEYED_NONCE_SELECT} WHERE market = $1 AND market_id = $2 ORDER BY created_at, nonce"
            ))
            .await
            .map_err(pg_err)?;
        let attempts = client
            .prepare_cached(&format!(
                "{KEYED_ATTEMPT_SELECT} WHERE (signer, chain_id, nonce) IN
                   (SELECT signer, chain_id, nonce FROM tx_nonces WHERE market = $1 AND market_id = $2)
                 ORDER BY seq"
            ))
            .await
            .map_err(pg_err)?;
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&m, &id];
        let (nonces, attempts) = tokio::join!(
            client.query(&nonces, &params),
            client.query(&attempts, &params)
        );
        let mut out = nonces
            .map_err(pg_err)?
            .iter()
            .map(|r| Ok(((read_key(r, 13)?, read_nonce(r)?), Vec::new())))
            .collect::<Result<Vec<_>, StoreError>>()?;
        for r in attempts.map_err(pg_err)?.iter() {
            let (key, a) = (read_key(r, 9)?, read_attempt(r)?);
            if let Some((_, list)) = out
                .iter_mut()
                .find(|((k, n), _)| *k == key && n.nonce == a.nonce)
            {
                list.push(a);
            }
        }
        Ok(out.into_iter().map(|((_, n), a)| (n, a)).collect())
    }

    async fn pending_nonces_of_round(
        &self,
        round: RoundKey,
    ) -> Result<Vec<(KeyRef, NonceRecord)>, StoreError> {
        let (market, market_id) = (round.market, round.id.get());
        let client = self.client().await?;
        let rows = client
            .query(
                &client
                    .prepare_cached(&format!(
                        "{KEYED_NONCE_SELECT} WHERE market = $1 AND market_id = $2 AND state = 'pending'
                         ORDER BY created_at, nonce"
                    ))
                    .await
                    .map_err(pg_err)?,
                &[&Addr(market), &Num(market_id)],
            )
            .await
            .map_err(pg_err)?;
        rows.iter()
            .map(|r| Ok((read_key(r, 13)?, read_nonce(r)?)))
            .collect()
    }
}
