//! A member's message, checked against the consensus (its round's leader, its own
//! signature, equivocation, the round window, a commit certificate) and, if it passes,
//! logged and fed to the driver.

use super::*;

impl Core {
    /// Takes one member's message of this execution.
    pub(super) fn on_message(&mut self, env: Envelope) {
        {
            if env.execution_id != self.exec()
                || env.market != self.job.round.market
                || env.market_id != self.job.round.id
                || !self.p.members.contains(&env.sender)
            {
                self.refuse(&env, RefuseReason::WrongMarket);
                return;
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
                    ..
                } => self.on_decided(sender, round, observations, commits, report_signature),
                Body::Polka {
                    round,
                    value,
                    prevotes,
                } => self.on_polka(sender, round, value, prevotes),
            }
        }
    }

    pub(super) fn refuse(&mut self, env: &Envelope, why: RefuseReason) {
        self.event(DonEvent::MessageRefused(why));
        tracing::debug!(execution_id = %self.exec(), sender = %env.sender, kind = env.kind(), reason = why.as_str(), "a member's DON message dropped");
    }

    pub(super) fn refuse_from(&mut self, sender: Address, kind: &'static str, why: RefuseReason) {
        self.event(DonEvent::MessageRefused(why));
        tracing::warn!(execution_id = %self.exec(), %sender, kind, reason = why.as_str(), "a member's DON message dropped");
    }

    pub(super) fn on_observation(&mut self, o: SignedObservation) {
        if !self.usable(&o) {
            self.event(DonEvent::MessageRefused(RefuseReason::UnusableObservation));
            return;
        }
        if !self.observations.contains_key(&o.observation.observer) {
            self.event(DonEvent::ObservationReceived(ObservationSource::Peer));
            self.observations.insert(o.observation.observer, o);
        }
    }

    pub(super) fn on_proposal(
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
        #[cfg(feature = "mutations")]
        let any_proposer = self.p.mutated(Mutation::AcceptNonLeaderProposal);
        #[cfg(not(feature = "mutations"))]
        let any_proposer = false;
        if self.p.leader(&self.exec(), round) != sender && !any_proposer {
            return self.refuse_from(sender, "proposal", RefuseReason::NotTheLeader);
        }
        if round > self.round.saturating_add(ROUND_WINDOW) {
            return self.refuse_from(sender, "proposal", RefuseReason::RoundTooFarAhead);
        }
        if pol_round.is_some_and(|p| p >= round) {
            return self.refuse_from(sender, "proposal", RefuseReason::BadPolRound);
        }
        let value = SetValue::new(observations);
        let digest = self.proposal_digest(round, pol_round, &value.id);
        if self.keys.recover(&digest, &signature).ok() != Some(sender) {
            return self.refuse_from(sender, "proposal", RefuseReason::BadProposalSignature);
        }
        match self.proposals_seen.get(&round) {
            Some((id, ..)) if *id == value.id => return,
            Some(_) => {
                self.equivocated.insert(round);
                self.event(DonEvent::EquivocationSeen(EquivocationKind::Proposal));
                return self.refuse_from(sender, "proposal", RefuseReason::EquivocatingLeader);
            }
            None => {}
        }
        let valid = self.valid(&value.observations);
        #[cfg(feature = "mutations")]
        if valid && self.p.mutated(Mutation::SignBeforeDecision) {
            self.sign_early(round, &value);
        }
        if !valid {
            self.event(DonEvent::MessageRefused(RefuseReason::InvalidSet));
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

    pub(super) fn on_vote(
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
                self.event(DonEvent::EquivocationSeen(EquivocationKind::Vote));
                return self.refuse_from(sender, "vote", RefuseReason::EquivocatingVoter);
            }
            None => {}
        }
        let digest = self.vote_digest(kind, round, value.as_ref());
        if self.keys.recover(&digest, &signature).ok() != Some(sender) {
            return self.refuse_from(sender, "vote", RefuseReason::BadVoteSignature);
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
    pub(super) fn join_ahead(&mut self) {
        let mut by_round: BTreeMap<u32, usize> = BTreeMap::new();
        for (r, ..) in self.ahead.values() {
            *by_round.entry(*r).or_default() += 1;
        }
        let Some(round) = by_round
            .iter()
            .rev()
            .find(|(_, c)| **c > self.p.f)
            .map(|(r, _)| *r)
        else {
            return;
        };
        let joined: Vec<(Address, HeldVote)> = self
            .ahead
            .iter()
            .filter(|(_, (r, ..))| *r == round)
            .map(|(a, v)| (*a, v.clone()))
            .collect();
        tracing::info!(execution_id = %self.exec(), from = self.round, to = round, "f+1 members vote in a round far ahead: joining it");
        for (voter, (r, kind, value, signature)) in joined {
            self.ahead.remove(&voter);
            if self.votes_seen.contains_key(&(voter, r, kind)) {
                // its vote of that round came within the window meanwhile (this one is
                // the same, or an equivocation): the one taken stays
                continue;
            }
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

    pub(super) fn on_decided(
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
                return self.refuse_from(sender, "decided", RefuseReason::ConflictingDecision);
            }
            Some(_) => {}
            None => {
                if !self.certified(round, &value.id, &commits) {
                    return self.refuse_from(sender, "decided", RefuseReason::BadCommitCertificate);
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
    pub(super) fn certified(&self, round: u32, id: &B256, commits: &[CommitVote]) -> bool {
        self.certified_votes(VoteKind::Precommit, round, id, commits)
            .is_some()
    }

    /// The distinct members' valid votes of `kind` for `id` in `round` among `votes`, by
    /// voter, when they make a quorum.
    pub(super) fn certified_votes(
        &self,
        kind: VoteKind,
        round: u32,
        id: &B256,
        votes: &[CommitVote],
    ) -> Option<BTreeMap<Address, Bytes>> {
        let digest = self.vote_digest(kind, round, Some(id));
        let mut voters = BTreeMap::new();
        #[cfg(feature = "mutations")]
        let mut counted = 0;
        for c in votes {
            if self.p.members.contains(&c.voter)
                && self.keys.recover(&digest, &c.signature).ok() == Some(c.voter)
            {
                voters.entry(c.voter).or_insert_with(|| c.signature.clone());
                #[cfg(feature = "mutations")]
                {
                    counted += 1;
                }
            }
        }
        #[cfg(feature = "mutations")]
        if self.p.mutated(Mutation::DuplicateSigners) {
            return (counted >= self.p.quorum()).then_some(voters);
        }
        (voters.len() >= self.p.quorum()).then_some(voters)
    }
}
