//! The loader's layers, provenance and messages.

use super::*;

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
    assert_eq!(cfg.chain.poll_interval_ms, 500);
    assert_eq!(cfg.node.max_concurrent_rounds, 3);
    let o = Overrides {
        rpc_url: Some("ws://127.0.0.1:2".into()),
        ..Default::default()
    };
    let vars = env(&[("CRESOLVER__CHAIN__POLL_INTERVAL_MS", "700")]);
    let cfg = NodeConfig::load_from(Some(&f), vars, &o).unwrap();
    assert_eq!(cfg.chain.rpc_url, "ws://127.0.0.1:2");
    assert_eq!(cfg.chain.poll_interval_ms, 700);
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
