//! The transaction manager's durable state on SQLite: one row per nonce a signing key
//! reserved (`tx_nonces`, with the payload it was reserved for) and one row per signed
//! attempt at that nonce (`tx_attempts`: hash, raw bytes, fees, when it was sent). A
//! nonce is reserved in the same transaction that moves its round to `submitted`, and
//! an attempt is stored (synced) before it is broadcast, so a crash at any point leaves
//! enough to find or finish what was sent. [`SqliteStore`]'s [`Nonces`] and
//! [`RoundTxs`].

use super::{SqliteStore, collect, opt_uint, uint};
use crate::RoundKey;
use crate::column::{Addr, Hash, Num, Wei};
use crate::{
    AttemptRecord, KeyRef, MinedAt, NonceRecord, NonceState, Nonces, RoundTxs, StoreError,
    TxPayload, now,
};
use alloy_primitives::Bytes;
use rusqlite::{Connection, OptionalExtension, params};

/// The `tx_nonces` columns [`read_nonce`] reads.
const NONCE_SELECT: &str = "SELECT nonce, state, market, market_id, to_addr, calldata, gas_limit, mined_tx, mined_block, detail, created_at, updated_at, mined_hash FROM tx_nonces";

/// The `tx_attempts` columns [`read_attempt`] reads.
const ATTEMPT_SELECT: &str = "SELECT nonce, seq, tx_hash, raw, max_fee, max_priority_fee, gas_limit, sent_block, created_at FROM tx_attempts";

/// A [`NONCE_SELECT`] row.
fn read_nonce(r: &rusqlite::Row<'_>) -> rusqlite::Result<NonceRecord> {
    Ok(NonceRecord {
        nonce: uint(r, 0)?,
        state: r.get(1)?,
        payload: TxPayload {
            market: r.get::<_, Addr>(2)?.0,
            market_id: r.get::<_, Num>(3)?.into(),
            to: r.get::<_, Addr>(4)?.0,
            calldata: Bytes::from(r.get::<_, Vec<u8>>(5)?),
            gas_limit: uint(r, 6)?,
        },
        mined_tx: r.get::<_, Option<Hash>>(7)?.map(|h| h.0),
        mined_block: opt_uint(r, 8)?,
        mined_hash: r.get::<_, Option<Hash>>(12)?.map(|h| h.0),
        detail: r.get(9)?,
        created_at: uint(r, 10)?,
        updated_at: uint(r, 11)?,
    })
}

/// An [`ATTEMPT_SELECT`] row.
fn read_attempt(r: &rusqlite::Row<'_>) -> rusqlite::Result<AttemptRecord> {
    Ok(AttemptRecord {
        nonce: uint(r, 0)?,
        seq: r.get(1)?,
        tx_hash: r.get::<_, Hash>(2)?.0,
        raw: Bytes::from(r.get::<_, Vec<u8>>(3)?),
        max_fee_per_gas: r.get::<_, Wei>(4)?.0,
        max_priority_fee_per_gas: r.get::<_, Wei>(5)?.0,
        gas_limit: uint(r, 6)?,
        sent_block: opt_uint(r, 7)?,
        created_at: uint(r, 8)?,
    })
}

/// One reservation of `key`.
fn nonce_record(
    c: &Connection,
    key: KeyRef,
    nonce: u64,
) -> Result<Option<NonceRecord>, StoreError> {
    Ok(c.prepare_cached(&format!(
        "{NONCE_SELECT} WHERE signer = ?1 AND chain_id = ?2 AND nonce = ?3"
    ))?
    .query_row(
        params![Addr(key.signer), key.chain_id as i64, nonce as i64],
        read_nonce,
    )
    .optional()?)
}

/// The attempts at one nonce of `key`, oldest first.
fn attempts(c: &Connection, key: KeyRef, nonce: u64) -> Result<Vec<AttemptRecord>, StoreError> {
    let mut stmt = c.prepare_cached(&format!(
        "{ATTEMPT_SELECT} WHERE signer = ?1 AND chain_id = ?2 AND nonce = ?3 ORDER BY seq"
    ))?;
    collect(stmt.query_map(
        params![Addr(key.signer), key.chain_id as i64, nonce as i64],
        read_attempt,
    )?)
}

/// A round's reservations under any key (only the pending ones with `pending`),
/// oldest first.
fn round_nonces(
    c: &Connection,
    round: RoundKey,
    pending: bool,
) -> Result<Vec<(KeyRef, NonceRecord)>, StoreError> {
    let (market, market_id) = (round.market, round.id.get());
    let mut stmt = c.prepare_cached(
        "SELECT nonce, state, market, market_id, to_addr, calldata, gas_limit, mined_tx, mined_block, detail, created_at, updated_at, mined_hash,
                signer, chain_id
         FROM tx_nonces WHERE market = ?1 AND market_id = ?2
         AND (?3 = 0 OR state = 'pending') ORDER BY created_at, nonce",
    )?;
    let rows = stmt.query_map(params![Addr(market), Num(market_id), pending as i64], |r| {
        let key = KeyRef {
            signer: r.get::<_, Addr>(13)?.0,
            chain_id: uint(r, 14)?,
        };
        Ok((key, read_nonce(r)?))
    })?;
    collect(rows)
}

/// The highest nonce this store holds for `key`.
fn highest_nonce(c: &Connection, key: KeyRef) -> Result<Option<u64>, StoreError> {
    Ok(
        c.prepare_cached("SELECT MAX(nonce) FROM tx_nonces WHERE signer = ?1 AND chain_id = ?2")?
            .query_row(params![Addr(key.signer), key.chain_id as i64], |r| {
                opt_uint(r, 0)
            })?,
    )
}

#[async_trait::async_trait]
impl Nonces for SqliteStore {
    async fn reserve_nonce(
        &self,
        key: KeyRef,
        chain_pending: u64,
        payload: &TxPayload,
    ) -> Result<u64, StoreError> {
        let p = payload.clone();
        self.run(move |db| {
            db.in_tx(|tx| {
                let highest = highest_nonce(tx, key)?;
                let nonce = highest.map_or(chain_pending, |h| chain_pending.max(h + 1));
                let t = now() as i64;
                tx.prepare_cached("INSERT INTO tx_nonces (signer, chain_id, nonce, market, market_id, to_addr, calldata, gas_limit, state, created_at, updated_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 'pending', ?9, ?9)")?.execute(params![
                        Addr(key.signer),
                        key.chain_id as i64,
                        nonce as i64,
                        Addr(p.market),
                        Num::from(p.market_id),
                        Addr(p.to),
                        p.calldata.as_ref(),
                        p.gas_limit as i64,
                        t
                    ])?;
                let n = tx.prepare_cached("UPDATE rounds SET state = 'submitted', reason = NULL, updated_at = ?3 WHERE market = ?1 AND market_id = ?2")?
                    .execute(params![Addr(p.market), Num::from(p.market_id), t])?;
                if n == 0 {
                    return Err(StoreError::NoRound(p.key()));
                }
                Ok(nonce)
            })
        })
        .await
    }

    async fn add_attempt(
        &self,
        key: KeyRef,
        round: RoundKey,
        a: &AttemptRecord,
    ) -> Result<(), StoreError> {
        let (market, market_id) = (round.market, round.id.get());
        let a = a.clone();
        // on disk (with the nonce's reservation before it) before the broadcast: a
        // power loss must not forget a transaction that may be on the chain
        self.run(move |db| {
            db.in_durable_tx(|tx| {
                tx.prepare_cached("INSERT INTO tx_attempts (signer, chain_id, nonce, seq, tx_hash, raw, max_fee, max_priority_fee, gas_limit, sent_block, created_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)")?.execute(params![
                        Addr(key.signer),
                        key.chain_id as i64,
                        a.nonce as i64,
                        a.seq as i64,
                        Hash(a.tx_hash),
                        a.raw.as_ref(),
                        Wei(a.max_fee_per_gas),
                        Wei(a.max_priority_fee_per_gas),
                        a.gas_limit as i64,
                        a.sent_block.map(|b| b as i64),
                        a.created_at as i64
                    ])?;
                tx.prepare_cached("UPDATE rounds SET submit_tx = ?3, updated_at = ?4 WHERE market = ?1 AND market_id = ?2")?
                    .execute(params![Addr(market), Num(market_id), Hash(a.tx_hash), now() as i64])?;
                Ok(())
            })
        })
        .await
    }

    async fn mark_attempt_sent(
        &self,
        key: KeyRef,
        _round: RoundKey,
        nonce: u64,
        seq: u32,
        block: u64,
    ) -> Result<(), StoreError> {
        self.run(move |db| {
            db.conn()
                .prepare_cached(
                    "UPDATE tx_attempts SET sent_block = COALESCE(sent_block, ?5)
                     WHERE signer = ?1 AND chain_id = ?2 AND nonce = ?3 AND seq = ?4",
                )?
                .execute(params![
                    Addr(key.signer),
                    key.chain_id as i64,
                    nonce as i64,
                    seq as i64,
                    block as i64
                ])?;
            Ok(())
        })
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
        let detail = detail.map(str::to_string);
        self.run(move |db| {
            db.in_tx(|tx| {
                tx.prepare_cached("UPDATE tx_nonces SET state = ?4, mined_tx = ?5, mined_block = ?6, detail = ?7, updated_at = ?8, mined_hash = ?9
                     WHERE signer = ?1 AND chain_id = ?2 AND nonce = ?3")?.execute(params![
                        Addr(key.signer),
                        key.chain_id as i64,
                        nonce as i64,
                        state,
                        mined.map(|m| Hash(m.tx)),
                        mined.map(|m| m.block as i64),
                        detail,
                        now() as i64,
                        mined.map(|m| Hash(m.block_hash)),
                    ])?;
                if let Some(m) = mined {
                    tx.prepare_cached("UPDATE rounds SET submit_tx = ?1 WHERE (market, market_id) IN
                         (SELECT market, market_id FROM tx_nonces WHERE signer = ?2 AND chain_id = ?3 AND nonce = ?4)")?
                        .execute(params![Hash(m.tx), Addr(key.signer), key.chain_id as i64, nonce as i64])?;
                }
                Ok(())
            })
        })
        .await
    }

    async fn pending_nonce_of(
        &self,
        key: KeyRef,
        round: RoundKey,
    ) -> Result<Option<NonceRecord>, StoreError> {
        let (market, market_id) = (round.market, round.id.get());
        self.run(move |db| {
            Ok(db
                .conn()
                .prepare_cached(&format!(
                    "{NONCE_SELECT} WHERE signer = ?1 AND chain_id = ?2 AND market = ?3 AND market_id = ?4 AND state = 'pending'
                     ORDER BY nonce LIMIT 1"
                ))?
                .query_row(
                    params![Addr(key.signer), key.chain_id as i64, Addr(market), Num(market_id)],
                    read_nonce,
                )
                .optional()?)
        })
        .await
    }

    async fn nonce_record(
        &self,
        key: KeyRef,
        nonce: u64,
    ) -> Result<Option<NonceRecord>, StoreError> {
        self.run(move |db| nonce_record(&db.conn(), key, nonce))
            .await
    }

    async fn pending_nonces(&self, key: KeyRef) -> Result<Vec<NonceRecord>, StoreError> {
        self.run(move |db| {
            let conn = db.conn();
            let mut stmt = conn.prepare_cached(&format!(
                "{NONCE_SELECT} WHERE signer = ?1 AND chain_id = ?2 AND state = 'pending' ORDER BY nonce"
            ))?;
            collect(stmt.query_map(params![Addr(key.signer), key.chain_id as i64], read_nonce)?)
        })
        .await
    }

    async fn attempts(&self, key: KeyRef, nonce: u64) -> Result<Vec<AttemptRecord>, StoreError> {
        self.run(move |db| attempts(&db.conn(), key, nonce)).await
    }

    async fn nonce_with_attempts(
        &self,
        key: KeyRef,
        nonce: u64,
    ) -> Result<(Option<NonceRecord>, Vec<AttemptRecord>), StoreError> {
        self.run(move |db| {
            let conn = db.conn();
            Ok((
                nonce_record(&conn, key, nonce)?,
                attempts(&conn, key, nonce)?,
            ))
        })
        .await
    }

    async fn highest_nonce(&self, key: KeyRef) -> Result<Option<u64>, StoreError> {
        self.run(move |db| highest_nonce(&db.conn(), key)).await
    }
}

#[async_trait::async_trait]
impl RoundTxs for SqliteStore {
    async fn tx_history(
        &self,
        round: RoundKey,
    ) -> Result<Vec<(NonceRecord, Vec<AttemptRecord>)>, StoreError> {
        self.run(move |db| {
            let conn = db.conn();
            round_nonces(&conn, round, false)?
                .into_iter()
                .map(|(key, rec)| {
                    let attempts = attempts(&conn, key, rec.nonce)?;
                    Ok((rec, attempts))
                })
                .collect()
        })
        .await
    }

    async fn pending_nonces_of_round(
        &self,
        round: RoundKey,
    ) -> Result<Vec<(KeyRef, NonceRecord)>, StoreError> {
        self.run(move |db| round_nonces(&db.conn(), round, true))
            .await
    }
}
