#!/usr/bin/python3
"""rows_with_users.py — what bert_fill callers wait while fill_rows fills a
column in the same process (measured for issue #27: should fill_rows go
through the batcher?).

  /usr/bin/python3 tests/load/rows_with_users.py [EXT [MODEL [REPEATS [USERS]]]]
  (defaults: ./bertfill, model/bertfill-zh-tiny, 3, 4)

The column: the eval sentences of ../shared/data/corpus-zh/eval/gsdsimp.txt
(first 120 characters, one character masked at random), REPEATS times with
other masks, cache off.  Prints fill_rows alone (rows, encoder runs,
sequences and tokens per run, ms per run), one bert_fill alone (P50/P95),
then fill_rows again while USERS threads, each on its own connection, call
bert_fill in a closed loop (short sentences): fill_rows' time against alone
and the callers' latency (P50/P95) during it.  A measurement, not a test:
run it on an otherwise idle machine and compare builds in the same run.
"""
import os
import random
import sqlite3
import sys
import threading
import time

EXT = sys.argv[1] if len(sys.argv) > 1 else "./bertfill"
MODEL = sys.argv[2] if len(sys.argv) > 2 else "model/bertfill-zh-tiny"
REPEATS = int(sys.argv[3]) if len(sys.argv) > 3 else 3
USERS = int(sys.argv[4]) if len(sys.argv) > 4 else 4
CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../shared/data/corpus-zh/eval/gsdsimp.txt")
if not os.path.exists(CORPUS):
    print("skip rows_with_users: no %s (the shared reference data)" % os.path.normpath(CORPUS))
    sys.exit(0)

lines = [l.strip() for l in open(CORPUS, encoding="utf-8") if len(l.strip()) > 8]
rnd = random.Random(1)


def masked(line):
    i = rnd.randrange(len(line))
    return line[:i] + "[MASK]" + line[i + 1:]


def connect():
    c = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    c.enable_load_extension(True)
    c.load_extension(EXT)
    c.execute("SELECT bert_load(?), bert_cache('off')", (MODEL,)).fetchone()
    return c


def pct(xs, q):
    xs = sorted(xs)
    return 1000 * xs[min(len(xs) - 1, int(len(xs) * q))]


rows = [masked(l[:120]) for _ in range(REPEATS) for l in lines]
c = connect()
c.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, text)")
c.executemany("INSERT INTO t(text) VALUES (?)", [(r,) for r in rows])


def counters():
    return {r[0]: r[1] for r in c.execute("SELECT name, value FROM bertfill_stats WHERE kind = 'counter'")}


FILL = "SELECT count(*) FROM fill_rows('SELECT id, text FROM t')"
b = counters()
t0 = time.perf_counter()
c.execute(FILL).fetchone()
alone = time.perf_counter() - t0
a = counters()
runs, seqs = a["rows_batches"] - b["rows_batches"], a["rows_seqs"] - b["rows_seqs"]
tokens = a.get("tokens", 0) - b.get("tokens", 0)
print("fill_rows alone: %d rows in %.2f s, %d encoder runs, %.1f sequences and %.0f tokens per run, %.1f ms per run"
      % (len(rows), alone, runs, seqs / runs, tokens / runs, 1000 * alone / runs))

users = [connect() for _ in range(USERS)]
short = [masked(l[:40]) for l in lines[:500]]
one = []
for s in short[:200]:
    t = time.perf_counter()
    users[0].execute("SELECT bert_fill(?)", (s,)).fetchone()
    one.append(time.perf_counter() - t)
print("one bert_fill alone: P50 %.1f ms, P95 %.1f ms" % (pct(one, 0.5), pct(one, 0.95)))

stop, lat = threading.Event(), []


def user(u, seed):
    i = seed
    while not stop.is_set():
        t = time.perf_counter()
        u.execute("SELECT bert_fill(?)", (short[i % len(short)],)).fetchone()
        lat.append(time.perf_counter() - t)
        i += 1


threads = [threading.Thread(target=user, args=(u, 97 * j)) for j, u in enumerate(users)]
for th in threads:
    th.start()
time.sleep(1.0)
lat.clear()
t0 = time.perf_counter()
c.execute(FILL).fetchone()
busy = time.perf_counter() - t0
during = list(lat)
stop.set()
for th in threads:
    th.join()
print("with %d bert_fill callers: fill_rows %.2f s (%.2fx alone); callers: %d calls, P50 %.1f ms, P95 %.1f ms"
      % (USERS, busy, busy / alone, len(during), pct(during, 0.5), pct(during, 0.95)))
