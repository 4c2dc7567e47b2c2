//! The consensus log: every input the driver took that this member cannot derive again
//! (what it received, what it proposed, which timeouts fired), appended before anything it
//! causes is sent, and replayed into a new driver when the member starts again.

use super::*;

/// One entry of the consensus log: an input the driver took that this member cannot
/// derive again (what it received, what it proposed, which timeouts fired).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "input", rename_all = "snake_case")]
pub(super) enum LogEntry {
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
pub(super) enum VoteKindOrPropose {
    Propose,
    Prevote,
    Precommit,
}

impl Instance<'_> {
    /// Rebuilds the driver's state from the consensus log (votes regenerated, not sent:
    /// they are sent again below as this member's current votes).
    pub(super) fn replay(&mut self) -> Result<(), AgreeError> {
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
    pub(super) fn input_of(&mut self, entry: LogEntry) -> Option<Input<DonContext>> {
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
    pub(super) fn take(&mut self, entry: LogEntry) {
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
}
