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

# Each phase prints the seconds since the start, so a slow phase shows in CI's log.
phase() { echo "== [${SECONDS}s] $*"; }

# A command run beside the next phases: in a process group of its own (should this script
# stop early, the group is killed, and with it whatever the command started, which a
# killed command cannot stop itself), its output kept in a log. One at a time.
beside() {
  beside_log=$1; shift
  setsid "$@" >"$beside_log" 2>&1 &
  beside_pid=$!
  trap 'kill -- -"$beside_pid" 2>/dev/null || kill "$beside_pid" 2>/dev/null || true' EXIT
}
# Waits for it, shows its log, and fails the run as it failed.
joined() {
  local rc=0
  wait "$beside_pid" || rc=$?
  trap - EXIT
  cat "$beside_log"
  [ "$rc" -eq 0 ] || { echo "test: $1 failed (exit $rc)" >&2; exit "$rc"; }
}

mkdir -p target
# clippy needs none of the tools: it checks the code while they install (apt-get and npm
# mostly wait on the network), and its output is shown after them
phase "cargo clippy, beside the next three phases (its output follows them)"
beside target/clippy.log cargo clippy --locked --workspace --all-targets -- -D warnings
phase "tools (anvil and solc-js from npm; Debian's postgresql, chromium and prometheus via apt-get when missing: root or sudo)"
scripts/install-tools.sh >/dev/null
phase "contract artifacts are current"
node scripts/compile-contracts.mjs --check
phase "cargo fmt --check"
cargo fmt --all -- --check
phase "cargo clippy: its end"
joined "cargo clippy"
phase "cargo clippy --no-default-features (the production build, without the dev harness)"
cargo clippy --locked --workspace --exclude cresolver-devnet --no-default-features --lib --bins -- -D warnings
phase "cargo test: building"
cargo test --locked --workspace --no-run
# tests/rpc_outage.rs mostly waits out 60-90 s outages (its tests are #[ignore]d for a
# plain `cargo test`): it runs beside the other binaries, which run one after another.
outage_bin=$(cargo test --locked --test rpc_outage --no-run --message-format=json 2>/dev/null \
  | sed -n 's/.*"executable":"\([^"]*rpc_outage[^"]*\)".*/\1/p' | tail -n1)
[ -x "$outage_bin" ] || { echo "test: cannot find the rpc_outage test binary" >&2; exit 1; }
# (the nodes and chains its tests start go with its process group if this script stops)
beside target/rpc_outage.log "$outage_bin" --ignored --test-threads=8
phase "cargo test: running (the rpc_outage tests beside)"
# The tests mostly wait (on anvil, nodes, lease and round timeouts): three at a time use
# the 2 cores better than two (the suite: 163 s against 209 s; four: 151 s, at the price
# of more CPU contention for the timing-bound ones). One workspace-wide command: a
# package selected on its own resolves other features and rebuilds ~50 crates.
cargo test --locked --workspace -- --test-threads=3
phase "tests/rpc_outage.rs (run beside the others)"
joined "tests/rpc_outage.rs"
phase "done"
