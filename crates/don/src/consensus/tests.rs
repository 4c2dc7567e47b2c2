//! Unit tests of the pure core, driven step by step: each feeds one input at a chosen
//! clock reading and checks the effects, and their order, that come back.

use super::*;
use crate::wire::sign_observation;
use alloy::primitives::keccak256;
use alloy::signers::local::PrivateKeySigner;
use cresolver_core::don::{Observation, ObservedAnswer, Position, WorkerObservation};
use cresolver_core::{MarketId, RoundKey};

mod polka;

const GRACE_MS: u64 = 300;

/// Four members (f = 1) of one execution, with real secp256k1 keys.
struct Fixture {
    keys: Vec<PrivateKeySigner>,
    params: Arc<Params>,
    exec: B256,
    market: Address,
    market_id: MarketId,
    workers: Vec<Address>,
}

impl Fixture {
    fn new() -> Self {
        let keys: Vec<PrivateKeySigner> = (0..4).map(|_| PrivateKeySigner::random()).collect();
        let members: Vec<Address> = keys.iter().map(PrivateKeySigner::address).collect();
        let params = Arc::new(Params {
            don_id: 1,
            config_version: 1,
            f: 1,
            context: Bytes::from(vec![7u8; 96]),
            members,
            attempt_timeout_ms: 1_000,
            observation_grace_ms: GRACE_MS,
            max_attempts: 10,
            #[cfg(feature = "mutations")]
            mutation: None,
        });
        Self {
            keys,
            params,
            exec: keccak256(b"an execution"),
            market: Address::repeat_byte(0xaa),
            market_id: MarketId::from(42u64),
            workers: vec![Address::repeat_byte(0xb0), Address::repeat_byte(0xb1)],
        }
    }

    fn addr(&self, i: usize) -> Address {
        self.keys[i].address()
    }

    /// The member leading `round`.
    fn leader(&self, round: u32) -> usize {
        let l = self.params.leader(&self.exec, round);
        (0..4).find(|i| self.addr(*i) == l).expect("a member")
    }

    /// Any member that does not lead `round`.
    fn follower(&self, round: u32) -> usize {
        (self.leader(round) + 1) % 4
    }

    fn observation(&self, i: usize) -> SignedObservation {
        let worker = |w: usize| WorkerObservation {
            address: self.workers[w],
            answer: Some(ObservedAnswer {
                position: Position::Yes,
                confidence_ppm: 800_000 + 1_000 * i as u32,
                scores: [70, 60 + i as u8, 50],
            }),
            failure: None,
        };
        let o = Observation {
            don_id: 1,
            config_version: 1,
            execution_id: self.exec,
            market: self.market,
            market_id: self.market_id,
            observer: self.addr(i),
            timestamp: 1_700_000_000 + i as u32,
            workers: vec![worker(0), worker(1)],
        };
        sign_observation(o, &self.keys[i]).expect("signs")
    }

    fn job(&self, i: usize) -> Job {
        Job {
            execution_id: self.exec,
            round: RoundKey::new(self.market, self.market_id),
            observation: self.observation(i).observation,
            workers: self.workers.clone(),
            build: Arc::new(|agg| Ok(Bytes::from(serde_json::to_vec(agg)?))),
            on_decided: None,
        }
    }

    fn core(&self, i: usize) -> Core {
        let keys: Arc<dyn Keys> = Arc::new(Secp256k1Keys::new(self.keys[i].clone()));
        Core::new(self.params.clone(), keys, self.job(i), self.observation(i))
    }

    /// A started core of member `i` (its start effects dropped).
    fn started(&self, i: usize) -> Core {
        let mut c = self.core(i);
        c.handle(
            Input::Start {
                log: Vec::new(),
                lock: None,
            },
            Duration::ZERO,
        );
        c
    }

    fn envelope(&self, sender: usize, body: Body) -> Envelope {
        Envelope {
            don_id: 1,
            config_version: 1,
            execution_id: self.exec,
            market: self.market,
            market_id: self.market_id,
            sender: self.addr(sender),
            body,
        }
    }

    fn observation_msg(&self, i: usize) -> Input {
        Input::Message(self.envelope(
            i,
            Body::Observation {
                observation: self.observation(i),
            },
        ))
    }

    fn proposal(&self, sender: usize, round: u32, set: &[usize]) -> (Input, B256) {
        let value = SetValue::new(set.iter().map(|i| self.observation(*i)).collect());
        let d = wire::proposal_digest(1, 1, &self.exec, round, None, &value.id);
        let signature = wire::sign_digest(&self.keys[sender], &d).expect("signs");
        let body = Body::Proposal {
            round,
            pol_round: None,
            observations: value.observations.to_vec(),
            signature,
        };
        (Input::Message(self.envelope(sender, body)), value.id)
    }

    fn vote_sig(&self, voter: usize, kind: VoteKind, round: u32, value: Option<B256>) -> Bytes {
        let d = wire::vote_digest(1, 1, &self.exec, kind, round, value.as_ref());
        wire::sign_digest(&self.keys[voter], &d).expect("signs")
    }

    fn vote(&self, voter: usize, kind: VoteKind, round: u32, value: Option<B256>) -> Input {
        let signature = self.vote_sig(voter, kind, round, value);
        Input::Message(self.envelope(
            voter,
            Body::Vote {
                round,
                kind,
                value,
                signature,
            },
        ))
    }
}

fn at(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// The messages among the effects, with their position.
fn sent(effects: &[Effect]) -> Vec<(usize, &Envelope)> {
    effects
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match e {
            Effect::Send { env, .. } => Some((i, env)),
            _ => None,
        })
        .collect()
}

fn appended(effects: &[Effect]) -> Vec<(usize, &LogEntry)> {
    effects
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match e {
            Effect::Append(v) => Some(v.iter().map(move |x| (i, x))),
            _ => None,
        })
        .flatten()
        .collect()
}

fn votes_sent(effects: &[Effect], kind: VoteKind) -> Vec<(usize, Option<B256>)> {
    sent(effects)
        .into_iter()
        .filter_map(|(i, env)| match &env.body {
            Body::Vote { kind: k, value, .. } if *k == kind => Some((i, *value)),
            _ => None,
        })
        .collect()
}

fn refused(effects: &[Effect], why: RefuseReason) -> bool {
    effects
        .iter()
        .any(|e| matches!(e, Effect::Event(DonEvent::MessageRefused(w)) if *w == why))
}

/// The recipients of each observation among the effects (`None`: every other member).
fn observations_sent(effects: &[Effect]) -> Vec<Option<Address>> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Send { to, env } if matches!(env.body, Body::Observation { .. }) => Some(*to),
            _ => None,
        })
        .collect()
}

#[test]
fn start_sends_the_own_observation_to_the_leader_alone_and_schedules_the_rebroadcast() {
    let fx = Fixture::new();
    let mut c = fx.core(fx.follower(0));
    let effects = c.handle(
        Input::Start {
            log: Vec::new(),
            lock: None,
        },
        at(5),
    );
    assert_eq!(
        observations_sent(&effects),
        vec![Some(fx.addr(fx.leader(0)))]
    );
    let every = fx.params.rebroadcast_every();
    assert!(effects.iter().any(|e| matches!(
        e,
        Effect::Schedule { at: t, timer: Timer::Rebroadcast } if *t == at(5) + every
    )));
    // a follower waits for the proposal: its propose timeout is scheduled
    assert!(effects.iter().any(|e| matches!(
        e,
        Effect::Schedule {
            timer: Timer::Step {
                round: 0,
                kind: StepKind::Propose
            },
            ..
        }
    )));
}

#[test]
fn the_leader_proposes_at_2f_plus_1_observations_only_once_the_grace_passed() {
    let fx = Fixture::new();
    let l = fx.leader(0);
    let mut c = fx.started(l);
    let others: Vec<usize> = (0..4).filter(|i| *i != l).collect();
    // 2 observations: below 2f+1 = 3, nothing proposed
    let e = c.handle(fx.observation_msg(others[0]), at(10));
    assert!(appended(&e).is_empty(), "{e:?}");
    // 3 (2f+1): the grace starts, not the proposal
    let e = c.handle(fx.observation_msg(others[1]), at(20));
    assert!(appended(&e).is_empty());
    assert!(e.iter().any(|x| matches!(
        x,
        Effect::Schedule { at: t, timer: Timer::Grace } if *t == at(20 + GRACE_MS)
    )));
    // the grace timer: the set of 3 is logged, then proposed
    let e = c.handle(Input::Timeout(Timer::Grace), at(20 + GRACE_MS));
    let logged = appended(&e);
    let (pos, entry) = logged.first().expect("logged");
    assert!(
        matches!(entry, LogEntry::ProposeValue { round: 0, observations } if observations.len() == 3)
    );
    let proposals: Vec<usize> = sent(&e)
        .into_iter()
        .filter(|(_, m)| matches!(m.body, Body::Proposal { .. }))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(proposals.len(), 1);
    assert!(*pos < proposals[0], "logged before it is sent");
}

#[test]
fn a_leader_holding_every_observation_proposes_at_once() {
    let fx = Fixture::new();
    let l = fx.leader(0);
    let mut c = fx.started(l);
    let mut proposed = false;
    for i in (0..4).filter(|i| *i != l) {
        let e = c.handle(fx.observation_msg(i), at(10));
        proposed |= sent(&e)
            .iter()
            .any(|(_, m)| matches!(m.body, Body::Proposal { .. }));
    }
    assert!(proposed, "no proposal with all 4 observations held");
}

#[test]
fn a_leader_says_what_it_proposed_only_to_a_job_that_listens() {
    let fx = Fixture::new();
    let l = fx.leader(0);
    for listens in [false, true] {
        let keys: Arc<dyn Keys> = Arc::new(Secp256k1Keys::new(fx.keys[l].clone()));
        let mut job = fx.job(l);
        if listens {
            job.on_decided = Some(Arc::new(|_: &Bytes, _| {}));
        }
        let mut c = Core::new(fx.params.clone(), keys, job, fx.observation(l));
        c.handle(
            Input::Start {
                log: Vec::new(),
                lock: None,
            },
            Duration::ZERO,
        );
        let mut effects = Vec::new();
        for i in (0..4).filter(|i| *i != l) {
            effects.extend(c.handle(fx.observation_msg(i), at(10)));
        }
        let proposed: Vec<&Bytes> = effects
            .iter()
            .filter_map(|e| match e {
                Effect::Proposed { round: 0, report } => Some(report),
                _ => None,
            })
            .collect();
        if !listens {
            assert!(proposed.is_empty(), "nobody listens: no report built");
            continue;
        }
        assert_eq!(proposed.len(), 1, "one proposal, one report");
        // the proposed set's report, as the decision would build it; nothing signed
        let set = effects
            .iter()
            .find_map(|e| match e {
                Effect::Send { env, .. } => match &env.body {
                    Body::Proposal { observations, .. } => Some(observations.clone()),
                    _ => None,
                },
                _ => None,
            })
            .unwrap_or_else(|| panic!("a proposal was sent"));
        let built = c
            .build(&set)
            .unwrap_or_else(|e| panic!("the proposed set builds: {e}"));
        assert_eq!(*proposed[0], built, "the proposed set's report");
        assert!(c.decided().is_none(), "proposing decides nothing");
        assert!(
            !effects.iter().any(|e| matches!(e, Effect::Lock(_))),
            "proposing locks and signs no report"
        );
    }
}

#[test]
fn a_valid_proposal_is_logged_before_the_prevote_it_causes() {
    let fx = Fixture::new();
    let me = fx.follower(0);
    let mut c = fx.started(me);
    let (p, id) = fx.proposal(fx.leader(0), 0, &[0, 1, 2]);
    let e = c.handle(p, at(30));
    let logged = appended(&e);
    assert!(matches!(
        logged.first(),
        Some((_, LogEntry::Proposal { valid: true, .. }))
    ));
    let prevotes = votes_sent(&e, VoteKind::Prevote);
    assert_eq!(prevotes.len(), 1, "{e:?}");
    assert_eq!(prevotes[0].1, Some(id));
    assert!(logged[0].0 < prevotes[0].0);
}

#[test]
fn a_proposal_from_a_member_that_does_not_lead_the_round_is_refused() {
    let fx = Fixture::new();
    let me = fx.follower(0);
    let other = (0..4)
        .find(|i| *i != me && *i != fx.leader(0))
        .expect("a third member");
    let mut c = fx.started(me);
    let (p, _) = fx.proposal(other, 0, &[0, 1, 2]);
    let e = c.handle(p, at(30));
    assert!(refused(&e, RefuseReason::NotTheLeader));
    assert!(appended(&e).is_empty());
    assert!(votes_sent(&e, VoteKind::Prevote).is_empty());
}

#[test]
fn a_second_different_proposal_of_a_round_is_equivocation_and_changes_nothing() {
    let fx = Fixture::new();
    let me = fx.follower(0);
    let mut c = fx.started(me);
    let (first, id) = fx.proposal(fx.leader(0), 0, &[0, 1, 2]);
    c.handle(first, at(30));
    let (second, other) = fx.proposal(fx.leader(0), 0, &[0, 1, 3]);
    assert_ne!(id, other);
    let e = c.handle(second, at(31));
    assert!(refused(&e, RefuseReason::EquivocatingLeader));
    assert!(e.iter().any(|x| {
        matches!(
            x,
            Effect::Event(DonEvent::EquivocationSeen(EquivocationKind::Proposal))
        )
    }));
    assert!(votes_sent(&e, VoteKind::Prevote).is_empty());
}

/// Member `me` gets the leader's proposal and 2f+1 prevotes and precommits for it.
fn decide(fx: &Fixture, c: &mut Core, me: usize) -> (B256, Vec<Effect>) {
    let (p, id) = fx.proposal(fx.leader(0), 0, &[0, 1, 2]);
    c.handle(p, at(30));
    for v in (0..4).filter(|v| *v != me).take(2) {
        c.handle(fx.vote(v, VoteKind::Prevote, 0, Some(id)), at(40));
    }
    let mut last = Vec::new();
    for v in (0..4).filter(|v| *v != me).take(2) {
        last = c.handle(fx.vote(v, VoteKind::Precommit, 0, Some(id)), at(50));
    }
    (id, last)
}

#[test]
fn two_f_plus_one_precommits_decide_and_the_report_is_locked_before_its_signature_leaves() {
    let fx = Fixture::new();
    let me = fx.follower(0);
    let mut c = fx.started(me);
    let (id, e) = decide(&fx, &mut c, me);
    assert_eq!(c.decided(), Some((0, id)));
    let lock = e
        .iter()
        .position(|x| matches!(x, Effect::Lock(_)))
        .expect("the report is locked");
    let decided = sent(&e)
        .into_iter()
        .find(|(_, m)| {
            matches!(
                m.body,
                Body::Decided {
                    report_signature: Some(_),
                    ..
                }
            )
        })
        .expect("the decision is sent with the report signature");
    assert!(lock < decided.0);
    // the signature is over the digest of the report of the decided set
    let Effect::Lock(l) = &e[lock] else {
        unreachable!()
    };
    assert_eq!(
        wire::recover(&l.digest, &l.signature).ok(),
        Some(fx.addr(me))
    );
    assert_eq!(l.digest, fx.params.digest(&l.report));
    assert!(
        !e.iter().any(|x| matches!(x, Effect::Agreed(_))),
        "one signature is not f+1"
    );
}

#[test]
fn a_second_report_signature_makes_the_agreement() {
    let fx = Fixture::new();
    let me = fx.follower(0);
    let mut c = fx.started(me);
    let (id, e) = decide(&fx, &mut c, me);
    let Some(Effect::Lock(l)) = e.iter().find(|x| matches!(x, Effect::Lock(_))) else {
        panic!("locked")
    };
    let other = (0..4).find(|i| *i != me).expect("another member");
    let sig = wire::sign_digest(&fx.keys[other], &l.digest).expect("signs");
    let commits = (0..3)
        .map(|v| CommitVote {
            voter: fx.addr(v),
            signature: fx.vote_sig(v, VoteKind::Precommit, 0, Some(id)),
        })
        .collect();
    let msg = fx.envelope(
        other,
        Body::Decided {
            round: 0,
            observations: (0..3).map(|i| fx.observation(i)).collect(),
            commits,
            report_signature: Some(sig),
            agreed: false,
        },
    );
    let e = c.handle(Input::Message(msg), at(60));
    let Some(Effect::Agreed(a)) = e.iter().find(|x| matches!(x, Effect::Agreed(_))) else {
        panic!("no agreement: {e:?}")
    };
    assert_eq!(a.signers[0], fx.addr(me), "own signature first");
    assert_eq!(a.signers.len(), 2);
    assert!(c.finished());
    assert!(
        c.handle(Input::Timeout(Timer::Rebroadcast), at(70))
            .is_empty()
    );
}

#[test]
fn a_certificate_with_duplicated_signers_is_refused() {
    let fx = Fixture::new();
    let me = fx.follower(0);
    let liar = (0..4).find(|i| *i != me).expect("another member");
    let mut c = fx.started(me);
    let value = SetValue::new((0..3).map(|i| fx.observation(i)).collect());
    let own = CommitVote {
        voter: fx.addr(liar),
        signature: fx.vote_sig(liar, VoteKind::Precommit, 0, Some(value.id)),
    };
    let msg = fx.envelope(
        liar,
        Body::Decided {
            round: 0,
            observations: value.observations.to_vec(),
            commits: vec![own.clone(), own.clone(), own],
            report_signature: None,
            agreed: false,
        },
    );
    let e = c.handle(Input::Message(msg), at(10));
    assert!(refused(&e, RefuseReason::BadCommitCertificate));
    assert_eq!(c.decided(), None);
}

#[test]
fn the_leader_sends_its_observation_to_nobody_and_a_new_round_s_leader_is_sent_it() {
    let fx = Fixture::new();
    let leader = fx.leader(0);
    let mut c = fx.core(leader);
    let effects = c.handle(
        Input::Start {
            log: Vec::new(),
            lock: None,
        },
        at(5),
    );
    assert_eq!(observations_sent(&effects), Vec::<Option<Address>>::new());
    // f+1 prevotes of round 1 move it there: it sends its observation to round 1's
    // leader (the next member of the rotation)
    let others: Vec<usize> = (0..4).filter(|i| *i != leader).collect();
    c.handle(fx.vote(others[0], VoteKind::Prevote, 1, None), at(10));
    let effects = c.handle(fx.vote(others[1], VoteKind::Prevote, 1, None), at(11));
    assert_eq!(c.round(), 1);
    assert_ne!(fx.leader(1), leader);
    assert_eq!(
        observations_sent(&effects),
        vec![Some(fx.addr(fx.leader(1)))]
    );
}

#[test]
fn f_plus_one_votes_far_ahead_move_the_core_one_does_not() {
    let fx = Fixture::new();
    let me = fx.follower(0);
    let mut c = fx.started(me);
    let far = ROUND_WINDOW + 5;
    let others: Vec<usize> = (0..4).filter(|i| *i != me).collect();
    c.handle(fx.vote(others[0], VoteKind::Prevote, far, None), at(10));
    assert_eq!(c.round(), 0);
    assert_eq!(c.held_for(fx.addr(others[0])).ahead_votes, 1);
    c.handle(fx.vote(others[1], VoteKind::Prevote, far, None), at(11));
    assert_eq!(c.round(), far);
    assert_eq!(c.held_for(fx.addr(others[0])).ahead_votes, 0);
}

#[test]
fn a_restarted_core_replays_its_log_to_the_same_votes_and_sends_none_until_it_resends() {
    let fx = Fixture::new();
    let me = fx.follower(0);
    let mut c = fx.started(me);
    let (p, id) = fx.proposal(fx.leader(0), 0, &[0, 1, 2]);
    let e = c.handle(p, at(30));
    let first_prevote = sent(&e)
        .into_iter()
        .find(|(_, m)| matches!(m.body, Body::Vote { .. }))
        .map(|(_, m)| m.clone())
        .expect("prevoted");
    let log: Vec<LogEntry> = appended(&e).into_iter().map(|(_, x)| x.clone()).collect();
    // restart from that log
    let mut again = fx.core(me);
    let e = again.handle(Input::Start { log, lock: None }, at(500));
    assert!(
        appended(&e).is_empty(),
        "replayed entries are not logged again"
    );
    // it resends its observation and the very same prevote (same signature), no other
    let resent: Vec<&Envelope> = sent(&e)
        .into_iter()
        .filter(|(_, m)| matches!(m.body, Body::Vote { .. }))
        .map(|(_, m)| m)
        .collect();
    assert_eq!(resent, vec![&first_prevote]);
    assert_eq!(again.status().step, "prevote");
    // the same proposal again is not a second input
    let (p, same) = fx.proposal(fx.leader(0), 0, &[0, 1, 2]);
    assert_eq!(same, id);
    let e = again.handle(p, at(510));
    assert!(appended(&e).is_empty() && votes_sent(&e, VoteKind::Prevote).is_empty());
}

#[test]
fn a_stored_signature_of_another_report_stops_the_core() {
    let fx = Fixture::new();
    let me = fx.follower(0);
    let mut c = fx.core(me);
    let other = Lock {
        digest: B256::repeat_byte(9),
        report: Bytes::from_static(b"another report"),
        signature: Bytes::from(vec![0u8; 65]),
        observations: Vec::new(),
        attempt: 0,
    };
    c.handle(
        Input::Start {
            log: Vec::new(),
            lock: Some(other),
        },
        Duration::ZERO,
    );
    let (_, e) = decide(&fx, &mut c, me);
    assert!(
        e.iter().any(|x| matches!(x, Effect::SignedAnother)),
        "{e:?}"
    );
    assert!(!e.iter().any(|x| matches!(x, Effect::Lock(_))));
    assert!(c.finished());
}

#[test]
fn a_core_gives_up_after_the_rounds_allowed() {
    let fx = Fixture::new();
    let me = fx.follower(0);
    let mut c = fx.started(me);
    let mut now = 0;
    let mut stalled = None;
    // nobody else speaks: every timeout fires in turn
    for _ in 0..200 {
        let round = c.round();
        let mut e = Vec::new();
        for kind in [StepKind::Propose, StepKind::Prevote, StepKind::Precommit] {
            now += 10_000;
            e.extend(c.handle(Input::Timeout(Timer::Step { round, kind }), at(now)));
        }
        if let Some(Effect::Stalled { rounds }) =
            e.iter().find(|x| matches!(x, Effect::Stalled { .. }))
        {
            stalled = Some(*rounds);
            break;
        }
    }
    assert_eq!(stalled, Some(fx.params.max_attempts));
}

#[test]
fn the_consensus_log_reads_what_the_previous_version_wrote_and_writes_it_alike() {
    // entries as the version before the pure core wrote them (`instance::log`)
    let written = [
        r#"{"input":"timeout","round":3,"kind":"propose"}"#,
        r#"{"input":"timeout","round":0,"kind":"precommit"}"#,
        r#"{"input":"vote","round":1,"kind":"prevote","value":null,"voter":"0x00000000000000000000000000000000000000aa","signature":"0x0102"}"#,
        r#"{"input":"vote","round":2,"kind":"precommit","value":"0x0909090909090909090909090909090909090909090909090909090909090909","voter":"0x00000000000000000000000000000000000000aa","signature":"0x"}"#,
        r#"{"input":"proposal","round":4,"pol_round":2,"proposer":"0x00000000000000000000000000000000000000bb","observations":[],"signature":"0x05","valid":false}"#,
        r#"{"input":"propose_value","round":5,"observations":[]}"#,
    ];
    for line in written {
        let entry: LogEntry = serde_json::from_str(line).expect("reads the previous format");
        assert_eq!(serde_json::to_string(&entry).expect("writes"), line);
    }
}

#[test]
fn a_core_restarted_after_giving_up_gets_the_rounds_allowed_again() {
    let fx = Fixture::new();
    let me = fx.follower(0);
    let mut c = fx.started(me);
    let mut log = Vec::new();
    let mut now = 0;
    while !c.finished() {
        let round = c.round();
        for kind in [StepKind::Propose, StepKind::Prevote, StepKind::Precommit] {
            now += 10_000;
            let e = c.handle(Input::Timeout(Timer::Step { round, kind }), at(now));
            log.extend(appended(&e).into_iter().map(|(_, x)| x.clone()));
        }
    }
    let stalled_at = c.round();
    assert_eq!(stalled_at, fx.params.max_attempts);
    // the node retries the round later: the replayed core resumes at that round and runs
    let mut again = fx.core(me);
    let e = again.handle(Input::Start { log, lock: None }, at(now + 1));
    assert_eq!(again.round(), stalled_at);
    assert!(!again.finished(), "{e:?}");
    assert!(!e.iter().any(|x| matches!(x, Effect::Stalled { .. })));
}
