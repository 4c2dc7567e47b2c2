//! Worker protocol, client and fan-out against real HTTP servers on 127.0.0.1.

use crate::common;

use common::*;
use cresolver_core::{QuorumRule, Reputation};
use cresolver_devnet::agent::{DeterminationMode, FailureMode};
use cresolver_evaluate::RubricEvaluator;
use cresolver_pipeline::round::{Engine, RoundError, RoundInput};
use cresolver_pipeline::workflow::Workflow;
use cresolver_workers::fanout::{WorkerSlot, resolve_stage};
use cresolver_workers::{ResolveRequest, WorkerFailure};
use std::sync::Arc;
use std::time::Duration;

fn workflow(resolve_ms: u64, challenge_ms: u64) -> Workflow {
    let mut wf = Workflow::default_named("test");
    wf.resolve.timeout_ms = resolve_ms;
    wf.challenge.timeout_ms = challenge_ms;
    wf.resolve.retry_backoff_ms = 20;
    wf
}

fn engine(wf: Workflow) -> Engine {
    Engine::with_evaluator(
        wf,
        cresolver_workers::StageClient::default_http(),
        Arc::new(RubricEvaluator),
    )
}

fn input(slots: Vec<WorkerSlot>) -> RoundInput {
    let n = slots.len();
    RoundInput {
        market_id: 3u64.into(),
        question: "Will the reference feed report YES?".into(),
        deadline: None,
        reference_time: 1_780_272_000,
        workers: slots,
        reputations: vec![Reputation::default(); n],
    }
}

fn request() -> ResolveRequest {
    ResolveRequest {
        market_id: 3,
        question: "q?".into(),
        deadline: None,
        context: None,
    }
}

#[tokio::test]
async fn each_failure_lands_in_its_typed_reason() {
    let good = agent(behaviour(DeterminationMode::Yes, 0.8)).await;
    let slow = agent(cresolver_devnet::agent::AgentBehaviour {
        latency: Duration::from_secs(5),
        ..behaviour(DeterminationMode::Yes, 0.8)
    })
    .await;
    let e500 = agent(failing(FailureMode::Error)).await;
    let garbage = agent(failing(FailureMode::Garbage)).await;
    let conf = agent(failing(FailureMode::BadConfidence)).await;
    let huge = agent(failing(FailureMode::Huge)).await;
    let (_held, never) = never_accepting();
    let refused = closed_port_url();
    let slots = vec![
        slot(1, &good),
        slot(2, &slow),
        slot(3, &e500),
        slot(4, &garbage),
        slot(5, &conf),
        slot(6, &huge),
        slot(7, &never),
        slot(8, &refused),
        WorkerSlot {
            address: addr(9),
            target: Err("no A2A endpoint".into()),
        },
    ];
    let wf = workflow(800, 800);
    let e = engine(wf.clone());
    let client = cresolver_workers::StageClient::new(
        cresolver_workers::StageClient::default_http(),
        cresolver_workers::StageConfig {
            timeout: Duration::from_millis(800),
            max_body_bytes: 64 * 1024,
            connect_retries: 1,
            retry_backoff: Duration::from_millis(20),
        },
        Arc::new(tokio::sync::Semaphore::new(16)),
    );
    let stage = resolve_stage(&client, &slots, &request(), QuorumRule::Bft, None).await;
    let kinds: Vec<&str> = stage
        .results
        .iter()
        .map(|r| {
            r.outcome
                .as_ref()
                .map(|_| "ok")
                .unwrap_or_else(|f| f.kind())
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "ok",
            "timeout",
            "http_status",
            "invalid_json",
            "schema",
            "oversize",
            "timeout",
            "connect",
            "not_discovered"
        ]
    );
    assert!(matches!(
        stage.results[2].outcome,
        Err(WorkerFailure::HttpStatus { status: 500, .. })
    ));
    let conf_err = stage.results[4].outcome.as_ref().unwrap_err().to_string();
    assert!(
        conf_err.contains("1.7") && conf_err.contains("confidence"),
        "{conf_err}"
    );
    assert_eq!(
        stage.results[5].outcome,
        Err(WorkerFailure::Oversize { limit: 64 * 1024 })
    );
    assert_eq!(stage.valid, 1);
    assert_eq!(stage.registered, 9);
    assert_eq!(stage.required, 6);
    assert!(!stage.quorum_met);

    // The same set through the engine: the round fails and names every failure.
    let err = e.run(&input(slots)).await.unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, RoundError::QuorumNotMet(_)));
    assert!(
        msg.contains("1 of 9 registered workers answered validly, 6 required"),
        "{msg}"
    );
    for needle in [
        "timed out",
        "HTTP status 500",
        "invalid JSON",
        "schema violation",
        "exceeds",
        "connection failed",
        "no A2A endpoint",
    ] {
        assert!(msg.contains(needle), "missing {needle:?} in {msg}");
    }
}

#[tokio::test]
async fn short_defence_is_recorded_and_kept_by_position() {
    let a = agent(behaviour(DeterminationMode::Yes, 0.8)).await;
    let b = agent(failing(FailureMode::ShortDefence)).await;
    let out = engine(workflow(2000, 2000))
        .run(&input(vec![slot(1, &a), slot(2, &b)]))
        .await
        .unwrap();
    let full = out.challenges[0].as_ref().unwrap();
    assert_eq!(full.responses.len(), 3);
    assert_eq!(full.failure, None);
    let short = out.challenges[1].as_ref().unwrap();
    assert_eq!(short.challenges.len(), 3);
    assert_eq!(short.responses.len(), 2);
    assert!(matches!(short.failure, Some(WorkerFailure::Schema { .. })));
    // Fewer answers cost collaboration score, nothing else.
    let (sa, sb) = (out.scores[0].unwrap(), out.scores[1].unwrap());
    assert!(
        sb.collaboration < sa.collaboration,
        "{} vs {}",
        sb.collaboration,
        sa.collaboration
    );
    assert!(out.tally.workers.iter().all(|w| w.responded));
}

#[tokio::test]
async fn challenge_texts_follow_agreement() {
    let yes = agent(behaviour(DeterminationMode::Yes, 0.82)).await;
    let no = agent(behaviour(DeterminationMode::No, 0.6)).await;
    let out = engine(workflow(2000, 2000))
        .run(&input(vec![slot(1, &yes), slot(2, &no)]))
        .await
        .unwrap();
    let c = &out.challenges[0].as_ref().unwrap().challenges;
    assert!(c[0].ends_with("the answer is YES?"), "{}", c[0]);
    assert!(c[1].starts_with("Your confidence is 82%"), "{}", c[1]);
    let yes2 = agent(behaviour(DeterminationMode::Yes, 0.7)).await;
    let out = engine(workflow(2000, 2000))
        .run(&input(vec![slot(1, &yes), slot(2, &yes2)]))
        .await
        .unwrap();
    assert!(out.challenges[1].as_ref().unwrap().challenges[0].starts_with("All workers agree"));
}

#[tokio::test]
async fn quorum_boundaries_over_registered_set() {
    for n in 1..=10usize {
        let need = QuorumRule::Bft.required(n);
        for valid in [need, need - 1] {
            let mut slots = Vec::new();
            for i in 0..n {
                if i < valid {
                    slots.push(slot(
                        i as u8 + 1,
                        &agent(behaviour(DeterminationMode::Yes, 0.9)).await,
                    ));
                } else if i % 2 == 0 {
                    slots.push(slot(i as u8 + 1, &closed_port_url()));
                } else {
                    // discarded by discovery: still counted in n
                    slots.push(WorkerSlot {
                        address: addr(i as u8 + 1),
                        target: Err("tokenURI call failed".into()),
                    });
                }
            }
            let result = engine(workflow(2000, 2000)).run(&input(slots)).await;
            if valid == need && valid > 0 {
                let out = result.unwrap_or_else(|e| panic!("n={n} valid={valid}: {e}"));
                assert_eq!(out.tally.workers.len(), n);
                assert_eq!(out.tally.dim_scores().len(), 3 * n);
                // non-responders listed with weight 0 and (0,0,0), in registration order
                for (i, w) in out.tally.workers.iter().enumerate() {
                    assert_eq!(w.address, addr(i as u8 + 1));
                    assert_eq!(w.responded, i < valid, "n={n} i={i}");
                    if i >= valid {
                        assert_eq!(w.weight, 0);
                        assert_eq!(&out.tally.dim_scores()[3 * i..3 * i + 3], &[0, 0, 0]);
                    }
                }
            } else {
                match result {
                    Err(RoundError::QuorumNotMet(stage)) => {
                        assert_eq!(
                            (stage.registered, stage.required, stage.valid),
                            (n, need, valid),
                            "n={n}"
                        );
                    }
                    other => panic!("n={n} valid={valid}: expected quorum failure, got {other:?}"),
                }
            }
        }
    }
}

#[tokio::test]
async fn grace_cuts_stragglers_after_quorum() {
    let fast: Vec<String> =
        futures::future::join_all((0..2).map(|_| agent(behaviour(DeterminationMode::Yes, 0.9))))
            .await;
    let slow = agent(cresolver_devnet::agent::AgentBehaviour {
        latency: Duration::from_secs(20),
        ..behaviour(DeterminationMode::No, 0.9)
    })
    .await;
    let mut wf = workflow(30_000, 2_000);
    wf.quorum.grace_ms = 100;
    let out = engine(wf)
        .run(&input(vec![
            slot(1, &fast[0]),
            slot(2, &fast[1]),
            slot(3, &slow),
        ]))
        .await
        .unwrap();
    assert_eq!(
        out.resolve.results[2].outcome,
        Err(WorkerFailure::CutAfterQuorum)
    );
    assert!(out.tally.resolution);
    assert_eq!(out.tally.workers[2].weight, 0);
}

#[tokio::test]
async fn connect_retry_stays_inside_budget() {
    // A port that refuses: one retry, still a connect failure, well inside the budget.
    let refused = closed_port_url();
    let client = cresolver_workers::StageClient::new(
        cresolver_workers::StageClient::default_http(),
        cresolver_workers::StageConfig {
            timeout: Duration::from_millis(500),
            max_body_bytes: 4096,
            connect_retries: 3,
            retry_backoff: Duration::from_millis(300),
        },
        Arc::new(tokio::sync::Semaphore::new(4)),
    );
    let stage = resolve_stage(
        &client,
        &[slot(1, &refused)],
        &request(),
        QuorumRule::Bft,
        None,
    )
    .await;
    // 300 + 600 ms of backoff exceed the 500 ms budget: the stage timeout wins.
    assert_eq!(
        stage.results[0].outcome,
        Err(WorkerFailure::Timeout { after_ms: 500 })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_a_local_permit_is_not_charged_to_the_worker() {
    // 64 rounds at once on one engine whose calls share 8 permits; every worker answers
    // in 200 ms, well within its 1 s budget, but a call may wait seconds for a permit
    let agents = futures::future::join_all((0..3).map(|_| {
        agent(cresolver_devnet::agent::AgentBehaviour {
            latency: Duration::from_millis(200),
            ..behaviour(DeterminationMode::Yes, 0.9)
        })
    }))
    .await;
    let mut wf = workflow(1_000, 1_000);
    wf.resolve.concurrency = 8;
    let e = engine(wf);
    let rounds = (0..64).map(|_| {
        let slots: Vec<WorkerSlot> = agents
            .iter()
            .enumerate()
            .map(|(i, a)| slot(i as u8 + 1, a))
            .collect();
        let e = &e;
        async move { e.run(&input(slots)).await }
    });
    let started = std::time::Instant::now();
    let results = futures::future::join_all(rounds).await;
    // the permits really were the bottleneck: 64 × 3 calls of 200 ms, 8 at a time
    assert!(started.elapsed() >= Duration::from_millis(2_400));
    for r in results {
        let out = r.unwrap();
        for w in &out.tally.workers {
            assert!(
                w.responded,
                "a worker was charged for the local wait: {w:?}"
            );
        }
    }
}

#[tokio::test]
async fn an_answer_with_too_many_sources_is_kept_with_the_list_cut() {
    use axum::{Json, Router, routing::post};
    // an A2A worker citing 70 sources, one of them far over the size bound
    let mut sources: Vec<String> = (0..70)
        .map(|i| format!("https://example.org/{i}"))
        .collect();
    sources[3] = format!("https://example.org/{}", "x".repeat(3000));
    let body = serde_json::json!({
        "determination": true,
        "confidence": 0.8,
        "evidence": "The reference feed reported YES.",
        "sources": sources,
    });
    let app = Router::new().route(
        "/a2a/resolve",
        post(move || {
            let body = body.clone();
            async move { Json(body) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let client = cresolver_workers::StageClient::new(
        cresolver_workers::StageClient::default_http(),
        cresolver_workers::StageConfig {
            timeout: Duration::from_secs(5),
            max_body_bytes: 256 * 1024,
            connect_retries: 1,
            retry_backoff: Duration::from_millis(20),
        },
        Arc::new(tokio::sync::Semaphore::new(4)),
    );
    let stage = resolve_stage(&client, &[slot(1, &url)], &request(), QuorumRule::Bft, None).await;
    let a = stage.results[0]
        .outcome
        .as_ref()
        .expect("the answer is kept");
    assert_eq!(a.sources.len(), cresolver_workers::protocol::MAX_SOURCES);
    assert_eq!(
        a.sources[3], "https://example.org/4",
        "the over-long one dropped"
    );
    assert_eq!(
        a.cuts,
        vec![cresolver_workers::ListCut {
            field: "sources".into(),
            received: 70,
            kept: 64,
            oversize: 1,
            max: 64,
        }]
    );
    let recorded = serde_json::to_value(&stage).unwrap();
    assert_eq!(
        recorded.pointer("/results/0/outcome/Ok/cuts/0/received"),
        Some(&serde_json::json!(70)),
        "the cut is in the transcript: {recorded}"
    );
}
