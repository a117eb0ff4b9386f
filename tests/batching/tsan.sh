#!/usr/bin/env bash
# tsan.sh — the batching test (batch.c) under ThreadSanitizer, on the TSan
# build of the extension made by tests/reliability/tsan.sh (which it runs
# first: every ext/*.c with -fsanitize=thread into $BUILD/tsan/).  Two runs:
# with the gather hook (merged batches certain) and without (16 threads).
# Two threads per encoder run (TSAN_BLAS_THREADS, default 2): the engine's
# own pool runs with its helpers.  OpenBLAS is not instrumented (TSan cannot
# see the hand-off between its workers and the caller), but on an AVX-512 CPU
# it is not called; elsewhere set TSAN_BLAS_THREADS=1.
# Prints "ok tsan_batching_*" or "FAIL tsan_batching_*: ..." with the reports.
#   bash tests/batching/tsan.sh [THREADS] [CALLS]    (default 16 30)
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
threads=${1:-16}; calls=${2:-30}
bash tests/reliability/tsan.sh small 8 30 || exit 1
out=$BUILD/tsan
${TSAN_CC:-gcc} -O1 -g -fsanitize=thread -o "$out/batch" tests/batching/batch.c -lsqlite3 -lpthread -lm ||
  { echo "FAIL tsan_batching: driver does not build"; exit 1; }
status=0
for run in "gather BERTFILL_BATCH_GATHER=4" "natural BERTFILL_BATCHING=1"; do
  set -- $run
  log=$out/batch_$1.log
  env "$2" OPENBLAS_NUM_THREADS=${TSAN_BLAS_THREADS:-2} TSAN_OPTIONS="halt_on_error=0 exitcode=66 second_deadlock_stack=1" \
    "$out/batch" "$PWD/$out/bertfill" "$BUILD/models/tiny" "$BUILD/models/small" "$threads" "$calls" on \
    >"$log" 2>&1
  rc=$?
  races=$(grep -c '^WARNING: ThreadSanitizer' "$log")
  summary=$(tail -1 "$log")
  if [ $rc -eq 0 ] && [ "$races" -eq 0 ]; then
    echo "ok tsan_batching_$1 ($summary; 0 ThreadSanitizer reports)"
  else
    echo "FAIL tsan_batching_$1: exit $rc, $races ThreadSanitizer reports ($summary); log $log"
    grep -A14 '^WARNING: ThreadSanitizer' "$log" | head -40
    status=1
  fi
done
exit $status
