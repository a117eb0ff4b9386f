#!/usr/bin/python3
"""rows.py — a whole column filled with fill_rows at scale (make soak).

    /usr/bin/python3 tests/soak/rows.py [--rows N] [--small N] [--model DIR]
        defaults: 200,000 rows, compared with 2,000; the shipped model
        (model/bertfill-zh-tiny)

For each size, a database with a column of N Chinese texts (1-2 [MASK]
each, 6-30 characters from the model's vocabulary; one row in ten repeats
a recent text) is made first; then a fresh process loads the extension and
fills the whole column in ONE statement,

    UPDATE t SET filled = f.filled
      FROM fill_rows('SELECT rowid, text FROM t WHERE filled IS NULL') AS f
     WHERE t.rowid = f.key;

and reports its time, rows/s, encoder sequences per row (bertfill_stats:
seqs / rows), and its peak RSS (ru_maxrss) above what it had after loading
the model and filling one text.  Checks (lines for a test runner):
  ok rows_filled_N        every row with a text got its fill
  ok rows_seqs_N          encoder sequences = distinct texts (nothing computed twice)
  ok rows_rss_flat        peak RSS of N rows within 50 MB of the small run
Load (uptime) is printed with the numbers: other work on the machine slows
the run but does not change the memory.
"""
import argparse
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXT = os.path.abspath(os.environ.get("BERTFILL_EXT", os.path.join(ROOT, "bertfill")))
SHIPPED = os.path.join(ROOT, "model", "bertfill-zh-tiny")
RSS_SLACK_MB = 50

CHILD = r"""
import json, resource, sqlite3, sys, time
path, ext, model = sys.argv[1:4]
db = sqlite3.connect(path, isolation_level=None)
db.enable_load_extension(True)
db.load_extension(ext)
db.execute("SELECT bert_load(?)", (model,)).fetchone()
db.execute("SELECT bert_fill('今天天气真[MASK]啊')").fetchone()
db.execute("SELECT bert_stats_reset()").fetchone()
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.time()
db.execute("UPDATE t SET filled = f.filled FROM fill_rows('SELECT rowid, text FROM t "
           "WHERE filled IS NULL') AS f WHERE t.rowid = f.key")
secs = time.time() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
c = {r[0]: r[1] for r in db.execute("SELECT name, value FROM bertfill_stats WHERE kind = 'counter'")}
left = db.execute("SELECT count(*) FROM t WHERE filled IS NULL").fetchone()[0]
print(json.dumps({"secs": secs, "base_kb": base, "peak_kb": peak, "left": left, "counters": c}))
"""


def make_db(path, n, vocab, seed):
    """n rows; returns the number of distinct texts."""
    rnd = random.Random(seed)
    chars = [t for t in open(vocab, encoding="utf-8").read().split("\n")
             if len(t) == 1 and "\u4e00" <= t <= "\u9fff"]
    recent, seen = [], set()

    def gen():
        for _ in range(n):
            if recent and rnd.random() < 0.1:
                s = rnd.choice(recent)
            else:
                w = [rnd.choice(chars) for _ in range(rnd.randint(6, 30))]
                for _ in range(rnd.choice((1, 1, 2))):
                    w.insert(rnd.randint(0, len(w)), "[MASK]")
                s = "".join(w)
                recent.append(s)
                if len(recent) > 1000:
                    recent.pop(0)
            seen.add(s)
            yield (s,)

    db = sqlite3.connect(path)
    db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, text TEXT, filled TEXT)")
    db.executemany("INSERT INTO t(text) VALUES (?)", gen())
    db.commit()
    db.close()
    return len(seen)


def run(n, model, tmp, seed):
    path = os.path.join(tmp, "rows_%d.db" % n)
    distinct = make_db(path, n, os.path.join(model, "vocab.txt"), seed)
    env = dict(os.environ, BERTFILL_PROGRESS=os.environ.get("BERTFILL_PROGRESS", "0"))
    r = subprocess.run([sys.executable, "-c", CHILD, path, EXT, model], env=env,
                       capture_output=True, text=True)
    os.remove(path)
    if r.returncode != 0:
        print("FAIL rows_%d: %s" % (n, r.stderr.strip()[-500:]))
        return None
    import json
    out = json.loads(r.stdout)
    out["distinct"], out["n"] = distinct, n
    c = out["counters"]
    extra_mb = (out["peak_kb"] - out["base_kb"]) / 1024
    print("rows %d (%d distinct): %.1f s, %.0f rows/s, %.3f encoder sequences per row "
          "(%d seqs in %d runs), peak RSS %.1f MB (%.1f MB above the loaded model)" %
          (n, distinct, out["secs"], n / out["secs"], c["seqs"] / n, c["seqs"], c["encoder_runs"],
           out["peak_kb"] / 1024, extra_mb), flush=True)
    print(("ok" if out["left"] == 0 else "FAIL") + " rows_filled_%d" % n +
          ("" if out["left"] == 0 else ": %d rows left" % out["left"]))
    # Repeats of a recent text come from the cache or share a batch; with
    # the LRU's default bound (10,000) none is computed twice.
    print(("ok" if c["seqs"] == distinct else "FAIL") + " rows_seqs_%d" % n +
          ("" if c["seqs"] == distinct else ": %d seqs for %d distinct texts" % (c["seqs"], distinct)))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=200000)
    ap.add_argument("--small", type=int, default=2000)
    ap.add_argument("--model", default=SHIPPED)
    a = ap.parse_args()
    print("load before: %s" % open("/proc/loadavg").read().strip())
    with tempfile.TemporaryDirectory(prefix="soak_rows.") as tmp:
        small = run(a.small, a.model, tmp, 1)
        big = run(a.rows, a.model, tmp, 2)
    print("load after: %s" % open("/proc/loadavg").read().strip())
    if not small or not big:
        return 1
    grow = (big["peak_kb"] - small["peak_kb"]) / 1024
    ok = grow <= RSS_SLACK_MB
    print("%s rows_rss_flat (%d rows: peak RSS %.1f MB, %d rows: %.1f MB, %+.1f MB; target within %d MB)" %
          ("ok" if ok else "FAIL", a.small, small["peak_kb"] / 1024, a.rows, big["peak_kb"] / 1024, grow,
           RSS_SLACK_MB))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
