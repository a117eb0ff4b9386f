#!/usr/bin/env bash
# Unit tests of the SQLite layer's messages (ext/sqlite/errors.c): always
# valid UTF-8, user input escaped and cut: tests/c/test_errors.c.
set -u
BUILD=${BUILD:-build}
bin="$BUILD/tests/test_errors"
if [ ! -x "$bin" ]; then echo "FAIL test_errors: $bin not built (run make test-bins)"; exit 1; fi
${BF_WRAP:-} "$bin"
