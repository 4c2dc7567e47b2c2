//! `cresolver devnet up` and the README's five-minute tour, as written: the test starts
//! the built binary in a temp directory, waits for it to say it is ready, runs the tour's
//! code block from the README (so a change there is tested), checks what each step did,
//! stops it with SIGINT, starts it again and checks the chain and the rounds are the same.

use crate::common::ports::{free_port, free_ports};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn anvil() -> PathBuf {
    std::env::var_os("ANVIL_BIN").map_or_else(
        || root().join(".tools/node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil"),
        PathBuf::from,
    )
}

/// The fenced `sh` blocks of a Markdown text, each as its lines.
fn sh_blocks(text: &str) -> Vec<Vec<String>> {
    let mut blocks = Vec::new();
    // None: outside a block; Some(None): in a block of another language
    let mut cur: Option<Option<Vec<String>>> = None;
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with("```") {
            cur = match cur.take() {
                Some(Some(b)) => {
                    blocks.push(b);
                    None
                }
                Some(None) => None,
                None if t == "```sh" => Some(Some(Vec::new())),
                None => Some(None),
            };
            continue;
        }
        if let Some(Some(b)) = cur.as_mut() {
            b.push(line.to_string());
        }
    }
    blocks
}

/// `GET http://{addr}{path}`: the status line and the body.
fn http_get(addr: &str, path: &str) -> (String, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let status = text.lines().next().unwrap_or("").to_string();
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

struct Up {
    child: Child,
    lines: mpsc::Receiver<String>,
    out: Vec<String>,
}

impl Up {
    fn start(dir: &Path, args: &[String]) -> Up {
        let mut child = Command::new(env!("CARGO_BIN_EXE_cresolver"))
            .args(args)
            .current_dir(dir)
            .env("ANVIL_BIN", anvil())
            .env_remove("CRESOLVER_API_TOKEN")
            .env_remove("CRESOLVER_PRIVATE_KEY")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let (tx, lines) = mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for l in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        let mut up = Up {
            child,
            lines,
            out: Vec::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(300);
        while !up.out.iter().any(|l| l.starts_with("devnet ready")) {
            assert!(
                Instant::now() < deadline,
                "devnet up not ready: {:?}",
                up.out
            );
            if let Ok(l) = up.lines.recv_timeout(Duration::from_secs(1)) {
                up.out.push(l);
            }
            if let Ok(Some(s)) = up.child.try_wait() {
                panic!("devnet up exited ({s}): {:?}", up.out);
            }
        }
        up
    }

    fn interrupt(mut self) {
        let ok = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                assert!(s.success(), "devnet up ended with {s}");
                return;
            }
            assert!(Instant::now() < deadline, "devnet up did not stop");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        let _ = self.child.kill();
    }
}

/// Runs a command line of the tour in `dir` (`cresolver` is the built binary).
fn sh(dir: &Path, script: &str) -> (bool, String) {
    let bin = Path::new(env!("CARGO_BIN_EXE_cresolver")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("bash")
        .args(["-e", "-x", "-c", script])
        .current_dir(dir)
        .env("PATH", path)
        .env_remove("CRESOLVER_API_TOKEN")
        .env_remove("CRESOLVER_PRIVATE_KEY")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Runs the built binary in `dir`: success, stdout.
fn cli(dir: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_cresolver"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// The rounds (id, state) and the market count, as the CLI reads them.
fn snapshot(dir: &Path) -> (Vec<(String, String)>, String) {
    let cfg = ["--config", "devnet/node.toml", "--json"];
    let (ok, text) = cli(dir, &[&["rounds", "list"][..], &cfg].concat());
    assert!(ok, "{text}");
    let rounds: Vec<Value> = serde_json::from_str(&text).unwrap();
    let mut rounds: Vec<(String, String)> = rounds
        .iter()
        .map(|r| (r["market_id"].to_string(), r["state"].to_string()))
        .collect();
    rounds.sort();
    let (ok, text) = cli(dir, &[&["market", "show"][..], &cfg].concat());
    assert!(ok, "{text}");
    let info: Value = serde_json::from_str(&text).unwrap();
    (rounds, info["market_count"].to_string())
}

/// The README's `cresolver devnet up` line as arguments, with free ports added; and the
/// tour's block.
fn from_readme(readme: &str, api: &str) -> (Vec<String>, Vec<String>) {
    let blocks = sh_blocks(readme);
    let up_line = blocks
        .iter()
        .flatten()
        .find(|l| l.trim_start().starts_with("cresolver devnet up"))
        .expect("the README starts the devnet with `cresolver devnet up`");
    let tour = blocks
        .iter()
        .find(|b| {
            b.iter()
                .any(|l| l.contains("rounds list --config devnet/node.toml"))
        })
        .expect("the README's tour block");
    let mut args: Vec<String> = up_line
        .split('#')
        .next()
        .unwrap()
        .split_whitespace()
        .skip(1)
        .map(String::from)
        .collect();
    args.extend([
        "--anvil-port".into(),
        free_port().to_string(),
        "--api-listen".into(),
        api.to_string(),
        "--worker-port".into(),
        free_ports(6).to_string(),
    ]);
    (args, tour.clone())
}

/// Runs the tour's block in `dir` and checks what its steps said.
fn run_tour(dir: &Path, tour: &[String]) {
    let (ok, out) = sh(dir, &tour.join("\n"));
    assert!(ok, "the README's tour failed:\n{out}");
    for expected in [
        "failed",
        "HTTP status 503",
        "1 of 1 market(s) agree with the chain",
        "would_submit",
        "runs the round of market 1",
        "resolved: YES",
    ] {
        assert!(
            out.contains(expected),
            "the tour's output lacks {expected:?}:\n{out}"
        );
    }
}

#[test]
fn the_readme_tour_runs_against_devnet_up_and_a_restart_keeps_the_state() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let api = format!("127.0.0.1:{}", free_port());
    let (args, tour) = from_readme(&readme, &api);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();

    let up = Up::start(dir, &args);
    assert!(up.out.iter().any(|l| l.contains("(new)")), "{:?}", up.out);
    let key0 = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";
    assert!(
        up.out.iter().any(|l| l.contains(key0)),
        "the dev keys are printed: {:?}",
        up.out
    );
    // the status page the README names, on the port this test gave the node
    assert!(readme.contains("http://127.0.0.1:9464/"));
    let (status, body) = http_get(&api, "/");
    assert!(status.contains(" 200"), "{status}");
    assert!(body.to_lowercase().contains("<html"), "{body}");

    let (before, count) = snapshot(dir);
    assert_eq!(count, "\"0x3\"", "three seeded markets");
    let states: Vec<&str> = before.iter().map(|(_, s)| s.as_str()).collect();
    assert!(states.contains(&"\"failed\""), "{before:?}");
    assert!(
        states.contains(&"\"confirmed\"") || states.contains(&"\"finalized\""),
        "{before:?}"
    );

    run_tour(dir, &tour);

    // after the tour: market 1 retried and resolved, market 2 requested and resolved
    let deadline = Instant::now() + Duration::from_secs(60);
    let settled = loop {
        let (rounds, count) = snapshot(dir);
        let done = rounds.len() == 3
            && rounds
                .iter()
                .all(|(_, s)| s == "\"confirmed\"" || s == "\"finalized\"");
        if done || Instant::now() > deadline {
            break (rounds, count);
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(settled.0.len(), 3, "{settled:?}");
    up.interrupt();
    assert!(dir.join("devnet/anvil-state.json").is_file());

    let up = Up::start(dir, &args);
    assert!(
        up.out.iter().any(|l| l.contains("(resumed)")),
        "{:?}",
        up.out
    );
    let again = snapshot(dir);
    assert_eq!(
        again, settled,
        "the same markets and rounds after a restart"
    );
    let show = [
        "market",
        "show",
        "2",
        "--config",
        "devnet/node.toml",
        "--json",
    ];
    let (ok, out) = cli(dir, &show);
    assert!(ok && out.contains("\"resolved\": true"), "{out}");
    up.interrupt();
}
