//! The book builds with the pinned mdbook (`scripts/install-tools.sh` installs it into
//! `.tools/mdbook`), its summary names only chapters inside `docs/`, and every link of
//! the built HTML between its pages resolves, anchors included.

use crate::common::generated;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn mdbook() -> PathBuf {
    let p = root().join(".tools/mdbook/bin/mdbook");
    assert!(
        p.is_file(),
        "{} missing: run scripts/install-tools.sh (it installs the pinned mdbook)",
        p.display()
    );
    p
}

/// Every `attr="…"` value in an HTML text.
fn attr_values<'a>(html: &'a str, attr: &str) -> Vec<&'a str> {
    let pat = format!(" {attr}=\"");
    let mut out = Vec::new();
    let mut rest = html;
    while let Some(i) = rest.find(&pat) {
        rest = &rest[i + pat.len()..];
        if let Some(end) = rest.find('"') {
            out.push(&rest[..end]);
            rest = &rest[end..];
        }
    }
    out
}

fn html_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            html_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "html") {
            out.push(p);
        }
    }
}

#[test]
fn the_summary_names_only_chapters_inside_docs() {
    let summary = std::fs::read_to_string(root().join("docs/SUMMARY.md")).unwrap();
    for line in summary.lines() {
        if let Some(start) = line.find("](") {
            let target = line[start + 2..].split(')').next().unwrap_or("");
            assert!(
                !target.starts_with("..") && !target.starts_with('/') && !target.contains("://"),
                "docs/SUMMARY.md links {target}, outside docs/: mdbook would not render it"
            );
            assert!(
                root().join("docs").join(target).is_file(),
                "docs/SUMMARY.md: {target} does not exist"
            );
        }
    }
}

#[test]
fn the_book_builds_and_its_links_resolve() {
    let out = tempfile::tempdir().unwrap();
    let run = Command::new(mdbook())
        .arg("build")
        .arg(root().join("docs"))
        .arg("--dest-dir")
        .arg(out.path())
        .output()
        .unwrap();
    let log =
        String::from_utf8_lossy(&run.stderr).to_string() + &String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "mdbook build docs failed:\n{log}");
    assert!(
        !log.contains("WARN") && !log.contains("ERROR"),
        "mdbook build docs warned:\n{log}"
    );
    let mut pages = Vec::new();
    html_files(out.path(), &mut pages);
    let ids: BTreeMap<PathBuf, BTreeSet<String>> = pages
        .iter()
        .map(|p| {
            let html = std::fs::read_to_string(p).unwrap();
            (
                p.clone(),
                attr_values(&html, "id")
                    .into_iter()
                    .map(String::from)
                    .collect(),
            )
        })
        .collect();
    let mut broken = Vec::new();
    for page in &pages {
        // the 404 page links the site's root, which only a web server knows
        if page.file_name().is_some_and(|n| n == "404.html") {
            continue;
        }
        let html = std::fs::read_to_string(page).unwrap();
        for href in attr_values(&html, "href") {
            if href.contains("://")
                || href.starts_with("mailto:")
                || href.starts_with("javascript:")
            {
                continue;
            }
            let (file, anchor) = href.split_once('#').unwrap_or((href, ""));
            let target = if file.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(file)
            };
            let target = if target.is_dir() {
                target.join("index.html")
            } else {
                target
            };
            let shown = page.strip_prefix(out.path()).unwrap().display().to_string();
            if !target.exists() {
                broken.push(format!("{shown}: {href} (no such file)"));
                continue;
            }
            if !anchor.is_empty() {
                let canon = target.canonicalize().unwrap();
                let found = ids
                    .iter()
                    .find(|(p, _)| p.canonicalize().ok().as_ref() == Some(&canon))
                    .is_some_and(|(_, set)| set.contains(anchor));
                if !found {
                    broken.push(format!("{shown}: {href} (no such anchor)"));
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "broken links in the built book:\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_cli_reference_is_current() {
    let out = Command::new(env!("CARGO_BIN_EXE_cresolver"))
        .arg("cli-reference")
        .output()
        .unwrap();
    assert!(out.status.success(), "cresolver cli-reference failed");
    let generated = String::from_utf8(out.stdout).unwrap();
    generated::check("docs/reference/cli.md", &generated, "book");
}
