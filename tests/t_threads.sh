#!/usr/bin/env bash
# t_threads.sh — many threads, each with its own connection, calling
# bert_fill and fill_candidates at once on one shared model: every result
# identical to a single-threaded run, scratch memory bounded (see
# tests/reliability/threads.c).  The ThreadSanitizer run of the same driver
# is tests/reliability/tsan.sh (make soak).
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
EXT=${BERTFILL_EXT:-./bertfill}
case "$EXT" in /*) ;; *) EXT=$PWD/$EXT ;; esac
if [ ! -e "$EXT.so" ] && [ ! -e "$EXT" ]; then echo "FAIL threads: extension $EXT.so not built"; exit 1; fi
mkdir -p "$BUILD/reliability"
bin=$BUILD/reliability/threads
if ! ${CC:-cc} -O2 -g -Wall -o "$bin" tests/reliability/threads.c -lsqlite3 -lpthread; then
  echo "FAIL threads_build: tests/reliability/threads.c"; exit 1
fi
for run in "tiny 8 150" "small 12 40" "tiny-legacy 4 100"; do
  set -- $run
  if [ ! -d "$BUILD/models/$1" ]; then echo "FAIL threads_$1: no model $BUILD/models/$1 (make models)"; continue; fi
  out=$(${BF_WRAP:-} "$bin" "$EXT" "$BUILD/models/$1" "$2" "$3" 3 2>&1)
  if [ $? -eq 0 ]; then
    echo "ok threads_$1 ($(echo "$out" | tail -1))"
  else
    echo "FAIL threads_$1: $(echo "$out" | tail -1)"
    echo "$out" | head -20
  fi
done
