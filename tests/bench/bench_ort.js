// bench_ort.js — the ONNX Runtime peer of `make bench` (see tests/bench/run.sh).
//
//   node tests/bench/bench_ort.js MODEL.onnx SENTENCES.tsv OUT.json \
//        [--reps N] [--warmup N] [--rounds N] [--big-rounds N] [--batch N] [--limit N] [--threads N]
//
// Runs the ONNX export of the benchmark model the way a service built on
// onnxruntime-node would: 2 intra-op threads, padded batches with an attention
// mask, logits at all positions (as exported models give them), top-1 taken
// at the [MASK] position.  Writes its numbers and top-1 ids as JSON.
'use strict';
const fs = require('fs');
const path = require('path');
const ort = require(path.join(__dirname, 'node_modules', 'onnxruntime-node'));

function parseArgs(argv) {
  const a = { reps: 20, warmup: 3, rounds: 3, 'big-rounds': 2, batch: 32, limit: 0, threads: 2 };
  const pos = [];
  for (let i = 0; i < argv.length; i++) {
    if (argv[i].startsWith('--')) a[argv[i].slice(2)] = Number(argv[++i]);
    else pos.push(argv[i]);
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

// One padded batch through the session; returns the top-1 id at each mask.
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
  return sents.map((s, b) => {
    const off = (b * S + s.mpos) * V;
    let best = 0, bv = -Infinity;
    for (let v = 0; v < V; v++) if (logits[off + v] > bv) { bv = logits[off + v]; best = v; }
    return best;
  });
}

async function main() {
  const a = parseArgs(process.argv.slice(2));
  const sets = readSentences(a.sentences);
  const res = { engine: `onnxruntime-node ${ort.env.versions.node || ''}`.trim(), threads: a.threads,
    batch_size: a.batch, single: {}, batch: {}, top1: {}, notes: [] };

  const opts = { intraOpNumThreads: a.threads, interOpNumThreads: 1, executionMode: 'sequential',
    graphOptimizationLevel: 'all', executionProviders: ['cpu'] };
  let t0 = performance.now();
  const session = await ort.InferenceSession.create(a.model, opts);
  res.load_ms = performance.now() - t0;
  for (const name of ['input_ids', 'attention_mask', 'token_type_ids'])
    if (!session.inputNames.includes(name)) throw new Error(`${a.model}: no input named ${name}`);
  t0 = performance.now();
  await runBatch(session, sets['single-8']);
  res.first_run_ms = performance.now() - t0;

  // Single sentences: latency per call, median after warm-up.
  for (const key of Object.keys(sets).filter((k) => k.startsWith('single-'))) {
    const n = key.slice(7), s = sets[key];
    for (let i = 0; i < a.warmup; i++) await runBatch(session, s);
    const times = [];
    let top;
    for (let i = 0; i < a.reps; i++) {
      t0 = performance.now();
      top = await runBatch(session, s);
      times.push(performance.now() - t0);
    }
    res.single[n] = { median_ms: median(times), min_ms: Math.min(...times), runs: times.length };
    res.top1[key] = top;
    console.error(`ort: single ${n} tokens: ${median(times).toFixed(1)} ms`);
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
    res.top1[key] = top;
    console.error(`ort: ${key} (${s.length}): ${(s.length / m).toFixed(1)} sentences/s`);
  }
  res.peak_rss_mb = process.resourceUsage().maxRSS / 1024;
  const cpu = process.cpuUsage();
  res.cpu_s = (cpu.user + cpu.system) / 1e6;
  fs.writeFileSync(a.out, JSON.stringify(res, null, 1));
}

main().catch((e) => { console.error(`bench_ort.js: ${e.message || e}`); process.exit(1); });
