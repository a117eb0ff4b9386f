#!/usr/bin/env bash
# Unit tests of the machine-wide encoder slots (ext/sqlite/machine_guard.c),
# with real processes and SIGKILL: tests/c/test_machine_guard.c.
set -u
BUILD=${BUILD:-build}
bin="$BUILD/tests/test_machine_guard"
if [ ! -x "$bin" ]; then echo "FAIL test_machine_guard: $bin not built (run make test-bins)"; exit 1; fi
${BF_WRAP:-} "$bin"
