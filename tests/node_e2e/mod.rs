//! End-to-end: a real node (in-process, or the binary where a process must die)
//! against real HTTP workers and the contracts on anvil.

use crate::common;
mod restarts;

use alloy::primitives::{Address, U256};
use alloy::providers::Provider;
use common::chain::*;
use common::node::*;
use common::*;
use cresolver_devnet::agent::{AgentBehaviour, DeterminationMode, FailureMode};
use cresolver_store::RoundKey;
use cresolver_store::Stage;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn good(det: DeterminationMode, conf: f64) -> AgentUriFuture {
    AgentUriFuture(behaviour(det, conf))
}

/// A reference agent to start, then register.
struct AgentUriFuture(AgentBehaviour);

async fn uris(list: Vec<AgentUriFuture>) -> Vec<AgentUri> {
    let mut out = Vec::new();
    for a in list {
        out.push(AgentUri::Endpoint(agent(a.0).await));
    }
    out
}

#[tokio::test]
async fn happy_path_payouts_and_reputation_match_the_tally() {
    let s = market_with_workers(
        uris(vec![
            good(DeterminationMode::Yes, 0.9),
            good(DeterminationMode::Yes, 0.7),
            good(DeterminationMode::No, 0.6),
        ])
        .await,
    )
    .await;
    let dir = tmpdir("happy");
    let cfg = node_config(&s, &dir, workflow_file(&dir, |t| t));
    let r = start(cfg, s.dev.signers[0].clone()).await;
    s.dev.request_resolution(s.market_id).await.unwrap();
    let report = wait_final(&r.node, s.dev.contracts.market, s.market_id).await;
    assert_eq!(report.state, Stage::Confirmed, "{report:?}");
    assert_eq!(report.resolution, Some(true));

    let t = report.transcript.as_ref().unwrap();
    let weights: Vec<u64> = t
        .pointer("/outcome/tally/workers")
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["weight"].as_u64().unwrap())
        .collect();
    let total: u64 = weights.iter().sum();
    let m = s.dev.market();
    for (i, w) in s.workers.iter().enumerate() {
        let expected = s.reward * U256::from(weights[i]) / U256::from(total) + s.stake;
        assert_eq!(
            m.balances(*w).call().await.unwrap(),
            expected,
            "payout of worker {i}"
        );
        let rep = m.getReputation(*w).call().await.unwrap();
        let scores = &t.pointer("/outcome/tally/workers").unwrap()[i]["scores"];
        assert_eq!(
            rep.resQuality,
            U256::from(scores["resQuality"].as_u64().unwrap())
        );
        assert_eq!(
            rep.analysisDepth,
            U256::from(scores["analysisDepth"].as_u64().unwrap())
        );
        assert_eq!(rep.count, U256::from(1));
    }
    let events = resolved_events(&s).await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].resolver, s.dev.accounts[0]);
    // the report bytes in the transcript decode to what went on chain
    let report_hex = t.pointer("/outcome/report").unwrap().as_str().unwrap();
    let decoded = cresolver_core::decode_report(&alloy::hex::decode(report_hex).unwrap()).unwrap();
    assert_eq!(decoded.workers, s.workers);
    // the transcript's submission is the call that was mined: its sender, target, input
    // and gas limit are the confirmed transaction's
    let tx_hash: alloy::primitives::B256 =
        serde_json::from_value(t["confirmation"]["tx_hash"].clone()).unwrap();
    let mined = s
        .dev
        .provider
        .get_transaction_by_hash(tx_hash)
        .await
        .unwrap()
        .unwrap();
    use alloy::consensus::Transaction as _;
    let sub = &t["submission"];
    assert_eq!(sub["from"], serde_json::json!(mined.inner.signer()));
    assert_eq!(sub["to"], serde_json::json!(s.dev.contracts.market));
    assert_eq!(sub["calldata"], serde_json::json!(mined.inner.input()));
    assert_eq!(sub["gas_limit"].as_u64(), Some(mined.inner.gas_limit()));
    r.stop().await;
}

#[tokio::test]
async fn one_of_three_down_meets_quorum_with_weight_zero() {
    let mut u = uris(vec![
        good(DeterminationMode::Yes, 0.9),
        good(DeterminationMode::No, 0.8),
    ])
    .await;
    u.insert(1, AgentUri::Endpoint(closed_port_url()));
    let s = market_with_workers(u).await;
    let dir = tmpdir("onedown");
    let r = start(
        node_config(&s, &dir, workflow_file(&dir, |t| t)),
        s.dev.signers[0].clone(),
    )
    .await;
    s.dev.request_resolution(s.market_id).await.unwrap();
    let report = wait_final(&r.node, s.dev.contracts.market, s.market_id).await;
    assert_eq!(report.state, Stage::Confirmed, "{report:?}");
    let w = &report
        .transcript
        .as_ref()
        .unwrap()
        .pointer("/outcome/tally/workers")
        .unwrap()[1];
    assert_eq!(
        (w["responded"].as_bool(), w["weight"].as_u64()),
        (Some(false), Some(0))
    );
    let rep = s
        .dev
        .market()
        .getReputation(s.workers[1])
        .call()
        .await
        .unwrap();
    assert_eq!((rep.resQuality, rep.count), (U256::ZERO, U256::from(1)));
    assert_eq!(
        s.dev.market().balances(s.workers[1]).call().await.unwrap(),
        s.stake,
        "stake returned, no reward"
    );
    r.stop().await;
}

#[tokio::test]
async fn two_of_three_down_fails_with_reason_and_sends_nothing() {
    let u = vec![
        AgentUri::Endpoint(agent(behaviour(DeterminationMode::Yes, 0.9)).await),
        AgentUri::Endpoint(closed_port_url()),
        AgentUri::Endpoint(agent(failing(FailureMode::Garbage)).await),
    ];
    let s = market_with_workers(u).await;
    let dir = tmpdir("twodown");
    let before = nonce(&s, s.dev.accounts[0]).await;
    let r = start(
        node_config(&s, &dir, workflow_file(&dir, |t| t)),
        s.dev.signers[0].clone(),
    )
    .await;
    s.dev.request_resolution(s.market_id).await.unwrap();
    let report = wait_final(&r.node, s.dev.contracts.market, s.market_id).await;
    assert_eq!(report.state, Stage::Failed);
    let reason = report.reason.unwrap();
    assert!(reason.contains("quorum not met: 1 of 3"), "{reason}");
    assert!(
        reason.contains("connection failed") && reason.contains("invalid JSON"),
        "{reason}"
    );
    // the resolver key sent nothing
    assert_eq!(nonce(&s, s.dev.accounts[0]).await, before);
    assert!(resolved_events(&s).await.is_empty());
    r.stop().await;
}

#[tokio::test]
async fn broken_registrations_are_discarded_with_reason_and_counted_in_n() {
    let mut u = uris(vec![
        good(DeterminationMode::Yes, 0.9),
        good(DeterminationMode::Yes, 0.8),
        good(DeterminationMode::No, 0.7),
        good(DeterminationMode::Yes, 0.6),
    ])
    .await;
    u.push(AgentUri::Raw(
        "data:application/json;base64,!!!not-base64".into(),
    ));
    u.push(AgentUri::Raw(cresolver_devnet::data_uri(
        &cresolver_devnet::registration_json("no-a2a", 31337, Address::ZERO, None),
    )));
    let s = market_with_workers(u).await;
    let dir = tmpdir("broken");
    let r = start(
        node_config(&s, &dir, workflow_file(&dir, |t| t)),
        s.dev.signers[0].clone(),
    )
    .await;
    s.dev.request_resolution(s.market_id).await.unwrap();
    let report = wait_final(&r.node, s.dev.contracts.market, s.market_id).await;
    assert_eq!(report.state, Stage::Confirmed, "{report:?}");
    let t = report.transcript.unwrap();
    let disc = t["discovery"].as_array().unwrap();
    assert_eq!(disc.len(), 6);
    assert!(
        disc[4]["endpoint"]["Err"]["kind"]
            .as_str()
            .unwrap()
            .contains("metadata")
            || disc[4]["endpoint"]["Err"]["kind"] == "fetch_failed",
        "{}",
        disc[4]
    );
    assert_eq!(disc[5]["endpoint"]["Err"]["kind"], "no_a2a_endpoint");
    let stage = t.pointer("/outcome/resolve").unwrap();
    assert_eq!(
        (stage["registered"].as_u64(), stage["required"].as_u64()),
        (Some(6), Some(4))
    );
    assert_eq!(
        stage["results"][5]["outcome"]["Err"]["kind"],
        "not_discovered"
    );
    r.stop().await;
}

#[tokio::test]
async fn loopback_endpoints_refused_without_allow_private() {
    let s = market_with_workers(
        uris(vec![
            good(DeterminationMode::Yes, 0.9),
            good(DeterminationMode::Yes, 0.8),
        ])
        .await,
    )
    .await;
    let dir = tmpdir("private");
    let mut cfg = node_config(&s, &dir, workflow_file(&dir, |t| t));
    cfg.discovery.allow_private_endpoints = false;
    let r = start(cfg, s.dev.signers[0].clone()).await;
    s.dev.request_resolution(s.market_id).await.unwrap();
    let report = wait_final(&r.node, s.dev.contracts.market, s.market_id).await;
    assert_eq!(report.state, Stage::Failed);
    let reason = report.reason.unwrap();
    assert!(reason.contains("endpoint refused"), "{reason}");
    assert!(resolved_events(&s).await.is_empty());
    r.stop().await;
}

#[tokio::test]
async fn duplicate_requests_and_requests_while_down_resolve_once() {
    let s = market_with_workers(
        uris(vec![
            good(DeterminationMode::No, 0.9),
            good(DeterminationMode::No, 0.8),
            good(DeterminationMode::Yes, 0.5),
        ])
        .await,
    )
    .await;
    let dir = tmpdir("dup");
    let cfg = node_config(&s, &dir, workflow_file(&dir, |t| t));
    // node up, then down: the requests happen while it is down
    let r = start(cfg.clone(), s.dev.signers[0].clone()).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    r.stop().await;
    s.dev.request_resolution(s.market_id).await.unwrap();
    s.dev.request_resolution(s.market_id).await.unwrap();
    let before = nonce(&s, s.dev.accounts[0]).await;
    let r = start(cfg, s.dev.signers[0].clone()).await;
    let report = wait_final(&r.node, s.dev.contracts.market, s.market_id).await;
    assert_eq!(report.state, Stage::Confirmed, "{report:?}");
    assert_eq!(report.resolution, Some(false));
    // a third request after confirmation changes nothing
    let _ = s.dev.request_resolution(s.market_id).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    r.stop().await;
    assert_eq!(resolved_events(&s).await.len(), 1);
    assert_eq!(
        nonce(&s, s.dev.accounts[0]).await,
        before + 1,
        "exactly one resolveMarket transaction"
    );
}

#[tokio::test]
async fn report_mode_through_forwarder_and_receiver() {
    let s = market_with_workers(
        uris(vec![
            good(DeterminationMode::Yes, 0.9),
            good(DeterminationMode::Yes, 0.8),
        ])
        .await,
    )
    .await;
    let dir = tmpdir("report");
    let wf = workflow_file(&dir, |t| {
        t.replace("mode = \"direct\"", "mode = \"report\"")
    });
    let mut cfg = node_config(&s, &dir, wf);
    cfg.submit.forwarder = Some(s.dev.contracts.forwarder);
    cfg.submit.receiver = Some(s.dev.contracts.receiver);
    // a key that is not itself an authorized resolver: the receiver is
    let r = start(cfg, s.dev.signers[7].clone()).await;
    s.dev.request_resolution(s.market_id).await.unwrap();
    let report = wait_final(&r.node, s.dev.contracts.market, s.market_id).await;
    assert_eq!(report.state, Stage::Confirmed, "{report:?}");
    let events = resolved_events(&s).await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].resolver, s.dev.contracts.receiver);
    r.stop().await;
}

#[tokio::test]
async fn unauthorized_key_fails_once_with_decoded_reason() {
    let s = market_with_workers(
        uris(vec![
            good(DeterminationMode::Yes, 0.9),
            good(DeterminationMode::Yes, 0.8),
        ])
        .await,
    )
    .await;
    let dir = tmpdir("unauth");
    let outsider = s.dev.accounts[12];
    let r = start(
        node_config(&s, &dir, workflow_file(&dir, |t| t)),
        s.dev.signers[12].clone(),
    )
    .await;
    s.dev.request_resolution(s.market_id).await.unwrap();
    let report = wait_final(&r.node, s.dev.contracts.market, s.market_id).await;
    assert_eq!(report.state, Stage::Failed);
    let reason = report.reason.unwrap();
    assert!(
        reason.contains("Unauthorized") && reason.contains("setAuthorizedResolver"),
        "{reason}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    // no retry storm: still failed, nothing sent
    assert_eq!(
        r.node
            .report(RoundKey::new(s.dev.contracts.market, s.market_id))
            .await
            .unwrap()
            .state,
        Stage::Failed
    );
    assert_eq!(nonce(&s, outsider).await, 0);
    r.stop().await;
}

/// Requests resolution, then lets `secs` pass and mines `blocks` blocks; returns the
/// request's block and its timestamp.
async fn request_then_age(s: &MarketSetup, secs: u64, blocks: u64) -> (u64, u64) {
    let receipt = s.dev.request_resolution(s.market_id).await.unwrap();
    let block = receipt.block_number.unwrap();
    let p = &s.dev.provider;
    let at = p
        .get_block_by_number(block.into())
        .await
        .unwrap()
        .unwrap()
        .header
        .timestamp;
    p.raw_request::<_, serde_json::Value>("evm_increaseTime".into(), (secs,))
        .await
        .unwrap();
    p.raw_request::<_, serde_json::Value>("anvil_mine".into(), (U256::from(blocks),))
        .await
        .unwrap();
    (block, at)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_round_reads_and_judges_at_the_request_block() {
    let s = market_with_three_workers().await;
    // a day passes and blocks are mined before the node sees the request
    let (block, at) = request_then_age(&s, 86_400, 5).await;
    let dir = tmpdir("judging-point");
    let cfg = node_config(&s, &dir, workflow_file(&dir, |t| t));
    let r = start(cfg, s.dev.signers[0].clone()).await;
    let rep = wait_final(&r.node, s.dev.contracts.market, s.market_id).await;
    r.stop().await;
    assert_eq!(rep.state, Stage::Confirmed, "{rep:?}");
    let t = rep.transcript.unwrap();
    assert_eq!(
        t["market"]["block"],
        serde_json::json!(block),
        "market read at the request block"
    );
    assert_eq!(
        t["reference_time"],
        serde_json::json!(at),
        "judged at the request block's time"
    );
}

/// A JSON-RPC proxy in front of anvil that has "pruned" the state of every block up to
/// `pruned_to`: `eth_call` there fails the way a full node says it (headers stay).
async fn pruning_proxy(upstream: String, pruned_to: u64) -> String {
    use axum::Json;
    use axum::extract::State;
    async fn rpc(
        State((upstream, pruned_to)): State<(String, u64)>,
        Json(body): Json<serde_json::Value>,
    ) -> Json<serde_json::Value> {
        if body["method"] == "eth_call"
            && let Some(b) = body["params"][1].as_str()
            && let Ok(n) = u64::from_str_radix(b.trim_start_matches("0x"), 16)
            && n <= pruned_to
        {
            return Json(
                serde_json::json!({"jsonrpc": "2.0", "id": body["id"], "error": {
                    "code": -32000,
                    "message": format!("missing trie node 5a1e (path ) state {b} is not available")
                }}),
            );
        }
        let reply = reqwest::Client::new()
            .post(&upstream)
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        Json(reply)
    }
    let app = axum::Router::new()
        .route("/", axum::routing::post(rpc))
        .with_state((upstream, pruned_to));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pruned_state_at_the_request_block_is_read_at_the_head_and_judged_at_the_request() {
    let s = market_with_three_workers().await;
    let (block, at) = request_then_age(&s, 3_600, 3).await;
    let url = pruning_proxy(s.dev.rpc_url(), block).await;
    let dir = tmpdir("pruned");
    let mut cfg = node_config(&s, &dir, workflow_file(&dir, |t| t));
    cfg.chain.rpc_url = url;
    let r = start(cfg, s.dev.signers[0].clone()).await;
    let rep = wait_final(&r.node, s.dev.contracts.market, s.market_id).await;
    r.stop().await;
    assert_eq!(rep.state, Stage::Confirmed, "{rep:?}");
    let t = rep.transcript.unwrap();
    assert!(
        t["market"]["block"].as_u64().unwrap() > block,
        "read at the head: {}",
        t["market"]["block"]
    );
    assert_eq!(
        t["reference_time"],
        serde_json::json!(at),
        "judged at the request block's time"
    );
    assert_eq!(resolved_events(&s).await.len(), 1);
}
