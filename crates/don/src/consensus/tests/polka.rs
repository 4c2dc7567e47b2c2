//! The core's polka certificates, driven step by step: a member that holds an
//! equivocator's other prevote takes a relayed polka and follows the re-proposal it
//! carries; a polka of too few, repeated or forged prevotes changes nothing.

use super::*;

/// Member `me` in round `r` (its leader another member) after round 0, where it prevoted
/// the leader's set `id` and holds the equivocator `z`'s nil prevote: the polka of
/// (0, id) counted `z`'s prevote for `id`, which `me` never saw.
struct Split {
    me: usize,
    /// Members other than `me` and `z` that prevoted `id` in round 0 (one of them is
    /// in the polka).
    w: usize,
    z: usize,
    r: u32,
    id: B256,
    core: Core,
}

fn split(fx: &Fixture) -> Split {
    let me = fx.follower(0);
    let r = (1..).find(|r| fx.leader(*r) != me).expect("a round");
    let others: Vec<usize> = (0..4).filter(|i| *i != me).collect();
    let (w, z) = (others[0], others[2]);
    let mut core = fx.started(me);
    let (p, id) = fx.proposal(fx.leader(0), 0, &[0, 1, 2]);
    let e = core.handle(p, at(30));
    assert_eq!(votes_sent(&e, VoteKind::Prevote)[0].1, Some(id));
    // the equivocator's nil prevote reaches `me`; its prevote for `id` went elsewhere
    core.handle(fx.vote(z, VoteKind::Prevote, 0, None), at(31));
    core.handle(fx.vote(w, VoteKind::Prevote, 0, Some(id)), at(32));
    assert!(!core.has_polka(0, &id));
    // f+1 members in round r: `me` joins it, unlocked
    for v in [w, z] {
        core.handle(fx.vote(v, VoteKind::Prevote, r, None), at(40));
    }
    assert_eq!(core.round(), r);
    Split {
        me,
        w,
        z,
        r,
        id,
        core,
    }
}

impl Fixture {
    /// The re-proposal of `set` in `round`, carried from the polka of `pol`.
    fn reproposal(&self, round: u32, pol: u32, set: &[usize]) -> Input {
        let value = SetValue::new(set.iter().map(|i| self.observation(*i)).collect());
        let d = wire::proposal_digest(1, 1, &self.exec, round, Some(pol), &value.id);
        let signature = wire::sign_digest(&self.keys[self.leader(round)], &d).expect("signs");
        let body = Body::Proposal {
            round,
            pol_round: Some(pol),
            observations: value.observations.to_vec(),
            signature,
        };
        Input::Message(self.envelope(self.leader(round), body))
    }

    fn prevote_of(&self, voter: usize, round: u32, id: B256) -> CommitVote {
        CommitVote {
            voter: self.addr(voter),
            signature: self.vote_sig(voter, VoteKind::Prevote, round, Some(id)),
        }
    }

    fn polka(&self, sender: usize, round: u32, id: B256, prevotes: Vec<CommitVote>) -> Input {
        let body = Body::Polka {
            round,
            value: id,
            prevotes,
        };
        Input::Message(self.envelope(sender, body))
    }
}

#[test]
fn without_the_polka_a_member_holding_the_equivocator_s_other_prevote_refuses_the_reproposal() {
    let fx = Fixture::new();
    let mut s = split(&fx);
    let e = s.core.handle(fx.reproposal(s.r, 0, &[0, 1, 2]), at(50));
    assert!(votes_sent(&e, VoteKind::Prevote).is_empty(), "{e:?}");
}

#[test]
fn a_relayed_polka_makes_the_reproposal_acceptable_before_or_after_it() {
    let fx = Fixture::new();
    for polka_first in [true, false] {
        let mut s = split(&fx);
        let prevotes = vec![
            fx.prevote_of(s.me, 0, s.id),
            fx.prevote_of(s.w, 0, s.id),
            fx.prevote_of(s.z, 0, s.id),
        ];
        let polka = fx.polka(fx.leader(s.r), 0, s.id, prevotes);
        let proposal = fx.reproposal(s.r, 0, &[0, 1, 2]);
        let (first, second) = if polka_first {
            (polka, proposal)
        } else {
            (proposal, polka)
        };
        let e1 = s.core.handle(first, at(50));
        let e2 = s.core.handle(second, at(51));
        assert!(s.core.has_polka(0, &s.id));
        // from the certificate: the vote keeper still counts the equivocator's nil
        assert!(!s.core.driver.votes().is_threshold_met(
            &Round::new(0),
            VoteType::Prevote,
            Threshold::Value(SetId(s.id)),
        ));
        let taken = |e: &Vec<Effect>| {
            e.iter()
                .any(|x| matches!(x, Effect::Event(DonEvent::PolkaTaken)))
        };
        assert!(taken(&e1) || taken(&e2));
        let prevoted: Vec<_> = [e1, e2]
            .iter()
            .flat_map(|e| votes_sent(e, VoteKind::Prevote))
            .map(|(_, v)| v)
            .collect();
        assert_eq!(prevoted, vec![Some(s.id)], "polka first: {polka_first}");
        // the equivocator's prevote kept aside only until the driver took the certificate
        assert_eq!(s.core.held_for(fx.addr(s.z)).relayed_prevotes, 0);
    }
}

#[test]
fn a_restarted_core_rebuilds_a_relayed_polka_from_its_log() {
    let fx = Fixture::new();
    let me = fx.follower(0);
    let r = (1..).find(|r| fx.leader(*r) != me).expect("a round");
    let others: Vec<usize> = (0..4).filter(|i| *i != me).collect();
    let (w, z) = (others[0], others[2]);
    let mut c = fx.started(me);
    let mut log = Vec::new();
    let (p, id) = fx.proposal(fx.leader(0), 0, &[0, 1, 2]);
    let mut inputs = vec![
        p,
        fx.vote(z, VoteKind::Prevote, 0, None),
        fx.vote(w, VoteKind::Prevote, r, None),
        fx.vote(z, VoteKind::Prevote, r, None),
    ];
    inputs.push(fx.polka(
        w,
        0,
        id,
        vec![
            fx.prevote_of(me, 0, id),
            fx.prevote_of(w, 0, id),
            fx.prevote_of(z, 0, id),
        ],
    ));
    inputs.push(fx.reproposal(r, 0, &[0, 1, 2]));
    let mut prevote = None;
    for (k, i) in inputs.into_iter().enumerate() {
        for e in c.handle(i, at(30 + k as u64)) {
            match e {
                Effect::Append(v) => log.extend(v),
                Effect::Send { env, .. } => {
                    if let Body::Vote {
                        round,
                        kind: VoteKind::Prevote,
                        value,
                        ..
                    } = env.body
                        && round == r
                    {
                        prevote = Some(value);
                    }
                }
                _ => {}
            }
        }
    }
    assert_eq!(prevote, Some(Some(id)));
    // the log holds only the entries the previous version reads
    let json: Vec<String> = log
        .iter()
        .map(|e| serde_json::to_string(e).expect("json"))
        .collect();
    assert!(json.iter().all(|j| !j.contains("polka")), "{json:?}");
    let mut again = fx.core(me);
    let e = again.handle(Input::Start { log, lock: None }, at(100));
    assert!(again.has_polka(0, &id));
    assert_eq!(again.round(), r);
    // it resends the prevote it sent, not another
    let resent: Vec<_> = sent(&e)
        .into_iter()
        .filter_map(|(_, env)| match &env.body {
            Body::Vote {
                round,
                kind: VoteKind::Prevote,
                value,
                ..
            } if *round == r => Some(*value),
            _ => None,
        })
        .collect();
    assert_eq!(resent, vec![Some(id)]);
}

#[test]
fn a_polka_of_too_few_repeated_or_forged_prevotes_is_refused_and_changes_nothing() {
    let fx = Fixture::new();
    let s = split(&fx);
    let (me, w, z, id) = (s.me, s.w, s.z, s.id);
    let other = B256::repeat_byte(0x42);
    let mut forged_voter = fx.prevote_of(z, 0, id);
    forged_voter.voter = fx.addr(w);
    let cases: Vec<(&str, u32, Vec<CommitVote>)> = vec![
        (
            "too few",
            0,
            vec![fx.prevote_of(me, 0, id), fx.prevote_of(z, 0, id)],
        ),
        (
            "repeated",
            0,
            vec![
                fx.prevote_of(z, 0, id),
                fx.prevote_of(z, 0, id),
                fx.prevote_of(me, 0, id),
            ],
        ),
        (
            "another round",
            0,
            vec![
                fx.prevote_of(me, 0, id),
                fx.prevote_of(w, 0, id),
                fx.prevote_of(z, 1, id),
            ],
        ),
        (
            "another set",
            0,
            vec![
                fx.prevote_of(me, 0, id),
                fx.prevote_of(w, 0, id),
                fx.prevote_of(z, 0, other),
            ],
        ),
        (
            "signed by another",
            0,
            vec![
                fx.prevote_of(me, 0, id),
                fx.prevote_of(z, 0, id),
                forged_voter,
            ],
        ),
    ];
    for (what, round, prevotes) in cases {
        let mut c = split(&fx).core;
        let e = c.handle(fx.polka(z, round, id, prevotes), at(50));
        assert!(
            refused(&e, RefuseReason::BadPolkaCertificate),
            "{what}: {e:?}"
        );
        assert!(appended(&e).is_empty(), "{what}");
        assert!(!c.has_polka(0, &id), "{what}");
        let e = c.handle(fx.reproposal(s.r, 0, &[0, 1, 2]), at(51));
        assert!(votes_sent(&e, VoteKind::Prevote).is_empty(), "{what}");
    }
}

#[test]
fn a_leader_sends_the_polka_before_the_proposal_that_carries_its_set() {
    let fx = Fixture::new();
    // the leader of some round r >= 1 saw a polka in round 0 and re-proposes its set
    let me = fx.leader(
        (1..)
            .find(|r| fx.leader(*r) != fx.leader(0))
            .expect("a round"),
    );
    let r = (1..).find(|r| fx.leader(*r) == me).expect("a round");
    let mut c = fx.started(me);
    let (p, id) = fx.proposal(fx.leader(0), 0, &[0, 1, 2]);
    c.handle(p, at(30));
    for v in (0..4).filter(|v| *v != me).take(2) {
        c.handle(fx.vote(v, VoteKind::Prevote, 0, Some(id)), at(31));
    }
    assert!(c.has_polka(0, &id));
    let mut e = Vec::new();
    for v in (0..4).filter(|v| *v != me).take(2) {
        e = c.handle(fx.vote(v, VoteKind::Prevote, r, None), at(40));
    }
    assert_eq!(c.round(), r);
    let kinds: Vec<&str> = sent(&e).iter().map(|(_, env)| env.kind()).collect();
    let polka = kinds.iter().position(|k| *k == "polka");
    let proposal = kinds.iter().position(|k| *k == "proposal");
    assert!(polka.is_some() && polka < proposal, "{kinds:?}");
    // and at the rebroadcast, with its votes
    let e = c.handle(Input::Timeout(Timer::Rebroadcast), at(60));
    assert!(sent(&e).iter().any(|(_, env)| matches!(
        &env.body,
        Body::Polka { round: 0, value, prevotes } if *value == id && prevotes.len() >= 3
    )));
}
