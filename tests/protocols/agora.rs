//! The Agora adapter against a real relay (HTTP long polling) and scripted agents on
//! 127.0.0.1: the typed outcome of every agent behaviour, envelope verification on the
//! wire (tampered signature, stale timestamp, replayed id, wrong key, impostor), and a
//! full resolve + challenge.

use crate::common::agora_peer::{
    AgentHandle, AgoraBehaviour, RelayHandle, SinceMode, agora_agent, agora_relay, agora_relay_with,
};
use cresolver_workers::agora::envelope;
use cresolver_workers::agora::{AgoraConfig, AgoraNode, AgoraProtocol};
use cresolver_workers::{
    ChallengeRequest, PeerAnswer, ResolveAnswer, ResolveRequest, StageClient, StageConfig,
    WorkerFailure, WorkerProtocol,
};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use url::Url;

const OK_BUDGET_MS: u64 = 2_000;
const FAIL_BUDGET_MS: u64 = 600;

fn client(ms: u64) -> StageClient {
    StageClient::new(
        StageClient::default_http(),
        StageConfig {
            timeout: Duration::from_millis(ms),
            max_body_bytes: 1 << 20,
            connect_retries: 0,
            retry_backoff: Duration::from_millis(10),
        },
        Arc::new(Semaphore::new(16)),
    )
}

/// A node with a 0.05 USD budget.
fn node() -> Arc<AgoraNode> {
    node_with(AgoraConfig {
        max_cost_usd: 0.05,
        ..AgoraConfig::default()
    })
}

fn node_with(settings: AgoraConfig) -> Arc<AgoraNode> {
    Arc::new(AgoraNode::generate(settings).unwrap())
}

fn request() -> ResolveRequest {
    ResolveRequest {
        market_id: 7,
        question: "Will the reference feed report YES by 2026-06-01?".into(),
        deadline: Some(1_780_272_000),
        context: None,
    }
}

struct Setup {
    relay: RelayHandle,
    agent: AgentHandle,
    node: Arc<AgoraNode>,
    proto: AgoraProtocol,
    endpoint: Url,
}

async fn setup_with(behaviour: AgoraBehaviour, mode: SinceMode) -> Setup {
    setup_node(behaviour, mode, node()).await
}

async fn setup_node(behaviour: AgoraBehaviour, mode: SinceMode, node: Arc<AgoraNode>) -> Setup {
    let (url, relay) = agora_relay_with(mode).await;
    let (did, agent) = agora_agent(&url, behaviour).await;
    let proto = AgoraProtocol::new(node.clone(), &did).unwrap();
    Setup {
        relay,
        agent,
        node,
        proto,
        endpoint: url.parse().unwrap(),
    }
}

async fn setup(behaviour: AgoraBehaviour) -> Setup {
    setup_with(behaviour, SinceMode::Exclusive).await
}

async fn resolve(s: &Setup, budget_ms: u64) -> Result<ResolveAnswer, WorkerFailure> {
    s.proto
        .resolve(&client(budget_ms), &s.endpoint, &request())
        .await
}

/// Resolves with the failure budget and asserts an envelope failure whose detail names
/// `needle` (on mismatch, shows what went over the relay).
async fn assert_envelope(s: &Setup, needle: &str) -> String {
    match resolve(s, FAIL_BUDGET_MS).await {
        Err(WorkerFailure::Envelope { detail }) => {
            assert!(detail.contains(needle), "{needle:?} not in {detail:?}");
            detail
        }
        other => panic!(
            "expected an envelope failure naming {needle:?}, got {other:?}; relay: {:?}; agent rejected: {:?}",
            s.relay
                .events()
                .iter()
                .map(|e| format!("{} {} {}", e["type"], e["id"], e["ts"]))
                .collect::<Vec<_>>(),
            s.agent.rejected()
        ),
    }
}

/// What went over the relay for one resolve: one signed REQUEST and one ACCEPT from the
/// node, their payloads, and long polls that keep within the budget and follow the
/// agent's events.
fn check_resolve_wire(s: &Setup) {
    // What went over the relay: one signed REQUEST and one ACCEPT from this node, which
    // verify against the node's did (the agent verified them as well).
    let requests = s.relay.events_of_type("REQUEST");
    let accepts = s.relay.events_of_type("ACCEPT");
    assert_eq!((requests.len(), accepts.len()), (1, 1));
    let now = s.node.now_ms();
    for m in requests.iter().chain(&accepts) {
        let v = envelope::verify(m, now).unwrap();
        assert_eq!(v.envelope.sender.id, s.node.did());
        assert_eq!(v.envelope.recipient.id, s.agent.did);
        assert_eq!(m["thread"]["id"], requests[0]["thread"]["id"]);
    }
    assert!(s.agent.rejected().is_empty(), "{:?}", s.agent.rejected());
    assert_eq!(s.agent.received().len(), 2);
    let p = &requests[0]["payload"];
    assert_eq!(p["intent"], "market.resolve");
    assert_eq!(p["title"], request().question);
    assert_eq!(p["params"]["market_id"], 7);
    assert_eq!(p["params"]["question"], request().question);
    assert_eq!(p["params"]["deadline"], 1_780_272_000u64);
    assert_eq!(p["constraints"]["max_cost_usd"], 0.0);
    assert_eq!(p["constraints"]["max_latency_ms"], OK_BUDGET_MS);
    assert_eq!(accepts[0]["payload"]["request_id"], p["request_id"]);
    assert_eq!(accepts[0]["payload"]["terms"]["price_usd"], 0.0);
    // The long-poll timeout never exceeded what was left of the 2 s budget.
    let node_polls: Vec<_> = s
        .relay
        .polls()
        .into_iter()
        .filter(|q| q.get("recipient") == Some(&s.node.did()))
        .collect();
    assert!(!node_polls.is_empty());
    for q in &node_polls {
        let t: u64 = q["timeout"].parse().unwrap();
        assert!((1..=2).contains(&t), "poll timeout {t}");
        assert_eq!(q["thread"], requests[0]["thread"]["id"].as_str().unwrap());
    }
    // `since` starts ten minutes before the REQUEST and then follows the agent's events.
    let request_ms = envelope::parse_ts(requests[0]["ts"].as_str().unwrap()).unwrap();
    assert_eq!(
        envelope::parse_ts(&node_polls[0]["since"]),
        Some(request_ms - 10 * 60 * 1000)
    );
    let offer = &s.relay.events_of_type("OFFER")[0];
    assert!(
        node_polls
            .iter()
            .any(|q| q["since"] == offer["ts"].as_str().unwrap()),
        "{node_polls:?}"
    );
}

#[tokio::test]
async fn good_agent_resolves_and_defends() {
    // Default settings: a zero budget, so only free offers are taken.
    let s = setup_node(
        AgoraBehaviour::Good,
        SinceMode::Exclusive,
        node_with(AgoraConfig::default()),
    )
    .await;
    let answer = resolve(&s, OK_BUDGET_MS).await.unwrap();
    assert!(answer.determination && !answer.abstain);
    assert_eq!(answer.confidence, 0.8);
    assert!(answer.evidence.contains("reference feed"));
    // The agent listed its source twice.
    assert_eq!(answer.sources, vec!["https://feed.example/report"]);
    assert!(
        answer.notes.iter().any(|n| n.contains("accepted offer")),
        "{:?}",
        answer.notes
    );

    check_resolve_wire(&s);

    // The challenge stage: a new thread, the challenges and the peers by label only.
    let challenges = vec![
        "What if the feed was late?".to_string(),
        "Why trust this feed?".to_string(),
    ];
    let peer = PeerAnswer {
        label: "W2".into(),
        answer: ResolveAnswer {
            determination: false,
            confidence: 0.6,
            evidence: "The feed was down.".into(),
            sources: vec!["https://elsewhere.example".into()],
            abstain: false,
            notes: vec![],
            cuts: vec![],
        }
        .into(),
    };
    let rr = request();
    let outcome = s
        .proto
        .challenge(
            &client(OK_BUDGET_MS),
            &s.endpoint,
            ChallengeRequest {
                request: &rr,
                label: "W1",
                own: &answer,
                challenges: &challenges,
                peers: std::slice::from_ref(&peer),
            },
        )
        .await;
    assert_eq!(outcome.failure, None);
    assert_eq!(outcome.challenges, challenges);
    assert_eq!(
        outcome.responses,
        vec![
            "Defence: What if the feed was late?",
            "Defence: Why trust this feed?"
        ]
    );
    let requests = s.relay.events_of_type("REQUEST");
    assert_eq!(requests.len(), 2);
    assert_ne!(requests[0]["thread"]["id"], requests[1]["thread"]["id"]);
    let p = &requests[1]["payload"];
    assert_eq!(p["intent"], "market.challenge");
    assert_eq!(p["params"]["challenges"][1], "Why trust this feed?");
    assert_eq!(
        p["params"]["peers"],
        serde_json::json!([{"label": "W2", "position": "NO", "confidence": 0.6,
            "evidence": "The feed was down."}])
    );
    assert_eq!(p["params"]["own"]["position"], "YES");
    // Ids of both negotiations are tracked by the node's replay cache.
    assert!(s.node.tracked_ids() >= 6, "{}", s.node.tracked_ids());
}

#[tokio::test]
async fn over_budget_offer_is_skipped_for_the_next() {
    let s = setup(AgoraBehaviour::OverBudgetThenGood).await;
    let answer = resolve(&s, OK_BUDGET_MS).await.unwrap();
    assert!(answer.determination);
    assert!(
        answer
            .notes
            .iter()
            .any(|n| n.contains("price 1000 USD exceeds the budget of 0.05 USD")),
        "{:?}",
        answer.notes
    );
    let offers = s.relay.events_of_type("OFFER");
    let accepts = s.relay.events_of_type("ACCEPT");
    assert_eq!((offers.len(), accepts.len()), (2, 1));
    // An offer at exactly the budget is within it.
    assert_eq!(accepts[0]["payload"]["offer_id"], offers[1]["id"]);
    assert_eq!(accepts[0]["payload"]["terms"]["price_usd"], 0.05);
}

#[tokio::test]
async fn only_unacceptable_offers_is_a_declined_job() {
    // A 0.01 USD budget: both the 1000 and the 0.05 USD offers are over it.
    let node = node_with(AgoraConfig {
        max_cost_usd: 0.01,
        ..AgoraConfig::default()
    });
    let s = setup_node(
        AgoraBehaviour::OverBudgetThenGood,
        SinceMode::Exclusive,
        node,
    )
    .await;
    match resolve(&s, FAIL_BUDGET_MS).await {
        Err(WorkerFailure::Rejected { code, detail }) => {
            assert_eq!(code, "NO_ACCEPTABLE_OFFER");
            assert!(detail.contains("price 1000 USD exceeds"), "{detail}");
            assert!(detail.contains("price 0.05 USD exceeds"), "{detail}");
        }
        other => panic!("{other:?}"),
    }
    assert!(s.relay.events_of_type("ACCEPT").is_empty());
}

#[tokio::test]
async fn expired_offer_is_not_accepted() {
    let s = setup(AgoraBehaviour::ExpiredOffer).await;
    match resolve(&s, FAIL_BUDGET_MS).await {
        Err(WorkerFailure::Rejected { code, detail }) => {
            assert_eq!(code, "NO_ACCEPTABLE_OFFER");
            assert!(detail.contains("expired at"), "{detail}");
        }
        other => panic!("{other:?}"),
    }
    assert!(s.relay.events_of_type("ACCEPT").is_empty());
}

#[tokio::test]
async fn invalid_result_is_a_schema_violation() {
    let s = setup(AgoraBehaviour::InvalidResult).await;
    match resolve(&s, OK_BUDGET_MS).await {
        Err(WorkerFailure::Schema { detail }) => {
            assert!(
                detail.contains("`confidence` = 1.7 is outside [0, 1]"),
                "{detail}"
            )
        }
        other => panic!("{other:?}"),
    }
    // the agent is told why its RESULT was refused
    let errors = received_from_node(&s, "ERROR").await;
    assert_eq!(errors.len(), 1, "{:?}", s.agent.received());
    let p = &errors[0]["payload"];
    assert_eq!(
        (p["code"].as_str(), p["details"]["check"].as_str()),
        (Some("INVALID_REQUEST"), Some("schema"))
    );
    assert!(p["message"].as_str().unwrap().contains("1.7"), "{p}");
}

#[tokio::test]
async fn error_message_is_rejected_with_its_code() {
    let s = setup(AgoraBehaviour::ErrorMessage).await;
    assert_eq!(
        resolve(&s, OK_BUDGET_MS).await,
        Err(WorkerFailure::Rejected {
            code: "INTENT_NOT_SUPPORTED".into(),
            detail: "this agent does not resolve markets".into()
        })
    );
    assert!(s.relay.events_of_type("ACCEPT").is_empty());
    // In the challenge stage the failure keeps what was asked.
    let challenges = vec!["c1".to_string()];
    let rr = request();
    let own = ResolveAnswer {
        determination: true,
        confidence: 0.7,
        evidence: "e".into(),
        sources: vec![],
        abstain: false,
        notes: vec![],
        cuts: vec![],
    };
    let outcome = s
        .proto
        .challenge(
            &client(OK_BUDGET_MS),
            &s.endpoint,
            ChallengeRequest {
                request: &rr,
                label: "W1",
                own: &own,
                challenges: &challenges,
                peers: &[],
            },
        )
        .await;
    assert_eq!(outcome.challenges, challenges);
    assert!(outcome.responses.is_empty());
    assert!(
        matches!(outcome.failure, Some(WorkerFailure::Rejected { code, .. }) if code == "INTENT_NOT_SUPPORTED")
    );
}

#[tokio::test]
async fn silent_agent_times_out_within_the_budget() {
    let s = setup(AgoraBehaviour::NeverOffers).await;
    let started = Instant::now();
    assert_eq!(
        resolve(&s, FAIL_BUDGET_MS).await,
        Err(WorkerFailure::Timeout {
            after_ms: FAIL_BUDGET_MS
        })
    );
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(FAIL_BUDGET_MS) && took < Duration::from_millis(1_200),
        "{took:?}"
    );
    // The agent did get the request.
    assert_eq!(s.agent.received().len(), 1);
}

#[tokio::test]
async fn tampered_signature_is_rejected() {
    let s = setup(AgoraBehaviour::TamperedSignature).await;
    let detail = assert_envelope(&s, "bad signature").await;
    assert!(detail.contains("no valid OFFER"), "{detail}");
    // The tampered offer was never accepted.
    assert!(s.relay.events_of_type("ACCEPT").is_empty());
}

#[tokio::test]
async fn stale_timestamp_is_rejected() {
    let s = setup(AgoraBehaviour::StaleTimestamp).await;
    let detail = assert_envelope(&s, "stale timestamp").await;
    assert!(detail.contains("the window is ±300 s"), "{detail}");
    assert!(s.relay.events_of_type("ACCEPT").is_empty());
}

/// The signed messages of `kind` the agent received from the node so far (the agent
/// verified each signature against the node's did:key).
fn received_from_node_now(s: &Setup, kind: &str) -> Vec<serde_json::Value> {
    s.agent
        .received()
        .into_iter()
        .filter(|e| e["type"] == kind && e["sender"]["id"] == s.node.did())
        .collect()
}

/// [`received_from_node_now`], waiting up to 5 s for the first one.
async fn received_from_node(s: &Setup, kind: &str) -> Vec<serde_json::Value> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let got = received_from_node_now(s, kind);
        if !got.is_empty() || Instant::now() > deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The REQUEST's `request_id`, as the agent received it.
fn request_id(s: &Setup) -> String {
    s.agent
        .received()
        .iter()
        .find(|e| e["type"] == "REQUEST")
        .and_then(|e| e["payload"]["request_id"].as_str())
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn an_agent_whose_signed_envelope_is_refused_gets_a_signed_error_at_once() {
    for behaviour in [
        AgoraBehaviour::ReplayedId,
        AgoraBehaviour::ResultWithoutOffer,
    ] {
        let s = setup(behaviour).await;
        let started = Instant::now();
        let err = resolve(&s, OK_BUDGET_MS).await.unwrap_err();
        assert!(
            started.elapsed() < Duration::from_millis(OK_BUDGET_MS / 2),
            "{behaviour:?}: waited {:?} for {err}",
            started.elapsed()
        );
        assert!(
            err.to_string().contains("signed ERROR (INVALID_REQUEST)"),
            "{err}"
        );
        let errors = received_from_node(&s, "ERROR").await;
        assert_eq!(errors.len(), 1, "{behaviour:?}: {:?}", s.agent.received());
        let p = &errors[0]["payload"];
        assert_eq!(p["code"], "INVALID_REQUEST");
        assert_eq!(p["request_id"], request_id(&s).as_str());
        let check = if behaviour == AgoraBehaviour::ReplayedId {
            "replayed_id"
        } else {
            "out_of_state"
        };
        assert_eq!(p["details"]["check"], check, "{p}");
        // the thread is over: no CANCEL follows the ERROR
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(received_from_node_now(&s, "CANCEL").is_empty());
    }
}

#[tokio::test]
async fn a_thread_the_node_gives_up_is_cancelled_without_holding_up_the_round() {
    // pending (no offer), active (offer accepted, no result): the budget runs out
    for (behaviour, waiting) in [
        (AgoraBehaviour::NeverOffers, "OFFER"),
        (AgoraBehaviour::OffersThenSilent, "RESULT"),
    ] {
        let s = setup(behaviour).await;
        let started = Instant::now();
        let err = resolve(&s, FAIL_BUDGET_MS).await.unwrap_err();
        assert!(
            started.elapsed() < Duration::from_millis(FAIL_BUDGET_MS + 300),
            "the round was held up: {:?}",
            started.elapsed()
        );
        assert_eq!(
            err,
            WorkerFailure::Timeout {
                after_ms: FAIL_BUDGET_MS
            }
        );
        let cancels = received_from_node(&s, "CANCEL").await;
        assert_eq!(cancels.len(), 1, "{behaviour:?}: {:?}", s.agent.received());
        let p = &cancels[0]["payload"];
        assert_eq!(p["request_id"], request_id(&s).as_str());
        assert!(
            p["reason"]
                .as_str()
                .unwrap()
                .contains(&format!("waiting for the agent's {waiting}")),
            "{p}"
        );
    }
    // the round no longer needs the answer: the negotiation is dropped mid-way
    let s = setup(AgoraBehaviour::NeverOffers).await;
    let cut = tokio::time::timeout(Duration::from_millis(300), resolve(&s, OK_BUDGET_MS)).await;
    assert!(cut.is_err(), "still running when dropped");
    let cancels = received_from_node(&s, "CANCEL").await;
    assert_eq!(cancels.len(), 1, "{:?}", s.agent.received());
    assert!(
        cancels[0]["payload"]["reason"]
            .as_str()
            .unwrap()
            .contains("the round ended"),
        "{}",
        cancels[0]
    );
    // an answered thread is not cancelled
    let s = setup(AgoraBehaviour::Good).await;
    resolve(&s, OK_BUDGET_MS).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(received_from_node_now(&s, "CANCEL").is_empty());
    assert!(received_from_node_now(&s, "ERROR").is_empty());
}

#[tokio::test]
async fn replayed_id_is_rejected() {
    let s = setup(AgoraBehaviour::ReplayedId).await;
    let detail = assert_envelope(&s, "replayed id").await;
    let offer_id = s.relay.events_of_type("OFFER")[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(detail.contains(&offer_id), "{detail}");
    assert!(detail.contains("no valid RESULT"), "{detail}");
    // The offer itself was fine and accepted.
    assert_eq!(s.relay.events_of_type("ACCEPT").len(), 1);
}

#[tokio::test]
async fn wrong_sender_key_is_rejected() {
    let s = setup(AgoraBehaviour::WrongSenderKey).await;
    let detail = assert_envelope(&s, "bad signature").await;
    assert!(detail.contains("sender's did:key"), "{detail}");
}

#[tokio::test]
async fn impostor_is_rejected() {
    let s = setup(AgoraBehaviour::Impostor).await;
    let detail = assert_envelope(&s, "wrong sender").await;
    assert!(detail.contains(&s.agent.did), "{detail}");
}

#[tokio::test]
async fn result_without_accept_is_out_of_order() {
    let s = setup(AgoraBehaviour::ResultWithoutOffer).await;
    assert_envelope(&s, "RESULT is not allowed in thread state PENDING").await;
}

#[tokio::test]
async fn inclusive_relay_redeliveries_are_handled_once() {
    // This relay hands the last event out again on every poll: the adapter must
    // neither process it twice nor treat the repeat as a replay.
    let s = setup_with(AgoraBehaviour::Good, SinceMode::Inclusive).await;
    let answer = resolve(&s, OK_BUDGET_MS).await.unwrap();
    assert!(answer.determination);
    assert!(
        !answer.notes.iter().any(|n| n.contains("dropped")),
        "{:?}",
        answer.notes
    );
    assert_eq!(s.relay.events_of_type("ACCEPT").len(), 1);
}

#[tokio::test]
async fn full_replay_cache_fails_closed() {
    // Room for one id: the node's own REQUEST takes it, so the agent's OFFER cannot be
    // tracked and is refused rather than accepted unprotected.
    let node = Arc::new(
        AgoraNode::generate(AgoraConfig::default())
            .unwrap()
            .with_replay_capacity(1),
    );
    let s = setup_node(AgoraBehaviour::Good, SinceMode::Exclusive, node).await;
    assert_envelope(&s, "replay cache full").await;
    assert!(s.relay.events_of_type("ACCEPT").is_empty());
}

#[tokio::test]
async fn unreachable_relay_is_a_connect_failure() {
    let node = node();
    let (_url, relay) = agora_relay().await;
    let (did, _agent) = agora_agent(&relay.url, AgoraBehaviour::Good).await;
    drop(relay);
    let proto = AgoraProtocol::new(node, &did).unwrap();
    let closed: Url = crate::common::closed_port_url().parse().unwrap();
    let r = proto
        .resolve(&client(FAIL_BUDGET_MS), &closed, &request())
        .await;
    assert!(matches!(r, Err(WorkerFailure::Connect { .. })), "{r:?}");
}
