//! The gas of a submission: the limit that covers the executing call's estimate (and, in
//! report mode, everything the KeystoneForwarder spends around the receiver's call), and
//! the receiver's estimates a DON's leader starts ahead, at its proposal and at the
//! decided set, while the consensus and the report signatures run.

use crate::{SubmitMode, Submitter};
use alloy::primitives::{Address, B256, Bytes, keccak256};
use alloy::providers::{DynProvider, Provider};
use std::collections::VecDeque;
use std::sync::Arc;
use tokio::task::JoinHandle;

/// Report mode: what the KeystoneForwarder spends around the receiver's call beyond the
/// transaction's intrinsic gas, its calldata and the signature checks: the transmission
/// record's storage writes, the ERC-165 probe of the receiver (up to 90,000 by the
/// forwarder's own comment), its `INTERNAL_GAS_REQUIREMENTS` (30,000) kept back from the
/// receiver, and the `ReportProcessed` event.
const FORWARDER_OVERHEAD: u64 = 150_000;
/// Report mode, per signature: `ecrecover` (3,000), the signer's cold position read
/// (2,100) and the duplicate check around them.
const FORWARDER_PER_SIGNATURE: u64 = 6_000;
/// A transaction's intrinsic gas.
const INTRINSIC: u64 = 21_000;
/// Calldata gas per byte, at most (a non-zero byte).
const CALLDATA_PER_BYTE: u64 = 16;
/// How many estimates started ahead are kept (the oldest is dropped).
const AHEAD_KEPT: usize = 16;

/// The receiver's estimates started ahead, keyed by the raw report's hash.
#[derive(Default)]
pub(crate) struct Ahead(parking_lot::Mutex<VecDeque<(B256, JoinHandle<Option<u64>>)>>);

impl Ahead {
    /// Holds the task `start` makes for `key`, unless one is held already (one lock: a
    /// report proposed and then decided is estimated once).
    fn start_once(&self, key: B256, start: impl FnOnce() -> JoinHandle<Option<u64>>) {
        let mut held = self.0.lock();
        if held.iter().any(|(k, _)| *k == key) {
            return;
        }
        if held.len() >= AHEAD_KEPT
            && let Some((_, old)) = held.pop_front()
        {
            old.abort();
        }
        held.push_back((key, start()));
    }

    fn take(&self, key: &B256) -> Option<JoinHandle<Option<u64>>> {
        let mut held = self.0.lock();
        let i = held.iter().position(|(k, _)| k == key)?;
        held.remove(i).map(|(_, t)| t)
    }
}

impl Drop for Ahead {
    fn drop(&mut self) {
        for (_, task) in self.0.get_mut().drain(..) {
            task.abort();
        }
    }
}

/// Starts the receiver's gas estimates of reports ahead: [`Submitter::prepare_signed`] of
/// the same report takes the result instead of estimating then, and runs the forwarder
/// alone.
#[derive(Clone)]
pub struct EstimatesAhead {
    provider: DynProvider,
    forwarder: Address,
    receiver: Address,
    held: Arc<Ahead>,
}

impl EstimatesAhead {
    /// Starts the estimate of the raw report `raw` (a DON's leader calls it at its
    /// proposal and at the decided set; a report already started is not started again).
    /// A failed estimate is only one not made ahead. Needs a tokio runtime (without one,
    /// nothing starts).
    pub fn start(&self, raw: &Bytes) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        self.held.start_once(keccak256(raw), || {
            let sim = crate::on_report(self.forwarder, self.receiver, raw);
            let provider = self.provider.clone();
            runtime.spawn(async move {
                let started = std::time::Instant::now();
                let gas = provider.estimate_gas(sim).await.ok();
                tracing::debug!(
                    ms = started.elapsed().as_secs_f64() * 1e3,
                    ok = gas.is_some(),
                    "the receiver's gas estimated ahead"
                );
                gas
            })
        });
    }
}

/// The gas limit's inputs beside the executing call's estimate.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Envelope {
    /// The transaction's calldata, in bytes.
    pub calldata: usize,
    /// The report signatures it carries (report mode).
    pub signatures: usize,
}

impl Submitter {
    /// `(estimate, limit)` from the executing call's gas `inner`.
    ///
    /// Report mode: the forwarder swallows a receiver that runs out of gas, so the limit
    /// must cover the receiver's call behind two calls under the 63/64 rule (`report` →
    /// `route` → `onReport`) and the forwarder's own work: the intrinsic and calldata
    /// gas, each signature's check, and [`FORWARDER_OVERHEAD`]. An upper bound, not an
    /// estimate of the forwarder: only the gas used is paid.
    pub(crate) fn gas(&self, inner: u64, e: Envelope) -> (u64, u64) {
        let estimate = match self.cfg.mode {
            SubmitMode::Direct => inner,
            SubmitMode::Report => {
                let behind_two_calls = inner.saturating_mul(64 * 64) / (63 * 63);
                behind_two_calls
                    .saturating_add(INTRINSIC)
                    .saturating_add(CALLDATA_PER_BYTE.saturating_mul(e.calldata as u64))
                    .saturating_add(FORWARDER_PER_SIGNATURE.saturating_mul(e.signatures as u64))
                    .saturating_add(FORWARDER_OVERHEAD)
            }
        };
        let gas_limit =
            estimate.saturating_add(estimate.saturating_mul(self.cfg.gas_margin_percent) / 100);
        (estimate, gas_limit)
    }

    /// Where a DON's transmitter starts the receiver's gas estimates of its reports
    /// ahead (report mode; `None` in direct mode).
    pub fn estimates_ahead(&self) -> Option<EstimatesAhead> {
        let (forwarder, receiver) = self.report_route()?;
        (self.cfg.mode == SubmitMode::Report).then(|| EstimatesAhead {
            provider: self.provider.clone(),
            forwarder,
            receiver,
            held: self.ahead.clone(),
        })
    }

    /// The receiver's estimate of `raw` started ahead, awaited (`None`: none started, or
    /// it failed).
    pub(crate) async fn estimated_ahead(&self, raw: &Bytes) -> Option<u64> {
        let task = self.ahead.take(&keccak256(raw))?;
        let started = std::time::Instant::now();
        let gas = task.await.ok().flatten();
        tracing::debug!(
            waited_ms = started.elapsed().as_secs_f64() * 1e3,
            ok = gas.is_some(),
            "the receiver's gas estimate made ahead taken"
        );
        gas
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_estimate_ahead_is_dropped_past_the_bound() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap_or_else(|e| panic!("runtime: {e}"));
        rt.block_on(async {
            let ahead = Ahead::default();
            for i in 0..=AHEAD_KEPT {
                let key = B256::with_last_byte(i as u8);
                ahead.start_once(key, || tokio::spawn(async move { Some(i as u64) }));
            }
            let mut again = false;
            ahead.start_once(B256::with_last_byte(2), || {
                again = true;
                tokio::spawn(async { None })
            });
            assert!(!again, "a report held is not started again");
            assert!(ahead.take(&B256::with_last_byte(0)).is_none());
            let last = ahead.take(&B256::with_last_byte(AHEAD_KEPT as u8));
            assert!(last.is_some());
            // taken once: a second take finds nothing
            assert!(
                ahead
                    .take(&B256::with_last_byte(AHEAD_KEPT as u8))
                    .is_none()
            );
            let one = ahead.take(&B256::with_last_byte(1));
            let got = match one {
                Some(t) => t.await.ok().flatten(),
                None => None,
            };
            assert_eq!(got, Some(1));
        });
    }
}
