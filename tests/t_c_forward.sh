#!/usr/bin/env bash
# The forward pass (bf_fill) against the goldens of model/reference.py.
# Needs `make test-bins models`.  First checks that each test model is the one
# its golden was computed from (sha256 of model.safetensors), then runs
# $BUILD/tests/test_forward over every (model, golden) pair, under $BF_WRAP,
# once per kernel setting (gemm.h): as the CPU allows (its best kernels), with
# BERTFILL_KERNELS=avx2 (the AVX2 kernels on an AVX-512 CPU; skipped where the
# default run used them already) and with BERTFILL_KERNELS=openblas
# (the portable path: plain C loops and OpenBLAS).
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
bin=$BUILD/tests/test_forward
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
if [ ! -x "$bin" ]; then echo "FAIL forward: $bin missing (run make test-bins)"; exit 1; fi
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
