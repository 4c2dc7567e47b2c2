//! Tests of the Chorus adapter against a real agent on 127.0.0.1: the Job Request shape,
//! every Job Result behaviour landing in its typed reason, and the challenge job.

use crate::common::chorus_peer::{self, ChorusBehaviour as B, answer};
use cresolver_workers::chorus::{ChorusConfig, ChorusProtocol};
use cresolver_workers::{
    ChallengeRequest, ResolveAnswer, ResolveRequest, StageClient, StageConfig, WorkerFailure,
    WorkerProtocol,
};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use url::Url;

const ORCHESTRATOR: &str = "5d2f8c1e-3b4a-4c6d-8e9f-0a1b2c3d4e5f";

fn client(timeout_ms: u64) -> StageClient {
    StageClient::new(
        StageClient::default_http(),
        StageConfig {
            timeout: Duration::from_millis(timeout_ms),
            max_body_bytes: 64 * 1024,
            connect_retries: 0,
            retry_backoff: Duration::from_millis(10),
        },
        Arc::new(tokio::sync::Semaphore::new(16)),
    )
}

fn settings() -> ChorusConfig {
    ChorusConfig {
        budget: 0.25,
        orchestrator_id: ORCHESTRATOR.into(),
        ..ChorusConfig::default()
    }
}

fn request() -> ResolveRequest {
    ResolveRequest {
        market_id: 9,
        question: "Will the reference feed exceed 100?".into(),
        deadline: Some(1_798_761_599),
        context: None,
    }
}

async fn resolve_with(
    s: ChorusConfig,
    url: &str,
    timeout_ms: u64,
) -> Result<ResolveAnswer, WorkerFailure> {
    let endpoint: Url = url.parse().unwrap();
    ChorusProtocol::new(s)
        .resolve(&client(timeout_ms), &endpoint, &request())
        .await
}

fn is_uuid_v4(s: &str) -> bool {
    uuid::Uuid::parse_str(s).is_ok_and(|u| u.get_version_num() == 4)
}

#[tokio::test]
async fn success_maps_output_data_and_the_job_follows_the_spec() {
    let peer = chorus_peer::spawn(vec![("market_resolve", B::Answer(answer(true, 0.8)))]).await;
    let a = resolve_with(settings(), &peer.url, 2000).await.unwrap();
    assert!(a.determination && !a.abstain);
    assert_eq!(a.confidence, 0.8);
    assert_eq!(a.sources, ["https://feed.example/page"]);
    assert!(a.evidence.contains("above the threshold"));
    assert!(a.notes.is_empty(), "{:?}", a.notes);
    // A second job gets a fresh id.
    resolve_with(settings(), &peer.url, 2000).await.unwrap();

    let jobs = peer.jobs();
    assert_eq!(jobs.len(), 2);
    let job = &jobs[0];
    assert!(is_uuid_v4(job["job_id"].as_str().unwrap()), "{job}");
    assert_ne!(job["job_id"], jobs[1]["job_id"]);
    assert_eq!(job["orchestrator_id"], ORCHESTRATOR);
    assert_eq!(job["skill_name"], "market_resolve");
    assert_eq!(
        job["input_data"],
        json!({"market_id": 9, "question": "Will the reference feed exceed 100?", "deadline": 1_798_761_599u64})
    );
    assert_eq!(job["budget"], 0.25);
    assert_eq!(job["currency"], "chorus_credits_v1");
    let ts = job["timestamp_utc"].as_str().unwrap();
    assert!(
        ts.len() == 20 && ts.ends_with('Z') && &ts[10..11] == "T",
        "{ts}"
    );
    assert!(job.get("callback_url").is_none());
}

#[tokio::test]
async fn failure_results_are_rejected_with_the_spec_code() {
    // The agent has no such skill: it answers FAILURE with SKILL_MISMATCH.
    let peer = chorus_peer::spawn(vec![("market_resolve", B::Answer(answer(true, 0.8)))]).await;
    let err = resolve_with(
        ChorusConfig {
            skill: "weather_forecast".into(),
            ..settings()
        },
        &peer.url,
        2000,
    )
    .await
    .unwrap_err();
    assert_eq!(
        err,
        WorkerFailure::Rejected {
            code: "SKILL_MISMATCH".into(),
            detail: "SKILL_MISMATCH: no skill named weather_forecast".into()
        }
    );
    for (msg, code) in [
        (
            "Offered 0.25 but BUDGET_INSUFFICIENT",
            "BUDGET_INSUFFICIENT",
        ),
        ("EXECUTION_ERROR: model crashed", "EXECUTION_ERROR"),
        ("something else went wrong", "FAILURE"),
    ] {
        let peer = chorus_peer::spawn(vec![("market_resolve", B::Fail(msg.into()))]).await;
        let err = resolve_with(settings(), &peer.url, 2000).await.unwrap_err();
        assert_eq!(
            err,
            WorkerFailure::Rejected {
                code: code.into(),
                detail: msg.into()
            }
        );
    }
}

#[tokio::test]
async fn invalid_results_are_schema_failures_naming_the_field() {
    let mut no_confidence = answer(true, 0.8);
    no_confidence.as_object_mut().unwrap().remove("confidence");
    let cases = [
        (
            B::WrongJobId(answer(true, 0.8)),
            "`job_id` \"00000000-0000-4000-8000-000000000000\" does not echo the request's job_id",
        ),
        (
            B::Answer(no_confidence),
            "in `output_data`: `confidence` is missing",
        ),
        (
            B::Answer(
                json!({"determination": "YES", "confidence": 0.8, "evidence": "e", "sources": []}),
            ),
            "in `output_data`: `determination` must be a boolean",
        ),
        (
            B::Status("DONE".into()),
            "`status` \"DONE\" is not SUCCESS, FAILURE or PENDING",
        ),
    ];
    for (behaviour, needle) in cases {
        let peer = chorus_peer::spawn(vec![("market_resolve", behaviour)]).await;
        let err = resolve_with(settings(), &peer.url, 2000).await.unwrap_err();
        assert!(
            matches!(&err, WorkerFailure::Schema { detail } if detail.starts_with(needle)),
            "{needle}: {err}"
        );
    }
}

#[tokio::test]
async fn pending_is_a_typed_failure_about_asynchronous_delivery() {
    let peer = chorus_peer::spawn(vec![("market_resolve", B::Pending)]).await;
    match resolve_with(settings(), &peer.url, 2000).await.unwrap_err() {
        WorkerFailure::Rejected { code, detail } => {
            assert_eq!(code, "PENDING");
            assert!(detail.contains("callback_url"), "{detail}");
            assert!(detail.contains("not support"), "{detail}");
        }
        other => panic!("expected Rejected, got {other}"),
    }
}

#[tokio::test]
async fn hanging_agent_times_out() {
    let peer = chorus_peer::spawn(vec![("market_resolve", B::Hang)]).await;
    let err = resolve_with(settings(), &peer.url, 400).await.unwrap_err();
    assert_eq!(err, WorkerFailure::Timeout { after_ms: 400 });
}

fn own() -> ResolveAnswer {
    ResolveAnswer {
        determination: true,
        confidence: 0.8,
        evidence: "e".into(),
        sources: vec![],
        abstain: false,
        notes: vec![],
        cuts: vec![],
    }
}

fn texts() -> Vec<String> {
    vec![
        "Other workers reached the opposite conclusion. Why YES?".into(),
        "Your confidence is 80%. What would change your mind?".into(),
        "Identify the weakest point in your analysis and defend it.".into(),
    ]
}

async fn challenge(
    s: ChorusConfig,
    url: &str,
    challenges: &[String],
) -> cresolver_workers::ChallengeOutcome {
    let endpoint: Url = url.parse().unwrap();
    ChorusProtocol::new(s)
        .challenge(
            &client(2000),
            &endpoint,
            ChallengeRequest {
                request: &request(),
                label: "W1",
                own: &own(),
                challenges,
                peers: &[],
            },
        )
        .await
}

#[tokio::test]
async fn challenge_job_matches_responses_by_position() {
    let peer = chorus_peer::spawn(vec![("market_challenge", B::Defend { short: 0 })]).await;
    let out = challenge(settings(), &peer.url, &texts()).await;
    assert_eq!(out.failure, None);
    assert_eq!(out.challenges, texts());
    assert_eq!(out.responses.len(), 3);
    assert!(out.responses[2].starts_with("Defence 3:"));
    let jobs = peer.jobs();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0]["skill_name"], "market_challenge");
    assert_eq!(
        jobs[0]["input_data"],
        json!({"market_id": 9, "question": "Will the reference feed exceed 100?", "challenges": texts()})
    );
    assert!(is_uuid_v4(jobs[0]["job_id"].as_str().unwrap()));

    // A short defence keeps what arrived and says why.
    let peer = chorus_peer::spawn(vec![("market_challenge", B::Defend { short: 1 })]).await;
    let out = challenge(settings(), &peer.url, &texts()).await;
    assert_eq!(out.responses.len(), 2);
    assert!(
        matches!(&out.failure, Some(WorkerFailure::Schema { detail }) if detail.contains("2 entries for 3 challenges")),
        "{:?}",
        out.failure
    );
}

#[tokio::test]
async fn challenge_failures_keep_the_challenges() {
    let cases: [(B, &str); 3] = [
        (B::Fail("AGENT_OFFLINE".into()), "rejected"),
        (B::Pending, "rejected"),
        (B::Answer(json!({"answers": []})), "schema"),
    ];
    for (behaviour, kind) in cases {
        let peer = chorus_peer::spawn(vec![("market_challenge", behaviour)]).await;
        let out = challenge(settings(), &peer.url, &texts()).await;
        assert_eq!(out.challenges, texts());
        assert!(out.responses.is_empty());
        let f = out.failure.expect("a failure");
        assert_eq!(f.kind(), kind, "{f}");
    }
}

#[tokio::test]
async fn no_challenge_skill_means_no_call() {
    let peer = chorus_peer::spawn(vec![("market_challenge", B::Defend { short: 0 })]).await;
    let out = challenge(
        ChorusConfig {
            challenge_skill: None,
            ..settings()
        },
        &peer.url,
        &texts(),
    )
    .await;
    assert!(peer.jobs().is_empty());
    assert!(out.challenges.is_empty() && out.responses.is_empty());
    assert!(
        matches!(&out.failure, Some(WorkerFailure::Rejected { code, .. }) if code == "NO_CHALLENGE_SKILL"),
        "{:?}",
        out.failure
    );
}
