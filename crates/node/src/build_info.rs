//! What this build is: the package version and the git commit it was built from
//! (stamped by the node crate's `build.rs`). `cresolver --version` and `GET /health`
//! show them.

/// The package version (`0.1.0`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The commit the binary was built from: 12 hex digits of `git rev-parse HEAD`, else the
/// `CRESOLVER_GIT_COMMIT` environment variable at build time, else `unknown`.
pub const COMMIT: &str = env!("CRESOLVER_COMMIT");

/// The date of [`COMMIT`] (`YYYY-MM-DD`), empty when it was not built from a git checkout.
pub const COMMIT_DATE: &str = env!("CRESOLVER_COMMIT_DATE");

/// `0.1.0 (abc123456789 2026-11-27)`: the version with the commit and its date, as
/// `cresolver --version` prints it after the program's name.
pub fn long_version() -> &'static str {
    static LONG: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    LONG.get_or_init(|| {
        if COMMIT_DATE.is_empty() {
            format!("{VERSION} ({COMMIT})")
        } else {
            format!("{VERSION} ({COMMIT} {COMMIT_DATE})")
        }
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn long_version_names_the_commit() {
        let v = super::long_version();
        assert!(v.starts_with(super::VERSION), "{v}");
        assert!(v.contains(super::COMMIT), "{v}");
        assert!(!super::COMMIT.is_empty());
    }
}
