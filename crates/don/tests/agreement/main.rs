//! The DON agreement end to end, with real HTTP between members on 127.0.0.1 (no mocks):
//! every member has its own key, its own `Don`, its own member API server and its own
//! persistence, and runs `Don::agree` for the same execution with its own observation.
//!
//! Every agreement is checked the way the forwarder and an operator would: exactly f+1
//! distinct member signers, each signature recovering to its signer over the forwarder
//! digest with the DON's report context, a set of at least 2f+1 observations each signed
//! by its observer, a report that is the set's aggregate rebuilt here, and the same bytes
//! on every member that agreed. Cases: all up, a member down, a silent leader, 7 members
//! with two down, a lying member, a restart from the persisted state, and the member
//! API's bounds. The lying and faulty members are in `liars.rs`.

use alloy::primitives::{Address, B256, Bytes, U256, keccak256};
use alloy::signers::local::PrivateKeySigner;
use cresolver_core::don::{
    Aggregate, Binding, Observation, ObservedAnswer, Position, WorkerObservation, aggregate,
    execution_id, forwarder_digest, report_context,
};
use cresolver_core::report::{ExecutionHeader, ReportMetadata, build_raw_report};
use cresolver_core::{MarketId, RoundKey};
use cresolver_don::member::BuildReport;
use cresolver_don::persist::{Lock, Persist};
use cresolver_don::server::serve;
use cresolver_don::wire::{self, Body, Envelope, SignedObservation};
use cresolver_don::{Agreed, Don, DonConfig, Job, MemberConfig};
use cresolver_metrics::Metrics;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

mod flood;
mod liars;
mod network;

const DON_ID: u32 = 7;
const VERSION: u32 = 2;
/// The fixed part of a raw report before its body (header 45 + metadata 64).
const HEADER_LEN: usize = 109;
/// How long a whole agreement may take here (a generous bound, not a timing assertion).
const AGREE_WITHIN: Duration = Duration::from_secs(30);

/// A running member API: its shutdown trigger and its task.
type Server = (oneshot::Sender<()>, JoinHandle<std::io::Result<()>>);

/// A DON under test: its members' keys, listeners and servers, and one execution.
struct Net {
    f: u8,
    keys: Vec<PrivateKeySigner>,
    members: Vec<MemberConfig>,
    listeners: Vec<Option<TcpListener>>,
    servers: Vec<Option<Server>>,
    exec: B256,
    market: Address,
    market_id: MarketId,
    workers: Vec<Address>,
}

impl Net {
    async fn new(n: usize, f: u8) -> Self {
        let keys: Vec<PrivateKeySigner> = (0..n).map(|_| PrivateKeySigner::random()).collect();
        let (mut members, mut listeners) = (Vec::new(), Vec::new());
        for k in &keys {
            let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let port = l.local_addr().expect("local addr").port();
            members.push(MemberConfig {
                address: k.address(),
                url: format!("http://127.0.0.1:{port}").parse().expect("url"),
            });
            listeners.push(Some(l));
        }
        let market = Address::repeat_byte(0xaa);
        let market_id = MarketId::from(42u64);
        // a fresh execution per test (the request tx hash is derived from a random key)
        let request_tx = keccak256(keys[0].address());
        Self {
            f,
            keys,
            members,
            listeners,
            servers: (0..n).map(|_| None).collect(),
            exec: execution_id(31_337, RoundKey::new(market, market_id), request_tx),
            market,
            market_id,
            workers: (0..3).map(|i| Address::repeat_byte(0xb0 + i)).collect(),
        }
    }

    fn addr(&self, i: usize) -> Address {
        self.keys[i].address()
    }

    fn addresses(&self) -> Vec<Address> {
        self.members.iter().map(|m| m.address).collect()
    }

    fn url(&self, i: usize) -> String {
        format!(
            "{}{}",
            self.members[i].url,
            wire::PATH.trim_start_matches('/')
        )
    }

    fn cfg(&self, i: usize) -> DonConfig {
        DonConfig {
            don_id: DON_ID,
            config_version: VERSION,
            f: self.f,
            listen: format!("127.0.0.1:{}", self.members[i].url.port().expect("port")),
            members: self.members.clone(),
            attempt_timeout: Duration::from_millis(800),
            observation_grace: Duration::from_millis(300),
            transmit_delay: Duration::from_millis(1_000),
            max_attempts: 10,
        }
    }

    fn leader(&self, attempt: u32) -> usize {
        let leader = self.cfg(0).leader(&self.exec, attempt);
        self.addresses()
            .iter()
            .position(|m| *m == leader)
            .expect("a member")
    }

    fn don(&self, i: usize, persist: Persist) -> Arc<Don> {
        let metrics = Arc::new(Metrics::new());
        Arc::new(
            Don::new(self.cfg(i), self.keys[i].clone(), persist, metrics).expect("valid config"),
        )
    }

    /// Builds member `i` and serves its member API on its listener.
    fn start(&mut self, i: usize, persist: Persist) -> Arc<Don> {
        let don = self.don(i, persist);
        let listener = self.listeners[i]
            .take()
            .expect("each member is started once");
        let (tx, rx) = oneshot::channel();
        let server = tokio::spawn(serve(listener, don.clone(), async move {
            let _ = rx.await;
        }));
        self.servers[i] = Some((tx, server));
        don
    }

    /// Stops member `i`'s server (graceful shutdown) and waits for it.
    async fn stop(&mut self, i: usize) {
        let (tx, server) = self.servers[i].take().expect("a running server");
        let _ = tx.send(());
        let done = tokio::time::timeout(AGREE_WITHIN, server).await;
        done.expect("the server stops")
            .expect("joins")
            .expect("served");
    }

    fn binding(&self) -> Binding {
        Binding {
            don_id: DON_ID,
            config_version: VERSION,
            execution_id: self.exec,
            market: self.market,
            market_id: self.market_id,
        }
    }

    /// Member `i`'s honest observation (`shift` moves its scores): worker 0 answers Yes,
    /// worker 1 No, worker 2 answers member 0 only (below the f+1 quorum).
    fn observation(&self, i: usize, shift: u8) -> Observation {
        let k = i as u8;
        let answer = |position, confidence_ppm, scores| {
            Some(ObservedAnswer {
                position,
                confidence_ppm,
                scores,
            })
        };
        let worker = |w: usize, answer: Option<ObservedAnswer>| WorkerObservation {
            address: self.workers[w],
            failure: answer.is_none().then(|| "timeout".to_string()),
            answer,
        };
        Observation {
            don_id: DON_ID,
            config_version: VERSION,
            execution_id: self.exec,
            market: self.market,
            market_id: self.market_id,
            observer: self.addr(i),
            timestamp: 1_700_000_000 + 7 * i as u32,
            workers: vec![
                worker(
                    0,
                    answer(
                        Position::Yes,
                        700_000 + 10_000 * i as u32,
                        [60 + k + shift, 70 + k, 50 + k],
                    ),
                ),
                worker(
                    1,
                    answer(
                        Position::No,
                        600_000 + 5_000 * i as u32,
                        [40 + k, 45, 30 + shift],
                    ),
                ),
                worker(
                    2,
                    (i == 0).then_some(ObservedAnswer {
                        position: Position::Yes,
                        confidence_ppm: 1,
                        scores: [1, 1, 1],
                    }),
                ),
            ],
        }
    }

    /// The report every member builds: a forwarder header with the aggregate's
    /// timestamp, and the aggregate itself (JSON) as the body.
    fn build(&self) -> BuildReport {
        let exec = self.exec;
        Arc::new(move |agg: &Aggregate| {
            let header = ExecutionHeader {
                version: 1,
                workflow_execution_id: exec,
                timestamp: agg.timestamp,
                don_id: DON_ID,
                don_config_version: VERSION,
            };
            let meta = ReportMetadata::new(
                B256::repeat_byte(1),
                "cresolver",
                Address::repeat_byte(2),
                [0, 1],
            );
            let body = serde_json::to_vec(agg)?;
            Ok(build_raw_report(&header, &meta, &body))
        })
    }

    fn job(&self, observation: Observation) -> Job {
        Job {
            execution_id: self.exec,
            round: RoundKey::new(self.market, self.market_id),
            observation,
            workers: self.workers.clone(),
            build: self.build(),
            on_decided: None,
        }
    }

    fn envelope(&self, sender: Address, body: Body) -> Envelope {
        Envelope {
            don_id: DON_ID,
            config_version: VERSION,
            execution_id: self.exec,
            market: self.market,
            market_id: self.market_id,
            sender,
            body,
        }
    }

    /// Checks one agreement as the forwarder and an operator would; returns the set's
    /// aggregate (decoded from the report body).
    fn check(&self, a: &Agreed) -> Aggregate {
        let (f, members) = (usize::from(self.f), self.addresses());
        assert_eq!(a.execution_id, self.exec);
        assert_eq!(a.signers.len(), f + 1, "exactly f+1 signers");
        assert_eq!(a.signatures.len(), f + 1);
        let distinct: std::collections::BTreeSet<_> = a.signers.iter().collect();
        assert_eq!(distinct.len(), a.signers.len(), "distinct signers");
        assert!(
            a.signers[1..].windows(2).all(|w| w[0] < w[1]),
            "after the member's own, signers by address"
        );
        let context = report_context(DON_ID, VERSION, self.f, &members);
        assert_eq!(a.context.as_ref(), &context[..]);
        let digest = forwarder_digest(&a.report, &a.context);
        assert_eq!(a.digest, digest);
        for (signer, sig) in a.signers.iter().zip(&a.signatures) {
            assert!(members.contains(signer), "signer {signer} is a member");
            assert_eq!(wire::recover(&digest, sig).expect("recovers"), *signer);
        }
        assert!(a.recomputed, "an honest member rebuilds the report itself");
        assert_eq!(a.leader, self.cfg(0).leader(&self.exec, a.attempt));
        assert!(
            a.observations.len() > 2 * f,
            "a set of at least 2f+1 observations"
        );
        for o in &a.observations {
            let observer = o.observation.observer;
            assert!(members.contains(&observer));
            assert_eq!(
                wire::recover(&o.observation.digest(), &o.signature).expect("recovers"),
                observer
            );
        }
        let set: Vec<Observation> = a
            .observations
            .iter()
            .map(|o| o.observation.clone())
            .collect();
        let agg = aggregate(&set, &self.binding(), &self.workers, f).expect("the set aggregates");
        assert_eq!(
            a.report,
            (self.build())(&agg).expect("builds"),
            "the report is the set's"
        );
        assert_eq!(decode(&a.report), agg);
        agg
    }

    /// Checks every agreement, that they agree on one report, and that each honest
    /// observation in the set is the one its member made; returns the aggregate.
    fn check_all(&self, agreed: &[Agreed], honest: &[(usize, Observation)]) -> Aggregate {
        let agg = self.check(&agreed[0]);
        for a in agreed {
            self.check(a);
            assert_eq!(a.report, agreed[0].report, "one report on every member");
            assert_eq!(a.digest, agreed[0].digest);
        }
        for o in &agreed[0].observations {
            if let Some((_, mine)) = honest
                .iter()
                .find(|(i, _)| self.addr(*i) == o.observation.observer)
            {
                assert_eq!(&o.observation, mine, "an honest member's own observation");
            }
        }
        agg
    }
}

fn decode(report: &[u8]) -> Aggregate {
    serde_json::from_slice(&report[HEADER_LEN..]).expect("the body is the aggregate")
}

/// Runs `agree` on every (member, job) concurrently; each must agree within the bound.
async fn agree_all(runs: Vec<(Arc<Don>, Job)>) -> Vec<Agreed> {
    let handles: Vec<_> = runs
        .into_iter()
        .map(|(don, job)| {
            tokio::spawn(async move { tokio::time::timeout(AGREE_WITHIN, don.agree(job)).await })
        })
        .collect();
    let mut out = Vec::new();
    for h in handles {
        let agreed = h
            .await
            .expect("joins")
            .expect("agrees in time")
            .expect("agrees");
        out.push(agreed);
    }
    out
}

/// A message a member or an outsider sends, signed by `.1`, and the status it must get.
type Lie = (Envelope, PrivateKeySigner, u16);

/// Starts members `up` (in memory), posts every lie to each of them, then runs their
/// agreement with honest observations.
async fn agree_after(
    net: &mut Net,
    up: &[usize],
    lies: &[Lie],
) -> (Vec<Agreed>, Vec<(usize, Observation)>) {
    let honest: Vec<(usize, Observation)> =
        up.iter().map(|i| (*i, net.observation(*i, 0))).collect();
    let dons: Vec<Arc<Don>> = up
        .iter()
        .map(|i| net.start(*i, Persist::in_memory().expect("db")))
        .collect();
    for to in up {
        for (k, (env, key, status)) in lies.iter().enumerate() {
            assert_eq!(
                send(net, *to, env, key).await,
                *status,
                "message {k} to member {to}"
            );
        }
    }
    let runs = dons
        .into_iter()
        .zip(&honest)
        .map(|(d, (_, o))| (d, net.job(o.clone())))
        .collect();
    (agree_all(runs).await, honest)
}

async fn post(url: &str, body: Vec<u8>, sig: Option<&str>) -> u16 {
    let mut req = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .body(body);
    if let Some(sig) = sig {
        req = req.header(wire::SIGNATURE_HEADER, sig);
    }
    req.send()
        .await
        .expect("the member answers")
        .status()
        .as_u16()
}

/// Seals `env` with `key` and posts it to member `to`.
async fn send(net: &Net, to: usize, env: &Envelope, key: &PrivateKeySigner) -> u16 {
    let (body, sig) = wire::seal(env, key).expect("seals");
    post(&net.url(to), body, Some(&sig)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_members_all_up_agree_on_one_report() {
    let mut net = Net::new(4, 1).await;
    let (agreed, honest) = agree_after(&mut net, &[0, 1, 2, 3], &[]).await;
    assert_eq!(agreed.len(), 4);
    let agg = net.check_all(&agreed, &honest);
    // worker 2 was answered by one member only (< 2f+1): not answered
    assert_eq!(agg.workers[2].answer, None);
    assert_eq!(
        agg.workers[0].answer.expect("answered").position,
        Position::Yes
    );
    assert_eq!(
        agg.workers[1].answer.expect("answered").position,
        Position::No
    );
}

/// Each member is told its decided report and the deciding round's leader, and the leader
/// also its proposed set's report, before the agreement (the first transmitter starts its
/// gas estimate there).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_member_is_told_the_decided_report_and_the_leader_its_proposed_one() {
    let mut net = Net::new(4, 1).await;
    let told: Arc<std::sync::Mutex<Vec<(usize, Bytes, Address)>>> = Arc::default();
    let jobs: Vec<Job> = (0..4)
        .map(|i| {
            let mut job = net.job(net.observation(i, 0));
            let told = told.clone();
            job.on_decided = Some(Arc::new(move |report: &Bytes, leader| {
                told.lock()
                    .expect("not poisoned")
                    .push((i, report.clone(), leader));
            }));
            job
        })
        .collect();
    let dons: Vec<Arc<Don>> = (0..4)
        .map(|i| net.start(i, Persist::in_memory().expect("db")))
        .collect();
    let agreed = agree_all(dons.into_iter().zip(jobs).collect()).await;
    let told = told.lock().expect("not poisoned").clone();
    let addresses = net.addresses();
    for (i, a) in agreed.iter().enumerate() {
        let mine: Vec<_> = told.iter().filter(|(j, ..)| *j == i).collect();
        // the leader at its proposal and at its decision (all up: the set it proposed
        // is the one decided), every other member at its decision
        let times = if addresses[i] == a.leader { 2 } else { 1 };
        assert_eq!(mine.len(), times, "member {i} is told {times} time(s)");
        for (_, report, leader) in mine {
            assert_eq!(*report, a.report, "member {i} is told the agreed report");
            assert_eq!(*leader, a.leader, "member {i} is told the leader");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_down_the_other_three_agree() {
    let mut net = Net::new(4, 1).await;
    // the member down does not lead attempt 0 (a silent leader is the next case)
    let down = (0..4).find(|i| *i != net.leader(0)).expect("a non-leader");
    net.listeners[down] = None;
    let up: Vec<usize> = (0..4).filter(|i| *i != down).collect();
    let (agreed, honest) = agree_after(&mut net, &up, &[]).await;
    net.check_all(&agreed, &honest);
    let gone = net.addr(down);
    for a in &agreed {
        assert!(!a.signers.contains(&gone) && !a.observers().contains(&gone));
        assert_eq!(a.observations.len(), 3, "the three members up observed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_silent_leader_is_replaced() {
    let mut net = Net::new(4, 1).await;
    let silent = net.leader(0);
    // its server is up (it receives everything) but it never runs `agree`
    let _silent = net.start(silent, Persist::in_memory().expect("db"));
    let up: Vec<usize> = (0..4).filter(|i| *i != silent).collect();
    let (agreed, honest) = agree_after(&mut net, &up, &[]).await;
    net.check_all(&agreed, &honest);
    for a in &agreed {
        assert!(
            a.attempt >= 1,
            "agreed in attempt {} (the leader of 0 is silent)",
            a.attempt
        );
        assert_ne!(a.leader, net.addr(silent));
        assert!(!a.signers.contains(&net.addr(silent)));
        assert!(!a.observers().contains(&net.addr(silent)));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn seven_members_two_down_the_other_five_agree() {
    let mut net = Net::new(7, 2).await;
    // the two members down are the leaders of attempts 0 and 1
    let down = [net.leader(0), net.leader(1)];
    assert_ne!(down[0], down[1]);
    for d in down {
        net.listeners[d] = None;
    }
    let up: Vec<usize> = (0..7).filter(|i| !down.contains(i)).collect();
    let (agreed, honest) = agree_after(&mut net, &up, &[]).await;
    assert_eq!(agreed.len(), 5);
    net.check_all(&agreed, &honest);
    for a in &agreed {
        assert!(a.attempt >= 2, "agreed in attempt {}", a.attempt);
        assert_eq!(
            a.observations.len(),
            5,
            "2f+1 = 5: every member up observed"
        );
        for d in down {
            assert!(!a.signers.contains(&net.addr(d)));
        }
    }
}

/// A member that accepted another's decision (posted when that one decided) is not
/// answered with it again within a second: the late messages it sent before the decision
/// reached it cost no answer. Past that second it is answered, as a member that lost the
/// decision must be. Member 3's endpoint takes messages but it runs no agreement, so
/// nothing else answered it before.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_that_accepted_the_decision_is_not_answered_with_it_again_at_once() {
    let mut net = Net::new(4, 1).await;
    let dons: Vec<Arc<Don>> = (0..4)
        .map(|i| net.start(i, Persist::in_memory().expect("db")))
        .collect();
    let jobs: Vec<Job> = (0..3).map(|i| net.job(net.observation(i, 0))).collect();
    agree_all(dons[..3].iter().cloned().zip(jobs).collect()).await;
    // member 3's answer to member 0's decision (posted before member 0 agreed) has come
    // back; the decision is still well within its second
    tokio::time::sleep(Duration::from_millis(250)).await;
    let late = |shift| {
        let o = wire::sign_observation(net.observation(3, shift), &net.keys[3]).expect("signs");
        net.envelope(net.addr(3), Body::Observation { observation: o })
    };
    let sent = dons[0].messages_sent();
    assert_eq!(send(&net, 0, &late(1), &net.keys[3]).await, 200);
    assert_eq!(
        dons[0].messages_sent(),
        sent,
        "no answer to a member that accepted the decision"
    );
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    assert_eq!(send(&net, 0, &late(2), &net.keys[3]).await, 200);
    assert_eq!(
        dons[0].messages_sent(),
        sent + 1,
        "a second later the member is answered"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restarted_member_keeps_its_observation_and_its_agreement() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("don.sqlite");
    let mut net = Net::new(4, 1).await;
    // the member that restarts leads attempt 0, so it surely signs the report itself
    let me = net.leader(0);
    let first = net.observation(me, 0);
    let mut dons = Vec::new();
    for i in 0..4 {
        let persist = if i == me {
            Persist::open(&path).expect("file db")
        } else {
            Persist::in_memory().expect("db")
        };
        dons.push(net.start(i, persist));
    }
    let jobs: Vec<Job> = (0..4).map(|i| net.job(net.observation(i, 0))).collect();
    let agreed = agree_all(dons.iter().cloned().zip(jobs).collect()).await;
    let honest: Vec<(usize, Observation)> = (0..4).map(|i| (i, net.observation(i, 0))).collect();
    net.check_all(&agreed, &honest);
    let before = agreed[me].clone();

    // the member stops; a new one starts on the same file, with another observation
    net.stop(me).await;
    drop(dons);
    let restarted = net.don(me, Persist::open(&path).expect("reopens"));
    let second = net.observation(me, 20);
    assert_ne!(second, first);
    let again = tokio::time::timeout(AGREE_WITHIN, restarted.agree(net.job(second.clone())))
        .await
        .expect("in time")
        .expect("agrees");
    assert_eq!(again, before, "the stored agreement");
    assert_eq!(restarted.agreed(&net.exec).unwrap(), Some(before.clone()));

    let store = Persist::open(&path).expect("opens alongside");
    let own = store.own_observation(&net.exec).unwrap().expect("stored");
    assert_eq!(own.observation, first, "the first one, never replaced");
    assert_eq!(
        wire::recover(&own.observation.digest(), &own.signature).unwrap(),
        net.addr(me)
    );
    let kept = store.save_own_observation(
        &net.exec,
        &wire::sign_observation(second, &net.keys[me]).unwrap(),
    );
    assert_eq!(kept.expect("saves once").observation, first);
    // the lock it signed is the agreed report, and a second lock is refused
    let lock = store.lock(&net.exec).expect("reads").expect("it signed");
    assert_eq!((lock.digest, &lock.report), (before.digest, &before.report));
    let other_report = Bytes::from_static(b"another report");
    let other_digest = forwarder_digest(&other_report, &before.context);
    let other = Lock {
        digest: other_digest,
        signature: wire::sign_digest(&net.keys[me], &other_digest).unwrap(),
        report: other_report,
        observations: vec![],
        attempt: lock.attempt + 1,
    };
    let stays = store.lock_once(&net.exec, &other).expect("reads");
    assert_eq!(stays, lock, "the first lock stays");
    assert_eq!(store.lock(&net.exec).expect("reads"), Some(lock.clone()));
    // on a fresh execution the first lock wins, and then stays
    let fresh = B256::repeat_byte(0x5e);
    assert_eq!(store.lock_once(&fresh, &other).expect("locks"), other);
    assert_eq!(store.lock_once(&fresh, &lock).expect("reads"), other);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_member_api_refuses_what_it_must() {
    let mut net = Net::new(4, 1).await;
    let _don = net.start(0, Persist::in_memory().expect("db"));
    let url = net.url(0);
    let sender = &net.keys[1];
    let obs = |net: &Net| wire::sign_observation(net.observation(1, 0), sender).expect("signs");
    let ok = net.envelope(
        net.addr(1),
        Body::Observation {
            observation: obs(&net),
        },
    );
    let (body, sig) = wire::seal(&ok, sender).expect("seals");

    // too large: refused before anything else
    let big = vec![b' '; wire::MAX_MESSAGE_BYTES + 1];
    assert_eq!(post(&url, big, Some(&sig)).await, 413);
    // no signature header, or one that is not a signature
    assert_eq!(post(&url, body.clone(), None).await, 403);
    assert_eq!(post(&url, body.clone(), Some("0xzz")).await, 403);
    // another member's signature of the message
    let (_, by_2) = wire::seal(&ok, &net.keys[2]).expect("seals");
    assert_eq!(post(&url, body.clone(), Some(&by_2)).await, 403);
    // another DON, and another config version, signed by a member
    let mut other_don = ok.clone();
    other_don.don_id = DON_ID + 1;
    assert_eq!(send(&net, 0, &other_don, sender).await, 403);
    let mut other_version = ok.clone();
    other_version.config_version = VERSION + 1;
    assert_eq!(send(&net, 0, &other_version, sender).await, 403);
    // not JSON of a message, signed by a member
    let junk = b"{\"not\":\"a message\"}".to_vec();
    let junk_sig = alloy::primitives::hex::encode_prefixed(
        wire::sign_digest(sender, &wire::message_digest(&junk)).unwrap(),
    );
    assert_eq!(post(&url, junk, Some(&junk_sig)).await, 403);
    // the message itself opens
    assert_eq!(post(&url, body, Some(&sig)).await, 200);
    // a proposal carrying an observation forged in another member's name does not open
    let mut forged = net.observation(2, 0);
    forged.timestamp += 1;
    let forged = wire::sign_observation(forged, sender).expect("signs");
    let proposal = net.envelope(
        net.addr(1),
        Body::Proposal {
            round: 0,
            pol_round: None,
            observations: vec![forged],
            signature: Bytes::from(vec![0u8; 65]),
        },
    );
    assert_eq!(send(&net, 0, &proposal, sender).await, 403);
    // a vote whose signature is not 65 bytes r ‖ s ‖ v (v = 0 or 1) does not open
    let vote = net.envelope(
        net.addr(1),
        Body::Vote {
            round: 0,
            kind: wire::VoteKind::Prevote,
            value: None,
            signature: Bytes::from(vec![0u8; 64]),
        },
    );
    assert_eq!(send(&net, 0, &vote, sender).await, 403);
    // one source sends at most 16 bodies at once: 16 that announce a body and never
    // send it keep their slots, a 17th from that source gets 429, and once they go
    // (closed) the source is read again
    let addr = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .expect("host:port")
        .to_string();
    let mut slow = Vec::new();
    for _ in 0..16 {
        use tokio::io::AsyncWriteExt;
        let mut c = tokio::net::TcpStream::connect(&addr)
            .await
            .expect("connects");
        let head = format!(
            "POST {} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{{",
            wire::PATH
        );
        c.write_all(head.as_bytes()).await.expect("writes");
        slow.push(c);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(post(&url, b"{}".to_vec(), None).await, 429);
    drop(slow);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(post(&url, b"{}".to_vec(), None).await, 403);
}
