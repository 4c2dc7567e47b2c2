//! A newcomer's first run: `scripts/demo.sh` as a user who is not root and cannot become
//! root, with a `PATH` that holds none of the test suite's Debian tools (PostgreSQL's
//! `initdb`, `chromium`, `promtool`) and no `sudo`: it installs anvil from npm on its
//! own, reaches the demo, resolves the market, and prints no ERROR or WARN line.
//!
//! And the binary, copied out of the checkout, runs a node from a directory that holds
//! only its config and workflow files (what `cargo install` gives an operator).
//!
//! The demo is given the binary this suite built (`CRESOLVER_DEMO_BIN`): the Rust
//! toolchain lives in root's home, and a second build would take minutes. Switching user
//! needs root; run as another user, the test says so and passes without checking.

use crate::common;

use cresolver_store::RoundKey;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::Command;

/// The unprivileged user and group (Debian's `nobody` / `nogroup`).
const NOBODY: &str = "65534";

/// Programs a newcomer's machine lacks: the test suite's Debian tools, root's way up.
fn withheld(name: &str) -> bool {
    name.starts_with("chromium")
        || name.starts_with("pg_")
        || [
            "initdb",
            "postgres",
            "psql",
            "promtool",
            "prometheus",
            "chromedriver",
            "sudo",
            "su",
            "apt-get",
            "apt",
            "cargo",
            "rustc",
        ]
        .contains(&name)
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

#[test]
fn the_demo_runs_for_a_user_without_root_or_the_suites_packages() {
    if !is_root() {
        eprintln!("not run: switching to an unprivileged user needs root");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let repo = root.join("checkout");
    std::fs::create_dir_all(repo.join("scripts")).unwrap();
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    for f in ["demo.sh", "install-tools.sh"] {
        std::fs::copy(here.join("scripts").join(f), repo.join("scripts").join(f)).unwrap();
    }
    let bin = repo.join("cresolver");
    std::fs::copy(env!("CARGO_BIN_EXE_cresolver"), &bin).unwrap();
    let home = root.join("home");
    let path = root.join("bin");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&path).unwrap();
    // every program on the system's PATH but the withheld ones
    for dir in [
        "/usr/local/bin",
        "/usr/bin",
        "/bin",
        "/usr/local/sbin",
        "/usr/sbin",
        "/sbin",
    ] {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            let link = path.join(&name);
            if withheld(&name) || link.symlink_metadata().is_ok() {
                continue;
            }
            let _ = symlink(e.path(), link);
        }
    }
    for tool in ["initdb", "chromium", "promtool", "sudo", "apt-get"] {
        assert!(!path.join(tool).exists(), "{tool} withheld");
    }
    let chown = Command::new("chown")
        .args(["-R", &format!("{NOBODY}:{NOBODY}")])
        .arg(root)
        .status()
        .unwrap();
    assert!(chown.success());

    // the machine's own settings (its CA bundle for TLS, say) stay; root's do not
    let env = std::env::vars().filter(|(k, v)| {
        !v.contains("/root")
            && !["PATH", "HOME", "USER", "LOGNAME", "ANVIL_BIN"].contains(&k.as_str())
            && !k.starts_with("CRESOLVER")
            && !k.starts_with("CARGO")
            && !k.starts_with("RUSTUP")
    });
    let out = Command::new("setpriv")
        .args(["--reuid", NOBODY, "--regid", NOBODY, "--clear-groups", "--"])
        .env_clear()
        .envs(env)
        .env("HOME", &home)
        .env("PATH", &path)
        .env("CRESOLVER_DEMO_BIN", &bin)
        .arg("bash")
        .arg(repo.join("scripts/demo.sh"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let all = format!("{stdout}\n{stderr}");
    assert!(out.status.success(), "the demo failed:\n{all}");
    // it ran as the unprivileged user, on its own anvil
    assert!(
        repo.join(".tools/node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil")
            .is_file(),
        "{all}"
    );
    for step in ["[1/3] tools", "[2/3] build: skipped", "[3/3] demo"] {
        assert!(stderr.contains(step), "no step {step:?}:\n{all}");
    }
    assert!(
        stdout.contains("round confirmed") && stdout.contains("Outcome: YES"),
        "{all}"
    );
    for line in all.lines() {
        assert!(
            !line.contains("ERROR") && !line.contains(" WARN "),
            "a successful demo printed: {line}\n{all}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_runs_a_node_with_only_its_config_and_workflow_files() {
    use cresolver_store::{Rounds, SqliteStore, Stage, block_on};
    let s = common::market_with_three_workers().await;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::copy(here.join("examples/node.toml"), dir.join("node.toml")).unwrap();
    std::fs::copy(
        here.join("workflows/cresolver-resolution.toml"),
        dir.join("cresolver-resolution.toml"),
    )
    .unwrap();
    let bin = dir.join("cresolver");
    std::fs::copy(env!("CARGO_BIN_EXE_cresolver"), &bin).unwrap();
    let market = s.dev.contracts.market;
    // the example config as an operator would adapt it to this chain
    let _node = tokio::process::Command::new(&bin)
        .current_dir(dir)
        .args(["node", "--config", "node.toml"])
        .args(["--workflow", "cresolver-resolution.toml"])
        .args(["--rpc-url", &s.dev.rpc_url()])
        .args(["--market-address", &market.to_string()])
        .env("CRESOLVER__CHAIN__CHAIN_ID", "31337")
        .env("CRESOLVER__CHAIN__POLL_INTERVAL_MS", "100")
        .env("CRESOLVER__DISCOVERY__ALLOW_PRIVATE_ENDPOINTS", "true")
        .env("CRESOLVER__API__LISTEN", "127.0.0.1:0")
        .env(
            "CRESOLVER_PRIVATE_KEY",
            alloy::hex::encode(s.dev.signers[0].to_bytes()),
        )
        .env("CRESOLVER_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.join("node.log")).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    s.dev.request_resolution(s.market_id).await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let state = SqliteStore::open(&dir.join("cresolver-data"))
            .ok()
            .and_then(|st| {
                block_on(st.get(RoundKey::new(market, s.market_id)))
                    .ok()
                    .flatten()
            })
            .map(|r| r.state);
        if state == Some(Stage::Confirmed) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not resolved ({state:?}):\n{}",
            std::fs::read_to_string(dir.join("node.log")).unwrap_or_default()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(common::node::resolved_events(&s).await.len(), 1);
}
