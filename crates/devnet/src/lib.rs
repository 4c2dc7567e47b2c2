//! cresolver-devnet, the development harness (no production crate depends on it): a local chain for tests and the demo — spawns the pinned anvil, deploys the
//! contracts of `contracts-abi/`, registers agents in the ERC-8004 identity registry with
//! `data:` registration files, and drives markets (create, join, request). Everything it
//! starts stops when the [`Devnet`] is dropped.

pub mod agent;
pub mod demo;
pub mod keystone;
pub mod up;
pub mod up_seed;

use alloy::network::EthereumWallet;
use alloy::node_bindings::{Anvil, AnvilInstance};
use alloy::primitives::{Address, U256, utils::parse_ether};
use alloy::providers::{DynProvider, Provider, ProviderBuilder};
use alloy::rpc::types::TransactionReceipt;
use alloy::signers::local::PrivateKeySigner;
use cresolver_chain::bindings::{ICREsolverMarket, IIdentityRegistry};
use cresolver_market::{DeployOptions, MarketClient, MarketError, ReceiverOption};
pub use cresolver_market::{Deployment, RegisteredAgent, data_uri, registration_json};
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
    /// A contract call or deployment failed (its revert decoded).
    #[error(transparent)]
    Market(Box<MarketError>),
    /// Any other failure of the set-up (a missing receipt or event, …).
    #[error("{0}")]
    Setup(String),
}

impl From<MarketError> for DevnetError {
    fn from(e: MarketError) -> Self {
        Self::Market(Box::new(e))
    }
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

        let min_stake = parse_ether("0.0001").unwrap_or(U256::from(100_000_000_000_000u64));
        let opts = DeployOptions {
            min_stake,
            receiver: ReceiverOption::TestForwarder,
            ..Default::default()
        };
        let contracts = cresolver_market::deploy(&provider, accounts[0], &opts, &|_, _| {}).await?;
        Ok(Self {
            anvil,
            provider,
            accounts,
            signers,
            contracts,
            chain_id,
        })
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

    /// The market contract as [`MarketClient`] sees it.
    pub fn client(&self) -> MarketClient {
        MarketClient::new(self.provider.clone(), self.contracts.market)
    }

    /// Authorizes (or not) a resolver, as the market owner.
    pub async fn set_resolver(&self, who: Address, allowed: bool) -> Result<(), DevnetError> {
        self.client()
            .set_resolver(who, allowed, self.accounts[0])
            .await?;
        Ok(())
    }

    /// Registers an agent owned by `owner` with the given token URI (`None`: `register()`).
    pub async fn register_agent(
        &self,
        owner: Address,
        uri: Option<String>,
    ) -> Result<RegisteredAgent, DevnetError> {
        Ok(
            cresolver_market::register_agent(&self.provider, self.contracts.identity, owner, uri)
                .await?,
        )
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
        Ok(self
            .client()
            .create(question, reward, duration, self.accounts[0])
            .await?)
    }

    /// `worker` joins `market` with `agent_id` and `stake` wei.
    pub async fn join(
        &self,
        market: U256,
        worker: Address,
        agent_id: U256,
        stake: U256,
    ) -> Result<(), DevnetError> {
        self.client().join(market, agent_id, stake, worker).await?;
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
        Ok(self.client().request(market, self.requester()).await?)
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
