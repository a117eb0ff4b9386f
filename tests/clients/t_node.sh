#!/usr/bin/env bash
# t_node.sh — bertfill from Node.js through better-sqlite3 (tests/clients/node/t_node.js):
# scalar and table-valued functions, errors as JS exceptions, one prepared
# statement over many rows, a column fill, worker threads; every answer compared
# with the sqlite3 shell's.  better-sqlite3 is built once into
# tests/clients/node/node_modules by tests/clients/node/install.sh; without node/npm, or when
# that build fails, the suite is skipped with the reason.
set -u
cd "$(dirname "$0")/../.."
export BUILD=${BUILD:-build}
export BERTFILL_EXT=${BERTFILL_EXT:-./bertfill}
if ! command -v sqlite3 >/dev/null; then echo "skip node: no sqlite3 shell to compare with"; exit 0; fi
if [ ! -f "$BUILD/models/tiny/config.json" ]; then echo "FAIL node: no test models in $BUILD/models (make models)"; exit 1; fi
mkdir -p "$BUILD"
if ! bash tests/clients/node/install.sh 2>"$BUILD/node-install.err"; then
  echo "skip node: better-sqlite3 unavailable: $(tail -n1 "$BUILD/node-install.err")"; exit 0
fi
export BERTFILL_MODEL=$PWD/$BUILD/models/tiny
case "$BUILD" in /*) export BERTFILL_MODEL=$BUILD/models/tiny ;; esac
exec node tests/clients/node/t_node.js
