#!/usr/bin/env bash
# tests/clients/node/install.sh — makes sure tests/clients/node/node_modules holds a working
# better-sqlite3 (the version pinned in package-lock.json), built from source
# against the Node.js headers of this machine (/usr/include/node): no prebuilt
# binary is downloaded.  Used by tests/clients/t_node.sh, tests/clients/t_web.sh and
# `make web`; run it by hand the same way:
#
#   bash tests/clients/node/install.sh          # prints nothing when already built
#
# The first build takes 1-3 minutes (better-sqlite3 compiles its own SQLite);
# later runs reuse node_modules (ignored by git) until package-lock.json
# changes.  It needs node (20 or newer: better-sqlite3 12), npm, python3, make
# and g++ (Debian: make test-deps).  Exits non-zero with one line on stderr
# saying what is missing or what failed; the npm log is $BUILD/node-npm.log.
set -u
cd "$(dirname "$0")"
BUILD=${BUILD:-build}
case "$BUILD" in /*) ;; *) BUILD=$PWD/../../../$BUILD ;; esac
addon=node_modules/better-sqlite3/build/Release/better_sqlite3.node

have() { command -v "$1" >/dev/null; }
for tool in node npm python3 make g++; do
  have "$tool" || { echo "no $tool (Debian: make test-deps)" >&2; exit 1; }
done
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 20 ]; then
  echo "Node.js $(node --version) is too old: better-sqlite3 12 needs Node.js 20 or newer" >&2
  exit 1
fi
headers=$(node -p 'require("path").dirname(process.execPath)')/../include/node
if [ ! -f "$headers/node.h" ]; then
  echo "no Node.js headers in $headers (they come with Debian's nodejs / libnode-dev)" >&2
  exit 1
fi

# Up to date: the addon exists and the lock is not newer than npm's record of node_modules.
if [ -f "$addon" ] && [ -f node_modules/.package-lock.json ] &&
   [ ! package-lock.json -nt node_modules/.package-lock.json ]; then exit 0; fi

mkdir -p "$BUILD"
log=$BUILD/node-npm.log
echo "tests/clients/node: npm ci (better-sqlite3 from source, once; 1-3 minutes)" >&2
# nodedir: node-gyp takes the headers of the installed Node.js instead of
# downloading a headers tarball; build_from_source: no prebuilt download.
if ! npm_config_nodedir=$(cd "$headers/../.." && pwd) npm_config_build_from_source=true \
     npm ci --no-audit --no-fund --loglevel=error >"$log" 2>&1; then
  echo "npm ci in tests/clients/node failed: $(grep -m1 -iE 'error|ERR!' "$log" | cut -c1-160) (log: $log)" >&2
  exit 1
fi
if ! node -e 'new (require("better-sqlite3"))(":memory:").close()' 2>>"$log"; then
  echo "better-sqlite3 was built but does not load (log: $log)" >&2
  exit 1
fi
