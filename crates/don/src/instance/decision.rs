//! A decided set: taken from the driver (with the precommits that decided it) or from
//! another member's certificate, its report built and signed once (persisted first), the
//! other members' report signatures collected to f+1.

use super::*;

impl Instance<'_> {
    pub(super) fn on_decide(&mut self, round: Round, p: Proposal) {
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
    pub(super) fn decide(&mut self, round: u32, value: SetValue, commits: Vec<CommitVote>) {
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
    pub(super) fn sign_decided(&mut self) -> Result<(), AgreeError> {
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
            return Err(AgreeError::SignedAnother);
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

    pub(super) fn decided_envelope(&self) -> Envelope {
        let (round, observations, commits) = match &self.decided {
            Some(d) => (d.round, d.value.observations.to_vec(), d.commits.clone()),
            None => (0, Vec::new(), Vec::new()),
        };
        self.envelope(Body::Decided {
            round,
            observations,
            commits,
            report_signature: self.sigs.get(&self.don.address()).cloned(),
            agreed: false,
        })
    }

    pub(super) fn add_report_signature(&mut self, who: Address, sig: &Bytes) {
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
    pub(super) fn agreement(&mut self) -> Result<Option<Agreed>, AgreeError> {
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
        self.don.remember_done(&a, &self.sigs);
        self.don
            .decided
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .record(crate::decided::DecidedExecution::of(
                &a,
                Some(self.leader_changes),
            ));
        self.don.metrics.don_event("agreement", "reached");
        tracing::info!(execution_id = %self.exec(), round = a.attempt, leader = %a.leader, signers = ?a.signers, "DON agreement");
        self.clear_status();
        Ok(Some(a))
    }
}
