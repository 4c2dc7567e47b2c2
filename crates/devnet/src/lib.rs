//! cresolver-devnet, the development harness (no production crate depends on it): a local chain for tests and the demo — spawns the pinned anvil, deploys the
//! contracts of `contracts-abi/`, registers agents in the ERC-8004 identity registry with
//! `data:` registration files, and drives markets (create, join, request). Everything it
//! starts stops when the [`Devnet`] is dropped.

pub mod agent;
pub mod demo;
pub mod keystone;

use alloy::network::EthereumWallet;
use alloy::node_bindings::{Anvil, AnvilInstance};
use alloy::primitives::{Address, U256, utils::parse_ether};
use alloy::providers::{DynProvider, Provider, ProviderBuilder};
use alloy::rpc::types::TransactionReceipt;
use alloy::signers::local::PrivateKeySigner;
use base64::Engine as _;
use cresolver_chain::bindings::artifacts::{
    CREReceiver, CREsolverMarket, IdentityRegistry, Multicall3, ReputationRegistry, TestForwarder,
};
use cresolver_chain::bindings::{ICREsolverMarket, IIdentityRegistry};
use serde_json::json;
use std::path::PathBuf;
use std::time::Duration;

/// The anvil version `scripts/install-tools.sh` installs.
pub const ANVIL_VERSION: &str = "1.7.1";

/// Why the devnet could not start or do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum DevnetError {
    /// No anvil binary at the path given or looked up.
    #[error(
        "anvil not found at {0}: run `scripts/install-tools.sh --demo` in the checkout (no root needed), or set ANVIL_BIN to an anvil {ANVIL_VERSION} binary"
    )]
    AnvilMissing(PathBuf),
    /// The anvil process did not start or reported no dev accounts.
    #[error("anvil did not start: {0}")]
    AnvilStart(String),
    /// A deployment or transaction failed.
    #[error("{what} failed: {detail}")]
    Chain {
        /// What was being done (`deploying CREsolverMarket`, `register`, …).
        what: String,
        /// The decoded revert reason, or the error.
        detail: String,
    },
    /// Any other failure of the set-up (a missing receipt or event, …).
    #[error("{0}")]
    Setup(String),
}

fn chain_err(what: &str) -> impl Fn(alloy::contract::Error) -> DevnetError + '_ {
    move |e| {
        let detail = match e.as_revert_data() {
            Some(data) => cresolver_chain::decode_revert(&data).to_string(),
            None => e.to_string(),
        };
        DevnetError::Chain {
            what: what.to_string(),
            detail,
        }
    }
}

/// Where the pinned anvil lives: `$ANVIL_BIN`, else `.tools/…` under the crate root or
/// the current directory.
pub fn anvil_path() -> Result<PathBuf, DevnetError> {
    if let Ok(p) = std::env::var("ANVIL_BIN") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(DevnetError::AnvilMissing(p))
        };
    }
    let rel = ".tools/node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil";
    let candidates = [
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(rel),
        PathBuf::from(rel),
    ];
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .ok_or_else(|| DevnetError::AnvilMissing(candidates[0].clone()))
}

/// Addresses of a deployment.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Deployment {
    /// The ERC-8004 identity registry.
    pub identity: Address,
    /// The ERC-8004 reputation registry.
    pub reputation: Address,
    /// The CREsolver market.
    pub market: Address,
    /// The test forwarder (it checks no signatures).
    pub forwarder: Address,
    /// The CRE receiver, which takes reports from the forwarder and resolves markets.
    pub receiver: Address,
    /// Multicall3, for batched reads.
    pub multicall: Address,
}

/// A running local chain with the contracts deployed.
pub struct Devnet {
    /// Killed on drop.
    pub anvil: AnvilInstance,
    /// Signs for every dev account (pick one with `.from(addr)`).
    pub provider: DynProvider,
    /// The dev accounts; `accounts[0]` deployed everything (owner, authorized resolver).
    pub accounts: Vec<Address>,
    /// The dev accounts' keys, in the order of `accounts`.
    pub signers: Vec<PrivateKeySigner>,
    /// Where the contracts are deployed.
    pub contracts: Deployment,
    /// The chain id anvil reports.
    pub chain_id: u64,
}

/// An agent registered in the identity registry.
#[derive(Debug, Clone)]
pub struct RegisteredAgent {
    /// The agent id the registry assigned.
    pub agent_id: U256,
    /// The account that owns the agent.
    pub owner: Address,
    /// The token URI it was registered with (empty for none).
    pub uri: String,
}

impl Devnet {
    /// Spawns anvil (20 funded accounts, a free port) and deploys every contract.
    pub async fn start() -> Result<Self, DevnetError> {
        let path = anvil_path()?;
        let anvil = Anvil::at(&path)
            .arg("--accounts")
            .arg("20")
            .timeout(20_000)
            .try_spawn()
            .map_err(|e| DevnetError::AnvilStart(e.to_string()))?;
        let signers: Vec<PrivateKeySigner> = anvil
            .keys()
            .iter()
            .map(|k| PrivateKeySigner::from(k.clone()))
            .collect();
        let Some(first) = signers.first().cloned() else {
            return Err(DevnetError::AnvilStart(
                "anvil reported no dev accounts".into(),
            ));
        };
        let mut wallet = EthereumWallet::from(first);
        for s in signers.iter().skip(1) {
            wallet.register_signer(s.clone());
        }
        let provider = ProviderBuilder::new()
            .wallet(wallet)
            .connect_http(anvil.endpoint_url())
            .erased();
        let accounts: Vec<Address> = signers.iter().map(|s| s.address()).collect();
        let chain_id = anvil.chain_id();

        let identity = *IdentityRegistry::deploy(&provider)
            .await
            .map_err(chain_err("deploying IdentityRegistry"))?
            .address();
        let reputation = *ReputationRegistry::deploy(&provider, identity)
            .await
            .map_err(chain_err("deploying ReputationRegistry"))?
            .address();
        let min_stake = parse_ether("0.0001").unwrap_or(U256::from(100_000_000_000_000u64));
        let market = *CREsolverMarket::deploy(&provider, identity, reputation, min_stake)
            .await
            .map_err(chain_err("deploying CREsolverMarket"))?
            .address();
        let forwarder = *TestForwarder::deploy(&provider)
            .await
            .map_err(chain_err("deploying TestForwarder"))?
            .address();
        let receiver = *CREReceiver::deploy(&provider, forwarder, market)
            .await
            .map_err(chain_err("deploying CREReceiver"))?
            .address();
        let multicall = *Multicall3::deploy(&provider)
            .await
            .map_err(chain_err("deploying Multicall3"))?
            .address();
        let contracts = Deployment {
            identity,
            reputation,
            market,
            forwarder,
            receiver,
            multicall,
        };
        let dev = Self {
            anvil,
            provider,
            accounts,
            signers,
            contracts,
            chain_id,
        };
        dev.set_resolver(receiver, true).await?;
        Ok(dev)
    }

    /// The HTTP endpoint of the anvil.
    pub fn rpc_url(&self) -> String {
        self.anvil.endpoint()
    }

    /// The websocket endpoint of the same anvil.
    pub fn ws_endpoint(&self) -> String {
        self.anvil.ws_endpoint()
    }

    /// The market contract, through the devnet's provider.
    pub fn market(&self) -> ICREsolverMarket::ICREsolverMarketInstance<DynProvider> {
        ICREsolverMarket::new(self.contracts.market, self.provider.clone())
    }

    /// The identity registry, through the devnet's provider.
    pub fn identity(&self) -> IIdentityRegistry::IIdentityRegistryInstance<DynProvider> {
        IIdentityRegistry::new(self.contracts.identity, self.provider.clone())
    }

    /// Stops the chain after what polls it: the provider is dropped first (alloy's receipt
    /// heartbeat polls new blocks through it and ends once no provider holds its client,
    /// at its next tick, 250 ms on a local endpoint), then anvil. A chain stopped under a
    /// live poller makes it log `ERROR failed to poll`. Every other clone of the provider
    /// (contract instances) must be dropped before.
    pub async fn stop(self) {
        let Devnet {
            anvil, provider, ..
        } = self;
        drop(provider);
        tokio::time::sleep(Duration::from_millis(400)).await;
        drop(anvil);
    }

    /// Authorizes (or not) a resolver, as the market owner.
    pub async fn set_resolver(&self, who: Address, allowed: bool) -> Result<(), DevnetError> {
        self.market()
            .setAuthorizedResolver(who, allowed)
            .from(self.accounts[0])
            .send()
            .await
            .map_err(chain_err("setAuthorizedResolver"))?
            .get_receipt()
            .await
            .map_err(|e| DevnetError::Setup(e.to_string()))?;
        Ok(())
    }

    /// Registers an agent owned by `owner` with the given token URI (`None`: `register()`).
    pub async fn register_agent(
        &self,
        owner: Address,
        uri: Option<String>,
    ) -> Result<RegisteredAgent, DevnetError> {
        let identity = self.identity();
        let receipt = match &uri {
            Some(u) => identity.register_2(u.clone()).from(owner).send().await,
            None => identity.register_0().from(owner).send().await,
        }
        .map_err(chain_err("register"))?
        .get_receipt()
        .await
        .map_err(|e| DevnetError::Setup(e.to_string()))?;
        let agent_id = receipt
            .decoded_log::<IIdentityRegistry::Registered>()
            .map(|l| l.data.agentId)
            .ok_or_else(|| DevnetError::Setup("register emitted no Registered event".into()))?;
        Ok(RegisteredAgent {
            agent_id,
            owner,
            uri: uri.unwrap_or_default(),
        })
    }

    /// A registration-v1 file with an A2A service at `endpoint`, as a base64 data URI.
    pub fn registration_uri(&self, name: &str, owner: Address, endpoint: &str) -> String {
        let doc = registration_json(name, self.chain_id, owner, Some(endpoint));
        data_uri(&doc)
    }

    /// Creates a market with `reward` wei and `duration` seconds; returns its id.
    pub async fn create_market(
        &self,
        question: &str,
        reward: U256,
        duration: u64,
    ) -> Result<U256, DevnetError> {
        let receipt = self
            .market()
            .createMarket(question.to_string(), U256::from(duration))
            .value(reward)
            .from(self.accounts[0])
            .send()
            .await
            .map_err(chain_err("createMarket"))?
            .get_receipt()
            .await
            .map_err(|e| DevnetError::Setup(e.to_string()))?;
        receipt
            .decoded_log::<ICREsolverMarket::MarketCreated>()
            .map(|l| l.data.marketId)
            .ok_or_else(|| DevnetError::Setup("createMarket emitted no MarketCreated event".into()))
    }

    /// `worker` joins `market` with `agent_id` and `stake` wei.
    pub async fn join(
        &self,
        market: U256,
        worker: Address,
        agent_id: U256,
        stake: U256,
    ) -> Result<(), DevnetError> {
        self.market()
            .joinMarket(market, agent_id)
            .value(stake)
            .from(worker)
            .send()
            .await
            .map_err(chain_err("joinMarket"))?
            .get_receipt()
            .await
            .map_err(|e| DevnetError::Setup(e.to_string()))?;
        Ok(())
    }

    /// The account that requests resolutions (anyone may): the last dev account, so
    /// its nonces never race the resolver key (`accounts[0]`) used by a node.
    pub fn requester(&self) -> Address {
        self.accounts[self.accounts.len() - 1]
    }

    /// Emits `ResolutionRequested` for `market` (sent by [`Devnet::requester`]).
    pub async fn request_resolution(
        &self,
        market: U256,
    ) -> Result<TransactionReceipt, DevnetError> {
        self.market()
            .requestResolution(market)
            .from(self.requester())
            .send()
            .await
            .map_err(chain_err("requestResolution"))?
            .get_receipt()
            .await
            .map_err(|e| DevnetError::Setup(e.to_string()))
    }

    /// Balance of an account in wei.
    pub async fn eth_balance(&self, who: Address) -> Result<U256, DevnetError> {
        self.provider
            .get_balance(who)
            .await
            .map_err(|e| DevnetError::Setup(e.to_string()))
    }

    /// Mines a block after moving time forward.
    pub async fn advance(&self, secs: Duration) -> Result<(), DevnetError> {
        use alloy::providers::ext::AnvilApi;
        self.provider
            .anvil_increase_time(secs.as_secs())
            .await
            .map_err(|e| DevnetError::Setup(e.to_string()))?;
        self.provider
            .anvil_mine(Some(1), None)
            .await
            .map_err(|e| DevnetError::Setup(e.to_string()))
    }
}

/// A registration-v1 JSON document (ERC-8004), with an A2A service when `endpoint` is set.
pub fn registration_json(
    name: &str,
    chain_id: u64,
    owner: Address,
    endpoint: Option<&str>,
) -> serde_json::Value {
    let mut services =
        vec![json!({"name": "wallet", "endpoint": format!("eip155:{chain_id}:{owner}")})];
    if let Some(e) = endpoint {
        services.push(json!({
            "name": "A2A",
            "endpoint": e,
            "protocol": "cresolver",
            "category": "resolution",
            "tags": ["prediction-market", "resolution", "ai-agent"],
        }));
    }
    json!({
        "type": "https://eips.ethereum.org/EIPS/eip-8004#registration-v1",
        "name": name,
        "description": format!("{name}: cresolver worker"),
        "image": "",
        "services": services,
        "x402Support": false,
        "active": true,
        "supportedTrust": ["reputation"],
    })
}

/// `data:application/json;base64,…` of a JSON document.
pub fn data_uri(doc: &serde_json::Value) -> String {
    format!(
        "data:application/json;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(doc.to_string())
    )
}
