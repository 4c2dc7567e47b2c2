//! The chain side of a replay: what `getMarket`, the `MarketResolved` log and its
//! transaction's calldata say happened to a market.

use super::*;
use cresolver_core::MarketId;
use cresolver_core::RoundKey;

// ─── The chain side ─────────────────────────────────────────────────────────────────

/// A report as it went (or would go) on chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReportView {
    /// The market's id.
    pub market_id: MarketId,
    /// Every registered worker, in registration order.
    pub workers: Vec<Address>,
    /// Each worker's reward weight, aligned with `workers`.
    pub weights: Vec<U256>,
    /// `(resQuality, srcQuality, analysisDepth)` per worker.
    pub dim_scores: Vec<u8>,
    /// YES (`true`) or NO.
    pub resolution: bool,
}

impl ReportView {
    /// The report of a tally.
    pub fn from_tally(t: &TallyRecord) -> Self {
        Self {
            market_id: t.market_id,
            workers: t.workers.iter().map(|w| w.address).collect(),
            weights: t.workers.iter().map(|w| U256::from(w.weight)).collect(),
            dim_scores: t
                .workers
                .iter()
                .flat_map(|w| {
                    [
                        w.scores.res_quality,
                        w.scores.src_quality,
                        w.scores.analysis_depth,
                    ]
                })
                .collect(),
            resolution: t.resolution,
        }
    }

    /// Decodes CRE report body bytes.
    pub fn from_report_bytes(bytes: &[u8]) -> Option<Self> {
        let r = decode_report(bytes).ok()?;
        Some(Self {
            market_id: r.market_id,
            workers: r.workers,
            weights: r.weights,
            dim_scores: r.dim_scores,
            resolution: r.resolution,
        })
    }

    /// The report a resolving transaction carried: `resolveMarket` calldata, or a
    /// forwarder `report(receiver, rawReport, …)`. `None` for any other call.
    pub fn from_calldata(input: &[u8]) -> Option<Self> {
        if input.starts_with(&ICREsolverMarket::resolveMarketCall::SELECTOR) {
            let c = ICREsolverMarket::resolveMarketCall::abi_decode(input).ok()?;
            return Some(Self {
                market_id: c.marketId.into(),
                workers: c.workers,
                weights: c.weights,
                dim_scores: c.dimScores,
                resolution: c.resolution,
            });
        }
        if input.starts_with(&IKeystoneForwarder::reportCall::SELECTOR) {
            let c = IKeystoneForwarder::reportCall::abi_decode(input).ok()?;
            let (_, body) = split_raw_report(&c.rawReport).ok()?;
            return Self::from_report_bytes(body);
        }
        None
    }
}

/// What happened on chain to a market.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OnChain {
    /// `false` when the chain was not consulted (`--offline`).
    pub checked: bool,
    /// Whether the market is resolved at the head.
    pub resolved: bool,
    /// Its resolution, when resolved.
    pub resolution: Option<bool>,
    /// The transaction of the `MarketResolved` log.
    pub tx: Option<B256>,
    /// The log's block.
    pub block: Option<u64>,
    /// The resolver the log names.
    pub resolver: Option<Address>,
    /// The report the resolving transaction carried, when its call is recognised.
    pub report: Option<ReportView>,
    /// What could not be found out (no log, an unknown call), when something could not.
    pub note: Option<String>,
}

impl OnChain {
    pub(super) fn unchecked() -> Self {
        Self {
            checked: false,
            resolved: false,
            resolution: None,
            tx: None,
            block: None,
            resolver: None,
            report: None,
            note: None,
        }
    }

    /// `YES`, `NO`, `unresolved` or `not checked`.
    pub fn label(&self) -> String {
        match (self.checked, self.resolved, self.resolution) {
            (false, _, _) => "not checked".into(),
            (true, true, Some(r)) => yes_no(r).into(),
            (true, true, None) => "resolved".into(),
            (true, false, _) => "unresolved".into(),
        }
    }
}

pub(super) fn yes_no(b: bool) -> &'static str {
    if b { "YES" } else { "NO" }
}

/// Reads the market's fate: resolved or not (now), and when resolved the
/// `MarketResolved` log (searched from `from_block`) and the report its transaction
/// carried.
pub async fn onchain_outcome(
    provider: &DynProvider,
    round: RoundKey,
    from_block: u64,
    max_range: u64,
) -> Result<OnChain, ReplayError> {
    let (market, market_id) = (round.market, round.id.get());
    let m = ICREsolverMarket::new(market, provider.clone())
        .getMarket(market_id)
        .call()
        .await
        .map_err(|e| {
            ReplayError::Rpc(cresolver_chain::RpcFailure::new(
                format!("getMarket({market_id}) on {market}"),
                e,
            ))
        })?;
    let mut out = OnChain {
        checked: true,
        resolved: m.resolved,
        resolution: m.resolved.then_some(m.resolution),
        ..OnChain::unchecked()
    };
    if !m.resolved {
        return Ok(out);
    }
    let head = provider
        .get_block_number()
        .await
        .map_err(|e| ReplayError::Rpc(cresolver_chain::RpcFailure::new("eth_blockNumber", e)))?;
    let filter = Filter::new()
        .address(market)
        .event_signature(ICREsolverMarket::MarketResolved::SIGNATURE_HASH)
        .topic1(B256::from(market_id));
    let logs = scan_logs(
        provider,
        &filter,
        from_block.min(head),
        head,
        max_range,
        &mut |_| {},
    )
    .await?;
    let Some(log) = logs.first() else {
        out.note = Some(format!(
            "resolved, but no MarketResolved log since block {from_block}: weights not compared"
        ));
        return Ok(out);
    };
    if let Ok(ev) = ICREsolverMarket::MarketResolved::decode_log(&log.inner) {
        out.resolver = Some(ev.data.resolver);
        out.resolution = Some(ev.data.resolution);
    }
    out.block = log.block_number;
    out.tx = log.transaction_hash;
    if let Some(tx) = log.transaction_hash {
        match provider.get_transaction_by_hash(tx).await {
            Ok(Some(t)) => {
                out.report = ReportView::from_calldata(t.input());
                if out.report.is_none() {
                    out.note = Some(format!(
                        "resolved by transaction {tx} through a call that is neither resolveMarket nor a forwarder report: weights not compared"
                    ));
                }
            }
            Ok(None) => out.note = Some(format!("transaction {tx} not found")),
            Err(e) => {
                return Err(ReplayError::Rpc(cresolver_chain::RpcFailure::new(
                    format!("eth_getTransactionByHash({tx})"),
                    e,
                )));
            }
        }
    }
    Ok(out)
}

/// Compares the transcript's market with the chain's at `block`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChainCheck {
    /// The block the market was read at.
    pub block: u64,
    /// The transcript's worker set, order, reputations and question match the chain.
    pub consistent: bool,
    /// Each difference (or the read failure), one line each.
    pub differences: Vec<String>,
}

/// Reads the market at `block` (historic `eth_call`) and compares it with the
/// transcript's snapshot. A read failure (e.g. state pruned on a non-archive node) is
/// reported in `differences`, not as an error.
pub async fn chain_check(
    provider: &DynProvider,
    t: &Transcript,
    block: u64,
    multicall: Option<Address>,
) -> ChainCheck {
    let snap = match read_market(
        provider,
        RoundKey::new(t.market.market, t.market.market_id),
        Some(block),
        multicall,
    )
    .await
    {
        Ok(s) => s,
        Err(e) => {
            return ChainCheck {
                block,
                consistent: false,
                differences: vec![format!(
                    "cannot read the market at block {block}: {e} (historic state needs an archive RPC)"
                )],
            };
        }
    };
    let differences = snapshot_differences(t, &snap);
    ChainCheck {
        block,
        consistent: differences.is_empty(),
        differences,
    }
}

pub(super) fn snapshot_differences(t: &Transcript, snap: &MarketSnapshot) -> Vec<String> {
    let mut d = Vec::new();
    if snap.question != t.market.question {
        d.push("question differs".to_string());
    }
    let rec: Vec<Address> = t.market.workers.iter().map(|w| w.address).collect();
    let chain: Vec<Address> = snap.workers.iter().map(|w| w.address).collect();
    if rec != chain {
        d.push(format!(
            "worker set differs: transcript {} worker(s), chain {} worker(s) (or another order)",
            rec.len(),
            chain.len()
        ));
        return d;
    }
    for (i, (r, c)) in t.market.workers.iter().zip(&snap.workers).enumerate() {
        if r.reputation != c.reputation {
            d.push(format!(
                "worker #{} {}: reputation differs (transcript {:?}, chain {:?})",
                i + 1,
                r.address,
                r.reputation,
                c.reputation
            ));
        }
    }
    d
}
