//! The store as the node's async code uses it: the [`RoundStore`] trait, so that a
//! PostgreSQL implementation can stand behind the same calls, and [`SqliteStore`], the
//! embedded SQLite store ([`Store`], synchronous, WAL) with every call run on tokio's
//! blocking pool, so a write never stalls an async worker thread.

use super::{
    AttemptRecord, KeyRef, Lease, LogRef, MinedAt, NonceRecord, NonceState, PastAttempt,
    RequestDecision, RoundRecord, RoundSummary, Stage, Store, StoreError, TxPayload, Watched,
};
use alloy_primitives::{Address, B256, U256};
use std::sync::Arc;
use std::time::Duration;

/// Every store operation the node, the watcher, the transaction manager and the API use.
/// A write survives the process's crash when the call returns. A signed attempt
/// ([`Self::add_attempt`], before its broadcast), a manual request and a node setting
/// also survive a power loss, and so does every write before them; a power loss can
/// take back later writes only, which puts a round back at a step it does again (on
/// SQLite; PostgreSQL commits every write to disk).
#[async_trait::async_trait]
pub trait RoundStore: Send + Sync + 'static {
    /// Records a trigger log and decides whether it starts a round. Idempotent. A done
    /// round is `AlreadyHandled` (the chain was not consulted).
    async fn record_request(
        &self,
        market: Address,
        market_id: U256,
        workflow: &str,
        log: &LogRef,
    ) -> Result<RequestDecision, StoreError> {
        self.record_request_judged(market, market_id, workflow, log, false)
            .await
    }
    /// [`Self::record_request`]; with `unresolved_on_chain` (the caller read the chain
    /// and the market is unresolved) a done round is served again, in the transaction
    /// that records the log: a `confirmed` one is reopened at the submission stage
    /// ([`RequestDecision::Resubmit`]), a `finalized` or `skipped` one gets a new
    /// attempt ([`RequestDecision::Renewed`]).
    async fn record_request_judged(
        &self,
        market: Address,
        market_id: U256,
        workflow: &str,
        log: &LogRef,
        unresolved_on_chain: bool,
    ) -> Result<RequestDecision, StoreError>;
    async fn manual_request(
        &self,
        market: Address,
        market_id: U256,
        workflow: &str,
    ) -> Result<RequestDecision, StoreError> {
        self.manual_request_judged(market, market_id, workflow, false)
            .await
    }
    /// Whether this exact log was recorded before (a rescan after a rewind meets it
    /// again).
    async fn log_seen(&self, log: &LogRef) -> Result<bool, StoreError>;
    /// [`Self::manual_request`] with the chain's word (see [`Self::record_request_judged`]).
    async fn manual_request_judged(
        &self,
        market: Address,
        market_id: U256,
        workflow: &str,
        unresolved_on_chain: bool,
    ) -> Result<RequestDecision, StoreError>;
    async fn set_state(
        &self,
        market: Address,
        market_id: U256,
        state: Stage,
        reason: Option<&str>,
    ) -> Result<(), StoreError>;
    async fn save_progress(
        &self,
        market: Address,
        market_id: U256,
        attempt: u32,
        state: Stage,
        progress: &serde_json::Value,
    ) -> Result<(), StoreError>;
    async fn progress(
        &self,
        market: Address,
        market_id: U256,
        attempt: u32,
    ) -> Result<Option<serde_json::Value>, StoreError>;
    async fn set_request_block(
        &self,
        market: Address,
        market_id: U256,
        block: u64,
    ) -> Result<(), StoreError>;
    async fn set_outcome(
        &self,
        market: Address,
        market_id: U256,
        outcome: &serde_json::Value,
    ) -> Result<(), StoreError>;
    /// [`Self::set_outcome`] and [`Self::set_state`] in one write: a round's last
    /// transcript and the state it ends in.
    async fn set_outcome_and_state(
        &self,
        market: Address,
        market_id: U256,
        outcome: &serde_json::Value,
        state: Stage,
        reason: Option<&str>,
    ) -> Result<(), StoreError>;
    async fn get(
        &self,
        market: Address,
        market_id: U256,
    ) -> Result<Option<RoundRecord>, StoreError>;
    async fn list_summaries(
        &self,
        limit: usize,
        before: Option<i64>,
    ) -> Result<(Vec<RoundSummary>, Option<i64>), StoreError>;
    async fn unfinished(&self) -> Result<Vec<RoundRecord>, StoreError>;
    async fn count_by_state(&self) -> Result<Vec<(Stage, u64)>, StoreError>;
    async fn probe_write(&self) -> Result<(), StoreError>;
    async fn checkpoint(&self, key: &str) -> Result<Option<(u64, B256)>, StoreError>;
    async fn set_checkpoint(&self, key: &str, block: u64, hash: B256) -> Result<(), StoreError>;
    /// Reserves the next nonce of `key` for `payload` and moves its round to `submitted`,
    /// in one transaction.
    async fn reserve_nonce(
        &self,
        key: KeyRef,
        chain_pending: u64,
        payload: &TxPayload,
    ) -> Result<u64, StoreError>;
    async fn add_attempt(
        &self,
        key: KeyRef,
        market: Address,
        market_id: U256,
        a: &AttemptRecord,
    ) -> Result<(), StoreError>;
    /// Records the head at which an attempt (of `market`'s round `market_id`) was first
    /// broadcast.
    async fn mark_attempt_sent(
        &self,
        key: KeyRef,
        market: Address,
        market_id: U256,
        nonce: u64,
        seq: u32,
        block: u64,
    ) -> Result<(), StoreError>;
    async fn finish_nonce(
        &self,
        key: KeyRef,
        nonce: u64,
        state: NonceState,
        mined: Option<MinedAt>,
        detail: Option<&str>,
    ) -> Result<(), StoreError>;
    async fn pending_nonce_of(
        &self,
        key: KeyRef,
        market: Address,
        market_id: U256,
    ) -> Result<Option<NonceRecord>, StoreError>;
    async fn nonce_record(
        &self,
        key: KeyRef,
        nonce: u64,
    ) -> Result<Option<NonceRecord>, StoreError>;
    async fn pending_nonces(&self, key: KeyRef) -> Result<Vec<NonceRecord>, StoreError>;
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
    async fn tx_history(
        &self,
        market: Address,
        market_id: U256,
    ) -> Result<Vec<(NonceRecord, Vec<AttemptRecord>)>, StoreError>;
    async fn highest_nonce(&self, key: KeyRef) -> Result<Option<u64>, StoreError>;
    /// The pending reservations of a round under any key.
    async fn pending_nonces_of_round(
        &self,
        market: Address,
        market_id: U256,
    ) -> Result<Vec<(KeyRef, NonceRecord)>, StoreError>;

    // ── done rounds: the finality watch and new attempts (no lease needed) ─────────
    /// Starts a new attempt of a round that is still in the done state `from`: the
    /// current attempt is archived ([`Self::past_attempts`]), the round is `requested`
    /// again with `request` (`None`: manual). `false` when the round left `from`.
    async fn renew_round(
        &self,
        market: Address,
        market_id: U256,
        workflow: &str,
        request: Option<(B256, u64)>,
        from: Stage,
    ) -> Result<bool, StoreError>;
    /// Reopens a `confirmed` round whose transaction left the canonical chain at the
    /// submission stage (its mined nonce pending again, its attempts to be re-sent).
    /// `false` when the round is not `confirmed` any more.
    async fn reopen_submission(
        &self,
        market: Address,
        market_id: U256,
        reason: &str,
        outcome: Option<&serde_json::Value>,
    ) -> Result<bool, StoreError>;
    /// `confirmed` → `finalized`; `false` when the round is not `confirmed` any more.
    async fn set_finalized(
        &self,
        market: Address,
        market_id: U256,
        outcome: Option<&serde_json::Value>,
    ) -> Result<bool, StoreError>;
    /// The `confirmed` rounds, with the nonce that resolved each.
    async fn awaiting_finality(&self, limit: usize) -> Result<Vec<Watched>, StoreError>;
    /// A round's earlier attempts, oldest first.
    async fn past_attempts(
        &self,
        market: Address,
        market_id: U256,
    ) -> Result<Vec<PastAttempt>, StoreError>;

    /// A node setting: the value stored under `key`, or `candidate` stored and returned
    /// when there is none (the first writer wins; a cluster shares it).
    async fn setting_or_init(&self, key: &str, candidate: &str) -> Result<String, StoreError>;

    // ── leases: which node drives which round ─────────────────────────────────────
    /// Whether several nodes share this store (PostgreSQL): rounds are then claimed
    /// from the store by whichever node has room, not only from this node's triggers.
    fn shared(&self) -> bool {
        false
    }
    /// This node's name as a lease holder.
    fn node_id(&self) -> &str;
    /// How long a lease lasts without a renewal.
    fn lease_duration(&self) -> Duration {
        Duration::from_secs(15)
    }
    /// Claims an unfinished round that is unheld (and past a back-off set at release,
    /// unless `ignore_backoff`), whose lease expired, or that this node holds; bumps
    /// its term. `None`: another node holds it, or it is final or unknown.
    async fn claim(
        &self,
        market: Address,
        market_id: U256,
        ignore_backoff: bool,
    ) -> Result<Option<Lease>, StoreError>;
    /// Extends this node's lease; `false` when it was lost.
    async fn renew(&self, market: Address, market_id: U256) -> Result<bool, StoreError>;
    /// Gives the round up; with `retry_after`, no node claims it from the store before
    /// that (a round paused on a transient error keeps its back-off cluster-wide).
    async fn release(
        &self,
        market: Address,
        market_id: U256,
        retry_after: Option<Duration>,
    ) -> Result<(), StoreError>;
    /// Unfinished rounds that a node may claim now, oldest first: unheld and past any
    /// back-off, with an expired lease, or held by this node's id (a restarted node with
    /// a fixed `store.node_id` takes its own rounds back at once).
    /// Only rounds of `markets` (the markets this node has a workflow for).
    async fn claimable(
        &self,
        markets: &[Address],
        limit: usize,
    ) -> Result<Vec<(Address, U256)>, StoreError>;
    /// Whether this node still holds the round at the term it claimed (checked before
    /// every broadcast).
    async fn fence_ok(&self, market: Address, market_id: U256) -> Result<bool, StoreError>;
    /// How many rounds this node holds.
    fn held(&self) -> usize;
}

/// The embedded SQLite store behind [`RoundStore`].
#[derive(Clone)]
pub struct SqliteStore(
    Arc<Store>,
    Arc<std::sync::Mutex<std::collections::HashSet<(Address, U256)>>>,
);

/// The holder name of the single node of a SQLite store.
const LOCAL_NODE: &str = "local";

impl SqliteStore {
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
impl RoundStore for SqliteStore {
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
    async fn list_summaries(
        &self,
        limit: usize,
        before: Option<i64>,
    ) -> Result<(Vec<RoundSummary>, Option<i64>), StoreError> {
        blocking!(self, |s| s.list_summaries(limit, before))
    }
    async fn unfinished(&self) -> Result<Vec<RoundRecord>, StoreError> {
        blocking!(self, |s| s.unfinished())
    }
    async fn count_by_state(&self) -> Result<Vec<(Stage, u64)>, StoreError> {
        blocking!(self, |s| s.count_by_state())
    }
    async fn probe_write(&self) -> Result<(), StoreError> {
        blocking!(self, |s| s.probe_write())
    }
    async fn checkpoint(&self, key: &str) -> Result<Option<(u64, B256)>, StoreError> {
        let k = key.to_string();
        blocking!(self, |s| s.checkpoint(&k))
    }
    async fn set_checkpoint(&self, key: &str, block: u64, hash: B256) -> Result<(), StoreError> {
        let k = key.to_string();
        blocking!(self, |s| s.set_checkpoint(&k, block, hash))
    }
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
    async fn tx_history(
        &self,
        market: Address,
        market_id: U256,
    ) -> Result<Vec<(NonceRecord, Vec<AttemptRecord>)>, StoreError> {
        blocking!(self, |s| s.tx_history(market, market_id))
    }
    async fn highest_nonce(&self, key: KeyRef) -> Result<Option<u64>, StoreError> {
        blocking!(self, |s| s.highest_nonce(key))
    }
    async fn pending_nonces_of_round(
        &self,
        market: Address,
        market_id: U256,
    ) -> Result<Vec<(KeyRef, NonceRecord)>, StoreError> {
        blocking!(self, |s| s.pending_nonces_of_round(market, market_id))
    }

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
    async fn setting_or_init(&self, key: &str, candidate: &str) -> Result<String, StoreError> {
        let (k, c) = (key.to_string(), candidate.to_string());
        blocking!(self, |s| s.setting_or_init(&k, &c))
    }

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
    async fn fence_ok(&self, _market: Address, _market_id: U256) -> Result<bool, StoreError> {
        Ok(true)
    }
    fn held(&self) -> usize {
        self.held_set().len()
    }
}
