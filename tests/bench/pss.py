#!/usr/bin/python3
"""pss.py — memory per process with 1 and 4 processes, fp32 and int8.

    /usr/bin/python3 tests/bench/pss.py ./bertfill build/models/bert-base-random

Starts N processes (N = 1, then 4), each of which loads the bertfill
extension into /usr/bin/python3's sqlite3, loads the model in one precision
(bert_load(dir, p)), runs bert_fill on a few sentences (so that every weight
the products use has been read) and waits.  Then it reads each process's
/proc/PID/smaps_rollup and prints, per process (the mean over the N):
  RSS      resident memory, shared pages counted in full;
  PSS      proportional set size: each shared page divided by the number of
           processes mapping it (what the machine really spends per process);
  private  pages only this process has (Private_Clean + Private_Dirty);
  shared   pages it shares with other processes (Shared_Clean + Shared_Dirty).
The Python interpreter's own ~10 MB is included in every column; a process
that only imports sqlite3 is measured first as the baseline.  The cache is
off (BERTFILL_CACHE=off), so only the model and the run's scratch count.
"""
import os
import subprocess
import sys
import time

CHILD = r"""
import sqlite3, sys
c = sqlite3.connect(":memory:")
c.enable_load_extension(True)
if sys.argv[1] != "-":
    c.load_extension(sys.argv[1])
    c.execute("SELECT bert_load(?, ?)", (sys.argv[2], sys.argv[3])).fetchone()
    for t in ["今天天气真[MASK]啊", "我们一起去[MASK]园散步吧", "他的中文说得很[MASK]，大家都听得懂"]:
        c.execute("SELECT bert_fill(?)", (t,)).fetchone()
print("ready", flush=True)
sys.stdin.readline()
"""


def rollup(pid):
    out = {}
    with open("/proc/%d/smaps_rollup" % pid) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3 and parts[-1] == "kB":
                out[parts[0].rstrip(":")] = int(parts[1])
    return out


def measure(ext, model, prec, n):
    env = dict(os.environ, BERTFILL_CACHE="off")
    procs = [subprocess.Popen(["/usr/bin/python3", "-c", CHILD, ext, model, prec],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
             for _ in range(n)]
    for p in procs:
        if p.stdout.readline().strip() != "ready":
            raise SystemExit("a child failed")
    time.sleep(0.5)  # the warm-up threads finish
    rs = [rollup(p.pid) for p in procs]
    for p in procs:
        p.stdin.write("\n")
        p.stdin.flush()
        p.wait()
    mean = lambda key: sum(r.get(key, 0) for r in rs) / len(rs) / 1024
    return {"rss": mean("Rss"), "pss": mean("Pss"),
            "private": mean("Private_Clean") + mean("Private_Dirty"),
            "shared": mean("Shared_Clean") + mean("Shared_Dirty")}


def main():
    ext, model = sys.argv[1], sys.argv[2]
    base = measure("-", "-", "-", 1)
    print("baseline (python3 + sqlite3, no bertfill): RSS %.1f MB, PSS %.1f MB, private %.1f MB"
          % (base["rss"], base["pss"], base["private"]))
    print("| precision | processes | RSS (MB) | PSS (MB) | private (MB) | shared (MB) |")
    print("|---|---|---|---|---|---|")
    for prec in ("fp32", "int8"):
        for n in (1, 4):
            m = measure(ext, model, prec, n)
            print("| %s | %d | %.1f | %.1f | %.1f | %.1f |"
                  % (prec, n, m["rss"], m["pss"], m["private"], m["shared"]))


if __name__ == "__main__":
    main()
