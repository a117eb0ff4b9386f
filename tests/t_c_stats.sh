#!/usr/bin/env bash
# Unit tests of the stats histograms and counters (ext/sqlite/stats.c): tests/c/test_stats.c.
set -u
BUILD=${BUILD:-build}
bin="$BUILD/tests/test_stats"
if [ ! -x "$bin" ]; then echo "FAIL test_stats: $bin not built (run make test-bins)"; exit 1; fi
${BF_WRAP:-} "$bin"
