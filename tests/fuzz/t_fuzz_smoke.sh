#!/usr/bin/env bash
# t_fuzz_smoke.sh — a short run of every fuzz target (tests/fuzz/) in
# `make test`: the seed corpus and every regression input (past findings)
# are replayed through the targets built with AddressSanitizer + UBSan, and
# when clang's libFuzzer is available each target also fuzzes for a few
# seconds (FUZZ_SMOKE_SECONDS, default 3).  Without clang (CI without
# clang/libclang-rt-14-dev) the replay uses a plain main() built with gcc
# (tests/fuzz/replay.c) and the libFuzzer part is skipped.  The long runs are
# `make fuzz`.  FUZZ_REPLAY_GCC=1: the gcc replay as well;
# FUZZ_NO_LIBFUZZER=1: act as if clang were missing (the CI path).
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
secs=${FUZZ_SMOKE_SECONDS:-3}
targets="tokenizer json model sql"
export BF_FUZZ_MODELS=$BUILD/models
export OPENBLAS_NUM_THREADS=1
export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1
export UBSAN_OPTIONS=print_stacktrace=1
export TMPDIR=${TMPDIR:-/tmp}
if [ ! -d "$BUILD/models/tiny" ]; then echo "FAIL fuzz: no test models in $BUILD/models (make models)"; exit 1; fi

have_libfuzzer=0
probe=$(mktemp -d)
printf '#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return 0; }\n' >"$probe/p.c"
if [ -z "${FUZZ_NO_LIBFUZZER:-}" ] && command -v clang >/dev/null && clang -fsanitize=fuzzer,address,undefined -o "$probe/p" "$probe/p.c" 2>/dev/null; then
  have_libfuzzer=1
fi
rm -rf "$probe"

log=$(mktemp); trap 'rm -f "$log"' EXIT
if [ $have_libfuzzer = 1 ]; then
  if ! make -s -f tests/fuzz/fuzz.mk BUILD="$BUILD" libfuzzer >"$log" 2>&1; then
    echo "FAIL fuzz_build: libFuzzer targets do not build"; tail -20 "$log"; exit 1
  fi
  for t in $targets; do
    out=$(mktemp -d)
    regs=""; [ -d tests/fuzz/regressions/$t ] && regs=tests/fuzz/regressions/$t
    # -runs=0 first: every seed and regression input once, then fuzz a little
    # (every run writes its findings into $out, never into the working directory)
    if "$BUILD/fuzz/clang/fuzz_$t" -runs=0 -artifact_prefix="$out/" tests/fuzz/corpus/$t $regs >"$log" 2>&1 &&
       "$BUILD/fuzz/clang/fuzz_$t" -max_total_time="$secs" -timeout=20 -rss_limit_mb=3072 -max_len=65536 \
         -artifact_prefix="$out/" "$out" tests/fuzz/corpus/$t >>"$log" 2>&1; then
      n=$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$log" | tail -1)
      echo "ok fuzz_$t ($n runs in ${secs}s after replaying seeds and regressions)"
    else
      echo "FAIL fuzz_$t: $(grep -E 'ERROR|runtime error|invariant' "$log" | head -1)"
      grep -E 'ERROR|runtime error|invariant|#[0-9]+ 0x' "$log" | head -12
      mkdir -p "$BUILD/fuzz/findings/$t"
      for f in "$out"/crash-* "$out"/leak-* "$out"/timeout-* "$out"/oom-*; do
        [ -e "$f" ] && cp "$f" "$BUILD/fuzz/findings/$t/" && echo "  finding kept: $BUILD/fuzz/findings/$t/$(basename "$f")"
      done
    fi
    rm -rf "$out"
  done
fi
[ $have_libfuzzer = 1 ] && [ -z "${FUZZ_REPLAY_GCC:-}" ] && exit 0
[ $have_libfuzzer = 0 ] && echo "skip fuzz_libfuzzer: clang with libFuzzer not available (apt-get install clang libclang-rt-14-dev); replaying seeds and regressions with gcc instead"

# The gcc replay driver: seeds and regressions with ASan/UBSan, no clang
# needed (also with FUZZ_REPLAY_GCC=1).
if ! make -s -f tests/fuzz/fuzz.mk BUILD="$BUILD" replay >"$log" 2>&1; then
  echo "FAIL fuzz_replay_build: the replay drivers do not build"; tail -20 "$log"; exit 1
fi
for t in $targets; do
  if "$BUILD/fuzz/gcc/fuzz_$t" tests/fuzz/corpus/$t tests/fuzz/regressions/$t >"$log" 2>&1; then
    echo "ok fuzz_replay_$t ($(grep -o 'replayed [0-9]* inputs' "$log"))"
  else
    echo "FAIL fuzz_replay_$t: $(grep -E 'ERROR|runtime error|invariant' "$log" | head -1)"
    tail -15 "$log"
  fi
done
