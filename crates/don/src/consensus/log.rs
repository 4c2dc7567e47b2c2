//! The consensus log: every input the driver took that this member cannot derive again
//! (what it received, what it proposed, which timeouts fired), appended before anything it
//! causes is sent, and replayed into a new driver when the member starts again.

use super::*;
use serde::{Deserialize, Serialize};

/// One entry of the consensus log: an input the driver took that this member cannot
/// derive again (what it received, what it proposed, which timeouts fired).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "input", rename_all = "snake_case")]
pub enum LogEntry {
    /// This member, as the round's leader, proposed a set.
    ProposeValue {
        /// The round.
        round: u32,
        /// The set.
        observations: Vec<SignedObservation>,
    },
    /// A leader's proposal, checked.
    Proposal {
        /// The round.
        round: u32,
        /// The round of the polka it carries, if any.
        pol_round: Option<u32>,
        /// The leader.
        proposer: Address,
        /// The set.
        observations: Vec<SignedObservation>,
        /// The leader's signature.
        signature: Bytes,
        /// Whether the set is valid on this member.
        valid: bool,
    },
    /// A member's vote, checked.
    Vote {
        /// The round.
        round: u32,
        /// Prevote or precommit.
        kind: VoteKind,
        /// The set id, or nil.
        value: Option<B256>,
        /// The voter.
        voter: Address,
        /// The voter's signature.
        signature: Bytes,
    },
    /// A timeout fired.
    Timeout {
        /// The round.
        round: u32,
        /// The step.
        kind: StepKind,
    },
}

/// The step a timeout ends, as logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepKind {
    /// Waiting for the leader's proposal.
    Propose,
    /// Waiting for 2f+1 prevotes for one set.
    Prevote,
    /// Waiting for 2f+1 precommits for one set.
    Precommit,
}

impl Core {
    /// Rebuilds the driver's state from the consensus log (votes regenerated, not sent:
    /// they are sent again as this member's current votes); the timeouts of the current
    /// round are scheduled again.
    pub(super) fn replay(&mut self, entries: Vec<LogEntry>) {
        let count = entries.len();
        self.logged = count;
        self.replaying = true;
        self.enqueue_new_round(0);
        self.drive();
        for entry in entries {
            if let Some(input) = self.input_of(entry) {
                self.queue.push_back(input);
                self.drive();
            }
        }
        self.replaying = false;
        let round = self.round;
        let timers = std::mem::take(&mut self.replay_timers);
        for (at, t) in timers {
            if matches!(t, Timer::Step { round: r, .. } if r == round) {
                self.schedule(at, t);
            }
        }
        if count > 0 {
            tracing::info!(execution_id = %self.exec(), entries = count, round, "consensus resumed from its log");
        }
    }

    /// The driver input a log entry stands for (and what it tells this member).
    pub(super) fn input_of(&mut self, entry: LogEntry) -> Option<DriverInput<DonContext>> {
        Some(match entry {
            LogEntry::ProposeValue {
                round,
                observations,
            } => {
                if self.want_value == Some(round) {
                    self.want_value = None;
                }
                DriverInput::ProposeValue(Round::new(round), SetValue::new(observations))
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
                self.proposals_seen
                    .entry(round)
                    .or_insert((value.id, valid, pol_round));
                for o in value.observations.iter() {
                    if self.usable(o) {
                        self.observations
                            .entry(o.observation.observer)
                            .or_insert_with(|| o.clone());
                    }
                }
                DriverInput::Proposal(
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
                if self
                    .votes_seen
                    .get(&(voter, round, kind))
                    .is_some_and(|held| *held != value)
                {
                    // only a polka message logs a vote conflicting with one held
                    return self.relayed_prevote(round, kind, value, voter, signature);
                }
                self.votes_seen.insert((voter, round, kind), value);
                DriverInput::Vote(SignedMessage::new(
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
            LogEntry::Timeout { round, kind } => DriverInput::TimeoutElapsed(Timeout::new(
                Round::new(round),
                match kind {
                    StepKind::Propose => TimeoutKind::Propose,
                    StepKind::Prevote => TimeoutKind::Prevote,
                    StepKind::Precommit => TimeoutKind::Precommit,
                },
            )),
        })
    }

    /// Logs an entry (appended to the state file before anything it causes is sent) and
    /// feeds its input to the driver.
    pub(super) fn take(&mut self, entry: LogEntry) {
        if self.logged + self.log.len() >= MAX_LOG_ENTRIES {
            return;
        }
        self.log.push(entry.clone());
        if let Some(input) = self.input_of(entry) {
            self.queue.push_back(input);
            self.drive();
        }
    }
}
