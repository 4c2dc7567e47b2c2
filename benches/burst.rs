//! Burst bench (issue: transaction manager): 100 markets requested in one block, 3
//! instant reference workers each, rubric evaluator, default concurrency. Measures the
//! time from the request block to the 100th confirmation and checks every market was
//! resolved exactly once with contiguous nonces. Run: `cargo bench --bench burst`.

use alloy::primitives::{U256, utils::parse_ether};
use alloy::providers::Provider;
use alloy::providers::ext::AnvilApi;
use cresolver::agent::{AgentBehaviour, DeterminationMode};
use cresolver::config::NodeConfig;
use cresolver::devnet::Devnet;
use cresolver::node::Node;
use cresolver::store::RoundState;
use std::time::{Duration, Instant};

const MARKETS: usize = 100;

fn main() -> anyhow::Result<()> {
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let dev = Devnet::start().await?;
        let mut agents = vec![];
        for i in 0..3 {
            let b = AgentBehaviour {
                name: format!("w{i}"),
                determination: DeterminationMode::Yes,
                confidence: Some(0.8),
                latency: Duration::ZERO,
                failure: None,
            };
            let url = cresolver::agent::spawn("127.0.0.1:0", b).await?.0;
            let owner = dev.accounts[i + 1];
            agents.push(
                dev.register_agent(owner, Some(dev.registration_uri("w", owner, &url)))
                    .await?,
            );
        }
        eprintln!("creating {MARKETS} markets…");
        let mut ids: Vec<U256> = vec![];
        for _ in 0..MARKETS {
            let id = dev.create_market("burst?", parse_ether("1")?, 86_400).await?;
            for (i, a) in agents.iter().enumerate() {
                dev.join(id, dev.accounts[i + 1], a.agent_id, parse_ether("0.01")?)
                    .await?;
            }
            ids.push(id);
        }
        let dir = tempdir_path("burst");
        std::fs::create_dir_all(&dir)?;
        let wf = dir.join("wf.toml");
        std::fs::write(&wf, cresolver::demo::DEFAULT_WORKFLOW)?;
        let mut cfg = NodeConfig::default();
        cfg.chain.rpc_url = dev.rpc_url();
        cfg.chain.market_address = Some(dev.contracts.market);
        cfg.chain.multicall_address = Some(dev.contracts.multicall);
        cfg.chain.poll_interval_ms = 50;
        cfg.node.data_dir = dir.join("data");
        cfg.node.workflows = vec![wf];
        cfg.discovery.allow_private_endpoints = true;
        cfg.api.listen = String::new();
        let node = Node::build(cfg, dev.signers.first().cloned()).await?;
        let (stop, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(node.clone().run(
            async move {
                let _ = rx.await;
            },
            Duration::from_secs(5),
        ));
        tokio::time::sleep(Duration::from_millis(300)).await;
        let resolver = dev.accounts[0];
        let before = dev.provider.get_transaction_count(resolver).await?;
        dev.provider.anvil_set_auto_mine(false).await?;
        for id in &ids {
            let _ = dev
                .market()
                .requestResolution(*id)
                .from(dev.requester())
                .send()
                .await?;
        }
        dev.provider.evm_mine(None).await?;
        let t0 = Instant::now();
        dev.provider.anvil_set_auto_mine(true).await?;
        let mut confirmed = 0;
        let mut failed = vec![];
        while confirmed + failed.len() < MARKETS {
            anyhow::ensure!(t0.elapsed() < Duration::from_secs(120), "timeout: {confirmed} confirmed");
            confirmed = 0;
            failed.clear();
            for id in &ids {
                let r = node.report(dev.contracts.market, *id).await?;
                match r.state {
                    RoundState::Confirmed => confirmed += 1,
                    s if s.is_final() && r.reason.as_deref() != Some("no such round") => {
                        failed.push((*id, r.reason))
                    }
                    _ => {}
                }
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let elapsed = t0.elapsed().as_secs_f64();
        let _ = stop.send(());
        let _ = task.await;
        let after = dev.provider.get_transaction_count(resolver).await?;
        let _ = std::fs::remove_dir_all(&dir);
        anyhow::ensure!(failed.is_empty(), "rounds not confirmed: {failed:?}");
        anyhow::ensure!(after - before == MARKETS as u64, "{} transactions for {MARKETS} markets", after - before);
        let table = format!(
            "| measurement | value |\n|---|---|\n| burst: {MARKETS} markets requested in one block → all confirmed (3 instant workers, rubric, 8 concurrent rounds, 50 ms poll) | {elapsed:.2} s, {:.1} markets/s, {} transactions, all resolved once |\n",
            MARKETS as f64 / elapsed,
            after - before
        );
        println!("{table}");
        let _ = std::fs::write(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-burst.md"),
            &table,
        );
        anyhow::Ok(())
    })
}

fn tempdir_path(tag: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("cresolver-bench-{tag}-{}", std::process::id()))
}
