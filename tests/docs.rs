//! The documentation an operator reads, kept true by the suite: the references in
//! `docs/reference/` are generated from the code (configuration keys with their defaults
//! and environment variables, metric families with their labels, every error message) and
//! must be current; every relative link and anchor in `README.md` and `docs/` resolves;
//! every `cresolver …` command line in them parses with the real CLI.
//!
//! `CRESOLVER_UPDATE_DOCS=1 cargo test --test docs` rewrites the generated references.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Compares a generated reference with its file (or writes it, when asked to).
fn check_generated(rel: &str, generated: &str) {
    let path = root().join(rel);
    if std::env::var_os("CRESOLVER_UPDATE_DOCS").is_some() {
        std::fs::write(&path, generated).unwrap();
        return;
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == generated,
        "{rel} is not current: run `CRESOLVER_UPDATE_DOCS=1 cargo test --test docs` and commit it"
    );
}

/// `///` doc comments of each field, per struct, in a source file.
fn field_docs(src: &str) -> BTreeMap<String, BTreeMap<String, (String, String)>> {
    let mut out: BTreeMap<String, BTreeMap<String, (String, String)>> = BTreeMap::new();
    let mut current: Option<String> = None;
    let mut doc: Vec<String> = Vec::new();
    for line in src.lines() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("pub struct ") {
            current = rest
                .split(|c: char| !c.is_alphanumeric() && c != '_')
                .next()
                .map(String::from);
            doc.clear();
            continue;
        }
        if t == "}" && line.starts_with('}') {
            current = None;
        }
        if let Some(d) = t.strip_prefix("///") {
            doc.push(d.trim().to_string());
            continue;
        }
        if t.starts_with("#[") {
            continue;
        }
        if let (Some(s), Some(rest)) = (&current, t.strip_prefix("pub "))
            && let Some((name, ty)) = rest.split_once(':')
            && !name.contains('(')
        {
            let ty = ty.trim().trim_end_matches(',').to_string();
            out.entry(s.clone())
                .or_default()
                .insert(name.trim().to_string(), (doc.join(" "), ty));
        }
        doc.clear();
    }
    out
}

/// The innermost type name of `Option<Vec<x::Y>>` etc.
fn type_name(ty: &str) -> String {
    let mut t = ty.trim();
    for w in ["Option<", "Vec<", "Box<"] {
        if let Some(inner) = t.strip_prefix(w) {
            t = inner.strip_suffix('>').unwrap_or(inner);
        }
    }
    t.rsplit("::").next().unwrap_or(t).to_string()
}

fn kind_of(v: &toml::Value) -> &'static str {
    match v {
        toml::Value::String(_) => "string",
        toml::Value::Integer(_) => "integer",
        toml::Value::Float(_) => "float",
        toml::Value::Boolean(_) => "boolean",
        toml::Value::Datetime(_) => "datetime",
        toml::Value::Array(_) => "array",
        toml::Value::Table(_) => "table",
    }
}

fn shown(v: &toml::Value) -> String {
    let s = match v {
        toml::Value::String(s) if s.is_empty() => "\"\"".to_string(),
        other => other.to_string(),
    };
    s.replace('|', "\\|")
}

/// One row per key of `value`, under `prefix`, described from the structs' docs.
fn rows(
    value: &toml::Value,
    prefix: &str,
    struct_name: &str,
    docs: &BTreeMap<String, BTreeMap<String, (String, String)>>,
    env: bool,
    out: &mut Vec<String>,
) {
    let toml::Value::Table(t) = value else { return };
    for (k, v) in t {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        let (doc, ty) = docs
            .get(struct_name)
            .and_then(|f| f.get(k))
            .cloned()
            .unwrap_or_default();
        if let toml::Value::Table(_) = v {
            rows(v, &key, &type_name(&ty), docs, env, out);
            continue;
        }
        let var = if env {
            format!(
                "`CRESOLVER__{}`",
                key.replace('.', "__").to_ascii_uppercase()
            )
        } else {
            "–".into()
        };
        let doc = if doc.is_empty() {
            "(see the section's description)".to_string()
        } else {
            doc.replace('|', "\\|")
        };
        out.push(format!(
            "| `{key}` | {} | `{}` | {var} | {doc} |",
            kind_of(v),
            shown(v)
        ));
    }
}

fn config_reference() -> String {
    use cresolver_pipeline::config::NodeConfig;
    let mut docs = field_docs(&read("crates/pipeline/src/config.rs"));
    docs.extend(field_docs(&read("crates/pipeline/src/config/protocols.rs")));
    docs.extend(field_docs(&read("crates/don/src/config.rs")));
    let cfg = NodeConfig {
        don: Some(cresolver_don::DonConfig {
            don_id: 1,
            config_version: 1,
            f: 1,
            listen: "0.0.0.0:9500".into(),
            members: vec![],
            attempt_timeout_ms: 4_000,
            observation_grace_ms: 300,
            transmit_delay_ms: 30_000,
            max_attempts: 12,
        }),
        ..NodeConfig::default()
    };
    let node: toml::Value = toml::Value::try_from(&cfg).expect("the config serializes");
    let mut node_rows = Vec::new();
    rows(&node, "", "NodeConfig", &docs, true, &mut node_rows);

    let wf_docs = field_docs(&read("crates/pipeline/src/workflow.rs"));
    let wf = cresolver_pipeline::workflow::Workflow::default_named("cresolver-resolution");
    let wf: toml::Value = toml::Value::try_from(&wf).expect("the workflow serializes");
    let mut wf_rows = Vec::new();
    rows(&wf, "", "Workflow", &wf_docs, false, &mut wf_rows);

    format!(
        "# Configuration reference\n\n\
         Generated from the code by `tests/docs.rs` (`CRESOLVER_UPDATE_DOCS=1 cargo test --test docs`).\n\n\
         ## node.toml\n\n\
         Every key, its type, its default and its environment variable (which overrides the\n\
         file; `--rpc-url`, `--market-address`, `--data-dir` and `--workflow` override both).\n\
         The `[don]` section is absent by default: the values shown are an example with the\n\
         timers' defaults. `members` is a list of `{{ address, url }}` tables.\n\n\
         | key | type | default | environment | meaning |\n|---|---|---|---|---|\n{}\n\n\
         ## Workflow files\n\n\
         Every key of a workflow file with its default (`workflows/cresolver-resolution.toml`\n\
         documents each in place).\n\n\
         | key | type | default | environment | meaning |\n|---|---|---|---|---|\n{}\n",
        node_rows.join("\n"),
        wf_rows.join("\n")
    )
}

fn metrics_reference() -> String {
    let src = read("crates/metrics/src/lib.rs");
    // label structs → their fields (the label names)
    let mut label_fields: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in src.lines() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("struct ") {
            current = rest.strip_suffix(" {").map(String::from);
            continue;
        }
        if t == "}" {
            current = None;
        }
        if let Some(c) = &current
            && let Some((name, _)) = t.split_once(':')
        {
            label_fields
                .entry(c.clone())
                .or_default()
                .push(name.trim().to_string());
        }
    }
    let mut rows = Vec::new();
    let mut offset = 0;
    for call in src.split("registry.register").skip(1) {
        // where this call starts in the source (its series is declared before it)
        offset = src[offset..]
            .find("registry.register")
            .map_or(offset, |i| offset + i + "registry.register".len());
        let call = call.split(");").next().unwrap_or("");
        let literals: Vec<&str> = call.split('"').skip(1).step_by(2).collect();
        let (Some(name), Some(help)) = (literals.first(), literals.get(1)) else {
            continue;
        };
        let var = call
            .split(".clone()")
            .next()
            .and_then(|x| {
                x.rsplit(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .next()
            })
            .unwrap_or("");
        // the series' declaration: `let var = Family::<Labels, Counter>::default();` or
        // `let var: Family<Labels, Histogram, …> = …;`
        let ty = src[..offset]
            .rfind(&format!("let {var}"))
            .map(|i| {
                let decl = &src[i..];
                decl[..decl.find(';').unwrap_or(decl.len())]
                    .replace("Family::<", "Family<")
                    .split_once("Family<")
                    .map(|(_, t)| format!("Family<{t}"))
                    .unwrap_or_else(|| decl[..decl.find(';').unwrap_or(0)].to_string())
            })
            .unwrap_or_default();
        assert!(
            ty.starts_with("Family<") || ty.contains("Gauge") || ty.contains("Counter"),
            "the metrics reference cannot find the declaration of `{var}` (family {name}): {ty:?}"
        );
        let kind = if ty.contains("Histogram") {
            "histogram"
        } else if ty.contains("Counter") {
            "counter"
        } else {
            "gauge"
        };
        let unit = if call.contains("Unit::Seconds") {
            "_seconds"
        } else {
            ""
        };
        let exposed = match kind {
            "counter" => format!("{name}{unit}_total"),
            _ => format!("{name}{unit}"),
        };
        let labels = ty
            .strip_prefix("Family<")
            .and_then(|inner| inner.split(',').next())
            .and_then(|l| label_fields.get(l.trim()))
            .map(|l| {
                l.iter()
                    .map(|x| format!("`{x}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_else(|| "–".into());
        rows.push(format!(
            "| `{exposed}` | {kind} | {labels} | {} |",
            help.replace('|', "\\|")
        ));
    }
    format!(
        "# Metrics reference\n\n\
         Generated from the code by `tests/docs.rs`. Every family the node exports on\n\
         `GET /metrics` (OpenMetrics), with its labels; histograms also export `_bucket`,\n\
         `_sum` and `_count`. A family appears once it has a series.\n\n\
         | family | type | labels | meaning |\n|---|---|---|---|\n{}\n",
        rows.join("\n")
    )
}

fn errors_reference() -> String {
    let mut by_crate: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut files = Vec::new();
    rust_files(&root().join("crates"), &mut files);
    rust_files(&root().join("src"), &mut files);
    files.sort();
    for f in files {
        let rel = f
            .strip_prefix(root())
            .unwrap()
            .to_string_lossy()
            .to_string();
        if rel.contains("/tests/") || rel.contains("devnet") {
            continue;
        }
        let src = std::fs::read_to_string(&f).unwrap_or_default();
        let mut enum_name = String::new();
        let lines: Vec<&str> = src.lines().collect();
        let mut i = 0;
        while i < lines.len() {
            let t = lines[i].trim();
            if let Some(rest) = t
                .strip_prefix("pub enum ")
                .or_else(|| t.strip_prefix("enum "))
            {
                enum_name = rest
                    .split(|c: char| !c.is_alphanumeric() && c != '_')
                    .next()
                    .unwrap_or("")
                    .to_string();
            }
            if t.starts_with("#[error(") && !t.contains("transparent") {
                // the attribute may span lines: join until its closing `)]`
                let mut attr = t.to_string();
                while !attr.trim_end().ends_with(")]") && i + 1 < lines.len() {
                    i += 1;
                    attr.push(' ');
                    attr.push_str(lines[i].trim());
                }
                if let (Some(a), Some(b)) = (attr.find('"'), attr.rfind('"'))
                    && b > a
                {
                    let msg = attr[a + 1..b].replace("\\\"", "\"").replace('|', "\\|");
                    let krate = rel.split('/').nth(1).unwrap_or("cresolver").to_string();
                    let krate = if rel.starts_with("src/") {
                        "cresolver (CLI)".to_string()
                    } else {
                        krate
                    };
                    by_crate
                        .entry(krate)
                        .or_default()
                        .push(format!("| `{enum_name}` | {msg} |"));
                }
            }
            i += 1;
        }
    }
    let mut out = String::from(
        "# Error reference\n\n\
         Generated from the code by `tests/docs.rs`: every error message the program can\n\
         print, by crate and type (`{…}` is filled in with the details). Most say what to do;\n\
         the [troubleshooting guide](../troubleshooting.md) covers the common ones.\n",
    );
    for (krate, rows) in by_crate {
        out.push_str(&format!(
            "\n## {krate}\n\n| type | message |\n|---|---|\n{}\n",
            rows.join("\n")
        ));
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n != "target") {
                rust_files(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn the_generated_references_are_current() {
    check_generated("docs/reference/config.md", &config_reference());
    check_generated("docs/reference/metrics.md", &metrics_reference());
    check_generated("docs/reference/errors.md", &errors_reference());
}

#[test]
fn the_metrics_reference_lists_every_family() {
    let doc = read("docs/reference/metrics.md");
    let text = cresolver_metrics::Metrics::new().encode();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let name = rest.split(' ').next().unwrap_or("");
            assert!(
                doc.contains(&format!("`{name}")),
                "{name} is not in the metrics reference"
            );
        }
    }
}

/// The markdown files users read.
fn doc_files() -> Vec<PathBuf> {
    let mut v = vec![root().join("README.md"), root().join("CHANGELOG.md")];
    fn walk(d: &Path, v: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, v);
            } else if p.extension().is_some_and(|x| x == "md") {
                v.push(p);
            }
        }
    }
    walk(&root().join("docs"), &mut v);
    v.sort();
    v
}

/// GitHub's anchor of a heading.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '-' || c == '_' {
                Some(c)
            } else if c == ' ' {
                Some('-')
            } else {
                None
            }
        })
        .collect()
}

fn anchors_of(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut in_code = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if !in_code && line.starts_with('#') {
            out.insert(anchor(line.trim_start_matches('#')));
        }
    }
    out
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let mut broken = Vec::new();
    for f in doc_files() {
        let text = std::fs::read_to_string(&f).unwrap();
        let dir = f.parent().unwrap();
        let mut rest = text.as_str();
        while let Some(i) = rest.find("](") {
            rest = &rest[i + 2..];
            let Some(end) = rest.find(')') else { break };
            let target = &rest[..end];
            if target.starts_with("http://")
                || target.starts_with("https://")
                || target.starts_with("mailto:")
            {
                continue;
            }
            let (path, frag) = target.split_once('#').unwrap_or((target, ""));
            let file = if path.is_empty() {
                f.clone()
            } else {
                dir.join(path)
            };
            if !file.exists() {
                broken.push(format!("{}: {target} (no such file)", f.display()));
                continue;
            }
            if !frag.is_empty() && file.extension().is_some_and(|x| x == "md") {
                let t = std::fs::read_to_string(&file).unwrap_or_default();
                if !anchors_of(&t).contains(frag) {
                    broken.push(format!("{}: {target} (no such heading)", f.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_book_lists_every_chapter() {
    let summary = read("docs/SUMMARY.md");
    for f in doc_files() {
        let rel = f
            .strip_prefix(root().join("docs"))
            .map(|p| p.to_string_lossy().to_string());
        if let Ok(rel) = rel
            && rel != "SUMMARY.md"
        {
            assert!(
                summary.contains(&format!("({rel})")),
                "{rel} is not in docs/SUMMARY.md"
            );
        }
    }
}

#[test]
fn what_users_read_holds_no_development_history() {
    let words = [
        "issue ",
        "issue #",
        "this session",
        "sixth part",
        "fourth part",
        "part of issue",
        "found by a review",
    ];
    for f in doc_files() {
        if f.ends_with("CHANGELOG.md") {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap().to_lowercase();
        for w in words {
            assert!(!text.contains(w), "{} mentions {w:?}", f.display());
        }
    }
}

#[test]
fn every_command_line_in_the_docs_parses() {
    // the subcommand path of each `cresolver …` line in a code block
    let mut paths: BTreeSet<Vec<String>> = BTreeSet::new();
    for f in doc_files() {
        let text = std::fs::read_to_string(&f).unwrap();
        let mut in_code = false;
        for line in text.lines() {
            if line.trim_start().starts_with("```") {
                in_code = !in_code;
                continue;
            }
            if !in_code {
                continue;
            }
            for (i, _) in line.match_indices("cresolver ") {
                if i > 0
                    && !line[..i].ends_with(' ')
                    && !line[..i].ends_with('&')
                    && !line[..i].ends_with('$')
                {
                    continue;
                }
                // `cresolver` followed by one space and a word (a tree or a table of
                // names aligns with several spaces)
                if line[i + "cresolver ".len()..].starts_with(' ') {
                    continue;
                }
                let words: Vec<String> = line[i + "cresolver ".len()..]
                    .split_whitespace()
                    .take_while(|w| {
                        w.chars().all(|c| c.is_ascii_lowercase() || c == '-') && !w.starts_with('-')
                    })
                    .map(String::from)
                    .collect();
                if !words.is_empty() {
                    paths.insert(words);
                }
            }
        }
    }
    assert!(!paths.is_empty());
    let mut failed = Vec::new();
    for words in &paths {
        // the longest prefix that is a command (the rest are arguments)
        let mut ok = false;
        for n in (1..=words.len()).rev() {
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_cresolver"))
                .args(&words[..n])
                .arg("--help")
                .output()
                .unwrap();
            if out.status.success() {
                ok = true;
                break;
            }
        }
        if !ok {
            failed.push(words.join(" "));
        }
    }
    assert!(
        failed.is_empty(),
        "commands in the docs that the CLI does not know: {failed:?}"
    );
}

#[test]
fn the_http_reference_lists_every_route() {
    let doc = read("docs/reference/http-api.md");
    let mut routes = 0;
    for file in [
        "crates/node/src/api.rs",
        "crates/node/src/api/description.rs",
        "crates/node/src/status.rs",
        "crates/don/src/server.rs",
    ] {
        let src = read(file);
        // every route is registered through its `#[utoipa::path(method, path = "…")]`
        for call in src.split("#[utoipa::path(").skip(1) {
            let method = call.split(',').next().unwrap_or("").trim().to_uppercase();
            let path = call
                .split("path = \"")
                .nth(1)
                .and_then(|p| p.split('"').next())
                .unwrap_or("");
            routes += 1;
            assert!(
                doc.contains(&format!("`{method} {path}`")),
                "{method} {path} ({file}) is not in docs/reference/http-api.md"
            );
        }
    }
    assert!(routes >= 15, "{routes} routes found");
}
