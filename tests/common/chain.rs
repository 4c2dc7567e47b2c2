//! The anvil harness: a devnet with a market whose workers are registered ERC-8004
//! agents. Dropping the returned [`Devnet`] kills anvil, also when a test fails.

use alloy::primitives::{Address, U256, utils::parse_ether};
use cresolver::devnet::{Devnet, RegisteredAgent};

pub struct MarketSetup {
    pub dev: Devnet,
    pub market_id: U256,
    pub reward: U256,
    pub stake: U256,
    /// Worker addresses in registration (join) order.
    pub workers: Vec<Address>,
    pub agents: Vec<RegisteredAgent>,
}

/// A worker to register: its token URI (`None` registers without a URI).
pub enum AgentUri {
    /// A registration file with an A2A service at this endpoint.
    Endpoint(String),
    /// A raw token URI.
    Raw(String),
    None,
}

/// Starts a devnet and creates a market joined by one worker per entry of `uris`
/// (workers are dev accounts 1..). Agent id 0 is taken by a throwaway agent of the
/// deployer, so workers get ids ≥ 1 and receive ERC-8004 feedback.
pub async fn market_with_workers(uris: Vec<AgentUri>) -> MarketSetup {
    let dev = Devnet::start()
        .await
        .expect("devnet (run scripts/install-tools.sh first)");
    dev.register_agent(dev.accounts[0], None).await.unwrap();
    let reward = parse_ether("1").unwrap();
    let stake = parse_ether("0.01").unwrap();
    let market_id = dev
        .create_market("Will the reference feed report YES?", reward, 86_400)
        .await
        .unwrap();
    let mut workers = Vec::new();
    let mut agents = Vec::new();
    for (i, uri) in uris.into_iter().enumerate() {
        let owner = dev.accounts[i + 1];
        let uri = match uri {
            AgentUri::Endpoint(e) => {
                Some(dev.registration_uri(&format!("worker-{}", i + 1), owner, &e))
            }
            AgentUri::Raw(r) => Some(r),
            AgentUri::None => None,
        };
        let agent = dev.register_agent(owner, uri).await.unwrap();
        dev.join(market_id, owner, agent.agent_id, stake)
            .await
            .unwrap();
        workers.push(owner);
        agents.push(agent);
    }
    MarketSetup {
        dev,
        market_id,
        reward,
        stake,
        workers,
        agents,
    }
}

/// `n` workers whose registrations point at unused endpoints (contract-level tests).
pub async fn market_with_n_workers(n: usize) -> MarketSetup {
    market_with_workers(
        (0..n)
            .map(|i| AgentUri::Endpoint(format!("http://127.0.0.1:1/{i}")))
            .collect(),
    )
    .await
}
