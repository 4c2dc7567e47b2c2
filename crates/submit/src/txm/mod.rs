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
mod follow;
mod foreign;

use alloy::eips::{BlockNumberOrTag, Encodable2718};
use alloy::network::{EthereumWallet, NetworkTransactionBuilder, TransactionBuilder};
use alloy::primitives::Address;
use alloy::providers::{DynProvider, Provider};
use alloy::rpc::types::{TransactionReceipt, TransactionRequest};
use cresolver_metrics::{Metrics, TxAttemptKind};
use cresolver_store::{AttemptRecord, KeyRef, NonceState, StoreError, TxPayload, TxStore};
use fees::{FeePolicy, Fees};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Settings of a transaction manager.
#[derive(Debug, Clone)]
pub struct TxmConfig {
    /// Blocks that must be on top of the receipt's block (as the watcher counts them for
    /// requests: 0 takes the receipt as it is).
    pub confirmations: u64,
    /// How attempts are priced and when they are replaced.
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
        /// The nonce.
        nonce: u64,
        /// Our attempt that was mined.
        attempt: AttemptRecord,
        /// Its receipt.
        receipt: Box<TransactionReceipt>,
    },
    /// The chain used the nonce for a transaction that is none of our attempts (the key
    /// signed elsewhere). Nothing of ours can be mined at it any more.
    Lost {
        /// The nonce.
        nonce: u64,
    },
}

/// What became of a nonce another key reserved (see [`TxManager::check_foreign`]).
#[derive(Debug, Clone)]
pub enum Foreign {
    /// One of its attempts is mined deep enough on the canonical chain (its receipt);
    /// the reservation is closed.
    Mined(Box<TransactionReceipt>),
    /// That key's nonce was used by a transaction that is none of its attempts.
    Lost,
    /// Neither yet: its newest attempt was re-broadcast, or waits for confirmations.
    Pending,
}

/// Why the transaction manager could not submit or follow a nonce.
#[derive(Debug, thiserror::Error)]
pub enum TxError {
    /// The store failed (or this node lost the round's lease).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The chain's RPC failed.
    #[error("RPC error: {0}")]
    Rpc(#[from] cresolver_chain::RpcFailure),
    /// The wallet could not sign the transaction.
    #[error("cannot sign: {0}")]
    Sign(alloy::network::TransactionBuilderError<alloy::network::Ethereum>),
    /// The nonce followed has no reservation in the store.
    #[error("nonce {0} of the signing key is not reserved in the store")]
    UnknownNonce(u64),
    /// The nonce is not mined deep enough within the wait bound, or its first attempt
    /// cannot be priced under the fee cap.
    #[error(
        "nonce {nonce} {why} after {secs} s ({attempts} attempt(s), last max fee {} gwei); it stays reserved and is followed again", gwei(*.max_fee_per_gas)
    )]
    Stuck {
        /// The nonce.
        nonce: u64,
        /// How long it was followed, in seconds.
        secs: u64,
        /// How many attempts were signed at it.
        attempts: usize,
        /// The newest attempt's max fee per gas (the fee cap when nothing was signed), in wei.
        max_fee_per_gas: u128,
        /// Why it is stuck.
        why: Stuck,
    },
}

/// Why a nonce is stuck.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stuck {
    /// Not mined with `confirmations` blocks on top within the wait bound.
    NotDeep {
        /// The blocks on top it needed.
        confirmations: u64,
    },
    /// Its first attempt cannot be priced under the fee cap, so nothing was signed.
    UnderFeeCap {
        /// The next block's base fee, in wei.
        next_base_fee: u128,
    },
}

impl std::fmt::Display for Stuck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotDeep { confirmations } => {
                write!(f, "not mined with {confirmations} block(s) on top")
            }
            Self::UnderFeeCap { next_base_fee } => write!(
                f,
                "not signed: the fee cap is below the next base fee of {} gwei (raise submit.max_fee_per_gas_gwei)",
                gwei(*next_base_fee)
            ),
        }
    }
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

/// The transaction manager of one signing key on one chain (see the module's doc).
pub struct TxManager {
    provider: DynProvider,
    wallet: EthereumWallet,
    key: KeyRef,
    signer_label: String,
    store: Arc<dyn TxStore>,
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
    /// A manager of `signer`'s transactions on chain `chain_id`, signed with `wallet`,
    /// sent through `provider`, its nonces and attempts kept in `store`.
    pub fn new(
        provider: DynProvider,
        wallet: EthereumWallet,
        signer: Address,
        chain_id: u64,
        store: Arc<dyn TxStore>,
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

    /// The signing key and chain this manager owns.
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
                .map_err(|e| {
                    TxError::Rpc(cresolver_chain::RpcFailure::new(
                        "eth_getTransactionCount",
                        e,
                    ))
                })
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
        let fees =
            fees::initial(estimate, head.next_base_fee, &self.cfg.fees).ok_or_else(|| {
                TxError::Stuck {
                    nonce,
                    secs: 0,
                    attempts: 0,
                    max_fee_per_gas: self.cfg.fees.max_fee_cap,
                    why: Stuck::UnderFeeCap {
                        next_base_fee: head.next_base_fee,
                    },
                }
            })?;
        let attempt = self.sign(nonce, 0, payload, fees).await?;
        self.store
            .add_attempt(self.key, payload.key(), &attempt)
            .await?;
        crash_point("signed");
        self.metrics
            .tx_attempt(&self.signer_label, TxAttemptKind::First);
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
        let envelope = tx.build(&self.wallet).await.map_err(TxError::Sign)?;
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
                .mark_attempt_sent(self.key, p.key(), a.nonce, a.seq, head)
                .await
        {
            tracing::error!(error = %e, "cannot record the broadcast of an attempt");
        }
    }

    /// Sends an attempt's bytes, only while this node holds the round's lease; says
    /// how the node took it.
    async fn send_raw(&self, p: &TxPayload, a: &AttemptRecord) -> Result<Sent, TxError> {
        if !self.store.fence_ok(p.key()).await? {
            return Err(TxError::Store(StoreError::LeaseLost(p.key())));
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
            .map_err(|e| TxError::Rpc(cresolver_chain::RpcFailure::new("fee estimate", e)))?;
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
            .map_err(|e| TxError::Rpc(cresolver_chain::RpcFailure::new("eth_feeHistory", e)))?;
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
        let mut follow = follow::Follow::new(self, nonce);
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
            match follow.turn(&rec, &attempts).await? {
                follow::Step::Done(outcome) => return Ok(outcome),
                follow::Step::Wait => {
                    self.wait(follow.started, nonce, &attempts, &mut follow.wake)
                        .await?
                }
                follow::Step::Again => {}
            }
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
                max_fee_per_gas: last.map_or(0, |a| a.max_fee_per_gas),
                why: Stuck::NotDeep {
                    confirmations: self.cfg.confirmations,
                },
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
