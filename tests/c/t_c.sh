#!/usr/bin/env bash
# t_c.sh — the C tests (tests/c/*.c, built by `make test-bins`; the models of
# `make models`), one unit each, run under $BF_WRAP (valgrind in `make
# valgrind`) when it is set.  Each unit prints its checks' lines ("ok ...",
# "FAIL ...", "skip ...") and exits non-zero when it failed.
#   bash tests/c/t_c.sh              every unit, one after the other
#   bash tests/c/t_c.sh model gemm   those units
#   bash tests/c/t_c.sh --list       the names of the units
# tests/run.sh runs each unit as a suite of its own ("c/t_c.sh model"), with
# its own time limit; BF_ONLY_C=1 (make asan, make valgrind) runs only these.
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}

# built NAME: bin=$BUILD/tests/NAME when that C test is built; else a FAIL
# line saying how to build it, and false.
built() {
  bin=$BUILD/tests/$1
  [ -x "$bin" ] && return 0
  echo "FAIL $1: $bin not built (run make test-bins)"
  return 1
}

# Unit tests of dynamic batching (ext/sqlite/batcher.c) without SQL:
# tests/c/test_batcher.c, on the tiny and small test models.  OpenBLAS runs
# single-threaded: where bertfill's own kernels do not run (no AVX-512) it
# does the products, and the test's many threads need no more.
unit_batcher() (
  built test_batcher || exit 1
  for m in tiny small; do
    if [ ! -d "$BUILD/models/$m" ]; then echo "FAIL test_batcher: no model $BUILD/models/$m (make models)"; exit 1; fi
  done
  # Under valgrind ($BF_WRAP) the case that runs over 2048 tokens at once is skipped.
  quick=${BF_WRAP:+1}
  BF_BATCHER_QUICK=$quick OPENBLAS_NUM_THREADS=1 ${BF_WRAP:-} "$bin" "$BUILD/models/tiny" "$BUILD/models/small"
)

# Unit tests of the SQLite layer's messages (ext/sqlite/errors.c): always
# valid UTF-8, user input escaped and cut: tests/c/test_errors.c.
unit_errors() (
  built test_errors || exit 1
  ${BF_WRAP:-} "$bin"
)

# The forward pass (bf_fill) against the goldens of model/reference.py.
# Needs `make test-bins models`.  First checks that each test model is the one
# its golden was computed from (sha256 of model.safetensors), then runs
# $BUILD/tests/test_forward over every (model, golden) pair, under $BF_WRAP,
# once per kernel setting (kernels/kernels.h): as the CPU allows (its best kernels), with
# BERTFILL_KERNELS=avx2 (the AVX2 kernels on an AVX-512 CPU; skipped where the
# default run used them already) and with BERTFILL_KERNELS=openblas
# (the portable path: plain C loops and OpenBLAS).
unit_forward() (
  args=()
  n=0
  bad=0
  # forward_NAME.json: fp32 goldens; int8_NAME.json: the int8 mode's (the
  # model is then loaded as int8; model/reference.py --int8)
  for g in tests/golden/forward_*.json tests/golden/int8_*.json; do
    [ -e "$g" ] || continue
    n=$((n + 1))
    name=$(basename "$g" .json); name=${name#forward_}; name=${name#int8_}
    d=$BUILD/models/$name
    if [ ! -f "$d/model.safetensors" ]; then
      echo "FAIL forward model $name: $d/model.safetensors missing (run make models)"; bad=1; continue
    fi
    want=$(sed -n 's/^ *"safetensors_sha256": *"\([0-9a-f]*\)".*/\1/p' "$g")
    have=$(sha256sum "$d/model.safetensors" | cut -d' ' -f1)
    if [ "$want" != "$have" ]; then
      echo "FAIL forward model $name: golden outdated or generator changed: rerun model/reference.py" \
           "($d/model.safetensors has sha256 $have, $g was made from $want)"
      bad=1; continue
    fi
    echo "ok forward model $name is the golden's (sha256)"
    # valgrind runs float code ~50x slower than the CPU: 4 MB "small" takes
    # minutes there, so under valgrind only the tiny models run (ASan runs all)
    if [[ "${BF_WRAP:-}" == *valgrind* ]] && [ "$(stat -c %s "$d/model.safetensors")" -gt 1000000 ]; then
      echo "skip forward $name under valgrind: too slow there (runs natively and under ASan)"; continue
    fi
    args+=("$d" "$g")
  done
  if [ "$n" -eq 0 ]; then echo "FAIL forward: no tests/golden/forward_*.json"; exit 1; fi
  built test_forward || exit 1
  [ "${#args[@]}" -gt 0 ] || exit 1
  out=$(${BF_WRAP:-} "$bin" "${args[@]}")
  rc=$?
  echo "$out"
  # a crash (no FAIL line of its own) must still count
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 1 ]; then echo "FAIL forward: test_forward exited with status $rc"; fi
  # the other kernel settings against the same goldens
  prc=0
  for setting in BERTFILL_KERNELS=avx2 BERTFILL_KERNELS=openblas; do
    if [ "$setting" = BERTFILL_KERNELS=avx2 ] && [[ $out == *", avx2 kernels"* ]]; then
      echo "# $setting: the default run used the AVX2 kernels"; continue
    fi
    env "$setting" ${BF_WRAP:-} "$bin" "${args[@]}" | sed -E "s/^(ok|FAIL|skip) /\1 [$setting] /"
    src=${PIPESTATUS[0]}
    if [ "$src" -ne 0 ] && [ "$src" -ne 1 ]; then echo "FAIL forward [$setting]: test_forward exited with status $src"; fi
    [ "$src" -ne 0 ] && prc=$src
  done
  [ "$rc" -ne 0 ] && exit "$rc"
  [ "$prc" -ne 0 ] && exit "$prc"
  exit "$bad"
)

# The matrix kernels of ext/engine/kernels/avx512.c and kernels/avx2.c, run by
# gemm.c's job splitter, against a plain double loop: tests/c/test_gemm.c, once
# per setting of BERTFILL_KERNELS (kernels/kernels.h), so that every kernel this
# CPU has is checked: the best it has (default), AVX2 (on an AVX-512 CPU;
# skipped where the default run checked AVX2 already), and none (gemm_xwt must
# hand the work back: GEMM_NO_KERNEL), also through the older BERTFILL_NO_AVX512=1.
unit_gemm() (
  built test_gemm || exit 1
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
)

# Unit tests of the memo cache's LRU (ext/sqlite/cache.c): tests/c/test_lru.c.
unit_lru() (
  built test_lru || exit 1
  ${BF_WRAP:-} "$bin"
)

# Unit tests of the machine-wide encoder slots (ext/sqlite/machine_guard.c),
# with real processes and SIGKILL: tests/c/test_machine_guard.c.
unit_machine_guard() (
  built test_machine_guard || exit 1
  ${BF_WRAP:-} "$bin"
)

# Model loading: tests/c/test_json.c (the JSON reader; with the shared
# bert-base-chinese files when ../shared/data exists) and
# tests/c/test_model_load.c on tiny generated models and broken copies of
# them (made by tests/c/make_broken_models.py into $BUILD/model-load/).
# C programs run under $BF_WRAP (valgrind in `make valgrind`).
unit_model() (
  PYTHON=${PYTHON:-/usr/bin/python3}
  rc=0
  if ! built test_json; then rc=1
  else
    shared=../shared/data
    if [ -d "$shared/bert-base-chinese" ]; then ${BF_WRAP:-} "$bin" "$shared" || rc=1
    else ${BF_WRAP:-} "$bin" || rc=1; fi
  fi
  built test_model_load || exit 1
  cases=$BUILD/model-load
  if ! "$PYTHON" tests/c/make_broken_models.py "$cases" "$BUILD/models" >"$BUILD/model-load.log" 2>&1; then
    echo "FAIL make_broken_models: $(tail -n 5 "$BUILD/model-load.log" | tr '\n' ' ')"
    exit 1
  fi
  ${BF_WRAP:-} "$bin" "$cases" || rc=1
  exit $rc
)

# The engine's thread pool (ext/engine/pool.c): tests/c/test_pool.c; its
# thread setting's default without the variables OpenBLAS reads, then with
# each of them (BF_TEST_THREADS: what the test expects, capped at the cores).
unit_pool() (
  built test_pool || exit 1
  rc=0
  env -u OPENBLAS_NUM_THREADS -u GOTO_NUM_THREADS -u OMP_NUM_THREADS ${BF_WRAP:-} "$bin" || rc=1
  for setting in "OPENBLAS_NUM_THREADS=1 BF_TEST_THREADS=1" "GOTO_NUM_THREADS=1 BF_TEST_THREADS=1" \
                 "OPENBLAS_NUM_THREADS=x OMP_NUM_THREADS=1,2 BF_TEST_THREADS=1" \
                 "OPENBLAS_NUM_THREADS=4096 BF_TEST_THREADS=4096"; do
    env -u OPENBLAS_NUM_THREADS -u GOTO_NUM_THREADS -u OMP_NUM_THREADS $setting ${BF_WRAP:-} "$bin" |
      grep -E '^(FAIL|skip)|thread setting' | sed -E "s/^(ok|FAIL|skip) /\1 [$setting] /"
    [ "${PIPESTATUS[0]}" -ne 0 ] && rc=1
  done
  exit $rc
)

# The int8 products of ext/engine/qgemm.c: tests/c/test_qgemm.c (every
# kernel the CPU has against the portable one and the exact math).
unit_bf16() (
  built test_bf16 || exit 1
  ${BF_WRAP:-} "$bin"
  rc=$?
  # BERTFILL_KERNELS=avx2: the portable bf16 kernel through gemm_xwt_bf16
  BERTFILL_KERNELS=avx2 ${BF_WRAP:-} "$bin" | sed -E 's/^(ok|FAIL|skip) /\1 [portable] /'
  [ "${PIPESTATUS[0]}" -ne 0 ] && exit 1
  exit $rc
)

unit_qgemm() (
  built test_qgemm || exit 1
  ${BF_WRAP:-} "$bin"
  rc=$?
  # BERTFILL_NO_AVX512=1 must rule out the AVX-512 kernel (checks only that)
  BERTFILL_NO_AVX512=1 ${BF_WRAP:-} "$bin" | sed -E 's/^(ok|FAIL|skip) /\1 [no AVX-512] /'
  [ "${PIPESTATUS[0]}" -ne 0 ] && exit 1
  exit $rc
)

# Unit tests of the stats histograms and counters (ext/sqlite/stats.c): tests/c/test_stats.c.
unit_stats() (
  built test_stats || exit 1
  ${BF_WRAP:-} "$bin"
)

# many threads, each with its own connection, calling
# bert_fill and fill_candidates at once on one shared model: every result
# identical to a single-threaded run (exact: batching off, one encoder slot
# per thread; batched: dynamic batching on one slot, scores to 1e-5), scratch
# memory bounded (see tests/reliability/threads.c).  The ThreadSanitizer run
# of the same driver is tests/reliability/tsan.sh (make soak).  Under
# `make valgrind` ($BF_WRAP set) smaller runs on the tiny model; under
# `make asan` the driver and the extension are the plain builds.
unit_threads() (
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
)

# The tokenizer (ext/engine/tokenizer.c) against golden ids from an independent reference
# (tests/golden/tokenizer/make_golden.mjs, @huggingface/transformers), load errors,
# invalid UTF-8 and random input.  Cases on the real bert-base-chinese vocabulary are
# skipped when ../shared/data/bert-base-chinese is absent.
unit_tokenizer() (
  built test_tokenizer || exit 1
  work=$BUILD/tokenizer_dirs
  rm -rf "$work" && mkdir -p "$work"
  ${BF_WRAP:-} "$bin" tests/golden/tokenizer_golden.tsv tests/golden/tokenizer_small \
    "$(pwd)/../shared/data/bert-base-chinese" "$work"
)

# Unit tests of the shared helpers (ext/engine/util.c): tests/c/test_util.c.
unit_util() (
  built test_util || exit 1
  ${BF_WRAP:-} "$bin"
)

# The confusion sets of the spelling functions (ext/engine/confusion.c):
# tests/c/test_confusion.c (known pairs and their kinds, the count and order
# rules, characters outside the table); then, where Debian's unicode-data and
# ../shared/data/bert-base-chinese are installed, the committed table
# ext/engine/confusion_table.inc against what model/build_confusion.py builds
# from them, and every character's set against the script's own reading of
# the same data (--dump on both sides).
unit_confusion() (
  built test_confusion || exit 1
  ${BF_WRAP:-} "$bin"
  rc=$?
  vocab=../shared/data/bert-base-chinese/vocab.txt
  if [ ! -e /usr/share/unicode/Unihan_Readings.txt.bz2 ] && [ ! -e /usr/share/unicode/Unihan_Readings.txt ]; then
    echo "skip confusion: table built from Unihan: Debian's unicode-data is not installed (make test-deps)"
    echo "skip confusion: every set against model/build_confusion.py: unicode-data is not installed"
    exit $rc
  fi
  if [ ! -e "$vocab" ]; then
    echo "skip confusion: table built from Unihan: $vocab is absent"
    echo "skip confusion: every set against model/build_confusion.py: $vocab is absent"
    exit $rc
  fi
  out=$(${PYTHON:-/usr/bin/python3} model/build_confusion.py --check 2>&1)
  if [ $? -eq 0 ]; then echo "ok confusion: table built from Unihan: $out"
  else echo "FAIL confusion: table built from Unihan: $out (run /usr/bin/python3 model/build_confusion.py)"; rc=1; fi
  tmp=$(mktemp -d)
  ${BF_WRAP:-} "$bin" --dump >"$tmp/c" && ${PYTHON:-/usr/bin/python3} model/build_confusion.py --dump >"$tmp/py"
  lines=$(wc -l <"$tmp/py")
  if [ "$lines" -gt 7000 ] && cmp -s "$tmp/c" "$tmp/py"; then echo "ok confusion: every set against model/build_confusion.py ($lines characters)"
  else echo "FAIL confusion: every set against model/build_confusion.py: $(diff "$tmp/c" "$tmp/py" | head -3 | tr '\n' ' ')"; rc=1; fi
  rm -rf "$tmp"
  exit $rc
)

units=(batcher bf16 confusion errors forward gemm lru machine_guard model pool qgemm stats threads tokenizer util)
if [ "${1:-}" = --list ]; then
  printf '%s\n' "${units[@]}"
  exit 0
fi
[ $# -gt 0 ] || set -- "${units[@]}"
rc=0
for u in "$@"; do
  if ! declare -F "unit_$u" >/dev/null; then
    echo "FAIL c.$u: no such C test (bash tests/c/t_c.sh --list)"
    rc=1
    continue
  fi
  "unit_$u" || rc=1
done
exit $rc
