//! One execution's consensus as a pure state machine: [`Core::handle`] takes an
//! [`Input`] (the start with what was persisted, a member's message, a timer) and the
//! member's clock reading, and returns the [`Effect`]s the host must perform, in order.
//! The core does no I/O and reads no clock; it signs through [`Keys`] (a pure function of
//! key and digest). Inside, Malachite's Tendermint driver
//! ([`malachitebft_core_driver::Driver`]) is fed the checked messages and the timeouts.
//!
//! - Round `r` has one leader, [`crate::config::leader_of`]; a proposal counts only from
//!   it, and only a proposal puts a set forward. A set is valid when it holds at least
//!   2f+1 usable observations and builds a report.
//! - The driver prevotes, locks on a set with 2f+1 prevotes, precommits, and decides a set
//!   with 2f+1 precommits; a leader re-proposes the set it saw 2f+1 prevotes for, with that
//!   round, so locked members can follow it (Tendermint's `validValue`/`validRound`).
//! - A leader that carries a set from a polka round sends that polka (the 2f+1 prevotes,
//!   a `Polka` message) before its proposal, and every member sends those of its valid and
//!   locked sets at each rebroadcast: a member that holds an equivocator's other prevote
//!   of the round takes it as the prevotes themselves ([`polka`]).
//! - f+1 votes of a later round move a member to it; 2f+1 votes of a round start its
//!   timeouts; timeouts grow with the round.
//! - Every input is returned as an [`Effect::Append`] to the consensus log *before* the
//!   sends it causes: the host makes it durable before it sends a vote or a proposal
//!   ([`must_sync`]), so a restarted member replays to the same state and never votes
//!   twice in a round.
//! - Only once a set is decided does the member build its report, sign the forwarder
//!   digest ([`Effect::Lock`], stored with no sync and without waiting: the certificate
//!   fixes the report, so a member that lost it signs the same bytes) and send a `Decided`
//!   message: the set, the 2f+1 precommits and its report signature. A member that missed
//!   the decision takes it from that message.

use crate::agreed::Agreed;
use crate::context::{
    DonContext, MemberId, Proposal, SetId, SetValue, Sig, Validator, Validators, Vote,
};
use crate::job::{BuildError, InstanceStatus, Job};
use crate::persist::{Lock, MAX_LOG_ENTRIES};
use crate::wire::{self, Body, CommitVote, Envelope, SignedObservation, VoteKind};
use alloy::primitives::{Address, B256, Bytes};
use cresolver_core::don::aggregate::{Binding, aggregate, check_observation};
use cresolver_metrics::{
    DonEvent, EquivocationKind, LeaderChangeCause, ObservationSource, RefuseReason,
};
use malachitebft_core_driver::{Driver, Input as DriverInput, Output};
use malachitebft_core_types::{
    NilOrVal, Round, SignedMessage, Threshold, Timeout, TimeoutKind, Validity, VoteType,
};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

mod decision;
mod io;
mod keys;
mod log;
mod messages;
mod params;
mod polka;
#[cfg(test)]
mod tests;

pub use io::{Effect, Held, Input, Timer, must_sync};
pub use keys::{Keys, Secp256k1Keys};
pub use log::{LogEntry, StepKind};
#[cfg(feature = "mutations")]
pub use params::Mutation;
pub use params::Params;
pub use polka::RELAYED_POLKAS;

/// Rounds ahead of its own a member takes proposals and votes for.
pub const ROUND_WINDOW: u32 = 8;
/// The longest any one timeout grows to.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(60);

/// A vote held from beyond the round window: its round, kind, set id (or nil) and
/// signature.
type HeldVote = (u32, VoteKind, Option<B256>, Bytes);

/// A decided set and what this member made of it.
struct Decision {
    round: u32,
    value: SetValue,
    leader: Address,
    commits: Vec<CommitVote>,
    report: Bytes,
    digest: B256,
}

/// One execution's consensus on one member.
pub struct Core {
    p: Arc<Params>,
    keys: Arc<dyn Keys>,
    job: Job,
    own: SignedObservation,
    driver: Driver<DonContext>,
    round: u32,
    now: Duration,
    /// Usable observations, by observer.
    observations: BTreeMap<Address, SignedObservation>,
    /// The round whose leader this member is and that still needs a set.
    want_value: Option<u32>,
    quorum_since: Option<Duration>,
    /// This member's votes and proposals, newest round last (sent again until decided).
    own_votes: BTreeMap<(u32, VoteKind), Envelope>,
    own_proposals: BTreeMap<u32, Envelope>,
    /// The first proposal of each round (and whether it was valid) and the first vote of
    /// each sender per round: a second, different one is equivocation, seen and dropped.
    /// (set id, valid here, its polka round) of the round's proposal.
    proposals_seen: HashMap<u32, (B256, bool, Option<u32>)>,
    /// Tendermint's lock as this member's votes define it: the round and set of its
    /// newest precommit for a set.
    voted_lock: Option<(u32, B256)>,
    /// The round this run started in (after the replay): `max_attempts` counts from it.
    start_round: u32,
    votes_seen: HashMap<(Address, u32, VoteKind), Option<B256>>,
    equivocated: HashSet<u32>,
    /// Each sender's newest vote from beyond [`ROUND_WINDOW`], held (one per sender) until
    /// f+1 senders vote in one such round: then they are taken, and the member joins it.
    ahead: BTreeMap<Address, HeldVote>,
    /// Prevotes from `Polka` messages that conflict with a prevote held of their voter,
    /// by (round, set): kept until they make a certificate ([`RELAYED_POLKAS`] at most).
    relayed: BTreeMap<(u32, B256), BTreeMap<Address, Bytes>>,
    decided: Option<Decision>,
    sigs: BTreeMap<Address, Bytes>,
    early_sigs: Vec<(Address, Bytes)>,
    /// The report signed before this run, from the state file.
    stored_lock: Option<Lock>,
    queue: VecDeque<DriverInput<DonContext>>,
    log: Vec<LogEntry>,
    logged: usize,
    lock: Option<Lock>,
    out: Vec<Effect>,
    replaying: bool,
    replay_timers: Vec<(Duration, Timer)>,
    leader_changes: u32,
    finished: bool,
}

impl Core {
    /// The core of `job` on the member holding `keys`, with its own signed observation.
    pub fn new(p: Arc<Params>, keys: Arc<dyn Keys>, job: Job, own: SignedObservation) -> Self {
        let validators = Validators(
            p.members
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
            MemberId(keys.address()),
            p.thresholds(),
        );
        Self {
            p,
            keys,
            job,
            own,
            driver,
            round: 0,
            now: Duration::ZERO,
            observations: BTreeMap::new(),
            want_value: None,
            quorum_since: None,
            own_votes: BTreeMap::new(),
            own_proposals: BTreeMap::new(),
            proposals_seen: HashMap::new(),
            voted_lock: None,
            start_round: 0,
            votes_seen: HashMap::new(),
            equivocated: HashSet::new(),
            ahead: BTreeMap::new(),
            relayed: BTreeMap::new(),
            decided: None,
            sigs: BTreeMap::new(),
            early_sigs: Vec::new(),
            stored_lock: None,
            queue: VecDeque::new(),
            log: Vec::new(),
            logged: 0,
            lock: None,
            out: Vec::new(),
            replaying: false,
            replay_timers: Vec::new(),
            leader_changes: 0,
            finished: false,
        }
    }

    /// Takes one input at `now` (the member's clock) and returns what to do, in order.
    pub fn handle(&mut self, input: Input, now: Duration) -> Vec<Effect> {
        self.now = now;
        if self.finished {
            return Vec::new();
        }
        match input {
            Input::Start { log, lock } => self.start(log, lock),
            Input::Message(env) => self.on_message(env),
            Input::Timeout(t) => self.on_timer(t),
        }
        self.settle();
        self.take_effects()
    }

    /// Whether the writes of `batch`, effects this core returned, must be synced to disk
    /// before its sends ([`must_sync`]).
    pub fn must_sync(&self, batch: &[Effect]) -> bool {
        #[cfg(feature = "mutations")]
        if self.p.mutated(Mutation::NoSyncBeforeVote) {
            return false;
        }
        must_sync(batch)
    }

    /// The execution.
    pub fn execution_id(&self) -> B256 {
        self.job.execution_id
    }

    /// The current round.
    pub fn round(&self) -> u32 {
        self.round
    }

    /// This member's address.
    pub fn address(&self) -> Address {
        self.keys.address()
    }

    /// The decided round and set id, once decided.
    pub fn decided(&self) -> Option<(u32, B256)> {
        self.decided.as_ref().map(|d| (d.round, d.value.id))
    }

    /// The decided report and the leader of the deciding round, once decided.
    pub fn decided_report(&self) -> Option<(&Bytes, Address)> {
        self.decided.as_ref().map(|d| (&d.report, d.leader))
    }

    /// The job's [`crate::job::OnDecided`], if it has one.
    pub fn decided_hook(&self) -> Option<&crate::job::OnDecided> {
        self.job.on_decided.as_ref()
    }

    /// Whether the instance ended (agreed or stalled).
    pub fn finished(&self) -> bool {
        self.finished
    }

    /// What this member holds for one peer, against the documented bounds.
    pub fn held_for(&self, peer: Address) -> Held {
        Held {
            observations: usize::from(self.observations.contains_key(&peer)),
            ahead_votes: usize::from(self.ahead.contains_key(&peer)),
            early_signatures: self.early_sigs.iter().filter(|(a, _)| *a == peer).count(),
            early_signatures_total: self.early_sigs.len(),
            votes_seen: self.votes_seen.keys().filter(|(a, ..)| *a == peer).count(),
            relayed_prevotes: self.relayed_of(peer),
            log_entries: self.logged + self.log.len(),
        }
    }

    fn exec(&self) -> B256 {
        self.job.execution_id
    }

    fn me(&self) -> Address {
        self.keys.address()
    }

    fn event(&mut self, event: DonEvent) {
        self.out.push(Effect::Event(event));
    }

    fn send(&mut self, env: Envelope) {
        self.out.push(Effect::Send { to: None, env });
    }

    /// Sends this member's observation to the current round's leader, the one member that
    /// uses it: a proposal carries the observations it puts forward, each signed by its
    /// observer, so the others check it without having held them. (OCR3 sends observations
    /// to the leader alone too.) A new round's leader is sent it when the member enters
    /// that round; the rebroadcast sends it again to the leader of the moment.
    fn send_observation(&mut self) {
        let leader = self.p.leader(&self.exec(), self.round);
        if leader == self.me() {
            return;
        }
        let env = self.envelope(Body::Observation {
            observation: self.own.clone(),
        });
        self.out.push(Effect::Send {
            to: Some(leader),
            env,
        });
    }

    fn schedule(&mut self, at: Duration, timer: Timer) {
        if self.replaying {
            self.replay_timers.push((at, timer));
        } else {
            self.out.push(Effect::Schedule { at, timer });
        }
    }

    fn take_effects(&mut self) -> Vec<Effect> {
        let mut v = Vec::with_capacity(self.out.len() + 2);
        if !self.log.is_empty() {
            self.logged += self.log.len();
            v.push(Effect::Append(std::mem::take(&mut self.log)));
        }
        if let Some(l) = self.lock.take() {
            v.push(Effect::Lock(l));
        }
        v.append(&mut self.out);
        v
    }

    fn binding(&self) -> Binding {
        Binding {
            don_id: self.p.don_id,
            config_version: self.p.config_version,
            execution_id: self.job.execution_id,
            market: self.job.round.market,
            market_id: self.job.round.id,
        }
    }

    fn usable(&self, o: &SignedObservation) -> bool {
        check_observation(&o.observation, &self.binding(), &self.job.workers).is_ok()
    }

    /// The report a set makes, as this member computes it.
    fn build(&self, set: &[SignedObservation]) -> Result<Bytes, BuildError> {
        let obs: Vec<_> = set.iter().map(|o| o.observation.clone()).collect();
        let agg = aggregate(&obs, &self.binding(), &self.job.workers, self.p.f)?;
        (self.job.build)(&agg).map_err(BuildError::Refused)
    }

    /// A set a leader may propose and a member prevotes for: 2f+1 usable observations
    /// (distinct, signed: the wire checked that) that build a report.
    fn valid(&self, set: &[SignedObservation]) -> bool {
        set.len() > 2 * self.p.f && set.iter().all(|o| self.usable(o)) && self.build(set).is_ok()
    }

    fn envelope(&self, body: Body) -> Envelope {
        Envelope {
            don_id: self.p.don_id,
            config_version: self.p.config_version,
            execution_id: self.job.execution_id,
            market: self.job.round.market,
            market_id: self.job.round.id,
            sender: self.me(),
            body,
        }
    }

    /// What a vote of this execution signs ([`wire::vote_digest`]).
    fn vote_digest(&self, kind: VoteKind, round: u32, value: Option<&B256>) -> B256 {
        let p = &self.p;
        wire::vote_digest(p.don_id, p.config_version, &self.exec(), kind, round, value)
    }

    /// What a proposal of this execution signs ([`wire::proposal_digest`]).
    fn proposal_digest(&self, round: u32, pol_round: Option<u32>, value: &B256) -> B256 {
        let p = &self.p;
        wire::proposal_digest(
            p.don_id,
            p.config_version,
            &self.exec(),
            round,
            pol_round,
            value,
        )
    }

    fn timeout_after(&self, t: Timeout) -> Duration {
        let base = self.p.attempt_timeout_ms.max(1);
        let unit = match t.kind {
            TimeoutKind::Propose => base,
            _ => base.div_ceil(2),
        };
        let r = u64::from(t.round.as_u32().unwrap_or(0));
        Duration::from_millis(unit.saturating_add(unit.saturating_mul(r) / 2)).min(MAX_TIMEOUT)
    }

    /// Replays what was persisted, then sends what other members may have missed.
    fn start(&mut self, log: Vec<LogEntry>, lock: Option<Lock>) {
        self.stored_lock = lock;
        self.observations
            .insert(self.own.observation.observer, self.own.clone());
        self.replay(log);
        self.start_round = self.round;
        self.rebroadcast();
        let every = self.p.rebroadcast_every();
        self.schedule(self.now + every, Timer::Rebroadcast);
    }

    fn on_timer(&mut self, t: Timer) {
        match t {
            Timer::Rebroadcast => {
                self.rebroadcast();
                let every = self.p.rebroadcast_every();
                self.schedule(self.now + every, Timer::Rebroadcast);
            }
            Timer::Grace => {}
            Timer::Step { round, kind } => {
                if self.decided.is_none() {
                    self.take(LogEntry::Timeout { round, kind });
                }
            }
        }
    }

    /// What follows any input: a leader's proposal, the report signature once decided,
    /// the agreement, or the end of the rounds allowed.
    fn settle(&mut self) {
        self.try_propose();
        if let Err(e) = self.sign_decided() {
            tracing::error!(execution_id = %self.exec(), error = %e, "cannot sign the decided report");
        }
        if self.finished || self.agreement() {
            return;
        }
        if self.decided.is_none()
            && self.round >= self.start_round.saturating_add(self.p.max_attempts)
        {
            self.finished = true;
            self.out.push(Effect::Stalled { rounds: self.round });
        } else if self.logged + self.log.len() >= MAX_LOG_ENTRIES && self.decided.is_none() {
            tracing::error!(execution_id = %self.exec(), "the consensus log of this execution is full: stopping it");
            self.finished = true;
            self.out.push(Effect::Stalled { rounds: self.round });
        }
    }

    fn enqueue_new_round(&mut self, round: u32) {
        let leader = self.p.leader(&self.exec(), round);
        self.queue.push_back(DriverInput::NewRound(
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
                            LeaderChangeCause::Equivocation
                        } else {
                            LeaderChangeCause::Timeout
                        };
                        self.event(DonEvent::LeaderChange(why));
                        tracing::info!(execution_id = %self.exec(), round = r, leader = %self.p.leader(&self.exec(), r), reason = why.as_str(), "consensus moves to a new round and leader");
                    }
                    self.round = r;
                    self.quorum_since = None;
                    self.enqueue_new_round(r);
                    // the new round's leader needs this member's observation to propose
                    if !self.replaying && self.decided.is_none() {
                        self.send_observation();
                    }
                }
            }
            Output::Propose(p) => self.send_proposal(p),
            Output::Vote(v) => self.send_vote(v),
            Output::Decide(round, p) => self.on_decide(round, p),
            Output::ScheduleTimeout(t) => {
                let at = self.now + self.timeout_after(t);
                let round = t.round.as_u32().unwrap_or(0);
                let kind = match t.kind {
                    TimeoutKind::Propose => StepKind::Propose,
                    TimeoutKind::Prevote => StepKind::Prevote,
                    TimeoutKind::Precommit => StepKind::Precommit,
                    TimeoutKind::Rebroadcast => return,
                };
                self.schedule(at, Timer::Step { round, kind });
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
        let Ok(signature) = self.keys.sign(&digest) else {
            tracing::error!("cannot sign a proposal");
            return;
        };
        self.proposals_seen
            .entry(round)
            .or_insert((p.value.id, true, pol_round));
        let env = self.envelope(Body::Proposal {
            round,
            pol_round,
            observations: p.value.observations.to_vec(),
            signature: signature.clone(),
        });
        if !self.replaying {
            tracing::info!(execution_id = %self.exec(), round, pol_round, observations = p.value.observations.len(), "proposing a set as the round's leader");
            // the polka the set is carried from first: a member that could not count it
            // (it holds an equivocator's other prevote) takes it before the proposal
            if let Some(vr) = pol_round
                && let Some(polka) = self.polka_envelope(vr, &p.value.id)
            {
                self.send(polka);
            }
            self.send(env.clone());
            if self.job.on_decided.is_some()
                && let Ok(report) = self.build(&p.value.observations)
            {
                self.out.push(Effect::Proposed { round, report });
            }
        }
        self.own_proposals.insert(round, env);
        self.queue.push_back(DriverInput::Proposal(
            SignedMessage::new(p, Sig(signature.to_vec())),
            Validity::Valid,
        ));
    }

    fn send_vote(&mut self, mut v: Vote) {
        let round = v.round.as_u32().unwrap_or(0);
        #[cfg(feature = "mutations")]
        if self.p.mutated(Mutation::SkipLockCheck)
            && v.kind == VoteType::Prevote
            && v.value == NilOrVal::Nil
            && let Some((id, true, _)) = self.proposals_seen.get(&round)
        {
            v.value = NilOrVal::Val(SetId(*id));
        }
        #[cfg(feature = "mutations")]
        let guard = !self.p.mutated(Mutation::SkipLockCheck);
        #[cfg(not(feature = "mutations"))]
        let guard = true;
        if guard && let NilOrVal::Val(id) = &v.value {
            let kind = if v.kind == VoteType::Prevote {
                VoteKind::Prevote
            } else {
                VoteKind::Precommit
            };
            if !self.may_vote_for(kind, round, &id.0) {
                tracing::warn!(execution_id = %self.exec(), round, ?kind, set = %id.0, "the driver voted for a set Tendermint's rules do not allow here: voting nil");
                self.event(DonEvent::VoteGuarded);
                v.value = NilOrVal::Nil;
            }
        }
        let kind = match v.kind {
            VoteType::Prevote => VoteKind::Prevote,
            VoteType::Precommit => VoteKind::Precommit,
        };
        let value = match &v.value {
            NilOrVal::Val(id) => Some(id.0),
            NilOrVal::Nil => None,
        };
        let digest = self.vote_digest(kind, round, value.as_ref());
        let Ok(signature) = self.keys.sign(&digest) else {
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
        self.votes_seen.insert((self.me(), round, kind), value);
        if kind == VoteKind::Precommit
            && let Some(id) = value
            && self.voted_lock.is_none_or(|(r, _)| r <= round)
        {
            self.voted_lock = Some((round, id));
        }
        if !self.replaying {
            self.send(env);
        }
        self.queue.push_back(DriverInput::Vote(SignedMessage::new(
            v,
            Sig(signature.to_vec()),
        )));
    }

    /// Tendermint's rules on a vote for a set, checked on what the driver decided to send
    /// (Malachite 0.5's driver matches a polka certificate by round only, not by set): a
    /// precommit for `id` needs 2f+1 prevotes for `id` in the round; a prevote for `id`,
    /// when this member's newest precommit was for another set in round `lr`, needs the
    /// round's proposal to carry `id` from a polka round `vr >= lr` with 2f+1 prevotes for
    /// `id` in `vr` (counted here, or a polka certificate taken: [`polka`]). A vote that
    /// fails becomes nil: always safe.
    fn may_vote_for(&self, kind: VoteKind, round: u32, id: &B256) -> bool {
        let polka = |r: u32| self.has_polka(r, id);
        match kind {
            VoteKind::Precommit => polka(round),
            VoteKind::Prevote => match self.voted_lock {
                None => true,
                Some((_, locked)) if locked == *id => true,
                Some((lr, _)) => self.proposals_seen.get(&round).is_some_and(|(pid, _, vr)| {
                    pid == id && vr.is_some_and(|vr| vr >= lr && polka(vr))
                }),
            },
        }
    }

    /// Sends again what other members may have missed: the decision once decided, else
    /// this member's observation (to the round's leader), its proposal of the current
    /// round, its votes of the current and the previous round, every vote it cast for a
    /// set (a member that missed a polka needs those prevotes to follow a leader that
    /// carries its set), and the polkas of its valid and locked values ([`polka`]).
    fn rebroadcast(&mut self) {
        if self.decided.is_some() {
            if self.sigs.contains_key(&self.me()) {
                let env = self.decided_envelope();
                self.send(env);
            }
            return;
        }
        self.send_observation();
        if let Some(p) = self.own_proposals.get(&self.round).cloned() {
            self.send(p);
        }
        let current: Vec<Envelope> = self.own_votes.values().cloned().collect();
        for env in current {
            self.send(env);
        }
        self.send_polkas();
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
        if held.len() <= 2 * self.p.f {
            return;
        }
        let grace = Duration::from_millis(self.p.observation_grace_ms);
        let since = match self.quorum_since {
            Some(s) => s,
            None => {
                self.quorum_since = Some(self.now);
                if held.len() < self.p.members.len() {
                    self.schedule(self.now + grace, Timer::Grace);
                }
                self.now
            }
        };
        if held.len() < self.p.members.len() && self.now.saturating_sub(since) < grace {
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

    /// The current step: `propose`, `prevote`, `precommit` or `commit`.
    pub fn step(&self) -> &'static str {
        if self.decided.is_some() {
            "commit"
        } else if self.driver.step_is_prevote() {
            "prevote"
        } else if self.driver.step_is_precommit() {
            "precommit"
        } else {
            "propose"
        }
    }

    /// What the operator sees of this execution now.
    pub fn status(&self) -> InstanceStatus {
        let rs = self.driver.round_state();
        let step = self.step();
        InstanceStatus {
            execution_id: self.exec(),
            round: self.round,
            leader: self.p.leader(&self.exec(), self.round),
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
        }
    }
}

fn vote_type(kind: VoteKind) -> VoteType {
    match kind {
        VoteKind::Prevote => VoteType::Prevote,
        VoteKind::Precommit => VoteType::Precommit,
    }
}
