#!/usr/bin/python3
"""t_stats.py — the SQL side of bertfill's statistics and trace, through
Python's sqlite3 module: bertfill_stats, bert_stats(), bert_stats_reset(),
bert_trace() / bertfill_trace, and the consistency of the counters that
the SQLite layer records (ext/sqlite/lookup.c, encode.c).

Counter identities checked (see ext/sqlite/stats.h for what each counts):
  * every bert_fill / fill_candidates call with non-NULL text counts one
    `calls` and one sample of the `call` stage;
  * a call that gets to the cache lookup / encoder is exactly one of
    hit_lru, hit_table, miss; calls stopped before (invalid UTF-8, too long)
    count err_input / err_toolong instead; calls whose text has no [MASK]
    count none of these (there is nothing to look up), so
        calls = hit_lru + hit_table + miss + err_input + err_toolong + no-mask calls
  * with single-text calls and no busy errors: encoder_runs = seqs = miss,
    and a cache hit never counts an encoder run;
  * p50 <= p95 <= p99 <= max for every stage; total = mean * count.

Run by tests/run.sh (BERTFILL_EXT = the extension without .so, BUILD = the
build directory with models/).  Prints "ok NAME" / "FAIL NAME: why" / "skip".
"""
import json
import os
import sqlite3
import sys
import tempfile
import threading

from bftest import EXT, TINY, check, exit_code
MODEL = TINY





def connect(path=":memory:", uri=False, timeout=5.0):
    c = sqlite3.connect(path, uri=uri, timeout=timeout, isolation_level=None,
                        check_same_thread=False)
    c.enable_load_extension(True)
    c.load_extension(EXT)
    c.enable_load_extension(False)
    return c


def stats(c):
    """name -> row dict from bertfill_stats."""
    cur = c.execute("SELECT * FROM bertfill_stats")
    cols = [d[0] for d in cur.description]
    return {r[0]: dict(zip(cols, r)) for r in cur.fetchall()}


def ctr(c, name):
    return c.execute("SELECT value FROM bertfill_stats WHERE name = ?", (name,)).fetchone()[0]


def reset(c):
    c.execute("SELECT bert_stats_reset()").fetchone()


def err_of(c, sql, args=()):
    try:
        c.execute(sql, args).fetchall()
    except sqlite3.Error as e:
        return str(e)
    return None


COUNTERS = ["calls", "hit_lru", "hit_table", "miss", "encoder_runs", "batches", "seqs",
            "tokens", "masks", "cache_writes", "cache_skipped", "err_input", "err_toolong",
            "err_model", "err_nomem", "err_other", "busy", "rows", "rows_batches", "rows_seqs",
            "trace_skipped"]
STAGES = ["call", "queue", "tokenize", "encode", "topk", "cache_read", "cache_write"]
COLUMNS = ["name", "kind", "count", "total_ms", "mean_ms", "p50_ms", "p95_ms", "p99_ms",
           "max_ms", "value"]

SENT = ["今天天气真[MASK]啊，适合出去玩。", "学习要持之以恒，不能三天打鱼，两天[MASK]。",
        "他说话总是模棱两可，让人捉摸不[MASK]。", "这件事已经[MASK]木难支，无法挽回了。",
        "我们应当尊老爱[MASK]，弘扬传统美德。"]


def test_surface(c):
    cur = c.execute("SELECT * FROM bertfill_stats")
    cols = [d[0] for d in cur.description]
    rows = cur.fetchall()
    check("stats_columns", cols == COLUMNS, "columns %r" % cols)
    kinds = {r[0]: r[1] for r in rows}
    check("stats_counter_rows", all(kinds.get(n) == "counter" for n in COUNTERS),
          "kinds %r" % kinds)
    check("stats_stage_rows", all(kinds.get(n) == "stage" for n in STAGES), "kinds %r" % kinds)
    check("stats_gauge_row", kinds.get("since_reset_s") == "gauge")
    check("stats_names_unique", len(kinds) == len(rows))
    e = err_of(c, "CREATE VIRTUAL TABLE temp.x USING bertfill_stats")
    check("stats_eponymous_only", e is not None, "CREATE VIRTUAL TABLE worked")
    # NULL reads the setting, as with every setter; a non-integer is an error
    on = c.execute("SELECT bert_trace(NULL)").fetchone()[0]
    check("trace_null_reads", on == 0, "bert_trace(NULL) = %r" % on)
    e = err_of(c, "SELECT bert_trace('x')")
    check("trace_text_error", e is not None and "bert_trace: on must be an integer" in e, e)
    e = err_of(c, "SELECT bert_trace(1, 0)")
    check("trace_max_rows_error", e is not None and "max_rows" in e, e)
    e = err_of(c, "SELECT bert_trace(1, 2, 3)")
    check("trace_too_many_args", e is not None and "at most 2" in e, e)


def test_flags(tmp):
    path = os.path.join(tmp, "flags.db")
    c = connect(path)
    c.execute("CREATE VIEW v_trace AS SELECT bert_trace(1)")
    c.execute("CREATE VIEW v_reset AS SELECT bert_stats_reset()")
    c.execute("CREATE VIEW v_stats AS SELECT bert_stats() AS j")
    c.execute("CREATE VIEW v_table AS SELECT count(*) AS n FROM bertfill_stats")
    e = err_of(c, "SELECT * FROM v_trace")
    check("flags_trace_directonly", e is not None and "unsafe use" in e, e)
    e = err_of(c, "SELECT * FROM v_reset")
    check("flags_reset_directonly", e is not None and "unsafe use" in e, e)
    ok = err_of(c, "SELECT * FROM v_stats") is None and err_of(c, "SELECT * FROM v_table") is None
    check("flags_stats_in_trusted_view", ok)
    c.execute("PRAGMA trusted_schema = OFF")
    e1 = err_of(c, "SELECT * FROM v_stats")
    e2 = err_of(c, "SELECT * FROM v_table")
    check("flags_stats_not_innocuous", e1 is not None and e2 is not None, "%r %r" % (e1, e2))
    check("flags_direct_call_works", err_of(c, "SELECT bert_stats(), bert_trace()") is None)
    c.close()


def test_json_and_reset(c):
    c.execute("SELECT bert_cache('memory')")
    reset(c)
    for s in SENT[:3]:
        c.execute("SELECT bert_fill(?)", (s,)).fetchone()
    c.execute("SELECT bert_fill(?)", (SENT[0],)).fetchone()
    j = json.loads(c.execute("SELECT bert_stats()").fetchone()[0])
    t = stats(c)
    same = all(j["counters"][n] == t[n]["value"] for n in COUNTERS) and \
        all(j["stages"][s]["count"] == t[s]["count"] for s in STAGES)
    check("json_matches_table", same, "json %r" % j["counters"])
    check("json_stage_fields", set(j["stages"]["call"]) ==
          {"count", "total_ms", "mean_ms", "p50_ms", "p95_ms", "p99_ms", "max_ms"})
    check("json_batches", sum(b["count"] for b in j["batches"]) == j["counters"]["encoder_runs"]
          and all(b["lo"] <= b["hi"] for b in j["batches"]), repr(j["batches"]))
    v = c.execute("SELECT json_extract(bert_stats(), '$.counters.calls')").fetchone()[0]
    check("json_extract_works", v == 4, repr(v))
    before = json.loads(c.execute("SELECT bert_stats_reset()").fetchone()[0])
    check("reset_returns_previous", before["counters"]["calls"] == 4, repr(before["counters"]))
    t = stats(c)
    zero = all(t[n]["value"] == 0 for n in COUNTERS) and all(t[s]["count"] == 0 for s in STAGES)
    check("reset_zeroes", zero)
    check("reset_no_batches", not any(r["kind"] == "batch" for r in t.values()))
    check("reset_stage_nulls", all(t[s]["p50_ms"] is None and t[s]["mean_ms"] is None
                                   for s in STAGES))
    check("reset_since", t["since_reset_s"]["value"] < 5.0)


def test_counts(c, max_pos):
    # cache 'memory': LRU only.  A workload with hits, misses, errors, no-mask texts.
    c.execute("SELECT bert_cache('memory')")
    c.execute("SELECT bert_cache('clear')")
    reset(c)
    texts = ["%s%d" % (s, i) for i in range(3) for s in SENT]   # 15 distinct masked texts
    for t in texts:
        c.execute("SELECT bert_fill(?)", (t,)).fetchone()
    for t in texts[:7]:                                          # 7 LRU hits
        c.execute("SELECT bert_fill(?)", (t,)).fetchone()
    c.execute("SELECT bert_fill(NULL)").fetchone()               # not a call
    nomask = 2
    c.execute("SELECT bert_fill('没有空格的句子')").fetchone()
    c.execute("SELECT bert_fill('another one')").fetchone()
    bad = 0
    for blob in (b"\xff\xfe[MASK]", b"ab\xc3[MASK]"):
        bad += err_of(c, "SELECT bert_fill(?)", (blob,)) is not None
    toolong = err_of(c, "SELECT bert_fill(?)", ("好" * (max_pos + 5) + "[MASK]",)) is not None
    t = stats(c)
    v = {n: t[n]["value"] for n in COUNTERS}
    check("counts_errors_raised", bad == 2 and toolong)
    check("counts_calls", v["calls"] == 15 + 7 + nomask + 2 + 1, repr(v))
    check("counts_hits_misses", v["hit_lru"] == 7 and v["miss"] == 15 and v["hit_table"] == 0,
          repr(v))
    check("counts_errors", v["err_input"] == 2 and v["err_toolong"] == 1, repr(v))
    check("counts_add_up",
          v["calls"] == v["hit_lru"] + v["hit_table"] + v["miss"] + v["err_input"]
          + v["err_toolong"] + nomask, repr(v))
    check("counts_encoder_runs_eq_miss", v["encoder_runs"] == v["miss"] == v["seqs"], repr(v))
    check("counts_masks", v["masks"] == 15 and v["tokens"] > 15 * 5, repr(v))
    check("counts_call_stage", t["call"]["count"] == v["calls"], repr(t["call"]))
    check("counts_stage_encode", t["encode"]["count"] == v["encoder_runs"] and
          t["topk"]["count"] == v["encoder_runs"] and t["queue"]["count"] == v["encoder_runs"],
          repr((t["encode"], t["queue"])))
    check("counts_cache_read_stage", t["cache_read"]["count"] == 22, repr(t["cache_read"]))
    batch = [r for r in t.values() if r["kind"] == "batch"]
    check("counts_batch_rows", len(batch) == 1 and batch[0]["name"] == "batch_1" and
          batch[0]["count"] == v["encoder_runs"], repr(batch))

    # fill_candidates counts like bert_fill.
    reset(c)
    n = len(c.execute("SELECT * FROM fill_candidates(?, 3)", (SENT[1] + "x",)).fetchall())
    t = stats(c)
    check("counts_fill_candidates", n == 3 and t["calls"]["value"] == 1 and
          t["miss"]["value"] + t["hit_lru"]["value"] == 1 and t["call"]["count"] == 1, repr(t["calls"]))


def test_batches(c):
    # bert_prefill runs the encoder over many texts at once: batch rows, seqs > runs,
    # and no calls (it is not a bert_fill / fill_candidates call).
    c.execute("SELECT bert_cache('memory')")
    c.execute("SELECT bert_cache('clear')")
    c.execute("CREATE TEMP TABLE pf(x TEXT)")
    c.executemany("INSERT INTO pf VALUES (?)", [("第%d批：%s" % (i, SENT[i % 5]),) for i in range(24)])
    reset(c)
    computed = c.execute("SELECT bert_prefill(x) FROM pf").fetchone()[0]
    t = stats(c)
    v = {n: t[n]["value"] for n in COUNTERS}
    batch = [r for r in t.values() if r["kind"] == "batch"]
    check("batch_prefill_seqs", computed > 1 and v["seqs"] == computed and
          v["encoder_runs"] < v["seqs"] and v["calls"] == 0, repr((computed, v)))
    check("batch_rows_sum", sum(r["count"] for r in batch) == v["encoder_runs"] and
          t["encode"]["count"] == v["encoder_runs"], repr(batch))
    check("batch_rows_multi", any(r["name"] != "batch_1" for r in batch) and
          v["batches"] >= 1, repr(batch))
    c.execute("DROP TABLE pf")


def test_hit_no_encoder(tmp):
    path = os.path.join(tmp, "cache.db")
    c = connect(path)
    c.execute("SELECT bert_cache('on')")
    c.execute("SELECT bert_cache('clear')")
    reset(c)
    x = "缓存测试：" + SENT[0]
    r1 = c.execute("SELECT bert_fill(?)", (x,)).fetchone()[0]
    v1 = {n: ctr(c, n) for n in COUNTERS}
    r2 = c.execute("SELECT bert_fill(?)", (x,)).fetchone()[0]
    v2 = {n: ctr(c, n) for n in COUNTERS}
    check("hit_same_result", r1 == r2 and "[MASK]" not in r1, repr((r1, r2)))
    check("hit_first_is_miss", v1["miss"] == 1 and v1["encoder_runs"] == 1 and
          v1["cache_writes"] == 1, repr(v1))
    check("hit_lru_no_encoder", v2["hit_lru"] == 1 and v2["encoder_runs"] == 1 and
          v2["miss"] == 1 and v2["calls"] == 2, repr(v2))
    check("hit_no_encode_sample", c.execute(
        "SELECT count FROM bertfill_stats WHERE name = 'encode'").fetchone()[0] == 1)
    # Table hit: shrink the LRU to one entry and push x out with another text.
    old = c.execute("SELECT bert_cache_lru()").fetchone()[0]
    try:
        c.execute("SELECT bert_cache_lru(1)")
        c.execute("SELECT bert_fill(?)", ("另一句：" + SENT[1],)).fetchone()
        reset(c)
        r3 = c.execute("SELECT bert_fill(?)", (x,)).fetchone()[0]
        v3 = {n: ctr(c, n) for n in COUNTERS}
        check("hit_table_no_encoder", r3 == r1 and v3["hit_table"] == 1 and
              v3["encoder_runs"] == 0 and v3["miss"] == 0 and v3["calls"] == 1, repr(v3))
    finally:
        c.execute("SELECT bert_cache_lru(?)", (old,))
    c.close()


def test_percentiles(c):
    c.execute("SELECT bert_cache('memory')")
    reset(c)
    for i in range(40):
        c.execute("SELECT bert_fill(?)", ("%d号：%s" % (i, SENT[i % 5]),)).fetchone()
    for i in range(40):
        c.execute("SELECT bert_fill(?)", ("%d号：%s" % (i, SENT[i % 5]),)).fetchone()
    t = stats(c)
    bad = []
    for s in STAGES:
        r = t[s]
        if r["count"] == 0:
            continue
        if not (0 <= r["p50_ms"] <= r["p95_ms"] <= r["p99_ms"] <= r["max_ms"]):
            bad.append((s, "order", r))
        if not (r["mean_ms"] <= r["max_ms"] * (1 + 1e-9)):
            bad.append((s, "mean", r))
        if abs(r["mean_ms"] * r["count"] - r["total_ms"]) > 1e-6 * max(1, r["total_ms"]):
            bad.append((s, "total", r))
    check("percentiles_monotone", not bad, repr(bad))
    check("percentiles_present", all(t[s]["count"] > 0 for s in
                                     ("call", "tokenize", "encode", "topk", "cache_read")),
          repr({s: t[s]["count"] for s in STAGES}))
    # Calls that ran the encoder take longer than the encoder itself.
    check("percentiles_call_ge_encode", t["call"]["max_ms"] >= t["encode"]["max_ms"],
          repr((t["call"], t["encode"])))


def test_concurrent(tmp):
    conns = [connect() for _ in range(4)]
    for k in conns:
        k.execute("SELECT bert_cache('off')")
    reset(conns[0])
    errors = []

    def work(i):
        try:
            for j in range(25):
                conns[i].execute("SELECT bert_fill(?)", ("%d-%d：%s" % (i, j, SENT[j % 5]),)).fetchone()
        except Exception as e:   # noqa: BLE001
            errors.append(repr(e))

    th = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    t = stats(conns[0])
    v = {n: t[n]["value"] for n in COUNTERS}
    check("concurrent_no_errors", not errors, repr(errors[:2]))
    # Concurrent misses may share encoder runs (dynamic batching): every
    # text is one sequence of some run, and every run is timed once.
    check("concurrent_exact_counts", v["calls"] == 100 and v["miss"] == 100 and
          v["seqs"] == 100 and 1 <= v["encoder_runs"] <= 100 and v["hit_lru"] == 0 and
          t["call"]["count"] == 100 and t["encode"]["count"] == v["encoder_runs"], repr(v))
    for k in conns:
        k.close()


def test_trace(tmp):
    path = os.path.join(tmp, "trace.db")
    c = connect(path)
    c.execute("SELECT bert_cache('memory')")
    c.execute("SELECT bert_cache('clear')")
    check("trace_off_by_default", c.execute("SELECT bert_trace()").fetchone()[0] == 0)
    c.execute("SELECT bert_fill(?)", (SENT[2],)).fetchone()
    has = c.execute("SELECT count(*) FROM sqlite_schema WHERE name = 'bertfill_trace'").fetchone()[0]
    check("trace_no_table_when_off", has == 0)
    check("trace_on", c.execute("SELECT bert_trace(1)").fetchone()[0] == 1)
    x = "追踪：" + SENT[3]
    c.execute("SELECT bert_fill(?)", (x,)).fetchone()
    c.execute("SELECT bert_fill(?)", (x,)).fetchone()
    err_of(c, "SELECT bert_fill(?)", (b"\xff[MASK]",))
    c.execute("SELECT count(*) FROM fill_candidates(?)", (x,)).fetchone()
    rows = c.execute("SELECT func, text, source, total_ms, queue_ms, tokenize_ms, encode_ms,"
                     " topk_ms, cache_read_ms, cache_write_ms, tokens, masks, ts"
                     " FROM bertfill_trace ORDER BY id").fetchall()
    check("trace_rows", len(rows) == 4, repr(rows))
    if len(rows) == 4:
        enc, lru, err, cand = rows
        check("trace_encoder_row", enc[0] == "bert_fill" and enc[1] == x and enc[2] == "encoder"
              and enc[6] > 0 and enc[3] >= enc[6] + enc[7] and enc[10] > 5 and enc[11] == 1,
              repr(enc))
        check("trace_lru_row", lru[2] == "lru" and lru[6] == 0 and lru[8] > 0 and
              lru[3] >= lru[8], repr(lru))
        check("trace_error_row", err[2] == "error" and err[1] == b"\xff[MASK]", repr(err))
        check("trace_candidates_row", cand[0] == "fill_candidates" and cand[2] == "lru", repr(cand))
        check("trace_ts_utc", c.execute("SELECT abs(julianday(?) - julianday('now')) * 86400 < 60",
                                        (enc[12],)).fetchone()[0] == 1, enc[12])
    # The user's last_insert_rowid() is not the trace row's.
    c.execute("CREATE TABLE u(x)")
    c.execute("INSERT INTO u VALUES (1)")
    c.execute("INSERT INTO u VALUES (2)")
    c.execute("SELECT bert_fill(?)", (SENT[4] + "!",)).fetchone()
    check("trace_keeps_last_insert_rowid",
          c.execute("SELECT last_insert_rowid()").fetchone()[0] == 2)
    # Inside an UPDATE: trace rows are written as the statement runs.
    c.execute("CREATE TABLE s(t TEXT, f TEXT)")
    c.executemany("INSERT INTO s(t) VALUES (?)", [(s,) for s in SENT])
    n0 = c.execute("SELECT count(*) FROM bertfill_trace").fetchone()[0]
    c.execute("UPDATE s SET f = bert_fill(t)")
    n1 = c.execute("SELECT count(*) FROM bertfill_trace").fetchone()[0]
    filled = c.execute("SELECT count(*) FROM s WHERE f IS NOT NULL AND f NOT LIKE '%[MASK]%'").fetchone()[0]
    check("trace_in_update", n1 - n0 == 5 and filled == 5, repr((n0, n1, filled)))
    # Bounded table.
    c.execute("SELECT bert_trace(1, 3)")
    for i in range(6):
        c.execute("SELECT bert_fill(?)", ("%d：%s" % (i, SENT[0]),)).fetchone()
    n = c.execute("SELECT count(*), max(text) FROM bertfill_trace").fetchone()
    check("trace_bounded", n[0] == 3 and n[1].startswith("5："), repr(n))
    # Filling the trace table's own rows does not feed itself.
    c.execute("SELECT bert_trace(1, 1000)")
    before = c.execute("SELECT count(*) FROM bertfill_trace").fetchone()[0]
    got = c.execute("SELECT bert_fill(text) FROM bertfill_trace LIMIT 20").fetchall()
    after = c.execute("SELECT count(*) FROM bertfill_trace").fetchone()[0]
    check("trace_scan_of_itself", len(got) == before == after == 3, repr((before, len(got), after)))
    # Off again.
    check("trace_off", c.execute("SELECT bert_trace(0)").fetchone()[0] == 0)
    c.execute("SELECT bert_fill(?)", ("关闭：" + SENT[0],)).fetchone()
    check("trace_off_no_rows", c.execute("SELECT count(*) FROM bertfill_trace").fetchone()[0] == 3)
    # Per connection: another connection to the same file does not trace.
    c.execute("SELECT bert_trace(1)")
    d = connect(path)
    d.execute("SELECT bert_fill(?)", ("别的连接：" + SENT[0],)).fetchone()
    check("trace_per_connection", d.execute("SELECT bert_trace()").fetchone()[0] == 0 and
          c.execute("SELECT count(*) FROM bertfill_trace").fetchone()[0] == 3)
    d.close()

    # Never breaks the user's statement: read-only connection ...
    reset(c)
    ro = connect("file:%s?mode=ro" % path, uri=True)
    ro.execute("SELECT bert_cache('memory')")
    ok = ro.execute("SELECT bert_trace(1)").fetchone()[0] == 1   # the table exists already
    r = ro.execute("SELECT bert_fill(?)", ("只读：" + SENT[1],)).fetchone()[0]
    check("trace_readonly_statement_ok", ok and r and "[MASK]" not in r, repr(r))
    check("trace_readonly_skipped", ctr(ro, "trace_skipped") >= 1)
    ro.close()
    # ... read-only with no trace table: bert_trace(1) itself says why.
    path2 = os.path.join(tmp, "empty.db")
    sqlite3.connect(path2).execute("CREATE TABLE z(a)").connection.close()
    ro2 = connect("file:%s?mode=ro" % path2, uri=True)
    e = err_of(ro2, "SELECT bert_trace(1)")
    check("trace_readonly_create_error", e is not None and "bertfill_trace" in e and
          "readonly" in e.replace("-", "").replace(" ", ""), e)
    ro2.close()
    # ... and a database locked by another writer (busy timeout 0).
    w = sqlite3.connect(path, isolation_level=None)
    w.execute("BEGIN IMMEDIATE")
    w.execute("INSERT INTO u VALUES (3)")
    lk = connect(path, timeout=0)
    lk.execute("SELECT bert_cache('memory')")
    lk.execute("SELECT bert_trace(1)")
    before = ctr(lk, "trace_skipped")
    r = lk.execute("SELECT bert_fill(?)", ("锁住：" + SENT[2],)).fetchone()[0]
    check("trace_locked_statement_ok", r and "[MASK]" not in r, repr(r))
    check("trace_locked_skipped", ctr(lk, "trace_skipped") == before + 1)
    w.execute("ROLLBACK")
    w.close()
    lk.close()
    c.close()


def main():
    if not os.path.exists(EXT + ".so"):
        print("FAIL t_stats: %s.so not built" % EXT)
        return 1
    if not os.path.exists(os.path.join(MODEL, "model.safetensors")):
        print("skip t_stats: no test model in %s (run make models)" % MODEL)
        return 0
    os.environ["BERTFILL_MODEL"] = MODEL
    with open(os.path.join(MODEL, "config.json")) as f:
        max_pos = json.load(f)["max_position_embeddings"]
    with tempfile.TemporaryDirectory() as tmp:
        c = connect()
        test_surface(c)
        test_flags(tmp)
        test_json_and_reset(c)
        test_counts(c, max_pos)
        test_percentiles(c)
        test_batches(c)
        c.close()
        test_hit_no_encoder(tmp)
        test_concurrent(tmp)
        test_trace(tmp)
    return exit_code()


if __name__ == "__main__":
    sys.exit(main())
