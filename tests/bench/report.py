#!/usr/bin/python3
"""Side-by-side table of a `make bench` run (see tests/bench/run.sh).

    /usr/bin/python3 tests/bench/report.py BENCH_DIR SENTENCES.tsv VOCAB.txt
    /usr/bin/python3 tests/bench/report.py --noise BENCH_DIR NAME   (run.sh: % of the CPUs
        taken by other processes or the hypervisor during run NAME)

Reads the per-engine JSON files that run.sh left in BENCH_DIR
(bertfill.json, bertfill_sql.json, ort.json, torch.json, torch_asis.json,
torch_spin.json, their int8 twins bertfill_int8.json, bertfill_sql_int8.json,
ort_int8.json, torch_int8.json, and meta.json; any may be missing), checks
that the engines agree on the top-1 token of every benchmark sentence, measures
how far each int8 engine is from its own fp32 (the agreement table), and
writes BENCH_DIR/results.md (printed) and BENCH_DIR/results.json (every raw
number).

Agreement of an int8 engine with its fp32 twin, over every benchmark sentence
both ran (one [MASK] each; the engines dump the top 5 ids and probabilities):
  top-1      the same best token
  top-5      mean |A ∩ B| / 5 of the two top-5 sets
  |Δp|       |p_A(top-1 of A) - p_B(top-1 of B)|: the top-1 probability each
             reports, its max and median
model/agreement.py measures the same on the shipped model, through SQL; the
numbers come from its agreement_stats().
"""
import json, os, sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "model"))
from agreement import agreement_stats  # noqa: E402

LENGTHS = ("8", "12", "16", "20", "24", "32", "64", "128")
BATCHES = ("256", "2000")
DEMOS = tuple(f"demo-{i}" for i in range(1, 6))


def load(d, name):
    p = os.path.join(d, name + ".json")
    if not os.path.exists(p):
        return None
    with open(p, encoding="utf-8") as f:
        e = json.load(f)
    # {"missing": "<why>"}: an engine this build cannot run (run.sh lists why as MISSING);
    # meta.json's "missing" is that list.
    return None if isinstance(e.get("missing"), str) else e


def get(d, *keys):
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def fmt(x, unit=""):
    if x is None:
        return "n/a"
    if isinstance(x, str):
        return x
    if x >= 100:
        s = f"{x:.0f}"
    elif x >= 10:
        s = f"{x:.1f}"
    else:
        s = f"{x:.2f}"
    return s + unit


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def fmt_ratio(r):
    return "n/a" if r is None else f"{r:.2f}×"


def read_sentences(path):
    """set -> texts; and set -> token count of its first sentence."""
    sets, ntok = {}, {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            name, text, ids, mpos = line.split("\t")
            sets.setdefault(name, []).append(text)
            ntok.setdefault(name, len(ids.split()))
    return sets, ntok


def read_vocab(path):
    with open(path, "rb") as f:
        toks = f.read().decode("utf-8").split("\n")
    if toks and toks[-1] == "":
        toks.pop()
    return toks


def top1_agreement(a, b):
    """Top-1 agreement between two engines over every set both have."""
    if not a or not b:
        return None
    same = total = 0
    for key, xs in a.get("top1", {}).items():
        ys = b.get("top1", {}).get(key)
        if ys is None:
            continue
        n = min(len(xs), len(ys))
        total += n
        same += sum(1 for i in range(n) if xs[i] == ys[i])
    return (same, total) if total else None


def agreement(a, b):
    """agreement_stats of two engines' top-5 dumps, over every sentence both ran (the same
    sentences file and --limit, so the same order)."""
    if not a or not b:
        return None
    pairs = []
    for key, xs in a.get("top5", {}).items():
        ys = b.get("top5", {}).get(key) or []
        pairs += list(zip(xs, ys))
    return agreement_stats(pairs)


def fmt_agreement(r):
    return (f"{r['top1_pct']:.1f}% ({r['top1_same']}/{r['n']}) | {100 * r['top5_overlap']:.1f}% | "
            f"{r['dp_max']:.4f} | {r['dp_median']:.4f}")


def noise_of(d, name, e):
    """Other processes' CPU and steal during run NAME, from run.sh's /proc/stat snapshots."""
    p = os.path.join(d, name + ".stat")
    if not e or not os.path.exists(p) or e.get("cpu_s") is None:
        return None
    with open(p) as f:
        w = f.readline().split()
        a = [int(x) for x in f.readline().split()[1:]]
        b = [int(x) for x in f.readline().split()[1:]]
    tick, cores = os.sysconf("SC_CLK_TCK"), os.cpu_count() or 1
    wall = float(w[1]) - float(w[0])
    diff = [y - x for x, y in zip(a, b)] + [0] * 8
    busy = (diff[0] + diff[1] + diff[2] + diff[5] + diff[6]) / tick
    cap = wall * cores
    return {"wall_s": wall, "own_cpu_s": e["cpu_s"], "machine_busy_s": busy,
            "others_pct": max(0.0, 100 * (busy - e["cpu_s"]) / cap), "steal_pct": 100 * diff[7] / tick / cap}


def main():
    if sys.argv[1] == "--noise":   # run.sh: print max(others, steal) % of run NAME
        d, name = sys.argv[2:4]
        n = noise_of(d, name, load(d, name))
        print(f"{max(n['others_pct'], n['steal_pct']):.1f}" if n else "0")
        return
    d, sent_path, vocab_path = sys.argv[1:4]
    bf, sql, ort, pt, pta, pts, meta = (load(d, n) for n in ("bertfill", "bertfill_sql", "ort", "torch",
                                                             "torch_asis", "torch_spin", "meta"))
    bf8, sql8, ort8, pt8 = (load(d, n) for n in ("bertfill_int8", "bertfill_sql_int8", "ort_int8", "torch_int8"))
    bf16 = load(d, "bertfill_bf16")
    meta = meta or {}
    sets, ntok = read_sentences(sent_path)
    vocab = read_vocab(vocab_path)

    def single_label(key):
        if key in LENGTHS:
            return f"1 sentence, {key} tokens (ms)"
        text = sets.get(key, ["?"])[0]
        return f"1 sentence, {key.replace('-', ' ')} ({ntok.get(key, '?')} tokens: {text}) (ms)"
    singles = [n for n in LENGTHS if f"single-{n}" in sets] + [k for k in DEMOS if k in sets]

    peers = [("bertfill", bf), ("ONNX Runtime", ort), ("PyTorch", pt)]
    cols = [name for name, _ in peers]
    head = "| | " + " | ".join(cols) + " | bertfill / ORT | PyTorch / ORT |"
    sep = "|---" * (len(cols) + 3) + "|"
    rows = []
    ratios = {}

    def row(label, vals, r_bf, r_pt):
        rows.append(f"| {label} | " + " | ".join(vals) + f" | {fmt_ratio(r_bf)} | {fmt_ratio(r_pt)} |")

    for n in singles:
        v = [get(e, "single", n, "median_ms") for _, e in peers]
        r_bf, r_pt = ratio(v[0], v[1]), ratio(v[2], v[1])
        ratios[f"single_{n}"] = r_bf
        row(single_label(n), [fmt(x) for x in v], r_bf, r_pt)
    for b in BATCHES:
        v = [get(e, "batch", b, "sent_per_s") for _, e in peers]
        r_bf, r_pt = ratio(v[0], v[1]), ratio(v[2], v[1])
        ratios[f"batch_{b}"] = r_bf
        n = get(bf, "batch", b, "sentences") or get(ort, "batch", b, "sentences") or b
        label = f"batch of {n} sentences, 16-23 tokens (sentences/s)"
        if str(n) != b:
            label = f"batch set {b}, first {n} sentences, 16-23 tokens (sentences/s)"
        row(label, [fmt(x) for x in v], r_bf, r_pt)
        sv = get(sql, "prefill", b, "sent_per_s")
        if sv is not None:
            r = ratio(sv, v[1])
            ratios[f"batch_{b}_sql"] = r
            row(f"… same through SQL: bert_prefill + UPDATE (sentences/s)",
                [fmt(sv)] + ["—"] * (len(peers) - 1), r, None)
    v = [get(e, "load_ms") for _, e in peers]
    ratios["load"] = ratio(v[0], v[1])
    row("model load (ms)", [fmt(x) for x in v], ratio(v[0], v[1]), ratio(v[2], v[1]))
    v = [get(e, "first_run_ms") for _, e in peers]
    row("first inference after load, 8 tokens (ms)", [fmt(x) for x in v], ratio(v[0], v[1]), ratio(v[2], v[1]))
    hit = get(sql, "cache_hit_us")
    dash = ["—"] * (len(peers) - 1)
    row("cache hit: repeated bert_fill through SQL (µs per call)", [fmt(hit)] + dash, None, None)
    th = get(sql, "cache_table_hit_us")
    if th is not None:
        row("… LRU missed, read from the bertfill_cache table (µs per call)", [fmt(th)] + dash, None, None)
    rb = get(sql, "row_by_row_update")
    if rb:
        r = ratio(rb["sent_per_s"], get(ort, "batch", "256", "sent_per_s"))
        row(f"UPDATE of {rb['sentences']} rows without bert_prefill, one encoder run per row (sentences/s)",
            [fmt(rb["sent_per_s"])] + dash, r, None)
    col = get(sql, "column")
    if col:
        n = col["sentences"]

        def col_row(label, e):
            if not e:
                return
            if "error" in e:
                why = e["error"].split(", so")[0].replace("bert_prefill: ", "")
                row(f"{label}: refused, an error ({why})", ["—"] + dash, None, None)
            else:
                row(f"{label} (sentences/s; {e['seqs']} sequences in {e['encoder_runs']} encoder runs)",
                    [fmt(e["sent_per_s"])] + dash, None, None)
        dflt, lo = col.get("default", {}), col.get("lowered", {})
        col_row(f"column fill, {n} rows, through SQL: UPDATE … FROM fill_rows", dflt.get("fill_rows"))
        col_row("… bert_prefill + UPDATE", dflt.get("prefill"))
        col_row("… plain UPDATE, bert_fill per row", dflt.get("plain"))
        if lo:
            lim = f"bert_cache_limit {lo.get('cache_limit')}, bert_cache_lru {lo.get('lru')}"
            col_row(f"… limits lowered below N ({lim}): UPDATE … FROM fill_rows", lo.get("fill_rows"))
            col_row(f"… limits lowered below N ({lim}): bert_prefill + UPDATE", lo.get("prefill"))
        if col.get("same_filled") is False:
            row("… the ways of filling the column gave different texts", ["!"] + dash, None, None)
    bl = get(sql, "bert_load_ms")
    if bl is not None:
        row("model load through SQL: SELECT bert_load(dir) (ms)", [fmt(bl)] + dash, ratio(bl, get(ort, "load_ms")), None)
    v = [get(e, "peak_rss_mb") for _, e in peers]
    row("peak RSS (MB)", [fmt(x) for x in v], ratio(v[0], v[1]), ratio(v[2], v[1]))

    # The int8 engines side by side, against ORT int8 and ORT fp32.
    peers8 = [("bertfill int8", bf8), ("ONNX Runtime int8", ort8), ("PyTorch int8", pt8)]
    rows8 = []
    ratios8 = {}

    def row8(label, vals, r_ort8, r_ort):
        rows8.append(f"| {label} | " + " | ".join(vals) + f" | {fmt_ratio(r_ort8)} | {fmt_ratio(r_ort)} |")
    if bf8 or ort8 or pt8:
        for n in singles:
            v = [get(e, "single", n, "median_ms") for _, e in peers8]
            r8, r = ratio(v[0], v[1]), ratio(v[0], get(ort, "single", n, "median_ms"))
            ratios8[f"single_{n}"], ratios8[f"single_{n}_vs_fp32"] = r8, r
            row8(single_label(n), [fmt(x) for x in v], r8, r)
        for b in BATCHES:
            v = [get(e, "batch", b, "sent_per_s") for _, e in peers8]
            r8, r = ratio(v[0], v[1]), ratio(v[0], get(ort, "batch", b, "sent_per_s"))
            ratios8[f"batch_{b}"], ratios8[f"batch_{b}_vs_fp32"] = r8, r
            n = get(bf8, "batch", b, "sentences") or get(ort8, "batch", b, "sentences") or b
            row8(f"batch {'of ' + str(n) if str(n) == b else f'set {b}, first {n}'} sentences, 16-23 tokens "
                 "(sentences/s)", [fmt(x) for x in v], r8, r)
            sv = get(sql8, "prefill", b, "sent_per_s")
            if sv is not None:
                r8, r = ratio(sv, v[1]), ratio(sv, get(ort, "batch", b, "sent_per_s"))
                ratios8[f"batch_{b}_sql"], ratios8[f"batch_{b}_sql_vs_fp32"] = r8, r
                row8("… same through SQL: bert_load(dir, 'int8'), bert_prefill + UPDATE (sentences/s)",
                     [fmt(sv), "—", "—"], r8, r)
        v = [get(e, "load_ms") for _, e in peers8]
        row8("model load (ms)", [fmt(x) for x in v], ratio(v[0], v[1]), ratio(v[0], get(ort, "load_ms")))
        v = [get(e, "first_run_ms") for _, e in peers8]
        row8("first inference after load, 8 tokens (ms)", [fmt(x) for x in v], ratio(v[0], v[1]),
             ratio(v[0], get(ort, "first_run_ms")))
        v = [get(e, "peak_rss_mb") for _, e in peers8]
        row8("peak RSS (MB)", [fmt(x) for x in v], ratio(v[0], v[1]), ratio(v[0], get(ort, "peak_rss_mb")))

    # bertfill bf16 against bertfill fp32 and ORT fp32 (no bf16 peer in this harness).
    rows16 = []
    ratios16 = {}
    if bf16:
        for n in singles:
            v = get(bf16, "single", n, "median_ms")
            a, o = get(bf, "single", n, "median_ms"), get(ort, "single", n, "median_ms")
            ratios16[f"single_{n}_vs_bertfill_fp32"], ratios16[f"single_{n}_vs_ort_fp32"] = ratio(v, a), ratio(v, o)
            rows16.append(f"| {single_label(n)} | {fmt(v)} | {fmt(a)} | {fmt(o)} | {fmt_ratio(ratio(v, a))} | "
                          f"{fmt_ratio(ratio(v, o))} |")
        for b in BATCHES:
            v = get(bf16, "batch", b, "sent_per_s")
            a, o = get(bf, "batch", b, "sent_per_s"), get(ort, "batch", b, "sent_per_s")
            ratios16[f"batch_{b}_vs_bertfill_fp32"], ratios16[f"batch_{b}_vs_ort_fp32"] = ratio(v, a), ratio(v, o)
            n = get(bf16, "batch", b, "sentences") or b
            rows16.append(f"| batch {'of ' + str(n) if str(n) == b else f'set {b}, first {n}'} sentences, 16-23 "
                          f"tokens (sentences/s) | {fmt(v)} | {fmt(a)} | {fmt(o)} | {fmt_ratio(ratio(v, a))} | "
                          f"{fmt_ratio(ratio(v, o))} |")
        for label, key in (("model load (ms)", "load_ms"), ("first inference after load, 8 tokens (ms)",
                                                            "first_run_ms"), ("peak RSS (MB)", "peak_rss_mb")):
            v, a, o = get(bf16, key), get(bf, key), get(ort, key)
            rows16.append(f"| {label} | {fmt(v)} | {fmt(a)} | {fmt(o)} | {fmt_ratio(ratio(v, a))} | "
                          f"{fmt_ratio(ratio(v, o))} |")

    # Each int8 engine against its own fp32.
    agree8 = {}
    for name, a, b in (("bertfill int8 vs bertfill fp32", bf8, bf), ("ONNX Runtime int8 vs ONNX Runtime fp32", ort8, ort),
                       ("PyTorch int8 vs PyTorch fp32", pt8, pt)):
        r = agreement(a, b)
        if r:
            agree8[name] = r
    r = agreement(bf16, bf)
    if r:
        agree8["bertfill bf16 vs bertfill fp32"] = r

    # Agreement on top-1.
    agree = {}
    for (na, a), (nb, b) in [(peers[0], peers[1]), (peers[0], peers[2]), (peers[1], peers[2])]:
        r = top1_agreement(a, b)
        if r:
            agree[f"{na} vs {nb}"] = r

    def sql_vs(sq, eng):
        """How often bert_fill through SQL wrote exactly the text with eng's top-1 token in the [MASK]."""
        same = total = 0
        for key, filled in (sq or {}).get("filled", {}).items():
            tops = get(eng, "top1", key) or []
            for i, f in enumerate(filled[:len(tops)]):
                tok = vocab[tops[i]]
                tok = tok[2:] if tok.startswith("##") else tok
                total += 1
                same += f == sets[key][i].replace("[MASK]", tok, 1)
        return (same, total) if total else None
    for label, sq, eng in (("bertfill SQL bert_fill vs ONNX Runtime", sql, ort),
                           ("bertfill int8: SQL bert_fill vs the engine", sql8, bf8)):
        r = sql_vs(sq, eng)
        if r:
            agree[label] = r

    lines = []
    lines.append(f"## make bench — {meta.get('date', '')}{' (BENCH_QUICK=1: fewer runs, smaller sets)' if meta.get('quick') else ''}")
    lines.append("")
    lines.append(f"Model: {meta.get('model', '?')} — random weights, bert-base-chinese shape "
                 f"({meta.get('shape', '?')}), fp32 weights, vocabulary: {meta.get('vocab_source', '?')}.  "
                 f"Machine: {meta.get('cpu', '?')}, {meta.get('cores', '?')} cores "
                 f"(load average before the run: {meta.get('loadavg_before', '?')}, after: {meta.get('loadavg_after', '?')}).")
    lines.append("")
    lines.append(head)
    lines.append(sep)
    lines.extend(rows)
    lines.append("")
    lines.append("Latency: median of repeated runs after warm-up, one [MASK] per sentence, the whole call "
                 "(bertfill: tokenize + bf_fill with k=5; ORT/PyTorch: ids in, softmax and top 5 at the [MASK] out). "
                 "The demo sentences are the five of the column in sql/demo.sql (`make demo`). "
                 "Batches: ORT and PyTorch in padded batches of "
                 f"{get(ort, 'batch_size') or get(pt, 'batch_size') or 32} with an attention mask; bertfill "
                 f"engine in bf_fill calls of {get(bf, 'batch_size') or '?'} sentences without padding; "
                 "bertfill SQL: `SELECT bert_prefill(text) FROM t` then `UPDATE t SET filled = bert_fill(text)` "
                 "on a fresh table. ratio columns: time ratio for latency/load/RSS (lower is better), "
                 "rate ratio for sentences/s (higher is better).")
    lines.append("")
    eng = []
    if bf:
        eng.append(f"bertfill: BLAS core {bf.get('blas_core') or '?'}, {bf.get('threads')} threads, "
                   f"weights {bf.get('dtype')}; load = OpenBLAS init {fmt(bf.get('blas_init_ms'))} ms + "
                   f"model mmap {fmt(bf.get('model_load_ms'))} ms"
                   + (f"; {bf['token_mismatches']} sentences tokenized differently from the peers' ids"
                      if bf.get("token_mismatches") else ""))
    if ort:
        eng.append(f"ONNX Runtime: {ort.get('engine')}, {ort.get('threads')} intra-op threads, "
                   "logits at all positions (the exported graph), session load includes graph optimization")
    if pt:
        eng.append(f"PyTorch: torch {pt.get('torch_version')} (Debian), torch.set_num_threads({pt.get('threads')}), "
                   f"OPENBLAS_CORETYPE={pt.get('openblas_coretype') or 'unset'}, "
                   f"OMP_WAIT_POLICY={pt.get('omp_wait_policy') or 'unset'}, no_grad, MLM head at masks only "
                   "(its fast configuration; others below)")
    if bf8:
        eng.append(f"bertfill int8: bf_model_load_as(dir, BF_PRECISION_INT8) ({bf8.get('precision')}); "
                   f"load {fmt(bf8.get('model_load_ms'))} ms; through SQL: SELECT bert_load(dir, 'int8')")
    if ort8:
        ops = meta.get("ort_int8_ops")
        eng.append(f"ONNX Runtime int8: {ort8.get('engine')}, the same export made int8 by "
                   f"tests/bench/quantize_onnx.py ({meta.get('ort_int8_graph') or 'see run.sh'})"
                   + (f"; after ORT's own fusions it runs: {ops}" if ops else ""))
    if pt8:
        eng.append(f"PyTorch int8: {pt8.get('quantization')} ({pt8.get('quantized_linear')} Linear layers), "
                   f"otherwise as PyTorch above")
    for x in meta.get("missing", []):
        eng.append(f"MISSING: {x}")
    lines.extend(f"- {x}" for x in eng)
    lines.append("")
    if rows8:
        lines.append("int8 (per-channel int8 weights, activations quantized at run time):")
        lines.append("")
        lines.append("| int8 | " + " | ".join(n for n, _ in peers8) + " | bertfill int8 / ORT int8 | "
                     "bertfill int8 / ORT fp32 |")
        lines.append("|---" * (len(peers8) + 3) + "|")
        lines.extend(rows8)
        lines.append("")
    if rows16:
        lines.append(f"bf16 (bertfill's bf16 mode, {get(bf16, 'bf16_kernels') or 'kernel not reported'}: bf16 "
                     "weights and activations, float sums; against bertfill fp32 and ORT fp32 of this run):")
        lines.append("")
        lines.append("| bf16 | bertfill bf16 | bertfill fp32 | ONNX Runtime fp32 | bf16 / bertfill fp32 | "
                     "bf16 / ORT fp32 |")
        lines.append("|---" * 6 + "|")
        lines.extend(rows16)
        lines.append("")
    if agree8:
        lines.append("Agreement of int8 (and bf16) with fp32, each engine with itself, on the benchmark sentences (random "
                     "weights: large logits with small gaps, a harsh test; top-5: mean |A∩B|/5 of the two top-5 "
                     "sets; |Δp|: the top-1 probability of each mode):")
        lines.append("")
        lines.append("| | top-1 agreement | top-5 overlap | max \\|Δp\\| top-1 | median \\|Δp\\| top-1 |")
        lines.append("|---|---|---|---|---|")
        lines.extend(f"| {k} | {fmt_agreement(r)} |" for k, r in agree8.items())
        lines.append("")
    if agree:
        lines.append("Top-1 agreement on the benchmark sentences: " + "; ".join(
            f"{k} {100.0 * s / t:.1f}% ({s}/{t})" for k, (s, t) in agree.items()) + ".")
        lines.append("")

    # PyTorch configurations.
    variants = [(f"OPENBLAS_CORETYPE={e.get('openblas_coretype') or 'unset (as installed)'}, "
                 f"OMP_WAIT_POLICY={e.get('omp_wait_policy') or 'unset (spinning)'}", e)
                for e in (pt, pta, pts) if e]
    if len(variants) > 1:
        lines.append("PyTorch configurations (same script, same threads; the two others on fewer runs):")
        lines.append("")
        lines.append("| PyTorch | " + " | ".join(n for n, _ in variants) + " |")
        lines.append("|---" * (len(variants) + 1) + "|")
        for n in LENGTHS:
            lines.append(f"| 1 sentence, {n} tokens (ms) | " +
                         " | ".join(fmt(get(e, "single", n, "median_ms")) for _, e in variants) + " |")
        lines.append("| batch of 256 sentences (sentences/s) | " +
                     " | ".join(fmt(get(e, "batch", "256", "sent_per_s")) for _, e in variants) + " |")
        lines.append("")
        lines.append("OpenBLAS as installed: Debian 12's OpenBLAS 0.3.21 does not know this CPU and uses its "
                     "Prescott kernels.  Spinning: Debian's torch runs its own ops on OpenMP threads and its "
                     "matrix products on OpenBLAS's threads; by default the idle OpenMP threads spin and take "
                     "the cores from OpenBLAS.")
        lines.append("")

    # What else the machine did meanwhile (run.sh's /proc/stat snapshots).
    noise = {}
    for name, e in (("bertfill", bf), ("bertfill_int8", bf8), ("bertfill_bf16", bf16), ("bertfill_sql", sql),
                    ("bertfill_sql_int8", sql8),
                    ("ort", ort), ("ort_int8", ort8), ("torch", pt), ("torch_int8", pt8),
                    ("torch_asis", pta), ("torch_spin", pts)):
        n = noise_of(d, name, e)
        if n:
            noise[name] = n
    if noise:
        lines.append("The machine during each run (from /proc/stat: CPU time of everything else, and time the "
                     "hypervisor gave to other machines; a few % is normal):")
        lines.append("")
        lines.append("| run | wall s | own CPU, cores busy | other processes, % of the CPUs | steal, % |")
        lines.append("|---|---|---|---|---|")
        for name, n in noise.items():
            lines.append(f"| {name} | {n['wall_s']:.0f} | {n['own_cpu_s'] / n['wall_s']:.2f} | "
                         f"{n['others_pct']:.1f} | {n['steal_pct']:.1f} |")
        lines.append("")
        noisy = [k for k, n in noise.items() if n["others_pct"] > 5 or n["steal_pct"] > 5]
        if noisy:
            lines.append(f"**Noisy run:** other work took more than 5% of the CPUs during {', '.join(noisy)}; "
                         "ratios involving those runs are not clean — run `make bench` again on a quiet machine.")
            lines.append("")

    # The project's targets against ONNX Runtime.
    tg = []

    def target(name, value, ok, shown):
        tg.append(f"| {name} | {shown} | {'met' if ok else ('n/a' if ok is None else 'missed')} |")
    for n in ("16", "128"):
        r = ratios.get(f"single_{n}")
        target(f"1 sentence, {n} tokens ≤ 0.8 × ORT", r, None if r is None else r <= 0.8, fmt_ratio(r))
    for b in BATCHES:
        r = ratios.get(f"batch_{b}")
        target(f"batch {b} ≥ 1.3 × ORT (engine)", r, None if r is None else r >= 1.3, fmt_ratio(r))
        r = ratios.get(f"batch_{b}_sql")
        if r is not None:
            target(f"batch {b} ≥ 1.3 × ORT (through SQL)", r, r >= 1.3, fmt_ratio(r))
    band = [(ratios.get(f"single_{n}"), n) for n in ("20", "24", "32") + DEMOS
            if ratios.get(f"single_{n}") is not None and (n not in DEMOS or 17 <= ntok.get(n, 0) <= 32)]
    if band:
        r, n = max(band)
        target("1 sentence, 17-32 tokens ≤ 0.85 × ORT (worst of 20, 24, 32 tokens and the demo's sentences)", r,
               r <= 0.85, f"{fmt_ratio(r)} ({n if n in DEMOS else n + ' tokens'})")
    if bf8:
        for n, lim, lim8 in (("16", 0.4, 0.8), ("128", 0.35, None)):
            r = ratios8.get(f"single_{n}_vs_fp32")
            target(f"int8, 1 sentence, {n} tokens ≤ {lim} × ORT fp32", r, None if r is None else r <= lim, fmt_ratio(r))
            r = ratios8.get(f"single_{n}")
            if lim8:
                target(f"int8, 1 sentence, {n} tokens ≤ {lim8} × ORT int8", r, None if r is None else r <= lim8,
                       fmt_ratio(r))
        for b in BATCHES:
            for how, key in (("engine", f"batch_{b}"), ("through SQL", f"batch_{b}_sql")):
                r = ratios8.get(key + "_vs_fp32")
                if r is not None or how == "engine":
                    target(f"int8, batch {b} ≥ 3 × ORT fp32 ({how})", r, None if r is None else r >= 3, fmt_ratio(r))
                r = ratios8.get(key)
                if r is not None or how == "engine":
                    target(f"int8, batch {b} ≥ 1.3 × ORT int8 ({how})", r, None if r is None else r >= 1.3,
                           fmt_ratio(r))
        a, o = agree8.get("bertfill int8 vs bertfill fp32"), agree8.get("ONNX Runtime int8 vs ONNX Runtime fp32")
        pct = lambda r: "n/a" if not r else f"{r['top1_pct']:.1f}%"   # noqa: E731
        target("int8 top-1 agreement with fp32 ≥ ORT int8's (random model, bench sentences)", a,
               None if not a or not o else a["top1_pct"] >= o["top1_pct"], f"{pct(a)} against {pct(o)}")
    target("cache hit ≤ 20 µs per bert_fill", hit, None if hit is None else hit <= 20, fmt(hit, " µs"))
    lm = get(bf, "load_ms")
    target("model load ≤ 50 ms", lm, None if lm is None else lm <= 50, fmt(lm, " ms"))
    lines.append("| target (against ONNX Runtime) | measured | |")
    lines.append("|---|---|---|")
    lines.extend(tg)
    lines.append("")

    # Where bertfill's time goes.
    cfg = {}
    try:
        with open(os.path.join(os.path.dirname(vocab_path), "config.json")) as f:
            cfg = json.load(f)
    except OSError:
        pass
    H, I, L = cfg.get("hidden_size", 768), cfg.get("intermediate_size", 3072), cfg.get("num_hidden_layers", 12)
    w_per_tok = 2 * (4 * H * H + 2 * H * I)          # GEMM flops per token per layer
    w_bytes = L * (4 * H * H + 2 * H * I) * 4         # fp32 encoder weights streamed per pass

    def rates(tokens, seqs, enc_ms, passes):
        if not enc_ms:
            return "n/a", "n/a"
        avg = tokens / max(seqs, 1)
        flops = L * (tokens * w_per_tok + seqs * 4 * avg * avg * H)
        return f"{flops / enc_ms / 1e6:.0f}", f"{passes * w_bytes / enc_ms / 1e6:.1f}"
    if bf or bf8:
        lines.append("bertfill per stage (bf_run_timings, ms; medians for single sentences, totals for a batch round):")
        lines.append("")
        lines.append("| | embed | encoder | MLM head | softmax+top-k | whole call | encoder GFLOP/s | "
                     "encoder weights read, GB/s |")
        lines.append("|---|---|---|---|---|---|---|---|")
    for e, tag, wb in ((bf, "", 4), (bf8, ", int8", 1)):   # bytes per weight
        if not e:
            continue
        for n in LENGTHS:
            s = get(e, "single", n, "stages_median")
            if s:
                gf, gb = rates(int(n), 1, s["encode_ms"], wb / 4)
                lines.append(f"| 1 sentence, {n} tokens{tag} | {fmt(s['embed_ms'])} | {fmt(s['encode_ms'])} | "
                             f"{fmt(s['head_ms'])} | {fmt(s['topk_ms'])} | {fmt(get(e, 'single', n, 'median_ms'))} | "
                             f"{gf} | {gb} |")
        for b in BATCHES:
            s = get(e, "batch", b, "stages_last_round")
            if s:
                tot = get(e, "batch", b, "seconds")
                nb = get(e, "batch_size") or 32
                gf, gb = rates(s["tokens"], s["seqs"], s["encode_ms"], -(-s["seqs"] // nb) * wb / 4)
                lines.append(f"| batch {get(e, 'batch', b, 'sentences')} ({s['tokens']} tokens){tag} | "
                             f"{fmt(s['embed_ms'])} | {fmt(s['encode_ms'])} | {fmt(s['head_ms'])} | {fmt(s['topk_ms'])} | "
                             f"{fmt(tot[-1] * 1e3) if tot else 'n/a'} | {gf} | {gb} |")
    if bf or bf8:
        lines.append("")
        lines.append(f"GFLOP/s: the encoder's arithmetic ({w_per_tok * L / 1e6:.0f} MFLOP per token for the GEMMs, "
                     "plus attention, counted for every layer at every token: effective rates, since bertfill's last "
                     "layer does its queries and feed-forward at the mask rows only) over the encoder time; GB/s: its fp32 weights "
                     f"({w_bytes / 1e6:.0f} MB, read once per bf_fill call; int8: a quarter of that) over the same time.  "
                     "One short sentence cannot go "
                     "faster than reading those weights from memory once; a batch, than the GEMMs' arithmetic.")
        lines.append("")
    md = "\n".join(lines) + "\n"
    with open(os.path.join(d, "results.md"), "w", encoding="utf-8") as f:
        f.write(md)
    raw = {"meta": meta, "bertfill": bf, "bertfill_sql": sql, "onnxruntime": ort, "pytorch": pt,
           "pytorch_openblas_as_installed": pta, "pytorch_omp_spinning": pts,
           "bertfill_int8": bf8, "bertfill_sql_int8": sql8, "onnxruntime_int8": ort8, "pytorch_int8": pt8,
           "ratios_to_ort": ratios, "int8_ratios_to_ort_int8": {k: v for k, v in ratios8.items() if "vs_fp32" not in k},
           "int8_ratios_to_ort_fp32": {k[:-8]: v for k, v in ratios8.items() if k.endswith("_vs_fp32")},
           "machine_during_runs": noise,
           "agreement": {k: {"same": s, "total": t, "percent": 100.0 * s / t} for k, (s, t) in agree.items()},
           "agreement_int8_vs_fp32": agree8, "bertfill_bf16": bf16, "bf16_ratios": ratios16}
    for e in raw.values():   # the top-1 lists are long and checked above
        if isinstance(e, dict):
            e.pop("filled", None)
    with open(os.path.join(d, "results.json"), "w", encoding="utf-8") as f:
        json.dump(raw, f, indent=1, ensure_ascii=False)
    sys.stdout.write(md)


if __name__ == "__main__":
    main()
