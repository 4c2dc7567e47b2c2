//! The command line as an operator meets it: help, config check, one-shot resolve on
//! anvil, and errors that say what to do.

mod common;

use common::chain::*;
use common::*;
use cresolver_devnet::agent::DeterminationMode;
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

#[tokio::test]
async fn rounds_list_filters_the_stored_rounds() {
    use alloy::primitives::{Address, B256, U256};
    use cresolver_core::request::LogRef;
    use cresolver_store::{Requests, Rounds, SqliteStore, Stage, Store};
    let dir = common::node::tmpdir("rounds-list");
    let market = Address::repeat_byte(0x11);
    {
        let store = SqliteStore::new(Store::open(&dir).unwrap());
        for id in 1..=3u64 {
            let log = LogRef {
                block_number: id,
                block_hash: B256::repeat_byte(id as u8),
                tx_hash: B256::repeat_byte(0x40 + id as u8),
                log_index: 0,
            };
            store
                .record_request(market, U256::from(id), "wf", &log)
                .await
                .unwrap();
        }
        store
            .set_state(market, U256::from(2u64), Stage::Failed, Some("no quorum"))
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
        text(&out.stderr).contains("use requested, discovered"),
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
    for page in ["cresolver.1", "cresolver-node.1", "cresolver-rounds-list.1"] {
        let body = std::fs::read_to_string(dir.join(page)).unwrap();
        assert!(body.contains(".TH"), "{page}");
    }
}
