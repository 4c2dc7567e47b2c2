//! The SQLite store's own tests: transitions, de-duplication, leases and migrations.

use super::*;

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
    let s = Store::in_memory().unwrap();
    let m = Address::repeat_byte(1);
    let id = U256::from(7);
    assert_eq!(
        s.record_request(m, id, "wf", &log(1)).unwrap(),
        RequestDecision::New
    );
    assert_eq!(
        s.record_request(m, id, "wf", &log(1)).unwrap(),
        RequestDecision::DuplicateLog
    );
    assert_eq!(
        s.record_request(m, id, "wf", &log(2)).unwrap(),
        RequestDecision::AlreadyHandled(Stage::Requested)
    );
    s.set_state(m, id, Stage::Failed, Some("quorum not met"))
        .unwrap();
    assert_eq!(
        s.record_request(m, id, "wf", &log(3)).unwrap(),
        RequestDecision::Reopened
    );
    let r = s.get(m, id).unwrap().unwrap();
    assert_eq!(
        (r.state, r.attempt, r.reason.clone()),
        (Stage::Requested, 2, None)
    );
    assert_eq!(r.request_tx, Some(B256::repeat_byte(3)));
    assert_eq!(s.unfinished().unwrap().len(), 1);
    s.set_state(m, id, Stage::Confirmed, None).unwrap();
    assert!(s.unfinished().unwrap().is_empty());
    assert_eq!(
        s.manual_request(m, id, "wf").unwrap(),
        RequestDecision::AlreadyHandled(Stage::Confirmed)
    );
    assert_eq!(s.count_by_state().unwrap(), vec![(Stage::Confirmed, 1)]);
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
    let s = Store::open(&dir).unwrap();
    s.manual_request(Address::ZERO, U256::from(1), "wf")
        .unwrap();
    assert_eq!(s.claim(Address::ZERO, U256::from(1), "n").unwrap(), Some(1));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn persists_across_reopen() {
    let dir = std::env::temp_dir().join(format!("cresolver-store-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    {
        let s = Store::open(&dir).unwrap();
        s.set_checkpoint("k", 42, B256::repeat_byte(4)).unwrap();
        s.manual_request(Address::ZERO, U256::from(1), "wf")
            .unwrap();
    }
    let s = Store::open(&dir).unwrap();
    assert_eq!(s.checkpoint("k").unwrap(), Some((42, B256::repeat_byte(4))));
    assert_eq!(s.unfinished().unwrap().len(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn only_the_writes_before_an_effect_are_synced() {
    // WAL with `synchronous = NORMAL` on the connection: a commit survives the process's
    // crash; the writes before a broadcast or a reply commit with FULL (the WAL synced)
    // and put the connection back to NORMAL, also when they fail
    let dir = std::env::temp_dir().join(format!("cresolver-store-sync-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let s = Store::open(&dir).unwrap();
    let level = |s: &Store| -> i64 {
        s.conn()
            .query_row("PRAGMA synchronous", [], |r| r.get(0))
            .unwrap()
    };
    let journal: String = s
        .conn()
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!((journal.as_str(), level(&s)), ("wal", 1));
    let inside = s
        .in_durable_tx(|tx| Ok(tx.query_row("PRAGMA synchronous", [], |r| r.get::<_, i64>(0))?))
        .unwrap();
    assert_eq!((inside, level(&s)), (2, 1));
    let failed: Result<(), _> = s.in_durable_tx(|_| Err(StoreError::Corrupt("no".into())));
    assert!(failed.is_err());
    assert_eq!(level(&s), 1);
    // a failed durable write rolled back: nothing of it stays
    let m = Address::repeat_byte(3);
    let kept: Result<(), _> = s.in_durable_tx(|tx| {
        sqlite::upsert_round(tx, m, U256::from(1), "wf", None, false)?;
        Err(StoreError::Corrupt("after the write".into()))
    });
    assert!(kept.is_err());
    assert!(s.get(m, U256::from(1)).unwrap().is_none());
    // the synced writes: a manual request, a node setting, the readiness probe, a
    // signed attempt (before its broadcast); the others are not
    let before = synced();
    s.manual_request(m, U256::from(1), "wf").unwrap();
    assert_eq!(s.setting_or_init("k", "v").unwrap(), "v");
    s.probe_write().unwrap();
    assert_eq!(synced(), before + 3);
    let key = KeyRef {
        signer: Address::repeat_byte(9),
        chain_id: 1,
    };
    let payload = TxPayload {
        market: m,
        market_id: U256::from(1),
        to: m,
        calldata: Default::default(),
        gas_limit: 1,
    };
    s.claim(m, U256::from(1), "n").unwrap();
    s.set_state(m, U256::from(1), Stage::Evaluated, None)
        .unwrap();
    s.set_checkpoint("c", 1, B256::ZERO).unwrap();
    let nonce = s.reserve_nonce(key, 0, &payload).unwrap();
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
    s.add_attempt(key, m, U256::from(1), &attempt).unwrap();
    assert_eq!(
        synced(),
        before + 4,
        "the attempt is synced before its broadcast"
    );
    s.mark_attempt_sent(key, nonce, 0, 1).unwrap();
    assert_eq!(synced(), before + 4);
    assert_eq!(level(&s), 1);
    drop(s);
    let s = Store::open(&dir).unwrap();
    assert!(s.get(m, U256::from(1)).unwrap().is_some());
    let _ = std::fs::remove_dir_all(&dir);
}
