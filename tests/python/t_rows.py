#!/usr/bin/python3
"""t_rows.py — fill_rows(sql [, k]), the column filler (ext/sqlite/rows.c),
and what goes with it: bert_rows_cache, bert_prefill's error when the cache
cannot keep a column, the chunked pattern of docs/columns.md (killed, then
resumed; in Python and in the sqlite3 shell, whose loop is read from the page
and run alone and two copies at once), and the trusted-schema entry
point (sqlite3_bertfill_trusted_init) with PRAGMA trusted_schema on and off.

Through /usr/bin/python3's sqlite3 with the tiny test model.  Run by
tests/run.sh; prints "ok NAME" / "FAIL NAME: why" / "skip NAME: why".
"""
import json
import math
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile

from bftest import EXT, TINY, check, error_of, exit_code, skip

UPDATE = ("UPDATE t SET filled = f.filled FROM fill_rows('SELECT rowid, text FROM t "
          "WHERE filled IS NULL') AS f WHERE t.rowid = f.key")
# The chunked pattern of docs/columns.md: each chunk one transaction, rows that
# cannot be filled marked by their error so that no chunk picks them again.
CHUNK = """UPDATE t SET filled = f.filled, fill_error = f.error
  FROM fill_rows('SELECT rowid, text FROM t WHERE filled IS NULL AND fill_error IS NULL
                  AND text IS NOT NULL LIMIT %d') AS f
 WHERE t.rowid = f.key"""

_cjk = []


def cjk():
    if not _cjk:
        vocab = open(os.path.join(TINY, "vocab.txt"), encoding="utf-8").read().split("\n")
        _cjk.extend(t for t in vocab if len(t) == 1 and "\u4e00" <= t <= "\u9fff")
    return _cjk


def texts(n, seed, masks=(1, 2)):
    """n distinct texts of 6-20 characters from the tiny model's vocabulary,
    with 1 or 2 [MASK] each."""
    rnd = random.Random(seed)
    chars, out, seen = cjk(), [], set()
    while len(out) < n:
        w = [rnd.choice(chars) for _ in range(rnd.randint(6, 20))]
        for _ in range(rnd.choice(masks)):
            w.insert(rnd.randint(0, len(w)), "[MASK]")
        s = "".join(w)
        if s not in seen:
            seen.add(s)
            out.append(s)
    return out


def connect(path=":memory:", uri=False, trusted=False, **kw):
    c = sqlite3.connect(path, uri=uri, isolation_level=None, **kw)
    c.enable_load_extension(True)
    if trusted:
        c.execute("SELECT load_extension(?, 'sqlite3_bertfill_trusted_init')", (EXT,))
    else:
        c.load_extension(EXT)
    c.enable_load_extension(False)
    c.execute("SELECT bert_load(?)", (TINY,)).fetchone()
    return c


def counters(c):
    return {r[0]: r[1] for r in c.execute("SELECT name, value FROM bertfill_stats WHERE kind = 'counter'")}


def delta(before, after):
    return {k: after[k] - before.get(k, 0) for k in after}


def table(c, rows, name="t"):
    c.execute("DROP TABLE IF EXISTS %s" % name)
    c.execute("CREATE TABLE %s(id INTEGER PRIMARY KEY, text, filled TEXT, fill_error TEXT)" % name)
    c.executemany("INSERT INTO %s(text) VALUES (?)" % name, [(r,) for r in rows])


def reference(rows):
    """bert_fill of every text on its own: a fresh connection, no cache, no batching."""
    c = connect()
    c.execute("SELECT bert_cache('off'), bert_batching(0)").fetchone()
    out = [c.execute("SELECT bert_fill(?)", (r,)).fetchone()[0] for r in rows]
    c.execute("SELECT bert_batching(1)").fetchone()
    c.close()
    return out


def packed_runs(rows, length, cached):
    """(runs, sequences) of the encoder for a column, as bounds.h packs it:
    a new sequence joins the run while it has fewer than 32 sequences and
    its tokens stay within 2048, a run goes once it is full, and the text
    that does not fit starts the next run.  A repeat within the run shares
    its sequence; with cached, a text computed in an earlier run is not
    computed again."""
    runs, seqs, run, tokens, done = 0, 0, [], 0, set()
    for r in rows:
        if r in run or (cached and r in done):
            continue
        if run and tokens + length[r] > 2048:
            runs, seqs, run, tokens = runs + 1, seqs + len(run), [], 0
        run.append(r)
        done.add(r)
        tokens += length[r]
        if len(run) == 32 or tokens >= 2048:
            runs, seqs, run, tokens = runs + 1, seqs + len(run), [], 0
    return runs + (len(run) > 0), seqs + len(run)


def test_token_limit():
    """Long texts: a run is cut by its tokens (2048), not by its sequences;
    the text that does not fit starts the next run, in fill_rows and in
    bert_prefill alike, repeats of it included."""
    small = os.path.join(os.path.dirname(TINY), "small")
    c = connect()
    c.execute("SELECT bert_load(?)", (small,)).fetchone()
    vocab = open(os.path.join(small, "vocab.txt"), encoding="utf-8").read().split("\n")
    chars = [t for t in vocab if len(t) == 1 and "\u4e00" <= t <= "\u9fff"]
    rnd = random.Random(11)
    distinct = []
    for _ in range(90):
        w = [rnd.choice(chars) for _ in range(rnd.randint(60, 120))]
        w.insert(rnd.randint(0, len(w)), "[MASK]")
        distinct.append("".join(w))
    rows = distinct[:60] + [distinct[rnd.randrange(60)] for _ in range(20)] + distinct[60:]
    length = {r: len(json.loads(c.execute("SELECT bert_tokenize(?)", (r,)).fetchone()[0])) for r in distinct}
    runs, seqs = packed_runs(rows, length, cached=False)
    check("token_limit_cut_by_tokens", max(length.values()) <= 128 and runs > math.ceil(seqs / 32),
          "longest %d, %d runs for %d sequences" % (max(length.values()), runs, seqs))
    c.execute("SELECT bert_cache('off')").fetchone()
    table(c, rows)
    before = counters(c)
    got = [r[0] for r in c.execute("SELECT filled FROM fill_rows('SELECT id, text FROM t ORDER BY id')")]
    d = delta(before, counters(c))
    check("token_limit_rows_runs", d["encoder_runs"] == runs and d["rows_seqs"] == seqs,
          "runs %d seqs %d (want %d, %d)" % (d["encoder_runs"], d["rows_seqs"], runs, seqs))
    ref = connect()
    ref.execute("SELECT bert_load(?), bert_cache('off'), bert_batching(0)", (small,)).fetchone()
    want = [ref.execute("SELECT bert_fill(?)", (r,)).fetchone()[0] for r in rows]
    ref.close()
    check("token_limit_rows_same_as_bert_fill", got == want,
          "%d differ" % sum(a != b for a, b in zip(got, want)))
    # bert_prefill packs the same runs; bert_fill then reads every text from the cache
    c.execute("SELECT bert_cache('on'), bert_cache('clear')").fetchone()
    before = counters(c)
    computed = c.execute("SELECT bert_prefill(text) FROM t ORDER BY id").fetchone()[0]
    d = delta(before, counters(c))
    runs, seqs = packed_runs(rows, length, cached=True)
    check("token_limit_prefill_runs", computed == seqs == len(distinct) and d["encoder_runs"] == runs,
          "computed %d, runs %d (want %d, %d)" % (computed, d["encoder_runs"], seqs, runs))
    before = counters(c)
    filled = [r[0] for r in c.execute("SELECT bert_fill(text) FROM t ORDER BY id")]
    d = delta(before, counters(c))
    check("token_limit_prefill_then_hits", filled == want and d["encoder_runs"] == 0, repr(d["encoder_runs"]))
    c.close()


# ---------------------------------------------------------------------------
def test_surface():
    c = connect()
    cur = c.execute("SELECT * FROM fill_rows('SELECT 1, ''今天天气真[MASK]啊''')")
    cols = [d[0] for d in cur.description]
    rows = cur.fetchall()
    check("columns", cols == ["key", "text", "filled", "masks", "error"], repr(cols))
    check("one_row", len(rows) == 1 and rows[0][0] == 1 and rows[0][2] and "[MASK]" not in rows[0][2]
          and rows[0][3] is None and rows[0][4] is None, repr(rows))
    hidden = c.execute("SELECT sql, k FROM fill_rows('SELECT 1, ''我[MASK]''', 3)").fetchone()
    check("hidden_columns", hidden == ("SELECT 1, '我[MASK]'", 3), repr(hidden))
    # key and text come back as the query gave them (type included)
    got = c.execute("SELECT key, typeof(key), text, typeof(text), filled FROM fill_rows("
                    "'SELECT x''01'', 42 UNION ALL SELECT 2.5, ''no mask''')").fetchall()
    check("values_kept", got == [(b"\x01", "blob", 42, "integer", "42"),
                                 (2.5, "real", "no mask", "text", "no mask")], repr(got))
    masks = c.execute("SELECT masks FROM fill_rows('SELECT 1, ''[MASK]天[MASK]''', 3)").fetchone()[0]
    m = json.loads(masks)
    check("masks_json", len(m) == 2 and all(len(x) == 3 for x in m) and
          all(set(d) == {"token", "token_id", "score"} for x in m for d in x) and
          all(x[0]["score"] >= x[1]["score"] >= x[2]["score"] for x in m), masks)
    cand = c.execute("SELECT mask, rank, token_id, score FROM fill_candidates('[MASK]天[MASK]', 3)").fetchall()
    same = all(m[mk][rk - 1]["token_id"] == tid and abs(m[mk][rk - 1]["score"] - sc) < 1e-6
               for mk, rk, tid, sc in cand)
    check("masks_match_fill_candidates", len(cand) == 6 and same, repr((cand, m)))
    nomask = c.execute("SELECT masks FROM fill_rows('SELECT 1, ''plain''', 2)").fetchone()[0]
    check("masks_no_mask_empty_array", nomask == "[]", repr(nomask))
    # The UPDATE runs fill_rows once, as the outer loop, and finds t's rows by rowid.
    c.execute("CREATE TABLE t(text, filled)")
    plan = " / ".join(r[3] for r in c.execute("EXPLAIN QUERY PLAN " + UPDATE))
    check("plan_fill_rows_outer", plan.startswith("SCAN f VIRTUAL TABLE") and
          "SEARCH t USING INTEGER PRIMARY KEY" in plan, plan)
    # Inside a join, on the inner side: the query runs again for each outer row.
    n = c.execute("SELECT count(*) FROM (SELECT 1 AS a UNION ALL SELECT 2) v, "
                  "fill_rows('SELECT 1, ''我[MASK]''') f").fetchone()[0]
    check("inner_side_of_join", n == 2, repr(n))
    check("rows_cache_default", c.execute("SELECT bert_rows_cache()").fetchone()[0] == "room")
    check("rows_cache_set", c.execute("SELECT bert_rows_cache('ALL'), bert_rows_cache('none'), "
                                      "bert_rows_cache('room')").fetchone() == ("all", "none", "room"))
    e = error_of(c, "SELECT bert_rows_cache('some')")
    check("rows_cache_bad", e == "bert_rows_cache: the argument must be 'room', 'all' or 'none' (got some)", e)
    e = error_of(c, "SELECT bert_rows_cache(x'ff')")
    check("rows_cache_blob", e == "bert_rows_cache: the argument must be 'room', 'all' or 'none' (got a blob)", e)
    c.close()


def test_query_errors():
    c = connect()
    c.execute("CREATE TABLE t(a, b)")
    hint = "; it must be one SELECT that returns (key, text), e.g. 'SELECT rowid, text FROM t'"
    cases = [
        ("not_a_select", "fill_rows('DELETE FROM t')", "fill_rows: the query writes to the database" + hint),
        ("write_returning", "fill_rows('UPDATE t SET a = 1 RETURNING a, b')",
         "fill_rows: the query writes to the database" + hint),
        ("create", "fill_rows('CREATE TABLE u(x, y)')", "fill_rows: the query writes to the database" + hint),
        ("empty", "fill_rows('')", "fill_rows: the query is empty" + hint),
        ("comment_only", "fill_rows('-- nothing')", "fill_rows: the query is empty" + hint),
        ("two_statements", "fill_rows('SELECT 1, 2; SELECT 3, 4')",
         "fill_rows: the query has more than one statement" + hint),
        ("explain", "fill_rows('EXPLAIN SELECT 1, 2')", "fill_rows: the query is an EXPLAIN" + hint),
        ("one_column", "fill_rows('SELECT a FROM t')",
         "fill_rows: the query returns 1 column; it must return 2: (key, text)"),
        ("three_columns", "fill_rows('SELECT a, b, a FROM t')",
         "fill_rows: the query returns 3 columns; it must return 2: (key, text)"),
        ("begin", "fill_rows('BEGIN')", "fill_rows: the query returns 0 columns; it must return 2: (key, text)"),
        ("parse", "fill_rows('SELEC 1, 2')", 'fill_rows: the query does not prepare: near "SELEC": syntax error'),
        ("no_table", "fill_rows('SELECT a, b FROM nowhere')",
         "fill_rows: the query does not prepare: no such table: nowhere"),
        ("parameter", "fill_rows('SELECT ?1, b FROM t')",
         "fill_rows: the query has 1 parameter (?1) that fill_rows cannot bind; write the values into the query"),
        ("parameters", "fill_rows('SELECT :a, :b')",
         "fill_rows: the query has 2 parameters (:a) that fill_rows cannot bind; write the values into the query"),
        ("runtime", "fill_rows('SELECT 1, abs(-9223372036854775807 - 1)')", "fill_rows: the query failed: integer overflow"),
        ("null_query", "fill_rows(NULL)",
         "fill_rows: the query must be a text; use fill_rows(sql [, k]), e.g. SELECT * FROM fill_rows('SELECT rowid, text FROM t')"),
        ("missing", "fill_rows",
         "fill_rows: missing query argument; use fill_rows(sql [, k]), e.g. SELECT * FROM fill_rows('SELECT rowid, text FROM t')"),
        ("k_zero", "fill_rows('SELECT 1, 2', 0)", "fill_rows: k must be an integer from 1 to 1000 (got 0)"),
        ("k_text", "fill_rows('SELECT 1, 2', 'x')", "fill_rows: k must be an integer from 1 to 1000 (got x)"),
    ]
    for name, call, want in cases:
        got = error_of(c, "SELECT * FROM " + call)
        check("query_error_" + name, got == want, "got %r" % got)
    # A failure after some rows: the statement fails, with the query's message.
    got = error_of(c, "SELECT * FROM fill_rows('SELECT value, CASE WHEN value < 300 THEN ''我[MASK]'' "
                      "ELSE abs(-9223372036854775807 - 1) END FROM generate_series(1, 400)')")
    if got and "no such table: generate_series" in got:
        got = error_of(c, "SELECT * FROM fill_rows('WITH RECURSIVE s(v) AS (SELECT 1 UNION ALL SELECT v + 1 "
                          "FROM s WHERE v < 400) SELECT v, CASE WHEN v < 300 THEN ''我[MASK]'' "
                          "ELSE abs(-9223372036854775807 - 1) END FROM s')")
    check("query_error_later_batch", got == "fill_rows: the query failed: integer overflow", repr(got))
    check("usable_after_errors", c.execute("SELECT count(*) FROM fill_rows('SELECT 1, 2')").fetchone()[0] == 1)
    # DIRECTONLY: never from a view or trigger, whatever trusted_schema says.
    c.execute("CREATE VIEW vr AS SELECT * FROM fill_rows('SELECT 1, ''我[MASK]''')")
    got = error_of(c, "SELECT * FROM vr")
    check("directonly_view", got == 'unsafe use of virtual table "fill_rows"', repr(got))
    c.close()


def test_lowered_limits():
    """The issue's case: cache bounds below the number of rows.  fill_rows
    computes each distinct text once, in full batches; bert_prefill refuses
    with a message that points to fill_rows."""
    n, limit, lru = 1200, 300, 150
    rows = texts(n, seed=1)
    c = connect()
    c.execute("SELECT bert_cache('clear'), bert_cache_limit(?), bert_cache_lru(?)", (limit, lru)).fetchone()
    table(c, rows)
    try:
        before = counters(c)
        c.execute(UPDATE)
        changed = c.execute("SELECT changes()").fetchone()[0]
        d = delta(before, counters(c))
        check("lowered_all_rows", changed == n and
              c.execute("SELECT count(*) FROM t WHERE filled IS NULL").fetchone()[0] == 0,
              "changed %d" % changed)
        check("lowered_each_text_once", d["seqs"] == n and d["rows_seqs"] == n and d["rows"] == n,
              "seqs %d rows_seqs %d rows %d" % (d["seqs"], d["rows_seqs"], d["rows"]))
        check("lowered_in_full_batches", d["encoder_runs"] == math.ceil(n / 32) and
              d["rows_batches"] == math.ceil(n / 32), "runs %d batches %d" % (d["encoder_runs"], d["rows_batches"]))
        check("lowered_no_single_calls", d["calls"] == 0 and d["miss"] == 0, repr(d))
        # 'room': the table took rows only up to its bound
        have = c.execute("SELECT count(*) FROM bertfill_cache").fetchone()[0]
        check("lowered_table_room", have == limit and d["cache_writes"] == limit, "%d rows, %d writes" %
              (have, d["cache_writes"]))
        same = [r[0] for r in c.execute("SELECT filled FROM t ORDER BY id")] == reference(rows)
        check("lowered_same_as_bert_fill", same)

        # bert_prefill: the same column is more than the cache keeps: an error
        c.execute("SELECT bert_cache('clear')").fetchone()
        before = counters(c)
        got = error_of(c, "SELECT bert_prefill(text) FROM t")
        d = delta(before, counters(c))
        want = ("bert_prefill: 320 texts computed but the cache keeps 300 (bert_cache_limit), so the UPDATE "
                "after bert_prefill would compute them again; fill the column in one pass with fill_rows: "
                "UPDATE t SET filled = f.filled FROM fill_rows('SELECT rowid, text FROM t') AS f WHERE "
                "t.rowid = f.key")
        check("prefill_too_many_error", got == want, repr(got))
        check("prefill_stops_early", d["seqs"] == 320, repr(d["seqs"]))
        c.execute("SELECT bert_cache('memory')").fetchone()
        got = error_of(c, "SELECT bert_prefill(text) FROM t")
        check("prefill_too_many_memory", got and got.startswith(
            "bert_prefill: 160 texts computed but the cache keeps 150 (bert_cache_lru)"), repr(got))
        c.execute("SELECT bert_cache('on'), bert_cache_limit(2000)").fetchone()
        got = c.execute("SELECT bert_prefill(text) FROM t").fetchone()[0]
        check("prefill_fits", got is not None and got <= n, repr(got))
    finally:
        c.execute("SELECT bert_cache_limit(100000), bert_cache_lru(10000), bert_cache('on')").fetchone()
        c.close()


def test_same_as_bert_fill():
    rows = texts(300, seed=2, masks=(1, 2, 3))
    c = connect()
    c.execute("SELECT bert_cache('off')").fetchone()
    table(c, rows)
    got = [r[0] for r in c.execute("SELECT filled FROM fill_rows('SELECT id, text FROM t ORDER BY id')")]
    check("same_as_bert_fill_per_row", got == reference(rows),
          "%d differ" % sum(a != b for a, b in zip(got, reference(rows))))
    # k given: the top candidate of each mask is what filled holds
    ok = True
    for text, filled, masks in c.execute("SELECT text, filled, masks FROM fill_rows('SELECT id, text FROM t', 4)"):
        m = json.loads(masks)
        s = text
        for x in m:
            s = s.replace("[MASK]", x[0]["token"], 1)
        ok = ok and s == filled and all(len(x) == 4 for x in m)
    check("masks_top1_is_filled", ok)
    c.close()


def test_duplicates():
    distinct = texts(40, seed=3)
    rnd = random.Random(4)
    rows = [rnd.choice(distinct) for _ in range(400)]
    c = connect()
    c.execute("SELECT bert_cache('clear')").fetchone()
    table(c, rows)
    before = counters(c)
    out = c.execute("SELECT filled FROM fill_rows('SELECT id, text FROM t ORDER BY id')").fetchall()
    d = delta(before, counters(c))
    used = len(set(rows))
    check("duplicates_computed_once", d["rows_seqs"] == used and d["rows"] == 400, "%d seqs for %d distinct"
          % (d["rows_seqs"], used))
    ref = dict(zip(distinct, reference(distinct)))
    check("duplicates_answers", [r[0] for r in out] == [ref[r] for r in rows])
    # Cache off: repeats inside one batch still share one sequence.
    c.execute("SELECT bert_cache('off')").fetchone()
    before = counters(c)
    c.execute("SELECT count(*) FROM fill_rows('SELECT 1, ''我[MASK]'' UNION ALL SELECT 2, ''我[MASK]'' "
              "UNION ALL SELECT 3, ''我 [MASK]''')").fetchone()
    d = delta(before, counters(c))
    check("duplicates_in_batch_cache_off", d["rows_seqs"] == 1 and d["encoder_runs"] == 1, repr(d["rows_seqs"]))
    # Cached answers are reused: a second pass computes nothing.
    c.execute("SELECT bert_cache('on')").fetchone()
    c.execute("SELECT count(*) FROM fill_rows('SELECT id, text FROM t')").fetchone()
    before = counters(c)
    c.execute("SELECT count(*) FROM fill_rows('SELECT id, text FROM t')").fetchone()
    d = delta(before, counters(c))
    check("second_pass_from_cache", d["encoder_runs"] == 0 and d["rows"] == 400, repr(d["encoder_runs"]))
    c.close()


def test_null_and_invalid():
    c = connect()
    c.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, text)")
    too_long = "我" * 200 + "[MASK]"
    c.executemany("INSERT INTO t(id, text) VALUES (?, ?)",
                  [(1, "今天天气真[MASK]啊"), (2, None), (3, b"\xff[MASK]"), (4, too_long),
                   (5, "no mask"), (6, 7), (7, "我[MASK]你"), (8, "[mask]")])
    before = counters(c)
    got = {r[0]: r[1:] for r in c.execute("SELECT key, filled, error FROM fill_rows('SELECT id, text FROM t')")}
    d = delta(before, counters(c))
    check("null_text_null_filled", got[2] == (None, None), repr(got[2]))
    check("invalid_utf8_row_error", got[3] == (None, "fill_rows: invalid UTF-8 at byte 0 of the text (byte value 0xFF)"),
          repr(got[3]))
    limit = json.load(open(os.path.join(TINY, "config.json")))["max_position_embeddings"]
    # the remedy: the last limit - 2 tokens (200 我 and the [MASK], one token each), from character
    # 202 - (limit - 2): the [MASK] ends the text, so the window around it ends there too
    check("too_long_row_error", got[4] == (None, "fill_rows: the text is 203 tokens long ([CLS] and [SEP] included) "
                                                 "but the model takes at most %d (max_position_embeddings): %d too "
                                                 "many; keep substr(text, %d, %d), the %d tokens around its [MASK]"
                                                 % (limit, 203 - limit, 202 - (limit - 2), limit - 3 + 6, limit - 2)),
          repr(got[4]))
    check("no_mask_as_is", got[5] == ("no mask", None) and got[6] == ("7", None), repr((got[5], got[6])))
    check("other_rows_filled", got[1][0] and "[MASK]" not in got[1][0] and got[7][0] and "[MASK]" not in got[7][0]
          and got[1][1] is None, repr((got[1], got[7])))
    check("lowercase_mask_row_error", got[8] == (None, "fill_rows: the text holds '[mask]' at character 1, byte 0, which is "
          "not a mask and would be read as plain text: write [MASK] (ASCII brackets, capital letters, no "
          "spaces) where a token should be filled"), repr(got[8]))
    check("row_errors_counted", d["err_input"] == 2 and d["err_toolong"] == 1 and d["rows"] == 8, repr(d))
    # bert_fill gives the same message for the same text, as a statement error
    e = error_of(c, "SELECT bert_fill(text) FROM t WHERE id = 3")
    check("row_error_is_bert_fills", e == got[3][1].replace("fill_rows", "bert_fill"), repr(e))
    c.close()


def test_empty():
    c = connect()
    c.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, text, filled)")
    before = counters(c)
    n = c.execute("SELECT count(*) FROM fill_rows('SELECT id, text FROM t')").fetchone()[0]
    c.execute(UPDATE)
    d = delta(before, counters(c))
    check("empty_query_no_rows", n == 0 and d["rows"] == 0 and d["encoder_runs"] == 0 and d["rows_batches"] == 0,
          repr(d))
    c.close()


def test_read_only(tmp):
    path = os.path.join(tmp, "ro.db")
    rows = texts(100, seed=5)
    c = connect(path)
    table(c, rows)
    c.close()
    c = connect("file:%s?mode=ro" % path, uri=True)
    c.execute("SELECT bert_cache_limit(100000)").fetchone()
    for mode in ("room", "all"):
        c.execute("SELECT bert_rows_cache(?)", (mode,)).fetchone()
        before = counters(c)
        out = [r[0] for r in c.execute("SELECT filled FROM fill_rows('SELECT id, text FROM t ORDER BY id')")]
        d = delta(before, counters(c))
        check("read_only_%s_fills" % mode, out == reference(rows))
        check("read_only_%s_no_writes" % mode, d["cache_writes"] == 0, repr(d["cache_writes"]))
    has = c.execute("SELECT count(*) FROM sqlite_schema WHERE name = 'bertfill_cache'").fetchone()[0]
    check("read_only_no_table", has == 0)
    e = error_of(c, UPDATE)
    check("read_only_update_refused", e == "attempt to write a readonly database", repr(e))
    c.execute("SELECT bert_rows_cache('room')").fetchone()
    c.close()


def test_rows_cache_modes():
    c = connect()
    c.execute("SELECT bert_cache('clear'), bert_cache_limit(100000)").fetchone()
    for mode, seed in (("none", 6), ("room", 7), ("all", 8)):
        rows = texts(50, seed=seed)
        table(c, rows)
        c.execute("SELECT bert_rows_cache(?)", (mode,)).fetchone()
        have = c.execute("SELECT count(*) FROM bertfill_cache").fetchone()[0] if \
            c.execute("SELECT count(*) FROM sqlite_schema WHERE name = 'bertfill_cache'").fetchone()[0] else 0
        c.execute("SELECT count(*) FROM fill_rows('SELECT id, text FROM t')").fetchone()
        after = c.execute("SELECT count(*) FROM bertfill_cache").fetchone()[0] if \
            c.execute("SELECT count(*) FROM sqlite_schema WHERE name = 'bertfill_cache'").fetchone()[0] else 0
        before = counters(c)
        c.execute("SELECT count(*) FROM fill_rows('SELECT id, text FROM t')").fetchone()
        again = delta(before, counters(c))["rows_seqs"]
        if mode == "none":
            check("rows_cache_none", after == have and again == 50, "table %d -> %d, again %d" % (have, after, again))
        else:
            check("rows_cache_%s" % mode, after == have + 50 and again == 0, "table %d -> %d, again %d"
                  % (have, after, again))
    # 'room' with a full table: nothing written, nothing evicted; 'all' evicts as bert_fill does
    c.execute("SELECT bert_cache_limit(100)").fetchone()
    ids = c.execute("SELECT min(id), max(id), count(*) FROM bertfill_cache").fetchone()
    table(c, texts(30, seed=9))
    c.execute("SELECT bert_rows_cache('room')").fetchone()
    c.execute("SELECT count(*) FROM fill_rows('SELECT id, text FROM t')").fetchone()
    check("rows_cache_room_full_table", c.execute("SELECT min(id), max(id), count(*) FROM bertfill_cache")
          .fetchone() == ids, repr(ids))
    c.execute("SELECT bert_rows_cache('all'), bert_cache_lru(1), bert_cache_lru(10000)").fetchone()
    c.execute("SELECT count(*) FROM fill_rows('SELECT id, text FROM t')").fetchone()
    mn, mx, cnt = c.execute("SELECT min(id), max(id), count(*) FROM bertfill_cache").fetchone()
    check("rows_cache_all_evicts", mx > ids[1] and cnt <= 100 + 100 // 64 + 30, repr((mn, mx, cnt)))
    c.execute("SELECT bert_rows_cache('room'), bert_cache_limit(100000)").fetchone()
    c.close()


CHILD = r"""
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.enable_load_extension(True)
db.load_extension(sys.argv[2])
db.execute("SELECT bert_load(?)", (sys.argv[3],)).fetchone()
db.execute("SELECT bert_cache('off')").fetchone()
CHUNK = sys.argv[4]
while True:
    n = db.execute(CHUNK).rowcount
    db.commit()
    print(n, flush=True)
    if n == 0:
        break
"""


def test_kill_and_resume(tmp):
    """The chunked pattern of docs/columns.md in Python, killed with SIGKILL in the
    middle, then run again to the end: every chunk is all or nothing, and
    the column ends as one UPDATE would leave it."""
    path = os.path.join(tmp, "kill.db")
    rows = texts(1500, seed=10) + [None, "plain"]
    c = connect(path)
    table(c, rows)
    c.execute("INSERT INTO t(text) VALUES (?)", (b"\xff[MASK]",))
    c.close()
    chunk = CHUNK % 100
    p = subprocess.Popen([sys.executable, "-c", CHILD, path, EXT, TINY, chunk], stdout=subprocess.PIPE, text=True)
    seen = [p.stdout.readline() for _ in range(3)]
    os.kill(p.pid, signal.SIGKILL)  # most of a chunk's time is its UPDATE: killed inside one
    p.wait()
    c = connect(path)
    c.execute("SELECT bert_cache('off')").fetchone()
    done = c.execute("SELECT count(*) FROM t WHERE filled IS NOT NULL").fetchone()[0]
    check("kill_integrity", c.execute("PRAGMA integrity_check").fetchone()[0] == "ok")
    check("kill_whole_chunks", seen == ["100\n"] * 3 and done % 100 == 0 and 300 <= done < 1500,
          "%r, %d filled" % (seen, done))
    chunks = 0
    while True:
        n = c.execute(chunk).rowcount
        chunks += 1
        if n == 0:
            break
    filled = [r[0] for r in c.execute("SELECT filled FROM t ORDER BY id")]
    errors = c.execute("SELECT count(*) FROM t WHERE fill_error IS NOT NULL").fetchone()[0]
    check("resume_to_the_end", filled[:1500] == reference(rows[:1500]) and filled[1500:] == [None, "plain", None]
          and errors == 1, "%d errors" % errors)
    check("resume_chunks", chunks == (1500 - done) // 100 + 2, "%d chunks after %d" % (chunks, done))
    c.close()


def documented_shell_loop():
    """The shell loop of docs/columns.md as it is written there, for a test:
    my.db -> "$DB", '.load ./bertfill' -> ".load $EXT", chunks of 100 rows."""
    doc = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "columns.md"),
               encoding="utf-8").read()
    for block in doc.split("```sh\n")[1:]:
        block = block.split("```")[0]
        if "CHUNK=" in block and "while n=$(sqlite3" in block:
            assert "my.db" in block and "'.load ./bertfill'" in block and "LIMIT 1000" in block, block
            return (block.replace("my.db", '"$DB"').replace("'.load ./bertfill'", '".load $EXT"')
                    .replace("LIMIT 1000", "LIMIT 100"))
    raise AssertionError("docs/columns.md has no shell loop (CHUNK=... while n=$(sqlite3 ...))")


def test_shell_chunks(tmp):
    """The loop of docs/columns.md for the sqlite3 shell, as the page writes
    it: alone, then two copies at once on one database, which must take
    turns (no "database is locked") and fill each row once."""
    if not shutil.which("sqlite3"):
        skip("shell_chunks", "no sqlite3 shell")
        return
    script = documented_shell_loop()
    path = os.path.join(tmp, "shell.db")
    rows = texts(250, seed=11)
    c = connect(path)
    table(c, rows)
    c.close()
    env = dict(os.environ, DB=path, EXT=EXT, BERTFILL_MODEL=TINY, BERTFILL_PROGRESS="0")
    r = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=300)
    check("shell_chunks_run", r.returncode == 0 and r.stdout.split() == ["100", "100", "50"] and not r.stderr,
          repr((r.returncode, r.stdout, r.stderr)))
    c = connect(path)
    check("shell_chunks_filled", [x[0] for x in c.execute("SELECT filled FROM t ORDER BY id")] == reference(rows))
    c.close()

    path = os.path.join(tmp, "shell2.db")
    rows = texts(600, seed=12)
    c = connect(path)
    table(c, rows)
    c.close()
    env["DB"] = path
    loops = [subprocess.Popen(["bash", "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    out = [p.communicate(timeout=300) for p in loops]
    done = [int(x) for o, _ in out for x in o.split()]
    errors = [e.strip() for _, e in out if e.strip()]
    check("shell_chunks_two_at_once", not errors and sum(done) == 600 and all(p.returncode == 0 for p in loops),
          "errors %r, chunks %r" % (errors, [o.split() for o, _ in out]))
    c = connect(path)
    check("shell_chunks_two_at_once_filled",
          [x[0] for x in c.execute("SELECT filled FROM t ORDER BY id")] == reference(rows)
          and c.execute("PRAGMA integrity_check").fetchone()[0] == "ok")
    c.close()


def test_progress():
    code = ("import sqlite3\n"
            "c = sqlite3.connect(':memory:'); c.enable_load_extension(True); c.load_extension(%r)\n"
            "c.execute('SELECT bert_load(?)', (%r,)).fetchone()\n"
            "c.execute('CREATE TABLE t(x)')\n"
            "c.executemany('INSERT INTO t VALUES (?)', [(t,) for t in %r])\n"
            "print(c.execute(\"SELECT count(filled) FROM fill_rows('SELECT rowid, x FROM t')\").fetchone()[0])\n"
            % (EXT, TINY, texts(100, seed=12) + texts(10, seed=12)))
    for flag in ("1", "0"):
        r = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, BERTFILL_PROGRESS=flag),
                           capture_output=True, text=True, timeout=300)
        if flag == "1":
            check("progress_done_line", r.stdout.strip() == "110" and
                  "fill_rows: done: 110 rows, 100 computed, 10 cached or repeated, 0 errors" in r.stderr,
                  r.stdout + r.stderr)
        else:
            check("progress_quiet", r.stdout.strip() == "110" and "fill_rows" not in r.stderr, r.stderr)


def test_trusted_schema(tmp):
    """bert_fill and fill_candidates in triggers and views: refused on a
    normal load; on a load through sqlite3_bertfill_trusted_init, allowed
    while PRAGMA trusted_schema is on and refused when it is off.  bert_load
    and fill_rows stay DIRECTONLY either way."""
    path = os.path.join(tmp, "trusted.db")
    c = sqlite3.connect(path, isolation_level=None)
    c.executescript("""
        CREATE TABLE t(text, filled);
        CREATE TRIGGER t_fill AFTER INSERT ON t BEGIN
          UPDATE t SET filled = bert_fill(new.text) WHERE rowid = new.rowid; END;
        CREATE VIEW v AS SELECT bert_fill('我[MASK]你') AS f;
        CREATE VIEW vc AS SELECT token FROM fill_candidates('我[MASK]你', 1);
        CREATE VIEW vl AS SELECT bert_load('%s') AS d;
        CREATE VIEW vr AS SELECT filled FROM fill_rows('SELECT 1, ''我[MASK]''');
    """ % TINY)
    c.close()
    unsafe_fill, unsafe_cand = "unsafe use of bert_fill()", 'unsafe use of virtual table "fill_candidates"'
    for trusted in (False, True):
        for ts in (0, 1):
            name = "%s_ts%d" % ("trusted" if trusted else "normal", ts)
            c = connect(path, trusted=trusted)
            c.execute("PRAGMA trusted_schema = %d" % ts)
            allowed = trusted and ts == 1
            e = error_of(c, "INSERT INTO t(text) VALUES ('今天天气真[MASK]啊')")
            if allowed:
                f = c.execute("SELECT filled FROM t ORDER BY rowid DESC LIMIT 1").fetchone()[0]
                check("trigger_" + name, e is None and f and "[MASK]" not in f, repr((e, f)))
            else:
                check("trigger_" + name, e == unsafe_fill, repr(e))
            e = error_of(c, "SELECT * FROM v")
            check("view_" + name, (e is None) if allowed else e == unsafe_fill, repr(e))
            e = error_of(c, "SELECT * FROM vc")
            check("view_candidates_" + name, (e is None) if allowed else e == unsafe_cand, repr(e))
            e = error_of(c, "SELECT * FROM vl")
            check("view_bert_load_" + name, e == "unsafe use of bert_load()", repr(e))
            e = error_of(c, "SELECT * FROM vr")
            check("view_fill_rows_" + name, e == 'unsafe use of virtual table "fill_rows"', repr(e))
            check("direct_" + name, "[MASK]" not in c.execute("SELECT bert_fill('我[MASK]')").fetchone()[0])
            c.close()
    # From SQL the trusted entry point works only as the first load of a connection.
    c = sqlite3.connect(":memory:")
    c.enable_load_extension(True)
    c.load_extension(EXT)
    e = error_of(c, "SELECT load_extension(?, 'sqlite3_bertfill_trusted_init')", (EXT,))
    check("trusted_after_load_refused", e == "error during initialization: bertfill: cannot replace bert_fill() "
          "while a statement runs; load bertfill this way as the first load on a new connection, or outside "
          "SQL (.load in the shell)", repr(e))
    check("trusted_after_load_still_works", c.execute("SELECT bert_fill('我[MASK]')").fetchone()[0] is not None)
    c.close()
    if shutil.which("sqlite3"):  # the shell's .load (C API, outside any statement) may switch
        r = subprocess.run(["sqlite3", path, "-cmd", ".load %s" % EXT,
                            "-cmd", ".load %s sqlite3_bertfill_trusted_init" % EXT, "SELECT f FROM v"],
                           env=dict(os.environ, BERTFILL_MODEL=TINY), capture_output=True, text=True, timeout=120)
        check("trusted_shell_reload", r.returncode == 0 and r.stdout.strip() and "[MASK]" not in r.stdout,
              repr((r.stdout, r.stderr)))


def test_joint():
    """fill_rows(sql, k, 'joint'): each text as bert_fill(text, 'joint') gives it."""
    rows = texts(60, 31, masks=(1, 2, 3))
    rows += [rows[0], rows[5], None, "没有空", b"\xff".decode("latin-1")]
    c = connect()
    c.execute("SELECT bert_cache('off')").fetchone()
    want = [None if r is None else c.execute("SELECT bert_fill(?, 'joint')", (r,)).fetchone()[0]
            if r != "\xff" else None for r in rows]
    table(c, rows)
    c.execute("UPDATE t SET text = CAST(x'ff' AS TEXT) WHERE text = ?", ("\xff",))
    got = c.execute("SELECT key, filled, masks, error, k, mode FROM fill_rows("
                    "'SELECT id, text FROM t ORDER BY id', NULL, 'joint')").fetchall()
    check("fill_rows joint: one row per query row", len(got) == len(rows), str(len(got)))
    same = all(g[1] == w for g, w in zip(got[:-1], want[:-1]))
    check("fill_rows joint: filled equals bert_fill(text, 'joint') per row (repeats, NULL, no mask)",
          same, str([(g[1], w) for g, w in zip(got, want) if g[1] != w][:3]))
    check("fill_rows joint: an invalid text gets its error in the row",
          got[-1][1] is None and got[-1][3] is not None and "invalid UTF-8" in got[-1][3], str(got[-1]))
    check("fill_rows joint: masks is NULL, k the beam (5), mode 'joint'",
          all(g[2] is None and g[4] == 5 and g[5] == "joint" for g in got), str(got[0]))
    multi = [r for r in rows[:60] if r.count("[MASK]") >= 2]
    per_mask = [c.execute("SELECT bert_fill(?)", (r,)).fetchone()[0] for r in multi]
    jointly = [c.execute("SELECT bert_fill(?, 'joint')", (r,)).fetchone()[0] for r in multi]
    check("fill_rows joint: differs from per-mask filling somewhere (so the check can fail)",
          any(a != b for a, b in zip(per_mask, jointly)), "%d texts" % len(multi))
    r2 = c.execute("SELECT filled FROM fill_rows('SELECT id, text FROM t WHERE id <= 10 "
                   "ORDER BY id', 2, 'joint')").fetchall()
    w2 = [c.execute("SELECT sequence FROM fill_sequences(?, 2) WHERE rank = 1", (r,)).fetchone()[0]
          for r in rows[:10]]
    check("fill_rows joint, k = 2: rank 1 of fill_sequences(text, 2)", [x[0] for x in r2] == w2,
          "%s vs %s" % (r2[:2], w2[:2]))
    e = error_of(c, "SELECT * FROM fill_rows('SELECT id, text FROM t', 3, 'whole')")
    check("fill_rows: a third argument other than 'joint' is an error",
          e == "fill_rows: the third argument must be 'joint' (got 'whole'); fill_rows(sql [, k]) "
               "fills each [MASK] on its own", e)
    e = error_of(c, "SELECT * FROM fill_rows('SELECT id, text FROM t', 101, 'joint')")
    check("fill_rows joint: k above 100 is an error", e is not None and "from 1 to 100" in e, e)
    plain = c.execute("SELECT filled, mode FROM fill_rows('SELECT id, text FROM t ORDER BY id', "
                      "NULL, NULL) LIMIT 3").fetchall()
    check("fill_rows(sql, NULL, NULL): per mask, as without the argument",
          [p[0] for p in plain] == reference(rows[:3]) and all(p[1] is None for p in plain), str(plain))
    c.close()


def main():
    tmp = tempfile.mkdtemp(prefix="t_rows.")
    os.environ["BERTFILL_PROGRESS"] = "0"
    try:
        test_surface()
        test_query_errors()
        test_lowered_limits()
        test_same_as_bert_fill()
        test_token_limit()
        test_duplicates()
        test_null_and_invalid()
        test_empty()
        test_read_only(tmp)
        test_rows_cache_modes()
        test_kill_and_resume(tmp)
        test_shell_chunks(tmp)
        test_progress()
        test_trusted_schema(tmp)
        test_joint()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return exit_code()


if __name__ == "__main__":
    sys.exit(main())
