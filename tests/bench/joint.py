#!/usr/bin/python3
"""joint.py — the cost of whole-word fills (fill_sequences, bert_fill(text,
'joint'), bert_score) next to per-mask bert_fill, through SQL.

    /usr/bin/python3 tests/bench/joint.py [MODEL_DIR] [--reps N]

MODEL_DIR defaults to build/models/bert-base-random (bert-base-chinese's shape,
made by `make bench`).  The cache is off, so every call computes; the numbers
are the median wall time per call over --reps calls (default 10, after one
warm-up), the CPU time of the process per call (all its threads: less
sensitive to other work on the machine than the wall time) and the encoder
runs per call (bertfill_stats).  The calls of a text take turns, so that other
work on the machine falls on all of them alike.  bert_fill(text, 'joint') is
rank 1 of fill_sequences(text, 5): the same cost.  Finally a repeated call
with the cache on (the memo).  Run it on a quiet machine: it prints the load
average before and after.
"""
import os
import sqlite3
import statistics
import sys
import time

EXT = os.path.abspath(os.environ.get("BERTFILL_EXT", "./bertfill"))
CASES = [  # (label, text); ~22 tokens each
    ("2 masks", "学习要持之以恒，不能三天打鱼，两天[MASK][MASK]。"),
    ("4 masks", "这件事已经[MASK][MASK]难支，我们只能[MASK][MASK]办法。"),
]


def counter(c, name):
    return c.execute("SELECT value FROM bertfill_stats WHERE name = ?", (name,)).fetchone()[0]


def measure(c, calls, reps):
    """calls: [(sql, args)], run in turn reps times (interleaved, so that other
    work on the machine falls on all of them alike): per call the median wall
    ms, the mean process CPU ms and the encoder runs."""
    for sql, args in calls:                                   # warm-up
        c.execute(sql, args).fetchall()
    wall = [[] for _ in calls]
    cpu = [0.0] * len(calls)
    runs = [0] * len(calls)
    for _ in range(reps):
        for i, (sql, args) in enumerate(calls):
            r0, c0, t0 = counter(c, "encoder_runs"), time.process_time(), time.perf_counter()
            c.execute(sql, args).fetchall()
            wall[i].append(time.perf_counter() - t0)
            cpu[i] += time.process_time() - c0
            runs[i] += counter(c, "encoder_runs") - r0
    return [(statistics.median(w) * 1e3, cu / reps * 1e3, r / reps)
            for w, cu, r in zip(wall, cpu, runs)]


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    reps = int(sys.argv[sys.argv.index("--reps") + 1]) if "--reps" in sys.argv else 10
    if "--reps" in sys.argv:
        args.remove(str(reps))
    model = args[0] if args else "build/models/bert-base-random"
    c = sqlite3.connect(":memory:", isolation_level=None)
    c.enable_load_extension(True)
    c.load_extension(EXT)
    print(c.execute("SELECT bert_load(?)", (model,)).fetchone()[0])
    c.execute("SELECT bert_cache('off')")
    print("load average before: %s" % open("/proc/loadavg").read().strip())
    print("%-8s %-28s %9s %11s %10s" % ("text", "call", "ms/call", "CPU ms/call", "runs/call"))
    for label, text in CASES:
        n = text.count("[MASK]")
        calls = [("bert_fill(text)", "SELECT bert_fill(?)", (text,)),
                 ("fill_sequences(text, 5)", "SELECT * FROM fill_sequences(?, 5)", (text,)),
                 ("bert_score(text, answer)", "SELECT bert_score(?, ?)", (text, "一" * n))]
        for (name, _, _), (ms, cpu, runs) in zip(calls, measure(c, [x[1:] for x in calls], reps)):
            print("%-8s %-28s %9.1f %11.1f %10.1f" % (label, name, ms, cpu, runs))
    c.execute("SELECT bert_cache('memory')")
    text = CASES[1][1]
    c.execute("SELECT * FROM fill_sequences(?, 5)", (text,)).fetchall()
    (ms, cpu, runs), = measure(c, [("SELECT * FROM fill_sequences(?, 5)", (text,))], 200)
    print("%-8s %-28s %9.3f %11.3f %10.1f" % ("4 masks", "fill_sequences, memoized", ms, cpu, runs))
    print("load average after: %s" % open("/proc/loadavg").read().strip())


if __name__ == "__main__":
    main()
