//! The configuration surface, kept true by the suite: the JSON Schemas of `node.toml` and
//! of a workflow file (`docs/reference/*.schema.json`, what `cresolver config schema`
//! prints) and the configuration reference (`docs/reference/config.md`) are generated from
//! the types and must be current; every field of every configuration type is in the
//! schema and in the reference; the example and workflow files name their schema on
//! their first line and validate against it.
//!
//! `CRESOLVER_UPDATE_DOCS=1 cargo test --test suite -- config_reference::` rewrites the generated files.

use crate::common::{self, generated};
use cresolver_pipeline::schema::{self, Key};

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap() + "\n"
}

/// A JSON value as it is written in TOML.
fn toml_text(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(toml_text).collect::<Vec<_>>().join(", ")
        ),
        other => other.to_string(),
    }
}

/// A short name of a key's type.
fn type_of(s: &Value, root: &Value) -> String {
    let s = schema::resolve(s, root);
    if let Some(p) = s.get("pattern").and_then(Value::as_str) {
        if p == cresolver_core::schema::ADDRESS_PATTERN {
            return "address".into();
        }
        if p == cresolver_core::schema::B256_PATTERN {
            return "bytes32".into();
        }
    }
    if s.get(schema::DURATION_KEYWORD).is_some() {
        return "duration".into();
    }
    if s.get(schema::PATH_KEYWORD).is_some() {
        return match s.get("type") {
            Some(t) if t == "array" || t.get(0) == Some(&Value::from("array")) => "list of paths",
            _ => "path",
        }
        .into();
    }
    let branches = s
        .get("oneOf")
        .or_else(|| s.get("anyOf"))
        .and_then(Value::as_array);
    if let Some(bs) = branches {
        let mut kinds: Vec<String> = bs
            .iter()
            .filter(|b| b.get("type") != Some(&Value::from("null")))
            .map(|b| {
                if b.get("const").is_some() {
                    "string".to_string()
                } else {
                    type_of(b, root)
                }
            })
            .collect();
        kinds.dedup();
        return kinds.join(" or ");
    }
    if s.get("enum").is_some() {
        return "string".into();
    }
    let ty = match s.get("type") {
        Some(Value::String(t)) => t.clone(),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")
            .unwrap_or("")
            .to_string(),
        _ => String::new(),
    };
    match ty.as_str() {
        "array" => {
            let item = s.get("items").map(|i| type_of(i, root)).unwrap_or_default();
            if item == "table" {
                "list of tables".into()
            } else {
                format!("list of {item}s")
            }
        }
        "object" => "table".into(),
        "string" if s.get("format").and_then(Value::as_str) == Some("uri") => "URL".into(),
        other => other.to_string(),
    }
}

/// The allowed values of a key, when they are a few words or a range.
fn allowed(s: &Value, root: &Value) -> String {
    let has_words = s.get("enum").is_some()
        || s.get("oneOf")
            .or_else(|| s.get("anyOf"))
            .and_then(Value::as_array)
            .is_some_and(|bs| bs.iter().any(|b| b.get("const").is_some()));
    if has_words {
        let text = schema::expected(s, root);
        return text.strip_prefix("one of: ").unwrap_or(&text).to_string();
    }
    let (lo, hi) = (s.get("minimum"), s.get("maximum"));
    match (lo, hi) {
        (Some(lo), Some(hi)) => format!("{lo} to {hi}"),
        (Some(lo), None) if lo != 0 => format!("at least {lo}"),
        _ => "–".into(),
    }
}

/// Keys whose value the node needs although the file may leave them out: where else
/// they can come from.
fn needed_at_start(key: &str) -> Option<&'static str> {
    match key {
        "chain.market_address" => Some(
            "**required** by the node, `resolve` and `dry-run`: in the file, `CRESOLVER__CHAIN__MARKET_ADDRESS` or `--market-address`",
        ),
        _ => None,
    }
}

fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// One row per key.
fn rows(keys: &[Key], root: &Value, env: bool) -> Vec<String> {
    let mut out = Vec::new();
    for k in keys {
        let s = &k.schema;
        let default = if let Some(need) = needed_at_start(&k.key) {
            need.to_string()
        } else if let (true, Some((list, _))) = (k.required, k.key.split_once("[].")) {
            format!("**required** in each `{list}` entry")
        } else if k.required && k.in_optional_table {
            let table = k.key.rsplit_once('.').map_or("", |(t, _)| t);
            format!("**required** in `[{table}]`")
        } else if k.required {
            "**required**".into()
        } else {
            match s.get("default") {
                None | Some(Value::Null) => "none".into(),
                Some(v) => format!("`{}`", toml_text(v).replace('|', "\\|")),
            }
        };
        let mut meaning = s
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if s.get(schema::PATH_KEYWORD).is_some() {
            meaning.push_str(
                " A relative path in the file is resolved from the file's directory; one from the environment or a flag from the working directory.",
            );
        }
        let mut row = format!(
            "| `{}` | {} | {} | {} |",
            k.key,
            type_of(s, root),
            default,
            cell(&allowed(s, root)),
        );
        if env {
            if k.key.contains("[]") || type_of(s, root) == "list of tables" {
                row.push_str(" – (in the file only) |");
            } else {
                row.push_str(&format!(
                    " `CRESOLVER__{}` |",
                    k.key.replace('.', "__").to_ascii_uppercase()
                ));
            }
        }
        row.push_str(&format!(" {} |", cell(&meaning)));
        out.push(row);
    }
    out
}

fn config_reference() -> String {
    let node = cresolver_pipeline::config::NodeConfig::schema();
    let wf = cresolver_pipeline::workflow::Workflow::schema();
    format!(
        "# Configuration reference\n\n\
         Generated from the configuration types by `tests/config_reference.rs`\n\
         (`CRESOLVER_UPDATE_DOCS=1 cargo test --test suite -- config_reference::`). The same types give\n\
         the JSON Schemas [node.schema.json](node.schema.json) and\n\
         [workflow.schema.json](workflow.schema.json) (`cresolver config schema [--workflow]`):\n\
         a first line `#:schema ./node.schema.json` (a path relative to the TOML file, or a\n\
         URL) makes taplo and Even Better TOML check a file as it is typed.\n\n\
         ## node.toml\n\n\
         Every key, its type, whether it is required or its default, its allowed values, its\n\
         environment variable and its meaning. A value is taken from the file, then from the\n\
         environment variable (which overrides the file), then from the flags `--rpc-url`,\n\
         `--market-address`, `--data-dir`, `--workflow` and `--account` (which override\n\
         both). An environment variable's text takes the key's type: `true` or `false` for a\n\
         boolean, digits for a whole number, a comma-separated list for a list; empty unsets\n\
         a key whose default is none. The `[don]` section is absent by default (the node\n\
         decides alone); when it is present, its keys marked required must be set.\n\
         `don.members` is a list of `{{ address, url }}` tables.\n\n\
         | key | type | required or default | allowed values | environment | meaning |\n\
         |---|---|---|---|---|---|\n{}\n\n\
         ## Workflow files\n\n\
         Every key of a workflow file (`workflows/cresolver-resolution.toml` spells out\n\
         every default). Workflow files are read as they are: no environment variable\n\
         overrides them.\n\n\
         | key | type | required or default | allowed values | meaning |\n\
         |---|---|---|---|---|\n{}\n",
        rows(&schema::keys(node), node, true).join("\n"),
        rows(&schema::keys(wf), wf, false).join("\n"),
    )
}

#[test]
fn the_schemas_and_the_reference_are_current() {
    generated::check(
        "docs/reference/node.schema.json",
        &pretty(cresolver_pipeline::config::NodeConfig::schema()),
        "config_reference",
    );
    generated::check(
        "docs/reference/workflow.schema.json",
        &pretty(cresolver_pipeline::workflow::Workflow::schema()),
        "config_reference",
    );
    generated::check(
        "docs/reference/config.md",
        &config_reference(),
        "config_reference",
    );
}

/// The `pub` fields of each `pub struct` deriving `Deserialize` in a source file.
fn struct_fields(src: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut derives_de = false;
    let mut current: Option<String> = None;
    for line in src.lines() {
        let t = line.trim();
        if t.starts_with("#[derive") {
            derives_de = t.contains("Deserialize");
        } else if t == "Deserialize," || t == "serde::Deserialize," {
            // a derive list rustfmt spread over lines
            derives_de = true;
        }
        if let Some(rest) = t.strip_prefix("pub struct ") {
            current = derives_de.then(|| {
                rest.split(|c: char| !c.is_alphanumeric() && c != '_')
                    .next()
                    .unwrap_or("")
                    .to_string()
            });
            if let Some(c) = &current {
                out.entry(c.clone()).or_default();
            }
            derives_de = false;
            continue;
        }
        if line.starts_with('}') {
            current = None;
        }
        if let (Some(c), Some(rest)) = (&current, t.strip_prefix("pub "))
            && let Some((name, _)) = rest.split_once(':')
            && !name.contains('(')
        {
            out.entry(c.clone())
                .or_default()
                .insert(name.trim().to_string());
        }
    }
    out
}

/// The properties of a type in a schema (its root, or one of its `$defs`).
fn properties(root: &Value, name: &str) -> Option<BTreeSet<String>> {
    let s = if root.get("title").and_then(Value::as_str) == Some(name) {
        root
    } else {
        root.get("$defs")?.get(name)?
    };
    // the older keys of durations (`poll_interval_ms`) are no fields: the loader folds
    // them into theirs
    Some(
        s.get("properties")?
            .as_object()?
            .iter()
            .filter(|(_, p)| p.get("deprecated") != Some(&Value::Bool(true)))
            .map(|(k, _)| k.clone())
            .collect(),
    )
}

#[test]
fn every_field_of_every_config_type_is_in_the_schema_and_the_reference() {
    let node_files = [
        "crates/pipeline/src/config.rs",
        "crates/pipeline/src/config/api.rs",
        "crates/pipeline/src/config/chain.rs",
        "crates/pipeline/src/config/discovery.rs",
        "crates/pipeline/src/config/node.rs",
        "crates/pipeline/src/config/protocols.rs",
        "crates/pipeline/src/config/signer.rs",
        "crates/pipeline/src/config/store.rs",
        "crates/pipeline/src/config/submit.rs",
    ]
    .map(|f| (f, cresolver_pipeline::config::NodeConfig::schema()));
    // every file of the config's sections is listed
    let listed: BTreeSet<&str> = node_files.iter().map(|(f, _)| *f).collect();
    for e in std::fs::read_dir(root().join("crates/pipeline/src/config")).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        let rel = format!("crates/pipeline/src/config/{name}");
        let src = read(&rel);
        if src.contains("Deserialize") && src.contains("pub struct") {
            assert!(listed.contains(rel.as_str()), "{rel} is not checked here");
        }
    }
    let files = node_files.into_iter().chain([
        (
            "crates/don/src/config.rs",
            cresolver_pipeline::config::NodeConfig::schema(),
        ),
        (
            "crates/pipeline/src/workflow.rs",
            cresolver_pipeline::workflow::Workflow::schema(),
        ),
    ]);
    for (file, root) in files {
        for (name, fields) in struct_fields(&read(file)) {
            let props = properties(root, &name)
                .unwrap_or_else(|| panic!("{name} ({file}) is not in the schema"));
            let fields: BTreeSet<String> =
                fields.into_iter().filter(|f| f != "provenance").collect();
            assert_eq!(
                fields, props,
                "{name} ({file}): fields vs schema properties (the older keys of durations aside)"
            );
        }
    }
    // the reference has a row for every key of the schemas
    let doc = read("docs/reference/config.md");
    let (node_doc, wf_doc) = doc.split_once("## Workflow files").unwrap();
    for (part, root) in [
        (node_doc, cresolver_pipeline::config::NodeConfig::schema()),
        (wf_doc, cresolver_pipeline::workflow::Workflow::schema()),
    ] {
        let rows: BTreeSet<String> = part
            .lines()
            .filter_map(|l| l.strip_prefix("| `"))
            .filter_map(|l| l.split('`').next())
            .map(String::from)
            .collect();
        let keys: BTreeSet<String> = schema::keys(root).into_iter().map(|k| k.key).collect();
        assert_eq!(rows, keys, "the reference's rows vs the schema's keys");
    }
    for key in [
        "chain.market_address",
        "chain.chain_id",
        "chain.confirmations",
        "signer.password_file",
        "store.ca_file",
        "protocols.agora.key_file",
        "don.don_id",
        "don.members[].url",
    ] {
        assert!(node_doc.contains(&format!("| `{key}` |")), "{key}");
    }
    for key in [
        "trigger.address",
        "evaluator.llm.model",
        "submit.report.workflow_name",
    ] {
        assert!(wf_doc.contains(&format!("| `{key}` |")), "{key}");
    }
}

/// The dotted keys of a JSON table's values (a list of tables: `key[].inner`).
fn leaf_keys(v: &Value, prefix: &str, out: &mut BTreeSet<String>) {
    let Value::Object(map) = v else { return };
    for (k, x) in map {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match x {
            Value::Object(_) => leaf_keys(x, &key, out),
            Value::Array(items) if items.first().is_some_and(Value::is_object) => {
                out.insert(key.clone());
                leaf_keys(&items[0], &format!("{key}[]"), out);
            }
            _ => {
                out.insert(key);
            }
        }
    }
}

/// A node config with every optional key set.
fn full_node_config() -> cresolver_pipeline::config::NodeConfig {
    use alloy::primitives::Address;
    let mut cfg = cresolver_pipeline::config::NodeConfig::default();
    let c = &mut cfg.chain;
    c.chain_id = Some(1);
    c.market_address = Some(Address::repeat_byte(1));
    c.multicall_address = Some(Address::repeat_byte(2));
    c.confirmations = Some(1);
    c.start_block = Some(1);
    c.finality_depth = Some(1);
    c.max_head_age = Some(std::time::Duration::from_secs(1));
    let s = &mut cfg.signer;
    s.key_file = Some("k".into());
    s.keystore = Some("ks".into());
    s.account = Some("a".into());
    s.password_file = Some("p".into());
    cfg.submit.forwarder = Some(Address::repeat_byte(3));
    cfg.submit.receiver = Some(Address::repeat_byte(4));
    cfg.store.ca_file = Some("ca".into());
    cfg.protocols.agora.key_file = Some("ak".into());
    cfg.don = Some(cresolver_don::DonConfig {
        don_id: 1,
        config_version: 1,
        f: 1,
        listen: "0.0.0.0:9500".into(),
        members: vec![cresolver_don::config::MemberConfig {
            address: Address::repeat_byte(5),
            url: "http://a:1".parse().unwrap(),
        }],
        attempt_timeout: std::time::Duration::from_millis(1),
        observation_grace: std::time::Duration::from_millis(1),
        transmit_delay: std::time::Duration::from_millis(1),
        max_attempts: 1,
    });
    cfg
}

#[test]
fn a_fully_populated_config_has_exactly_the_schema_keys_and_validates() {
    let node = cresolver_pipeline::config::NodeConfig::schema();
    let cfg = serde_json::to_value(full_node_config()).unwrap();
    let mut keys = BTreeSet::new();
    leaf_keys(&cfg, "", &mut keys);
    let schema_keys: BTreeSet<String> = schema::keys(node)
        .into_iter()
        .filter(|k| k.schema.get("deprecated") != Some(&Value::Bool(true)))
        .map(|k| k.key)
        .collect();
    assert_eq!(
        keys, schema_keys,
        "a full node config's keys vs the schema's (the older keys of durations aside)"
    );
    let errors = common::schema_errors(node, &cfg);
    assert!(errors.is_empty(), "the full node config: {errors:?}");

    let wf_schema = cresolver_pipeline::workflow::Workflow::schema();
    let mut wf = cresolver_pipeline::workflow::Workflow::default_named("w");
    wf.trigger.address = Some(alloy::primitives::Address::repeat_byte(1));
    wf.evaluator.llm = Some(Default::default());
    wf.submit.report.workflow_name = Some("n".into());
    let wf = serde_json::to_value(wf).unwrap();
    let mut keys = BTreeSet::new();
    leaf_keys(&wf, "", &mut keys);
    let schema_keys: BTreeSet<String> =
        schema::keys(wf_schema).into_iter().map(|k| k.key).collect();
    assert_eq!(keys, schema_keys, "a full workflow's keys vs the schema's");
    let errors = common::schema_errors(wf_schema, &wf);
    assert!(errors.is_empty(), "the full workflow: {errors:?}");
}

#[test]
fn the_example_files_name_their_schema_and_validate() {
    let mut checked = 0;
    for (dir, schema_file) in [
        ("examples", "node.schema.json"),
        ("workflows", "workflow.schema.json"),
    ] {
        let schema: Value =
            serde_json::from_str(&read(&format!("docs/reference/{schema_file}"))).unwrap();
        for e in std::fs::read_dir(root().join(dir)).unwrap() {
            let path = e.unwrap().path();
            if path.extension().is_none_or(|x| x != "toml") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let first = text.lines().next().unwrap_or("");
            let want = format!("#:schema ../docs/reference/{schema_file}");
            assert_eq!(first, want, "{}: the first line", path.display());
            assert!(
                root().join(dir).join(&want["#:schema ".len()..]).is_file(),
                "{want}"
            );
            let value = schema::toml_to_json(&text).unwrap();
            let errors = common::schema_errors(&schema, &value);
            assert!(errors.is_empty(), "{}: {errors:?}", path.display());
            // and the loaders take them
            if dir == "examples" {
                cresolver_pipeline::config::NodeConfig::load_from(
                    Some(&path),
                    Vec::new(),
                    &Default::default(),
                )
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            } else {
                cresolver_pipeline::workflow::Workflow::load(&path)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            }
            checked += 1;
        }
    }
    assert!(checked >= 3);
}

#[test]
fn config_schema_prints_the_published_schemas() {
    for (args, file) in [
        (&["config", "schema"][..], "docs/reference/node.schema.json"),
        (
            &["config", "schema", "--workflow"][..],
            "docs/reference/workflow.schema.json",
        ),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_cresolver"))
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "cresolver {args:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), read(file), "{args:?}");
    }
}
