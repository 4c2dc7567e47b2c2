//! A DON's delivery through the KeystoneForwarder: the forwarder's record of a report
//! ([`TransmissionState`], read with `getTransmissionInfo`) and the transmission loop of
//! an agreed report. The forwarder's state is the truth: `SUCCEEDED` means a member
//! delivered it, `INVALID_RECEIVER` that no transmission can succeed, and `FAILED` (the
//! receiver reverted) is re-simulated, retried only while the receiver's error can
//! change. A member transmits only at its turn and only while nobody has succeeded.

use crate::{Prepared, SignedReport, SubmitError, Submitter};
use alloy::primitives::{Address, B256, Bytes, FixedBytes};
use cresolver_chain::RevertReason;
use cresolver_chain::bindings::{ICREsolverMarket, IKeystoneForwarder};
use cresolver_chain::reader::MarketSnapshot;
use cresolver_core::MarketId;
use cresolver_metrics::{DonEvent, Metrics, TransmissionEvent};
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// How many looks at the forwarder a transmission makes before it gives up for now.
const MAX_LOOKS: u32 = 2_000;
/// How many times a member waits for more signatures once the forwarder refused some.
const MAX_SIGNATURE_WAITS: u32 = 40;
/// The pause between two looks while this member's turn has not come.
const LOOK_PAUSE: Duration = Duration::from_millis(250);
/// The pause between two looks while another member's transmission is pending.
const PENDING_PAUSE: Duration = Duration::from_millis(500);

/// The forwarder's state of one report (`IRouter.TransmissionState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransmissionState {
    /// Nobody has transmitted the report yet.
    NotAttempted,
    /// A transmission delivered the report to the receiver.
    Succeeded,
    /// The receiver does not declare `IReceiver` through ERC-165: no transmission can
    /// succeed.
    InvalidReceiver,
    /// A transmission reached the receiver, which reverted; another may be tried.
    Failed,
}

impl TransmissionState {
    /// The state of the forwarder's enum value (`None`: a value this node does not know).
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0 => Self::NotAttempted,
            1 => Self::Succeeded,
            2 => Self::InvalidReceiver,
            3 => Self::Failed,
            _ => return None,
        })
    }
}

/// The forwarder's record of one report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmission {
    /// Where the report is.
    pub state: TransmissionState,
    /// The member whose transmission set that state (zero when none).
    pub transmitter: Address,
}

/// What a transmission of an agreed report came to.
#[derive(Debug)]
pub enum Transmitted {
    /// The forwarder delivered the report; the member that transmitted it.
    Delivered(Address),
    /// This member sends this call now (it is its turn and nobody succeeded).
    Send(Box<Prepared>),
    /// The market is resolved on chain by another report or resolver.
    ResolvedElsewhere,
}

/// Why an agreed report could not be transmitted.
#[derive(Debug, thiserror::Error)]
pub enum TransmitError {
    /// The submitter is not in report mode.
    #[error("report mode without submit.forwarder / submit.receiver")]
    NoRoute,
    /// The forwarder marked the receiver invalid.
    #[error(
        "the forwarder marked receiver {0} INVALID_RECEIVER (it does not declare IReceiver through ERC-165); no transmission can succeed: deploy a receiver that does and set submit.receiver"
    )]
    InvalidReceiver(Address),
    /// A transmission state this node does not know.
    #[error("the forwarder reports transmission state {0}, unknown to this node")]
    UnknownState(u8),
    /// Reading the forwarder's record failed.
    #[error("forwarder getTransmissionInfo: {0}")]
    Info(#[source] alloy::contract::Error),
    /// The forwarder refused signers and too few other signatures are held.
    #[error(
        "the forwarder refused signer(s) {refused:?} and this member holds fewer than f+1 = {need} other signatures on the agreed report"
    )]
    TooFewSignatures {
        /// The signers the forwarder refused.
        refused: Vec<Address>,
        /// f+1.
        need: usize,
    },
    /// The forwarder refused a signature it was already shown to refuse.
    #[error("the forwarder refused a signature of the agreed report: {0}")]
    SignatureRefused(RevertReason),
    /// The receiver refused the report for an authorization the operator can grant.
    #[error("the receiver refused the report ({0}); retried while that can change")]
    Unauthorized(RevertReason),
    /// Neither delivered nor transmittable after every look.
    #[error("the agreed report is neither delivered nor transmittable yet: retried later")]
    NotYet,
    /// The pre-flight of the transmission failed.
    #[error(transparent)]
    Submit(SubmitError),
}

impl TransmitError {
    /// Whether no later transmission can succeed (the round fails).
    pub fn is_fatal(&self) -> bool {
        match self {
            Self::NoRoute | Self::InvalidReceiver(_) => true,
            Self::Submit(e) => !e.is_transient(),
            _ => false,
        }
    }
}

/// An agreed report and what a member transmits it with.
pub struct Delivery<'a> {
    /// The execution the DON agreed on.
    pub execution_id: B256,
    /// The raw report.
    pub raw: Bytes,
    /// The report context the members signed with it.
    pub context: Bytes,
    /// f+1: the signatures a transmission carries.
    pub need: usize,
    /// When this member's turn to transmit comes (the leader's at once).
    pub turn: Instant,
    /// Every signature this member holds on the report, the agreed ones first.
    pub signatures: &'a (dyn Fn() -> Vec<(Address, Bytes)> + Send + Sync),
}

impl Submitter {
    /// The forwarder's record of the report of `execution_id` to the receiver.
    pub async fn transmission(&self, execution_id: B256) -> Result<Transmission, TransmitError> {
        let (forwarder, receiver) = self.report_route().ok_or(TransmitError::NoRoute)?;
        let report_id = FixedBytes::<2>(self.metadata().report_id.0);
        let info = IKeystoneForwarder::new(forwarder, self.provider.clone())
            .getTransmissionInfo(receiver, execution_id, report_id)
            .call()
            .await
            .map_err(TransmitError::Info)?;
        let state = TransmissionState::from_u8(info.state)
            .ok_or(TransmitError::UnknownState(info.state))?;
        Ok(Transmission {
            state,
            transmitter: info.transmitter,
        })
    }

    /// Looks at the forwarder until the report is delivered (by anyone) or it is this
    /// member's turn, then pre-flights the transmission with f+1 signatures the
    /// forwarder accepts.
    pub async fn transmit(
        &self,
        snapshot: &MarketSnapshot,
        market_id: MarketId,
        d: &Delivery<'_>,
        metrics: &Metrics,
    ) -> Result<Transmitted, TransmitError> {
        let mut refused: HashSet<Address> = HashSet::new();
        let mut waits = 0u32;
        let mut told_pending = false;
        // a member whose turn is later looks first after one pause: at the agreement the
        // report is not delivered yet, and the leader's pre-flight runs on the same chain
        if let Some(wait) = d.turn.checked_duration_since(Instant::now()) {
            tokio::time::sleep(wait.min(LOOK_PAUSE)).await;
        }
        for _ in 0..MAX_LOOKS {
            if Instant::now() < d.turn {
                if let Some(done) = self.settled(d.execution_id).await? {
                    return Ok(done);
                }
                tokio::time::sleep(LOOK_PAUSE.min(d.turn - Instant::now())).await;
                continue;
            }
            let Some(signatures) = choose(d, &refused) else {
                if let Some(done) = self.settled(d.execution_id).await? {
                    return Ok(done);
                }
                waits += 1;
                if waits > MAX_SIGNATURE_WAITS {
                    return Err(TransmitError::TooFewSignatures {
                        refused: refused.into_iter().collect(),
                        need: d.need,
                    });
                }
                tokio::time::sleep(PENDING_PAUSE).await;
                continue;
            };
            let signed = SignedReport {
                raw: d.raw.clone(),
                context: d.context.clone(),
                signatures,
            };
            // the forwarder's record and the pre-flight in one round trip; the record
            // decides first, as if it had been read before
            let (settled, prepared) = tokio::join!(
                self.settled(d.execution_id),
                self.prepare_signed(snapshot, market_id, &signed)
            );
            if let Some(done) = settled? {
                return Ok(done);
            }
            match prepared {
                Ok(prepared) => return Ok(Transmitted::Send(Box::new(prepared))),
                Err(SubmitError::AlreadyResolved { .. }) => {
                    // the report may have landed between the two reads: look again
                    tokio::time::sleep(PENDING_PAUSE).await;
                    if self.resolved_by_another(d.execution_id, market_id).await {
                        return Ok(Transmitted::ResolvedElsewhere);
                    }
                }
                Err(SubmitError::Reverted { reason, during }) => {
                    let pass = Pass {
                        refused: &mut refused,
                        told_pending: &mut told_pending,
                        market_id,
                        metrics,
                    };
                    pass.after_revert(reason, during).await?;
                }
                Err(e) => {
                    if !e.is_transient() {
                        metrics.don_event(DonEvent::Transmission(TransmissionEvent::Refused));
                    }
                    return Err(TransmitError::Submit(e));
                }
            }
        }
        Err(TransmitError::NotYet)
    }

    /// What the forwarder's record of the report ends: delivered (by anyone), or an
    /// invalid receiver; `None` while the report is still to be delivered.
    async fn settled(&self, execution_id: B256) -> Result<Option<Transmitted>, TransmitError> {
        let t = self.transmission(execution_id).await?;
        match t.state {
            TransmissionState::Succeeded => Ok(Some(Transmitted::Delivered(t.transmitter))),
            TransmissionState::InvalidReceiver => {
                let receiver = self.report_route().map(|(_, r)| r).unwrap_or_default();
                Err(TransmitError::InvalidReceiver(receiver))
            }
            TransmissionState::NotAttempted | TransmissionState::Failed => Ok(None),
        }
    }

    /// Whether the market is resolved on chain while the forwarder has not delivered
    /// the report (a failed read counts as no).
    async fn resolved_by_another(&self, execution_id: B256, market_id: MarketId) -> bool {
        let resolved = ICREsolverMarket::new(self.cfg.market, self.provider.clone())
            .getMarket(market_id.get())
            .call()
            .await
            .is_ok_and(|m| m.resolved);
        resolved
            && self
                .transmission(execution_id)
                .await
                .is_ok_and(|t| t.state != TransmissionState::Succeeded)
    }
}

/// A transmission's memory between two looks at a reverted pre-flight.
struct Pass<'a> {
    refused: &'a mut HashSet<Address>,
    told_pending: &'a mut bool,
    market_id: MarketId,
    metrics: &'a Metrics,
}

impl Pass<'_> {
    /// What a reverted pre-flight of a transmission means: another member's pending
    /// transmission (wait), a signer the forwarder does not know (leave it out), or an
    /// error that ends this transmission.
    async fn after_revert(
        self,
        reason: RevertReason,
        during: &'static str,
    ) -> Result<(), TransmitError> {
        let Pass {
            refused,
            told_pending,
            market_id,
            metrics,
        } = self;
        if reason.is_already_attempted() {
            // another member's transmission landed (the state read may lag) or waits in
            // the pending block, against which the pre-flight's `eth_call` runs: said
            // once, then looked at every 500 ms
            if !*told_pending {
                *told_pending = true;
                tracing::info!(market_id = %market_id, "the forwarder already has this report, delivered or pending from another member: waiting for it to be mined");
            }
            tokio::time::sleep(PENDING_PAUSE).await;
            return Ok(());
        }
        if let Some(a) = reason.invalid_signer() {
            if !refused.insert(a) {
                return Err(TransmitError::SignatureRefused(reason));
            }
            metrics.don_event(DonEvent::SignatureRefused);
            tracing::warn!(market_id = %market_id, signer = %a, "the forwarder does not know this member's key: transmitting with other members' signatures (fix the forwarder's config or [don].members)");
            return Ok(());
        }
        // an authorization the operator can still grant: another transmission may get
        // past it; any other error of the receiver ends the round
        if reason.is_resolver_unauthorized() {
            metrics.don_event(DonEvent::Transmission(TransmissionEvent::Failed));
            return Err(TransmitError::Unauthorized(reason));
        }
        metrics.don_event(DonEvent::Transmission(TransmissionEvent::Refused));
        Err(TransmitError::Submit(SubmitError::Reverted {
            reason,
            during,
        }))
    }
}

/// f+1 signatures of signers the forwarder has not refused, the agreed ones first
/// (`None`: too few held).
fn choose(d: &Delivery<'_>, refused: &HashSet<Address>) -> Option<Vec<Bytes>> {
    let chosen: Vec<Bytes> = (d.signatures)()
        .into_iter()
        .filter(|(a, _)| !refused.contains(a))
        .take(d.need)
        .map(|(_, s)| s)
        .collect();
    (chosen.len() >= d.need).then_some(chosen)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_forwarders_states_are_read_and_an_unknown_one_is_refused() {
        assert_eq!(
            TransmissionState::from_u8(0),
            Some(TransmissionState::NotAttempted)
        );
        assert_eq!(
            TransmissionState::from_u8(1),
            Some(TransmissionState::Succeeded)
        );
        assert_eq!(
            TransmissionState::from_u8(2),
            Some(TransmissionState::InvalidReceiver)
        );
        assert_eq!(
            TransmissionState::from_u8(3),
            Some(TransmissionState::Failed)
        );
        assert_eq!(TransmissionState::from_u8(4), None);
    }

    #[test]
    fn signatures_are_the_agreed_ones_first_without_the_refused_signers() {
        let a = |b: u8| Address::repeat_byte(b);
        let sig = |b: u8| Bytes::from(vec![b; 65]);
        let held = move || vec![(a(1), sig(1)), (a(2), sig(2)), (a(3), sig(3))];
        let d = Delivery {
            execution_id: B256::ZERO,
            raw: Bytes::new(),
            context: Bytes::new(),
            need: 2,
            turn: Instant::now(),
            signatures: &held,
        };
        assert_eq!(choose(&d, &HashSet::new()), Some(vec![sig(1), sig(2)]));
        assert_eq!(
            choose(&d, &HashSet::from([a(1)])),
            Some(vec![sig(2), sig(3)])
        );
        assert_eq!(choose(&d, &HashSet::from([a(1), a(3)])), None);
    }
}
