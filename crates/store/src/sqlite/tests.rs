//! The SQLite store's own tests: transitions, de-duplication, leases, nonces and
//! attempts, durability and migrations. Run synchronously ([`block_on`] outside a
//! runtime: each call's statements on this thread).

use super::{SqliteStore, Store};
use crate::*;
use alloy_primitives::{Address, B256, Bytes, U256};
use cresolver_core::LogRef;

thread_local! {
    /// How many transactions this test's thread committed with `synchronous = FULL`.
    pub(crate) static SYNCED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

fn synced() -> usize {
    SYNCED.with(|n| n.get())
}

fn log(i: u8) -> LogRef {
    LogRef {
        tx_hash: B256::repeat_byte(i),
        log_index: 0,
        block_number: i as u64,
        block_hash: B256::repeat_byte(0xb0 + i),
    }
}

#[test]
fn one_round_per_market_and_log_dedupe() {
    let s = SqliteStore::new(Store::in_memory().unwrap());
    let m = Address::repeat_byte(1);
    let id = U256::from(7);
    assert_eq!(
        block_on(s.record_request(RoundKey::new(m, id), "wf", &log(1))).unwrap(),
        RequestDecision::New
    );
    assert_eq!(
        block_on(s.record_request(RoundKey::new(m, id), "wf", &log(1))).unwrap(),
        RequestDecision::DuplicateLog
    );
    assert_eq!(
        block_on(s.record_request(RoundKey::new(m, id), "wf", &log(2))).unwrap(),
        RequestDecision::AlreadyHandled(Stage::Requested)
    );
    block_on(s.set_state(RoundKey::new(m, id), Stage::Failed, Some("quorum not met"))).unwrap();
    assert_eq!(
        block_on(s.record_request(RoundKey::new(m, id), "wf", &log(3))).unwrap(),
        RequestDecision::Reopened
    );
    let r = block_on(s.get(RoundKey::new(m, id))).unwrap().unwrap();
    assert_eq!(
        (r.state, r.attempt, r.reason.clone()),
        (Stage::Requested, 2, None)
    );
    assert_eq!(r.request_tx, Some(B256::repeat_byte(3)));
    assert_eq!(block_on(s.unfinished()).unwrap().len(), 1);
    block_on(s.set_state(RoundKey::new(m, id), Stage::Confirmed, None)).unwrap();
    assert!(block_on(s.unfinished()).unwrap().is_empty());
    assert_eq!(
        block_on(s.manual_request(RoundKey::new(m, id), "wf")).unwrap(),
        RequestDecision::AlreadyHandled(Stage::Confirmed)
    );
    assert_eq!(
        block_on(s.count_by_state()).unwrap(),
        vec![(Stage::Confirmed, 1)]
    );
}

#[test]
fn many_openers_of_a_new_file_migrate_it_once() {
    // a node and the CLI (or a test) may open a fresh or old file at the same moment
    let dir = std::env::temp_dir().join(format!("cresolver-store-race-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let d = dir.clone();
            std::thread::spawn(move || Store::open(&d).map(|_| ()))
        })
        .collect();
    for h in handles {
        h.join().unwrap().unwrap();
    }
    let s = SqliteStore::open(&dir).unwrap();
    block_on(s.manual_request(RoundKey::new(Address::ZERO, U256::from(1)), "wf")).unwrap();
    assert_eq!(
        block_on(s.claim(RoundKey::new(Address::ZERO, U256::from(1)), false))
            .unwrap()
            .map(|l| l.term),
        Some(1)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn persists_across_reopen() {
    let dir = std::env::temp_dir().join(format!("cresolver-store-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    {
        let s = SqliteStore::open(&dir).unwrap();
        block_on(s.set_checkpoint("k", 42, B256::repeat_byte(4))).unwrap();
        block_on(s.manual_request(RoundKey::new(Address::ZERO, U256::from(1)), "wf")).unwrap();
    }
    let s = SqliteStore::open(&dir).unwrap();
    assert_eq!(
        block_on(s.checkpoint("k")).unwrap(),
        Some((42, B256::repeat_byte(4)))
    );
    assert_eq!(block_on(s.unfinished()).unwrap().len(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn only_the_writes_before_an_effect_are_synced() {
    // WAL with `synchronous = NORMAL` on the connection: a commit survives the process's
    // crash; the writes before a broadcast or a reply commit with FULL (the WAL synced)
    // and put the connection back to NORMAL, also when they fail
    let dir = std::env::temp_dir().join(format!("cresolver-store-sync-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let s = SqliteStore::open(&dir).unwrap();
    let level = |s: &SqliteStore| -> i64 {
        s.db.conn()
            .query_row("PRAGMA synchronous", [], |r| r.get(0))
            .unwrap()
    };
    let journal: String =
        s.db.conn()
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
    assert_eq!((journal.as_str(), level(&s)), ("wal", 1));
    let inside = s
        .db
        .in_durable_tx(|tx| Ok(tx.query_row("PRAGMA synchronous", [], |r| r.get::<_, i64>(0))?))
        .unwrap();
    assert_eq!((inside, level(&s)), (2, 1));
    let failed: Result<(), _> =
        s.db.in_durable_tx(|_| Err(StoreError::Corrupt("no".into())));
    assert!(failed.is_err());
    assert_eq!(level(&s), 1);
    // a failed durable write rolled back: nothing of it stays
    let m = Address::repeat_byte(3);
    let kept: Result<(), _> = s.db.in_durable_tx(|tx| {
        super::upsert_round(tx, RoundKey::new(m, U256::from(1)), "wf", None, false)?;
        Err(StoreError::Corrupt("after the write".into()))
    });
    assert!(kept.is_err());
    assert!(
        block_on(s.get(RoundKey::new(m, U256::from(1))))
            .unwrap()
            .is_none()
    );
    // the synced writes: a manual request, a node setting, the readiness probe, a
    // signed attempt (before its broadcast); the others are not
    let before = synced();
    block_on(s.manual_request(RoundKey::new(m, U256::from(1)), "wf")).unwrap();
    assert_eq!(block_on(s.setting_or_init("k", "v")).unwrap(), "v");
    block_on(s.probe_write()).unwrap();
    assert_eq!(synced(), before + 3);
    let key = KeyRef {
        signer: Address::repeat_byte(9),
        chain_id: 1,
    };
    let payload = TxPayload {
        market: m,
        market_id: U256::from(1).into(),
        to: m,
        calldata: Default::default(),
        gas_limit: 1,
    };
    block_on(s.claim(RoundKey::new(m, U256::from(1)), false)).unwrap();
    block_on(s.set_state(RoundKey::new(m, U256::from(1)), Stage::Evaluated, None)).unwrap();
    block_on(s.set_checkpoint("c", 1, B256::ZERO)).unwrap();
    let nonce = block_on(s.reserve_nonce(key, 0, &payload)).unwrap();
    assert_eq!(synced(), before + 3, "no sync before the attempt");
    let attempt = AttemptRecord {
        nonce,
        seq: 0,
        tx_hash: B256::repeat_byte(1),
        raw: Default::default(),
        max_fee_per_gas: 2,
        max_priority_fee_per_gas: 1,
        gas_limit: 1,
        sent_block: None,
        created_at: 0,
    };
    block_on(s.add_attempt(key, RoundKey::new(m, U256::from(1)), &attempt)).unwrap();
    assert_eq!(
        synced(),
        before + 4,
        "the attempt is synced before its broadcast"
    );
    block_on(s.mark_attempt_sent(key, RoundKey::new(m, U256::from(1)), nonce, 0, 1)).unwrap();
    assert_eq!(synced(), before + 4);
    assert_eq!(level(&s), 1);
    drop(s);
    let s = SqliteStore::open(&dir).unwrap();
    assert!(
        block_on(s.get(RoundKey::new(m, U256::from(1))))
            .unwrap()
            .is_some()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn payload(id: u64) -> TxPayload {
    TxPayload {
        market: Address::repeat_byte(1),
        market_id: U256::from(id).into(),
        to: Address::repeat_byte(2),
        calldata: Bytes::from(vec![1, 2, 3]),
        gas_limit: 100_000,
    }
}

#[test]
fn nonces_are_never_handed_out_twice() {
    let s = SqliteStore::new(Store::in_memory().unwrap());
    let key = KeyRef {
        signer: Address::repeat_byte(9),
        chain_id: 31337,
    };
    for id in 1..=3u64 {
        block_on(s.manual_request(RoundKey::new(Address::repeat_byte(1), U256::from(id)), "wf"))
            .unwrap();
    }
    // the chain's pending count lags (a signed transaction not yet sent is invisible)
    assert_eq!(block_on(s.reserve_nonce(key, 5, &payload(1))).unwrap(), 5);
    assert_eq!(block_on(s.reserve_nonce(key, 5, &payload(2))).unwrap(), 6);
    // the chain moved past us (the key was used elsewhere)
    assert_eq!(block_on(s.reserve_nonce(key, 10, &payload(3))).unwrap(), 10);
    // another key is independent
    let other = KeyRef { chain_id: 1, ..key };
    assert_eq!(block_on(s.reserve_nonce(other, 0, &payload(1))).unwrap(), 0);
    assert_eq!(
        block_on(s.get(RoundKey::new(Address::repeat_byte(1), U256::from(2))))
            .unwrap()
            .unwrap()
            .state,
        Stage::Submitted
    );
    let pending = block_on(s.pending_nonces(key)).unwrap();
    assert_eq!(
        pending.iter().map(|n| n.nonce).collect::<Vec<_>>(),
        vec![5, 6, 10]
    );
    block_on(s.finish_nonce(key, 6, NonceState::Lost, None, Some("used elsewhere"))).unwrap();
    assert_eq!(
        block_on(s.pending_nonce_of(key, RoundKey::new(Address::repeat_byte(1), U256::from(2))))
            .unwrap(),
        None
    );
    assert_eq!(block_on(s.highest_nonce(key)).unwrap(), Some(10));
}

#[test]
fn attempts_are_kept_in_order_with_fees() {
    let s = SqliteStore::new(Store::in_memory().unwrap());
    let key = KeyRef {
        signer: Address::repeat_byte(9),
        chain_id: 31337,
    };
    block_on(s.manual_request(RoundKey::new(Address::repeat_byte(1), U256::from(1)), "wf"))
        .unwrap();
    let n = block_on(s.reserve_nonce(key, 0, &payload(1))).unwrap();
    for seq in 0..3u32 {
        block_on(s.add_attempt(
            key,
            RoundKey::new(Address::repeat_byte(1), U256::from(1)),
            &AttemptRecord {
                nonce: n,
                seq,
                tx_hash: B256::repeat_byte(seq as u8 + 1),
                raw: Bytes::from(vec![seq as u8]),
                max_fee_per_gas: u128::MAX - seq as u128,
                max_priority_fee_per_gas: 7,
                gas_limit: 1,
                sent_block: None,
                created_at: 0,
            },
        ))
        .unwrap();
    }
    block_on(s.mark_attempt_sent(
        key,
        RoundKey::new(Address::repeat_byte(1), U256::from(1)),
        n,
        1,
        42,
    ))
    .unwrap();
    block_on(s.mark_attempt_sent(
        key,
        RoundKey::new(Address::repeat_byte(1), U256::from(1)),
        n,
        1,
        50,
    ))
    .unwrap();
    let a = block_on(s.attempts(key, n)).unwrap();
    assert_eq!(a.len(), 3);
    assert_eq!(a[1].sent_block, Some(42), "first broadcast block is kept");
    assert_eq!(a[2].max_fee_per_gas, u128::MAX - 2);
    let r = block_on(s.get(RoundKey::new(Address::repeat_byte(1), U256::from(1))))
        .unwrap()
        .unwrap();
    assert_eq!(r.submit_tx, Some(B256::repeat_byte(3)));
    block_on(s.finish_nonce(
        key,
        n,
        NonceState::Mined,
        Some(MinedAt {
            tx: B256::repeat_byte(2),
            block: 9,
            block_hash: B256::repeat_byte(0x99),
        }),
        None,
    ))
    .unwrap();
    let h = block_on(s.tx_history(RoundKey::new(Address::repeat_byte(1), U256::from(1)))).unwrap();
    assert_eq!(h.len(), 1);
    assert_eq!(h[0].0.state, NonceState::Mined);
    assert_eq!(h[0].0.mined_block, Some(9));
    let r = block_on(s.get(RoundKey::new(Address::repeat_byte(1), U256::from(1))))
        .unwrap()
        .unwrap();
    assert_eq!(r.submit_tx, Some(B256::repeat_byte(2)), "the mined attempt");
}

/// Another process (the CLI, an operator's `sqlite3`) holding the file's write lock for a
/// moment makes a write of the node's wait for it (the busy timeout), also one that reads
/// first: a deferred transaction that read would be refused at once ("database is
/// locked") when it turns to write, and a manual request or a round's step lost with it.
#[test]
fn a_write_waits_for_another_connection_s_write_lock() {
    let dir = std::env::temp_dir().join(format!("cresolver-store-lock-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let s = SqliteStore::new(Store::open(&dir).unwrap());
    let key = RoundKey::new(Address::repeat_byte(1), U256::from(7));
    block_on(s.manual_request(key, "wf")).unwrap();
    block_on(s.set_state(key, Stage::Failed, Some("failed earlier"))).unwrap();

    let other = rusqlite::Connection::open(dir.join("cresolver.sqlite3")).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let release = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(300));
        other.execute_batch("COMMIT").unwrap();
    });
    // reads the round's state, then reopens it (a write)
    let decision = block_on(s.manual_request(key, "wf"));
    release.join().unwrap();
    assert_eq!(decision.unwrap(), RequestDecision::Reopened);
    block_on(s.set_state(key, Stage::Discovered, None)).unwrap();
    assert_eq!(
        block_on(s.get(key)).unwrap().unwrap().state,
        Stage::Discovered
    );
    let _ = std::fs::remove_dir_all(&dir);
}
