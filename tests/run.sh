#!/usr/bin/env bash
# Runs every test suite: tests/*/t_*.sh and tests/*/t_*.py (with /usr/bin/python3),
# those of tests/project (the checks of the project itself, cheap) first, then
# the others sorted by path; tests/README.md is the map of the folders.  A suite
# is named by its path under tests/ ("python/t_rows.py").
# A suite prints one line per check: "ok NAME", "FAIL NAME: why" or "skip NAME: why".
# A suite that exits non-zero without printing FAIL counts as one failure.
# tests/c/t_c.sh holds the C tests: each of its units (t_c.sh --list) runs as
# a suite of its own, "c/t_c.sh UNIT".
# Ends with the line "N passed, N failed, N skipped"; exits 1 if anything failed.
#   BF_ONLY_C=1   run only the C tests (the units of tests/c/t_c.sh)
#   BF_WRAP=cmd   prefix for C test programs (valgrind); suites read it themselves
set -u
cd "$(dirname "$0")/.."
export BUILD=${BUILD:-build}
export BERTFILL_EXT=${BERTFILL_EXT:-./bertfill}
export PYTHON=${PYTHON:-/usr/bin/python3}
pass=0; fail=0; skip=0
log=$(mktemp)
# The machine-wide batcher's queues (shared_batch.c) of this run in a folder
# of its own: processes of another run, or of a service on this machine,
# that use the same test models never join this run's batches.
if [ -z "${BERTFILL_SHARED_BATCH_DIR:-}" ]; then
  BERTFILL_SHARED_BATCH_DIR=$(mktemp -d); export BERTFILL_SHARED_BATCH_DIR; own_shared=1
fi
# The per-user cache of derived files (a read-only model's) in a folder of
# this run's too: nothing of the tests goes into the real ~/.cache/bertfill.
if [ -z "${BERTFILL_CACHE_DIR:-}" ]; then
  BERTFILL_CACHE_DIR=$(mktemp -d); export BERTFILL_CACHE_DIR; own_cache=1
fi
# make dist once for the suites of tests/dist (dist_lib.sh's dist_build).
BF_DIST_SHARED=$(mktemp -d); export BF_DIST_SHARED
trap 'rm -f "$log"; rm -rf "$BF_DIST_SHARED"; [ -n "${own_shared:-}" ] && rm -rf "$BERTFILL_SHARED_BATCH_DIR";
      [ -n "${own_cache:-}" ] && rm -rf "$BERTFILL_CACHE_DIR"' EXIT
runs=()
suites=$(
  ls tests/project/t_*.sh tests/project/t_*.py 2>/dev/null | LC_ALL=C sort
  ls tests/*/t_*.sh tests/*/t_*.py 2>/dev/null | grep -v '^tests/project/' | LC_ALL=C sort
)
for suite in $suites; do
  if [ "$suite" = tests/c/t_c.sh ]; then
    for unit in $(bash "$suite" --list); do runs+=("$suite $unit"); done
  elif [ -z "${BF_ONLY_C:-}" ]; then
    runs+=("$suite")
  fi
done
for run in "${runs[@]}"; do
  suite=${run%% *}
  unit=${run#"$suite"}
  name=${suite#tests/}$unit
  start=$(date +%s.%N)
  case "$suite" in
    *.py) timeout 900 "$PYTHON" "$suite" >"$log" 2>&1 ;;
    *)    timeout 900 bash "$suite" $unit >"$log" 2>&1 ;;
  esac
  rc=$?
  p=$(grep -c '^ok ' "$log"); f=$(grep -c '^FAIL ' "$log"); s=$(grep -c '^skip ' "$log")
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    f=1; echo "FAIL $name: exited with status $rc" >>"$log"
  fi
  secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  printf '== %-30s %4d passed %3d failed %3d skipped  (%ss)\n' "$name" "$p" "$f" "$s" "$secs"
  grep -E '^(FAIL|skip) ' "$log" | sed 's/^/   /'
  if [ "$f" -ne 0 ]; then echo "   --- last output of $name:"; tail -n 30 "$log" | sed 's/^/   | /'; fi
  pass=$((pass+p)); fail=$((fail+f)); skip=$((skip+s))
done
# A suite where this script does not look (tests/ itself, or a folder
# inside a folder) would never run: that is a failure, not a silence.
stray=$(find tests \( -name 't_*.sh' -o -name 't_*.py' \) -not -path '*/node_modules/*' |
        grep -v -E '^tests/[^/]+/t_[^/]+$' | LC_ALL=C sort)
if [ -n "$stray" ]; then
  echo "== run.sh: suites that would never run"
  for f in $stray; do echo "   FAIL layout: $f is not in a folder of tests/ (tests/KIND/t_*), so it never runs"; done
  fail=$((fail + $(echo "$stray" | wc -l)))
fi
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
