//! The chain watcher against anvil: confirmations, checkpoint and restart, duplicate
//! logs, a rewind when the checkpoint's block hash changed, range halving behind a
//! JSON-RPC proxy that refuses large eth_getLogs ranges like hosted providers do, and
//! pushed heads scanned by their hash alone until a reorg sends the watcher the full way.

use crate::common;

use alloy::primitives::{B256, U256};
use alloy::providers::Provider;
use axum::Json;
use axum::extract::State;
use common::chain::*;
use cresolver_chain::watcher::{Trigger, Watcher, WatcherConfig};
use cresolver_pipeline::store_sink::StoreSink;
use cresolver_store::RoundKey;
use cresolver_store::{Checkpoints, Finality, Rounds, SqliteStore, Store};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;

fn cfg(s: &MarketSetup, confirmations: u64, max_range: u64) -> WatcherConfig {
    WatcherConfig {
        market: s.dev.contracts.market,
        workflow: "wf".into(),
        confirmations,
        start_block: 0,
        poll_interval: Duration::from_millis(100),
        max_range,
        reorg_window: 64,
        max_backoff: Duration::from_secs(5),
    }
}

fn drain(rx: &mut mpsc::Receiver<Trigger>) -> Vec<Trigger> {
    let mut out = vec![];
    while let Ok(t) = rx.try_recv() {
        out.push(t);
    }
    out
}

#[tokio::test]
async fn confirmations_checkpoint_duplicates_and_rewind() {
    let s = market_with_n_workers(1).await;
    let store = Arc::new(SqliteStore::new(Store::in_memory().unwrap()));
    let (tx, mut rx) = mpsc::channel(16);
    let mut w = Watcher::new(
        s.dev.provider.clone(),
        StoreSink::shared(store.clone()),
        cfg(&s, 2, 1000),
    );

    s.dev.request_resolution(s.market_id).await.unwrap();
    let r = w.scan_once(&tx).await.unwrap();
    assert_eq!(r.triggers, 0, "the log is not 2 blocks deep yet");
    assert!(drain(&mut rx).is_empty());

    s.dev.advance(Duration::from_secs(1)).await.unwrap();
    s.dev.advance(Duration::from_secs(1)).await.unwrap();
    let r = w.scan_once(&tx).await.unwrap();
    assert_eq!(r.triggers, 1);
    let t = drain(&mut rx);
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].round.id, s.market_id.into());
    assert_eq!(t[0].question, "Will the reference feed report YES?");

    // a second request for the same market: recorded, but no second round
    s.dev.request_resolution(s.market_id).await.unwrap();
    for _ in 0..2 {
        s.dev.advance(Duration::from_secs(1)).await.unwrap();
    }
    let r = w.scan_once(&tx).await.unwrap();
    assert_eq!((r.logs, r.triggers), (1, 0));

    // the checkpoint's hash no longer matches: rewind and rescan; logs already seen stay seen
    let (n, _) = store
        .checkpoint(&format!("watch:{}:wf", s.dev.contracts.market))
        .await
        .unwrap()
        .unwrap();
    store
        .set_checkpoint(
            &format!("watch:{}:wf", s.dev.contracts.market),
            n,
            B256::repeat_byte(0xee),
        )
        .await
        .unwrap();
    let r = w.scan_once(&tx).await.unwrap();
    assert_eq!(r.rewound_to, Some(n.saturating_sub(64)));
    assert_eq!((r.logs, r.triggers), (2, 0));

    // a fresh watcher on the same store resumes from the checkpoint
    let mut w2 = Watcher::new(
        s.dev.provider.clone(),
        StoreSink::shared(store.clone()),
        cfg(&s, 2, 1000),
    );
    let r = w2.scan_once(&tx).await.unwrap();
    assert_eq!(r.from, n + 1);
    assert!(drain(&mut rx).is_empty());
}

#[derive(Clone)]
struct Proxy {
    upstream: String,
    max_range: u64,
    get_logs: Arc<AtomicUsize>,
    refused: Arc<AtomicUsize>,
    /// Every other eth_getLogs and eth_call is answered with a rate limit (alternately
    /// HTTP 429 and JSON-RPC -32005 "limit exceeded"); counts those answers.
    rate_limited: Option<Arc<AtomicUsize>>,
    /// eth_getLogs and eth_call requests seen by the rate-limit mode.
    limited_calls: Arc<AtomicUsize>,
    /// Every method called, in order (an eth_getLogs by block hash as
    /// `eth_getLogs(blockHash)`).
    methods: Arc<std::sync::Mutex<Vec<String>>>,
    /// Every log eth_getLogs returns is said to come from this contract.
    forged_address: Option<String>,
}

impl Proxy {
    /// A proxy to `upstream` that refuses eth_getLogs ranges over `max_range` blocks.
    fn new(upstream: String, max_range: u64) -> Self {
        Self {
            upstream,
            max_range,
            get_logs: Default::default(),
            refused: Default::default(),
            rate_limited: None,
            limited_calls: Default::default(),
            methods: Default::default(),
            forged_address: None,
        }
    }
}

/// Serves the proxy on a free port; returns its URL.
async fn serve(proxy: Proxy) -> String {
    let app = axum::Router::new()
        .route("/", axum::routing::post(rpc))
        .with_state(proxy);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// A market whose request comes after 40 empty blocks (room for several chunks).
async fn spread_out_request() -> MarketSetup {
    let s = market_with_n_workers(1).await;
    s.dev
        .provider
        .raw_request::<_, Value>("anvil_mine".into(), (U256::from(40),))
        .await
        .unwrap();
    s.dev.request_resolution(s.market_id).await.unwrap();
    s
}

fn hex_block(v: &Value) -> Option<u64> {
    u64::from_str_radix(v.as_str()?.trim_start_matches("0x"), 16).ok()
}

async fn rpc(State(p): State<Proxy>, Json(body): Json<Value>) -> axum::response::Response {
    use axum::response::IntoResponse;
    let by_hash = body["params"][0]["blockHash"].is_string();
    p.methods.lock().unwrap().push(format!(
        "{}{}",
        body["method"].as_str().unwrap_or("?"),
        if by_hash { "(blockHash)" } else { "" }
    ));
    if let Some(limited) = &p.rate_limited
        && (body["method"] == "eth_getLogs" || body["method"] == "eth_call")
    {
        let n = p.limited_calls.fetch_add(1, Ordering::SeqCst);
        if n % 2 == 0 {
            let k = limited.fetch_add(1, Ordering::SeqCst);
            return if k % 2 == 0 {
                (
                    axum::http::StatusCode::TOO_MANY_REQUESTS,
                    "Too Many Requests",
                )
                    .into_response()
            } else {
                Json(json!({"jsonrpc": "2.0", "id": body["id"], "error": {"code": -32005, "message": "limit exceeded"}}))
                    .into_response()
            };
        }
    }
    if body["method"] == "eth_getLogs" {
        p.get_logs.fetch_add(1, Ordering::SeqCst);
        let f = &body["params"][0];
        if let (Some(a), Some(b)) = (hex_block(&f["fromBlock"]), hex_block(&f["toBlock"]))
            && b - a + 1 > p.max_range
        {
            p.refused.fetch_add(1, Ordering::SeqCst);
            return Json(
                json!({"jsonrpc": "2.0", "id": body["id"], "error": {"code": -32005, "message": format!("block range too large: max {}", p.max_range)}}),
            )
            .into_response();
        }
    }
    let mut reply: Value = reqwest::Client::new()
        .post(&p.upstream)
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    if let Some(forged) = &p.forged_address
        && body["method"] == "eth_getLogs"
        && let Some(logs) = reply["result"].as_array_mut()
    {
        for log in logs {
            log["address"] = json!(forged);
        }
    }
    Json(reply).into_response()
}

#[tokio::test]
async fn a_log_said_to_come_from_another_contract_is_refused() {
    let s = market_with_n_workers(1).await;
    requested_in(&s, s.market_id).await;
    let proxy = Proxy {
        forged_address: Some(format!("{}", alloy::primitives::Address::repeat_byte(0x42))),
        ..Proxy::new(s.dev.rpc_url(), 1_000)
    };
    let url = serve(proxy).await;
    let provider = cresolver_chain::connect(&url).await.unwrap();
    let store = Arc::new(SqliteStore::new(Store::in_memory().unwrap()));
    let (tx, mut rx) = mpsc::channel(16);
    let mut w = Watcher::new(provider, StoreSink::shared(store), cfg(&s, 0, 1000));
    let err = w.scan_once(&tx).await.unwrap_err();
    assert!(
        matches!(&err, cresolver_chain::watcher::WatchError::Rpc(f) if matches!(*f.cause, cresolver_chain::RpcCause::Mismatch)),
        "{err}"
    );
    assert!(drain(&mut rx).is_empty(), "nothing recorded from it");
}

#[tokio::test]
async fn range_is_halved_when_the_provider_refuses_it() {
    let s = spread_out_request().await;
    let proxy = Proxy::new(s.dev.rpc_url(), 10);
    let url = serve(proxy.clone()).await;

    let provider = cresolver_chain::connect(&url).await.unwrap();
    let store = Arc::new(SqliteStore::new(Store::in_memory().unwrap()));
    let (tx, mut rx) = mpsc::channel(16);
    let mut w = Watcher::new(provider, StoreSink::shared(store), cfg(&s, 0, 1000));
    let r = w.scan_once(&tx).await.unwrap();
    // halved until it fits (7), then tried at twice that after 8 good chunks
    assert!(r.range <= 14, "range halved to fit: {}", r.range);
    let refused = proxy.refused.load(Ordering::SeqCst);
    assert!(refused >= 1);
    assert_eq!(r.triggers, 1);
    assert_eq!(drain(&mut rx).len(), 1);
    assert_eq!(r.to, Some(r.head));

    // the range is not held small for ever: after a run of good chunks it grows again
    // (and this provider refuses it again)
    s.dev
        .provider
        .raw_request::<_, Value>("anvil_mine".into(), (U256::from(200),))
        .await
        .unwrap();
    let r = w.scan_once(&tx).await.unwrap();
    assert_eq!(r.to, Some(r.head));
    assert!(
        proxy.refused.load(Ordering::SeqCst) > refused,
        "a larger range was tried again"
    );
}

#[tokio::test]
async fn rate_limits_are_retried_and_never_shrink_the_range() {
    let s = spread_out_request().await;
    let limited = Arc::new(AtomicUsize::new(0));
    let proxy = Proxy {
        rate_limited: Some(limited.clone()),
        ..Proxy::new(s.dev.rpc_url(), 1_000)
    };
    let url = serve(proxy.clone()).await;

    let provider = cresolver_chain::connect(&url).await.unwrap();
    let store = Arc::new(SqliteStore::new(Store::in_memory().unwrap()));
    let (tx, mut rx) = mpsc::channel(16);
    // ranges of 8 blocks: several eth_getLogs, half of them answered with a rate limit
    let mut w = Watcher::new(provider.clone(), StoreSink::shared(store), cfg(&s, 0, 8));
    let r = w.scan_once(&tx).await.unwrap();
    assert_eq!(r.range, 8, "a rate limit never shrinks the range");
    assert_eq!(r.to, Some(r.head));
    assert_eq!(r.triggers, 1, "nothing skipped");
    assert_eq!(drain(&mut rx).len(), 1);
    assert_eq!(proxy.refused.load(Ordering::SeqCst), 0);
    // an eth_call answered with a rate limit is retried too
    let before = limited.load(Ordering::SeqCst);
    let market = cresolver_chain::bindings::ICREsolverMarket::new(s.dev.contracts.market, provider);
    for _ in 0..2 {
        market.getMarket(s.market_id).call().await.unwrap();
    }
    assert!(
        limited.load(Ordering::SeqCst) > before,
        "the proxy did refuse calls"
    );
    let n = limited.load(Ordering::SeqCst);
    assert!(n >= 4, "both kinds of rate limit were answered: {n}");
}

#[tokio::test]
async fn a_rewind_never_goes_below_the_start_block() {
    let s = market_with_n_workers(1).await;
    let other = more_markets(&s, 1).await[0];
    let store = Arc::new(SqliteStore::new(Store::in_memory().unwrap()));
    let (tx, mut rx) = mpsc::channel(16);
    // a request the operator chose not to serve (below the start block), then one above
    let below = requested_in(&s, s.market_id).await;
    let start = below + 1;
    s.dev.advance(Duration::from_secs(1)).await.unwrap();
    s.dev.request_resolution(other).await.unwrap();
    let mut c = cfg(&s, 0, 1000);
    c.start_block = start;
    let market = s.dev.contracts.market;
    let mut w = Watcher::new(s.dev.provider.clone(), StoreSink::shared(store.clone()), c);
    let r = w.scan_once(&tx).await.unwrap();
    assert_eq!(r.from, start);
    let t = drain(&mut rx);
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].round.id, other.into());

    // the checkpoint's block was replaced: the rewind stops at the start block
    let key = format!("watch:{market}:wf");
    let (n, _) = store.checkpoint(&key).await.unwrap().unwrap();
    store
        .set_checkpoint(&key, n, B256::repeat_byte(0xee))
        .await
        .unwrap();
    let r = w.scan_once(&tx).await.unwrap();
    assert_eq!(r.rewound_to, Some(start), "{r:?}");
    assert!(drain(&mut rx).is_empty());

    // a checkpoint older than a raised start block: scanning starts at the start block
    let old = s
        .dev
        .provider
        .get_block_by_number((below - 1).into())
        .await
        .unwrap()
        .unwrap();
    store
        .set_checkpoint(&key, below - 1, old.header.hash)
        .await
        .unwrap();
    let r = w.scan_once(&tx).await.unwrap();
    assert_eq!(r.from, start, "{r:?}");
    assert!(drain(&mut rx).is_empty());
    assert!(
        store
            .get(RoundKey::new(market, s.market_id))
            .await
            .unwrap()
            .is_none(),
        "no round for the request below the start block"
    );
}

#[tokio::test]
async fn a_request_for_a_done_round_follows_what_the_chain_says() {
    use alloy::providers::ext::AnvilApi;
    use cresolver_store::Stage;
    let s = market_with_n_workers(1).await;
    let market = s.dev.contracts.market;
    let k = RoundKey::new(market, s.market_id);
    let store = Arc::new(SqliteStore::new(Store::in_memory().unwrap()));
    let (tx, mut rx) = mpsc::channel(16);
    let mut w = Watcher::new(
        s.dev.provider.clone(),
        StoreSink::shared(store.clone()),
        cfg(&s, 0, 1000),
    );
    s.dev.request_resolution(s.market_id).await.unwrap();
    w.scan_once(&tx).await.unwrap();
    assert_eq!(drain(&mut rx).len(), 1);

    // the round is done (finalized, as the store believes), but the market is open on
    // chain: a new request is served as a new attempt, the old one kept
    store
        .set_outcome(k, &json!({"old": "transcript"}))
        .await
        .unwrap();
    store.set_state(k, Stage::Finalized, None).await.unwrap();
    let second = s.dev.request_resolution(s.market_id).await.unwrap();
    let r = w.scan_once(&tx).await.unwrap();
    assert_eq!((r.logs, r.triggers), (1, 1), "{r:?}");
    let rec = store.get(k).await.unwrap().unwrap();
    assert_eq!((rec.state, rec.attempt), (Stage::Requested, 2));
    assert_eq!(rec.request_tx, Some(second.transaction_hash));
    assert_eq!(
        rec.outcome, None,
        "the new attempt starts without a transcript"
    );
    let past = store.past_attempts(k).await.unwrap();
    assert_eq!(past.len(), 1);
    assert_eq!((past[0].attempt, past[0].state), (1, Stage::Finalized));
    assert_eq!(past[0].outcome, Some(json!({"old": "transcript"})));
    drain(&mut rx);

    // a confirmed round whose market is open on chain: reopened at the submission stage
    store.set_state(k, Stage::Confirmed, None).await.unwrap();
    s.dev.request_resolution(s.market_id).await.unwrap();
    let r = w.scan_once(&tx).await.unwrap();
    assert_eq!(r.triggers, 1, "{r:?}");
    let rec = store.get(k).await.unwrap().unwrap();
    assert_eq!(
        (rec.state, rec.attempt),
        (Stage::Submitted, 2),
        "the same attempt, back at the submission stage"
    );
    drain(&mut rx);

    // the market is resolved in the very block of the request: ignored
    store.set_state(k, Stage::Skipped, None).await.unwrap();
    let p = &s.dev.provider;
    p.anvil_set_auto_mine(false).await.unwrap();
    let gwei = 1_000_000_000u128;
    let request = s
        .dev
        .market()
        .requestResolution(s.market_id)
        .from(s.dev.requester())
        .max_priority_fee_per_gas(50 * gwei)
        .max_fee_per_gas(100 * gwei)
        .send()
        .await
        .unwrap();
    let resolve = s
        .dev
        .market()
        .resolveMarket(
            s.market_id,
            s.workers.clone(),
            vec![U256::from(1)],
            vec![50, 50, 50],
            true,
        )
        .from(s.dev.accounts[0])
        .max_priority_fee_per_gas(gwei)
        .max_fee_per_gas(100 * gwei)
        .send()
        .await
        .unwrap();
    p.evm_mine(None).await.unwrap();
    p.anvil_set_auto_mine(true).await.unwrap();
    let (a, b) = (
        request.get_receipt().await.unwrap(),
        resolve.get_receipt().await.unwrap(),
    );
    assert!(
        a.status() && b.status(),
        "both in one block, the request first"
    );
    assert_eq!(a.block_number, b.block_number);
    let r = w.scan_once(&tx).await.unwrap();
    assert_eq!((r.logs, r.triggers), (1, 0), "{r:?}");
    let rec = store.get(k).await.unwrap().unwrap();
    assert_eq!((rec.state, rec.attempt), (Stage::Skipped, 2));
    assert!(drain(&mut rx).is_empty());
}

/// Requests `market`'s resolution; the block the request is in.
async fn requested_in(s: &MarketSetup, market: U256) -> u64 {
    s.dev
        .request_resolution(market)
        .await
        .unwrap()
        .block_number
        .unwrap()
}

/// Waits for the watcher's next pass that satisfies `want`.
async fn pass_where(
    scans: &mut mpsc::UnboundedReceiver<cresolver_chain::watcher::ScanReport>,
    want: impl Fn(&cresolver_chain::watcher::ScanReport) -> bool,
) -> cresolver_chain::watcher::ScanReport {
    tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let r = scans.recv().await.expect("the watcher runs");
            if want(&r) {
                return r;
            }
        }
    })
    .await
    .expect("such a pass within 20 s")
}

/// A watcher running with the head feed of a `newHeads` subscription on anvil's
/// websocket, its calls through a counting proxy, and no poll tick (every pass after the
/// first is woken by a head): the proxy, the stop, the triggers and the passes.
async fn watch_pushed(
    s: &MarketSetup,
) -> (
    Proxy,
    tokio_util::sync::CancellationToken,
    mpsc::Receiver<Trigger>,
    mpsc::UnboundedReceiver<cresolver_chain::watcher::ScanReport>,
) {
    let proxy = Proxy::new(s.dev.rpc_url(), 1_000);
    let url = serve(proxy.clone()).await;
    let provider = cresolver_chain::connect(&url).await.unwrap();
    let store = Arc::new(SqliteStore::new(Store::in_memory().unwrap()));
    // the subscription on anvil's websocket; the watcher's calls through the proxy
    let feed = cresolver_chain::heads::HeadFeed::new();
    let stop = tokio_util::sync::CancellationToken::new();
    let push = cresolver_chain::heads::PushConfig {
        pool: cresolver_chain::pool::PoolConfig::default(),
        max_backoff: Duration::from_secs(1),
        stall_after: Duration::from_secs(30),
    };
    tokio::spawn(cresolver_chain::heads::run_push(
        s.dev.ws_endpoint(),
        push,
        feed.clone(),
        stop.clone(),
    ));
    let mut c = cfg(s, 0, 1000);
    // no poll tick: every pass after the first is woken by a head
    c.poll_interval = Duration::from_secs(600);
    c.max_backoff = Duration::from_secs(600);
    let w = Watcher::new(provider, StoreSink::shared(store), c).with_heads(feed.clone());
    let (tx, rx) = mpsc::channel(16);
    let (scan_tx, scans) = mpsc::unbounded_channel();
    tokio::spawn(w.run(tx, stop.clone(), Some(feed.subscribe()), move |r| {
        let _ = scan_tx.send(r.clone());
    }));
    (proxy, stop, rx, scans)
}

#[tokio::test]
async fn pushed_heads_are_scanned_by_hash_until_a_reorg_takes_the_full_pass() {
    let s = market_with_n_workers(1).await;
    let others = more_markets(&s, 1).await;
    let (proxy, stop, mut rx, mut scans) = watch_pushed(&s).await;
    let first = pass_where(&mut scans, |_| true).await;
    assert!(!first.pushed, "the first pass is a full one: {first:?}");
    // a pass reaches the next block once the subscription is up (woken by its push, or by
    // the subscription's start)
    s.dev.advance(Duration::from_secs(1)).await.unwrap();
    let n = s.dev.provider.get_block_number().await.unwrap();
    pass_where(&mut scans, |r| r.to == Some(n)).await;

    // a request: its block is pushed, and scanned by its hash alone
    proxy.methods.lock().unwrap().clear();
    let block = requested_in(&s, s.market_id).await;
    let r = pass_where(&mut scans, |r| r.to == Some(block)).await;
    assert!(r.pushed, "{r:?}");
    assert_eq!((r.from, r.logs, r.triggers), (block, 1, 1));
    let t = tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(t.round.id, s.market_id.into());
    assert_eq!(
        proxy.methods.lock().unwrap().clone(),
        vec!["eth_getLogs(blockHash)".to_string()],
        "one call for the pushed block"
    );

    // a reorg: the block after the checkpoint is replaced (an empty block, so that the
    // test's accounts keep their nonces); the pushed chain no longer links the
    // checkpoint, so the full pass rewinds
    let snapshot: U256 = s
        .dev
        .provider
        .raw_request("evm_snapshot".into(), ())
        .await
        .unwrap();
    s.dev.advance(Duration::from_secs(1)).await.unwrap();
    let replaced = s.dev.provider.get_block_number().await.unwrap();
    let r = pass_where(&mut scans, |r| r.to == Some(replaced)).await;
    assert!(r.pushed, "{r:?}");
    let reverted: bool = s
        .dev
        .provider
        .raw_request("evm_revert".into(), (snapshot,))
        .await
        .unwrap();
    assert!(reverted);
    s.dev
        .provider
        .raw_request::<_, Value>("anvil_mine".into(), (U256::from(2),))
        .await
        .unwrap();
    let r = pass_where(&mut scans, |r| r.rewound_to.is_some()).await;
    assert!(!r.pushed, "a reorg takes the full pass: {r:?}");
    assert_eq!(r.to, Some(replaced + 1), "{r:?}");
    assert_eq!(
        r.triggers, 0,
        "the request seen before is not served again: {r:?}"
    );

    // after it, pushed heads link again: the next request is scanned by hash
    let block = requested_in(&s, others[0]).await;
    let r = pass_where(&mut scans, |r| r.to == Some(block)).await;
    assert!(r.pushed && r.triggers == 1, "{r:?}");
    let t = tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(t.round.id, others[0].into());
    stop.cancel();
}
