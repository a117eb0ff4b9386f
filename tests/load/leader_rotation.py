#!/usr/bin/python3
"""leader_rotation.py — what an encoder run costs when the processes that run
it take turns (issue 38): P processes, each with the model loaded, make one
call each in turn (a pause between calls), so that every call is led by its
own process's encoder and the process that runs the encoder changes on every
call; against one process making all the calls.  A case P:PAUSE_S:warm
keeps the encoder in one process (what a leader that keeps the lead would
do): process 0 makes every bert_fill call, and between two of them each of
the other P-1 processes in turn makes a cheap call (bert_tokenize), so that
they run on the CPU between the encoder runs as waiting owners would.
Prints, per case, the percentiles of a call's time and of its encoder run
(bertfill_trace's encode_ms) and the minor page faults of the process during
the call.  A benchmark: run it alone (/work/bin/quiet) on a quiet machine.

    BERTFILL_PRECISION=fp32 /usr/bin/python3 tests/load/leader_rotation.py [P:PAUSE_S[:warm] ...]
    (default: 1:0.05 2:0.05 8:0.05; ROTATION_CALLS, measured calls per case (default 24);
    BERTFILL_MODEL, default build/models/bert-base-random;
    LOAD_SETUP, SQL run on each connection after the load, e.g. "SELECT bert_threads(1)")
"""
import json
import os
import subprocess
import sys
import tempfile
import time

EXT = os.path.abspath(os.environ.get("BERTFILL_EXT", "./bertfill"))
MODEL = os.environ.get("BERTFILL_MODEL", "build/models/bert-base-random")

CHILD = r'''
import json, os, resource, sqlite3, sys, time
c = sqlite3.connect(":memory:", isolation_level=None)
c.enable_load_extension(True)
c.load_extension(sys.argv[1])
c.execute("SELECT bert_load(?)", (sys.argv[2],))
c.execute("SELECT bert_cache('off')")
c.execute("SELECT bert_trace(1)")
if os.environ.get("LOAD_SETUP"):
    c.execute(os.environ["LOAD_SETUP"])
print("ready", flush=True)
for line in sys.stdin:
    if line.strip() == "q":
        break
    if line.startswith("t "):
        c.execute("SELECT bert_tokenize(?)", (line[2:].strip(),)).fetchone()
        print(json.dumps([0, 0, "", 0]), flush=True)
        continue
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    c.execute("SELECT bert_fill(?)", (line.strip(),)).fetchone()
    dt = (time.perf_counter() - t0) * 1000
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    enc, lead = c.execute("SELECT encode_ms, lead FROM bertfill_trace ORDER BY id DESC LIMIT 1").fetchone()
    print(json.dumps([dt, enc, lead, r1.ru_minflt - r0.ru_minflt]), flush=True)
'''


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def run(procs, pause, warm, calls):
    env = dict(os.environ, BERTFILL_SHARED_BATCH_DIR=tempfile.mkdtemp(prefix="bf-rot-"))
    ps = [subprocess.Popen([sys.executable, "-c", CHILD, EXT, MODEL], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True, env=env) for _ in range(procs)]
    for p in ps:
        p.stdout.readline()
    out = []
    for i in range(calls + procs):
        text = "第%d位顾客说：今天天气真[MASK]啊，适合出去玩。" % i
        if warm:
            for p in ps[1:]:  # the others run between two encoder runs, as owners would
                p.stdin.write("t " + text + "\n")
                p.stdin.flush()
                p.stdout.readline()
                time.sleep(pause / procs)
            p = ps[0]
        else:
            p = ps[i % procs]
        p.stdin.write(text + "\n")
        p.stdin.flush()
        out.append(json.loads(p.stdout.readline()))
        time.sleep(pause / procs if warm else pause)
    for p in ps:
        p.stdin.write("q\n")
        p.stdin.flush()
        p.wait()
    out = out[procs:]  # each process's first call aside
    enc = [o[1] for o in out]
    print("%d process(es) %s, %.2f s apart, %d calls: call P50 %.1f P90 %.1f ms; encoder run "
          "P10 %.1f P50 %.1f P90 %.1f max %.1f ms; minor faults per call %d; leads %s"
          % (procs, "one encoder" if warm else "in turn", pause, len(out),
             pct([o[0] for o in out], 0.5), pct([o[0] for o in out], 0.9),
             pct(enc, 0.1), pct(enc, 0.5), pct(enc, 0.9), max(enc), pct([o[3] for o in out], 0.5),
             ",".join(sorted(set(o[2] for o in out)))), flush=True)


def main():
    cases = sys.argv[1:] or ["1:0.05", "2:0.05", "8:0.05"]
    calls = int(os.environ.get("ROTATION_CALLS", "24"))
    for case in cases:
        procs, pause, *mode = case.split(":")
        run(int(procs), float(pause), mode == ["warm"], calls)
    return 0


if __name__ == "__main__":
    sys.exit(main())
