//! The capabilities around transactions: one signing key's nonces and their signed
//! attempts, as the transaction manager keeps them ([`Nonces`]), and a round's
//! transactions under any key ([`RoundTxs`]).

use crate::RoundKey;
use crate::{AttemptRecord, KeyRef, MinedAt, NonceRecord, NonceState, StoreError, TxPayload};

/// One signing key's nonces: a reservation per payload, its signed attempts (stored
/// before each broadcast) and how it ended. Used by the transaction manager (through
/// [`super::TxStore`]); the node's round driver reads a reservation of its key.
#[async_trait::async_trait]
pub trait Nonces: Send + Sync {
    /// Reserves the next nonce of `key` for `payload` and moves its round to `submitted`,
    /// in one transaction.
    async fn reserve_nonce(
        &self,
        key: KeyRef,
        chain_pending: u64,
        payload: &TxPayload,
    ) -> Result<u64, StoreError>;
    /// Stores a signed attempt `a` of `market`'s round `market_id` under `key`, before
    /// it is broadcast; the round's submission points at it.
    async fn add_attempt(
        &self,
        key: KeyRef,
        round: RoundKey,
        a: &AttemptRecord,
    ) -> Result<(), StoreError>;
    /// Records the head at which an attempt (of `market`'s round `market_id`) was first
    /// broadcast.
    async fn mark_attempt_sent(
        &self,
        key: KeyRef,
        round: RoundKey,
        nonce: u64,
        seq: u32,
        block: u64,
    ) -> Result<(), StoreError>;
    /// Ends a reservation in `state`: `Mined` (where our attempt was mined) or `Lost`,
    /// with an optional detail.
    async fn finish_nonce(
        &self,
        key: KeyRef,
        nonce: u64,
        state: NonceState,
        mined: Option<MinedAt>,
        detail: Option<&str>,
    ) -> Result<(), StoreError>;
    /// The pending reservation of `market`'s round `market_id` under `key`, if any.
    async fn pending_nonce_of(
        &self,
        key: KeyRef,
        round: RoundKey,
    ) -> Result<Option<NonceRecord>, StoreError>;
    /// One reservation of `key`.
    async fn nonce_record(
        &self,
        key: KeyRef,
        nonce: u64,
    ) -> Result<Option<NonceRecord>, StoreError>;
    /// Every pending reservation of `key`, lowest nonce first.
    async fn pending_nonces(&self, key: KeyRef) -> Result<Vec<NonceRecord>, StoreError>;
    /// The attempts at one nonce of `key`, oldest first.
    async fn attempts(&self, key: KeyRef, nonce: u64) -> Result<Vec<AttemptRecord>, StoreError>;
    /// A nonce's record and its attempts, read together: the transaction manager's look
    /// at every turn of its loop. (PostgreSQL sends both reads on one connection at
    /// once: one round trip, one server process woken.) An attempt stored between the
    /// two reads is seen at the next look.
    async fn nonce_with_attempts(
        &self,
        key: KeyRef,
        nonce: u64,
    ) -> Result<(Option<NonceRecord>, Vec<AttemptRecord>), StoreError> {
        let (rec, attempts) =
            tokio::join!(self.nonce_record(key, nonce), self.attempts(key, nonce));
        Ok((rec?, attempts?))
    }
    /// The highest nonce this store holds for `key`.
    async fn highest_nonce(&self, key: KeyRef) -> Result<Option<u64>, StoreError>;
}

/// A round's transactions under any key (a cluster's nodes may hold different keys).
/// Used by the node's round driver (the reservation a previous holder left), the HTTP
/// API, the status page and the CLI (a round's submission history).
#[async_trait::async_trait]
pub trait RoundTxs: Send + Sync {
    /// A market's whole submission history, for any key: each reservation with its
    /// attempts, oldest first.
    async fn tx_history(
        &self,
        round: RoundKey,
    ) -> Result<Vec<(NonceRecord, Vec<AttemptRecord>)>, StoreError>;
    /// The pending reservations of a round under any key.
    async fn pending_nonces_of_round(
        &self,
        round: RoundKey,
    ) -> Result<Vec<(KeyRef, NonceRecord)>, StoreError>;
}
