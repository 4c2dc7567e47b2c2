//! Done rounds and what follows them: the finality watch's conditional transitions
//! (`confirmed` → `finalized`, `confirmed` → `submitted` when a reorg removed the
//! resolution), new attempts of done rounds (the old attempt kept in `round_attempts`),
//! and node settings. None of these holds a lease: a done round has no holder, and every
//! transition is conditional on the state it leaves, so the nodes of a cluster may all
//! try and exactly one succeeds. The SQL is shared with the PostgreSQL store.

use super::{KeyRef, MinedAt, Stage, Store, StoreError, corrupt, now, parse_hash, parse_market};
use alloy_primitives::{Address, B256, U256};
use rusqlite::{OptionalExtension, params};
use serde::Serialize;
use std::str::FromStr;

/// Copies a round's current attempt into `round_attempts` before it is replaced by a
/// new one (both backends; `?1`/`$1` market, `?2`/`$2` market id, `?3`/`$3` now).
pub(crate) const ARCHIVE_SQL: &str = "INSERT INTO round_attempts (market, market_id, attempt, state, reason, request_tx, request_block, submit_tx, outcome, ended_at)
     SELECT market, market_id, attempt, state, reason, request_tx, request_block, submit_tx, outcome, CAST(?3 AS BIGINT) FROM rounds
     WHERE market = ?1 AND market_id = ?2 ON CONFLICT DO NOTHING";

/// A round's earlier attempt, kept when a new request started another one.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct PastAttempt {
    /// Its number: 1 for the market's first attempt.
    pub attempt: u32,
    /// The state it ended in.
    pub state: Stage,
    /// Why it ended there, when a reason was recorded.
    #[schema(required = true)]
    pub reason: Option<String>,
    /// The transaction of the request log that started it (`None`: a manual request).
    #[schema(required = true, value_type = Option<String>, pattern = "^0x[0-9a-f]{64}$")]
    pub request_tx: Option<B256>,
    /// The block it was judged at.
    #[schema(required = true)]
    pub request_block: Option<u64>,
    /// Its newest submission transaction, when it signed one.
    #[schema(required = true, value_type = Option<String>, pattern = "^0x[0-9a-f]{64}$")]
    pub submit_tx: Option<B256>,
    /// Its transcript, when it got that far.
    #[schema(required = true, value_type = Option<Object>)]
    pub outcome: Option<serde_json::Value>,
    /// When the next attempt replaced it, in unix seconds.
    pub ended_at: u64,
}

/// A `confirmed` round that the finality watch follows: the round and, when the store
/// holds it, the nonce whose mined attempt resolved the market.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watched {
    /// The market contract.
    pub market: Address,
    /// The market's id in its contract.
    pub market_id: U256,
    /// The round's current attempt.
    pub attempt: u32,
    /// The key and nonce of the mined transaction, with where it was mined.
    pub mined: Option<(KeyRef, u64, MinedAt)>,
    /// The block a legacy record was mined in, without its hash.
    pub mined_block: Option<u64>,
}

/// The finality watch and new attempts of done rounds: conditional transitions that
/// hold no lease (a done round has no holder), so that every node of a cluster may make
/// them and exactly one succeeds.
impl Store {
    /// Starts a new attempt of a done round (`from`, which it must still be in): the
    /// current attempt is kept in `round_attempts`, the round goes back to `requested`
    /// with the new request (`None`: a manual one, judged at the head of its first run).
    /// `false` when the round is no longer in `from`.
    pub fn renew_round(
        &self,
        market: Address,
        market_id: U256,
        workflow: &str,
        request: Option<(B256, u64)>,
        from: Stage,
    ) -> Result<bool, StoreError> {
        self.in_tx(|tx| renew_in(tx, market, market_id, workflow, request, from))
    }

    /// Reopens a `confirmed` round at the submission stage because its transaction is no
    /// longer on the canonical chain: the mined nonce is pending again, its attempts
    /// count as never broadcast (so the drive re-sends the stored bytes first), and the
    /// round is `submitted` with `reason` (and the transcript `outcome`, when given).
    /// `false` when the round is not `confirmed` any more. A confirmed round without a
    /// mined nonce of its own (nothing to re-send) is `submitted` without a reservation:
    /// its drive signs afresh after a pre-flight that reads the market.
    pub fn reopen_submission(
        &self,
        market: Address,
        market_id: U256,
        reason: &str,
        outcome: Option<&serde_json::Value>,
    ) -> Result<bool, StoreError> {
        self.in_tx(|tx| reopen_submission_in(tx, market, market_id, reason, outcome))
    }

    /// Moves a `confirmed` round to `finalized` (with the transcript `outcome`, when
    /// given). `false` when it is not `confirmed` any more.
    pub fn set_finalized(
        &self,
        market: Address,
        market_id: U256,
        outcome: Option<&serde_json::Value>,
    ) -> Result<bool, StoreError> {
        let n = self.conn().prepare_cached(sql::FINALIZE)?.execute(params![
            market.to_string(),
            market_id.to_string(),
            outcome.map(|o| o.to_string()),
            now() as i64
        ])?;
        Ok(n > 0)
    }

    /// The `confirmed` rounds the finality watch follows, least recently looked at first.
    pub fn awaiting_finality(&self, limit: usize) -> Result<Vec<Watched>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(WATCHED_SQL)?;
        let rows = stmt.query_map(params![limit as i64], |r| {
            Ok(WatchedRow {
                market: r.get(0)?,
                market_id: r.get(1)?,
                attempt: r.get(2)?,
                signer: r.get(3)?,
                chain_id: r.get(4)?,
                nonce: r.get(5)?,
                mined_tx: r.get(6)?,
                mined_block: r.get(7)?,
                mined_hash: r.get(8)?,
            })
        })?;
        rows.map(|r| r.map_err(StoreError::from).and_then(WatchedRow::parse))
            .collect()
    }

    /// The value stored under `key`, storing `candidate` first when there is none: the
    /// first writer wins, every later call (another process, another node) reads it.
    pub fn setting_or_init(&self, key: &str, candidate: &str) -> Result<String, StoreError> {
        // on disk before anyone acts on the value
        self.in_durable_tx(|tx| {
            tx.prepare_cached(sql::SETTING_INIT)?
                .execute(params![key, candidate])?;
            Ok(tx
                .prepare_cached(sql::SETTING)?
                .query_row(params![key], |r| r.get(0))?)
        })
    }

    /// A round's earlier attempts, oldest first.
    pub fn past_attempts(
        &self,
        market: Address,
        market_id: U256,
    ) -> Result<Vec<PastAttempt>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(PAST_SQL)?;
        let rows = stmt.query_map(params![market.to_string(), market_id.to_string()], |r| {
            Ok(PastRow {
                attempt: r.get(0)?,
                state: r.get(1)?,
                reason: r.get(2)?,
                request_tx: r.get(3)?,
                request_block: r.get(4)?,
                submit_tx: r.get(5)?,
                outcome: r.get(6)?,
                ended_at: r.get(7)?,
            })
        })?;
        rows.map(|r| r.map_err(StoreError::from).and_then(PastRow::parse))
            .collect()
    }
}

/// The done-round statements both backends run, with SQLite's `?n` placeholders
/// (PostgreSQL's store turns them into `$n`).
pub(crate) mod sql {
    /// A new attempt: `?1` market, `?2` market id, `?3` workflow, `?4`/`?5` the request's
    /// tx and block (`NULL`: manual), `?6` now.
    pub const RENEW: &str = "UPDATE rounds SET state = 'requested', attempt = attempt + 1, workflow = ?3, request_tx = ?4,
         request_block = ?5, reason = NULL, submit_tx = NULL, raw_tx = NULL, outcome = NULL,
         updated_at = ?6, holder = NULL, lease_until = NULL WHERE market = ?1 AND market_id = ?2";
    /// `confirmed` → `submitted`: `?3` reason, `?4` transcript (`NULL`: kept), `?5` now.
    pub const REOPEN_ROUND: &str = "UPDATE rounds SET state = 'submitted', reason = ?3, outcome = COALESCE(?4, outcome), updated_at = ?5,
         holder = NULL, lease_until = NULL WHERE market = ?1 AND market_id = ?2 AND state = 'confirmed'";
    /// The key and nonce whose attempt resolved the round (`?1` market, `?2` market id).
    pub const MINED_NONCE: &str =
        "SELECT n.signer, n.chain_id, n.nonce FROM tx_nonces n JOIN rounds r
         ON r.market = n.market AND r.market_id = n.market_id AND n.mined_tx = r.submit_tx
         WHERE n.market = ?1 AND n.market_id = ?2 AND n.state = 'mined'
         ORDER BY n.updated_at DESC LIMIT 1";
    /// That nonce pending again: `?1`–`?3` the key and nonce, `?4` why, `?5` now.
    pub const REOPEN_NONCE: &str = "UPDATE tx_nonces SET state = 'pending', mined_tx = NULL, mined_block = NULL, mined_hash = NULL,
         detail = ?4, updated_at = ?5 WHERE signer = ?1 AND chain_id = ?2 AND nonce = ?3";
    /// Its attempts never broadcast, so the drive re-sends them: `?1`–`?3` the nonce.
    pub const UNSEND_ATTEMPTS: &str = "UPDATE tx_attempts SET sent_block = NULL WHERE signer = ?1 AND chain_id = ?2 AND nonce = ?3";
    /// `confirmed` → `finalized`: `?3` transcript (`NULL`: kept), `?4` now.
    pub const FINALIZE: &str =
        "UPDATE rounds SET state = 'finalized', outcome = COALESCE(?3, outcome), updated_at = ?4
         WHERE market = ?1 AND market_id = ?2 AND state = 'confirmed'";
    /// A setting stored unless one is: `?1` key, `?2` value.
    pub const SETTING_INIT: &str =
        "INSERT INTO node_settings (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO NOTHING";
    pub const SETTING: &str = "SELECT value FROM node_settings WHERE key = ?1";
    /// Whether a log was recorded: `?1` tx hash, `?2` log index.
    pub const LOG_SEEN: &str = "SELECT 1 FROM seen_logs WHERE tx_hash = ?1 AND log_index = ?2";
}

/// The `confirmed` rounds with the nonce whose attempt resolved them (both backends;
/// `?1`/`$1` the limit).
pub(crate) const WATCHED_SQL: &str = "SELECT r.market, r.market_id, r.attempt, n.signer, n.chain_id, n.nonce, n.mined_tx, n.mined_block, n.mined_hash
     FROM rounds r LEFT JOIN tx_nonces n ON n.market = r.market AND n.market_id = r.market_id
     AND n.state = 'mined' AND n.mined_tx = r.submit_tx
     WHERE r.state = 'confirmed' ORDER BY r.updated_at, r.market_id LIMIT ?1";

/// A round's archived attempts (both backends; `?1`/`$1` market, `?2`/`$2` market id).
pub(crate) const PAST_SQL: &str =
    "SELECT attempt, state, reason, request_tx, request_block, submit_tx, outcome, ended_at
     FROM round_attempts WHERE market = ?1 AND market_id = ?2 ORDER BY attempt";

/// A [`WATCHED_SQL`] row before its text is parsed.
pub(crate) struct WatchedRow {
    pub market: String,
    pub market_id: String,
    pub attempt: i64,
    pub signer: Option<String>,
    pub chain_id: Option<i64>,
    pub nonce: Option<i64>,
    pub mined_tx: Option<String>,
    pub mined_block: Option<i64>,
    pub mined_hash: Option<String>,
}

impl WatchedRow {
    pub(crate) fn parse(self) -> Result<Watched, StoreError> {
        let (market, market_id) = parse_market(&self.market, &self.market_id)?;
        let tx = parse_hash(self.mined_tx, "mined_tx")?;
        let hash = parse_hash(self.mined_hash, "mined_hash")?;
        let mined = match (
            self.signer,
            self.chain_id,
            self.nonce,
            tx,
            self.mined_block,
            hash,
        ) {
            (
                Some(signer),
                Some(chain_id),
                Some(nonce),
                Some(tx),
                Some(block),
                Some(block_hash),
            ) => Some((
                KeyRef {
                    signer: Address::from_str(&signer).map_err(|e| corrupt("signer", e))?,
                    chain_id: chain_id as u64,
                },
                nonce as u64,
                MinedAt {
                    tx,
                    block: block as u64,
                    block_hash,
                },
            )),
            _ => None,
        };
        Ok(Watched {
            market,
            market_id,
            attempt: self.attempt as u32,
            mined,
            mined_block: self.mined_block.map(|b| b as u64),
        })
    }
}

/// A [`PAST_SQL`] row before its text is parsed.
pub(crate) struct PastRow {
    pub attempt: i64,
    pub state: String,
    pub reason: Option<String>,
    pub request_tx: Option<String>,
    pub request_block: Option<i64>,
    pub submit_tx: Option<String>,
    pub outcome: Option<String>,
    pub ended_at: i64,
}

impl PastRow {
    pub(crate) fn parse(self) -> Result<PastAttempt, StoreError> {
        Ok(PastAttempt {
            attempt: self.attempt as u32,
            state: Stage::from_str(&self.state)?,
            reason: self.reason,
            request_tx: parse_hash(self.request_tx, "request_tx")?,
            request_block: self.request_block.map(|b| b as u64),
            submit_tx: parse_hash(self.submit_tx, "submit_tx")?,
            outcome: self
                .outcome
                .map(|o| serde_json::from_str(&o))
                .transpose()
                .map_err(|e| corrupt("outcome", e))?,
            ended_at: self.ended_at as u64,
        })
    }
}

/// [`Store::renew_round`] inside a transaction.
pub(crate) fn renew_in(
    tx: &rusqlite::Transaction<'_>,
    market: Address,
    market_id: U256,
    workflow: &str,
    request: Option<(B256, u64)>,
    from: Stage,
) -> Result<bool, StoreError> {
    let (m, id, t) = (market.to_string(), market_id.to_string(), now() as i64);
    let current: Option<String> = tx
        .prepare_cached("SELECT state FROM rounds WHERE market = ?1 AND market_id = ?2")?
        .query_row(params![m, id], |r| r.get(0))
        .optional()?;
    if current.as_deref() != Some(from.as_str()) {
        return Ok(false);
    }
    tx.prepare_cached(ARCHIVE_SQL)?.execute(params![m, id, t])?;
    tx.prepare_cached(sql::RENEW)?.execute(params![
        m,
        id,
        workflow,
        request.map(|(h, _)| h.to_string()),
        request.map(|(_, b)| b as i64),
        t
    ])?;
    Ok(true)
}

/// [`Store::reopen_submission`] inside a transaction.
pub(crate) fn reopen_submission_in(
    tx: &rusqlite::Transaction<'_>,
    market: Address,
    market_id: U256,
    reason: &str,
    outcome: Option<&serde_json::Value>,
) -> Result<bool, StoreError> {
    let (m, id, t) = (market.to_string(), market_id.to_string(), now() as i64);
    let n = tx.prepare_cached(sql::REOPEN_ROUND)?.execute(params![
        m,
        id,
        reason,
        outcome.map(|o| o.to_string()),
        t
    ])?;
    if n == 0 {
        return Ok(false);
    }
    let mined: Option<(String, i64, i64)> = tx
        .prepare_cached(sql::MINED_NONCE)?
        .query_row(params![m, id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    if let Some((signer, chain_id, nonce)) = mined {
        tx.prepare_cached(sql::REOPEN_NONCE)?
            .execute(params![signer, chain_id, nonce, reason, t])?;
        tx.prepare_cached(sql::UNSEND_ATTEMPTS)?
            .execute(params![signer, chain_id, nonce])?;
    }
    Ok(true)
}

/// Why a confirmed round is reopened when a new request finds its market unresolved.
pub const RESUBMIT_REASON: &str = "a new request found the market unresolved on chain: our resolution left the canonical chain; re-sending it";
