//! The command line as an operator meets it: help, config check, one-shot resolve on
//! anvil, and errors that say what to do.

use crate::common;

use common::chain::*;
use common::*;
use cresolver_devnet::agent::DeterminationMode;
use cresolver_store::RoundKey;
use std::process::Output;

async fn run(args: &[&str], envs: &[(&str, String)]) -> Output {
    let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_cresolver"));
    c.args(args)
        .env("CRESOLVER_LOG", "warn")
        .env_remove("CRESOLVER_PRIVATE_KEY");
    for (k, v) in envs {
        c.env(k, v);
    }
    c.output().await.unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[tokio::test]
async fn help_lists_every_command() {
    let out = run(&["--help"], &[]).await;
    assert!(out.status.success());
    let help = text(&out.stdout);
    for cmd in [
        "node", "resolve", "config", "agent", "demo", "tally", "workflow",
    ] {
        assert!(
            help.contains(&format!("  {cmd} ")),
            "{cmd} missing from --help:\n{help}"
        );
    }
}

#[tokio::test]
async fn workflow_check_names_the_bad_key() {
    let dir = common::node::tmpdir("cli");
    let f = dir.join("bad.toml");
    std::fs::write(&f, "name = \"x\"\n[quorum]\nrule = \"bft\"\ngrace = 5\n").unwrap();
    let out = run(&["workflow", "check", f.to_str().unwrap()], &[]).await;
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("grace"), "{}", text(&out.stderr));
    let out = run(
        &["workflow", "check", "workflows/cresolver-resolution.toml"],
        &[],
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_check_and_one_shot_resolve_on_anvil() {
    let a = agent(behaviour(DeterminationMode::Yes, 0.9)).await;
    let b = agent(behaviour(DeterminationMode::No, 0.6)).await;
    let s = market_with_workers(vec![AgentUri::Endpoint(a), AgentUri::Endpoint(b)]).await;
    let dir = common::node::tmpdir("cli-resolve");
    let market = s.dev.contracts.market.to_string();
    let rpc = s.dev.rpc_url();
    let data = dir.join("data");
    let base = [
        "--rpc-url",
        rpc.as_str(),
        "--market-address",
        market.as_str(),
        "--data-dir",
        data.to_str().unwrap(),
    ];
    let key = (
        "CRESOLVER_PRIVATE_KEY",
        alloy::hex::encode(s.dev.signers[0].to_bytes()),
    );
    let private = (
        "CRESOLVER__DISCOVERY__ALLOW_PRIVATE_ENDPOINTS",
        "true".to_string(),
    );

    let mut args = vec!["config", "check"];
    args.extend(base);
    let out = run(&args, std::slice::from_ref(&key)).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let so = text(&out.stdout);
    assert!(
        so.contains("chain 31337") && so.contains("1 markets") && so.contains("config ok"),
        "{so}"
    );

    // without a key, resolve says what to set
    let mut args = vec!["resolve", "--market", "0"];
    args.extend(base);
    let out = run(&args, std::slice::from_ref(&private)).await;
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("CRESOLVER_PRIVATE_KEY"),
        "{}",
        text(&out.stderr)
    );

    // with the key: resolved now, exit 0, JSON summary
    args.push("--json");
    let out = run(&args, &[key.clone(), private.clone()]).await;
    assert!(
        out.status.success(),
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["state"], "confirmed");
    assert_eq!(v["resolution"], true);
    assert!(
        s.dev
            .market()
            .getMarket(s.market_id)
            .call()
            .await
            .unwrap()
            .resolved
    );

    // again: nothing to do, and not "confirmed by this run" -> exit 0 with the stored state
    let out = run(&args, &[key, private]).await;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["state"], "confirmed");
}

/// A SQLite store in `dir` holding requests of markets 1, 2 and 3 of `market`.
async fn requests_1_to_3(
    dir: &std::path::Path,
    market: alloy::primitives::Address,
) -> cresolver_store::SqliteStore {
    use alloy::primitives::{B256, U256};
    use cresolver_core::request::LogRef;
    use cresolver_store::{Requests, SqliteStore, Store};
    let store = SqliteStore::new(Store::open(dir).unwrap());
    for id in 1..=3u64 {
        let log = LogRef {
            block_number: id,
            block_hash: B256::repeat_byte(id as u8),
            tx_hash: B256::repeat_byte(0x40 + id as u8),
            log_index: 0,
        };
        store
            .record_request(RoundKey::new(market, U256::from(id)), "wf", &log)
            .await
            .unwrap();
    }
    store
}

#[tokio::test]
async fn rounds_list_filters_the_stored_rounds() {
    use alloy::primitives::{Address, U256};
    use cresolver_store::{Rounds, Stage};
    let dir = common::node::tmpdir("rounds-list");
    let market = Address::repeat_byte(0x11);
    {
        let store = requests_1_to_3(&dir, market).await;
        store
            .set_state(
                RoundKey::new(market, U256::from(2u64)),
                Stage::Failed,
                Some("no quorum"),
            )
            .await
            .unwrap();
    }
    let data = dir.to_str().unwrap();
    let out = run(&["rounds", "list", "--data-dir", data, "--json"], &[]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let all: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(all.as_array().map(Vec::len), Some(3), "{all}");
    let out = run(
        &["rounds", "list", "--data-dir", data, "--state", "failed"],
        &[],
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(
        table.contains("failed") && table.contains("no quorum"),
        "{table}"
    );
    assert_eq!(table.lines().count(), 2, "a header and one round:\n{table}");
    let out = run(
        &[
            "rounds",
            "list",
            "--data-dir",
            data,
            "--json",
            "--limit",
            "2",
        ],
        &[],
    )
    .await;
    let two: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(two.as_array().map(Vec::len), Some(2));
    // a future --since matches nothing; a bad state says which ones exist
    let out = run(
        &[
            "rounds",
            "list",
            "--data-dir",
            data,
            "--since",
            "2999-01-01T00:00:00Z",
        ],
        &[],
    )
    .await;
    assert!(text(&out.stderr).contains("no stored round matches"));
    let out = run(
        &["rounds", "list", "--data-dir", data, "--state", "done"],
        &[],
    )
    .await;
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("possible values: requested, discovered, answered, challenged"),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test]
async fn completions_and_man_pages_are_generated() {
    let out = run(&["completions", "bash"], &[]).await;
    assert!(out.status.success());
    assert!(text(&out.stdout).contains("_cresolver()"));
    let dir = common::node::tmpdir("man");
    let out = run(&["man", "--out", dir.to_str().unwrap()], &[]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    // roff escapes hyphens (`\-`): compare the pages unescaped
    let page_text = |page: &str| {
        std::fs::read_to_string(dir.join(format!("{page}.1")))
            .unwrap()
            .replace("\\-", "-")
    };
    for page in ["cresolver", "cresolver-node", "cresolver-rounds-list"] {
        let body = page_text(page);
        // the page is titled and named as its file, its usage is the whole command
        assert!(body.contains(&format!(".TH {page} 1")), "{page}:\n{body}");
        assert!(
            body.contains(&format!("\n{page} - ")),
            "{page}: NAME line:\n{body}"
        );
    }
    let list = page_text("cresolver-rounds-list");
    assert!(list.contains("cresolver rounds list"), "{list}");
    let rounds = page_text("cresolver-rounds");
    assert!(rounds.contains("cresolver-rounds-list(1)"), "{rounds}");
    let names: Vec<String> = std::fs::read_dir(&*dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!names.contains(&"list.1".to_string()), "{names:?}");
    assert!(
        names.contains(&"cresolver-config-check.1".to_string()),
        "{names:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sigterm_during_the_drain_stops_the_node_at_once() {
    // a worker that answers after a minute: the round stays in flight
    let mut slow = behaviour(DeterminationMode::Yes, 0.9);
    slow.latency = std::time::Duration::from_secs(60);
    let a = agent(slow).await;
    let s = market_with_workers(vec![AgentUri::Endpoint(a)]).await;
    let dir = common::node::tmpdir("second-signal");
    let data = dir.join("data");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_cresolver"))
        .args([
            "node",
            "--rpc-url",
            &s.dev.rpc_url(),
            "--market-address",
            &s.dev.contracts.market.to_string(),
            "--data-dir",
            data.to_str().unwrap(),
            "--workflow",
            "workflows/cresolver-resolution.toml",
        ])
        .env("CRESOLVER_LOG", "info")
        .env(
            "CRESOLVER_PRIVATE_KEY",
            alloy::hex::encode(s.dev.signers[0].to_bytes()),
        )
        .env("CRESOLVER__DISCOVERY__ALLOW_PRIVATE_ENDPOINTS", "true")
        .env("CRESOLVER__CHAIN__POLL_INTERVAL_MS", "100")
        .env("CRESOLVER__API__LISTEN", "")
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    s.dev.request_resolution(s.market_id).await.unwrap();
    // wait until the round asks its worker (discovered, waiting for the answer)
    let db = data.join("cresolver.sqlite3");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let state: Option<String> =
            rusqlite::Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
                .ok()
                .and_then(|c| {
                    c.query_row("SELECT state FROM rounds", [], |r| r.get(0))
                        .ok()
                });
        if state.as_deref() == Some("discovered") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the round did not start: {state:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let pid = child.id().unwrap().to_string();
    let term = || {
        let ok = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success();
        assert!(ok);
    };
    term();
    // the drain runs: the node waits for its round
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    assert!(
        child.try_wait().unwrap().is_none(),
        "the node did not drain"
    );
    term();
    let second = std::time::Instant::now();
    let out = tokio::time::timeout(std::time::Duration::from_secs(10), child.wait_with_output())
        .await
        .expect("the node still runs 10 s after a second SIGTERM")
        .unwrap();
    assert!(second.elapsed() < std::time::Duration::from_secs(5));
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!(
            "1 round(s) left unfinished: market {} on {}",
            s.market_id, s.dev.contracts.market
        )) && err.contains("resume"),
        "{err}"
    );
}

#[tokio::test]
async fn rounds_list_help_names_every_state() {
    let out = run(&["rounds", "list", "--help"], &[]).await;
    let help = text(&out.stdout);
    for s in cresolver_store::Stage::ALL {
        assert!(help.contains(s.as_str()), "{} missing:\n{help}", s.as_str());
    }
    // commands that sign nothing take no --account; those that sign do
    for cmd in [
        &["rounds", "list"][..],
        &["rounds", "show"],
        &["rounds", "export"],
        &["replay"],
        &["dry-run"],
    ] {
        let mut args = cmd.to_vec();
        args.push("--help");
        let help = text(&run(&args, &[]).await.stdout);
        assert!(
            !help.contains("--account"),
            "{cmd:?} takes --account:\n{help}"
        );
    }
    for cmd in [&["node"][..], &["resolve"], &["config", "check"]] {
        let mut args = cmd.to_vec();
        args.push("--help");
        let help = text(&run(&args, &[]).await.stdout);
        assert!(help.contains("--account"), "{cmd:?}:\n{help}");
    }
}

#[tokio::test]
async fn rounds_list_since_keeps_an_old_round_updated_recently() {
    use alloy::primitives::{Address, U256};
    let dir = common::node::tmpdir("rounds-since");
    let market = Address::repeat_byte(0x11);
    drop(requests_1_to_3(&dir, market).await);
    // round 1, the oldest, changed now; 2 and 3 long ago
    let c = rusqlite::Connection::open(dir.join("cresolver.sqlite3")).unwrap();
    c.execute(
        "UPDATE rounds SET updated_at = 1000 WHERE market_id <> '1'",
        [],
    )
    .unwrap();
    drop(c);
    let data = dir.to_str().unwrap();
    let out = run(
        &[
            "rounds",
            "list",
            "--data-dir",
            data,
            "--json",
            "--since",
            "2000",
        ],
        &[],
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ids: Vec<U256> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["market_id"].as_str().unwrap().parse().unwrap())
        .collect();
    assert_eq!(ids, [U256::from(1)], "{v}");
    let out = run(
        &[
            "rounds",
            "list",
            "--data-dir",
            data,
            "--json",
            "--until",
            "2000",
        ],
        &[],
    )
    .await;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v.as_array().map(Vec::len), Some(2), "{v}");
}

#[tokio::test]
async fn commands_without_a_config_say_to_pass_one() {
    let dir = common::node::tmpdir("no-config");
    let out = run(&["rounds", "retry", "7"], &[]).await;
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("no config: pass --config FILE"),
        "{}",
        text(&out.stderr)
    );
    let out = run(
        &[
            "replay",
            "--market",
            "7",
            "--rpc-url",
            &common::closed_port_url(),
            "--data-dir",
            dir.to_str().unwrap(),
        ],
        &[],
    )
    .await;
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("no config: pass --config FILE"),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test]
async fn a_second_holder_of_the_data_dir_is_refused_with_the_first_named() {
    let dir = common::node::tmpdir("lock");
    let mut cfg = cresolver_pipeline::config::NodeConfig::default();
    cfg.node.data_dir = dir.join("data");
    let held = cresolver_node::lock_data_dir(&cfg, "node").unwrap();
    assert!(held.is_some());
    let e = cresolver_node::lock_data_dir(&cfg, "resolve")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!("pid {}, `cresolver node`", std::process::id()))
            && e.contains("in use by another cresolver process"),
        "{e}"
    );
    // the binary refuses too, naming the holder
    let data = cfg.node.data_dir.to_str().unwrap();
    let key = ("CRESOLVER_PRIVATE_KEY", format!("{:064x}", 1));
    let out = run(
        &["resolve", "--market", "1", "--data-dir", data],
        std::slice::from_ref(&key),
    )
    .await;
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("in use by another cresolver process"),
        "{}",
        text(&out.stderr)
    );
    drop(held);
    assert!(
        cresolver_node::lock_data_dir(&cfg, "resolve")
            .unwrap()
            .is_some()
    );
}
