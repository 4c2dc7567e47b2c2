//! The monitoring and service assets in `deploy/`: the alert rules pass
//! `promtool check rules` (Debian's prometheus package), every metric the rules and the
//! Grafana dashboard query is one a running node really exports, and the systemd unit
//! starts the binary with flags it has.

use crate::common;

use common::market_with_three_workers;
use common::node::{free_port, node_config, start, tmpdir, wait_final, workflow_file};
use cresolver_store::RoundKey;
use std::collections::BTreeSet;
use std::path::Path;

const RULES: &str = "deploy/prometheus/cresolver-alerts.yml";
const DASHBOARD: &str = "deploy/grafana/cresolver-dashboard.json";
const UNIT: &str = "deploy/systemd/cresolver.service";

/// Every `cresolver_…` identifier in a PromQL text.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = expr;
    while let Some(i) = rest.find("cresolver_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        out.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    out
}

/// The sample names a node's exposition declares: each `# TYPE` family with the
/// suffixes its type gives its samples.
fn exported(exposition: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in exposition.lines() {
        let mut f = line.split_whitespace();
        if (f.next(), f.next()) != (Some("#"), Some("TYPE")) {
            continue;
        }
        let (Some(name), Some(kind)) = (f.next(), f.next()) else {
            continue;
        };
        match kind {
            "counter" => {
                out.insert(format!("{name}_total"));
            }
            "histogram" => {
                for s in ["_bucket", "_sum", "_count"] {
                    out.insert(format!("{name}{s}"));
                }
            }
            _ => {
                out.insert(name.to_string());
            }
        }
    }
    out
}

#[test]
fn the_alert_rules_pass_promtool() {
    let promtool = std::env::var("PROMTOOL").unwrap_or_else(|_| "/usr/bin/promtool".into());
    assert!(
        Path::new(&promtool).exists(),
        "{promtool} not found: install Debian's prometheus package (scripts/install-tools.sh does)"
    );
    let out = std::process::Command::new(&promtool)
        .args(["check", "rules", RULES])
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("SUCCESS: 10 rules found"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rules_and_the_dashboard_query_metrics_the_node_exports() {
    // a node that resolved a market, so its metric families are all registered and used
    let s = market_with_three_workers().await;
    let dir = tmpdir("deploy");
    let mut cfg = node_config(&s, &dir, workflow_file(&dir, |t| t));
    let port = free_port();
    cfg.api.listen = format!("127.0.0.1:{port}");
    // a second endpoint that refuses: its probe errors are counted
    cfg.chain.rpc_urls = vec![s.dev.rpc_url(), common::closed_port_url()];
    let node = start(cfg, s.dev.signers[0].clone()).await;
    s.dev.request_resolution(s.market_id).await.unwrap();
    wait_final(&node.node, s.dev.contracts.market, s.market_id).await;
    // a round that stops short of confirmed (no such market)
    let missing = alloy::primitives::U256::from(999);
    node.node.request(missing.into()).await.unwrap();
    let r = node
        .node
        .run_round(RoundKey::new(s.dev.contracts.market, missing))
        .await
        .unwrap();
    assert!(r.state.is_final(), "{r:?}");
    let exposition = reqwest::get(format!("http://127.0.0.1:{port}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    node.stop().await;
    let have = exported(&exposition);
    assert!(have.contains("cresolver_rounds_total"), "{exposition}");
    // every family the running node exports is in the metrics reference
    let reference = std::fs::read_to_string("docs/reference/metrics.md").unwrap();
    for name in &have {
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(name);
        assert!(
            reference.contains(&format!("`{family}`")),
            "{family} is exported by the node but not in docs/reference/metrics.md"
        );
    }

    let rules = std::fs::read_to_string(RULES).unwrap();
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(DASHBOARD).unwrap()).unwrap();
    let mut queries: Vec<(String, String)> = rules
        .lines()
        .filter(|l| l.contains("cresolver_"))
        .map(|l| ("alert rules".to_string(), l.to_string()))
        .collect();
    for p in dashboard["panels"].as_array().expect("panels") {
        for t in p["targets"].as_array().expect("targets") {
            queries.push((
                format!("panel {:?}", p["title"]),
                t["expr"].as_str().expect("expr").to_string(),
            ));
        }
    }
    assert!(queries.len() > 20, "{queries:?}");
    let mut used = BTreeSet::new();
    for (place, q) in &queries {
        for name in metric_names(q) {
            assert!(
                have.contains(&name),
                "{place} queries {name}, which the node does not export; it exports {have:?}"
            );
            used.insert(name);
        }
    }
    // the dashboard covers rounds, stages, workers, chain, RPC, transactions and leases
    for family in [
        "cresolver_rounds_total",
        "cresolver_stage_duration_seconds_bucket",
        "cresolver_worker_calls_total",
        "cresolver_head_lag_blocks",
        "cresolver_rpc_in_service",
        "cresolver_tx_oldest_pending_seconds",
        "cresolver_lease_events_total",
    ] {
        assert!(used.contains(family), "nothing queries {family}");
    }
}

#[test]
fn the_systemd_unit_starts_the_node_with_flags_it_has() {
    let unit = std::fs::read_to_string(UNIT).unwrap();
    for section in ["[Unit]", "[Service]", "[Install]"] {
        assert!(unit.contains(section), "{section} missing");
    }
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart");
    let mut args = exec.split_whitespace();
    assert!(args.next().unwrap().ends_with("/cresolver"));
    assert_eq!(args.next(), Some("node"));
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_cresolver"))
        .args(["node", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    for flag in args.filter(|a| a.starts_with("--")) {
        assert!(
            help.contains(flag),
            "`cresolver node` has no {flag}:\n{help}"
        );
    }
    // shutdown lets in-flight rounds reach a persisted state, and it comes back
    assert!(unit.contains("KillSignal=SIGTERM"));
    assert!(unit.contains("Restart=always"));
    assert!(unit.contains("TimeoutStopSec="));
}

/// The install commands of the unit's header (`#   install …` lines), each as its words,
/// comments cut.
fn install_steps(unit: &str) -> Vec<Vec<String>> {
    unit.lines()
        .filter_map(|l| l.strip_prefix("#   install "))
        .map(|l| {
            let l = l.split(" #").next().unwrap_or(l);
            std::iter::once("install")
                .chain(l.split_whitespace())
                .map(str::to_string)
                .collect()
        })
        .collect()
}

/// A path of the installed layout under `root` (`/etc/x` -> `root/etc/x`).
fn under(root: &Path, p: &str) -> std::path::PathBuf {
    root.join(p.trim_start_matches('/'))
}

fn is_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// Runs the install steps of the unit's header with every absolute path under `root`
/// (in `dir`, made reachable by other users) and the built binary for the release one.
fn install_layout(dir: &Path, root: &Path, unit: &str) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::create_dir_all(root).unwrap();
    // the directories every system has
    for d in ["usr/local/bin", "etc", "var/lib"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    // the temporary dir is 0700: the service user must reach the installed files
    for d in [dir, root] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let steps = install_steps(unit);
    assert!(steps.len() >= 4, "{steps:?}");
    for step in &steps {
        let args: Vec<String> = step[1..]
            .iter()
            .map(|a| match a.as_str() {
                "target/release/cresolver" => env!("CARGO_BIN_EXE_cresolver").to_string(),
                "/dev/null" => a.clone(),
                p if p.starts_with('/') => under(root, p).display().to_string(),
                _ => a.clone(),
            })
            .collect();
        let out = std::process::Command::new("install")
            .args(&args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "install {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The unit's `ExecStart=` binary (under `root`), its flags (absolute paths under
/// `root`) and its `WorkingDirectory=`.
fn service_command(unit: &str, root: &Path) -> (std::path::PathBuf, Vec<String>, String) {
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart");
    let workdir = unit
        .lines()
        .find_map(|l| l.strip_prefix("WorkingDirectory="))
        .expect("the unit sets WorkingDirectory=");
    let mut words = exec.split_whitespace();
    let binary = under(root, words.next().unwrap());
    assert_eq!(words.next(), Some("node"));
    let flags: Vec<String> = words
        .map(|w| {
            if w.starts_with('/') {
                under(root, w).display().to_string()
            } else {
                w.to_string()
            }
        })
        .collect();
    (binary, flags, workdir.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_install_passes_config_check_as_an_unprivileged_user() {
    use std::os::unix::fs::PermissionsExt as _;
    if !is_root() {
        println!("skipped: installing as root and running as nobody needs root");
        return;
    }
    let unit = std::fs::read_to_string(UNIT).unwrap();
    let dir = tmpdir("install");
    let root = dir.join("root");
    install_layout(&dir, &root, &unit);
    // what the unit's header says goes in the env file, and a chain to check against
    let s = common::market_with_three_workers().await;
    let env_file = under(&root, "/etc/cresolver/env");
    assert_eq!(
        std::fs::metadata(&env_file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    std::fs::write(
        &env_file,
        format!(
            "CRESOLVER_PRIVATE_KEY={}\nCRESOLVER__CHAIN__RPC_URL={}\nCRESOLVER__CHAIN__CHAIN_ID=31337\nCRESOLVER__CHAIN__MARKET_ADDRESS={}\n",
            alloy::hex::encode(s.dev.signers[0].to_bytes()),
            s.dev.rpc_url(),
            s.dev.contracts.market
        ),
    )
    .unwrap();
    // the state dir, as StateDirectory= makes it for the dynamic user
    let state = under(&root, "/var/lib/cresolver");
    std::fs::create_dir_all(&state).unwrap();
    std::os::unix::fs::chown(&state, Some(65534), Some(65534)).unwrap();

    let (binary, flags, workdir) = service_command(&unit, &root);
    // systemd reads the env file as root and hands its variables to the service
    let vars: Vec<(String, String)> = std::fs::read_to_string(&env_file)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let check = |cwd: std::path::PathBuf| {
        let mut c = std::process::Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&binary)
            .args(["config", "check"])
            .args(&flags)
            .current_dir(cwd)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("CRESOLVER_LOG", "warn")
            .envs(vars.iter().map(|(k, v)| (k, v)));
        let out = c.output().unwrap();
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    };
    // as the unit runs it: in its working directory, as an unprivileged user
    let (ok, text) = check(under(&root, &workdir));
    assert!(ok, "{text}");
    assert!(text.contains("config ok"), "{text}");
    assert!(text.contains("workflow cresolver-resolution"), "{text}");
    // from `/`: node.toml's relative paths are read from its own directory, so the
    // working directory does not matter
    let (ok, text) = check("/".into());
    assert!(ok, "from /: {text}");
    assert!(text.contains("config ok"), "from /: {text}");
}

#[test]
fn systemd_analyze_verifies_the_unit() {
    let Ok(out) = std::process::Command::new("systemd-analyze")
        .arg("--version")
        .output()
    else {
        println!("skipped: systemd-analyze is not installed");
        return;
    };
    assert!(out.status.success());
    // verify checks that ExecStart's binary exists: point it at the one built here
    let dir = tmpdir("unit");
    let unit = std::fs::read_to_string(UNIT)
        .unwrap()
        .replace("/usr/local/bin/cresolver", env!("CARGO_BIN_EXE_cresolver"));
    let path = dir.join("cresolver.service");
    std::fs::write(&path, unit).unwrap();
    let out = std::process::Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&path)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "systemd-analyze verify: {text}");
    assert!(!text.contains("cresolver.service:"), "{text}");
}
