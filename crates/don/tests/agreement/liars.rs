//! Lying and faulty members against the agreement: extreme and forged observations, a
//! report of the liar's own making, a set that hides the one the report is built from,
//! proposals that make no report, and a leader that floods proposals.

use super::*;

/// A liar: a member that does not lead attempt 0 and never runs `agree`, its observation
/// of extreme values (validly signed by itself), and the honest members.
fn liar(net: &mut Net) -> (usize, PrivateKeySigner, SignedObservation, Vec<usize>) {
    let liar = (0..4).find(|i| *i != net.leader(0)).expect("a non-leader");
    net.listeners[liar] = None;
    let mut extreme = net.observation(liar, 0);
    extreme.timestamp = u32::MAX;
    for (w, position) in extreme
        .workers
        .iter_mut()
        .zip([Position::No, Position::Yes, Position::No])
    {
        w.failure = None;
        w.answer = Some(ObservedAnswer {
            position,
            confidence_ppm: 1_000_000,
            scores: [100, 0, 100],
        });
    }
    let key = net.keys[liar].clone();
    let signed = wire::sign_observation(extreme, &key).expect("signs");
    (liar, key, signed, (0..4).filter(|i| *i != liar).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lying_member_cannot_move_or_forge_the_report() {
    let mut net = Net::new(4, 1).await;
    let (liar, key, extreme, up) = liar(&mut net);
    let (at_liar, victim) = (net.addr(liar), up[0]);
    // (a) its own observation with extreme values: it opens
    let lie = net.envelope(
        at_liar,
        Body::Observation {
            observation: extreme,
        },
    );
    // (b) an observation forged in the victim's name: named as the victim's message, as
    // the liar's, or carried in a proposal, it does not open
    let mut forged = net.observation(victim, 0);
    forged.workers[0].answer = None;
    forged.workers[0].failure = Some("timeout".into());
    let forged = wire::sign_observation(forged, &key).expect("signs");
    let obs = |sender| {
        net.envelope(
            sender,
            Body::Observation {
                observation: forged.clone(),
            },
        )
    };
    let carried = Body::Proposal {
        observations: vec![forged.clone()],
        report: Bytes::from_static(b"x"),
    };
    // (c) a valid signature over a report of its own making: it opens, and stays alone
    let bogus = Bytes::from_static(b"a report no honest member builds");
    let bogus_digest = forwarder_digest(
        &bogus,
        &report_context(DON_ID, VERSION, 1, &net.addresses()),
    );
    let bogus_msg = Body::Signature {
        report: bogus.clone(),
        signature: wire::sign_digest(&key, &bogus_digest).expect("signs"),
        observations: vec![],
    };
    // and a key that is not a member
    let outsider = PrivateKeySigner::random();
    let mut stranger = net.observation(liar, 0);
    stranger.observer = outsider.address();
    let stranger = wire::sign_observation(stranger, &outsider).expect("signs");
    let stranger = net.envelope(
        outsider.address(),
        Body::Observation {
            observation: stranger,
        },
    );
    let lies: Vec<Lie> = vec![
        (lie, key.clone(), 200),
        (obs(net.addr(victim)), key.clone(), 403),
        (obs(at_liar), key.clone(), 403),
        (net.envelope(at_liar, carried), key.clone(), 403),
        (net.envelope(at_liar, bogus_msg), key.clone(), 200),
        (stranger, outsider, 403),
    ];
    let (agreed, honest) = agree_after(&mut net, &up, &lies).await;
    // (b): every honest observer's observation in the set is its own (check_all)
    let agg = net.check_all(&agreed, &honest);
    // (a): the lie was in the set, and moved nothing outside what the honest members saw
    assert!(
        agreed[0].observers().contains(&at_liar),
        "the lie was in the set"
    );
    let stamps: Vec<u32> = honest.iter().map(|(_, o)| o.timestamp).collect();
    assert!(
        (*stamps.iter().min().unwrap()..=*stamps.iter().max().unwrap()).contains(&agg.timestamp)
    );
    for w in 0..2 {
        let seen: Vec<ObservedAnswer> = honest
            .iter()
            .map(|(_, o)| o.workers[w].answer.unwrap())
            .collect();
        let got = agg.workers[w].answer.expect("answered");
        assert_eq!(got.position, seen[0].position, "the honest position holds");
        let confs = seen.iter().map(|a| a.confidence_ppm);
        assert!(
            (confs.clone().min().unwrap()..=confs.max().unwrap()).contains(&got.confidence_ppm)
        );
        for k in 0..3 {
            let s = seen.iter().map(|a| a.scores[k]);
            let range = s.clone().min().unwrap()..=s.max().unwrap();
            assert!(
                range.contains(&got.scores[k]),
                "worker {w} score {k} = {} not in {range:?}",
                got.scores[k]
            );
        }
    }
    // (c): the liar's report never reached f+1 signatures, and the liar signed nothing agreed
    for a in &agreed {
        assert_ne!((&a.report, a.digest), (&bogus, bogus_digest));
        assert!(!a.signers.contains(&at_liar));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_proposal_that_makes_no_report_does_not_move_the_members_to_its_attempt() {
    // the liar leads one of the next attempts and proposes there, before anyone else
    // proposes, a set that makes no report (its own observation alone): followed, it
    // would move every member to an attempt it leads (and, repeated, keep them there)
    let mut net = Net::new(4, 1).await;
    let (liar, key, extreme, up) = liar(&mut net);
    let ahead = (1..=4u32)
        .find(|a| net.leader(*a) == liar)
        .expect("the liar leads one of the next attempts");
    let mut lie = net.envelope(
        net.addr(liar),
        Body::Proposal {
            observations: vec![extreme],
            report: Bytes::from_static(b"x"),
        },
    );
    lie.attempt = ahead;
    let (agreed, honest) = agree_after(&mut net, &up, &[(lie, key, 200)]).await;
    net.check_all(&agreed, &honest);
    for a in &agreed {
        assert!(
            a.attempt < ahead,
            "agreed at attempt {} (the liar's proposal was at {ahead})",
            a.attempt
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_keeps_a_leaders_two_newest_proposals_per_execution() {
    let mut net = Net::new(4, 1).await;
    let (liar, _, extreme, up) = liar(&mut net);
    let don = net.don(up[0], Persist::in_memory().expect("db"));
    let led: Vec<u32> = (0..64u32)
        .filter(|a| net.leader(*a) == liar)
        .take(4)
        .collect();
    let proposal = |attempt: u32| {
        let mut e = net.envelope(
            net.addr(liar),
            Body::Proposal {
                observations: vec![extreme.clone()],
                report: Bytes::from_static(b"x"),
            },
        );
        e.attempt = attempt;
        e
    };
    assert_eq!(don.receive(proposal(led[1])), Ok(()));
    assert_eq!(don.receive(proposal(led[2])), Ok(()));
    // older than both kept: dropped
    assert_eq!(don.receive(proposal(led[0])), Err("stale_proposal"));
    // newer: the oldest kept goes
    assert_eq!(don.receive(proposal(led[3])), Ok(()));
    assert_eq!(don.receive(proposal(led[1])), Err("stale_proposal"));
    // the kept ones are still known (the same proposal again is no equivocation)
    assert_eq!(don.receive(proposal(led[2])), Ok(()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_liars_set_does_not_hide_the_set_the_report_is_built_from() {
    let mut net = Net::new(4, 1).await;
    let (liar, key, extreme, up) = liar(&mut net);
    let at_liar = net.addr(liar);
    // the report the leader proposes once it holds all four observations
    let mut all: Vec<Observation> = up.iter().map(|i| net.observation(*i, 0)).collect();
    all.push(extreme.observation.clone());
    let agg = aggregate(&all, &net.binding(), &net.workers, 1).expect("aggregates");
    let predicted = (net.build())(&agg).expect("builds");
    let context = report_context(DON_ID, VERSION, 1, &net.addresses());
    let signature =
        |r: &Bytes| wire::sign_digest(&key, &forwarder_digest(r, &context)).expect("signs");
    // the liar signs that report first, but sends it with a set that does not make it
    let sig = |report: Bytes| Body::Signature {
        signature: signature(&report),
        report,
        observations: vec![extreme.clone()],
    };
    let lies: Vec<Lie> = vec![
        (
            net.envelope(
                at_liar,
                Body::Observation {
                    observation: extreme.clone(),
                },
            ),
            key.clone(),
            200,
        ),
        (
            net.envelope(at_liar, sig(predicted.clone())),
            key.clone(),
            200,
        ),
        // a second, different report from the same member is refused
        (
            net.envelope(at_liar, sig(Bytes::from_static(b"other"))),
            key.clone(),
            409,
        ),
    ];
    let (agreed, honest) = agree_after(&mut net, &up, &lies).await;
    // recomputed, with the set the report is built from (check_all), not the liar's
    net.check_all(&agreed, &honest);
    for a in &agreed {
        assert_eq!(
            a.report, predicted,
            "the leader proposed the set of all four"
        );
        assert_eq!(a.observations.len(), 4);
    }
}
