#!/usr/bin/env bash
# The int8 products of ext/engine/qgemm.c: tests/c/test_qgemm.c (every
# kernel the CPU has against the portable one and the exact math).
set -u
BUILD=${BUILD:-build}
bin="$BUILD/tests/test_qgemm"
if [ ! -x "$bin" ]; then echo "FAIL test_qgemm: $bin not built (run make test-bins)"; exit 1; fi
${BF_WRAP:-} "$bin"
rc=$?
# BERTFILL_NO_AVX512=1 must rule out the AVX-512 kernel (checks only that)
BERTFILL_NO_AVX512=1 ${BF_WRAP:-} "$bin" | sed -E 's/^(ok|FAIL|skip) /\1 [no AVX-512] /'
[ "${PIPESTATUS[0]}" -ne 0 ] && exit 1
exit $rc
