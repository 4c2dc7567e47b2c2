//! Stamps the build with the git commit it was built from: `CRESOLVER_COMMIT` (12 hex
//! digits of `git rev-parse HEAD`, else the `CRESOLVER_GIT_COMMIT` environment variable,
//! else `unknown`) and `CRESOLVER_COMMIT_DATE` (the commit's date, `YYYY-MM-DD`, or
//! empty). Reruns when HEAD moves: on the worktree's `HEAD` and its reflog, the
//! branch's ref and `packed-refs` (a worktree's `.git` is a file; `git rev-parse` finds
//! the real dirs).

use std::path::PathBuf;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}

/// Tells cargo to rerun when a file that exists changes (a missing file would make it
/// rerun on every build).
fn watch(path: PathBuf) {
    if path.exists() {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CRESOLVER_GIT_COMMIT");
    if let Some(git_dir) = git(&["rev-parse", "--absolute-git-dir"]).map(PathBuf::from) {
        watch(git_dir.join("HEAD"));
        // the worktree's reflog grows on every commit, checkout and reset here, also
        // when the branch's ref is packed (a loose ref created later is not watched)
        watch(git_dir.join("logs").join("HEAD"));
        let common = git(&["rev-parse", "--path-format=absolute", "--git-common-dir"])
            .map(PathBuf::from)
            .unwrap_or_else(|| git_dir.clone());
        watch(common.join("packed-refs"));
        if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
            watch(common.join(branch));
        }
    }
    let (commit, date) = match git(&["rev-parse", "--short=12", "HEAD"]) {
        Some(c) => (
            c,
            git(&["log", "-1", "--format=%cs", "HEAD"]).unwrap_or_default(),
        ),
        None => (
            std::env::var("CRESOLVER_GIT_COMMIT")
                .ok()
                .map(|c| c.trim().chars().take(40).collect::<String>())
                .filter(|c| !c.is_empty() && c.chars().all(|ch| ch.is_ascii_alphanumeric()))
                .unwrap_or_else(|| "unknown".into()),
            String::new(),
        ),
    };
    println!("cargo:rustc-env=CRESOLVER_COMMIT={commit}");
    println!("cargo:rustc-env=CRESOLVER_COMMIT_DATE={date}");
}
