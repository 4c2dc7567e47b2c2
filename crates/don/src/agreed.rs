//! An agreed report: the raw report, the context and the f+1 signatures the forwarder
//! needs, and what the operator sees of how it was reached (the decided set, the round
//! and leader that proposed it, and the 2f+1 precommits that decided it).

use crate::wire::{CommitVote, SignedObservation};
use alloy::primitives::{Address, B256, Bytes};
use serde::{Deserialize, Serialize};

/// An agreed report: what the forwarder needs, and what the operator sees.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Agreed {
    /// The execution.
    pub execution_id: B256,
    /// The raw report (header and body) every signer built from the decided set.
    pub report: Bytes,
    /// The report context the signatures cover.
    pub context: Bytes,
    /// The forwarder digest of report and context.
    pub digest: B256,
    /// Exactly f+1: this member's own first when it signed, then by address;
    /// `signatures[i]` is `signers[i]`'s.
    pub signers: Vec<Address>,
    /// The signers' report signatures (65 bytes, v = 0 or 1).
    pub signatures: Vec<Bytes>,
    /// The decided set of observations (sorted by observer).
    pub observations: Vec<SignedObservation>,
    /// The consensus round whose precommits decided the set (named `attempt` in
    /// transcripts written before the DON ran Tendermint).
    pub attempt: u32,
    /// The leader of that round.
    pub leader: Address,
    /// This member rebuilt the same bytes from the set itself (always, since a member
    /// only signs and only counts signatures over the report it builds).
    pub recomputed: bool,
    /// The 2f+1 precommits that decided the set (empty in agreements stored before).
    #[serde(default)]
    pub commits: Vec<CommitVote>,
}

impl Agreed {
    /// The observers of the decided set, sorted.
    pub fn observers(&self) -> Vec<Address> {
        self.observations
            .iter()
            .map(|o| o.observation.observer)
            .collect()
    }
}
