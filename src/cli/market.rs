//! `cresolver market`: the contracts driven from the command line, on any chain — deploy
//! them, create a market, join it as a worker, request its resolution, show its state and
//! result, register a worker's agent in ERC-8004, authorize a resolver key.
//!
//! What a command produces goes to stdout (an id, an address, the deployment as JSON, a
//! market's state), what it is doing to stderr, so `ID=$(cresolver market create …)`
//! works in a script.

use super::*;
use alloy::network::EthereumWallet;
use alloy::primitives::utils::format_ether;
use alloy::providers::ProviderBuilder;
use alloy::signers::local::PrivateKeySigner;
use cresolver_market::amount::{parse_amount, parse_duration};
use cresolver_market::{DeployOptions, MarketClient, MarketView, ReceiverOption};
use cresolver_pipeline::wallet::WalletError;

/// `cresolver market …`.
#[derive(Debug, Subcommand)]
pub enum MarketCmd {
    /// Deploy the contracts: the ERC-8004 identity and reputation registries (or reuse the
    /// chain's with --identity/--reputation), the market, Multicall3 (reused where the chain
    /// has it) and, with --forwarder or --test-forwarder, a CRE receiver authorized as a
    /// resolver. The sender owns the market. Prints the addresses as JSON, with the chain
    /// id and `start_block` (a node's `chain.start_block`: no request can be older).
    Deploy(DeployArgs),
    /// Create a market: a question, a reward (sent with the call) and how long workers may
    /// join. Prints its id.
    Create(CreateArgs),
    /// Join a market as a worker, with the sender's ERC-8004 agent and a stake.
    Join(JoinArgs),
    /// Request the resolution of a market (anyone may): the nodes watching it resolve it.
    Request(RequestArgs),
    /// Show a market: question, reward, deadline, workers with their stakes and balances,
    /// resolved or not and the outcome. Without an id, the contract: owner, registries,
    /// minimum stake, market count. Signs nothing.
    Show(ShowArgs),
    /// Register a worker's agent in the ERC-8004 identity registry, owned by the sender.
    /// Prints its agent id.
    ///
    /// With --endpoint, the registration file (registration-v1 with an A2A service at the
    /// endpoint) is stored on chain as a data: URI; with --uri, the registry points at a
    /// file published elsewhere (https://, ipfs://).
    RegisterWorker(RegisterWorkerArgs),
    /// Authorize a resolver (a node's key, or a CRE receiver) on the market; the sender
    /// must be the market's owner.
    AuthorizeResolver(AuthorizeResolverArgs),
}

/// `cresolver market create`.
#[derive(Debug, Args)]
pub struct CreateArgs {
    #[command(flatten)]
    pub chain: ChainArgs,
    #[command(flatten)]
    pub signer: SignerArgs,
    /// The question the workers answer YES or NO.
    #[arg(long)]
    pub question: String,
    /// The reward shared by the workers: 0.1 (ETH), 0.1ether, 100gwei, 5000wei.
    #[arg(long, value_parser = parse_amount)]
    pub reward: U256,
    /// How long workers may join: seconds, or 90s, 30m, 12h, 7d.
    #[arg(long, default_value = "7d", value_parser = parse_duration)]
    pub duration: u64,
}

/// `cresolver market join`.
#[derive(Debug, Args)]
pub struct JoinArgs {
    #[command(flatten)]
    pub chain: ChainArgs,
    #[command(flatten)]
    pub signer: SignerArgs,
    /// Market id.
    pub market_id: U256,
    /// The worker's agent id in the identity registry (the sender must own it).
    #[arg(long)]
    pub agent_id: U256,
    /// The stake (default: the market's minimum): 0.01 (ETH), 0.01ether, 5000wei.
    #[arg(long, value_parser = parse_amount)]
    pub stake: Option<U256>,
}

/// `cresolver market request`.
#[derive(Debug, Args)]
pub struct RequestArgs {
    #[command(flatten)]
    pub chain: ChainArgs,
    #[command(flatten)]
    pub signer: SignerArgs,
    /// Market id.
    pub market_id: U256,
}

/// `cresolver market show`.
#[derive(Debug, Args)]
pub struct ShowArgs {
    #[command(flatten)]
    pub chain: ChainArgs,
    /// Market id.
    pub market_id: Option<U256>,
    /// Wait up to this many seconds for the market to be resolved (exit 1 if not).
    #[arg(long, value_name = "SECS")]
    pub wait: Option<u64>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `cresolver market register-worker`.
#[derive(Debug, Args)]
pub struct RegisterWorkerArgs {
    #[command(flatten)]
    pub chain: ChainArgs,
    #[command(flatten)]
    pub signer: SignerArgs,
    /// The worker's base URL (it serves POST {endpoint}/a2a/resolve and /a2a/challenge).
    #[arg(long, conflicts_with = "uri", required_unless_present = "uri")]
    pub endpoint: Option<String>,
    /// A registration file published elsewhere (https://, ipfs://, data:).
    #[arg(long)]
    pub uri: Option<String>,
    /// The agent's name in the registration file.
    #[arg(long, default_value = "cresolver-worker")]
    pub name: String,
    /// The identity registry (default: the market's).
    #[arg(long, value_name = "ADDRESS")]
    pub identity: Option<Address>,
}

/// `cresolver market authorize-resolver`.
#[derive(Debug, Args)]
pub struct AuthorizeResolverArgs {
    #[command(flatten)]
    pub chain: ChainArgs,
    #[command(flatten)]
    pub signer: SignerArgs,
    /// The resolver's address.
    pub resolver: Address,
    /// Revoke instead.
    #[arg(long)]
    pub revoke: bool,
}

/// Which chain and market a command talks to.
#[derive(Debug, Args, Clone)]
pub struct ChainArgs {
    /// A node config to take chain.rpc_url, chain.market_address (and signer.* for the
    /// commands that sign) from.
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// RPC URL (default: the config's chain.rpc_url, or http://127.0.0.1:8545).
    #[arg(long)]
    pub rpc_url: Option<String>,
    /// The market contract (default: the config's chain.market_address).
    #[arg(long, value_name = "ADDRESS")]
    pub market_address: Option<Address>,
}

/// The sender's key. Without a flag: the env var CRESOLVER_PRIVATE_KEY (or the config's
/// signer section).
#[derive(Debug, Args, Clone)]
pub struct SignerArgs {
    /// The sender's hex private key. Prefer the env var CRESOLVER_PRIVATE_KEY: a flag's
    /// value stays in the shell's history and in `ps`.
    #[arg(long, value_name = "HEX")]
    pub private_key: Option<String>,
    /// An encrypted JSON keystore (password from CRESOLVER_KEYSTORE_PASSWORD or
    /// --password-file).
    #[arg(long, value_name = "FILE", conflicts_with = "account")]
    pub keystore: Option<PathBuf>,
    /// A foundry account: ~/.foundry/keystores/NAME (as `cast wallet import NAME` made it).
    #[arg(long, value_name = "NAME")]
    pub account: Option<String>,
    /// A file holding the keystore's password (first line).
    #[arg(long, value_name = "FILE")]
    pub password_file: Option<PathBuf>,
}

/// `cresolver market deploy`.
#[derive(Debug, Args)]
pub struct DeployArgs {
    #[command(flatten)]
    chain: ChainArgs,
    #[command(flatten)]
    signer: SignerArgs,
    /// The smallest stake a worker may join with.
    #[arg(long, default_value = "0.0001ether", value_parser = parse_amount)]
    min_stake: U256,
    /// Reuse this ERC-8004 identity registry instead of deploying one.
    #[arg(long, value_name = "ADDRESS")]
    identity: Option<Address>,
    /// Reuse this ERC-8004 reputation registry instead of deploying one.
    #[arg(long, value_name = "ADDRESS", requires = "identity")]
    reputation: Option<Address>,
    /// Deploy a CRE receiver that trusts this forwarder (a KeystoneForwarder) and authorize it.
    #[arg(long, value_name = "ADDRESS", conflicts_with = "test_forwarder")]
    forwarder: Option<Address>,
    /// Deploy a TestForwarder (it checks no signatures: a local chain only) and a receiver.
    #[arg(long)]
    test_forwarder: bool,
    /// Also write the addresses (JSON) to this file.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
}

impl ChainArgs {
    fn load(&self, signer: Option<&SignerArgs>) -> anyhow::Result<NodeConfig> {
        let o = Overrides {
            rpc_url: self.rpc_url.clone(),
            market_address: self.market_address,
            account: signer.and_then(|s| s.account.clone()),
            ..Default::default()
        };
        let mut cfg = NodeConfig::load(self.config.as_deref(), &o)?;
        if let Some(s) = signer {
            if let Some(k) = &s.keystore {
                cfg.signer.keystore = Some(k.clone());
                cfg.signer.account = None;
            }
            if let Some(p) = &s.password_file {
                cfg.signer.password_file = Some(p.clone());
            }
        }
        Ok(cfg)
    }

    fn rpc(cfg: &NodeConfig) -> String {
        cfg.rpc_urls().into_iter().next().unwrap_or_default()
    }

    /// A read-only connection and the market.
    async fn reader(&self) -> anyhow::Result<(MarketClient, NodeConfig)> {
        let cfg = self.load(None)?;
        let provider = cresolver_chain::connect(&Self::rpc(&cfg)).await?;
        let market = MarketClient::new(provider, cfg.market()?);
        Ok((market, cfg))
    }
}

/// A connection that signs as `signer`'s key, and the key's address.
async fn signing(
    chain: &ChainArgs,
    signer: &SignerArgs,
) -> anyhow::Result<(DynProvider, Address, NodeConfig)> {
    let cfg = chain.load(Some(signer))?;
    let key = match &signer.private_key {
        Some(k) => k
            .trim()
            .parse::<PrivateKeySigner>()
            .map_err(|_| anyhow::anyhow!("--private-key is not a hex private key"))?,
        None => cresolver_pipeline::wallet::signer(&cfg.signer).map_err(|e| match e {
            WalletError::NoKey { env } => anyhow::anyhow!(
                "no key to sign with: set the env var {env} to the sender's hex private key, or pass --keystore FILE or --account NAME"
            ),
            e => e.into(),
        })?,
    };
    let from = key.address();
    let rpc = ChainArgs::rpc(&cfg);
    let provider = ProviderBuilder::new()
        .wallet(EthereumWallet::from(key))
        .connect(&rpc)
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot reach the RPC at {}: {}",
                cresolver_chain::redact_url(&rpc),
                cresolver_chain::redact_error(&e.to_string())
            )
        })?
        .erased();
    Ok((provider, from, cfg))
}

impl MarketCmd {
    /// Runs a `cresolver market` command.
    pub async fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            MarketCmd::Deploy(a) => a.run().await,
            MarketCmd::Create(a) => a.run().await,
            MarketCmd::Join(a) => a.run().await,
            MarketCmd::Request(a) => a.run().await,
            MarketCmd::Show(a) => a.run().await,
            MarketCmd::RegisterWorker(a) => a.run().await,
            MarketCmd::AuthorizeResolver(a) => a.run().await,
        }
    }
}

impl CreateArgs {
    /// Creates the market and prints its id.
    pub async fn run(self) -> anyhow::Result<ExitCode> {
        let CreateArgs {
            chain,
            signer,
            question,
            reward,
            duration,
        } = self;
        let (provider, from, cfg) = signing(&chain, &signer).await?;
        let m = MarketClient::new(provider, cfg.market()?);
        m.check().await?;
        let id = m.create(&question, reward, duration, from).await?;
        eprintln!(
            "market {id} created on {} by {from}: reward {} ETH, workers may join for {duration} s",
            m.address,
            format_ether(reward)
        );
        println!("{id}");
        Ok(ExitCode::SUCCESS)
    }
}

impl RequestArgs {
    /// Requests the market's resolution.
    pub async fn run(self) -> anyhow::Result<ExitCode> {
        let market_id = self.market_id;
        let (provider, from, cfg) = signing(&self.chain, &self.signer).await?;
        let m = MarketClient::new(provider, cfg.market()?);
        let r = m.request(market_id, from).await?;
        eprintln!(
            "resolution of market {market_id} requested (tx {}, block {}); `cresolver market show {market_id} --wait 120` waits for it",
            r.transaction_hash,
            r.block_number.unwrap_or_default()
        );
        Ok(ExitCode::SUCCESS)
    }
}

impl AuthorizeResolverArgs {
    /// Authorizes (or revokes) the resolver and prints whether it now is one.
    pub async fn run(self) -> anyhow::Result<ExitCode> {
        let resolver = self.resolver;
        let (provider, from, cfg) = signing(&self.chain, &self.signer).await?;
        let m = MarketClient::new(provider, cfg.market()?);
        m.check().await?;
        m.set_resolver(resolver, !self.revoke, from).await?;
        let now = m.is_resolver(resolver).await?;
        println!(
            "{resolver} is {}an authorized resolver of {}",
            if now { "" } else { "not " },
            m.address
        );
        Ok(ExitCode::SUCCESS)
    }
}

impl DeployArgs {
    /// Deploys the contracts and prints their addresses as JSON.
    pub async fn run(self) -> anyhow::Result<ExitCode> {
        let a = self;
        let (provider, from, _) = signing(&a.chain, &a.signer).await?;
        let chain_id = provider.get_chain_id().await.context("eth_chainId")?;
        // no request of the new market can be older: a node may start its scan here
        let start_block = provider
            .get_block_number()
            .await
            .context("eth_blockNumber")?;
        eprintln!("deploying from {from} on chain {chain_id}");
        let opts = DeployOptions {
            min_stake: a.min_stake,
            identity: a.identity,
            reputation: a.reputation,
            receiver: match (a.forwarder, a.test_forwarder) {
                (Some(f), _) => ReceiverOption::Forwarder(f),
                (None, true) => ReceiverOption::TestForwarder,
                (None, false) => ReceiverOption::None,
            },
        };
        let d = cresolver_market::deploy(&provider, from, &opts, &|name, at| {
            eprintln!("  {name:<20} {at}");
        })
        .await?;
        let mut doc = serde_json::to_value(d)?;
        doc["chain_id"] = chain_id.into();
        doc["owner"] = from.to_string().into();
        doc["min_stake"] = a.min_stake.to_string().into();
        doc["start_block"] = start_block.into();
        let text = serde_json::to_string_pretty(&doc)?;
        if let Some(out) = &a.out {
            std::fs::write(out, format!("{text}\n"))
                .with_context(|| format!("cannot write {}", out.display()))?;
            eprintln!("addresses written to {}", out.display());
        }
        eprintln!(
            "next: set chain.market_address = \"{}\" in node.toml, and authorize the node's key: cresolver market authorize-resolver <NODE ADDRESS> --market-address {}",
            d.market, d.market
        );
        println!("{text}");
        Ok(ExitCode::SUCCESS)
    }
}

impl JoinArgs {
    /// Joins the market as a worker.
    pub async fn run(self) -> anyhow::Result<ExitCode> {
        let JoinArgs {
            chain,
            signer,
            market_id: id,
            agent_id,
            stake,
        } = self;
        let (chain, signer) = (&chain, &signer);
        let (provider, from, cfg) = signing(chain, signer).await?;
        let m = MarketClient::new(provider, cfg.market()?);
        let stake = match stake {
            Some(s) => s,
            None => m.info().await?.min_stake,
        };
        m.join(id, agent_id, stake, from).await?;
        eprintln!(
            "{from} joined market {id} with agent {agent_id} and a stake of {} ETH",
            format_ether(stake)
        );
        Ok(ExitCode::SUCCESS)
    }
}

impl RegisterWorkerArgs {
    /// Registers the agent and prints its id.
    pub async fn run(self) -> anyhow::Result<ExitCode> {
        let RegisterWorkerArgs {
            chain,
            signer,
            endpoint,
            uri,
            name,
            identity,
        } = self;
        let (chain, signer, name) = (&chain, &signer, name.as_str());
        let (provider, from, cfg) = signing(chain, signer).await?;
        let identity = match identity {
            Some(i) => i,
            None => {
                let market = cfg.market().map_err(|_| {
                    anyhow::anyhow!(
                        "no identity registry: pass --identity, or --market-address to use the market's"
                    )
                })?;
                MarketClient::new(provider.clone(), market)
                    .info()
                    .await?
                    .identity_registry
            }
        };
        let uri = match (uri, endpoint) {
            (Some(u), _) => u,
            (None, Some(e)) => {
                let parsed = url::Url::parse(&e)
                    .map_err(|err| anyhow::anyhow!("--endpoint {e:?} is not a URL: {err}"))?;
                anyhow::ensure!(
                    matches!(parsed.scheme(), "http" | "https"),
                    "--endpoint must be http:// or https://"
                );
                let chain_id = provider.get_chain_id().await.context("eth_chainId")?;
                let doc = cresolver_market::registration_json(name, chain_id, from, Some(&e));
                cresolver_market::data_uri(&doc)
            }
            (None, None) => anyhow::bail!("pass --endpoint URL or --uri URI"),
        };
        let agent = cresolver_market::register_agent(&provider, identity, from, Some(uri)).await?;
        eprintln!(
            "agent {} registered in {identity}, owned by {from}",
            agent.agent_id
        );
        println!("{}", agent.agent_id);
        Ok(ExitCode::SUCCESS)
    }
}

impl ShowArgs {
    /// Shows the market (or the contract).
    pub async fn run(self) -> anyhow::Result<ExitCode> {
        let ShowArgs {
            chain,
            market_id: id,
            wait,
            json,
        } = self;
        let chain = &chain;
        let (m, _) = chain.reader().await?;
        let Some(id) = id else {
            let info = m.info().await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&info)?);
            } else {
                println!("market contract {}", info.address);
                println!("owner               {}", info.owner);
                println!("markets             {}", info.market_count);
                println!("minimum stake       {} ETH", format_ether(info.min_stake));
                println!("identity registry   {}", info.identity_registry);
                println!("reputation registry {}", info.reputation_registry);
            }
            return Ok(ExitCode::SUCCESS);
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(wait.unwrap_or(0));
        let mut v = m.show(id).await?;
        while wait.is_some() && !v.resolved && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(250)).await;
            v = m.show(id).await?;
        }
        if json {
            println!("{}", serde_json::to_string_pretty(&v)?);
        } else {
            print_market(&v);
        }
        Ok(if wait.is_some() && !v.resolved {
            eprintln!("market {id} is not resolved after {} s", wait.unwrap_or(0));
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        })
    }
}

fn print_market(v: &MarketView) {
    println!("market {} on {}", v.id, v.address);
    println!("question  {}", v.question);
    println!("reward    {} ETH", format_ether(v.reward_pool));
    let deadline = i64::try_from(v.deadline)
        .ok()
        .and_then(|s| time::OffsetDateTime::from_unix_timestamp(s).ok())
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| v.deadline.to_string());
    println!("deadline  {deadline}");
    println!("creator   {}", v.creator);
    let state = match (v.resolved, v.resolution, v.active) {
        (true, true, _) => "resolved: YES",
        (true, false, _) => "resolved: NO",
        (false, _, true) => "open (workers may join)",
        (false, _, false) => "closed, not resolved",
    };
    println!("state     {state}");
    println!("workers   {}", v.workers.len());
    if !v.workers.is_empty() {
        println!(
            "  {:<44} {:>8} {:>22} {:>22}",
            "address", "agent", "stake (ETH)", "balance (ETH)"
        );
    }
    for w in &v.workers {
        println!(
            "  {:<44} {:>8} {:>22} {:>22}",
            w.address.to_string(),
            w.agent_id.to_string(),
            format_ether(w.stake),
            format_ether(w.balance)
        );
    }
}
