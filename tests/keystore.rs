//! The signing key from an encrypted JSON keystore, as foundry keeps it: a key imported
//! the way `cast wallet import` does (`~/.foundry/keystores/<name>`) signs the
//! resolution; a wrong password, a missing file, a corrupt file and a missing password
//! stop the node at start with messages that say what to do, never with the password.

use crate::common;

use alloy::signers::local::PrivateKeySigner;
use common::market_with_three_workers;
use common::node::{node_process_with, resolved_events, tmpdir, workflow_file};
use std::path::Path;
use std::time::{Duration, Instant};

const PASSWORD: &str = "correct horse battery staple";

/// Imports `key` as foundry does into `<home>/.foundry/keystores/<name>`.
fn import(home: &Path, name: &str, key: &PrivateKeySigner) {
    let dir = home.join(".foundry").join("keystores");
    std::fs::create_dir_all(&dir).unwrap();
    PrivateKeySigner::encrypt_keystore(
        &dir,
        &mut rand::thread_rng(),
        key.to_bytes(),
        PASSWORD,
        Some(name),
    )
    .unwrap();
    assert!(dir.join(name).is_file());
}

/// Runs `cresolver node <args>` with `envs` (HOME pointing at `home`, no private key in
/// the environment) and returns its exit success and its output.
async fn node_start_fails(home: &Path, args: &[&str], envs: &[(&str, &str)]) -> String {
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new(env!("CARGO_BIN_EXE_cresolver"))
            .arg("node")
            .args(args)
            .args(["--rpc-url", "http://127.0.0.1:1"])
            .env("HOME", home)
            .env_remove("CRESOLVER_PRIVATE_KEY")
            .env_remove("CRESOLVER_KEYSTORE_PASSWORD")
            .envs(envs.iter().copied())
            .output(),
    )
    .await
    .expect("the node stops at start")
    .unwrap();
    assert!(!out.status.success(), "the node started");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foundry_keystore_account_signs_the_resolution() {
    let s = market_with_three_workers().await;
    let dir = tmpdir("keystore");
    // the market's authorized resolver is dev account 0: imported into the keystore
    import(&dir, "resolver", &s.dev.signers[0]);
    let wf = workflow_file(&dir, |t| t);
    let home = dir.display().to_string();
    // the env var holds another (unauthorized) key: the configured keystore must win
    let other = alloy::hex::encode(s.dev.signers[7].to_bytes());
    let mut child = node_process_with(
        &s,
        &dir,
        &wf,
        None,
        &[
            ("HOME", &home),
            ("CRESOLVER__SIGNER__ACCOUNT", "resolver"),
            ("CRESOLVER_KEYSTORE_PASSWORD", PASSWORD),
            ("CRESOLVER_PRIVATE_KEY", &other),
        ],
    );
    s.dev.request_resolution(s.market_id).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let events = loop {
        let e = resolved_events(&s).await;
        if !e.is_empty() {
            break e;
        }
        assert!(
            Instant::now() < deadline,
            "not resolved:\n{}",
            std::fs::read_to_string(dir.join("node.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    child.kill().await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(
        events[0].resolver, s.dev.accounts[0],
        "signed with the keystore's key"
    );
    let log = std::fs::read_to_string(dir.join("node.log")).unwrap();
    assert!(!log.contains(PASSWORD), "the password is in the log");
}

#[tokio::test]
async fn keystore_problems_stop_the_node_at_start_with_what_to_do() {
    let dir = tmpdir("keystore-errors");
    let key = PrivateKeySigner::random();
    import(&dir, "resolver", &key);
    let path = dir
        .join(".foundry/keystores/resolver")
        .display()
        .to_string();

    let wrong = node_start_fails(
        &dir,
        &["--account", "resolver"],
        &[("CRESOLVER_KEYSTORE_PASSWORD", "not the password")],
    )
    .await;
    assert!(
        wrong.contains(&format!("wrong password for keystore {path}"))
            && wrong.contains("env var CRESOLVER_KEYSTORE_PASSWORD"),
        "{wrong}"
    );
    assert!(!wrong.contains("not the password"), "{wrong}");

    let missing = node_start_fails(
        &dir,
        &["--account", "nobody"],
        &[("CRESOLVER_KEYSTORE_PASSWORD", PASSWORD)],
    )
    .await;
    assert!(
        missing.contains("keystores/nobody not found") && missing.contains("cast wallet import"),
        "{missing}"
    );

    let no_password = node_start_fails(&dir, &["--account", "resolver"], &[]).await;
    assert!(
        no_password.contains("needs its password")
            && no_password.contains("CRESOLVER_KEYSTORE_PASSWORD"),
        "{no_password}"
    );

    let corrupt = dir.join("corrupt.json");
    std::fs::write(&corrupt, r#"{"crypto": {"cipher": "nope"}, "version": 3}"#).unwrap();
    let bad = node_start_fails(
        &dir,
        &[],
        &[
            ("CRESOLVER__SIGNER__KEYSTORE", corrupt.to_str().unwrap()),
            ("CRESOLVER_KEYSTORE_PASSWORD", PASSWORD),
        ],
    )
    .await;
    assert!(
        bad.contains("is not a readable encrypted JSON keystore"),
        "{bad}"
    );

    // the password may come from a file instead
    let pw = dir.join("password");
    std::fs::write(&pw, format!("{PASSWORD}\n")).unwrap();
    let started = node_start_fails(
        &dir,
        &["--account", "resolver"],
        &[
            ("CRESOLVER__SIGNER__PASSWORD_FILE", pw.to_str().unwrap()),
            ("CRESOLVER_LOG", "info"),
        ],
    )
    .await;
    assert!(
        started.contains(&format!("starting node resolver={}", key.address())),
        "the key was read from the keystore (it stopped later, at the RPC):\n{started}"
    );
}
