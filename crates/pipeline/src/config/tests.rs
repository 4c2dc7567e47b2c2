//! The loader's layers, provenance and messages.

use super::*;
use std::time::Duration;

/// A config file with `text` in a fresh directory.
fn file(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("node.toml");
    std::fs::write(&f, text).unwrap();
    (dir, f)
}

fn env(vars: &[(&str, &str)]) -> Vec<(String, String)> {
    vars.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn load_err(text: &str, vars: &[(&str, &str)]) -> String {
    let (_d, f) = file(text);
    NodeConfig::load_from(Some(&f), env(vars), &Overrides::default())
        .unwrap_err()
        .to_string()
        .replace(&f.display().to_string(), "FILE")
}

#[test]
fn file_env_and_flags_layer() {
    let (_d, f) = file(
        "[chain]\nrpc_url = \"http://127.0.0.1:1\"\npoll_interval_ms = 500\n[node]\nmax_concurrent_rounds = 3\n",
    );
    let cfg = NodeConfig::load_from(Some(&f), env(&[]), &Overrides::default()).unwrap();
    assert_eq!(cfg.chain.poll_interval, Duration::from_millis(500));
    assert_eq!(cfg.node.max_concurrent_rounds, 3);
    let o = Overrides {
        rpc_url: Some("ws://127.0.0.1:2".into()),
        ..Default::default()
    };
    let vars = env(&[("CRESOLVER__CHAIN__POLL_INTERVAL_MS", "700")]);
    let cfg = NodeConfig::load_from(Some(&f), vars, &o).unwrap();
    assert_eq!(cfg.chain.rpc_url, "ws://127.0.0.1:2");
    assert_eq!(cfg.chain.poll_interval, Duration::from_millis(700));
    let e = load_err("[chain]\nrpc_urll = \"x\"\n", &[]);
    assert!(
        e.contains("`chain.rpc_urll` (in FILE) is not a key of [chain]: did you mean `rpc_url`?"),
        "{e}"
    );
    let e = load_err("[chain]\nrpc_url = \"ftp://x\"\n", &[]);
    assert!(e.contains("`chain.rpc_url` (in FILE)"), "{e}");
}

#[test]
fn errors_say_where_the_value_came_from() {
    let e = load_err("[chain]\nmarket_address = \"0x123\"\n", &[]);
    assert_eq!(
        e,
        "config: `chain.market_address` (in FILE) must be an address: 0x and 40 hex digits, not \"0x123\""
    );
    let e = load_err("", &[("CRESOLVER__CHAIN__MARKET_ADDRESS", "0x123")]);
    assert!(
        e.contains("`chain.market_address` (from CRESOLVER__CHAIN__MARKET_ADDRESS)")
            && e.contains("0x and 40 hex digits"),
        "{e}"
    );
    let e = load_err("", &[("CRESOLVER__CHAIN__FOO", "1")]);
    assert!(
        e.contains("environment variable CRESOLVER__CHAIN__FOO names no key")
            && e.contains("rpc_url"),
        "{e}"
    );
    let e = load_err("", &[("CRESOLVER__CHAINS__RPC_URL", "x")]);
    assert!(
        e.contains("CRESOLVER__CHAINS__RPC_URL") && e.contains("did you mean `chain`?"),
        "{e}"
    );
    let e = load_err("[don]\nf = 1\n", &[]);
    assert_eq!(
        e,
        "config: [don] (in FILE) lacks `don_id`, which is required"
    );
}

#[test]
fn types_are_strict_in_the_file_and_the_environment() {
    let e = load_err("[discovery]\nallow_private_endpoints = \"1\"\n", &[]);
    assert!(
        e.contains("must be a boolean: true or false, not \"1\""),
        "{e}"
    );
    let e = load_err("[chain]\npoll_interval_ms = 2.5\n", &[]);
    assert!(
        e.contains("`chain.poll_interval_ms` (in FILE) must be a whole number"),
        "{e}"
    );
    let e = load_err("[chain]\nchain_id = \"1\"\n", &[]);
    assert!(e.contains("must be a whole number"), "{e}");
    let e = load_err(
        "",
        &[("CRESOLVER__DISCOVERY__ALLOW_PRIVATE_ENDPOINTS", "1")],
    );
    assert!(
        e.contains("(from CRESOLVER__DISCOVERY__ALLOW_PRIVATE_ENDPOINTS) must be a boolean"),
        "{e}"
    );
    let e = load_err("", &[("CRESOLVER__CHAIN__CHAIN_ID", "2.5")]);
    assert!(e.contains("must be a whole number"), "{e}");
    let e = load_err("", &[("CRESOLVER__DON__MEMBERS", "x")]);
    assert!(e.contains("cannot come from the environment"), "{e}");
    let (_d, f) = file("");
    let ok = env(&[
        ("CRESOLVER__DISCOVERY__ALLOW_PRIVATE_ENDPOINTS", "true"),
        ("CRESOLVER__CHAIN__CHAIN_ID", "31337"),
        ("CRESOLVER__SUBMIT__MAX_FEE_PER_GAS_GWEI", "2.5"),
        ("CRESOLVER__CHAIN__RPC_URLS", "http://a:1,http://b:2"),
        ("CRESOLVER__STORE__CA_FILE", ""),
    ]);
    let cfg = NodeConfig::load_from(Some(&f), ok, &Overrides::default()).unwrap();
    assert!(cfg.discovery.allow_private_endpoints);
    assert_eq!(cfg.chain.chain_id, Some(31337));
    assert_eq!(cfg.submit.max_fee_per_gas_gwei, 2.5);
    assert_eq!(cfg.chain.rpc_urls.len(), 2);
    assert_eq!(cfg.store.ca_file, None);
}

#[test]
fn origin_of_names_the_layer() {
    let (_d, f) = file("[chain]\nchain_id = 1\n");
    let o = Overrides {
        market_address: Some(Address::repeat_byte(1)),
        ..Default::default()
    };
    let vars = env(&[("CRESOLVER__CHAIN__POLL_INTERVAL_MS", "100")]);
    let cfg = NodeConfig::load_from(Some(&f), vars, &o).unwrap();
    let shown = f.display();
    assert_eq!(
        cfg.origin_of("chain.chain_id"),
        format!("`chain.chain_id` (in {shown})")
    );
    assert_eq!(
        cfg.origin_of("chain.poll_interval_ms"),
        "`chain.poll_interval_ms` (from CRESOLVER__CHAIN__POLL_INTERVAL_MS)"
    );
    assert_eq!(
        cfg.origin_of("chain.market_address"),
        "`chain.market_address` (from --market-address)"
    );
    assert_eq!(
        cfg.origin_of("chain.rpc_timeout_ms"),
        "`chain.rpc_timeout_ms` (default)"
    );
}

#[test]
fn paths_in_the_file_are_relative_to_it() {
    let (d, f) = file(
        "[node]\ndata_dir = \"./data\"\nworkflows = [\"../wf.toml\", \"/abs/wf.toml\"]\n[signer]\nkey_file = \"k.hex\"\n[store]\nca_file = \"ca.pem\"\n[protocols.agora]\nkey_file = \"agora.key\"\n",
    );
    let vars = env(&[("CRESOLVER__SIGNER__PASSWORD_FILE", "pw.txt")]);
    let cfg = NodeConfig::load_from(Some(&f), vars, &Overrides::default()).unwrap();
    let dir = d.path();
    assert_eq!(cfg.node.data_dir, dir.join("data"));
    assert_eq!(cfg.node.workflows[0], dir.join("../wf.toml"));
    assert_eq!(cfg.node.workflows[1], PathBuf::from("/abs/wf.toml"));
    assert_eq!(cfg.signer.key_file, Some(dir.join("k.hex")));
    assert_eq!(cfg.store.ca_file, Some(dir.join("ca.pem")));
    assert_eq!(cfg.protocols.agora.key_file, Some(dir.join("agora.key")));
    // the environment and the flags are relative to the working directory
    assert_eq!(cfg.signer.password_file, Some(PathBuf::from("pw.txt")));
    let o = Overrides {
        data_dir: Some("d".into()),
        ..Default::default()
    };
    let cfg = NodeConfig::load_from(Some(&f), env(&[]), &o).unwrap();
    assert_eq!(cfg.node.data_dir, PathBuf::from("d"));
    // the defaults too
    let cfg = NodeConfig::load_from(None, env(&[]), &Overrides::default()).unwrap();
    assert_eq!(cfg.node.data_dir, PathBuf::from("./cresolver-data"));
}

#[test]
fn each_cause_is_printed_once() {
    use std::error::Error as _;
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.toml");
    let e = NodeConfig::load_from(Some(&missing), env(&[]), &Overrides::default()).unwrap_err();
    assert!(e.to_string().contains("not found"), "{e}");
    // a directory: read_to_string fails with an I/O error, shown once
    let e = ConfigError::Read {
        path: dir.path().into(),
        error: std::io::Error::from(std::io::ErrorKind::NotFound),
    };
    assert!(e.source().is_none(), "the cause is in the message already");
    let w = crate::workflow::Workflow::load(&missing).unwrap_err();
    assert!(w.source().is_none());
    assert_eq!(w.to_string().matches("os error").count(), 1, "{w}");
}

#[test]
fn described_as_an_operator_writes_them() {
    use crate::schema::{at, expected, from_text};
    use serde_json::Value;
    let root = NodeConfig::schema();
    let addr = at(root, &["chain", "market_address"]).unwrap();
    assert_eq!(expected(addr, root), "an address: 0x and 40 hex digits");
    let flag = at(root, &["discovery", "allow_private_endpoints"]).unwrap();
    assert_eq!(expected(flag, root), "a boolean: true or false");
    assert_eq!(from_text("true", flag, root), Ok(Value::Bool(true)));
    assert!(from_text("1", flag, root).is_err());
    let n = at(root, &["chain", "poll_interval_ms"]).unwrap();
    assert_eq!(from_text("250", n, root), Ok(Value::from(250u64)));
    assert!(from_text("2.5", n, root).is_err());
    assert!(from_text("-1", n, root).is_err());
    let id = at(root, &["chain", "chain_id"]).unwrap();
    assert_eq!(from_text("", id, root), Ok(Value::Null));
    let urls = at(root, &["chain", "rpc_urls"]).unwrap();
    assert_eq!(
        from_text("http://a, http://b", urls, root),
        Ok(serde_json::json!(["http://a", "http://b"]))
    );
}

#[test]
fn durations_are_text_or_the_older_whole_numbers() {
    let (_d, f) = file(
        "[chain]\npoll_interval = \"150ms\"\nrpc_timeout_ms = 2500\nmax_head_age_secs = 30\n[submit]\nreceipt_timeout = \"1m 30s\"\n[store]\nlease_secs = 20\n",
    );
    let cfg = NodeConfig::load_from(Some(&f), env(&[]), &Overrides::default()).unwrap();
    assert_eq!(cfg.chain.poll_interval, Duration::from_millis(150));
    assert_eq!(cfg.chain.rpc_timeout, Duration::from_millis(2500));
    assert_eq!(cfg.chain.max_head_age, Some(Duration::from_secs(30)));
    assert_eq!(cfg.submit.receipt_timeout, Duration::from_secs(90));
    assert_eq!(cfg.store.lease, Duration::from_secs(20));
    // the defaults are those of the older keys
    let d = NodeConfig::default();
    assert_eq!(d.chain.poll_interval, Duration::from_millis(2_000));
    assert_eq!(d.chain.rpc_timeout, Duration::from_millis(10_000));
    assert_eq!(d.chain.max_backoff, Duration::from_millis(5_000));
    assert_eq!(d.chain.ws_retry_interval, Duration::from_millis(3_000));
    assert_eq!(d.submit.receipt_timeout, Duration::from_millis(120_000));
    assert_eq!(d.discovery.fetch_timeout, Duration::from_millis(5_000));
    assert_eq!(d.store.lease, Duration::from_secs(15));
    assert_eq!(d.chain.max_head_age, None);
    // and from the environment, either form
    let vars = env(&[
        ("CRESOLVER__CHAIN__POLL_INTERVAL", "3s"),
        ("CRESOLVER__DISCOVERY__FETCH_TIMEOUT_MS", "700"),
        ("CRESOLVER__CHAIN__MAX_HEAD_AGE", ""),
    ]);
    let cfg = NodeConfig::load_from(None, vars, &Overrides::default()).unwrap();
    assert_eq!(cfg.chain.poll_interval, Duration::from_secs(3));
    assert_eq!(cfg.discovery.fetch_timeout, Duration::from_millis(700));
    assert_eq!(cfg.chain.max_head_age, None);
}

#[test]
fn a_duration_in_both_forms_is_an_error() {
    let e = load_err(
        "[chain]\npoll_interval = \"2s\"\npoll_interval_ms = 2000\n",
        &[],
    );
    assert_eq!(
        e,
        "config: `chain.poll_interval` (in FILE) and `chain.poll_interval_ms` (in FILE) are the same setting: keep one (`chain.poll_interval` takes a duration such as \"2s\" or \"150ms\"; `chain.poll_interval_ms` is its older form, a whole number)"
    );
    let e = load_err(
        "",
        &[
            ("CRESOLVER__STORE__LEASE", "20s"),
            ("CRESOLVER__STORE__LEASE_SECS", "20"),
        ],
    );
    assert!(
        e.contains("`store.lease` (from CRESOLVER__STORE__LEASE)")
            && e.contains("`store.lease_secs` (from CRESOLVER__STORE__LEASE_SECS)"),
        "{e}"
    );
    // a later layer's form replaces an earlier layer's other form
    let (_d, f) = file("[chain]\npoll_interval = \"2s\"\nrpc_timeout_ms = 100\n");
    let vars = env(&[
        ("CRESOLVER__CHAIN__POLL_INTERVAL_MS", "500"),
        ("CRESOLVER__CHAIN__RPC_TIMEOUT", "1s"),
    ]);
    let cfg = NodeConfig::load_from(Some(&f), vars, &Overrides::default()).unwrap();
    assert_eq!(cfg.chain.poll_interval, Duration::from_millis(500));
    assert_eq!(cfg.chain.rpc_timeout, Duration::from_secs(1));
    assert_eq!(
        cfg.origin_of("chain.poll_interval"),
        "`chain.poll_interval_ms` (from CRESOLVER__CHAIN__POLL_INTERVAL_MS)"
    );
}

#[test]
fn a_bad_duration_says_what_one_looks_like() {
    for text in ["\"2\"", "\"2 parsecs\"", "\"\"", "2000"] {
        let e = load_err(&format!("[chain]\npoll_interval = {text}\n"), &[]);
        assert!(
            e.contains("`chain.poll_interval` (in FILE) must be a duration: text such as \"2s\""),
            "{text}: {e}"
        );
    }
    let e = load_err("", &[("CRESOLVER__SUBMIT__RECEIPT_TIMEOUT", "soon")]);
    assert!(
        e.contains(
            "`submit.receipt_timeout` (from CRESOLVER__SUBMIT__RECEIPT_TIMEOUT) must be a duration"
        ),
        "{e}"
    );
    let e = load_err("[chain]\nrpc_timeout_ms = \"2s\"\n", &[]);
    assert!(
        e.contains("`chain.rpc_timeout_ms` (in FILE) must be a whole number"),
        "{e}"
    );
}

#[test]
fn the_checks_beside_the_fields_name_their_key() {
    let cases = [
        (
            "[chain]\npoll_interval = \"0s\"\n",
            "`chain.poll_interval` (in FILE) must be at least 1ms",
        ),
        (
            "[chain]\npoll_interval_ms = 0\n",
            "`chain.poll_interval_ms` (in FILE) must be at least 1ms",
        ),
        (
            "[chain]\nrpc_timeout = \"0ms\"\n",
            "`chain.rpc_timeout` (in FILE) must be at least 1ms",
        ),
        (
            "[chain]\nmax_block_range = 0\n",
            "`chain.max_block_range` (in FILE) must be a whole number of at least 1, not 0",
        ),
        (
            "[chain]\nrpc_url = \"ftp://x\"\n",
            "`chain.rpc_url` (in FILE) entry 1 must be http(s):// or ws(s)://",
        ),
        (
            "[chain]\nrpc_urls = [\"http://a\", \"nope\"]\n",
            "`chain.rpc_urls` (in FILE) entry 2 is not a URL",
        ),
        (
            "[node]\nmax_concurrent_rounds = 0\n",
            "`node.max_concurrent_rounds` (in FILE) must be a whole number of at least 1, not 0",
        ),
        (
            "[node]\nworkflows = []\n",
            "`node.workflows` (in FILE) must list at least one workflow file",
        ),
        (
            "[submit]\nmax_fee_per_gas_gwei = 0.0\n",
            "`submit.max_fee_per_gas_gwei` (in FILE) must be a positive number of gwei",
        ),
        (
            "[submit]\nfee_bump_percent = 5\n",
            "`submit.fee_bump_percent` (in FILE) must be at least 10 (nodes refuse smaller replacements)",
        ),
        (
            "[store]\nurl = \"mysql://x\"\n",
            "`store.url` (in FILE) must be a postgres:// URL, or empty for the embedded SQLite store",
        ),
        (
            "[store]\nlease = \"1500ms\"\n",
            "`store.lease` (in FILE) must be at least 2s",
        ),
        (
            "[store]\nlease_secs = 1\n",
            "`store.lease_secs` (in FILE) must be at least 2s",
        ),
        (
            "[discovery]\nipfs_gateway = \"not a url\"\n",
            "`discovery.ipfs_gateway` (in FILE) is not a URL",
        ),
    ];
    for (text, want) in cases {
        let e = load_err(text, &[]);
        assert!(e.starts_with(&format!("config: {want}")), "{text}: {e}");
    }
    // a bad rpc_url is not looked at when rpc_urls replaces it
    let (_d, f) = file("[chain]\nrpc_url = \"ftp://x\"\nrpc_urls = [\"http://a\"]\n");
    NodeConfig::load_from(Some(&f), env(&[]), &Overrides::default()).unwrap();
    // validate() alone names the key, without an origin
    let mut cfg = NodeConfig::default();
    cfg.submit.fee_bump_percent = 1;
    match cfg.validate() {
        Err(ConfigError::Invalid { key, .. }) => assert_eq!(key, "submit.fee_bump_percent"),
        other => panic!("{other:?}"),
    }
    assert!(NodeConfig::default().validate().is_ok());
}

#[test]
fn the_schema_describes_both_forms() {
    use crate::schema::{at, expected};
    let root = NodeConfig::schema();
    let new = at(root, &["chain", "poll_interval"]).unwrap();
    assert_eq!(new["type"], "string");
    assert_eq!(new["default"], "2s");
    assert!(expected(new, root).starts_with("a duration"));
    let old = at(root, &["chain", "poll_interval_ms"]).unwrap();
    assert_eq!(old["type"], "integer");
    assert_eq!(old["deprecated"], true);
    let opt = at(root, &["chain", "max_head_age_secs"]).unwrap();
    assert_eq!(opt["type"], serde_json::json!(["integer", "null"]));
    let chain = crate::schema::resolve(&root["properties"]["chain"], root);
    let exclusive = chain["not"]["anyOf"].as_array().unwrap();
    assert!(
        exclusive.contains(&serde_json::json!({"required": ["poll_interval", "poll_interval_ms"]}))
    );
}

#[test]
fn the_don_timers_and_the_agora_poll_read_either_form() {
    let don =
        "[don]\ndon_id = 1\nconfig_version = 1\nf = 1\nlisten = \"127.0.0.1:9500\"\nmembers = []\n";
    let load = |text: &str| {
        let (_d, f) = file(text);
        NodeConfig::load_from(Some(&f), env(&[]), &Overrides::default()).unwrap()
    };
    let old = load(&format!(
        "{don}attempt_timeout_ms = 800\nobservation_grace_ms = 250\ntransmit_delay_ms = 1500\n[protocols.agora]\npoll_timeout_secs = 20\n"
    ));
    let new = load(&format!(
        "{don}attempt_timeout = \"800ms\"\nobservation_grace = \"250ms\"\ntransmit_delay = \"1.5s\"\n[protocols.agora]\npoll_timeout = \"20s\"\n"
    ));
    for cfg in [&old, &new] {
        let d = cfg.don.as_ref().unwrap();
        assert_eq!(d.attempt_timeout, Duration::from_millis(800));
        assert_eq!(d.observation_grace, Duration::from_millis(250));
        assert_eq!(d.transmit_delay, Duration::from_millis(1_500));
        assert_eq!(cfg.protocols.agora.poll_timeout, Duration::from_secs(20));
    }
    // the defaults are those of the older keys
    let d = load(don).don.unwrap();
    assert_eq!(d.attempt_timeout, Duration::from_millis(4_000));
    assert_eq!(d.observation_grace, Duration::from_millis(300));
    assert_eq!(d.transmit_delay, Duration::from_millis(30_000));
    assert_eq!(
        NodeConfig::default().protocols.agora.poll_timeout,
        Duration::from_secs(30)
    );
    let e = load_err(
        &format!("{don}transmit_delay = \"30s\"\ntransmit_delay_ms = 30000\n"),
        &[],
    );
    assert!(
        e.contains("`don.transmit_delay` (in FILE) and `don.transmit_delay_ms` (in FILE) are the same setting"),
        "{e}"
    );
    let e = load_err(
        "",
        &[
            ("CRESOLVER__PROTOCOLS__AGORA__POLL_TIMEOUT", "5s"),
            ("CRESOLVER__PROTOCOLS__AGORA__POLL_TIMEOUT_SECS", "5"),
        ],
    );
    assert!(e.contains("are the same setting"), "{e}");
}
