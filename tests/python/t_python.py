#!/usr/bin/python3
"""t_python.py — bertfill through Python's standard sqlite3 module.

Run by tests/run.sh with Debian's /usr/bin/python3 (its sqlite3 module can load
extensions).  Environment: BUILD (test models in $BUILD/models), BERTFILL_EXT
(the extension without .so, default ./bertfill), BF_PRELOAD (put in
LD_PRELOAD of the child processes this test starts, for ASan runs).

Exact tokens and probabilities are checked against tests/golden/forward_*.json,
made by model/reference.py (an independent float64 implementation in numpy).
The error of a text too long for the model is checked on random long texts:
the part it says to keep holds every mask, fits and fills (too_long_remedy).
Prints one line per check: ok NAME / FAIL NAME: why / skip NAME: why.
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

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.chdir(ROOT)
from bftest import EXT, MODELS, TINY, check, exit_code, fail, skip










def connect(path=":memory:", model=TINY, uri=False, **kw):
    conn = sqlite3.connect(path, uri=uri, **kw)
    conn.enable_load_extension(True)
    conn.load_extension(EXT)
    conn.enable_load_extension(False)
    if model:
        conn.execute("select bert_load(?)", (model,)).fetchone()
    return conn


def one(conn, sql, *args):
    return conn.execute(sql, args).fetchone()[0]


def counters(conn):
    return json.loads(one(conn, "select bert_stats()"))["counters"]


def expect_error(name, conn, sql, args, substring):
    try:
        r = conn.execute(sql, args).fetchall()
    except sqlite3.OperationalError as e:
        check(name, substring in str(e), "message %r lacks %r" % (str(e), substring))
        return
    except Exception as e:  # noqa: BLE001 - report any other exception type
        fail(name, "expected sqlite3.OperationalError, got %s: %s" % (type(e).__name__, e))
        return
    fail(name, "no error; got %r" % (r[:3],))


_fresh = [0]
_cjk = []


def fresh():
    """A text no earlier check used and that the tiny model sees as distinct
    tokens: Chinese characters from its vocabulary (others would be [UNK])."""
    if not _cjk:
        vocab = open(os.path.join(TINY, "vocab.txt"), encoding="utf-8").read().split("\n")
        _cjk.extend(t for t in vocab if len(t) == 1 and "\u4e00" <= t <= "\u9fff")
    _fresh[0] += 1
    i, word = _fresh[0], ""
    while i:
        word += _cjk[i % len(_cjk)]
        i //= len(_cjk)
    return "这是" + word + "[MASK]的"


def child_env(**extra):
    env = dict(os.environ)
    env.pop("BERTFILL_MODEL", None)
    if os.environ.get("BF_PRELOAD"):
        env["LD_PRELOAD"] = os.environ["BF_PRELOAD"]
    for k, v in extra.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def run_child(code, **env):
    return subprocess.run([sys.executable, "-c", code], env=child_env(**env),
                          capture_output=True, text=True, timeout=300)


# ---------------------------------------------------------------------------
def test_golden():
    """Top-k ids and probabilities against the float64 reference."""
    for name in ("tiny", "tiny-f16", "tiny-legacy", "small"):
        gpath = os.path.join("tests", "golden", "forward_%s.json" % name)
        mdir = os.path.join(MODELS, name)
        if not os.path.exists(gpath) or not os.path.isdir(mdir):
            skip("golden_" + name, "missing %s or %s" % (gpath, mdir))
            continue
        g = json.load(open(gpath, encoding="utf-8"))
        vocab = open(os.path.join(mdir, "vocab.txt"), encoding="utf-8").read().split("\n")
        conn = connect(model=mdir)
        conn.execute("select bert_cache('off')")
        used = bad_tok = 0
        errors = []
        for si, seq in enumerate(g["sequences"]):
            ids = seq["ids"]
            # The text: vocabulary entries separated by spaces (word pieces
            # glued to the word before them); used only when the tokenizer
            # gives back exactly these ids.
            words = []
            for t in ids[1:-1]:
                tok = vocab[t]
                if tok.startswith("##") and words:
                    words[-1] += tok[2:]
                else:
                    words.append(tok)
            text = " ".join(words)
            toks = json.loads(one(conn, "select bert_tokenize(?)", text))
            if toks != [vocab[t] for t in ids]:
                bad_tok += 1
                continue
            used += 1
            masks = seq["masks"]
            rows = conn.execute("select mask, rank, token_id, score, token from fill_candidates(?, ?)",
                                (text, g["k"])).fetchall()
            if len(rows) != len(masks) * g["k"]:
                errors.append("seq %d: %d rows for %d masks" % (si, len(rows), len(masks)))
                continue
            for mi, m in enumerate(masks):
                got = [r for r in rows if r[0] == mi]
                want = m["top"]
                for rank, (w, r) in enumerate(zip(want, got)):
                    if abs(w[1] - r[3]) > 1e-4:
                        errors.append("seq %d mask %d rank %d: p %.6f vs reference %.6f" % (si, mi, rank + 1, r[3], w[1]))
                    if w[0] != r[2]:
                        # a swap of two near-equal probabilities is not an error
                        nxt = want[rank + 1][1] if rank + 1 < len(want) else m.get("next_prob", 0)
                        prv = want[rank - 1][1] if rank > 0 else 2
                        if min(abs(w[1] - nxt), abs(w[1] - prv)) > 1e-4:
                            errors.append("seq %d mask %d rank %d: id %d vs reference %d" % (si, mi, rank + 1, r[2], w[0]))
            # bert_fill: each [MASK] replaced by the reference's top-1
            expect = text
            for m in masks:
                top = vocab[m["top"][0][0]]
                expect = expect.replace("[MASK]", top[2:] if top.startswith("##") else top, 1)
            close = all(abs(m["top"][0][1] - m["top"][1][1]) > 1e-4 for m in masks)
            if masks and close:
                got = one(conn, "select bert_fill(?)", text)
                if got != expect:
                    errors.append("seq %d: bert_fill %r vs reference %r" % (si, got, expect))
        if used < 5:
            fail("golden_" + name, "only %d sequences tokenized as the reference (%d did not)" % (used, bad_tok))
        else:
            check("golden_" + name, not errors, "; ".join(errors[:5]))
        conn.close()


def test_functions():
    conn = connect()
    check("fill_null", one(conn, "select bert_fill(NULL)") is None)
    check("fill_no_mask", one(conn, "select bert_fill('今天天气很好')") == "今天天气很好")
    f = one(conn, "select bert_fill('今天天气真[MASK]啊')")
    check("fill_mask", isinstance(f, str) and f.startswith("今天天气真") and f.endswith("啊") and "[MASK]" not in f, repr(f))
    check("fill_param", one(conn, "select bert_fill(?)", "今天天气真[MASK]啊") == f)
    check("fill_blob_param", one(conn, "select bert_fill(?)", "今天天气真[MASK]啊".encode()) == f)
    check("fill_int", one(conn, "select bert_fill(?)", 42) == "42")
    toks = json.loads(one(conn, "select bert_tokenize('今天天气真[MASK]啊')"))
    check("tokenize", toks == ["[CLS]", "今", "天", "天", "气", "真", "[MASK]", "啊", "[SEP]"], repr(toks))
    rows = conn.execute("select * from fill_candidates('今天天气真[MASK]啊', 3)").fetchall()
    check("candidates_rows", len(rows) == 3 and [r[1] for r in rows] == [1, 2, 3], repr(rows))
    check("candidates_columns", [d[0] for d in conn.execute("select * from fill_candidates('[MASK]')").description]
          == ["mask", "rank", "token", "token_id", "score", "sequence"])
    check("candidates_rank1_is_fill", rows[0][5] == f)
    conn.execute("create table sentences(id integer primary key, text text)")
    conn.executemany("insert into sentences(text) values (?)",
                     [("我[MASK]你",), (None,), ("[MASK]好[MASK]",), ("没有",)])
    rows = conn.execute("select s.id, c.mask, c.rank, c.token from sentences s, fill_candidates(s.text, 2) c "
                        "order by s.id, c.mask, c.rank").fetchall()
    check("candidates_join", [(r[0], r[1], r[2]) for r in rows] ==
          [(1, 0, 1), (1, 0, 2), (3, 0, 1), (3, 0, 2), (3, 1, 1), (3, 1, 2)], repr(rows))
    rows2 = conn.execute("select s.id, c.mask, c.rank, c.token from fill_candidates(s.text, 2) c join sentences s "
                         "order by s.id, c.mask, c.rank").fetchall()
    check("candidates_join_reversed", rows2 == rows)
    rows3 = conn.execute("select s.id, c.token from sentences s, fill_candidates(s.text, 1) c where s.id = ?", (3,)).fetchall()
    check("candidates_join_param", len(rows3) == 2)
    upd = conn.execute("update sentences set text = bert_fill(text) where id = 1").rowcount
    check("update_rowcount", upd == 1, "rowcount %r" % upd)
    dbg = json.loads(one(conn, "select bert_debug()"))
    check("debug", dbg["model"]["dir"] == os.path.realpath(TINY) and dbg["blas_core"] != "" and dbg["threads"] >= 1, repr(dbg))
    conn.close()


def test_errors():
    conn = connect()
    expect_error("err_utf8", conn, "select bert_fill(?)", (b"ab\xffcd",), "bert_fill: invalid UTF-8 at byte 2")
    expect_error("err_utf8_truncated", conn, "select bert_fill(?)", ("我".encode() + b"\xe6\x88",), "invalid UTF-8 at byte 3")
    expect_error("err_too_long", conn, "select bert_fill(?)", ("我" * 100 + "[MASK]",),
                 "the text is 103 tokens long ([CLS] and [SEP] included) but the model takes at most 64")
    expect_error("err_missing_text", conn, "select * from fill_candidates", (), "fill_candidates: missing text argument")
    expect_error("err_k_zero", conn, "select * from fill_candidates('[MASK]', ?)", (0,), "k must be an integer from 1 to 1000 (got 0)")
    expect_error("err_k_big", conn, "select * from fill_candidates('[MASK]', ?)", (5000,), "k must be an integer from 1 to 1000 (got 5000)")
    expect_error("err_k_negative", conn, "select * from fill_candidates('[MASK]', ?)", (-3,), "(got -3)")
    expect_error("err_load_missing", conn, "select bert_load(?)", ("/no/such/dir",), "cannot open model directory '/no/such/dir'")
    expect_error("err_cache_mode", conn, "select bert_cache(?)", ("maybe",), "bert_cache: the argument must be")
    # Messages are valid UTF-8 whatever the input: an OperationalError, never
    # UnicodeDecodeError; invalid bytes and control characters as \xNN, long
    # input cut to its start and end.
    expect_error("err_k_invalid_utf8", conn, "select * from fill_candidates('好[MASK]', cast(? as text))",
                 (b"\xed\xa0\x80",), "k must be an integer from 1 to 1000 (got \\xED\\xA0\\x80)")
    expect_error("err_k_blob", conn, "select * from fill_candidates('好[MASK]', ?)",
                 (b"\xed\xa0\x80",), "k must be an integer from 1 to 1000 (got a blob)")
    expect_error("err_k_control_chars", conn, "select * from fill_candidates('好[MASK]', ?)",
                 ("a\nb\x00c",), "(got a\\x0Ab\\x00c)")
    expect_error("err_k_long_cut", conn, "select * from fill_candidates('好[MASK]', ?)",
                 ("好" * 400 + "尾",), "(got " + "好" * 26 + "..." + "好" * 25 + "尾)")
    for name, sql, want in [
            ("err_joint_invalid_utf8", "select bert_fill('好[MASK]', cast(? as text))", "(got '\\xFFA')"),
            ("err_rows_k_invalid_utf8", "select * from fill_rows('select 1, ''好[MASK]'' ', cast(? as text))",
             "fill_rows: k must be an integer from 1 to 1000 (got \\xFFA)"),
            ("err_sequences_k_invalid_utf8", "select * from fill_sequences('好[MASK]', cast(? as text))",
             "fill_sequences: k must be an integer from 1 to 100 (got \\xFFA)"),
            ("err_setting_invalid_utf8", "select bert_cache(cast(? as text))", "(got \\xFFA)")]:
        expect_error(name, conn, sql, (b"\xffA",), want)
    expect_error("err_score_answer_quoted", conn, "select bert_score('好[MASK][MASK]', ?)", ("好\n",),
                 "bert_score: the answer '好\\x0A' is 1 token but the text has 2 [MASK]s")
    expect_error("err_load_invalid_utf8", conn, "select bert_load(?)", (b"/no/such/\xff\xfe",),
                 "cannot open model directory '/no/such/\\xFF\\xFE'")
    check("usable_after_errors", "[MASK]" not in one(conn, "select bert_fill('我[MASK]你')"))
    conn.close()
    # A broken model directory: the engine's message names the file.
    with tempfile.TemporaryDirectory() as d:
        for fn in ("config.json", "vocab.txt", "tokenizer_config.json"):
            shutil.copy(os.path.join(TINY, fn), d)
        with open(os.path.join(d, "model.safetensors"), "wb") as f:
            f.write(b"\x10\x00\x00\x00\x00\x00\x00\x00{}")
        conn = connect(model=None)
        expect_error("err_broken_model", conn, "select bert_load(?)", (d,), "model.safetensors")
        # the same in a directory whose name is not UTF-8: the engine's
        # message names the file, escaped
        bad = os.path.join(os.fsencode(d), b"bad\xff")
        os.mkdir(bad)
        for fn in os.listdir(d):
            if fn != os.fsdecode(b"bad\xff"):
                shutil.copy(os.path.join(d, fn), os.fsdecode(bad))
        expect_error("err_broken_model_invalid_utf8_path", conn, "select bert_load(?)", (bad,),
                     "bad\\xFF/model.safetensors")
        conn.close()


def test_too_long_remedy():
    """The error of a text too long for the model says which part to keep:
    substr(text, FROM, LEN), the most tokens that fit around its masks.  On
    random long texts (Han characters, ASCII words cut into pieces, spaces,
    1 to 3 masks): the part it names holds every mask, fits the model, holds
    as many tokens as it says, and fills; masks further apart than the model
    takes are told to be filled apart, and are."""
    import random
    import re
    conn = connect()
    limit = json.load(open(os.path.join(TINY, "config.json")))["max_position_embeddings"]
    vocab = open(os.path.join(TINY, "vocab.txt"), encoding="utf-8").read().split("\n")
    han = [t for t in vocab if len(t) == 1 and "\u4e00" <= t <= "\u9fff"]
    words = ["java", "javascript", "sqlite", "bertfill", "abcdefghij"]
    rnd = random.Random(40)
    bad = []
    kept = apart = 0
    for i in range(200):
        parts = [rnd.choice(han) if rnd.random() < 0.8 else " " + rnd.choice(words) + " "
                 for _ in range(rnd.randint(limit, 3 * limit))]
        for _ in range(rnd.randint(1, 3)):
            parts.insert(rnd.randint(0, len(parts)), "[MASK]")
        text = "".join(parts)
        n = len(json.loads(one(conn, "select bert_tokenize(?)", text)))
        try:
            conn.execute("select bert_fill(?)", (text,)).fetchone()
            msg = None
        except sqlite3.OperationalError as e:
            msg = str(e)
        if n <= limit:
            if msg is not None:
                bad.append((text, "fits but: " + msg))
            continue
        head = ("bert_fill: the text is %d tokens long ([CLS] and [SEP] included) but the model takes at "
                "most %d (max_position_embeddings): %d too many; " % (n, limit, n - limit))
        m = re.fullmatch(re.escape(head) + r"keep substr\(text, (\d+), (\d+)\), the (\d+) tokens around "
                         r"its \[MASK\]", msg or "")
        far = re.fullmatch(re.escape(head) + r"its \[MASK\]s span (\d+) tokens, more than (\d+): fill them "
                           r"in separate texts", msg or "")
        if far:
            toks = json.loads(one(conn, "select bert_tokenize(?)", text))
            at = [k for k, t in enumerate(toks) if t == "[MASK]"]
            if int(far.group(1)) != at[-1] - at[0] + 1 or int(far.group(2)) != limit - 2 or at[-1] - at[0] < limit - 2:
                bad.append((text, msg))
            apart += 1
            continue
        if not m:
            bad.append((text, msg))
            continue
        part = one(conn, "select substr(?, ?, ?)", text, int(m.group(1)), int(m.group(2)))
        toks = json.loads(one(conn, "select bert_tokenize(?)", part))
        filled = one(conn, "select bert_fill(?)", part)
        if (part.count("[MASK]") != text.count("[MASK]") or len(toks) - 2 != int(m.group(3))
                or len(toks) > limit or len(toks) < limit - 8 or "[MASK]" in filled):
            bad.append((text, msg, len(toks)))
        kept += 1
    check("too_long_remedy", not bad and kept > 100 and apart > 0,
          "%d kept, %d apart; %r" % (kept, apart, bad[:2]))
    conn.close()


def test_no_model():
    """BERTFILL_MODEL pointing nowhere, and no model at all."""
    code = ("import sqlite3,sys\n"
            "c=sqlite3.connect(':memory:'); c.enable_load_extension(True); c.load_extension(sys.argv[1] if len(sys.argv)>1 else %r)\n"
            "for q in [\"select bert_fill('[MASK]')\", \"select * from fill_candidates('[MASK]')\", \"select bert_tokenize('a')\"]:\n"
            "  try: print('RESULT', c.execute(q).fetchall())\n"
            "  except sqlite3.OperationalError as e: print('ERROR', e)\n")
    r = run_child(code % EXT, BERTFILL_MODEL="/no/such/model")
    lines = [l for l in r.stdout.splitlines() if l.startswith("ERROR")]
    check("env_model_missing", len(lines) == 3 and all("BERTFILL_MODEL" in l and "/no/such/model" in l for l in lines),
          r.stdout + r.stderr)
    r = run_child(code % EXT, BERTFILL_MODEL=TINY)
    check("env_model", r.stdout.count("RESULT") == 3, r.stdout + r.stderr)
    # No environment variable and no default model next to the extension.
    with tempfile.TemporaryDirectory() as d:
        so = EXT + ".so" if os.path.exists(EXT + ".so") else EXT
        shutil.copy(so, os.path.join(d, "bertfill.so"))
        r = run_child(code % os.path.join(d, "bertfill"), BERTFILL_MODEL=None)
        lines = [l for l in r.stdout.splitlines() if l.startswith("ERROR")]
        want = ["no model", "bert_load(", "BERTFILL_MODEL", "config.json", "vocab.txt", "model.safetensors",
                "huggingface.co/google-bert/bert-base-chinese", d]
        check("no_model_message", len(lines) == 3 and all(all(w in l for w in want) for l in lines),
              r.stdout + r.stderr)


def test_cache():
    with tempfile.TemporaryDirectory() as d:
        db = os.path.join(d, "c.db")
        conn = connect(db)
        conn.execute("select bert_cache('clear')")
        text = "他说话总是模棱两可，让人捉摸不[MASK]。"
        c0 = counters(conn)
        a = one(conn, "select bert_fill(?)", text)
        c1 = counters(conn)
        check("first_call_runs_encoder", c1["encoder_runs"] == c0["encoder_runs"] + 1 and c1["miss"] == c0["miss"] + 1)
        b = one(conn, "select bert_fill(?)", text)
        c2 = counters(conn)
        check("second_call_no_encoder", a == b and c2["encoder_runs"] == c1["encoder_runs"] and c2["hit_lru"] == c1["hit_lru"] + 1,
              "%r %r" % (c1, c2))
        t0 = time.perf_counter()
        n = 2000
        conn.execute("with recursive i(x) as (select 1 union all select x + 1 from i where x < ?) "
                     "select count(bert_fill(?)) from i", (n, text)).fetchone()
        per_call = (time.perf_counter() - t0) / n
        print("# cache hit: %.1f us per bert_fill call (informational)" % (per_call * 1e6))
        spaced = one(conn, "select bert_fill(?)", text.replace("说话", "说 话"))
        c3 = counters(conn)
        check("same_tokens_share_entry", spaced == a.replace("说话", "说 话") and c3["encoder_runs"] == c2["encoder_runs"], repr(spaced))
        one(conn, "select bert_fill('ab[MASK]')")
        c4 = counters(conn)
        one(conn, "select bert_fill('a b[MASK]')")
        c5 = counters(conn)
        check("different_tokens_own_entry", c5["encoder_runs"] == c4["encoder_runs"] + 1)
        check("table_rows", one(conn, "select count(*) from bertfill_cache") == 3)
        conn.close()

        # A new connection (new process state for this db, same process LRU):
        # clear the LRU, then the table answers.
        conn = connect(db)
        conn.execute("select bert_cache_lru(1)")
        one(conn, "select bert_fill(?)", fresh())          # evicts the rest of the LRU
        c6 = counters(conn)
        again = one(conn, "select bert_fill(?)", text)
        c7 = counters(conn)
        check("table_hit_after_reconnect", again == a and c7["hit_table"] == c6["hit_table"] + 1 and c7["encoder_runs"] == c6["encoder_runs"])
        conn.execute("select bert_cache_lru(10000)")
        conn.close()

        # Read-only database: answers, no write, counted as skipped.
        ro = connect("file:%s?mode=ro" % db, uri=True)
        cs = counters(ro)
        r = one(ro, "select bert_fill(?)", fresh())
        ce = counters(ro)
        check("readonly_answers", isinstance(r, str) and "[MASK]" not in r)
        check("readonly_write_skipped", ce["cache_skipped"] == cs["cache_skipped"] + 1 and ce["cache_writes"] == cs["cache_writes"])
        rows = ro.execute("select count(*) from fill_candidates(?, 3)", (fresh(),)).fetchone()[0]
        check("readonly_candidates", rows == 3)
        ro.close()

        # Read-only file on disk (chmod) opened normally.
        db2 = os.path.join(d, "ro.db")
        shutil.copy(db, db2)
        os.chmod(db2, 0o444)
        if os.geteuid() == 0:
            skip("readonly_file", "running as root: file permissions do not apply")
        else:
            conn = connect(db2)
            check("readonly_file", "[MASK]" not in one(conn, "select bert_fill(?)", fresh()))
            conn.close()

        # query_only connection
        conn = connect(db)
        conn.execute("pragma query_only = 1")
        cs = counters(conn)
        r = one(conn, "select bert_fill(?)", fresh())
        ce = counters(conn)
        check("query_only_answers", "[MASK]" not in r and ce["cache_skipped"] == cs["cache_skipped"] + 1)
        conn.close()

        for mode in ("delete", "wal"):
            # Another connection holds a write transaction: the cache write is
            # skipped quickly (not after Python's default 5 s busy timeout).
            writer = sqlite3.connect(db, isolation_level=None)
            writer.execute("pragma journal_mode = %s" % mode)
            writer.execute("create table if not exists w(x)")
            writer.execute("begin immediate")
            writer.execute("insert into w values (1)")
            reader = connect(db, timeout=5.0)
            cs = counters(reader)
            t0 = time.perf_counter()
            r = one(reader, "select bert_fill(?)", fresh())
            secs = time.perf_counter() - t0
            ce = counters(reader)
            check("locked_%s_answers" % mode, isinstance(r, str) and "[MASK]" not in r)
            check("locked_%s_write_skipped" % mode, ce["cache_skipped"] == cs["cache_skipped"] + 1, "%r" % ce)
            check("locked_%s_no_long_wait" % mode, secs < 3.0, "took %.2f s" % secs)
            # The reader's own busy timeout is left as it was.
            check("locked_%s_busy_timeout_kept" % mode, one(reader, "pragma busy_timeout") == 5000)
            writer.execute("commit")
            cs = counters(reader)
            one(reader, "select bert_fill(?)", fresh())
            ce = counters(reader)
            check("unlocked_%s_writes" % mode, ce["cache_writes"] == cs["cache_writes"] + 1)
            # A user transaction in the reader: the write joins it.
            reader.isolation_level = None
            reader.execute("begin")
            cs = counters(reader)
            one(reader, "select bert_fill(?)", fresh())
            check("in_transaction_%s_writes" % mode, counters(reader)["cache_writes"] == cs["cache_writes"] + 1)
            reader.execute("rollback")
            reader.close()
            writer.close()
        # bert_prefill groups its writes per batch in one transaction; when
        # another connection holds the write lock the group is skipped and
        # the statement still succeeds.
        writer = sqlite3.connect(db, isolation_level=None)
        texts = [fresh() for _ in range(40)]
        conn = connect(db, timeout=5.0)
        conn.execute("create table pf(t text)")
        conn.executemany("insert into pf values (?)", [(t,) for t in texts])
        conn.commit()
        writer.execute("begin immediate")
        writer.execute("insert into w values (2)")
        cs = counters(conn)
        n = one(conn, "select bert_prefill(t) from pf")
        ce = counters(conn)
        check("prefill_locked_answers", n == 40, repr(n))
        check("prefill_locked_skipped", ce["cache_skipped"] - cs["cache_skipped"] == 40 and ce["cache_writes"] == cs["cache_writes"],
              "%r" % ((ce["cache_skipped"] - cs["cache_skipped"], ce["cache_writes"] - cs["cache_writes"]),))
        check("prefill_locked_no_transaction_left", conn.in_transaction is False and one(conn, "select 1") == 1)
        writer.execute("commit")
        conn.execute("select bert_cache_lru(1)")      # forget the LRU copies but one,
        conn.execute("select bert_cache_lru(10000)")  # which prefill copies to the table
        cs = counters(conn)
        n = one(conn, "select bert_prefill(t) from pf")
        ce = counters(conn)
        check("prefill_unlocked_writes", n == 39 and ce["cache_writes"] - cs["cache_writes"] == 40 and ce["encoder_runs"] - cs["encoder_runs"] == 2,
              "%r" % ((n, ce["cache_writes"] - cs["cache_writes"], ce["encoder_runs"] - cs["encoder_runs"]),))
        conn.close()
        writer.close()
        conn = sqlite3.connect(db)
        check("integrity", conn.execute("pragma integrity_check").fetchone()[0] == "ok")
        conn.close()


def test_sharing():
    a = connect()
    b = connect()
    fa = json.loads(one(a, "select bert_debug()"))["model"]
    fb = json.loads(one(b, "select bert_debug()"))["model"]
    n = json.loads(one(a, "select bert_debug()"))["models_loaded"]
    check("two_connections_one_model", fa["fingerprint"] == fb["fingerprint"] and n == 1, "models_loaded %r" % n)
    check("two_connections_same_result", one(a, "select bert_fill('我[MASK]你')") == one(b, "select bert_fill('我[MASK]你')"))
    small = os.path.join(MODELS, "small")
    one(b, "select bert_load(?)", small)
    n2 = json.loads(one(a, "select bert_debug()"))["models_loaded"]
    check("second_model_loaded", n2 == 2, repr(n2))
    check("connections_keep_own_model", json.loads(one(a, "select bert_debug()"))["model"]["dir"] == os.path.realpath(TINY)
          and json.loads(one(b, "select bert_debug()"))["model"]["dir"] == os.path.realpath(small))
    b.close()
    n3 = json.loads(one(a, "select bert_debug()"))["models_loaded"]
    check("model_released_on_close", n3 == 1, repr(n3))
    a.close()


def test_threads():
    texts = ["今天天气真[MASK]啊，适合出去玩。", "学习要持之以恒，不能三天打鱼，两天[MASK]。",
             "他说话总是模棱两可，让人捉摸不[MASK]。", "这件事已经[MASK]木难支，无法挽回了。",
             "我们应当尊老爱[MASK]，弘扬传统美德。"]
    small = os.path.join(MODELS, "small")
    ref_conn = connect(model=small)
    ref_conn.execute("select bert_cache('off')")
    # Token ids must be identical; scores agree to 1e-5 (calls that meet in
    # the dynamic batcher run as one batch, whose larger matrix products round
    # differently, about 1e-6: see ext/sqlite/batcher.c).
    q = "select token_id, score from fill_candidates(?, 5)"

    def same(got, want):
        return ([g[0] for g in got] == [w[0] for w in want] and
                all(abs(g[1] - w[1]) <= 1e-5 for g, w in zip(got, want)))
    ref = [ref_conn.execute(q, (t,)).fetchall() for t in texts]
    ref_conn.close()
    mismatches = []
    errors = []

    def worker(i, cache):
        try:
            c = connect(model=small, check_same_thread=False)
            c.execute("select bert_cache(?)", (cache,))
            for j in range(30):
                t = texts[(i + j) % len(texts)]
                got = c.execute(q, (t,)).fetchall()
                if not same(got, ref[(i + j) % len(texts)]):
                    mismatches.append((i, j))
            c.close()
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    for cache in ("off", "memory"):
        mismatches.clear()
        errors.clear()
        ts = [threading.Thread(target=worker, args=(i, cache)) for i in range(6)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        check("threads_%s_identical" % cache, not mismatches and not errors, "%r %r" % (mismatches[:5], errors[:3]))


def test_overload():
    small = os.path.join(MODELS, "small")
    conn = connect(model=small)
    old_max = one(conn, "select bert_max_concurrent()")
    old_timeout = one(conn, "select bert_busy_timeout()")
    conn.execute("select bert_max_concurrent(1)")
    conn.execute("select bert_busy_timeout(0)")
    busy = []
    other = []
    stop = time.time() + 20
    text = "我" * 120 + "[MASK]"

    def worker():
        c = connect(model=small, check_same_thread=False)
        c.execute("select bert_cache('off')")
        while time.time() < stop and not busy:
            try:
                c.execute("select bert_fill(?)", (text,)).fetchone()
            except sqlite3.OperationalError as e:
                (busy if "busy" in str(e) else other).append(str(e))
        c.close()

    c0 = counters(conn)
    ts = [threading.Thread(target=worker) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    c1 = counters(conn)
    check("busy_rejects", bool(busy) and busy[0].startswith("bertfill: busy: 1 encoder runs in progress, waited "),
          "no busy error in 20 s" if not busy else busy[0])
    check("busy_counted", c1["busy"] > c0["busy"])
    check("busy_no_other_errors", not other, repr(other[:3]))
    # With a long enough wait nobody is turned away.
    conn.execute("select bert_busy_timeout(60000)")
    busy.clear()
    stop = time.time() + 2
    ts = [threading.Thread(target=worker) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    check("busy_waits_instead", not busy and not other, repr((busy + other)[:3]))
    conn.execute("select bert_max_concurrent(?)", (old_max,))
    conn.execute("select bert_busy_timeout(?)", (old_timeout,))
    conn.close()


def test_trusted_schema():
    with tempfile.TemporaryDirectory() as d:
        db = os.path.join(d, "s.db")
        conn = connect(db)
        conn.executescript("""
            create table t(x text);
            create table log(y text);
            create view v as select bert_fill(x) as f from t;
            create view vc as select c.token from t, fill_candidates(t.x) c;
            create trigger tr after insert on t begin insert into log values (bert_fill(new.x)); end;
        """)
        conn.close()
        conn = connect(db)
        conn.execute("pragma trusted_schema = off")
        expect_error("untrusted_view", conn, "select * from v", (), "unsafe use of bert_fill()")
        expect_error("untrusted_view_candidates", conn, "select * from vc", (), 'unsafe use of virtual table "fill_candidates"')
        expect_error("untrusted_trigger", conn, "insert into t values ('[MASK]')", (), "unsafe use of bert_fill()")
        check("untrusted_nothing_logged", one(conn, "select count(*) from log") == 0)
        check("direct_call_works", "[MASK]" not in one(conn, "select bert_fill('我[MASK]')"))
        conn.close()


def test_progress():
    code = ("import sqlite3\n"
            "c=sqlite3.connect(':memory:'); c.enable_load_extension(True); c.load_extension(%r)\n"
            "c.execute('create table t(x)')\n"
            "c.executemany('insert into t values (?)', [(t,) for t in %r])\n"
            "print(c.execute('select bert_prefill(x) from t').fetchone()[0])\n"
            "print(c.execute(\"select count(*) from t where bert_fill(x) not like '%%[MASK]%%'\").fetchone()[0])\n"
            "print(c.execute(\"select json_extract(bert_stats(), '$.counters.encoder_runs')\").fetchone()[0])\n") % (EXT, [fresh() for _ in range(100)])
    r = run_child(code, BERTFILL_MODEL=TINY, BERTFILL_PROGRESS="1")
    out = r.stdout.split()
    check("prefill_result", out[:2] == ["100", "100"], r.stdout + r.stderr)
    # 100 texts in batches of at most 32: 4 encoder runs, then all from the cache.
    check("prefill_batches", len(out) == 3 and out[2] == "4", r.stdout)
    check("prefill_progress", "bert_prefill: done: 100 texts read, 100 computed" in r.stderr, r.stderr)
    r = run_child(code, BERTFILL_MODEL=TINY, BERTFILL_PROGRESS="0")
    check("prefill_quiet", "bert_prefill" not in r.stderr, r.stderr)

    # Every text read lands in exactly one count, and they add up: a text
    # without a mask (of any length, as bert_fill returns it unchanged), a
    # repeat, and the texts bert_fill rejects (too long with a mask, invalid
    # UTF-8; the tiny model takes 64 tokens).
    texts = [fresh(), fresh(), "我[MASK]你", "我[MASK]你", "没有空白", "我" * 200, None,
             "我" * 100 + "[MASK]", b"\xff[MASK]"]
    code = ("import sqlite3\n"
            "c=sqlite3.connect(':memory:'); c.enable_load_extension(True); c.load_extension(%r)\n"
            "c.execute('create table t(x)')\n"
            "c.executemany('insert into t values (?)', [(t,) for t in %r])\n"
            "print(c.execute('select bert_prefill(x) from t').fetchone()[0])\n") % (EXT, texts)
    r = run_child(code, BERTFILL_MODEL=TINY, BERTFILL_PROGRESS="1")
    check("prefill_counts_add_up", r.stdout.split() == ["3"] and
          "bert_prefill: done: 8 texts read, 3 computed, 1 cached or repeated, 2 without a mask, "
          "2 skipped (what bert_fill rejects)" in r.stderr, r.stdout + r.stderr)


def main():
    if not os.path.exists(EXT + ".so") and not os.path.exists(EXT):
        fail("python", "extension %s.so is not built" % EXT)
        return 1
    if not os.path.isdir(TINY):
        fail("python", "no test models in %s (make models)" % MODELS)
        return 1
    try:
        sqlite3.connect(":memory:").enable_load_extension(True)
    except AttributeError:
        skip("python", "this Python's sqlite3 cannot load extensions (use /usr/bin/python3)")
        return 0
    for t in (test_functions, test_golden, test_errors, test_too_long_remedy, test_no_model, test_cache,
              test_sharing, test_threads, test_overload, test_trusted_schema, test_progress):
        try:
            t()
        except Exception as e:  # noqa: BLE001 - a crash of one group is a failure, not the end
            fail(t.__name__, "%s: %s" % (type(e).__name__, e))
    return exit_code()


if __name__ == "__main__":
    sys.exit(main())
