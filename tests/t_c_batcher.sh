#!/usr/bin/env bash
# Unit tests of dynamic batching (ext/sqlite/batcher.c) without SQL:
# tests/c/test_batcher.c, on the tiny and small test models.  OpenBLAS runs
# single-threaded: where bertfill's own kernels do not run (no AVX-512) it
# does the products, and the test's many threads need no more.
set -u
BUILD=${BUILD:-build}
bin="$BUILD/tests/test_batcher"
if [ ! -x "$bin" ]; then echo "FAIL test_batcher: $bin not built (run make test-bins)"; exit 1; fi
for m in tiny small; do
  if [ ! -d "$BUILD/models/$m" ]; then echo "FAIL test_batcher: no model $BUILD/models/$m (make models)"; exit 1; fi
done
# Under valgrind ($BF_WRAP) the case that runs over 2048 tokens at once is skipped.
quick=${BF_WRAP:+1}
BF_BATCHER_QUICK=$quick OPENBLAS_NUM_THREADS=1 ${BF_WRAP:-} "$bin" "$BUILD/models/tiny" "$BUILD/models/small"
