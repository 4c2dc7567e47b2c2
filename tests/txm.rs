//! The transaction manager against a real node and anvil: many markets at once, an
//! underpriced attempt, a dropped one, a nonce used behind the node's back, reorgs,
//! kills at every step of a submission, and the report-mode pre-flight through a
//! forwarder that reverts.

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
    AttemptRecord, NonceRecord, NonceState, RoundStore, RoundTxs, Rounds, SqliteStore, Stage,
    block_on,
};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

const GWEI: u128 = 1_000_000_000;

async fn three_workers() -> MarketSetup {
    market_with_three_workers().await
}

type History = Vec<(NonceRecord, Vec<AttemptRecord>)>;

/// Waits until the round's newest attempt was broadcast (sent at some block).
async fn wait_sent(store: &dyn RoundStore, market: Address, id: U256) -> History {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let h = store.tx_history(RoundKey::new(market, id)).await.unwrap();
        if h.last()
            .and_then(|(_, a)| a.last())
            .is_some_and(|a| a.sent_block.is_some())
        {
            return h;
        }
        assert!(Instant::now() < deadline, "no attempt was broadcast");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Mines a block every `every` until dropped.
struct Miner(tokio::task::JoinHandle<()>);

impl Miner {
    fn start(s: &MarketSetup, every: Duration) -> Self {
        let p = s.dev.provider.clone();
        Self(tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let _ = p.evm_mine(None).await;
            }
        }))
    }
}

impl Drop for Miner {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn mined_attempt(h: &History) -> &AttemptRecord {
    let (n, attempts) = h
        .iter()
        .find(|(n, _)| n.state == NonceState::Mined)
        .expect("a mined nonce");
    attempts
        .iter()
        .find(|a| Some(a.tx_hash) == n.mined_tx)
        .expect("the mined attempt is one of ours")
}

async fn assert_status_ok(s: &MarketSetup, tx: B256) {
    let r = s
        .dev
        .provider
        .get_transaction_receipt(tx)
        .await
        .unwrap()
        .expect("receipt");
    assert!(r.status(), "transaction {tx} reverted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_markets_requested_in_one_block_resolve_exactly_once_with_contiguous_nonces() {
    let s = three_workers().await;
    let mut ids = vec![s.market_id];
    ids.extend(more_markets(&s, 19).await);
    let dir = tmpdir("burst20");
    let cfg = node_config(&s, &dir, workflow_file(&dir, |t| t));
    let resolver = s.dev.accounts[0];
    let before = nonce(&s, resolver).await;
    let r = start(cfg, s.dev.signers[0].clone()).await;
    request_in_one_block(&s, &ids, true).await;
    let mut nonces = BTreeSet::new();
    for id in &ids {
        let report = wait_final(&r.node, s.dev.contracts.market, *id).await;
        assert_eq!(report.state, Stage::Confirmed, "market {id}: {report:?}");
        let h = r
            .node
            .store
            .tx_history(RoundKey::new(s.dev.contracts.market, *id))
            .await
            .unwrap();
        assert_eq!(h.len(), 1, "one nonce for market {id}");
        assert_eq!(h[0].0.state, NonceState::Mined);
        assert!(nonces.insert(h[0].0.nonce), "nonce handed out twice");
        assert_status_ok(&s, mined_attempt(&h).tx_hash).await;
    }
    r.stop().await;
    let events = resolved_events(&s).await;
    let resolved: BTreeSet<U256> = events.iter().map(|e| e.marketId).collect();
    assert_eq!(events.len(), 20, "one MarketResolved per market");
    assert_eq!(resolved, ids.iter().copied().collect());
    assert_eq!(nonce(&s, resolver).await, before + 20, "20 transactions");
    assert_eq!(
        nonces.into_iter().collect::<Vec<_>>(),
        (before..before + 20).collect::<Vec<_>>(),
        "contiguous nonces"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_markets_requested_while_the_node_is_down_resolve_once_each() {
    let s = three_workers().await;
    let mut ids = vec![s.market_id];
    ids.extend(more_markets(&s, 4).await);
    let dir = tmpdir("down5");
    let cfg = node_config(&s, &dir, workflow_file(&dir, |t| t));
    let resolver = s.dev.accounts[0];
    let r = start(cfg.clone(), s.dev.signers[0].clone()).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    r.stop().await;
    for id in &ids {
        s.dev.request_resolution(*id).await.unwrap();
    }
    let before = nonce(&s, resolver).await;
    let r = start(cfg, s.dev.signers[0].clone()).await;
    for id in &ids {
        let report = wait_final(&r.node, s.dev.contracts.market, *id).await;
        assert_eq!(report.state, Stage::Confirmed, "{report:?}");
    }
    r.stop().await;
    assert_eq!(resolved_events(&s).await.len(), 5);
    assert_eq!(nonce(&s, resolver).await, before + 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_underpriced_attempt_is_replaced_at_the_same_nonce_with_higher_fees() {
    let s = three_workers().await;
    let dir = tmpdir("underpriced");
    let cfg = node_config(&s, &dir, workflow_file(&dir, |t| t));
    let market = s.dev.contracts.market;
    let r = start(cfg, s.dev.signers[0].clone()).await;
    request_in_one_block(&s, &[s.market_id], false).await;
    let h = wait_sent(r.node.store.as_ref(), market, s.market_id).await;
    let first = h[0].1[0].clone();
    assert!(first.max_fee_per_gas < 100 * GWEI);
    // the base fee jumps far above the signed max fee: the attempt cannot be mined
    s.dev
        .provider
        .anvil_set_next_block_base_fee_per_gas(100 * GWEI)
        .await
        .unwrap();
    s.dev.provider.evm_mine(None).await.unwrap();
    let _miner = Miner::start(&s, Duration::from_millis(250));
    let report = wait_final(&r.node, market, s.market_id).await;
    assert_eq!(report.state, Stage::Confirmed, "{report:?}");
    let h = r
        .node
        .store
        .tx_history(RoundKey::new(market, s.market_id))
        .await
        .unwrap();
    assert_eq!(h.len(), 1, "one nonce");
    let attempts = &h[0].1;
    assert!(attempts.len() >= 2, "replaced: {attempts:?}");
    assert!(attempts.iter().all(|a| a.nonce == first.nonce));
    let mined = mined_attempt(&h);
    assert!(mined.seq >= 1, "the replacement was mined");
    assert!(mined.max_fee_per_gas >= 100 * GWEI);
    assert!(mined.max_priority_fee_per_gas * 100 >= first.max_priority_fee_per_gas * 120);
    assert_status_ok(&s, mined.tx_hash).await;
    // every attempt is in the transcript
    let t = report.transcript.unwrap();
    let listed = t["transactions"][0]["attempts"].as_array().unwrap().len();
    assert_eq!(listed, attempts.len());
    r.stop().await;
    assert_eq!(resolved_events(&s).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_attempt_is_rebroadcast() {
    let s = three_workers().await;
    let dir = tmpdir("dropped");
    let mut cfg = node_config(&s, &dir, workflow_file(&dir, |t| t));
    cfg.submit.bump_after_blocks = 1_000;
    let market = s.dev.contracts.market;
    let r = start(cfg, s.dev.signers[0].clone()).await;
    request_in_one_block(&s, &[s.market_id], false).await;
    let h = wait_sent(r.node.store.as_ref(), market, s.market_id).await;
    let tx = h[0].1[0].tx_hash;
    let p = &s.dev.provider;
    assert_eq!(p.anvil_drop_transaction(tx).await.unwrap(), Some(tx));
    assert!(p.get_transaction_by_hash(tx).await.unwrap().is_none());
    // the node notices and sends the same bytes again
    let deadline = Instant::now() + Duration::from_secs(30);
    while p.get_transaction_by_hash(tx).await.unwrap().is_none() {
        assert!(Instant::now() < deadline, "never re-broadcast");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    p.anvil_set_auto_mine(true).await.unwrap();
    p.evm_mine(None).await.unwrap();
    let report = wait_final(&r.node, market, s.market_id).await;
    assert_eq!(report.state, Stage::Confirmed, "{report:?}");
    let h = r
        .node
        .store
        .tx_history(RoundKey::new(market, s.market_id))
        .await
        .unwrap();
    assert_eq!(mined_attempt(&h).tx_hash, tx, "the same transaction");
    assert_eq!(h[0].1.len(), 1, "not re-signed");
    r.stop().await;
    assert_eq!(resolved_events(&s).await.len(), 1);
}

/// Runs the node binary until it exits at `point`; returns the resolver's mined count
/// before the round.
async fn crash_at(
    s: &MarketSetup,
    dir: &std::path::Path,
    wf: &std::path::Path,
    point: &str,
) -> u64 {
    let before = nonce(s, s.dev.accounts[0]).await;
    let mut child = node_process(s, dir, wf, Some(point));
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .expect("node exits at the crash point")
        .unwrap();
    assert_eq!(status.code(), Some(97), "exited at {point}");
    before
}

async fn wait_final_in(dir: &std::path::Path, market: Address, id: U256) -> Stage {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(store) = SqliteStore::open(&dir.join("data"))
            && let Ok(Some(r)) = store.get(RoundKey::new(market, id)).await
            && r.state.is_final()
        {
            return r.state;
        }
        assert!(Instant::now() < deadline, "round never finished");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn killed_at_then_restarted(point: &str) {
    let s = three_workers().await;
    let dir = tmpdir(&format!("kill-{point}"));
    let wf = workflow_file(&dir, |t| t);
    let market = s.dev.contracts.market;
    s.dev.request_resolution(s.market_id).await.unwrap();
    let before = crash_at(&s, &dir, &wf, point).await;
    let stored = SqliteStore::open(&dir.join("data")).unwrap();
    assert_eq!(
        stored
            .get(RoundKey::new(market, s.market_id))
            .await
            .unwrap()
            .unwrap()
            .state,
        Stage::Submitted
    );
    let h = stored
        .tx_history(RoundKey::new(market, s.market_id))
        .await
        .unwrap();
    assert_eq!(h.len(), 1, "one reserved nonce");
    let expected_attempts = if point == "reserved" { 0 } else { 1 };
    assert_eq!(h[0].1.len(), expected_attempts);
    drop(stored);
    let mined_before_restart = resolved_events(&s).await.len();
    assert_eq!(
        mined_before_restart,
        usize::from(point == "broadcast" || point == "mined")
    );
    if point == "mined" {
        // the nonce is stored mined, the round not concluded
        let h = SqliteStore::open(&dir.join("data"))
            .unwrap()
            .tx_history(RoundKey::new(market, s.market_id))
            .await
            .unwrap();
        assert_eq!(h[0].0.state, NonceState::Mined);
    }

    let mut child = node_process(&s, &dir, &wf, None);
    let st = wait_final_in(&dir, market, s.market_id).await;
    child.kill().await.unwrap();
    assert_eq!(st, Stage::Confirmed);
    assert_eq!(resolved_events(&s).await.len(), 1, "resolved exactly once");
    assert_eq!(
        nonce(&s, s.dev.accounts[0]).await,
        before + 1,
        "one transaction"
    );
    let h = SqliteStore::open(&dir.join("data"))
        .unwrap()
        .tx_history(RoundKey::new(market, s.market_id))
        .await
        .unwrap();
    assert_eq!(h.len(), 1, "the reserved nonce, no second one");
    if point != "reserved" {
        assert_eq!(
            mined_attempt(&h).seq,
            0,
            "the stored attempt, not a new one"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_reserving_a_nonce_then_restarted_resolves_once() {
    killed_at_then_restarted("reserved").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_persisting_the_attempt_then_restarted_resolves_once() {
    killed_at_then_restarted("signed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_broadcast_then_restarted_resolves_once() {
    killed_at_then_restarted("broadcast").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_storing_the_nonce_mined_then_restarted_concludes_the_round() {
    // the round's transaction is mined and stored so, the round not yet concluded: the
    // restarted node concludes it from the receipt (`confirmed`, followed by the finality
    // watch), not as "resolved on chain by someone else"
    killed_at_then_restarted("mined").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_persisting_a_replacement_then_restarted_resolves_once() {
    let s = three_workers().await;
    let dir = tmpdir("kill-replaced");
    let wf = workflow_file(&dir, |t| t);
    let market = s.dev.contracts.market;
    let before = nonce(&s, s.dev.accounts[0]).await;
    request_in_one_block(&s, &[s.market_id], false).await;
    let mut child = node_process(&s, &dir, &wf, Some("replaced"));
    let store = SqliteStore::open(&dir.join("data")).unwrap();
    wait_sent(&store, market, s.market_id).await;
    let p = &s.dev.provider;
    p.anvil_set_next_block_base_fee_per_gas(100 * GWEI)
        .await
        .unwrap();
    p.evm_mine(None).await.unwrap();
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .expect("node exits after storing the replacement")
        .unwrap();
    assert_eq!(status.code(), Some(97));
    let h = store
        .tx_history(RoundKey::new(market, s.market_id))
        .await
        .unwrap();
    assert_eq!(h[0].1.len(), 2, "original and stored replacement");
    assert_eq!(h[0].1[1].sent_block, None, "the replacement was not sent");

    let _miner = Miner::start(&s, Duration::from_millis(250));
    let mut child = node_process(&s, &dir, &wf, None);
    let st = wait_final_in(&dir, market, s.market_id).await;
    child.kill().await.unwrap();
    assert_eq!(st, Stage::Confirmed);
    assert_eq!(resolved_events(&s).await.len(), 1);
    assert_eq!(nonce(&s, s.dev.accounts[0]).await, before + 1);
    let h = store
        .tx_history(RoundKey::new(market, s.market_id))
        .await
        .unwrap();
    assert_eq!(h.len(), 1);
    assert!(mined_attempt(&h).seq >= 1, "a replacement was mined");
}

/// `from` (an unlocked dev account) sends 1 wei elsewhere, mined: it takes its next nonce.
async fn transfer_elsewhere(s: &MarketSetup, from: Address) {
    let transfer = alloy::rpc::types::TransactionRequest::default()
        .from(from)
        .to(s.dev.accounts[5])
        .value(U256::from(1u64));
    let receipt = s
        .dev
        .provider
        .send_transaction(transfer)
        .await
        .unwrap()
        .get_receipt()
        .await
        .unwrap();
    assert!(receipt.status());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nonce_used_behind_the_nodes_back_is_recovered_with_a_fresh_nonce() {
    let s = three_workers().await;
    let dir = tmpdir("nonce-elsewhere");
    let wf = workflow_file(&dir, |t| t);
    let market = s.dev.contracts.market;
    let resolver = s.dev.accounts[0];
    s.dev.request_resolution(s.market_id).await.unwrap();
    // signed and stored, not yet broadcast
    let before = crash_at(&s, &dir, &wf, "signed").await;
    let reserved = SqliteStore::open(&dir.join("data"))
        .unwrap()
        .tx_history(RoundKey::new(market, s.market_id))
        .await
        .unwrap()[0]
        .0
        .nonce;
    assert_eq!(reserved, before);
    // the same key sends a transfer elsewhere: it takes that nonce
    transfer_elsewhere(&s, resolver).await;
    assert_eq!(nonce(&s, resolver).await, before + 1);

    let mut child = node_process(&s, &dir, &wf, None);
    let st = wait_final_in(&dir, market, s.market_id).await;
    child.kill().await.unwrap();
    assert_eq!(st, Stage::Confirmed);
    assert_eq!(resolved_events(&s).await.len(), 1);
    assert_eq!(nonce(&s, resolver).await, before + 2);
    let h = SqliteStore::open(&dir.join("data"))
        .unwrap()
        .tx_history(RoundKey::new(market, s.market_id))
        .await
        .unwrap();
    assert_eq!(h.len(), 2, "{h:?}");
    assert_eq!(h[0].0.state, NonceState::Lost);
    assert_eq!(h[0].0.nonce, before);
    assert_eq!(h[1].0.state, NonceState::Mined);
    assert_eq!(h[1].0.nonce, before + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nonce_used_elsewhere_is_lost_only_once_that_is_as_deep_as_a_receipt_must_be() {
    let s = three_workers().await;
    let dir = tmpdir("nonce-elsewhere-deep");
    let wf = workflow_file(&dir, |t| t);
    let market = s.dev.contracts.market;
    let resolver = s.dev.accounts[0];
    s.dev.request_resolution(s.market_id).await.unwrap();
    let before = crash_at(&s, &dir, &wf, "signed").await;
    // the same key sends a transfer elsewhere: it takes the reserved nonce, in the newest
    // block
    transfer_elsewhere(&s, resolver).await;
    let mut child = node_process_with(
        &s,
        &dir,
        &wf,
        None,
        &[("CRESOLVER__CHAIN__CONFIRMATIONS", "2")],
    );
    // no block on top of the transfer for longer than the lost grace (2 s): it could
    // still be reorged out and the node's own attempt in, so the nonce stays pending
    tokio::time::sleep(Duration::from_secs(5)).await;
    let h = SqliteStore::open(&dir.join("data"))
        .unwrap()
        .tx_history(RoundKey::new(market, s.market_id))
        .await
        .unwrap();
    let states: Vec<_> = h.iter().map(|(n, _)| (n.nonce, n.state)).collect();
    assert_eq!(h.len(), 1, "no fresh nonce yet: {states:?}");
    assert_eq!(h[0].0.state, NonceState::Pending);
    // blocks on top: the transfer is two deep, the nonce lost, a fresh one resolves
    let _miner = Miner::start(&s, Duration::from_millis(250));
    let st = wait_final_in(&dir, market, s.market_id).await;
    child.kill().await.unwrap();
    assert_eq!(st, Stage::Confirmed);
    assert_eq!(resolved_events(&s).await.len(), 1);
    assert_eq!(nonce(&s, resolver).await, before + 2);
    let h = SqliteStore::open(&dir.join("data"))
        .unwrap()
        .tx_history(RoundKey::new(market, s.market_id))
        .await
        .unwrap();
    assert_eq!(h[0].0.state, NonceState::Lost);
    assert_eq!(h[1].0.state, NonceState::Mined);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resolution_reorged_away_before_it_is_deep_enough_is_resubmitted() {
    let s = three_workers().await;
    let dir = tmpdir("reorg");
    let mut cfg = node_config(&s, &dir, workflow_file(&dir, |t| t));
    cfg.chain.confirmations = Some(2);
    let market = s.dev.contracts.market;
    let p = &s.dev.provider;
    let r = start(cfg, s.dev.signers[0].clone()).await;
    s.dev.request_resolution(s.market_id).await.unwrap();
    p.anvil_mine(Some(2), None).await.unwrap(); // two blocks on top of the request
    let h = wait_sent(r.node.store.as_ref(), market, s.market_id).await;
    let tx = h[0].1[0].tx_hash;
    // automine puts it in a block at once; wait for its receipt
    let deadline = Instant::now() + Duration::from_secs(30);
    let mined_in = loop {
        if let Some(rc) = p.get_transaction_receipt(tx).await.unwrap() {
            break rc.block_number.unwrap();
        }
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(
        p.get_block_number().await.unwrap(),
        mined_in,
        "nothing on top yet"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        r.node
            .report(RoundKey::new(market, s.market_id))
            .await
            .unwrap()
            .state,
        Stage::Submitted,
        "not confirmed without 2 blocks on top"
    );
    p.anvil_reorg(ReorgOptions {
        depth: 1,
        tx_block_pairs: vec![],
    })
    .await
    .unwrap();
    assert!(
        p.get_transaction_receipt(tx).await.unwrap().is_none(),
        "reorged away"
    );
    let _miner = Miner::start(&s, Duration::from_millis(300));
    let report = wait_final(&r.node, market, s.market_id).await;
    assert_eq!(report.state, Stage::Confirmed, "{report:?}");
    let events = resolved_events(&s).await;
    assert_eq!(events.len(), 1, "one MarketResolved on the canonical chain");
    let h = r
        .node
        .store
        .tx_history(RoundKey::new(market, s.market_id))
        .await
        .unwrap();
    let mined = mined_attempt(&h);
    let rc = p
        .get_transaction_receipt(mined.tx_hash)
        .await
        .unwrap()
        .unwrap();
    assert!(rc.status());
    assert!(p.get_block_number().await.unwrap() >= rc.block_number.unwrap() + 2);
    assert!(
        r.node
            .metrics
            .encode()
            .lines()
            .any(|l| l.starts_with("cresolver_tx_events_total") && l.contains("reorged")),
        "the reorg is counted"
    );
    r.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_reorged_away_before_it_is_deep_enough_starts_nothing() {
    let s = three_workers().await;
    let dir = tmpdir("reorg-request");
    let mut cfg = node_config(&s, &dir, workflow_file(&dir, |t| t));
    cfg.chain.confirmations = Some(2);
    let market = s.dev.contracts.market;
    let p = &s.dev.provider;
    let before = nonce(&s, s.dev.accounts[0]).await;
    let r = start(cfg, s.dev.signers[0].clone()).await;
    s.dev.request_resolution(s.market_id).await.unwrap();
    p.anvil_reorg(ReorgOptions {
        depth: 1,
        tx_block_pairs: vec![],
    })
    .await
    .unwrap();
    p.anvil_mine(Some(3), None).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let report = r
        .node
        .report(RoundKey::new(market, s.market_id))
        .await
        .unwrap();
    assert_eq!(
        report.reason.as_deref(),
        Some("no such round"),
        "{report:?}"
    );
    r.stop().await;
    assert!(resolved_events(&s).await.is_empty());
    assert_eq!(nonce(&s, s.dev.accounts[0]).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_mode_preflight_names_forwarder_reverts_and_sends_nothing() {
    use cresolver_chain::bindings::artifacts::StrictForwarder;
    let s = three_workers().await;
    let dir = tmpdir("report-preflight");
    let wf = workflow_file(&dir, |t| {
        t.replace("mode = \"direct\"", "mode = \"report\"")
    });
    let forwarder = StrictForwarder::deploy(s.dev.provider.clone())
        .await
        .unwrap();
    let mut cfg = node_config(&s, &dir, wf);
    cfg.submit.forwarder = Some(*forwarder.address());
    cfg.submit.receiver = Some(s.dev.contracts.receiver);
    let key = s.dev.accounts[7];
    let market = s.dev.contracts.market;
    let r = start(cfg, s.dev.signers[7].clone()).await;
    s.dev.request_resolution(s.market_id).await.unwrap();
    let report = wait_final(&r.node, market, s.market_id).await;
    assert_eq!(report.state, Stage::Failed);
    let reason = report.reason.unwrap();
    assert!(
        reason.contains("InvalidConfig") && reason.contains("forwarder"),
        "{reason}"
    );
    // configured for f = 1: two signatures wanted, the node has none
    forwarder
        .setConfig(0, 0, 1)
        .from(s.dev.accounts[0])
        .send()
        .await
        .unwrap()
        .get_receipt()
        .await
        .unwrap();
    s.dev.request_resolution(s.market_id).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let reason = loop {
        let rep = r
            .node
            .report(RoundKey::new(market, s.market_id))
            .await
            .unwrap();
        if rep.state == Stage::Failed
            && rep
                .reason
                .as_deref()
                .is_some_and(|x| !x.contains("InvalidConfig"))
        {
            break rep.reason.unwrap();
        }
        assert!(Instant::now() < deadline, "{rep:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(reason.contains("InvalidSignatureCount"), "{reason}");
    r.stop().await;
    assert_eq!(nonce(&s, key).await, 0, "no transaction was sent");
    assert!(
        r_store_has_no_nonce(&dir, market, s.market_id),
        "nothing was reserved"
    );
}

fn r_store_has_no_nonce(dir: &std::path::Path, market: Address, id: U256) -> bool {
    block_on(
        SqliteStore::open(&dir.join("data"))
            .unwrap()
            .tx_history(RoundKey::new(market, id)),
    )
    .unwrap()
    .is_empty()
}
