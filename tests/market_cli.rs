//! `cresolver market` against a local chain: a refused call is decoded and says what to do,
//! a command without a key says where to put one, `show` signs nothing and takes no key,
//! and register → create → join → request leave the market as `show --json` reports it.

use cresolver_devnet::Devnet;
use serde_json::Value;
use std::process::Command;

/// Runs `cresolver market …` with `key` (if any) in CRESOLVER_PRIVATE_KEY: success,
/// stdout, stderr.
fn market(args: &[&str], key: Option<&str>) -> (bool, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cresolver"));
    cmd.arg("market")
        .args(args)
        .env_remove("CRESOLVER_PRIVATE_KEY");
    if let Some(k) = key {
        cmd.env("CRESOLVER_PRIVATE_KEY", k);
    }
    let out = cmd.output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn market_commands_decode_refusals_and_drive_a_market() {
    let dev = Devnet::start().await.unwrap();
    let key = |i: usize| alloy::hex::encode_prefixed(dev.signers[i].to_bytes());
    let (rpc, addr) = (dev.rpc_url(), dev.contracts.market.to_string());
    let on = |args: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        v.extend([
            "--rpc-url".into(),
            rpc.clone(),
            "--market-address".into(),
            addr.clone(),
        ]);
        v
    };
    let run = |args: &[&str], k: Option<&str>| {
        let v = on(args);
        let refs: Vec<&str> = v.iter().map(String::as_str).collect();
        market(&refs, k)
    };
    let worker = dev.accounts[1].to_string();

    // no key: where to put one
    let (ok, _, err) = run(&["request", "0"], None);
    assert!(!ok && err.contains("CRESOLVER_PRIVATE_KEY"), "{err}");
    // only the owner authorizes: decoded, with what to do
    let (ok, _, err) = run(&["authorize-resolver", &worker], Some(&key(1)));
    assert!(!ok, "{err}");
    assert!(
        err.contains("OwnableUnauthorizedAccount") && err.contains("only the market's owner"),
        "{err}"
    );
    // a market that does not exist
    let (ok, _, err) = run(&["request", "7"], Some(&key(1)));
    assert!(!ok && err.contains("MarketDoesNotExist"), "{err}");
    let (ok, _, err) = run(&["show", "7"], None);
    assert!(!ok && err.contains("does not exist"), "{err}");
    // show signs nothing: no key flags
    let (_, help, _) = market(&["show", "--help"], None);
    assert!(
        !help.contains("--private-key") && !help.contains("--account"),
        "{help}"
    );

    // register, create, join, request
    let (ok, agent, err) = run(
        &["register-worker", "--endpoint", "https://worker.example"],
        Some(&key(1)),
    );
    assert!(ok, "{err}");
    let agent = agent.trim().to_string();
    let (ok, id, err) = run(
        &[
            "create",
            "--question",
            "Will it?",
            "--reward",
            "0.5",
            "--duration",
            "1d",
        ],
        Some(&key(0)),
    );
    assert!(ok, "{err}");
    let id = id.trim().to_string();
    let (ok, _, err) = run(
        &["join", &id, "--agent-id", &agent, "--stake", "1wei"],
        Some(&key(1)),
    );
    assert!(
        !ok && err.contains("BelowMinStake") && err.contains("--stake"),
        "{err}"
    );
    let (ok, _, err) = run(&["join", &id, "--agent-id", &agent], Some(&key(1)));
    assert!(ok, "{err}");
    let (ok, _, err) = run(&["join", &id, "--agent-id", &agent], Some(&key(2)));
    assert!(!ok && err.contains("NotAgentOwner"), "{err}");
    let (ok, _, err) = run(&["request", &id], Some(&key(3)));
    assert!(ok, "{err}");
    let (ok, out, err) = run(&["show", &id, "--json"], None);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["question"], "Will it?");
    assert_eq!(v["resolved"], false);
    assert_eq!(
        v["workers"][0]["address"].as_str().unwrap().to_lowercase(),
        worker.to_lowercase()
    );
    assert_eq!(v["reward_pool"], "0x6f05b59d3b20000", "0.5 ETH");
    let (ok, _, err) = run(&["authorize-resolver", &worker], Some(&key(0)));
    assert!(ok, "{err}");
    dev.stop().await;
}
