#!/usr/bin/env bash
# One command on a fresh machine, as any user (no root, no sudo): installs the pinned anvil
# if missing, builds cresolver, and runs `cresolver demo` (a whole resolution on a local
# chain). Extra args go to the demo, e.g. scripts/demo.sh --workers 5 --json
#   CRESOLVER_DEMO_BIN=path/to/cresolver  runs that binary instead of building one
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
step() { echo "demo.sh: $*" >&2; }

step "[1/3] tools: the pinned anvil from npm into .tools/ (first run: under a minute; later: instant)"
ANVIL_BIN="$(scripts/install-tools.sh --demo)"
export ANVIL_BIN

if [ -n "${CRESOLVER_DEMO_BIN:-}" ]; then
  BIN="$CRESOLVER_DEMO_BIN"
  [ -x "$BIN" ] || { echo "demo.sh: CRESOLVER_DEMO_BIN=$BIN is not an executable" >&2; exit 1; }
  step "[2/3] build: skipped, using $BIN"
else
  command -v cargo >/dev/null 2>&1 || { echo "demo.sh: cargo not found: install Rust 1.94 or newer (https://rustup.rs), then run this again" >&2; exit 1; }
  step "[2/3] build: cargo build (first run: about 6-7 min on 2 cores, cargo shows its progress; later: seconds)"
  cargo build --locked --bin cresolver
  BIN="${CARGO_TARGET_DIR:-target}/debug/cresolver"
fi

step "[3/3] demo: anvil, the contracts, 3 workers, one market resolved (a few seconds)"
exec "$BIN" demo "$@"
