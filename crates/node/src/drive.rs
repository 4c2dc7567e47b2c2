//! How the node drives one round it holds: from the stored state through discovery,
//! the workers, the evaluation and the submission to a confirmed (or failed) round,
//! persisting each step before its side effect.

use super::*;
use tracing::Instrument;

/// A span around one step of a round (target `cresolver::step`, fields `step` and
/// `market_id`): a debug log shows it, and `cargo bench --bench node` takes each step's
/// time, and when a round concluded, from it.
pub(crate) fn step(name: &'static str, market_id: U256) -> tracing::Span {
    tracing::debug_span!(target: "cresolver::step", "step", step = name, market_id = %market_id)
}

impl Node {
    pub(super) async fn drive(
        &self,
        market: Address,
        market_id: U256,
        halt: &Halt,
    ) -> Result<(), Step> {
        let Some(p) = self.pipeline(market) else {
            return self
                .fail(market, market_id, "no workflow watches this market")
                .await;
        };
        let Some(rec) = self.store.get(market, market_id).await? else {
            return Ok(());
        };
        if rec.state.is_final() {
            return Ok(());
        }
        // A nonce is reserved for this round: follow it, never sign a second payload.
        // (The round's pending reservations under every key, read once.)
        let pending = match &self.txm {
            Some(_) => {
                self.store
                    .pending_nonces_of_round(market, market_id)
                    .await?
            }
            None => vec![],
        };
        if let Some(txm) = &self.txm
            && let Some((_, n)) = pending
                .iter()
                .filter(|(key, _)| *key == txm.key())
                .min_by_key(|(_, n)| n.nonce)
        {
            tracing::info!(market_id = %market_id, nonce = n.nonce, state = rec.state.as_str(), "resuming a reserved transaction");
            return self.follow(p, market_id, n.nonce).await;
        }
        // A nonce another node's key reserved (a takeover in a cluster of different
        // keys): its signed bytes are re-broadcast and followed before this node signs
        // anything of its own, for at most `foreign_wait` after the reservation.
        if let Some(txm) = &self.txm {
            for (key, n) in pending {
                if key == txm.key() {
                    continue;
                }
                match txm.check_foreign(key, &n).await.map_err(tx_step)? {
                    cresolver_submit::txm::Foreign::Mined(receipt) => {
                        tracing::info!(market_id = %market_id, signer = %key.signer, nonce = n.nonce, "the previous holder's transaction is mined");
                        return self.conclude(p, market_id, &receipt).await;
                    }
                    cresolver_submit::txm::Foreign::Lost => {}
                    cresolver_submit::txm::Foreign::Pending => {
                        // since it was reserved, or reopened by the finality watch
                        let age =
                            cresolver_store::now().saturating_sub(n.created_at.max(n.updated_at));
                        if age < self.foreign_wait().as_secs() {
                            return Err(Step::Transient(format!(
                                "waiting for the resolution that key {} signed at nonce {} (re-broadcast), {age} s after it was reserved or reopened",
                                key.signer, n.nonce
                            )));
                        }
                        tracing::warn!(market_id = %market_id, signer = %key.signer, nonce = n.nonce, age, "the previous holder's transaction was not mined in time: this node signs its own (a pre-flight shows whether the market is still open; should both land, the second reverts on chain with AlreadyResolved)");
                    }
                }
            }
        }
        // A nonce of this round mined while the round was not concluded: the process
        // stopped, or a store write failed, between the two writes. The round concludes
        // from that receipt, never as "resolved on chain by someone else" (which would
        // leave our resolution unwatched by the finality watch).
        if rec.state == Stage::Submitted
            && let Some(receipt) = self.mined_receipt_of_round(market, market_id).await?
        {
            tracing::info!(market_id = %market_id, tx = %receipt.transaction_hash, "the round's transaction was mined before the round concluded: concluding it now");
            return self
                .conclude(p, market_id, &receipt)
                .instrument(step("conclude", market_id))
                .await;
        }
        let span_started = Instant::now();
        // One judging point: the request's block. A manual request has no request log; it
        // is judged at the head block of its first run, which is kept for every resume.
        let block = match rec.request_block {
            Some(b) => b,
            None => {
                let head = self
                    .provider
                    .get_block_number()
                    .await
                    .map_err(|e| Step::Transient(format!("eth_blockNumber: {e}")))?;
                self.store
                    .set_request_block(market, market_id, head)
                    .await?;
                tracing::info!(market_id = %market_id, block = head, "manual request: judged at this block from now on");
                head
            }
        };
        // The market at the request block is read together with its state at the head
        // (one round trip); nobody is asked about a market that is already resolved.
        let multicall = self.cfg.chain.multicall_address;
        let (at_head, read) = async {
            tokio::join!(
                resolved_at_head(&self.provider, market, market_id),
                read_market(&self.provider, market, market_id, Some(block), multicall),
            )
        }
        .instrument(step("read", market_id))
        .await;
        match at_head {
            Ok(false) => {}
            Ok(true) => {
                self.store
                    .set_state(
                        market,
                        market_id,
                        Stage::Skipped,
                        Some("the market is already resolved on chain"),
                    )
                    .await?;
                return Ok(());
            }
            Err(ReadError::Rpc(e)) => {
                return Err(Step::Transient(format!("reading the market: {e}")));
            }
            Err(e) => return self.fail(market, market_id, &e.to_string()).await,
        }
        let read = match read {
            // A full (non-archive) endpoint has pruned the state of an old block: the
            // market's terms and workers are read at the head instead (they do not change
            // after the request); the round is still judged at the request block's time.
            Err(ReadError::Rpc(e)) if cresolver_chain::is_pruned_state(&e) => {
                tracing::warn!(market_id = %market_id, block, error = %e, "the endpoint has no state at the request block (pruned): reading the market at the head");
                read_market(&self.provider, market, market_id, None, multicall).await
            }
            other => other,
        };
        let snapshot = match read {
            Ok(s) => s,
            Err(ReadError::Rpc(e)) => {
                return Err(Step::Transient(format!(
                    "reading the market at block {block}: {e}"
                )));
            }
            Err(e) => return self.fail(market, market_id, &e.to_string()).await,
        };
        let ctx = LiveContext {
            provider: &self.provider,
            multicall: self.cfg.chain.multicall_address,
            discovery: &self.discovery,
            http: &self.http,
        };
        let (found, mut input) = match collect_input(&ctx, &snapshot)
            .instrument(step("discover", market_id))
            .await
        {
            Ok(x) => x,
            Err(LiveError::Rpc(e)) => return Err(Step::Transient(e)),
            Err(e) => return self.fail(market, market_id, &e.to_string()).await,
        };
        if snapshot.block != block {
            // read at the head (pruned state): still judged at the request block's time
            input.reference_time =
                match cresolver_pipeline::live::block_time(&self.provider, Some(block)).await {
                    Ok(t) => t,
                    Err(e) => return Err(Step::Transient(e.to_string())),
                };
        }
        self.metrics
            .observe_stage("discover", span_started.elapsed().as_secs_f64());
        if rec.state == Stage::Requested {
            self.store
                .set_state(market, market_id, Stage::Discovered, None)
                .await?;
        }
        // what an interrupted run of this attempt recorded: its workers and the LLM are
        // not asked again for a stage it passed
        let progress = self
            .store
            .progress(market, market_id, rec.attempt).await?
            .and_then(|v| match serde_json::from_value::<RoundProgress>(v) {
                Ok(p) => Some(p),
                Err(e) => {
                    tracing::warn!(market_id = %market_id, error = %e, "unreadable round progress: running the round from the start");
                    None
                }
            })
            .unwrap_or_default();
        if progress.resolve.is_some() {
            tracing::info!(market_id = %market_id, passed = progress.stage(), "resuming the round where it stopped; its workers are not asked again for the stages passed");
        }
        let (store, attempt, halted) = (self.store.clone(), rec.attempt, halt.clone());
        let persist = move |stage: RoundStage, progress: &RoundProgress| {
            let (state, point) = match stage {
                RoundStage::Answered => (Stage::Answered, "answered"),
                RoundStage::Challenged => (Stage::Challenged, "challenged"),
                RoundStage::Evaluated => (Stage::Evaluated, "evaluated"),
            };
            let value = serde_json::to_value(progress);
            let (store, halt) = (store.clone(), halted.clone());
            let fut: futures::future::BoxFuture<'static, bool> = Box::pin(async move {
                let saved = match value {
                    Ok(v) => store
                        .save_progress(market, market_id, attempt, state, &v)
                        .await
                        .map_err(Some),
                    Err(e) => {
                        tracing::error!(error = %e, "cannot encode round progress");
                        Err(None)
                    }
                };
                // nothing of the next stage happens before this one is persisted: on
                // `false` the engine stops before it, and the drive with the halt
                match saved {
                    Ok(()) => {
                        cresolver_submit::txm::crash_point(point);
                        true
                    }
                    // another node drives the round now
                    Err(Some(e)) if e.is_lease_lost() => {
                        halt.token.cancel();
                        false
                    }
                    // the round pauses and is retried
                    Err(Some(e)) => {
                        halt.pause(format!("cannot persist the round's progress: {e}"));
                        false
                    }
                    Err(None) => {
                        halt.pause("cannot encode the round's progress".into());
                        false
                    }
                }
            });
            fut
        };
        let round_started = Instant::now();
        let result = p
            .engine
            .run_resumable(&input, progress, &persist)
            .instrument(step("engine", market_id))
            .await;
        self.metrics
            .observe_stage("resolve+evaluate", round_started.elapsed().as_secs_f64());
        let mut transcript = Transcript {
            version: TRANSCRIPT_VERSION,
            chain_id: Some(self.chain_id),
            request: Some(RequestRecord {
                tx: rec.request_tx,
                block: rec.request_block,
            }),
            workflow: p.workflow.clone(),
            market: snapshot.clone(),
            discovery: found,
            question: input.question.clone(),
            reference_time: input.reference_time,
            resolve: None,
            outcome: None,
            submission: None,
            confirmation: None,
            transactions: None,
            finality: None,
            round: None,
            don: None,
        };
        let outcome = match result {
            Ok(o) => o,
            // the halt says why (a lost lease, or a pause that is retried)
            Err(RoundError::NotPersisted) => return Err(halt.step()),
            Err(e) => {
                if let RoundError::QuorumNotMet(stage) = &e {
                    transcript.resolve = Some((**stage).clone());
                }
                self.save_transcript(market, market_id, &transcript).await?;
                // a DON member whose own round missed its quorum still observes (the
                // failures it saw): the quorum is the aggregate's to decide
                if let (Some(don), RoundError::QuorumNotMet(_)) = (&self.don, &e) {
                    return self
                        .drive_don(don, p, &snapshot, &rec, &input, transcript)
                        .await;
                }
                return self.fail(market, market_id, &e.to_string()).await;
            }
        };
        for (stage, label) in outcome.worker_calls() {
            self.metrics.worker_call(stage, label);
        }
        let Some(don) = &self.don else {
            return self
                .submit_outcome(p, &snapshot, market_id, outcome, transcript)
                .await;
        };
        transcript.outcome = Some(outcome);
        self.save_transcript(market, market_id, &transcript).await?;
        self.drive_don(don, p, &snapshot, &rec, &input, transcript)
            .await
    }

    /// A round's outcome to the chain on this node's key: the pre-flight, with the
    /// transcript stored and the transaction manager's reads of the chain made while it
    /// runs (the pre-flight only reads; the progress stored at `evaluated` already keeps
    /// the workers' answers should the node stop here), then the submission.
    async fn submit_outcome(
        &self,
        p: &Pipeline,
        snapshot: &cresolver_chain::reader::MarketSnapshot,
        market_id: U256,
        outcome: cresolver_pipeline::round::RoundOutcome,
        mut transcript: Transcript,
    ) -> Result<(), Step> {
        let market = p.market;
        let tally = outcome.tally.clone();
        transcript.outcome = Some(outcome);
        let view = async {
            match &self.txm {
                // a failed read is only a read not made ahead: the submission makes it
                Some(txm) => txm.chain_view().await.ok(),
                None => None,
            }
        };
        let (prepared, saved, view) = tokio::join!(
            p.submitter
                .prepare(snapshot, &tally)
                .instrument(step("prepare", market_id)),
            self.save_transcript(market, market_id, &transcript),
            view,
        );
        saved?;
        let prepared = match prepared {
            Ok(x) => x,
            Err(SubmitError::AlreadyResolved { .. }) => {
                self.store
                    .set_state(
                        market,
                        market_id,
                        Stage::Skipped,
                        Some("the market was resolved on chain meanwhile"),
                    )
                    .await?;
                return Ok(());
            }
            Err(e) if e.is_transient() => return Err(Step::Transient(e.to_string())),
            Err(e) => return self.fail(market, market_id, &e.to_string()).await,
        };
        let Some(txm) = &self.txm else {
            // the call it would have sent stays in the transcript
            transcript.submission = Some(SubmissionRecord::from(&prepared));
            self.save_transcript(market, market_id, &transcript).await?;
            return self
                .fail(
                    market,
                    market_id,
                    "no signing key: the node can simulate but not submit",
                )
                .await;
        };
        self.send_and_follow(txm, p, market_id, &prepared, view)
            .await
    }

    /// Hands a prepared transaction of the round to the transaction manager (which
    /// persists its nonce before signing) and follows it to its end.
    pub(super) async fn send_and_follow(
        &self,
        txm: &TxManager,
        p: &Pipeline,
        market_id: U256,
        prepared: &cresolver_submit::Prepared,
        view: Option<cresolver_submit::txm::ChainView>,
    ) -> Result<(), Step> {
        let market = p.market;
        let nonce = match txm
            .submit_with(
                TxPayload {
                    market,
                    market_id,
                    to: prepared.to,
                    calldata: prepared.calldata.clone(),
                    gas_limit: prepared.gas_limit,
                },
                view,
            )
            .instrument(step("send", market_id))
            .await
        {
            Ok(n) => n,
            Err(e) if e.is_transient() => return Err(Step::Transient(e.to_string())),
            Err(TxError::Store(e)) => return Err(Step::from(e)),
            Err(e) => return self.fail(market, market_id, &e.to_string()).await,
        };
        self.follow(p, market_id, nonce).await
    }

    /// Follows the round's reserved nonce to its end: confirmed (our attempt mined deep
    /// enough and it resolved the market), skipped (someone else resolved it), or a fresh
    /// nonce when the key's nonce was used elsewhere (at most [`MAX_FRESH_NONCES`]).
    pub(super) async fn follow(
        &self,
        p: &Pipeline,
        market_id: U256,
        mut nonce: u64,
    ) -> Result<(), Step> {
        let Some(txm) = &self.txm else {
            return Err(Step::Transient("no transaction manager".into()));
        };
        let market = p.market;
        let mut fresh = 0;
        loop {
            let started = Instant::now();
            let outcome = txm.drive(nonce).instrument(step("mine", market_id)).await;
            self.metrics
                .observe_stage("submit", started.elapsed().as_secs_f64());
            match outcome {
                Ok(TxOutcome::Mined { receipt, .. }) => {
                    return self
                        .conclude(p, market_id, &receipt)
                        .instrument(step("conclude", market_id))
                        .await;
                }
                Ok(TxOutcome::Lost { nonce: lost }) => {
                    if self.resolved_on_chain(market, market_id).await? {
                        let reason = format!(
                            "nonce {lost} of the resolver key was used by another transaction, and the market is resolved on chain by someone else"
                        );
                        self.record_confirmation(
                            p,
                            market_id,
                            ConfirmationRecord {
                                status: ConfirmationStatus::Skipped,
                                tx_hash: None,
                                block_number: None,
                                resolution: None,
                                resolver: None,
                                gas_used: None,
                                detail: Some(reason.clone()),
                            },
                            txm.key().signer,
                            Stage::Skipped,
                            Some(&reason),
                        )
                        .await?;
                        return Ok(());
                    }
                    fresh += 1;
                    if fresh > MAX_FRESH_NONCES {
                        return self.fail(
                            market,
                            market_id,
                            &format!("the resolver key's nonce was used by other transactions {MAX_FRESH_NONCES} times in a row: is another process signing with this key?"),
                        ).await;
                    }
                    let Some(rec) = self.store.nonce_record(txm.key(), lost).await? else {
                        return Err(Step::Transient(format!(
                            "nonce {lost} vanished from the store"
                        )));
                    };
                    // the same payload, re-simulated exactly as it will be sent
                    let call = alloy::rpc::types::TransactionRequest::default()
                        .from(txm.key().signer)
                        .to(rec.payload.to)
                        .input(rec.payload.calldata.clone().into());
                    if let Err(e) = self.provider.call(call).await {
                        match e.as_error_resp().and_then(|r| r.as_revert_data()) {
                            Some(d) => {
                                let r = cresolver_chain::decode_revert(&d);
                                return self
                                    .fail(
                                        market,
                                        market_id,
                                        &format!("re-simulation after a lost nonce reverted: {r}"),
                                    )
                                    .await;
                            }
                            None => {
                                return Err(Step::Transient(format!(
                                    "re-simulating after a lost nonce: {e}"
                                )));
                            }
                        }
                    }
                    tracing::warn!(market_id = %market_id, lost, "signing the resolution again with a fresh nonce");
                    nonce = match txm.submit(rec.payload).await {
                        Ok(n) => n,
                        Err(e) if e.is_transient() => return Err(Step::Transient(e.to_string())),
                        Err(TxError::Store(e)) => return Err(Step::from(e)),
                        Err(e) => return self.fail(market, market_id, &e.to_string()).await,
                    };
                }
                Err(e) if e.is_transient() => return Err(Step::Transient(e.to_string())),
                Err(TxError::Store(e)) => return Err(Step::from(e)),
                Err(e) => return self.fail(market, market_id, &e.to_string()).await,
            }
        }
    }

    /// The receipt of the round's newest mined transaction, under any key, if the chain
    /// still has it (one whose block a reorg removed is not mined any more: the round
    /// goes on as if it had none).
    async fn mined_receipt_of_round(
        &self,
        market: Address,
        market_id: U256,
    ) -> Result<Option<alloy::rpc::types::TransactionReceipt>, Step> {
        let history = self.store.tx_history(market, market_id).await?;
        let mined = history
            .iter()
            .rev()
            .filter(|(n, _)| n.state == cresolver_store::NonceState::Mined)
            .filter_map(|(n, _)| n.mined_tx);
        for tx in mined {
            match self.provider.get_transaction_receipt(tx).await {
                Ok(Some(r)) => return Ok(Some(r)),
                Ok(None) => {
                    tracing::warn!(market_id = %market_id, %tx, "the round's mined transaction is not on the chain any more (a reorg)");
                }
                Err(e) => {
                    return Err(Step::Transient(format!(
                        "eth_getTransactionReceipt {tx}: {e}"
                    )));
                }
            }
        }
        Ok(None)
    }

    pub(super) async fn resolved_on_chain(
        &self,
        market: Address,
        market_id: U256,
    ) -> Result<bool, Step> {
        cresolver_chain::bindings::ICREsolverMarket::new(market, self.provider.clone())
            .getMarket(market_id)
            .call()
            .await
            .map(|m| m.resolved)
            .map_err(|e| Step::Transient(format!("reading the market: {e}")))
    }

    /// Ends a round whose transaction was mined deep enough.
    pub(super) async fn conclude(
        &self,
        p: &Pipeline,
        market_id: U256,
        receipt: &alloy::rpc::types::TransactionReceipt,
    ) -> Result<(), Step> {
        let tx = receipt.transaction_hash;
        match p.submitter.confirm(market_id, receipt) {
            Ok(Confirmed {
                tx_hash,
                resolution,
                block_number,
                resolver,
                gas_used,
            }) => {
                tracing::info!(market_id = %market_id, tx = %tx_hash, block = block_number, resolution, "market resolved");
                self.record_confirmation(
                    p,
                    market_id,
                    ConfirmationRecord {
                        status: ConfirmationStatus::Confirmed,
                        tx_hash: Some(tx_hash),
                        block_number: Some(block_number),
                        resolution: Some(resolution),
                        resolver: Some(resolver),
                        gas_used: Some(gas_used),
                        detail: None,
                    },
                    receipt.from,
                    Stage::Confirmed,
                    None,
                )
                .await
            }
            Err(e) => {
                // A DON member's transmission that lost the race to another member's
                // delivery of the same report: the DON's report is delivered.
                if let Some((by, t)) = self.delivered_by_another_member(p, market_id).await? {
                    tracing::info!(market_id = %market_id, %tx, transmitter = %by, "the forwarder delivered the DON's report; this member's transmission of it was mined after it and reverted");
                    let detail = format!(
                        "delivered through the forwarder by member {by}; this member's transmission {tx} was mined after it and reverted ({e})"
                    );
                    return self
                        .finish_delivered(p, market_id, t, by, receipt.from, detail)
                        .await;
                }
                // Our transaction did not resolve it; maybe someone else did.
                let resolved = self.resolved_on_chain(p.market, market_id).await?;
                let (state, reason) = if resolved {
                    (
                        Stage::Skipped,
                        format!("resolved on chain by another transaction; ours: {e}"),
                    )
                } else {
                    (Stage::Failed, e.to_string())
                };
                tracing::warn!(market_id = %market_id, %tx, state = state.as_str(), %reason, "our transaction did not resolve the market");
                self.record_confirmation(
                    p,
                    market_id,
                    ConfirmationRecord {
                        status: ConfirmationStatus::Failed,
                        tx_hash: Some(tx),
                        block_number: None,
                        resolution: None,
                        resolver: None,
                        gas_used: None,
                        detail: Some(e.to_string()),
                    },
                    receipt.from,
                    state,
                    Some(&reason),
                )
                .await
            }
        }
    }

    /// Stores a round's transcript (written by serde; see `cresolver_pipeline::transcript`).
    pub(super) async fn save_transcript(
        &self,
        market: Address,
        market_id: U256,
        t: &Transcript,
    ) -> Result<(), Step> {
        let v = serde_json::to_value(t)
            .map_err(|e| Step::Transient(format!("cannot encode the transcript: {e}")))?;
        self.store
            .set_outcome(market, market_id, &v)
            .instrument(step("save_transcript", market_id))
            .await?;
        Ok(())
    }

    /// Ends a round in `state` with its stored transcript completed (see
    /// [`Self::finish_transcript`]); a round without a readable transcript only moves to
    /// `state`.
    pub(super) async fn record_confirmation(
        &self,
        p: &Pipeline,
        market_id: U256,
        confirmation: ConfirmationRecord,
        from: Address,
        state: Stage,
        reason: Option<&str>,
    ) -> Result<(), Step> {
        let market = p.market;
        let stored = self
            .store
            .get(market, market_id)
            .await?
            .and_then(|r| r.outcome);
        let t = match stored.map(serde_json::from_value::<Transcript>) {
            Some(Ok(t)) => Some(t),
            Some(Err(e)) => {
                tracing::warn!(market_id = %market_id, error = %e, "the stored transcript does not parse: the confirmation is not added to it");
                None
            }
            None => None,
        };
        let Some(t) = t else {
            self.store
                .set_state(market, market_id, state, reason)
                .await?;
            return Ok(());
        };
        self.finish_transcript(p, market_id, t, confirmation, from, state, reason)
            .await
    }

    /// Ends a round in `state`: the receipt's outcome, every transaction attempt and,
    /// when the transcript was stored before the pre-flight's gas was known, the call
    /// the round sent (`from` signed it; from its reservation) go into transcript `t`,
    /// written together with the state.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn finish_transcript(
        &self,
        p: &Pipeline,
        market_id: U256,
        mut t: Transcript,
        confirmation: ConfirmationRecord,
        from: Address,
        state: Stage,
        reason: Option<&str>,
    ) -> Result<(), Step> {
        let market = p.market;
        let history = self.store.tx_history(market, market_id).await?;
        if t.submission.is_none() {
            // the nonce whose attempt was mined, else the last one reserved
            let sent = history
                .iter()
                .find(|(n, _)| n.mined_tx.is_some() && n.mined_tx == confirmation.tx_hash)
                .or(history.last());
            t.submission = sent.map(|(n, _)| SubmissionRecord {
                to: n.payload.to,
                calldata: n.payload.calldata.clone(),
                gas_limit: n.payload.gas_limit,
                from,
                mode: p.submitter.mode(),
            });
        }
        t.confirmation = Some(confirmation);
        t.transactions = Some(cresolver_pipeline::transcript::transactions_json(&history));
        let v = serde_json::to_value(&t)
            .map_err(|e| Step::Transient(format!("cannot encode the transcript: {e}")))?;
        self.store
            .set_outcome_and_state(market, market_id, &v, state, reason)
            .instrument(step("save_transcript", market_id))
            .await?;
        Ok(())
    }

    pub(super) async fn fail(
        &self,
        market: Address,
        market_id: U256,
        reason: &str,
    ) -> Result<(), Step> {
        tracing::warn!(market_id = %market_id, %reason, "round failed");
        self.store
            .set_state(market, market_id, Stage::Failed, Some(reason))
            .await?;
        Ok(())
    }
}
