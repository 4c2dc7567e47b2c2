//! Burst bench (issue: transaction manager): 100 markets requested in one block, 3
//! instant reference workers each, rubric evaluator, default concurrency. Measures the
//! time from the request block to the 100th confirmation and checks every market was
//! resolved exactly once with contiguous nonces. Run: `cargo bench --bench burst`.

/// The binary's allocator, so the figures are the binary's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use alloy::providers::Provider;
use std::time::Duration;

mod common;

const MARKETS: usize = 100;

fn main() -> anyhow::Result<()> {
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        eprintln!("creating {MARKETS} markets…");
        let (dev, ids) = common::devnet_with_markets(MARKETS, "burst?").await?;
        let r = common::start_node(&dev, "burst", dev.rpc_url(), 50).await?;
        let node = r.node.clone();
        let resolver = dev.accounts[0];
        let before = dev.provider.get_transaction_count(resolver).await?;
        let t0 = common::request_in_one_block(&dev, &ids).await?;
        common::wait_all_confirmed(&node, dev.contracts.market, &ids, t0, Duration::from_secs(120))
            .await?;
        let elapsed = t0.elapsed().as_secs_f64();
        r.stop().await;
        let after = dev.provider.get_transaction_count(resolver).await?;
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
