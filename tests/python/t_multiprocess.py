#!/usr/bin/python3
"""t_multiprocess.py — many processes writing the bertfill cache of one
database file at once, in WAL and in rollback-journal mode, and processes
killed with SIGKILL in the middle of cache writes.

Each worker process opens the shared database file with Python's sqlite3
module (busy timeout 10 s, as an application would), loads the extension and
the tiny test model, and makes a mix of calls over a pool of texts that
partly overlaps with the other workers' (so several processes write the same
cache key at the same moment):
  * autocommit  SELECT bert_fill(?)  and  SELECT * FROM fill_candidates(?, 3)
  * BEGIN IMMEDIATE; INSERT INTO user_rows ... bert_fill(?); COMMIT
  * BEGIN IMMEDIATE; SELECT bert_fill(?); ROLLBACK  (its cache write is undone)
Every user statement must succeed (the cache layer skips a cache write it
cannot make within its small busy budget; it never fails the statement), and
every result must equal the reference computed beforehand by one process
with the cache off.  After each call the worker reads the process's
cache_writes counter: a call that wrote a row in autocommit mode or in a
committed transaction must find its row in the table at the end.

Afterwards the parent checks the file: PRAGMA integrity_check is ok; every
cache row has the model's fingerprint, a key that is the token sequence of
a known text, k = 5 and a result blob byte-identical to a fresh computation
(no torn or misattributed row); no committed write is missing (lost); every
user_rows row holds the right filling.  Then workers are killed with
SIGKILL at random moments while writing, a few rounds, and the same checks
run on what they leave (plus: the database is still writable); and one
worker is killed for certain inside an open transaction holding 40 cache
writes (in rollback mode the hot journal is there at the kill): after
recovery none of them is in the table.

Prints "ok NAME (...)" lines with processes x writes and the counts.
"""
import multiprocessing as mp
import os
import random
import signal
import sqlite3
import struct
import sys
import tempfile
import time

from bftest import EXT, TINY, check, exit_code
MODEL = TINY
NPROC = int(os.environ.get("MP_PROCS", "6"))
NCALLS = int(os.environ.get("MP_CALLS", "150"))





def connect(path, timeout=10.0):
    c = sqlite3.connect(path, timeout=timeout, isolation_level=None)
    c.enable_load_extension(True)
    c.load_extension(EXT)
    c.enable_load_extension(False)
    c.execute("SELECT bert_load(?)", (MODEL,))
    return c


CHARS = ("的一是不了人我在有他这为之大来以个中上们到说国和地也子时道出而要于就下得可你年生"
         "自会那后能对着事其里所去行过家十用发天如然作方成者多日都三小军二无同么经法当起与好看学")


def make_texts(n, seed=7):
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        s = [rnd.choice(CHARS) for _ in range(rnd.randint(3, 20))]
        for _ in range(1 + i % 3):
            s.insert(rnd.randint(0, len(s)), "[MASK]")
        out.append("".join(s))
    return out


def cand_rows(c, text, k):
    return [tuple(r) for r in c.execute(
        "SELECT mask, rank, token, token_id, score, sequence FROM fill_candidates(?, ?)", (text, k))]


# A text computed in a batch with others (dynamic batching, the machine-wide
# batcher) gets the probabilities of a lone run to float rounding (about
# 1e-6, docs/columns.md), not to the bit: answers are compared with this
# tolerance, and two candidates whose probabilities are that close may swap.
PROB_TOL = 1e-5


def same_ranking(a, b):
    """a, b: [(token_id, prob)] best first.  The same ranking but for float
    rounding: each rank's probability within PROB_TOL, the same token or one
    tied (within PROB_TOL) with it in the other list."""
    if len(a) != len(b):
        return False
    for (ia, pa), (ib, pb) in zip(a, b):
        if abs(pa - pb) > PROB_TOL:
            return False
        if ia != ib and not any(i == ia and abs(p - pb) <= PROB_TOL for i, p in b):
            return False
    return True


def same_cands(a, b):
    """Two results of cand_rows: the same but for float rounding."""
    if len(a) != len(b):
        return False
    masks = sorted({r[0] for r in a})
    if masks != sorted({r[0] for r in b}):
        return False
    return all(same_ranking([(r[3], r[4]) for r in a if r[0] == m], [(r[3], r[4]) for r in b if r[0] == m])
               for m in masks)


def same_result(a, b):
    """Two cache result blobs ('BFC1', u32 masks, u32 k, (i32 id, f32 prob)
    per mask and rank): the same header, each mask's ranking the same but for
    float rounding."""
    if a[:12] != b[:12] or len(a) != len(b) or a[:4] != b"BFC1":
        return False
    masks, k = struct.unpack_from("<II", a, 4)
    ra = struct.unpack_from("<" + "if" * (masks * k), a, 12)
    rb = struct.unpack_from("<" + "if" * (masks * k), b, 12)
    pairs = lambda r, m: [(r[2 * (m * k + j)], r[2 * (m * k + j) + 1]) for j in range(k)]
    return all(same_ranking(pairs(ra, m), pairs(rb, m)) for m in range(masks))


def references(texts):
    """text -> (bert_fill, candidates k=3, cache key, cache result), from one
    fresh in-memory database per text (cache on, so its one row is the
    result of a fresh computation)."""
    ref = {}
    c = connect(":memory:")
    c.execute("SELECT bert_cache('off')")
    fills = {t: c.execute("SELECT bert_fill(?)", (t,)).fetchone()[0] for t in texts}
    cands = {t: cand_rows(c, t, 3) for t in texts}
    fp = c.execute("SELECT json_extract(bert_debug(), '$.model.fingerprint')").fetchone()[0]
    c.close()
    for t in texts:
        d = connect(":memory:")
        d.execute("SELECT bert_cache('clear')")     # also empties the process LRU
        d.execute("SELECT bert_fill(?)", (t,))
        rows = d.execute("SELECT model, key, k, result FROM bertfill_cache").fetchall()
        assert len(rows) == 1, rows
        ref[t] = (fills[t], cands[t], bytes(rows[0][1]), bytes(rows[0][3]), rows[0][2])
        d.close()
    return fp, ref


def writes(c):
    return c.execute("SELECT value FROM bertfill_stats WHERE name = 'cache_writes'").fetchone()[0]


def skipped(c):
    return c.execute("SELECT value FROM bertfill_stats WHERE name = 'cache_skipped'").fetchone()[0]


def worker(path, wid, texts, ncalls, ref_fill, ref_cand, q, forever=False):
    """Returns through q: (wid, errors, mismatches, committed keys, calls, counts)."""
    rnd = random.Random(1000 + wid)
    errors, mismatches, committed, calls = [], 0, [], 0
    kinds = {"auto": 0, "cand": 0, "commit": 0, "rollback": 0, "written": 0, "skipped": 0}
    try:
        c = connect(path)
    except Exception as e:  # noqa: BLE001
        q.put((wid, ["connect: %s" % e], 0, [], 0, kinds))
        return
    own = texts[wid::NPROC]
    j = 0
    while forever or j < ncalls:
        j += 1
        t = rnd.choice(own) if rnd.random() < 0.6 else rnd.choice(texts)
        r = rnd.random()
        try:
            w0 = writes(c)
            if r < 0.45:
                kind = "auto"
                got = c.execute("SELECT bert_fill(?)", (t,)).fetchone()[0]
                ok = got == ref_fill[t]
            elif r < 0.6:
                kind = "cand"
                ok = same_cands(cand_rows(c, t, 3), ref_cand[t])
            elif r < 0.9:
                kind = "commit"
                c.execute("BEGIN IMMEDIATE")
                c.execute("INSERT INTO user_rows(wid, j, text, filled) VALUES (?, ?, ?, bert_fill(?))",
                          (wid, j, t, t))
                c.execute("COMMIT")
                ok = True
            else:
                kind = "rollback"
                c.execute("BEGIN IMMEDIATE")
                got = c.execute("SELECT bert_fill(?)", (t,)).fetchone()[0]
                c.execute("ROLLBACK")
                ok = got == ref_fill[t]
            calls += 1
            kinds[kind] += 1
            if not ok:
                mismatches += 1
            if writes(c) > w0 and kind != "rollback":
                committed.append(t)
                kinds["written"] += 1
        except sqlite3.Error as e:
            errors.append("%s: %s" % (type(e).__name__, e))
            try:
                c.execute("ROLLBACK")
            except sqlite3.Error:
                pass
    kinds["skipped"] = skipped(c)
    c.close()
    q.put((wid, errors, mismatches, committed, calls, kinds))


def new_db(path, journal):
    c = sqlite3.connect(path, isolation_level=None)
    c.execute("PRAGMA journal_mode = %s" % journal)
    c.execute("CREATE TABLE user_rows(id INTEGER PRIMARY KEY, wid INT, j INT, text TEXT, filled TEXT)")
    c.close()


def verify(name, path, fp, ref, committed=()):
    """Check the file; returns (rows, torn, lost)."""
    c = connect(path)
    ic = c.execute("PRAGMA integrity_check").fetchall()
    check(name + "_integrity", ic == [("ok",)], repr(ic[:3]))
    by_key = {v[2]: (t, v[3], v[4]) for t, v in ref.items()}
    torn, rows = [], 0
    have = set()
    if c.execute("SELECT count(*) FROM sqlite_master WHERE name = 'bertfill_cache'").fetchone()[0]:
        for model, key, k, result in c.execute("SELECT model, key, k, result FROM bertfill_cache"):
            rows += 1
            key, result = bytes(key), bytes(result)
            have.add(key)
            if model != fp or key not in by_key or k != by_key[key][2] or \
                    not same_result(result, by_key[key][1]):
                torn.append((model, key[:16], k))
    lost = sorted({t for t in committed if ref[t][2] not in have})
    check(name + "_rows", not torn, "%d torn or misattributed rows of %d, e.g. %r" % (len(torn), rows, torn[:2]))
    check(name + "_lost", not lost, "%d committed cache writes missing, e.g. %r" % (len(lost), lost[:2]))
    bad = [r for r in c.execute("SELECT text, filled FROM user_rows") if ref[r[0]][0] != r[1]]
    check(name + "_user_rows", not bad, "%d user rows with a wrong filling: %r" % (len(bad), bad[:2]))
    # still usable and writable
    try:
        c.execute("SELECT bert_cache('clear')")
        t = next(iter(ref))
        ok = c.execute("SELECT bert_fill(?)", (t,)).fetchone()[0] == ref[t][0]
        n = c.execute("SELECT count(*) FROM bertfill_cache").fetchone()[0]
        check(name + "_writable", ok and n == 1, "after clear + one fill: %d rows" % n)
    except sqlite3.Error as e:
        check(name + "_writable", False, str(e))
    c.close()
    return rows, len(torn), len(lost)


def run_writers(tmp, journal, texts, fp, ref):
    path = os.path.join(tmp, "writers-%s.db" % journal)
    new_db(path, journal)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ref_fill = {t: v[0] for t, v in ref.items()}
    ref_cand = {t: v[1] for t, v in ref.items()}
    t0 = time.time()
    ps = [ctx.Process(target=worker, args=(path, w, texts, NCALLS, ref_fill, ref_cand, q))
          for w in range(NPROC)]
    for p in ps:
        p.start()
    results = [q.get(timeout=600) for _ in ps]
    for p in ps:
        p.join()
    secs = time.time() - t0
    errors = [e for r in results for e in r[1]]
    mism = sum(r[2] for r in results)
    committed = [t for r in results for t in r[3]]
    calls = sum(r[4] for r in results)
    kinds = {k: sum(r[5][k] for r in results) for k in results[0][5]}
    name = "mp_" + journal
    check(name + "_no_errors", not errors and calls == NPROC * NCALLS,
          "%d user statements failed, e.g. %r" % (len(errors), errors[:3]))
    check(name + "_results", mism == 0, "%d results differ from the reference" % mism)
    rows, torn, lost = verify(name, path, fp, ref, committed)
    print("ok %s_summary (%d processes x %d calls in %.1fs: %s; %d cache rows written, %d rows in the "
          "table, %d writes skipped as busy, %d torn, %d lost)"
          % (name, NPROC, NCALLS, secs,
             ", ".join("%s %d" % kv for kv in kinds.items() if kv[0] not in ("written", "skipped")),
             kinds["written"], rows, kinds["skipped"], torn, lost))


def run_kills(tmp, journal, texts, fp, ref, rounds=4):
    path = os.path.join(tmp, "kill-%s.db" % journal)
    new_db(path, journal)
    ctx = mp.get_context("spawn")
    ref_fill = {t: v[0] for t, v in ref.items()}
    ref_cand = {t: v[1] for t, v in ref.items()}
    rnd = random.Random(99)
    killed = 0
    for r in range(rounds):
        q = ctx.Queue()
        ps = [ctx.Process(target=worker, args=(path, w, texts, 0, ref_fill, ref_cand, q, True))
              for w in range(3)]
        for p in ps:
            p.start()
        time.sleep(0.8 + rnd.random() * 0.7)    # startup (~0.3 s) then writing
        for p in ps:
            os.kill(p.pid, signal.SIGKILL)
            killed += 1
        for p in ps:
            p.join()
        check("kill_%s_round%d_exitcodes" % (journal, r + 1), all(p.exitcode == -signal.SIGKILL for p in ps),
              repr([p.exitcode for p in ps]))
    rows, torn, lost = verify("kill_" + journal, path, fp, ref)
    print("ok kill_%s_summary (%d processes SIGKILLed while writing, %d rows left, %d torn)"
          % (journal, killed, rows, torn))


def txn_worker(path, texts, ev):
    """Cache writes and user rows inside a transaction, then wait to be killed."""
    c = connect(path)
    c.execute("BEGIN IMMEDIATE")
    for i, t in enumerate(texts):
        c.execute("INSERT INTO user_rows(wid, j, text, filled) VALUES (99, ?, ?, bert_fill(?))", (i, t, t))
    ev.set()
    time.sleep(60)


def run_kill_in_txn(tmp, journal, texts, fp, ref):
    """SIGKILL while a transaction holding cache writes is open: a hot journal
    (or uncommitted WAL frames) is left; the next opener rolls it back."""
    path = os.path.join(tmp, "txn-%s.db" % journal)
    new_db(path, journal)
    ctx = mp.get_context("spawn")
    ev = ctx.Event()
    mine = texts[:40]
    p = ctx.Process(target=txn_worker, args=(path, mine, ev))
    p.start()
    ok = ev.wait(60)
    left = [os.path.basename(f) for f in (path + "-journal", path + "-wal") if os.path.exists(f)
            and os.path.getsize(f) > 0]
    os.kill(p.pid, signal.SIGKILL)
    p.join()
    check("kill_in_txn_%s_reached" % journal, ok and p.exitcode == -signal.SIGKILL, repr(p.exitcode))
    if journal == "delete":
        # (in WAL mode a small transaction stays in the page cache until it
        # commits: nothing reaches the WAL file)
        check("kill_in_txn_%s_hot_journal" % journal, bool(left), "no journal at the kill")
    rows, torn, lost = verify("kill_in_txn_" + journal, path, fp, ref)
    c = sqlite3.connect(path)
    n_user = c.execute("SELECT count(*) FROM user_rows").fetchone()[0]
    c.close()
    check("kill_in_txn_%s_rolled_back" % journal, n_user == 0 and rows == 0,
          "%d user rows, %d cache rows survived the killed transaction" % (n_user, rows))
    print("ok kill_in_txn_%s_summary (killed inside a transaction with %d cache writes; %s left; "
          "%d rows after recovery, %d torn)" % (journal, len(mine), "+".join(left) or "no journal data", rows, torn))


def main():
    if not os.path.isdir(MODEL):
        print("FAIL multiprocess: no model %s (make models)" % MODEL)
        return 1
    texts = make_texts(int(os.environ.get("MP_TEXTS", "800")))
    fp, ref = references(texts)
    with tempfile.TemporaryDirectory() as tmp:
        for journal in ("wal", "delete"):
            run_writers(tmp, journal, texts, fp, ref)
        for journal in ("wal", "delete"):
            run_kills(tmp, journal, texts, fp, ref)
            run_kill_in_txn(tmp, journal, texts, fp, ref)
    return exit_code()


if __name__ == "__main__":
    sys.exit(main())
