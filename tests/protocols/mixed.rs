//! A mixed round on anvil: workers speaking A2A, Factagora, round-table, Chorus and Agora,
//! each registered in ERC-8004 with a service naming its protocol, resolved end to end by
//! a real node (discovery → every adapter → evaluation → tally → `resolveMarket`).

use crate::common::chain::{AgentUri, market_with_workers};
use crate::common::node::{node_config, resolved_events, start, tmpdir, wait_final, workflow_file};
use crate::common::{agent, agora_peer, behaviour, chorus_peer, factagora_peer, roundtable_peer};
use alloy::primitives::U256;
use cresolver_devnet::agent::DeterminationMode;
use cresolver_devnet::{data_uri, registration_json};
use cresolver_store::Stage;
use serde_json::{Value, json};

/// A registration whose only worker service is `service` (plus the wallet entry).
fn registration(name: &str, service: Value) -> AgentUri {
    let mut doc = registration_json(name, 31337, alloy::primitives::Address::ZERO, None);
    doc["services"]
        .as_array_mut()
        .expect("services")
        .push(service);
    AgentUri::Raw(data_uri(&doc))
}

/// The round's transcript `t`: every worker was discovered with its protocol, answered,
/// was challenged in its own protocol and answered that; the round-table worker
/// ratified the outcome.
fn check_every_protocol_took_part(t: &Value) {
    let protocols: Vec<&str> = t["discovery"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["protocol"].as_str().unwrap())
        .collect();
    assert_eq!(
        protocols,
        ["a2a", "factagora", "roundtable", "chorus", "agora"]
    );
    let results = t
        .pointer("/outcome/resolve/results")
        .unwrap()
        .as_array()
        .unwrap();
    for (i, r) in results.iter().enumerate() {
        assert!(r["outcome"]["Ok"].is_object(), "worker {i}: {r}");
    }
    // every worker was challenged in its own protocol and answered
    let challenges = t
        .pointer("/outcome/challenges")
        .unwrap()
        .as_array()
        .unwrap();
    for (i, c) in challenges.iter().enumerate() {
        assert!(c["failure"].is_null(), "worker {i}: {c}");
        assert!(
            !c["responses"].as_array().unwrap().is_empty(),
            "worker {i}: {c}"
        );
    }
    assert!(
        challenges[1]["challenges"][0]
            .as_str()
            .unwrap()
            .starts_with("Round 2"),
        "{}",
        challenges[1]
    );
    // the round-table worker ratified the outcome (the only protocol with a vote)
    let ratification = t
        .pointer("/outcome/ratification")
        .unwrap()
        .as_array()
        .unwrap();
    assert_eq!(ratification.len(), 1, "{ratification:?}");
    assert_eq!(ratification[0]["outcome"]["Ok"]["approve"], true);
}

#[tokio::test]
async fn a_mixed_round_resolves_on_chain() {
    let a2a = agent(behaviour(DeterminationMode::Yes, 0.8)).await;
    // The node reads the Factagora token from the env var its config names. Setting a
    // variable here would race with the other tests of this binary (setenv while
    // another thread reads the environment), so the config names one the process
    // already has, and the peer expects its value.
    let token_env = "PATH";
    let token = std::env::var(token_env).expect("PATH is set");
    let factagora = factagora_peer::spawn(
        Some(&token),
        factagora_peer::FactagoraBehaviour::Reply(factagora_peer::good_response("YES", 0.75)),
    )
    .await;
    let roundtable = roundtable_peer::spawn(roundtable_peer::Script::agrees_yes()).await;
    let chorus = chorus_peer::spawn(vec![
        (
            "market_resolve",
            chorus_peer::ChorusBehaviour::Answer(chorus_peer::answer(false, 0.6)),
        ),
        (
            "market_challenge",
            chorus_peer::ChorusBehaviour::Answer(json!({"responses": ["r1", "r2", "r3"]})),
        ),
    ])
    .await;
    let (relay, _relay) = agora_peer::agora_relay().await;
    let (agora_did, _agent) =
        agora_peer::agora_agent(&relay, agora_peer::AgoraBehaviour::Good).await;

    let s = market_with_workers(vec![
        registration(
            "a2a",
            json!({"name": "A2A", "endpoint": a2a, "protocol": "cresolver"}),
        ),
        registration(
            "factagora",
            json!({"name": "predictions", "endpoint": factagora.url, "protocol": "factagora-byoa"}),
        ),
        registration(
            "roundtable",
            json!({"name": "round-table", "endpoint": roundtable.url}),
        ),
        registration("chorus", json!({"name": "Chorus", "endpoint": chorus.url})),
        registration(
            "agora",
            json!({"name": "Agora", "endpoint": relay, "did": agora_did}),
        ),
    ])
    .await;

    let dir = tmpdir("mixed");
    let wf = workflow_file(&dir, |t| {
        t.replace("ratify = false", "ratify = true")
            .replace("timeout_ms = 30000", "timeout_ms = 8000")
    });
    let mut cfg = node_config(&s, &dir, wf);
    cfg.protocols.factagora.token_env = token_env.into();
    // the token may go to the Factagora worker's host (loopback here), nowhere else
    cfg.protocols.factagora.token_hosts = vec!["127.0.0.1".into()];
    let r = start(cfg, s.dev.signers[0].clone()).await;
    s.dev.request_resolution(s.market_id).await.unwrap();
    let report = wait_final(&r.node, s.dev.contracts.market, s.market_id).await;
    assert_eq!(report.state, Stage::Confirmed, "{report:?}");
    // 4 YES (A2A, Factagora, round-table, Agora) against 1 NO (Chorus)
    assert_eq!(report.resolution, Some(true));

    let t = report.transcript.as_ref().unwrap();
    check_every_protocol_took_part(t);
    // on chain: one resolution, every worker paid by its tally weight
    let weights: Vec<u64> = t
        .pointer("/outcome/tally/workers")
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["weight"].as_u64().unwrap())
        .collect();
    assert!(weights.iter().all(|w| *w > 0), "{weights:?}");
    let total: u64 = weights.iter().sum();
    let m = s.dev.market();
    for (i, w) in s.workers.iter().enumerate() {
        let expected = s.reward * U256::from(weights[i]) / U256::from(total) + s.stake;
        assert_eq!(m.balances(*w).call().await.unwrap(), expected, "worker {i}");
    }
    assert_eq!(resolved_events(&s).await.len(), 1);
    // the Factagora webhook got the configured bearer token, round 1 then round 2
    let rounds: Vec<u64> = factagora
        .requests()
        .iter()
        .map(|r| r.body["roundNumber"].as_u64().unwrap())
        .collect();
    assert_eq!(rounds, [1, 2]);
    r.stop().await;
}

#[tokio::test]
async fn the_chorus_orchestrator_id_is_drawn_once_and_kept_across_a_restart() {
    use crate::common::chain::more_markets;
    let a2a = agent(behaviour(DeterminationMode::Yes, 0.8)).await;
    let chorus = chorus_peer::spawn(vec![
        (
            "market_resolve",
            chorus_peer::ChorusBehaviour::Answer(chorus_peer::answer(true, 0.7)),
        ),
        (
            "market_challenge",
            chorus_peer::ChorusBehaviour::Defend { short: 0 },
        ),
    ])
    .await;
    let s = market_with_workers(vec![
        registration("a2a", json!({"name": "A2A", "endpoint": a2a})),
        registration("chorus", json!({"name": "Chorus", "endpoint": chorus.url})),
    ])
    .await;
    let second = more_markets(&s, 1).await[0];
    let dir = tmpdir("chorus-id");
    let wf = workflow_file(&dir, |t| t);
    let market = s.dev.contracts.market;
    let ids = |from: usize| -> Vec<String> {
        chorus.jobs()[from..]
            .iter()
            .map(|j| j["orchestrator_id"].as_str().unwrap().to_string())
            .collect()
    };

    let r = start(node_config(&s, &dir, wf.clone()), s.dev.signers[0].clone()).await;
    s.dev.request_resolution(s.market_id).await.unwrap();
    let report = wait_final(&r.node, market, s.market_id).await;
    assert_eq!(report.state, Stage::Confirmed, "{report:?}");
    r.stop().await;
    let first = ids(0);
    assert!(!first.is_empty());
    let id = first[0].clone();
    assert!(first.iter().all(|i| *i == id), "one id per node: {first:?}");
    let parsed = uuid::Uuid::parse_str(&id).unwrap();
    assert_eq!(parsed.get_version_num(), 4, "{id}");

    // restarted on the same store: the same id
    let seen = chorus.jobs().len();
    let r = start(node_config(&s, &dir, wf), s.dev.signers[0].clone()).await;
    s.dev.request_resolution(second).await.unwrap();
    let report = wait_final(&r.node, market, second).await;
    assert_eq!(report.state, Stage::Confirmed, "{report:?}");
    r.stop().await;
    let later = ids(seen);
    assert!(!later.is_empty());
    assert!(later.iter().all(|i| *i == id), "{id} then {later:?}");
}
