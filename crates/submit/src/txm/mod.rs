//! The transaction manager: owns one signing key on one chain, and every transaction
//! that key signs goes through it. Rounds run concurrently; only nonce reservation,
//! signing and broadcast are serialized, so the key's transactions are broadcast in
//! nonce order and no nonce is ever handed to a second payload.
//!
//! A nonce is reserved in the store (max of the chain's pending count and the store's
//! highest + 1) together with its payload; every signed attempt (hash, raw bytes, fees)
//! is stored before it is broadcast. [`TxManager::drive`] then follows the nonce until
//! one of our attempts is mined `confirmations` deep on the canonical chain, checking
//! the receipts of *all* attempts: an attempt that cannot be mined (max fee under the
//! base fee) or waits too many blocks is replaced at the same nonce with both fees
//! raised ([`fees`]); a dropped one is re-broadcast; one reorged out is re-broadcast;
//! a nonce the chain consumed with a transaction that is none of ours ends `Lost`, and
//! the caller decides what to sign next. Every wait is bounded and ends in a typed
//! outcome.

mod backlog;
mod chain;
pub mod fees;
mod foreign;

use alloy::eips::{BlockNumberOrTag, Encodable2718};
use alloy::network::{EthereumWallet, NetworkTransactionBuilder, TransactionBuilder};
use alloy::primitives::{Address, B256};
use alloy::providers::{DynProvider, Provider};
use alloy::rpc::types::{TransactionReceipt, TransactionRequest};
use cresolver_metrics::Metrics;
use cresolver_store::{AttemptRecord, KeyRef, NonceState, RoundStore, StoreError, TxPayload};
use fees::{Bump, BumpReason, FeePolicy, Fees};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Settings of a transaction manager.
#[derive(Debug, Clone)]
pub struct TxmConfig {
    /// Blocks that must be on top of the receipt's block (as the watcher counts them for
    /// requests: 0 takes the receipt as it is).
    pub confirmations: u64,
    pub fees: FeePolicy,
    /// How often a pending nonce is looked at.
    pub poll_interval: Duration,
    /// How long one [`TxManager::drive`] call follows a nonce before it returns
    /// [`TxError::Stuck`] (the caller retries later; nothing is forgotten).
    pub wait_bound: Duration,
}

/// How a nonce ended.
#[derive(Debug, Clone)]
pub enum TxOutcome {
    /// One of our attempts is mined, `confirmations` deep and canonical.
    Mined {
        nonce: u64,
        attempt: AttemptRecord,
        receipt: Box<TransactionReceipt>,
    },
    /// The chain used the nonce for a transaction that is none of our attempts (the key
    /// signed elsewhere). Nothing of ours can be mined at it any more.
    Lost { nonce: u64 },
}

/// What became of a nonce another key reserved (see [`TxManager::check_foreign`]).
#[derive(Debug, Clone)]
pub enum Foreign {
    Mined(Box<TransactionReceipt>),
    Lost,
    Pending,
}

#[derive(Debug, thiserror::Error)]
pub enum TxError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("RPC error: {0}")]
    Rpc(String),
    #[error("cannot sign: {0}")]
    Sign(String),
    #[error("nonce {0} of the signing key is not reserved in the store")]
    UnknownNonce(u64),
    #[error(
        "nonce {nonce} not mined {deep} after {secs} s ({attempts} attempt(s), last max fee {max_fee_gwei} gwei{why}); it stays reserved and is followed again"
    )]
    Stuck {
        nonce: u64,
        secs: u64,
        attempts: usize,
        max_fee_gwei: String,
        deep: String,
        why: String,
    },
}

impl TxError {
    /// Whether trying again later could help.
    pub fn is_transient(&self) -> bool {
        matches!(self, TxError::Rpc(_) | TxError::Stuck { .. })
    }
}

/// What a node said to a broadcast.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Sent {
    Accepted,
    /// Already in its pool (or mined).
    Known,
    /// The nonce is already used on chain.
    NonceTooLow,
    /// Refused as underpriced (below the base fee, or not enough of a replacement).
    Underpriced(String),
    /// The key cannot pay.
    Funds(String),
    Failed(String),
}

fn classify(msg: &str) -> Sent {
    let m = msg.to_lowercase();
    if m.contains("already known")
        || m.contains("known transaction")
        || m.contains("already imported")
    {
        Sent::Known
    } else if m.contains("nonce too low")
        || m.contains("nonce is too low")
        || m.contains("invalid nonce") && m.contains("low")
    {
        Sent::NonceTooLow
    } else if m.contains("underpriced")
        || m.contains("less than block base fee")
        || m.contains("fee cap less than")
        || m.contains("fee too low")
    {
        Sent::Underpriced(msg.to_string())
    } else if m.contains("insufficient funds") {
        Sent::Funds(msg.to_string())
    } else {
        Sent::Failed(msg.to_string())
    }
}

/// Test failpoint, compiled in only with the `failpoints` feature (the binary's default
/// for tests; a production build has none): `CRESOLVER_TEST_CRASH_AT=<point>` ends the
/// process at that point without any cleanup (as `kill -9` would), to test recovery. Points: `answered`, `challenged`,
/// `evaluated` (the round's progress stored), `reserved` (nonce stored, nothing signed),
/// `signed` (first attempt stored, not broadcast), `broadcast` (first attempt sent),
/// `replaced` (a replacement stored, not broadcast).
pub fn crash_point(point: &str) {
    #[cfg(feature = "failpoints")]
    {
        let hit = std::env::var("CRESOLVER_TEST_CRASH_AT").is_ok_and(|v| v == point)
            || (point == "signed" && std::env::var_os("CRESOLVER_TEST_CRASH_AFTER_SIGN").is_some());
        if hit {
            tracing::error!(point, "CRESOLVER_TEST_CRASH_AT: exiting");
            std::process::exit(97);
        }
    }
    #[cfg(not(feature = "failpoints"))]
    let _ = point;
}

fn gwei(wei: u128) -> String {
    format!("{:.3}", wei as f64 / 1e9)
}

/// The chain head and the next block's base fee, read together (`eth_feeHistory`).
#[derive(Debug, Clone, Copy)]
struct Head {
    number: u64,
    next_base_fee: u128,
    at: Instant,
}

/// What a submission reads from the chain before it reserves a nonce (see
/// [`TxManager::chain_view`]).
#[derive(Debug, Clone, Copy)]
pub struct ChainView {
    pending: u64,
    head: Head,
    fees: Fees,
}

pub struct TxManager {
    provider: DynProvider,
    wallet: EthereumWallet,
    key: KeyRef,
    signer_label: String,
    store: Arc<dyn RoundStore>,
    cfg: TxmConfig,
    metrics: Arc<Metrics>,
    /// Serializes reservation, signing and storing of this key's attempts.
    lock: tokio::sync::Mutex<()>,
    /// Orders the first broadcasts of the key's nonces. Taken while `lock` is held and
    /// before it is let go, so the next nonce is reserved and signed while this one is
    /// sent, and is sent after it (a node may refuse a nonce with a gap before it).
    sending: tokio::sync::Mutex<()>,
    head: tokio::sync::Mutex<Option<Head>>,
    /// New heads (probe and push): a follow wakes on them instead of its poll tick.
    heads: Option<tokio::sync::watch::Receiver<u64>>,
    /// Orders the backlog gauge's refreshes (see [`backlog`]).
    backlog: Arc<backlog::Order>,
}

impl TxManager {
    pub fn new(
        provider: DynProvider,
        wallet: EthereumWallet,
        signer: Address,
        chain_id: u64,
        store: Arc<dyn RoundStore>,
        cfg: TxmConfig,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            provider,
            wallet,
            key: KeyRef { signer, chain_id },
            signer_label: signer.to_string(),
            store,
            cfg,
            metrics,
            lock: tokio::sync::Mutex::new(()),
            sending: tokio::sync::Mutex::new(()),
            head: tokio::sync::Mutex::new(None),
            heads: None,
            backlog: Arc::default(),
        }
    }

    /// Wakes every follow of a nonce on a new head rather than on its poll tick only.
    pub fn with_heads(mut self, heads: tokio::sync::watch::Receiver<u64>) -> Self {
        self.heads = Some(heads);
        self
    }

    /// A receiver of new heads for one follow (heads before it are seen).
    fn head_waker(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        self.heads.clone().map(|mut rx| {
            rx.borrow_and_update();
            rx
        })
    }

    pub fn key(&self) -> KeyRef {
        self.key
    }

    /// Reads what a submission needs from the chain, together (one round trip): the
    /// key's pending count, the head and the fee estimate. Read ahead of
    /// [`Self::submit_with`] (while a pre-flight runs) it takes that round trip off the
    /// submission's path.
    pub async fn chain_view(&self) -> Result<ChainView, TxError> {
        let count = async {
            self.provider
                .get_transaction_count(self.key.signer)
                .pending()
                .await
                .map_err(|e| TxError::Rpc(format!("eth_getTransactionCount: {e}")))
        };
        let (pending, head, fees) = tokio::join!(count, self.head(true), self.estimate());
        Ok(ChainView {
            pending: pending?,
            head: head?,
            fees: fees?,
        })
    }

    /// Reserves a nonce for `payload` (moving its round to `submitted`), signs, stores
    /// and broadcasts the first attempt. Returns the nonce; follow it with [`Self::drive`].
    /// A broadcast that fails here is retried by `drive`.
    pub async fn submit(&self, payload: TxPayload) -> Result<u64, TxError> {
        self.submit_with(payload, None).await
    }

    /// [`Self::submit`] with a [`ChainView`] read ahead; one older than half a poll
    /// interval is read again. A pending count that another submission overtook in the
    /// meantime does no harm: the nonce reserved is the larger of it and the store's
    /// highest + 1 (one the key used elsewhere meanwhile ends `Lost`, as it would
    /// when used just after the count was read).
    pub async fn submit_with(
        &self,
        payload: TxPayload,
        view: Option<ChainView>,
    ) -> Result<u64, TxError> {
        let guard = self.lock.lock().await;
        let view = match view.filter(|v| v.head.at.elapsed() < self.cfg.poll_interval / 2) {
            Some(v) => v,
            None => self.chain_view().await?,
        };
        let nonce = self
            .store
            .reserve_nonce(self.key, view.pending, &payload)
            .await?;
        tracing::info!(market_id = %payload.market_id, nonce, signer = %self.key.signer, "nonce reserved");
        crash_point("reserved");
        self.first_attempt(guard, nonce, &payload, Some((view.head, view.fees)))
            .await?;
        Ok(nonce)
    }

    /// Signs and stores attempt 0 of a reserved nonce under the key's lock (`guard`),
    /// then sends it in order: `sending` is taken before the key's lock is let go.
    async fn first_attempt(
        &self,
        guard: tokio::sync::MutexGuard<'_, ()>,
        nonce: u64,
        payload: &TxPayload,
        chain: Option<(Head, Fees)>,
    ) -> Result<(), TxError> {
        let (attempt, head) = self.sign_first_locked(nonce, payload, chain).await?;
        let sending = self.sending.lock().await;
        drop(guard);
        self.send_first(payload, &attempt, head, sending).await
    }

    /// Sends attempt 0 of a nonce, in order (`sending` held, taken under the key's
    /// lock), then records the head it was sent at.
    async fn send_first(
        &self,
        payload: &TxPayload,
        attempt: &AttemptRecord,
        head: u64,
        sending: tokio::sync::MutexGuard<'_, ()>,
    ) -> Result<(), TxError> {
        let sent = self.send_raw(payload, attempt).await;
        drop(sending);
        let sent = sent?;
        self.mark_sent(payload, attempt, head, &sent).await;
        tracing::info!(market_id = %payload.market_id, nonce = attempt.nonce, tx = %attempt.tx_hash, max_fee_gwei = %gwei(attempt.max_fee_per_gas), result = ?sent, "transaction broadcast");
        crash_point("broadcast");
        Ok(())
    }

    /// Signs and stores attempt 0 of a reserved nonce (lock held), at the head and fee
    /// estimate given, or read now. Returns it with the head's number.
    async fn sign_first_locked(
        &self,
        nonce: u64,
        payload: &TxPayload,
        chain: Option<(Head, Fees)>,
    ) -> Result<(AttemptRecord, u64), TxError> {
        let (head, estimate) = match chain {
            Some(c) => c,
            None => (self.head(true).await?, self.estimate().await?),
        };
        let fees = fees::initial(estimate, head.next_base_fee, &self.cfg.fees).ok_or_else(|| {
            TxError::Stuck {
                nonce,
                secs: 0,
                attempts: 0,
                max_fee_gwei: gwei(self.cfg.fees.max_fee_cap),
                deep: "(not signed)".into(),
                why: format!(
                    ": the fee cap is below the next base fee of {} gwei; raise submit.max_fee_per_gas_gwei",
                    gwei(head.next_base_fee)
                ),
            }
        })?;
        let attempt = self.sign(nonce, 0, payload, fees).await?;
        self.store
            .add_attempt(self.key, payload.market, payload.market_id, &attempt)
            .await?;
        crash_point("signed");
        self.metrics.tx_attempt(&self.signer_label, "first");
        Ok((attempt, head.number))
    }

    async fn sign(
        &self,
        nonce: u64,
        seq: u32,
        p: &TxPayload,
        fees: Fees,
    ) -> Result<AttemptRecord, TxError> {
        let tx = TransactionRequest::default()
            .with_from(self.key.signer)
            .with_to(p.to)
            .with_input(p.calldata.clone())
            .with_nonce(nonce)
            .with_chain_id(self.key.chain_id)
            .with_gas_limit(p.gas_limit)
            .with_max_fee_per_gas(fees.max_fee_per_gas)
            .with_max_priority_fee_per_gas(fees.max_priority_fee_per_gas);
        let envelope = tx
            .build(&self.wallet)
            .await
            .map_err(|e| TxError::Sign(e.to_string()))?;
        Ok(AttemptRecord {
            nonce,
            seq,
            tx_hash: *envelope.tx_hash(),
            raw: envelope.encoded_2718().into(),
            max_fee_per_gas: fees.max_fee_per_gas,
            max_priority_fee_per_gas: fees.max_priority_fee_per_gas,
            gas_limit: p.gas_limit,
            sent_block: None,
            created_at: cresolver_store::now(),
        })
    }

    /// Sends an attempt's bytes; a node that accepted it or already has it marks the
    /// attempt sent at `head`. Only while this node holds the round's lease: a node
    /// that lost it (paused, partitioned) sends nothing.
    async fn broadcast(
        &self,
        p: &TxPayload,
        a: &AttemptRecord,
        head: u64,
    ) -> Result<Sent, TxError> {
        let sent = self.send_raw(p, a).await?;
        self.mark_sent(p, a, head, &sent).await;
        Ok(sent)
    }

    /// An attempt accepted (or already known) by the node is marked sent at `head`.
    async fn mark_sent(&self, p: &TxPayload, a: &AttemptRecord, head: u64, sent: &Sent) {
        if matches!(sent, Sent::Accepted | Sent::Known)
            && let Err(e) = self
                .store
                .mark_attempt_sent(self.key, p.market, p.market_id, a.nonce, a.seq, head)
                .await
        {
            tracing::error!(error = %e, "cannot record the broadcast of an attempt");
        }
    }

    /// Sends an attempt's bytes, only while this node holds the round's lease; says
    /// how the node took it.
    async fn send_raw(&self, p: &TxPayload, a: &AttemptRecord) -> Result<Sent, TxError> {
        if !self.store.fence_ok(p.market, p.market_id).await? {
            return Err(TxError::Store(StoreError::LeaseLost(p.market, p.market_id)));
        }
        let sent = match self.provider.send_raw_transaction(&a.raw).await {
            Ok(_) => Sent::Accepted,
            Err(e) => classify(&e.to_string()),
        };
        match &sent {
            Sent::Funds(m) => {
                tracing::error!(signer = %self.key.signer, nonce = a.nonce, error = %m, "the signing key cannot pay for its transaction: fund it")
            }
            Sent::Failed(m) => {
                tracing::warn!(nonce = a.nonce, tx = %a.tx_hash, error = %m, "broadcast failed")
            }
            _ => {}
        }
        Ok(sent)
    }

    async fn estimate(&self) -> Result<Fees, TxError> {
        let e = self
            .provider
            .estimate_eip1559_fees()
            .await
            .map_err(|e| TxError::Rpc(format!("fee estimate: {e}")))?;
        Ok(Fees {
            max_fee_per_gas: e.max_fee_per_gas,
            max_priority_fee_per_gas: e.max_priority_fee_per_gas,
        })
    }

    /// The head and next base fee, shared by every nonce this manager follows (read at
    /// most every half poll interval unless `fresh`).
    async fn head(&self, fresh: bool) -> Result<Head, TxError> {
        let mut cached = self.head.lock().await;
        let newer = self.heads.as_ref().map_or(0, |rx| *rx.borrow());
        if let Some(h) = *cached
            && !fresh
            && h.at.elapsed() < self.cfg.poll_interval / 2
            && newer <= h.number
        {
            return Ok(h);
        }
        let fh = self
            .provider
            .get_fee_history(1, BlockNumberOrTag::Latest, &[])
            .await
            .map_err(|e| TxError::Rpc(format!("eth_feeHistory: {e}")))?;
        let h = Head {
            number: fh.oldest_block,
            next_base_fee: fh.base_fee_per_gas.last().copied().unwrap_or(0),
            at: Instant::now(),
        };
        *cached = Some(h);
        Ok(h)
    }

    /// Follows a reserved nonce until one of our attempts is mined deep enough on the
    /// canonical chain, or the chain used the nonce otherwise; replaces, re-broadcasts
    /// and re-signs along the way. Returns [`TxError::Stuck`] after `wait_bound`.
    pub async fn drive(&self, nonce: u64) -> Result<TxOutcome, TxError> {
        let started = Instant::now();
        let need = self.cfg.confirmations;
        // when the chain's count first passed our nonce with none of our attempts found
        let mut lost_since: Option<Instant> = None;
        // (attempt, block) where we last saw one of our attempts included
        let mut included: Option<(B256, u64)> = None;
        let mut last_head: Option<u64> = None;
        let mut wake = self.head_waker();
        let mut last_pool_check = Instant::now();
        let mut force_bump = false;
        let mut at_cap_logged = false;
        loop {
            // the nonce and its attempts read together (one round trip on PostgreSQL);
            // an attempt stored between the two reads is seen at the next look
            let (rec, attempts) = self.store.nonce_with_attempts(self.key, nonce).await?;
            let rec = rec.ok_or(TxError::UnknownNonce(nonce))?;
            if rec.state == NonceState::Lost {
                return Ok(TxOutcome::Lost { nonce });
            }
            if attempts.is_empty() {
                // reserved, then the process stopped before signing
                let guard = self.lock.lock().await;
                if self.store.attempts(self.key, nonce).await?.is_empty() {
                    self.first_attempt(guard, nonce, &rec.payload, None).await?;
                }
                continue;
            }
            // A look that will look for a receipt (the first, or one woken by a new
            // head) reads the head and the receipts together (one round trip). With no
            // confirmations to wait for, the newest block's hash goes with them: a
            // receipt in that block needs no second read to know its block is canonical
            // (with confirmations, the receipt's block is never the newest when closed).
            let newer = wake.as_ref().map(|rx| *rx.borrow());
            let (head, prefetched, latest) = if last_head.is_none() || newer > last_head {
                let latest = async {
                    match need {
                        0 => self.latest_block().await.ok().flatten(),
                        _ => None,
                    }
                };
                let (h, m, l) =
                    tokio::join!(self.head(false), self.mined_attempt(&attempts), latest);
                (h?, Some(m?), l)
            } else {
                (self.head(false).await?, None, None)
            };
            let new_head = last_head != Some(head.number);
            last_head = Some(head.number);
            if new_head || included.is_some() || rec.state == NonceState::Mined {
                let mined = match prefetched {
                    Some(m) => m,
                    None => self.mined_attempt(&attempts).await?,
                };
                if let Some((a, r)) = mined {
                    let block = r.block_number.unwrap_or(head.number);
                    if included.map(|(_, b)| b) != Some(block) {
                        tracing::info!(market_id = %rec.payload.market_id, nonce, tx = %a.tx_hash, block, need, "transaction included; waiting for confirmations");
                        included = Some((a.tx_hash, block));
                    }
                    lost_since = None;
                    // (a block that changed under us is looked at again at the next head)
                    if head.number >= block.saturating_add(need)
                        && self
                            .close_if_canonical(self.key, nonce, a.tx_hash, block, &r, latest)
                            .await?
                    {
                        self.metrics.tx_event(&self.signer_label, "mined");
                        self.refresh_backlog();
                        return Ok(TxOutcome::Mined {
                            nonce,
                            attempt: a,
                            receipt: Box::new(r),
                        });
                    }
                    self.wait(started, nonce, &attempts, &mut wake).await?;
                    continue;
                }
                if let Some((tx, block)) = included.take() {
                    tracing::warn!(market_id = %rec.payload.market_id, nonce, %tx, block, "reorg: our transaction is no longer on the canonical chain; re-broadcasting it");
                    self.metrics.tx_event(&self.signer_label, "reorged");
                    if let Some(a) = attempts.iter().find(|a| a.tx_hash == tx) {
                        self.metrics.tx_attempt(&self.signer_label, "rebroadcast");
                        let _ = self.broadcast(&rec.payload, a, head.number).await?;
                    }
                }
                // Not mined: has the chain used the nonce for something else?
                let mined_count = self.deep_count(self.key.signer, head.number).await?;
                if mined_count > nonce {
                    // One of ours may have been mined between the two reads, or its
                    // receipt may not be indexed yet (a node updates the account's
                    // count before its receipts, a load balancer mixes backends): look
                    // the attempts up by hash, and declare the nonce lost only when
                    // that holds for a grace period.
                    if self.mined_attempt(&attempts).await?.is_some()
                        || self.any_attempt_in_a_block(&attempts).await?
                    {
                        last_head = None;
                        self.wait(started, nonce, &attempts, &mut wake).await?;
                        continue;
                    }
                    let since = *lost_since.get_or_insert_with(Instant::now);
                    if since.elapsed() < self.lost_grace() {
                        last_head = None;
                        self.wait(started, nonce, &attempts, &mut wake).await?;
                        continue;
                    }
                    let detail = format!(
                        "the chain used nonce {nonce} for a transaction that is none of our {} attempt(s)",
                        attempts.len()
                    );
                    tracing::warn!(market_id = %rec.payload.market_id, nonce, "{detail}");
                    self.store
                        .finish_nonce(self.key, nonce, NonceState::Lost, None, Some(&detail))
                        .await?;
                    self.metrics.tx_event(&self.signer_label, "lost");
                    self.refresh_backlog();
                    return Ok(TxOutcome::Lost { nonce });
                }
                lost_since = None;
                self.refresh_backlog();
            }
            let Some(newest) = attempts.last() else {
                continue;
            };
            let current = Fees {
                max_fee_per_gas: newest.max_fee_per_gas,
                max_priority_fee_per_gas: newest.max_priority_fee_per_gas,
            };
            let Some(sent_block) = newest.sent_block else {
                // stored, never accepted by a node (a crash, or a refused broadcast)
                match self.broadcast(&rec.payload, newest, head.number).await? {
                    Sent::Underpriced(_) => force_bump = true,
                    Sent::NonceTooLow => last_head = None,
                    _ => {}
                }
                self.wait(started, nonce, &attempts, &mut wake).await?;
                continue;
            };
            let reason = if force_bump {
                Some(BumpReason::Refused)
            } else {
                fees::needs_bump(
                    current,
                    head.next_base_fee,
                    sent_block,
                    head.number,
                    &self.cfg.fees,
                )
            };
            if let Some(reason) = reason {
                force_bump = false;
                let _guard = self.lock.lock().await;
                let estimate = self.estimate().await?;
                match fees::bump(current, estimate, head.next_base_fee, &self.cfg.fees) {
                    Bump::Replace(f) => {
                        let a = self.sign(nonce, newest.seq + 1, &rec.payload, f).await?;
                        self.store
                            .add_attempt(self.key, rec.payload.market, rec.payload.market_id, &a)
                            .await?;
                        crash_point("replaced");
                        self.metrics.tx_attempt(&self.signer_label, "replacement");
                        let sent = self.broadcast(&rec.payload, &a, head.number).await?;
                        tracing::warn!(market_id = %rec.payload.market_id, nonce, ?reason, replaces = %newest.tx_hash, tx = %a.tx_hash,
                            max_fee_gwei = %gwei(f.max_fee_per_gas), tip_gwei = %gwei(f.max_priority_fee_per_gas),
                            next_base_fee_gwei = %gwei(head.next_base_fee), result = ?sent, "transaction replaced with higher fees");
                        if matches!(sent, Sent::Underpriced(_)) {
                            force_bump = true;
                        }
                        last_head = None;
                        continue;
                    }
                    Bump::AtCap => {
                        if !at_cap_logged {
                            tracing::error!(market_id = %rec.payload.market_id, nonce, max_fee_gwei = %gwei(current.max_fee_per_gas),
                                next_base_fee_gwei = %gwei(head.next_base_fee), "cannot replace the transaction: the fee cap (submit.max_fee_per_gas_gwei) is reached");
                            at_cap_logged = true;
                        }
                    }
                }
            } else if last_pool_check.elapsed()
                >= self.cfg.poll_interval.max(Duration::from_secs(1))
            {
                last_pool_check = Instant::now();
                let known = self
                    .provider
                    .get_transaction_by_hash(newest.tx_hash)
                    .await
                    .map_err(|e| TxError::Rpc(format!("eth_getTransactionByHash: {e}")))?;
                if known.is_none() {
                    tracing::warn!(market_id = %rec.payload.market_id, nonce, tx = %newest.tx_hash, "transaction dropped from the pool; re-broadcasting it");
                    self.metrics.tx_attempt(&self.signer_label, "rebroadcast");
                    match self.broadcast(&rec.payload, newest, head.number).await? {
                        Sent::Underpriced(_) => force_bump = true,
                        Sent::NonceTooLow => last_head = None,
                        _ => {}
                    }
                    continue;
                }
            }
            self.wait(started, nonce, &attempts, &mut wake).await?;
        }
    }

    /// How long "the chain's count passed our nonce and none of our attempts is mined"
    /// must hold before the nonce is declared lost.
    fn lost_grace(&self) -> Duration {
        (self.cfg.poll_interval * 5).max(Duration::from_secs(2))
    }

    /// Sleeps one poll interval or until a new head, or fails with [`TxError::Stuck`]
    /// past the bound.
    async fn wait(
        &self,
        started: Instant,
        nonce: u64,
        attempts: &[AttemptRecord],
        wake: &mut Option<tokio::sync::watch::Receiver<u64>>,
    ) -> Result<(), TxError> {
        if started.elapsed() >= self.cfg.wait_bound {
            let last = attempts.last();
            return Err(TxError::Stuck {
                nonce,
                secs: started.elapsed().as_secs(),
                attempts: attempts.len(),
                max_fee_gwei: gwei(last.map_or(0, |a| a.max_fee_per_gas)),
                deep: format!("with {} block(s) on top", self.cfg.confirmations),
                why: String::new(),
            });
        }
        let tick = tokio::time::sleep(self.cfg.poll_interval);
        match wake {
            Some(rx) => {
                tokio::select! {
                    _ = tick => {}
                    changed = rx.changed() => if changed.is_err() { *wake = None },
                }
            }
            None => tick.await,
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_errors_are_classified() {
        assert_eq!(classify("already known"), Sent::Known);
        assert_eq!(
            classify(
                "server returned an error response: error code -32000: nonce too low: next nonce 5, tx nonce 4"
            ),
            Sent::NonceTooLow
        );
        assert!(matches!(
            classify("max fee per gas less than block base fee"),
            Sent::Underpriced(_)
        ));
        assert!(matches!(
            classify("replacement transaction underpriced"),
            Sent::Underpriced(_)
        ));
        assert!(matches!(
            classify("insufficient funds for gas * price + value"),
            Sent::Funds(_)
        ));
        assert!(matches!(classify("connection refused"), Sent::Failed(_)));
    }
}
