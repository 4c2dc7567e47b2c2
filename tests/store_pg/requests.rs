//! Requests recorded by several nodes sharing one PostgreSQL at once: each market gets
//! one round and each log is taken once, whoever races whom.

use super::*;
use cresolver_store::RoundKey;

/// Three watchers record the same request logs at once (as nodes sharing a database
/// do), and a second request of each market arrives meanwhile: each market gets one
/// round and one `New`, each log is taken once, and nothing else is lost or doubled.
#[tokio::test]
async fn watchers_recording_the_same_requests_at_once_take_each_market_once() {
    let pg = Pg::start();
    let nodes = three_nodes(&pg).await;
    let m = Address::repeat_byte(1);
    let markets = 20u8;
    let log = |l: u8| LogRef {
        tx_hash: B256::repeat_byte(l),
        log_index: 0,
        block_number: 5,
        block_hash: B256::repeat_byte(0xee),
    };
    let start = Arc::new(tokio::sync::Barrier::new(markets as usize * 4));
    let mut tasks = Vec::new();
    for i in 0..markets {
        // log `i` recorded by all three, log `100 + i` (a second request) by one
        let jobs = [(0, i), (1, i), (2, i), (i as usize % 3, 100 + i)];
        for (n, l) in jobs {
            let (node, start, log_of) = (nodes[n].clone(), start.clone(), log);
            tasks.push(tokio::spawn(async move {
                start.wait().await;
                let d = node
                    .record_request(RoundKey::new(m, U256::from(i)), "wf", &log_of(l))
                    .await
                    .unwrap();
                (i, l, d)
            }));
        }
    }
    let mut by_market: std::collections::BTreeMap<u8, Vec<(u8, RequestDecision)>> =
        Default::default();
    for r in futures::future::join_all(tasks).await {
        let (i, l, d) = r.unwrap();
        by_market.entry(i).or_default().push((l, d));
    }
    for (i, ds) in by_market {
        let count = |want: &RequestDecision| ds.iter().filter(|(_, d)| d == want).count();
        assert_eq!(count(&RequestDecision::New), 1, "market {i}: {ds:?}");
        // the log all three recorded: taken by one, a duplicate for the other two
        let shared = ds
            .iter()
            .filter(|(l, d)| *l == i && *d == RequestDecision::DuplicateLog);
        assert_eq!(shared.count(), 2, "market {i}: {ds:?}");
        assert_eq!(
            count(&RequestDecision::AlreadyHandled(Stage::Requested)),
            1,
            "market {i}: {ds:?}"
        );
        let r = nodes[0]
            .get(RoundKey::new(m, U256::from(i)))
            .await
            .unwrap()
            .unwrap();
        assert_eq!((r.state, r.attempt), (Stage::Requested, 1));
    }
    // both logs of every market are seen, whichever node took them
    for i in 0..markets {
        for l in [i, 100 + i] {
            assert!(
                nodes[(l % 3) as usize].log_seen(&log(l)).await.unwrap(),
                "log {l}"
            );
        }
    }
}

/// Another node inserts the market's round while this node records a request for it
/// (the other's insert not yet committed when this node looks): the request is
/// "already handled" and its log is taken, not a second round and not a lost log.
#[tokio::test]
async fn a_round_inserted_meanwhile_by_another_node_makes_the_request_already_handled() {
    let pg = Pg::start();
    let node = Arc::new(pg_store(&pg, "a", Duration::from_secs(30)).await);
    let (m, id) = (Address::repeat_byte(1), U256::from(7));
    let (other, conn) = tokio_postgres::connect(&pg.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    other
        .batch_execute(&format!(
            "BEGIN; INSERT INTO rounds (market, market_id, state, attempt, workflow, created_at, updated_at)
             VALUES ('{m}', '{id}', 'requested', 1, 'wf', 0, 0)"
        ))
        .await
        .unwrap();
    let recording = tokio::spawn({
        let node = node.clone();
        async move {
            node.record_request(RoundKey::new(m, id), "wf", &log(1))
                .await
        }
    });
    // the recording waits on the other node's uncommitted row (`pg_locks` is read anew
    // at each look; `pg_stat_activity` would be read once per transaction)
    loop {
        let waiting: i64 = other
            .query_one("SELECT count(*) FROM pg_locks WHERE NOT granted", &[])
            .await
            .unwrap()
            .get(0);
        if waiting > 0 {
            break;
        }
        assert!(!recording.is_finished(), "{:?}", recording.await);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    other.batch_execute("COMMIT").await.unwrap();
    assert_eq!(
        recording.await.unwrap().unwrap(),
        RequestDecision::AlreadyHandled(Stage::Requested)
    );
    assert!(node.log_seen(&log(1)).await.unwrap());
    assert_eq!(
        node.record_request(RoundKey::new(m, id), "wf", &log(1))
            .await
            .unwrap(),
        RequestDecision::DuplicateLog
    );
}
