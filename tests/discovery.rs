//! Market reader and endpoint discovery against a devnet: one consistent snapshot (with
//! and without Multicall3, at the latest or an older block), and every discard reason
//! of discovery, in registration order, for data:, http(s) and ipfs:// token URIs.

use crate::common;

use alloy::primitives::{Address, U256};
use alloy::providers::Provider;
use axum::Router;
use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use common::chain::*;
use cresolver_chain::discovery::{
    DiscardReason, DiscoveredWorker, DiscoveryConfig, discover, fetch_token_uri, to_slots,
};
use cresolver_chain::reader::{MarketSnapshot, ReadError, read_market};
use cresolver_core::Reputation;
use cresolver_devnet::{Devnet, data_uri, registration_json};
use cresolver_store::RoundKey;
use cresolver_workers::StageClient;
use std::time::Duration;
use url::Url;

fn u(v: u64) -> U256 {
    U256::from(v)
}

fn local_cfg() -> DiscoveryConfig {
    DiscoveryConfig {
        allow_private_endpoints: true,
        ..Default::default()
    }
}

async fn agent_url() -> String {
    cresolver_devnet::agent::spawn("127.0.0.1:0", Default::default())
        .await
        .expect("bind agent")
        .0
}

/// Reads the snapshot with and without Multicall3 and checks both agree.
async fn snapshot(dev: &Devnet, market_id: U256, block: Option<u64>) -> MarketSnapshot {
    let p = &dev.provider;
    let m = dev.contracts.market;
    let batched = read_market(
        p,
        RoundKey::new(m, market_id),
        block,
        Some(dev.contracts.multicall),
    )
    .await
    .expect("read with multicall");
    let single = read_market(p, RoundKey::new(m, market_id), Some(batched.block), None)
        .await
        .expect("read without multicall");
    assert_eq!(batched, single, "multicall and single reads differ");
    batched
}

async fn run_discovery(
    dev: &Devnet,
    snap: &MarketSnapshot,
    block: Option<u64>,
    cfg: &DiscoveryConfig,
) -> Vec<DiscoveredWorker> {
    discover(
        &dev.provider,
        snap.identity_registry,
        &snap.workers,
        block,
        cfg,
        &StageClient::default_http(),
    )
    .await
}

fn reason(w: &DiscoveredWorker) -> &DiscardReason {
    w.endpoint.as_ref().expect_err("worker should be discarded")
}

#[tokio::test]
async fn five_workers_one_endpoint_four_discards_in_order() {
    let endpoint = agent_url().await;
    let mut inactive =
        registration_json("sleeper", 31337, Address::repeat_byte(5), Some(&endpoint));
    inactive["active"] = false.into();
    let s = market_with_workers(vec![
        AgentUri::Endpoint(endpoint.clone()),
        AgentUri::None,
        AgentUri::Raw("data:application/json;base64,%%%not-base64!!".into()),
        AgentUri::Raw(data_uri(&registration_json(
            "no-a2a",
            31337,
            Address::repeat_byte(4),
            None,
        ))),
        AgentUri::Raw(data_uri(&inactive)),
    ])
    .await;
    let dev = &s.dev;

    let snap = snapshot(dev, s.market_id, None).await;
    assert_eq!(snap.block, dev.provider.get_block_number().await.unwrap());
    assert_eq!(snap.market, dev.contracts.market);
    assert_eq!(snap.market_id, s.market_id.into());
    assert_eq!(snap.question, "Will the reference feed report YES?");
    assert_eq!(snap.reward_pool, s.reward);
    assert!(snap.deadline > U256::ZERO);
    assert_eq!(snap.creator, dev.accounts[0]);
    assert!(!snap.resolved);
    assert_eq!(snap.identity_registry, dev.contracts.identity);
    let addrs: Vec<Address> = snap.workers.iter().map(|w| w.address).collect();
    assert_eq!(addrs, s.workers);
    for (w, a) in snap.workers.iter().zip(&s.agents) {
        assert_eq!(w.agent_id, a.agent_id);
        assert_eq!(w.stake, s.stake);
        assert_eq!(w.reputation, Reputation::default());
        assert!(!w.market_is_operator);
    }

    let found = run_discovery(dev, &snap, Some(snap.block), &local_cfg()).await;
    assert_eq!(found.len(), 5);
    let found_addrs: Vec<Address> = found.iter().map(|w| w.address).collect();
    assert_eq!(found_addrs, s.workers);
    assert_eq!(
        found[0].endpoint.as_ref().unwrap(),
        &Url::parse(&endpoint).unwrap()
    );
    assert_eq!(found[0].name.as_deref(), Some("worker-1"));
    assert_eq!(found[0].protocol.map(|k| k.name()), Some("a2a"));
    assert_eq!(reason(&found[1]), &DiscardReason::NoTokenUri);
    assert!(
        matches!(reason(&found[2]), DiscardReason::InvalidMetadata { detail } if detail.contains("base64")),
        "{:?}",
        found[2]
    );
    assert_eq!(reason(&found[3]), &DiscardReason::NoA2aEndpoint);
    assert_eq!(found[3].name.as_deref(), Some("no-a2a"));
    assert_eq!(reason(&found[4]), &DiscardReason::Inactive);
    assert_eq!(found[4].name.as_deref(), Some("sleeper"));

    let slots = to_slots(&found, &local_cfg().protocols);
    assert_eq!(slots.len(), 5);
    assert_eq!(slots.iter().filter(|s| s.target.is_ok()).count(), 1);
    assert_eq!(
        slots[1].target.as_ref().unwrap_err(),
        "agent has no token URI"
    );

    // Without private endpoints the loopback endpoint is refused; the rest is unchanged.
    let strict = run_discovery(dev, &snap, None, &DiscoveryConfig::default()).await;
    assert!(
        matches!(reason(&strict[0]), DiscardReason::RefusedEndpoint { detail } if detail.contains("127.0.0.1")),
        "{:?}",
        strict[0]
    );
    for i in 1..5 {
        assert_eq!(strict[i].endpoint, found[i].endpoint, "worker {i}");
    }

    // After a resolution the reputations are read back as averages.
    let scores: Vec<u8> = (0..5u8)
        .flat_map(|i| [50 + 10 * i, 40 + 10 * i, 30 + 10 * i])
        .collect();
    dev.market()
        .resolveMarket(s.market_id, s.workers.clone(), vec![u(1); 5], scores, true)
        .from(dev.accounts[0])
        .send()
        .await
        .unwrap()
        .get_receipt()
        .await
        .unwrap();
    let after = snapshot(dev, s.market_id, None).await;
    assert!(after.resolved && after.resolution);
    for (i, w) in after.workers.iter().enumerate() {
        let i = i as f64;
        assert_eq!(
            w.reputation,
            Reputation {
                res_quality: 50.0 + 10.0 * i,
                src_quality: 40.0 + 10.0 * i,
                analysis_depth: 30.0 + 10.0 * i,
                count: 1,
            }
        );
    }
    // The snapshot before the resolution is still readable at its block.
    assert_eq!(snapshot(dev, s.market_id, Some(snap.block)).await, snap);
}

/// Serves registration files and misbehaving metadata URLs.
async fn metadata_server(registration: String) -> String {
    let reg = registration.clone();
    let app = Router::new()
        .route(
            "/ipfs/{cid}/agent.json",
            get(move || {
                let reg = reg.clone();
                async move { ([(header::CONTENT_TYPE, "application/json")], reg) }
            }),
        )
        .route("/big", get(|| async { "x".repeat(1 << 20) }))
        .route(
            "/big-stream",
            get(|| async {
                // 1 MB in chunks, no content-length: the reader must stop by itself.
                let chunks = (0..64).map(|_| Ok::<_, std::io::Error>(vec![b' '; 16 * 1024]));
                Body::from_stream(futures::stream::iter(chunks))
            }),
        )
        .route(
            "/redirect",
            get(|| async {
                Response::builder()
                    .status(StatusCode::FOUND)
                    .header(header::LOCATION, "/ipfs/bafkqaaa/agent.json")
                    .body(Body::empty())
                    .unwrap()
            }),
        )
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(30)).await;
                "{}".into_response()
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    url
}

#[tokio::test]
async fn ipfs_and_http_token_uris_are_fetched_bounded() {
    let endpoint = agent_url().await;
    let reg = registration_json(
        "ipfs-agent",
        31337,
        Address::repeat_byte(1),
        Some(&endpoint),
    );
    let server = metadata_server(reg.to_string()).await;
    let cid = "bafybeigdyrzt5sfp7udm7hu76uh7y26nf3efuylqabf3oclgtqy55fbzdi";
    let s = market_with_workers(vec![
        AgentUri::Raw(format!("ipfs://{cid}/agent.json")),
        AgentUri::Raw(format!("{server}/big")),
        AgentUri::Raw(format!("{server}/big-stream")),
        AgentUri::Raw(format!("{server}/redirect")),
        AgentUri::Raw(format!("{server}/slow")),
        AgentUri::Raw(format!("{server}/missing")),
    ])
    .await;
    let snap = snapshot(&s.dev, s.market_id, None).await;
    // The gateway is on loopback over http, so this needs allow_private_endpoints: the
    // gateway fetch follows the same http(s) and address rules as any metadata URL.
    let cfg = DiscoveryConfig {
        allow_private_endpoints: true,
        ipfs_gateway: Url::parse(&format!("{server}/ipfs/")).unwrap(),
        fetch_timeout: Duration::from_millis(800),
        ..Default::default()
    };
    let found = run_discovery(&s.dev, &snap, None, &cfg).await;
    assert_eq!(found.len(), 6);
    assert_eq!(
        found[0].endpoint.as_ref().unwrap(),
        &Url::parse(&endpoint).unwrap()
    );
    assert_eq!(found[0].name.as_deref(), Some("ipfs-agent"));
    let detail = |i: usize| match reason(&found[i]) {
        DiscardReason::FetchFailed { detail } => detail.clone(),
        other => panic!("worker {i}: expected FetchFailed, got {other:?}"),
    };
    assert!(
        detail(1).contains("larger than 65536 bytes"),
        "{}",
        detail(1)
    );
    assert!(
        detail(2).contains("larger than 65536 bytes"),
        "{}",
        detail(2)
    );
    assert!(detail(3).contains("redirect"), "{}", detail(3));
    assert!(detail(4).contains("timed out"), "{}", detail(4));
    assert!(detail(5).contains("404"), "{}", detail(5));

    // A client that follows redirects still gets the redirect refused.
    let followed = fetch_token_uri(&format!("{server}/redirect"), &cfg, &reqwest::Client::new())
        .await
        .unwrap_err();
    assert!(
        matches!(&followed, DiscardReason::FetchFailed { detail } if detail.contains("redirect")),
        "{followed:?}"
    );

    // Without private endpoints the http gateway on loopback is refused.
    let strict = DiscoveryConfig {
        allow_private_endpoints: false,
        ..cfg.clone()
    };
    let found = run_discovery(&s.dev, &snap, None, &strict).await;
    assert!(
        found
            .iter()
            .all(|w| matches!(w.endpoint, Err(DiscardReason::FetchFailed { .. }))),
        "{found:?}"
    );
}

#[tokio::test]
async fn reads_at_an_older_block() {
    let dev = Devnet::start().await.expect("devnet");
    dev.register_agent(dev.accounts[0], None).await.unwrap();
    let stake = alloy::primitives::utils::parse_ether("0.01").unwrap();
    let market_id = dev
        .create_market("Older block?", u(1_000_000), 86_400)
        .await
        .unwrap();
    let (w1, w2) = (dev.accounts[1], dev.accounts[2]);
    let endpoint = agent_url().await;
    let a1 = dev
        .register_agent(w1, Some(dev.registration_uri("one", w1, &endpoint)))
        .await
        .unwrap();
    let a2 = dev
        .register_agent(w2, Some(dev.registration_uri("two", w2, &endpoint)))
        .await
        .unwrap();
    dev.join(market_id, w1, a1.agent_id, stake).await.unwrap();
    let old = dev.provider.get_block_number().await.unwrap();
    dev.join(market_id, w2, a2.agent_id, stake + u(1))
        .await
        .unwrap();
    // After the noted block: worker 1 drops its A2A service and makes the market an
    // operator of its agent.
    let identity = dev.identity();
    identity
        .setAgentURI(
            a1.agent_id,
            data_uri(&registration_json("one", dev.chain_id, w1, None)),
        )
        .from(w1)
        .send()
        .await
        .unwrap()
        .get_receipt()
        .await
        .unwrap();
    identity
        .approve(dev.contracts.market, a1.agent_id)
        .from(w1)
        .send()
        .await
        .unwrap()
        .get_receipt()
        .await
        .unwrap();

    let then = snapshot(&dev, market_id, Some(old)).await;
    assert_eq!(then.block, old);
    assert_eq!(then.workers.len(), 1);
    assert_eq!(then.workers[0].address, w1);
    assert_eq!(then.workers[0].agent_id, a1.agent_id);
    assert!(!then.workers[0].market_is_operator);

    let now = snapshot(&dev, market_id, None).await;
    assert!(now.block > old);
    let addrs: Vec<Address> = now.workers.iter().map(|w| w.address).collect();
    assert_eq!(addrs, vec![w1, w2]);
    assert_eq!(now.workers[1].stake, stake + u(1));
    assert!(now.workers[0].market_is_operator);
    assert!(!now.workers[1].market_is_operator);
    // A multicall address without code falls back to single calls.
    let no_multicall = read_market(
        &dev.provider,
        RoundKey::new(dev.contracts.market, market_id),
        Some(now.block),
        Some(Address::repeat_byte(0x43)),
    )
    .await
    .unwrap();
    assert_eq!(no_multicall, now);

    // Discovery reads the token URI at the block asked for.
    let at_old = run_discovery(&dev, &then, Some(old), &local_cfg()).await;
    assert!(at_old[0].endpoint.is_ok(), "{at_old:?}");
    let latest = run_discovery(&dev, &now, None, &local_cfg()).await;
    assert_eq!(reason(&latest[0]), &DiscardReason::NoA2aEndpoint);
    assert!(latest[1].endpoint.is_ok());
}

#[tokio::test]
async fn unknown_market_and_wrong_address() {
    let dev = Devnet::start().await.expect("devnet");
    for mc in [Some(dev.contracts.multicall), None] {
        let err = read_market(
            &dev.provider,
            RoundKey::new(dev.contracts.market, u(7)),
            None,
            mc,
        )
        .await
        .unwrap_err();
        assert!(
            matches!(err, ReadError::MarketDoesNotExist(id) if id == u(7).into()),
            "{err:?}"
        );
        // An address without a market contract is invalid chain data, not a panic.
        let err = read_market(
            &dev.provider,
            RoundKey::new(Address::repeat_byte(0x42), u(0)),
            None,
            mc,
        )
        .await
        .unwrap_err();
        assert!(matches!(err, ReadError::Invalid(_)), "{err:?}");
    }
}
