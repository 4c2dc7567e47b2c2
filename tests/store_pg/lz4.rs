//! The rounds' JSON compression: lz4 on a server that has it, switched at a node's start
//! when the tables are free, never in a running node's way, and never over an
//! operator's own choice.

use super::*;
use cresolver_store::RoundKey;

/// The compression setting of the three JSON columns (`l` lz4, `p` pglz, empty: the
/// server's default).
fn compression(pg: &Pg) -> String {
    pg.psql(
        "SELECT string_agg(attcompression::text, ',' ORDER BY attrelid::regclass::text) FROM pg_attribute
         WHERE (attrelid, attname) IN (('rounds'::regclass, 'outcome'), ('round_progress'::regclass, 'progress'),
                                       ('round_attempts'::regclass, 'outcome'))",
    )
}

fn set_all(pg: &Pg, method: &str) {
    pg.psql(&format!(
        "ALTER TABLE rounds ALTER COLUMN outcome SET COMPRESSION {method};
         ALTER TABLE round_progress ALTER COLUMN progress SET COMPRESSION {method};
         ALTER TABLE round_attempts ALTER COLUMN outcome SET COMPRESSION {method};"
    ));
}

#[tokio::test]
async fn the_rounds_json_is_switched_to_lz4_at_a_start_when_the_tables_are_free() {
    let pg = Pg::start();
    let lease = Duration::from_secs(15);
    if pg.psql("SELECT current_setting('server_version_num')::int >= 140000") != "t" {
        // no per-column compression before PostgreSQL 14: the node starts all the same
        pg_store(&pg, "a", lease).await;
        return;
    }
    let lz4 = pg.psql(
        "SELECT count(*) FROM pg_settings WHERE name = 'default_toast_compression' AND 'lz4' = ANY(enumvals)",
    ) == "1";
    let switched = if lz4 { "l,l,l" } else { ",," };
    let _a = pg_store(&pg, "a", lease).await;
    assert_eq!(compression(&pg), switched);

    // back to the default, and a start while another session uses one of the tables:
    // the node starts at once and leaves the switch to a later start
    set_all(&pg, "default");
    assert_eq!(compression(&pg), ",,");
    let (other, conn) = tokio_postgres::connect(&pg.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    other
        .batch_execute("BEGIN; LOCK TABLE rounds IN ACCESS SHARE MODE")
        .await
        .unwrap();
    let b = pg_store(&pg, "b", lease).await;
    assert_eq!(
        compression(&pg),
        ",,",
        "nothing switched while a table is in use"
    );
    assert!(
        b.manual_request(RoundKey::new(Address::repeat_byte(1), U256::from(1)), "wf")
            .await
            .is_ok()
    );
    other.batch_execute("COMMIT").await.unwrap();
    let _c = pg_store(&pg, "c", lease).await;
    assert_eq!(compression(&pg), switched);

    // an operator's explicit choice is kept
    set_all(&pg, "pglz");
    let _d = pg_store(&pg, "d", lease).await;
    assert_eq!(compression(&pg), "p,p,p");
}
