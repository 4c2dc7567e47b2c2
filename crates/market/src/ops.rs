//! [`MarketClient`]: one market contract — create, join and request markets, authorize
//! resolvers, and read a market's state, workers and payouts.

use super::{MarketError, confirm};
use alloy::primitives::{Address, U256};
use alloy::providers::{DynProvider, Provider};
use alloy::rpc::types::TransactionReceipt;
use cresolver_chain::bindings::ICREsolverMarket;
use serde::Serialize;

/// A market contract reached through a provider.
#[derive(Debug, Clone)]
pub struct MarketClient {
    provider: DynProvider,
    /// The market contract.
    pub address: Address,
}

/// The contract as a whole: its owner, registries and market count.
#[derive(Debug, Clone, Serialize)]
pub struct MarketInfo {
    /// The market contract.
    pub address: Address,
    /// Its owner (who authorizes resolvers).
    pub owner: Address,
    /// How many markets it holds (ids `0..count`).
    pub market_count: U256,
    /// The smallest stake a worker may join with, in wei.
    pub min_stake: U256,
    /// The ERC-8004 identity registry its workers' agents are in.
    pub identity_registry: Address,
    /// The ERC-8004 reputation registry it gives feedback to.
    pub reputation_registry: Address,
}

/// One market: its question, state, outcome and workers.
#[derive(Debug, Clone, Serialize)]
pub struct MarketView {
    /// The market contract.
    pub address: Address,
    /// The market id.
    pub id: U256,
    /// The question.
    pub question: String,
    /// The reward shared by the workers, in wei.
    pub reward_pool: U256,
    /// The deadline (unix seconds); workers join only before it.
    pub deadline: U256,
    /// Who created it.
    pub creator: Address,
    /// Whether a resolution was recorded.
    pub resolved: bool,
    /// The outcome (`true`: YES), meaningful once resolved.
    pub resolution: bool,
    /// Whether workers may still join (not resolved, before the deadline).
    pub active: bool,
    /// The workers, in joining order.
    pub workers: Vec<WorkerView>,
}

/// A worker of a market.
#[derive(Debug, Clone, Serialize)]
pub struct WorkerView {
    /// The worker's address (its agent's owner).
    pub address: Address,
    /// Its ERC-8004 agent id.
    pub agent_id: U256,
    /// What it staked in this market, in wei (0 once the market paid it back).
    pub stake: U256,
    /// What the market holds for it to withdraw, in wei (over every market).
    pub balance: U256,
}

fn call_err(what: &'static str) -> impl Fn(alloy::contract::Error) -> MarketError {
    move |e| MarketError::from_call(what, &e)
}

impl MarketClient {
    /// The market at `address`, through `provider` (whose wallet signs the writes).
    pub fn new(provider: DynProvider, address: Address) -> Self {
        Self { provider, address }
    }

    /// The contract binding.
    pub fn contract(&self) -> ICREsolverMarket::ICREsolverMarketInstance<DynProvider> {
        ICREsolverMarket::new(self.address, self.provider.clone())
    }

    /// Fails unless a contract that answers `marketCount()` is at the address.
    pub async fn check(&self) -> Result<U256, MarketError> {
        let code = self
            .provider
            .get_code_at(self.address)
            .await
            .map_err(|e| MarketError::rpc("eth_getCode", e))?;
        if code.is_empty() {
            return Err(MarketError::Invalid(format!(
                "no contract at market address {}: check --market-address (or chain.market_address) and the RPC's chain",
                self.address
            )));
        }
        self.contract().marketCount().call().await.map_err(|e| {
            MarketError::Invalid(format!(
                "the contract at {} is not a CREsolver market (marketCount() failed: {})",
                self.address,
                cresolver_chain::redact_error(&e.to_string())
            ))
        })
    }

    /// Creates a market with `reward` wei, open to workers for `duration` seconds;
    /// returns its id.
    pub async fn create(
        &self,
        question: &str,
        reward: U256,
        duration: u64,
        from: Address,
    ) -> Result<U256, MarketError> {
        let pending = self
            .contract()
            .createMarket(question.to_string(), U256::from(duration))
            .value(reward)
            .from(from)
            .send()
            .await
            .map_err(call_err("createMarket"))?;
        let receipt = confirm("createMarket", pending).await?;
        receipt
            .decoded_log::<ICREsolverMarket::MarketCreated>()
            .map(|l| l.data.marketId)
            .ok_or_else(|| MarketError::Invalid("createMarket emitted no MarketCreated".into()))
    }

    /// `from` joins market `id` with its agent `agent_id` and `stake` wei.
    pub async fn join(
        &self,
        id: U256,
        agent_id: U256,
        stake: U256,
        from: Address,
    ) -> Result<TransactionReceipt, MarketError> {
        let pending = self
            .contract()
            .joinMarket(id, agent_id)
            .value(stake)
            .from(from)
            .send()
            .await
            .map_err(call_err("joinMarket"))?;
        confirm("joinMarket", pending).await
    }

    /// Asks for the resolution of market `id` (emits `ResolutionRequested`).
    pub async fn request(
        &self,
        id: U256,
        from: Address,
    ) -> Result<TransactionReceipt, MarketError> {
        let pending = self
            .contract()
            .requestResolution(id)
            .from(from)
            .send()
            .await
            .map_err(call_err("requestResolution"))?;
        confirm("requestResolution", pending).await
    }

    /// Authorizes (or revokes) `who` as a resolver; `from` must be the owner.
    pub async fn set_resolver(
        &self,
        who: Address,
        allowed: bool,
        from: Address,
    ) -> Result<TransactionReceipt, MarketError> {
        let pending = self
            .contract()
            .setAuthorizedResolver(who, allowed)
            .from(from)
            .send()
            .await
            .map_err(call_err("setAuthorizedResolver"))?;
        confirm("setAuthorizedResolver", pending).await
    }

    /// Whether `who` is an authorized resolver.
    pub async fn is_resolver(&self, who: Address) -> Result<bool, MarketError> {
        self.contract()
            .authorizedResolvers(who)
            .call()
            .await
            .map_err(call_err("authorizedResolvers"))
    }

    /// The contract's owner, registries, minimum stake and market count.
    pub async fn info(&self) -> Result<MarketInfo, MarketError> {
        let market_count = self.check().await?;
        let c = self.contract();
        Ok(MarketInfo {
            address: self.address,
            owner: c.owner().call().await.map_err(call_err("owner"))?,
            market_count,
            min_stake: c.minStake().call().await.map_err(call_err("minStake"))?,
            identity_registry: c
                .identityRegistry()
                .call()
                .await
                .map_err(call_err("identityRegistry"))?,
            reputation_registry: c
                .reputationRegistry()
                .call()
                .await
                .map_err(call_err("reputationRegistry"))?,
        })
    }

    /// Market `id`: its question, state, outcome and workers with their stakes and
    /// balances.
    pub async fn show(&self, id: U256) -> Result<MarketView, MarketError> {
        let c = self.contract();
        let m = c
            .getMarket(id)
            .call()
            .await
            .map_err(call_err("getMarket"))?;
        if m.deadline.is_zero() {
            let count = self.check().await?;
            let held = if count.is_zero() {
                "it holds no market yet".to_string()
            } else {
                format!(
                    "it holds {count} (ids 0 to {})",
                    count.saturating_sub(U256::from(1))
                )
            };
            return Err(MarketError::Invalid(format!(
                "market {id} does not exist on {}: {held}",
                self.address
            )));
        }
        let active = c
            .isMarketActive(id)
            .call()
            .await
            .map_err(call_err("isMarketActive"))?;
        let addresses = c
            .getMarketWorkers(id)
            .call()
            .await
            .map_err(call_err("getMarketWorkers"))?;
        let mut workers = Vec::with_capacity(addresses.len());
        for w in addresses {
            workers.push(WorkerView {
                address: w,
                agent_id: c
                    .workerAgentIds(id, w)
                    .call()
                    .await
                    .map_err(call_err("workerAgentIds"))?,
                stake: c.stakes(id, w).call().await.map_err(call_err("stakes"))?,
                balance: c.balances(w).call().await.map_err(call_err("balances"))?,
            });
        }
        Ok(MarketView {
            address: self.address,
            id,
            question: m.question,
            reward_pool: m.rewardPool,
            deadline: m.deadline,
            creator: m.creator,
            resolved: m.resolved,
            resolution: m.resolution,
            active,
            workers,
        })
    }
}
