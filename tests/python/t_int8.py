#!/usr/bin/python3
"""t_int8.py — the int8 mode through SQL: bert_load(dir, 'int8') and
BERTFILL_PRECISION, the quantized-weights file model.int8.safetensors (made
once, reused, remade when stale or damaged, never required: a directory the
process cannot write still works, from private memory), the cache never
mixing precisions, fp32 and int8 side by side, the agreement of int8 with
fp32 on the test models, and fill_rows / bert_prefill / fill_candidates in
int8.

Each check copies a test model into a temporary directory, so that the
int8 file it writes never lands in build/models.  Through /usr/bin/python3's
sqlite3.  Run by tests/run.sh; prints "ok NAME" / "FAIL NAME: why" /
"skip NAME: why".
"""
import os
import shutil
import sys
import tempfile

from bftest import (MODELS, TINY, agreement, candidates, check, check_derived_file, check_cache_dir, check_read_only,
                    connect, copy_model, debug, error_of, exit_code, model_texts, one, run_client,
                    skip)

INT8_FILE = "model.int8.safetensors"


def test_load_and_file(tmp):
    d = copy_model(TINY, tmp, "file")
    c = connect()
    desc = one(c, "SELECT bert_load(?, 'int8')", (d,))
    check("bert_load(dir, 'int8') says so", desc.endswith(", F32, int8"), desc)
    dbg = debug(c)["model"]
    check("bert_debug: precision int8", dbg.get("precision") == "int8", str(dbg))
    check("bert_debug: int8 weights from the file", dbg.get("int8_weights") == "file", str(dbg))
    p = os.path.join(d, INT8_FILE)
    check("the first int8 load writes model.int8.safetensors", os.path.exists(p))
    left = [f for f in os.listdir(d) if ".tmp." in f]
    check("no temporary file left behind", not left, str(left))
    ino = os.stat(p).st_ino
    c2 = connect()
    one(c2, "SELECT bert_load(?, 'int8')", (d,))
    c.close()
    c2.close()
    c3 = connect()  # all closed: the model was unloaded; this loads it again
    one(c3, "SELECT bert_load(?, 'int8')", (d,))
    check("a later load reuses the file (not rewritten)", os.stat(p).st_ino == ino)
    desc = one(c3, "SELECT bert_load(?)", (d,))
    check("bert_load(dir) is fp32", desc.endswith(", F32, fp32"), desc)
    check("bert_debug: fp32 has no int8 weights", debug(c3)["model"].get("int8_weights") == "",
          str(debug(c3)["model"]))
    check("bert_load(dir, 'FP32') (any case)",
          one(c3, "SELECT bert_load(?, 'FP32')", (d,)).endswith("fp32"))
    e = error_of(c3, "SELECT bert_load(?, 'int4')", (d,))
    check("bert_load: unknown precision is an error",
          e == "bert_load: unknown precision 'int4': use 'fp32' (exact, the default), 'int8' "
               "(faster, approximate) or 'bf16' (between the two)", e)
    e = error_of(c3, "SELECT bert_load(?, 8)", (d,))
    check("bert_load: a number is not a precision", e and "unknown precision '8'" in e, e)
    check("the model stays after a bad precision", debug(c3)["model"]["precision"] == "fp32")
    c3.close()


def test_stale_and_damaged(tmp):
    check_derived_file(copy_model(TINY, tmp, "stale"), INT8_FILE, "SELECT bert_load(?, 'int8')",
                       lambda c: candidates(c, "我[MASK]你"))


def test_read_only(tmp):
    """A directory the process cannot write: the int8 weights in private memory."""
    check_read_only(copy_model(TINY, tmp, "ro"), tmp, "int8", INT8_FILE, "int8_weights", "memory",
                    same_answers=True)


def test_cache_dir(tmp):
    """A directory the process cannot write (a model installed read-only): the
    file goes to the per-user cache directory, shared by the next process; refused cache directories, BERTFILL_CACHE_DIR, no HOME, stale temporary files."""
    check_cache_dir(copy_model(TINY, tmp, "cache-dir"), tmp, "int8", INT8_FILE, "int8_weights", full=True)


def test_cache_keeps_precisions_apart(tmp):
    d = copy_model(TINY, tmp, "cache")
    db = os.path.join(tmp, "cache.db")
    texts = model_texts(TINY, 40, 7)
    c = connect(db)
    one(c, "SELECT bert_load(?, 'int8')", (d,))
    one(c, "SELECT bert_cache('on')")
    int8 = {t: candidates(c, t) for t in texts}
    one(c, "SELECT bert_load(?, 'fp32')", (d,))
    fp32 = {t: candidates(c, t) for t in texts}
    c.close()
    fresh = connect()
    one(fresh, "SELECT bert_cache('off')")
    one(fresh, "SELECT bert_load(?)", (d,))
    exact = {t: candidates(fresh, t) for t in texts}
    fresh.close()
    check("fp32 after int8 (cache on) gives the fp32 answers", fp32 == exact)
    differ = sum(1 for t in texts if int8[t] != exact[t])
    check("int8 answers are not fp32's (so the check above can fail)", differ > 0,
          "all %d equal" % len(texts))
    # and the other way round, through the cache table of a new process
    c = connect(db)
    one(c, "SELECT bert_load(?, 'int8')", (d,))
    again = {t: candidates(c, t) for t in texts}
    check("int8 after fp32 (cache table) gives the int8 answers", again == int8)
    c.close()


def test_side_by_side(tmp):
    d = copy_model(TINY, tmp, "side")
    a, b = connect(), connect()
    one(a, "SELECT bert_load(?)", (d,))
    one(b, "SELECT bert_load(?, 'int8')", (d,))
    check("fp32 and int8 of one directory are two models",
          debug(a)["models_loaded"] >= 2, str(debug(a)["models_loaded"]))
    t = "我[MASK]你"
    check("each connection keeps its precision",
          debug(a)["model"]["precision"] == "fp32" and debug(b)["model"]["precision"] == "int8")
    ca, cb = candidates(a, t), candidates(b, t)
    check("their answers differ in the probabilities", ca != cb, str(ca))
    a.close()
    b.close()


def test_env(tmp):
    d = copy_model(TINY, tmp, "env")
    code = r"""
import json, sqlite3, sys
c = sqlite3.connect(":memory:")
c.enable_load_extension(True)
c.load_extension(sys.argv[1])
c.execute("SELECT bert_fill('我[MASK]你')").fetchone()
print(json.loads(c.execute("SELECT bert_debug()").fetchone()[0])["model"]["precision"])
print(c.execute("SELECT bert_load(?)", (sys.argv[2],)).fetchone()[0])
"""
    for val, want, warn in (("int8", "int8", False), ("INT8", "int8", False), ("fp32", "fp32", False),
                            ("int4", "fp32", True)):
        env = dict(os.environ, BERTFILL_MODEL=d, BERTFILL_PRECISION=val)
        r = run_client(code, [d], env=env)
        lines = r.stdout.split("\n")
        check("BERTFILL_PRECISION=%s: BERTFILL_MODEL loads as %s" % (val, want),
              r.returncode == 0 and lines[0] == want, r.stdout + r.stderr)
        check("BERTFILL_PRECISION=%s: bert_load(dir) too" % val,
              r.returncode == 0 and lines[1].endswith(want), r.stdout)
        if warn:
            check("BERTFILL_PRECISION=int4 is warned about",
                  "ignoring BERTFILL_PRECISION='int4'" in r.stderr, r.stderr)


def test_agreement(tmp):
    """int8 against fp32 on the test models: how often the best token is the
    same.  Random models are a harsh case (flat, noisy distributions); the
    thresholds sit below what was measured when this was written (tiny 98.7%,
    small 97.3% of 300 texts) and far above chance."""
    for name, floor in (("tiny", 0.95), ("small", 0.93)):
        src = os.path.join(MODELS, name)
        if not os.path.isdir(src):
            skip("int8 agreement on %s" % name, "model missing (make models)")
            continue
        top1, _, _ = agreement(src, tmp, "int8")
        check("int8 agrees with fp32 on %s: top-1 >= %d%%" % (name, 100 * floor), top1 >= floor,
              "%.1f%%" % (100 * top1))


def test_column_functions(tmp):
    d = copy_model(TINY, tmp, "rows")
    texts = model_texts(TINY, 30, 5)
    c = connect()
    one(c, "SELECT bert_load(?, 'int8')", (d,))
    one(c, "SELECT bert_cache('off')")
    single = [one(c, "SELECT bert_fill(?)", (t,)) for t in texts]
    c.execute("CREATE TABLE t(text)")
    c.executemany("INSERT INTO t VALUES (?)", [(t,) for t in texts])
    rows = [r[0] for r in c.execute(
        "SELECT filled FROM fill_rows('SELECT rowid, text FROM t') ORDER BY key")]
    check("fill_rows in int8 equals bert_fill per row", rows == single)
    one(c, "SELECT bert_cache('on')")
    one(c, "SELECT bert_prefill(text) FROM t")
    pre = [one(c, "SELECT bert_fill(?)", (t,)) for t in texts]
    check("bert_prefill + bert_fill in int8 equals bert_fill per row", pre == single)
    c.close()


def main():
    if not os.path.exists(os.path.join(TINY, "model.safetensors")):
        skip("int8", "test models missing (make models)")
        return 0
    tmp = tempfile.mkdtemp(prefix="bf-int8-")
    try:
        for t in (test_load_and_file, test_stale_and_damaged, test_read_only, test_cache_dir,
                  test_cache_keeps_precisions_apart, test_side_by_side, test_env,
                  test_agreement, test_column_functions):
            t(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return exit_code()


if __name__ == "__main__":
    sys.exit(main())
