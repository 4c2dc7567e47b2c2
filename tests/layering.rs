//! The workspace's layering, kept by a test: every crate depends only on the crates
//! below it in the pipeline (read from `cargo metadata`), the pure core and the store
//! keep away from what they must not know, and no source file passes 800 lines.

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
        ],
    ),
    (
        "cresolver-devnet",
        &[
            "cresolver-core",
            "cresolver-workers",
            "cresolver-chain",
            "cresolver-store",
            "cresolver-pipeline",
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
            "cresolver-devnet",
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
        for d in names.iter().filter(|d| d.starts_with("cresolver")) {
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
