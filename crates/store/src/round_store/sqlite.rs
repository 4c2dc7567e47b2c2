//! [`SqliteStore`]: the embedded SQLite store ([`Store`], synchronous, WAL) behind every
//! capability trait, with every call run on tokio's blocking pool, so a write never
//! stalls an async worker thread. One node holds every round: its leases are kept in
//! memory and its fence always holds.

use super::{
    Checkpoints, Fence, Finality, Leases, Nonces, Overview, Requests, RoundTxs, Rounds, Settings,
};
use crate::{
    AttemptRecord, KeyRef, Lease, LogRef, MinedAt, NonceRecord, NonceState, PastAttempt,
    RequestDecision, RoundRecord, RoundSummary, Stage, Store, StoreError, TxPayload, Watched,
};
use alloy_primitives::{Address, B256, U256};
use std::sync::Arc;
use std::time::Duration;

/// The embedded SQLite store behind [`super::RoundStore`]: the synchronous store, and
/// the rounds this node holds.
#[derive(Clone)]
pub struct SqliteStore(
    Arc<Store>,
    Arc<std::sync::Mutex<std::collections::HashSet<(Address, U256)>>>,
);

/// The holder name of the single node of a SQLite store.
const LOCAL_NODE: &str = "local";

impl SqliteStore {
    /// Serves `store` to async code; this node holds no round yet.
    pub fn new(store: Store) -> Self {
        Self(Arc::new(store), Default::default())
    }

    fn held_set(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<(Address, U256)>> {
        self.1.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The synchronous store underneath (for code that is not async: the CLI, tests).
    pub fn sync(&self) -> &Store {
        &self.0
    }
}

/// Runs `$body` with `$s` bound to the store on the blocking pool.
macro_rules! blocking {
    ($self:ident, |$s:ident| $body:expr) => {{
        let $s = $self.0.clone();
        match tokio::task::spawn_blocking(move || $body).await {
            Ok(r) => r,
            Err(e) => Err(StoreError::Task(e.to_string())),
        }
    }};
}

#[async_trait::async_trait]
impl Requests for SqliteStore {
    async fn record_request_judged(
        &self,
        market: Address,
        market_id: U256,
        workflow: &str,
        log: &LogRef,
        unresolved_on_chain: bool,
    ) -> Result<RequestDecision, StoreError> {
        let (w, l) = (workflow.to_string(), log.clone());
        blocking!(self, |s| s.record_request_judged(
            market,
            market_id,
            &w,
            &l,
            unresolved_on_chain
        ))
    }

    async fn log_seen(&self, log: &LogRef) -> Result<bool, StoreError> {
        let l = log.clone();
        blocking!(self, |s| s.log_seen(&l))
    }

    async fn manual_request_judged(
        &self,
        market: Address,
        market_id: U256,
        workflow: &str,
        unresolved_on_chain: bool,
    ) -> Result<RequestDecision, StoreError> {
        let w = workflow.to_string();
        blocking!(self, |s| s.manual_request_judged(
            market,
            market_id,
            &w,
            unresolved_on_chain
        ))
    }
}

#[async_trait::async_trait]
impl Checkpoints for SqliteStore {
    async fn checkpoint(&self, key: &str) -> Result<Option<(u64, B256)>, StoreError> {
        let k = key.to_string();
        blocking!(self, |s| s.checkpoint(&k))
    }

    async fn set_checkpoint(&self, key: &str, block: u64, hash: B256) -> Result<(), StoreError> {
        let k = key.to_string();
        blocking!(self, |s| s.set_checkpoint(&k, block, hash))
    }
}

#[async_trait::async_trait]
impl Rounds for SqliteStore {
    async fn set_state(
        &self,
        market: Address,
        market_id: U256,
        state: Stage,
        reason: Option<&str>,
    ) -> Result<(), StoreError> {
        let r = reason.map(str::to_string);
        blocking!(self, |s| s.set_state(
            market,
            market_id,
            state,
            r.as_deref()
        ))
    }

    async fn save_progress(
        &self,
        market: Address,
        market_id: U256,
        attempt: u32,
        state: Stage,
        progress: &serde_json::Value,
    ) -> Result<(), StoreError> {
        let p = progress.clone();
        blocking!(self, |s| s
            .save_progress(market, market_id, attempt, state, &p))
    }

    async fn progress(
        &self,
        market: Address,
        market_id: U256,
        attempt: u32,
    ) -> Result<Option<serde_json::Value>, StoreError> {
        blocking!(self, |s| s.progress(market, market_id, attempt))
    }

    async fn set_request_block(
        &self,
        market: Address,
        market_id: U256,
        block: u64,
    ) -> Result<(), StoreError> {
        blocking!(self, |s| s.set_request_block(market, market_id, block))
    }

    async fn set_outcome(
        &self,
        market: Address,
        market_id: U256,
        outcome: &serde_json::Value,
    ) -> Result<(), StoreError> {
        let o = outcome.clone();
        blocking!(self, |s| s.set_outcome(market, market_id, &o))
    }

    async fn set_outcome_and_state(
        &self,
        market: Address,
        market_id: U256,
        outcome: &serde_json::Value,
        state: Stage,
        reason: Option<&str>,
    ) -> Result<(), StoreError> {
        let (o, r) = (outcome.to_string(), reason.map(str::to_string));
        blocking!(self, |s| s.set_outcome_and_state(
            market,
            market_id,
            &o,
            state,
            r.as_deref()
        ))
    }

    async fn get(
        &self,
        market: Address,
        market_id: U256,
    ) -> Result<Option<RoundRecord>, StoreError> {
        blocking!(self, |s| s.get(market, market_id))
    }

    async fn unfinished(&self) -> Result<Vec<RoundRecord>, StoreError> {
        blocking!(self, |s| s.unfinished())
    }
}

#[async_trait::async_trait]
impl Overview for SqliteStore {
    async fn list_summaries_updated(
        &self,
        limit: usize,
        before: Option<i64>,
        between: crate::UpdatedBetween,
    ) -> Result<(Vec<RoundSummary>, Option<i64>), StoreError> {
        blocking!(self, |s| s.list_summaries_updated(limit, before, between))
    }

    async fn count_by_state(&self) -> Result<Vec<(Stage, u64)>, StoreError> {
        blocking!(self, |s| s.count_by_state())
    }

    async fn probe_write(&self) -> Result<(), StoreError> {
        blocking!(self, |s| s.probe_write())
    }
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
        blocking!(self, |s| s.reserve_nonce(key, chain_pending, &p))
    }

    async fn add_attempt(
        &self,
        key: KeyRef,
        market: Address,
        market_id: U256,
        a: &AttemptRecord,
    ) -> Result<(), StoreError> {
        let a = a.clone();
        blocking!(self, |s| s.add_attempt(key, market, market_id, &a))
    }

    async fn mark_attempt_sent(
        &self,
        key: KeyRef,
        _market: Address,
        _market_id: U256,
        nonce: u64,
        seq: u32,
        block: u64,
    ) -> Result<(), StoreError> {
        blocking!(self, |s| s.mark_attempt_sent(key, nonce, seq, block))
    }

    async fn finish_nonce(
        &self,
        key: KeyRef,
        nonce: u64,
        state: NonceState,
        mined: Option<MinedAt>,
        detail: Option<&str>,
    ) -> Result<(), StoreError> {
        let d = detail.map(str::to_string);
        blocking!(self, |s| s.finish_nonce(
            key,
            nonce,
            state,
            mined,
            d.as_deref()
        ))
    }

    async fn pending_nonce_of(
        &self,
        key: KeyRef,
        market: Address,
        market_id: U256,
    ) -> Result<Option<NonceRecord>, StoreError> {
        blocking!(self, |s| s.pending_nonce_of(key, market, market_id))
    }

    async fn nonce_record(
        &self,
        key: KeyRef,
        nonce: u64,
    ) -> Result<Option<NonceRecord>, StoreError> {
        blocking!(self, |s| s.nonce_record(key, nonce))
    }

    async fn pending_nonces(&self, key: KeyRef) -> Result<Vec<NonceRecord>, StoreError> {
        blocking!(self, |s| s.pending_nonces(key))
    }

    async fn attempts(&self, key: KeyRef, nonce: u64) -> Result<Vec<AttemptRecord>, StoreError> {
        blocking!(self, |s| s.attempts(key, nonce))
    }

    async fn highest_nonce(&self, key: KeyRef) -> Result<Option<u64>, StoreError> {
        blocking!(self, |s| s.highest_nonce(key))
    }
}

#[async_trait::async_trait]
impl RoundTxs for SqliteStore {
    async fn tx_history(
        &self,
        market: Address,
        market_id: U256,
    ) -> Result<Vec<(NonceRecord, Vec<AttemptRecord>)>, StoreError> {
        blocking!(self, |s| s.tx_history(market, market_id))
    }

    async fn pending_nonces_of_round(
        &self,
        market: Address,
        market_id: U256,
    ) -> Result<Vec<(KeyRef, NonceRecord)>, StoreError> {
        blocking!(self, |s| s.pending_nonces_of_round(market, market_id))
    }
}

#[async_trait::async_trait]
impl Leases for SqliteStore {
    fn node_id(&self) -> &str {
        LOCAL_NODE
    }

    async fn claim(
        &self,
        market: Address,
        market_id: U256,
        _ignore_backoff: bool,
    ) -> Result<Option<Lease>, StoreError> {
        let term = blocking!(self, |s| s.claim(market, market_id, LOCAL_NODE))?;
        if term.is_some() {
            self.held_set().insert((market, market_id));
        }
        Ok(term.map(|term| Lease {
            term,
            taken_from: None,
        }))
    }

    async fn renew(&self, market: Address, market_id: U256) -> Result<bool, StoreError> {
        Ok(self.held_set().contains(&(market, market_id)))
    }

    async fn release(
        &self,
        market: Address,
        market_id: U256,
        _retry_after: Option<Duration>,
    ) -> Result<(), StoreError> {
        self.held_set().remove(&(market, market_id));
        blocking!(self, |s| s.release(market, market_id))
    }

    async fn claimable(
        &self,
        markets: &[Address],
        limit: usize,
    ) -> Result<Vec<(Address, U256)>, StoreError> {
        let all = blocking!(self, |s| s.unfinished())?;
        Ok(all
            .into_iter()
            .filter(|r| markets.contains(&r.market))
            .take(limit)
            .map(|r| (r.market, r.market_id))
            .collect())
    }

    fn held(&self) -> usize {
        self.held_set().len()
    }
}

#[async_trait::async_trait]
impl Fence for SqliteStore {
    async fn fence_ok(&self, _market: Address, _market_id: U256) -> Result<bool, StoreError> {
        Ok(true)
    }
}

#[async_trait::async_trait]
impl Finality for SqliteStore {
    async fn renew_round(
        &self,
        market: Address,
        market_id: U256,
        workflow: &str,
        request: Option<(B256, u64)>,
        from: Stage,
    ) -> Result<bool, StoreError> {
        let w = workflow.to_string();
        blocking!(self, |s| s
            .renew_round(market, market_id, &w, request, from))
    }

    async fn reopen_submission(
        &self,
        market: Address,
        market_id: U256,
        reason: &str,
        outcome: Option<&serde_json::Value>,
    ) -> Result<bool, StoreError> {
        let (r, o) = (reason.to_string(), outcome.cloned());
        blocking!(self, |s| s.reopen_submission(
            market,
            market_id,
            &r,
            o.as_ref()
        ))
    }

    async fn set_finalized(
        &self,
        market: Address,
        market_id: U256,
        outcome: Option<&serde_json::Value>,
    ) -> Result<bool, StoreError> {
        let o = outcome.cloned();
        blocking!(self, |s| s.set_finalized(market, market_id, o.as_ref()))
    }

    async fn awaiting_finality(&self, limit: usize) -> Result<Vec<Watched>, StoreError> {
        blocking!(self, |s| s.awaiting_finality(limit))
    }

    async fn past_attempts(
        &self,
        market: Address,
        market_id: U256,
    ) -> Result<Vec<PastAttempt>, StoreError> {
        blocking!(self, |s| s.past_attempts(market, market_id))
    }
}

#[async_trait::async_trait]
impl Settings for SqliteStore {
    async fn setting_or_init(&self, key: &str, candidate: &str) -> Result<String, StoreError> {
        let (k, c) = (key.to_string(), candidate.to_string());
        blocking!(self, |s| s.setting_or_init(&k, &c))
    }
}
