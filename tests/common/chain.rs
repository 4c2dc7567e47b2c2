//! The anvil harness: a devnet with a market whose workers are registered ERC-8004
//! agents. Dropping the returned [`Devnet`] kills anvil, also when a test fails.

use alloy::primitives::{Address, U256, utils::parse_ether};
use cresolver_devnet::{Devnet, RegisteredAgent};

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

/// `n` more markets joined by the same workers (agents) as `s`'s first market; returns
/// their ids.
pub async fn more_markets(s: &MarketSetup, n: usize) -> Vec<U256> {
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        let id = s
            .dev
            .create_market(&format!("Burst market {i}: YES?"), s.reward, 86_400)
            .await
            .unwrap();
        for (w, a) in s.workers.iter().zip(&s.agents) {
            s.dev.join(id, *w, a.agent_id, s.stake).await.unwrap();
        }
        ids.push(id);
    }
    ids
}

/// Requests resolution of every market in `ids` in one block: automine off, the
/// requests sent, one block mined. Automine stays as `automine_after`.
pub async fn request_in_one_block(s: &MarketSetup, ids: &[U256], automine_after: bool) -> u64 {
    use alloy::providers::Provider;
    use alloy::providers::ext::AnvilApi;
    let p = &s.dev.provider;
    p.anvil_set_auto_mine(false).await.unwrap();
    let mut pending = Vec::new();
    for id in ids {
        pending.push(
            s.dev
                .market()
                .requestResolution(*id)
                .from(s.dev.requester())
                .send()
                .await
                .unwrap(),
        );
    }
    p.evm_mine(None).await.unwrap();
    let block = p.get_block_number().await.unwrap();
    for tx in pending {
        let r = p
            .get_transaction_receipt(*tx.tx_hash())
            .await
            .unwrap()
            .expect("request mined");
        assert_eq!(r.block_number, Some(block), "all requests in one block");
    }
    if automine_after {
        p.anvil_set_auto_mine(true).await.unwrap();
    }
    block
}
