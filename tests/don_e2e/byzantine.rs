//! Lying members against real member processes, through Chainlink's production
//! KeystoneForwarder on anvil. A liar is this test: it holds a configured member key,
//! listens on the member's endpoint (so it receives what honest members send it) and
//! speaks the real wire format. Each test ends with the market resolved exactly once,
//! by the report every honest member signed, with values inside the honest range; and
//! report shopping — every distinct report an honest member ever signed, plus the liar's
//! signature, `eth_call`ed against the forwarder before the delivery — finds at most one
//! report the forwarder accepts.

use super::faults::request;
use super::*;
use alloy::network::TransactionBuilder;
use alloy::rpc::types::TransactionRequest;
use cresolver_core::don::{Observation, ObservedAnswer, Position};
use cresolver_don::context::set_id;
use cresolver_don::wire::{self, Body, Envelope, SignedObservation, VoteKind};
use std::collections::BTreeMap;
use std::sync::Mutex;

const BOUND: Duration = Duration::from_secs(90);

/// A lying member: its key, its index, and what honest members sent it.
struct Liar {
    i: usize,
    key: PrivateKeySigner,
    seen: Arc<Mutex<BTreeMap<Address, SignedObservation>>>,
}

async fn take(
    State(seen): State<Arc<Mutex<BTreeMap<Address, SignedObservation>>>>,
    body: axum::body::Bytes,
) -> &'static str {
    if let Ok(env) = serde_json::from_slice::<Envelope>(&body)
        && let Body::Observation { observation } = env.body
    {
        seen.lock()
            .unwrap()
            .entry(observation.observation.observer)
            .or_insert(observation);
    }
    "ok"
}

impl Liar {
    /// Listens on member `i`'s endpoint, keeping the observations sent to it.
    async fn listen(dn: &Dn, i: usize) -> Liar {
        let seen = Arc::new(Mutex::new(BTreeMap::new()));
        let port = dn.cfg.members[i].url.port().unwrap();
        let l = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap();
        let app = axum::Router::new()
            .route(wire::PATH, axum::routing::post(take))
            .with_state(seen.clone());
        tokio::spawn(async move { axum::serve(l, app).await });
        Liar {
            i,
            key: dn.keys[i].clone(),
            seen,
        }
    }

    fn env(&self, dn: &Dn, exec: B256, body: Body) -> Envelope {
        Envelope {
            don_id: 1,
            config_version: 1,
            execution_id: exec,
            market: dn.s.dev.contracts.market,
            market_id: dn.s.market_id.into(),
            sender: self.key.address(),
            body,
        }
    }

    /// Waits for the observations of `from`.
    async fn observations(&self, from: &[Address]) -> BTreeMap<Address, SignedObservation> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            {
                let seen = self.seen.lock().unwrap();
                if from.iter().all(|a| seen.contains_key(a)) {
                    return seen.clone();
                }
            }
            assert!(
                Instant::now() < deadline,
                "the honest members' observations did not reach the liar"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn post(&self, dn: &Dn, to: usize, env: &Envelope) {
        let (body, sig) = wire::seal(env, &self.key).unwrap();
        let url = dn.cfg.members[to].url.join(wire::PATH).unwrap();
        let status = reqwest::Client::new()
            .post(url)
            .header(wire::SIGNATURE_HEADER, sig)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .map(|r| r.status().as_u16())
            .unwrap_or(0);
        assert_eq!(status, 200, "{} to member {to}", env.kind());
    }

    /// A proposal of `set` for `round`, a prevote and a precommit for it, to member `to`.
    async fn push(
        &self,
        dn: &Dn,
        exec: B256,
        to: usize,
        round: u32,
        set: &[SignedObservation],
        propose: bool,
    ) {
        let id = set_id(set);
        if propose {
            let d = wire::proposal_digest(1, 1, &exec, round, None, &id);
            let p = self.env(
                dn,
                exec,
                Body::Proposal {
                    round,
                    pol_round: None,
                    observations: set.to_vec(),
                    signature: wire::sign_digest(&self.key, &d).unwrap(),
                },
            );
            self.post(dn, to, &p).await;
        }
        for kind in [VoteKind::Prevote, VoteKind::Precommit] {
            let d = wire::vote_digest(1, 1, &exec, kind, round, Some(&id));
            let v = self.env(
                dn,
                exec,
                Body::Vote {
                    round,
                    kind,
                    value: Some(id),
                    signature: wire::sign_digest(&self.key, &d).unwrap(),
                },
            );
            self.post(dn, to, &v).await;
        }
    }

    fn sign(&self, o: Observation) -> SignedObservation {
        wire::sign_observation(o, &self.key).unwrap()
    }
}

/// The request made, the liars (the members that lead `rounds`) listening on their
/// endpoints, every other member started, and what the honest members observed (once each
/// has sent its observation to the first liar).
struct Split {
    exec: B256,
    liars: Vec<Liar>,
    honest: Vec<usize>,
    addrs: Vec<Address>,
    seen: BTreeMap<Address, SignedObservation>,
}

async fn liars_lead(dn: &mut Dn, rounds: &[u32]) -> Split {
    let exec = request(dn).await;
    let mut liars = Vec::new();
    for r in rounds {
        let i = index_of(dn, dn.cfg.leader(&exec, *r));
        liars.push(Liar::listen(dn, i).await);
    }
    let honest: Vec<usize> = (0..dn.keys.len())
        .filter(|i| liars.iter().all(|l| l.i != *i))
        .collect();
    for &i in &honest {
        dn.spawn(i, None);
    }
    let addrs: Vec<Address> = honest.iter().map(|i| dn.cfg.addresses()[*i]).collect();
    let seen = liars[0].observations(&addrs).await;
    Split {
        exec,
        liars,
        honest,
        addrs,
        seen,
    }
}

fn index_of(dn: &Dn, a: Address) -> usize {
    dn.cfg.addresses().iter().position(|m| *m == a).unwrap()
}

/// Every distinct report the honest members signed (their `don_locks`), with each one's
/// signature and signer.
fn honest_signed(dn: &Dn, honest: &[usize]) -> BTreeMap<Bytes, Vec<(Address, Bytes)>> {
    let mut out: BTreeMap<Bytes, Vec<(Address, Bytes)>> = BTreeMap::new();
    for &i in honest {
        let db = rusqlite::Connection::open(dn.dirs[i].join("data").join("don.sqlite")).unwrap();
        let mut stmt = db.prepare("SELECT body FROM don_locks").unwrap();
        let rows: Vec<String> = stmt
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        for body in rows {
            let lock: Value = serde_json::from_str(&body).unwrap();
            let report: Bytes = serde_json::from_value(lock["report"].clone()).unwrap();
            let sig: Bytes = serde_json::from_value(lock["signature"].clone()).unwrap();
            out.entry(report)
                .or_default()
                .push((dn.cfg.addresses()[i], sig));
        }
    }
    out
}

/// Report shopping: each distinct signed report with one honest signature and the liars'
/// (f+1 in all), `eth_call`ed against the forwarder in the block before the delivery.
/// Returns how many the forwarder would have accepted.
async fn shop(dn: &Dn, honest: &[usize], liars: &[&PrivateKeySigner]) -> usize {
    let p = &dn.s.dev.provider;
    let logs = p
        .get_logs(
            &Filter::new()
                .address(dn.forwarder)
                .event_signature(IKeystoneForwarder::ReportProcessed::SIGNATURE_HASH)
                .from_block(0u64),
        )
        .await
        .unwrap();
    let block = logs[0].block_number.unwrap() - 1;
    let context = cresolver_core::don::report_context(1, 1, dn.cfg.f, &dn.cfg.addresses());
    let mut accepted = 0;
    for (report, honest_sigs) in honest_signed(dn, honest) {
        let digest = forwarder_digest(&report, &context);
        let mut sigs: Vec<Bytes> = vec![honest_sigs[0].1.clone()];
        for l in liars {
            sigs.push(wire::sign_digest(l, &digest).unwrap());
        }
        sigs.truncate(usize::from(dn.cfg.f) + 1);
        let call = IKeystoneForwarder::reportCall {
            receiver: dn.receiver,
            rawReport: report.clone(),
            reportContext: context.to_vec().into(),
            signatures: sigs,
        };
        let tx = TransactionRequest::default()
            .with_from(liars[0].address())
            .with_to(dn.forwarder)
            .with_input(call.abi_encode());
        if p.call(tx).block(block.into()).await.is_ok() {
            accepted += 1;
        }
    }
    accepted
}

#[tokio::test]
async fn an_equivocating_leader_splits_nothing_and_shops_no_second_report() {
    let (s, _) = counted_market().await;
    let mut dn = Dn::new(s, 4, 1, None).await;
    let Split {
        exec,
        mut liars,
        honest,
        addrs,
        seen,
    } = liars_lead(&mut dn, &[0]).await;
    let liar = liars.remove(0);
    // its own observation: member 0's view, signed as itself
    let mut own = seen[&addrs[0]].observation.clone();
    own.observer = liar.key.address();
    let own = liar.sign(own);
    // to honest member k, a set of three that leaves out the next honest member's
    // observation: three different valid sets, three different reports; the same at each
    // later round it leads
    let ahead: Vec<u32> = (1..=8)
        .filter(|r| dn.cfg.leader(&exec, *r) == liar.key.address())
        .collect();
    for (k, &to) in honest.iter().enumerate() {
        let left_out = addrs[(k + 1) % 3];
        let mut set: Vec<SignedObservation> = addrs
            .iter()
            .filter(|a| **a != left_out)
            .map(|a| seen[a].clone())
            .collect();
        set.push(own.clone());
        for round in std::iter::once(0).chain(ahead.iter().copied()) {
            liar.push(&dn, exec, to, round, &set, true).await;
        }
    }
    let took = dn.wait_resolved(BOUND).await;
    eprintln!("an equivocating leader: resolved in {took:?}");
    dn.assert_resolved_once(&honest).await;
    for &i in &honest {
        let v = dn.round(i).await.unwrap();
        assert_ne!(
            v["outcome"]["don"]["leader"],
            serde_json::json!(liar.key.address()),
            "member {i}"
        );
    }
    let signed = honest_signed(&dn, &honest);
    assert_eq!(
        signed.len(),
        1,
        "the honest members signed one report between them"
    );
    assert_eq!(
        shop(&dn, &honest, &[&liar.key]).await,
        1,
        "one report the forwarder takes"
    );
}

#[tokio::test]
async fn seven_members_two_liars_equivocating() {
    let (s, _) = counted_market().await;
    let mut dn = Dn::new(s, 7, 2, None).await;
    let Split {
        exec,
        liars,
        honest,
        addrs,
        seen,
    } = liars_lead(&mut dn, &[0, 1]).await;
    let own: Vec<SignedObservation> = liars
        .iter()
        .map(|l| {
            let mut o = seen[&addrs[0]].observation.clone();
            o.observer = l.key.address();
            l.sign(o)
        })
        .collect();
    // each liar, in the round it leads, gives each honest member a different set of five
    // (both liars' and three honest observations); both liars vote for it
    for (k, &to) in honest.iter().enumerate() {
        let mut set: Vec<SignedObservation> =
            (0..3).map(|j| seen[&addrs[(k + j) % 5]].clone()).collect();
        set.extend(own.iter().cloned());
        for round in 0..2u32 {
            liars[0].push(&dn, exec, to, round, &set, round == 0).await;
            liars[1].push(&dn, exec, to, round, &set, round == 1).await;
        }
    }
    let took = dn.wait_resolved(BOUND).await;
    eprintln!("7 members, two equivocating liars: resolved in {took:?}");
    let call = dn.assert_resolved_once(&honest).await;
    assert_eq!(call.signatures.len(), 3);
    assert_eq!(honest_signed(&dn, &honest).len(), 1);
    assert_eq!(shop(&dn, &honest, &[&liars[0].key, &liars[1].key]).await, 1);
}

#[tokio::test]
async fn a_worker_that_answers_some_members_with_a_liar_leading() {
    // worker 1 answers the first two members that ask and fails for the third; the liar
    // leads round 0, says it answered NO with scores 1/1/1, and proposes to every member
    // {liar, a member that saw the answer, the one that did not}
    let yes = agent(behaviour(DeterminationMode::Yes, 0.8)).await;
    let w0 = counting_worker(yes.clone(), None).await;
    let w1 = counting_worker_with(yes.clone(), None, Some(2)).await;
    let w2 = counting_worker(yes.clone(), None).await;
    let s = market_with_workers(
        [&w0, &w1, &w2]
            .iter()
            .map(|w| AgentUri::Endpoint(w.url.clone()))
            .collect(),
    )
    .await;
    let mut dn = Dn::new(s, 4, 1, None).await;
    let Split {
        exec,
        mut liars,
        honest,
        addrs,
        seen,
    } = liars_lead(&mut dn, &[0]).await;
    let liar = liars.remove(0);
    let saw = |a: &Address| seen[a].observation.workers[1].answer.is_some();
    let with: Vec<&Address> = addrs.iter().filter(|a| saw(a)).collect();
    let without: Vec<&Address> = addrs.iter().filter(|a| !saw(a)).collect();
    assert_eq!(
        (with.len(), without.len()),
        (2, 1),
        "worker 1 answered two members"
    );
    let mut lie = seen[with[0]].observation.clone();
    lie.observer = liar.key.address();
    lie.workers[1].answer = Some(ObservedAnswer {
        position: Position::No,
        confidence_ppm: 1_000_000,
        scores: [1, 1, 1],
    });
    lie.workers[1].failure = None;
    let lie = liar.sign(lie);
    let set = vec![lie.clone(), seen[with[0]].clone(), seen[without[0]].clone()];
    for &to in &honest {
        liar.post(
            &dn,
            to,
            &liar.env(
                &dn,
                exec,
                Body::Observation {
                    observation: lie.clone(),
                },
            ),
        )
        .await;
        liar.push(&dn, exec, to, 0, &set, true).await;
    }
    dn.wait_resolved(BOUND).await;
    let call = dn.assert_resolved_once(&honest).await;
    let (_, body) = cresolver_core::report::split_raw_report(&call.rawReport).unwrap();
    let r = cresolver_core::decode_report(body).unwrap();
    // worker 1's scores on chain are the honest ones, or it is not counted: never 1/1/1
    let honest_scores = seen[with[0]].observation.workers[1].answer.unwrap().scores;
    let got = &r.dim_scores[3..6];
    assert!(
        got == honest_scores.as_slice() || r.weights[1].is_zero(),
        "worker 1 on chain: scores {got:?}, weight {}",
        r.weights[1]
    );
    assert_ne!(got, &[1, 1, 1]);
    assert!(r.resolution, "the honest YES holds");
    assert_eq!(shop(&dn, &honest, &[&liar.key]).await, 1);
}

#[tokio::test]
async fn a_member_whose_round_ends_30_s_after_the_others() {
    let (s, _) = counted_market().await;
    let mut dn = Dn::new(s, 4, 1, None).await;
    request(&dn).await;
    for i in 0..3 {
        dn.spawn(i, None);
    }
    let took = dn.wait_resolved(BOUND).await;
    eprintln!("three of four members: resolved in {took:?}");
    let call = dn.assert_resolved_once(&[0, 1, 2]).await;
    tokio::time::sleep(Duration::from_secs(30).saturating_sub(took)).await;
    // the fourth member's round runs now; the market is resolved on chain, by the report
    // its peers agreed: it ends its round without a second delivery
    dn.spawn(3, None);
    let v = dn.wait_member_final(3, Duration::from_secs(60)).await;
    assert!(
        ["confirmed", "skipped"].contains(&v["state"].as_str().unwrap()),
        "{v}"
    );
    if let Some(report) = v["outcome"]["don"].get("report") {
        let report: Bytes = serde_json::from_value(report.clone()).unwrap();
        assert_eq!(
            report, call.rawReport,
            "the late member holds the delivered report"
        );
    }
    assert_eq!(dn.delivered().await.len(), 1, "one delivery");
}
