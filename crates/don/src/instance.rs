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

use crate::book::Slot;
use crate::context::{
    DonContext, MemberId, Proposal, SetId, SetValue, Sig, Validator, Validators, Vote,
};
use crate::member::{AgreeError, Agreed, Don, InstanceStatus, Job};
use crate::persist::{Lock, MAX_LOG_ENTRIES};
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
const ROUND_WINDOW: u32 = 8;
/// The longest any one timeout grows to.
const MAX_TIMEOUT: Duration = Duration::from_secs(60);

/// Test hook: `CRESOLVER_TEST_CRASH_AT=<point>` ends the process at that point (exit 97,
/// no cleanup). Points: `don_observed` (own observation stored, not sent), `don_voted`
/// (this member's first precommit logged and sent), `don_signed` (a report signed, stored
/// and sent).
pub(crate) fn crash_point(point: &str) {
    if std::env::var("CRESOLVER_TEST_CRASH_AT").is_ok_and(|v| v == point) {
        tracing::error!(point, "CRESOLVER_TEST_CRASH_AT: exiting");
        tokio::spawn(async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            std::process::exit(97);
        });
    }
}

/// One entry of the consensus log: an input the driver took that this member cannot
/// derive again (what it received, what it proposed, which timeouts fired).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "input", rename_all = "snake_case")]
enum LogEntry {
    ProposeValue {
        round: u32,
        observations: Vec<SignedObservation>,
    },
    Proposal {
        round: u32,
        pol_round: Option<u32>,
        proposer: Address,
        observations: Vec<SignedObservation>,
        signature: Bytes,
        valid: bool,
    },
    Vote {
        round: u32,
        kind: VoteKind,
        value: Option<B256>,
        voter: Address,
        signature: Bytes,
    },
    Timeout {
        round: u32,
        kind: VoteKindOrPropose,
    },
}

/// The kind of a timeout, as logged.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum VoteKindOrPropose {
    Propose,
    Prevote,
    Precommit,
}

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
    don: &'a Don,
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
    ahead: HashMap<Address, (u32, VoteKind, Option<B256>, Bytes)>,
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
    pub(crate) fn new(don: &'a Don, job: Job, own: SignedObservation, slot: Arc<Slot>) -> Self {
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
    fn build(&self, set: &[SignedObservation]) -> Result<Bytes, String> {
        let obs: Vec<_> = set.iter().map(|o| o.observation.clone()).collect();
        let agg = aggregate(&obs, &self.binding(), &self.job.workers, self.don.f())
            .map_err(|e| e.to_string())?;
        (self.job.build)(&agg)
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

    /// Rebuilds the driver's state from the consensus log (votes regenerated, not sent:
    /// they are sent again below as this member's current votes).
    fn replay(&mut self) -> Result<(), AgreeError> {
        let entries = self.don.persist.log(&self.exec())?;
        self.logged = entries.len();
        self.replaying = true;
        self.enqueue_new_round(0);
        self.drive();
        for e in &entries {
            match serde_json::from_str::<LogEntry>(e) {
                Ok(entry) => {
                    if let Some(input) = self.input_of(entry) {
                        self.queue.push_back(input);
                        self.drive();
                    }
                }
                Err(err) => {
                    tracing::error!(execution_id = %self.exec(), error = %err, "unreadable consensus log entry: skipped");
                }
            }
        }
        self.replaying = false;
        self.outbox.clear();
        let round = self.round;
        self.timers.retain(|(_, t)| t.round.as_u32() == Some(round));
        if !entries.is_empty() {
            tracing::info!(execution_id = %self.exec(), entries = entries.len(), round, "consensus resumed from its log");
        }
        Ok(())
    }

    /// The driver input a log entry stands for (and what it tells this member).
    fn input_of(&mut self, entry: LogEntry) -> Option<Input<DonContext>> {
        Some(match entry {
            LogEntry::ProposeValue {
                round,
                observations,
            } => {
                if self.want_value == Some(round) {
                    self.want_value = None;
                }
                Input::ProposeValue(Round::new(round), SetValue::new(observations))
            }
            LogEntry::Proposal {
                round,
                pol_round,
                proposer,
                observations,
                signature,
                valid,
            } => {
                let value = SetValue::new(observations);
                self.proposals_seen.entry(round).or_insert(value.id);
                for o in value.observations.iter() {
                    if self.usable(o) {
                        self.observations
                            .entry(o.observation.observer)
                            .or_insert_with(|| o.clone());
                    }
                }
                Input::Proposal(
                    SignedMessage::new(
                        Proposal {
                            round: Round::new(round),
                            value,
                            pol_round: Round::from(pol_round),
                            proposer: MemberId(proposer),
                        },
                        Sig(signature.to_vec()),
                    ),
                    Validity::from_bool(valid),
                )
            }
            LogEntry::Vote {
                round,
                kind,
                value,
                voter,
                signature,
            } => {
                self.votes_seen.insert((voter, round, kind), value);
                Input::Vote(SignedMessage::new(
                    Vote {
                        kind: vote_type(kind),
                        round: Round::new(round),
                        value: match value {
                            Some(v) => NilOrVal::Val(SetId(v)),
                            None => NilOrVal::Nil,
                        },
                        voter: MemberId(voter),
                    },
                    Sig(signature.to_vec()),
                ))
            }
            LogEntry::Timeout { round, kind } => Input::TimeoutElapsed(Timeout::new(
                Round::new(round),
                match kind {
                    VoteKindOrPropose::Propose => TimeoutKind::Propose,
                    VoteKindOrPropose::Prevote => TimeoutKind::Prevote,
                    VoteKindOrPropose::Precommit => TimeoutKind::Precommit,
                },
            )),
        })
    }

    /// Logs an entry (appended to the state file before anything it causes is sent) and
    /// feeds its input to the driver.
    fn take(&mut self, entry: LogEntry) {
        if self.logged + self.log.len() >= MAX_LOG_ENTRIES {
            return;
        }
        match serde_json::to_string(&entry) {
            Ok(s) => self.log.push(s),
            Err(e) => {
                tracing::error!(error = %e, "cannot log a consensus input");
                return;
            }
        }
        if let Some(input) = self.input_of(entry) {
            self.queue.push_back(input);
            self.drive();
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
        let digest = wire::proposal_digest(
            self.don.cfg.don_id,
            self.don.cfg.config_version,
            &self.exec(),
            round,
            pol_round,
            &p.value.id,
        );
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
        let digest = wire::vote_digest(
            self.don.cfg.don_id,
            self.don.cfg.config_version,
            &self.exec(),
            kind,
            round,
            value.as_ref(),
        );
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
        while self.own_votes.len() > 4 {
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

    fn on_decide(&mut self, round: Round, p: Proposal) {
        if self.decided.is_some() {
            return;
        }
        let r = round.as_u32().unwrap_or(0);
        // the 2f+1 precommits that decided it, from the driver's vote keeper
        let id = NilOrVal::Val(SetId(p.value.id));
        let commits: Vec<CommitVote> = self
            .driver
            .votes()
            .per_round(round)
            .map(|pr| {
                pr.received_votes()
                    .iter()
                    .filter(|v| v.message.kind == VoteType::Precommit && v.message.value == id)
                    .map(|v| CommitVote {
                        voter: v.message.voter.0,
                        signature: Bytes::from(v.signature.0.clone()),
                    })
                    .collect()
            })
            .unwrap_or_default();
        self.decide(r, p.value, commits);
    }

    /// Takes a decided set: builds the report, signs it (persisted first) and says so.
    fn decide(&mut self, round: u32, value: SetValue, commits: Vec<CommitVote>) {
        let report = match self.build(&value.observations) {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(execution_id = %self.exec(), round, error = %e, "the decided set makes no report on this member: check its workflow and chain against the others'");
                self.don
                    .metrics
                    .don_event("message_refused", "decided_set_unbuildable");
                return;
            }
        };
        let digest = self.don.digest(&report);
        let leader = self.don.leader(&self.exec(), round);
        if !self.replaying {
            tracing::info!(execution_id = %self.exec(), round, %leader, set = %value.id, precommits = commits.len(), "set decided");
        }
        self.decided = Some(Decision {
            round,
            value,
            leader,
            commits,
            report,
            digest,
        });
        self.timers.clear();
        self.want_value = None;
    }

    /// Signs the decided report (once: the lock is persisted before the signature
    /// leaves) and sends the decision.
    fn sign_decided(&mut self) -> Result<(), AgreeError> {
        let Some(d) = &self.decided else {
            return Ok(());
        };
        if self.sigs.contains_key(&self.don.address()) {
            return Ok(());
        }
        let signature = wire::sign_digest(&self.don.signer, &d.digest)?;
        let lock = Lock {
            digest: d.digest,
            report: d.report.clone(),
            signature: signature.clone(),
            observations: d.value.observations.to_vec(),
            attempt: d.round,
        };
        let stored = self.don.persist.lock_once(&self.exec(), &lock)?;
        if stored.digest != d.digest {
            // only a member whose state file predates this protocol can hold another
            tracing::error!(execution_id = %self.exec(), signed = %stored.digest, decided = %d.digest, "this member signed another report for this execution before: not signing the decided one");
            self.don
                .metrics
                .don_event("message_refused", "signed_another");
            return Err(AgreeError::Unbuildable(
                "this member's state file holds a signature of another report for this execution"
                    .into(),
            ));
        }
        self.sigs
            .insert(self.don.address(), stored.signature.clone());
        let early = std::mem::take(&mut self.early_sigs);
        for (who, sig) in early {
            self.add_report_signature(who, &sig);
        }
        let env = self.decided_envelope();
        self.outbox.push(env);
        crash_point("don_signed");
        Ok(())
    }

    fn decided_envelope(&self) -> Envelope {
        let (round, observations, commits) = match &self.decided {
            Some(d) => (d.round, d.value.observations.to_vec(), d.commits.clone()),
            None => (0, Vec::new(), Vec::new()),
        };
        self.envelope(Body::Decided {
            round,
            observations,
            commits,
            report_signature: self.sigs.get(&self.don.address()).cloned(),
        })
    }

    fn add_report_signature(&mut self, who: Address, sig: &Bytes) {
        let Some(d) = &self.decided else {
            if self.early_sigs.len() < self.don.members.len() * 2 {
                self.early_sigs.push((who, sig.clone()));
            }
            return;
        };
        if wire::recover(&d.digest, sig).ok() == Some(who) {
            self.sigs.entry(who).or_insert_with(|| sig.clone());
        } else {
            self.don
                .metrics
                .don_event("message_refused", "bad_report_signature");
        }
    }

    /// f+1 report signatures over the decided report, this member's own first.
    fn agreement(&mut self) -> Result<Option<Agreed>, AgreeError> {
        self.sign_decided()?;
        self.flush()?;
        let need = self.don.f() + 1;
        let Some(d) = &self.decided else {
            return Ok(None);
        };
        if self.sigs.len() < need {
            return Ok(None);
        }
        let me = self.don.address();
        let (signers, signatures): (Vec<Address>, Vec<Bytes>) = self
            .sigs
            .get_key_value(&me)
            .into_iter()
            .chain(self.sigs.iter().filter(|(a, _)| **a != me))
            .take(need)
            .map(|(a, s)| (*a, s.clone()))
            .unzip();
        let a = Agreed {
            execution_id: self.exec(),
            report: d.report.clone(),
            context: self.don.context.clone(),
            digest: d.digest,
            signers,
            signatures,
            observations: d.value.observations.to_vec(),
            attempt: d.round,
            leader: d.leader,
            recomputed: true,
            commits: d.commits.clone(),
        };
        let a = self.don.persist.save_agreed(&self.exec(), &a)?;
        // keep every signature seen, for a transmitter whose f+1 hold one the forwarder refuses
        self.don.remember_done(&a);
        {
            let mut done = self.don.done.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(entry) = done.0.get_mut(&self.exec()) {
                for (s, sig) in &self.sigs {
                    entry.sigs.entry(*s).or_insert_with(|| sig.clone());
                }
            }
        }
        self.don.metrics.don_event("agreement", "reached");
        tracing::info!(execution_id = %self.exec(), round = a.attempt, leader = %a.leader, signers = ?a.signers, "DON agreement");
        self.clear_status();
        Ok(Some(a))
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
    /// this member's observation, its proposal and its votes of the current round.
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
        let current: Vec<Envelope> = self
            .own_votes
            .iter()
            .filter(|((r, _), _)| *r + 1 >= self.round)
            .map(|(_, e)| e.clone())
            .collect();
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

    /// Takes the messages waiting in the book.
    fn take_messages(&mut self) {
        let msgs = self.slot.inbox().drain();
        for env in msgs {
            if env.execution_id != self.exec()
                || env.market != self.job.market
                || env.market_id != self.job.market_id
            {
                self.refuse(&env, "wrong_market");
                continue;
            }
            let sender = env.sender;
            match env.body {
                Body::Observation { observation } => self.on_observation(observation),
                Body::Proposal {
                    round,
                    pol_round,
                    observations,
                    signature,
                } => self.on_proposal(sender, round, pol_round, observations, signature),
                Body::Vote {
                    round,
                    kind,
                    value,
                    signature,
                } => self.on_vote(sender, round, kind, value, signature),
                Body::Decided {
                    round,
                    observations,
                    commits,
                    report_signature,
                } => self.on_decided(sender, round, observations, commits, report_signature),
            }
        }
    }

    fn refuse(&self, env: &Envelope, why: &'static str) {
        self.don.metrics.don_event("message_refused", why);
        tracing::debug!(execution_id = %self.exec(), sender = %env.sender, kind = env.kind(), reason = why, "a member's DON message dropped");
    }

    fn refuse_from(&self, sender: Address, kind: &'static str, why: &'static str) {
        self.don.metrics.don_event("message_refused", why);
        tracing::warn!(execution_id = %self.exec(), %sender, kind, reason = why, "a member's DON message dropped");
    }

    fn on_observation(&mut self, o: SignedObservation) {
        if !self.usable(&o) {
            self.don
                .metrics
                .don_event("message_refused", "unusable_observation");
            return;
        }
        if !self.observations.contains_key(&o.observation.observer) {
            self.don.metrics.don_event("observation_received", "peer");
            self.observations.insert(o.observation.observer, o);
        }
    }

    fn on_proposal(
        &mut self,
        sender: Address,
        round: u32,
        pol_round: Option<u32>,
        observations: Vec<SignedObservation>,
        signature: Bytes,
    ) {
        if self.decided.is_some() {
            return;
        }
        if self.don.leader(&self.exec(), round) != sender {
            return self.refuse_from(sender, "proposal", "not_the_leader");
        }
        if round > self.round.saturating_add(ROUND_WINDOW) {
            return self.refuse_from(sender, "proposal", "round_too_far_ahead");
        }
        if pol_round.is_some_and(|p| p >= round) {
            return self.refuse_from(sender, "proposal", "bad_pol_round");
        }
        let value = SetValue::new(observations);
        let digest = wire::proposal_digest(
            self.don.cfg.don_id,
            self.don.cfg.config_version,
            &self.exec(),
            round,
            pol_round,
            &value.id,
        );
        if wire::recover(&digest, &signature).ok() != Some(sender) {
            return self.refuse_from(sender, "proposal", "bad_proposal_signature");
        }
        match self.proposals_seen.get(&round) {
            Some(id) if *id == value.id => return,
            Some(_) => {
                self.equivocated.insert(round);
                self.don.metrics.don_event("equivocation_seen", "proposal");
                return self.refuse_from(sender, "proposal", "equivocating_leader");
            }
            None => {}
        }
        let valid = self.valid(&value.observations);
        if !valid {
            self.don.metrics.don_event("message_refused", "invalid_set");
            tracing::warn!(execution_id = %self.exec(), %sender, round, "the leader's set is not valid (fewer than 2f+1 usable observations, or it makes no report): prevoting nil");
        }
        self.take(LogEntry::Proposal {
            round,
            pol_round,
            proposer: sender,
            observations: value.observations.to_vec(),
            signature,
            valid,
        });
    }

    fn on_vote(
        &mut self,
        sender: Address,
        round: u32,
        kind: VoteKind,
        value: Option<B256>,
        signature: Bytes,
    ) {
        if self.decided.is_some() {
            return;
        }
        let far = round > self.round.saturating_add(ROUND_WINDOW);
        match self.votes_seen.get(&(sender, round, kind)) {
            Some(v) if *v == value => return,
            Some(_) => {
                self.don.metrics.don_event("equivocation_seen", "vote");
                return self.refuse_from(sender, "vote", "equivocating_voter");
            }
            None => {}
        }
        let digest = wire::vote_digest(
            self.don.cfg.don_id,
            self.don.cfg.config_version,
            &self.exec(),
            kind,
            round,
            value.as_ref(),
        );
        if wire::recover(&digest, &signature).ok() != Some(sender) {
            return self.refuse_from(sender, "vote", "bad_vote_signature");
        }
        if far {
            // far ahead: held, one per sender, until f+1 members vote in one such round
            if self.ahead.get(&sender).is_none_or(|(r, ..)| *r < round) {
                self.ahead.insert(sender, (round, kind, value, signature));
            }
            return self.join_ahead();
        }
        self.take(LogEntry::Vote {
            round,
            kind,
            value,
            voter: sender,
            signature,
        });
    }

    /// f+1 members' held votes in one round beyond the window: the member takes them
    /// (the driver then skips to that round, as it does for f+1 votes of any later round).
    fn join_ahead(&mut self) {
        let mut by_round: BTreeMap<u32, usize> = BTreeMap::new();
        for (r, ..) in self.ahead.values() {
            *by_round.entry(*r).or_default() += 1;
        }
        let Some(round) = by_round
            .iter()
            .rev()
            .find(|(_, c)| **c > self.don.f())
            .map(|(r, _)| *r)
        else {
            return;
        };
        let joined: Vec<(Address, (u32, VoteKind, Option<B256>, Bytes))> = self
            .ahead
            .iter()
            .filter(|(_, (r, ..))| *r == round)
            .map(|(a, v)| (*a, v.clone()))
            .collect();
        tracing::info!(execution_id = %self.exec(), from = self.round, to = round, "f+1 members vote in a round far ahead: joining it");
        for (voter, (r, kind, value, signature)) in joined {
            self.ahead.remove(&voter);
            self.votes_seen.insert((voter, r, kind), value);
            self.take(LogEntry::Vote {
                round: r,
                kind,
                value,
                voter,
                signature,
            });
        }
        self.ahead.retain(|_, (r, ..)| *r > round);
    }

    fn on_decided(
        &mut self,
        sender: Address,
        round: u32,
        observations: Vec<SignedObservation>,
        commits: Vec<CommitVote>,
        report_signature: Option<Bytes>,
    ) {
        let value = SetValue::new(observations);
        match &self.decided {
            Some(d) if d.value.id != value.id => {
                // two sets with 2f+1 precommits each: more than f members lied
                tracing::error!(execution_id = %self.exec(), %sender, ours = %d.value.id, theirs = %value.id, "a member claims another decided set");
                return self.refuse_from(sender, "decided", "conflicting_decision");
            }
            Some(_) => {}
            None => {
                if !self.certified(round, &value.id, &commits) {
                    return self.refuse_from(sender, "decided", "bad_commit_certificate");
                }
                tracing::info!(execution_id = %self.exec(), %sender, round, "taking a decision another member proved with 2f+1 precommits");
                self.decide(round, value, commits);
                if self.decided.is_none() {
                    return;
                }
            }
        }
        if let Some(sig) = report_signature {
            self.add_report_signature(sender, &sig);
        }
    }

    /// 2f+1 distinct members' valid precommits for `id` in `round`.
    fn certified(&self, round: u32, id: &B256, commits: &[CommitVote]) -> bool {
        let digest = wire::vote_digest(
            self.don.cfg.don_id,
            self.don.cfg.config_version,
            &self.exec(),
            VoteKind::Precommit,
            round,
            Some(id),
        );
        let mut voters = HashSet::new();
        for c in commits {
            if self.don.members.contains(&c.voter)
                && !voters.contains(&c.voter)
                && wire::recover(&digest, &c.signature).ok() == Some(c.voter)
            {
                voters.insert(c.voter);
            }
        }
        voters.len() >= self.don.quorum()
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
