#!/usr/bin/env bash
# The matrix kernels of ext/engine/gemm.c against a plain double
# loop: tests/c/test_gemm.c.
set -u
BUILD=${BUILD:-build}
bin="$BUILD/tests/test_gemm"
if [ ! -x "$bin" ]; then echo "FAIL test_gemm: $bin not built (run make test-bins)"; exit 1; fi
${BF_WRAP:-} "$bin"
rc=$?
# with the kernels turned off, gemm_xwt must hand the work back (GEMM_NO_KERNEL)
BERTFILL_NO_AVX512=1 ${BF_WRAP:-} "$bin" | sed -E 's/^(ok|FAIL|skip) /\1 [no AVX-512] /'
[ "${PIPESTATUS[0]}" -ne 0 ] && exit 1
exit $rc
