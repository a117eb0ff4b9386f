#!/usr/bin/python3
"""t_bench.py — the parts of `make bench` (tests/bench/) that can be checked in
seconds, without the bert-base-shaped model or the peers:

  * tests/bench/sentences.py, on the shipped model's vocabulary: every set,
    single sentences of exactly their token count with one [MASK] at the
    position written, the demo's five sentences (those of sql/demo.sql's
    column, in its order), and bertfill's tokenizer (bert_tokenize) giving
    exactly the ids written, which the peers use;
  * tests/bench/report.py on made-up engine results: the agreement of each
    int8 engine with its fp32 (top-1, top-5 overlap, max and median |Δp| of
    the top-1 probability) against numbers worked out by hand below; an engine
    whose JSON says {"missing": ...} counts as absent and run.sh's reasons are
    listed as MISSING; a run with no int8 engine at all still gives a report.

Run by tests/run.sh.  Prints "ok NAME" / "FAIL NAME: why" / "skip NAME: why".
"""
import json
import os
import re
import sqlite3
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# bftest (the check lines, where the build is) is in tests/python
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
from bftest import EXT, check, exit_code, skip  # noqa: E402

PY = sys.executable
SHIPPED = os.path.join(ROOT, "model", "bertfill-zh-tiny")


def read_tsv(path):
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            name, text, ids, mpos = line.rstrip("\n").split("\t")
            rows.append((name, text, [int(x) for x in ids.split()], int(mpos)))
    return rows


def test_sentences(tmp):
    out = os.path.join(tmp, "sentences.tsv")
    r = subprocess.run([PY, os.path.join(ROOT, "tests", "bench", "sentences.py"), SHIPPED, out],
                       capture_output=True, text=True)
    if r.returncode:
        check("sentences.py runs on the shipped model's vocabulary", False, r.stderr.strip())
        return
    rows = read_tsv(out)
    with open(os.path.join(SHIPPED, "vocab.txt"), encoding="utf-8", newline="") as f:
        vocab = f.read().split("\n")
    mask, cls, sep = vocab.index("[MASK]"), vocab.index("[CLS]"), vocab.index("[SEP]")
    names = [r[0] for r in rows]
    singles = [n for n in dict.fromkeys(names) if n.startswith("single-")]
    check("sentences.py: single sentences of 8, 12, 16, 20, 24, 32, 64 and 128 tokens, in that order",
          singles == [f"single-{n}" for n in (8, 12, 16, 20, 24, 32, 64, 128)], str(singles))
    check("sentences.py: each single sentence has its token count",
          all(len(ids) == int(n[7:]) for n, _, ids, _ in rows if n.startswith("single-")))
    check("sentences.py: 256 and 2000 batch sentences of 16-23 tokens",
          names.count("batch-256") == 256 and names.count("batch-2000") == 2000 and
          all(16 <= len(ids) <= 23 for n, _, ids, _ in rows if n.startswith("batch-")))
    check("sentences.py: every sentence is [CLS] ... [SEP] with one [MASK], at the position written",
          all(ids[0] == cls and ids[-1] == sep and ids.count(mask) == 1 and ids[mp] == mask
              for _, _, ids, mp in rows))
    with open(os.path.join(ROOT, "sql", "demo.sql"), encoding="utf-8") as f:
        block = re.search(r"INSERT INTO sentences\(text\) VALUES(.*?);", f.read(), re.S).group(1)
    demo_sql = re.findall(r"'([^']*)'", block)
    demos = [(n, t) for n, t, _, _ in rows if n.startswith("demo-")]
    check("sentences.py: the five sentences of the demo's column, as demo-1 .. demo-5",
          len(demo_sql) == 5 and demos == [(f"demo-{i}", t) for i, t in enumerate(demo_sql, 1)], str(demos))
    if not os.path.exists(EXT + ".so"):
        skip("sentences.py: bertfill tokenizes each sentence to the ids written", f"no {EXT}.so")
        return
    db = sqlite3.connect(":memory:")
    db.enable_load_extension(True)
    db.load_extension(EXT)
    db.execute("SELECT bert_load(?)", (SHIPPED,))
    differ = [t for n, t, ids, _ in rows if not n.startswith("batch-2000") and
              json.loads(db.execute("SELECT bert_tokenize(?)", (t,)).fetchone()[0]) != [vocab[i] for i in ids]]
    check("sentences.py: bertfill tokenizes each single, demo and batch-256 sentence to the ids written",
          not differ, f"{len(differ)} differ, e.g. {differ[:1]}")


def engine(top5, ms=10.0, rate=100.0, **extra):
    """An engine's JSON as the drivers write it, with the given top-5 per set."""
    e = {"engine": "made up", "single": {"8": {"median_ms": ms}}, "batch": {"256": {"sentences": 3,
         "sent_per_s": rate}}, "load_ms": 1.0, "first_run_ms": ms, "peak_rss_mb": 100.0,
         "top5": top5, "top1": {k: [c[0][0] for c in v] for k, v in top5.items()}}
    e.update(extra)
    return e


def test_report(tmp):
    d = os.path.join(tmp, "bench")
    os.makedirs(d)
    vocab = os.path.join(tmp, "vocab.txt")
    with open(vocab, "w", encoding="utf-8") as f:
        f.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [chr(0x4E00 + i) for i in range(20)]) + "\n")
    sent = os.path.join(d, "sentences.tsv")
    with open(sent, "w", encoding="utf-8") as f:
        f.write("single-8\t一二[MASK]三四五\t2 5 6 4 7 8 9 3\t3\n")
        for i in range(3):
            f.write(f"batch-256\t一[MASK]{i}\t2 5 4 {10 + i} 3\t2\n")
    p = [0.5, 0.2, 0.1, 0.05, 0.01]
    fp32 = {"single-8": [[[5, 6, 7, 8, 9], p]],
            "batch-256": [[[5, 6, 7, 8, 9], p], [[5, 6, 7, 8, 9], [0.4] + p[1:]], [[5, 6, 7, 8, 9], p]]}
    # Against fp32, sentence by sentence: the same top 1, one of five candidates other
    # (overlap 4/5), |dp| 0.05; the very same; top 1 and 2 swapped (5/5), |dp| 0.1;
    # nothing in common (0/5), |dp| 0.3.  So: top-1 2 of 4 (50%), overlap (0.8 + 1 + 1 + 0) / 4 = 70%,
    # max |dp| 0.3, median |dp| (0.05 + 0.1) / 2 = 0.075.
    int8 = {"single-8": [[[5, 6, 7, 8, 10], [0.45] + p[1:]]],
            "batch-256": [[[5, 6, 7, 8, 9], p], [[6, 5, 7, 8, 9], [0.3] + p[1:]], [[15, 16, 17, 18, 19], [0.2] + p[1:]]]}
    files = {"bertfill": engine(fp32, precision="fp32"), "bertfill_int8": engine(int8, ms=4.0, precision="int8"),
             "bertfill_bf16": engine(fp32, ms=6.0, rate=150.0, precision="bf16", bf16_kernels="avx512bf16"),
             "ort": engine(fp32), "ort_int8": engine(fp32, ms=5.0),
             "torch": engine(fp32), "torch_int8": {"missing": "no quantized engine (made up)"},
             "meta": {"missing": ["torch_int8: no quantized engine (made up)"], "cpu": "made-up CPU"}}
    for name, e in files.items():
        with open(os.path.join(d, name + ".json"), "w") as f:
            json.dump(e, f)
    r = subprocess.run([PY, os.path.join(ROOT, "tests", "bench", "report.py"), d, sent, vocab],
                       capture_output=True, text=True)
    check("report.py: a report of made-up engine results", r.returncode == 0, r.stderr.strip()[-300:])
    if r.returncode:
        return
    with open(os.path.join(d, "results.json"), encoding="utf-8") as f:
        res = json.load(f)
    ag = res.get("agreement_int8_vs_fp32", {})
    b = ag.get("bertfill int8 vs bertfill fp32", {})
    want = {"n": 4, "top1_same": 2, "top1_pct": 50.0, "top5_overlap": 0.7, "dp_max": 0.3, "dp_median": 0.075}
    check("report.py: bertfill int8 against fp32: top-1 50%, top-5 overlap 70%, |dp| max 0.3, median 0.075",
          b.keys() == want.keys() and all(abs(b[k] - v) < 1e-9 for k, v in want.items()), str(b))
    o = ag.get("ONNX Runtime int8 vs ONNX Runtime fp32", {})
    check("report.py: identical results agree 100%, overlap 100%, |dp| 0",
          o.get("top1_pct") == 100.0 and o.get("top5_overlap") == 1.0 and o.get("dp_max") == 0, str(o))
    check("report.py: an engine that is {\"missing\": ...} is absent, not compared",
          "PyTorch int8 vs PyTorch fp32" not in ag and res.get("pytorch_int8") is None, str(list(ag)))
    md = r.stdout
    check("report.py: the table lists the MISSING reasons",
          "MISSING: torch_int8: no quantized engine (made up)" in md)
    check("report.py: the agreement table has a row per pair present",
          "| bertfill int8 vs bertfill fp32 | 50.0% (2/4) | 70.0% | 0.3000 | 0.0750 |" in md, md[-1500:])
    check("report.py: the int8 table, with bertfill int8 / ORT int8 and / ORT fp32",
          "| 1 sentence, 8 tokens (ms) | 4.00 | 5.00 | n/a | 0.80× | 0.40× |" in md)
    check("report.py: the bf16 table, against bertfill fp32 and ORT fp32",
          "| 1 sentence, 8 tokens (ms) | 6.00 | 10.0 | 10.0 | 0.60× | 0.60× |" in md and
          "| batch set 256, first 3 sentences, 16-23 tokens (sentences/s) | 150 | 100 | 100 | 1.50× | "
          "1.50× |" in md
          and "bf16 (bertfill's bf16 mode, avx512bf16:" in md, md[md.find("bf16 (bert"):][:900])
    b16 = ag.get("bertfill bf16 vs bertfill fp32", {})
    check("report.py: bf16 in the agreement table (identical top 5 here: 100%)",
          b16.get("top1_pct") == 100.0 and b16.get("n") == 4, str(b16))
    check("report.py: results.json has the bf16 ratios",
          abs(res.get("bf16_ratios", {}).get("single_8_vs_bertfill_fp32", 0) - 0.6) < 1e-9,
          str(res.get("bf16_ratios")))
    for name in ("bertfill_int8", "ort_int8", "torch_int8", "bertfill_bf16"):
        os.remove(os.path.join(d, name + ".json"))
    r = subprocess.run([PY, os.path.join(ROOT, "tests", "bench", "report.py"), d, sent, vocab],
                       capture_output=True, text=True)
    check("report.py: a run without int8 and bf16 engines has no int8 or bf16 tables",
          r.returncode == 0 and "bertfill int8 / ORT int8" not in r.stdout and "Agreement of int8" not in r.stdout
          and "bf16 / bertfill fp32" not in r.stdout,
          r.stderr.strip()[-300:])


def main():
    with tempfile.TemporaryDirectory() as tmp:
        test_sentences(tmp)
        test_report(tmp)
    sys.exit(exit_code())


if __name__ == "__main__":
    main()
