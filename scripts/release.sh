#!/usr/bin/env bash
# Builds a release archive of cresolver with its checksums:
#   dist/cresolver-<version>-<target>.tar.gz     the binary (production build: no dev harness,
#                                                no test failpoints), man pages, shell
#                                                completions, example configs, the workflow,
#                                                the systemd unit, the JSON Schemas, LICENSE,
#                                                README, CHANGELOG, SECURITY
#   dist/SHA256SUMS                              `sha256sum -c SHA256SUMS` verifies it
# Usage:
#   scripts/release.sh                        cargo build --release --locked --no-default-features
#                                             (about 7 minutes on 2 cores from clean)
#   scripts/release.sh --binary PATH          package a binary built already
#   scripts/release.sh --out DIR              write into DIR instead of dist/
# Refuses a dirty work tree unless --allow-dirty: an archive names the commit it was built from.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
die() { echo "release: $*" >&2; exit 1; }

BINARY="" OUT="$ROOT/dist" ALLOW_DIRTY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) BINARY="${2:?--binary needs a path}"; shift 2 ;;
    --out) OUT="${2:?--out needs a directory}"; shift 2 ;;
    --allow-dirty) ALLOW_DIRTY=1; shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done

command -v sha256sum >/dev/null || die "sha256sum not found (coreutils)"
if [ "$ALLOW_DIRTY" -eq 0 ] && [ -n "$(git status --porcelain 2>/dev/null)" ]; then
  die "the work tree has uncommitted changes: commit them, or pass --allow-dirty"
fi
VERSION="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' Cargo.toml | head -n1)"
[ -n "$VERSION" ] || die "cannot read the version from Cargo.toml"
TARGET="$(rustc -vV 2>/dev/null | sed -n 's/^host: //p')"
[ -n "$TARGET" ] || TARGET="$(uname -m)-unknown-linux-gnu"

if [ -z "$BINARY" ]; then
  echo "release: building cresolver $VERSION (release, --no-default-features)" >&2
  cargo build --release --locked --no-default-features --bin cresolver
  BINARY="target/release/cresolver"
fi
[ -x "$BINARY" ] || die "no executable at $BINARY"

NAME="cresolver-$VERSION-$TARGET"
STAGE="$(mktemp -d)"
trap 'rm -rf "$STAGE"' EXIT
PKG="$STAGE/$NAME"
mkdir -p "$PKG/bin" "$PKG/man" "$PKG/completions" "$PKG/examples" "$PKG/workflows" \
  "$PKG/deploy" "$PKG/schema"
install -m 0755 "$BINARY" "$PKG/bin/cresolver"
"$PKG/bin/cresolver" --version > "$PKG/VERSION"
"$PKG/bin/cresolver" man --out "$PKG/man" 2>/dev/null
for shell in bash zsh fish; do
  "$PKG/bin/cresolver" completions "$shell" > "$PKG/completions/cresolver.$shell"
done
cp examples/*.toml "$PKG/examples/"
ln -s ../workflows "$PKG/examples/workflows"   # the examples name workflows/ beside them
cp workflows/*.toml "$PKG/workflows/"
cp -r deploy/systemd deploy/prometheus deploy/grafana "$PKG/deploy/"
for f in docs/reference/*.schema.json; do [ -f "$f" ] && cp "$f" "$PKG/schema/"; done
cp LICENSE README.md CHANGELOG.md SECURITY.md "$PKG/"

mkdir -p "$OUT"
ARCHIVE="$OUT/$NAME.tar.gz"
# reproducible: fixed order, owner and times (the commit's time)
EPOCH="$(git log -1 --format=%ct 2>/dev/null || date +%s)"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$EPOCH" \
  -C "$STAGE" -cf - "$NAME" | gzip -n > "$ARCHIVE"
(cd "$OUT" && sha256sum "$NAME.tar.gz" > SHA256SUMS)
echo "release: $ARCHIVE" >&2
cat "$OUT/SHA256SUMS"
