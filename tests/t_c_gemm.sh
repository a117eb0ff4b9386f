#!/usr/bin/env bash
# The matrix kernels and thread pool of ext/gemm.c against a plain double
# loop: tests/c/test_gemm.c.
set -u
BUILD=${BUILD:-build}
bin="$BUILD/tests/test_gemm"
if [ ! -x "$bin" ]; then echo "FAIL test_gemm: $bin not built (run make test-bins)"; exit 1; fi
${BF_WRAP:-} "$bin"
