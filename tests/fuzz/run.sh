#!/usr/bin/env bash
# run.sh — `make fuzz`: every fuzz target under libFuzzer (clang,
# -fsanitize=fuzzer,address,undefined) for a bounded time.
#
#   bash tests/fuzz/run.sh [SECONDS_PER_TARGET] [TARGET ...]     (default 60, all)
#
# Targets (tests/fuzz/fuzz_NAME.c): tokenizer, json, model, sql.  Each starts
# from its seeds (tests/fuzz/corpus/NAME) and the regression inputs
# (tests/fuzz/regressions/NAME); new interesting inputs go to a working
# corpus in $BUILD/fuzz/corpus/NAME (kept between runs, never committed),
# findings (crash-*, leak-*, timeout-*, oom-*) to $BUILD/fuzz/findings/NAME/.
# A finding: fix it, then copy the input to tests/fuzz/regressions/NAME/ so
# that `make test` (tests/fuzz/t_fuzz_smoke.sh) replays it from then on.
# Prints per target the executions, exec/s, coverage and findings; exits 1
# when anything was found.  Needs clang and its libFuzzer runtime (Debian 12:
# apt-get install clang libclang-rt-14-dev).
#   FUZZ_JOBS=N      run N targets at once (default 1)
#   FUZZ_ARGS=...    extra libFuzzer flags
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
secs=${1:-60}; shift || true
targets=${*:-tokenizer json model sql}
export BF_FUZZ_MODELS=${BF_FUZZ_MODELS:-$BUILD/models}
export OPENBLAS_NUM_THREADS=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}

${PYTHON:-/usr/bin/python3} model/make_test_models.py "$BUILD/models" tiny tiny-legacy >/dev/null || exit 1
if ! make -s -f tests/fuzz/fuzz.mk BUILD="$BUILD" libfuzzer; then
  echo "fuzz: cannot build the libFuzzer targets (needs clang and libclang-rt-14-dev)"; exit 1
fi

status=0
printf '%-10s %10s %8s %8s %8s %s\n' target execs exec/s cov corpus findings
for t in $targets; do
  work=$BUILD/fuzz/corpus/$t; found=$BUILD/fuzz/findings/$t; log=$BUILD/fuzz/$t.log
  mkdir -p "$work" "$found"
  regs=""; [ -d tests/fuzz/regressions/$t ] && regs=tests/fuzz/regressions/$t
  # fuzz_model writes a scratch model directory per input; keep it in RAM
  TMPDIR=${FUZZ_TMP:-/dev/shm} "$BUILD/fuzz/clang/fuzz_$t" -max_total_time="$secs" -timeout=20 \
    -rss_limit_mb=3072 -max_len=65536 -print_final_stats=1 -artifact_prefix="$found/" \
    ${FUZZ_ARGS:-} "$work" tests/fuzz/corpus/$t $regs >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | cut -d' ' -f2)
  ncorp=$(ls "$work" | wc -l)
  nfound=$(ls "$found" | wc -l)
  printf '%-10s %10s %8s %8s %8s %s\n' "$t" "${execs:-?}" "${rate:-?}" "${cov:-?}" "$ncorp" "$nfound"
  if [ "$rc" -ne 0 ] || [ "$nfound" -ne 0 ]; then
    status=1
    echo "  finding(s) in $found; log $log:"
    grep -E 'ERROR|runtime error|invariant|SUMMARY' "$log" | head -5 | sed 's/^/    /'
  fi
done
exit $status
