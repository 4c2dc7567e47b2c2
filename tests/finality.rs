//! Finality against a real node binary and anvil: a resolution removed by a reorg one
//! block deeper than `confirmations` is re-sent (also across a restart), a market
//! re-requested after its resolution was reorged away is resolved once, a request for a
//! resolved market is ignored with its reason (`POST /resolve`, `rounds retry`), and a
//! reorg below the `finalized` block changes nothing.

use crate::common;

use alloy::primitives::{Address, B256, U256};
use alloy::providers::Provider;
use alloy::providers::ext::AnvilApi;
use alloy::rpc::types::anvil::ReorgOptions;
use common::chain::*;
use common::node::*;
use common::*;
use cresolver_store::RoundKey;
use cresolver_store::{
    NonceRecord, NonceState, RoundRecord, RoundTxs, Rounds, SqliteStore, Stage, block_on,
};
use std::path::Path;
use std::time::{Duration, Instant};

/// The round as the node's store has it now (opened afresh: the node owns the file).
fn round(dir: &Path, market: Address, id: U256) -> Option<RoundRecord> {
    block_on(
        SqliteStore::open(&dir.join("data"))
            .ok()?
            .get(RoundKey::new(market, id)),
    )
    .ok()?
}

/// The round's mined nonce record.
fn mined(dir: &Path, market: Address, id: U256) -> NonceRecord {
    let s = SqliteStore::open(&dir.join("data")).unwrap();
    block_on(s.tx_history(RoundKey::new(market, id)))
        .unwrap()
        .into_iter()
        .map(|(n, _)| n)
        .find(|n| n.state == NonceState::Mined)
        .expect("a mined nonce")
}

async fn wait_round(
    dir: &Path,
    market: Address,
    id: U256,
    what: &str,
    ok: impl Fn(&RoundRecord) -> bool,
) -> RoundRecord {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(r) = round(dir, market, id)
            && ok(&r)
        {
            return r;
        }
        assert!(
            Instant::now() < deadline,
            "the round never got {what}: {:?}\n{}",
            round(dir, market, id).map(|r| (r.state, r.reason)),
            std::fs::read_to_string(dir.join("node.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn reorgs(r: &RoundRecord) -> usize {
    r.outcome
        .as_ref()
        .and_then(|o| o.pointer("/finality/reorgs"))
        .and_then(|v| v.as_array())
        .map_or(0, |a| a.len())
}

fn finality_status(r: &RoundRecord) -> Option<String> {
    r.outcome
        .as_ref()
        .and_then(|o| o.pointer("/finality/status"))
        .and_then(|v| v.as_str())
        .map(str::to_string)
}

async fn resolved(s: &MarketSetup) -> bool {
    s.dev
        .market()
        .getMarket(s.market_id)
        .call()
        .await
        .unwrap()
        .resolved
}

async fn reorg(s: &MarketSetup, depth: u64) {
    s.dev
        .provider
        .anvil_reorg(ReorgOptions {
            depth,
            tx_block_pairs: vec![],
        })
        .await
        .unwrap();
}

async fn canonical(s: &MarketSetup, n: u64) -> B256 {
    s.dev
        .provider
        .get_block_by_number(n.into())
        .await
        .unwrap()
        .unwrap()
        .header
        .hash
}

struct NodeProc {
    child: tokio::process::Child,
    port: u16,
}

impl NodeProc {
    /// Starts the node binary and waits until its API answers; a port taken between
    /// choosing it and binding it (another test) is retried with another.
    fn start(s: &MarketSetup, dir: &Path, wf: &Path) -> Self {
        for _ in 0..5 {
            let port = free_port();
            let listen = format!("127.0.0.1:{port}");
            let mut child = node_process_with(
                s,
                dir,
                wf,
                None,
                &[
                    ("CRESOLVER__API__LISTEN", &listen),
                    ("CRESOLVER_API_TOKEN", "finality-token"),
                    ("CRESOLVER_LOG", "info"),
                ],
            );
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                if std::net::TcpStream::connect(&listen).is_ok() {
                    return Self { child, port };
                }
                if let Ok(Some(status)) = child.try_wait() {
                    let log = std::fs::read_to_string(dir.join("node.log")).unwrap_or_default();
                    assert!(
                        log.contains("cannot listen"),
                        "the node exited ({status}):\n{log}"
                    );
                    break;
                }
                assert!(Instant::now() < deadline, "the node's API never answered");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        panic!("no free port for the node's API after 5 tries")
    }

    async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }

    async fn get(&self, path: &str) -> String {
        let url = format!("http://127.0.0.1:{}{path}", self.port);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(r) = reqwest::get(&url).await
                && r.status().is_success()
            {
                return r.text().await.unwrap();
            }
            assert!(Instant::now() < deadline, "no answer from {url}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// A node resolves the market; returns the node, and the mined nonce record.
async fn resolved_by_a_node(s: &MarketSetup, dir: &Path, wf: &Path) -> (NodeProc, NonceRecord) {
    let node = NodeProc::start(s, dir, wf);
    s.dev.request_resolution(s.market_id).await.unwrap();
    let market = s.dev.contracts.market;
    wait_round(dir, market, s.market_id, "confirmed", |r| {
        r.state == Stage::Confirmed
    })
    .await;
    let n = mined(dir, market, s.market_id);
    let block = n.mined_block.unwrap();
    assert_eq!(
        n.mined_hash,
        Some(canonical(s, block).await),
        "the mined block's hash is kept"
    );
    (node, n)
}

/// A node resolves the market and stops; a reorg of depth 1 (confirmations + 1) removes
/// the resolution. Returns the mined nonce record and the key's transaction count then.
async fn reorged_while_down(s: &MarketSetup, dir: &Path, wf: &Path) -> (NonceRecord, u64) {
    let (node, first) = resolved_by_a_node(s, dir, wf).await;
    node.stop().await;
    let sent = nonce(s, s.dev.accounts[0]).await;
    reorg(s, 1).await;
    assert!(!resolved(s).await, "the market is open again on chain");
    (first, sent)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resolution_reorged_one_deeper_than_confirmations_is_resent_then_finalized() {
    let s = market_with_three_workers().await;
    let dir = tmpdir("final-reorg");
    let wf = workflow_file(&dir, |t| t);
    let market = s.dev.contracts.market;
    let key = s.dev.accounts[0];
    let before = nonce(&s, key).await;
    let (node, first) = resolved_by_a_node(&s, &dir, &wf).await;
    let tx = first.mined_tx.unwrap();
    assert_eq!(nonce(&s, key).await, before + 1);

    // confirmations is 0 on anvil: a reorg of depth 1 removes the resolution
    reorg(&s, 1).await;
    assert!(
        s.dev
            .provider
            .get_transaction_receipt(tx)
            .await
            .unwrap()
            .is_none()
    );
    assert!(!resolved(&s).await, "the market is open again on chain");

    let r = wait_round(
        &dir,
        market,
        s.market_id,
        "re-confirmed after the reorg",
        |r| r.state == Stage::Confirmed && reorgs(r) == 1,
    )
    .await;
    assert_eq!(r.attempt, 1, "the same attempt, re-sent");
    let again = mined(&dir, market, s.market_id);
    assert_eq!(again.nonce, first.nonce, "the same nonce");
    assert_eq!(
        again.mined_tx,
        Some(tx),
        "the same signed bytes were re-broadcast"
    );
    assert_ne!(
        again.mined_hash, first.mined_hash,
        "in the new canonical block"
    );
    assert!(resolved(&s).await);
    assert_eq!(
        resolved_events(&s).await.len(),
        1,
        "one MarketResolved on the canonical chain"
    );
    assert_eq!(nonce(&s, key).await, before + 1, "no second transaction");
    let metrics = node.get("/metrics").await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("cresolver_finality_events_total{event=\"reorged\"} 1")),
        "{metrics}"
    );

    // the finalized block passes it: final
    s.dev.provider.anvil_mine(Some(70), None).await.unwrap();
    let r = wait_round(&dir, market, s.market_id, "finalized", |r| {
        r.state == Stage::Finalized
    })
    .await;
    assert_eq!(finality_status(&r).as_deref(), Some("final"));
    let o = r.outcome.unwrap();
    assert_eq!(o.pointer("/finality/source").unwrap(), "tag");
    assert_eq!(
        o.pointer("/finality/tx_hash").unwrap().as_str().unwrap(),
        tx.to_string()
    );
    let api = node.get(&format!("/rounds/{}", s.market_id)).await;
    assert!(api.contains("\"state\":\"finalized\""), "{api}");
    let show = std::process::Command::new(env!("CARGO_BIN_EXE_cresolver"))
        .args(["rounds", "show", &s.market_id.to_string()])
        .args(["--market-address", &market.to_string()])
        .arg("--data-dir")
        .arg(dir.join("data"))
        .output()
        .unwrap();
    let show = String::from_utf8_lossy(&show.stdout);
    assert!(
        show.contains(": finalized (attempt 1")
            && show.contains("finality: final (finalized block")
            && show.contains("1 reorg(s) seen and re-sent"),
        "{show}"
    );
    let metrics = node.get("/metrics").await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("cresolver_finality_events_total{event=\"finalized\"} 1")),
        "{metrics}"
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_between_confirmed_and_final_resumes_the_watch() {
    let s = market_with_three_workers().await;
    let dir = tmpdir("final-restart");
    let wf = workflow_file(&dir, |t| t);
    let market = s.dev.contracts.market;
    let key = s.dev.accounts[0];
    let (first, after_first) = reorged_while_down(&s, &dir, &wf).await;
    let node = NodeProc::start(&s, &dir, &wf);
    wait_round(&dir, market, s.market_id, "re-confirmed", |r| {
        r.state == Stage::Confirmed && reorgs(r) == 1
    })
    .await;
    assert_eq!(mined(&dir, market, s.market_id).mined_tx, first.mined_tx);
    assert_eq!(resolved_events(&s).await.len(), 1);
    assert_eq!(nonce(&s, key).await, after_first);

    s.dev.provider.anvil_mine(Some(70), None).await.unwrap();
    wait_round(&dir, market, s.market_id, "finalized", |r| {
        r.state == Stage::Finalized
    })
    .await;
    node.stop().await;

    // restarted after final: nothing is re-sent, the round stays final
    let node = NodeProc::start(&s, &dir, &wf);
    node.get("/health").await;
    s.dev.provider.anvil_mine(Some(3), None).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let r = round(&dir, market, s.market_id).unwrap();
    assert_eq!(r.state, Stage::Finalized);
    assert_eq!(nonce(&s, key).await, after_first, "nothing was sent");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_market_re_requested_after_its_resolution_was_reorged_away_is_resolved_once() {
    let s = market_with_three_workers().await;
    let dir = tmpdir("final-rerequest");
    let wf = workflow_file(&dir, |t| t);
    let market = s.dev.contracts.market;
    let key = s.dev.accounts[0];
    let (first, after_first) = reorged_while_down(&s, &dir, &wf).await;
    // the market's owner asks again: a new request, in a new block
    let again = s.dev.request_resolution(s.market_id).await.unwrap();
    assert!(again.status());
    let node = NodeProc::start(&s, &dir, &wf);
    let deadline = Instant::now() + Duration::from_secs(60);
    let r = loop {
        let r = round(&dir, market, s.market_id).unwrap();
        if r.state == Stage::Confirmed && resolved(&s).await {
            break r;
        }
        assert!(Instant::now() < deadline, "not resolved again: {r:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(r.attempt, 1, "the resolution was re-sent, not made anew");
    assert!(resolved(&s).await);
    assert_eq!(resolved_events(&s).await.len(), 1, "resolved once");
    assert_eq!(
        nonce(&s, key).await,
        after_first,
        "the same nonce, the same signed bytes"
    );
    assert_eq!(mined(&dir, market, s.market_id).mined_tx, first.mined_tx);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_for_a_resolved_market_is_ignored_with_the_reason() {
    let s = market_with_three_workers().await;
    let dir = tmpdir("final-ignored");
    let wf = workflow_file(&dir, |t| t);
    let market = s.dev.contracts.market;
    let key = s.dev.accounts[0];
    let (node, _) = resolved_by_a_node(&s, &dir, &wf).await;
    let sent = nonce(&s, key).await;

    let resp = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{}/resolve", node.port))
        .bearer_auth("finality-token")
        .json(&serde_json::json!({ "market_id": s.market_id.to_string() }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 202);
    let log = dir.join("node.log");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("manual resolution request ignored: the market is resolved on chain") {
            break;
        }
        assert!(Instant::now() < deadline, "no reason logged:\n{text}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let r = round(&dir, market, s.market_id).unwrap();
    assert_eq!((r.state, r.attempt), (Stage::Confirmed, 1));
    node.stop().await;

    // the CLI with no node running: refused with the chain's reason
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cresolver"))
        .args(["rounds", "retry", &s.market_id.to_string()])
        .args(["--rpc-url", &s.dev.rpc_url()])
        .args(["--market-address", &market.to_string()])
        .arg("--data-dir")
        .arg(dir.join("data"))
        .env_remove("CRESOLVER_API_TOKEN")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("the market is resolved on chain") && err.contains("nothing to retry"),
        "{err}"
    );
    assert_eq!(nonce(&s, key).await, sent, "nothing was sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reorg_below_the_finalized_block_changes_nothing() {
    let s = market_with_three_workers().await;
    let dir = tmpdir("final-deep");
    let wf = workflow_file(&dir, |t| t);
    let market = s.dev.contracts.market;
    let key = s.dev.accounts[0];
    let (node, first) = resolved_by_a_node(&s, &dir, &wf).await;
    s.dev.provider.anvil_mine(Some(70), None).await.unwrap();
    wait_round(&dir, market, s.market_id, "finalized", |r| {
        r.state == Stage::Finalized
    })
    .await;
    let sent = nonce(&s, key).await;

    // a reorg deeper than finality (anvil allows it): the resolution is gone
    let head = s.dev.provider.get_block_number().await.unwrap();
    reorg(&s, head - first.mined_block.unwrap() + 1).await;
    assert!(!resolved(&s).await);
    s.dev.provider.anvil_mine(Some(3), None).await.unwrap();
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let r = round(&dir, market, s.market_id).unwrap();
    assert_eq!(r.state, Stage::Finalized, "a final round is not reopened");
    assert!(
        nonce(&s, key).await < sent,
        "the chain forgot it; the node sent nothing"
    );
    let log = std::fs::read_to_string(dir.join("node.log")).unwrap();
    assert!(
        !log.contains("left the canonical chain before it was final"),
        "{log}"
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reorged_resolution_whose_nonce_was_taken_is_signed_anew_while_the_market_is_open() {
    use alloy::network::TransactionBuilder;
    use alloy::rpc::types::TransactionRequest;
    let s = market_with_three_workers().await;
    let dir = tmpdir("final-nonce-taken");
    let wf = workflow_file(&dir, |t| t);
    let market = s.dev.contracts.market;
    let key = s.dev.accounts[0];
    let (first, sent) = reorged_while_down(&s, &dir, &wf).await;
    let n = first.nonce;
    assert_eq!(nonce(&s, key).await, n, "the reorg freed the nonce");
    // the key's nonce is used by another transaction while the node is down
    let transfer = TransactionRequest::default()
        .with_from(key)
        .with_to(s.dev.accounts[5])
        .with_value(U256::from(1))
        .with_nonce(n);
    s.dev
        .provider
        .send_transaction(transfer)
        .await
        .unwrap()
        .get_receipt()
        .await
        .unwrap();
    let node = NodeProc::start(&s, &dir, &wf);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = round(&dir, market, s.market_id).unwrap();
        if r.state == Stage::Confirmed && resolved(&s).await {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not resolved anew: {:?}",
            (r.state, r.reason)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let h = SqliteStore::open(&dir.join("data"))
        .unwrap()
        .tx_history(RoundKey::new(market, s.market_id))
        .await
        .unwrap();
    let states: Vec<(u64, NonceState)> = h.iter().map(|(r, _)| (r.nonce, r.state)).collect();
    assert_eq!(
        states,
        vec![(n, NonceState::Lost), (n + 1, NonceState::Mined)],
        "the taken nonce lost, a new one signed"
    );
    assert_eq!(resolved_events(&s).await.len(), 1, "resolved once");
    assert_eq!(nonce(&s, key).await, sent + 1);
    node.stop().await;
}
