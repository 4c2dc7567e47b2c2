//! Lying members against the consensus, through the real wire format: a leader that sends
//! each honest member a different valid proposal (at its own round and ahead of it), a
//! member that tries to put a set forward through every message kind, extreme and forged
//! observations, and two liars of seven. Each ends with one decided set: every honest
//! member agrees on one report, and every report an honest member ever signed is that one
//! (report shopping finds one report).

use super::*;
use cresolver_don::wire::{CommitVote, VoteKind};

/// What a lying member can make with its own key and the messages it receives.
struct Liar {
    i: usize,
    key: PrivateKeySigner,
}

impl Liar {
    fn addr(&self) -> Address {
        self.key.address()
    }

    fn proposal(&self, net: &Net, round: u32, set: &[SignedObservation]) -> Envelope {
        let id = cresolver_don::context::set_id(set);
        let digest = wire::proposal_digest(DON_ID, VERSION, &net.exec, round, None, &id);
        net.envelope(
            self.addr(),
            Body::Proposal {
                round,
                pol_round: None,
                observations: set.to_vec(),
                signature: wire::sign_digest(&self.key, &digest).expect("signs"),
            },
        )
    }

    fn vote(&self, net: &Net, round: u32, kind: VoteKind, set: &[SignedObservation]) -> Envelope {
        let id = cresolver_don::context::set_id(set);
        let digest = wire::vote_digest(DON_ID, VERSION, &net.exec, kind, round, Some(&id));
        net.envelope(
            self.addr(),
            Body::Vote {
                round,
                kind,
                value: Some(id),
                signature: wire::sign_digest(&self.key, &digest).expect("signs"),
            },
        )
    }

    /// Sends `env` to member `to` (it must open: 200).
    async fn tell(&self, net: &Net, to: usize, env: &Envelope) {
        assert_eq!(
            send(net, to, env, &self.key).await,
            200,
            "{} to {to}",
            env.kind()
        );
    }
}

/// Member `i`'s honest observation, signed with its key (what every member receives).
fn signed(net: &Net, i: usize) -> SignedObservation {
    wire::sign_observation(net.observation(i, 0), &net.keys[i]).expect("signs")
}

/// An observation of extreme values, validly signed by the liar.
fn extreme(net: &Net, liar: &Liar) -> SignedObservation {
    let mut o = net.observation(liar.i, 0);
    o.timestamp = u32::MAX;
    for (w, position) in o
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
    wire::sign_observation(o, &liar.key).expect("signs")
}

/// Every report an honest member signed (its persisted lock), distinct.
fn signed_reports(dons: &[Arc<Don>], stores: &[Persist], exec: &B256) -> Vec<B256> {
    let _ = dons;
    let mut digests: Vec<B256> = stores
        .iter()
        .filter_map(|s| s.lock(exec).expect("reads"))
        .map(|l| l.digest)
        .collect();
    digests.sort();
    digests.dedup();
    digests
}

/// The count of a `cresolver_don_events_total` series on a member.
pub(super) fn events(don: &Don, event: &str, detail: &str) -> u64 {
    let needle = format!("cresolver_don_events_total{{event=\"{event}\",detail=\"{detail}\"}} ");
    don.metrics()
        .encode()
        .lines()
        .find_map(|l| l.strip_prefix(&needle).and_then(|v| v.trim().parse().ok()))
        .unwrap_or(0)
}

/// Starts the honest members with file-backed state (so the test reads what each signed),
/// sends the lies, runs their agreement; returns the agreements and each one's store.
async fn run_with_liars(
    net: &mut Net,
    honest: &[usize],
    lies: impl AsyncFnOnce(&Net),
) -> (Vec<Agreed>, Vec<Arc<Don>>, Vec<Persist>, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let dons: Vec<Arc<Don>> = honest
        .iter()
        .map(|i| {
            let p = Persist::open(&dir.path().join(format!("m{i}.sqlite"))).expect("db");
            net.start(*i, p)
        })
        .collect();
    lies(net).await;
    let runs = dons
        .iter()
        .zip(honest)
        .map(|(d, i)| (d.clone(), net.job(net.observation(*i, 0))))
        .collect();
    let agreed = agree_all(runs).await;
    let stores = honest
        .iter()
        .map(|i| Persist::open(&dir.path().join(format!("m{i}.sqlite"))).expect("db"))
        .collect();
    (agreed, dons, stores, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_that_proposes_a_different_set_to_each_member_decides_nothing_alone() {
    let mut net = Net::new(4, 1).await;
    let liar = Liar {
        i: net.leader(0),
        key: net.keys[net.leader(0)].clone(),
    };
    net.listeners[liar.i] = None;
    let honest: Vec<usize> = (0..4).filter(|i| *i != liar.i).collect();
    let own = signed(&net, liar.i);
    // for honest member k: its set leaves out the next honest member's observation, so
    // each of the three gets a different valid set of three (a different report)
    let set_for = |k: usize| -> Vec<SignedObservation> {
        let left_out = honest[(k + 1) % 3];
        let mut s: Vec<SignedObservation> = honest
            .iter()
            .filter(|i| **i != left_out)
            .map(|i| signed(&net, *i))
            .collect();
        s.push(own.clone());
        s
    };
    // and the rounds ahead that it leads: more different sets, to each member
    let ahead: Vec<u32> = (1..=8u32).filter(|r| net.leader(*r) == liar.i).collect();
    assert!(!ahead.is_empty());
    let sets: Vec<Vec<SignedObservation>> = (0..honest.len()).map(set_for).collect();
    let (agreed, dons, stores, _dir) = run_with_liars(&mut net, &honest, async |net: &Net| {
        for (k, to) in honest.iter().enumerate() {
            let set = &sets[k];
            for round in std::iter::once(0).chain(ahead.iter().copied()) {
                liar_tell_all(&liar, net, *to, round, set).await;
            }
        }
    })
    .await;
    net.check_all(
        &agreed,
        &honest
            .iter()
            .map(|i| (*i, net.observation(*i, 0)))
            .collect::<Vec<_>>(),
    );
    // report shopping: every report an honest member signed is the one agreed
    let signed_by_honest = signed_reports(&dons, &stores, &net.exec);
    assert_eq!(
        signed_by_honest,
        vec![agreed[0].digest],
        "one signed report"
    );
    for a in &agreed {
        assert_ne!(a.leader, liar.addr(), "the liar's sets were never decided");
        assert!(a.commits.len() >= 3, "2f+1 precommits decide");
    }
}

/// A "decision" of `set` at round 0 from the liar, whose commit certificate holds the
/// liar's own precommit twice and a precommit of `forged_voter` that the liar signed.
fn forged_decision(
    net: &Net,
    liar: &Liar,
    set: &[SignedObservation],
    precommit: &B256,
    forged_voter: Address,
) -> Envelope {
    net.envelope(
        liar.addr(),
        Body::Decided {
            round: 0,
            observations: set.to_vec(),
            commits: vec![
                CommitVote {
                    voter: liar.addr(),
                    signature: wire::sign_digest(&liar.key, precommit).expect("signs"),
                },
                CommitVote {
                    voter: liar.addr(),
                    signature: wire::sign_digest(&liar.key, precommit).expect("signs"),
                },
                CommitVote {
                    voter: forged_voter,
                    signature: wire::sign_digest(&liar.key, precommit).expect("signs"),
                },
            ],
            report_signature: None,
            agreed: false,
        },
    )
}

/// Asserts that the aggregate's timestamp, and the position and scores of the first two
/// workers (answered on every honest member), lie between what the honest members saw.
fn assert_bracketed_by_honest(agg: &Aggregate, honest_obs: &[(usize, Observation)]) {
    let stamps: Vec<u32> = honest_obs.iter().map(|(_, o)| o.timestamp).collect();
    assert!(
        (*stamps.iter().min().unwrap()..=*stamps.iter().max().unwrap()).contains(&agg.timestamp)
    );
    for w in 0..2 {
        let seen: Vec<ObservedAnswer> = honest_obs
            .iter()
            .map(|(_, o)| o.workers[w].answer.unwrap())
            .collect();
        let got = agg.workers[w].answer.expect("answered");
        assert_eq!(got.position, seen[0].position, "the honest position holds");
        for k in 0..3 {
            let s = seen.iter().map(|a| a.scores[k]);
            let range = s.clone().min().unwrap()..=s.max().unwrap();
            assert!(range.contains(&got.scores[k]), "worker {w} score {k}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_cannot_put_a_set_forward_through_any_message_kind() {
    let mut net = Net::new(4, 1).await;
    // the liar does not lead round 0: an honest leader proposes first
    let li = (0..4).find(|i| *i != net.leader(0)).expect("a non-leader");
    let liar = Liar {
        i: li,
        key: net.keys[li].clone(),
    };
    net.listeners[liar.i] = None;
    let honest: Vec<usize> = (0..4).filter(|i| *i != liar.i).collect();
    let lie = extreme(&net, &liar);
    // its set: its extreme observation and two honest ones
    let mut set = vec![
        lie.clone(),
        signed(&net, honest[0]),
        signed(&net, honest[1]),
    ];
    set.sort_by_key(|o| o.observation.observer);
    let id = cresolver_don::context::set_id(&set);
    let precommit = wire::vote_digest(
        DON_ID,
        VERSION,
        &net.exec,
        VoteKind::Precommit,
        0,
        Some(&id),
    );
    let (agreed, dons, stores, _dir) = run_with_liars(&mut net, &honest, async |net: &Net| {
        for to in &honest {
            // its extreme observation: taken, like any member's
            liar.tell(
                net,
                *to,
                &net.envelope(
                    liar.addr(),
                    Body::Observation {
                        observation: lie.clone(),
                    },
                ),
            )
            .await;
            // a proposal of a round it does not lead
            liar.tell(net, *to, &liar.proposal(net, 0, &set)).await;
            // votes for its set
            liar.tell(net, *to, &liar.vote(net, 0, VoteKind::Prevote, &set))
                .await;
            liar.tell(net, *to, &liar.vote(net, 0, VoteKind::Precommit, &set))
                .await;
            // a "decision" with its own precommit counted three times and a forged one
            let decided = forged_decision(net, &liar, &set, &precommit, net.addr(honest[0]));
            liar.tell(net, *to, &decided).await;
        }
    })
    .await;
    let honest_obs: Vec<(usize, Observation)> = honest
        .iter()
        .map(|i| (*i, net.observation(*i, 0)))
        .collect();
    let agg = net.check_all(&agreed, &honest_obs);
    assert_ne!(cresolver_don::context::set_id(&agreed[0].observations), id);
    assert_eq!(agreed[0].leader, net.addr(net.leader(agreed[0].attempt)));
    assert_ne!(agreed[0].leader, liar.addr());
    assert_eq!(
        signed_reports(&dons, &stores, &net.exec),
        vec![agreed[0].digest]
    );
    // whatever the set, every value lies between what honest members saw
    assert_bracketed_by_honest(&agg, &honest_obs);
    // the members saw and refused the proposal of a non-leader and the forged decision
    let refused = |why| {
        dons.iter()
            .map(|d| events(d, "message_refused", why))
            .sum::<u64>()
    };
    assert!(refused("not_the_leader") >= 1);
    assert!(refused("bad_commit_certificate") >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn seven_members_two_liars_leading_the_first_rounds() {
    let mut net = Net::new(7, 2).await;
    let liars: Vec<Liar> = [net.leader(0), net.leader(1)]
        .into_iter()
        .map(|i| Liar {
            i,
            key: net.keys[i].clone(),
        })
        .collect();
    for l in &liars {
        net.listeners[l.i] = None;
    }
    let honest: Vec<usize> = (0..7).filter(|i| liars.iter().all(|l| l.i != *i)).collect();
    let liar_obs: Vec<SignedObservation> = liars.iter().map(|l| extreme(&net, l)).collect();
    // each liar, in its round, proposes to each honest member a different valid set of
    // 2f+1 = 5 (both liars' observations and three honest ones), and both liars vote for it
    let set_for = |k: usize| -> Vec<SignedObservation> {
        let mut s: Vec<SignedObservation> = (0..3)
            .map(|j| signed(&net, honest[(k + j) % honest.len()]))
            .collect();
        s.extend(liar_obs.iter().cloned());
        s
    };
    let sets: Vec<Vec<SignedObservation>> = (0..honest.len()).map(set_for).collect();
    let (agreed, dons, stores, _dir) = run_with_liars(&mut net, &honest, async |net: &Net| {
        for (k, to) in honest.iter().enumerate() {
            let set = &sets[k];
            for (round, l) in liars.iter().enumerate() {
                let round = round as u32;
                liar_tell_all(l, net, *to, round, set).await;
                let other = &liars[1 - round as usize];
                other
                    .tell(net, *to, &other.vote(net, round, VoteKind::Prevote, set))
                    .await;
                other
                    .tell(net, *to, &other.vote(net, round, VoteKind::Precommit, set))
                    .await;
            }
        }
    })
    .await;
    assert_eq!(agreed.len(), 5);
    net.check_all(
        &agreed,
        &honest
            .iter()
            .map(|i| (*i, net.observation(*i, 0)))
            .collect::<Vec<_>>(),
    );
    assert_eq!(
        signed_reports(&dons, &stores, &net.exec),
        vec![agreed[0].digest]
    );
    for a in &agreed {
        assert!(liars.iter().all(|l| a.leader != l.addr()));
        assert!(a.commits.len() >= 5);
    }
}

async fn liar_tell_all(l: &Liar, net: &Net, to: usize, round: u32, set: &[SignedObservation]) {
    l.tell(net, to, &l.proposal(net, round, set)).await;
    l.tell(net, to, &l.vote(net, round, VoteKind::Prevote, set))
        .await;
    l.tell(net, to, &l.vote(net, round, VoteKind::Precommit, set))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_that_answered_some_members_keeps_the_liars_values_off() {
    // worker 0 answers Yes to two honest members and fails for the third; the liar says
    // it answered No with scores 1/1/1, and as leader proposes {liar, one that saw the
    // answer, the one that did not} to everyone
    let mut net = Net::new(4, 1).await;
    let li = net.leader(0);
    let liar = Liar {
        i: li,
        key: net.keys[li].clone(),
    };
    net.listeners[li] = None;
    let honest: Vec<usize> = (0..4).filter(|i| *i != li).collect();
    let missed = honest[2];
    let obs_of = |net: &Net, i: usize| {
        let mut o = net.observation(i, 0);
        if i == missed {
            o.workers[0].answer = None;
            o.workers[0].failure = Some("timeout".into());
        }
        o
    };
    let mut lie = net.observation(li, 0);
    lie.workers[0].answer = Some(ObservedAnswer {
        position: Position::No,
        confidence_ppm: 1_000_000,
        scores: [1, 1, 1],
    });
    let lie = wire::sign_observation(lie, &liar.key).expect("signs");
    let set = vec![
        lie.clone(),
        wire::sign_observation(obs_of(&net, honest[0]), &net.keys[honest[0]]).expect("signs"),
        wire::sign_observation(obs_of(&net, missed), &net.keys[missed]).expect("signs"),
    ];
    let dir = tempfile::tempdir().expect("tempdir");
    let dons: Vec<Arc<Don>> = honest
        .iter()
        .map(|i| {
            net.start(
                *i,
                Persist::open(&dir.path().join(format!("{i}"))).expect("db"),
            )
        })
        .collect();
    for to in &honest {
        liar.tell(
            &net,
            *to,
            &net.envelope(
                liar.addr(),
                Body::Observation {
                    observation: lie.clone(),
                },
            ),
        )
        .await;
        liar_tell_all(&liar, &net, *to, 0, &set).await;
    }
    let runs = dons
        .iter()
        .zip(&honest)
        .map(|(d, i)| (d.clone(), net.job(obs_of(&net, *i))))
        .collect();
    let agreed = agree_all(runs).await;
    let honest_obs: Vec<(usize, Observation)> =
        honest.iter().map(|i| (*i, obs_of(&net, *i))).collect();
    let agg = net.check_all(&agreed, &honest_obs);
    match agg.workers[0].answer {
        // not answered: the honest member that missed the answer saw that
        None => {}
        // answered: the honest Yes and its scores, never the liar's
        Some(a) => {
            assert_eq!(a.position, Position::Yes);
            assert!(a.scores.iter().all(|s| *s > 1), "scores {:?}", a.scores);
        }
    }
}
