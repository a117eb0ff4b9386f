#!/usr/bin/python3
"""first_call.py — how much slower is the first bert_fill after bert_load
than the ones after it?  (make soak; the README's and performance.md's table)

    /usr/bin/python3 tests/soak/first_call.py [MODEL_DIR] [--runs N]
        (default build/models/bert-base-random: see memory.py)

For each precision (fp32, int8), cache (off, on) and start (the first call
right after bert_load; 0.5 s after it; 0.5 s after it with
BERTFILL_WARM_UP=0), N fresh processes (default 3) each: load the extension
and OpenBLAS (SELECT bert_threads()), time SELECT bert_load(dir[, 'int8'])
and then 8 calls of bert_fill on 8 different sentences of 20 tokens (so
that every call runs the encoder, with the cache on too).  Reported: the
median over the processes of bert_load's time and of the first call divided
by the median of calls 3-8 (the warm calls).  Other work on the machine
spoils the numbers: run it on a quiet machine.  Measures only; it checks
nothing (speed is never asserted).

The model directory's model.fingerprint (written by a load once the model
file has settled; see ext/engine/model.c) is what makes the cache-on first
call cheap: --no-fingerprint-file removes it before each process, to show
the cost of hashing the weights instead.
"""
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXT = os.path.abspath(os.environ.get("BERTFILL_EXT", os.path.join(ROOT, "bertfill")))
BUILD = os.environ.get("BUILD", os.path.join(ROOT, "build"))

CHILD = r"""
import json, sqlite3, sys, time
ext, model, precision, cache, delay = sys.argv[1:6]
c = sqlite3.connect(":memory:", isolation_level=None)
c.enable_load_extension(True)
c.load_extension(ext)
c.execute("SELECT bert_threads()").fetchone()
c.execute("SELECT bert_cache(?)", (cache,)).fetchone()
t = time.perf_counter()
if precision == "fp32":
    c.execute("SELECT bert_load(?)", (model,)).fetchone()
else:
    c.execute("SELECT bert_load(?, ?)", (model, precision)).fetchone()
load = time.perf_counter() - t
time.sleep(float(delay))
# 20 tokens each ([CLS] + 18 characters + [SEP]), all different
base = "我们今天下午在图书馆里看书学习了很久"
calls = []
for i in range(8):
    s = base[:i] + "[MASK]" + base[i + 1:]
    t = time.perf_counter()
    c.execute("SELECT bert_fill(?)", (s,)).fetchone()
    calls.append(time.perf_counter() - t)
print(json.dumps({"load": load, "calls": calls}))
"""


def run(model, precision, cache, delay, warm_up, no_fp_file):
    env = dict(os.environ)
    env.pop("BERTFILL_PRECISION", None)
    env["BERTFILL_WARM_UP"] = "1" if warm_up else "0"
    if no_fp_file:
        try:
            os.remove(os.path.join(model, "model.fingerprint"))
        except FileNotFoundError:
            pass
    out = subprocess.run([sys.executable, "-c", CHILD, EXT, model, precision, cache, str(delay)],
                         env=env, capture_output=True, text=True, check=True)
    r = json.loads(out.stdout)
    warm = statistics.median(r["calls"][2:])
    return r["load"] * 1e3, r["calls"][0] / warm, warm * 1e3


def main():
    args = sys.argv[1:]
    runs = 3
    if "--runs" in args:
        i = args.index("--runs")
        runs = int(args[i + 1])
        del args[i:i + 2]
    no_fp_file = "--no-fingerprint-file" in args
    args = [a for a in args if a != "--no-fingerprint-file"]
    model = os.path.abspath(args[0] if args else os.path.join(BUILD, "models", "bert-base-random"))
    if not os.path.exists(os.path.join(model, "model.safetensors")):
        print("skip first_call: no model at %s (make soak makes it)" % model)
        return 0
    cpu = "?"
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    print("# first call after bert_load ÷ median of the warm calls (20 tokens, a new sentence "
          "each call), median of %d processes; %s, %d cores; model.fingerprint %s"
          % (runs, cpu, os.cpu_count(), "removed before each process" if no_fp_file else "kept"))
    starts = [("right after bert_load", 0.0, True), ("0.5 s after bert_load", 0.5, True),
              ("0.5 s after, BERTFILL_WARM_UP=0", 0.5, False)]
    print("| first call | fp32, cache off | fp32, cache on | int8, cache off | int8, cache on |")
    print("|---|---|---|---|---|")
    loads = {}
    warms = {}
    for label, delay, warm_up in starts:
        cells = []
        for precision in ("fp32", "int8"):
            for cache in ("off", "on"):
                res = [run(model, precision, cache, delay, warm_up, no_fp_file) for _ in range(runs)]
                cells.append("%.2f×" % statistics.median(r[1] for r in res))
                if warm_up:
                    loads.setdefault(precision, []).extend(r[0] for r in res)
                    warms.setdefault(precision, []).extend(r[2] for r in res)
        print("| %s | %s |" % (label, " | ".join(cells)))
    for precision in ("fp32", "int8"):
        print("# %s: bert_load median %.1f ms (max %.1f), warm call median %.1f ms"
              % (precision, statistics.median(loads[precision]), max(loads[precision]),
                 statistics.median(warms[precision])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
