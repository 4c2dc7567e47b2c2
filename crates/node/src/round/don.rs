//! The `agree` and `transmit` steps of a DON member's round. After its own round the
//! member turns the outcome (or its missed quorum) into its signed observation and
//! agrees on one report with the other members (`cresolver_don`); the agreement goes
//! into the transcript. It then delivers the report through the KeystoneForwarder: the
//! leader at once, every other member after its rank's delay while the forwarder says
//! nobody succeeded (`cresolver_submit::forwarder`). A member whose own transmission
//! was mined after another member's delivery (and reverted) ends the round confirmed,
//! delivered by that member.

use super::{Carried, Ending, Next, Round, StepError, Steps};
use crate::don::{don_record, observe, observe_failed};
use alloy::primitives::{Address, Bytes};
use cresolver_core::Reputation;
use cresolver_core::don::{Aggregate, ReportSpec, build_report, execution_id};
use cresolver_don::{Agreed, Don, DonConfig, Job, ReportRefusal};
use cresolver_metrics::{DonEvent, TimedStage, TransmissionEvent};
use cresolver_pipeline::transcript::Transcript;
use cresolver_pipeline::transcript::{ConfirmationRecord, ConfirmationStatus, SubmissionRecord};
use cresolver_store::Stage;
use cresolver_submit::forwarder::{Delivery, TransmissionState, TransmitError, Transmitted};
use cresolver_submit::txm::TxManager;
use std::sync::Arc;
use std::time::Instant;

/// A transmission error as a step: fatal ones fail the round, the others are retried.
fn transmit_step(e: TransmitError) -> StepError {
    if e.is_fatal() {
        StepError::fail_with(e)
    } else {
        StepError::retry_with(e)
    }
}

/// Where a member's job is agreed: the member, its DON, and the request's transaction.
struct JobAt<'a> {
    member: Address,
    dc: &'a DonConfig,
    request_tx: alloy::primitives::B256,
}

impl Steps<'_> {
    /// Agrees on the round's report with the other members.
    pub(super) async fn agree(
        &self,
        round: &mut Round<'_>,
        don: &Don,
        carried: Carried<Vec<Reputation>>,
    ) -> Result<Next, StepError> {
        let Carried {
            what: reputations,
            mut transcript,
        } = carried;
        let Some(request_tx) = round.rec.request_tx else {
            self.save_transcript(round, &transcript).await?;
            return Err(StepError::fail(
                "a DON agrees on on-chain requests only: this round has no ResolutionRequested log (POST /resolve is not agreed by a DON); request the resolution on the market",
            ));
        };
        let dc = don.config().clone();
        let at = JobAt {
            member: don.address(),
            dc: &dc,
            request_tx,
        };
        let Some(job) = self.job(round, &transcript, at, reputations) else {
            self.save_transcript(round, &transcript).await?;
            return Ok(Next::End(Ending::Untouched));
        };
        let started = Instant::now();
        // the transcript with the member's own outcome is stored while the consensus runs
        // (the consensus polled first: the observation it sends is what the others wait
        // for, the transcript's encoding is not)
        let (agreed, saved) = tokio::join!(
            don.agree_observed(job),
            self.save_transcript(round, &transcript)
        );
        saved?;
        let (agreed, own) = agreed.map_err(StepError::retry_with)?;
        self.metrics
            .observe_stage(TimedStage::DonAgreement, started.elapsed().as_secs_f64());
        transcript.don = Some(don_record(don, &own.observation, &agreed));
        // (the agreement goes into the stored transcript with the transmission's first
        // look: it is in the DON's journal already)
        Ok(Next::Transmit(Carried::next(agreed, transcript)))
    }

    /// The DON's job for the round: its execution, the member's own observation and
    /// how a decided aggregate becomes the report. `None`: the round has no outcome
    /// and no failed stage to observe.
    fn job(
        &self,
        round: &Round<'_>,
        transcript: &Transcript,
        at: JobAt<'_>,
        reputations: Vec<Reputation>,
    ) -> Option<Job> {
        let JobAt {
            member,
            dc,
            request_tx,
        } = at;
        let key = round.key();
        let (market, market_id) = (key.market, key.id);
        let exec = execution_id(self.chain_id, key, request_tx);
        let binding = (dc.don_id, dc.config_version, exec, market, market_id);
        let own = match (&transcript.outcome, &transcript.resolve) {
            (Some(outcome), _) => observe(outcome, binding, member),
            (None, Some(stage)) => observe_failed(stage, binding, member),
            (None, None) => return None,
        };
        let spec = ReportSpec {
            market_id,
            execution_id: exec,
            don_id: dc.don_id,
            config_version: dc.config_version,
            quorum: round.p.workflow.quorum.rule,
            tie: round.p.workflow.tally.tie,
            reputations,
            metadata: round.p.submitter.metadata().clone(),
        };
        let build = move |agg: &Aggregate| -> Result<Bytes, ReportRefusal> {
            Ok(build_report(&spec, agg)?)
        };
        // the first transmitter (the deciding round's leader) estimates the receiver's
        // gas of the decided report while the report signatures are collected
        let on_decided = round.p.submitter.estimates_ahead().map(|ahead| {
            let tell: cresolver_don::job::OnDecided = Arc::new(move |report: &Bytes, leader| {
                if leader == member {
                    ahead.start(report);
                }
            });
            tell
        });
        Some(Job {
            execution_id: exec,
            round: key,
            observation: own,
            workers: transcript
                .market
                .workers
                .iter()
                .map(|w| w.address)
                .collect(),
            build: Arc::new(build),
            on_decided,
        })
    }

    /// Delivers an agreed report unless the forwarder says someone did.
    pub(super) async fn transmit(
        &self,
        round: &mut Round<'_>,
        don: &Don,
        txm: &TxManager,
        carried: Carried<Agreed>,
    ) -> Result<Next, StepError> {
        let Carried {
            what: agreed,
            mut transcript,
        } = carried;
        let agreed = &agreed;
        let market_id = round.market_id;
        let rank = don.transmit_rank(agreed);
        let wait = don.config().transmit_delay.saturating_mul(rank);
        if rank == 0 {
            tracing::debug!(market_id = %market_id, "agreed: this member transmits first");
        } else {
            tracing::info!(market_id = %market_id, rank, wait_ms = wait.as_millis() as u64, "agreed: another member transmits first; this one transmits only if the forwarder has not seen the report by then");
        }
        // the agreed f+1 signatures first, then any other signature held
        let signatures = || {
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
            pool
        };
        let delivery = Delivery {
            execution_id: agreed.execution_id,
            raw: agreed.report.clone(),
            context: agreed.context.clone(),
            need: usize::from(don.config().f) + 1,
            turn: Instant::now() + wait,
            signatures: &signatures,
        };
        let looked = Instant::now();
        let transmit =
            round
                .p
                .submitter
                .transmit(&transcript.market, market_id, &delivery, self.metrics);
        let (saved, transmitted, view) = if rank == 0 {
            // the leader reads the chain for its transaction ahead, and stores the
            // transcript with the agreement, while the forwarder is looked at (a failed
            // read is only a read not made ahead: the submission makes it)
            let view = async { txm.chain_view().await.ok() };
            tokio::join!(self.save_transcript(round, &transcript), transmit, view)
        } else {
            // a later transmitter stores it once it has looked (after a pause, as the
            // first transmitter's pre-flight and transaction run): nothing it does before
            // rests on the stored transcript (a round that restarts reads again, and the
            // agreement is in the DON's journal), and the first transmitter's path is the
            // one the market waits for
            let transmitted = transmit.await;
            (
                self.save_transcript(round, &transcript).await,
                transmitted,
                None,
            )
        };
        saved?;
        tracing::debug!(market_id = %market_id, rank, ms = looked.elapsed().as_secs_f64() * 1e3, "transmission: the forwarder looked at and the report pre-flighted");
        match transmitted {
            Ok(Transmitted::Delivered(by)) => {
                tracing::info!(market_id = %market_id, transmitter = %by, "the forwarder delivered the DON's report");
                let detail = format!("delivered through the forwarder by member {by}");
                round.transcript = Some(transcript);
                // (a call of ours in the transcript is one this member signed)
                Ok(self.delivered(round, by, txm.key().signer, detail))
            }
            Ok(Transmitted::ResolvedElsewhere) => Ok(Ending::skipped(
                "the market was resolved on chain by another report or resolver",
            )),
            Ok(Transmitted::Send(prepared)) => {
                if let Some(d) = transcript.don.as_mut() {
                    d.transmitter = Some(don.address());
                }
                don.transmitted(&agreed.execution_id, don.address());
                transcript.submission = Some(SubmissionRecord::from(&*prepared));
                // as a single node's submission: the transaction manager persists the
                // call before it signs, and the ending stores the transcript with it and
                // the confirmation (after a restart, from the reservation)
                round.transcript = Some(transcript);
                tracing::info!(market_id = %market_id, rank, "transmitting the DON's report");
                self.metrics
                    .don_event(DonEvent::Transmission(TransmissionEvent::Sent));
                self.send(round, txm, &prepared, view).await
            }
            Err(e) => {
                if matches!(e, TransmitError::InvalidReceiver(_)) {
                    self.metrics
                        .don_event(DonEvent::Transmission(TransmissionEvent::InvalidReceiver));
                }
                Err(transmit_step(e))
            }
        }
    }

    /// Ends a member's round as delivered through the forwarder by member `by` (its
    /// transmission state is SUCCEEDED): the transcript names `by` as the transmitter,
    /// and its call, if any, was signed by `from`.
    pub(super) fn delivered(
        &self,
        round: &mut Round<'_>,
        by: Address,
        from: Address,
        detail: String,
    ) -> Next {
        self.metrics
            .don_event(DonEvent::Transmission(TransmissionEvent::Succeeded));
        if let Some(d) = round.transcript.as_mut().and_then(|t| t.don.as_mut()) {
            d.transmitter = Some(by);
            if let Some(don) = self.submission.don() {
                don.transmitted(&d.execution_id, by);
            }
        }
        Next::End(Ending::Concluded {
            confirmation: ConfirmationRecord {
                status: ConfirmationStatus::Confirmed,
                tx_hash: None,
                block_number: None,
                resolution: None,
                resolver: round
                    .p
                    .submitter
                    .report_route()
                    .map(|(_, receiver)| receiver),
                gas_used: None,
                detail: Some(detail),
            },
            from,
            stage: Stage::Confirmed,
            reason: None,
        })
    }

    /// For a DON member whose own transmission was mined without resolving the market:
    /// the member that delivered the DON's agreed report instead, when the forwarder
    /// says the round's report was delivered (two members' transmissions raced, and the
    /// other landed first). `None` for a node that is not a member, a round without an
    /// agreement in its transcript, or a report the forwarder has not seen delivered.
    pub(super) async fn delivered_by_another_member(
        &self,
        round: &Round<'_>,
    ) -> Result<Option<Address>, StepError> {
        if !self.submission.is_don() {
            return Ok(None);
        }
        let Some(execution_id) = round
            .transcript
            .as_ref()
            .and_then(|t| t.don.as_ref())
            .map(|d| d.execution_id)
        else {
            return Ok(None);
        };
        let t = match round.p.submitter.transmission(execution_id).await {
            Ok(t) => t,
            Err(TransmitError::NoRoute) => return Ok(None),
            Err(e) => return Err(StepError::retry_with(e)),
        };
        Ok((t.state == TransmissionState::Succeeded).then_some(t.transmitter))
    }
}
