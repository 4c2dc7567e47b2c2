#!/usr/bin/env bash
# One command on a fresh machine: installs the pinned anvil if missing, builds, and runs
# `cresolver demo` (a whole resolution on a local chain). Extra args go to the demo,
# e.g. scripts/demo.sh --workers 5 --json
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
command -v cargo >/dev/null 2>&1 || { echo "demo: cargo not found: install Rust (rustup) first" >&2; exit 1; }
scripts/install-tools.sh >/dev/null
exec cargo run --quiet --locked -- demo "$@"
