#!/usr/bin/env bash
# Unit tests of the shared helpers (ext/engine/util.c): tests/c/test_util.c.
set -u
BUILD=${BUILD:-build}
bin="$BUILD/tests/test_util"
if [ ! -x "$bin" ]; then echo "FAIL test_util: $bin not built (run make test-bins)"; exit 1; fi
${BF_WRAP:-} "$bin"
