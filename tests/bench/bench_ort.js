// bench_ort.js — the ONNX Runtime peer of `make bench` (see tests/bench/run.sh).
//
//   node tests/bench/bench_ort.js MODEL.onnx SENTENCES.tsv OUT.json \
//        [--reps N] [--warmup N] [--rounds N] [--big-rounds N] [--batch N] [--limit N] [--threads N]
//        [--precision fp32|int8] [--optimized OUT.onnx]
//
// Runs the ONNX export of the benchmark model the way a service built on
// onnxruntime-node would: 2 intra-op threads, padded batches with an attention
// mask, logits at all positions (as exported models give them), softmax and
// top 5 at the [MASK] position.  Writes its numbers and the top 5 ids and
// probabilities of every sentence as JSON.
//
// --precision only labels the run: int8 is the graph tests/bench/quantize_onnx.py
// made from the export (DynamicQuantizeLinear + MatMulInteger).
// --optimized GRAPH.onnx runs nothing: it loads the model with the same
// options and saves the graph as ORT runs it, after its own optimizations
// (fusions), to see which ops a run really uses (quantize_onnx.py --ops lists
// them); OUT.json is not written.
'use strict';
const fs = require('fs');
const path = require('path');
const ort = require(path.join(__dirname, 'node_modules', 'onnxruntime-node'));

function parseArgs(argv) {
  const a = { reps: 20, warmup: 3, rounds: 3, 'big-rounds': 2, batch: 32, limit: 0, threads: 2,
    precision: 'fp32', optimized: '' };
  const pos = [];
  for (let i = 0; i < argv.length; i++) {
    if (argv[i].startsWith('--')) {
      const k = argv[i].slice(2), v = argv[++i];
      a[k] = typeof a[k] === 'string' ? v : Number(v);
    } else pos.push(argv[i]);
  }
  if (pos.length !== 3) {
    console.error('usage: bench_ort.js MODEL.onnx SENTENCES.tsv OUT.json [--reps N] ...');
    process.exit(2);
  }
  [a.model, a.sentences, a.out] = pos;
  return a;
}

function readSentences(file) {
  const sets = {};
  for (const line of fs.readFileSync(file, 'utf8').split('\n')) {
    if (!line) continue;
    const [set, text, ids, mpos] = line.split('\t');
    (sets[set] = sets[set] || []).push({ text, ids: ids.split(' ').map(Number), mpos: Number(mpos) });
  }
  return sets;
}

const median = (xs) => { const s = [...xs].sort((a, b) => a - b); const n = s.length;
  return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2; };

// The top 5 of one row of logits: ids and softmax probabilities over the whole vocabulary.
function top5(logits, off, V) {
  const ids = [-1, -1, -1, -1, -1], val = [-Infinity, -Infinity, -Infinity, -Infinity, -Infinity];
  for (let v = 0; v < V; v++) {
    const x = logits[off + v];
    if (x <= val[4]) continue;
    let r = 4;
    while (r > 0 && x > val[r - 1]) { val[r] = val[r - 1]; ids[r] = ids[r - 1]; r--; }
    val[r] = x; ids[r] = v;
  }
  let sum = 0;
  for (let v = 0; v < V; v++) sum += Math.exp(logits[off + v] - val[0]);
  return [ids, val.map((x) => Math.exp(x - val[0]) / sum)];
}

// One padded batch through the session; returns [ids, probs] of the top 5 at each mask.
async function runBatch(session, sents) {
  const B = sents.length;
  const S = Math.max(...sents.map((s) => s.ids.length));
  const ids = new BigInt64Array(B * S), att = new BigInt64Array(B * S), typ = new BigInt64Array(B * S);
  sents.forEach((s, b) => s.ids.forEach((id, t) => { ids[b * S + t] = BigInt(id); att[b * S + t] = 1n; }));
  const out = await session.run({
    input_ids: new ort.Tensor('int64', ids, [B, S]),
    attention_mask: new ort.Tensor('int64', att, [B, S]),
    token_type_ids: new ort.Tensor('int64', typ, [B, S]),
  });
  const logits = out.logits.data, V = out.logits.dims[2];
  return sents.map((s, b) => top5(logits, (b * S + s.mpos) * V, V));
}

async function main() {
  const a = parseArgs(process.argv.slice(2));
  const sets = readSentences(a.sentences);
  const res = { engine: `onnxruntime-node ${ort.env.versions.node || ''} ${a.precision}`.trim(),
    precision: a.precision, model: a.model, threads: a.threads, batch_size: a.batch, single: {}, batch: {},
    top1: {}, top5: {}, notes: [] };

  const opts = { intraOpNumThreads: a.threads, interOpNumThreads: 1, executionMode: 'sequential',
    graphOptimizationLevel: 'all', executionProviders: ['cpu'] };
  if (a.optimized) {
    await ort.InferenceSession.create(a.model, { ...opts, optimizedModelFilePath: a.optimized });
    return;
  }
  let t0 = performance.now();
  const session = await ort.InferenceSession.create(a.model, opts);
  res.load_ms = performance.now() - t0;
  for (const name of ['input_ids', 'attention_mask', 'token_type_ids'])
    if (!session.inputNames.includes(name)) throw new Error(`${a.model}: no input named ${name}`);
  t0 = performance.now();
  await runBatch(session, sets['single-8']);
  res.first_run_ms = performance.now() - t0;

  // Single sentences: latency per call, median after warm-up.
  const single = (k) => k.startsWith('single-') || k.startsWith('demo-');
  for (const key of Object.keys(sets).filter(single)) {
    const n = key.startsWith('single-') ? key.slice(7) : key, s = sets[key];
    for (let i = 0; i < a.warmup; i++) await runBatch(session, s);
    const times = [];
    let top;
    for (let i = 0; i < a.reps; i++) {
      t0 = performance.now();
      top = await runBatch(session, s);
      times.push(performance.now() - t0);
    }
    res.single[n] = { median_ms: median(times), min_ms: Math.min(...times), runs: times.length };
    res.top1[key] = top.map((t) => t[0][0]);
    res.top5[key] = top;
    console.error(`ort ${a.precision}: single ${n} (${s[0].ids.length} tokens): ${median(times).toFixed(1)} ms`);
  }

  // Batches: padded batches of a.batch sentences, in input order.
  for (const key of Object.keys(sets).filter((k) => k.startsWith('batch-'))) {
    let s = sets[key];
    if (a.limit > 0 && s.length > a.limit) s = s.slice(0, a.limit);
    const rounds = key === 'batch-256' ? a.rounds : a['big-rounds'];
    const secs = [];
    let top = [];
    for (let r = 0; r < rounds; r++) {
      top = [];
      t0 = performance.now();
      for (let i = 0; i < s.length; i += a.batch) top.push(...(await runBatch(session, s.slice(i, i + a.batch))));
      secs.push((performance.now() - t0) / 1000);
    }
    const m = median(secs);
    res.batch[key.slice(6)] = { sentences: s.length, seconds: secs, sent_per_s: s.length / m };
    res.top1[key] = top.map((t) => t[0][0]);
    res.top5[key] = top;
    console.error(`ort ${a.precision}: ${key} (${s.length}): ${(s.length / m).toFixed(1)} sentences/s`);
  }
  res.peak_rss_mb = process.resourceUsage().maxRSS / 1024;
  const cpu = process.cpuUsage();
  res.cpu_s = (cpu.user + cpu.system) / 1e6;
  fs.writeFileSync(a.out, JSON.stringify(res, null, 1));
}

main().catch((e) => { console.error(`bench_ort.js: ${e.message || e}`); process.exit(1); });
