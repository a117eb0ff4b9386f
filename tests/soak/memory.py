#!/usr/bin/python3
"""memory.py — do N processes with the same model loaded share one copy of
the weights, in fp32 and in int8?  (make soak)

    /usr/bin/python3 tests/soak/memory.py [MODEL_DIR]
        (default build/models/bert-base-random, made with
         model/gen_random_model.py --layers 12 --hidden 768 --heads 12
         --intermediate 3072 --vocab-size 21128 when missing)

For each precision (fp32, then int8) and 1 and then 4 processes at once,
each process (Python's sqlite3 with the extension) loads the model in that
precision (bert_load(dir, precision); the first int8 load writes
model.int8.safetensors if it is not there), runs one bert_fill, and waits;
the parent reads /proc/PID/smaps_rollup (Rss, Pss, private clean + dirty)
and the lines of /proc/PID/smaps for the model's weight files
(model.safetensors, model.int8.safetensors, model.packed.safetensors: the
packed fp32 panels an fp32 load with AVX-512 maps).  A baseline process that loaded the
extension and OpenBLAS (SELECT bert_threads()) but no model gives the
memory that is not bertfill's model; the extra private memory of a process
with the model is private(process) - private(baseline), to compare with the
size of the model file.  (The weight files' own pages are left out of
"private": the kernel counts page-cache pages as private while only one
process maps them, though they are the one shared copy.)  Target, in both
precisions: under 5% of the fp32 model's size.  Prints a
table and "ok memory_private_per_process (...)" or FAIL.
"""
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXT = os.path.abspath(os.environ.get("BERTFILL_EXT", os.path.join(ROOT, "bertfill")))
BUILD = os.environ.get("BUILD", os.path.join(ROOT, "build"))

CHILD = r"""
import sqlite3, sys
c = sqlite3.connect(":memory:", isolation_level=None)
c.enable_load_extension(True)
c.load_extension(sys.argv[1])
if sys.argv[2] == "-":
    c.execute("SELECT bert_threads()").fetchone()          # OpenBLAS loaded, no model
else:
    c.execute("SELECT bert_load(?, ?)", (sys.argv[2], sys.argv[3])).fetchone()
    c.execute("SELECT bert_fill('今天天气真[MASK]啊，我们去公园[MASK]步吧。')").fetchone()
print("ready", flush=True)
sys.stdin.readline()
"""


def rollup(pid):
    out = {}
    with open("/proc/%d/smaps_rollup" % pid) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2 and parts[0].endswith(":") and parts[1].isdigit():
                out[parts[0][:-1]] = int(parts[1])
    return out


WEIGHT_FILES = ("/model.safetensors", "/model.int8.safetensors", "/model.packed.safetensors",
                "/model.bf16.safetensors")


def model_mapping(pid, names=WEIGHT_FILES):
    """Rss / Pss / private of the mappings of the weight files, in kB."""
    res = {"Rss": 0, "Pss": 0, "Private": 0}
    cur = None
    with open("/proc/%d/smaps" % pid) as f:
        for line in f:
            parts = line.split()
            if parts and "-" in parts[0] and len(parts) >= 5 and not parts[0].endswith(":"):
                cur = parts[-1] if len(parts) >= 6 else ""
                continue
            if cur and cur.endswith(names) and parts and parts[0].endswith(":"):
                k = parts[0][:-1]
                if k in ("Rss", "Pss"):
                    res[k] += int(parts[1])
                elif k in ("Private_Clean", "Private_Dirty"):
                    res["Private"] += int(parts[1])
    return res


def start(n, model, precision="fp32"):
    env = dict(os.environ)
    ps = []
    for _ in range(n):
        p = subprocess.Popen([sys.executable, "-c", CHILD, EXT, model, precision],
                             stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env=env)
        ps.append(p)
    for p in ps:
        line = p.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError("child failed: %r" % line)
    time.sleep(0.3)
    return ps


def stop(ps):
    for p in ps:
        p.stdin.write("\n")
        p.stdin.flush()
    for p in ps:
        p.wait()


def private(r):
    return r.get("Private_Clean", 0) + r.get("Private_Dirty", 0)


def main():
    model = sys.argv[1] if len(sys.argv) > 1 else os.path.join(BUILD, "models", "bert-base-random")
    if not os.path.exists(os.path.join(model, "model.safetensors")):
        subprocess.check_call([sys.executable, os.path.join(ROOT, "model", "gen_random_model.py"), model,
                               "--layers", "12", "--hidden", "768", "--heads", "12",
                               "--intermediate", "3072", "--vocab-size", "21128", "--seed", "1"])
    size_kb = os.path.getsize(os.path.join(model, "model.safetensors")) // 1024
    base = start(1, "-")
    b = rollup(base[0].pid)
    stop(base)
    print("model %s: %.1f MB; baseline process (extension + OpenBLAS, no model): RSS %.1f MB, "
          "private %.1f MB" % (model, size_kb / 1024, b["Rss"] / 1024, private(b) / 1024))
    print("%-9s %-6s %-4s %10s %10s %12s %14s %14s %16s" % (
        "precision", "procs", "pid#", "RSS MB", "PSS MB", "private MB", "extra priv MB",
        "model map RSS", "model map PSS"))
    worst = 0.0
    summary = {}
    for precision, n in (("fp32", 1), ("fp32", 4), ("int8", 1), ("int8", 4)):
        ps = start(n, model, precision)
        rows = [(rollup(p.pid), model_mapping(p.pid)) for p in ps]
        stop(ps)
        tot_pss = 0
        for i, (r, m) in enumerate(rows):
            # pages of the model file count as "private" while only one
            # process maps them, yet they are the shared page cache: leave
            # the model mapping out
            extra = private(r) - m["Private"] - private(b)
            worst = max(worst, extra)
            tot_pss += r["Pss"]
            print("%-9s %-6d %-4d %10.1f %10.1f %12.1f %14.1f %14.1f %16.1f" % (
                precision, n, i + 1, r["Rss"] / 1024, r["Pss"] / 1024, private(r) / 1024, extra / 1024,
                m["Rss"] / 1024, m["Pss"] / 1024))
        summary[precision, n] = tot_pss
        print("          total PSS of the %d %s process(es): %.1f MB" % (n, precision, tot_pss / 1024))
    pct = 100.0 * worst / size_kb
    line = ("largest extra private memory per process %.1f MB = %.2f%% of the model (%.0f MB); "
            "total PSS fp32: 1 process %.0f MB, 4 processes %.0f MB; int8: %.0f MB, %.0f MB"
            % (worst / 1024, pct, size_kb / 1024, summary["fp32", 1] / 1024,
               summary["fp32", 4] / 1024, summary["int8", 1] / 1024, summary["int8", 4] / 1024))
    if pct < 5.0:
        print("ok memory_private_per_process (%s)" % line)
        return 0
    print("FAIL memory_private_per_process: %s (target < 5%%)" % line)
    return 1


if __name__ == "__main__":
    sys.exit(main())
