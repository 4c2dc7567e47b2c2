//! `rounds list --since/--until` filter in the store by the rounds' last update, on
//! SQLite and PostgreSQL: a round of an old id updated recently is listed.

use super::*;
use cresolver_store::RoundKey;

/// Rounds 1..=3 of one market; round 1, the oldest, updated at `now`, the others at
/// 1000 (by `backdate`, which runs SQL on the store's database): a listing since
/// `now - 60` holds round 1, one until then the other two, page by page.
async fn updated_filter_contract(s: &dyn RoundStore, backdate: impl Fn(&str)) {
    use cresolver_store::UpdatedBetween;
    let m = Address::repeat_byte(0x51);
    for id in 1..=3u8 {
        s.record_request(RoundKey::new(m, U256::from(id)), "wf", &log(0x20 + id))
            .await
            .unwrap();
    }
    let now = cresolver_store::now();
    backdate("UPDATE rounds SET updated_at = 1000 WHERE market_id <> '1'");
    backdate(&format!(
        "UPDATE rounds SET updated_at = {now} WHERE market_id = '1'"
    ));
    let ids = |page: &[cresolver_store::RoundSummary]| -> Vec<u64> {
        page.iter().map(|r| r.market_id.to_u64().unwrap()).collect()
    };
    let recent = UpdatedBetween {
        since: Some(now - 60),
        until: None,
    };
    let (page, next) = s.list_summaries_updated(10, None, recent).await.unwrap();
    assert_eq!(
        ids(&page),
        [1],
        "a round of an old id updated recently is listed"
    );
    assert_eq!(next, None);
    let old = UpdatedBetween {
        since: None,
        until: Some(now - 60),
    };
    let (first, next) = s.list_summaries_updated(1, None, old).await.unwrap();
    let (second, _) = s.list_summaries_updated(1, next, old).await.unwrap();
    assert_eq!((ids(&first), ids(&second)), (vec![3], vec![2]));
    let (all, _) = s.list_summaries(10, None).await.unwrap();
    assert_eq!(ids(&all), [3, 2, 1]);
}

#[tokio::test]
async fn listing_by_update_time_keeps_old_rounds_updated_recently() {
    let dir = common::node::tmpdir("updated-sqlite");
    let s = SqliteStore::new(Store::open(&dir).unwrap());
    let file = dir.join("cresolver.sqlite3");
    updated_filter_contract(&s, |sql| {
        rusqlite::Connection::open(&file)
            .unwrap()
            .execute(sql, [])
            .unwrap();
    })
    .await;

    let pg = Pg::start();
    // a probe of a fresh database creates nothing
    let (_, tables) = PgStore::probe(&pg.url(), settings("probe", Duration::from_secs(15)))
        .await
        .unwrap();
    assert!(!tables);
    assert_eq!(
        pg.psql("SELECT to_regclass('schema_migrations') IS NULL"),
        "t"
    );
    let s = pg_store(&pg, "node-a", Duration::from_secs(15)).await;
    let (_, tables) = PgStore::probe(&pg.url(), settings("probe", Duration::from_secs(15)))
        .await
        .unwrap();
    assert!(tables);
    updated_filter_contract(&s, |sql| {
        pg.psql(sql);
    })
    .await;
}
