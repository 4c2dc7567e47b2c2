//! The transaction manager's durable state: one row per nonce a signing key reserved
//! (`tx_nonces`, with the payload it was reserved for) and one row per signed attempt at
//! that nonce (`tx_attempts`: hash, raw bytes, fees, when it was sent). A nonce is
//! reserved in the same SQLite transaction that moves its round to `submitted`, and an
//! attempt is stored before it is broadcast, so a crash at any point leaves enough to
//! find or finish what was sent.

use super::{Store, StoreError, corrupt, now, parse_hash, parse_market};
use alloy_primitives::{Address, B256, Bytes, U256};
use rusqlite::{OptionalExtension, params};
use serde::Serialize;
use std::str::FromStr;

pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS tx_nonces (
    signer TEXT NOT NULL, chain_id INTEGER NOT NULL, nonce INTEGER NOT NULL,
    market TEXT NOT NULL, market_id TEXT NOT NULL, to_addr TEXT NOT NULL, calldata BLOB NOT NULL,
    gas_limit INTEGER NOT NULL, state TEXT NOT NULL, mined_tx TEXT, mined_block INTEGER,
    detail TEXT, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL,
    PRIMARY KEY (signer, chain_id, nonce));
CREATE INDEX IF NOT EXISTS tx_nonces_market ON tx_nonces (market, market_id);
CREATE TABLE IF NOT EXISTS tx_attempts (
    signer TEXT NOT NULL, chain_id INTEGER NOT NULL, nonce INTEGER NOT NULL, seq INTEGER NOT NULL,
    tx_hash TEXT NOT NULL, raw BLOB NOT NULL, max_fee TEXT NOT NULL, max_priority_fee TEXT NOT NULL,
    gas_limit INTEGER NOT NULL, sent_block INTEGER, created_at INTEGER NOT NULL,
    PRIMARY KEY (signer, chain_id, nonce, seq));
";

/// Where a reserved nonce is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum NonceState {
    /// Reserved for a payload; attempts may or may not exist yet.
    Pending,
    /// One of our attempts was mined and is `confirmations` deep.
    Mined,
    /// The chain consumed the nonce with a transaction that is none of our attempts.
    Lost,
}

impl NonceState {
    /// The state's name as stored and shown (`pending`, `mined`, `lost`).
    pub fn as_str(self) -> &'static str {
        match self {
            NonceState::Pending => "pending",
            NonceState::Mined => "mined",
            NonceState::Lost => "lost",
        }
    }
    pub(crate) fn parse(s: &str) -> Result<Self, StoreError> {
        [NonceState::Pending, NonceState::Mined, NonceState::Lost]
            .into_iter()
            .find(|x| x.as_str() == s)
            .ok_or_else(|| StoreError::Corrupt(format!("unknown nonce state {s:?}")))
    }
}

/// A signing key on a chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyRef {
    /// The key's address.
    pub signer: Address,
    /// The chain it signs for.
    pub chain_id: u64,
}

/// What a nonce was reserved for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TxPayload {
    /// The market contract of the round the transaction resolves.
    pub market: Address,
    /// The market's id in its contract.
    pub market_id: U256,
    /// The contract the transaction calls.
    pub to: Address,
    /// The transaction's input.
    pub calldata: Bytes,
    /// The gas limit every attempt is signed with, in gas units.
    pub gas_limit: u64,
}

/// A reserved nonce.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NonceRecord {
    /// The nonce.
    pub nonce: u64,
    /// Where it is: pending, mined or lost.
    pub state: NonceState,
    /// What it was reserved for.
    #[serde(flatten)]
    pub payload: TxPayload,
    /// Our attempt that was mined at it.
    pub mined_tx: Option<B256>,
    /// The block that attempt is in.
    pub mined_block: Option<u64>,
    /// The hash of the block the mined attempt is in (how the finality watch tells that
    /// block is still canonical; `None` for nonces mined before this was recorded).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mined_hash: Option<B256>,
    /// Why it ended as it did (a lost nonce says what took it).
    pub detail: Option<String>,
    /// When it was reserved, in unix seconds.
    pub created_at: u64,
    /// When it last changed, in unix seconds.
    pub updated_at: u64,
}

/// Where one of our attempts was mined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MinedAt {
    /// The attempt's transaction hash.
    pub tx: B256,
    /// The number of the block it is in.
    pub block: u64,
    /// The hash of that block.
    pub block_hash: B256,
}

/// One signed attempt at a nonce.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AttemptRecord {
    /// The nonce it is signed at.
    pub nonce: u64,
    /// 0 for the first attempt, +1 for each replacement.
    pub seq: u32,
    /// Its transaction hash.
    pub tx_hash: B256,
    /// The signed transaction, as broadcast (EIP-2718 bytes).
    #[serde(skip)]
    pub raw: Bytes,
    /// Its EIP-1559 max fee, in wei per gas.
    pub max_fee_per_gas: u128,
    /// Its EIP-1559 priority fee (tip), in wei per gas.
    pub max_priority_fee_per_gas: u128,
    /// Its gas limit, in gas units.
    pub gas_limit: u64,
    /// The chain head when it was first broadcast (`None`: stored, not yet sent).
    pub sent_block: Option<u64>,
    /// When it was signed, in unix seconds.
    pub created_at: u64,
}

/// The `tx_nonces` columns [`NonceRow`] reads, in its order.
macro_rules! nonce_columns {
    () => {
        "nonce, state, market, market_id, to_addr, calldata, gas_limit, mined_tx, mined_block, detail, created_at, updated_at, mined_hash"
    };
}

/// The `tx_nonces` columns [`NonceRow`] reads.
pub(crate) const NONCE_SELECT: &str = concat!("SELECT ", nonce_columns!(), " FROM tx_nonces");

/// [`NONCE_SELECT`] with the key after the row's columns (signer 13, chain id 14).
pub(crate) const KEYED_NONCE_SELECT: &str = concat!(
    "SELECT ",
    nonce_columns!(),
    ", signer, chain_id FROM tx_nonces"
);

/// A `tx_nonces` row as either backend reads it, before its text is parsed.
pub(crate) struct NonceRow {
    pub nonce: i64,
    pub state: String,
    pub market: String,
    pub market_id: String,
    pub to: String,
    pub calldata: Vec<u8>,
    pub gas_limit: i64,
    pub mined_tx: Option<String>,
    pub mined_block: Option<i64>,
    pub detail: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    pub mined_hash: Option<String>,
}

impl NonceRow {
    pub(crate) fn parse(self) -> Result<NonceRecord, StoreError> {
        let (market, market_id) = parse_market(&self.market, &self.market_id)?;
        Ok(NonceRecord {
            nonce: self.nonce as u64,
            state: NonceState::parse(&self.state)?,
            payload: TxPayload {
                market,
                market_id,
                to: Address::from_str(&self.to).map_err(|e| corrupt("to", e))?,
                calldata: Bytes::from(self.calldata),
                gas_limit: self.gas_limit as u64,
            },
            mined_tx: parse_hash(self.mined_tx, "mined_tx")?,
            mined_block: self.mined_block.map(|b| b as u64),
            mined_hash: parse_hash(self.mined_hash, "mined_hash")?,
            detail: self.detail,
            created_at: self.created_at as u64,
            updated_at: self.updated_at as u64,
        })
    }
}

fn read_nonce(r: &rusqlite::Row<'_>) -> rusqlite::Result<Result<NonceRecord, StoreError>> {
    Ok(NonceRow {
        nonce: r.get(0)?,
        state: r.get(1)?,
        market: r.get(2)?,
        market_id: r.get(3)?,
        to: r.get(4)?,
        calldata: r.get(5)?,
        gas_limit: r.get(6)?,
        mined_tx: r.get(7)?,
        mined_block: r.get(8)?,
        detail: r.get(9)?,
        created_at: r.get(10)?,
        updated_at: r.get(11)?,
        mined_hash: r.get(12)?,
    }
    .parse())
}

/// The `tx_attempts` columns [`AttemptRow`] reads, in its order.
macro_rules! attempt_columns {
    () => {
        "nonce, seq, tx_hash, raw, max_fee, max_priority_fee, gas_limit, sent_block, created_at"
    };
}

/// The `tx_attempts` columns [`AttemptRow`] reads.
pub(crate) const ATTEMPT_SELECT: &str = concat!("SELECT ", attempt_columns!(), " FROM tx_attempts");

/// [`ATTEMPT_SELECT`] with the key after the row's columns (signer 9, chain id 10).
pub(crate) const KEYED_ATTEMPT_SELECT: &str = concat!(
    "SELECT ",
    attempt_columns!(),
    ", signer, chain_id FROM tx_attempts"
);

/// A `tx_attempts` row as either backend reads it, before its text is parsed.
pub(crate) struct AttemptRow {
    pub nonce: i64,
    pub seq: i64,
    pub tx_hash: String,
    pub raw: Vec<u8>,
    pub max_fee: String,
    pub max_priority_fee: String,
    pub gas_limit: i64,
    pub sent_block: Option<i64>,
    pub created_at: i64,
}

impl AttemptRow {
    pub(crate) fn parse(self) -> Result<AttemptRecord, StoreError> {
        Ok(AttemptRecord {
            nonce: self.nonce as u64,
            seq: self.seq as u32,
            tx_hash: B256::from_str(&self.tx_hash).map_err(|e| corrupt("tx_hash", e))?,
            raw: Bytes::from(self.raw),
            max_fee_per_gas: self.max_fee.parse().map_err(|e| corrupt("max_fee", e))?,
            max_priority_fee_per_gas: self
                .max_priority_fee
                .parse()
                .map_err(|e| corrupt("max_priority_fee", e))?,
            gas_limit: self.gas_limit as u64,
            sent_block: self.sent_block.map(|b| b as u64),
            created_at: self.created_at as u64,
        })
    }
}

fn read_attempt(r: &rusqlite::Row<'_>) -> rusqlite::Result<Result<AttemptRecord, StoreError>> {
    Ok(AttemptRow {
        nonce: r.get(0)?,
        seq: r.get(1)?,
        tx_hash: r.get(2)?,
        raw: r.get(3)?,
        max_fee: r.get(4)?,
        max_priority_fee: r.get(5)?,
        gas_limit: r.get(6)?,
        sent_block: r.get(7)?,
        created_at: r.get(8)?,
    }
    .parse())
}

fn collect<T>(
    rows: impl Iterator<Item = rusqlite::Result<Result<T, StoreError>>>,
) -> Result<Vec<T>, StoreError> {
    rows.map(|r| r.map_err(StoreError::from).and_then(|x| x))
        .collect()
}

impl Store {
    /// Reserves the next nonce of `key` for `payload` and moves the payload's round to
    /// `submitted`, in one transaction. The nonce is
    /// max(`chain_pending`, the highest nonce this store holds for the key + 1), so it is
    /// never handed to a second payload, whatever the chain's pool shows.
    pub fn reserve_nonce(
        &self,
        key: KeyRef,
        chain_pending: u64,
        payload: &TxPayload,
    ) -> Result<u64, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let highest: Option<i64> = tx
            .prepare_cached("SELECT MAX(nonce) FROM tx_nonces WHERE signer = ?1 AND chain_id = ?2")?
            .query_row(params![key.signer.to_string(), key.chain_id as i64], |r| {
                r.get(0)
            })?;
        let nonce = highest.map_or(chain_pending, |h| chain_pending.max(h as u64 + 1));
        let t = now() as i64;
        tx.prepare_cached("INSERT INTO tx_nonces (signer, chain_id, nonce, market, market_id, to_addr, calldata, gas_limit, state, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 'pending', ?9, ?9)")?.execute(params![
                key.signer.to_string(),
                key.chain_id as i64,
                nonce as i64,
                payload.market.to_string(),
                payload.market_id.to_string(),
                payload.to.to_string(),
                payload.calldata.as_ref(),
                payload.gas_limit as i64,
                t
            ],
        )?;
        let n = tx.prepare_cached("UPDATE rounds SET state = 'submitted', reason = NULL, updated_at = ?3 WHERE market = ?1 AND market_id = ?2")?.execute(params![payload.market.to_string(), payload.market_id.to_string(), t],
        )?;
        if n == 0 {
            return Err(StoreError::NoRound(payload.market, payload.market_id));
        }
        tx.commit()?;
        Ok(nonce)
    }

    /// Stores a signed attempt (before it is broadcast), synced to disk. The round's
    /// `submit_tx` points at the newest attempt.
    pub fn add_attempt(
        &self,
        key: KeyRef,
        market: Address,
        market_id: U256,
        a: &AttemptRecord,
    ) -> Result<(), StoreError> {
        // on disk (with the nonce's reservation before it) before the broadcast: a
        // power loss must not forget a transaction that may be on the chain
        self.in_durable_tx(|tx| {
            tx.prepare_cached("INSERT INTO tx_attempts (signer, chain_id, nonce, seq, tx_hash, raw, max_fee, max_priority_fee, gas_limit, sent_block, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)")?.execute(params![
                    key.signer.to_string(),
                    key.chain_id as i64,
                    a.nonce as i64,
                    a.seq as i64,
                    a.tx_hash.to_string(),
                    a.raw.as_ref(),
                    a.max_fee_per_gas.to_string(),
                    a.max_priority_fee_per_gas.to_string(),
                    a.gas_limit as i64,
                    a.sent_block.map(|b| b as i64),
                    a.created_at as i64
                ],
            )?;
            tx.prepare_cached("UPDATE rounds SET submit_tx = ?3, updated_at = ?4 WHERE market = ?1 AND market_id = ?2")?.execute(params![
                    market.to_string(),
                    market_id.to_string(),
                    a.tx_hash.to_string(),
                    now() as i64
                ],
            )?;
            Ok(())
        })
    }

    /// Records the head at which an attempt was first broadcast.
    pub fn mark_attempt_sent(
        &self,
        key: KeyRef,
        nonce: u64,
        seq: u32,
        block: u64,
    ) -> Result<(), StoreError> {
        self.conn()
            .prepare_cached(
                "UPDATE tx_attempts SET sent_block = COALESCE(sent_block, ?5)
             WHERE signer = ?1 AND chain_id = ?2 AND nonce = ?3 AND seq = ?4",
            )?
            .execute(params![
                key.signer.to_string(),
                key.chain_id as i64,
                nonce as i64,
                seq as i64,
                block as i64
            ])?;
        Ok(())
    }

    /// Ends a reservation: `Mined` (with our attempt that was mined) or `Lost`.
    pub fn finish_nonce(
        &self,
        key: KeyRef,
        nonce: u64,
        state: NonceState,
        mined: Option<MinedAt>,
        detail: Option<&str>,
    ) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        tx.prepare_cached("UPDATE tx_nonces SET state = ?4, mined_tx = ?5, mined_block = ?6, detail = ?7, updated_at = ?8, mined_hash = ?9
             WHERE signer = ?1 AND chain_id = ?2 AND nonce = ?3")?.execute(params![
                key.signer.to_string(),
                key.chain_id as i64,
                nonce as i64,
                state.as_str(),
                mined.map(|m| m.tx.to_string()),
                mined.map(|m| m.block as i64),
                detail,
                now() as i64,
                mined.map(|m| m.block_hash.to_string()),
            ],
        )?;
        if let Some(MinedAt { tx: h, .. }) = mined {
            tx.prepare_cached("UPDATE rounds SET submit_tx = ?1 WHERE (market, market_id) IN
                 (SELECT market, market_id FROM tx_nonces WHERE signer = ?2 AND chain_id = ?3 AND nonce = ?4)")?.execute(params![
                    h.to_string(),
                    key.signer.to_string(),
                    key.chain_id as i64,
                    nonce as i64
                ],
            )?;
        }
        tx.commit()?;
        Ok(())
    }

    /// The pending reservation of a market's round under `key`, if any.
    pub fn pending_nonce_of(
        &self,
        key: KeyRef,
        market: Address,
        market_id: U256,
    ) -> Result<Option<NonceRecord>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(&format!(
            "{NONCE_SELECT} WHERE signer = ?1 AND chain_id = ?2 AND market = ?3 AND market_id = ?4 AND state = 'pending'
             ORDER BY nonce LIMIT 1"
        ))?;
        stmt.query_row(
            params![
                key.signer.to_string(),
                key.chain_id as i64,
                market.to_string(),
                market_id.to_string()
            ],
            read_nonce,
        )
        .optional()?
        .transpose()
    }

    /// One reservation.
    pub fn nonce_record(&self, key: KeyRef, nonce: u64) -> Result<Option<NonceRecord>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(&format!(
            "{NONCE_SELECT} WHERE signer = ?1 AND chain_id = ?2 AND nonce = ?3"
        ))?;
        stmt.query_row(
            params![key.signer.to_string(), key.chain_id as i64, nonce as i64],
            read_nonce,
        )
        .optional()?
        .transpose()
    }

    /// Every pending reservation of `key`, lowest nonce first.
    pub fn pending_nonces(&self, key: KeyRef) -> Result<Vec<NonceRecord>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(&format!(
            "{NONCE_SELECT} WHERE signer = ?1 AND chain_id = ?2 AND state = 'pending' ORDER BY nonce"
        ))?;
        let rows = stmt.query_map(
            params![key.signer.to_string(), key.chain_id as i64],
            read_nonce,
        )?;
        collect(rows)
    }

    /// The attempts at one nonce, oldest first.
    pub fn attempts(&self, key: KeyRef, nonce: u64) -> Result<Vec<AttemptRecord>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(&format!(
            "{ATTEMPT_SELECT} WHERE signer = ?1 AND chain_id = ?2 AND nonce = ?3 ORDER BY seq"
        ))?;
        let rows = stmt.query_map(
            params![key.signer.to_string(), key.chain_id as i64, nonce as i64],
            read_attempt,
        )?;
        collect(rows)
    }

    /// A market's whole submission history, for any key: each reservation with its
    /// attempts, oldest first (`GET /rounds/{id}`, `cresolver rounds show`).
    pub fn tx_history(
        &self,
        market: Address,
        market_id: U256,
    ) -> Result<Vec<(NonceRecord, Vec<AttemptRecord>)>, StoreError> {
        self.round_nonces(market, market_id, false)?
            .into_iter()
            .map(|(key, rec)| {
                let attempts = self.attempts(key, rec.nonce)?;
                Ok((rec, attempts))
            })
            .collect()
    }

    /// The pending reservations of a round under any key (a cluster whose nodes hold
    /// different keys: the node that takes a round over finds the one its previous
    /// holder reserved).
    pub fn pending_nonces_of_round(
        &self,
        market: Address,
        market_id: U256,
    ) -> Result<Vec<(KeyRef, NonceRecord)>, StoreError> {
        self.round_nonces(market, market_id, true)
    }

    /// A round's reservations under any key (only the pending ones with `pending`),
    /// oldest first.
    fn round_nonces(
        &self,
        market: Address,
        market_id: U256,
        pending: bool,
    ) -> Result<Vec<(KeyRef, NonceRecord)>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(
            "SELECT signer, chain_id, nonce FROM tx_nonces WHERE market = ?1 AND market_id = ?2
             AND (?3 = 0 OR state = 'pending') ORDER BY created_at, nonce",
        )?;
        let keys: Vec<(String, i64, i64)> = stmt
            .query_map(
                params![market.to_string(), market_id.to_string(), pending as i64],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )?
            .collect::<Result<_, _>>()?;
        drop(stmt);
        drop(conn);
        let mut out = Vec::with_capacity(keys.len());
        for (signer, chain_id, nonce) in keys {
            let key = KeyRef {
                signer: Address::from_str(&signer).map_err(|e| corrupt("signer", e))?,
                chain_id: chain_id as u64,
            };
            if let Some(rec) = self.nonce_record(key, nonce as u64)? {
                out.push((key, rec));
            }
        }
        Ok(out)
    }

    /// The highest nonce this store holds for `key`.
    pub fn highest_nonce(&self, key: KeyRef) -> Result<Option<u64>, StoreError> {
        let h: Option<i64> = self
            .conn()
            .prepare_cached("SELECT MAX(nonce) FROM tx_nonces WHERE signer = ?1 AND chain_id = ?2")?
            .query_row(params![key.signer.to_string(), key.chain_id as i64], |r| {
                r.get(0)
            })?;
        Ok(h.map(|h| h as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(id: u64) -> TxPayload {
        TxPayload {
            market: Address::repeat_byte(1),
            market_id: U256::from(id),
            to: Address::repeat_byte(2),
            calldata: Bytes::from(vec![1, 2, 3]),
            gas_limit: 100_000,
        }
    }

    #[test]
    fn nonces_are_never_handed_out_twice() {
        let s = Store::in_memory().unwrap();
        let key = KeyRef {
            signer: Address::repeat_byte(9),
            chain_id: 31337,
        };
        for id in 1..=3u64 {
            s.manual_request(Address::repeat_byte(1), U256::from(id), "wf")
                .unwrap();
        }
        // the chain's pending count lags (a signed transaction not yet sent is invisible)
        assert_eq!(s.reserve_nonce(key, 5, &payload(1)).unwrap(), 5);
        assert_eq!(s.reserve_nonce(key, 5, &payload(2)).unwrap(), 6);
        // the chain moved past us (the key was used elsewhere)
        assert_eq!(s.reserve_nonce(key, 10, &payload(3)).unwrap(), 10);
        // another key is independent
        let other = KeyRef { chain_id: 1, ..key };
        assert_eq!(s.reserve_nonce(other, 0, &payload(1)).unwrap(), 0);
        assert_eq!(
            s.get(Address::repeat_byte(1), U256::from(2))
                .unwrap()
                .unwrap()
                .state,
            super::super::Stage::Submitted
        );
        let pending = s.pending_nonces(key).unwrap();
        assert_eq!(
            pending.iter().map(|n| n.nonce).collect::<Vec<_>>(),
            vec![5, 6, 10]
        );
        s.finish_nonce(key, 6, NonceState::Lost, None, Some("used elsewhere"))
            .unwrap();
        assert_eq!(
            s.pending_nonce_of(key, Address::repeat_byte(1), U256::from(2))
                .unwrap(),
            None
        );
        assert_eq!(s.highest_nonce(key).unwrap(), Some(10));
    }

    #[test]
    fn attempts_are_kept_in_order_with_fees() {
        let s = Store::in_memory().unwrap();
        let key = KeyRef {
            signer: Address::repeat_byte(9),
            chain_id: 31337,
        };
        s.manual_request(Address::repeat_byte(1), U256::from(1), "wf")
            .unwrap();
        let n = s.reserve_nonce(key, 0, &payload(1)).unwrap();
        for seq in 0..3u32 {
            s.add_attempt(
                key,
                Address::repeat_byte(1),
                U256::from(1),
                &AttemptRecord {
                    nonce: n,
                    seq,
                    tx_hash: B256::repeat_byte(seq as u8 + 1),
                    raw: Bytes::from(vec![seq as u8]),
                    max_fee_per_gas: u128::MAX - seq as u128,
                    max_priority_fee_per_gas: 7,
                    gas_limit: 1,
                    sent_block: None,
                    created_at: 0,
                },
            )
            .unwrap();
        }
        s.mark_attempt_sent(key, n, 1, 42).unwrap();
        s.mark_attempt_sent(key, n, 1, 50).unwrap();
        let a = s.attempts(key, n).unwrap();
        assert_eq!(a.len(), 3);
        assert_eq!(a[1].sent_block, Some(42), "first broadcast block is kept");
        assert_eq!(a[2].max_fee_per_gas, u128::MAX - 2);
        let r = s
            .get(Address::repeat_byte(1), U256::from(1))
            .unwrap()
            .unwrap();
        assert_eq!(r.submit_tx, Some(B256::repeat_byte(3)));
        s.finish_nonce(
            key,
            n,
            NonceState::Mined,
            Some(MinedAt {
                tx: B256::repeat_byte(2),
                block: 9,
                block_hash: B256::repeat_byte(0x99),
            }),
            None,
        )
        .unwrap();
        let h = s
            .tx_history(Address::repeat_byte(1), U256::from(1))
            .unwrap();
        assert_eq!(h.len(), 1);
        assert_eq!(h[0].0.state, NonceState::Mined);
        assert_eq!(h[0].0.mined_block, Some(9));
        let r = s
            .get(Address::repeat_byte(1), U256::from(1))
            .unwrap()
            .unwrap();
        assert_eq!(r.submit_tx, Some(B256::repeat_byte(2)), "the mined attempt");
    }
}
