#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs the pinned tools (anvil, solc-js),
# checks the committed contract artifacts are current, lints, and runs every test.
#   scripts/test.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
command -v cargo >/dev/null 2>&1 || { echo "test: cargo not found: install Rust (rustup) first" >&2; exit 1; }
# A fresh clone (no target/debug yet, as in CI) builds everything once: incremental
# compilation only costs there. A developer's warm tree keeps it.
[ -d target/debug ] || export CARGO_INCREMENTAL=0

echo "== tools (anvil and solc-js from npm; Debian's postgresql, chromium and prometheus via apt-get when missing: root or sudo)"
scripts/install-tools.sh >/dev/null
echo "== contract artifacts are current"
node scripts/compile-contracts.mjs --check
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --locked --workspace --all-targets -- -D warnings
echo "== cargo clippy --no-default-features (the production build, without the dev harness)"
cargo clippy --locked --workspace --exclude cresolver-devnet --no-default-features --lib --bins -- -D warnings
echo "== cargo test"
cargo test --locked --workspace
