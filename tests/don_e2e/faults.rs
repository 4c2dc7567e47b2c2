//! The DON under faults: members down before the round, the leader killed while the
//! members agree, a member restarted mid-round, a member the forwarder does not know, a
//! lying member, and a 7-member DON with two down. Each must resolve the market exactly
//! once with the honest aggregate, within the bound it states.

use super::*;
use cresolver_core::don::{Observation, ObservedAnswer, Position, WorkerObservation, execution_id};
use cresolver_don::wire::{self, Body, Envelope};
use cresolver_store::RoundKey;

/// How long a DON may take with faults: two attempts (2 s each), the transmission
/// delays of two ranks (2 s each), the rounds themselves and process start-up.
const FAULT_BOUND: Duration = Duration::from_secs(45);

pub(super) async fn request(dn: &Dn) -> B256 {
    let r = dn.s.dev.request_resolution(dn.s.market_id).await.unwrap();
    let chain = dn.s.dev.provider.get_chain_id().await.unwrap();
    execution_id(
        chain,
        RoundKey::new(dn.s.dev.contracts.market, dn.s.market_id),
        r.transaction_hash,
    )
}

#[tokio::test]
async fn one_member_down_before_the_round() {
    let (s, _) = counted_market().await;
    let mut dn = Dn::new(s, 4, 1, None).await;
    for i in 0..3 {
        dn.spawn(i, None);
    }
    request(&dn).await;
    let took = dn.wait_resolved(FAULT_BOUND).await;
    eprintln!("one member down: resolved in {took:?}");
    dn.assert_resolved_once(&[0, 1, 2]).await;
}

#[tokio::test]
async fn the_leader_killed_mid_agreement() {
    let (s, _) = counted_market().await;
    let mut dn = Dn::new(s, 4, 1, None).await;
    // the request first: its execution id names the first leader, who is started with
    // a crash 300 ms after its first precommit left
    let exec = request(&dn).await;
    let leader = dn.cfg.leader(&exec, 0);
    let li = dn
        .cfg
        .addresses()
        .iter()
        .position(|a| *a == leader)
        .unwrap();
    for i in 0..4 {
        dn.spawn(i, (i == li).then_some("don_voted"));
    }
    let took = dn.wait_resolved(FAULT_BOUND).await;
    eprintln!("leader killed mid-agreement: resolved in {took:?}");
    let status = tokio::time::timeout(FAULT_BOUND, dn.procs[li].as_mut().unwrap().wait())
        .await
        .expect("the leader reached its crash point")
        .unwrap();
    assert_eq!(
        status.code(),
        Some(97),
        "the leader died at its crash point"
    );
    let others: Vec<usize> = (0..4).filter(|i| *i != li).collect();
    dn.assert_resolved_once(&others).await;
}

#[tokio::test]
async fn seven_members_with_two_down() {
    let (s, _) = counted_market().await;
    let mut dn = Dn::new(s, 7, 2, None).await;
    for i in 0..5 {
        dn.spawn(i, None);
    }
    request(&dn).await;
    let took = dn.wait_resolved(FAULT_BOUND).await;
    eprintln!("7 members, f = 2, two down: resolved in {took:?}");
    let call = dn.assert_resolved_once(&[0, 1, 2, 3, 4]).await;
    assert_eq!(call.signatures.len(), 3);
}

#[tokio::test]
async fn a_member_restarted_mid_round_signs_one_report_and_asks_no_worker_twice() {
    let (s, workers) = counted_market().await;
    let mut dn = Dn::new(s, 4, 1, None).await;
    let exec = request(&dn).await;
    // the first leader (it always signs: it locks its own proposal before sending it)
    // dies 300 ms after it signed
    let ri = (0..4)
        .find(|i| dn.cfg.addresses()[*i] == dn.cfg.leader(&exec, 0))
        .unwrap();
    for i in 0..4 {
        dn.spawn(i, (i == ri).then_some("don_signed"));
    }
    let status = tokio::time::timeout(FAULT_BOUND, dn.procs[ri].as_mut().unwrap().wait())
        .await
        .expect("the member reached its crash point")
        .unwrap();
    assert_eq!(status.code(), Some(97), "{}", dn.log(ri));
    dn.spawn(ri, None);
    dn.wait_resolved(FAULT_BOUND).await;
    let call = dn.assert_resolved_once(&[]).await;
    let v = dn.wait_member_final(ri, Duration::from_secs(60)).await;
    assert!(
        ["confirmed", "skipped"].contains(&v["state"].as_str().unwrap()),
        "{v}"
    );
    // its one signed report is the delivered one, stored once
    let db = rusqlite::Connection::open(dn.dirs[ri].join("data").join("don.sqlite")).unwrap();
    let locks: Vec<String> = db
        .prepare("SELECT body FROM don_locks")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(locks.len(), 1);
    let lock: Value = serde_json::from_str(&locks[0]).unwrap();
    let digest = forwarder_digest(&call.rawReport, &call.reportContext);
    assert_eq!(lock["digest"], serde_json::json!(digest));
    // no worker asked twice by the restarted member: one call per member that asked (a
    // member whose round began after the report landed skips it unasked; under load one
    // can start that late)
    let mut asked = 0;
    for i in 0..4 {
        let v = dn.wait_member_final(i, Duration::from_secs(60)).await;
        if v["outcome"]["outcome"].is_object() {
            asked += 1;
        }
    }
    assert!(
        asked >= 3,
        "the leader's set needs 2f+1 observations: {asked}"
    );
    for w in &workers {
        assert_eq!(w.resolves.load(Ordering::SeqCst), asked);
    }
}

#[tokio::test]
async fn a_member_the_forwarder_does_not_know_is_left_out_of_the_signatures() {
    let (s, _) = counted_market().await;
    let outsider = s.dev.accounts[18];
    let members: Vec<Address> = s.dev.signers[FIRST_MEMBER_ACCOUNT..FIRST_MEMBER_ACCOUNT + 4]
        .iter()
        .map(|k| k.address())
        .collect();
    // the forwarder knows an outsider instead of the first leader, which usually signs
    // first and transmits first: its own signature is then among the f+1 it agreed with
    let receipt = s.dev.request_resolution(s.market_id).await.unwrap();
    let chain = s.dev.provider.get_chain_id().await.unwrap();
    let exec = execution_id(
        chain,
        RoundKey::new(s.dev.contracts.market, s.market_id),
        receipt.transaction_hash,
    );
    let unknown = cresolver_don::config::leader_of(&members, &exec, 0);
    let fwd_signers: Vec<Address> = members
        .iter()
        .map(|m| if *m == unknown { outsider } else { *m })
        .collect();
    let mut dn = Dn::new(s, 4, 1, Some(fwd_signers)).await;
    dn.spawn_all();
    dn.wait_resolved(FAULT_BOUND).await;
    let (transmitter, call) = dn.deliveries().await.remove(0);
    let digest = forwarder_digest(&call.rawReport, &call.reportContext);
    for sig in &call.signatures {
        let who = wire::recover(&digest, sig).unwrap();
        assert_ne!(who, unknown, "the unknown key's signature is not sent");
    }
    assert_eq!(resolved_events(&dn.s).await.len(), 1);
    // A transmitter whose agreed signatures included the unknown key met the
    // forwarder's refusal, said so, and transmitted without it. (When the first
    // leader's round begins after the others agreed without it, nobody meets it.)
    let ti = members.iter().position(|m| *m == transmitter).unwrap();
    let log = dn.log(ti);
    let unknown_hex = unknown.to_string().to_lowercase();
    let agreed_with_unknown = log.lines().any(|l| {
        let l = l.to_lowercase();
        // the `signers` field's list (the line names the attempt's leader too)
        l.contains("don agreement")
            && l.split_once("signers")
                .and_then(|(_, rest)| rest.split_once(']'))
                .is_some_and(|(list, _)| list.contains(&unknown_hex))
    });
    assert_eq!(
        log.contains("the forwarder does not know this member's key"),
        agreed_with_unknown,
        "the transmitter {transmitter} met the forwarder's refusal exactly when the signatures it agreed with included the unknown key {unknown}"
    );
}

/// A liar's observation: every worker NO, confidence 0, every score 0 or 100.
fn lie(dn: &Dn, exec: B256, liar: Address, score: u8) -> Observation {
    Observation {
        don_id: 1,
        config_version: 1,
        execution_id: exec,
        market: dn.s.dev.contracts.market,
        market_id: dn.s.market_id.into(),
        observer: liar,
        timestamp: 1,
        workers: dn
            .s
            .workers
            .iter()
            .map(|w| WorkerObservation {
                address: *w,
                answer: Some(ObservedAnswer {
                    position: Position::No,
                    confidence_ppm: 0,
                    scores: [score; 3],
                }),
                failure: None,
            })
            .collect(),
    }
}

async fn post(dn: &Dn, to: usize, env: &Envelope, key: &PrivateKeySigner) -> u16 {
    let (body, sig) = wire::seal(env, key).unwrap();
    let url = dn.cfg.members[to].url.join(wire::PATH).unwrap();
    reqwest::Client::new()
        .post(url)
        .header(wire::SIGNATURE_HEADER, sig)
        .body(body)
        .send()
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
}

/// The envelope of a message the liar sends about execution `exec`, in its own name.
fn liar_envelope(dn: &Dn, exec: B256, liar: Address, body: Body) -> Envelope {
    Envelope {
        don_id: 1,
        config_version: 1,
        execution_id: exec,
        market: dn.s.dev.contracts.market,
        market_id: dn.s.market_id.into(),
        sender: liar,
        body,
    }
}

/// A report nobody honest built (every worker at 100, resolution NO), and the liar's
/// signature of it for the forwarder.
fn fake_report(dn: &Dn, exec: B256, liar: &PrivateKeySigner) -> (Bytes, Bytes) {
    let fake_report = cresolver_core::report::build_raw_report(
        &cresolver_core::report::ExecutionHeader {
            version: 1,
            workflow_execution_id: exec,
            timestamp: 1,
            don_id: 1,
            don_config_version: 1,
        },
        &cresolver_core::report::ReportMetadata::new(B256::ZERO, "x", Address::ZERO, [0, 1]),
        &cresolver_core::encode_report(
            dn.s.market_id.into(),
            &dn.s.workers,
            &[U256::from(1); 3],
            &[100; 9],
            false,
        ),
    );
    let fake_sig = wire::sign_digest(
        liar,
        &forwarder_digest(
            &fake_report,
            &cresolver_core::don::report_context(1, 1, 1, &dn.cfg.addresses()),
        ),
    )
    .unwrap();
    (fake_report, fake_sig)
}

/// The liar's messages to honest member `to`: its own observation (accepted), a
/// proposal carrying an observation forged in member 0's name (refused), a "decision"
/// with no precommits and its signature of the fake report (answered), a stranger's
/// message (refused), and a replay of the liar's own message (answered).
async fn lie_to(
    dn: &Dn,
    to: usize,
    exec: B256,
    liar: &PrivateKeySigner,
    own: &wire::SignedObservation,
    forged: &wire::SignedObservation,
    fake_sig: &Bytes,
) {
    let env = |body: Body| liar_envelope(dn, exec, liar.address(), body);
    assert_eq!(
        post(
            dn,
            to,
            &env(Body::Observation {
                observation: own.clone()
            }),
            liar
        )
        .await,
        200
    );
    assert_eq!(
        post(
            dn,
            to,
            &env(Body::Proposal {
                round: 0,
                pol_round: None,
                observations: vec![forged.clone()],
                signature: Bytes::from(vec![0u8; 65]),
            }),
            liar
        )
        .await,
        403,
        "a forged observation opens nowhere"
    );
    // a "decision" of a set with no precommits behind it, and its own signature
    // of a report nobody honest built
    let sig_msg = env(Body::Decided {
        round: 0,
        observations: vec![own.clone()],
        commits: vec![],
        report_signature: Some(fake_sig.clone()),
        agreed: false,
    });
    assert_eq!(post(dn, to, &sig_msg, liar).await, 200);
    // a stranger's message (naming itself, signed by itself) changes nothing
    let stranger = &dn.s.dev.signers[19];
    let mut from_stranger = env(Body::Observation {
        observation: own.clone(),
    });
    from_stranger.sender = stranger.address();
    assert_eq!(post(dn, to, &from_stranger, stranger).await, 403);
    // a replay of the liar's own message is answered and changes nothing
    assert_eq!(post(dn, to, &sig_msg, liar).await, 200);
}

#[tokio::test]
async fn a_lying_member_forges_nothing_onto_the_chain() {
    // The honest members' workers answer after 2 s, so the liar's observation (posted
    // by this test as soon as their endpoints listen) reaches them before they have
    // 2f+1 honest ones: with instant workers, a leader that proposed from its first
    // three (all honest) left the liar out of the set, and the check that its extreme
    // values move no score had nothing to check (seen once under load).
    let (s, _) = counted_market_answering_after(Duration::from_secs(2)).await;
    let mut dn = Dn::new(s, 4, 1, None).await;
    let exec = request(&dn).await;
    // member 3 is the liar, driven by this test; members 0..2 are honest processes
    let liar = dn.keys[3].clone();
    for i in 0..3 {
        dn.spawn(i, None);
    }
    dn.wait_endpoints(0..3).await;
    let own = wire::sign_observation(lie(&dn, exec, liar.address(), 0), &liar).unwrap();
    // an observation forged in member 0's name (signed by the liar)
    let mut forged_obs = lie(&dn, exec, dn.keys[0].address(), 100);
    forged_obs.timestamp = 2;
    let forged = cresolver_don::wire::SignedObservation {
        signature: wire::sign_digest(&liar, &forged_obs.digest()).unwrap(),
        observation: forged_obs,
    };
    // a report nobody honest built, signed by the liar
    let (fake_report, fake_sig) = fake_report(&dn, exec, &liar);
    for to in 0..3 {
        lie_to(&dn, to, exec, &liar, &own, &forged, &fake_sig).await;
    }
    dn.wait_resolved(FAULT_BOUND).await;
    let call = dn.assert_resolved_once(&[0, 1, 2]).await;
    assert_ne!(call.rawReport, fake_report);
    // the aggregate holds the honest values: member 0's own view of every worker
    let v = dn.round(0).await.unwrap();
    let own0 = &v["outcome"]["don"]["own_observation"]["workers"];
    let (_, body) = cresolver_core::report::split_raw_report(&call.rawReport).unwrap();
    let r = cresolver_core::decode_report(body).unwrap();
    for (k, w) in own0.as_array().unwrap().iter().enumerate() {
        let scores: Vec<u8> = serde_json::from_value(w["answer"]["scores"].clone()).unwrap();
        assert_eq!(
            &r.dim_scores[3 * k..3 * k + 3],
            scores.as_slice(),
            "worker {k}"
        );
    }
    assert!(
        r.resolution,
        "the honest majority (two YES workers) decides"
    );
    let set: Vec<Address> = serde_json::from_value(v["outcome"]["don"]["set"].clone()).unwrap();
    assert!(
        set.contains(&liar.address()),
        "the liar's observation was in the set the report was built from: {set:?}"
    );
}

#[tokio::test]
async fn an_observation_of_other_workers_is_left_out_not_a_stall() {
    // member 3 (driven by this test) sends a validly signed observation whose worker list
    // is not the market's: a set holding it makes no report, so it must stay out of sets
    let (s, _) = counted_market().await;
    let mut dn = Dn::new(s, 4, 1, None).await;
    let exec = request(&dn).await;
    let liar = dn.keys[3].clone();
    for i in 0..3 {
        dn.spawn(i, None);
    }
    dn.wait_endpoints(0..3).await;
    let mut odd = lie(&dn, exec, liar.address(), 50);
    odd.workers.reverse();
    let own = wire::sign_observation(odd, &liar).unwrap();
    for to in 0..3 {
        let env = Envelope {
            don_id: 1,
            config_version: 1,
            execution_id: exec,
            market: dn.s.dev.contracts.market,
            market_id: dn.s.market_id.into(),
            sender: liar.address(),
            body: Body::Observation {
                observation: own.clone(),
            },
        };
        assert_eq!(post(&dn, to, &env, &liar).await, 200);
    }
    let took = dn.wait_resolved(FAULT_BOUND).await;
    eprintln!("an unusable observation: resolved in {took:?}");
    dn.assert_resolved_once(&[0, 1, 2]).await;
    let v = dn.round(0).await.unwrap();
    let set: Vec<Address> = serde_json::from_value(v["outcome"]["don"]["set"].clone()).unwrap();
    assert!(!set.contains(&liar.address()), "{set:?}");
}

#[tokio::test]
async fn sigterm_stops_a_member_mid_agreement_and_it_resumes_on_restart() {
    let (s, _) = counted_market().await;
    let mut dn = Dn::new(s, 4, 1, None).await;
    // two of four: no quorum, their agreements run on and on
    dn.spawn(0, None);
    dn.spawn(1, None);
    request(&dn).await;
    let deadline = Instant::now() + FAULT_BOUND;
    while !dn.log(0).contains("consensus started") {
        assert!(
            Instant::now() < deadline,
            "member 0 never reached its agreement:\n{}",
            dn.log(0)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pid = dn.procs[0].as_ref().unwrap().id().unwrap();
    let asked = Instant::now();
    std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    let status = tokio::time::timeout(
        Duration::from_secs(15),
        dn.procs[0].as_mut().unwrap().wait(),
    )
    .await
    .expect("the member stopped within 15 s of SIGTERM")
    .unwrap();
    eprintln!(
        "member stopped {:?} after SIGTERM ({status})",
        asked.elapsed()
    );
    assert!(status.success(), "{}", dn.log(0));
    // restarted, with the other two members: it takes the execution up again
    dn.spawn(0, None);
    dn.spawn(2, None);
    dn.spawn(3, None);
    dn.wait_resolved(FAULT_BOUND).await;
    dn.assert_resolved_once(&[0, 1, 2, 3]).await;
}

/// A proxy in front of one member's endpoint: while `storm` holds, it drops half the
/// messages and delays the rest by up to 400 ms (out of order); healed, it forwards all.
async fn storm_proxy(listen: u16, to: u16, storm: Arc<std::sync::atomic::AtomicBool>) {
    let l = tokio::net::TcpListener::bind(("127.0.0.1", listen))
        .await
        .unwrap();
    let http = reqwest::Client::new();
    let app = axum::Router::new().fallback(
        move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
            let (http, storm) = (http.clone(), storm.clone());
            async move {
                if storm.load(Ordering::SeqCst) {
                    let (drop_it, delay) = {
                        use rand::Rng;
                        let mut rng = rand::thread_rng();
                        (rng.gen_bool(0.5), rng.gen_range(0..400u64))
                    };
                    if drop_it {
                        return axum::http::StatusCode::SERVICE_UNAVAILABLE;
                    }
                    tokio::time::sleep(Duration::from_millis(delay)).await;
                }
                let mut req = http
                    .post(format!("http://127.0.0.1:{to}{}", wire::PATH))
                    .body(body.to_vec());
                for (k, v) in &headers {
                    if k.as_str().starts_with("x-") || k.as_str() == "content-type" {
                        req = req.header(k.clone(), v.clone());
                    }
                }
                match req.send().await {
                    Ok(r) => axum::http::StatusCode::from_u16(r.status().as_u16())
                        .unwrap_or(axum::http::StatusCode::BAD_GATEWAY),
                    Err(_) => axum::http::StatusCode::BAD_GATEWAY,
                }
            }
        },
    );
    tokio::spawn(async move { axum::serve(l, app).await });
}

#[tokio::test]
async fn messages_dropped_delayed_and_reordered_then_healed_deliver_one_report() {
    let (s, _) = counted_market().await;
    let mut dn = Dn::new(s, 4, 1, None).await;
    let storm = Arc::new(std::sync::atomic::AtomicBool::new(true));
    for i in 0..4 {
        let listen = free_port();
        dn.listen[i] = Some(listen);
        let port = dn.cfg.members[i].url.port().unwrap();
        storm_proxy(port, listen, storm.clone()).await;
    }
    dn.spawn_all();
    request(&dn).await;
    // the members observe and run their consensus through the storm for 6 s, then heal
    tokio::time::sleep(Duration::from_secs(6)).await;
    storm.store(false, Ordering::SeqCst);
    let took = dn.wait_resolved(FAULT_BOUND).await;
    eprintln!("a stormy network, healed after 6 s: resolved {took:?} after the heal");
    // one delivery, and the same agreed bytes in every member's transcript
    dn.assert_resolved_once(&[0, 1, 2, 3]).await;
}
