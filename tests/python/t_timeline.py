#!/usr/bin/python3
"""t_timeline.py — the timeline of a call whose encoder run goes through a
batcher (issue 38, item 1): bertfill_trace's wait_ms, start_ms, write_ms,
wake_ms, handover_ms, batch_seqs, leader_pid and lead, and the batch_* and
lead_handover stages of bertfill_stats (ext/sqlite/trace.c, encode.h).

  * threads: 4 threads of one process, each with its own connection and
    trace, 12 calls each (cache off, BERTFILL_SHARED_GATHER=4 so that
    batches of several calls happen): for every encoder call but each
    connection's first (which opens the shared file), tokenize + cache +
    wait + start + encode + topk + write + wake add up to total_ms: never
    more (0.01 ms of rounding), and at most 0.5 ms + 2% less for 95% of
    the calls (the SQL layer's own work); handover_ms <= wait_ms; the
    client's own clock around each call >= total_ms; batches of more than
    one call seen, every lead one of the names of encode.h, the leader
    this process; the batch_* stages counted once per encoder call;
  * old_table: a bertfill_trace of an older version gets the new columns
    when tracing starts, its rows kept;
  * processes: the same with 4 processes, and calls that another process
    led (leader_pid not the caller's) among them;
  * next_batch: 6 threads of one process in a closed loop, each batch held
    20 ms (BERTFILL_SHARED_HOLD_MS): a batch's owners are woken only after
    the leader took the next batch (shared_batch.c, WAKES), so the next
    batch holds the requests posted during the run and no others: the
    batches alternate with the same members, so a thread's next call is in
    a batch of the same size as its last, for at least 85% of its calls
    (woken first, the owners' next requests joined the next batch at
    random);
  * idle: 20 processes, each with the extension and the model loaded and
    one call made (through the shared queue), then idle: their CPU time
    over 2 s (utime + stime of /proc/PID/stat, all threads) is below
    0.2 s in all, so no helper thread or waiter spins while nothing is
    asked (the figure is printed).
Environment: BERTFILL_EXT, BUILD (as tests/run.sh sets them).
"""
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

from bftest import EXT, TINY, check, exit_code, skip

LEADS = {"alone", "queue", "post", "woken", "timer", "slot", "kept"}
COLS = ("total_ms, tokenize_ms, cache_read_ms, cache_write_ms, wait_ms, start_ms, encode_ms, "
        "topk_ms, write_ms, wake_ms, handover_ms, batch_seqs, leader_pid, lead, source")

# One client: loads the extension and the model, traces its calls, makes
# them, and prints its rows with its own clock's time of each call.
# argv: ext, model, texts (JSON).
CLIENT = r"""
import json, os, sqlite3, sys, time
ext, model, texts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
c = sqlite3.connect(":memory:", isolation_level=None)
c.enable_load_extension(True)
c.load_extension(ext)
c.execute("SELECT bert_load(?)", (model,))
c.execute("SELECT bert_cache('off')")
c.execute("SELECT bert_trace(1)")
print("ready", flush=True)
sys.stdin.readline()
measured = []
for t in texts:
    t0 = time.perf_counter()
    c.execute("SELECT bert_fill(?)", (t,)).fetchone()
    measured.append((time.perf_counter() - t0) * 1000)
rows = c.execute("SELECT %s FROM bertfill_trace ORDER BY id" % sys.argv[4]).fetchall()
stages = {r[0]: r[1] for r in c.execute(
    "SELECT name, count FROM bertfill_stats WHERE kind = 'stage'")}
print(json.dumps({"pid": os.getpid(), "rows": rows, "measured": measured, "stages": stages}))
"""

# An idle process: the extension and the model loaded, one call made, then
# it waits on stdin.  argv: ext, model, text.
IDLE = r"""
import sqlite3, sys
c = sqlite3.connect(":memory:", isolation_level=None)
c.enable_load_extension(True)
c.load_extension(sys.argv[1])
c.execute("SELECT bert_load(?)", (sys.argv[2],))
c.execute("SELECT bert_cache('off')")
c.execute("SELECT bert_fill(?)", (sys.argv[3],)).fetchone()
print("ready", flush=True)
sys.stdin.readline()
"""


def texts_for(who, n):
    return ["第%d位顾客%d说：今天天气真[MASK]啊。" % (who, i) for i in range(n)]


def env_for(sdir, **extra):
    e = {k: v for k, v in os.environ.items() if not k.startswith("BERTFILL_")}
    e.update(BERTFILL_SHARED_BATCH_DIR=sdir, OPENBLAS_NUM_THREADS="1")
    e.update({k: str(v) for k, v in extra.items()})
    return e


def adds_up(name, clients, own_leader):
    """Checks the rows of clients: [{"pid", "rows", "measured", "stages"}]."""
    over, far, n, bad_lead, handover_bad, clock_bad, multi, foreign = [], 0, 0, [], 0, 0, 0, 0
    stage_bad = []
    for cl in clients:
        rows = [dict(zip([c.strip() for c in COLS.split(",")], r)) for r in cl["rows"]]
        enc = [r for r in rows if r["source"] == "encoder"]
        if cl["stages"].get("batch_wait") != len(enc):
            stage_bad.append((cl["stages"].get("batch_wait"), len(enc)))
        for i, r in enumerate(rows):
            if r["total_ms"] > cl["measured"][i] + 0.01:
                clock_bad += 1
        for r in enc[1:]:  # the first opened the shared file
            n += 1
            if r["wait_ms"] is None or r["lead"] not in LEADS:
                bad_lead.append(r["lead"])
                continue
            parts = sum(r[k] for k in ("tokenize_ms", "cache_read_ms", "cache_write_ms", "wait_ms",
                                       "start_ms", "encode_ms", "topk_ms", "write_ms", "wake_ms"))
            gap = r["total_ms"] - parts
            if gap < -0.01:
                over.append(round(gap, 3))
            elif gap > 0.5 + 0.02 * r["total_ms"]:
                far += 1
            handover_bad += r["handover_ms"] > r["wait_ms"] + 0.001
            multi += r["batch_seqs"] > 1
            foreign += r["leader_pid"] != cl["pid"]
            if own_leader and r["leader_pid"] != cl["pid"]:
                bad_lead.append("leader %r" % r["leader_pid"])
    check("timeline_%s_adds_up" % name,
          n > 0 and not over and far <= 0.05 * n and not clock_bad and not handover_bad,
          "%d calls: stages over total_ms %r, %d more than 0.5 ms + 2%% under it, %d with "
          "total_ms over the client's clock, %d with handover over wait"
          % (n, over[:5], far, clock_bad, handover_bad))
    check("timeline_%s_batches" % name,
          not bad_lead and multi > 0 and not stage_bad and (own_leader or foreign > 0),
          "leads not known %r, calls in batches of more than one %d, led by another process %d, "
          "batch_wait counts vs encoder calls %r" % (bad_lead[:5], multi, foreign, stage_bad[:3]))
    print("   (%s: %d calls, %d in batches of more than one, %d led by another process, "
          "%d more than 0.5 ms + 2%% short of total_ms)" % (name, n, multi, foreign, far))


def test_threads(sdir):
    os.environ["BERTFILL_SHARED_BATCH_DIR"] = sdir
    os.environ["BERTFILL_SHARED_GATHER"] = "4"
    clients, go = [None] * 4, threading.Barrier(4)

    def run(j):
        c = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        c.enable_load_extension(True)
        c.load_extension(EXT)
        c.execute("SELECT bert_load(?)", (TINY,))
        c.execute("SELECT bert_cache('off')")
        c.execute("SELECT bert_trace(1)")
        go.wait()
        measured = []
        for t in texts_for(j, 12):
            t0 = time.perf_counter()
            c.execute("SELECT bert_fill(?)", (t,)).fetchone()
            measured.append((time.perf_counter() - t0) * 1000)
        rows = c.execute("SELECT %s FROM bertfill_trace ORDER BY id" % COLS).fetchall()
        clients[j] = {"pid": os.getpid(), "rows": rows, "measured": measured}
        c.close()

    c0 = sqlite3.connect(":memory:")
    c0.enable_load_extension(True)
    c0.load_extension(EXT)
    c0.execute("SELECT bert_stats_reset()")
    ts = [threading.Thread(target=run, args=(j,)) for j in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    stages = {r[0]: r[1] for r in c0.execute(
        "SELECT name, count FROM bertfill_stats WHERE kind = 'stage'")}
    c0.close()
    # the stats are the process's: the four clients' encoder calls together
    enc = sum(1 for cl in clients for r in cl["rows"] if r[-1] == "encoder")
    for cl in clients:
        cl["stages"] = {"batch_wait": sum(1 for r in cl["rows"] if r[-1] == "encoder")}
    adds_up("threads", clients, own_leader=True)
    check("timeline_threads_stages", stages.get("batch_wait") == enc and
          all(stages.get(s) == enc for s in ("batch_start", "batch_write", "batch_wake",
                                            "lead_handover")),
          "stage counts %r, encoder calls %d" % (stages, enc))


def test_processes(sdir):
    env = env_for(sdir, BERTFILL_SHARED_GATHER=4)
    ps = [subprocess.Popen([sys.executable, "-c", CLIENT, EXT, TINY, json.dumps(texts_for(j, 12)),
                            COLS], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                           env=env) for j in range(4)]
    for p in ps:
        p.stdout.readline()
    for p in ps:  # all at once
        p.stdin.write("go\n")
        p.stdin.flush()
    clients = [json.loads(p.communicate(timeout=120)[0]) for p in ps]
    adds_up("processes", clients, own_leader=False)


def test_old_table(sdir):
    """A bertfill_trace made by an older version (without the timeline's
    columns) gets them when tracing starts; its rows stay."""
    os.environ["BERTFILL_SHARED_BATCH_DIR"] = sdir
    c = sqlite3.connect(":memory:", isolation_level=None)
    c.enable_load_extension(True)
    c.load_extension(EXT)
    c.execute("CREATE TABLE bertfill_trace(id INTEGER PRIMARY KEY, ts TEXT NOT NULL, func TEXT, "
              "text TEXT, source TEXT, total_ms REAL, queue_ms REAL, tokenize_ms REAL, "
              "encode_ms REAL, topk_ms REAL, cache_read_ms REAL, cache_write_ms REAL, "
              "tokens INTEGER, masks INTEGER)")
    c.execute("INSERT INTO bertfill_trace(ts, func) VALUES ('2026-01-01 00:00:00.000', 'old')")
    c.execute("SELECT bert_load(?)", (TINY,))
    c.execute("SELECT bert_cache('off')")
    c.execute("SELECT bert_trace(1)")
    c.execute("SELECT bert_fill(?)", (texts_for(99, 1)[0],)).fetchone()
    cols = [r[1] for r in c.execute("PRAGMA table_info(bertfill_trace)")]
    rows = c.execute("SELECT func, lead, batch_seqs FROM bertfill_trace ORDER BY id").fetchall()
    c.close()
    check("timeline_old_table_upgraded",
          cols[-8:] == ["wait_ms", "start_ms", "write_ms", "wake_ms", "handover_ms", "batch_seqs",
                        "leader_pid", "lead"] and rows[0] == ("old", None, None) and
          rows[1][0] == "bert_fill" and rows[1][1] in LEADS and rows[1][2] == 1,
          "columns %r, rows %r" % (cols, rows))


# Threads of one process in a closed loop; prints, per thread, the size of
# the batch of each of its calls (bertfill_trace).  argv: ext, model,
# threads, calls.
LOOP = r"""
import json, sqlite3, sys, threading
ext, model, n, calls = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def conn():
    c = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    c.enable_load_extension(True)
    c.load_extension(ext)
    c.execute("SELECT bert_load(?)", (model,))
    c.execute("SELECT bert_cache('off')")
    c.execute("SELECT bert_trace(1)")
    return c
cs = [conn() for _ in range(n)]
go = threading.Barrier(n)
def loop(i, c):
    go.wait()
    for j in range(calls):
        c.execute("SELECT bert_fill(?)", ("第%d位顾客%d说：我[MASK]你" % (j, i),)).fetchone()
ts = [threading.Thread(target=loop, args=(i, c)) for i, c in enumerate(cs)]
[t.start() for t in ts]
[t.join() for t in ts]
print(json.dumps([[r[0] for r in c.execute("SELECT batch_seqs FROM bertfill_trace ORDER BY id")]
                  for c in cs]))
"""


def test_next_batch(sdir, n=6, calls=30):
    p = subprocess.run([sys.executable, "-c", LOOP, EXT, TINY, str(n), str(calls)],
                       env=env_for(sdir, BERTFILL_SHARED_HOLD_MS=20), capture_output=True,
                       text=True, timeout=120)
    if p.returncode != 0:
        check("next_batch_posted_during_run", False, p.stderr[-300:])
        return
    runs = json.loads(p.stdout)
    # alternating batches keep their members: a thread's next call is in a
    # batch of the same size (the others' batch runs between the two)
    pairs = [(x, y) for r in runs for x, y in zip(r[1:], r[2:])]
    same = sum(x == y for x, y in pairs)
    check("next_batch_posted_during_run", pairs and same >= 0.85 * len(pairs),
          "a thread's next call in a batch of the same size for %d of %d calls; sizes %r"
          % (same, len(pairs), runs[0]))
    print("   (%d threads in a closed loop, batches held 20 ms: the next call in a batch of the "
          "same size %d of %d times)" % (n, same, len(pairs)))


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_idle(sdir, n=20):
    env = env_for(sdir)
    ps = [subprocess.Popen([sys.executable, "-c", IDLE, EXT, TINY, texts_for(j, 1)[0]],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
          for j in range(n)]
    ready = [p.stdout.readline().strip() == "ready" for p in ps]
    time.sleep(0.1)  # the last call's helpers go to sleep (pool.c spins 0.5 ms)
    before = [cpu_seconds(p.pid) for p in ps]
    time.sleep(2.0)
    after = [cpu_seconds(p.pid) for p in ps]
    for p in ps:
        p.stdin.close()
        p.wait(30)
    used = sum(after) - sum(before)
    check("idle_processes_do_not_spin", all(ready) and used < 0.2,
          "%d of %d ready; CPU time of the idle processes over 2 s: %.2f s (per process %r)"
          % (sum(ready), n, used, [round(a - b, 2) for a, b in zip(after, before)][:8]))
    print("   (%d idle processes, each with a call made: %.2f s of CPU in 2 s)" % (n, used))


def main():
    if not os.path.exists(TINY):
        skip("timeline", "no test models (make models)")
        return 0
    if not sys.platform.startswith("linux"):
        skip("timeline", "the shared queue and /proc are Linux's")
        return 0
    for t in (test_threads, test_old_table, test_processes, test_next_batch, test_idle):
        sdir = tempfile.mkdtemp(prefix="bf-tl-")
        t0 = time.monotonic()
        try:
            t(sdir)
        except Exception as e:  # a test that crashes is a failure, not the end of the suite
            check(t.__name__[5:], False, "%s: %s" % (type(e).__name__, e))
        print("   (%s: %.1f s)" % (t.__name__[5:], time.monotonic() - t0))
        shutil.rmtree(sdir, ignore_errors=True)
    return exit_code()


if __name__ == "__main__":
    sys.exit(main())
