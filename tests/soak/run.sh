#!/usr/bin/env bash
# run.sh — `make soak`: the long reliability runs, never part of `make test`.
#   1. memory: RSS / PSS of 1 and 4 processes with a bert-base-sized model, fp32 and int8
#      (tests/soak/memory.py; extra private memory per process < 5% of it)
#   2. threads on the bert-base-sized model (OpenBLAS GEMM sizes), results
#      identical to one thread (tests/reliability/threads.c)
#   3. ThreadSanitizer: the thread test with the extension built with
#      -fsanitize=thread (tests/reliability/tsan.sh)
#   4. many processes x many cache writes, WAL and rollback journal, and
#      SIGKILL mid-write (tests/python/t_multiprocess.py, larger)
#   5. out-of-memory: every allocation of a call failed in turn
#      (tests/reliability/oom.sh; also in make test)
#   6. a column of 200,000 rows (SOAK_ROWS) filled in one UPDATE ... FROM
#      fill_rows with the shipped model: time, encoder sequences per row,
#      peak RSS within 50 MB of a 2,000-row fill (tests/soak/rows.py)
#   7. the first call after bert_load against warm calls, fp32 and int8, cache
#      off and on (tests/soak/first_call.py: a table, measured only)
#   8. the machine-wide batcher: leaders SIGKILLed mid-batch for 10 minutes (SOAK_SHARED_SECONDS)
#      with 4 processes on the tiny test model: 0 wrong answers, 0 errors, no call without an
#      answer within the busy timeout, one shared file, and the RSS of a fifth process that is
#      never killed flat (< 4 MB growth after its first tenth) (tests/python/t_shared_batch.py leader_kill)
# Prints ok / FAIL / skip lines like a test suite; exits 1 on any FAIL.
set -u
cd "$(dirname "$0")/../.."
export BUILD=${BUILD:-build}
export BERTFILL_EXT=${BERTFILL_EXT:-$PWD/bertfill}
PY=${PYTHON:-/usr/bin/python3}
log=$(mktemp); trap 'rm -f "$log"' EXIT
fails=0
step() {   # step NAME command...
  local name=$1; shift
  echo "== $name"
  local t0=$(date +%s)
  "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  if [ "$rc" -ne 0 ] && ! grep -q '^FAIL ' "$log"; then echo "FAIL $name: exit status $rc"; fi
  grep -q '^FAIL ' "$log" && fails=$((fails + 1))
  [ "$rc" -ne 0 ] && ! grep -q '^FAIL ' "$log" && fails=$((fails + 1))
  echo "   ($name: $(( $(date +%s) - t0 ))s)"
}
base=$BUILD/models/bert-base-random
if [ ! -e "$base/model.safetensors" ]; then
  $PY model/gen_random_model.py "$base" --layers 12 --hidden 768 --heads 12 --intermediate 3072 \
    --vocab-size 21128 --seed 1 || exit 1
fi
$PY model/make_test_models.py "$BUILD/models" >/dev/null || exit 1
mkdir -p "$BUILD/reliability"
cc -O2 -g -Wall -o "$BUILD/reliability/threads" tests/reliability/threads.c -lsqlite3 -lpthread -lm || exit 1

step memory $PY tests/soak/memory.py "$base"
threads_base() {
  if "$BUILD/reliability/threads" "$BERTFILL_EXT" "$base" "${SOAK_THREADS:-8}" "${SOAK_CALLS:-25}" 3 >"$log.t" 2>&1
  then echo "ok threads_bert_base ($(tail -1 "$log.t"))"
  else echo "FAIL threads_bert_base: $(tail -1 "$log.t")"; head -20 "$log.t"; fi
  rm -f "$log.t"
}
step threads_bert_base threads_base
step tsan bash tests/reliability/tsan.sh small "${SOAK_TSAN_THREADS:-8}" "${SOAK_TSAN_CALLS:-100}"
step multiprocess env MP_PROCS=${SOAK_PROCS:-8} MP_CALLS=${SOAK_PROC_CALLS:-1000} MP_TEXTS=3000 $PY tests/python/t_multiprocess.py
step oom env OOM_THREADS_SECONDS=60 bash tests/reliability/oom.sh
step rows $PY tests/soak/rows.py --rows "${SOAK_ROWS:-200000}"
step first_call $PY tests/soak/first_call.py "$base"
step shared_batch env SB_KILL_ROUNDS=1000000 SB_KILL_SECONDS=${SOAK_SHARED_SECONDS:-600} \
  $PY tests/python/t_shared_batch.py leader_kill requester_kill
echo "soak: $fails step(s) failed"
[ "$fails" -eq 0 ]
