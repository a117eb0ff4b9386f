#!/usr/bin/env bash
# t_c_threads.sh — many threads, each with its own connection, calling
# bert_fill and fill_candidates at once on one shared model: every result
# identical to a single-threaded run (exact: batching off, one encoder slot
# per thread; batched: dynamic batching on one slot, scores to 1e-5), scratch
# memory bounded (see tests/reliability/threads.c).  The ThreadSanitizer run
# of the same driver is tests/reliability/tsan.sh (make soak).  Under
# `make valgrind` ($BF_WRAP set) smaller runs on the tiny model; under
# `make asan` the driver and the extension are the plain builds.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
EXT=${BERTFILL_EXT:-./bertfill}
case "$EXT" in /*) ;; *) EXT=$PWD/$EXT ;; esac
if [ ! -e "$EXT.so" ] && [ ! -e "$EXT" ]; then echo "FAIL threads: extension $EXT.so not built"; exit 1; fi
mkdir -p "$BUILD/reliability"
bin=$BUILD/reliability/threads
if ! ${CC:-cc} -O2 -g -Wall -o "$bin" tests/reliability/threads.c -lsqlite3 -lpthread -lm; then
  echo "FAIL threads_build: tests/reliability/threads.c"; exit 1
fi
runs=("exact tiny 8 150" "exact small 12 40" "exact tiny-legacy 4 100" "batched small 12 40")
if [ -n "${BF_WRAP:-}" ]; then
  runs=("exact tiny 4 30" "batched tiny 4 30")
  export BF_THREADS_RSS_SLACK_MB=1000       # valgrind's own memory grows
fi
for run in "${runs[@]}"; do
  set -- $run
  name=threads_$1_$2
  if [ ! -d "$BUILD/models/$2" ]; then echo "FAIL $name: no model $BUILD/models/$2 (make models)"; continue; fi
  out=$(THREADS_MODE=$1 ${BF_WRAP:-} "$bin" "$EXT" "$BUILD/models/$2" "$3" "$4" 3 2>&1)
  if [ $? -eq 0 ]; then
    echo "ok $name ($(echo "$out" | tail -1))"
  else
    echo "FAIL $name: $(echo "$out" | tail -1)"
    echo "$out" | head -20
  fi
done
