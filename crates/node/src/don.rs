//! A node that is a DON member (`[don]`): after its own round (discovery, workers,
//! challenges, evaluation, as any node) it turns the outcome into its signed observation,
//! agrees on one report with the other members (`cresolver_don`), records the agreement
//! in the transcript, and delivers it through the KeystoneForwarder: the attempt's leader
//! at once, every other member after its rank's delay if the forwarder's transmission
//! state still says nobody succeeded. The forwarder's state is the truth: SUCCEEDED ends
//! the round, INVALID_RECEIVER fails it with the reason, FAILED (the receiver reverted)
//! is re-simulated and retried only when the receiver's error can change. A member whose
//! own transmission was mined after another member's delivery (and reverted) records
//! the round confirmed, delivered by that member.

use super::*;
use alloy::primitives::{Bytes, FixedBytes};
use cresolver_chain::bindings::IKeystoneForwarder;
use cresolver_chain::reader::MarketSnapshot;
use cresolver_core::don::{
    Aggregate, Observation, ObservedAnswer, Position, WorkerObservation, execution_id,
};
use cresolver_core::report::{ExecutionHeader, build_raw_report};
use cresolver_don::{Agreed, Don, Job};
use cresolver_pipeline::round::RoundInput;
use cresolver_store::RoundRecord;
use cresolver_submit::{SignedReport, SubmitMode};

/// The forwarder's transmission states (`IRouter.TransmissionState`).
const NOT_ATTEMPTED: u8 = 0;
const SUCCEEDED: u8 = 1;
const INVALID_RECEIVER: u8 = 2;
const FAILED: u8 = 3;

/// The DON member of a node config, checked: a key that is a member, report mode
/// everywhere, and the embedded store.
pub(super) fn member(
    cfg: &NodeConfig,
    signer: Option<PrivateKeySigner>,
    pipelines: &[Pipeline],
    shared_store: bool,
    metrics: Arc<Metrics>,
) -> Result<Option<Arc<Don>>, NodeError> {
    let Some(dc) = &cfg.don else {
        return Ok(None);
    };
    let signer = signer.ok_or_else(|| {
        NodeError::Don(
            "a DON member signs with its own key: set [signer] (the env var, a key file or a keystore)"
                .into(),
        )
    })?;
    dc.validate(signer.address())
        .map_err(|e| NodeError::Don(e.to_string()))?;
    if shared_store {
        return Err(NodeError::Don(
            "a DON member keeps its own state: leave store.url empty (the embedded SQLite file); a PostgreSQL cluster cannot be one member".into(),
        ));
    }
    for p in pipelines {
        if p.submitter.mode() != SubmitMode::Report {
            return Err(NodeError::Don(format!(
                "workflow {:?} submits directly: a DON delivers through the KeystoneForwarder; set [submit] mode = \"report\" in the workflow and submit.forwarder / submit.receiver in the node config",
                p.workflow.name
            )));
        }
    }
    std::fs::create_dir_all(&cfg.node.data_dir).map_err(|e| {
        NodeError::Don(format!(
            "cannot create {}: {e}",
            cfg.node.data_dir.display()
        ))
    })?;
    let path = cfg.node.data_dir.join("don.sqlite");
    let persist = cresolver_don::persist::Persist::open(&path)
        .map_err(|e| NodeError::Don(format!("{}: {e}", path.display())))?;
    let don = Don::new(dc.clone(), signer, persist, metrics)
        .map_err(|e| NodeError::Don(e.to_string()))?;
    tracing::info!(member = %don.address(), members = dc.members.len(), f = dc.f, don_id = dc.don_id, config_version = dc.config_version, "this node is a DON member");
    Ok(Some(Arc::new(don)))
}

/// This member's observation of a round from its outcome: every registered worker in
/// registration order, its answer reduced to position, confidence and the three scores.
fn observe(
    outcome: &cresolver_pipeline::round::RoundOutcome,
    binding: (u32, u32, B256, Address, U256),
    observer: Address,
) -> Observation {
    let workers = outcome
        .tally
        .workers
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let result = outcome.resolve.results.get(i);
            let answer = w.responded.then(|| ObservedAnswer {
                position: match w.determination {
                    Some(true) => Position::Yes,
                    Some(false) => Position::No,
                    None => Position::Abstain,
                },
                confidence_ppm: result
                    .and_then(|r| r.answer())
                    .map(|a| (a.confidence.clamp(0.0, 1.0) * 1e6).round() as u32)
                    .unwrap_or(0),
                scores: [
                    w.scores.res_quality,
                    w.scores.src_quality,
                    w.scores.analysis_depth,
                ],
            });
            let failure = if w.responded {
                None
            } else {
                Some(
                    result
                        .and_then(|r| r.outcome.as_ref().err())
                        .map(|f| f.kind())
                        .unwrap_or("no_answer")
                        .chars()
                        .filter(|c| c.is_ascii_graphic())
                        .take(32)
                        .collect(),
                )
            };
            WorkerObservation {
                address: w.address,
                answer,
                failure,
            }
        })
        .collect();
    observation(binding, observer, workers)
}

/// The observation of a member whose own round missed its quorum: no answer counts
/// (it was not evaluated), each worker with its failure, or `local_quorum_not_met` for
/// those that did answer this member.
fn observe_failed(
    stage: &cresolver_workers::fanout::ResolveStage,
    binding: (u32, u32, B256, Address, U256),
    observer: Address,
) -> Observation {
    let workers = stage
        .results
        .iter()
        .map(|r| WorkerObservation {
            address: r.address,
            answer: None,
            failure: Some(
                match &r.outcome {
                    Ok(_) => "local_quorum_not_met",
                    Err(f) => f.kind(),
                }
                .into(),
            ),
        })
        .collect();
    observation(binding, observer, workers)
}

/// An observation of `workers` by `observer`, bound to the round, stamped now.
fn observation(
    binding: (u32, u32, B256, Address, U256),
    observer: Address,
    workers: Vec<WorkerObservation>,
) -> Observation {
    let (don_id, config_version, execution_id, market, market_id) = binding;
    Observation {
        don_id,
        config_version,
        execution_id,
        market,
        market_id,
        observer,
        timestamp: unix_now(),
        workers,
    }
}

fn unix_now() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs().min(u64::from(u32::MAX)) as u32)
        .unwrap_or(0)
}

/// The transcript's view of an agreement: every member's observation (or missing), the
/// set, the report, its signers.
fn don_record(don: &Don, own: &Observation, agreed: &Agreed) -> DonRecord {
    let members = don
        .members()
        .iter()
        .map(|m| {
            let obs = agreed
                .observations
                .iter()
                .find(|o| o.observation.observer == *m);
            DonMemberRecord {
                member: *m,
                in_set: obs.is_some(),
                observation: obs.map(|o| o.observation.clone()),
            }
        })
        .collect();
    DonRecord {
        execution_id: agreed.execution_id,
        member: don.address(),
        own_observation: own.clone(),
        members,
        set: agreed.observers(),
        attempt: agreed.attempt,
        round: Some(agreed.attempt),
        leader: agreed.leader,
        precommits: agreed.commits.iter().map(|c| c.voter).collect(),
        report: agreed.report.clone(),
        report_context: agreed.context.clone(),
        digest: agreed.digest,
        signers: agreed.signers.clone(),
        recomputed: agreed.recomputed,
        transmitter: None,
    }
}

impl Node {
    /// The DON half of a round, after this member's own outcome is stored.
    pub(super) async fn drive_don(
        &self,
        don: &Arc<Don>,
        p: &Pipeline,
        snapshot: &MarketSnapshot,
        rec: &RoundRecord,
        input: &RoundInput,
        mut transcript: Transcript,
    ) -> Result<(), Step> {
        let (market, market_id) = (p.market, rec.market_id);
        let Some(request_tx) = rec.request_tx else {
            return self
                .fail(
                    market,
                    market_id,
                    "a DON agrees on on-chain requests only: this round has no ResolutionRequested log (POST /resolve is not agreed by a DON); request the resolution on the market",
                )
                .await;
        };
        let dc = don.config().clone();
        let exec = execution_id(self.chain_id, market, market_id, request_tx);
        let binding = (dc.don_id, dc.config_version, exec, market, market_id);
        let own = match (&transcript.outcome, &transcript.resolve) {
            (Some(outcome), _) => observe(outcome, binding, don.address()),
            (None, Some(stage)) => observe_failed(stage, binding, don.address()),
            (None, None) => return Ok(()),
        };
        let (reputations, tie, quorum) = (
            input.reputations.clone(),
            p.workflow.tally.tie,
            p.workflow.quorum.rule,
        );
        let metadata = p.submitter.metadata().clone();
        let build = move |agg: &Aggregate| -> Result<Bytes, String> {
            let n = agg.workers.len();
            let answered = agg.workers.iter().filter(|w| w.answer.is_some()).count();
            if !quorum.is_met(answered, n) {
                return Err(format!(
                    "the DON's aggregate has {answered} answered worker(s) of {n}: quorum {quorum} is not met"
                ));
            }
            let t = cresolver_core::tally(market_id, &agg.tally_workers(&reputations), tie)
                .map_err(|e| e.to_string())?;
            let header = ExecutionHeader {
                version: 1,
                workflow_execution_id: exec,
                timestamp: agg.timestamp,
                don_id: dc.don_id,
                don_config_version: dc.config_version,
            };
            Ok(build_raw_report(&header, &metadata, &t.report()))
        };
        let job = Job {
            execution_id: exec,
            market,
            market_id,
            observation: own,
            workers: snapshot.workers.iter().map(|w| w.address).collect(),
            build: Arc::new(build),
        };
        let started = Instant::now();
        let agreed = match don.agree(job).await {
            Ok(a) => a,
            Err(e) => return Err(Step::Transient(e.to_string())),
        };
        self.metrics
            .observe_stage("don_agreement", started.elapsed().as_secs_f64());
        let own = don
            .own_observation(&exec)
            .ok()
            .flatten()
            .map(|o| o.observation);
        if let Some(own) = &own {
            transcript.don = Some(don_record(don, own, &agreed));
        }
        self.save_transcript(market, market_id, &transcript).await?;
        self.transmit(don, p, snapshot, market_id, &agreed, transcript)
            .await
    }

    /// Delivers an agreed report unless the forwarder says someone did.
    async fn transmit(
        &self,
        don: &Arc<Don>,
        p: &Pipeline,
        snapshot: &MarketSnapshot,
        market_id: U256,
        agreed: &Agreed,
        mut transcript: Transcript,
    ) -> Result<(), Step> {
        let market = p.market;
        let Some((forwarder, receiver)) = p.submitter.report_route() else {
            return self
                .fail(
                    market,
                    market_id,
                    "report mode without submit.forwarder / submit.receiver",
                )
                .await;
        };
        let report_id = FixedBytes::<2>(p.submitter.metadata().report_id.0);
        let fwd = IKeystoneForwarder::new(forwarder, self.provider.clone());
        let rank = don.transmit_rank(agreed);
        let wait = Duration::from_millis(don.config().transmit_delay_ms).saturating_mul(rank);
        let turn = Instant::now() + wait;
        let mut refused: std::collections::HashSet<Address> = Default::default();
        let mut waits = 0u32;
        let mut told_pending = false;
        if rank > 0 {
            tracing::info!(market_id = %market_id, rank, wait_ms = wait.as_millis() as u64, "agreed: another member transmits first; this one transmits only if the forwarder has not seen the report by then");
        }
        let mut rounds = 0u32;
        loop {
            rounds += 1;
            if rounds > 2_000 {
                return Err(Step::Transient(
                    "the agreed report is neither delivered nor transmittable yet: retried later"
                        .into(),
                ));
            }
            let info = fwd
                .getTransmissionInfo(receiver, agreed.execution_id, report_id)
                .call()
                .await
                .map_err(|e| Step::Transient(format!("forwarder getTransmissionInfo: {e}")))?;
            match info.state {
                SUCCEEDED => {
                    tracing::info!(market_id = %market_id, transmitter = %info.transmitter, "the forwarder delivered the DON's report");
                    // (a call of ours in the transcript is one this member signed)
                    let ours = self
                        .txm
                        .as_ref()
                        .map_or(info.transmitter, |t| t.key().signer);
                    let detail = format!(
                        "delivered through the forwarder by member {}",
                        info.transmitter
                    );
                    return self
                        .finish_delivered(p, market_id, transcript, info.transmitter, ours, detail)
                        .await;
                }
                INVALID_RECEIVER => {
                    self.metrics.don_event("transmission", "invalid_receiver");
                    return self
                        .fail(
                            market,
                            market_id,
                            &format!("the forwarder marked receiver {receiver} INVALID_RECEIVER (it does not declare IReceiver through ERC-165); no transmission can succeed: deploy a receiver that does and set submit.receiver"),
                        )
                        .await;
                }
                NOT_ATTEMPTED | FAILED => {}
                other => {
                    return Err(Step::Transient(format!(
                        "the forwarder reports transmission state {other}, unknown to this node"
                    )));
                }
            }
            if Instant::now() < turn {
                tokio::time::sleep(Duration::from_millis(250).min(turn - Instant::now())).await;
                continue;
            }
            // f+1 signatures, leaving out signers the forwarder refused (a member whose
            // key is not in the forwarder's config): more than f+1 members may have signed
            // the agreed f+1 first, then any other signature held
            let mut pool: Vec<(Address, Bytes)> = agreed
                .signers
                .iter()
                .copied()
                .zip(agreed.signatures.iter().cloned())
                .collect();
            for (a, sig) in don.signatures(&agreed.execution_id, &agreed.digest) {
                if !pool.iter().any(|(b, _)| *b == a) {
                    pool.push((a, sig));
                }
            }
            let need = usize::from(don.config().f) + 1;
            let chosen: Vec<Bytes> = pool
                .into_iter()
                .filter(|(a, _)| !refused.contains(a))
                .take(need)
                .map(|(_, s)| s)
                .collect();
            if chosen.len() < need {
                waits += 1;
                if waits > 40 {
                    return Err(Step::Transient(format!(
                        "the forwarder refused signer(s) {refused:?} and this member holds fewer than f+1 = {need} other signatures on the agreed report"
                    )));
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
            let signed = SignedReport {
                raw: agreed.report.clone(),
                context: agreed.context.clone(),
                signatures: chosen,
            };
            let prepared = match p
                .submitter
                .prepare_signed(snapshot, market_id, &signed)
                .await
            {
                Ok(x) => x,
                Err(SubmitError::AlreadyResolved { .. }) => {
                    // the report may have landed between the two reads: read the state again
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    if self.resolved_on_chain(market, market_id).await?
                        && fwd
                            .getTransmissionInfo(receiver, agreed.execution_id, report_id)
                            .call()
                            .await
                            .map(|i| i.state != SUCCEEDED)
                            .unwrap_or(false)
                    {
                        self.store
                            .set_state(
                                market,
                                market_id,
                                Stage::Skipped,
                                Some("the market was resolved on chain by another report or resolver"),
                            )
                            .await?;
                        return Ok(());
                    }
                    continue;
                }
                Err(SubmitError::Reverted { reason, .. }) if reason.is_already_attempted() => {
                    // another member's transmission landed (the state read above may lag)
                    // or waits in the pending block, against which the pre-flight's
                    // `eth_call` runs (alloy's default): said once, then checked every
                    // 500 ms
                    if !told_pending {
                        told_pending = true;
                        tracing::info!(market_id = %market_id, "the forwarder already has this report, delivered or pending from another member: waiting for it to be mined");
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
                Err(SubmitError::Reverted { reason, .. }) if reason.invalid_signer().is_some() => {
                    match reason.invalid_signer() {
                        Some(a) if !refused.contains(&a) => {
                            self.metrics
                                .don_event("signature_refused", "forwarder_unknown_signer");
                            tracing::warn!(market_id = %market_id, signer = %a, "the forwarder does not know this member's key: transmitting with other members' signatures (fix the forwarder's config or [don].members)");
                            refused.insert(a);
                            continue;
                        }
                        _ => {
                            return Err(Step::Transient(format!(
                                "the forwarder refused a signature of the agreed report: {reason}"
                            )));
                        }
                    }
                }
                // an authorization the operator can still grant: another transmission
                // may get past it; any other error of the receiver ends the round
                Err(SubmitError::Reverted { reason, .. }) if reason.is_resolver_unauthorized() => {
                    self.metrics.don_event("transmission", "failed");
                    return Err(Step::Transient(format!(
                        "the receiver refused the report ({reason}); retried while that can change"
                    )));
                }
                Err(e) if e.is_transient() => return Err(Step::Transient(e.to_string())),
                Err(e) => {
                    self.metrics.don_event("transmission", "refused");
                    return self.fail(market, market_id, &e.to_string()).await;
                }
            };
            if let Some(d) = transcript.don.as_mut() {
                d.transmitter = Some(don.address());
            }
            transcript.submission = Some(SubmissionRecord::from(&prepared));
            self.save_transcript(market, market_id, &transcript).await?;
            let Some(txm) = &self.txm else {
                return Err(Step::Transient("no transaction manager".into()));
            };
            tracing::info!(market_id = %market_id, rank, "transmitting the DON's report");
            self.metrics.don_event("transmission", "sent");
            return self
                .send_and_follow(txm, p, market_id, &prepared, None)
                .await;
        }
    }

    /// Ends a member's round as delivered through the forwarder by member `by` (its
    /// transmission state is SUCCEEDED): the transcript names `by` as the transmitter,
    /// and its call, if any, was signed by `from`.
    pub(super) async fn finish_delivered(
        &self,
        p: &Pipeline,
        market_id: U256,
        mut t: Transcript,
        by: Address,
        from: Address,
        detail: String,
    ) -> Result<(), Step> {
        self.metrics.don_event("transmission", "succeeded");
        if let Some(d) = t.don.as_mut() {
            d.transmitter = Some(by);
        }
        let confirmation = ConfirmationRecord {
            status: ConfirmationStatus::Confirmed,
            tx_hash: None,
            block_number: None,
            resolution: None,
            resolver: p.submitter.report_route().map(|(_, receiver)| receiver),
            gas_used: None,
            detail: Some(detail),
        };
        self.finish_transcript(p, market_id, t, confirmation, from, Stage::Confirmed, None)
            .await
    }

    /// For a DON member whose own transmission was mined without resolving the market:
    /// the member that delivered the DON's agreed report instead, with the round's
    /// stored transcript, when the forwarder says the round's report was delivered (two
    /// members' transmissions raced, and the other landed first). `None` for a node that
    /// is not a member, a round without a readable transcript, or a report the
    /// forwarder has not seen delivered.
    pub(super) async fn delivered_by_another_member(
        &self,
        p: &Pipeline,
        market_id: U256,
    ) -> Result<Option<(Address, Transcript)>, Step> {
        if self.don.is_none() {
            return Ok(None);
        }
        let Some((forwarder, receiver)) = p.submitter.report_route() else {
            return Ok(None);
        };
        let stored = self.store.get(p.market, market_id).await?;
        let Some(t) = stored
            .and_then(|r| r.outcome)
            .and_then(|o| serde_json::from_value::<Transcript>(o).ok())
        else {
            return Ok(None);
        };
        let Some(execution_id) = t.don.as_ref().map(|d| d.execution_id) else {
            return Ok(None);
        };
        let report_id = FixedBytes::<2>(p.submitter.metadata().report_id.0);
        let info = IKeystoneForwarder::new(forwarder, self.provider.clone())
            .getTransmissionInfo(receiver, execution_id, report_id)
            .call()
            .await
            .map_err(|e| Step::Transient(format!("forwarder getTransmissionInfo: {e}")))?;
        Ok((info.state == SUCCEEDED).then_some((info.transmitter, t)))
    }
}
