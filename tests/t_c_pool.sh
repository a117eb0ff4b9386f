#!/usr/bin/env bash
# The engine's thread pool (ext/engine/pool.c): tests/c/test_pool.c.
set -u
BUILD=${BUILD:-build}
bin="$BUILD/tests/test_pool"
if [ ! -x "$bin" ]; then echo "FAIL test_pool: $bin not built (run make test-bins)"; exit 1; fi
${BF_WRAP:-} "$bin"
