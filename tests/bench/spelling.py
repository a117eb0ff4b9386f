#!/usr/bin/python3
"""The spelling check's speed (issue 39): its column form against fill_rows on the
same texts, and the naive loop (every character masked in turn) as a reference.

    /usr/bin/python3 tests/bench/spelling.py MODEL_DIR [PRECISION [N [NAIVE_N]]]
    make bench runs it on build/models/bert-base-random (fp32, int8) and the shipped model

Texts: the first N (default 256) everyday lines held out of the shipped model's
training (model/heldout.py, from ../shared/data/corpus-zh) of 8 to 40
characters; skipped with a reason where the corpus is absent.  Each row of the
table is sentences/s over those texts, the memo cache off, with the engine's
threads as set (BENCH_THREADS via bert_threads, default 2):
  fill_rows            each text with its middle character replaced by [MASK]
                       (one encoder run per batch of texts, the head at one mask)
  fill_suspects_rows   the texts as written, mode 'fast' (one screening run per
                       batch, then the suspects verified in batched runs) and
                       'thorough' (every eligible character verified)
  8 callers           bert_correct(text) from 8 threads at once (a connection
                       each, the texts dealt out in turn), with the batcher on
                       (concurrent checks share runs) and off (bert_batching(0):
                       each check its own runs, one after another)
  naive loop           every character masked in turn, fill_candidates(masked,
                       200) per character: issue 39's baseline (NAIVE_N texts,
                       default 16)
A model of random weights (bert-base-random) makes many characters suspicious:
the fast mode then verifies up to its cap (BF_SPELL_MAX_VERIFY) per text, the
most it ever costs; the shipped model shows text as a trained model reads it.
Run it only through /work/bin/quiet on a shared machine.
"""
import os
import sqlite3
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "model"))


def texts(n):
    import build_vocab
    import heldout
    corpus = build_vocab.DEFAULT_CORPUS
    if not os.path.isdir(corpus):
        sys.exit("skip: %s is absent (the held-out everyday lines come from it)" % corpus)
    out = []
    for _, line in heldout.everyday_heldout(corpus):
        line = line.strip()
        if 8 <= len(line) <= 40 and "[" not in line:
            out.append(line)
        if len(out) == n:
            break
    return out


def rate(c, sql, args, n):
    t0 = time.perf_counter()
    rows = c.execute(sql, args).fetchall()
    dt = time.perf_counter() - t0
    return n / dt, rows


def connect(model, precision):
    c = sqlite3.connect(":memory:", check_same_thread=False)
    c.enable_load_extension(True)
    c.load_extension(os.environ.get("BERTFILL_EXT", os.path.join(ROOT, "bertfill")))
    c.execute("SELECT bert_load(?, ?)", (model, precision))
    c.execute("SELECT bert_cache('off'), bert_busy_timeout(600000)")
    return c


def callers_rate(conns, ts, batching):
    """Sentences/s of bert_correct from one thread per connection at once."""
    conns[0].execute("SELECT bert_batching(?)", (batching,))
    start = threading.Barrier(len(conns) + 1)

    def work(i):
        start.wait()
        for s in ts[i::len(conns)]:
            conns[i].execute("SELECT bert_correct(?)", (s,)).fetchone()

    th = [threading.Thread(target=work, args=(i,)) for i in range(len(conns))]
    for t in th:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in th:
        t.join()
    dt = time.perf_counter() - t0
    conns[0].execute("SELECT bert_batching(1)")
    return len(ts) / dt


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    model = sys.argv[1]
    precision = sys.argv[2] if len(sys.argv) > 2 else "fp32"
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 256
    naive_n = int(sys.argv[4]) if len(sys.argv) > 4 else 16
    ts = texts(n)
    c = connect(model, precision)
    c.execute("SELECT bert_threads(?)", (int(os.environ.get("BENCH_THREADS", "2")),))
    c.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, text TEXT, masked TEXT)")
    c.executemany("INSERT INTO t(text, masked) VALUES (?, ?)",
                  [(s, s[:len(s) // 2] + "[MASK]" + s[len(s) // 2 + 1:]) for s in ts])
    c.execute("SELECT bert_correct('我再家里')").fetchall()  # warm: load, derived files, threads
    name = os.path.basename(os.path.normpath(model))
    rows_rate, _ = rate(c, "SELECT filled FROM fill_rows('SELECT id, masked FROM t')", (), len(ts))
    fast_rate, fast = rate(c, "SELECT corrected, suspects FROM fill_suspects_rows('SELECT id, text FROM t')",
                           (), len(ts))
    thorough_rate, _ = rate(c, "SELECT corrected FROM fill_suspects_rows('SELECT id, text FROM t', "
                               "'thorough')", (), len(ts))
    changed = sum(1 for (corr, _), s in zip(fast, ts) if corr != s)
    conns = [c] + [connect(model, precision) for _ in range(7)]
    batched_rate = callers_rate(conns, ts, 1)
    alone_rate = callers_rate(conns, ts, 0)
    t0 = time.perf_counter()
    for s in ts[:naive_n]:
        for i in range(len(s)):
            c.execute("SELECT token, score FROM fill_candidates(?, 200)",
                      (s[:i] + "[MASK]" + s[i + 1:],)).fetchall()
    naive_rate = naive_n / (time.perf_counter() - t0)
    chars = sum(len(s) for s in ts) / len(ts)
    print("| model | precision | texts (avg chars) | fill_rows | fill_suspects_rows fast | ratio | "
          "thorough | 8 callers, batched | 8 callers, not batched | naive loop | fast changed |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    print("| %s | %s | %d (%.1f) | %.1f/s | %.1f/s | %.2f | %.1f/s | %.1f/s | %.1f/s | %.2f/s | %d |"
          % (name, precision, len(ts), chars, rows_rate, fast_rate, fast_rate / rows_rate,
             thorough_rate, batched_rate, alone_rate, naive_rate, changed))


if __name__ == "__main__":
    main()
