#!/usr/bin/env bash
# Unit tests of the memo cache's LRU (ext/sqlite/cache.c): tests/c/test_lru.c.
set -u
BUILD=${BUILD:-build}
bin="$BUILD/tests/test_lru"
if [ ! -x "$bin" ]; then echo "FAIL test_lru: $bin not built (run make test-bins)"; exit 1; fi
${BF_WRAP:-} "$bin"
