//! One execution's consensus, as one member runs it: Malachite's Tendermint driver
//! ([`malachitebft_core_driver::Driver`], no I/O) fed with the checked messages of the
//! execution's book and with this member's timeouts, and its outputs turned into signed
//! messages.
//!
//! - Round `r` has one leader, [`crate::config::leader_of`]; a proposal counts only from
//!   it, and only a proposal puts a set forward. A set is valid when it holds at least
//!   2f+1 usable observations and builds a report.
//! - The driver prevotes, locks on a set with 2f+1 prevotes, precommits, and decides a set
//!   with 2f+1 precommits; a leader re-proposes the set it saw 2f+1 prevotes for, with that
//!   round, so locked members can follow it (Tendermint's `validValue`/`validRound`).
//! - f+1 votes of a later round move a member to it; 2f+1 votes of a round start its
//!   timeouts; timeouts grow with the round.
//! - Every input is appended to the consensus log before the votes it causes leave, so a
//!   restarted member replays to the same state and never votes twice in a round.
//! - Only once a set is decided does the member build its report, sign the forwarder
//!   digest (persisted first) and send a `Decided` message: the set, the 2f+1 precommits and
//!   its report signature. A member that missed the decision takes it from that message.

use crate::agreed::Agreed;
use crate::book::Slot;
use crate::context::{
    DonContext, MemberId, Proposal, SetId, SetValue, Sig, Validator, Validators, Vote,
};
use crate::job::BuildError;
use crate::job::{AgreeError, InstanceStatus, Job};
use crate::persist::{Lock, MAX_LOG_ENTRIES};
use crate::shared::{Shared, crash_point};
use crate::wire::{self, Body, CommitVote, Envelope, SignedObservation, VoteKind};
use alloy::primitives::{Address, B256, Bytes};
use cresolver_core::don::aggregate::{Binding, aggregate, check_observation};
use malachitebft_core_driver::{Driver, Input, Output, ThresholdParams};
use malachitebft_core_types::{
    NilOrVal, Round, SignedMessage, Timeout, TimeoutKind, Validity, VoteType,
};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Rounds ahead of its own a member takes proposals and votes for.
mod decision;
mod log;
mod messages;

use log::{LogEntry, VoteKindOrPropose};

/// A vote held from beyond the round window: its round, kind, set id (or nil) and
/// signature.
type HeldVote = (u32, VoteKind, Option<B256>, Bytes);

const ROUND_WINDOW: u32 = 8;
/// The longest any one timeout grows to.
const MAX_TIMEOUT: Duration = Duration::from_secs(60);

/// A decided set and what this member made of it.
struct Decision {
    round: u32,
    value: SetValue,
    leader: Address,
    commits: Vec<CommitVote>,
    report: Bytes,
    digest: B256,
}

/// One execution's consensus on this member.
pub(crate) struct Instance<'a> {
    don: &'a Shared,
    job: Job,
    own: SignedObservation,
    slot: Arc<Slot>,
    driver: Driver<DonContext>,
    round: u32,
    /// Usable observations, by observer.
    observations: BTreeMap<Address, SignedObservation>,
    timers: Vec<(Instant, Timeout)>,
    /// The round whose leader this member is and that still needs a set.
    want_value: Option<u32>,
    quorum_since: Option<Instant>,
    /// This member's votes and proposals, newest round last (sent again until decided).
    own_votes: BTreeMap<(u32, VoteKind), Envelope>,
    own_proposals: BTreeMap<u32, Envelope>,
    /// The first proposal and vote of each sender per round: a second, different one is
    /// equivocation, seen and dropped.
    proposals_seen: HashMap<u32, B256>,
    votes_seen: HashMap<(Address, u32, VoteKind), Option<B256>>,
    equivocated: HashSet<u32>,
    /// Each sender's newest vote from beyond [`ROUND_WINDOW`], held (one per sender) until
    /// f+1 senders vote in one such round: then they are taken, and the member joins it.
    ahead: HashMap<Address, HeldVote>,
    decided: Option<Decision>,
    sigs: BTreeMap<Address, Bytes>,
    early_sigs: Vec<(Address, Bytes)>,
    queue: VecDeque<Input<DonContext>>,
    log: Vec<String>,
    logged: usize,
    outbox: Vec<Envelope>,
    replaying: bool,
    leader_changes: u32,
    first_precommit_sent: bool,
}

impl<'a> Instance<'a> {
    pub(crate) fn new(don: &'a Shared, job: Job, own: SignedObservation, slot: Arc<Slot>) -> Self {
        let validators = Validators(
            don.members
                .iter()
                .map(|a| Validator {
                    address: MemberId(*a),
                })
                .collect(),
        );
        let driver = Driver::new(
            DonContext,
            crate::context::Height::ONE,
            validators,
            MemberId(don.address()),
            ThresholdParams::default(),
        );
        Self {
            don,
            job,
            own,
            slot,
            driver,
            round: 0,
            observations: BTreeMap::new(),
            timers: Vec::new(),
            want_value: None,
            quorum_since: None,
            own_votes: BTreeMap::new(),
            own_proposals: BTreeMap::new(),
            proposals_seen: HashMap::new(),
            votes_seen: HashMap::new(),
            equivocated: HashSet::new(),
            ahead: HashMap::new(),
            decided: None,
            sigs: BTreeMap::new(),
            early_sigs: Vec::new(),
            queue: VecDeque::new(),
            log: Vec::new(),
            logged: 0,
            outbox: Vec::new(),
            replaying: false,
            leader_changes: 0,
            first_precommit_sent: false,
        }
    }

    fn exec(&self) -> B256 {
        self.job.execution_id
    }

    fn binding(&self) -> Binding {
        Binding {
            don_id: self.don.cfg.don_id,
            config_version: self.don.cfg.config_version,
            execution_id: self.job.execution_id,
            market: self.job.market,
            market_id: self.job.market_id,
        }
    }

    fn usable(&self, o: &SignedObservation) -> bool {
        check_observation(&o.observation, &self.binding(), &self.job.workers).is_ok()
    }

    /// The report a set makes, as this member computes it.
    fn build(&self, set: &[SignedObservation]) -> Result<Bytes, BuildError> {
        let obs: Vec<_> = set.iter().map(|o| o.observation.clone()).collect();
        let agg = aggregate(&obs, &self.binding(), &self.job.workers, self.don.f())?;
        (self.job.build)(&agg).map_err(BuildError::Refused)
    }

    /// A set a leader may propose and a member prevotes for: 2f+1 usable observations
    /// (distinct, signed: the wire checked that) that build a report.
    fn valid(&self, set: &[SignedObservation]) -> bool {
        set.len() > 2 * self.don.f()
            && set.iter().all(|o| self.usable(o))
            && self.build(set).is_ok()
    }

    fn envelope(&self, body: Body) -> Envelope {
        Envelope {
            don_id: self.don.cfg.don_id,
            config_version: self.don.cfg.config_version,
            execution_id: self.job.execution_id,
            market: self.job.market,
            market_id: self.job.market_id,
            sender: self.don.address(),
            body,
        }
    }

    /// What a vote of this execution signs ([`wire::vote_digest`]).
    fn vote_digest(&self, kind: VoteKind, round: u32, value: Option<&B256>) -> B256 {
        let c = &self.don.cfg;
        wire::vote_digest(c.don_id, c.config_version, &self.exec(), kind, round, value)
    }

    /// What a proposal of this execution signs ([`wire::proposal_digest`]).
    fn proposal_digest(&self, round: u32, pol_round: Option<u32>, value: &B256) -> B256 {
        let c = &self.don.cfg;
        wire::proposal_digest(
            c.don_id,
            c.config_version,
            &self.exec(),
            round,
            pol_round,
            value,
        )
    }

    fn timeout_after(&self, t: Timeout) -> Duration {
        let base = self.don.cfg.attempt_timeout_ms.max(1);
        let unit = match t.kind {
            TimeoutKind::Propose => base,
            _ => base.div_ceil(2),
        };
        let r = u64::from(t.round.as_u32().unwrap_or(0));
        Duration::from_millis(unit.saturating_add(unit.saturating_mul(r) / 2)).min(MAX_TIMEOUT)
    }

    /// Runs the instance to an agreement, a stall, or shutdown.
    pub(crate) async fn run(mut self) -> Result<Agreed, AgreeError> {
        let mut tick = self.slot.tick.subscribe();
        let mut stop = self.don.stop.subscribe();
        self.observations
            .insert(self.own.observation.observer, self.own.clone());
        self.replay()?;
        self.rebroadcast();
        let every = Duration::from_millis((self.don.cfg.attempt_timeout_ms / 4).clamp(100, 2_000));
        let mut next_rebroadcast = Instant::now() + every;
        loop {
            self.take_messages();
            self.fire_timers();
            self.try_propose();
            self.flush()?;
            self.publish_status();
            if let Some(a) = self.agreement()? {
                return Ok(a);
            }
            if self.decided.is_none() && self.round >= self.don.cfg.max_attempts {
                return Err(AgreeError::Stalled { rounds: self.round });
            }
            if self.logged >= MAX_LOG_ENTRIES && self.decided.is_none() {
                tracing::error!(execution_id = %self.exec(), "the consensus log of this execution is full: stopping it");
                return Err(AgreeError::Stalled { rounds: self.round });
            }
            if Instant::now() >= next_rebroadcast {
                self.rebroadcast();
                next_rebroadcast = Instant::now() + every;
                continue;
            }
            let mut wake = next_rebroadcast;
            if let Some((t, _)) = self.timers.iter().min_by_key(|(t, _)| *t) {
                wake = wake.min(*t);
            }
            if self.want_value.is_some()
                && let Some(since) = self.quorum_since
            {
                wake = wake.min(since + Duration::from_millis(self.don.cfg.observation_grace_ms));
            }
            tokio::select! {
                _ = tick.changed() => {}
                _ = stop.changed() => {}
                _ = tokio::time::sleep_until(wake.into()) => {}
            }
            if *stop.borrow() {
                self.flush()?;
                self.clear_status();
                return Err(AgreeError::ShuttingDown);
            }
        }
    }

    fn enqueue_new_round(&mut self, round: u32) {
        let leader = self.don.leader(&self.exec(), round);
        self.queue.push_back(Input::NewRound(
            crate::context::Height::ONE,
            Round::new(round),
            MemberId(leader),
        ));
    }

    /// Runs the driver over the queued inputs and acts on its outputs.
    fn drive(&mut self) {
        while let Some(input) = self.queue.pop_front() {
            let outputs = match self.driver.process(input) {
                Ok(o) => o,
                Err(e) => {
                    tracing::debug!(execution_id = %self.exec(), error = %e, "consensus input not taken");
                    continue;
                }
            };
            for o in outputs {
                self.on_output(o);
            }
        }
    }

    fn on_output(&mut self, output: Output<DonContext>) {
        match output {
            Output::NewRound(_, round) => {
                let r = round.as_u32().unwrap_or(0);
                if r > self.round {
                    if r > 0 && !self.replaying && self.decided.is_none() {
                        self.leader_changes += 1;
                        let why = if self.equivocated.contains(&self.round) {
                            "equivocation"
                        } else {
                            "timeout"
                        };
                        self.don.metrics.don_event("leader_change", why);
                        tracing::info!(execution_id = %self.exec(), round = r, leader = %self.don.leader(&self.exec(), r), reason = why, "consensus moves to a new round and leader");
                    }
                    self.round = r;
                    self.quorum_since = None;
                    self.enqueue_new_round(r);
                }
            }
            Output::Propose(p) => self.send_proposal(p),
            Output::Vote(v) => self.send_vote(v),
            Output::Decide(round, p) => self.on_decide(round, p),
            Output::ScheduleTimeout(t) => {
                let at = Instant::now() + self.timeout_after(t);
                self.timers.push((at, t));
            }
            Output::GetValue(_, round, _) => {
                self.want_value = round.as_u32();
            }
        }
    }

    fn send_proposal(&mut self, p: Proposal) {
        let round = p.round.as_u32().unwrap_or(0);
        let pol_round = p.pol_round.as_u32();
        let digest = self.proposal_digest(round, pol_round, &p.value.id);
        let Ok(signature) = wire::sign_digest(&self.don.signer, &digest) else {
            tracing::error!("cannot sign a proposal");
            return;
        };
        self.proposals_seen.entry(round).or_insert(p.value.id);
        let env = self.envelope(Body::Proposal {
            round,
            pol_round,
            observations: p.value.observations.to_vec(),
            signature: signature.clone(),
        });
        if !self.replaying {
            tracing::info!(execution_id = %self.exec(), round, pol_round, observations = p.value.observations.len(), "proposing a set as the round's leader");
        }
        self.own_proposals.insert(round, env.clone());
        self.outbox.push(env);
        self.queue.push_back(Input::Proposal(
            SignedMessage::new(p, Sig(signature.to_vec())),
            Validity::Valid,
        ));
    }

    fn send_vote(&mut self, v: Vote) {
        let round = v.round.as_u32().unwrap_or(0);
        let kind = match v.kind {
            VoteType::Prevote => VoteKind::Prevote,
            VoteType::Precommit => VoteKind::Precommit,
        };
        let value = match &v.value {
            NilOrVal::Val(id) => Some(id.0),
            NilOrVal::Nil => None,
        };
        let digest = self.vote_digest(kind, round, value.as_ref());
        let Ok(signature) = wire::sign_digest(&self.don.signer, &digest) else {
            tracing::error!("cannot sign a vote");
            return;
        };
        let env = self.envelope(Body::Vote {
            round,
            kind,
            value,
            signature: signature.clone(),
        });
        self.own_votes.insert((round, kind), env.clone());
        // nil votes matter for the current round only; votes for a set are kept (the
        // newest 64): they are the polka evidence a later leader's re-proposal needs
        let current = self.round;
        self.own_votes.retain(|(r, _), e| {
            *r + 1 >= current || matches!(e.body, Body::Vote { value: Some(_), .. })
        });
        while self.own_votes.len() > 64 {
            self.own_votes.pop_first();
        }
        self.votes_seen
            .insert((self.don.address(), round, kind), value);
        self.outbox.push(env);
        if kind == VoteKind::Precommit && value.is_some() && !self.replaying {
            self.first_precommit_sent = true;
        }
        self.queue
            .push_back(Input::Vote(SignedMessage::new(v, Sig(signature.to_vec()))));
    }

    /// Appends what was logged, then sends what it caused.
    fn flush(&mut self) -> Result<(), AgreeError> {
        if !self.log.is_empty() {
            self.don.persist.log_append(&self.exec(), &self.log)?;
            self.logged += self.log.len();
            self.log.clear();
        }
        for env in std::mem::take(&mut self.outbox) {
            self.don.send(env, None);
        }
        if self.first_precommit_sent {
            self.first_precommit_sent = false;
            crash_point("don_voted");
        }
        Ok(())
    }

    /// Sends again what other members may have missed: the decision once decided, else
    /// this member's observation, its proposal of the current round, its votes of the
    /// current and the previous round, and every vote it cast for a set (a member that
    /// missed a polka needs those prevotes to follow a leader that carries its set).
    fn rebroadcast(&mut self) {
        if self.decided.is_some() {
            if self.sigs.contains_key(&self.don.address()) {
                let env = self.decided_envelope();
                self.outbox.push(env);
            }
            return;
        }
        self.outbox.push(self.envelope(Body::Observation {
            observation: self.own.clone(),
        }));
        if let Some(p) = self.own_proposals.get(&self.round) {
            self.outbox.push(p.clone());
        }
        let current: Vec<Envelope> = self.own_votes.values().cloned().collect();
        self.outbox.extend(current);
    }

    fn fire_timers(&mut self) {
        let now = Instant::now();
        let (due, rest): (Vec<_>, Vec<_>) = self.timers.drain(..).partition(|(t, _)| *t <= now);
        self.timers = rest;
        for (_, t) in due {
            let kind = match t.kind {
                TimeoutKind::Propose => VoteKindOrPropose::Propose,
                TimeoutKind::Prevote => VoteKindOrPropose::Prevote,
                TimeoutKind::Precommit => VoteKindOrPropose::Precommit,
                TimeoutKind::Rebroadcast => continue,
            };
            if self.decided.is_some() {
                continue;
            }
            self.take(LogEntry::Timeout {
                round: t.round.as_u32().unwrap_or(0),
                kind,
            });
        }
    }

    /// As the round's leader with no set to carry: propose every usable observation held,
    /// once 2f+1 are and every member's arrived or the grace passed.
    fn try_propose(&mut self) {
        let Some(round) = self.want_value else {
            return;
        };
        if round != self.round || self.decided.is_some() {
            self.want_value = None;
            return;
        }
        let held: Vec<SignedObservation> = self.observations.values().cloned().collect();
        if held.len() <= 2 * self.don.f() {
            return;
        }
        let since = *self.quorum_since.get_or_insert_with(Instant::now);
        let grace = Duration::from_millis(self.don.cfg.observation_grace_ms);
        if held.len() < self.don.members.len() && since.elapsed() < grace {
            return;
        }
        if self.build(&held).is_err() {
            tracing::warn!(execution_id = %self.exec(), round, "as leader: the observations held make no report");
            return;
        }
        self.want_value = None;
        self.take(LogEntry::ProposeValue {
            round,
            observations: held,
        });
    }

    fn publish_status(&self) {
        let rs = self.driver.round_state();
        let step = if self.decided.is_some() {
            "commit"
        } else if self.driver.step_is_prevote() {
            "prevote"
        } else if self.driver.step_is_precommit() {
            "precommit"
        } else {
            "propose"
        };
        let status = InstanceStatus {
            execution_id: self.exec(),
            round: self.round,
            leader: self.don.leader(&self.exec(), self.round),
            step,
            locked: rs
                .locked
                .as_ref()
                .map(|l| (l.round.as_u32().unwrap_or(0), l.value.id)),
            decided: self.decided.as_ref().map(|d| {
                (
                    d.round,
                    d.value.id,
                    d.commits.iter().map(|c| c.voter).collect(),
                )
            }),
            leader_changes: self.leader_changes,
        };
        self.don
            .status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(self.exec(), status);
    }

    fn clear_status(&self) {
        self.don
            .status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.exec());
    }
}

fn vote_type(kind: VoteKind) -> VoteType {
    match kind {
        VoteKind::Prevote => VoteType::Prevote,
        VoteKind::Precommit => VoteType::Precommit,
    }
}
