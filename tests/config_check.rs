//! `cresolver config check` is the node's start-up without starting: each bad config of
//! the table is run through both `config check` and `cresolver node` (the built binary,
//! against anvil), and both must refuse it quickly, with a non-zero exit and the same
//! error message; a good config passes the check.

use crate::common;

use common::node::tmpdir;
use cresolver_devnet::Devnet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What a case's config is made from.
struct Ctx {
    rpc: String,
    market: String,
    /// A contract that is not the market (the identity registry).
    identity: String,
    dir: PathBuf,
    workflow: PathBuf,
    key: String,
}

/// A node config of the good kind, with `chain_extra` added to `[chain]`, the `[chain]`
/// market line replaced by `market_line`, and `tail` appended.
fn config(c: &Ctx, market_line: &str, chain_extra: &str, tail: &str) -> String {
    format!(
        "[chain]\nrpc_url = \"{rpc}\"\npoll_interval_ms = 100\n{market_line}\n{chain_extra}\n\
         [node]\ndata_dir = \"{data}\"\nworkflows = [\"{wf}\"]\n\
         [api]\nlisten = \"\"\n{tail}\n",
        rpc = c.rpc,
        data = c.dir.join("data").display(),
        wf = c.workflow.display(),
    )
}

fn market_line(c: &Ctx) -> String {
    format!("market_address = \"{}\"", c.market)
}

/// One bad config: its text, its environment, and a part of the message both commands
/// must print.
struct Case {
    name: &'static str,
    toml: String,
    env: Vec<(&'static str, String)>,
    expect: &'static str,
}

fn cases(c: &Ctx) -> Vec<Case> {
    let mut v = chain_cases(c);
    v.extend(node_cases(c));
    v
}

/// The environment with the node's key.
fn key(c: &Ctx) -> Vec<(&'static str, String)> {
    vec![("CRESOLVER_PRIVATE_KEY", c.key.clone())]
}

/// Bad configs of the chain: the market, the chain id, the endpoints.
fn chain_cases(c: &Ctx) -> Vec<Case> {
    let key = || key(c);
    let good_market = market_line(c);
    vec![
        Case {
            name: "no market address",
            toml: config(c, "", "", ""),
            env: key(),
            expect: "`chain.market_address` is not set",
        },
        Case {
            name: "a chain id other than the RPC's",
            toml: config(c, &good_market, "chain_id = 11155111", ""),
            env: key(),
            expect: "the RPC endpoints serve chain 31337, but `chain.chain_id`",
        },
        Case {
            name: "a key file that does not exist",
            toml: config(
                c,
                &good_market,
                "",
                &format!(
                    "[signer]\nkey_file = \"{}\"",
                    c.dir.join("missing.key").display()
                ),
            ),
            env: vec![],
            expect: "cannot read key file",
        },
        Case {
            name: "a keystore that does not exist",
            toml: config(
                c,
                &good_market,
                "",
                &format!(
                    "[signer]\nkeystore = \"{}\"",
                    c.dir.join("missing.json").display()
                ),
            ),
            env: vec![("CRESOLVER_KEYSTORE_PASSWORD", "x".into())],
            expect: "missing.json not found",
        },
        Case {
            name: "no key at all",
            toml: config(c, &good_market, "", ""),
            env: vec![],
            expect: "no signing key",
        },
        Case {
            name: "a market address without a contract",
            toml: config(
                c,
                "market_address = \"0x000000000000000000000000000000000000dEaD\"",
                "",
                "",
            ),
            env: key(),
            expect: "no contract at market address 0x000000000000000000000000000000000000dEaD on chain 31337",
        },
        Case {
            name: "a market address that is another contract",
            toml: config(c, &format!("market_address = \"{}\"", c.identity), "", ""),
            env: key(),
            expect: "is not a CREsolver market: marketCount() failed",
        },
        Case {
            name: "an RPC endpoint that does not answer",
            toml: config(c, &good_market, "", "").replace(&c.rpc, &common::closed_port_url()),
            env: key(),
            expect: "no RPC endpoint",
        },
        Case {
            name: "a websocket endpoint that does not answer",
            toml: config(c, &good_market, "", "").replace(
                &c.rpc,
                &common::closed_port_url().replace("http://", "ws://"),
            ),
            env: key(),
            expect: "websocket",
        },
    ]
}

/// Bad configs of the node itself: its key, its store, its DON membership.
fn node_cases(c: &Ctx) -> Vec<Case> {
    let key = || key(c);
    let good_market = market_line(c);
    let blocker = c.dir.join("a-file");
    std::fs::write(&blocker, "not a directory").unwrap();
    let members: String = (1..=4)
        .map(|i| {
            format!(
                "[[don.members]]\naddress = \"0x{:040x}\"\nurl = \"http://127.0.0.1:{}\"\n",
                0x1000 + i,
                40_000 + i
            )
        })
        .collect();
    vec![
        Case {
            name: "a data dir that cannot be created",
            toml: config(c, &good_market, "", "").replace(
                &c.dir.join("data").display().to_string(),
                &blocker.join("data").display().to_string(),
            ),
            env: key(),
            expect: "cannot be created",
        },
        Case {
            name: "a PostgreSQL store that does not answer",
            toml: config(
                c,
                &good_market,
                "",
                &format!(
                    "[store]\nurl = \"postgres://resolver:secret@127.0.0.1:{}/cresolver\"",
                    common::node::free_port()
                ),
            ),
            env: key(),
            expect: "cannot use the database at",
        },
        Case {
            name: "a [don] section that does not list the node's key",
            toml: config(
                c,
                &good_market,
                "",
                &format!(
                    "[don]\ndon_id = 1\nconfig_version = 1\nf = 1\nlisten = \"127.0.0.1:0\"\n{members}"
                ),
            ),
            env: key(),
            expect: "[don]",
        },
    ]
}

/// Runs the binary with `args` and `env` (no key unless `env` has one); returns its exit
/// status, its stdout, its stderr and how long it ran (killed after 60 s).
async fn run(
    args: &[&str],
    env: &[(&'static str, String)],
) -> (std::process::ExitStatus, String, String, Duration) {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_cresolver"));
    cmd.args(args)
        .env("CRESOLVER_LOG", "warn")
        .env_remove("CRESOLVER_PRIVATE_KEY")
        .env_remove("CRESOLVER_KEYSTORE_PASSWORD")
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let started = Instant::now();
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .unwrap_or_else(|_| panic!("{args:?} still runs after 60 s"))
        .unwrap();
    (
        out.status,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        started.elapsed(),
    )
}

/// The `error: …` line of a command's stderr.
fn error_line(stderr: &str) -> Option<&str> {
    stderr.lines().rev().find(|l| l.starts_with("error: "))
}

async fn setup(dir: &Path) -> (Devnet, Ctx) {
    let dev = Devnet::start()
        .await
        .expect("devnet (run scripts/install-tools.sh first)");
    let ctx = Ctx {
        rpc: dev.rpc_url(),
        market: dev.contracts.market.to_string(),
        identity: dev.contracts.identity.to_string(),
        dir: dir.to_path_buf(),
        workflow: std::fs::canonicalize("workflows/cresolver-resolution.toml").unwrap(),
        key: alloy::hex::encode(dev.signers[0].to_bytes()),
    };
    (dev, ctx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_check_refuses_what_the_node_refuses_with_the_same_message() {
    let dir = tmpdir("config-check");
    let (_dev, ctx) = setup(&dir).await;
    let mut seen = Vec::new();
    for (i, case) in cases(&ctx).into_iter().enumerate() {
        let file = dir.join(format!("case-{i}.toml"));
        std::fs::write(&file, &case.toml).unwrap();
        let f = file.to_str().unwrap();
        let _ = std::fs::remove_dir_all(dir.join("data"));
        let (status, stdout, stderr, _) = run(&["config", "check", "--config", f], &case.env).await;
        assert!(
            !dir.join("data").exists(),
            "{}: config check created the data dir",
            case.name
        );
        assert!(
            !status.success(),
            "{}: config check passed:\n{stdout}",
            case.name
        );
        assert!(!stdout.contains("config ok"), "{}: {stdout}", case.name);
        let checked = error_line(&stderr)
            .unwrap_or_else(|| panic!("{}: no error line:\n{stderr}", case.name))
            .to_string();
        assert!(
            checked.contains(case.expect),
            "{}: expected {:?} in {checked}",
            case.name,
            case.expect
        );
        println!("{}: {checked}", case.name);
        let (status, _, stderr, took) = run(&["node", "--config", f], &case.env).await;
        assert!(
            !status.success(),
            "{}: the node exited 0:\n{stderr}",
            case.name
        );
        assert!(
            took < Duration::from_secs(30),
            "{}: the node took {took:?} to refuse",
            case.name
        );
        assert_eq!(
            error_line(&stderr),
            Some(checked.as_str()),
            "{}: the node and the check disagree:\n{stderr}",
            case.name
        );
        seen.push((case.name, shown(&ctx, &checked)));
    }
    check_reference(&seen);
}

/// A message as an operator would see it on an installed node: the test's directories as
/// `/etc/cresolver`, anvil's port as 8545, a closed port as 9, PostgreSQL's as 5432.
fn shown(c: &Ctx, line: &str) -> String {
    let repo = env!("CARGO_MANIFEST_DIR");
    let mut s = line
        .trim_start_matches("error: ")
        .replace(&c.dir.display().to_string(), "/etc/cresolver")
        .replace(repo, "/etc/cresolver")
        .replace(&c.rpc, "http://127.0.0.1:8545");
    let mut out = String::new();
    while let Some(i) = s.find("127.0.0.1:") {
        let (head, tail) = s.split_at(i + "127.0.0.1:".len());
        out.push_str(head);
        let digits = tail.chars().take_while(char::is_ascii_digit).count();
        let port = tail[..digits].to_string();
        out.push_str(if port == "8545" {
            "8545"
        } else if head.contains("postgres") {
            "5432"
        } else {
            "9"
        });
        s = tail[digits..].to_string();
    }
    out.push_str(&s);
    common::generated::table_cell(&out)
}

/// `docs/reference/startup-errors.md`: what the table's cases really print (rewritten by
/// `CRESOLVER_UPDATE_DOCS=1`; otherwise it must be current).
fn check_reference(seen: &[(&str, String)]) {
    let rows: Vec<String> = seen
        .iter()
        .map(|(name, msg)| format!("| {name} | {msg} |"))
        .collect();
    let text = format!(
        "# Start-up errors\n\n\
         What `cresolver node` refuses to start with, and `cresolver config check` refuses\n\
         with the same message and a non-zero exit, as printed (after `error: `). Generated\n\
         by `tests/config_check.rs` from real runs against a local chain, with its paths shown\n\
         as `/etc/cresolver` and its ports as the usual ones. Every other message is in the\n\
         [error reference](errors.md).\n\n\
         | what is wrong | message |\n|---|---|\n{}\n",
        rows.join("\n")
    );
    common::generated::check("docs/reference/startup-errors.md", &text, "config_check");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_good_config_checks_ok_and_creates_nothing() {
    let dir = tmpdir("config-check-ok");
    let (dev, ctx) = setup(&dir).await;
    let file = dir.join("node.toml");
    std::fs::write(
        &file,
        config(&ctx, &market_line(&ctx), "chain_id = 31337", ""),
    )
    .unwrap();
    let env = [("CRESOLVER_PRIVATE_KEY", ctx.key.clone())];
    let (status, stdout, stderr, _) = run(
        &["config", "check", "--config", file.to_str().unwrap()],
        &env,
    )
    .await;
    assert!(status.success(), "{stdout}\n{stderr}");
    for line in [
        format!("signer: {}", dev.signers[0].address()),
        "store: SQLite store in".to_string(),
        "rpc http://".to_string(),
        ": chain 31337, head block".to_string(),
        "chain id: 31337".to_string(),
        "workflow cresolver-resolution:".to_string(),
        format!("market {}: a CREsolver market with 0 markets", ctx.market),
        "config ok".to_string(),
    ] {
        assert!(stdout.contains(&line), "{line:?} missing:\n{stdout}");
    }
    assert!(
        !dir.join("data").exists(),
        "config check created the data dir"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_the_node_does_not_wait_for_are_warnings() {
    let dir = tmpdir("config-check-warn");
    let (_dev, mut ctx) = setup(&dir).await;
    // a workflow whose LLM does not answer
    let wf = dir.join("llm.toml");
    let text = std::fs::read_to_string(&ctx.workflow)
        .unwrap()
        .replace("kind = \"rubric\"", "kind = \"llm\"")
        .replace(
            "# [evaluator.llm]",
            &format!(
                "[evaluator.llm]\nbase_url = \"{}\"",
                common::closed_port_url()
            ),
        );
    std::fs::write(&wf, text).unwrap();
    ctx.workflow = wf;
    // a second RPC endpoint that does not answer
    let down = common::closed_port_url();
    let toml = config(&ctx, &market_line(&ctx), "", "").replace(
        &format!("rpc_url = \"{}\"", ctx.rpc),
        &format!("rpc_urls = [\"{}\", \"{down}\"]", ctx.rpc),
    );
    let file = dir.join("node.toml");
    std::fs::write(&file, toml).unwrap();
    let env = [
        ("CRESOLVER_PRIVATE_KEY", ctx.key.clone()),
        ("OPENAI_API_KEY", "sk-test".to_string()),
    ];
    let (status, stdout, stderr, _) = run(
        &["config", "check", "--config", file.to_str().unwrap()],
        &env,
    )
    .await;
    assert!(status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("warning: rpc http://127.0.0.1:")
            && stdout.contains("the node starts without it"),
        "{stdout}"
    );
    assert!(
        stdout.contains("warning: llm http://127.0.0.1:") && stdout.contains("does not answer"),
        "{stdout}"
    );
    assert!(stdout.contains("config ok (2 warning(s)"), "{stdout}");
}
