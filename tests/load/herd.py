#!/usr/bin/python3
"""herd.py — a prefork server's start (issue 38): N processes spawned at
once, each loading the extension and the model and making one bert_fill call
at once, with a busy timeout of 60 s; then whether each of them is on the
machine-wide queue (bert_debug()'s shared_batch.usable), what its call
answered, and what it printed on stderr (a "shared batching off" warning is a
process that gave the queue up).  A benchmark of the start, not a test: run it
alone (/work/bin/quiet) on a quiet machine.

    BERTFILL_PRECISION=fp32 /usr/bin/python3 tests/load/herd.py [N]
    (default N 50; BERTFILL_MODEL, default build/models/bert-base-random;
    HERD_ROUNDS, herds one after another (default 1); each herd gets a fresh
    BERTFILL_SHARED_BATCH_DIR unless one is set)

Prints one line per herd: processes on the shared queue, errors, warnings,
wrong answers (against the first process's answers computed alone before the
herd, shared batching off), the slowest start-to-answer time.  Exits 1 when
any process was off the queue, failed, or answered differently.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

EXT = os.path.abspath(os.environ.get("BERTFILL_EXT", "./bertfill"))
MODEL = os.environ.get("BERTFILL_MODEL", "build/models/bert-base-random")

CHILD = r'''
import json, os, sqlite3, sys, time
t0 = time.monotonic()
c = sqlite3.connect(":memory:", isolation_level=None)
c.enable_load_extension(True)
c.load_extension(sys.argv[1])
c.execute("SELECT bert_load(?)", (sys.argv[2],))
c.execute("SELECT bert_cache('off')")
c.execute("SELECT bert_busy_timeout(60000)")
out = {"pid": os.getpid()}
try:
    out["answer"] = c.execute("SELECT bert_fill(?)", (sys.argv[3],)).fetchone()[0]
except sqlite3.Error as e:
    out["error"] = str(e)
d = json.loads(c.execute("SELECT bert_debug()").fetchone()[0])
out["usable"] = bool(d.get("shared_batch", {}).get("usable"))
out["seconds"] = time.monotonic() - t0
print(json.dumps(out), flush=True)
'''


def text(i):
    return "第%d位顾客说：今天天气真[MASK]啊，适合出去玩。" % (i + 1)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    rounds = int(os.environ.get("HERD_ROUNDS", "1"))
    if not os.path.exists(EXT + ".so"):
        sys.exit("herd: %s.so is missing: run make first" % EXT)
    if not os.path.isdir(MODEL):
        sys.exit("herd: no model at %s (make load generates build/models/bert-base-random)" % MODEL)
    # the answers alone, shared batching off: what every process must answer
    env0 = dict(os.environ, BERTFILL_SHARED_BATCH="0")
    want = subprocess.run([sys.executable, "-c", r'''
import json, sqlite3, sys
c = sqlite3.connect(":memory:")
c.enable_load_extension(True)
c.load_extension(sys.argv[1])
c.execute("SELECT bert_load(?)", (sys.argv[2],))
c.execute("SELECT bert_cache('off')")
print(json.dumps([c.execute("SELECT bert_fill(?)", (t,)).fetchone()[0] for t in sys.argv[3:]]))
''', EXT, MODEL] + [text(i) for i in range(n)], env=env0, capture_output=True, text=True)
    if want.returncode != 0:
        sys.exit("herd: the reference run failed: " + want.stderr.strip()[-400:])
    ref = json.loads(want.stdout)
    bad = 0
    for r in range(rounds):
        own_dir = "BERTFILL_SHARED_BATCH_DIR" not in os.environ
        sdir = tempfile.mkdtemp(prefix="bf-herd-") if own_dir else os.environ["BERTFILL_SHARED_BATCH_DIR"]
        env = dict(os.environ, BERTFILL_SHARED_BATCH_DIR=sdir)
        t0 = time.monotonic()
        ps = [subprocess.Popen([sys.executable, "-c", CHILD, EXT, MODEL, text(i)], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for i in range(n)]
        outs = [p.communicate() for p in ps]
        wall = time.monotonic() - t0
        res, errors, warned, wrong, crashed = [], [], [], 0, 0
        for i, (p, (so, se)) in enumerate(zip(ps, outs)):
            if p.returncode != 0 or not so.strip():
                crashed += 1
                errors.append("exit %d: %s" % (p.returncode, se.strip()[-200:]))
                continue
            o = json.loads(so.strip().splitlines()[-1])
            res.append(o)
            if "error" in o:
                errors.append(o["error"])
            elif o["answer"] != ref[i]:
                wrong += 1
            if "shared batching" in se:
                warned.append(se.strip()[-200:])
        usable = sum(o["usable"] for o in res)
        print("herd %d: %d processes, %s: %d of %d on the shared queue, %d errors, %d warnings, "
              "%d wrong, slowest %.1f s, all done in %.1f s"
              % (r + 1, n, os.environ.get("BERTFILL_PRECISION", "fp32"), usable, n, len(errors),
                 len(warned), wrong, max((o["seconds"] for o in res), default=0), wall))
        for e in (errors + warned)[:3]:
            print("   ", e)
        bad += (usable != n) + len(errors) + len(warned) + wrong
        if own_dir:
            shutil.rmtree(sdir, ignore_errors=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
