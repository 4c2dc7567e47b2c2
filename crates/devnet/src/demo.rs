//! The demo: a whole resolution on a local chain in one command. Starts anvil, deploys
//! the contracts, starts reference workers, registers them in ERC-8004 with data-URI
//! registrations, creates a market, joins, requests resolution, runs the node until
//! `MarketResolved`, and summarises. Everything it started is stopped at the end.

use crate::agent::{AgentBehaviour, DeterminationMode};
use crate::{Devnet, RegisteredAgent};
use alloy::primitives::{Address, B256, U256, utils::format_ether, utils::parse_ether};
use cresolver_node::{Node, RoundReport};
use cresolver_pipeline::config::NodeConfig;
use cresolver_store::RoundKey;
use cresolver_store::Stage;
use serde::Serialize;
use std::time::{Duration, Instant};

/// The default workflow file, built in so the demo runs from any directory.
pub const DEFAULT_WORKFLOW: &str = include_str!("../../../workflows/cresolver-resolution.toml");

/// What the demo runs.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// How many reference workers join the market (1 to 10).
    pub workers: usize,
    /// The market's question.
    pub question: String,
    /// Print progress lines to stderr.
    pub progress: bool,
}

impl Default for DemoOptions {
    fn default() -> Self {
        Self {
            workers: 3,
            question: "Will the reference feed report YES by the end of 2026?".into(),
            progress: true,
        }
    }
}

/// One worker of the demo, as the summary shows it.
#[derive(Debug, Clone, Serialize)]
pub struct DemoWorker {
    /// The worker's address (its agent's owner).
    pub address: Address,
    /// Its agent id in the identity registry.
    pub agent_id: U256,
    /// Where its reference agent listens.
    pub endpoint: String,
    /// The side it answered (`true`: YES), when it answered.
    pub determination: Option<bool>,
    /// The confidence it answered with, in [0, 1].
    pub confidence: Option<f64>,
    /// Why its answer was refused, when it was.
    pub failure: Option<String>,
    /// (resQuality, srcQuality, analysisDepth)
    pub scores: [u8; 3],
    /// Its reward weight from the tally.
    pub weight: String,
    /// Reward plus returned stake credited on chain, in ETH.
    pub payout_eth: String,
}

/// What the demo did, for printing ([`render`]) or as JSON.
#[derive(Debug, Clone, Serialize)]
pub struct DemoSummary {
    /// The devnet's chain id.
    pub chain_id: u64,
    /// The market contract.
    pub market: Address,
    /// The market the demo created.
    pub market_id: U256,
    /// Its question.
    pub question: String,
    /// The round's final state.
    pub state: Stage,
    /// Why the round ended in that state, when the node says.
    pub reason: Option<String>,
    /// The outcome (`true`: YES), once resolved.
    pub resolution: Option<bool>,
    /// The resolving transaction.
    pub tx_hash: Option<B256>,
    /// The market's reward pool, in ETH.
    pub reward_pool_eth: String,
    /// Every worker, in joining order.
    pub workers: Vec<DemoWorker>,
    /// How long the demo took, in seconds.
    pub seconds: f64,
}

fn say(on: bool, msg: &str) {
    if on {
        eprintln!("demo: {msg}");
    }
}

/// Runs the demo end to end.
pub async fn run(opts: DemoOptions) -> anyhow::Result<DemoSummary> {
    let started = Instant::now();
    anyhow::ensure!(
        (1..=10).contains(&opts.workers),
        "--workers must be between 1 and 10"
    );
    say(opts.progress, "starting anvil and deploying the contracts");
    let dev = Devnet::start().await?;
    say(
        opts.progress,
        &format!(
            "anvil at {} (chain {}), market at {}",
            dev.rpc_url(),
            dev.chain_id,
            dev.contracts.market
        ),
    );

    let reward = parse_ether("1")?;
    let stake = parse_ether("0.01")?;
    let market_id = dev.create_market(&opts.question, reward, 86_400).await?;
    let (endpoints, agents) = start_workers(&dev, &opts, market_id, stake).await?;

    let dir = std::env::temp_dir().join(format!(
        "cresolver-demo-{}-{}",
        std::process::id(),
        dev.anvil.port()
    ));
    std::fs::create_dir_all(&dir)?;
    let cfg = node_config(&dev, &dir)?;
    let node = Node::build(cfg, dev.signers.first().cloned()).await?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let runner = tokio::spawn(node.clone().run(
        async move {
            let _ = stop_rx.await;
        },
        Duration::from_secs(10),
    ));

    say(
        opts.progress,
        "requesting resolution; the node takes it from here",
    );
    dev.request_resolution(market_id).await?;
    let market = dev.contracts.market;
    let report = wait_for_final(&node, RoundKey::new(market, market_id), opts.progress).await?;
    let _ = stop_tx.send(());
    let _ = runner.await;

    let workers = demo_workers(&dev, &report, &agents, &endpoints).await;
    let _ = std::fs::remove_dir_all(&dir);
    let chain_id = dev.chain_id;
    // what polls the chain stops before the chain does (no error after a success)
    drop(node);
    dev.stop().await;
    Ok(DemoSummary {
        chain_id,
        market,
        market_id,
        question: opts.question,
        state: report.state,
        reason: report.reason,
        resolution: report.resolution,
        tx_hash: report.tx_hash,
        reward_pool_eth: format_ether(reward),
        workers,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Starts `opts.workers` reference agents with a spread of opinions, registers each in
/// the identity registry (owned by dev account `i + 1`) and joins it to the market with
/// `stake`. Returns their endpoints and agents, in joining order.
async fn start_workers(
    dev: &Devnet,
    opts: &DemoOptions,
    market_id: U256,
    stake: U256,
) -> anyhow::Result<(Vec<String>, Vec<RegisteredAgent>)> {
    let mut endpoints = Vec::new();
    let mut agents = Vec::new();
    for i in 0..opts.workers {
        // A spread of opinions so the vote and the weights are interesting.
        let (det, conf) = match i % 3 {
            0 => (DeterminationMode::Yes, 0.85),
            1 => (DeterminationMode::Yes, 0.7),
            _ => (DeterminationMode::No, 0.6),
        };
        let name = format!("worker-{}", i + 1);
        let behaviour = AgentBehaviour {
            name: name.clone(),
            determination: det,
            confidence: Some(conf),
            latency: Duration::from_millis(50),
            failure: None,
        };
        let (url, _task) = crate::agent::spawn("127.0.0.1:0", behaviour).await?;
        let owner = dev.accounts[i + 1];
        let agent = dev
            .register_agent(owner, Some(dev.registration_uri(&name, owner, &url)))
            .await?;
        dev.join(market_id, owner, agent.agent_id, stake).await?;
        say(
            opts.progress,
            &format!(
                "{name} at {url}: agent {} joined market {market_id} as {owner}",
                agent.agent_id
            ),
        );
        endpoints.push(url);
        agents.push(agent);
    }
    Ok((endpoints, agents))
}

/// The demo node's configuration: the devnet's chain and contracts, a fast poll, the
/// built-in workflow written to `dir`, its data under `dir`, private endpoints allowed
/// (the agents listen on 127.0.0.1) and no HTTP API.
fn node_config(dev: &Devnet, dir: &std::path::Path) -> anyhow::Result<NodeConfig> {
    let wf_path = dir.join("cresolver-resolution.toml");
    std::fs::write(&wf_path, DEFAULT_WORKFLOW)?;
    let mut cfg = NodeConfig::default();
    cfg.chain.rpc_url = dev.rpc_url();
    cfg.chain.market_address = Some(dev.contracts.market);
    cfg.chain.multicall_address = Some(dev.contracts.multicall);
    cfg.chain.poll_interval = std::time::Duration::from_millis(200);
    cfg.node.data_dir = dir.join("data");
    cfg.node.workflows = vec![wf_path];
    cfg.discovery.allow_private_endpoints = true;
    cfg.api.listen = String::new();
    Ok(cfg)
}

/// Polls the node's report of the round every 100 ms until its state is final, saying
/// each new state; an error after 120 s.
async fn wait_for_final(
    node: &Node,
    round: RoundKey,
    progress: bool,
) -> anyhow::Result<RoundReport> {
    let (market, market_id) = (round.market, round.id.get());
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut last = None;
    loop {
        let r = node.report(RoundKey::new(market, market_id)).await?;
        if last != Some(r.state) && r.reason.as_deref() != Some("no such round") {
            say(progress, &format!("round state: {}", r.state.as_str()));
            last = Some(r.state);
        }
        if r.state.is_final() && r.reason.as_deref() != Some("no such round") {
            return Ok(r);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the round did not finish within 120 s (state {})",
            r.state.as_str()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Each worker's line of the summary: its answer and failure from the round's
/// transcript, its scores and weight from the tally, and what the market credited its
/// owner.
async fn demo_workers(
    dev: &Devnet,
    report: &RoundReport,
    agents: &[RegisteredAgent],
    endpoints: &[String],
) -> Vec<DemoWorker> {
    let m = dev.market();
    let outcome = report
        .transcript
        .as_ref()
        .and_then(|t| {
            <cresolver_pipeline::transcript::Transcript as serde::Deserialize>::deserialize(t).ok()
        })
        .and_then(|t| t.outcome);
    let mut workers = Vec::new();
    for (i, agent) in agents.iter().enumerate() {
        let t = outcome.as_ref().and_then(|o| o.tally.workers.get(i));
        let r = outcome.as_ref().and_then(|o| o.resolve.results.get(i));
        let balance = m.balances(agent.owner).call().await.unwrap_or_default();
        let answer = r.and_then(|r| r.outcome.as_ref().ok());
        workers.push(DemoWorker {
            address: agent.owner,
            agent_id: agent.agent_id,
            endpoint: endpoints[i].clone(),
            determination: answer.map(|a| a.determination),
            confidence: answer.map(|a| a.confidence),
            failure: r
                .and_then(|r| r.outcome.as_ref().err())
                .map(|f| f.to_string()),
            scores: t.map_or([0; 3], |t| {
                [
                    t.scores.res_quality,
                    t.scores.src_quality,
                    t.scores.analysis_depth,
                ]
            }),
            weight: t.map_or_else(|| "0".into(), |t| t.weight.to_string()),
            payout_eth: format_ether(balance),
        });
    }
    workers
}

/// A readable summary.
pub fn render(s: &DemoSummary) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Market {} on {} (chain {}): {:?}",
        s.market_id, s.market, s.chain_id, s.question
    );
    let _ = writeln!(
        out,
        "Reward pool {} ETH, round {}{}",
        s.reward_pool_eth,
        s.state.as_str(),
        s.reason
            .as_ref()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default()
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<44} {:<10} {:>5} {:>15} {:>7} {:>22}",
        "worker", "answer", "conf", "res/src/depth", "weight", "payout (ETH)"
    );
    for w in &s.workers {
        let answer = match (w.determination, &w.failure) {
            (Some(true), _) => "YES".to_string(),
            (Some(false), _) => "NO".to_string(),
            (None, Some(_)) => "failed".to_string(),
            _ => "-".to_string(),
        };
        let conf = w
            .confidence
            .map(|c| format!("{:.0}%", c * 100.0))
            .unwrap_or_else(|| "-".into());
        let scores = format!("{}/{}/{}", w.scores[0], w.scores[1], w.scores[2]);
        let _ = writeln!(
            out,
            "{:<44} {:<10} {:>5} {:>15} {:>7} {:>22}",
            w.address.to_string(),
            answer,
            conf,
            scores,
            w.weight,
            w.payout_eth
        );
    }
    let _ = writeln!(out);
    let outcome = match s.resolution {
        Some(true) => "YES",
        Some(false) => "NO",
        None => "none",
    };
    let _ = writeln!(out, "Outcome: {outcome}");
    if let Some(tx) = s.tx_hash {
        let _ = writeln!(out, "Resolution tx: {tx}");
    }
    let _ = writeln!(
        out,
        "Took {:.1} s (anvil, deploy, {} workers, round, confirmation).",
        s.seconds,
        s.workers.len()
    );
    out
}
