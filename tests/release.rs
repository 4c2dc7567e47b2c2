//! `scripts/release.sh` packages a binary into an archive whose checksum verifies and
//! which holds what the installation chapter names: the binary, man pages, completions,
//! the example configs, the workflow, the systemd unit, LICENSE and SECURITY.

use std::path::Path;
use std::process::Command;

#[test]
fn the_release_archive_holds_the_documented_files_and_its_checksum_verifies() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = tempfile::tempdir().unwrap();
    let status = Command::new(root.join("scripts/release.sh"))
        .args([
            "--binary",
            env!("CARGO_BIN_EXE_cresolver"),
            "--allow-dirty",
            "--out",
        ])
        .arg(out.path())
        .status()
        .unwrap();
    assert!(status.success(), "scripts/release.sh failed");
    let sums = std::fs::read_to_string(out.path().join("SHA256SUMS")).unwrap();
    let archive = sums.split_whitespace().nth(1).unwrap().to_string();
    assert!(
        archive.starts_with("cresolver-") && archive.ends_with(".tar.gz"),
        "{archive}"
    );
    let check = Command::new("sha256sum")
        .args(["-c", "SHA256SUMS"])
        .current_dir(out.path())
        .status()
        .unwrap();
    assert!(check.success(), "the checksum does not verify");
    let list = Command::new("tar")
        .arg("-tzf")
        .arg(out.path().join(&archive))
        .output()
        .unwrap();
    assert!(list.status.success());
    let list = String::from_utf8_lossy(&list.stdout);
    let top = archive.trim_end_matches(".tar.gz");
    for want in [
        "bin/cresolver",
        "man/cresolver.1",
        "man/cresolver-rounds-list.1",
        "completions/cresolver.bash",
        "examples/node.toml",
        "workflows/cresolver-resolution.toml",
        "deploy/systemd/cresolver.service",
        "LICENSE",
        "SECURITY.md",
        "VERSION",
    ] {
        assert!(
            list.lines().any(|l| l == format!("{top}/{want}")),
            "{want} missing from {archive}:\n{list}"
        );
    }
}
