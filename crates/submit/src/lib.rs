//! cresolver-submit: puts a tally on chain exactly once, either `resolveMarket` with the
//! node's key (`direct`) or the CRE report through a forwarder to the receiver
//! (`report`). Before anything is signed: re-read `resolved`, check that no worker's
//! agent lets the market act as its operator (the registry would refuse the market's
//! feedback), and simulate with `eth_call` — a revert is decoded and fails the round, it
//! is not retried. In report mode the forwarder's own `report(...)` is simulated from the
//! node's address exactly as it will be sent (a forwarder revert reverts the whole
//! transaction), and so is the receiver's `onReport` from the forwarder (the forwarder
//! swallows a receiver revert into `ReportProcessed.result = false`). Signing and sending
//! belong to the transaction manager ([`crate::txm`]); [`Submitter::confirm`] reads the
//! mined receipt: confirmation is the `MarketResolved` event (and, in report mode,
//! `ReportProcessed.result`), not the receipt status alone.

pub mod forwarder;
pub mod gas;
pub mod txm;

use alloy::network::TransactionBuilder;
use alloy::primitives::{Address, B256, Bytes, U256, keccak256};
use alloy::providers::{DynProvider, Provider};
use alloy::rpc::types::state::StateOverride;
use alloy::rpc::types::{TransactionReceipt, TransactionRequest};
use alloy::sol_types::{SolCall, SolEvent};
use cresolver_chain::bindings::{ICREsolverMarket, IKeystoneForwarder, IReceiver};
use cresolver_chain::reader::MarketSnapshot;
use cresolver_chain::{RevertReason, RpcFailure, decode_revert};
use cresolver_core::report::{ExecutionHeader, ReportMetadata, build_raw_report};
use cresolver_core::{MarketId, TallyOutcome};
use serde::Serialize;

/// How a round's result reaches the chain: `resolveMarket(...)` from the node's key
/// (`direct`), or a report through a forwarder to a receiver (`report`).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    Default,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum SubmitMode {
    /// `resolveMarket(...)` sent to the market from the node's key.
    #[default]
    Direct,
    /// A report sent to the forwarder, which calls the receiver's `onReport`.
    Report,
}

/// Why a submission cannot go ahead, or did not resolve the market.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// The market is resolved already: there is nothing to submit.
    #[error("market {market_id} is already resolved on chain")]
    AlreadyResolved {
        /// The market's id in its contract.
        market_id: MarketId,
    },
    /// A worker's agent has the market as its operator, so every submission reverts.
    #[error(
        "worker {worker} (agent {agent_id}) has approved the market as operator of its agent: the reputation registry refuses the market's feedback (\"Self-feedback not allowed\") and resolveMarket would revert for every worker; the worker must revoke the approval"
    )]
    OperatorBlocks {
        /// The worker's address.
        worker: Address,
        /// Its agent's id in the identity registry.
        agent_id: U256,
    },
    /// A pre-flight call reverted: the decoded reason, and which call (`""` for the
    /// executing call, `"forwarder report(): "` for the forwarder's).
    #[error("simulation reverted: {during}{reason}")]
    Reverted {
        /// The decoded revert.
        reason: RevertReason,
        /// Which call reverted, as a prefix of the message.
        during: &'static str,
    },
    /// The node's submission settings do not fit the call (what is missing).
    #[error("submission misconfigured: {0}")]
    Config(String),
    /// The chain's RPC failed.
    #[error("RPC error: {0}")]
    Rpc(#[from] cresolver_chain::RpcFailure),
    /// The transaction has no receipt after the wait.
    #[error("transaction {tx} not mined within {secs} s")]
    NoReceipt {
        /// The transaction's hash.
        tx: B256,
        /// How long it was waited for, in seconds.
        secs: u64,
    },
    /// The transaction is mined but its receipt does not show the market resolved.
    #[error("transaction {tx} mined but did not resolve the market: {detail}")]
    NotConfirmed {
        /// The transaction's hash.
        tx: B256,
        /// What the receipt lacks.
        detail: String,
    },
}

impl SubmitError {
    /// Whether trying again later could help (RPC trouble, a slow chain).
    pub fn is_transient(&self) -> bool {
        matches!(self, SubmitError::Rpc(_) | SubmitError::NoReceipt { .. })
    }
}

/// A report a DON agreed on: the raw report, the context its members signed with it, and
/// exactly f+1 signatures (65 bytes `r ‖ s ‖ v`, v = 0 or 1).
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct SignedReport {
    /// The raw report (metadata header and body).
    pub raw: Bytes,
    /// The report context the members signed along with it.
    pub context: Bytes,
    /// Exactly f+1 signatures, 65 bytes each.
    pub signatures: Vec<Bytes>,
}

/// A transaction ready to sign.
#[derive(Debug, Clone, Serialize)]
pub struct Prepared {
    /// The address that signs and sends it.
    pub from: Address,
    /// The contract it calls: the market (direct) or the forwarder (report).
    pub to: Address,
    /// Its input.
    pub calldata: Bytes,
    /// The gas the chain estimated for it, in gas units.
    pub gas_estimate: u64,
    /// The estimate with the configured margin: the limit it is signed with, in gas
    /// units.
    pub gas_limit: u64,
    /// How it reaches the market.
    pub mode: SubmitMode,
}

/// What a simulation of the submission said (see [`Submitter::simulate`]).
#[derive(Debug, Clone, Serialize)]
pub struct Simulation {
    /// The address the transaction would be sent from.
    pub from: Address,
    /// The contract the transaction would call.
    pub to: Address,
    /// The transaction's input.
    pub calldata: Bytes,
    /// The caller of the call that executes the resolution (report mode: the
    /// forwarder calling the receiver).
    pub executes_from: Address,
    /// The contract of the call that executes the resolution.
    pub executes_to: Address,
    /// Whether a state override was applied.
    pub state_override: bool,
    /// The call ran without reverting.
    pub success: bool,
    /// The decoded revert, when the call reverted.
    pub revert: Option<SimulatedRevert>,
    /// Neither success nor a revert: the RPC failed.
    pub rpc_error: Option<String>,
    /// The gas the submission needs, in gas units, when the call succeeded.
    pub gas_estimate: Option<u64>,
    /// The estimate with the configured margin, in gas units.
    pub gas_limit: Option<u64>,
}

/// A decoded revert of a simulation.
#[derive(Debug, Clone, Serialize)]
pub struct SimulatedRevert {
    /// The error's name (`Unauthorized`, …).
    pub name: String,
    /// The revert as text, with its arguments (prefixed `forwarder report(): ` when the
    /// forwarder's own call reverted).
    pub reason: String,
}

/// Proof that the market was resolved by our transaction.
#[derive(Debug, Clone, Serialize)]
pub struct Confirmed {
    /// Our transaction's hash.
    pub tx_hash: B256,
    /// The block it is in.
    pub block_number: u64,
    /// The resolution the market recorded (`MarketResolved`).
    pub resolution: bool,
    /// The resolver the market recorded.
    pub resolver: Address,
    /// The gas the transaction used, in gas units.
    pub gas_used: u64,
}

/// Where and how to submit.
#[derive(Debug, Clone)]
pub struct SubmitterConfig {
    /// The market contract.
    pub market: Address,
    /// How the result reaches the market.
    pub mode: SubmitMode,
    /// The forwarder a report is sent to (report mode).
    pub forwarder: Option<Address>,
    /// The receiver the forwarder calls (report mode).
    pub receiver: Option<Address>,
    /// The metadata of every report (workflow id, name, owner, report id).
    pub metadata: ReportMetadata,
    /// The margin added to a gas estimate for the gas limit, in percent.
    pub gas_margin_percent: u64,
}

/// Checks, simulates and builds a market's submission, and reads its receipt; signing
/// and sending are the transaction manager's.
pub struct Submitter {
    provider: DynProvider,
    from: Address,
    cfg: SubmitterConfig,
    /// The receiver's gas estimates started ahead of a DON's signatures.
    ahead: std::sync::Arc<gas::Ahead>,
}

/// A submission to pre-flight: the transaction, the call that executes the resolution
/// (`sim`), and what the gas limit needs beside its estimate.
struct Call {
    to: Address,
    calldata: Bytes,
    sim: TransactionRequest,
    /// The report signatures the transaction carries (report mode).
    signatures: usize,
    /// The executing call's gas, estimated ahead (`None`: estimate it now).
    inner: Option<u64>,
}

/// The receiver's `onReport(raw[45:109], raw[109:])` from the forwarder.
fn on_report(forwarder: Address, receiver: Address, raw: &[u8]) -> TransactionRequest {
    let (metadata, report) = match cresolver_core::report::split_raw_report(raw) {
        Ok((m, r)) => (Bytes::copy_from_slice(m), Bytes::copy_from_slice(r)),
        Err(_) => (Bytes::new(), Bytes::new()),
    };
    let call = IReceiver::onReportCall { metadata, report };
    TransactionRequest::default()
        .with_from(forwarder)
        .with_to(receiver)
        .with_input(Bytes::from(call.abi_encode()))
}

fn revert_of(e: &alloy::transports::TransportError) -> Option<RevertReason> {
    e.as_error_resp()
        .and_then(|p| p.as_revert_data())
        .map(|d| decode_revert(&d))
}

impl Submitter {
    /// `from` is the address that signs (or, for a dry-run, that the simulation runs as).
    pub fn new(
        provider: DynProvider,
        from: Address,
        cfg: SubmitterConfig,
    ) -> Result<Self, SubmitError> {
        if cfg.mode == SubmitMode::Report && (cfg.forwarder.is_none() || cfg.receiver.is_none()) {
            return Err(SubmitError::Config(
                "report mode needs submit.forwarder and submit.receiver in the node config".into(),
            ));
        }
        Ok(Self {
            provider,
            from,
            cfg,
            ahead: std::sync::Arc::default(),
        })
    }

    /// The address that signs (or that a simulation runs as).
    pub fn from(&self) -> Address {
        self.from
    }

    /// The raw report envelope the forwarder receives for `tally`.
    pub fn raw_report(&self, tally: &TallyOutcome) -> Bytes {
        let body = tally.report();
        let exec_id = keccak256(
            [
                self.cfg.market.as_slice(),
                &tally.market_id.get().to_be_bytes::<32>(),
                body.as_ref(),
            ]
            .concat(),
        );
        let header = ExecutionHeader {
            version: 1,
            workflow_execution_id: exec_id,
            timestamp: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs() as u32)
                .unwrap_or(0),
            don_id: 0,
            don_config_version: 0,
        };
        build_raw_report(&header, &self.cfg.metadata, &body)
    }

    /// `(to, calldata)` of the submission.
    pub fn calldata(&self, tally: &TallyOutcome) -> (Address, Bytes) {
        match self.cfg.mode {
            SubmitMode::Direct => {
                let call = ICREsolverMarket::resolveMarketCall {
                    marketId: tally.market_id.get(),
                    workers: tally.addresses(),
                    weights: tally.weights(),
                    dimScores: tally.dim_scores(),
                    resolution: tally.resolution,
                };
                (self.cfg.market, Bytes::from(call.abi_encode()))
            }
            SubmitMode::Report => {
                let call = IKeystoneForwarder::reportCall {
                    receiver: self.cfg.receiver.unwrap_or_default(),
                    rawReport: self.raw_report(tally),
                    reportContext: Bytes::new(),
                    signatures: vec![],
                };
                (
                    self.cfg.forwarder.unwrap_or_default(),
                    Bytes::from(call.abi_encode()),
                )
            }
        }
    }

    /// Checks, simulates and estimates gas. Never signs or sends.
    pub async fn prepare(
        &self,
        snapshot: &MarketSnapshot,
        tally: &TallyOutcome,
    ) -> Result<Prepared, SubmitError> {
        let (to, calldata) = self.calldata(tally);
        let sim = self.execution(tally, &calldata);
        let call = Call {
            to,
            calldata,
            sim,
            signatures: 0,
            inner: None,
        };
        self.prepare_call(snapshot, tally.market_id, call).await
    }

    /// Like [`Submitter::prepare`], for a report a DON agreed on and signed (report mode
    /// only): the forwarder's `report(receiver, raw, context, signatures)` is checked,
    /// simulated from this node's address and estimated exactly as it will be sent.
    /// The receiver's estimate started ahead for this report
    /// ([`gas::EstimatesAhead::start`]) is taken, and the forwarder checked at the gas
    /// limit it gives.
    pub async fn prepare_signed(
        &self,
        snapshot: &MarketSnapshot,
        market_id: MarketId,
        signed: &SignedReport,
    ) -> Result<Prepared, SubmitError> {
        if self.cfg.mode != SubmitMode::Report {
            return Err(SubmitError::Config(
                "a DON's signed report needs [submit] mode = \"report\"".into(),
            ));
        }
        let call = Call {
            to: self.cfg.forwarder.unwrap_or_default(),
            calldata: self.signed_calldata(signed),
            sim: self.execution_of_raw(&signed.raw),
            signatures: signed.signatures.len(),
            inner: self.estimated_ahead(&signed.raw).await,
        };
        self.prepare_call(snapshot, market_id, call).await
    }

    /// The forwarder call that transmits a signed report.
    pub fn signed_calldata(&self, signed: &SignedReport) -> Bytes {
        let call = IKeystoneForwarder::reportCall {
            receiver: self.cfg.receiver.unwrap_or_default(),
            rawReport: signed.raw.clone(),
            reportContext: signed.context.clone(),
            signatures: signed.signatures.clone(),
        };
        Bytes::from(call.abi_encode())
    }

    /// The forwarder and the receiver of report mode.
    pub fn report_route(&self) -> Option<(Address, Address)> {
        Some((self.cfg.forwarder?, self.cfg.receiver?))
    }

    /// The report's metadata (workflow id, name, owner, report id).
    pub fn metadata(&self) -> &ReportMetadata {
        &self.cfg.metadata
    }

    async fn prepare_call(
        &self,
        snapshot: &MarketSnapshot,
        market_id: MarketId,
        call: Call,
    ) -> Result<Prepared, SubmitError> {
        // The usual case first: the executing call's gas estimates and, in report mode,
        // the forwarder's `report(...)` runs, without a revert. An estimate succeeds only
        // when the call succeeds, and the call reverts on a resolved market
        // (`AlreadyResolved`), so that is the whole pre-flight: one estimate and one
        // call instead of five reads. With the estimate made ahead, only the forwarder
        // runs, at the gas limit the transaction will carry.
        let operator = snapshot
            .workers
            .iter()
            .any(|w| w.market_is_operator && w.agent_id != U256::ZERO);
        let envelope = gas::Envelope {
            calldata: call.calldata.len(),
            signatures: call.signatures,
        };
        if !operator {
            let calldata_ref = &call.calldata;
            let forwarder = |gas: Option<u64>| async move {
                match self.forwarder_call(call.to, calldata_ref) {
                    Some(c) => {
                        let c = match gas {
                            Some(g) => c.with_gas_limit(g),
                            None => c,
                        };
                        self.provider.call(c).await.map(drop)
                    }
                    None => Ok(()),
                }
            };
            let started = std::time::Instant::now();
            let (checked, inner) = match call.inner {
                Some(inner) => {
                    let (_, limit) = self.gas(inner, envelope);
                    (forwarder(Some(limit)).await, Ok(inner))
                }
                None => tokio::join!(
                    forwarder(None),
                    self.provider.estimate_gas(call.sim.clone())
                ),
            };
            tracing::debug!(%market_id, ahead = call.inner.is_some(), ms = started.elapsed().as_secs_f64() * 1e3, "pre-flight: forwarder run and gas estimated");
            if let (Ok(()), Ok(inner)) = (checked, inner) {
                return Ok(self.prepared(call.to, call.calldata, inner, envelope));
            }
        }
        // Something failed: the full pre-flight says what, its reads together (two round
        // trips, not up to five: the forwarder runs at the gas limit the executing
        // call's estimate gives, so a limit too low for the forwarder is an error here,
        // not a transaction that runs out of gas), their verdicts taken in the order a
        // sequential pre-flight would: resolved, an operator worker, the forwarder, the
        // simulation, then its gas.
        let market = ICREsolverMarket::new(self.cfg.market, self.provider.clone());
        let resolved = async {
            market
                .getMarket(market_id.get())
                .call()
                .await
                .map(|m| m.resolved)
                .map_err(|e| SubmitError::Rpc(RpcFailure::new("getMarket", e)))
        };
        let (resolved, simulated, inner) = tokio::join!(
            resolved,
            self.provider.call(call.sim.clone()),
            self.provider.estimate_gas(call.sim),
        );
        let limit = match &inner {
            Ok(inner) => Some(self.gas(*inner, envelope).1),
            Err(_) => call.inner.map(|inner| self.gas(inner, envelope).1),
        };
        let forwarder = self
            .preflight_forwarder(market_id, call.to, &call.calldata, limit)
            .await;
        if resolved? {
            return Err(SubmitError::AlreadyResolved { market_id });
        }
        if let Some(w) = snapshot
            .workers
            .iter()
            .find(|w| w.market_is_operator && w.agent_id != U256::ZERO)
        {
            return Err(SubmitError::OperatorBlocks {
                worker: w.address,
                agent_id: w.agent_id,
            });
        }
        forwarder?;
        if let Err(e) = simulated {
            return Err(match revert_of(&e) {
                Some(r) => {
                    tracing::warn!(market_id = %market_id, reason = %r, "pre-flight simulation reverted");
                    SubmitError::Reverted {
                        reason: r,
                        during: "",
                    }
                }
                None => SubmitError::Rpc(RpcFailure::new("eth_call (simulation)", e)),
            });
        }
        let inner = inner.map_err(|e| SubmitError::Rpc(RpcFailure::new("eth_estimateGas", e)))?;
        Ok(self.prepared(call.to, call.calldata, inner, envelope))
    }

    /// The transaction to send, with its gas from the executing call's estimate `inner`.
    fn prepared(&self, to: Address, calldata: Bytes, inner: u64, e: gas::Envelope) -> Prepared {
        let (gas_estimate, gas_limit) = self.gas(inner, e);
        Prepared {
            from: self.from,
            to,
            calldata,
            gas_estimate,
            gas_limit,
            mode: self.cfg.mode,
        }
    }

    /// Report mode: the forwarder's `report(...)` from our address, exactly as it will be
    /// sent. Direct mode: `None`.
    fn forwarder_call(&self, to: Address, calldata: &Bytes) -> Option<TransactionRequest> {
        (self.cfg.mode == SubmitMode::Report).then(|| {
            TransactionRequest::default()
                .with_from(self.from)
                .with_to(to)
                .with_input(calldata.clone())
        })
    }

    /// Report mode: `eth_call` of the forwarder's `report(...)` from our address, exactly
    /// as it will be sent (at `gas`, the transaction's limit, when known). A revert of the
    /// forwarder (config, signatures, a transmission already attempted) is decoded by
    /// name. Direct mode: nothing to run.
    async fn preflight_forwarder(
        &self,
        market_id: MarketId,
        to: Address,
        calldata: &Bytes,
        gas: Option<u64>,
    ) -> Result<(), SubmitError> {
        let Some(mut call) = self.forwarder_call(to, calldata) else {
            return Ok(());
        };
        if let Some(g) = gas {
            call = call.with_gas_limit(g);
        }
        let Err(e) = self.provider.call(call).await else {
            return Ok(());
        };
        Err(match revert_of(&e) {
            Some(r) => {
                if r.is_already_attempted() {
                    // the same report was delivered, or is in the pending block (a
                    // DON member's transmission): the caller decides what it means
                    tracing::debug!(%market_id, reason = %r, "pre-flight: the forwarder's report() reverted");
                } else {
                    tracing::warn!(%market_id, reason = %r, "pre-flight: the forwarder's report() reverted");
                }
                SubmitError::Reverted {
                    reason: r,
                    during: "forwarder report(): ",
                }
            }
            None => SubmitError::Rpc(RpcFailure::new("eth_call (forwarder report)", e)),
        })
    }

    /// The call that actually executes the resolution: `resolveMarket` from us (direct),
    /// or the receiver's `onReport` from the forwarder (report).
    fn execution(&self, tally: &TallyOutcome, calldata: &Bytes) -> TransactionRequest {
        let (sim_from, sim_to, sim_data) = match self.cfg.mode {
            SubmitMode::Direct => (self.from, self.cfg.market, calldata.clone()),
            SubmitMode::Report => return self.execution_of_raw(&self.raw_report(tally)),
        };
        TransactionRequest::default()
            .with_from(sim_from)
            .with_to(sim_to)
            .with_input(sim_data)
    }

    /// The receiver's `onReport(raw[45:109], raw[109:])` from the forwarder.
    fn execution_of_raw(&self, raw: &[u8]) -> TransactionRequest {
        on_report(
            self.cfg.forwarder.unwrap_or_default(),
            self.cfg.receiver.unwrap_or_default(),
            raw,
        )
    }

    /// The address the market checks as `msg.sender` of `resolveMarket`: our `from` in
    /// direct mode, the receiver in report mode.
    pub fn resolver(&self) -> Address {
        match self.cfg.mode {
            SubmitMode::Direct => self.from,
            SubmitMode::Report => self.cfg.receiver.unwrap_or_default(),
        }
    }

    /// How the result reaches the market.
    pub fn mode(&self) -> SubmitMode {
        self.cfg.mode
    }

    /// Simulates the exact submission for `tally` (dry-run): `eth_call` and gas estimate
    /// of the executing call, optionally under a state override. No check is skipped
    /// and nothing is signed or sent; a revert is decoded into the result, not an error.
    pub async fn simulate(
        &self,
        tally: &TallyOutcome,
        overrides: Option<StateOverride>,
    ) -> Simulation {
        let (to, calldata) = self.calldata(tally);
        let exec = self.execution(tally, &calldata);
        let mut sim = Simulation {
            from: self.from,
            to,
            calldata: calldata.clone(),
            executes_from: exec.from.unwrap_or_default(),
            executes_to: exec.to.and_then(|k| k.to().copied()).unwrap_or_default(),
            state_override: overrides.is_some(),
            success: false,
            revert: None,
            rpc_error: None,
            gas_estimate: None,
            gas_limit: None,
        };
        if self.cfg.mode == SubmitMode::Report {
            // the forwarder's own checks first: its revert reverts the whole transaction
            let fwd = TransactionRequest::default()
                .with_from(self.from)
                .with_to(to)
                .with_input(calldata.clone());
            if let Err(e) = self
                .provider
                .call(fwd)
                .overrides_opt(overrides.clone())
                .await
            {
                match revert_of(&e) {
                    Some(r) => {
                        sim.revert = Some(SimulatedRevert {
                            name: r.name(),
                            reason: format!("forwarder report(): {r}"),
                        })
                    }
                    None => sim.rpc_error = Some(e.to_string()),
                }
                return sim;
            }
        }
        let call = self
            .provider
            .call(exec.clone())
            .overrides_opt(overrides.clone())
            .await;
        if let Err(e) = call {
            match revert_of(&e) {
                Some(r) => {
                    sim.revert = Some(SimulatedRevert {
                        name: r.name(),
                        reason: r.to_string(),
                    })
                }
                None => sim.rpc_error = Some(e.to_string()),
            }
            return sim;
        }
        sim.success = true;
        match self
            .provider
            .estimate_gas(exec)
            .overrides_opt(overrides)
            .await
        {
            Ok(inner) => {
                let envelope = gas::Envelope {
                    calldata: calldata.len(),
                    signatures: 0,
                };
                let (estimate, limit) = self.gas(inner, envelope);
                sim.gas_estimate = Some(estimate);
                sim.gas_limit = Some(limit);
            }
            Err(e) => sim.rpc_error = Some(format!("eth_estimateGas: {e}")),
        }
        sim
    }

    /// Whether `r` (a receipt of our submission) resolved `market_id`: the transaction
    /// succeeded, the market emitted `MarketResolved` for it and, in report mode, the
    /// forwarder's `ReportProcessed.result` is true.
    pub fn confirm(
        &self,
        market_id: MarketId,
        r: &TransactionReceipt,
    ) -> Result<Confirmed, SubmitError> {
        let tx = r.transaction_hash;
        if !r.status() {
            return Err(SubmitError::NotConfirmed {
                tx,
                detail: "the transaction reverted".into(),
            });
        }
        if self.cfg.mode == SubmitMode::Report {
            let processed = r
                .inner
                .logs()
                .iter()
                .filter(|l| Some(l.address()) == self.cfg.forwarder)
                .find_map(|l| IKeystoneForwarder::ReportProcessed::decode_log(&l.inner).ok());
            match processed {
                Some(p) if p.data.result => {}
                Some(_) => {
                    return Err(SubmitError::NotConfirmed {
                        tx,
                        detail: "the forwarder reported ReportProcessed.result = false (the receiver's onReport failed)".into(),
                    });
                }
                None => {
                    return Err(SubmitError::NotConfirmed {
                        tx,
                        detail: "no ReportProcessed event from the forwarder".into(),
                    });
                }
            }
        }
        let resolved = r
            .inner
            .logs()
            .iter()
            .filter(|l| l.address() == self.cfg.market)
            .filter_map(|l| ICREsolverMarket::MarketResolved::decode_log(&l.inner).ok())
            .find(|e| e.data.marketId == market_id.get());
        match resolved {
            Some(e) => Ok(Confirmed {
                tx_hash: tx,
                block_number: r.block_number.unwrap_or_default(),
                resolution: e.data.resolution,
                resolver: e.data.resolver,
                gas_used: r.gas_used,
            }),
            None => Err(SubmitError::NotConfirmed {
                tx,
                detail: "no MarketResolved event for this market in the receipt".into(),
            }),
        }
    }
}
