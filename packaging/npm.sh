#!/usr/bin/env bash
# packaging/npm.sh — the npm packages of `make dist` (docs/dist.md):
#   packaging/npm.sh VERSION OUTDIR ARCH=SO... -- MODEL_FILE...
# writes into OUTDIR, with `npm pack`:
#   bertfill-VERSION.tgz               packaging/npm/bertfill/: index.js (CJS),
#                                      index.mjs (ESM), index.d.ts, platform.js
#                                      (what both share), README.md;
#                                      optionalDependencies pin every platform
#                                      package to exactly VERSION
#   bertfill-linux-x64-VERSION.tgz     per ARCH=SO given (x86_64, aarch64 ->
#   bertfill-linux-arm64-VERSION.tgz   x64, arm64): bertfill.so, the shipped
#                                      model (model/bertfill-zh-tiny/, found
#                                      next to the .so; model/MODEL_CARD.md),
#                                      LICENSE, licenses/ (utf8proc, unicode:
#                                      what the .so links in), README.md; "os", "cpu",
#                                      "libc": ["glibc"] and "exports"
# The versions come from VERSION (ext/sqlite/version.h, the Makefile reads
# it); the glibc a README states is read from each .so (readelf -V), as
# packaging/tarball.sh does.  Without npm it says so and writes nothing.
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 VERSION OUTDIR ARCH=SO... -- MODEL_FILE..." >&2; exit 2; }
version=$1 out=$2; shift 2
builds=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do builds+=("$1"); shift; done
[ "${1:-}" = -- ] && shift
models=("$@")
[ ${#models[@]} -gt 0 ] || { echo "make dist: npm: no model files given" >&2; exit 2; }
if ! command -v npm >/dev/null; then
  echo "make dist: no npm: the npm packages are not built (Debian: apt-get install npm)"; exit 0
fi
src=packaging/npm
stage=$(mktemp -d); trap 'rm -rf "$stage"' EXIT
mkdir -p "$out"; out=$(cd "$out" && pwd)
pack() { (cd "$1" && npm pack --silent --pack-destination "$out" >/dev/null) &&
         echo "make dist: $out/$(basename "$1")-$version.tgz"; }

# The main package: its sources and a package.json that pins the platform packages.
m=$stage/bertfill; mkdir -p "$m"
install -m 0644 "$src"/bertfill/{index.js,index.mjs,index.d.ts,platform.js,README.md} LICENSE "$m/"
cat >"$m/package.json" <<EOT
{
  "name": "bertfill",
  "version": "$version",
  "description": "SQLite extension that fills [MASK] blanks of Chinese text with a BERT masked language model",
  "license": "Apache-2.0",
  "keywords": ["sqlite", "sqlite-extension", "bert", "chinese", "better-sqlite3"],
  "main": "./index.js",
  "types": "./index.d.ts",
  "exports": {
    ".": {
      "types": "./index.d.ts",
      "import": "./index.mjs",
      "require": "./index.js"
    },
    "./package.json": "./package.json"
  },
  "files": ["index.js", "index.mjs", "index.d.ts", "platform.js", "README.md", "LICENSE"],
  "engines": { "node": ">=20" },
  "optionalDependencies": {
    "bertfill-linux-x64": "$version",
    "bertfill-linux-arm64": "$version"
  }
}
EOT
pack "$m"

for build in "${builds[@]}"; do
  arch=${build%%=*} so=${build#*=}
  case $arch in
    x86_64) cpu=x64 desc="Linux x86-64 (glibc)" ;;
    aarch64) cpu=arm64 desc="Linux arm64 (glibc)" ;;
    *) echo "make dist: npm: unknown architecture $arch" >&2; exit 1 ;;
  esac
  name=bertfill-linux-$cpu
  glibc=$(readelf -V --wide "$so" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -1)
  p=$stage/$name; mkdir -p "$p/model/bertfill-zh-tiny"
  install -m 0755 "$so" "$p/bertfill.so"
  install -m 0644 "${models[@]}" "$p/model/bertfill-zh-tiny/"
  install -m 0644 model/MODEL_CARD.md "$p/model/MODEL_CARD.md"
  install -m 0644 LICENSE "$p/LICENSE"
  # the licences of what the .so holds besides bertfill, as the tarball and the wheel carry them
  mkdir -p "$p/licenses"
  install -m 0644 /usr/share/doc/libutf8proc-dev/copyright "$p/licenses/utf8proc"
  install -m 0644 ext/engine/LICENSE-Unicode.txt "$p/licenses/unicode"
  sed -e "s/@NAME@/$name/g" -e "s/@DESC@/$desc/g" -e "s/@GLIBC@/$glibc/g" \
    "$src/platform/README.md" >"$p/README.md"
  cat >"$p/package.json" <<EOT
{
  "name": "$name",
  "version": "$version",
  "description": "The bertfill SQLite extension and its model for $desc",
  "license": "Apache-2.0",
  "os": ["linux"],
  "cpu": ["$cpu"],
  "libc": ["glibc"],
  "exports": {
    "./bertfill.so": "./bertfill.so",
    "./package.json": "./package.json"
  },
  "files": ["bertfill.so", "model", "licenses", "LICENSE", "README.md"]
}
EOT
  pack "$p"
done
