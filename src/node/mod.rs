//! The resolver node: runs every workflow it is given against its market — a watcher
//! turns `ResolutionRequested` logs into durable requests, a dispatcher runs rounds
//! concurrently (bounded) through read → discover → resolve/challenge → evaluate →
//! submit, persisting each state, and the HTTP API serves health, metrics, rounds and
//! the bearer-guarded manual trigger. Restarted, it resumes every unfinished round; a
//! stored signed transaction is re-broadcast, never re-signed, so a market is resolved
//! by at most one transaction of this node. Shutdown lets in-flight rounds reach a
//! persisted state first.

pub mod api;
pub mod finality;
pub mod metrics;
pub mod status;

use crate::api::{ApiState, ManualTrigger};
use crate::chain::heads::{HeadFeed, PushConfig};
use crate::chain::reader::{ReadError, read_market, resolved_at_head};
use crate::chain::watcher::{Trigger, Watcher};
use crate::config::{NodeConfig, default_confirmations, is_dev_chain};
use crate::discovery::DiscoveryConfig;
use crate::live::{LiveContext, LiveError, collect_input};
use crate::metrics::Metrics;
use crate::resolve::report::ReportMetadata;
use crate::round::{Engine, RoundError, RoundProgress, RoundStage};
use crate::store::TxPayload;
use crate::store::{RoundState, RoundStore, SqliteStore, Store};
use crate::submit::{Confirmed, SubmitError, Submitter, SubmitterConfig};
use crate::txm::fees::FeePolicy;
use crate::txm::{TxError, TxManager, TxOutcome, TxmConfig};
use crate::workers::registry::{ProtocolKind, ProtocolSet};
use crate::workflow::Workflow;
use alloy::network::EthereumWallet;
use alloy::primitives::{Address, B256, U256};
use alloy::providers::{DynProvider, Provider};
use alloy::signers::local::PrivateKeySigner;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinSet;

/// Version of the transcript JSON stored with each round (schema: [`crate::transcript`]).
pub use crate::transcript::TRANSCRIPT_VERSION;
use crate::transcript::{ConfirmationRecord, RequestRecord, SubmissionRecord, Transcript};

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Workflow(#[from] crate::workflow::WorkflowError),
    #[error(transparent)]
    Engine(#[from] crate::round::EngineError),
    #[error(transparent)]
    Connect(#[from] crate::chain::ConnectError),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error(transparent)]
    Submit(#[from] SubmitError),
    #[error("RPC chain id is {actual} but the config expects {expected}")]
    ChainId { expected: u64, actual: u64 },
    #[error("workflows {0} and {1} both watch market {2}: give each its own [trigger].address")]
    SameMarket(String, String, Address),
    #[error("cannot read market {market_id} on chain to judge the request: {error} (try again)")]
    Judge { market_id: U256, error: String },
    #[error(
        "cannot listen on {addr} for the HTTP API: {error} (is another node running? set api.listen to a free address, or empty to disable)"
    )]
    Listen { addr: String, error: String },
}

/// One workflow bound to its market.
pub struct Pipeline {
    pub workflow: Workflow,
    pub market: Address,
    pub engine: Engine,
    pub submitter: Submitter,
}

/// A round's result as the operator sees it.
#[derive(Debug, Clone, Serialize)]
pub struct RoundReport {
    pub market: Address,
    pub market_id: U256,
    pub state: RoundState,
    pub reason: Option<String>,
    pub tx_hash: Option<B256>,
    pub resolution: Option<bool>,
    /// The stored transcript, when the round got that far.
    pub transcript: Option<serde_json::Value>,
}

pub struct Node {
    pub cfg: NodeConfig,
    pub provider: DynProvider,
    pub chain_id: u64,
    pub store: Arc<dyn RoundStore>,
    pub metrics: Arc<Metrics>,
    pub pipelines: Vec<Pipeline>,
    pub discovery: DiscoveryConfig,
    /// The transaction manager of the node's signing key (`None`: no key, no submission).
    pub txm: Option<Arc<TxManager>>,
    http: reqwest::Client,
    rounds: Arc<Semaphore>,
    in_flight: Mutex<HashSet<(Address, U256)>>,
    retries: Mutex<HashMap<(Address, U256), u32>>,
    health: Arc<std::sync::RwLock<serde_json::Value>>,
    /// The chain as the head probe sees it (`/health`, `/health/ready`, chain metrics).
    pub chain_health: Arc<crate::chain::health::ChainHealth>,
    /// The newest head (probe and push subscription): wakes the watcher and the txm.
    heads: HeadFeed,
    /// Every task the node spawns outside its dispatcher (round retries), drained at
    /// shutdown; `cancel` ends those that have not started their round yet.
    tracker: tokio_util::task::TaskTracker,
    cancel: tokio_util::sync::CancellationToken,
}

impl Node {
    /// Connects, loads the workflows and opens the store. `signer` is the resolver key
    /// (`None`: the node can simulate but not submit).
    pub async fn build(
        cfg: NodeConfig,
        signer: Option<PrivateKeySigner>,
    ) -> Result<Arc<Self>, NodeError> {
        // the store first: a database that cannot be used is the first thing to fix
        let store = open_store(&cfg).await?;
        let (pool, provider, chain_id) =
            crate::chain::connect_pool_checked(&cfg.rpc_urls(), cfg.pool_config()).await?;
        if let Some(expected) = cfg.chain.chain_id
            && expected != chain_id
        {
            return Err(NodeError::ChainId {
                expected,
                actual: chain_id,
            });
        }
        let mut cfg = cfg;
        if cfg.protocols.chorus.enabled && cfg.protocols.chorus.orchestrator_id.trim().is_empty() {
            // one id for this node's hiring history on Chorus: drawn once, kept in the
            // store (a cluster shares it), the same after every restart
            let id = store
                .setting_or_init(CHORUS_ORCHESTRATOR_KEY, &uuid::Uuid::new_v4().to_string())
                .await?;
            tracing::debug!(orchestrator_id = %id, "Chorus orchestrator id (from the store)");
            cfg.protocols.chorus.orchestrator_id = id;
        }
        let discovery = discovery_config(&cfg)?;
        let default_market = cfg.chain.market_address;
        let from = signer.as_ref().map(|s| s.address()).unwrap_or_default();
        let wallet = signer.map(EthereumWallet::from);
        let mut pipelines = Vec::new();
        let mut seen: HashMap<Address, String> = HashMap::new();
        for path in &cfg.node.workflows {
            let workflow = Workflow::load(path)?;
            let market = match workflow.trigger.address.or(default_market) {
                Some(m) => m,
                None => cfg.market()?,
            };
            if let Some(other) = seen.insert(market, workflow.name.clone()) {
                return Err(NodeError::SameMarket(other, workflow.name.clone(), market));
            }
            let submitter = Submitter::new(
                provider.clone(),
                from,
                submitter_config(&cfg, &workflow, market),
            )?;
            let engine = Engine::new(workflow.clone(), &discovery.net_policy())?;
            pipelines.push(Pipeline {
                workflow,
                market,
                engine,
                submitter,
            });
        }
        let metrics = Arc::new(Metrics::new());
        let heads = HeadFeed::new();
        let txm = wallet.map(|w| {
            Arc::new(
                TxManager::new(
                    provider.clone(),
                    w,
                    from,
                    chain_id,
                    store.clone(),
                    txm_config(&cfg, chain_id),
                    metrics.clone(),
                )
                .with_heads(heads.subscribe()),
            )
        });
        let chain_health = Arc::new(crate::chain::health::ChainHealth::new(
            crate::chain::health::HealthLimits {
                confirmations: cfg
                    .chain
                    .confirmations
                    .unwrap_or(default_confirmations(chain_id)),
                max_head_age: cfg
                    .chain
                    .max_head_age_secs
                    .or((!is_dev_chain(chain_id)).then_some(60))
                    .map(Duration::from_secs),
                max_lag_blocks: cfg.chain.max_lag_blocks,
            },
            pool,
            heads.clone(),
            metrics.clone(),
        ));
        // discovery's metadata fetches: the same address policy as worker calls
        let http = discovery.net_policy().http_client();
        let health = json!({"chain_id": chain_id, "markets": pipelines.iter().map(|p| p.market.to_string()).collect::<Vec<_>>()});
        Ok(Arc::new(Self {
            rounds: Arc::new(Semaphore::new(cfg.node.max_concurrent_rounds)),
            cfg,
            provider,
            chain_id,
            store,
            metrics,
            pipelines,
            discovery,
            txm,
            http,
            in_flight: Mutex::new(HashSet::new()),
            retries: Mutex::new(HashMap::new()),
            health: Arc::new(std::sync::RwLock::new(health)),
            chain_health,
            heads,
            tracker: tokio_util::task::TaskTracker::new(),
            cancel: tokio_util::sync::CancellationToken::new(),
        }))
    }

    /// Where a workflow's watcher starts and the floor below which no request is acted
    /// on: `chain.start_block`, else the one remembered from the node's first start (0 on
    /// a dev chain, else the head then; a store that predates it remembers its watch
    /// checkpoint less the reorg window).
    async fn start_block(&self, p: &Pipeline, dev: bool, head: u64) -> Result<u64, NodeError> {
        if let Some(b) = self.cfg.chain.start_block {
            return Ok(b);
        }
        let key = format!("start:{}:{}", p.market, p.workflow.name);
        if let Some((b, _)) = self.store.checkpoint(&key).await? {
            return Ok(b);
        }
        let watched = format!("watch:{}:{}", p.market, p.workflow.name);
        let start = match self.store.checkpoint(&watched).await? {
            Some((n, _)) => n.saturating_sub(REORG_WINDOW).min(head),
            None if dev => 0,
            None => head,
        };
        self.store.set_checkpoint(&key, start, B256::ZERO).await?;
        tracing::info!(market = %p.market, workflow = %p.workflow.name, start_block = start, "first start: requests below this block are never acted on (set chain.start_block to choose)");
        Ok(start)
    }

    fn pipeline(&self, market: Address) -> Option<&Pipeline> {
        self.pipelines.iter().find(|p| p.market == market)
    }

    /// Records a manual request for `market_id` on the first workflow's market. A round
    /// that is done is served again only when the chain says the market is unresolved;
    /// otherwise the request is ignored with that reason.
    pub async fn request(&self, market_id: U256) -> Result<Option<Trigger>, NodeError> {
        let p = &self.pipelines[0];
        let done = self
            .store
            .get(p.market, market_id)
            .await?
            .is_some_and(|r| r.state.is_resolved());
        let unresolved = if done {
            match crate::chain::watcher::judge_request(&self.provider, p.market, market_id, None)
                .await
            {
                Ok(crate::chain::watcher::ChainWord::Unresolved) => true,
                Ok(crate::chain::watcher::ChainWord::Resolved(why)) => {
                    tracing::info!(market_id = %market_id, reason = %why, "manual resolution request ignored: the market is resolved on chain");
                    return Ok(None);
                }
                Err(e) => {
                    return Err(NodeError::Judge {
                        market_id,
                        error: e.to_string(),
                    });
                }
            }
        } else {
            false
        };
        let d = self
            .store
            .manual_request_judged(p.market, market_id, &p.workflow.name, unresolved)
            .await?;
        tracing::info!(market_id = %market_id, decision = ?d, "manual resolution request");
        // A manual request also resumes an unfinished round that is not running.
        let unfinished = self
            .store
            .get(p.market, market_id)
            .await?
            .is_some_and(|r| !r.state.is_final());
        Ok((d.starts_round() || unfinished).then(|| Trigger {
            market: p.market,
            market_id,
            question: String::new(),
            log: None,
        }))
    }

    /// Runs (or resumes) the round of one market to a final or persisted state.
    pub async fn run_round(
        self: &Arc<Self>,
        market: Address,
        market_id: U256,
    ) -> Result<RoundReport, NodeError> {
        self.run_round_as(market, market_id, Claim::Direct).await
    }

    /// [`Self::run_round`], claiming the round's lease first: `Claim::FromStore` (the
    /// claim loop) respects the back-off a paused round was released with.
    async fn run_round_as(
        self: &Arc<Self>,
        market: Address,
        market_id: U256,
        how: Claim,
    ) -> Result<RoundReport, NodeError> {
        let running = !self
            .in_flight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((market, market_id));
        if running {
            return self.report(market, market_id).await;
        }
        let _permit = self.rounds.acquire().await.ok();
        let started = Instant::now();
        let result = self.drive_leased(market, market_id, how).await;
        self.in_flight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&(market, market_id));
        self.metrics
            .observe_stage("round", started.elapsed().as_secs_f64());
        match result {
            Ok(()) => {}
            Err(Step::Transient(reason)) => {
                // the store may be what is failing: the retry is scheduled regardless
                let stage = match self.store.get(market, market_id).await {
                    Ok(r) => r.map_or("requested", |r| r.state.as_str()),
                    Err(_) => "unknown",
                };
                self.metrics.round_stopped(stage, "retry");
                tracing::warn!(market_id = %market_id, stage, %reason, "round paused on a transient error; will retry");
                self.schedule_retry(market, market_id);
                return self.report(market, market_id).await;
            }
            Err(Step::Store(e)) => return Err(NodeError::Store(e)),
            Err(Step::LeaseLost) => {
                self.metrics.lease_event("lost");
                tracing::warn!(market_id = %market_id, node = self.store.node_id(), "lease lost: another node drives this round now; this node stopped it and wrote nothing more");
                return self.report(market, market_id).await;
            }
            Err(Step::NotHeld) => {
                tracing::debug!(market_id = %market_id, "round held by another node (or final): not run here");
                return self.report(market, market_id).await;
            }
        }
        let r = self.report(market, market_id).await?;
        if matches!(r.state, RoundState::Failed | RoundState::Skipped) {
            let stage = r.transcript.as_ref().map_or("before evaluation", |t| {
                if t.get("confirmation").is_some() {
                    "submitted"
                } else if t.get("outcome").is_some() {
                    "evaluated"
                } else {
                    "discovered"
                }
            });
            self.metrics.round_stopped(stage, r.state.as_str());
            let reason = r.reason.as_deref().unwrap_or("");
            if r.state == RoundState::Failed {
                tracing::error!(market_id = %market_id, stage, reason, "round failed");
            } else {
                tracing::warn!(market_id = %market_id, stage, reason, "round skipped");
            }
        }
        if r.state.is_final() {
            self.metrics.round_finished(r.state.as_str());
            self.retries
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&(market, market_id));
        }
        Ok(r)
    }

    /// Claims the round, drives it while a renewal task keeps the lease, and releases it.
    /// The drive stops at once when the lease is lost (a renewal refused, or not renewed
    /// within the lease: the node then cannot know it still holds it).
    async fn drive_leased(&self, market: Address, market_id: U256, how: Claim) -> Result<(), Step> {
        let lease = match self
            .store
            .claim(market, market_id, how == Claim::Direct)
            .await?
        {
            Some(l) => l,
            None => return Err(Step::NotHeld),
        };
        if self.store.shared() {
            self.metrics.lease_event("claimed");
            if let Some(prev) = &lease.taken_from {
                self.metrics.lease_event("takeover");
                tracing::warn!(market_id = %market_id, from = %prev, term = lease.term, "taking over a round whose holder's lease expired; continuing from its persisted stage");
            } else {
                tracing::debug!(market_id = %market_id, term = lease.term, "lease claimed");
            }
        }
        self.metrics.set_leases_held(self.store.held() as u64);
        let halt = Halt::default();
        // aborted with this future, also when the node drops it (shutdown, a test)
        let renewal = self.store.shared().then(|| {
            tokio_util::task::AbortOnDropHandle::new(tokio::spawn(renew_lease(
                self.store.clone(),
                market,
                market_id,
                halt.token.clone(),
            )))
        });
        let result = tokio::select! {
            r = self.drive(market, market_id, &halt) => r,
            _ = halt.token.cancelled() => Err(halt.step()),
        };
        drop(renewal);
        let retry_after = match &result {
            // the wait of the retry about to be scheduled
            Err(Step::Transient(_)) => Some(self.backoff(self.retries_of(market, market_id) + 1)),
            _ => None,
        };
        // Released whatever the outcome: after a lost lease the conditional update
        // touches nothing (the term moved on) and this node forgets its claim; after a
        // renewal that could not be made in time it frees the round for another node.
        if let Err(e) = self.store.release(market, market_id, retry_after).await {
            tracing::warn!(market_id = %market_id, error = %e, "cannot release the round's lease: it expires by itself");
        }
        self.metrics.set_leases_held(self.store.held() as u64);
        result
    }

    /// How long a node that took a round over waits for the transaction another key
    /// signed for it before it signs its own: three receipt timeouts.
    fn foreign_wait(&self) -> Duration {
        Duration::from_millis(self.cfg.submit.receipt_timeout_ms.max(1_000)).saturating_mul(3)
    }

    /// The wait before the `n`-th retry of a round: it doubles up to the configured cap.
    fn backoff(&self, n: u32) -> Duration {
        Duration::from_secs(1u64 << n.min(6)).min(self.cfg.max_backoff())
    }

    /// How many times a round was retried so far.
    fn retries_of(&self, market: Address, market_id: U256) -> u32 {
        self.retries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(market, market_id))
            .copied()
            .unwrap_or(0)
    }

    fn schedule_retry(self: &Arc<Self>, market: Address, market_id: U256) {
        let n = {
            let mut r = self.retries.lock().unwrap_or_else(|p| p.into_inner());
            let n = r.entry((market, market_id)).or_insert(0);
            *n += 1;
            *n
        };
        // Retried for as long as the market is open: a round that reads the market
        // resolved ends `skipped`.
        let node = self.clone();
        let delay = self.backoff(n);
        let mut restored = self.heads.on_restore();
        restored.borrow_and_update();
        let cancel = self.cancel.clone();
        // tracked: shutdown waits for a retry that runs, and cancels one that waits
        self.tracker.spawn(async move {
            // the wait ends early when the RPC comes back after an outage
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = restored.changed() => {}
                _ = cancel.cancelled() => return,
            }
            if cancel.is_cancelled() {
                return;
            }
            let _ = node.run_round(market, market_id).await;
        });
    }

    /// The stored state of a round.
    pub async fn report(&self, market: Address, market_id: U256) -> Result<RoundReport, NodeError> {
        let rec = self.store.get(market, market_id).await?;
        Ok(match rec {
            Some(r) => RoundReport {
                market,
                market_id,
                state: r.state,
                reason: r.reason,
                tx_hash: r.submit_tx,
                resolution: r
                    .outcome
                    .as_ref()
                    .and_then(|o| Transcript::deserialize(o).ok())
                    .and_then(|t| t.outcome)
                    .map(|o| o.tally.resolution),
                transcript: r.outcome,
            },
            None => RoundReport {
                market,
                market_id,
                state: RoundState::Failed,
                reason: Some("no such round".into()),
                tx_hash: None,
                resolution: None,
                transcript: None,
            },
        })
    }

    async fn drive(&self, market: Address, market_id: U256, halt: &Halt) -> Result<(), Step> {
        let Some(p) = self.pipeline(market) else {
            return self
                .fail(market, market_id, "no workflow watches this market")
                .await;
        };
        let Some(rec) = self.store.get(market, market_id).await? else {
            return Ok(());
        };
        if rec.state.is_final() {
            return Ok(());
        }
        // A nonce is reserved for this round: follow it, never sign a second payload.
        if let Some(txm) = &self.txm
            && let Some(n) = txm.pending_for(market, market_id).await.map_err(tx_step)?
        {
            tracing::info!(market_id = %market_id, nonce = n.nonce, state = rec.state.as_str(), "resuming a reserved transaction");
            return self.follow(p, market_id, n.nonce).await;
        }
        // A nonce another node's key reserved (a takeover in a cluster of different
        // keys): its signed bytes are re-broadcast and followed before this node signs
        // anything of its own, for at most `foreign_wait` after the reservation.
        if let Some(txm) = &self.txm {
            for (key, n) in self
                .store
                .pending_nonces_of_round(market, market_id)
                .await?
            {
                if key == txm.key() {
                    continue;
                }
                match txm.check_foreign(key, &n).await.map_err(tx_step)? {
                    crate::txm::Foreign::Mined(receipt) => {
                        tracing::info!(market_id = %market_id, signer = %key.signer, nonce = n.nonce, "the previous holder's transaction is mined");
                        return self.conclude(p, market_id, &receipt).await;
                    }
                    crate::txm::Foreign::Lost => {}
                    crate::txm::Foreign::Pending => {
                        let age = crate::store::now().saturating_sub(n.created_at);
                        if age < self.foreign_wait().as_secs() {
                            return Err(Step::Transient(format!(
                                "waiting for the resolution that key {} signed at nonce {} (re-broadcast), {age} s after it was reserved",
                                key.signer, n.nonce
                            )));
                        }
                        tracing::warn!(market_id = %market_id, signer = %key.signer, nonce = n.nonce, age, "the previous holder's transaction was not mined in time: this node signs its own (a pre-flight shows whether the market is still open; should both land, the second reverts on chain with AlreadyResolved)");
                    }
                }
            }
        }
        let span_started = Instant::now();
        // One judging point: the request's block. A manual request has no request log; it
        // is judged at the head block of its first run, which is kept for every resume.
        let block = match rec.request_block {
            Some(b) => b,
            None => {
                let head = self
                    .provider
                    .get_block_number()
                    .await
                    .map_err(|e| Step::Transient(format!("eth_blockNumber: {e}")))?;
                self.store
                    .set_request_block(market, market_id, head)
                    .await?;
                tracing::info!(market_id = %market_id, block = head, "manual request: judged at this block from now on");
                head
            }
        };
        // nobody is asked about a market that is already resolved
        match resolved_at_head(&self.provider, market, market_id).await {
            Ok(false) => {}
            Ok(true) => {
                self.store
                    .set_state(
                        market,
                        market_id,
                        RoundState::Skipped,
                        Some("the market is already resolved on chain"),
                    )
                    .await?;
                return Ok(());
            }
            Err(ReadError::Rpc(e)) => {
                return Err(Step::Transient(format!("reading the market: {e}")));
            }
            Err(e) => return self.fail(market, market_id, &e.to_string()).await,
        }
        let multicall = self.cfg.chain.multicall_address;
        let read = match read_market(&self.provider, market, market_id, Some(block), multicall)
            .await
        {
            // A full (non-archive) endpoint has pruned the state of an old block: the
            // market's terms and workers are read at the head instead (they do not change
            // after the request); the round is still judged at the request block's time.
            Err(ReadError::Rpc(e)) if crate::chain::is_pruned_state(&e) => {
                tracing::warn!(market_id = %market_id, block, error = %e, "the endpoint has no state at the request block (pruned): reading the market at the head");
                read_market(&self.provider, market, market_id, None, multicall).await
            }
            other => other,
        };
        let snapshot = match read {
            Ok(s) => s,
            Err(ReadError::Rpc(e)) => {
                return Err(Step::Transient(format!(
                    "reading the market at block {block}: {e}"
                )));
            }
            Err(e) => return self.fail(market, market_id, &e.to_string()).await,
        };
        let ctx = LiveContext {
            provider: &self.provider,
            multicall: self.cfg.chain.multicall_address,
            discovery: &self.discovery,
            http: &self.http,
        };
        let (found, mut input) = match collect_input(&ctx, &snapshot).await {
            Ok(x) => x,
            Err(LiveError::Rpc(e)) => return Err(Step::Transient(e)),
            Err(e) => return self.fail(market, market_id, &e.to_string()).await,
        };
        if snapshot.block != block {
            // read at the head (pruned state): still judged at the request block's time
            input.reference_time = match crate::live::block_time(&self.provider, Some(block)).await
            {
                Ok(t) => t,
                Err(e) => return Err(Step::Transient(e.to_string())),
            };
        }
        self.metrics
            .observe_stage("discover", span_started.elapsed().as_secs_f64());
        if rec.state == RoundState::Requested {
            self.store
                .set_state(market, market_id, RoundState::Discovered, None)
                .await?;
        }
        // what an interrupted run of this attempt recorded: its workers and the LLM are
        // not asked again for a stage it passed
        let progress = self
            .store
            .progress(market, market_id, rec.attempt).await?
            .and_then(|v| match serde_json::from_value::<RoundProgress>(v) {
                Ok(p) => Some(p),
                Err(e) => {
                    tracing::warn!(market_id = %market_id, error = %e, "unreadable round progress: running the round from the start");
                    None
                }
            })
            .unwrap_or_default();
        if progress.resolve.is_some() {
            tracing::info!(market_id = %market_id, passed = progress.stage(), "resuming the round where it stopped; its workers are not asked again for the stages passed");
        }
        let (store, attempt, halt) = (self.store.clone(), rec.attempt, halt.clone());
        let persist = move |stage: RoundStage, progress: &RoundProgress| {
            let (state, point) = match stage {
                RoundStage::Answered => (RoundState::Answered, "answered"),
                RoundStage::Challenged => (RoundState::Challenged, "challenged"),
                RoundStage::Evaluated => (RoundState::Evaluated, "evaluated"),
            };
            let value = serde_json::to_value(progress);
            let (store, halt) = (store.clone(), halt.clone());
            let fut: futures::future::BoxFuture<'static, ()> = Box::pin(async move {
                let saved = match value {
                    Ok(v) => store
                        .save_progress(market, market_id, attempt, state, &v)
                        .await
                        .map_err(Some),
                    Err(e) => {
                        tracing::error!(error = %e, "cannot encode round progress");
                        Err(None)
                    }
                };
                match saved {
                    Ok(()) => crate::txm::crash_point(point),
                    // another node drives the round now: stop before the next stage
                    Err(Some(e)) if e.is_lease_lost() => halt.token.cancel(),
                    // nothing of the next stage happens before this one is persisted:
                    // the round pauses and is retried
                    Err(Some(e)) => halt.pause(format!("cannot persist the round's progress: {e}")),
                    Err(None) => {}
                }
            });
            fut
        };
        let round_started = Instant::now();
        let result = p.engine.run_resumable(&input, progress, &persist).await;
        self.metrics
            .observe_stage("resolve+evaluate", round_started.elapsed().as_secs_f64());
        let mut transcript = Transcript {
            version: TRANSCRIPT_VERSION,
            chain_id: Some(self.chain_id),
            request: Some(RequestRecord {
                tx: rec.request_tx,
                block: rec.request_block,
            }),
            workflow: p.workflow.clone(),
            market: snapshot.clone(),
            discovery: found,
            question: input.question.clone(),
            reference_time: input.reference_time,
            resolve: None,
            outcome: None,
            submission: None,
            confirmation: None,
            transactions: None,
            finality: None,
            round: None,
        };
        let outcome = match result {
            Ok(o) => o,
            Err(e) => {
                if let RoundError::QuorumNotMet(stage) = &e {
                    transcript.resolve = Some((**stage).clone());
                }
                self.save_transcript(market, market_id, &transcript).await?;
                return self.fail(market, market_id, &e.to_string()).await;
            }
        };
        self.metrics.record_round(&outcome);
        transcript.outcome = Some(outcome);
        self.save_transcript(market, market_id, &transcript).await?;
        let Some(outcome) = transcript.outcome.as_ref() else {
            return Ok(());
        };

        let prepared = match p.submitter.prepare(&snapshot, &outcome.tally).await {
            Ok(x) => x,
            Err(SubmitError::AlreadyResolved { .. }) => {
                self.store
                    .set_state(
                        market,
                        market_id,
                        RoundState::Skipped,
                        Some("the market was resolved on chain meanwhile"),
                    )
                    .await?;
                return Ok(());
            }
            Err(e) if e.is_transient() => return Err(Step::Transient(e.to_string())),
            Err(e) => return self.fail(market, market_id, &e.to_string()).await,
        };
        transcript.submission = Some(SubmissionRecord {
            to: prepared.to,
            calldata: prepared.calldata.clone(),
            gas_limit: prepared.gas_limit,
            from: prepared.from,
            mode: prepared.mode,
        });
        self.save_transcript(market, market_id, &transcript).await?;
        let Some(txm) = &self.txm else {
            return self
                .fail(
                    market,
                    market_id,
                    "no signing key: the node can simulate but not submit",
                )
                .await;
        };
        let nonce = match txm
            .submit(TxPayload {
                market,
                market_id,
                to: prepared.to,
                calldata: prepared.calldata.clone(),
                gas_limit: prepared.gas_limit,
            })
            .await
        {
            Ok(n) => n,
            Err(e) if e.is_transient() => return Err(Step::Transient(e.to_string())),
            Err(TxError::Store(e)) => return Err(Step::from(e)),
            Err(e) => return self.fail(market, market_id, &e.to_string()).await,
        };
        self.follow(p, market_id, nonce).await
    }

    /// Follows the round's reserved nonce to its end: confirmed (our attempt mined deep
    /// enough and it resolved the market), skipped (someone else resolved it), or a fresh
    /// nonce when the key's nonce was used elsewhere (at most [`MAX_FRESH_NONCES`]).
    async fn follow(&self, p: &Pipeline, market_id: U256, mut nonce: u64) -> Result<(), Step> {
        let Some(txm) = &self.txm else {
            return Err(Step::Transient("no transaction manager".into()));
        };
        let market = p.market;
        let mut fresh = 0;
        loop {
            let started = Instant::now();
            let outcome = txm.drive(nonce).await;
            self.metrics
                .observe_stage("submit", started.elapsed().as_secs_f64());
            match outcome {
                Ok(TxOutcome::Mined { receipt, .. }) => {
                    return self.conclude(p, market_id, &receipt).await;
                }
                Ok(TxOutcome::Lost { nonce: lost }) => {
                    if self.resolved_on_chain(market, market_id).await? {
                        let reason = format!(
                            "nonce {lost} of the resolver key was used by another transaction, and the market is resolved on chain by someone else"
                        );
                        self.record_confirmation(
                            market,
                            market_id,
                            ConfirmationRecord {
                                status: "skipped".into(),
                                tx_hash: None,
                                block_number: None,
                                resolution: None,
                                resolver: None,
                                gas_used: None,
                                detail: Some(reason.clone()),
                            },
                        )
                        .await?;
                        self.store
                            .set_state(market, market_id, RoundState::Skipped, Some(&reason))
                            .await?;
                        return Ok(());
                    }
                    fresh += 1;
                    if fresh > MAX_FRESH_NONCES {
                        return self.fail(
                            market,
                            market_id,
                            &format!("the resolver key's nonce was used by other transactions {MAX_FRESH_NONCES} times in a row: is another process signing with this key?"),
                        ).await;
                    }
                    let Some(rec) = self.store.nonce_record(txm.key(), lost).await? else {
                        return Err(Step::Transient(format!(
                            "nonce {lost} vanished from the store"
                        )));
                    };
                    // the same payload, re-simulated exactly as it will be sent
                    let call = alloy::rpc::types::TransactionRequest::default()
                        .from(txm.key().signer)
                        .to(rec.payload.to)
                        .input(rec.payload.calldata.clone().into());
                    if let Err(e) = self.provider.call(call).await {
                        match e.as_error_resp().and_then(|r| r.as_revert_data()) {
                            Some(d) => {
                                let r = crate::chain::decode_revert(&d);
                                return self
                                    .fail(
                                        market,
                                        market_id,
                                        &format!("re-simulation after a lost nonce reverted: {r}"),
                                    )
                                    .await;
                            }
                            None => {
                                return Err(Step::Transient(format!(
                                    "re-simulating after a lost nonce: {e}"
                                )));
                            }
                        }
                    }
                    tracing::warn!(market_id = %market_id, lost, "signing the resolution again with a fresh nonce");
                    nonce = match txm.submit(rec.payload).await {
                        Ok(n) => n,
                        Err(e) if e.is_transient() => return Err(Step::Transient(e.to_string())),
                        Err(TxError::Store(e)) => return Err(Step::from(e)),
                        Err(e) => return self.fail(market, market_id, &e.to_string()).await,
                    };
                }
                Err(e) if e.is_transient() => return Err(Step::Transient(e.to_string())),
                Err(TxError::Store(e)) => return Err(Step::from(e)),
                Err(e) => return self.fail(market, market_id, &e.to_string()).await,
            }
        }
    }

    async fn resolved_on_chain(&self, market: Address, market_id: U256) -> Result<bool, Step> {
        crate::chain::bindings::ICREsolverMarket::new(market, self.provider.clone())
            .getMarket(market_id)
            .call()
            .await
            .map(|m| m.resolved)
            .map_err(|e| Step::Transient(format!("reading the market: {e}")))
    }

    /// Ends a round whose transaction was mined deep enough.
    async fn conclude(
        &self,
        p: &Pipeline,
        market_id: U256,
        receipt: &alloy::rpc::types::TransactionReceipt,
    ) -> Result<(), Step> {
        let tx = receipt.transaction_hash;
        match p.submitter.confirm(market_id, receipt) {
            Ok(Confirmed {
                tx_hash,
                resolution,
                block_number,
                resolver,
                gas_used,
            }) => {
                tracing::info!(market_id = %market_id, tx = %tx_hash, block = block_number, resolution, "market resolved");
                self.record_confirmation(
                    p.market,
                    market_id,
                    ConfirmationRecord {
                        status: "confirmed".into(),
                        tx_hash: Some(tx_hash),
                        block_number: Some(block_number),
                        resolution: Some(resolution),
                        resolver: Some(resolver),
                        gas_used: Some(gas_used),
                        detail: None,
                    },
                )
                .await?;
                self.store
                    .set_state(p.market, market_id, RoundState::Confirmed, None)
                    .await?;
                Ok(())
            }
            Err(e) => {
                // Our transaction did not resolve it; maybe someone else did.
                let resolved = self.resolved_on_chain(p.market, market_id).await?;
                let (state, reason) = if resolved {
                    (
                        RoundState::Skipped,
                        format!("resolved on chain by another transaction; ours: {e}"),
                    )
                } else {
                    (RoundState::Failed, e.to_string())
                };
                tracing::warn!(market_id = %market_id, %tx, state = state.as_str(), %reason, "our transaction did not resolve the market");
                self.record_confirmation(
                    p.market,
                    market_id,
                    ConfirmationRecord {
                        status: "failed".into(),
                        tx_hash: Some(tx),
                        block_number: None,
                        resolution: None,
                        resolver: None,
                        gas_used: None,
                        detail: Some(e.to_string()),
                    },
                )
                .await?;
                self.store
                    .set_state(p.market, market_id, state, Some(&reason))
                    .await?;
                Ok(())
            }
        }
    }

    /// Stores a round's transcript (written by serde; see `crate::transcript`).
    async fn save_transcript(
        &self,
        market: Address,
        market_id: U256,
        t: &Transcript,
    ) -> Result<(), Step> {
        let v = serde_json::to_value(t)
            .map_err(|e| Step::Transient(format!("cannot encode the transcript: {e}")))?;
        self.store.set_outcome(market, market_id, &v).await?;
        Ok(())
    }

    /// Adds the receipt outcome and every transaction attempt to the stored transcript.
    async fn record_confirmation(
        &self,
        market: Address,
        market_id: U256,
        confirmation: ConfirmationRecord,
    ) -> Result<(), Step> {
        let Some(stored) = self
            .store
            .get(market, market_id)
            .await?
            .and_then(|r| r.outcome)
        else {
            return Ok(());
        };
        let mut t: Transcript = match serde_json::from_value(stored) {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(market_id = %market_id, error = %e, "the stored transcript does not parse: the confirmation is not added to it");
                return Ok(());
            }
        };
        t.confirmation = Some(confirmation);
        t.transactions = Some(crate::transcript::transactions_json(
            &self.store.tx_history(market, market_id).await?,
        ));
        self.save_transcript(market, market_id, &t).await
    }

    async fn fail(&self, market: Address, market_id: U256, reason: &str) -> Result<(), Step> {
        tracing::warn!(market_id = %market_id, %reason, "round failed");
        self.store
            .set_state(market, market_id, RoundState::Failed, Some(reason))
            .await?;
        Ok(())
    }

    /// A shared store's claim loop: every tick, as many claimable rounds as this node has
    /// room for (`max_concurrent_rounds` less the rounds it runs) are handed to the
    /// dispatcher, which claims each before it runs it; other nodes do the same, so the
    /// rounds spread over the nodes with room. Also keeps `/health`'s cluster view.
    async fn claim_loop(
        self: Arc<Self>,
        tx: mpsc::Sender<(Address, U256)>,
        mut stop: watch::Receiver<bool>,
    ) {
        let every = Duration::from_millis(self.cfg.chain.poll_interval_ms.clamp(100, 1_000));
        let mut failing = false;
        loop {
            // a little jitter, so that nodes do not race for the same rounds in step
            let jitter =
                Duration::from_millis(rand::random::<u64>() % (every.as_millis() as u64 / 4 + 1));
            tokio::select! {
                _ = tokio::time::sleep(every + jitter) => {}
                _ = stop.changed() => return,
            }
            let held = self.store.held() as u64;
            self.metrics.set_leases_held(held);
            if let Ok(mut h) = self.health.write() {
                let counts = self.metrics.lease_counts();
                h["cluster"] = json!({
                    "node_id": self.store.node_id(),
                    "lease_secs": self.store.lease_duration().as_secs(),
                    "leases_held": held,
                    "leases_claimed": counts[0].1,
                    "takeovers": counts[1].1,
                    "leases_lost": counts[2].1,
                });
            }
            let busy = self
                .in_flight
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .len();
            let room = self.cfg.node.max_concurrent_rounds.saturating_sub(busy);
            if room == 0 {
                continue;
            }
            let markets: Vec<Address> = self.pipelines.iter().map(|p| p.market).collect();
            let ids = match self.store.claimable(&markets, room).await {
                Ok(ids) => {
                    if failing {
                        tracing::info!("the shared store answers again");
                        failing = false;
                    }
                    ids
                }
                Err(e) => {
                    if !failing {
                        tracing::warn!(error = %e, "cannot read claimable rounds from the shared store; retrying");
                        failing = true;
                    }
                    continue;
                }
            };
            for (market, market_id) in ids {
                let running = self
                    .in_flight
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .contains(&(market, market_id));
                if running {
                    continue;
                }
                if tx.send((market, market_id)).await.is_err() {
                    return;
                }
            }
        }
    }

    /// Runs the node until `shutdown` completes: watchers, API, dispatcher. In-flight
    /// rounds get up to `drain` to reach a persisted state.
    pub async fn run(
        self: Arc<Self>,
        shutdown: impl Future<Output = ()> + Send + 'static,
        drain: Duration,
    ) -> Result<(), NodeError> {
        let (stop_tx, stop_rx) = watch::channel(false);
        let (trig_tx, mut trig_rx) = mpsc::channel::<Trigger>(1024);
        let mut tasks = JoinSet::new();

        // Unfinished rounds are fed to the dispatcher by a task of their own: the channel
        // holds 1024, and the dispatcher only starts draining it below.
        // A shared store: the claim loop below finds every round a node may drive,
        // this node's unfinished ones included (once their leases expire).
        let unfinished = if self.store.shared() {
            Vec::new()
        } else {
            self.store.unfinished().await?
        };
        if !unfinished.is_empty() {
            tracing::info!(rounds = unfinished.len(), "resuming unfinished rounds");
            let (tx, mut stop) = (trig_tx.clone(), stop_rx.clone());
            tasks.spawn(async move {
                for rec in unfinished {
                    tracing::debug!(market_id = %rec.market_id, state = rec.state.as_str(), "resuming unfinished round");
                    let t = Trigger {
                        market: rec.market,
                        market_id: rec.market_id,
                        question: String::new(),
                        log: None,
                    };
                    tokio::select! {
                        sent = tx.send(t) => if sent.is_err() { return },
                        _ = stop.changed() => return,
                    }
                }
            });
        }

        let dev = is_dev_chain(self.chain_id);
        let head = self.provider.get_block_number().await.unwrap_or(0);
        for p in &self.pipelines {
            let start = self.start_block(p, dev, head).await?;
            let wcfg = self
                .cfg
                .watcher_config(p.market, &p.workflow.name, self.chain_id, start);
            let watcher = Watcher::new(self.provider.clone(), self.store.clone(), wcfg);
            let (tx, rx, m, h, ch, wake) = (
                trig_tx.clone(),
                stop_rx.clone(),
                self.metrics.clone(),
                self.health.clone(),
                self.chain_health.clone(),
                self.heads.subscribe(),
            );
            tasks.spawn(async move {
                watcher
                    .run(tx, rx, Some(wake), move |r| {
                        if let Some(to) = r.to {
                            m.set_last_processed_block(to);
                            ch.processed(to);
                            if let Ok(mut h) = h.write() {
                                h["last_processed_block"] = json!(to);
                            }
                        }
                    })
                    .await
            });
        }

        {
            let every = Duration::from_millis(self.cfg.chain.poll_interval_ms.clamp(50, 1_000));
            let (ch, m, rx) = (
                self.chain_health.clone(),
                self.metrics.clone(),
                stop_rx.clone(),
            );
            tasks.spawn(async move { ch.run(m, every, rx).await });
        }
        // A push subscription on the first websocket endpoint wakes the watcher and the
        // transaction manager at every new head; it is rebuilt for as long as the node runs.
        if let Some(url) = self
            .cfg
            .rpc_urls()
            .into_iter()
            .find(|u| u.starts_with("ws"))
        {
            let cfg = PushConfig {
                pool: self.cfg.pool_config(),
                max_backoff: self.cfg.max_backoff(),
                stall_after: Duration::from_millis(self.cfg.chain.poll_interval_ms)
                    .saturating_mul(3)
                    .max(Duration::from_secs(2)),
            };
            let (feed, rx) = (self.heads.clone(), stop_rx.clone());
            tasks.spawn(async move { crate::chain::heads::run_push(url, cfg, feed, rx).await });
        }

        // the finality watch: confirmed rounds until final; the rounds it reopens (a
        // reorg removed their resolution) go to the dispatcher like the claim loop's
        let (reopen_tx, mut reopen_rx) = mpsc::channel::<(Address, U256)>(256);
        {
            let depth = self.cfg.chain.finality_depth.unwrap_or(
                crate::chain::finality::default_finality_depth(self.chain_id),
            );
            let watch = finality::FinalityWatch::new(
                self.provider.clone(),
                self.store.clone(),
                self.metrics.clone(),
                depth,
            );
            let every = Duration::from_millis(self.cfg.chain.poll_interval_ms.clamp(100, 5_000));
            let (rx, wake) = (stop_rx.clone(), self.heads.subscribe());
            tasks.spawn(async move { watch.run(reopen_tx, rx, wake, every).await });
        }

        let (claim_tx, mut claim_rx) = mpsc::channel::<(Address, U256)>(256);
        if self.store.shared() {
            let (node, rx) = (self.clone(), stop_rx.clone());
            tasks.spawn(async move { node.claim_loop(claim_tx, rx).await });
        } else {
            drop(claim_tx);
        }

        let (api_tx, mut api_rx) = mpsc::channel::<ManualTrigger>(64);
        if !self.cfg.api.listen.trim().is_empty() {
            let addr = self.cfg.api.listen.clone();
            let listener =
                tokio::net::TcpListener::bind(&addr)
                    .await
                    .map_err(|e| NodeError::Listen {
                        addr: addr.clone(),
                        error: e.to_string(),
                    })?;
            let token = std::env::var(&self.cfg.api.token_env)
                .ok()
                .filter(|t| !t.is_empty())
                .map(secrecy::SecretString::from);
            tracing::info!(addr = %listener.local_addr().map(|a| a.to_string()).unwrap_or(addr), trigger_enabled = token.is_some(), "HTTP API listening");
            let state = ApiState {
                store: self.store.clone(),
                metrics: self.metrics.clone(),
                trigger: api_tx.clone(),
                token,
                market: self.pipelines[0].market,
                started: Instant::now(),
                health: self.health.clone(),
                chain: Some(self.chain_health.clone()),
                stop: self.cancel.clone(),
            };
            let mut rx = stop_rx.clone();
            tasks.spawn(async move {
                let _ = crate::api::serve(listener, state, async move {
                    let _ = rx.changed().await;
                })
                .await;
            });
        }
        drop(api_tx);

        let mut rounds = JoinSet::new();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                Some(t) = trig_rx.recv() => {
                    let node = self.clone();
                    rounds.spawn(async move {
                        if let Err(e) = node.run_round(t.market, t.market_id).await {
                            tracing::error!(market_id = %t.market_id, error = %e, "round error");
                        }
                    });
                }
                Some((market, market_id)) = reopen_rx.recv() => {
                    let node = self.clone();
                    rounds.spawn(async move {
                        if let Err(e) = node.run_round(market, market_id).await {
                            tracing::error!(market_id = %market_id, error = %e, "round error");
                        }
                    });
                }
                Some((market, market_id)) = claim_rx.recv() => {
                    let node = self.clone();
                    rounds.spawn(async move {
                        if let Err(e) = node.run_round_as(market, market_id, Claim::FromStore).await {
                            tracing::error!(market_id = %market_id, error = %e, "round error");
                        }
                    });
                }
                Some(m) = api_rx.recv() => {
                    match self.request(m.market_id).await {
                        Ok(Some(t)) => { let _ = trig_tx.send(t).await; }
                        Ok(None) => {}
                        Err(e) => tracing::error!(error = %e, "manual request failed"),
                    }
                }
                Some(_) = rounds.join_next(), if !rounds.is_empty() => {}
            }
        }
        tracing::info!(
            in_flight = rounds.len(),
            "shutting down: letting in-flight rounds reach a persisted state"
        );
        let _ = stop_tx.send(true);
        self.cancel.cancel();
        self.tracker.close();
        let tracker = self.tracker.clone();
        let _ = tokio::time::timeout(drain, async {
            while rounds.join_next().await.is_some() {}
            tracker.wait().await;
        })
        .await;
        rounds.abort_all();
        let _ = tokio::time::timeout(Duration::from_secs(5), async {
            while tasks.join_next().await.is_some() {}
        })
        .await;
        tasks.abort_all();
        Ok(())
    }
}

/// The node's store: the shared PostgreSQL database of `[store] url`, or the embedded
/// SQLite file in the data dir.
pub async fn open_store(cfg: &NodeConfig) -> Result<Arc<dyn RoundStore>, NodeError> {
    if cfg.store.is_postgres() {
        let node_id = cfg.node_id();
        let store = crate::store::PgStore::connect(
            cfg.store.url.trim(),
            crate::store::PgSettings {
                node_id: node_id.clone(),
                lease: Duration::from_secs(cfg.store.lease_secs),
                max_connections: cfg.store.max_connections,
                ca_file: cfg.store.ca_file.clone(),
            },
        )
        .await?;
        tracing::info!(
            database = %crate::store::pg::redact_url(&cfg.store.url),
            node_id,
            lease_secs = cfg.store.lease_secs,
            "shared PostgreSQL store: rounds are split between the nodes by leases"
        );
        Ok(Arc::new(store))
    } else {
        Ok(Arc::new(SqliteStore::new(Store::open(&cfg.node.data_dir)?)))
    }
}

/// The discovery settings of a node config.
pub fn discovery_config(cfg: &NodeConfig) -> Result<DiscoveryConfig, crate::config::ConfigError> {
    Ok(DiscoveryConfig {
        allow_private_endpoints: cfg.discovery.allow_private_endpoints,
        lookup: Arc::new(crate::workers::netguard::SystemLookup),
        ipfs_gateway: url::Url::parse(&cfg.discovery.ipfs_gateway).map_err(|e| {
            crate::config::ConfigError::Invalid {
                key: "discovery.ipfs_gateway",
                message: e.to_string(),
            }
        })?,
        fetch_timeout: Duration::from_millis(cfg.discovery.fetch_timeout_ms),
        max_metadata_bytes: cfg.discovery.max_metadata_bytes,
        protocols: protocol_set(cfg)?,
    })
}

/// The node's protocol adapters from `[protocols]`: A2A always, each other protocol
/// when enabled. Secrets come from the env vars the config names.
pub fn protocol_set(cfg: &NodeConfig) -> Result<ProtocolSet, crate::config::ConfigError> {
    use crate::config::ConfigError;
    use crate::workers::chorus::{ChorusProtocol, ChorusSettings};
    use crate::workers::factagora::{FactagoraProtocol, FactagoraSettings};
    use crate::workers::roundtable::{RoundTableProtocol, RoundTableSettings};
    let secret = |var: &str| {
        std::env::var(var)
            .ok()
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    let p = &cfg.protocols;
    for (token, hosts, env, key) in [
        (
            secret(&p.factagora.token_env),
            &p.factagora.token_hosts,
            &p.factagora.token_env,
            "protocols.factagora.token_hosts",
        ),
        (
            secret(&p.roundtable.api_key_env),
            &p.roundtable.api_key_hosts,
            &p.roundtable.api_key_env,
            "protocols.roundtable.api_key_hosts",
        ),
    ] {
        if token.is_some() && hosts.is_empty() {
            tracing::warn!(env = %env, key, "a protocol credential is set but no host may receive it: list the hosts in {key} (workers choose their own endpoints; the credential is never sent to an unlisted host)");
        }
    }
    let mut set = ProtocolSet::a2a_only();
    if p.factagora.enabled {
        set = set.with(
            ProtocolKind::Factagora,
            Arc::new(FactagoraProtocol::new(FactagoraSettings {
                token: secret(&p.factagora.token_env).map(Into::into),
                token_hosts: p.factagora.token_hosts.clone(),
            })),
        );
    }
    if p.roundtable.enabled {
        set = set.with(
            ProtocolKind::Roundtable,
            Arc::new(RoundTableProtocol::new(RoundTableSettings {
                api_key: secret(&p.roundtable.api_key_env).map(Into::into),
                api_key_hosts: p.roundtable.api_key_hosts.clone(),
            })),
        );
    }
    if p.chorus.enabled {
        let mut settings = ChorusSettings {
            skill: p.chorus.skill.trim().to_string(),
            challenge_skill: Some(p.chorus.challenge_skill.trim().to_string())
                .filter(|s| !s.is_empty()),
            budget: p.chorus.budget,
            ..ChorusSettings::default()
        };
        if !p.chorus.orchestrator_id.trim().is_empty() {
            settings.orchestrator_id = p.chorus.orchestrator_id.trim().to_string();
        }
        settings
            .validate()
            .map_err(|message| ConfigError::Invalid {
                key: "protocols.chorus",
                message,
            })?;
        set = set.with(
            ProtocolKind::Chorus,
            Arc::new(ChorusProtocol::new(settings)),
        );
    }
    if p.agora.enabled {
        use crate::workers::agora::{AgoraNode, AgoraProtocol, AgoraSettings};
        let settings = AgoraSettings {
            max_cost_usd: p.agora.max_cost_usd,
            poll_timeout_secs: p.agora.poll_timeout_secs,
            ..AgoraSettings::default()
        };
        let invalid = |message: String| ConfigError::Invalid {
            key: "protocols.agora",
            message,
        };
        let seed = match (secret(&p.agora.key_env), &p.agora.key_file) {
            (Some(hex), _) => Some((hex, format!("env var {}", p.agora.key_env))),
            (None, Some(path)) => {
                let text = std::fs::read_to_string(path).map_err(|e| ConfigError::KeyFile {
                    path: path.display().to_string(),
                    error: e.to_string(),
                })?;
                let line = text.lines().next().unwrap_or("").trim().to_string();
                Some((line, format!("key file {}", path.display())))
            }
            (None, None) => None,
        };
        let node = match seed {
            Some((hex, from)) => AgoraNode::from_secret_hex(&hex, settings)
                .map_err(|e| invalid(format!("identity from {from}: {e}")))?,
            None => {
                let node = AgoraNode::generate(settings).map_err(invalid)?;
                // info, not a warning: nothing is wrong until an Agora worker is met, and
                // a newcomer who configured nothing of Agora should not be alarmed
                tracing::info!(
                    did = %node.did(),
                    "no Agora identity configured (protocols.agora.key_env / key_file): using a fresh one for this run"
                );
                node
            }
        };
        set = set.with_factory(ProtocolKind::Agora, AgoraProtocol::factory(Arc::new(node)));
    }
    Ok(set)
}

/// The submitter settings of `workflow` on `market` under a node config.
pub fn submitter_config(cfg: &NodeConfig, workflow: &Workflow, market: Address) -> SubmitterConfig {
    let report = &workflow.submit.report;
    SubmitterConfig {
        market,
        mode: workflow.submit.mode,
        forwarder: cfg.submit.forwarder,
        receiver: cfg.submit.receiver,
        metadata: ReportMetadata::new(
            report.workflow_id,
            workflow.report_workflow_name(),
            report.workflow_owner,
            [0, 1],
        ),
        gas_margin_percent: cfg.submit.gas_margin_percent,
    }
}

/// The transaction manager settings of a node config: confirmations as the watcher's
/// (per-chain default), fees from `[submit]`.
pub fn txm_config(cfg: &NodeConfig, chain_id: u64) -> TxmConfig {
    TxmConfig {
        confirmations: cfg
            .chain
            .confirmations
            .unwrap_or(default_confirmations(chain_id)),
        fees: FeePolicy {
            bump_percent: cfg.submit.fee_bump_percent,
            max_fee_cap: (cfg.submit.max_fee_per_gas_gwei * 1e9) as u128,
            bump_after_blocks: cfg.submit.bump_after_blocks,
        },
        poll_interval: Duration::from_millis(cfg.chain.poll_interval_ms.clamp(10, 2_000)),
        wait_bound: Duration::from_millis(cfg.submit.receipt_timeout_ms.max(1_000)),
    }
}

/// A transaction manager error as a round step.
fn tx_step(e: TxError) -> Step {
    match e {
        TxError::Store(e) => Step::from(e),
        e => Step::Transient(e.to_string()),
    }
}

/// The store key of the node's Chorus `orchestrator_id` when none is configured.
pub const CHORUS_ORCHESTRATOR_KEY: &str = "chorus.orchestrator_id";

/// Blocks the watcher rescans when the block hash at its checkpoint changed.
pub const REORG_WINDOW: u64 = 64;

/// How many times a round signs again with a fresh nonce when its nonce was used by
/// another transaction of the key, before it fails.
const MAX_FRESH_NONCES: u32 = 3;

enum Step {
    /// Worth retrying later; the round stays unfinished.
    Transient(String),
    Store(crate::store::StoreError),
    /// Another node took the round over: stop, write nothing more.
    LeaseLost,
    /// The round could not be claimed: another node holds it, or it is final.
    NotHeld,
}

impl From<crate::store::StoreError> for Step {
    fn from(e: crate::store::StoreError) -> Self {
        match e {
            e if e.is_lease_lost() => Step::LeaseLost,
            // a shared database that is restarting or unreachable: the round pauses
            // and is retried (by this node, or by another once the lease expires)
            crate::store::StoreError::Postgres(m) => {
                Step::Transient(format!("the shared store: {m}"))
            }
            e => Step::Store(e),
        }
    }
}

/// Stops a round's drive from outside it: the lease was lost (the token alone), or a
/// stage could not be persisted (a pause with its reason: the round is retried).
#[derive(Clone, Default)]
struct Halt {
    token: tokio_util::sync::CancellationToken,
    pause: Arc<Mutex<Option<String>>>,
}

impl Halt {
    fn pause(&self, why: String) {
        *self.pause.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
        self.token.cancel();
    }

    /// What the stop means for the round.
    fn step(&self) -> Step {
        match self.pause.lock().unwrap_or_else(|p| p.into_inner()).take() {
            Some(why) => Step::Transient(why),
            None => Step::LeaseLost,
        }
    }
}

/// How a round is claimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Claim {
    /// A trigger, a retry or an operator: a released round's back-off does not apply.
    Direct,
    /// The claim loop of a shared store.
    FromStore,
}

/// Renews a lease every third of its duration until aborted; cancels `lost` when the
/// store refuses (another node holds the round) or when no renewal succeeded for
/// two thirds of the lease (the node cannot know it still holds it, so it stops first).
async fn renew_lease(
    store: Arc<dyn RoundStore>,
    market: Address,
    market_id: U256,
    lost: tokio_util::sync::CancellationToken,
) {
    let lease = store.lease_duration();
    let every = lease / 3;
    let mut last_ok = Instant::now();
    loop {
        tokio::time::sleep(every).await;
        match tokio::time::timeout(every, store.renew(market, market_id)).await {
            Ok(Ok(true)) => last_ok = Instant::now(),
            Ok(Ok(false)) => {
                tracing::warn!(market_id = %market_id, "lease renewal refused: another node holds the round");
                lost.cancel();
                return;
            }
            Ok(Err(e)) => {
                tracing::warn!(market_id = %market_id, error = %e, "cannot renew the round's lease")
            }
            Err(_) => {
                tracing::warn!(market_id = %market_id, "renewing the round's lease timed out")
            }
        }
        if last_ok.elapsed() >= lease * 2 / 3 {
            tracing::warn!(market_id = %market_id, "the lease could not be renewed in time: stopping the round before it expires");
            lost.cancel();
            return;
        }
    }
}
