//! The documentation an operator reads, kept true by the suite: the references in
//! `docs/reference/` are generated from the code (metric families with their labels,
//! every error message; the configuration reference and schemas in
//! `tests/config_reference.rs`) and must be current; every relative link and anchor in
//! `README.md` and `docs/` resolves; every `cresolver …` command line in them parses with
//! the real CLI.
//!
//! `CRESOLVER_UPDATE_DOCS=1 cargo test --test suite -- docs:: config_reference::` rewrites the
//! generated references.

use crate::common::generated;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
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

/// Every `const NAME: T = value;` of the sources, with simple products evaluated
/// (`2 * 1024 * 1024` → 2097152) and string values unquoted.
fn constants(files: &[PathBuf]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for f in files {
        let src = std::fs::read_to_string(f).unwrap_or_default();
        for line in src.lines() {
            let t = line
                .trim()
                .trim_start_matches("pub ")
                .trim_start_matches("pub(crate) ");
            let Some(rest) = t.strip_prefix("const ") else {
                continue;
            };
            let (Some((name, _)), Some((_, value))) = (rest.split_once(':'), rest.split_once('='))
            else {
                continue;
            };
            let value = value.trim().trim_end_matches(';').trim();
            let shown = if let Some(s) = value.strip_prefix('"') {
                s.trim_end_matches('"').to_string()
            } else {
                let product: Option<u64> = value
                    .split('*')
                    .map(|p| p.trim().replace('_', "").parse::<u64>().ok())
                    .product();
                match product {
                    Some(n) => n.to_string(),
                    None => continue,
                }
            };
            out.insert(name.trim().to_string(), shown);
        }
    }
    out
}

/// The string literal an `#[error("…", args)]` attribute starts with, and its arguments.
fn error_literal(attr: &str) -> Option<(String, Vec<String>)> {
    let start = attr.find('"')? + 1;
    let bytes = attr.as_bytes();
    let mut end = start;
    while end < bytes.len() {
        match bytes[end] {
            b'\\' => end += 2,
            b'"' => break,
            _ => end += 1,
        }
    }
    let lit = attr.get(start..end)?.replace("\\\"", "\"");
    let rest = attr.get(end + 1..).unwrap_or("");
    let rest = rest.trim().trim_end_matches(")]").trim_start_matches(',');
    // top-level commas split the format arguments
    let (mut args, mut depth, mut cur) = (Vec::new(), 0i32, String::new());
    for c in rest.chars() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            ',' if depth == 0 => {
                args.push(std::mem::take(&mut cur).trim().to_string());
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.trim().is_empty() {
        args.push(cur.trim().to_string());
    }
    Some((lit, args))
}

/// What a tuple field of a given type holds, in words.
fn words_for_type(ty: &str) -> &'static str {
    let ty = ty.trim();
    if ty.contains("Address") {
        "address"
    } else if ty.contains("U256")
        || ty.contains("MarketId")
        || ty.starts_with('u')
        || ty.starts_with('i')
    {
        "number"
    } else if ty.contains("PathBuf") || ty.contains("Path") {
        "path"
    } else if ty.contains("io::Error") {
        "operating system error"
    } else if ty == "String" || ty.contains("str") {
        "detail"
    } else {
        "cause"
    }
}

/// An error message with its placeholders in words (`{market_id}` → ‹market id›) and
/// constants as their values (`{MAX_MESSAGE_BYTES}` → 2097152).
fn readable(
    msg: &str,
    args: &[String],
    tuple: &[String],
    consts: &BTreeMap<String, String>,
) -> String {
    let mut out = String::new();
    let mut positional = 0;
    let mut rest = msg;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        if let Some(lit) = after.strip_prefix('{') {
            out.push('{');
            rest = lit;
            continue;
        }
        let Some(close) = after.find('}') else {
            out.push_str(&rest[open..]);
            rest = "";
            break;
        };
        let inner = after[..close].split(':').next().unwrap_or("").trim();
        let word = if inner.is_empty() {
            let arg = args.get(positional).cloned().unwrap_or_default();
            positional += 1;
            let ident: String = arg
                .trim_start_matches('&')
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '.')
                .collect();
            let ident = ident
                .rsplit('.')
                .find(|p| !p.is_empty() && *p != "self")
                .unwrap_or("detail")
                .to_string();
            format!("‹{}›", ident.replace('_', " "))
        } else if let Some(v) = consts.get(inner) {
            v.clone()
        } else if let Ok(i) = inner.parse::<usize>() {
            format!(
                "‹{}›",
                tuple.get(i).map(|t| words_for_type(t)).unwrap_or("detail")
            )
        } else if inner.chars().all(|c| c.is_ascii_uppercase() || c == '_') {
            panic!("error message names constant {inner}, which the reference cannot resolve")
        } else {
            format!("‹{}›", inner.replace('_', " "))
        };
        out.push_str(&word);
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    generated::table_cell(&out)
}

/// The field types of the tuple variant declared after line `i` (`Rpc(RpcFailure)`).
fn tuple_types(lines: &[&str], mut i: usize) -> Vec<String> {
    while i < lines.len() {
        let t = lines[i].trim();
        if t.is_empty() || t.starts_with("#[") || t.starts_with("///") || t.starts_with("//") {
            i += 1;
            continue;
        }
        let Some(open) = t.find('(') else {
            return vec![];
        };
        let inner = t[open + 1..].trim_end_matches(',').trim_end_matches(')');
        return inner.split(',').map(|s| s.trim().to_string()).collect();
    }
    vec![]
}

fn errors_reference() -> String {
    let mut by_crate: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut files = Vec::new();
    rust_files(&root().join("crates"), &mut files);
    rust_files(&root().join("src"), &mut files);
    files.sort();
    let consts = constants(&files);
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
        let lines: Vec<&str> = src.lines().collect();
        let mut i = 0;
        while i < lines.len() {
            let t = lines[i].trim();
            if t.starts_with("#[error(") && !t.contains("transparent") {
                // the attribute may span lines: join until its closing `)]`
                let mut attr = t.to_string();
                while !attr.trim_end().ends_with(")]") && i + 1 < lines.len() {
                    i += 1;
                    attr.push(' ');
                    attr.push_str(lines[i].trim());
                }
                if let Some((msg, args)) = error_literal(&attr) {
                    let tuple = tuple_types(&lines, i + 1);
                    let shown = readable(&msg, &args, &tuple, &consts);
                    // a message that is only its cause adds nothing: the cause is listed
                    if !shown.starts_with('‹')
                        || !shown.ends_with('›')
                        || shown.matches('‹').count() > 1
                    {
                        let krate = rel.split('/').nth(1).unwrap_or("cresolver").to_string();
                        let krate = if rel.starts_with("src/") {
                            "the command line".to_string()
                        } else {
                            krate
                        };
                        by_crate
                            .entry(krate)
                            .or_default()
                            .insert(format!("| {shown} |"));
                    }
                }
            }
            i += 1;
        }
    }
    let mut out = String::from(
        "# Error reference\n\n\
         Generated from the code by `tests/docs.rs`: every error message the program can\n\
         print, by the part of the program that prints it. `‹…›` stands for the detail that\n\
         is filled in (a market id, an address, the cause reported by the RPC or the\n\
         operating system); limits are shown with their values. Most messages say what to\n\
         do; the [troubleshooting guide](../troubleshooting.md) covers the common ones, and\n\
         [start-up errors](startup-errors.md) shows what `cresolver node` and\n\
         `cresolver config check` refuse to start with, as printed.\n",
    );
    for (krate, rows) in by_crate {
        out.push_str(&format!(
            "\n## {krate}\n\n| message |\n|---|\n{}\n",
            rows.into_iter().collect::<Vec<_>>().join("\n")
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
    generated::check("docs/reference/metrics.md", &metrics_reference(), "docs");
    generated::check("docs/reference/errors.md", &errors_reference(), "docs");
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
