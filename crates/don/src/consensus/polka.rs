//! Polka certificates (CometBFT's and Malachite's relay of a polka): 2f+1 prevotes of
//! distinct members for one set in one round, sent in a `Polka` message.
//!
//! - **Why.** A member that holds an equivocating member's other prevote of a round cannot
//!   count a polka that counted the first: without a relay it refuses the re-proposal of
//!   that set (a proposal with `pol_round` = that round), and a member locked on the set
//!   refuses every other; progress is then up to the Byzantine members.
//! - **Sent.** With a proposal that carries a set from a polka round (before it), and at
//!   every rebroadcast for the driver's valid and locked values and the current round's
//!   own proposal, when the driver holds the polka of that (round, set): its own (counted
//!   by its vote keeper) or one it took.
//! - **Taken.** Checked (each prevote a distinct member's, signed by it, over the round and
//!   set; at least 2f+1), then logged as ordinary `Vote` entries: the prevotes of voters
//!   not yet seen in that round first (the vote keeper counts them as any vote), then those
//!   of voters whose other prevote of the round is held. Such a conflicting entry (only a
//!   polka message logs one) is kept aside ([`RELAYED_POLKAS`] polkas at most, one
//!   signature per voter each) and, once the vote keeper's prevotes for the set and those
//!   kept aside make 2f+1, the driver takes the polka as a `PolkaCertificate` (its vote
//!   keeper would drop the conflicting vote). The log's format does not change, and the
//!   replay of the same entries rebuilds the same certificate.
//! - **Used.** [`Core::has_polka`] is the vote keeper's polka or a certificate the driver
//!   holds for exactly that (round, set): the core's own rule check on the driver's votes
//!   (`may_vote_for`) accepts a certificate as the prevotes themselves.

use super::*;
use malachitebft_core_types::{PolkaCertificate, PolkaSignature};

/// Polkas whose prevotes taken from `Polka` messages and conflicting with a prevote held
/// are kept aside until they make a certificate (the newest rounds kept): at most this
/// many signatures of one peer.
pub const RELAYED_POLKAS: usize = 4;

impl Core {
    /// Whether 2f+1 prevotes for `id` in `round` are known here: counted by the vote
    /// keeper, or in a certificate the driver holds for exactly that set (Malachite 0.5's
    /// driver matches its certificates by round only: the set is checked here).
    pub(super) fn has_polka(&self, round: u32, id: &B256) -> bool {
        let r = Round::new(round);
        self.driver
            .votes()
            .is_threshold_met(&r, VoteType::Prevote, Threshold::Value(SetId(*id)))
            || self
                .driver
                .polka_certificates()
                .iter()
                .any(|c| c.round == r && c.value_id.0 == *id)
    }

    /// The `Polka` message of (round, id), when the driver holds a certificate of it.
    pub(super) fn polka_envelope(&self, round: u32, id: &B256) -> Option<Envelope> {
        let r = Round::new(round);
        let cert = self
            .driver
            .polka_certificates()
            .iter()
            .find(|c| c.round == r && c.value_id.0 == *id)?;
        let mut prevotes: Vec<CommitVote> = Vec::with_capacity(cert.polka_signatures.len());
        for s in &cert.polka_signatures {
            if prevotes.iter().all(|p| p.voter != s.address.0) {
                prevotes.push(CommitVote {
                    voter: s.address.0,
                    signature: Bytes::from(s.signature.0.clone()),
                });
            }
        }
        Some(self.envelope(Body::Polka {
            round,
            value: *id,
            prevotes,
        }))
    }

    /// Sends the polkas other members may need: of the driver's valid and locked values,
    /// and of the set this member proposes in the current round.
    pub(super) fn send_polkas(&mut self) {
        let mut wanted: BTreeSet<(u32, B256)> = BTreeSet::new();
        let rs = self.driver.round_state();
        for rv in [&rs.valid, &rs.locked].into_iter().flatten() {
            if let Some(r) = rv.round.as_u32() {
                wanted.insert((r, rv.value.id));
            }
        }
        if self.own_proposals.contains_key(&self.round)
            && let Some((id, _, Some(vr))) = self.proposals_seen.get(&self.round)
        {
            wanted.insert((*vr, *id));
        }
        for (r, id) in wanted {
            if let Some(env) = self.polka_envelope(r, &id) {
                self.send(env);
            }
        }
    }

    /// A member's `Polka` message: checked, then its prevotes logged (see the module).
    pub(super) fn on_polka(
        &mut self,
        sender: Address,
        round: u32,
        value: B256,
        prevotes: Vec<CommitVote>,
    ) {
        if self.decided.is_some() {
            return;
        }
        if round > self.round.saturating_add(ROUND_WINDOW) {
            return self.refuse_from(sender, "polka", RefuseReason::RoundTooFarAhead);
        }
        if self.has_polka(round, &value) {
            // known here: nothing to check or take
            return;
        }
        let Some(voters) = self.certified_votes(VoteKind::Prevote, round, &value, &prevotes) else {
            return self.refuse_from(sender, "polka", RefuseReason::BadPolkaCertificate);
        };
        let mut conflicting = Vec::new();
        for (voter, signature) in voters {
            let entry = LogEntry::Vote {
                round,
                kind: VoteKind::Prevote,
                value: Some(value),
                voter,
                signature,
            };
            match self.votes_seen.get(&(voter, round, VoteKind::Prevote)) {
                Some(Some(v)) if *v == value => {}
                None => self.take(entry),
                Some(_) => conflicting.push(entry),
            }
        }
        for entry in conflicting {
            self.take(entry);
        }
        if self.has_polka(round, &value) {
            self.event(DonEvent::PolkaTaken);
            tracing::info!(execution_id = %self.exec(), %sender, round, set = %value, "a polka another member relayed: taken");
        }
    }

    /// A logged prevote for `id` of a voter whose other prevote of the round is held (only
    /// a polka message logs one): kept aside, and the polka certificate the driver takes
    /// once the vote keeper's prevotes for `id` and those kept aside make a quorum.
    pub(super) fn relayed_prevote(
        &mut self,
        round: u32,
        kind: VoteKind,
        value: Option<B256>,
        voter: Address,
        signature: Bytes,
    ) -> Option<DriverInput<DonContext>> {
        let (VoteKind::Prevote, Some(id)) = (kind, value) else {
            return None;
        };
        if self.has_polka(round, &id) {
            return None;
        }
        self.relayed
            .entry((round, id))
            .or_default()
            .entry(voter)
            .or_insert(signature);
        while self.relayed.len() > RELAYED_POLKAS {
            self.relayed.pop_first();
        }
        let r = Round::new(round);
        let mut sigs: BTreeMap<Address, Vec<u8>> = BTreeMap::new();
        let counted = NilOrVal::Val(SetId(id));
        if let Some(pr) = self.driver.votes().per_round(r) {
            for v in pr.received_votes() {
                if v.message.kind == VoteType::Prevote && v.message.value == counted {
                    sigs.insert(v.message.voter.0, v.signature.0.clone());
                }
            }
        }
        for (a, s) in self.relayed.get(&(round, id)).into_iter().flatten() {
            sigs.entry(*a).or_insert_with(|| s.to_vec());
        }
        if sigs.len() < self.p.quorum() {
            return None;
        }
        // the driver keeps the certificate from now on
        self.relayed.remove(&(round, id));
        Some(DriverInput::PolkaCertificate(PolkaCertificate {
            height: crate::context::Height::ONE,
            round: r,
            value_id: SetId(id),
            polka_signatures: sigs
                .into_iter()
                .map(|(a, s)| PolkaSignature::new(MemberId(a), Sig(s)))
                .collect(),
        }))
    }

    /// The signatures kept aside of one peer (see [`RELAYED_POLKAS`]).
    pub(super) fn relayed_of(&self, peer: Address) -> usize {
        self.relayed
            .values()
            .filter(|m| m.contains_key(&peer))
            .count()
    }
}
