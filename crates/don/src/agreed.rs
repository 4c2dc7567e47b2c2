//! An agreed report: the raw report, the context and the f+1 signatures the forwarder
//! needs, and what the operator sees of how it was reached (the set, the leader).

use crate::wire::SignedObservation;
use alloy::primitives::{Address, B256, Bytes};
use serde::{Deserialize, Serialize};

/// An agreed report: what the forwarder needs, and what the operator sees.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Agreed {
    pub execution_id: B256,
    pub report: Bytes,
    pub context: Bytes,
    pub digest: B256,
    /// Exactly f+1: this member's own first when it signed, then by address;
    /// `signatures[i]` is `signers[i]`'s.
    pub signers: Vec<Address>,
    pub signatures: Vec<Bytes>,
    /// The observations the report was built from (their observers, sorted).
    pub observations: Vec<SignedObservation>,
    /// The attempt whose leader fixed the set, and that leader.
    pub attempt: u32,
    pub leader: Address,
    /// This member rebuilt the same bytes from the set itself.
    pub recomputed: bool,
}

impl Agreed {
    pub fn observers(&self) -> Vec<Address> {
        self.observations
            .iter()
            .map(|o| o.observation.observer)
            .collect()
    }
}
