//! The testnet quick-start (`docs/quickstart.md`), run as written against anvil: every
//! fenced `sh` block of the chapter in order, in one shell, with the values the reader
//! fills in (the lines holding `…`) set in the environment instead: `RPC_URL` is a fresh
//! anvil, the keys are anvil's dev keys. The reference worker's port is replaced by a free
//! one, and the node is allowed to reach a worker on 127.0.0.1.

use crate::common::node::free_port;
use alloy::signers::local::PrivateKeySigner;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Anvil's dev keys 1, 2 and 3 (0 stays unused).
const KEYS: [&str; 3] = [
    "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
    "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a",
    "0x7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6",
];

/// The chapter's shell blocks, in order, as one script (the lines holding `…` left out).
fn script(chapter: &str) -> String {
    let mut out = Vec::new();
    let mut in_sh = false;
    let mut in_other = false;
    for line in chapter.lines() {
        let t = line.trim();
        if t.starts_with("```") {
            if in_sh || in_other {
                in_sh = false;
                in_other = false;
            } else if t == "```sh" {
                in_sh = true;
            } else {
                in_other = true;
            }
            continue;
        }
        if in_sh && !line.contains('…') {
            out.push(line.to_string());
        }
    }
    out.join("\n")
}

/// Kills a child (by its pid) when dropped.
struct Reap(std::process::Child);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn anvil(port: u16) -> Reap {
    let bin = std::env::var_os("ANVIL_BIN").map_or_else(
        || root().join(".tools/node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil"),
        PathBuf::from,
    );
    let mut child = Command::new(bin)
        .args(["--port", &port.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .expect("anvil (scripts/install-tools.sh installs it)");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let deadline = Instant::now() + Duration::from_secs(30);
    for l in lines.by_ref() {
        if l.unwrap().contains("Listening on") {
            break;
        }
        assert!(Instant::now() < deadline, "anvil did not start");
    }
    // keep draining anvil's output
    std::thread::spawn(move || for _ in lines {});
    Reap(child)
}

#[test]
fn the_quickstart_chapter_runs_as_written_against_anvil() {
    assert!(
        Command::new("jq").arg("--version").output().is_ok(),
        "the chapter reads contracts.json with jq: install it"
    );
    let chapter = std::fs::read_to_string(root().join("docs/quickstart.md")).unwrap();
    assert!(chapter.contains("127.0.0.1:8701"));
    let worker_port = free_port();
    // the node and the worker the chapter starts in the background end with the shell
    let script = format!(
        "trap 'kill $(jobs -p) 2>/dev/null' EXIT\n{}",
        script(&chapter).replace("8701", &worker_port.to_string())
    );
    let port = free_port();
    let _anvil = anvil(port);
    let tmp = tempfile::tempdir().unwrap();
    let dir: &Path = tmp.path();
    std::os::unix::fs::symlink(root().join("workflows"), dir.join("workflows")).unwrap();
    let node: PrivateKeySigner = KEYS[2].parse().unwrap();
    let bin = Path::new(env!("CARGO_BIN_EXE_cresolver")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let log_path = dir.join("chapter.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let child = Command::new("bash")
        .args(["-e", "-x", "-c", &script])
        .current_dir(dir)
        .env("PATH", path)
        .env("RPC_URL", format!("http://127.0.0.1:{port}"))
        .env("OWNER_KEY", KEYS[0])
        .env("WORKER_KEY", KEYS[1])
        .env("NODE_KEY", KEYS[2])
        .env("NODE_ADDRESS", node.address().to_string())
        .env("CRESOLVER__DISCOVERY__ALLOW_PRIVATE_ENDPOINTS", "true")
        .env("CRESOLVER__CHAIN__POLL_INTERVAL_MS", "200")
        .env(
            "CRESOLVER__API__LISTEN",
            format!("127.0.0.1:{}", free_port()),
        )
        .env_remove("CRESOLVER_PRIVATE_KEY")
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    // the output goes to a file: the node and the worker the chapter starts in the
    // background keep it open after the shell ends
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut child = Reap(child);
    let status = loop {
        if let Some(s) = child.0.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the chapter did not end within 600 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let text = std::fs::read_to_string(&log_path).unwrap();
    assert!(status.success(), "the chapter failed:\n{text}");
    for expected in [
        "\"market\": \"0x",
        "is an authorized resolver",
        "config ok",
        "resolved: YES",
        "MARKET ID",
    ] {
        assert!(text.contains(expected), "no {expected:?} in:\n{text}");
    }
}
