#!/usr/bin/python3
"""leader_rotation.py — what an encoder run costs when the processes that run
it take turns (issue 38): P processes, each with the model loaded, make one
call each in turn (a pause between calls), so that every call is led by its
own process's encoder and the process that runs the encoder changes on every
call; against one process making all the calls.  Prints, per case, the
median time of a call, of its encoder run (bertfill_trace's encode_ms) and
the minor page faults of the process during the call.  A benchmark: run it
alone (/work/bin/quiet) on a quiet machine.

    BERTFILL_PRECISION=fp32 /usr/bin/python3 tests/load/leader_rotation.py [P:PAUSE_S ...]
    (default: 1:0.05 2:0.05 8:0.05; BERTFILL_MODEL, default build/models/bert-base-random;
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
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    c.execute("SELECT bert_fill(?)", (line.strip(),)).fetchone()
    dt = (time.perf_counter() - t0) * 1000
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    enc, lead = c.execute("SELECT encode_ms, lead FROM bertfill_trace ORDER BY id DESC LIMIT 1").fetchone()
    print(json.dumps([dt, enc, lead, r1.ru_minflt - r0.ru_minflt]), flush=True)
'''


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def run(procs, pause, calls=24):
    env = dict(os.environ, BERTFILL_SHARED_BATCH_DIR=tempfile.mkdtemp(prefix="bf-rot-"))
    ps = [subprocess.Popen([sys.executable, "-c", CHILD, EXT, MODEL], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True, env=env) for _ in range(procs)]
    for p in ps:
        p.stdout.readline()
    out = []
    for i in range(calls + procs):
        p = ps[i % procs]
        p.stdin.write("第%d位顾客说：今天天气真[MASK]啊，适合出去玩。\n" % i)
        p.stdin.flush()
        out.append(json.loads(p.stdout.readline()))
        time.sleep(pause)
    for p in ps:
        p.stdin.write("q\n")
        p.stdin.flush()
        p.wait()
    out = out[procs:]  # each process's first call aside
    print("%d process(es) in turn, %.2f s apart: call %.1f ms, encoder run %.1f ms (median; "
          "min %.1f, max %.1f), minor faults per call %d, leads %s"
          % (procs, pause, median(o[0] for o in out), median(o[1] for o in out),
             min(o[1] for o in out), max(o[1] for o in out), median(o[3] for o in out),
             ",".join(sorted(set(o[2] for o in out)))), flush=True)


def main():
    cases = sys.argv[1:] or ["1:0.05", "2:0.05", "8:0.05"]
    for case in cases:
        procs, pause = case.split(":")
        run(int(procs), float(pause))
    return 0


if __name__ == "__main__":
    sys.exit(main())
