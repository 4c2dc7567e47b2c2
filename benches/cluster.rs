//! Cluster bench (several nodes on one PostgreSQL): the 100-market burst with
//! one node on SQLite and one on PostgreSQL (three runs each, alternating), then 2 and 3
//! nodes sharing one PostgreSQL server (started here, as the tests do), and the failover
//! time after a holder dies mid-round (median of 10). Every run checks that each market
//! was resolved exactly once.
//! Run: `cargo bench --bench cluster` (needs Debian's postgresql package).

/// The binary's allocator, so the figures are the binary's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use alloy::primitives::U256;
use alloy::providers::Provider;
use cresolver_devnet::Devnet;
use cresolver_store::RoundKey;
use cresolver_store::Stage;
use std::time::{Duration, Instant};

mod common;
#[path = "../tests/common/pg.rs"]
mod pg;

const MARKETS: usize = 100;

/// Requests every market in one block, waits until all are final; returns the seconds
/// from the request block to the last confirmation.
async fn burst(dev: &Devnet, nodes: &[common::Running], ids: &[U256]) -> anyhow::Result<f64> {
    let resolver = dev.accounts[0];
    let before = dev.provider.get_transaction_count(resolver).await?;
    let t0 = common::request_in_one_block(dev, ids).await?;
    common::wait_all_confirmed(
        &nodes[0].node,
        dev.contracts.market,
        ids,
        t0,
        Duration::from_secs(300),
    )
    .await?;
    let secs = t0.elapsed().as_secs_f64();
    let after = dev.provider.get_transaction_count(resolver).await?;
    anyhow::ensure!(
        after - before == ids.len() as u64,
        "{} transactions for {} markets",
        after - before,
        ids.len()
    );
    Ok(secs)
}

fn shared(
    url: String,
    node: String,
    lease: u64,
) -> impl FnOnce(&mut cresolver_pipeline::config::NodeConfig) {
    move |cfg| {
        cfg.store.url = url;
        cfg.store.node_id = node;
        cfg.store.lease = std::time::Duration::from_secs(lease);
    }
}

fn label(nodes: usize) -> String {
    match nodes {
        0 => "1 node, SQLite".to_string(),
        1 => "1 node, PostgreSQL".to_string(),
        n => format!("{n} nodes, PostgreSQL"),
    }
}

fn main() -> anyhow::Result<()> {
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let rows = burst_rows().await?;
        let lease = 3;
        let times = failover_times(lease).await?;
        let median = (times[4] + times[5]) / 2.0;
        let table = format!(
            "| configuration (100 markets in one block, 3 instant workers, rubric, 8 rounds per node, 50 ms poll) | burst → all confirmed (median) | markets/s | vs SQLite |\n|---|---|---|---|\n{}\n\n| failover after the holder dies mid-round (lease {lease} s, 1 s workers; 10 runs) | median {median:.2} s, min {:.2} s, max {:.2} s |\n|---|---|\n",
            rows.join("\n"),
            times[0],
            times[9],
        );
        println!("{table}");
        let _ = std::fs::write(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-cluster.md"),
            &table,
        );
        anyhow::Ok(())
    })
}

/// The 100-market burst in each configuration; returns one table row per configuration
/// (its median, its runs, markets per second and the change against SQLite).
async fn burst_rows() -> anyhow::Result<Vec<String>> {
    // SQLite and one node on PostgreSQL alternate three times each (this VM's speed
    // drifts between runs minutes apart; alternating puts both under the same
    // drift), then 2 and 3 nodes once; each configuration's figure is its median
    let mut runs: std::collections::BTreeMap<usize, Vec<f64>> = Default::default();
    common::steps::install();
    for nodes in [0usize, 1, 1, 0, 0, 1, 2, 3] {
        let label = label(nodes);
        eprintln!("{label}: creating {MARKETS} markets…");
        let (dev, ids) = common::devnet_with_markets(MARKETS, "cluster?").await?;
        let server = (nodes > 0).then(pg::Pg::start);
        let mut running = Vec::new();
        for i in 0..nodes.max(1) {
            let tag = format!("cluster-{nodes}-{i}");
            let r = match &server {
                Some(p) => {
                    common::start_node_with(
                        &dev,
                        &tag,
                        dev.rpc_url(),
                        50,
                        shared(p.url(), format!("n{i}"), 15),
                    )
                    .await?
                }
                None => common::start_node(&dev, &tag, dev.rpc_url(), 50).await?,
            };
            running.push(r);
        }
        let _ = common::steps::take();
        let secs = burst(&dev, &running, &ids).await?;
        // where the rounds' time went: each step's median and its sum over the burst
        let steps: Vec<String> = common::steps::take()
            .into_iter()
            .map(|(step, _, median, _, sum)| format!("{step} {median:.1}/{sum:.0}"))
            .collect();
        eprintln!(
            "{label}: {secs:.2} s; steps, median/sum ms: {}",
            steps.join(", ")
        );
        runs.entry(nodes).or_default().push(secs);
        for r in running {
            r.stop().await;
        }
    }
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let sqlite = median(&runs[&0]);
    let rows: Vec<String> = runs
        .iter()
        .map(|(nodes, v)| {
            let secs = median(v);
            let each = v
                .iter()
                .map(|s| format!("{s:.2}"))
                .collect::<Vec<_>>()
                .join(", ");
            format!(
                "| {} | {secs:.2} s (runs: {each} s) | {:.1} | {:+.0} % |",
                label(*nodes),
                MARKETS as f64 / secs,
                (secs / sqlite - 1.0) * 100.0
            )
        })
        .collect();
    Ok(rows)
}

/// Failover: two nodes with leases of `lease` seconds, workers that take 1 s; the holder
/// dies mid-round. Returns the 10 runs' times from the kill to the confirmation, sorted.
async fn failover_times(lease: u64) -> anyhow::Result<Vec<f64>> {
    eprintln!("failover: 10 rounds…");
    let server = pg::Pg::start();
    let (dev, ids) =
        common::devnet_with_slow_markets(10, "failover?", Duration::from_millis(1000)).await?;
    let mut times = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let mut nodes = Vec::new();
        for n in 0..2 {
            let tag = format!("failover-{i}-{n}");
            nodes.push(
                common::start_node_with(
                    &dev,
                    &tag,
                    dev.rpc_url(),
                    50,
                    shared(server.url(), format!("f{i}-{n}"), lease),
                )
                .await?,
            );
        }
        dev.request_resolution(*id).await?;
        let holder = loop {
            let rec = nodes[0]
                .node
                .store
                .get(RoundKey::new(dev.contracts.market, *id))
                .await?;
            if let Some(r) = rec
                && r.state != Stage::Requested
                && let Some(h) = r.holder
            {
                break h;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let k = nodes
            .iter()
            .position(|n| n.node.store.node_id() == holder)
            .unwrap_or(0);
        let victim = nodes.remove(k);
        let t0 = Instant::now();
        victim.kill().await;
        let survivor = nodes.remove(0);
        loop {
            anyhow::ensure!(t0.elapsed() < Duration::from_secs(60), "no failover");
            let r = survivor
                .node
                .report(RoundKey::new(dev.contracts.market, *id))
                .await?;
            if r.state.is_confirmed() {
                break;
            }
            anyhow::ensure!(!r.state.is_final(), "{r:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        times.push(t0.elapsed().as_secs_f64());
        survivor.stop().await;
    }
    times.sort_by(f64::total_cmp);
    Ok(times)
}
