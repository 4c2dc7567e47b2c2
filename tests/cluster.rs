//! Several resolver nodes (the real binary, as child processes) on one anvil chain and
//! one real PostgreSQL server: rounds spread over the nodes, a killed or paused holder
//! is taken over after its lease, a stale node writes and broadcasts nothing, and a
//! database restart loses and doubles nothing. The nodes share dev account 0's key, so
//! the key's mined transaction count says how many resolutions were sent in all.

use crate::common;

use alloy::primitives::U256;
use common::chain::{
    AgentUri, MarketSetup, market_with_workers, more_markets, request_in_one_block,
};
use common::node::{free_port, node_process_with, nonce, resolved_events, tmpdir, workflow_file};
use common::pg::Pg;
use common::{agent, behaviour};
use cresolver_devnet::agent::{AgentBehaviour, DeterminationMode};
use cresolver_store::RoundKey;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// A market joined by three reference workers that answer after `latency`.
async fn market(latency: Duration) -> MarketSetup {
    let mut uris = Vec::new();
    for (det, conf) in [
        (DeterminationMode::Yes, 0.9),
        (DeterminationMode::Yes, 0.8),
        (DeterminationMode::No, 0.6),
    ] {
        uris.push(AgentUri::Endpoint(
            agent(AgentBehaviour {
                latency,
                ..behaviour(det, conf)
            })
            .await,
        ));
    }
    market_with_workers(uris).await
}

struct ClusterNode {
    name: String,
    dir: common::node::TmpDir,
    api: String,
    child: tokio::process::Child,
}

impl ClusterNode {
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("node.log")).unwrap_or_default()
    }
    fn pid(&self) -> String {
        self.child.id().expect("running").to_string()
    }
}

/// Starts node `name` of the cluster on `pg` (lease `lease_secs`, `max_rounds` at once).
fn start_node(
    s: &MarketSetup,
    pg: &Pg,
    name: &str,
    lease_secs: u64,
    max_rounds: usize,
) -> ClusterNode {
    start_node_crashing(s, pg, name, lease_secs, max_rounds, None)
}

/// [`start_node`] with the `CRESOLVER_TEST_CRASH_AT` hook (the process exits with 97
/// at that point, as `kill -9` would leave it).
fn start_node_crashing(
    s: &MarketSetup,
    pg: &Pg,
    name: &str,
    lease_secs: u64,
    max_rounds: usize,
    crash_at: Option<&str>,
) -> ClusterNode {
    start_node_keyed(s, pg, name, lease_secs, max_rounds, crash_at, 0)
}

/// [`start_node_crashing`] signing with dev account `account`.
fn start_node_keyed(
    s: &MarketSetup,
    pg: &Pg,
    name: &str,
    lease_secs: u64,
    max_rounds: usize,
    crash_at: Option<&str>,
    account: usize,
) -> ClusterNode {
    let key = alloy::hex::encode(s.dev.signers[account].to_bytes());
    let dir = tmpdir(&format!("cluster-{name}"));
    let wf = workflow_file(&dir, |t| t);
    let port = free_port();
    let (url, listen, lease, rounds) = (
        pg.url(),
        format!("127.0.0.1:{port}"),
        lease_secs.to_string(),
        max_rounds.to_string(),
    );
    let child = node_process_with(
        s,
        &dir,
        &wf,
        crash_at,
        &[
            ("CRESOLVER__STORE__URL", &url),
            ("CRESOLVER__STORE__NODE_ID", name),
            ("CRESOLVER__STORE__LEASE_SECS", &lease),
            ("CRESOLVER__NODE__MAX_CONCURRENT_ROUNDS", &rounds),
            ("CRESOLVER__API__LISTEN", &listen),
            ("CRESOLVER_LOG", "info"),
            ("CRESOLVER_PRIVATE_KEY", &key),
        ],
    );
    ClusterNode {
        name: name.into(),
        dir,
        api: format!("http://{listen}"),
        child,
    }
}

/// Starts the named nodes (lease `lease_secs`, `max_rounds` each) and waits until they
/// all answer.
async fn start_cluster(
    s: &MarketSetup,
    pg: &Pg,
    names: &[&str],
    lease_secs: u64,
    max_rounds: usize,
) -> Vec<ClusterNode> {
    let nodes: Vec<ClusterNode> = names
        .iter()
        .map(|n| start_node(s, pg, n, lease_secs, max_rounds))
        .collect();
    wait_up(&nodes).await;
    nodes
}

/// Waits until every node answers `/health/live`.
async fn wait_up(nodes: &[ClusterNode]) {
    let deadline = Instant::now() + Duration::from_secs(60);
    for n in nodes {
        loop {
            if let Ok(r) = reqwest::get(format!("{}/health/live", n.api)).await
                && r.status().is_success()
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "node {} did not start:\n{}",
                n.name,
                n.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// One row per round: (market id, state, holder, last holder).
fn rounds(pg: &Pg) -> Vec<(String, String, String, String)> {
    pg.psql("SELECT market_id, state, COALESCE(holder, ''), COALESCE(last_holder, '') FROM rounds ORDER BY id")
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split('|').collect();
            (f[0].into(), f[1].into(), f[2].into(), f[3].into())
        })
        .collect()
}

/// Waits until `n` rounds exist and all are final; returns them.
async fn wait_all_final(
    pg: &Pg,
    n: usize,
    within: Duration,
    nodes: &[&ClusterNode],
) -> Vec<(String, String, String, String)> {
    let deadline = Instant::now() + within;
    loop {
        let r = rounds(pg);
        if r.len() == n
            && r.iter()
                .all(|x| ["confirmed", "failed", "skipped"].contains(&x.1.as_str()))
        {
            return r;
        }
        if Instant::now() > deadline {
            let logs: String = nodes
                .iter()
                .map(|n| format!("--- {}\n{}", n.name, tail(&n.log(), 40)))
                .collect();
            panic!("rounds not final in {within:?}: {r:?}\n{logs}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn tail(s: &str, lines: usize) -> String {
    let v: Vec<&str> = s.lines().collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}

/// Waits until the market's round is held by a node in a state past `requested`;
/// returns the holder.
async fn wait_held(pg: &Pg, s: &MarketSetup) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(r) = rounds(pg)
            .into_iter()
            .find(|r| r.0 == s.market_id.to_string())
            && !r.2.is_empty()
            && r.1 != "requested"
        {
            return r.2;
        }
        assert!(Instant::now() < deadline, "the round was never claimed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn signal(pid: &str, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([sig, pid])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {pid}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_split_a_burst_and_resolve_each_market_once() {
    let pg = Pg::start();
    let s = market(Duration::from_millis(300)).await;
    let mut ids = vec![s.market_id];
    ids.extend(more_markets(&s, 19).await);
    let nodes = start_cluster(&s, &pg, &["node-a", "node-b", "node-c"], 15, 3).await;
    let signer = s.dev.accounts[0];
    let before = nonce(&s, signer).await;

    request_in_one_block(&s, &ids, true).await;
    let refs: Vec<&ClusterNode> = nodes.iter().collect();
    let done = wait_all_final(&pg, 20, Duration::from_secs(120), &refs).await;

    assert!(
        done.iter().all(|r| r.1 == "confirmed"),
        "every round confirmed: {done:?}"
    );
    let events = resolved_events(&s).await;
    let resolved: HashSet<U256> = events.iter().map(|e| e.marketId).collect();
    assert_eq!(events.len(), 20, "one resolution per market");
    assert_eq!(resolved, ids.iter().copied().collect());
    assert_eq!(
        nonce(&s, signer).await - before,
        20,
        "the shared key sent exactly one transaction per market"
    );
    let mut per_node: HashMap<String, usize> = HashMap::new();
    for r in &done {
        *per_node.entry(r.3.clone()).or_default() += 1;
    }
    for n in &nodes {
        assert!(
            per_node.get(&n.name).copied().unwrap_or(0) >= 1,
            "{} drove no round: {per_node:?}",
            n.name
        );
    }

    // any node shows every round, with the node that drove it
    let body: serde_json::Value = reqwest::get(format!("{}/rounds?limit=100", nodes[1].api))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let listed = body.as_array().expect("a list of rounds");
    assert_eq!(listed.len(), 20, "{body}");
    assert!(listed.iter().all(|r| r["driven_by"].is_string()), "{body}");
    let health: serde_json::Value = reqwest::get(format!("{}/health", nodes[0].api))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["cluster"]["node_id"], "node-a", "{health}");
    let metrics = reqwest::get(format!("{}/metrics", nodes[2].api))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("cresolver_lease_events_total{event=\"claimed\"}"),
        "{metrics}"
    );
    for n in &nodes {
        assert!(
            !n.log().contains(pg.password()),
            "{}: the database password is in the log",
            n.name
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holder_is_taken_over_after_its_lease() {
    let pg = Pg::start();
    // slow workers: the holder is killed while it waits for their answers
    let s = market(Duration::from_millis(2000)).await;
    let lease = 3;
    let mut nodes = start_cluster(&s, &pg, &["node-a", "node-b"], lease, 4).await;
    let signer = s.dev.accounts[0];
    let before = nonce(&s, signer).await;
    s.dev.request_resolution(s.market_id).await.unwrap();
    let holder = wait_held(&pg, &s).await;
    let i = nodes.iter().position(|n| n.name == holder).unwrap();
    let killed_at = Instant::now();
    nodes[i].child.kill().await.unwrap(); // SIGKILL
    let survivor = &nodes[1 - i];

    let done = wait_all_final(&pg, 1, Duration::from_secs(60), &[survivor]).await;
    let took = killed_at.elapsed();
    assert_eq!(done[0].1, "confirmed", "{done:?}");
    assert_eq!(done[0].3, survivor.name, "the survivor finished it");
    assert_eq!(resolved_events(&s).await.len(), 1);
    assert_eq!(nonce(&s, signer).await - before, 1);
    assert!(
        survivor.log().contains("taking over a round"),
        "{}",
        survivor.log()
    );
    // lease (3 s) + a whole round with 2 s workers (answer and challenge) and margins
    assert!(took < Duration::from_secs(20), "took {took:?}");
    eprintln!("failover after kill -9: {took:?} (lease {lease} s)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holder_that_lost_its_lease_writes_and_sends_nothing() {
    let pg = Pg::start();
    let s = market(Duration::from_millis(1500)).await;
    let nodes = start_cluster(&s, &pg, &["node-a", "node-b"], 3, 4).await;
    let signer = s.dev.accounts[0];
    let before = nonce(&s, signer).await;
    s.dev.request_resolution(s.market_id).await.unwrap();
    let holder = wait_held(&pg, &s).await;
    let i = nodes.iter().position(|n| n.name == holder).unwrap();
    let (stale, other) = (&nodes[i], &nodes[1 - i]);
    signal(&stale.pid(), "-STOP");

    let done = wait_all_final(&pg, 1, Duration::from_secs(60), &[other]).await;
    assert_eq!(done[0].1, "confirmed");
    assert_eq!(done[0].3, other.name);
    let outcome_before = pg.psql("SELECT md5(outcome) || updated_at FROM rounds");

    // the stale node wakes up mid-round, with its workers' answers arriving
    signal(&stale.pid(), "-CONT");
    tokio::time::sleep(Duration::from_secs(6)).await;
    let log = stale.log();
    assert!(
        log.contains("lease lost") || log.contains("renewal refused"),
        "the stale node noticed: {log}"
    );
    assert_eq!(resolved_events(&s).await.len(), 1, "one resolution");
    assert_eq!(
        nonce(&s, signer).await - before,
        1,
        "the stale node broadcast nothing"
    );
    let after = rounds(&pg);
    assert_eq!(after[0].1, "confirmed", "nothing overwritten: {after:?}");
    assert_eq!(after[0].3, other.name);
    assert_eq!(
        pg.psql("SELECT md5(outcome) || updated_at FROM rounds"),
        outcome_before,
        "the new holder's transcript is untouched"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_restart_during_a_burst_loses_and_doubles_nothing() {
    let mut pg = Pg::start();
    let s = market(Duration::from_millis(300)).await;
    let mut ids = vec![s.market_id];
    ids.extend(more_markets(&s, 9).await);
    let nodes = start_cluster(&s, &pg, &["node-a", "node-b"], 4, 4).await;
    let signer = s.dev.accounts[0];
    let before = nonce(&s, signer).await;
    request_in_one_block(&s, &ids, true).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    pg.restart_after(Duration::from_secs(3));

    let refs: Vec<&ClusterNode> = nodes.iter().collect();
    let done = wait_all_final(&pg, 10, Duration::from_secs(120), &refs).await;
    assert!(done.iter().all(|r| r.1 == "confirmed"), "{done:?}");
    assert_eq!(resolved_events(&s).await.len(), 10);
    assert_eq!(
        nonce(&s, signer).await - before,
        10,
        "one transaction per market"
    );
}

/// node-a (dev account 0's key) signs and stores the resolution of the market, then
/// dies before broadcasting it; returns the stored attempt's hash.
async fn dead_after_signing(s: &MarketSetup, pg: &Pg) -> String {
    let mut a = start_node_crashing(s, pg, "node-a", 3, 4, Some("signed"));
    wait_up(std::slice::from_ref(&a)).await;
    s.dev.request_resolution(s.market_id).await.unwrap();
    let status = tokio::time::timeout(Duration::from_secs(60), a.child.wait())
        .await
        .expect("node-a stops at the crash point")
        .unwrap();
    assert_eq!(status.code(), Some(97), "{}", a.log());
    let signed = pg.psql("SELECT tx_hash FROM tx_attempts");
    assert_eq!(signed.lines().count(), 1, "one signed attempt: {signed}");
    signed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_dead_after_signing_is_finished_with_its_own_signed_transaction() {
    let pg = Pg::start();
    let s = market(Duration::ZERO).await;
    let signer = s.dev.accounts[0];
    let before = nonce(&s, signer).await;
    let signed = dead_after_signing(&s, &pg).await;
    assert_eq!(nonce(&s, signer).await, before, "nothing was broadcast");

    // node-b shares the key: after the lease, it broadcasts the very same bytes
    let b = start_node(&s, &pg, "node-b", 3, 4);
    let done = wait_all_final(&pg, 1, Duration::from_secs(60), &[&b]).await;
    assert_eq!(done[0].1, "confirmed", "{done:?}");
    assert_eq!(done[0].3, "node-b");
    assert_eq!(
        pg.psql("SELECT string_agg(tx_hash, ',') FROM tx_attempts"),
        signed,
        "no second signature"
    );
    assert_eq!(
        pg.psql("SELECT submit_tx FROM rounds"),
        signed,
        "the mined transaction is node-a's"
    );
    assert_eq!(resolved_events(&s).await.len(), 1);
    assert_eq!(nonce(&s, signer).await - before, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_another_key_finishes_a_dead_holders_signed_transaction() {
    let pg = Pg::start();
    let s = market(Duration::ZERO).await;
    let (key_a, key_b) = (s.dev.accounts[0], s.dev.accounts[5]);
    let (before_a, before_b) = (nonce(&s, key_a).await, nonce(&s, key_b).await);
    let signed = dead_after_signing(&s, &pg).await;

    // node-b holds another key: it cannot re-sign node-a's nonce, so it broadcasts
    // node-a's stored bytes and concludes with their receipt, signing nothing itself
    let b = start_node_keyed(&s, &pg, "node-b", 3, 4, None, 5);
    let done = wait_all_final(&pg, 1, Duration::from_secs(60), &[&b]).await;
    assert_eq!(done[0].1, "confirmed", "{done:?}\n{}", b.log());
    assert_eq!(pg.psql("SELECT submit_tx FROM rounds"), signed);
    assert_eq!(resolved_events(&s).await.len(), 1);
    assert_eq!(nonce(&s, key_a).await - before_a, 1, "node-a's transaction");
    assert_eq!(nonce(&s, key_b).await, before_b, "node-b signed nothing");
    assert_eq!(pg.psql("SELECT state FROM tx_nonces"), "mined");
}

#[tokio::test]
async fn an_unusable_database_stops_the_node_at_start_with_a_clear_error() {
    let port = free_port();
    let url = format!("postgres://resolver:hunter2secret@127.0.0.1:{port}/cresolver");
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new(env!("CARGO_BIN_EXE_cresolver"))
            .args(["node", "--rpc-url", "http://127.0.0.1:1"])
            .env("CRESOLVER__STORE__URL", &url)
            .env(
                "CRESOLVER_PRIVATE_KEY",
                "ac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80",
            )
            .env("CRESOLVER_LOG", "debug")
            .output(),
    )
    .await
    .expect("the node stops at start")
    .unwrap();
    assert!(!out.status.success());
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        all.contains(&format!(
            "cannot use the database at postgres://resolver@127.0.0.1:{port}/cresolver"
        )),
        "{all}"
    );
    assert!(!all.contains("hunter2secret"), "the password leaked: {all}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_node_with_a_fixed_id_takes_its_rounds_back_at_once() {
    let pg = Pg::start();
    let s = market(Duration::from_millis(1500)).await;
    let lease = 60;
    let mut a = start_node(&s, &pg, "node-a", lease, 4);
    wait_up(std::slice::from_ref(&a)).await;
    s.dev.request_resolution(s.market_id).await.unwrap();
    assert_eq!(wait_held(&pg, &s).await, "node-a");
    a.child.kill().await.unwrap();
    let restarted = Instant::now();
    let a = start_node(&s, &pg, "node-a", lease, 4);
    let done = wait_all_final(&pg, 1, Duration::from_secs(45), &[&a]).await;
    assert_eq!(done[0].1, "confirmed", "{done:?}");
    assert!(
        restarted.elapsed() < Duration::from_secs(lease / 2),
        "waited for its own lease: {:?}",
        restarted.elapsed()
    );
    assert_eq!(resolved_events(&s).await.len(), 1);
}

/// `cresolver rounds …` against the cluster's database (no data dir), as an operator.
fn rounds_cli(s: &MarketSetup, url: &str, args: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cresolver"))
        .arg("rounds")
        .args(args)
        .args(["--rpc-url", &s.dev.rpc_url()])
        .env("CRESOLVER__STORE__URL", url)
        .env("CRESOLVER_LOG", "warn")
        .env_remove("CRESOLVER_API_TOKEN")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rounds_commands_read_the_shared_database() {
    let s = market(Duration::ZERO).await;
    let pg = Pg::start();
    let nodes = start_cluster(&s, &pg, &["a"], 15, 8).await;
    s.dev.request_resolution(s.market_id).await.unwrap();
    wait_all_final(&pg, 1, Duration::from_secs(60), &[&nodes[0]]).await;
    let (id, market) = (s.market_id.to_string(), s.dev.contracts.market.to_string());
    let url = pg.url();
    let mut said = String::new();

    let (ok, out, err) = rounds_cli(&s, &url, &["show", &id, "--market-address", &market]);
    assert!(ok, "{out}{err}");
    assert!(out.contains(": confirmed (attempt 1"), "{out}");
    assert!(out.contains("nonce ") && out.contains("mined"), "{out}");
    said += &(out + &err);

    // without a market address: found among every round of the database
    let (ok, out, err) = rounds_cli(&s, &url, &["show", &id, "--json"]);
    assert!(ok, "{out}{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["round"]["state"], "confirmed");
    said += &(out + &err);

    // the list, filtered by state, as JSON and as a table
    let (ok, out, err) = rounds_cli(&s, &url, &["list", "--json", "--state", "confirmed"]);
    assert!(ok, "{out}{err}");
    let listed: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{out}");
    assert_eq!(
        listed[0]["market_id"],
        serde_json::json!(s.market_id),
        "{out}"
    );
    let (ok, out, err) = rounds_cli(&s, &url, &["list", "--state", "failed"]);
    assert!(ok && err.contains("no stored round matches"), "{out}{err}");
    let (ok, out, err) = rounds_cli(&s, &url, &["list"]);
    assert!(
        ok && out.contains("confirmed") && out.contains(&id),
        "{out}{err}"
    );
    said += &(out + &err);

    let dir = tmpdir("rounds-export-pg");
    let export = dir.join("out");
    let (ok, out, err) = rounds_cli(&s, &url, &["export", "--out", export.to_str().unwrap()]);
    assert!(ok && out.contains("exported 1 round(s)"), "{out}{err}");
    let file = export.join(cresolver_pipeline::transcript::export_file_name(
        RoundKey::new(s.dev.contracts.market, s.market_id),
    ));
    assert!(file.is_file(), "{out}");
    said += &(out + &err);

    // a resolved market is not retried: the chain says so
    let (ok, out, err) = rounds_cli(&s, &url, &["retry", &id, "--market-address", &market]);
    assert!(!ok && err.contains("nothing to retry"), "{out}{err}");
    said += &(out + &err);

    // a wrong password: a clear error that shows the URL without it
    let wrong = url.replace(pg.password(), "not-the-password-7f3a");
    let (ok, out, err) = rounds_cli(&s, &wrong, &["show", &id]);
    assert!(!ok, "{out}");
    assert!(
        err.contains("cannot use the database at postgres://"),
        "{err}"
    );
    assert!(!err.contains("not-the-password-7f3a"), "{err}");
    said += &(out + &err);

    assert!(
        !said.contains(pg.password()),
        "the password was printed:\n{said}"
    );
    assert_eq!(resolved_events(&s).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_resends_a_reorged_resolution_once_and_finalizes_it() {
    use alloy::providers::ext::AnvilApi;
    let s = market(Duration::ZERO).await;
    let pg = Pg::start();
    let nodes = start_cluster(&s, &pg, &["a", "b"], 15, 8).await;
    let key = s.dev.accounts[0];
    let before = nonce(&s, key).await;
    s.dev.request_resolution(s.market_id).await.unwrap();
    wait_all_final(&pg, 1, Duration::from_secs(60), &[&nodes[0], &nodes[1]]).await;
    assert_eq!(nonce(&s, key).await, before + 1);
    let mined = pg.psql("SELECT mined_tx FROM tx_nonces WHERE state = 'mined'");

    // both nodes watch; the reorg removes the resolution (confirmations is 0)
    s.dev
        .provider
        .anvil_reorg(alloy::rpc::types::anvil::ReorgOptions {
            depth: 1,
            tx_block_pairs: vec![],
        })
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let resolved = s
            .dev
            .market()
            .getMarket(s.market_id)
            .call()
            .await
            .unwrap()
            .resolved;
        let state = pg.psql("SELECT state FROM rounds");
        if resolved && state.trim() == "confirmed" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not re-sent ({state}):\n{}\n{}",
            tail(&nodes[0].log(), 20),
            tail(&nodes[1].log(), 20)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(resolved_events(&s).await.len(), 1, "resolved once");
    assert_eq!(
        nonce(&s, key).await,
        before + 1,
        "the same bytes, no second transaction"
    );
    assert_eq!(
        pg.psql("SELECT mined_tx FROM tx_nonces WHERE state = 'mined'"),
        mined
    );
    let reorged: usize = nodes
        .iter()
        .map(|n| {
            n.log()
                .matches("left the canonical chain before it was final")
                .count()
        })
        .sum();
    assert_eq!(reorged, 1, "exactly one node reopened the round");

    s.dev.provider.anvil_mine(Some(70), None).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while pg.psql("SELECT state FROM rounds").trim() != "finalized" {
        assert!(Instant::now() < deadline, "not finalized");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
