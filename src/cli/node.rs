//! `cresolver node`, `cresolver resolve` and `cresolver config check`.

use super::*;
use cresolver_node::Node;

/// Runs the resolver node until Ctrl-C or SIGTERM.
pub async fn node_cmd(config: &ConfigArgs) -> anyhow::Result<ExitCode> {
    let cfg = config.load()?;
    let signer = cfg.signer()?;
    tracing::info!(resolver = %signer.address(), "starting node");
    let node = Node::build(cfg, Some(signer)).await?;
    node.run(shutdown_signal(), Duration::from_secs(30)).await?;
    Ok(ExitCode::SUCCESS)
}

/// Resolves one market now; exit 0 only when the resolution is confirmed.
pub async fn resolve_cmd(
    config: &ConfigArgs,
    market: U256,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let cfg = config.load()?;
    let signer = cfg.signer()?;
    let node = Node::build(cfg, Some(signer)).await?;
    let market_addr = node.pipelines[0].market;
    node.request(market).await?;
    let mut report = node.run_round(market_addr, market).await?;
    // Transient trouble: the node retries in the background; wait for a final state.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    while !report.state.is_final() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        report = node.report(market_addr, market).await?;
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "market {market}: {}{}{}",
            report.state.as_str(),
            report
                .reason
                .as_ref()
                .map(|r| format!(" — {r}"))
                .unwrap_or_default(),
            report
                .tx_hash
                .map(|t| format!(" (tx {t})"))
                .unwrap_or_default()
        );
    }
    Ok(if report.state.is_confirmed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Validates the config and its workflows and reaches the RPC and the market.
pub async fn config_check(config: &ConfigArgs) -> anyhow::Result<ExitCode> {
    let cfg = config.load()?;
    for w in &cfg.node.workflows {
        cresolver_pipeline::workflow::Workflow::load(w)?;
        println!("workflow {}: ok", w.display());
    }
    let (provider, chain_id) = connect(&cfg).await?;
    use alloy::providers::Provider;
    let head = provider
        .get_block_number()
        .await
        .context("eth_blockNumber")?;
    println!(
        "rpc {}: chain {chain_id}, head block {head}",
        endpoints(&cfg)
    );
    if let Some(m) = cfg.chain.market_address {
        let code = provider.get_code_at(m).await.context("eth_getCode")?;
        anyhow::ensure!(
            !code.is_empty(),
            "no contract at market address {m} on chain {chain_id}"
        );
        let market = cresolver_chain::bindings::ICREsolverMarket::new(m, provider.clone());
        let count = market
            .marketCount()
            .call()
            .await
            .context("marketCount() on the market address")?;
        println!("market {m}: {count} markets");
    }
    let signer = cfg.signer();
    match &signer {
        Ok(s) => println!("signer: {}", s.address()),
        Err(e) => println!("signer: none ({e})"),
    }
    if let Some(don) = &cfg.don {
        let me = signer
            .as_ref()
            .map(|s| s.address())
            .map_err(|e| anyhow::anyhow!("[don]: a member needs its own key: {e}"))?;
        don.validate(me)?;
        for w in &cfg.node.workflows {
            let wf = cresolver_pipeline::workflow::Workflow::load(w)?;
            anyhow::ensure!(
                wf.submits_reports(),
                "[don]: workflow {} submits directly; a DON delivers through the KeystoneForwarder: set [submit] mode = \"report\"",
                w.display()
            );
        }
        anyhow::ensure!(
            cfg.submit.forwarder.is_some() && cfg.submit.receiver.is_some(),
            "[don]: set submit.forwarder (the KeystoneForwarder) and submit.receiver"
        );
        println!(
            "don {} version {}: member {me} of {} (f = {})",
            don.don_id,
            don.config_version,
            don.members.len(),
            don.f
        );
    }
    println!("config ok");
    Ok(ExitCode::SUCCESS)
}
