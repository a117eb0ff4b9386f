#!/usr/bin/env bash
# make bench — bertfill vs ONNX Runtime vs PyTorch, side by side, in one run.
#
#   make bench                 full run (~15-20 minutes on 2 cores)
#   BENCH_QUICK=1 make bench   quick run for development (fewer repetitions,
#                              64 sentences per batch set; numbers are rough)
#
# What it does, in order (each engine in its own process, one after another,
# never two at once):
#   1. a random model of bert-base-chinese's exact shape (12 layers, 768 hidden,
#      12 heads, 3072 intermediate, 21128 vocab; the genuine vocab.txt from
#      ../shared/data/bert-base-chinese when present, else a synthetic one) in
#      build/models/bert-base-random, made once by model/gen_random_model.py;
#      the same weights exported to ONNX (build/bench/model.onnx) with Debian's
#      python3-torch (tests/bench/export_onnx.py); and that export made int8
#      (build/bench/model.int8.onnx) with Debian's python3-onnx
#      (tests/bench/quantize_onnx.py: DynamicQuantizeLinear + MatMulInteger,
#      per-column int8 weights, as ONNX Runtime's quantize_dynamic does);
#   2. benchmark sentences (tests/bench/sentences.py): one sentence of 8, 12,
#      16, 20, 24, 32, 64 and 128 tokens, the five sentences of the demo's
#      column (sql/demo.sql, 16-21 tokens), and two disjoint sets of 256 and
#      2,000 sentences of 16-23 tokens, one [MASK] each;
#   3. every engine in fp32 and in int8 (its dynamic quantization: int8
#      weights per output channel, activations quantized at run time):
#      bertfill engine (tests/bench/bench_bertfill.c linked with
#      build/libbfengine.a), bertfill through SQL (./bertfill.so in the same
#      driver, separate process; with "column fill, N rows": the 2,000 set as
#      a column filled by UPDATE ... FROM fill_rows, by bert_prefill + UPDATE,
#      by a plain UPDATE, and with the cache bounds lowered below N — about
#      3 more minutes on the bert-base model), ONNX Runtime (tests/bench/bench_ort.js,
#      npm onnxruntime-node), PyTorch (tests/bench/bench_torch.py) with
#      OPENBLAS_CORETYPE=SkylakeX and OMP_WAIT_POLICY=PASSIVE (its fast path),
#      and, on fewer sentences, with OpenBLAS as installed and with OpenMP's
#      default (spinning) wait policy; then int8: bertfill --precision int8
#      (bf_model_load_as; through SQL bert_load(dir, 'int8'), without the
#      column fill), ONNX Runtime on model.int8.onnx, PyTorch with
#      quantize_dynamic (bench_torch.py --precision int8); and bertfill
#      --precision bf16 (the engine only: no peer here runs bf16 on the CPU
#      in this harness, so it is set against bertfill fp32 and ORT fp32);
#   4. tests/bench/report.py: the markdown table (printed, and written to
#      build/bench/results.md), raw numbers in build/bench/results.json, the
#      top-1 agreement of the engines on every benchmark sentence, and the
#      agreement of each int8 engine with its fp32 (top-1, top-5 overlap,
#      |Δp| of the top-1 probability).
#
# Installs what it needs when it can (root): python3-torch and nodejs/npm with
# apt-get, python3-onnx (the int8 graph) with apt-get, onnxruntime-node with
# `npm ci` in tests/bench (its CPU binaries ship inside the npm package; the
# optional CUDA download is skipped).  A peer that cannot run is reported as
# MISSING in the table, with the reason; the run goes on.  So is a mode this
# bertfill does not have (int8 before the engine has bf_model_load_as).
#
# Other work on the machine spoils a run: run.sh reads /proc/stat around each
# engine's run, and when other processes (or the hypervisor: steal) took more
# than BENCH_NOISE_LIMIT % (default 5) of the CPUs it runs that engine once
# more and keeps the quieter try; the table shows what each run shared.
#
# Environment: BENCH_QUICK=1, BUILD (default build), BENCH_SKIP="sql ort torch
# torch_asis torch_spin int8 bf16 spelling" to leave engines out (int8: every int8 run;
# spelling: tests/bench/spelling.py, the spelling check against fill_rows),
# BENCH_NOISE_LIMIT, BENCH_THREADS (default 2: the peers'
# thread count; bertfill uses its own default, the number of cores, and
# reports it).  BERTFILL_PRECISION is unset: bert_load(dir) is fp32 here.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
OUT=$BUILD/bench
MODEL=$BUILD/models/bert-base-random
PY=/usr/bin/python3
SHARED_VOCAB=../shared/data/bert-base-chinese/vocab.txt
THREADS=${BENCH_THREADS:-2}
SKIP=" ${BENCH_SKIP:-} "
unset BERTFILL_PRECISION
mkdir -p "$OUT"
missing=()
# OpenBLAS core for the Python peers: Debian's OpenBLAS 0.3.21 picks slow
# generic kernels on AVX-512 CPUs it does not know, so there they run with
# SkylakeX; on CPUs without AVX-512 (SkylakeX would be an illegal
# instruction) OpenBLAS's own choice stands.
if grep -qw avx512f /proc/cpuinfo; then FAST_CORE=(OPENBLAS_CORETYPE=SkylakeX); else FAST_CORE=(); fi
say() { echo "bench: $*" >&2; }
skipped() { [[ $SKIP == *" $1 "* ]]; }

if [ -n "${BENCH_QUICK:-}" ]; then
  REPS=5; WARM=1; ROUNDS=1; BIG_ROUNDS=1; LIMIT=64; HITS=2000
else
  REPS=20; WARM=3; ROUNDS=5; BIG_ROUNDS=3; LIMIT=0; HITS=20000
fi
COMMON=(--reps "$REPS" --warmup "$WARM" --rounds "$ROUNDS" --big-rounds "$BIG_ROUNDS" --limit "$LIMIT")

apt_install() {   # apt_install PACKAGE... (only as root; quiet)
  [ "$(id -u)" -eq 0 ] || return 1
  say "installing $* with apt-get"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null 2>&1 || {
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null 2>&1; }
}

# ---- tools ------------------------------------------------------------------
have_torch=1
if ! $PY -c 'import torch' 2>/dev/null; then
  apt_install python3-torch python3-numpy || true
  $PY -c 'import torch' 2>/dev/null || { have_torch=0; missing+=("python3-torch (apt-get install python3-torch): no PyTorch peer, no ONNX export"); }
fi
have_ort=1
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  apt_install nodejs npm || true
fi
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  have_ort=0; missing+=("node/npm (apt-get install nodejs npm): no ONNX Runtime peer")
elif [ ! -e tests/bench/node_modules/onnxruntime-node/package.json ] ||
     [ tests/bench/package-lock.json -nt tests/bench/node_modules/.package-lock.json ]; then
  say "npm ci in tests/bench (onnxruntime-node)"
  (cd tests/bench && ONNXRUNTIME_NODE_INSTALL=skip npm ci --no-audit --no-fund --loglevel=error >&2) ||
    { have_ort=0; missing+=("onnxruntime-node (cd tests/bench && npm ci) failed: no ONNX Runtime peer"); }
fi

# ---- model ------------------------------------------------------------------
if [ -f "$SHARED_VOCAB" ]; then
  vocab_source="genuine bert-base-chinese vocab.txt ($SHARED_VOCAB)"; vocab_args=(--vocab "$SHARED_VOCAB")
else
  vocab_source="synthetic (no $SHARED_VOCAB)"; vocab_args=()
fi
if [ ! -f "$MODEL/model.safetensors" ]; then
  say "making a random bert-base-shaped model in $MODEL"
  rm -rf "$MODEL.tmp"
  $PY model/gen_random_model.py "$MODEL.tmp" "${vocab_args[@]}" >&2
  rm -rf "$MODEL"; mv "$MODEL.tmp" "$MODEL"
fi
if [ "$have_torch" = 1 ] && ! skipped ort &&
   { [ ! -f "$OUT/model.onnx" ] || [ "$MODEL/model.safetensors" -nt "$OUT/model.onnx" ] ||
     [ tests/bench/export_onnx.py -nt "$OUT/model.onnx" ]; }; then
  say "exporting $MODEL to ONNX ($OUT/model.onnx)"
  env "${FAST_CORE[@]}" $PY tests/bench/export_onnx.py "$MODEL" "$OUT/model.onnx" >&2 ||
    { rm -f "$OUT/model.onnx"; missing+=("ONNX export failed (tests/bench/export_onnx.py)"); }
fi
[ -f "$OUT/model.onnx" ] || have_ort=0
# The int8 graph for ONNX Runtime, from the same export.
have_ort8=$have_ort
if [ "$have_ort" = 1 ] && ! skipped int8 && ! skipped ort; then
  if ! $PY -c 'import onnx' 2>/dev/null; then apt_install python3-onnx || true; fi
  if ! $PY -c 'import onnx' 2>/dev/null; then
    have_ort8=0; missing+=("ort_int8: python3-onnx (apt-get install python3-onnx) is missing: no int8 graph")
  elif [ ! -f "$OUT/model.int8.onnx" ] || [ "$OUT/model.onnx" -nt "$OUT/model.int8.onnx" ] ||
       [ tests/bench/quantize_onnx.py -nt "$OUT/model.int8.onnx" ]; then
    say "quantizing $OUT/model.onnx to int8 ($OUT/model.int8.onnx)"
    $PY tests/bench/quantize_onnx.py "$OUT/model.onnx" "$OUT/model.int8.onnx" >&2 ||
      { rm -f "$OUT/model.int8.onnx"; have_ort8=0; missing+=("ort_int8: tests/bench/quantize_onnx.py failed"); }
  fi
fi

$PY tests/bench/sentences.py "$MODEL" "$OUT/sentences.tsv"

# ---- bertfill driver ----------------------------------------------------------
say "building $OUT/bench_bertfill"
${CC:-cc} -O2 -march=x86-64-v2 -std=c11 -D_GNU_SOURCE -Wall -Iext/engine -o "$OUT/bench_bertfill" \
  tests/bench/bench_bertfill.c "$BUILD/libbfengine.a" -lsqlite3 -lutf8proc -ldl -lm -lpthread

# ---- runs (sequential) --------------------------------------------------------
rm -f "$OUT"/{bertfill,bertfill_sql,ort,torch,torch_asis,torch_spin,meta,results}.json "$OUT"/*_int8.json \
  "$OUT"/*_bf16.json \
  "$OUT"/*.stat "$OUT"/*.try1.*
loadavg_before=$(cut -d' ' -f1-3 /proc/loadavg)
start=$(date +%s)
run() {   # run NAME COMMAND...: one engine, its own process; failure is reported, not fatal
  local name=$1; shift
  local try noise
  for try in 1 2; do
    if [ "$try" = 1 ]; then say "--- $name"
    else say "--- $name again: other work took ${noise}% of the CPUs during the first try"; fi
    local t0=$(date +%s) w0=$(date +%s.%N) s0=$(head -1 /proc/stat)
    if ! "$@"; then missing+=("$name: run failed (see the messages above)"); rm -f "$OUT/$name.json"; return; fi
    # A mode or peer this build cannot run: the driver wrote {"missing": "<why>"}.
    local why
    why=$($PY -c 'import json, sys; print(json.load(open(sys.argv[1])).get("missing", ""))' "$OUT/$name.json") || true
    if [ -n "$why" ]; then missing+=("$name: $why"); rm -f "$OUT/$name.json"; return; fi
    # Whole-machine CPU counters around the run: report.py subtracts the
    # engine's own CPU time to show how much else ran meanwhile (and steal).
    printf '%s %s\n%s\n%s\n' "$w0" "$(date +%s.%N)" "$s0" "$(head -1 /proc/stat)" >"$OUT/$name.stat"
    noise=$($PY tests/bench/report.py --noise "$OUT" "$name")
    say "--- $name done in $(( $(date +%s) - t0 )) s (other work: ${noise}% of the CPUs)"
    # A burst of other work (another developer's build) spoils a run: one more try.
    if [ "$try" = 1 ] && awk "BEGIN{exit !($noise > ${BENCH_NOISE_LIMIT:-5})}"; then
      cp "$OUT/$name.json" "$OUT/$name.try1.json"; cp "$OUT/$name.stat" "$OUT/$name.try1.stat"; continue
    fi
    break
  done
  # Keep the quieter of two tries.
  if [ -f "$OUT/$name.try1.json" ]; then
    local n2=$noise n1
    mv "$OUT/$name.try1.json" "$OUT/$name.first.json"; mv "$OUT/$name.try1.stat" "$OUT/$name.first.stat"
    n1=$($PY tests/bench/report.py --noise "$OUT" "$name.first")
    if awk "BEGIN{exit !($n1 < $n2)}"; then
      mv "$OUT/$name.first.json" "$OUT/$name.json"; mv "$OUT/$name.first.stat" "$OUT/$name.stat"
    fi
    rm -f "$OUT/$name.first.json" "$OUT/$name.first.stat"
  fi
}
run bertfill "$OUT/bench_bertfill" engine "$MODEL" "$OUT/sentences.tsv" "$OUT/bertfill.json" "${COMMON[@]}"
skipped int8 || run bertfill_int8 "$OUT/bench_bertfill" engine "$MODEL" "$OUT/sentences.tsv" "$OUT/bertfill_int8.json" \
  "${COMMON[@]}" --precision int8
skipped bf16 || run bertfill_bf16 "$OUT/bench_bertfill" engine "$MODEL" "$OUT/sentences.tsv" "$OUT/bertfill_bf16.json" \
  "${COMMON[@]}" --precision bf16
skipped sql || run bertfill_sql "$OUT/bench_bertfill" sql "$MODEL" "$OUT/sentences.tsv" "$OUT/bertfill_sql.json" \
  "${COMMON[@]}" --ext "./bertfill.so" --hits "$HITS"
skipped sql || skipped int8 || run bertfill_sql_int8 "$OUT/bench_bertfill" sql "$MODEL" "$OUT/sentences.tsv" \
  "$OUT/bertfill_sql_int8.json" "${COMMON[@]}" --ext "./bertfill.so" --hits "$HITS" --precision int8 --column 0
if [ "$have_ort" = 1 ] && ! skipped ort; then
  run ort node tests/bench/bench_ort.js "$OUT/model.onnx" "$OUT/sentences.tsv" "$OUT/ort.json" \
    "${COMMON[@]}" --threads "$THREADS" --batch 32
fi
ort8_ops=""
if [ "$have_ort8" = 1 ] && ! skipped ort && ! skipped int8; then
  run ort_int8 node tests/bench/bench_ort.js "$OUT/model.int8.onnx" "$OUT/sentences.tsv" "$OUT/ort_int8.json" \
    "${COMMON[@]}" --threads "$THREADS" --batch 32 --precision int8
  # Which kernels that is: the graph as ORT runs it after its own fusions (not timed).
  if node tests/bench/bench_ort.js "$OUT/model.int8.onnx" "$OUT/sentences.tsv" /dev/null --threads "$THREADS" \
       --optimized "$OUT/model.int8.ort-optimized.onnx" 2>/dev/null; then
    ort8_ops=$($PY tests/bench/quantize_onnx.py --ops "$OUT/model.int8.ort-optimized.onnx" 2>/dev/null |
               tr ',' '\n' | grep -E 'Quantize|Integer|MatMul' | paste -sd, | sed 's/^ *//') || true
  fi
  rm -f "$OUT/model.int8.ort-optimized.onnx"
fi
# PyTorch: OMP_WAIT_POLICY=PASSIVE keeps torch's idle OpenMP threads from
# spinning against OpenBLAS's threads (see bench_torch.py); its fast path.
if [ "$have_torch" = 1 ] && ! skipped torch; then
  run torch env "${FAST_CORE[@]}" OMP_WAIT_POLICY=PASSIVE $PY tests/bench/bench_torch.py "$MODEL" \
    "$OUT/sentences.tsv" "$OUT/torch.json" "${COMMON[@]}" --threads "$THREADS" --batch 32
  skipped int8 || run torch_int8 env "${FAST_CORE[@]}" OMP_WAIT_POLICY=PASSIVE $PY tests/bench/bench_torch.py \
    "$MODEL" "$OUT/sentences.tsv" "$OUT/torch_int8.json" "${COMMON[@]}" --threads "$THREADS" --batch 32 \
    --precision int8
fi
# Two more PyTorch configurations, single sentences and the 256 set only:
# OpenBLAS as installed (Prescott kernels here), and OpenMP's default wait policy.
if [ -n "${BENCH_QUICK:-}" ]; then few=(--reps 1 --warmup 0 --rounds 1 --big-rounds 1 --limit 32 --sets single,batch-256)
else few=(--reps 3 --warmup 1 --rounds 1 --big-rounds 1 --limit 0 --sets single,batch-256); fi
if [ "$have_torch" = 1 ] && ! skipped torch_asis; then
  run torch_asis env -u OPENBLAS_CORETYPE OMP_WAIT_POLICY=PASSIVE $PY tests/bench/bench_torch.py "$MODEL" \
    "$OUT/sentences.tsv" "$OUT/torch_asis.json" "${few[@]}" --threads "$THREADS" --batch 32
fi
if [ "$have_torch" = 1 ] && ! skipped torch_spin; then
  run torch_spin env -u OMP_WAIT_POLICY "${FAST_CORE[@]}" $PY tests/bench/bench_torch.py "$MODEL" \
    "$OUT/sentences.tsv" "$OUT/torch_spin.json" "${few[@]}" --threads "$THREADS" --batch 32
fi
loadavg_after=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- report -------------------------------------------------------------------
# The CPU model as lscpu names it, and the instruction sets the kernels choose by.
cpu=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)
[ -n "$cpu" ] || cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
flags=$(grep -m1 '^flags' /proc/cpuinfo)
for f in amx_tile avx512_bf16 avx512_vnni avx_vnni avx512f avx2; do [[ $flags == *" $f"* ]] && cpu="$cpu, $f"; done
ort8_graph=""
[ -f "$OUT/model.int8.onnx" ] && ort8_graph=$($PY tests/bench/quantize_onnx.py --ops "$OUT/model.int8.onnx" |
  tr ',' '\n' | grep -E 'Quantize|Integer|MatMul' | paste -sd, | sed 's/^ *//') || true
$PY - "$OUT/meta.json" "$MODEL" "$vocab_source" "$cpu" "$(nproc)" "$loadavg_before" "$loadavg_after" \
    "${BENCH_QUICK:-}" "$(( $(date +%s) - start ))" "$ort8_graph" "$ort8_ops" "${missing[@]+"${missing[@]}"}" <<'EOF'
import json, sys, time
out, model, vocab, cpu, cores, lb, la, quick, secs, ort8_graph, ort8_ops, *missing = sys.argv[1:]
cfg = json.load(open(model + "/config.json"))
shape = (f"{cfg['num_hidden_layers']} layers, {cfg['hidden_size']} hidden, {cfg['num_attention_heads']} heads, "
         f"{cfg['intermediate_size']} intermediate, {cfg['vocab_size']} vocab")
json.dump({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "model": model, "shape": shape,
           "vocab_source": vocab, "cpu": cpu, "cores": int(cores), "loadavg_before": lb, "loadavg_after": la,
           "quick": bool(quick), "seconds": int(secs), "ort_int8_graph": ort8_graph, "ort_int8_ops": ort8_ops,
           "missing": missing}, open(out, "w"), indent=1)
EOF
# The spelling check's column form against fill_rows on the same texts, and the
# naive per-character loop (tests/bench/spelling.py): its own table, build/bench/spelling.md.
if [[ $SKIP != *" spelling "* ]]; then
  n_spell=256; [ -n "${BENCH_QUICK:-}" ] && n_spell=64
  { for p in fp32 int8; do
      BENCH_THREADS=$THREADS $PY tests/bench/spelling.py "$MODEL" $p $n_spell 8 || true
    done
    BENCH_THREADS=$THREADS $PY tests/bench/spelling.py model/bertfill-zh-tiny fp32 $n_spell 16 || true
  } | awk 'NR <= 2 || !/^\| model|^\|---/' > "$OUT/spelling.md"
  cat "$OUT/spelling.md"
fi
$PY tests/bench/report.py "$OUT" "$OUT/sentences.tsv" "$MODEL/vocab.txt"
say "wrote $OUT/results.md and $OUT/results.json (engines ran for $(( $(date +%s) - start )) s)"
