//! The resolver node: runs every workflow it is given against its market — a watcher
//! turns `ResolutionRequested` logs into durable requests, a dispatcher runs rounds
//! concurrently (bounded) through read → discover → resolve/challenge → evaluate →
//! submit, persisting each state, and the HTTP API serves health, metrics, rounds and
//! the bearer-guarded manual trigger. Restarted, it resumes every unfinished round; a
//! stored signed transaction is re-broadcast, never re-signed, so a market is resolved
//! by at most one transaction of this node. Shutdown lets in-flight rounds reach a
//! persisted state first.

pub mod api;
pub mod build_info;
mod don;
mod error;
pub mod finality;
pub mod http;
mod labels;
mod lease;
pub mod preflight;
mod round;
mod run;
mod schedule;
mod setup;
pub mod status;
mod submission;
pub use cresolver_pipeline::stages::{discovery_config, protocol_set, submitter_config};
pub use don::DonSetupError;
pub use error::NodeError;
pub use preflight::{Checked, Preflight, signer};
pub use setup::{DataDirLock, lock_data_dir, open_store, txm_config};
pub use submission::Submission;

use alloy::network::EthereumWallet;
use alloy::primitives::{Address, B256};
use alloy::providers::DynProvider;
use alloy::signers::local::PrivateKeySigner;
use cresolver_chain::discovery::DiscoveryConfig;
use cresolver_chain::heads::HeadFeed;
use cresolver_chain::watcher::Trigger;
use cresolver_metrics::{LeaseEvent, Metrics, StopReason, TimedStage};
use cresolver_pipeline::config::{NodeConfig, default_confirmations, is_dev_chain};
use cresolver_pipeline::round::Engine;
use cresolver_pipeline::workflow::Workflow;
use cresolver_store::{MarketId, RoundKey};
use cresolver_store::{RoundStore, Stage};
use cresolver_submit::Submitter;
use cresolver_submit::txm::TxManager;
use round::{StepError, StepKind};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cresolver_pipeline::transcript::Transcript;

impl From<don::DonSetupError> for NodeError {
    fn from(e: don::DonSetupError) -> Self {
        NodeError::Don(e)
    }
}

/// One workflow bound to its market.
pub struct Pipeline {
    /// The workflow (its quorum, challenge, evaluator, tally and submission settings).
    pub workflow: Workflow,
    /// The market contract it watches and resolves.
    pub market: Address,
    /// The round engine built from the workflow.
    pub engine: Engine,
    /// How its outcomes reach the chain.
    pub submitter: Submitter,
}

/// A round's result as the operator sees it.
#[derive(Debug, Clone, Serialize)]
pub struct RoundReport {
    /// The market contract.
    pub market: Address,
    /// The market's id.
    pub market_id: MarketId,
    /// The round's stage.
    pub state: Stage,
    /// Why it failed or was skipped (or paused).
    pub reason: Option<String>,
    /// The round's submitted transaction, if any.
    pub tx_hash: Option<B256>,
    /// The outcome the round reached (`true`: YES).
    pub resolution: Option<bool>,
    /// The stored transcript, when the round got that far.
    pub transcript: Option<serde_json::Value>,
}

/// A resolver node: its config, chain, store, workflows and the state of its rounds.
pub struct Node {
    /// The node's configuration.
    pub cfg: NodeConfig,
    /// The RPC pool's provider.
    pub provider: DynProvider,
    /// The chain's id, as the endpoint reported it.
    pub chain_id: u64,
    /// The round store (SQLite, or a PostgreSQL cluster's).
    pub store: Arc<dyn RoundStore>,
    /// The node's metrics registry.
    pub metrics: Arc<Metrics>,
    /// One per workflow, each on its own market.
    pub pipelines: Vec<Pipeline>,
    /// How workers' endpoints are found and which addresses may be called.
    pub discovery: DiscoveryConfig,
    /// How outcomes reach the chain: simulated (no key), on the node's own key, or
    /// agreed with a DON (`[don]`) and delivered through the KeystoneForwarder.
    pub submission: Submission,
    http: reqwest::Client,
    /// Which rounds run when: the bound on concurrent rounds, one drive per round,
    /// retries, and the tasks shutdown drains.
    schedule: schedule::Schedule,
    health: Arc<parking_lot::RwLock<crate::http::NodeHealth>>,
    /// The chain as the head probe sees it (`/health`, `/health/ready`, chain metrics).
    pub chain_health: Arc<cresolver_chain::health::ChainHealth>,
    /// The newest head (probe and push subscription): wakes the watcher and the txm.
    heads: HeadFeed,
}

impl Node {
    /// Connects, loads the workflows and opens the store, after the start-up checks
    /// `config check` runs too (see [`preflight`]). `signer` is the resolver key
    /// (`None`: the node can simulate but not submit).
    pub async fn build(
        cfg: NodeConfig,
        signer: Option<PrivateKeySigner>,
    ) -> Result<Arc<Self>, NodeError> {
        let mut seen = Preflight::default();
        let built = Self::build_checked(cfg, signer, &mut seen).await;
        seen.log();
        built
    }

    /// Everything [`Self::build`] checks before it starts, without starting or creating
    /// anything: the store, every RPC endpoint and the chain id, the workflows and their
    /// markets, the DON membership (`signer`: the key the node would sign with); then
    /// what the node does not wait for at start, as warnings (the LLM endpoints and the
    /// DON's other members). What was checked is in `seen`, also when an error ends it.
    pub async fn check(
        cfg: &NodeConfig,
        signer: Option<&PrivateKeySigner>,
        seen: &mut Preflight,
    ) -> Result<(), NodeError> {
        preflight::check_store(cfg, seen).await?;
        let mut cfg = cfg.clone();
        if cfg.protocols.chorus.enabled && cfg.protocols.chorus.orchestrator_id.trim().is_empty() {
            // drawn at the node's first start and kept in its store; any id checks alike
            cfg.protocols.chorus.orchestrator_id = uuid::Uuid::new_v4().to_string();
        }
        let from = signer.map(|s| s.address());
        let up = start_up(&cfg, from, cfg.store.is_postgres(), seen).await?;
        preflight::probe_peers(&cfg, &up.pipelines, from, seen).await;
        Ok(())
    }

    async fn build_checked(
        cfg: NodeConfig,
        signer: Option<PrivateKeySigner>,
        seen: &mut Preflight,
    ) -> Result<Arc<Self>, NodeError> {
        // the store first: a database that cannot be used is the first thing to fix
        if !cfg.store.is_postgres() {
            seen.ok("store", preflight::check_data_dir(&cfg)?);
        }
        let store = open_store(&cfg).await?;
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
        let from = signer.as_ref().map(|s| s.address());
        let StartUp {
            pool,
            provider,
            chain_id,
            discovery,
            pipelines,
        } = start_up(&cfg, from, store.shared(), seen).await?;
        if pipelines.is_empty() {
            return Err(cresolver_pipeline::config::ConfigError::Invalid {
                key: "node.workflows".into(),
                message: "must list at least one workflow file".into(),
            }
            .into());
        }
        let don_signer = signer.clone();
        let from = from.unwrap_or_default();
        let wallet = signer.map(EthereumWallet::from);
        let metrics = Arc::new(Metrics::new());
        let don = don::member(
            &cfg,
            don_signer,
            &pipelines,
            store.shared(),
            metrics.clone(),
        )?;
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
        let chain_health = chain_health(&cfg, chain_id, pool, heads.clone(), metrics.clone());
        // discovery's metadata fetches: the same address policy as worker calls
        let http = discovery.net_policy().http_client();
        let health = crate::http::NodeHealth {
            chain_id: Some(chain_id),
            markets: pipelines.iter().map(|p| p.market.to_string()).collect(),
            ..Default::default()
        };
        Ok(Arc::new(Self {
            schedule: schedule::Schedule::new(cfg.node.max_concurrent_rounds, cfg.max_backoff()),
            cfg,
            provider,
            chain_id,
            store,
            metrics,
            pipelines,
            discovery,
            submission: Submission::new(txm, don).ok_or(don::DonSetupError::NoSigner)?,
            http,
            health: Arc::new(parking_lot::RwLock::new(health)),
            chain_health,
            heads,
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
            Some((n, _)) => n
                .saturating_sub(cresolver_pipeline::config::REORG_WINDOW)
                .min(head),
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

    /// The default market's workflow: the first of `node.workflows`. A manual request
    /// (`POST /resolve`, `cresolver resolve`) names only a market id, which is one of
    /// this market's. (A node has at least one workflow: the config refuses an empty
    /// list, and [`Self::build`] checks it again.)
    pub fn default_pipeline(&self) -> &Pipeline {
        &self.pipelines[0]
    }

    /// Records a manual request for `market_id` on the default market
    /// ([`Self::default_pipeline`]). A round
    /// that is done is served again only when the chain says the market is unresolved;
    /// otherwise the request is ignored with that reason.
    pub async fn request(&self, market_id: MarketId) -> Result<Option<Trigger>, NodeError> {
        let p = self.default_pipeline();
        let round = RoundKey::new(p.market, market_id);
        let done = self
            .store
            .get(round)
            .await?
            .is_some_and(|r| r.state.is_resolved());
        let unresolved = if done {
            match cresolver_chain::watcher::judge_request(&self.provider, round, None).await {
                Ok(cresolver_chain::watcher::ChainWord::Unresolved) => true,
                Ok(cresolver_chain::watcher::ChainWord::Resolved(why)) => {
                    tracing::info!(market_id = %market_id, reason = %why, "manual resolution request ignored: the market is resolved on chain");
                    return Ok(None);
                }
                Err(error) => return Err(NodeError::Judge { market_id, error }),
            }
        } else {
            false
        };
        let d = self
            .store
            .manual_request_judged(
                RoundKey::new(p.market, market_id),
                &p.workflow.name,
                unresolved,
            )
            .await?;
        tracing::info!(market_id = %market_id, decision = ?d, "manual resolution request");
        // A manual request also resumes an unfinished round that is not running.
        let unfinished = self
            .store
            .get(round)
            .await?
            .is_some_and(|r| !r.state.is_final());
        Ok((d.starts_round() || unfinished).then(|| Trigger {
            round,
            question: String::new(),
            log: None,
        }))
    }

    /// Runs (or resumes) the round of one market to a final or persisted state.
    pub async fn run_round(self: &Arc<Self>, round: RoundKey) -> Result<RoundReport, NodeError> {
        self.run_round_as(round, Claim::Direct).await
    }

    /// [`Self::run_round`], claiming the round's lease first: `Claim::FromStore` (the
    /// claim loop) respects the back-off a paused round was released with.
    async fn run_round_as(
        self: &Arc<Self>,
        round: RoundKey,
        how: Claim,
    ) -> Result<RoundReport, NodeError> {
        let (market, market_id) = (round.market, round.id);
        let key = RoundKey::new(market, market_id);
        if !self.schedule.enter(key) {
            return self.report(RoundKey::new(market, market_id)).await;
        }
        let _slot = self.schedule.slot().await;
        let started = Instant::now();
        let result = self
            .drive_leased(RoundKey::new(market, market_id), how)
            .await;
        if self.schedule.leave(key) {
            self.drive_again(round);
        }
        self.metrics
            .observe_stage(TimedStage::Round, started.elapsed().as_secs_f64());
        let from = match result {
            Ok(Some(driven)) => driven.from,
            Ok(None) => {
                tracing::debug!(market_id = %market_id, "round held by another node (or final): not run here");
                return self.report(RoundKey::new(market, market_id)).await;
            }
            Err((_, e)) if e.kind() == StepKind::LeaseLost => {
                self.metrics.lease_event(LeaseEvent::Lost);
                tracing::warn!(market_id = %market_id, node = self.store.node_id(), "lease lost: another node drives this round now; this node stopped it and wrote nothing more");
                return self.report(RoundKey::new(market, market_id)).await;
            }
            Err((stage, e)) => {
                // a drive stopped from outside (a progress that could not be stored) or
                // a claim that failed does not know its stage: the store says it, unless
                // the store is what is failing (the retry is scheduled regardless)
                let stage = match stage {
                    Some(s) => s,
                    None => match self.store.get(RoundKey::new(market, market_id)).await {
                        Ok(Some(r)) => r.state,
                        _ => Stage::Requested,
                    },
                };
                self.metrics
                    .round_stopped(labels::round_state(stage), StopReason::Retry);
                tracing::warn!(market_id = %market_id, stage = stage.as_str(), reason = %e.reason(), "round paused on a transient error; will retry");
                self.schedule_retry(round);
                return self.report(RoundKey::new(market, market_id)).await;
            }
        };
        let r = self.report(RoundKey::new(market, market_id)).await?;
        if let Some(why) = labels::stop_reason(r.state) {
            self.metrics.round_stopped(labels::round_state(from), why);
            let reason = r.reason.as_deref().unwrap_or("");
            if r.state == Stage::Failed {
                tracing::error!(market_id = %market_id, stage = from.as_str(), reason, "round failed");
            } else {
                tracing::warn!(market_id = %market_id, stage = from.as_str(), reason, "round skipped");
            }
        }
        if let Some(outcome) = labels::round_outcome(r.state) {
            self.metrics.round_finished(outcome);
        }
        if r.state.is_final() {
            self.schedule.finished(key);
        }
        Ok(r)
    }

    /// Claims the round, drives it while the lease keeper keeps the lease, and releases
    /// it. The drive stops at once when the lease is lost (a renewal refused, or not
    /// renewed within the lease: the node then cannot know it still holds it).
    async fn drive_leased(
        &self,
        round: RoundKey,
        how: Claim,
    ) -> Result<Option<round::Driven>, (Option<Stage>, StepError)> {
        let (market, market_id) = (round.market, round.id);
        let keeper = lease::Keeper {
            store: &self.store,
            metrics: &self.metrics,
        };
        let held = match keeper
            .claim(RoundKey::new(market, market_id), how == Claim::Direct)
            .await
        {
            Ok(Some(h)) => h,
            Ok(None) => return Ok(None),
            Err(e) => return Err((None, e.into())),
        };
        let result = tokio::select! {
            r = self.drive(RoundKey::new(market, market_id)) => r.map(Some).map_err(|(s, e)| (Some(s), e)),
            _ = held.lost() => Err((None, StepError::lease_lost())),
        };
        let retry_after = match &result {
            // the wait of the retry about to be scheduled
            Err((_, e)) if e.kind() == StepKind::Retry => {
                let key = RoundKey::new(market, market_id);
                Some(self.schedule.backoff(self.schedule.retries_of(key) + 1))
            }
            _ => None,
        };
        keeper.release(held, retry_after).await;
        result
    }

    /// How long a node that took a round over waits for the transaction another key
    /// signed for it before it signs its own: three receipt timeouts.
    fn foreign_wait(&self) -> Duration {
        self.cfg
            .submit
            .receipt_timeout
            .max(Duration::from_secs(1))
            .saturating_mul(3)
    }

    /// Drives a round once more, now, if it is not final (it was asked for while its
    /// drive was ending: a new request may have reopened it). A final one is left alone,
    /// so that it is not counted or logged as finished twice.
    fn drive_again(self: &Arc<Self>, round: RoundKey) {
        let node = self.clone();
        self.schedule.now(async move {
            if let Ok(Some(rec)) = node.store.get(round).await
                && !rec.state.is_final()
            {
                let _ = node.run_round(round).await;
            }
        });
    }

    /// Drives a paused round again after its back-off (retried for as long as the
    /// market is open: a round that reads the market resolved ends `skipped`), or as
    /// soon as the RPC comes back after an outage.
    fn schedule_retry(self: &Arc<Self>, round: RoundKey) {
        let node = self.clone();
        self.schedule
            .retry(round, self.heads.on_restore(), async move {
                let _ = node.run_round(round).await;
            });
    }

    /// The rounds being driven now (market contract and id), sorted.
    pub fn rounds_in_flight(&self) -> Vec<RoundKey> {
        self.schedule.in_flight()
    }

    /// The stored state of a round.
    pub async fn report(&self, round: RoundKey) -> Result<RoundReport, NodeError> {
        let (market, market_id) = (round.market, round.id);
        let rec = self.store.get(RoundKey::new(market, market_id)).await?;
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
                state: Stage::Failed,
                reason: Some("no such round".into()),
                tx_hash: None,
                resolution: None,
                transcript: None,
            },
        })
    }
}

/// What the start-up checks leave for the build: the endpoints, the chain, the
/// discovery settings and the workflows bound to their markets.
struct StartUp {
    pool: Arc<cresolver_chain::pool::RpcPool>,
    provider: DynProvider,
    chain_id: u64,
    discovery: DiscoveryConfig,
    pipelines: Vec<Pipeline>,
}

/// The start-up steps after the store, the same for [`Node::build`] and
/// [`Node::check`]: the endpoints and the chain id, the workflows and their markets, the
/// DON membership of the key `from`.
async fn start_up(
    cfg: &NodeConfig,
    from: Option<Address>,
    shared_store: bool,
    seen: &mut Preflight,
) -> Result<StartUp, NodeError> {
    let (pool, provider, chain_id) = preflight::connect(cfg, seen).await?;
    let discovery = discovery_config(cfg)?;
    let pipelines = load_pipelines(cfg, &provider, from.unwrap_or_default(), &discovery)?;
    preflight::note_workflows(cfg, &pipelines, seen);
    preflight::check_markets(cfg, &provider, chain_id, &pipelines, seen).await?;
    if let Some(dc) = don::check(cfg, from, &pipelines, shared_store)? {
        seen.ok(
            format!("don {}", dc.don_id),
            format!(
                "config version {}: member {} of {} (f = {})",
                dc.config_version,
                from.unwrap_or_default(),
                dc.members.len(),
                dc.f
            ),
        );
    }
    Ok(StartUp {
        pool,
        provider,
        chain_id,
        discovery,
        pipelines,
    })
}

/// Loads every workflow of the config, each bound to its market (two workflows on one
/// market are refused) with its engine and submitter.
fn load_pipelines(
    cfg: &NodeConfig,
    provider: &DynProvider,
    from: Address,
    discovery: &DiscoveryConfig,
) -> Result<Vec<Pipeline>, NodeError> {
    let default_market = cfg.chain.market_address;
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
            submitter_config(cfg, &workflow, market),
        )?;
        let engine = Engine::new(workflow.clone(), &discovery.net_policy())?;
        pipelines.push(Pipeline {
            workflow,
            market,
            engine,
            submitter,
        });
    }
    Ok(pipelines)
}

/// The chain's health as the head probe judges it, with the config's limits.
fn chain_health(
    cfg: &NodeConfig,
    chain_id: u64,
    pool: Arc<cresolver_chain::pool::RpcPool>,
    heads: HeadFeed,
    metrics: Arc<Metrics>,
) -> Arc<cresolver_chain::health::ChainHealth> {
    Arc::new(cresolver_chain::health::ChainHealth::new(
        cresolver_chain::health::HealthConfig {
            confirmations: cfg
                .chain
                .confirmations
                .unwrap_or(default_confirmations(chain_id)),
            max_head_age: cfg
                .chain
                .max_head_age
                .or((!is_dev_chain(chain_id)).then_some(Duration::from_secs(60))),
            max_lag_blocks: cfg.chain.max_lag_blocks,
        },
        pool,
        heads,
        metrics.clone(),
    ))
}

/// The store key of the node's Chorus `orchestrator_id` when none is configured.
pub const CHORUS_ORCHESTRATOR_KEY: &str = "chorus.orchestrator_id";

/// How a round is claimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Claim {
    /// A trigger, a retry or an operator: a released round's back-off does not apply.
    Direct,
    /// The claim loop of a shared store.
    FromStore,
}
