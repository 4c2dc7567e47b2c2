//! The network boundary at connect time: a worker's host name is checked at discovery
//! and again, by the HTTP client's resolver, at every connection. A name whose answer
//! flips from a public address to 127.0.0.1 between the two (DNS rebinding) is refused
//! at the call and reported as a refused endpoint; the worker behind it is never reached.

use crate::common;

use common::{agent, behaviour};
use cresolver_chain::discovery::validate_endpoint_with;
use cresolver_core::quorum::QuorumRule;
use cresolver_devnet::agent::DeterminationMode;
use cresolver_workers::fanout::{WorkerSlot, WorkerTarget, resolve_stage};
use cresolver_workers::netguard::{Lookup, NetPolicy};
use cresolver_workers::protocol::ResolveRequest;
use cresolver_workers::{A2aProtocol, StageClient, StageConfig, WorkerFailure};
use futures::future::BoxFuture;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// A resolver for one name whose first answer is a public-looking address and every
/// later answer 127.0.0.1 (the rebinding attack); other names fail.
struct Flipping {
    name: &'static str,
    calls: AtomicUsize,
}

impl Lookup for Flipping {
    fn lookup(
        &self,
        host: String,
        port: u16,
    ) -> BoxFuture<'static, std::io::Result<Vec<SocketAddr>>> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        let known = host == self.name;
        Box::pin(async move {
            if !known {
                return Err(std::io::Error::other("unknown name"));
            }
            let ip = if n == 0 { "93.184.216.34" } else { "127.0.0.1" };
            Ok(vec![SocketAddr::new(ip.parse().unwrap(), port)])
        })
    }
}

fn client(policy: &NetPolicy) -> StageClient {
    StageClient::new(
        policy.http_client(),
        StageConfig {
            timeout: Duration::from_millis(2_000),
            max_body_bytes: 64 * 1024,
            connect_retries: 0,
            retry_backoff: Duration::from_millis(20),
        },
        Arc::new(tokio::sync::Semaphore::new(4)),
    )
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
async fn a_name_that_rebinds_to_loopback_after_discovery_is_refused_at_the_call() {
    // a real worker on 127.0.0.1, reached through the name `worker.example`
    let url = agent(behaviour(DeterminationMode::Yes, 0.9)).await;
    let port = url
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches('/')
        .to_string();
    let endpoint = format!("http://worker.example:{port}/");
    let policy = NetPolicy {
        allow_private: false,
        lookup: Arc::new(Flipping {
            name: "worker.example",
            calls: AtomicUsize::new(0),
        }),
    };
    // discovery sees the public answer and accepts the endpoint
    let checked = validate_endpoint_with(&endpoint, &policy)
        .await
        .expect("accepted at discovery");
    let slots = vec![WorkerSlot {
        address: common::addr(1),
        target: Ok(WorkerTarget {
            endpoint: checked,
            protocol: Arc::new(A2aProtocol),
        }),
    }];
    // the call resolves the name again, gets 127.0.0.1, and is refused
    let stage = resolve_stage(&client(&policy), &slots, &request(), QuorumRule::Bft, None).await;
    match &stage.results[0].outcome {
        Err(f @ WorkerFailure::Refused { .. }) => {
            assert_eq!(f.kind(), "refused");
            assert!(f.to_string().contains("127.0.0.1"), "{f}");
        }
        other => panic!("the rebound call was not refused: {other:?}"),
    }
    assert!(!stage.quorum_met);

    // the same worker through a policy that allows private addresses is reached: the
    // refusal above came from the address policy, not from the setup
    let open = NetPolicy {
        allow_private: true,
        lookup: Arc::new(Flipping {
            name: "worker.example",
            calls: AtomicUsize::new(1),
        }),
    };
    let stage = resolve_stage(&client(&open), &slots, &request(), QuorumRule::Bft, None).await;
    assert!(
        stage.results[0].outcome.is_ok(),
        "{:?}",
        stage.results[0].outcome
    );
}

#[tokio::test]
async fn literal_private_addresses_and_local_names_are_refused_at_discovery() {
    let policy = NetPolicy::public_only();
    for url in [
        "http://127.0.0.1:8080/",
        "http://[::1]/",
        "http://[::ffff:10.0.0.1]/",
        "http://169.254.169.254/latest/meta-data/",
        "http://0.0.0.0/",
        "http://localhost/",
        "http://metadata.google.internal/",
    ] {
        assert!(
            validate_endpoint_with(url, &policy).await.is_err(),
            "{url} accepted"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_excluded_worker_is_logged_once_with_its_typed_reason() {
    use common::chain::{AgentUri, market_with_workers};
    use common::node::{node_process_with, resolved_events, tmpdir, workflow_file};
    let down = common::closed_port_url();
    let s = market_with_workers(vec![
        AgentUri::Endpoint(agent(behaviour(DeterminationMode::Yes, 0.9)).await),
        AgentUri::Endpoint(agent(behaviour(DeterminationMode::Yes, 0.8)).await),
        AgentUri::Endpoint(agent(behaviour(DeterminationMode::No, 0.6)).await),
        AgentUri::Endpoint(agent(behaviour(DeterminationMode::Yes, 0.7)).await),
        AgentUri::Endpoint(down),
        AgentUri::Raw("data:application/json,{not json".into()),
    ])
    .await;
    let dir = tmpdir("excluded-log");
    let wf = workflow_file(&dir, |t| t);
    let mut child = node_process_with(&s, &dir, &wf, None, &[("CRESOLVER_LOG", "info")]);
    s.dev.request_resolution(s.market_id).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while resolved_events(&s).await.is_empty() {
        assert!(std::time::Instant::now() < deadline, "not resolved");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    child.kill().await.unwrap();
    let log = std::fs::read_to_string(dir.join("node.log")).unwrap();
    let excluded: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("worker excluded from the round"))
        .collect();
    assert_eq!(excluded.len(), 2, "{log}");
    let down_worker = s.workers[4].to_string();
    let bad_registration = s.workers[5].to_string();
    assert!(
        excluded
            .iter()
            .any(|l| l.contains(&down_worker) && l.contains("reason=\"connect\"")),
        "{excluded:?}"
    );
    assert!(
        excluded
            .iter()
            .any(|l| l.contains(&bad_registration) && l.contains("reason=\"not_discovered\"")),
        "{excluded:?}"
    );
}
