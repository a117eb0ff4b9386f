#!/usr/bin/env bash
# t_batching.sh — dynamic batching (ext/sqlite/batcher.c): threads with their
# own connections on two models, different k, bad texts in between; results
# compared with single-threaded calls (tests/batching/batch.c says how).
#   batching_off      bert_batching(0): bit-identical, never more than one
#                     sequence per encoder run
#   batching_gather   BERTFILL_BATCH_GATHER (test hook: a leader waits until
#                     that many calls are queued) so merged batches are
#                     certain; the stats must show them
#   batching_natural  no hook: 16 threads on one encoder slot; merged runs
#                     happen or not, results must match either way
#   batching_fallback merged runs made to fail (LD_PRELOAD bigalloc.so refuses
#                     their larger scratch buffers): every sequence is rerun
#                     alone and every call succeeds
#   batching_sql      bert_batching() is DIRECTONLY; bert_debug shows it
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
EXT=${BERTFILL_EXT:-./bertfill}
case "$EXT" in /*) ;; *) EXT=$PWD/$EXT ;; esac
if [ ! -e "$EXT.so" ] && [ ! -e "$EXT" ]; then echo "FAIL batching: extension $EXT.so not built"; exit 1; fi
for m in tiny small; do
  if [ ! -d "$BUILD/models/$m" ]; then echo "FAIL batching: no model $BUILD/models/$m (make models)"; exit 1; fi
done
mkdir -p "$BUILD/batching"
bin=$BUILD/batching/batch
if ! ${CC:-cc} -O2 -g -Wall -o "$bin" tests/batching/batch.c -lsqlite3 -lpthread -lm -ldl; then
  echo "FAIL batching_build: tests/batching/batch.c"; exit 1
fi
if ! ${CC:-cc} -O2 -g -Wall -shared -fPIC -o "$BUILD/batching/bigalloc.so" tests/batching/bigalloc.c -ldl; then
  echo "FAIL batching_build: tests/batching/bigalloc.c"; exit 1
fi
A=$BUILD/models/tiny; B=$BUILD/models/small
run() {  # name env... -- args...
  local name=$1; shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local out
  out=$(env "${envs[@]}" ${BF_WRAP:-} "$bin" "$EXT" "$A" "$B" "$@" 2>&1)
  if [ $? -eq 0 ]; then
    echo "ok $name ($(echo "$out" | tail -1))"
  else
    echo "FAIL $name: $(echo "$out" | tail -1)"
    echo "$out" | head -20
  fi
}
run batching_off BERTFILL_BATCHING=1 -- 8 42 off
run batching_gather BERTFILL_BATCH_GATHER=3 -- 8 42 on --expect-merged
run batching_natural BERTFILL_BATCHING=1 -- 16 42 on
shim=$(cd "$BUILD/batching" && pwd)/bigalloc.so
# One OpenBLAS thread: where bertfill's own kernels do not run (no AVX-512),
# OpenBLAS does the products, and its threaded driver mallocs per call and
# exit()s the process when that fails; single-threaded it uses its
# preallocated buffer, so only bertfill's own scratch meets the shim.
run batching_fallback LD_PRELOAD=$shim BERTFILL_BATCH_GATHER=4 OPENBLAS_NUM_THREADS=1 -- 8 28 fallback

# The setting from SQL: DIRECTONLY, shown by bert_debug, environment default.
if command -v sqlite3 >/dev/null; then
  sq() { BERTFILL_MODEL=$A sqlite3 -batch -cmd ".load $EXT" :memory: "$@" 2>&1; }
  out=$(BERTFILL_BATCHING=0 sq "select bert_batching(), json_extract(bert_debug(), '\$.batching.on');")
  [ "$out" = "0|0" ] && echo "ok batching_env_off" || echo "FAIL batching_env_off: $out"
  out=$(sq "select bert_batching(), json_extract(bert_debug(), '\$.batching.max_seqs');")
  [ "$out" = "1|32" ] && echo "ok batching_default_on" || echo "FAIL batching_default_on: $out"
  out=$(sq "create view v as select bert_batching(0) b;" "select * from v;")
  case "$out" in *"unsafe use of bert_batching()"*) echo "ok batching_directonly";;
    *) echo "FAIL batching_directonly: $out";; esac
else
  echo "skip batching_sql: no sqlite3 shell"
fi
