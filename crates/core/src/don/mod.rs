//! The DON's pure data: a member's observation of a round (what each registered worker
//! answered, as this member saw it), its canonical bytes and digests, the aggregate of a
//! fixed set of observations (`aggregate`), and the forwarder's signing digest. Nothing
//! here signs, sends or stores: the `cresolver-don` crate does, and every member recomputes
//! a report from a proposed set with these functions alone.

pub mod aggregate;
pub mod report;

use crate::{MarketId, RoundKey};
use alloy_primitives::{Address, B256, U256, keccak256};
use alloy_sol_types::{SolValue, sol};
use serde::{Deserialize, Serialize};

pub use aggregate::{Aggregate, AggregateError, AggregatedWorker, Binding, aggregate};
pub use report::{ReportRefused, ReportSpec, build_report};

/// Domain tag of an observation digest (so that no other signed message can pass as one).
pub const OBSERVATION_DOMAIN: &[u8] = b"cresolver-don-observation-v1";

pub use crate::Position;

/// One registered worker, as one member observed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerObservation {
    /// The worker's address.
    pub address: Address,
    /// `Some` when the worker gave this member a valid answer.
    pub answer: Option<ObservedAnswer>,
    /// The failure kind (`timeout`, `schema`, …) when it did not; at most 32 ASCII bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
}

/// A valid answer, reduced to what the report depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObservedAnswer {
    /// The side the worker took.
    pub position: Position,
    /// Confidence in parts per million (0..=1_000_000).
    pub confidence_ppm: u32,
    /// `(resQuality, srcQuality, analysisDepth)`, each 0..=100.
    pub scores: [u8; 3],
}

/// A member's observation of one round (one execution).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Observation {
    /// The DON the observation was made for.
    pub don_id: u32,
    /// The version of the DON's configuration it was made under.
    pub config_version: u32,
    /// The round's execution id (see [`execution_id`]).
    pub execution_id: B256,
    /// The market contract of the round.
    pub market: Address,
    /// The market's id on that contract.
    pub market_id: MarketId,
    /// The member that made (and signs) the observation.
    pub observer: Address,
    /// The member's clock when it made the observation (unix seconds).
    pub timestamp: u32,
    /// Every registered worker, in registration order.
    pub workers: Vec<WorkerObservation>,
}

sol! {
    struct ObservedWorkerAbi { address worker; bool answered; uint8 position; uint32 confidencePpm; uint8[3] scores; string failure; }
    struct ObservationAbi { uint32 donId; uint32 configVersion; bytes32 executionId; address market; uint256 marketId; address observer; uint32 timestamp; ObservedWorkerAbi[] workers; }
}

impl Observation {
    /// The canonical bytes: the ABI encoding of the observation (independent of the JSON
    /// it travelled in).
    pub fn canonical_bytes(&self) -> Vec<u8> {
        let workers = self
            .workers
            .iter()
            .map(|w| {
                let (answered, position, confidence, scores) = match &w.answer {
                    Some(a) => (
                        true,
                        match a.position {
                            Position::Yes => 1u8,
                            Position::No => 2,
                            Position::Abstain => 3,
                        },
                        a.confidence_ppm,
                        a.scores,
                    ),
                    None => (false, 0, 0, [0; 3]),
                };
                ObservedWorkerAbi {
                    worker: w.address,
                    answered,
                    position,
                    confidencePpm: confidence,
                    scores,
                    failure: w.failure.clone().unwrap_or_default(),
                }
            })
            .collect();
        ObservationAbi {
            donId: self.don_id,
            configVersion: self.config_version,
            executionId: self.execution_id,
            market: self.market,
            marketId: self.market_id.get(),
            observer: self.observer,
            timestamp: self.timestamp,
            workers,
        }
        .abi_encode()
    }

    /// The digest the observer signs: `keccak256(OBSERVATION_DOMAIN ‖ canonical bytes)`.
    pub fn digest(&self) -> B256 {
        let mut buf = OBSERVATION_DOMAIN.to_vec();
        buf.extend_from_slice(&self.canonical_bytes());
        keccak256(buf)
    }

    /// Whether its values are in range (scores ≤ 100, confidence ≤ 1e6, failure text
    /// short ASCII, an answer and a failure not both set).
    pub fn check_ranges(&self) -> Result<(), String> {
        for w in &self.workers {
            if let Some(a) = &w.answer {
                if a.confidence_ppm > 1_000_000 {
                    return Err(format!("worker {}: confidence above 1", w.address));
                }
                if a.scores.iter().any(|s| *s > 100) {
                    return Err(format!("worker {}: a score above 100", w.address));
                }
                if w.failure.is_some() {
                    return Err(format!(
                        "worker {}: both an answer and a failure",
                        w.address
                    ));
                }
            }
            if let Some(f) = &w.failure
                && (f.len() > 32 || !f.bytes().all(|b| b.is_ascii_graphic()))
            {
                return Err(format!(
                    "worker {}: failure kind is not a short ASCII word",
                    w.address
                ));
            }
        }
        Ok(())
    }
}

/// The round's execution id, the same on every member: `keccak256(chainId ‖ market ‖
/// marketId ‖ request tx hash)` (each as a 32-byte word).
pub fn execution_id(chain_id: u64, round: RoundKey, request_tx: B256) -> B256 {
    keccak256(
        (
            U256::from(chain_id),
            round.market,
            round.id.get(),
            request_tx,
        )
            .abi_encode(),
    )
}

/// The digest the forwarder recovers each signer from:
/// `keccak256(keccak256(rawReport) ‖ reportContext)`.
pub fn forwarder_digest(raw_report: &[u8], report_context: &[u8]) -> B256 {
    let mut buf = keccak256(raw_report).to_vec();
    buf.extend_from_slice(report_context);
    keccak256(buf)
}

/// The 96-byte `reportContext` cresolver's DON signs: `configDigest ‖ attempt word ‖ zero
/// word`, as Chainlink's OCR3 transmitter lays it out. The config digest is
/// `keccak256("cresolver-don-config-v1" ‖ donId ‖ configVersion ‖ f ‖ members)`; the
/// second word is 0 — the report does not depend on the attempt that agreed on it, so
/// signatures gathered in different attempts over the same report are interchangeable.
pub fn report_context(don_id: u32, config_version: u32, f: u8, members: &[Address]) -> [u8; 96] {
    let mut buf = b"cresolver-don-config-v1".to_vec();
    buf.extend_from_slice(&(don_id, config_version, u32::from(f), members.to_vec()).abi_encode());
    let mut out = [0u8; 96];
    out[..32].copy_from_slice(keccak256(buf).as_slice());
    out
}
