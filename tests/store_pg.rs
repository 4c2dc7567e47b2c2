//! The store interface against both backends (the embedded SQLite file and a real
//! PostgreSQL server started by the harness), and what only a shared store has: leases
//! with fencing terms, takeovers, and nonces reserved by several nodes at once.

use crate::common;

use alloy::primitives::{Address, B256, Bytes, U256};
use common::pg::Pg;
use cresolver_core::LogRef;
use cresolver_store::RoundKey;
use cresolver_store::{
    AttemptRecord, Fence, KeyRef, Leases, NonceState, Nonces, Overview, PgConfig, PgStore,
    RequestDecision, Requests, RoundStore, Rounds, Settings, SqliteStore, Stage, Store, StoreError,
    TxPayload,
};
use std::sync::Arc;
use std::time::Duration;

#[path = "store_pg/lz4.rs"]
mod lz4;
#[path = "store_pg/requests.rs"]
mod requests;
#[path = "store_pg/updated.rs"]
mod updated;

fn settings(node: &str, lease: Duration) -> PgConfig {
    PgConfig {
        node_id: node.into(),
        lease,
        max_connections: 8,
        ca_file: None,
    }
}

async fn pg_store(pg: &Pg, node: &str, lease: Duration) -> PgStore {
    PgStore::connect(&pg.url(), settings(node, lease))
        .await
        .unwrap()
}

/// Three nodes (a, b, c) on one server, leases of 30 s.
async fn three_nodes(pg: &Pg) -> Vec<Arc<PgStore>> {
    futures::future::join_all(["a", "b", "c"].map(|n| pg_store(pg, n, Duration::from_secs(30))))
        .await
        .into_iter()
        .map(Arc::new)
        .collect()
}

fn log(i: u8) -> LogRef {
    LogRef {
        tx_hash: B256::repeat_byte(i),
        log_index: 0,
        block_number: i as u64,
        block_hash: B256::repeat_byte(0xb0 + i),
    }
}

fn payload(m: Address, id: u64) -> TxPayload {
    TxPayload {
        market: m,
        market_id: U256::from(id).into(),
        to: Address::repeat_byte(2),
        calldata: Bytes::from(vec![1, 2, 3]),
        gas_limit: 100_000,
    }
}

fn attempt(nonce: u64, seq: u32) -> AttemptRecord {
    AttemptRecord {
        nonce,
        seq,
        tx_hash: B256::repeat_byte(seq as u8 + 1),
        raw: Bytes::from(vec![seq as u8; 3]),
        max_fee_per_gas: u128::MAX - seq as u128,
        max_priority_fee_per_gas: 7,
        gas_limit: 1,
        sent_block: None,
        created_at: 0,
    }
}

/// The round state machine, progress, checkpoints, nonces and attempts: the same
/// sequence on either backend gives the same answers.
async fn store_contract(s: &dyn RoundStore) {
    let m = Address::repeat_byte(1);
    round_contract(s, m).await;
    let key = KeyRef {
        signer: Address::repeat_byte(9),
        chain_id: 31337,
    };
    nonce_contract(s, m, key).await;
    second_key_contract(s, m, key).await;

    // checkpoints, summaries and counts
    s.set_checkpoint("k", 42, B256::repeat_byte(4))
        .await
        .unwrap();
    assert_eq!(
        s.checkpoint("k").await.unwrap(),
        Some((42, B256::repeat_byte(4)))
    );
    let (page, next) = s.list_summaries(2, None).await.unwrap();
    assert_eq!(page.len(), 2);
    let (rest, _) = s.list_summaries(10, next).await.unwrap();
    assert_eq!(page.len() + rest.len(), 4, "pages cover every round once");
    let total: u64 = s
        .count_by_state()
        .await
        .unwrap()
        .iter()
        .map(|(_, n)| n)
        .sum();
    assert_eq!(total, 4);
    s.probe_write().await.unwrap();
}

/// Round 7 of market `m`: a request recorded once per log, a failed round reopened by a
/// new request as attempt 2, and progress kept per attempt.
async fn round_contract(s: &dyn RoundStore, m: Address) {
    let id = U256::from(7);
    assert_eq!(
        s.record_request(RoundKey::new(m, id), "wf", &log(1))
            .await
            .unwrap(),
        RequestDecision::New
    );
    assert_eq!(
        s.record_request(RoundKey::new(m, id), "wf", &log(1))
            .await
            .unwrap(),
        RequestDecision::DuplicateLog
    );
    assert_eq!(
        s.record_request(RoundKey::new(m, id), "wf", &log(2))
            .await
            .unwrap(),
        RequestDecision::AlreadyHandled(Stage::Requested)
    );
    assert!(s.claim(RoundKey::new(m, id), true).await.unwrap().is_some());
    s.set_state(RoundKey::new(m, id), Stage::Failed, Some("quorum not met"))
        .await
        .unwrap();
    s.release(RoundKey::new(m, id), None).await.unwrap();
    assert_eq!(
        s.record_request(RoundKey::new(m, id), "wf", &log(3))
            .await
            .unwrap(),
        RequestDecision::Reopened
    );
    let r = s.get(RoundKey::new(m, id)).await.unwrap().unwrap();
    assert_eq!(
        (r.state, r.attempt, r.reason.clone(), r.request_tx),
        (Stage::Requested, 2, None, Some(B256::repeat_byte(3)))
    );
    assert_eq!(s.unfinished().await.unwrap().len(), 1);

    // progress is kept per attempt
    assert!(s.claim(RoundKey::new(m, id), true).await.unwrap().is_some());
    let p = serde_json::json!({"resolve": {"x": 1}});
    s.save_progress(RoundKey::new(m, id), 2, Stage::Answered, &p)
        .await
        .unwrap();
    assert_eq!(s.progress(RoundKey::new(m, id), 2).await.unwrap(), Some(p));
    assert_eq!(s.progress(RoundKey::new(m, id), 1).await.unwrap(), None);
    s.set_request_block(RoundKey::new(m, id), 99).await.unwrap();
    s.set_outcome(RoundKey::new(m, id), &serde_json::json!({"version": 2}))
        .await
        .unwrap();
    let r = s.get(RoundKey::new(m, id)).await.unwrap().unwrap();
    assert_eq!(r.state, Stage::Answered);
    assert_eq!(r.request_block, Some(99));
    assert_eq!(r.outcome, Some(serde_json::json!({"version": 2})));
}

/// Nonces of rounds 101 to 103 of market `m` under `key`: never handed out twice,
/// whatever the chain's pending count says; their attempts, the first broadcast block
/// kept, lost and mined nonces, and the round's transaction history.
async fn nonce_contract(s: &dyn RoundStore, m: Address, key: KeyRef) {
    for i in 1..=3u64 {
        s.manual_request(RoundKey::new(m, U256::from(100 + i)), "wf")
            .await
            .unwrap();
        assert!(
            s.claim(RoundKey::new(m, U256::from(100 + i)), true)
                .await
                .unwrap()
                .is_some()
        );
    }
    assert_eq!(s.reserve_nonce(key, 5, &payload(m, 101)).await.unwrap(), 5);
    assert_eq!(s.reserve_nonce(key, 5, &payload(m, 102)).await.unwrap(), 6);
    assert_eq!(
        s.reserve_nonce(key, 10, &payload(m, 103)).await.unwrap(),
        10
    );
    assert_eq!(
        s.get(RoundKey::new(m, U256::from(102)))
            .await
            .unwrap()
            .unwrap()
            .state,
        Stage::Submitted
    );
    for seq in 0..3 {
        s.add_attempt(key, RoundKey::new(m, U256::from(101)), &attempt(5, seq))
            .await
            .unwrap();
    }
    s.mark_attempt_sent(key, RoundKey::new(m, U256::from(101)), 5, 1, 42)
        .await
        .unwrap();
    s.mark_attempt_sent(key, RoundKey::new(m, U256::from(101)), 5, 1, 50)
        .await
        .unwrap();
    let a = s.attempts(key, 5).await.unwrap();
    assert_eq!(a.len(), 3);
    assert_eq!(
        a[1].sent_block,
        Some(42),
        "the first broadcast block is kept"
    );
    assert_eq!(a[2].max_fee_per_gas, u128::MAX - 2, "u128 fees round-trip");
    s.finish_nonce(key, 6, NonceState::Lost, None, Some("used elsewhere"))
        .await
        .unwrap();
    s.finish_nonce(
        key,
        5,
        NonceState::Mined,
        Some(cresolver_store::MinedAt {
            tx: B256::repeat_byte(2),
            block: 9,
            block_hash: B256::repeat_byte(0x99),
        }),
        None,
    )
    .await
    .unwrap();
    assert_eq!(
        s.pending_nonces(key)
            .await
            .unwrap()
            .iter()
            .map(|n| n.nonce)
            .collect::<Vec<_>>(),
        vec![10]
    );
    assert_eq!(
        s.pending_nonce_of(key, RoundKey::new(m, U256::from(103)))
            .await
            .unwrap()
            .map(|n| n.nonce),
        Some(10)
    );
    assert_eq!(s.highest_nonce(key).await.unwrap(), Some(10));
    let h = s
        .tx_history(RoundKey::new(m, U256::from(101)))
        .await
        .unwrap();
    assert_eq!(h.len(), 1);
    assert_eq!(h[0].0.state, NonceState::Mined);
    assert_eq!(h[0].1.len(), 3);
    assert_eq!(
        s.get(RoundKey::new(m, U256::from(101)))
            .await
            .unwrap()
            .unwrap()
            .submit_tx,
        Some(B256::repeat_byte(2)),
        "the mined attempt"
    );
}

/// A second key's reservation for round 101 of market `m` at the nonce number `key`
/// mined it with: the history and the reads keep each attempt with its own key's nonce.
async fn second_key_contract(s: &dyn RoundStore, m: Address, key: KeyRef) {
    let other = KeyRef {
        signer: Address::repeat_byte(7),
        chain_id: 31337,
    };
    assert_eq!(
        s.reserve_nonce(other, 5, &payload(m, 101)).await.unwrap(),
        5
    );
    s.add_attempt(other, RoundKey::new(m, U256::from(101)), &attempt(5, 0))
        .await
        .unwrap();
    let mut h: Vec<(NonceState, usize)> = s
        .tx_history(RoundKey::new(m, U256::from(101)))
        .await
        .unwrap()
        .iter()
        .map(|(n, a)| (n.state, a.len()))
        .collect();
    h.sort_by_key(|(_, n)| *n);
    assert_eq!(h, vec![(NonceState::Pending, 1), (NonceState::Mined, 3)]);
    let pending = s
        .pending_nonces_of_round(RoundKey::new(m, U256::from(101)))
        .await
        .unwrap();
    assert_eq!(
        pending
            .iter()
            .map(|(k, n)| (*k, n.nonce))
            .collect::<Vec<_>>(),
        vec![(other, 5)]
    );
    for k in [key, other] {
        let (rec, attempts) = s.nonce_with_attempts(k, 5).await.unwrap();
        assert_eq!(rec, s.nonce_record(k, 5).await.unwrap());
        assert_eq!(attempts, s.attempts(k, 5).await.unwrap());
    }
    assert_eq!(s.nonce_with_attempts(other, 5).await.unwrap().1.len(), 1);
}

/// The finality watch's transitions and new attempts of done rounds, with no lease
/// held: confirmed → submitted (the mined nonce pending again, its attempts unsent),
/// confirmed → finalized, a finalized round renewed (the old attempt kept).
async fn finality_contract(s: &dyn RoundStore) {
    let m = Address::repeat_byte(3);
    let id = U256::from(1);
    let key = KeyRef {
        signer: Address::repeat_byte(8),
        chain_id: 31337,
    };
    assert_eq!(
        s.manual_request(RoundKey::new(m, id), "wf").await.unwrap(),
        RequestDecision::New
    );
    assert!(s.claim(RoundKey::new(m, id), true).await.unwrap().is_some());
    assert_eq!(s.reserve_nonce(key, 0, &payload(m, 1)).await.unwrap(), 0);
    s.add_attempt(key, RoundKey::new(m, id), &attempt(0, 0))
        .await
        .unwrap();
    s.mark_attempt_sent(key, RoundKey::new(m, id), 0, 0, 5)
        .await
        .unwrap();
    s.set_outcome(RoundKey::new(m, id), &serde_json::json!({"v": 1}))
        .await
        .unwrap();
    s.release(RoundKey::new(m, id), None).await.unwrap();
    confirm(s, m, id, key, 0xa1).await;

    let w = s.awaiting_finality(10).await.unwrap();
    assert_eq!(w.len(), 1);
    let (k, nonce, at) = w[0].mined.unwrap();
    assert_eq!(
        (k, nonce, at.block, at.block_hash),
        (key, 0, 7, B256::repeat_byte(0xa1))
    );
    assert_eq!(
        s.manual_request(RoundKey::new(m, id), "wf").await.unwrap(),
        RequestDecision::AlreadyHandled(Stage::Confirmed),
        "without the chain's word a done round is left alone"
    );
    reorg_contract(s, m, id, key).await;

    // re-confirmed, then final, once
    confirm(s, m, id, key, 0xa2).await;
    finalize_and_renew_contract(s, m, id).await;

    // node settings: the first writer wins
    assert_eq!(
        s.setting_or_init("chorus.orchestrator_id", "a")
            .await
            .unwrap(),
        "a"
    );
    assert_eq!(
        s.setting_or_init("chorus.orchestrator_id", "b")
            .await
            .unwrap(),
        "a"
    );
}

/// Confirms round `id` of market `m` as the node does: claimed, its nonce 0 under `key`
/// mined in a block whose hash is all `hash` bytes, the round confirmed and released.
async fn confirm(s: &dyn RoundStore, m: Address, id: U256, key: KeyRef, hash: u8) {
    assert!(s.claim(RoundKey::new(m, id), true).await.unwrap().is_some());
    s.finish_nonce(
        key,
        0,
        NonceState::Mined,
        Some(cresolver_store::MinedAt {
            tx: B256::repeat_byte(1),
            block: 7,
            block_hash: B256::repeat_byte(hash),
        }),
        None,
    )
    .await
    .unwrap();
    s.set_state(RoundKey::new(m, id), Stage::Confirmed, None)
        .await
        .unwrap();
    s.release(RoundKey::new(m, id), None).await.unwrap();
}

/// A confirmed round whose transaction was reorged out: reopened at the submission
/// stage, once, its nonce pending again and its attempt unsent, off the finality watch.
async fn reorg_contract(s: &dyn RoundStore, m: Address, id: U256, key: KeyRef) {
    let v2 = serde_json::json!({"v": 2});
    assert!(
        s.reopen_submission(RoundKey::new(m, id), "reorged", Some(&v2))
            .await
            .unwrap()
    );
    assert!(
        !s.reopen_submission(RoundKey::new(m, id), "reorged", None)
            .await
            .unwrap()
    );
    let r = s.get(RoundKey::new(m, id)).await.unwrap().unwrap();
    assert_eq!(
        (r.state, r.reason.as_deref(), r.outcome, r.attempt),
        (Stage::Submitted, Some("reorged"), Some(v2), 1)
    );
    let n = s
        .pending_nonce_of(key, RoundKey::new(m, id))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((n.nonce, n.mined_tx, n.mined_hash), (0, None, None));
    assert_eq!(s.attempts(key, 0).await.unwrap()[0].sent_block, None);
    assert!(s.awaiting_finality(10).await.unwrap().is_empty());
    assert_eq!(
        s.unfinished()
            .await
            .unwrap()
            .iter()
            .filter(|r| r.market == m)
            .count(),
        1
    );
}

/// A confirmed round finalized once and then left alone; a new request for it renews it
/// only when the chain says the market is open, the old attempt kept.
async fn finalize_and_renew_contract(s: &dyn RoundStore, m: Address, id: U256) {
    let v3 = serde_json::json!({"v": 3});
    assert!(
        s.set_finalized(RoundKey::new(m, id), Some(&v3))
            .await
            .unwrap()
    );
    assert!(!s.set_finalized(RoundKey::new(m, id), None).await.unwrap());
    let r = s.get(RoundKey::new(m, id)).await.unwrap().unwrap();
    assert_eq!(
        (r.state, r.outcome.clone()),
        (Stage::Finalized, Some(v3.clone()))
    );
    assert!(
        s.claim(RoundKey::new(m, id), true).await.unwrap().is_none(),
        "a final round is not driven"
    );

    // a new request for it: ignored unless the chain says the market is open
    assert_eq!(
        s.manual_request_judged(RoundKey::new(m, id), "wf", false)
            .await
            .unwrap(),
        RequestDecision::AlreadyHandled(Stage::Finalized)
    );
    assert_eq!(
        s.record_request_judged(RoundKey::new(m, id), "wf", &log(40), true)
            .await
            .unwrap(),
        RequestDecision::Renewed
    );
    let r = s.get(RoundKey::new(m, id)).await.unwrap().unwrap();
    assert_eq!(
        (r.state, r.attempt, r.outcome, r.submit_tx, r.request_tx),
        (Stage::Requested, 2, None, None, Some(B256::repeat_byte(40)))
    );
    let past = s.past_attempts(RoundKey::new(m, id)).await.unwrap();
    assert_eq!(past.len(), 1);
    assert_eq!(
        (past[0].attempt, past[0].state, past[0].outcome.clone()),
        (1, Stage::Finalized, Some(v3))
    );
    assert!(
        !s.renew_round(RoundKey::new(m, id), "wf", None, Stage::Finalized)
            .await
            .unwrap(),
        "a round that left the state is not renewed twice"
    );
}

#[tokio::test]
async fn the_store_contract_holds_on_sqlite() {
    let s = SqliteStore::new(Store::in_memory().unwrap());
    store_contract(&s).await;
    finality_contract(&s).await;
}

#[tokio::test]
async fn the_store_contract_holds_on_postgres() {
    let pg = Pg::start();
    let s = pg_store(&pg, "node-a", Duration::from_secs(15)).await;
    store_contract(&s).await;
    // a second node connecting to the migrated database applies nothing twice
    let again = pg_store(&pg, "node-b", Duration::from_secs(15)).await;
    assert_eq!(again.unfinished().await.unwrap().len(), 4);
    assert_eq!(
        pg.psql("SELECT string_agg(version::text, ',' ORDER BY version) FROM schema_migrations"),
        "1,2"
    );
    finality_contract(&s).await;
    // a second node of the cluster reads the same setting
    assert_eq!(
        again
            .setting_or_init("chorus.orchestrator_id", "c")
            .await
            .unwrap(),
        "a"
    );
    // a second node of the cluster reads the same setting
    assert_eq!(
        again
            .setting_or_init("chorus.orchestrator_id", "c")
            .await
            .unwrap(),
        "a"
    );
}

#[tokio::test]
async fn leases_fence_a_node_that_lost_its_round() {
    let pg = Pg::start();
    let lease = Duration::from_millis(600);
    let a = pg_store(&pg, "node-a", lease).await;
    let b = pg_store(&pg, "node-b", lease).await;
    let k = RoundKey::new(Address::repeat_byte(1), 1u64);
    a.manual_request(k, "wf").await.unwrap();

    let la = a.claim(k, false).await.unwrap().expect("a claims");
    assert!(b.claim(k, false).await.unwrap().is_none(), "held by a");
    assert!(b.claim(k, true).await.unwrap().is_none(), "held by a");
    assert!(a.renew(k).await.unwrap());
    assert!(b.claimable(&[k.market], 10).await.unwrap().is_empty());
    a.set_state(k, Stage::Discovered, None).await.unwrap();

    // a stops renewing (paused); its lease expires; b takes the round over
    tokio::time::sleep(lease + Duration::from_millis(200)).await;
    assert_eq!(b.claimable(&[k.market], 10).await.unwrap(), vec![k]);
    assert!(
        b.claimable(&[Address::repeat_byte(0x77)], 10)
            .await
            .unwrap()
            .is_empty(),
        "only the markets a node has a workflow for"
    );
    let lb = b.claim(k, false).await.unwrap().expect("b takes over");
    assert!(lb.term > la.term, "a new term fences the old one");
    assert_eq!(lb.taken_from.as_deref(), Some("node-a"));
    b.set_state(k, Stage::Answered, None).await.unwrap();

    // a wakes up: every write and every broadcast check is refused, nothing of b's is overwritten
    let key = KeyRef {
        signer: Address::repeat_byte(9),
        chain_id: 1,
    };
    let refused = [
        a.set_state(k, Stage::Failed, Some("stale")).await,
        a.save_progress(k, 1, Stage::Evaluated, &serde_json::json!({}))
            .await,
        a.set_outcome(k, &serde_json::json!({"stale": true})).await,
        a.reserve_nonce(key, 0, &payload(k.market, 1))
            .await
            .map(|_| ()),
    ];
    for r in refused {
        assert!(
            matches!(r, Err(StoreError::LeaseLost(..))),
            "a stale write was not refused: {r:?}"
        );
    }
    assert!(!a.fence_ok(k).await.unwrap());
    assert!(!a.renew(k).await.unwrap());
    let r = b.get(k).await.unwrap().unwrap();
    assert_eq!(r.state, Stage::Answered);
    assert_eq!(r.outcome, None);
    assert_eq!(r.holder.as_deref(), Some("node-b"));
    assert!(b.pending_nonce_of(key, k).await.unwrap().is_none());

    // b's writes go on; a release with a back-off keeps other nodes' claim loops away
    assert_eq!(
        b.reserve_nonce(key, 0, &payload(k.market, 1))
            .await
            .unwrap(),
        0
    );
    b.add_attempt(key, k, &attempt(0, 0)).await.unwrap();
    assert!(b.fence_ok(k).await.unwrap());
    b.release(k, Some(Duration::from_secs(30))).await.unwrap();
    assert!(
        a.claimable(&[k.market], 10).await.unwrap().is_empty(),
        "backing off"
    );
    assert!(a.claim(k, false).await.unwrap().is_none());
    // an operator's retry (or the node's own) does not wait for the back-off
    assert!(a.claim(k, true).await.unwrap().is_some());
    a.set_state(k, Stage::Confirmed, None).await.unwrap();
    a.release(k, None).await.unwrap();
    assert!(
        b.claim(k, true).await.unwrap().is_none(),
        "a final round is never claimed"
    );
    let (page, _) = b.list_summaries(10, None).await.unwrap();
    assert_eq!(page[0].driven_by.as_deref(), Some("node-a"));
    assert_eq!(page[0].holder, None);
}

#[tokio::test]
async fn nodes_sharing_a_key_never_reserve_the_same_nonce() {
    let pg = Pg::start();
    let nodes = three_nodes(&pg).await;
    let m = Address::repeat_byte(1);
    let key = KeyRef {
        signer: Address::repeat_byte(9),
        chain_id: 31337,
    };
    // 3 nodes × 15 rounds each, all reserving at once; the chain's pending count lags
    let mut tasks = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        for j in 0..15u64 {
            let (node, id) = (node.clone(), (i as u64) * 100 + j);
            tasks.push(tokio::spawn(async move {
                node.manual_request(RoundKey::new(m, U256::from(id)), "wf")
                    .await
                    .unwrap();
                node.claim(RoundKey::new(m, U256::from(id)), true)
                    .await
                    .unwrap()
                    .unwrap();
                node.reserve_nonce(key, 3, &payload(m, id)).await.unwrap()
            }));
        }
    }
    let mut nonces: Vec<u64> = futures::future::join_all(tasks)
        .await
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    nonces.sort();
    assert_eq!(
        nonces,
        (3..48).collect::<Vec<_>>(),
        "45 distinct nonces, no gap"
    );
}

#[tokio::test]
async fn an_unreachable_database_is_a_clear_error_without_its_password() {
    let port = common::node::free_port();
    let url = format!("postgres://resolver:hunter2secret@127.0.0.1:{port}/cresolver");
    let e = match PgStore::connect(&url, settings("x", Duration::from_secs(15))).await {
        Ok(_) => panic!("nothing listens there"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains(&format!("127.0.0.1:{port}")), "{e}");
    assert!(!e.contains("hunter2secret"), "the password leaked: {e}");
    assert!(e.to_lowercase().contains("refused"), "{e}");
}

/// A CA, and a certificate for 127.0.0.1 that it signed: (CA PEM, server cert PEM, server key PEM).
fn test_pki() -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "cresolver test CA");
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&key, &ca)
        .unwrap();
    (ca.pem(), cert.pem(), key.serialize_pem())
}

#[tokio::test]
async fn tls_to_postgres_verifies_the_server_certificate() {
    let mut pg = Pg::start();
    let dir = common::node::tmpdir("pg-tls");
    let (ca, cert, key) = test_pki();
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, &ca).unwrap();
    let url = format!("{}?sslmode=verify-full", pg.url());

    // a server without TLS is refused when TLS is required
    let plain = PgStore::connect(
        &url,
        PgConfig {
            ca_file: Some(ca_file.clone()),
            ..settings("a", Duration::from_secs(15))
        },
    )
    .await;
    assert!(plain.is_err(), "connected without TLS");

    pg.enable_tls(&cert, &key);
    // the server's CA is not trusted: no connection
    let e = match PgStore::connect(&url, settings("a", Duration::from_secs(15))).await {
        Ok(_) => panic!("connected to a server whose certificate is not trusted"),
        Err(e) => e.to_string(),
    };
    assert!(e.to_lowercase().contains("certificate"), "{e}");
    assert!(!e.contains(pg.password()), "{e}");

    // trusted through store.ca_file: connected, and the session is encrypted
    let s = PgStore::connect(
        &url,
        PgConfig {
            ca_file: Some(ca_file),
            ..settings("a", Duration::from_secs(15))
        },
    )
    .await
    .unwrap();
    store_contract(&s).await;
    let encrypted: u32 = pg
        .psql("SELECT count(*) FROM pg_stat_ssl JOIN pg_stat_activity USING (pid) WHERE ssl AND application_name = 'cresolver'")
        .parse()
        .unwrap();
    assert!(encrypted > 0, "the node's connections use TLS");
    // sslmode=disable stays plain TCP
    let plain = PgStore::connect(
        &format!("{}?sslmode=disable", pg.url()),
        settings("b", Duration::from_secs(15)),
    )
    .await
    .unwrap();
    assert_eq!(plain.unfinished().await.unwrap().len(), 4);
}

/// A node whose lease expired still holds its old term in memory until a write of it is
/// refused: each of its writes of the transaction manager reaches the database, and the
/// fence in the statement itself (holder and term) refuses it, one takeover each.
#[tokio::test]
async fn the_fence_in_each_statement_refuses_a_stale_holder() {
    let pg = Pg::start();
    let lease = Duration::from_millis(300);
    let a = pg_store(&pg, "node-a", lease).await;
    let b = pg_store(&pg, "node-b", lease).await;
    let (m, id) = (Address::repeat_byte(5), U256::from(1));
    let k = RoundKey::new(m, id);
    let key = KeyRef {
        signer: Address::repeat_byte(9),
        chain_id: 1,
    };
    a.manual_request(k, "wf").await.unwrap();
    // a takes the round, lets its lease lapse, b takes it over; a keeps its term
    async fn takeover(a: &PgStore, b: &PgStore, k: RoundKey, lease: Duration) {
        a.claim(k, true).await.unwrap().expect("a claims");
        tokio::time::sleep(lease + Duration::from_millis(150)).await;
        b.claim(k, false).await.unwrap().expect("b takes over");
    }
    let lost = |r: Result<(), StoreError>| {
        assert!(
            matches!(r, Err(StoreError::LeaseLost(..))),
            "a stale write was not refused: {r:?}"
        )
    };

    takeover(&a, &b, k, lease).await;
    lost(a.reserve_nonce(key, 0, &payload(m, 1)).await.map(|_| ()));
    assert_eq!(a.highest_nonce(key).await.unwrap(), None, "no nonce taken");
    assert_eq!(b.reserve_nonce(key, 0, &payload(m, 1)).await.unwrap(), 0);
    b.add_attempt(key, k, &attempt(0, 0)).await.unwrap();
    b.release(k, None).await.unwrap();

    takeover(&a, &b, k, lease).await;
    lost(a.mark_attempt_sent(key, k, 0, 0, 5).await);
    assert_eq!(b.attempts(key, 0).await.unwrap()[0].sent_block, None);
    b.mark_attempt_sent(key, k, 0, 0, 7).await.unwrap();
    assert_eq!(b.attempts(key, 0).await.unwrap()[0].sent_block, Some(7));
    b.release(k, None).await.unwrap();

    takeover(&a, &b, k, lease).await;
    lost(
        a.finish_nonce(key, 0, NonceState::Lost, None, Some("stale"))
            .await,
    );
    assert_eq!(
        b.pending_nonce_of(key, k).await.unwrap().map(|n| n.nonce),
        Some(0),
        "the nonce is still b's and pending"
    );
}
