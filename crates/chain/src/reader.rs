//! Market reader: one consistent snapshot of a market — its terms, its registered
//! workers in registration order with their agent ids, stakes and on-chain reputation,
//! and whether the market contract is an operator of a worker's agent — all read at a
//! single block.
//!
//! With a Multicall3 address the reads take three `eth_call` round trips (market terms,
//! per-worker data, per-agent identity checks); without one the same calls are sent
//! concurrently. Everything the chain returns is untrusted: decoding is strict and the
//! values the tally relies on are validated, and every failure is a [`ReadError`].

use super::bindings::{ICREsolverMarket, IIdentityRegistry, IMulticall3};
use super::revert::{RevertReason, decode_revert};
use super::rpc_failure::{RpcCause, RpcFailure};
use alloy::eips::BlockId;
use alloy::primitives::{Address, Bytes, U256};
use alloy::providers::{DynProvider, Provider};
use alloy::rpc::types::TransactionRequest;
use alloy::sol_types::SolCall;
use cresolver_core::{MarketId, Reputation, RoundKey};
use serde::Serialize;
use std::collections::HashSet;

/// The market contract's `MAX_WORKERS`: a snapshot with more workers is refused.
pub const MAX_WORKERS: usize = 10;

/// Reputation averages are 0–100; anything above is refused.
pub const MAX_REPUTATION_AVERAGE: u64 = 100;

/// One registered worker of a market.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct WorkerInfo {
    /// The worker's address.
    pub address: Address,
    /// `workerAgentIds(marketId, worker)`; 0 is a valid id in the reference registry.
    pub agent_id: U256,
    /// `stakes(marketId, worker)`: what the worker staked to join, in wei.
    pub stake: U256,
    /// `getReputation(worker)`, validated to averages in [0, 100].
    pub reputation: Reputation,
    /// `isAuthorizedOrOwner(market, agentId)`: the market contract may operate the agent,
    /// so the market's `giveFeedback` for it reverts ("Self-feedback not allowed") and
    /// `resolveMarket` cannot succeed. `false` when the check itself failed.
    pub market_is_operator: bool,
}

/// A market as read at one block.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct MarketSnapshot {
    /// The market contract.
    pub market: Address,
    /// The market's id on that contract.
    pub market_id: MarketId,
    /// The question the market asks.
    pub question: String,
    /// The reward shared among the workers, in wei.
    pub reward_pool: U256,
    /// The market's deadline (unix seconds).
    pub deadline: U256,
    /// Who created the market.
    pub creator: Address,
    /// Whether the market is resolved.
    pub resolved: bool,
    /// The outcome once resolved (`true`: YES); `false` while unresolved.
    pub resolution: bool,
    /// The ERC-8004 identity registry the market's workers are registered in.
    pub identity_registry: Address,
    /// In registration (join) order.
    pub workers: Vec<WorkerInfo>,
    /// The block every read was made at.
    pub block: u64,
}

/// Why a read failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The market contract has no market of that id.
    #[error("market {0} does not exist")]
    MarketDoesNotExist(MarketId),
    /// The node could not answer (transport error, missing state, …).
    #[error("RPC error: {0}")]
    Rpc(RpcFailure),
    /// The chain answered with data that is not what a CREsolver market returns, or a
    /// call reverted.
    #[error("invalid chain data: {0}")]
    Invalid(String),
}

/// Whether the market is resolved at the head (one `getMarket` call): a round judged at
/// its request block checks this first, so nobody is asked about a market already done.
pub async fn resolved_at_head(provider: &DynProvider, round: RoundKey) -> Result<bool, ReadError> {
    resolved_at(provider, round, None).await
}

impl MarketSnapshot {
    /// The round the snapshot is of.
    pub fn key(&self) -> RoundKey {
        RoundKey {
            market: self.market,
            id: self.market_id,
        }
    }
}

/// Whether the market is resolved at `block` (`None`: the head).
pub async fn resolved_at(
    provider: &DynProvider,
    round: RoundKey,
    block: Option<u64>,
) -> Result<bool, ReadError> {
    let (market, market_id) = (round.market, round.id.get());
    let m = ICREsolverMarket::new(market, provider.clone());
    let call = m.getMarket(market_id);
    let call = match block {
        Some(b) => call.block(b.into()),
        None => call,
    };
    match call.call().await {
        Ok(t) if t.deadline.is_zero() => Err(ReadError::MarketDoesNotExist(round.id)),
        Ok(t) => Ok(t.resolved),
        Err(e) => match crate::revert_data(&e) {
            Some(data) => match crate::decode_revert(&data) {
                RevertReason::Market(
                    ICREsolverMarket::ICREsolverMarketErrors::MarketDoesNotExist(_),
                ) => Err(ReadError::MarketDoesNotExist(round.id)),
                other => Err(ReadError::Invalid(format!(
                    "getMarket reverted at {}: {}",
                    at_block(block),
                    other.name()
                ))),
            },
            None => Err(ReadError::Rpc(RpcFailure::new(
                format!("getMarket at {}", at_block(block)),
                e,
            ))),
        },
    }
}

/// Whether each of `markets` is resolved at `block` (`None`: the head), in one batch:
/// one `aggregate3` with `multicall`, else concurrent single calls. Each market gets its
/// own answer (a market that does not exist at the block is
/// [`ReadError::MarketDoesNotExist`]); the error is the batch's own failure.
pub async fn resolved_many(
    provider: &DynProvider,
    multicall: Option<Address>,
    markets: &[RoundKey],
    block: Option<u64>,
) -> Result<Vec<Result<bool, ReadError>>, ReadError> {
    if markets.is_empty() {
        return Ok(Vec::new());
    }
    let reader = Reader {
        provider,
        block: block.map_or(BlockId::latest(), BlockId::number),
        multicall,
    };
    let calls = markets
        .iter()
        .map(|k| {
            Call::new(
                k.market,
                ICREsolverMarket::getMarketCall {
                    marketId: k.id.get(),
                },
            )
        })
        .collect();
    let outcomes = reader.batch(calls).await?;
    if outcomes.len() != markets.len() {
        return Err(ReadError::Invalid(format!(
            "a batch of {} getMarket calls returned {} results",
            markets.len(),
            outcomes.len()
        )));
    }
    Ok(outcomes
        .into_iter()
        .zip(markets)
        .map(|(out, k)| match out {
            Err(CallFailure::Reverted(RevertReason::Market(
                ICREsolverMarket::ICREsolverMarketErrors::MarketDoesNotExist(_),
            ))) => Err(ReadError::MarketDoesNotExist(k.id)),
            other => {
                let t = required::<ICREsolverMarket::getMarketCall>("getMarket", other)?;
                if t.deadline.is_zero() {
                    Err(ReadError::MarketDoesNotExist(k.id))
                } else {
                    Ok(t.resolved)
                }
            }
        })
        .collect())
}

fn at_block(block: Option<u64>) -> String {
    block.map_or("the head".into(), |b| format!("block {b}"))
}

/// Reads a snapshot of `market_id` on `market` at `block` (`None`: the current block,
/// fetched once so that every read is made at the same block). With `multicall`, the
/// calls are batched through Multicall3 `aggregate3`.
pub async fn read_market(
    provider: &DynProvider,
    round: RoundKey,
    block: Option<u64>,
    multicall: Option<Address>,
) -> Result<MarketSnapshot, ReadError> {
    let market = round.market;
    let block = match block {
        Some(b) => b,
        None => provider
            .get_block_number()
            .await
            .map_err(|e| ReadError::Rpc(RpcFailure::new("eth_blockNumber", e)))?,
    };
    let reader = Reader {
        provider,
        block: BlockId::number(block),
        multicall,
    };
    let terms = reader.market_terms(round).await?;
    let mut workers = reader.worker_data(round, &terms.workers).await?;
    reader
        .mark_operators(round, terms.identity_registry, &mut workers)
        .await;
    let t = terms.market;
    Ok(MarketSnapshot {
        market,
        market_id: round.id,
        question: t.question,
        reward_pool: t.rewardPool,
        deadline: t.deadline,
        creator: t.creator,
        resolved: t.resolved,
        resolution: t.resolution,
        identity_registry: terms.identity_registry,
        workers,
        block,
    })
}

/// What the first round of reads returns: the market's terms, its workers and its
/// identity registry.
struct MarketTerms {
    /// `getMarket(marketId)`.
    market: <ICREsolverMarket::getMarketCall as SolCall>::Return,
    /// `getMarketWorkers(marketId)`, checked by [`check_worker_list`].
    workers: Vec<Address>,
    /// `identityRegistry()`.
    identity_registry: Address,
}

/// Refuses a worker list longer than [`MAX_WORKERS`] or naming a worker twice.
fn check_worker_list(market_id: MarketId, addresses: &[Address]) -> Result<(), ReadError> {
    if addresses.len() > MAX_WORKERS {
        return Err(ReadError::Invalid(format!(
            "market {market_id} lists {} workers (at most {MAX_WORKERS})",
            addresses.len()
        )));
    }
    let mut seen = HashSet::new();
    if let Some(dup) = addresses.iter().find(|a| !seen.insert(**a)) {
        return Err(ReadError::Invalid(format!(
            "market {market_id} lists worker {dup} twice"
        )));
    }
    Ok(())
}

/// The three calls of one worker in round 2: its agent id, stake and reputation.
fn worker_calls(round: RoundKey, worker: Address) -> [Call; 3] {
    let (market, market_id) = (round.market, round.id.get());
    [
        Call::new(
            market,
            ICREsolverMarket::workerAgentIdsCall {
                marketId: market_id,
                worker,
            },
        ),
        Call::new(
            market,
            ICREsolverMarket::stakesCall {
                marketId: market_id,
                worker,
            },
        ),
        Call::new(market, ICREsolverMarket::getReputationCall { worker }),
    ]
}

/// Validates `getReputation`'s averages (untrusted) into the tally's [`Reputation`].
fn reputation(
    worker: Address,
    rep: &ICREsolverMarket::getReputationReturn,
) -> Result<Reputation, ReadError> {
    let average = |name: &str, v: U256| -> Result<f64, ReadError> {
        match u64::try_from(v) {
            Ok(x) if x <= MAX_REPUTATION_AVERAGE => Ok(x as f64),
            _ => Err(ReadError::Invalid(format!(
                "reputation {name} of {worker} is {v} (averages are 0-{MAX_REPUTATION_AVERAGE})"
            ))),
        }
    };
    let count = u64::try_from(rep.count).map_err(|_| {
        ReadError::Invalid(format!(
            "reputation count of {worker} is {} (does not fit 64 bits)",
            rep.count
        ))
    })?;
    Ok(Reputation {
        res_quality: average("resQuality", rep.resQuality)?,
        src_quality: average("srcQuality", rep.srcQuality)?,
        analysis_depth: average("analysisDepth", rep.analysisDepth)?,
        count,
    })
}

/// One view call: target and calldata.
struct Call {
    target: Address,
    data: Bytes,
}

impl Call {
    fn new<C: SolCall>(target: Address, call: C) -> Self {
        Self {
            target,
            data: call.abi_encode().into(),
        }
    }
}

/// Why a single call produced no return data.
#[derive(Debug)]
enum CallFailure {
    /// The call reverted (decoded).
    Reverted(RevertReason),
    /// The node could not run it (transport error, missing state, …).
    Rpc(RpcCause),
}

type Outcome = Result<Bytes, CallFailure>;

/// Decodes a call every snapshot needs; any failure fails the read.
fn required<C: SolCall>(what: &str, out: Outcome) -> Result<C::Return, ReadError> {
    match out {
        Ok(bytes) => C::abi_decode_returns_validate(&bytes).map_err(|e| {
            if bytes.is_empty() {
                ReadError::Invalid(format!(
                    "{what} returned no data (is there a CREsolver market at that address?)"
                ))
            } else {
                ReadError::Invalid(format!(
                    "{what} returned undecodable data ({} bytes): {e}",
                    bytes.len()
                ))
            }
        }),
        Err(CallFailure::Reverted(r)) => Err(ReadError::Invalid(format!("{what} reverted: {r}"))),
        Err(CallFailure::Rpc(e)) => Err(ReadError::Rpc(RpcFailure::new(what.to_string(), e))),
    }
}

/// Runs batches of view calls at one block.
struct Reader<'a> {
    provider: &'a DynProvider,
    block: BlockId,
    multicall: Option<Address>,
}

impl Reader<'_> {
    /// Round 1: the market's terms, its workers and its identity registry. A market that
    /// does not exist (a `MarketDoesNotExist` revert, or a zero deadline) is
    /// [`ReadError::MarketDoesNotExist`].
    async fn market_terms(&self, round: RoundKey) -> Result<MarketTerms, ReadError> {
        let (market, market_id) = (round.market, round.id.get());
        let round1 = self
            .batch(vec![
                Call::new(
                    market,
                    ICREsolverMarket::getMarketCall {
                        marketId: market_id,
                    },
                ),
                Call::new(
                    market,
                    ICREsolverMarket::getMarketWorkersCall {
                        marketId: market_id,
                    },
                ),
                Call::new(market, ICREsolverMarket::identityRegistryCall {}),
            ])
            .await?;
        let [r_market, r_workers, r_identity]: [Outcome; 3] = round1.try_into().map_err(|_| {
            ReadError::Invalid("round 1 returned the wrong number of results".into())
        })?;

        let terms = match r_market {
            Err(CallFailure::Reverted(RevertReason::Market(
                ICREsolverMarket::ICREsolverMarketErrors::MarketDoesNotExist(_),
            ))) => return Err(ReadError::MarketDoesNotExist(round.id)),
            other => required::<ICREsolverMarket::getMarketCall>("getMarket", other)?,
        };
        if terms.deadline.is_zero() {
            return Err(ReadError::MarketDoesNotExist(round.id));
        }
        let addresses =
            required::<ICREsolverMarket::getMarketWorkersCall>("getMarketWorkers", r_workers)?;
        let identity_registry =
            required::<ICREsolverMarket::identityRegistryCall>("identityRegistry", r_identity)?;
        check_worker_list(round.id, &addresses)?;
        Ok(MarketTerms {
            market: terms,
            workers: addresses,
            identity_registry,
        })
    }

    /// Round 2: per worker, its agent id, stake and validated reputation, in the order
    /// of `addresses` (`market_is_operator` is left `false` for round 3).
    async fn worker_data(
        &self,
        round: RoundKey,
        addresses: &[Address],
    ) -> Result<Vec<WorkerInfo>, ReadError> {
        let calls: Vec<Call> = addresses
            .iter()
            .flat_map(|&w| worker_calls(round, w))
            .collect();
        let round2 = if calls.is_empty() {
            Vec::new()
        } else {
            self.batch(calls).await?
        };
        if round2.len() != addresses.len() * 3 {
            return Err(ReadError::Invalid(
                "round 2 returned the wrong number of results".into(),
            ));
        }
        let mut workers = Vec::with_capacity(addresses.len());
        let mut results = round2.into_iter();
        for &address in addresses {
            let (Some(r_id), Some(r_stake), Some(r_rep)) =
                (results.next(), results.next(), results.next())
            else {
                return Err(ReadError::Invalid("round 2 ended early".into()));
            };
            let agent_id =
                required::<ICREsolverMarket::workerAgentIdsCall>("workerAgentIds", r_id)?;
            let stake = required::<ICREsolverMarket::stakesCall>("stakes", r_stake)?;
            let rep = required::<ICREsolverMarket::getReputationCall>("getReputation", r_rep)?;
            let reputation = reputation(address, &rep)?;
            workers.push(WorkerInfo {
                address,
                agent_id,
                stake,
                reputation,
                market_is_operator: false,
            });
        }
        Ok(workers)
    }

    /// Round 3: sets `market_is_operator` of each worker whose agent the market contract
    /// may operate. A failed check counts as no; a failed batch is logged and leaves
    /// every flag `false`.
    async fn mark_operators(
        &self,
        round: RoundKey,
        identity_registry: Address,
        workers: &mut [WorkerInfo],
    ) {
        let (market, market_id) = (round.market, round.id.get());
        if workers.is_empty() || identity_registry.is_zero() {
            return;
        }
        let calls = workers
            .iter()
            .map(|w| {
                Call::new(
                    identity_registry,
                    IIdentityRegistry::isAuthorizedOrOwnerCall {
                        spender: market,
                        agentId: w.agent_id,
                    },
                )
            })
            .collect();
        match self.batch(calls).await {
            Ok(flags) => {
                for (w, flag) in workers.iter_mut().zip(flags) {
                    w.market_is_operator = flag
                        .ok()
                        .and_then(|b| {
                            IIdentityRegistry::isAuthorizedOrOwnerCall::abi_decode_returns_validate(
                                &b,
                            )
                            .ok()
                        })
                        .unwrap_or(false);
                }
            }
            Err(e) => tracing::warn!(
                market = %market,
                market_id = %market_id,
                error = %e,
                "isAuthorizedOrOwner checks failed; assuming the market operates no agent"
            ),
        }
    }

    /// One result per call, in order. Only a failure of the batch itself (the
    /// `aggregate3` call) is an error here; single failures are per-call outcomes.
    async fn batch(&self, calls: Vec<Call>) -> Result<Vec<Outcome>, ReadError> {
        if let Some(mc) = self.multicall {
            match self.aggregate(mc, &calls).await? {
                Some(results) => return Ok(results),
                None => tracing::warn!(
                    multicall = %mc,
                    block = ?self.block,
                    "no Multicall3 code at the read block; falling back to single calls"
                ),
            }
        }
        Ok(futures::future::join_all(calls.iter().map(|c| self.call(c))).await)
    }

    /// `aggregate3` with `allowFailure` everywhere; `None` when the multicall address
    /// has no code at the block (empty return data).
    async fn aggregate(
        &self,
        multicall: Address,
        calls: &[Call],
    ) -> Result<Option<Vec<Outcome>>, ReadError> {
        let call = IMulticall3::aggregate3Call {
            calls: calls
                .iter()
                .map(|c| IMulticall3::Call3 {
                    target: c.target,
                    allowFailure: true,
                    callData: c.data.clone(),
                })
                .collect(),
        };
        let tx = TransactionRequest::default()
            .to(multicall)
            .input(call.abi_encode().into());
        let raw = match self.provider.call(tx).block(self.block).await {
            Ok(raw) => raw,
            Err(e) => {
                return Err(match failure(e) {
                    CallFailure::Reverted(r) => {
                        ReadError::Invalid(format!("aggregate3 at {multicall} reverted: {r}"))
                    }
                    CallFailure::Rpc(e) => {
                        ReadError::Rpc(RpcFailure::new(format!("aggregate3 at {multicall}"), e))
                    }
                });
            }
        };
        if raw.is_empty() {
            return Ok(None);
        }
        let results =
            IMulticall3::aggregate3Call::abi_decode_returns_validate(&raw).map_err(|e| {
                ReadError::Invalid(format!(
                    "aggregate3 at {multicall} returned undecodable data: {e}"
                ))
            })?;
        if results.len() != calls.len() {
            return Err(ReadError::Invalid(format!(
                "aggregate3 at {multicall} returned {} results for {} calls",
                results.len(),
                calls.len()
            )));
        }
        Ok(Some(
            results
                .into_iter()
                .map(|r| {
                    if r.success {
                        Ok(r.returnData)
                    } else {
                        Err(CallFailure::Reverted(decode_revert(&r.returnData)))
                    }
                })
                .collect(),
        ))
    }

    async fn call(&self, c: &Call) -> Outcome {
        let tx = TransactionRequest::default()
            .to(c.target)
            .input(c.data.clone().into());
        self.provider
            .call(tx)
            .block(self.block)
            .await
            .map_err(failure)
    }
}

/// Tells a revert (the node ran the call and it reverted) from an RPC failure.
fn failure(e: alloy::transports::TransportError) -> CallFailure {
    match e.as_error_resp() {
        Some(payload) => {
            if let Some(data) = payload.as_revert_data() {
                CallFailure::Reverted(decode_revert(&data))
            } else if payload.code == 3 || payload.message.to_lowercase().contains("revert") {
                CallFailure::Reverted(RevertReason::Message(payload.message.to_string()))
            } else {
                CallFailure::Rpc(RpcCause::Node {
                    message: payload.message.to_string(),
                    code: payload.code,
                })
            }
        }
        None => CallFailure::Rpc(RpcCause::Transport(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rep(a: u64, b: u64, c: u64, n: u64) -> ICREsolverMarket::getReputationReturn {
        ICREsolverMarket::getReputationReturn {
            resQuality: U256::from(a),
            srcQuality: U256::from(b),
            analysisDepth: U256::from(c),
            count: U256::from(n),
        }
    }

    #[test]
    fn reputation_in_range_converts() {
        let r = reputation(Address::ZERO, &rep(100, 0, 55, 3)).unwrap();
        assert_eq!(
            r,
            Reputation {
                res_quality: 100.0,
                src_quality: 0.0,
                analysis_depth: 55.0,
                count: 3
            }
        );
    }

    #[test]
    fn reputation_out_of_range_is_invalid() {
        assert!(matches!(
            reputation(Address::ZERO, &rep(101, 0, 0, 1)),
            Err(ReadError::Invalid(_))
        ));
        let mut huge = rep(1, 1, 1, 1);
        huge.analysisDepth = U256::MAX;
        assert!(matches!(
            reputation(Address::ZERO, &huge),
            Err(ReadError::Invalid(_))
        ));
        huge = rep(1, 1, 1, 1);
        huge.count = U256::MAX;
        assert!(matches!(
            reputation(Address::ZERO, &huge),
            Err(ReadError::Invalid(_))
        ));
    }

    #[test]
    fn required_maps_failures() {
        let empty = required::<ICREsolverMarket::identityRegistryCall>(
            "identityRegistry",
            Ok(Bytes::new()),
        );
        assert!(matches!(empty, Err(ReadError::Invalid(m)) if m.contains("no data")));
        let reverted = required::<ICREsolverMarket::identityRegistryCall>(
            "identityRegistry",
            Err(CallFailure::Reverted(RevertReason::Message("nope".into()))),
        );
        assert!(matches!(reverted, Err(ReadError::Invalid(m)) if m.contains("reverted")));
        let rpc = required::<ICREsolverMarket::identityRegistryCall>(
            "identityRegistry",
            Err(CallFailure::Rpc(RpcCause::NotFound)),
        );
        assert!(matches!(rpc, Err(ReadError::Rpc(_))));
        // A dirty address word is refused by the validating decoder.
        let mut word = [0xffu8; 32];
        word[12..].copy_from_slice(&[0x11; 20]);
        let dirty = required::<ICREsolverMarket::identityRegistryCall>(
            "identityRegistry",
            Ok(Bytes::copy_from_slice(&word)),
        );
        assert!(matches!(dirty, Err(ReadError::Invalid(_))));
    }
}
