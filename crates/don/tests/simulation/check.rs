//! The invariants, checked as the run goes (a violation ends it with a description):
//!
//! - safety: no two honest members decide different sets; every report signature an
//!   honest member makes (its `Lock`, the `report_signature` of a `Decided` it sends) is
//!   over the report of the one decided set, and none is made before an honest member
//!   decided; no two reports each gather f+1 valid member signatures on the network; the
//!   values of an honest agreement lie between the values honest members observed;
//! - validity: an honest decision (r, s) follows a proposal of s for r signed by r's
//!   leader that went over the network, and is certified by a quorum of precommits; an
//!   honest agreement carries a quorum of distinct valid precommits for its (r, s);
//! - bounds: what an honest core holds for each peer ([`Core::held_for`]);
//! - an honest member relays only polkas of a quorum of distinct valid prevotes (whose
//!   prevotes count as sent, for the lock rule).

use crate::scenario::Scenario;
use alloy::primitives::{Address, B256, Bytes, keccak256};
use cresolver_core::don::aggregate::position_rank;
use cresolver_core::don::{Binding, Observation, aggregate, build_report};
use cresolver_don::Agreed;
use cresolver_don::consensus::{Core, RELAYED_POLKAS, ROUND_WINDOW};
use cresolver_don::persist::MAX_LOG_ENTRIES;
use cresolver_don::wire::{self, Body, Envelope, SignedObservation, VoteKind};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

/// What ended a run: the invariant broken, described.
#[derive(Debug, Clone)]
pub struct Violation(pub String);

/// The lowest and highest value honest members observed, per field.
#[derive(Debug, Clone, Copy)]
struct Range {
    lo: u64,
    hi: u64,
}

impl Range {
    fn empty() -> Self {
        Self {
            lo: u64::MAX,
            hi: 0,
        }
    }
    fn add(&mut self, v: u64) {
        self.lo = self.lo.min(v);
        self.hi = self.hi.max(v);
    }
    fn holds(&self, v: u64) -> bool {
        self.lo <= v && v <= self.hi
    }
}

/// The checker of one run.
pub struct Checker {
    sc: Arc<ScenarioView>,
    /// Proposals sent over the network, signed by their round's leader: (round, set id).
    proposals: HashSet<(u32, B256)>,
    /// Every set seen on the network or decided, by id.
    sets: HashMap<B256, Arc<Vec<SignedObservation>>>,
    /// The report digest of each set (`None`: it makes no report).
    digests: HashMap<B256, Option<B256>>,
    /// The first honest decision: set id, report digest, member, round.
    pub decision: Option<(B256, B256, usize, u32)>,
    /// Each member's decision: round, set, global time.
    pub decided: Vec<Option<(u32, B256, u64)>>,
    /// Valid report signatures seen on the network, by report digest.
    report_sigs: HashMap<B256, BTreeSet<Address>>,
    /// Prevoters of each (round, set) on the network (valid signatures).
    prevotes: HashMap<(u32, B256), BTreeSet<Address>>,
    /// Each honest member's votes sent, by (member, round, kind).
    votes: HashMap<(usize, u32, VoteKind), Option<B256>>,
    /// Each honest member's lock as its precommits show it: round and set.
    locks: Vec<Option<(u32, B256)>>,
    /// Each observation's digest, by its signature (checked equal on a hit).
    obs_digests: HashMap<Bytes, (Observation, B256)>,
    /// The honest values per field: timestamp, then per worker position rank,
    /// confidence, 3 scores.
    ts: Range,
    fields: Vec<[Range; 5]>,
}

/// What the checker needs of the scenario.
pub struct ScenarioView {
    n: usize,
    f: usize,
    members: Vec<Address>,
    honest: Vec<bool>,
    scheme: Arc<crate::keys::Scheme>,
    binding: Binding,
    workers: Vec<Address>,
    spec: Arc<cresolver_core::don::ReportSpec>,
    params: Arc<cresolver_don::consensus::Params>,
}

impl Checker {
    /// The checker of a scenario.
    pub fn new(sc: &Scenario) -> Self {
        let mut ts = Range::empty();
        let mut fields = vec![[Range::empty(); 5]; sc.workers.len()];
        for (i, o) in sc.observations.iter().enumerate() {
            if !sc.honest(i) {
                continue;
            }
            ts.add(u64::from(o.observation.timestamp));
            for (w, wo) in o.observation.workers.iter().enumerate() {
                if let Some(a) = &wo.answer {
                    let r = &mut fields[w];
                    r[0].add(u64::from(position_rank(a.position)));
                    r[1].add(u64::from(a.confidence_ppm));
                    for k in 0..3 {
                        r[2 + k].add(u64::from(a.scores[k]));
                    }
                }
            }
        }
        let view = ScenarioView {
            n: sc.n,
            f: sc.f,
            members: sc.scheme.members.clone(),
            honest: (0..sc.n).map(|i| sc.honest(i)).collect(),
            scheme: sc.scheme.clone(),
            binding: Binding {
                don_id: crate::scenario::DON_ID,
                config_version: crate::scenario::VERSION,
                execution_id: sc.exec,
                market: sc.market,
                market_id: sc.market_id,
            },
            workers: sc.workers.clone(),
            spec: sc.spec.clone(),
            params: sc.params.clone(),
        };
        Self {
            sc: Arc::new(view),
            proposals: HashSet::new(),
            sets: HashMap::new(),
            digests: HashMap::new(),
            decision: None,
            decided: vec![None; sc.n],
            report_sigs: HashMap::new(),
            obs_digests: HashMap::new(),
            prevotes: HashMap::new(),
            votes: HashMap::new(),
            locks: vec![None; sc.n],
            ts,
            fields,
        }
    }

    /// The votes that decide, as the protocol defines them (never mutated).
    pub fn quorum(&self) -> usize {
        self.sc.n * 2 / 3 + 1
    }

    fn err(&self, what: String) -> Result<(), Violation> {
        Err(Violation(what))
    }

    /// The report digest of a set (built as every member builds it), cached.
    fn digest_of(&mut self, id: B256, set: &[SignedObservation]) -> Option<B256> {
        if let Some(d) = self.digests.get(&id) {
            return *d;
        }
        let obs: Vec<Observation> = set.iter().map(|o| o.observation.clone()).collect();
        let d = aggregate(&obs, &self.sc.binding, &self.sc.workers, self.sc.f)
            .ok()
            .and_then(|agg| build_report(&self.sc.spec, &agg).ok())
            .map(|report| self.sc.params.digest(&report));
        self.digests.insert(id, d);
        d
    }

    /// [`set_id`] of a set, with each observation's digest computed once per run.
    pub fn set_id(&mut self, set: &[SignedObservation]) -> B256 {
        let mut sorted: Vec<&SignedObservation> = set.iter().collect();
        sorted.sort_by_key(|o| o.observation.observer);
        let mut buf = Vec::with_capacity(32 * sorted.len());
        for o in sorted {
            let d = match self.obs_digests.get(&o.signature) {
                Some((obs, d)) if *obs == o.observation => *d,
                _ => {
                    let d = o.observation.digest();
                    self.obs_digests
                        .insert(o.signature.clone(), (o.observation.clone(), d));
                    d
                }
            };
            buf.extend_from_slice(d.as_slice());
        }
        keccak256(buf)
    }

    fn remember_set(&mut self, set: &[SignedObservation]) -> B256 {
        let id = self.set_id(set);
        self.sets
            .entry(id)
            .or_insert_with(|| Arc::new(set.to_vec()));
        id
    }

    /// A message member `from` puts on the network: proposals and report signatures are
    /// recorded; an honest member's report signature is checked.
    pub fn on_send(&mut self, from: usize, env: &Envelope) -> Result<(), Violation> {
        match &env.body {
            Body::Proposal {
                round,
                pol_round,
                observations,
                signature,
            } => {
                let id = self.remember_set(observations);
                let p = &self.sc.params;
                let digest = wire::proposal_digest(
                    p.don_id,
                    p.config_version,
                    &env.execution_id,
                    *round,
                    *pol_round,
                    &id,
                );
                let leader = p.leader(&env.execution_id, *round);
                if self.sc.scheme.recover(&digest, signature).ok() == Some(leader) {
                    self.proposals.insert((*round, id));
                }
                Ok(())
            }
            Body::Decided {
                observations,
                report_signature: Some(sig),
                ..
            } => {
                let id = self.remember_set(observations);
                let digest = self.digest_of(id, observations);
                if self.sc.honest[from] {
                    self.honest_signature(from, sig, "a Decided message")?;
                }
                if let Some(d) = digest
                    && self.sc.scheme.recover(&d, sig).ok() == Some(self.sc.members[from])
                {
                    let signers = self.report_sigs.entry(d).or_default();
                    signers.insert(self.sc.members[from]);
                    if signers.len() > self.sc.f {
                        let heavy: Vec<&B256> = self
                            .report_sigs
                            .iter()
                            .filter(|(_, s)| s.len() > self.sc.f)
                            .map(|(d, _)| d)
                            .collect();
                        if heavy.len() > 1 {
                            return self.err(format!(
                                "two reports each hold f+1 valid member signatures: {heavy:?}"
                            ));
                        }
                    }
                }
                Ok(())
            }
            Body::Decided { observations, .. } => {
                self.remember_set(observations);
                Ok(())
            }
            Body::Vote {
                round,
                kind,
                value,
                signature,
            } => self.on_vote(from, env, *round, *kind, *value, signature),
            Body::Observation { .. } => Ok(()),
            Body::Polka {
                round,
                value,
                prevotes,
            } => self.on_polka(from, env, *round, *value, prevotes),
        }
    }

    /// A polka on the network: its valid prevotes count as prevotes sent (a member may
    /// sign one only into a polka); an honest member relays only a quorum of distinct
    /// members' valid prevotes.
    fn on_polka(
        &mut self,
        from: usize,
        env: &Envelope,
        round: u32,
        value: B256,
        prevotes: &[wire::CommitVote],
    ) -> Result<(), Violation> {
        let p = &self.sc.params;
        let d = wire::vote_digest(
            p.don_id,
            p.config_version,
            &env.execution_id,
            VoteKind::Prevote,
            round,
            Some(&value),
        );
        let valid: BTreeSet<Address> = prevotes
            .iter()
            .filter(|v| self.sc.scheme.recover(&d, &v.signature).ok() == Some(v.voter))
            .map(|v| v.voter)
            .collect();
        if self.sc.honest[from] && (valid.len() < self.quorum() || valid.len() != prevotes.len()) {
            return self.err(format!(
                "honest member {from} relayed a polka of round {round} with {} distinct valid prevotes of {}",
                valid.len(),
                prevotes.len()
            ));
        }
        self.prevotes
            .entry((round, value))
            .or_default()
            .extend(valid);
        Ok(())
    }

    /// A vote on the network: prevotes counted; an honest member's checked against its
    /// earlier votes (never two in one round and kind) and its lock (Tendermint's rule: a
    /// member that precommitted s in round r prevotes another set s' in a later round r'
    /// only after 2f+1 prevotes for s' in a round in [r, r')).
    fn on_vote(
        &mut self,
        from: usize,
        env: &Envelope,
        round: u32,
        kind: VoteKind,
        value: Option<B256>,
        signature: &[u8],
    ) -> Result<(), Violation> {
        let p = &self.sc.params;
        let d = wire::vote_digest(
            p.don_id,
            p.config_version,
            &env.execution_id,
            kind,
            round,
            value.as_ref(),
        );
        let signer = self.sc.scheme.recover(&d, signature).ok();
        if kind == VoteKind::Prevote
            && let Some(v) = value
            && signer == Some(env.sender)
        {
            self.prevotes
                .entry((round, v))
                .or_default()
                .insert(env.sender);
        }
        if !self.sc.honest[from] {
            return Ok(());
        }
        match self.votes.get(&(from, round, kind)) {
            Some(earlier) if *earlier != value => {
                return self.err(format!(
                    "honest member {from} sent two {kind:?}s in round {round}: {earlier:?} and {value:?}"
                ));
            }
            Some(_) => return Ok(()),
            None => {}
        }
        self.votes.insert((from, round, kind), value);
        let Some(v) = value else { return Ok(()) };
        match (kind, self.locks[from]) {
            (VoteKind::Precommit, lock) if lock.is_none_or(|(r, _)| r <= round) => {
                self.locks[from] = Some((round, v));
            }
            (VoteKind::Prevote, Some((lr, lv))) if lv != v && round > lr => {
                let quorum = self.quorum();
                let polka = (lr..round).any(|vr| {
                    self.prevotes
                        .get(&(vr, v))
                        .is_some_and(|s| s.len() >= quorum)
                });
                if !polka {
                    return self.err(format!(
                        "honest member {from}, locked on {lv:.10} since round {lr}, prevoted {v:.10} in round {round} with no polka for it since"
                    ));
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// An honest member's report signature: over the one decided report, after a
    /// decision.
    pub fn honest_signature(&mut self, i: usize, sig: &[u8], what: &str) -> Result<(), Violation> {
        let Some((_, digest, _, _)) = self.decision else {
            return self.err(format!(
                "honest member {i} signed a report ({what}) before any honest decision"
            ));
        };
        if self.sc.scheme.recover(&digest, sig).ok() != Some(self.sc.members[i]) {
            return self.err(format!(
                "honest member {i} signed ({what}) another report than the decided one"
            ));
        }
        Ok(())
    }

    /// Honest member `i`'s core decided (round, set) at global time `now`; `voters` are
    /// the precommits it holds for it.
    pub fn on_decision(
        &mut self,
        i: usize,
        round: u32,
        id: B256,
        voters: &[Address],
        now: u64,
    ) -> Result<(), Violation> {
        if self.decided[i].is_some_and(|(r, s, _)| r == round && s == id) {
            return Ok(());
        }
        if let Some((_, first, _)) = self.decided[i]
            && first != id
        {
            return self.err(format!("honest member {i} decided two sets"));
        }
        self.decided[i] = Some((round, id, now));
        let distinct: BTreeSet<&Address> = voters.iter().collect();
        if distinct.len() < self.quorum() {
            return self.err(format!(
                "honest member {i} decided in round {round} with {} distinct precommits (quorum {})",
                distinct.len(),
                self.quorum()
            ));
        }
        if !self.proposals.contains(&(round, id)) {
            return self.err(format!(
                "honest member {i} decided set {id} in round {round}: no proposal of it by the round's leader went over the network"
            ));
        }
        let Some(set) = self.sets.get(&id).cloned() else {
            return self.err(format!("honest member {i} decided a set never sent"));
        };
        let Some(digest) = self.digest_of(id, &set) else {
            return self.err(format!(
                "honest member {i} decided a set that makes no report"
            ));
        };
        match self.decision {
            None => self.decision = Some((id, digest, i, round)),
            Some((first, _, j, r)) if first != id => {
                return self.err(format!(
                    "honest members {j} and {i} decided different sets ({first} in round {r}, {id} in round {round})"
                ));
            }
            Some(_) => {}
        }
        Ok(())
    }

    /// An honest member's agreement: certified, signed, and bounded by honest values.
    pub fn on_agreed(&mut self, i: usize, a: &Agreed) -> Result<(), Violation> {
        let id = self.set_id(&a.observations);
        let Some((decided, digest, ..)) = self.decision else {
            return self.err(format!("honest member {i} agreed before any decision"));
        };
        if id != decided || a.digest != digest {
            return self.err(format!("honest member {i} agreed on another set or report"));
        }
        let p = &self.sc.params;
        let vd = wire::vote_digest(
            p.don_id,
            p.config_version,
            &a.execution_id,
            VoteKind::Precommit,
            a.attempt,
            Some(&id),
        );
        let voters: BTreeSet<Address> = a
            .commits
            .iter()
            .filter(|c| self.sc.scheme.recover(&vd, &c.signature).ok() == Some(c.voter))
            .map(|c| c.voter)
            .collect();
        if voters.len() < self.quorum() {
            return self.err(format!(
                "honest member {i}'s agreement carries {} distinct valid precommits (quorum {})",
                voters.len(),
                self.quorum()
            ));
        }
        let signers: BTreeSet<Address> = a
            .signers
            .iter()
            .zip(&a.signatures)
            .filter(|(s, sig)| self.sc.scheme.recover(&digest, sig).ok() == Some(**s))
            .map(|(s, _)| *s)
            .collect();
        if signers.len() <= self.sc.f {
            return self.err(format!(
                "honest member {i}'s agreement holds {} valid report signatures",
                signers.len()
            ));
        }
        self.bounded(i, &a.observations)
    }

    /// The aggregate of an honest agreement lies between honest values, field by field.
    fn bounded(&self, i: usize, set: &[SignedObservation]) -> Result<(), Violation> {
        let obs: Vec<Observation> = set.iter().map(|o| o.observation.clone()).collect();
        let Ok(agg) = aggregate(&obs, &self.sc.binding, &self.sc.workers, self.sc.f) else {
            return self.err(format!(
                "honest member {i} agreed on a set that does not aggregate"
            ));
        };
        if !self.ts.holds(u64::from(agg.timestamp)) {
            return self.err(format!(
                "honest member {i}'s agreement: timestamp {} outside the honest {:?}",
                agg.timestamp, self.ts
            ));
        }
        for (w, aw) in agg.workers.iter().enumerate() {
            let Some(a) = &aw.answer else { continue };
            let values = [
                u64::from(position_rank(a.position)),
                u64::from(a.confidence_ppm),
                u64::from(a.scores[0]),
                u64::from(a.scores[1]),
                u64::from(a.scores[2]),
            ];
            for (k, v) in values.iter().enumerate() {
                if !self.fields[w][k].holds(*v) {
                    return self.err(format!(
                        "honest member {i}'s agreement: worker {w} field {k} = {v} outside the honest {:?}",
                        self.fields[w][k]
                    ));
                }
            }
        }
        Ok(())
    }

    /// What an honest core holds for each peer, against the documented bounds.
    pub fn bounds(&self, i: usize, core: &Core) -> Result<(), Violation> {
        let n = self.sc.n;
        for peer in &self.sc.members {
            let h = core.held_for(*peer);
            let seen_max = 2 * (core.round() as usize + ROUND_WINDOW as usize + 1);
            if h.observations > 1
                || h.ahead_votes > 1
                || h.early_signatures_total > 2 * n
                || h.votes_seen > seen_max
                || h.relayed_prevotes > RELAYED_POLKAS
                || h.log_entries > MAX_LOG_ENTRIES
            {
                return self.err(format!(
                    "honest member {i} holds for {peer} beyond the bounds: {h:?} (round {})",
                    core.round()
                ));
            }
        }
        Ok(())
    }
}
