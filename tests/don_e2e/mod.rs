//! End-to-end: a resolver DON of real member processes (the `cresolver` binary, each
//! with its own key and its own store) against real HTTP workers, Chainlink's production
//! KeystoneForwarder (compiled from `@chainlink/contracts` 1.5.0) and a receiver that
//! checks the forwarder, on anvil. What is asserted is what the chain holds: one
//! resolution, delivered by one `report(...)` with exactly f+1 signatures of members,
//! whose raw report every member rebuilt itself.

mod byzantine;
use crate::common;
mod faults;

use alloy::primitives::{Address, B256, Bytes, U256};
use alloy::providers::Provider;
use alloy::providers::ext::AnvilApi;
use alloy::rpc::types::Filter;
use alloy::signers::local::PrivateKeySigner;
use alloy::sol_types::{SolCall, SolEvent};
use axum::extract::State;
use common::chain::*;
use common::node::*;
use common::*;
use cresolver_chain::bindings::IKeystoneForwarder;
use cresolver_core::don::forwarder_digest;
use cresolver_devnet::agent::DeterminationMode;
use cresolver_don::{DonConfig, MemberConfig};
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// A DON on the devnet: its members' keys, dirs, ports and processes.
pub struct Dn {
    /// The devnet and its market, joined by the workers.
    pub s: MarketSetup,
    /// The KeystoneForwarder the DON's reports go through.
    pub forwarder: Address,
    /// The receiver behind the forwarder, which resolves the market.
    pub receiver: Address,
    /// Each member's signing key.
    pub keys: Vec<PrivateKeySigner>,
    /// Each member's directory: its config, store and log.
    pub dirs: Vec<TmpDir>,
    /// Each member's HTTP API port.
    pub api: Vec<u16>,
    /// The DON's configuration, shared by every member.
    pub cfg: DonConfig,
    /// Each member's process, while it runs.
    pub procs: Vec<Option<tokio::process::Child>>,
    /// Where each member listens, when that is not its configured URL's port (a proxy in
    /// front of it holds that port).
    pub listen: Vec<Option<u16>>,
    /// The members' RPC URL, when it is not anvil's own (a gate in front of it).
    pub rpc_url: Option<String>,
    wf: PathBuf,
}

/// Members sign with dev accounts 10.. (workers are 1..).
pub const FIRST_MEMBER_ACCOUNT: usize = 10;

impl Dn {
    /// `n` members with fault tolerance `f`; the forwarder is configured with
    /// `forwarder_signers` (default: the members).
    pub async fn new(
        s: MarketSetup,
        n: usize,
        f: u8,
        forwarder_signers: Option<Vec<Address>>,
    ) -> Dn {
        let keys: Vec<PrivateKeySigner> =
            s.dev.signers[FIRST_MEMBER_ACCOUNT..FIRST_MEMBER_ACCOUNT + n].to_vec();
        let dirs: Vec<TmpDir> = (0..n).map(|i| tmpdir(&format!("don{i}"))).collect();
        let api: Vec<u16> = (0..n).map(|_| free_port()).collect();
        let members = keys
            .iter()
            .map(|k| MemberConfig {
                address: k.address(),
                url: format!("http://127.0.0.1:{}", free_port()).parse().unwrap(),
            })
            .collect();
        let cfg = DonConfig {
            don_id: 1,
            config_version: 1,
            f,
            listen: String::new(),
            members,
            attempt_timeout: Duration::from_millis(2_000),
            observation_grace: Duration::from_millis(200),
            transmit_delay: Duration::from_millis(2_000),
            max_attempts: 12,
        };
        let signers = forwarder_signers.unwrap_or_else(|| cfg.addresses());
        let forwarder = s
            .dev
            .deploy_keystone_forwarder(1, 1, f, signers)
            .await
            .unwrap();
        let receiver = s.dev.deploy_receiver(forwarder).await.unwrap();
        let wf = workflow_file(&dirs[0], |t| {
            t.replace("mode = \"direct\"", "mode = \"report\"")
        });
        Dn {
            s,
            forwarder,
            receiver,
            keys,
            dirs,
            api,
            cfg,
            procs: (0..n).map(|_| None).collect(),
            listen: vec![None; n],
            rpc_url: None,
            wf,
        }
    }

    /// Member `i`'s node config file.
    fn config_file(&self, i: usize) -> PathBuf {
        let mut cfg = node_config(&self.s, &self.dirs[i], self.wf.clone());
        if let Some(url) = &self.rpc_url {
            cfg.chain.rpc_url = url.clone();
        }
        cfg.submit.forwarder = Some(self.forwarder);
        cfg.submit.receiver = Some(self.receiver);
        cfg.api.listen = format!("127.0.0.1:{}", self.api[i]);
        let mut d = self.cfg.clone();
        let port = self.listen[i].unwrap_or(d.members[i].url.port().unwrap_or_default());
        d.listen = format!("127.0.0.1:{port}");
        cfg.don = Some(d);
        let path = self.dirs[i].join("node.toml");
        std::fs::write(&path, toml::to_string(&cfg).unwrap()).unwrap();
        path
    }

    /// Starts member `i` (its log in its dir's `node.log`, appended across restarts).
    pub fn spawn(&mut self, i: usize, crash_at: Option<&str>) {
        let config = self.config_file(i);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dirs[i].join("node.log"))
            .unwrap();
        let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_cresolver"));
        c.arg("node")
            .arg("--config")
            .arg(&config)
            .env(
                "CRESOLVER_PRIVATE_KEY",
                alloy::hex::encode(self.keys[i].to_bytes()),
            )
            .env("CRESOLVER_LOG", "info")
            .env_remove("CRESOLVER_TEST_CRASH_AT")
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .kill_on_drop(true);
        if let Some(point) = crash_at {
            c.env("CRESOLVER_TEST_CRASH_AT", point);
        }
        self.procs[i] = Some(c.spawn().unwrap());
    }

    /// Starts every member.
    pub fn spawn_all(&mut self) {
        for i in 0..self.keys.len() {
            self.spawn(i, None);
        }
    }

    /// Waits until the member endpoints of `members` accept connections.
    pub async fn wait_endpoints(&self, members: std::ops::Range<usize>) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while members.clone().any(|i| {
            let port = self.cfg.members[i].url.port().unwrap_or_default();
            std::net::TcpStream::connect(format!("127.0.0.1:{port}")).is_err()
        }) {
            assert!(Instant::now() < deadline, "members did not start");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Member `i`'s log so far.
    pub fn log(&self, i: usize) -> String {
        std::fs::read_to_string(self.dirs[i].join("node.log")).unwrap_or_default()
    }

    /// Member `i`'s view of the round (`GET /rounds/{id}`), once its API answers.
    pub async fn round(&self, i: usize) -> Option<Value> {
        let url = format!(
            "http://127.0.0.1:{}/rounds/{}",
            self.api[i], self.s.market_id
        );
        let r = reqwest::get(url).await.ok()?;
        if !r.status().is_success() {
            return None;
        }
        r.json().await.ok()
    }

    /// Waits until member `i` reports a final state for the round.
    pub async fn wait_member_final(&self, i: usize, within: Duration) -> Value {
        let deadline = Instant::now() + within;
        loop {
            if let Some(v) = self.round(i).await {
                let state = v["state"].as_str().unwrap_or_default().to_string();
                if ["confirmed", "finalized", "failed", "skipped"].contains(&state.as_str()) {
                    return v;
                }
            }
            assert!(
                Instant::now() < deadline,
                "member {i} did not finish the round in {within:?}; its log:\n{}",
                self.log(i)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits for the market's resolution on chain; returns how long it took.
    pub async fn wait_resolved(&self, within: Duration) -> Duration {
        let started = Instant::now();
        loop {
            if !resolved_events(&self.s).await.is_empty() {
                return started.elapsed();
            }
            assert!(
                started.elapsed() < within,
                "not resolved within {within:?}; member logs:\n{}",
                (0..self.keys.len())
                    .map(|i| format!("--- member {i}\n{}", tail(&self.log(i), 40)))
                    .collect::<Vec<_>>()
                    .join("\n")
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The forwarder's `report(...)` calls that delivered (`ReportProcessed.result`), with
    /// their raw report, context and signatures.
    pub async fn delivered(&self) -> Vec<IKeystoneForwarder::reportCall> {
        self.deliveries()
            .await
            .into_iter()
            .map(|(_, c)| c)
            .collect()
    }

    /// Every report the forwarder delivered, with the member that transmitted it.
    pub async fn deliveries(&self) -> Vec<(Address, IKeystoneForwarder::reportCall)> {
        let p = &self.s.dev.provider;
        let logs = p
            .get_logs(
                &Filter::new()
                    .address(self.forwarder)
                    .event_signature(IKeystoneForwarder::ReportProcessed::SIGNATURE_HASH)
                    .from_block(0u64),
            )
            .await
            .unwrap();
        let mut out = Vec::new();
        for l in logs {
            let ev = IKeystoneForwarder::ReportProcessed::decode_log(&l.inner).unwrap();
            if !ev.data.result {
                continue;
            }
            let tx = p
                .get_transaction_by_hash(l.transaction_hash.unwrap())
                .await
                .unwrap()
                .unwrap();
            use alloy::consensus::Transaction;
            out.push((
                tx.inner.signer(),
                IKeystoneForwarder::reportCall::abi_decode(tx.input()).unwrap(),
            ));
        }
        out
    }

    /// The checks every resolved DON round must pass: one resolution, one delivered
    /// report with exactly f+1 valid signatures of distinct members, and every member in
    /// `finished` holds that report, rebuilt by itself. Returns the delivered report.
    pub async fn assert_resolved_once(&self, finished: &[usize]) -> IKeystoneForwarder::reportCall {
        let events = resolved_events(&self.s).await;
        assert_eq!(events.len(), 1, "exactly one resolution");
        assert_eq!(events[0].resolver, self.receiver);
        let delivered = self.delivered().await;
        assert_eq!(delivered.len(), 1, "exactly one delivered report");
        let call = delivered[0].clone();
        assert_eq!(call.receiver, self.receiver);
        let f = usize::from(self.cfg.f);
        assert_eq!(call.signatures.len(), f + 1, "exactly f+1 signatures");
        let digest = forwarder_digest(&call.rawReport, &call.reportContext);
        let members = self.cfg.addresses();
        let mut signers = Vec::new();
        for sig in &call.signatures {
            assert_eq!(sig.len(), 65);
            assert!(sig[64] <= 1, "v is 0 or 1, as the forwarder wants");
            let who = cresolver_don::wire::recover(&digest, sig).unwrap();
            assert!(members.contains(&who), "signer {who} is a member");
            assert!(!signers.contains(&who), "distinct signers");
            signers.push(who);
        }
        // header: don id 1, config version 1, the execution id every member computed
        assert_eq!(&call.rawReport[37..41], &1u32.to_be_bytes());
        assert_eq!(&call.rawReport[41..45], &1u32.to_be_bytes());
        for &i in finished {
            let v = self.wait_member_final(i, Duration::from_secs(60)).await;
            assert_eq!(v["state"], "confirmed", "member {i}: {v}");
            let don = &v["outcome"]["don"];
            let report: Bytes = serde_json::from_value(don["report"].clone()).unwrap();
            assert_eq!(
                report, call.rawReport,
                "member {i} holds the delivered report"
            );
            assert_eq!(
                don["recomputed"], true,
                "member {i} rebuilt it from the set"
            );
            let exec: B256 = serde_json::from_value(don["execution_id"].clone()).unwrap();
            assert_eq!(&call.rawReport[1..33], exec.as_slice());
            assert!(don["set"].as_array().unwrap().len() > 2 * f);
        }
        call
    }
}

/// The last `n` lines of `s`.
pub fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A worker endpoint in front of reference agents that counts its resolve calls and
/// answers the `odd`-th one (1-based) from `other` instead of `main`.
#[derive(Clone)]
pub struct CountingWorker {
    /// The endpoint to register.
    pub url: String,
    /// How many resolve calls it received.
    pub resolves: Arc<AtomicUsize>,
}

struct ProxyState {
    main: String,
    other: String,
    odd: Option<usize>,
    /// Resolve calls after this many get HTTP 500.
    fail_after: Option<usize>,
    resolves: Arc<AtomicUsize>,
    http: reqwest::Client,
}

/// A [`CountingWorker`] in front of `main` that answers the `k`-th resolve call (1-based) from
/// `u` when `other` is `Some((u, k))`.
pub async fn counting_worker(main: String, other: Option<(String, usize)>) -> CountingWorker {
    counting_worker_with(main, other, None).await
}

/// [`counting_worker`] whose resolve calls after the first `fail_after` get HTTP 500.
pub async fn counting_worker_with(
    main: String,
    other: Option<(String, usize)>,
    fail_after: Option<usize>,
) -> CountingWorker {
    let resolves = Arc::new(AtomicUsize::new(0));
    let (other_url, odd) = match other {
        Some((u, k)) => (u, Some(k)),
        None => (main.clone(), None),
    };
    let state = Arc::new(ProxyState {
        main,
        other: other_url,
        odd,
        fail_after,
        resolves: resolves.clone(),
        http: reqwest::Client::new(),
    });
    let app = axum::Router::new().fallback(forward).with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    CountingWorker { url, resolves }
}

async fn forward(
    State(s): State<Arc<ProxyState>>,
    req: axum::extract::Request,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let path = req
        .uri()
        .path_and_query()
        .map(|p| p.to_string())
        .unwrap_or_default();
    let method = req.method().clone();
    let body = axum::body::to_bytes(req.into_body(), 4 << 20)
        .await
        .unwrap();
    let mut base = &s.main;
    if path.contains("resolve") {
        let k = s.resolves.fetch_add(1, Ordering::SeqCst) + 1;
        if s.odd == Some(k) {
            base = &s.other;
        }
        if s.fail_after.is_some_and(|n| k > n) {
            return (axum::http::StatusCode::INTERNAL_SERVER_ERROR, "down").into_response();
        }
    }
    let r = s
        .http
        .request(method, format!("{}{}", base.trim_end_matches('/'), path))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = axum::http::StatusCode::from_u16(r.status().as_u16()).unwrap();
    let bytes = r.bytes().await.unwrap();
    (status, [("content-type", "application/json")], bytes).into_response()
}

/// A market whose three workers sit behind counting proxies: YES 0.9, YES 0.8, NO 0.6.
pub async fn counted_market() -> (MarketSetup, Vec<CountingWorker>) {
    counted_market_answering_after(Duration::ZERO).await
}

/// [`counted_market`] whose workers answer each call after `latency`.
pub async fn counted_market_answering_after(
    latency: Duration,
) -> (MarketSetup, Vec<CountingWorker>) {
    let mut workers = Vec::new();
    for (det, conf) in [
        (DeterminationMode::Yes, 0.9),
        (DeterminationMode::Yes, 0.8),
        (DeterminationMode::No, 0.6),
    ] {
        let b = cresolver_devnet::agent::AgentBehaviour {
            latency,
            ..behaviour(det, conf)
        };
        workers.push(counting_worker(agent(b).await, None).await);
    }
    let s = market_with_workers(
        workers
            .iter()
            .map(|w| AgentUri::Endpoint(w.url.clone()))
            .collect(),
    )
    .await;
    (s, workers)
}

#[tokio::test]
async fn four_members_resolve_once_through_the_production_forwarder() {
    let (s, workers) = counted_market().await;
    let mut dn = Dn::new(s, 4, 1, None).await;
    dn.spawn_all();
    dn.s.dev.request_resolution(dn.s.market_id).await.unwrap();
    let took = dn.wait_resolved(Duration::from_secs(60)).await;
    eprintln!("4-member DON: resolved {took:?} after the request");
    let call = dn.assert_resolved_once(&[0, 1, 2, 3]).await;
    // the report's body is the tally of the agreed observations: every worker listed,
    // the two YES workers weighted, the market resolved YES
    let (_, body) = cresolver_core::report::split_raw_report(&call.rawReport).unwrap();
    let r = cresolver_core::decode_report(body).unwrap();
    assert_eq!(r.market_id, dn.s.market_id.into());
    assert_eq!(r.workers, dn.s.workers);
    assert!(r.resolution);
    let events = resolved_events(&dn.s).await;
    assert_eq!(events[0].resolution, r.resolution);
    // every member asked every worker once
    for w in &workers {
        assert_eq!(
            w.resolves.load(Ordering::SeqCst),
            4,
            "one resolve call per member"
        );
    }
    // the operator's view: each member's observation, the set, the signers, the transmitter
    let v = dn.round(0).await.unwrap();
    let don = &v["outcome"]["don"];
    assert_eq!(don["members"].as_array().unwrap().len(), 4);
    assert_eq!(don["signers"].as_array().unwrap().len(), 2);
    assert!(don["own_observation"]["workers"].as_array().unwrap().len() == 3);
    // the status page's view of the round: the set, the leader, the signers, the transmitter
    let sv: Value = reqwest::get(format!(
        "http://127.0.0.1:{}/status/rounds/{}",
        dn.api[0], dn.s.market_id
    ))
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let d = &sv["don"];
    assert_eq!(d["members"], 4, "{sv}");
    assert_eq!(d["signers"].as_array().unwrap().len(), 2);
    assert!(d["transmitter"].is_string(), "{sv}");
    assert!(d["set"].as_array().unwrap().len() >= 3);
    // the commit certificate: 2f+1 members' precommits decided the set
    let precommits = d["precommits"].as_array().unwrap();
    assert!(precommits.len() >= 3, "{sv}");
    assert_eq!(d["leader"], don["leader"]);
    // the live consensus view: the member, the quorum, nothing left in agreement
    let live: Value = reqwest::get(format!("http://127.0.0.1:{}/status/don", dn.api[0]))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(live["quorum"], 3, "{live}");
    assert_eq!(live["members"].as_array().unwrap().len(), 4);
    assert_eq!(live["executions"].as_array().unwrap().len(), 0, "{live}");
    // ... and the decision it reached stays in view: the set, the certificate, the
    // signers, the round and leader changes, and the transmitter
    let decided = &live["decided"][0];
    assert_eq!(live["decided"].as_array().unwrap().len(), 1, "{live}");
    assert_eq!(decided["execution_id"], don["execution_id"], "{live}");
    assert_eq!(decided["set"], d["set"], "{live}");
    assert_eq!(
        decided["precommits"].as_array().unwrap().len(),
        precommits.len()
    );
    assert_eq!(decided["signers"].as_array().unwrap().len(), 2);
    assert_eq!(decided["leader"], don["leader"]);
    assert!(decided["leader_changes"].is_u64(), "{live}");
    assert_eq!(decided["transmitter"], d["transmitter"], "{live}");
    // metrics of the agreement
    let m = reqwest::get(format!("http://127.0.0.1:{}/metrics", dn.api[0]))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        m.contains("cresolver_don_events_total{event=\"agreement\",detail=\"reached\"} 1"),
        "{m}"
    );
    // once anvil's finalized block (64 below the head) passes the resolution, every
    // member's round is final: the transmitter's by its transaction's block, the others'
    // (delivered by another member, no block of their own) by the market at that block
    dn.s.dev.provider.anvil_mine(Some(70), None).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    for i in 0..4 {
        loop {
            let state = dn.round(i).await.map(|v| v["state"].clone());
            if state.as_ref().and_then(Value::as_str) == Some("finalized") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "member {i}'s round is {state:?}, not finalized; its log:\n{}",
                dn.log(i)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

#[tokio::test]
async fn a_worker_that_answers_members_differently_is_counted_by_the_majority() {
    // worker 3 answers NO to three members and YES to one: its aggregate is NO, so the
    // market resolves NO... unless the majority is ignored. Workers 1 and 2 are split
    // YES / NO, so worker 3's aggregated position decides the market.
    let yes = agent(behaviour(DeterminationMode::Yes, 0.8)).await;
    let no = agent(behaviour(DeterminationMode::No, 0.8)).await;
    let w1 = counting_worker(yes.clone(), None).await;
    let w2 = counting_worker(no.clone(), None).await;
    let w3 = counting_worker(no.clone(), Some((yes.clone(), 2))).await;
    let s = market_with_workers(
        [&w1, &w2, &w3]
            .iter()
            .map(|w| AgentUri::Endpoint(w.url.clone()))
            .collect(),
    )
    .await;
    let mut dn = Dn::new(s, 4, 1, None).await;
    dn.spawn_all();
    dn.s.dev.request_resolution(dn.s.market_id).await.unwrap();
    dn.wait_resolved(Duration::from_secs(60)).await;
    let call = dn.assert_resolved_once(&[0, 1, 2, 3]).await;
    let (_, body) = cresolver_core::report::split_raw_report(&call.rawReport).unwrap();
    let r = cresolver_core::decode_report(body).unwrap();
    assert!(!r.resolution, "worker 3's majority (NO) decides");
    // one member saw worker 3 say YES: its own tally said YES, the DON's says NO
    let mut saw_yes = 0;
    for i in 0..4 {
        let v = dn.round(i).await.unwrap();
        let own = &v["outcome"]["don"]["own_observation"]["workers"][2]["answer"]["position"];
        if own == "yes" {
            saw_yes += 1;
        }
    }
    assert_eq!(saw_yes, 1, "exactly one member was told YES by worker 3");
    assert_eq!(w3.resolves.load(Ordering::SeqCst), 4);
}

#[test]
fn the_example_member_config_is_a_valid_member() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/don-member.toml");
    let cfg =
        cresolver_pipeline::config::NodeConfig::load(Some(&path), &Default::default()).unwrap();
    let don = cfg.don.expect("[don] in the example");
    assert_eq!(don.members.len(), 4);
    don.validate(don.members[0].address).unwrap();
    // a key that is not listed is refused with what to do
    let err = don
        .validate(Address::repeat_byte(9))
        .unwrap_err()
        .to_string();
    assert!(err.contains("not one of [don].members"), "{err}");
}

#[tokio::test]
async fn a_member_whose_own_round_missed_quorum_still_observes() {
    // workers 2 and 3 answer only the first three members that ask: the fourth misses its
    // own quorum (1 of 3) but still observes, so the observations make the set and the
    // aggregate (worker 1 by all, workers 2 and 3 by 3 = 2f+1, the least a worker needs to
    // count) meets the quorum. Members 0, 1 and 2 start first and member 3 only once
    // workers 2 and 3 have answered three times each: started together, the two workers
    // could each serve a different three.
    let yes = agent(behaviour(DeterminationMode::Yes, 0.8)).await;
    let w1 = counting_worker(yes.clone(), None).await;
    let w2 = counting_worker_with(yes.clone(), None, Some(3)).await;
    let w3 = counting_worker_with(yes.clone(), None, Some(3)).await;
    let s = market_with_workers(
        [&w1, &w2, &w3]
            .iter()
            .map(|w| AgentUri::Endpoint(w.url.clone()))
            .collect(),
    )
    .await;
    let mut dn = Dn::new(s, 4, 1, None).await;
    // the leader waits for member 3's observation (which comes only after member 3 is
    // started, below): with the default 200 ms a loaded machine may start member 3
    // after the others agreed without it, and it then finds the market resolved
    dn.cfg.observation_grace = Duration::from_millis(4_000);
    dn.cfg.attempt_timeout = Duration::from_millis(5_000);
    dn.spawn(0, None);
    dn.spawn(1, None);
    dn.spawn(2, None);
    dn.s.dev.request_resolution(dn.s.market_id).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while [&w2, &w3]
        .iter()
        .any(|w| w.resolves.load(Ordering::SeqCst) < 3)
    {
        assert!(Instant::now() < deadline, "members 0, 1 and 2 did not ask");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    dn.spawn(3, None);
    dn.wait_resolved(Duration::from_secs(60)).await;
    let call = dn.assert_resolved_once(&[0, 1, 2, 3]).await;
    let (_, body) = cresolver_core::report::split_raw_report(&call.rawReport).unwrap();
    let r = cresolver_core::decode_report(body).unwrap();
    assert!(
        r.weights.iter().all(|w| !w.is_zero()),
        "all three workers counted: {r:?}"
    );
    let mut missed = 0;
    for i in 0..4 {
        let v = dn.round(i).await.unwrap();
        let own = &v["outcome"]["don"]["own_observation"]["workers"][0];
        if own["failure"] == "local_quorum_not_met" {
            missed += 1;
        }
    }
    assert_eq!(
        missed, 1,
        "one member missed its own quorum and observed anyway"
    );
}

/// Every member transmits at once (1 ms between ranks) and the transmissions (two to
/// four) land in one block: the forwarder delivers the first, and the others are mined
/// and revert. Each member records the round confirmed, delivered by the member whose
/// transmission landed first, not skipped as if someone else had resolved the market.
/// The members reach anvil through a gate that holds their `eth_sendRawTransaction`s
/// until all four wait (at most 10 s): without it, the race into the pool depended on
/// timing (a member whose pre-flight runs once another transmission is pooled rightly
/// holds its own back), and once only the leader's was pooled.
#[tokio::test]
async fn members_whose_transmissions_lost_the_race_record_the_delivery() {
    let (s, _) = counted_market().await;
    let mut dn = Dn::new(s, 4, 1, None).await;
    dn.cfg.transmit_delay = Duration::from_millis(1);
    let gate =
        crate::common::send_gate::start(&dn.s.dev.rpc_url(), 4, Duration::from_secs(10)).await;
    dn.rpc_url = Some(gate.url.clone());
    dn.spawn_all();
    let p = dn.s.dev.provider.clone();
    let pending = || async {
        let status: Value = p.raw_request("txpool_status".into(), ()).await.unwrap();
        match &status["pending"] {
            Value::String(h) => u64::from_str_radix(h.trim_start_matches("0x"), 16).unwrap(),
            other => other.as_u64().unwrap(),
        }
    };
    // Automine goes off before the request, which is mined by hand: a member can
    // transmit before the request's receipt reaches this test (its receipt poll is
    // slower than the members), and with automine still on, that first transmission
    // was mined alone (seen in CI).
    p.anvil_set_auto_mine(false).await.unwrap();
    let mine_the_request = async {
        while pending().await < 1 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        p.evm_mine(None).await.unwrap();
    };
    let (requested, ()) = tokio::join!(
        dn.s.dev.request_resolution(dn.s.market_id),
        mine_the_request
    );
    requested.unwrap();
    // The transmissions wait in the pool together, then go into one block. A member
    // whose pre-flight runs once another member's transmission is in the pool sees the
    // report delivered there (its pre-flight's `eth_call` runs against the pending
    // block, alloy's default: `AlreadyAttempted`) and holds its own back, which is
    // right; the gate lets none into the pool before all four were sent. The test takes
    // all four, or at least two once the pool has not grown for 2 s (a member slower
    // than the gate's 10 s).
    let started = Instant::now();
    let mut seen = (0, Instant::now());
    let pooled = loop {
        let pending = pending().await;
        if pending != seen.0 {
            seen = (pending, Instant::now());
        }
        if pending >= 4 || (pending >= 2 && seen.1.elapsed() > Duration::from_secs(2)) {
            break pending;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{pending} transmissions in the pool; member logs:\n{}",
            (0..4)
                .map(|i| format!("--- member {i}\n{}", tail(&dn.log(i), 30)))
                .collect::<Vec<_>>()
                .join("\n")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    eprintln!("{pooled} transmissions go into one block");
    p.evm_mine(None).await.unwrap();
    p.anvil_set_auto_mine(true).await.unwrap();
    dn.wait_resolved(Duration::from_secs(60)).await;
    // every member confirmed, holding the delivered report (checked per member)
    dn.assert_resolved_once(&[0, 1, 2, 3]).await;
    let (by, _) = dn.deliveries().await.remove(0);
    let mut lost = 0;
    for i in 0..4 {
        let v = dn.round(i).await.unwrap();
        assert_eq!(
            v["outcome"]["don"]["transmitter"],
            serde_json::to_value(by).unwrap(),
            "member {i}: {v}"
        );
        let detail = v["outcome"]["confirmation"]["detail"]
            .as_str()
            .unwrap_or("");
        if detail.contains("was mined after it and reverted") {
            lost += 1;
        }
    }
    assert_eq!(
        lost,
        pooled - 1,
        "every transmission in the block but the first was mined after the delivery"
    );
}
