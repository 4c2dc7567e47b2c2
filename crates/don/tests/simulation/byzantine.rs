//! The Byzantine members: each has its own key and signs only with it, and the links are
//! authenticated (a message always arrives from its true sender), but it may say anything
//! and carry any signature it holds. Most run an honest core and tamper with what it
//! sends (equivocating votes or proposals, a withheld observation); on a tick of their
//! own they also replay old messages, re-sign others' vote bodies for other rounds, forge
//! or cut commit certificates of made-up sets and polkas (too few or repeated signers,
//! prevotes of another round or set), flood, vote far ahead, or propose in rounds
//! they do not lead. What they see on the network (observations, sets, precommits) is
//! their material.

use crate::check::Violation;
use crate::scenario::{DON_ID, MS, Scenario, Strategy, VERSION};
use crate::sim::{Event, Sent, Sim};
use alloy::primitives::{Address, B256, Bytes};
use cresolver_core::don::{Observation, aggregate, build_report};
use cresolver_don::consensus::{Core, Effect, Input, Keys, ROUND_WINDOW, Timer};
use cresolver_don::wire::{self, Body, CommitVote, Envelope, SignedObservation, VoteKind};
use rand::Rng;
use rand::seq::SliceRandom;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::sync::Arc;

/// How long after GST a Byzantine member keeps acting on its own ticks.
const ACTS_UNTIL_AFTER_GST: u64 = 60_000 * MS;
/// Old messages and material kept.
const KEPT: usize = 48;

/// A Byzantine member.
pub struct Byz {
    strategy: Strategy,
    keys: Arc<dyn Keys>,
    job: cresolver_don::Job,
    own: SignedObservation,
    core: Option<Core>,
    /// Its own messages sent (newest last).
    sent: Vec<Envelope>,
    /// Precommits seen: round, value, the vote.
    precommits: Vec<(u32, Option<B256>, CommitVote)>,
    /// Vote bodies seen.
    bodies: Vec<(VoteKind, Option<B256>)>,
    /// Observations seen, by observer.
    obs: BTreeMap<Address, SignedObservation>,
    /// Sets seen, by id.
    sets: BTreeMap<B256, Vec<SignedObservation>>,
    /// Rounds ahead it already equivocated in.
    ahead: BTreeSet<u32>,
    /// Prevoters of each (round, set) seen.
    polkas: BTreeMap<(u32, B256), BTreeSet<Address>>,
    /// Prevotes for a set seen (in votes and polkas): round, set, the vote.
    prevotes: Vec<(u32, B256, CommitVote)>,
}

fn keep<T>(v: &mut Vec<T>, x: T) {
    v.push(x);
    if v.len() > KEPT {
        v.remove(0);
    }
}

impl Byz {
    /// Member `i` of a scenario, following `strategy`.
    pub fn new(sc: &Scenario, i: usize, strategy: Strategy) -> Self {
        let own = sc.observations[i].clone();
        let mut obs = BTreeMap::new();
        obs.insert(own.observation.observer, own.clone());
        Self {
            strategy,
            keys: sc.keys(i),
            job: sc.job(i),
            own,
            core: None,
            sent: Vec::new(),
            precommits: Vec::new(),
            bodies: Vec::new(),
            obs,
            sets: BTreeMap::new(),
            ahead: BTreeSet::new(),
            polkas: BTreeMap::new(),
            prevotes: Vec::new(),
        }
    }

    fn round(&self) -> u32 {
        self.core.as_ref().map_or(0, |c| c.round())
    }

    /// What it learns from a message it receives.
    fn learn(&mut self, env: &Envelope, id: B256) {
        let set: &[SignedObservation] = match &env.body {
            Body::Observation { observation } => std::slice::from_ref(observation),
            Body::Proposal { observations, .. } => observations,
            Body::Decided {
                observations,
                commits,
                round,
                ..
            } => {
                for c in commits.iter().take(4) {
                    keep(&mut self.precommits, (*round, Some(id), c.clone()));
                }
                observations
            }
            Body::Vote {
                round,
                kind,
                value,
                signature,
            } => {
                keep(&mut self.bodies, (*kind, *value));
                if let (VoteKind::Prevote, Some(v)) = (kind, value) {
                    self.polkas
                        .entry((*round, *v))
                        .or_default()
                        .insert(env.sender);
                    let vote = CommitVote {
                        voter: env.sender,
                        signature: signature.clone(),
                    };
                    keep(&mut self.prevotes, (*round, *v, vote));
                }
                if *kind == VoteKind::Precommit {
                    let vote = CommitVote {
                        voter: env.sender,
                        signature: signature.clone(),
                    };
                    keep(&mut self.precommits, (*round, *value, vote));
                }
                &[]
            }
            Body::Polka {
                round,
                value,
                prevotes,
            } => {
                for p in prevotes.iter().take(4) {
                    keep(&mut self.prevotes, (*round, *value, p.clone()));
                }
                &[]
            }
        };
        for o in set {
            self.obs
                .entry(o.observation.observer)
                .or_insert_with(|| o.clone());
        }
        if set.len() > 1 && self.sets.len() < 16 {
            self.sets.insert(id, set.to_vec());
        }
    }
}

impl Sim {
    fn sign(&self, i: usize, digest: &B256) -> Bytes {
        self.sc.scheme.sign(i, digest)
    }

    fn envelope(&self, i: usize, body: Body) -> Envelope {
        Envelope {
            don_id: DON_ID,
            config_version: VERSION,
            execution_id: self.sc.exec,
            market: self.sc.market,
            market_id: self.sc.market_id,
            sender: self.sc.scheme.members[i],
            body,
        }
    }

    fn vote(&self, i: usize, round: u32, kind: VoteKind, value: Option<B256>) -> Envelope {
        let d = wire::vote_digest(DON_ID, VERSION, &self.sc.exec, kind, round, value.as_ref());
        let signature = self.sign(i, &d);
        self.envelope(
            i,
            Body::Vote {
                round,
                kind,
                value,
                signature,
            },
        )
    }

    fn proposal(
        &mut self,
        i: usize,
        round: u32,
        pol: Option<u32>,
        set: Vec<SignedObservation>,
    ) -> Envelope {
        let id = self.check.set_id(&set);
        let d = wire::proposal_digest(DON_ID, VERSION, &self.sc.exec, round, pol, &id);
        let signature = self.sign(i, &d);
        self.envelope(
            i,
            Body::Proposal {
                round,
                pol_round: pol,
                observations: set,
                signature,
            },
        )
    }

    /// A random set of the observations `b` holds, of at least `min` (if it holds that
    /// many).
    fn random_set(&mut self, b: &Byz, min: usize) -> Vec<SignedObservation> {
        let mut all: Vec<SignedObservation> = b.obs.values().cloned().collect();
        all.shuffle(&mut self.rng);
        let min = min.min(all.len());
        let k = self.rng.gen_range(min..=all.len());
        all.truncate(k);
        all
    }

    /// A value to vote for: nil, a set seen, or made up.
    fn any_value(&mut self, b: &Byz) -> Option<B256> {
        match self.rng.gen_range(0..3) {
            0 => None,
            1 => b
                .sets
                .keys()
                .nth(self.rng.gen_range(0..b.sets.len().max(1)))
                .copied()
                .or(Some(B256::repeat_byte(0x5e))),
            _ => Some(B256::from(self.rng.r#gen::<[u8; 32]>())),
        }
    }

    /// Byzantine member `i` starts its inner core (a silent one has none).
    pub fn start_byz(&mut self, i: usize) -> Result<(), Violation> {
        let Some(mut b) = self.byz[i].take() else {
            return Ok(());
        };
        let mut r = Ok(());
        if b.strategy != Strategy::Silent {
            let mut core = Core::new(
                self.sc.byz_params.clone(),
                b.keys.clone(),
                b.job.clone(),
                b.own.clone(),
            );
            let effects = core.handle(
                Input::Start {
                    log: Vec::new(),
                    lock: None,
                },
                self.local(i),
            );
            b.core = Some(core);
            r = self.byz_perform(i, &mut b, effects);
        }
        self.byz[i] = Some(b);
        r
    }

    /// A timer of Byzantine member `i`'s inner core is due.
    pub fn timer_byz(&mut self, i: usize, timer: Timer) -> Result<(), Violation> {
        let Some(mut b) = self.byz[i].take() else {
            return Ok(());
        };
        let local = self.local(i);
        let effects = b
            .core
            .as_mut()
            .map(|c| c.handle(Input::Timeout(timer), local))
            .unwrap_or_default();
        let r = self.byz_perform(i, &mut b, effects);
        self.byz[i] = Some(b);
        r
    }

    /// A checked message reaches Byzantine member `i`.
    pub fn deliver_byz(&mut self, i: usize, sent: Rc<Sent>) -> Result<(), Violation> {
        let Some(mut b) = self.byz[i].take() else {
            return Ok(());
        };
        let env = &sent.env;
        let id = match &env.body {
            Body::Proposal { observations, .. } | Body::Decided { observations, .. } => {
                self.check.set_id(observations)
            }
            _ => B256::ZERO,
        };
        b.learn(env, id);
        let local = self.local(i);
        let effects = b
            .core
            .as_mut()
            .map(|c| c.handle(Input::Message(env.clone()), local))
            .unwrap_or_default();
        let r = self.byz_perform(i, &mut b, effects);
        self.byz[i] = Some(b);
        r
    }

    /// What the inner core asks for, tampered with by the strategy.
    fn byz_perform(
        &mut self,
        i: usize,
        b: &mut Byz,
        effects: Vec<Effect>,
    ) -> Result<(), Violation> {
        for e in effects {
            match e {
                Effect::Schedule { at, timer } => {
                    let g = self.global(i, at);
                    self.at(
                        g,
                        Event::Timer {
                            to: i,
                            inc: 0,
                            timer,
                        },
                    );
                }
                Effect::Send { to, env } => self.byz_send(i, b, to, env)?,
                _ => {}
            }
        }
        Ok(())
    }

    fn byz_send(
        &mut self,
        i: usize,
        b: &mut Byz,
        to: Option<Address>,
        env: Envelope,
    ) -> Result<(), Violation> {
        keep(&mut b.sent, env.clone());
        match (b.strategy, &env.body) {
            (Strategy::Withhold, Body::Observation { .. }) => Ok(()),
            (Strategy::LockBreaker, Body::Vote { round, .. }) if b.ahead.contains(round) => Ok(()),
            (
                Strategy::LockBreaker,
                Body::Vote {
                    round,
                    kind: VoteKind::Precommit,
                    value: Some(_),
                    ..
                },
            ) => {
                // a nil precommit instead: the round ends without this member's help to
                // decide
                let nil = self.vote(i, *round, VoteKind::Precommit, None);
                self.send(i, to, nil)
            }
            (
                Strategy::EquivocatingVoter,
                Body::Vote {
                    round, kind, value, ..
                },
            ) => {
                let (round, kind, value) = (*round, *kind, *value);
                for j in 0..self.sc.n {
                    if j == i {
                        continue;
                    }
                    let to = Some(self.sc.scheme.members[j]);
                    if self.rng.gen_bool(0.5) {
                        self.send(i, to, env.clone())?;
                    } else {
                        let other = match value {
                            Some(_) if self.rng.gen_bool(0.5) => None,
                            _ => self.any_value(b),
                        };
                        let v = self.vote(i, round, kind, other);
                        self.send(i, to, v)?;
                    }
                }
                Ok(())
            }
            (
                Strategy::EquivocatingProposer | Strategy::SplitProposer,
                Body::Proposal {
                    round,
                    pol_round,
                    observations,
                    ..
                },
            ) => {
                let real = observations.clone();
                self.equivocate(i, b, *round, *pol_round, Some((env, real)))
            }
            _ => self.send(i, to, env),
        }
    }

    /// Different proposals of one round to different members: two halves, or each its
    /// own.
    fn equivocate(
        &mut self,
        i: usize,
        b: &Byz,
        round: u32,
        pol: Option<u32>,
        real: Option<(Envelope, Vec<SignedObservation>)>,
    ) -> Result<(), Violation> {
        let quorum = 2 * self.sc.f + 1;
        let other = self.random_set(b, quorum);
        let half: Vec<bool> = (0..self.sc.n).map(|_| self.rng.gen_bool(0.5)).collect();
        for (j, first_half) in half.into_iter().enumerate() {
            if j == i {
                continue;
            }
            let to = Some(self.sc.scheme.members[j]);
            let env = match (&real, first_half, b.strategy) {
                (Some((env, _)), true, Strategy::EquivocatingProposer) => env.clone(),
                (_, _, Strategy::EquivocatingProposer) => {
                    self.proposal(i, round, pol, other.clone())
                }
                _ => {
                    let set = self.random_set(b, quorum);
                    self.proposal(i, round, pol, set)
                }
            };
            self.send(i, to, env)?;
        }
        Ok(())
    }

    /// Byzantine member `i` acts on its own.
    pub fn tick(&mut self, i: usize) -> Result<(), Violation> {
        let Some(mut b) = self.byz[i].take() else {
            return Ok(());
        };
        let r = self.act(i, &mut b);
        self.byz[i] = Some(b);
        if self.now < self.sc.gst + ACTS_UNTIL_AFTER_GST {
            let next = self.now + self.rng.gen_range(100 * MS..=500 * MS);
            self.at(next, Event::Tick(i));
        }
        r
    }

    fn act(&mut self, i: usize, b: &mut Byz) -> Result<(), Violation> {
        let round = b.round();
        let me = self.sc.scheme.members[i];
        match b.strategy {
            Strategy::EquivocatingProposer | Strategy::SplitProposer => {
                for r in round..=round + ROUND_WINDOW {
                    if self.sc.params.leader(&self.sc.exec, r) == me && b.ahead.insert(r) {
                        self.equivocate(i, b, r, None, None)?;
                    }
                }
            }
            Strategy::EquivocatingVoter => {
                for kind in [VoteKind::Prevote, VoteKind::Precommit] {
                    for j in (0..self.sc.n).filter(|j| *j != i) {
                        let value = self.any_value(b);
                        let v = self.vote(i, round, kind, value);
                        self.send(i, Some(self.sc.scheme.members[j]), v)?;
                    }
                }
            }
            Strategy::Replayer => self.replay(i, b, round)?,
            Strategy::Forger => {
                for _ in 0..self.rng.gen_range(1..=2) {
                    self.forge(i, b, round)?;
                }
                self.forge_polka(i, b, round)?;
            }
            Strategy::Flooder => self.flood(i, b, round)?,
            Strategy::FarAhead => {
                for _ in 0..2 {
                    let r = round + self.rng.gen_range(50..=1_000);
                    let kind = *[VoteKind::Prevote, VoteKind::Precommit]
                        .choose(&mut self.rng)
                        .unwrap_or(&VoteKind::Prevote);
                    let value = self.any_value(b);
                    let v = self.vote(i, r, kind, value);
                    self.send(i, None, v)?;
                }
                let set = self.random_set(b, 2 * self.sc.f + 1);
                let far = round + self.rng.gen_range(50..=1_000);
                let p = self.proposal(i, far, None, set);
                self.send(i, None, p)?;
            }
            Strategy::Usurper => {
                for r in [round, round + 1] {
                    let set = self.random_set(b, 2 * self.sc.f + 1);
                    let p = self.proposal(i, r, None, set);
                    self.send(i, None, p)?;
                }
            }
            Strategy::LockBreaker => self.break_locks(i, b, round)?,
            Strategy::Silent | Strategy::Withhold | Strategy::Liar => {}
        }
        Ok(())
    }

    /// As the leader of a round ahead: another set than the newest polka's, proposed with
    /// the polka's round, and this member's prevote and precommit for it.
    fn break_locks(&mut self, i: usize, b: &mut Byz, round: u32) -> Result<(), Violation> {
        let quorum = self.sc.n * 2 / 3 + 1;
        let me = self.sc.scheme.members[i];
        let Some((vr, v)) = b
            .polkas
            .iter()
            .rev()
            .find(|(_, voters)| voters.len() >= quorum)
            .map(|(k, _)| *k)
        else {
            return Ok(());
        };
        for r in (vr + 1).max(round)..=round + ROUND_WINDOW {
            if self.sc.params.leader(&self.sc.exec, r) != me || !b.ahead.insert(r) {
                continue;
            }
            let set = self.random_set(b, 2 * self.sc.f + 1);
            let id = self.check.set_id(&set);
            if id == v {
                continue;
            }
            let p = self.proposal(i, r, Some(vr), set);
            self.send(i, None, p)?;
            for kind in [VoteKind::Prevote, VoteKind::Precommit] {
                let vote = self.vote(i, r, kind, Some(id));
                self.send(i, None, vote)?;
            }
        }
        Ok(())
    }

    /// Old messages again, and others' vote bodies signed for other rounds.
    fn replay(&mut self, i: usize, b: &mut Byz, round: u32) -> Result<(), Violation> {
        for _ in 0..self.rng.gen_range(1..=3) {
            if let Some(env) = b.sent.choose(&mut self.rng).cloned() {
                self.send(i, None, env)?;
            }
        }
        for _ in 0..2 {
            if let Some((kind, value)) = b.bodies.choose(&mut self.rng).copied() {
                let r = self.rng.gen_range(round.saturating_sub(3)..=round + 3);
                let v = self.vote(i, r, kind, value);
                self.send(i, None, v)?;
            }
        }
        Ok(())
    }

    /// Random votes, proposals and decisions, to one member or all.
    fn flood(&mut self, i: usize, b: &mut Byz, round: u32) -> Result<(), Violation> {
        for _ in 0..self.rng.gen_range(3..=10) {
            let to = self
                .rng
                .gen_bool(0.5)
                .then(|| self.sc.scheme.members[self.rng.gen_range(0..self.sc.n)])
                .filter(|a| *a != self.sc.scheme.members[i]);
            let r = self
                .rng
                .gen_range(round.saturating_sub(2)..=round + ROUND_WINDOW + 2);
            let env = match self.rng.gen_range(0..3) {
                0 => {
                    let kind = *[VoteKind::Prevote, VoteKind::Precommit]
                        .choose(&mut self.rng)
                        .unwrap_or(&VoteKind::Prevote);
                    let value = self.any_value(b);
                    self.vote(i, r, kind, value)
                }
                1 => {
                    let set = self.random_set(b, 1);
                    let pol = self.rng.gen_bool(0.3).then(|| self.rng.gen_range(0..=r));
                    self.proposal(i, r, pol, set)
                }
                _ => {
                    self.forge(i, b, round)?;
                    continue;
                }
            };
            self.send(i, to, env)?;
        }
        Ok(())
    }

    /// A `Decided` message for a made-up set (or a real one) with a forged, partial or
    /// borrowed certificate.
    fn forge(&mut self, i: usize, b: &mut Byz, round: u32) -> Result<(), Violation> {
        let quorum = self.sc.n * 2 / 3 + 1;
        let min = if self.rng.gen_bool(0.8) {
            2 * self.sc.f + 1
        } else {
            1
        };
        let mut set = self.random_set(b, min);
        let mut r = self.rng.gen_range(0..=round + 2);
        let me = self.sc.scheme.members[i];
        let commits: Vec<CommitVote> = match self.rng.gen_range(0..5) {
            0 => (0..quorum)
                .map(|_| {
                    let mut sig = [0u8; 65];
                    self.rng.fill(&mut sig[..64]);
                    sig[64] = u8::from(self.rng.gen_bool(0.5));
                    CommitVote {
                        voter: self.sc.scheme.members[self.rng.gen_range(0..self.sc.n)],
                        signature: Bytes::copy_from_slice(&sig),
                    }
                })
                .collect(),
            1 => {
                // the real precommits of one (round, value), fewer than a quorum
                let Some((pr, pv, _)) = b.precommits.choose(&mut self.rng).cloned() else {
                    return Ok(());
                };
                if let Some(s) = pv.and_then(|v| b.sets.get(&v)) {
                    set = s.clone();
                }
                r = pr;
                let mut voters = BTreeSet::new();
                b.precommits
                    .iter()
                    .filter(|(x, v, c)| *x == pr && *v == pv && voters.insert(c.voter))
                    .take(quorum - 1)
                    .map(|(.., c)| c.clone())
                    .collect()
            }
            2 => vec![self.own_precommit(i, r, &set); quorum],
            3 => b
                .precommits
                .iter()
                .take(quorum)
                .map(|(.., c)| c.clone())
                .collect(),
            _ => {
                let mut v = vec![self.own_precommit(i, r, &set)];
                v.extend(
                    b.precommits
                        .iter()
                        .rev()
                        .take(quorum - 1)
                        .map(|(.., c)| c.clone()),
                );
                v
            }
        };
        let report_signature = match self.rng.gen_range(0..4) {
            0 | 1 => self.report_digest(&set).map(|d| self.sign(i, &d)),
            2 => {
                let mut garbage = [7u8; 65];
                garbage[64] = 0;
                Some(Bytes::copy_from_slice(&garbage))
            }
            _ => None,
        };
        let body = Body::Decided {
            round: r,
            observations: set,
            commits,
            report_signature,
            agreed: self.rng.gen_bool(0.2),
        };
        let env = self.envelope(i, body);
        let to = self
            .rng
            .gen_bool(0.3)
            .then(|| self.sc.scheme.members[self.rng.gen_range(0..self.sc.n)])
            .filter(|a| *a != me);
        self.send(i, to, env)
    }

    /// Member `i`'s own precommit for a set in round `r`.
    fn own_precommit(&mut self, i: usize, r: u32, set: &[SignedObservation]) -> CommitVote {
        let id = self.check.set_id(set);
        let d = wire::vote_digest(
            DON_ID,
            VERSION,
            &self.sc.exec,
            VoteKind::Precommit,
            r,
            Some(&id),
        );
        CommitVote {
            voter: self.sc.scheme.members[i],
            signature: self.sign(i, &d),
        }
    }

    /// The report digest of a set, as a member would build it.
    fn report_digest(&self, set: &[SignedObservation]) -> Option<B256> {
        let obs: Vec<Observation> = set.iter().map(|o| o.observation.clone()).collect();
        let binding = cresolver_core::don::Binding {
            don_id: DON_ID,
            config_version: VERSION,
            execution_id: self.sc.exec,
            market: self.sc.market,
            market_id: self.sc.market_id,
        };
        let agg = aggregate(&obs, &binding, &self.sc.workers, self.sc.f).ok()?;
        let report = build_report(&self.sc.spec, &agg).ok()?;
        Some(self.sc.params.digest(&report))
    }
}

impl Sim {
    /// A `Polka` message: too few signers, a signer twice, prevotes of another round or
    /// set than it names, made-up signatures, or a real polka seen sent again (the only
    /// valid one).
    fn forge_polka(&mut self, i: usize, b: &mut Byz, round: u32) -> Result<(), Violation> {
        let quorum = self.sc.n * 2 / 3 + 1;
        let Some((r, v, _)) = b.prevotes.choose(&mut self.rng).cloned() else {
            return Ok(());
        };
        let mut voters = BTreeSet::new();
        let mut real: Vec<CommitVote> = b
            .prevotes
            .iter()
            .filter(|(x, y, c)| *x == r && *y == v && voters.insert(c.voter))
            .map(|(.., c)| c.clone())
            .collect();
        let own = self.own_prevote(i, r, v);
        if real.iter().all(|c| c.voter != own.voter) {
            real.push(own.clone());
        }
        let (mut r, mut v) = (r, v);
        let prevotes = match self.rng.gen_range(0..5) {
            0 => {
                real.truncate(quorum - 1);
                real
            }
            1 => vec![own; quorum],
            2 => {
                if self.rng.gen_bool(0.5) {
                    r = self.rng.gen_range(round.saturating_sub(2)..=round + 2);
                } else {
                    v = self.any_value(b).unwrap_or(B256::repeat_byte(0x77));
                }
                real
            }
            3 => (0..quorum)
                .map(|k| {
                    let mut sig = [0u8; 65];
                    self.rng.fill(&mut sig[..64]);
                    CommitVote {
                        voter: self.sc.scheme.members[k % self.sc.n],
                        signature: Bytes::copy_from_slice(&sig),
                    }
                })
                .collect(),
            _ => real,
        };
        let env = self.envelope(
            i,
            Body::Polka {
                round: r,
                value: v,
                prevotes,
            },
        );
        let to = self
            .rng
            .gen_bool(0.5)
            .then(|| self.sc.scheme.members[self.rng.gen_range(0..self.sc.n)])
            .filter(|a| *a != self.sc.scheme.members[i]);
        self.send(i, to, env)
    }

    /// Member `i`'s own prevote for `v` in round `r`.
    fn own_prevote(&self, i: usize, r: u32, v: B256) -> CommitVote {
        let d = wire::vote_digest(
            DON_ID,
            VERSION,
            &self.sc.exec,
            VoteKind::Prevote,
            r,
            Some(&v),
        );
        CommitVote {
            voter: self.sc.scheme.members[i],
            signature: self.sign(i, &d),
        }
    }
}
