#!/usr/bin/env bash
# tsan.sh — the thread test (threads.c) under ThreadSanitizer: the extension
# (every ext/*.c) and the driver built with -fsanitize=thread into
# $BUILD/tsan/, run with THREADS threads x CALLS calls x 3 rounds on a test
# model, in both modes of threads.c (exact: batching off, one encoder slot
# per thread; batched: dynamic batching, leader/follower merging).  Debian's libsqlite3 is not instrumented (its mutexes are
# intercepted by TSan).  Part of `make soak`; prints "ok tsan_threads" or
# "FAIL tsan_threads: ..." with the first report.
#   bash tests/reliability/tsan.sh [MODEL] [THREADS] [CALLS]   (small 8 60)
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
model=${1:-small}; threads=${2:-8}; calls=${3:-60}
out=$BUILD/tsan
mkdir -p "$out/obj"
CC=${TSAN_CC:-gcc}
flags="-O1 -g -march=x86-64-v2 -std=c11 -D_GNU_SOURCE -fPIC -Iext/sqlite -Iext/engine -fsanitize=thread"
objs=""
for src in ext/engine/*.c ext/engine/kernels/*.c ext/sqlite/*.c; do
  o=$out/obj/$(basename "$(dirname "$src")")_$(basename "$src" .c).o
  if [ ! -e "$o" ] || [ "$src" -nt "$o" ] || [ -n "$(find ext -name '*.h' -newer "$o")" ]; then
    $CC $flags -c "$src" -o "$o" || { echo "FAIL tsan_threads: $src does not build with -fsanitize=thread"; exit 1; }
  fi
  objs="$objs $o"
done
$CC $flags -shared -o "$out/bertfill.so" $objs -lutf8proc -ldl -lm -lpthread || { echo "FAIL tsan_threads: link"; exit 1; }
$CC $flags -o "$out/threads" tests/reliability/threads.c -lsqlite3 -lpthread -lm || { echo "FAIL tsan_threads: driver"; exit 1; }
${PYTHON:-/usr/bin/python3} model/make_test_models.py "$BUILD/models" "$model" >/dev/null
status=0
for mode in exact batched; do
log=$out/threads-$mode.log
# Threads per encoder run (TSAN_BLAS_THREADS, default 2): the engine's own
# pool (matrix kernels, attention heads, row loops) runs with its helper
# threads.  OpenBLAS is not instrumented, but on an AVX-512 CPU it is not
# called; elsewhere set TSAN_BLAS_THREADS=1 to keep its threads out.
THREADS_MODE=$mode BF_THREADS_RSS_SLACK_MB=100000 OPENBLAS_NUM_THREADS=${TSAN_BLAS_THREADS:-2} TSAN_OPTIONS="halt_on_error=0 exitcode=66 second_deadlock_stack=1" \
  "$out/threads" "$PWD/$out/bertfill" "$BUILD/models/$model" "$threads" "$calls" 3 >"$log" 2>&1
rc=$?
races=$(grep -c '^WARNING: ThreadSanitizer' "$log")
summary=$(grep '^threads ' "$log" | tail -1)
if [ $rc -eq 0 ] && [ "$races" -eq 0 ]; then
  echo "ok tsan_threads_$mode ($model: $summary; 0 ThreadSanitizer reports)"
else
  echo "FAIL tsan_threads_$mode: exit $rc, $races ThreadSanitizer reports ($summary); log $log"
  grep -A14 '^WARNING: ThreadSanitizer' "$log" | head -60
  status=1
fi
done
exit $status
