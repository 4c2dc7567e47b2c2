//! The node's long-running loop: the watchers, the dispatcher that runs rounds
//! concurrently (bounded), retries, the claim loop of a shared store, the finality watch,
//! the API and an orderly shutdown.

use crate::http::{ApiState, ManualTrigger};
use crate::{Claim, Node, NodeError, finality};
use alloy::primitives::Address;
use alloy::providers::Provider;
use cresolver_chain::heads::PushConfig;
use cresolver_chain::watcher::{Trigger, Watcher};
use cresolver_pipeline::config::is_dev_chain;
use cresolver_pipeline::store_sink::StoreSink;
use cresolver_store::RoundKey;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

use cresolver_pipeline::dispatch::{Concurrency, dispatch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

impl Node {
    /// A shared store's claim loop: every tick, as many claimable rounds as this node has
    /// room for (`max_concurrent_rounds` less the rounds it runs) are handed to the
    /// dispatcher, which claims each before it runs it; other nodes do the same, so the
    /// rounds spread over the nodes with room. Also keeps `/health`'s cluster view.
    pub(super) async fn claim_loop(
        self: Arc<Self>,
        tx: mpsc::Sender<RoundKey>,
        stop: tokio_util::sync::CancellationToken,
    ) {
        let every = self
            .cfg
            .chain
            .poll_interval
            .clamp(Duration::from_millis(100), Duration::from_secs(1));
        let mut failing = false;
        loop {
            // a little jitter, so that nodes do not race for the same rounds in step
            let jitter =
                Duration::from_millis(rand::random::<u64>() % (every.as_millis() as u64 / 4 + 1));
            tokio::select! {
                _ = tokio::time::sleep(every + jitter) => {}
                _ = stop.cancelled() => return,
            }
            let held = self.store.held() as u64;
            self.metrics.set_leases_held(held);
            {
                let mut h = self.health.write();
                let counts = self.metrics.lease_counts();
                h.cluster = Some(crate::http::ClusterHealth {
                    node_id: self.store.node_id().to_string(),
                    lease_secs: self.store.lease_duration().as_secs(),
                    leases_held: held,
                    leases_claimed: counts.claimed,
                    takeovers: counts.takeovers,
                    leases_lost: counts.lost,
                });
            }
            let busy = self.schedule.busy();
            let room = self.cfg.node.max_concurrent_rounds.saturating_sub(busy);
            if room == 0 {
                continue;
            }
            let markets: Vec<Address> = self.pipelines.iter().map(|p| p.market).collect();
            // (the listing includes the rounds this node holds, running ones among
            // them: asked for room + busy, it still holds room others)
            let ids = match self.store.claimable(&markets, room + busy).await {
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
            let mut sent = 0;
            for round in ids {
                if self.schedule.is_running(round) {
                    continue;
                }
                if sent == room {
                    break;
                }
                if tx.send(round).await.is_err() {
                    return;
                }
                sent += 1;
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
        // one shutdown mechanism: the node's cancellation token, which every task watches,
        // and its task tracker, which the drain below waits on
        let (trig_tx, trig_rx) = mpsc::channel::<Trigger>(1024);
        self.resume_unfinished(trig_tx.clone()).await?;
        self.spawn_watchers(&trig_tx).await?;
        self.spawn_chain_tasks();
        // the finality watch: confirmed rounds until final; the rounds it reopens (a
        // reorg removed their resolution) go to the dispatcher like the claim loop's
        let (reopen_tx, reopen_rx) = mpsc::channel::<RoundKey>(256);
        self.spawn_finality(reopen_tx);
        let (claim_tx, claim_rx) = mpsc::channel::<RoundKey>(256);
        if self.store.shared() {
            let (node, rx) = (self.clone(), self.schedule.cancel.clone());
            self.schedule
                .tracker
                .spawn(async move { node.claim_loop(claim_tx, rx).await });
        } else {
            drop(claim_tx);
        }
        self.spawn_don_endpoint().await?;
        let (api_tx, api_rx) = mpsc::channel::<ManualTrigger>(64);
        self.spawn_api(api_tx).await?;

        // The sources above feed one dispatcher: watcher triggers and resumed rounds,
        // rounds the finality watch reopened, manual requests (judged first), and a
        // shared store's claims.
        let (jobs_tx, jobs_rx) = mpsc::channel::<RoundJob>(1024);
        let (tasks, stop) = (&self.schedule.tracker, &self.schedule.cancel);
        forward(
            tasks,
            stop.clone(),
            trig_rx,
            jobs_tx.clone(),
            |t: Trigger| RoundJob::Local(t.round),
        );
        forward(
            tasks,
            stop.clone(),
            reopen_rx,
            jobs_tx.clone(),
            RoundJob::Local,
        );
        forward(
            tasks,
            stop.clone(),
            claim_rx,
            jobs_tx.clone(),
            RoundJob::Claimed,
        );
        self.spawn_manual_requests(api_rx, jobs_tx);
        drop(trig_tx);
        let node = self.clone();
        let rounds = dispatch(jobs_rx, Concurrency::Unbounded, shutdown, move |job| {
            let node = node.clone();
            async move {
                let (round, how) = match job {
                    RoundJob::Local(k) => (k, Claim::Direct),
                    RoundJob::Claimed(k) => (k, Claim::FromStore),
                };
                if let Err(e) = node.run_round_as(round, how).await {
                    tracing::error!(market_id = %round.id, error = %e, "round error");
                }
            }
        })
        .await;
        self.shut_down(rounds, drain).await;
        Ok(())
    }

    /// Feeds the unfinished rounds of the embedded store to the dispatcher, from a task
    /// of their own (the channel holds 1024, and the dispatcher only starts draining it
    /// once every source runs). A shared store's claim loop finds every round a node may
    /// drive instead, this node's unfinished ones included (once their leases expire).
    async fn resume_unfinished(&self, tx: mpsc::Sender<Trigger>) -> Result<(), NodeError> {
        if self.store.shared() {
            return Ok(());
        }
        let unfinished = self.store.unfinished().await?;
        if unfinished.is_empty() {
            return Ok(());
        }
        tracing::info!(rounds = unfinished.len(), "resuming unfinished rounds");
        let stop = self.schedule.cancel.clone();
        self.schedule.tracker.spawn(async move {
            for rec in unfinished {
                tracing::debug!(market_id = %rec.market_id, state = rec.state.as_str(), "resuming unfinished round");
                let t = Trigger {
                    round: rec.key(),
                    question: String::new(),
                    log: None,
                };
                tokio::select! {
                    sent = tx.send(t) => if sent.is_err() { return },
                    _ = stop.cancelled() => return,
                }
            }
        });
        Ok(())
    }

    /// One watcher per workflow, from its start block, sending its triggers to `tx` and
    /// keeping the processed block in the metrics, the chain health and `/health`.
    async fn spawn_watchers(&self, tx: &mpsc::Sender<Trigger>) -> Result<(), NodeError> {
        let dev = is_dev_chain(self.chain_id);
        let head = self.provider.get_block_number().await.unwrap_or(0);
        for p in &self.pipelines {
            let start = self.start_block(p, dev, head).await?;
            let wcfg = self
                .cfg
                .watcher_config(p.market, &p.workflow.name, self.chain_id, start);
            let watcher = Watcher::new(
                self.provider.clone(),
                StoreSink::shared(self.store.clone()),
                wcfg,
            )
            .with_heads(self.heads.clone());
            let (tx, rx, m, h, ch, wake) = (
                tx.clone(),
                self.schedule.cancel.clone(),
                self.metrics.clone(),
                self.health.clone(),
                self.chain_health.clone(),
                self.heads.subscribe(),
            );
            self.schedule.tracker.spawn(async move {
                watcher
                    .run(tx, rx, Some(wake), move |r| {
                        if let Some(to) = r.to {
                            m.set_last_processed_block(to);
                            ch.processed(to);
                            h.write().last_processed_block = Some(to);
                        }
                    })
                    .await
            });
        }
        Ok(())
    }

    /// The head probe, and a push subscription on the first websocket endpoint that
    /// wakes the watcher and the transaction manager at every new head (rebuilt for as
    /// long as the node runs).
    fn spawn_chain_tasks(&self) {
        let every = self
            .cfg
            .chain
            .poll_interval
            .clamp(Duration::from_millis(50), Duration::from_secs(1));
        let (ch, m, rx) = (
            self.chain_health.clone(),
            self.metrics.clone(),
            self.schedule.cancel.clone(),
        );
        self.schedule
            .tracker
            .spawn(async move { ch.run(m, every, rx).await });
        let Some(url) = self
            .cfg
            .rpc_urls()
            .into_iter()
            .find(|u| u.starts_with("ws"))
        else {
            return;
        };
        let cfg = PushConfig {
            pool: self.cfg.pool_config(),
            max_backoff: self.cfg.max_backoff(),
            stall_after: self
                .cfg
                .chain
                .poll_interval
                .saturating_mul(3)
                .max(Duration::from_secs(2)),
        };
        let (feed, rx) = (self.heads.clone(), self.schedule.cancel.clone());
        self.schedule
            .tracker
            .spawn(async move { cresolver_chain::heads::run_push(url, cfg, feed, rx).await });
    }

    /// The finality watch, sending the rounds it reopens to `reopen`.
    fn spawn_finality(&self, reopen: mpsc::Sender<RoundKey>) {
        let depth = self.cfg.chain.finality_depth.unwrap_or(
            cresolver_chain::finality::default_finality_depth(self.chain_id),
        );
        let watch = finality::FinalityWatch::new(
            self.provider.clone(),
            self.store.clone(),
            self.metrics.clone(),
            depth,
            self.cfg.chain.multicall_address,
        );
        let every = self
            .cfg
            .chain
            .poll_interval
            .clamp(Duration::from_millis(100), Duration::from_secs(5));
        let (rx, wake) = (self.schedule.cancel.clone(), self.heads.subscribe());
        self.schedule
            .tracker
            .spawn(async move { watch.run(reopen, rx, wake, every).await });
    }

    /// A DON member's endpoint for the other members (`[don].listen`).
    async fn spawn_don_endpoint(&self) -> Result<(), NodeError> {
        let Some(don) = self.submission.don() else {
            return Ok(());
        };
        let addr = don.config().listen.clone();
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .map_err(|error| NodeError::Listen {
                addr: addr.clone(),
                error,
                what: " (this is [don].listen, the member endpoint)",
            })?;
        tracing::info!(%addr, "DON member endpoint listening");
        let (d, rx) = (don.clone(), self.schedule.cancel.clone());
        self.schedule.tracker.spawn(async move {
            let stop = async move {
                let _ = rx.cancelled().await;
            };
            if let Err(e) = cresolver_don::server::serve(listener, d, stop).await {
                tracing::error!(error = %e, "the DON member endpoint stopped");
            }
        });
        Ok(())
    }

    /// The HTTP API (`api.listen`; empty: none), whose manual triggers go to `trigger`.
    async fn spawn_api(&self, trigger: mpsc::Sender<ManualTrigger>) -> Result<(), NodeError> {
        if self.cfg.api.listen.trim().is_empty() {
            return Ok(());
        }
        let addr = self.cfg.api.listen.clone();
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .map_err(|error| NodeError::Listen {
                addr: addr.clone(),
                error,
                what: "",
            })?;
        let token = std::env::var(&self.cfg.api.token_env)
            .ok()
            .filter(|t| !t.is_empty())
            .map(secrecy::SecretString::from);
        tracing::info!(addr = %listener.local_addr().map(|a| a.to_string()).unwrap_or(addr), trigger_enabled = token.is_some(), "HTTP API listening");
        let state = ApiState {
            store: self.store.clone(),
            metrics: self.metrics.clone(),
            trigger,
            token,
            market: self.default_pipeline().market,
            started: Instant::now(),
            health: self.health.clone(),
            chain: Some(self.chain_health.clone()),
            stop: self.schedule.cancel.clone(),
            don: self.submission.don().cloned(),
        };
        let rx = self.schedule.cancel.clone();
        self.schedule.tracker.spawn(async move {
            let _ = crate::api::serve(listener, state, async move {
                let _ = rx.cancelled().await;
            })
            .await;
        });
        Ok(())
    }

    /// Judges each manual request of the API and hands the rounds it starts to `jobs`.
    fn spawn_manual_requests(
        self: &Arc<Self>,
        mut requests: mpsc::Receiver<ManualTrigger>,
        jobs: mpsc::Sender<RoundJob>,
    ) {
        let node = self.clone();
        self.schedule.tracker.spawn(async move {
            while let Some(m) = requests.recv().await {
                match node.request(m.market_id).await {
                    Ok(Some(t)) => {
                        if jobs.send(RoundJob::Local(t.round)).await.is_err() {
                            return;
                        }
                    }
                    Ok(None) => {}
                    Err(e) => tracing::error!(error = %e, "manual request failed"),
                }
            }
        });
    }

    /// The orderly end: every task is told to stop, DON agreements end (what they voted
    /// and signed is persisted), and in-flight rounds get up to `drain` to reach a
    /// persisted state.
    async fn shut_down(&self, rounds: cresolver_pipeline::dispatch::InFlight, drain: Duration) {
        tracing::info!(
            in_flight = rounds.len(),
            "shutting down: letting in-flight rounds reach a persisted state"
        );
        self.schedule.cancel.cancel();
        if let Some(don) = self.submission.don() {
            // agreements end now rather than running their rounds out
            don.stop();
        }
        self.schedule.tracker.close();
        let started = Instant::now();
        rounds.drain(drain).await;
        // every task watches the token: the sources, servers and scheduled retries end;
        // those that do not within the bound are left to the runtime's shutdown
        let bound = drain
            .saturating_sub(started.elapsed())
            .max(Duration::from_secs(5));
        if tokio::time::timeout(bound, self.schedule.tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                tasks = self.schedule.tracker.len(),
                "some tasks did not stop within the drain bound"
            );
        }
    }
}

/// A round for the dispatcher: one this node starts (or resumes) itself, or one a shared
/// store's claim loop found.
enum RoundJob {
    Local(RoundKey),
    Claimed(RoundKey),
}

/// Forwards a source's channel into the dispatcher's, mapped to jobs, until either closes
/// or the node stops.
fn forward<T: Send + 'static>(
    tasks: &TaskTracker,
    stop: CancellationToken,
    mut from: mpsc::Receiver<T>,
    to: mpsc::Sender<RoundJob>,
    job: impl Fn(T) -> RoundJob + Send + 'static,
) {
    tasks.spawn(async move {
        loop {
            let x = tokio::select! {
                x = from.recv() => x,
                _ = stop.cancelled() => return,
            };
            let Some(x) = x else { return };
            if to.send(job(x)).await.is_err() {
                return;
            }
        }
    });
}
