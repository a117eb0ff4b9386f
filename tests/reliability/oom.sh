#!/usr/bin/env bash
# oom.sh — builds the allocation-failure shim (failmalloc.c) and the driver
# (oom.c) and runs it: every allocation of each scenario's call fails in
# turn (OOM_STEP=k: every k-th past the 50th; default 1 = all); then
# oom_threads.c: 8 threads in batched encoder runs while allocations fail at
# random for OOM_THREADS_SECONDS (default 3).  Prints
# "ok oom_SCENARIO (...)" or "FAIL oom_SCENARIO: ..." per scenario (a
# failure that is not out-of-memory, a wrong result, a leaked block).  (Not
# under valgrind or ASan: their allocators bypass the shim; a scenario that
# counted no allocation fails.)
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
EXT=${BERTFILL_EXT:-./bertfill}
case "$EXT" in /*) ;; *) EXT=$PWD/$EXT ;; esac
out=$BUILD/reliability
mkdir -p "$out"
cc -O1 -g -shared -fPIC -o "$out/failmalloc.so" tests/reliability/failmalloc.c -ldl || { echo "FAIL oom_build: failmalloc.c"; exit 1; }
cc -O1 -g -Wall -o "$out/oom" tests/reliability/oom.c -lsqlite3 -ldl || { echo "FAIL oom_build: oom.c"; exit 1; }
cc -O1 -g -Wall -o "$out/oom_threads" tests/reliability/oom_threads.c -lsqlite3 -ldl -lpthread -lm ||
  { echo "FAIL oom_build: oom_threads.c"; exit 1; }
for m in tiny tiny-legacy small; do
  [ -d "$BUILD/models/$m" ] || { echo "FAIL oom: no model $BUILD/models/$m (make models)"; exit 1; }
done
log=$(mktemp); trap 'rm -f "$log"' EXIT
# BERTFILL_WARM_UP=0: the warm-up thread a load starts (model.c) allocates
# while the next call runs, which the per-call block counts would see
BERTFILL_WARM_UP=0 LD_PRELOAD=$PWD/$out/failmalloc.so OPENBLAS_NUM_THREADS=1 "$out/oom" "$EXT" \
  "$BUILD/models/tiny" "$BUILD/models/tiny-legacy" "${OOM_STEP:-1}" >"$log" 2>&1
rc=$?
for s in fill candidates tokenize prefill rows load first_use; do
  line=$(grep "^$s " "$log")
  if [ -z "$line" ]; then echo "FAIL oom_$s: no result (the driver died? exit $rc)"; continue; fi
  if echo "$line" | grep -qE "^$s +0 allocations"; then
    echo "FAIL oom_$s: no allocation was counted (the shim is not in effect)"
  elif echo "$line" | grep -q ' 0 blocks leaked, 0 other errors, 0 wrong$'; then
    echo "ok oom_$s ($(echo "$line" | sed "s/^$s *//"))"
  else
    echo "FAIL oom_$s: $line"
  fi
done
if [ $rc -ne 0 ]; then echo "FAIL oom_driver: exit status $rc"; grep -v '^[a-z_]* .*allocations per call' "$log" | head -30; fi
# Threads sharing batched encoder runs while allocations fail at random.
if LD_PRELOAD=$PWD/$out/failmalloc.so OPENBLAS_NUM_THREADS=1 timeout 120 "$out/oom_threads" "$EXT" \
     "$BUILD/models/small" 8 "${OOM_THREADS_SECONDS:-3}" >"$log" 2>&1; then
  echo "ok oom_threads_batched ($(tail -1 "$log"))"
else
  echo "FAIL oom_threads_batched: $(tail -2 "$log" | tr '\n' ' ')"
fi
exit 0
