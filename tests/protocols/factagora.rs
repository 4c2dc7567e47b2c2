//! Tests of the Factagora BYOA adapter against a real webhook on 127.0.0.1: the request
//! shape of both debate rounds, every reply behaviour landing in its typed reason, soft
//! warnings as notes, and a whole round with Factagora workers.

use crate::common::factagora_peer::{self, FactagoraBehaviour as B, good_response, with};
use cresolver_core::Reputation;
use cresolver_evaluate::RubricEvaluator;
use cresolver_pipeline::round::{Engine, RoundInput};
use cresolver_workers::factagora::{FactagoraConfig, FactagoraProtocol, prediction_id};
use cresolver_workers::fanout::{WorkerSlot, WorkerTarget};
use cresolver_workers::{
    ChallengeRequest, PeerAnswer, ResolveAnswer, ResolveRequest, StageClient, StageConfig,
    WorkerFailure, WorkerProtocol,
};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use url::Url;

const TOKEN: &str = "tok-123";

fn client(timeout_ms: u64) -> StageClient {
    StageClient::new(
        StageClient::default_http(),
        StageConfig {
            timeout: Duration::from_millis(timeout_ms),
            max_body_bytes: 256 * 1024,
            connect_retries: 0,
            retry_backoff: Duration::from_millis(10),
        },
        Arc::new(tokio::sync::Semaphore::new(16)),
    )
}

fn proto(token: Option<&str>) -> FactagoraProtocol {
    FactagoraProtocol::new(FactagoraConfig {
        token: token.map(Into::into),
        // the test peers listen on loopback: the token may go there
        token_hosts: vec!["127.0.0.1".into()],
    })
}

fn request() -> ResolveRequest {
    ResolveRequest {
        market_id: 42,
        question: "Will the reference feed exceed 100 before the deadline?".into(),
        deadline: Some(1_798_761_599),
        context: Some("Resolves YES if the reference feed prints a value above 100.".into()),
    }
}

async fn resolve(url: &str, token: Option<&str>) -> Result<ResolveAnswer, WorkerFailure> {
    let endpoint: Url = url.parse().unwrap();
    proto(token)
        .resolve(&client(2000), &endpoint, &request())
        .await
}

fn answer(determination: bool, confidence: f64, evidence: &str, abstain: bool) -> ResolveAnswer {
    ResolveAnswer {
        determination,
        confidence,
        evidence: evidence.into(),
        sources: vec!["https://feed.example/page".into()],
        abstain,
        notes: vec![],
        cuts: vec![],
    }
}

#[tokio::test]
async fn good_yes_resolves_and_the_request_follows_the_spec() {
    let peer = factagora_peer::spawn(Some(TOKEN), B::Reply(good_response("YES", 0.8))).await;
    let a = resolve(&peer.url, Some(TOKEN)).await.unwrap();
    assert!(a.determination && !a.abstain);
    assert_eq!(a.confidence, 0.8);
    assert!(a.notes.is_empty(), "{:?}", a.notes);
    assert_eq!(
        a.sources,
        [
            "https://feed.example/page",
            "https://mirror.example/archive",
            "https://feed.example/search",
            "https://api.feed.example/v1/latest"
        ]
    );
    for needle in [
        "Summary: The feed and two mirrors agree",
        "Initial thought: The reference feed publishes",
        "1. web_search: \"reference feed latest value\" -> Feed shows",
        "Observations:\n- The feed value exceeds the threshold",
        "Synthesis: Both the primary feed",
        "- [data] API reading 105 > 100: Raw API value at the deadline (reliability 0.90)",
        "Limitations:\n- The mirrors could share an upstream",
    ] {
        assert!(a.evidence.contains(needle), "{needle:?} in {}", a.evidence);
    }

    let got = peer.requests();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].authorization.as_deref(), Some("Bearer tok-123"));
    let body = &got[0].body;
    assert_eq!(body["title"], request().question);
    assert_eq!(body["description"], request().context.unwrap());
    assert_eq!(body["deadline"], "2026-12-31T23:59:59Z");
    assert_eq!(body["roundNumber"], 1);
    assert_eq!(body["predictionId"], prediction_id(42, &request().question));
    assert!(uuid::Uuid::parse_str(body["predictionId"].as_str().unwrap()).is_ok());
    assert!(body.get("existingArguments").is_none());
}

#[tokio::test]
async fn no_is_a_determination_and_neutral_an_abstention() {
    let no = factagora_peer::spawn(None, B::Reply(good_response("NO", 0.7))).await;
    let neutral = factagora_peer::spawn(None, B::Reply(good_response("NEUTRAL", 0.5))).await;
    let a = resolve(&no.url, None).await.unwrap();
    assert!(!a.determination && !a.abstain);
    assert_eq!(a.position(), cresolver_core::Position::No);
    let a = resolve(&neutral.url, None).await.unwrap();
    assert!(a.abstain && !a.determination);
    assert_eq!(a.position(), cresolver_core::Position::Abstain);
    assert!(
        a.evidence
            .starts_with("Position: NEUTRAL (confidence 0.50)")
    );
    // Without a token no Authorization header is sent.
    assert_eq!(no.requests()[0].authorization, None);
}

#[tokio::test]
async fn wrong_or_missing_token_is_http_401() {
    let peer = factagora_peer::spawn(Some(TOKEN), B::Reply(good_response("YES", 0.8))).await;
    for token in [Some("wrong"), None] {
        let err = resolve(&peer.url, token).await.unwrap_err();
        assert!(
            matches!(err, WorkerFailure::HttpStatus { status: 401, .. }),
            "{err}"
        );
        assert!(!err.to_string().contains("wrong"), "{err}");
    }
    assert_eq!(
        peer.requests()[0].authorization.as_deref(),
        Some("Bearer wrong")
    );
}

#[tokio::test]
async fn invalid_replies_are_schema_failures_naming_the_field() {
    let good = || good_response("YES", 0.8);
    let mut no_title = good();
    no_title["reactCycle"]["evidence"][1]
        .as_object_mut()
        .unwrap()
        .remove("title");
    let cases = [
        (
            with(good(), "/position", json!("yes")),
            "`position` must be exactly \"YES\", \"NO\" or \"NEUTRAL\" (case-sensitive), got \"yes\"",
        ),
        (
            with(good(), "/reactCycle/actions", json!([])),
            "`reactCycle.actions` has 0 entries; at least 1",
        ),
        (
            with(good(), "/reactCycle/initialThought", json!("Maybe")),
            "`reactCycle.initialThought` is 5 characters; at least 20",
        ),
        (no_title, "`reactCycle.evidence[1].title` is missing"),
        (
            with(good(), "/confidence", json!(1.2)),
            "`confidence` = 1.2 is outside [0.0, 1.0]",
        ),
        (
            with(good(), "/reasoning", json!("r".repeat(1001))),
            "`reasoning` is 1001 characters; at most 1000",
        ),
        (
            with(good(), "/reactCycle/observations", json!(vec!["o"; 21])),
            "`reactCycle.observations` has 21 entries; at most 20",
        ),
    ];
    for (reply, needle) in cases {
        let peer = factagora_peer::spawn(None, B::Reply(reply)).await;
        let err = resolve(&peer.url, None).await.unwrap_err();
        match &err {
            WorkerFailure::Schema { detail } => assert_eq!(detail, needle),
            other => panic!("{needle}: expected a schema failure, got {other}"),
        }
    }
    let peer = factagora_peer::spawn(None, B::Reply(json!("not an object"))).await;
    let err = resolve(&peer.url, None).await.unwrap_err();
    assert!(matches!(err, WorkerFailure::Schema { .. }), "{err}");
}

#[tokio::test]
async fn explicit_error_is_rejected_with_its_code_and_message() {
    let peer = factagora_peer::spawn(
        Some(TOKEN),
        B::Error {
            code: "LLM_API_ERROR".into(),
            message: "Failed to connect to OpenAI API".into(),
        },
    )
    .await;
    // retried twice, as the platform does; the last failure is the answer
    match resolve(&peer.url, Some(TOKEN)).await.unwrap_err() {
        WorkerFailure::Retried { attempts, last } => {
            assert_eq!(attempts.len(), 2, "{attempts:?}");
            assert_eq!(
                *last,
                WorkerFailure::Rejected {
                    code: "LLM_API_ERROR".into(),
                    detail: "Failed to connect to OpenAI API".into()
                }
            );
        }
        other => panic!("expected Retried, got {other}"),
    }
    assert_eq!(peer.requests().len(), 3);
    // A long message is cut from the client's excerpt; the code still comes through.
    let peer = factagora_peer::spawn(
        None,
        B::Error {
            code: "RATE_LIMIT".into(),
            message: "m".repeat(400),
        },
    )
    .await;
    match resolve(&peer.url, None).await.unwrap_err() {
        WorkerFailure::Retried { last, .. } => match *last {
            WorkerFailure::Rejected { code, detail } => {
                assert_eq!(code, "RATE_LIMIT");
                assert_eq!(detail, "Internal agent error");
            }
            other => panic!("expected Rejected, got {other}"),
        },
        other => panic!("expected Retried, got {other}"),
    }
}

#[tokio::test]
async fn a_failed_webhook_is_retried_twice_with_exponential_backoff() {
    let rate_limited = B::Error {
        code: "RATE_LIMIT".into(),
        message: "Too many requests".into(),
    };
    // a 503 without a body, the spec's error body, then an answer
    let peer = factagora_peer::spawn(
        Some(TOKEN),
        B::Sequence(vec![
            B::Status(503),
            rate_limited.clone(),
            B::Reply(good_response("YES", 0.8)),
        ]),
    )
    .await;
    let a = resolve(&peer.url, Some(TOKEN))
        .await
        .expect("the third attempt answers");
    assert!(a.determination);
    let got = peer.requests();
    assert_eq!(got.len(), 3);
    let (first, second) = (got[1].at - got[0].at, got[2].at - got[1].at);
    assert!(
        first >= Duration::from_millis(250) && second >= Duration::from_millis(500),
        "backoff {first:?} then {second:?}"
    );
    assert!(
        second > first,
        "the backoff grows: {first:?} then {second:?}"
    );
    assert!(
        got.iter().all(|r| r.body == got[0].body),
        "the same request each time"
    );
    // every attempt is in the transcript
    let attempts: Vec<&String> = a
        .notes
        .iter()
        .filter(|n| n.starts_with("attempt "))
        .collect();
    assert_eq!(attempts.len(), 2, "{:?}", a.notes);
    assert!(attempts[0].contains("HTTP status 503"), "{}", attempts[0]);
    assert!(attempts[1].contains("RATE_LIMIT"), "{}", attempts[1]);

    // a connection error is retried too: an agent that comes up a moment late
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], crate::common::node::free_port()));
    let late = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let app = axum::Router::new().route(
            "/webhook",
            axum::routing::post(|| async { axum::Json(good_response("NO", 0.7)) }),
        );
        let l = tokio::net::TcpListener::bind(addr).await.unwrap();
        let _ = axum::serve(l, app).await;
    });
    let a = resolve(&format!("http://{addr}/webhook"), None)
        .await
        .expect("answered after a refused connection");
    assert!(!a.determination);
    assert!(
        a.notes
            .iter()
            .any(|n| n.starts_with("attempt 1") && n.contains("connection failed")),
        "{:?}",
        a.notes
    );
    late.abort();
}

#[tokio::test]
async fn a_4xx_is_not_retried_and_retries_stay_inside_the_stage_budget() {
    let peer = factagora_peer::spawn(None, B::Status(400)).await;
    let err = resolve(&peer.url, None).await.unwrap_err();
    assert!(
        matches!(err, WorkerFailure::HttpStatus { status: 400, .. }),
        "{err}"
    );
    assert_eq!(peer.requests().len(), 1, "a 4xx is not retried");

    // a 400 ms budget has room for one retry (after 250 ms), not for the second (500 ms)
    let peer = factagora_peer::spawn(None, B::Status(500)).await;
    let endpoint: Url = peer.url.parse().unwrap();
    let started = std::time::Instant::now();
    let err = proto(None)
        .resolve(&client(400), &endpoint, &request())
        .await
        .unwrap_err();
    // a second retry would start at 250 + 500 ms; the margin above 400 ms is for a
    // loaded CI machine (450 ms failed once with three tests at a time)
    assert!(
        started.elapsed() < Duration::from_millis(700),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(peer.requests().len(), 2);
    match err {
        WorkerFailure::Retried { attempts, last } => {
            assert_eq!(attempts.len(), 1);
            assert!(matches!(
                *last,
                WorkerFailure::HttpStatus { status: 500, .. }
            ));
        }
        other => panic!("expected Retried, got {other}"),
    }
}

#[tokio::test]
async fn hanging_agent_times_out() {
    let peer = factagora_peer::spawn(None, B::Hang).await;
    let endpoint: Url = peer.url.parse().unwrap();
    let err = proto(None)
        .resolve(&client(400), &endpoint, &request())
        .await
        .unwrap_err();
    assert_eq!(err, WorkerFailure::Timeout { after_ms: 400 });
}

#[tokio::test]
async fn soft_quality_warnings_become_notes_not_rejections() {
    let mut reply = good_response("YES", 0.97);
    reply["reactCycle"]["actions"] =
        json!([{"type": "api_call", "query": "GET /v1/latest", "result": "value=105"}]);
    reply["reactCycle"]["evidence"] = json!([
        {"type": "link", "title": "Feed page", "url": "https://feed.example/page", "reliability": 0.6}
    ]);
    reply["reactCycle"]["synthesisThought"] = json!("The feed crossed the threshold.");
    let peer = factagora_peer::spawn(None, B::Reply(reply)).await;
    let a = resolve(&peer.url, None).await.unwrap();
    assert!(a.determination);
    let notes = a.notes.join("\n");
    for needle in [
        "confidence 0.97 is above 0.95 without high-reliability evidence",
        "only 1 evidence item(s); the spec recommends at least 3",
        "no web_search action backs the external claims",
        "synthesisThought is too brief (31 characters; under 100)",
    ] {
        assert!(notes.contains(needle), "{needle:?} in {notes}");
    }
    assert_eq!(a.notes.len(), 4, "{notes}");
}

#[tokio::test]
async fn round_two_carries_the_peers_arguments_by_label_only() {
    // The agent said YES in round 1 and switches to NO in round 2.
    let peer = factagora_peer::spawn(
        Some(TOKEN),
        B::PerRound(
            Box::new(B::Reply(good_response("YES", 0.8))),
            Box::new(B::Reply(good_response("NO", 0.65))),
        ),
    )
    .await;
    let endpoint: Url = peer.url.parse().unwrap();
    let p = proto(Some(TOKEN));
    let c = client(2000);
    let own = p.resolve(&c, &endpoint, &request()).await.unwrap();
    let long_evidence = format!("W1 reasoning. {}", "x".repeat(3000));
    let peers = vec![
        PeerAnswer {
            label: "W1".into(),
            answer: answer(false, 0.8, &long_evidence, false).into(),
        },
        PeerAnswer {
            label: "W3".into(),
            answer: answer(false, 0.5, "Not enough data either way.", true).into(),
        },
    ];
    let challenges = vec!["ignored free-text challenge".to_string()];
    let out = p
        .challenge(
            &c,
            &endpoint,
            ChallengeRequest {
                request: &request(),
                label: "W2",
                own: &own,
                challenges: &challenges,
                peers: &peers,
            },
        )
        .await;
    assert_eq!(out.failure, None);
    assert_eq!(
        out.challenges,
        ["Round 2: respond to 2 other agents' arguments: W1 NO 80%, W3 NEUTRAL 50%"]
    );
    assert_eq!(out.responses.len(), 1);
    assert!(
        out.responses[0].starts_with(
            "Round 2: NO at 65% (position changed from YES in round 1). Synthesis: Both"
        ),
        "{}",
        out.responses[0]
    );
    assert!(out.responses[0].contains("Reasoning: The feed and two mirrors"));

    let got = peer.requests();
    assert_eq!(got.len(), 2);
    let (r1, r2) = (&got[0].body, &got[1].body);
    assert_eq!(got[1].authorization.as_deref(), Some("Bearer tok-123"));
    assert_eq!(r2["roundNumber"], 2);
    assert_eq!(r2["predictionId"], r1["predictionId"]);
    assert_eq!(r2["title"], r1["title"]);
    let args = r2["existingArguments"].as_array().unwrap();
    assert_eq!(args.len(), 2);
    assert_eq!(args[0]["agentName"], "W1");
    assert_eq!(args[0]["position"], "NO");
    assert_eq!(args[0]["confidence"], 0.8);
    let reasoning = args[0]["reasoning"].as_str().unwrap();
    assert!(reasoning.starts_with("W1 reasoning."));
    assert!(reasoning.chars().count() <= 1001, "{}", reasoning.len());
    assert_eq!(args[1]["agentName"], "W3");
    assert_eq!(args[1]["position"], "NEUTRAL");
    // Labels, position, confidence and reasoning only: no addresses, endpoints, sources.
    for a in args {
        let mut keys: Vec<&str> = a.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort();
        assert_eq!(keys, ["agentName", "confidence", "position", "reasoning"]);
    }
    let text = r2.to_string();
    assert!(!text.contains("127.0.0.1") && !text.contains("ignored free-text"));
}

#[tokio::test]
async fn round_two_failures_keep_what_was_asked() {
    let own = answer(true, 0.8, "own", false);
    let peers = vec![PeerAnswer {
        label: "W2".into(),
        answer: answer(false, 0.6, "peer", false).into(),
    }];
    // (behaviour, expected failure kind, expected text)
    let cases = [
        (
            B::Error {
                code: "TIMEOUT".into(),
                message: "took too long".into(),
            },
            "rejected",
            "worker declined (TIMEOUT): took too long",
        ),
        (
            B::Reply(with(
                good_response("YES", 0.8),
                "/reactCycle/evidence",
                json!([]),
            )),
            "schema",
            "`reactCycle.evidence` has 0 entries; at least 1",
        ),
        (B::Hang, "timeout", "timed out after 400 ms"),
    ];
    for (behaviour, kind, text) in cases {
        let peer = factagora_peer::spawn(None, behaviour).await;
        let endpoint: Url = peer.url.parse().unwrap();
        let out = proto(None)
            .challenge(
                &client(400),
                &endpoint,
                ChallengeRequest {
                    request: &request(),
                    label: "W1",
                    own: &own,
                    challenges: &[],
                    peers: &peers,
                },
            )
            .await;
        assert_eq!(
            out.challenges,
            ["Round 2: respond to 1 other agent's arguments: W2 NO 60%"]
        );
        assert!(out.responses.is_empty());
        let failure = out.failure.expect("a failure");
        assert_eq!(failure.kind(), kind, "{failure}");
        assert!(failure.to_string().contains(text), "{failure}");
    }
}

#[tokio::test]
async fn a_round_of_factagora_workers_counts_neutral_as_an_abstention() {
    let yes = factagora_peer::spawn(Some(TOKEN), B::Reply(good_response("YES", 0.8))).await;
    let yes2 = factagora_peer::spawn(None, B::Reply(good_response("YES", 0.7))).await;
    let neutral = factagora_peer::spawn(None, B::Reply(good_response("NEUTRAL", 0.5))).await;
    let slot = |i: u8, url: &str, token: Option<&str>| WorkerSlot {
        address: alloy::primitives::Address::repeat_byte(i),
        target: Ok(WorkerTarget {
            endpoint: url.parse().unwrap(),
            protocol: Arc::new(proto(token)),
        }),
    };
    let mut wf = cresolver_pipeline::workflow::Workflow::default_named("factagora");
    wf.resolve.timeout_ms = 3000;
    wf.challenge.timeout_ms = 3000;
    let engine = Engine::with_evaluator(wf, StageClient::default_http(), Arc::new(RubricEvaluator));
    let out = engine
        .run(&RoundInput {
            market_id: 42u64.into(),
            question: request().question,
            deadline: None,
            reference_time: 1_780_272_000,
            workers: vec![
                slot(1, &yes.url, Some(TOKEN)),
                slot(2, &yes2.url, None),
                slot(3, &neutral.url, None),
            ],
            reputations: vec![Reputation::default(); 3],
        })
        .await
        .unwrap();
    assert!(out.tally.resolution);
    assert!(out.resolve.results[2].answer().unwrap().abstain);
    // the abstainer is scored and rewarded (50 multiplier: it did not vote with the
    // outcome) but weighs nothing in the vote
    let n = &out.tally.workers[2];
    assert!(n.responded && n.determination.is_none() && !n.voted_with_outcome);
    assert_eq!(n.vote_weight, 0.0);
    assert!(n.quality > 0.0);
    assert_eq!(
        n.weight as f64,
        (n.quality * 50.0 * n.reputation_factor).round()
    );
    assert_eq!(out.tally.no_weight, 0.0);
    assert_eq!(
        out.tally.yes_weight,
        out.tally.workers[0].vote_weight + out.tally.workers[1].vote_weight
    );
    // Every worker got round 2 with the two others under their labels.
    for (i, peer) in [&yes, &yes2, &neutral].into_iter().enumerate() {
        let got = peer.requests();
        assert_eq!(got.len(), 2, "worker {i}");
        let labels: Vec<Value> = got[1].body["existingArguments"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["agentName"].clone())
            .collect();
        // the two peers, under distinct labels of a random numbering (not the
        // evaluator's): never an address
        assert_eq!(labels.len(), 2, "worker {i}");
        assert_ne!(labels[0], labels[1], "worker {i}");
        assert!(
            labels
                .iter()
                .all(|l| ["W1", "W2", "W3"].contains(&l.as_str().unwrap())),
            "worker {i}: {labels:?}"
        );
        let ch = out.challenges[i].as_ref().unwrap();
        assert_eq!((ch.challenges.len(), ch.responses.len()), (1, 1));
        assert_eq!(ch.failure, None);
    }
}

#[tokio::test]
async fn the_token_goes_only_to_hosts_the_operator_listed() {
    // a worker registered its own webhook (here on loopback), which is not listed
    let peer = factagora_peer::spawn(None, B::Reply(good_response("YES", 0.8))).await;
    let endpoint: Url = peer.url.parse().unwrap();
    let unlisted = FactagoraProtocol::new(FactagoraConfig {
        token: Some("tok-123".into()),
        token_hosts: vec!["api.factagora.example".into()],
    });
    let a = unlisted
        .resolve(&client(2000), &endpoint, &request())
        .await
        .unwrap();
    assert_eq!(
        peer.requests()[0].authorization,
        None,
        "the token left for an unlisted host"
    );
    assert!(
        a.notes.iter().any(|n| n.contains(
            "no credential sent: host `127.0.0.1` is not listed in protocols.factagora.token_hosts"
        )),
        "the transcript says so: {:?}",
        a.notes
    );
    // listed (with its port): sent
    let port = endpoint.port().unwrap();
    let listed = FactagoraProtocol::new(FactagoraConfig {
        token: Some("tok-123".into()),
        token_hosts: vec![format!("127.0.0.1:{port}")],
    });
    listed
        .resolve(&client(2000), &endpoint, &request())
        .await
        .unwrap();
    assert_eq!(
        peer.requests()[1].authorization.as_deref(),
        Some("Bearer tok-123")
    );
}
