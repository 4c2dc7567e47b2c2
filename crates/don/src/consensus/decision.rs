//! A decided set: taken from the driver (with the precommits that decided it) or from
//! another member's certificate, its report built and signed once (persisted first), the
//! other members' report signatures collected to f+1.

use super::*;

impl Core {
    pub(super) fn on_decide(&mut self, _current: Round, p: Proposal) {
        if self.decided.is_some() {
            return;
        }
        // the driver names its current round; the set was decided by the precommits of
        // its proposal's round, which may be an earlier one
        let round = p.round;
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
    pub(super) fn decide(&mut self, round: u32, value: SetValue, commits: Vec<CommitVote>) {
        let report = match self.build(&value.observations) {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(execution_id = %self.exec(), round, error = %e, "the decided set makes no report on this member: check its workflow and chain against the others'");
                self.event(DonEvent::MessageRefused(
                    RefuseReason::DecidedSetUnbuildable,
                ));
                return;
            }
        };
        let digest = self.p.digest(&report);
        let leader = self.p.leader(&self.exec(), round);
        if !self.replaying {
            tracing::info!(execution_id = %self.exec(), round, %leader, set = %value.id, precommits = commits.len(), "set decided");
        }
        let set = value.id;
        self.decided = Some(Decision {
            round,
            value,
            leader,
            commits,
            report,
            digest,
        });
        self.want_value = None;
        if !self.replaying {
            self.out.push(Effect::Decided { round, set });
        }
    }

    /// Signs the decided report (once: the lock is returned as an effect, committed before
    /// the signature leaves) and sends the decision.
    pub(super) fn sign_decided(&mut self) -> Result<(), crate::wire::WireError> {
        let Some(d) = &self.decided else {
            return Ok(());
        };
        if self.sigs.contains_key(&self.me()) {
            return Ok(());
        }
        let signature = match &self.stored_lock {
            Some(stored) if stored.digest == d.digest => stored.signature.clone(),
            Some(stored) => {
                // only a member whose state file predates this protocol can hold another
                tracing::error!(execution_id = %self.exec(), signed = %stored.digest, decided = %d.digest, "this member signed another report for this execution before: not signing the decided one");
                self.event(DonEvent::MessageRefused(RefuseReason::SignedAnother));
                self.finished = true;
                self.out.push(Effect::SignedAnother);
                return Ok(());
            }
            None => {
                let signature = self.keys.sign(&d.digest)?;
                let lock = Lock {
                    digest: d.digest,
                    report: d.report.clone(),
                    signature: signature.clone(),
                    observations: d.value.observations.to_vec(),
                    attempt: d.round,
                };
                self.stored_lock = Some(lock.clone());
                self.lock = Some(lock);
                signature
            }
        };
        self.sigs.insert(self.me(), signature);
        let early = std::mem::take(&mut self.early_sigs);
        for (who, sig) in early {
            self.add_report_signature(who, &sig);
        }
        let env = self.decided_envelope();
        self.send(env);
        Ok(())
    }

    /// Mutation only: signs the report of a proposed set before any decision and sends
    /// it, as a member that broke the rule "sign only what was decided" would.
    #[cfg(feature = "mutations")]
    pub(super) fn sign_early(&mut self, round: u32, value: &SetValue) {
        let Ok(report) = self.build(&value.observations) else {
            return;
        };
        let Ok(sig) = self.keys.sign(&self.p.digest(&report)) else {
            return;
        };
        let env = self.envelope(Body::Decided {
            round,
            observations: value.observations.to_vec(),
            commits: Vec::new(),
            report_signature: Some(sig),
            agreed: false,
        });
        self.send(env);
    }

    pub(super) fn decided_envelope(&self) -> Envelope {
        let (round, observations, commits) = match &self.decided {
            Some(d) => (d.round, d.value.observations.to_vec(), d.commits.clone()),
            None => (0, Vec::new(), Vec::new()),
        };
        self.envelope(Body::Decided {
            round,
            observations,
            commits,
            report_signature: self.sigs.get(&self.me()).cloned(),
            agreed: false,
        })
    }

    pub(super) fn add_report_signature(&mut self, who: Address, sig: &Bytes) {
        let Some(d) = &self.decided else {
            if self.early_sigs.len() < self.p.members.len() * 2 {
                self.early_sigs.push((who, sig.clone()));
            }
            return;
        };
        if self.keys.recover(&d.digest, sig).ok() == Some(who) {
            self.sigs.entry(who).or_insert_with(|| sig.clone());
        } else {
            self.event(DonEvent::MessageRefused(RefuseReason::BadReportSignature));
        }
    }

    /// f+1 report signatures over the decided report, this member's own first: the
    /// agreement, returned once as [`Effect::Agreed`].
    pub(super) fn agreement(&mut self) -> bool {
        let need = self.p.f + 1;
        let Some(d) = &self.decided else {
            return false;
        };
        if self.sigs.len() < need || !self.sigs.contains_key(&self.me()) {
            return false;
        }
        let me = self.me();
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
            context: self.p.context.clone(),
            digest: d.digest,
            signers,
            signatures,
            observations: d.value.observations.to_vec(),
            attempt: d.round,
            leader: d.leader,
            recomputed: true,
            commits: d.commits.clone(),
        };
        self.event(DonEvent::Agreement);
        tracing::info!(execution_id = %self.exec(), round = a.attempt, leader = %a.leader, signers = ?a.signers, "DON agreement");
        self.finished = true;
        self.out.push(Effect::Agreed(Box::new(a)));
        true
    }

    /// Every valid report signature this member holds over the decided report.
    pub fn signatures(&self) -> &BTreeMap<Address, Bytes> {
        &self.sigs
    }

    /// Leader changes this run saw.
    pub fn leader_changes(&self) -> u32 {
        self.leader_changes
    }
}
