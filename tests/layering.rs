//! The workspace's layering, kept by a test: every crate depends only on the crates
//! below it in the pipeline (read from `cargo metadata`), the pure core and the store
//! keep away from what they must not know, no crate's modules import each other in a
//! cycle, and no source file passes 800 lines.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Each workspace crate and the workspace crates it may depend on (normal, build and
/// dev dependencies alike). Everything points down the pipeline.
const ALLOWED: &[(&str, &[&str])] = &[
    ("cresolver-core", &[]),
    ("cresolver-metrics", &[]),
    ("cresolver-workers", &["cresolver-core"]),
    (
        "cresolver-evaluate",
        &["cresolver-core", "cresolver-workers"],
    ),
    (
        "cresolver-chain",
        &["cresolver-core", "cresolver-metrics", "cresolver-workers"],
    ),
    ("cresolver-store", &["cresolver-core"]),
    ("cresolver-don", &["cresolver-core", "cresolver-metrics"]),
    (
        "cresolver-submit",
        &[
            "cresolver-core",
            "cresolver-metrics",
            "cresolver-chain",
            "cresolver-store",
        ],
    ),
    (
        "cresolver-pipeline",
        &[
            "cresolver-core",
            "cresolver-metrics",
            "cresolver-workers",
            "cresolver-evaluate",
            "cresolver-chain",
            "cresolver-store",
            "cresolver-submit",
            "cresolver-don",
        ],
    ),
    (
        "cresolver-node",
        &[
            "cresolver-core",
            "cresolver-metrics",
            "cresolver-workers",
            "cresolver-evaluate",
            "cresolver-chain",
            "cresolver-store",
            "cresolver-submit",
            "cresolver-don",
            "cresolver-pipeline",
        ],
    ),
    (
        "cresolver-market",
        &[
            "cresolver-core",
            "cresolver-metrics",
            "cresolver-workers",
            "cresolver-chain",
        ],
    ),
    (
        "cresolver-devnet",
        &[
            "cresolver-core",
            "cresolver-workers",
            "cresolver-chain",
            "cresolver-market",
            "cresolver-store",
            "cresolver-pipeline",
            "cresolver-node",
        ],
    ),
    // the binary: its tests and benches reach every crate
    (
        "cresolver",
        &[
            "cresolver-core",
            "cresolver-metrics",
            "cresolver-workers",
            "cresolver-evaluate",
            "cresolver-chain",
            "cresolver-store",
            "cresolver-submit",
            "cresolver-pipeline",
            "cresolver-node",
            "cresolver-devnet",
            "cresolver-don",
            "cresolver-market",
        ],
    ),
];

/// External crates a workspace crate must not depend on, and why.
const FORBIDDEN: &[(&str, &[&str], &str)] = &[
    (
        "cresolver-core",
        &[
            "alloy",
            "tokio",
            "reqwest",
            "hyper",
            "axum",
            "rusqlite",
            "tokio-postgres",
            "prometheus-client",
        ],
        "the core is pure: no provider, runtime, HTTP client, database or telemetry",
    ),
    (
        "cresolver-store",
        &["alloy", "reqwest", "axum"],
        "the store knows no chain client and no HTTP",
    ),
    (
        "cresolver-workers",
        &["alloy", "rusqlite", "tokio-postgres"],
        "the workers know no chain and no store",
    ),
    (
        "cresolver-evaluate",
        &["alloy", "rusqlite", "tokio-postgres"],
        "the evaluators know no chain and no store",
    ),
    (
        "cresolver-chain",
        &["rusqlite", "tokio-postgres", "axum"],
        "the chain layer persists nothing and serves nothing",
    ),
    (
        "cresolver-pipeline",
        &["axum"],
        "the round pipeline serves nothing: the node (cresolver-node) owns the HTTP API",
    ),
    (
        "cresolver-market",
        &["rusqlite", "tokio-postgres", "axum"],
        "operating the contracts persists nothing and serves nothing",
    ),
    (
        "cresolver-don",
        &["tokio-postgres"],
        "a DON member keeps its agreement in its own file; it talks to members, not to the chain",
    ),
];

/// The longest a source file may be.
const MAX_LINES: usize = 800;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every workspace package's dependency names (all kinds).
fn workspace_deps() -> BTreeMap<String, BTreeSet<String>> {
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(root())
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata is JSON");
    let mut deps = BTreeMap::new();
    for p in meta["packages"].as_array().expect("packages") {
        let name = p["name"].as_str().expect("package name").to_string();
        let names = p["dependencies"]
            .as_array()
            .expect("dependencies")
            .iter()
            .map(|d| d["name"].as_str().expect("dependency name").to_string())
            .collect();
        deps.insert(name, names);
    }
    deps
}

#[test]
fn every_dependency_points_down_the_pipeline() {
    let deps = workspace_deps();
    let allowed: BTreeMap<_, _> = ALLOWED.iter().copied().collect();
    let mut wrong = Vec::new();
    for (crate_name, names) in &deps {
        let Some(ok) = allowed.get(crate_name.as_str()) else {
            wrong.push(format!(
                "{crate_name} is not in the layering table of tests/layering.rs: add it with the crates it may use"
            ));
            continue;
        };
        // a crate's dev-dependency on itself turns on a test-only feature (the DON's
        // `mutations`): not a layer
        for d in names
            .iter()
            .filter(|d| d.starts_with("cresolver") && *d != crate_name)
        {
            if !ok.contains(&d.as_str()) {
                wrong.push(format!(
                    "{crate_name} depends on {d}, which is not below it"
                ));
            }
        }
    }
    for (crate_name, bad, why) in FORBIDDEN {
        let names = deps.get(*crate_name).expect("the crate exists");
        for b in *bad {
            if names.contains(*b) {
                wrong.push(format!("{crate_name} depends on {b}: {why}"));
            }
        }
    }
    assert!(
        deps.len() == ALLOWED.len(),
        "the workspace has {} packages, the table {}",
        deps.len(),
        ALLOWED.len()
    );
    assert!(wrong.is_empty(), "layering broken:\n{}", wrong.join("\n"));
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            if p.file_name()
                .is_some_and(|n| n != "target" && n != "node_modules")
            {
                rust_files(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `tests/` has no automatic test targets (`autotests = false`): a file there runs only
/// as a module of `tests/suite.rs`, so one left out of it would never run.
#[test]
fn every_test_file_is_a_module_of_the_suite() {
    let tests = root().join("tests");
    let suite = std::fs::read_to_string(tests.join("suite.rs")).unwrap();
    let declared: BTreeSet<String> = suite
        .lines()
        .filter_map(|l| l.trim().strip_prefix("mod ")?.strip_suffix(';'))
        .map(str::to_string)
        .collect();
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(&tests).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        let is_test = if path.is_dir() {
            path.join("mod.rs").exists() || path.join("main.rs").exists()
        } else {
            path.extension().is_some_and(|e| e == "rs") && name != "suite" && name != "rpc_outage"
        };
        if is_test && !declared.contains(&name) {
            missing.push(name);
        }
    }
    assert!(
        missing.is_empty(),
        "tests/ files that tests/suite.rs does not declare (they would never run): {missing:?}"
    );
}

#[test]
fn no_source_file_passes_800_lines() {
    let mut files = Vec::new();
    for dir in ["src", "crates", "tests", "benches"] {
        rust_files(&root().join(dir), &mut files);
    }
    assert!(files.len() > 50, "found only {} source files", files.len());
    let mut long: Vec<_> = files
        .iter()
        .filter_map(|f| {
            let n = std::fs::read_to_string(f).ok()?.lines().count();
            (n > MAX_LINES).then(|| format!("{} has {n} lines", f.display()))
        })
        .collect();
    long.sort();
    assert!(
        long.is_empty(),
        "source files over {MAX_LINES} lines (split them by job):\n{}",
        long.join("\n")
    );
}

#[test]
fn every_module_opens_with_its_doc() {
    let mut files = Vec::new();
    for dir in ["src", "crates"] {
        rust_files(&root().join(dir), &mut files);
    }
    let mut bare: Vec<_> = files
        .iter()
        .filter(|f| {
            let text = std::fs::read_to_string(f).unwrap_or_default();
            let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
            !(first.starts_with("//!") || first.starts_with("#![doc"))
        })
        .map(|f| f.display().to_string())
        .collect();
    bare.sort();
    assert!(
        bare.is_empty(),
        "modules without a module doc (`//! what this module does`):\n{}",
        bare.join("\n")
    );
}

/// A module of a crate as the cycle check sees it: its path below `src/` up to two
/// levels (`node::api`, `watcher`).
fn unit_of(rel: &Path, dirs: &BTreeSet<String>) -> String {
    let mut parts: Vec<String> = rel
        .with_extension("")
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    match parts.as_slice() {
        [] => String::new(),
        [a] => a.clone(),
        [a, b, ..] if dirs.contains(a) => format!("{a}::{b}"),
        [a, ..] => a.clone(),
    }
}

/// The units a file refers to with `crate::a::b` and `super::x` paths.
fn referenced_units(text: &str, me: &str, dirs: &BTreeSet<String>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let code: String = text
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
            .collect()
    };
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        let a = ident(rest);
        if a.is_empty() {
            continue;
        }
        let after = &rest[a.len()..];
        let b = after.strip_prefix("::").map(ident).unwrap_or_default();
        out.insert(if dirs.contains(&a) && !b.is_empty() {
            format!("{a}::{b}")
        } else {
            a
        });
    }
    if let Some((parent, _)) = me.split_once("::") {
        for (i, _) in code.match_indices("super::") {
            let x = ident(&code[i + "super::".len()..]);
            if !x.is_empty() && x != "super" {
                out.insert(format!("{parent}::{x}"));
            }
        }
    }
    out
}

fn related(a: &str, b: &str) -> bool {
    a == b || a.starts_with(&format!("{b}::")) || b.starts_with(&format!("{a}::"))
}

#[test]
fn no_crate_has_an_import_cycle_between_its_modules() {
    let mut found = Vec::new();
    let crates = std::fs::read_dir(root().join("crates")).expect("crates/");
    for c in crates.flatten() {
        let src = c.path().join("src");
        let dirs: BTreeSet<String> = std::fs::read_dir(&src)
            .expect("src/")
            .flatten()
            .filter(|e| e.path().is_dir())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for f in &files {
            let rel = f.strip_prefix(&src).expect("under src");
            let me = unit_of(rel, &dirs);
            if me.is_empty() {
                continue;
            }
            let text = std::fs::read_to_string(f).unwrap_or_default();
            let refs = referenced_units(&text, &me, &dirs);
            let e = edges.entry(me.clone()).or_default();
            e.extend(refs.into_iter().filter(|r| !related(r, &me)));
        }
        // a cycle: a unit that reaches itself
        for start in edges.keys() {
            let mut seen = BTreeSet::new();
            let mut stack: Vec<(String, Vec<String>)> = vec![(start.clone(), vec![start.clone()])];
            while let Some((at, path)) = stack.pop() {
                for next in edges.get(&at).into_iter().flatten() {
                    if next == start {
                        let mut cycle = path.clone();
                        cycle.push(start.clone());
                        found.push(format!(
                            "{}: {}",
                            c.file_name().to_string_lossy(),
                            cycle.join(" -> ")
                        ));
                    } else if seen.insert(next.clone()) {
                        let mut p = path.clone();
                        p.push(next.clone());
                        stack.push((next.clone(), p));
                    }
                }
            }
        }
    }
    found.sort();
    found.dedup();
    assert!(
        found.is_empty(),
        "modules that import each other in a cycle (move what both need below both):\n{}",
        found.join("\n")
    );
}
