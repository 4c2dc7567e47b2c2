//! The executions a member decided lately, for the operator (`GET /status/don`): an
//! execution leaves the live status the moment it is agreed, and is kept here with its
//! decided set, its commit certificate, its report signers, the rounds and leader
//! changes it took and, once the node knows it, the member that transmitted its report.
//! Bounded: the newest [`DECIDED_SHOWN`] are kept.

use crate::agreed::Agreed;
use alloy::primitives::{Address, B256};
use cresolver_core::MarketId;
use lru::LruCache;
use serde::Serialize;
use std::num::NonZeroUsize;

/// Decided executions kept for the operator (the oldest is dropped past it).
pub const DECIDED_SHOWN: usize = 32;
/// [`DECIDED_SHOWN`], as the map's bound.
const SHOWN: NonZeroUsize = NonZeroUsize::new(DECIDED_SHOWN).unwrap();

/// One decided execution, as the operator sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct DecidedExecution {
    /// The execution (the forwarder's `workflowExecutionId`).
    #[schema(value_type = String, pattern = "^0x[0-9a-f]{64}$")]
    pub execution_id: B256,
    /// The market contract.
    #[schema(value_type = String, pattern = "^0x[0-9a-fA-F]{40}$")]
    pub market: Address,
    /// The market id (hex quantity, as the store shows it).
    #[schema(value_type = String, pattern = "^0x[0-9a-f]+$")]
    pub market_id: MarketId,
    /// The consensus round (epoch) whose precommits decided the set.
    pub round: u32,
    /// The leader of that round, which proposed the set.
    #[schema(value_type = String, pattern = "^0x[0-9a-fA-F]{40}$")]
    pub leader: Address,
    /// Leader changes before the decision; `null` for an agreement read back from the
    /// state file (decided before the node's last start).
    #[schema(required = true)]
    pub leader_changes: Option<u32>,
    /// The observers whose observations make the decided set.
    #[schema(value_type = Vec<String>)]
    pub set: Vec<Address>,
    /// The commit certificate: the members whose precommits decided the set.
    #[schema(value_type = Vec<String>)]
    pub precommits: Vec<Address>,
    /// The f+1 members whose report signatures make the agreement.
    #[schema(value_type = Vec<String>)]
    pub signers: Vec<Address>,
    /// The forwarder digest of the agreed report.
    #[schema(value_type = String, pattern = "^0x[0-9a-f]{64}$")]
    pub digest: B256,
    /// The member whose transmission delivered (or is delivering) the report, once the
    /// node knows it.
    #[schema(required = true, value_type = Option<String>)]
    pub transmitter: Option<Address>,
    /// When this member reached the agreement (or, for one read back from the state
    /// file, first read it), in unix seconds.
    pub decided_at: u64,
}

impl DecidedExecution {
    /// The operator's view of `a`, with the leader changes when they are known.
    pub fn of(a: &Agreed, leader_changes: Option<u32>) -> Self {
        let first = a.observations.first().map(|o| &o.observation);
        Self {
            execution_id: a.execution_id,
            market: first.map(|o| o.market).unwrap_or_default(),
            market_id: first.map(|o| o.market_id).unwrap_or_default(),
            round: a.attempt,
            leader: a.leader,
            leader_changes,
            set: a.observers(),
            precommits: a.commits.iter().map(|c| c.voter).collect(),
            signers: a.signers.clone(),
            digest: a.digest,
            transmitter: None,
            decided_at: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        }
    }
}

/// The newest decided executions, at most [`DECIDED_SHOWN`], by execution. The first
/// recorded goes first: entries are read with `peek` and replaced in place, so that a
/// decision read again does not make it newer.
#[derive(Debug)]
pub struct DecidedLog(LruCache<B256, DecidedExecution>);

impl Default for DecidedLog {
    fn default() -> Self {
        Self(LruCache::new(SHOWN))
    }
}

impl DecidedLog {
    /// Keeps `d`; an execution already kept is replaced in place (its transmitter and
    /// known leader changes stay), and the oldest goes past the bound.
    pub fn record(&mut self, mut d: DecidedExecution) {
        if let Some(old) = self.0.peek_mut(&d.execution_id) {
            d.transmitter = d.transmitter.or(old.transmitter);
            d.leader_changes = d.leader_changes.or(old.leader_changes);
            d.decided_at = old.decided_at;
            *old = d;
            return;
        }
        self.0.push(d.execution_id, d);
    }

    /// Names the member that transmitted an execution's report; `false` when the
    /// execution is not kept.
    pub fn transmitted(&mut self, exec: &B256, by: Address) -> bool {
        match self.0.peek_mut(exec) {
            Some(d) => {
                d.transmitter = Some(by);
                true
            }
            None => false,
        }
    }

    /// The kept executions, newest first.
    pub fn newest_first(&self) -> Vec<DecidedExecution> {
        // from the most recently pushed: nothing is ever made newer
        self.0.iter().map(|(_, d)| d.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decided(i: u8) -> DecidedExecution {
        DecidedExecution {
            execution_id: B256::repeat_byte(i),
            market: Address::repeat_byte(1),
            market_id: MarketId::from(i as u64),
            round: 0,
            leader: Address::repeat_byte(2),
            leader_changes: Some(u32::from(i)),
            set: vec![Address::repeat_byte(3)],
            precommits: vec![Address::repeat_byte(3)],
            signers: vec![Address::repeat_byte(3)],
            digest: B256::ZERO,
            transmitter: None,
            decided_at: u64::from(i),
        }
    }

    #[test]
    fn keeps_the_newest_within_the_bound() {
        let mut log = DecidedLog::default();
        for i in 0..(DECIDED_SHOWN as u8 + 5) {
            log.record(decided(i));
        }
        let kept = log.newest_first();
        assert_eq!(kept.len(), DECIDED_SHOWN);
        assert_eq!(
            kept[0].execution_id,
            B256::repeat_byte(DECIDED_SHOWN as u8 + 4)
        );
        assert_eq!(kept[DECIDED_SHOWN - 1].execution_id, B256::repeat_byte(5));
    }

    #[test]
    fn a_decision_seen_again_is_replaced_in_place_and_keeps_its_transmitter() {
        let mut log = DecidedLog::default();
        log.record(decided(1));
        log.record(decided(2));
        assert!(log.transmitted(&B256::repeat_byte(1), Address::repeat_byte(9)));
        assert!(!log.transmitted(&B256::repeat_byte(7), Address::repeat_byte(9)));
        // read back from the state file: no leader changes known, no transmitter yet
        let mut again = decided(1);
        again.leader_changes = None;
        again.decided_at = 99;
        log.record(again);
        let kept = log.newest_first();
        assert_eq!(kept.len(), 2);
        assert_eq!(kept[1].execution_id, B256::repeat_byte(1), "kept its place");
        assert_eq!(kept[1].transmitter, Some(Address::repeat_byte(9)));
        assert_eq!(kept[1].leader_changes, Some(1));
        assert_eq!(kept[1].decided_at, 1);
    }
}
