#!/usr/bin/env bash
# t_env.sh — the environment variables, through the sqlite3 shell: a good
# value is taken; a bad one is ignored (the default is used) with one line on
# stderr, "bertfill: ignoring BERTFILL_X='...': expected ...", once per process
# even when several connections read it; BERTFILL_MODEL naming a directory
# that does not exist is an error that says where the name came from.
set -u
cd "$(dirname "$0")/../.."
EXT=${BERTFILL_EXT:-./bertfill}
if ! command -v sqlite3 >/dev/null; then echo "skip env: no sqlite3 shell (apt-get install sqlite3)"; exit 0; fi
case "$EXT" in /*) ;; *) EXT=$PWD/$EXT ;; esac
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# run NAME 'VAR=VALUE ...' SQL...: stdout in $tmp/NAME.out, stderr in $tmp/NAME.err;
# each SQL argument runs on a connection of its own (.open), in one process.
run() {
  local name=$1 envs=$2; shift 2
  local script=$tmp/$name.sql
  : >"$script"
  for q in "$@"; do printf '.open %s/%s.db\n.load %s\n%s\n' "$tmp" "$name" "$EXT" "$q" >>"$script"; done
  (cd "$tmp" && env -u BERTFILL_MODEL $envs BERTFILL_PROGRESS=0 sqlite3 -batch <"$script" \
    >"$tmp/$name.out" 2>"$tmp/$name.err")
}
check() { # NAME CONDITION-RESULT WHY
  if [ "$2" = 1 ]; then echo "ok env_$1"; else echo "FAIL env_$1: $3"; fi
}
# is_only FILE LINE: FILE holds exactly LINE (one line)
is_only() { [ "$(cat "$1")" = "$2" ] && [ "$(wc -l <"$1")" -eq 1 ] && echo 1 || echo 0; }

run cache_bogus "BERTFILL_CACHE=bogus" "select bert_cache();" "select bert_cache();"
check cache_bogus_default "$([ "$(cat "$tmp/cache_bogus.out")" = "on
on" ] && echo 1 || echo 0)" "got $(cat "$tmp/cache_bogus.out")"
check cache_bogus_warns_once "$(is_only "$tmp/cache_bogus.err" \
  "bertfill: ignoring BERTFILL_CACHE='bogus': expected off/memory/on")" "stderr: $(cat "$tmp/cache_bogus.err")"

run cache_limit_abc "BERTFILL_CACHE_LIMIT=abc" "select bert_cache_limit();" "select bert_cache_limit();"
check cache_limit_abc_default "$([ "$(cat "$tmp/cache_limit_abc.out")" = "100000
100000" ] && echo 1 || echo 0)" "got $(cat "$tmp/cache_limit_abc.out")"
check cache_limit_abc_warns_once "$(is_only "$tmp/cache_limit_abc.err" \
  "bertfill: ignoring BERTFILL_CACHE_LIMIT='abc': expected a whole number from 1 to 1099511627776")" \
  "stderr: $(cat "$tmp/cache_limit_abc.err")"

run max_concurrent_neg "BERTFILL_MAX_CONCURRENT=-4" \
  "select json_extract(bert_debug(), '\$.guard.max_concurrent_auto');"
check max_concurrent_neg_default "$([ "$(cat "$tmp/max_concurrent_neg.out")" = 1 ] && echo 1 || echo 0)" \
  "max_concurrent_auto: $(cat "$tmp/max_concurrent_neg.out")"
check max_concurrent_neg_warns "$(is_only "$tmp/max_concurrent_neg.err" \
  "bertfill: ignoring BERTFILL_MAX_CONCURRENT='-4': expected a whole number from 0 to 1048576")" \
  "stderr: $(cat "$tmp/max_concurrent_neg.err")"

# all three at once: three lines, the defaults
run three "BERTFILL_CACHE=bogus BERTFILL_CACHE_LIMIT=abc BERTFILL_MAX_CONCURRENT=-4" \
  "select bert_cache(), bert_cache_limit(), bert_fill('人民法[MASK]') = '人民法' || (select token from fill_candidates('人民法[MASK]', 1));"
check three_defaults "$([ "$(cat "$tmp/three.out")" = "on|100000|1" ] && echo 1 || echo 0)" \
  "got $(cat "$tmp/three.out")"
check three_warnings "$([ "$(grep -c "^bertfill: ignoring BERTFILL_" "$tmp/three.err")" = 3 ] &&
  [ "$(wc -l <"$tmp/three.err")" -eq 3 ] && echo 1 || echo 0)" "stderr: $(cat "$tmp/three.err")"

run timeout_batching "BERTFILL_BUSY_TIMEOUT_MS=soon BERTFILL_BATCHING=maybe" \
  "select bert_busy_timeout(), bert_batching();"
check timeout_batching_default "$([ "$(cat "$tmp/timeout_batching.out")" = "2000|1" ] && echo 1 || echo 0)" \
  "got $(cat "$tmp/timeout_batching.out")"
check timeout_batching_warn "$(grep -c "^bertfill: ignoring BERTFILL_BUSY_TIMEOUT_MS='soon'\|^bertfill: ignoring BERTFILL_BATCHING='maybe': expected 1/on/true/yes or 0/off/false/no" \
  "$tmp/timeout_batching.err" | grep -qx 2 && echo 1 || echo 0)" "stderr: $(cat "$tmp/timeout_batching.err")"

# good values are taken silently
run good "BERTFILL_CACHE=MEMORY BERTFILL_CACHE_LIMIT=5 BERTFILL_MAX_CONCURRENT=3 BERTFILL_BUSY_TIMEOUT_MS=0 BERTFILL_BATCHING=off" \
  "select bert_cache(), bert_cache_limit(), bert_max_concurrent(), bert_busy_timeout(), bert_batching();"
check good_values "$([ "$(cat "$tmp/good.out")" = "memory|5|3|0|0" ] && echo 1 || echo 0)" \
  "got $(cat "$tmp/good.out")"
check good_silent "$([ ! -s "$tmp/good.err" ] && echo 1 || echo 0)" "stderr: $(cat "$tmp/good.err")"

# BERTFILL_KERNELS caps the kernels (ext/engine/kernels/kernels.h): openblas is always
# possible; a bad value is ignored (the CPU's best, as without it) with a warning
run kernels_default "" "select json_extract(bert_debug(), '\$.gemm');"
run kernels_openblas "BERTFILL_KERNELS=openblas" "select json_extract(bert_debug(), '\$.gemm');"
check kernels_openblas "$([ "$(cat "$tmp/kernels_openblas.out")" = openblas ] && echo 1 || echo 0)" \
  "got $(cat "$tmp/kernels_openblas.out")"
run kernels_bogus "BERTFILL_KERNELS=fast" "select json_extract(bert_debug(), '\$.gemm');"
check kernels_bogus_default "$([ "$(cat "$tmp/kernels_bogus.out")" = "$(cat "$tmp/kernels_default.out")" ] &&
  echo 1 || echo 0)" "got $(cat "$tmp/kernels_bogus.out"), without it $(cat "$tmp/kernels_default.out")"
check kernels_bogus_warns "$(is_only "$tmp/kernels_bogus.err" \
  "bertfill: ignoring BERTFILL_KERNELS='fast': expected openblas/avx2/avx512")" \
  "stderr: $(cat "$tmp/kernels_bogus.err")"

# BERTFILL_MODEL names a directory that does not exist: the error says so,
# and advises fixing or unsetting the variable (not setting it)
run model_missing "BERTFILL_MODEL=/nonexistent" "select bert_fill('人民法[MASK]');"
err=$(cat "$tmp/model_missing.err")
check model_missing_names_it "$([[ $err == *"cannot open model directory '/nonexistent' (from the environment variable BERTFILL_MODEL): No such file or directory"* ]] && echo 1 || echo 0)" "stderr: $err"
check model_missing_advice "$([[ $err == *"unset it to use the shipped model"* && $err != *"set the environment variable"* ]] && echo 1 || echo 0)" "stderr: $err"
exit 0
