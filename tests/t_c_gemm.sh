#!/usr/bin/env bash
# The matrix kernels of ext/engine/gemm.c (AVX-512) and gemm_avx2.c (AVX2)
# against a plain double loop: tests/c/test_gemm.c, once per setting of
# BERTFILL_KERNELS (gemm.h), so that every kernel this CPU has is checked:
# the best it has (default), AVX2 (on an AVX-512 CPU; skipped where the
# default run checked AVX2 already), and none (gemm_xwt must hand the work
# back: GEMM_NO_KERNEL), also through the older BERTFILL_NO_AVX512=1.
set -u
BUILD=${BUILD:-build}
bin="$BUILD/tests/test_gemm"
if [ ! -x "$bin" ]; then echo "FAIL test_gemm: $bin not built (run make test-bins)"; exit 1; fi
out=$(${BF_WRAP:-} "$bin")
rc=$?
echo "$out"
for setting in BERTFILL_KERNELS=avx2 BERTFILL_KERNELS=openblas BERTFILL_NO_AVX512=1; do
  if [ "$setting" = BERTFILL_KERNELS=avx2 ] && [[ $out == *"checking the avx2 kernels"* ]]; then
    echo "# $setting: the default run checked the AVX2 kernels"; continue
  fi
  env "$setting" ${BF_WRAP:-} "$bin" | sed -E "s/^(ok|FAIL|skip) /\1 [$setting] /"
  [ "${PIPESTATUS[0]}" -ne 0 ] && rc=1
done
exit $rc
