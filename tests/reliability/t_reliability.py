#!/usr/bin/python3
"""t_reliability.py — reliability checks that the other suites do not make:

  * a model file changed on disk while it is loaded (documents and checks
    what happens; each case runs in a child process, so a crash is seen as
    one):
      - replaced by rename (mv new model.safetensors): the loaded model keeps
        the old inode, results do not change, nothing crashes; a new
        connection (same process) and a fresh process get the new weights;
      - overwritten in place with the same size (weights changed under a
        MAP_SHARED mapping): the engine's fstat before each run notices, and
        the call fails with a clear error instead of mixing weights; a new
        bert_load of the directory gets the new version;
      - truncated while loaded: the same check gives a clear error before any
        page past the new end is touched (no SIGBUS; a truncation during a
        run can still raise SIGBUS: replace model files with mv);
  * trusted_schema = OFF: the DIRECTONLY functions that tests/sql/errors.sql
    and t_python.py do not try (bert_load, bert_prefill, bert_cache,
    bert_cache_limit, bert_debug) fail from a view and from a trigger;
  * the overload guard: with bert_max_concurrent(1) and a 0 ms wait, the
    connection that was turned away with "bertfill: busy" works right after.
"""
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# bftest (the check lines, where the build is) is in tests/python
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
from bftest import EXT, MODELS, TINY, check, exit_code  # noqa: E402




def connect(path=":memory:", model=TINY, **kw):
    c = sqlite3.connect(path, isolation_level=None, **kw)
    c.enable_load_extension(True)
    c.load_extension(EXT)
    c.enable_load_extension(False)
    if model:
        c.execute("SELECT bert_load(?)", (model,)).fetchone()
    return c


TEXTS = ["今天天气真[MASK]啊", "我们[MASK]去公园吧", "他是一个好[MASK]", "[MASK]国的首都"]

# Child: load the model from argv[1], fill, print, then wait for a line on
# stdin (the parent changes the file meanwhile), fill again, print.
CHILD = r"""
import sqlite3, sys, json
c = sqlite3.connect(":memory:", isolation_level=None)
c.enable_load_extension(True)
c.load_extension(sys.argv[1])
c.execute("SELECT bert_load(?)", (sys.argv[2],)).fetchone()
c.execute("SELECT bert_cache('off')")
texts = json.loads(sys.argv[3])
def fill():
    return [list(c.execute("SELECT token_id, score FROM fill_candidates(?, 3)", (t,))) for t in texts]
fp = lambda: c.execute("SELECT json_extract(bert_debug(), '$.model.fingerprint')").fetchone()[0]
print(json.dumps({"res": fill(), "fp": fp()}), flush=True)
sys.stdin.readline()
try:
    print(json.dumps({"res": fill(), "fp": fp()}), flush=True)
except sqlite3.Error as e:
    print(json.dumps({"error": str(e), "fp": fp()}), flush=True)
c2 = sqlite3.connect(":memory:")
c2.enable_load_extension(True)
c2.load_extension(sys.argv[1])
try:
    c2.execute("SELECT bert_load(?)", (sys.argv[2],)).fetchone()
    print(json.dumps({"fp2": c2.execute("SELECT json_extract(bert_debug(), '$.model.fingerprint')").fetchone()[0]}), flush=True)
except sqlite3.Error as e:
    print(json.dumps({"error2": str(e)}), flush=True)
"""


def child_run(model_dir, change):
    """Start a child on model_dir, run change() between its two fills.
    Returns (first, second, extra, returncode, stderr)."""
    import json
    p = subprocess.Popen([sys.executable, "-c", CHILD, EXT, model_dir, json.dumps(TEXTS)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = json.loads(p.stdout.readline())
    change()
    out, err = p.communicate("go\n", timeout=60)
    lines = [json.loads(x) for x in out.splitlines() if x.strip()]
    second = lines[0] if lines else None
    extra = lines[1] if len(lines) > 1 else None
    return first, second, extra, p.returncode, err


def fresh_results(model_dir):
    c = connect(model=model_dir)
    c.execute("SELECT bert_cache('off')")
    r = [[list(x) for x in c.execute("SELECT token_id, score FROM fill_candidates(?, 3)", (t,))] for t in TEXTS]
    c.close()
    return r


def test_model_changed(tmp):
    a = os.path.join(tmp, "model")
    shutil.copytree(TINY, a)
    st = os.path.join(a, "model.safetensors")
    # "a new version of the model": the same options as tiny, another seed
    # (same header and layout, other weights)
    v2 = os.path.join(tmp, "v2")
    subprocess.check_call([sys.executable, os.path.join(ROOT, "model", "gen_random_model.py"), v2,
                           "--layers", "2", "--hidden", "32", "--heads", "4", "--intermediate", "64",
                           "--vocab-size", "600", "--max-pos", "64", "--seed", "77"], stdout=subprocess.DEVNULL)
    v2st = os.path.join(v2, "model.safetensors")
    if os.path.getsize(v2st) != os.path.getsize(st):
        check("changed_setup", False, "the second version has another size")
        return

    # 1. replaced by rename: the old mapping keeps the old inode
    def replace():
        shutil.copy(v2st, st + ".new")
        os.rename(st + ".new", st)
    first, second, extra, rc, err = child_run(a, replace)
    check("changed_rename_no_crash", rc == 0 and second is not None and "res" in second,
          "exit %s: %s %s" % (rc, second, err[-300:]))
    if second and "res" in second:
        check("changed_rename_same_results", second["res"] == first["res"] and second["fp"] == first["fp"],
              "results changed after a rename")
        # a new connection of the same process loads the new file (the
        # registry notices the replaced file); the old connection keeps the old
        check("changed_rename_new_connection_gets_new", extra and extra.get("fp2") not in (None, first["fp"]),
              repr(extra))
    check("changed_rename_new_process_sees_new", fresh_results(a) != first["res"],
          "a new process got the old weights")

    # 2. overwritten in place, same size: the bytes change under the mapping
    shutil.rmtree(a)
    shutil.copytree(TINY, a)

    def overwrite():
        with open(v2st, "rb") as f:
            data = f.read()
        with open(st, "r+b") as f:                # same inode, new bytes
            f.write(data)
    first, second, extra, rc, err = child_run(a, overwrite)
    check("changed_in_place_no_crash", rc == 0 and second is not None, "exit %s: %s" % (rc, err[-300:]))
    if second:
        # the engine notices (fstat before each run) instead of mixing weights
        check("changed_in_place_clear_error", "rewritten in place" in second.get("error", ""), repr(second))
        check("changed_in_place_new_connection_gets_new", extra and extra.get("fp2") not in (None, first["fp"]),
              repr(extra))

    # 3. truncated while loaded: SIGBUS (documented hazard)
    shutil.rmtree(a)
    shutil.copytree(TINY, a)

    def truncate():
        os.truncate(st, 0)
        # drop the page cache of the file so the mapping must fault (no effect
        # when not permitted; truncation alone already unmaps the pages)
    first, second, extra, rc, err = child_run(a, truncate)
    # checked before the encoder touches the mapping: an error, not SIGBUS
    check("changed_truncated_no_crash", rc == 0 and second is not None, "exit %s: %s" % (rc, err[-300:]))
    if second:
        check("changed_truncated_clear_error", "changed on disk" in second.get("error", ""), repr(second))
        check("changed_truncated_reload_fails_clearly", extra and "empty file" in extra.get("error2", ""),
              repr(extra))


def test_untrusted_schema(tmp):
    db = os.path.join(tmp, "schema.db")
    c = connect(db)
    c.executescript("""
        CREATE TABLE t(x TEXT);
        CREATE TABLE log(y);
        CREATE VIEW v_load AS SELECT bert_load('%s') AS r;
        CREATE VIEW v_prefill AS SELECT bert_prefill(x) AS r FROM t;
        CREATE VIEW v_cache AS SELECT bert_cache('clear') AS r;
        CREATE VIEW v_limit AS SELECT bert_cache_limit(1) AS r;
        CREATE VIEW v_debug AS SELECT bert_debug() AS r;
        CREATE TABLE t_load(x); CREATE TABLE t_cache(x); CREATE TABLE t_prefill(x);
        CREATE TRIGGER tr_load AFTER INSERT ON t_load BEGIN INSERT INTO log SELECT bert_load('%s'); END;
        CREATE TRIGGER tr_cache AFTER INSERT ON t_cache BEGIN INSERT INTO log SELECT bert_cache('clear'); END;
        CREATE TRIGGER tr_prefill AFTER INSERT ON t_prefill BEGIN INSERT INTO log SELECT bert_prefill(new.x); END;
    """ % (TINY, TINY))
    c.close()
    c = connect(db, model=None)
    c.execute("PRAGMA trusted_schema = OFF")
    for v, fn in (("v_load", "bert_load"), ("v_prefill", "bert_prefill"), ("v_cache", "bert_cache"),
                  ("v_limit", "bert_cache_limit"), ("v_debug", "bert_debug")):
        try:
            c.execute("SELECT * FROM %s" % v).fetchall()
            check("untrusted_%s" % v, False, "no error")
        except sqlite3.OperationalError as e:
            check("untrusted_%s" % v, "unsafe use of %s()" % fn in str(e), str(e))
    for tb, fn in (("t_load", "bert_load"), ("t_cache", "bert_cache"), ("t_prefill", "bert_prefill")):
        try:
            c.execute("INSERT INTO %s VALUES ('a[MASK]')" % tb)
            check("untrusted_trigger_%s" % fn, False, "no error")
        except sqlite3.OperationalError as e:
            check("untrusted_trigger_%s" % fn, "unsafe use of %s()" % fn in str(e), str(e))
    check("untrusted_nothing_written", c.execute("SELECT count(*) FROM log").fetchone()[0] == 0)
    c.close()


def test_busy_then_usable():
    small = os.path.join(MODELS, "small")
    c = connect(model=small, check_same_thread=False)
    old = c.execute("SELECT bert_max_concurrent(), bert_busy_timeout()").fetchone()
    c.execute("SELECT bert_max_concurrent(1), bert_busy_timeout(0), bert_cache('off')")
    long_text = "我" * 120 + "[MASK]"
    stop = threading.Event()

    def hog():
        h = connect(model=small, check_same_thread=False)
        h.execute("SELECT bert_cache('off')")
        while not stop.is_set():
            try:
                h.execute("SELECT bert_fill(?)", (long_text,)).fetchone()
            except sqlite3.OperationalError:
                pass                  # the hogs are turned away too
        h.close()
    th = [threading.Thread(target=hog) for _ in range(2)]
    for t in th:
        t.start()
    busy = None
    deadline = time.time() + 20
    while busy is None and time.time() < deadline:
        try:
            c.execute("SELECT bert_fill(?)", (long_text,)).fetchone()
        except sqlite3.OperationalError as e:
            if "busy" in str(e):
                busy = str(e)
            else:
                break
    stop.set()
    for t in th:
        t.join()
    check("busy_seen", busy is not None and busy.startswith("bertfill: busy: "), repr(busy))
    c.execute("SELECT bert_busy_timeout(60000)")
    try:
        r = c.execute("SELECT bert_fill('今天天气真[MASK]啊')").fetchone()[0]
        check("busy_connection_usable_after", "[MASK]" not in r, r)
    except sqlite3.Error as e:
        check("busy_connection_usable_after", False, str(e))
    c.execute("SELECT bert_max_concurrent(?), bert_busy_timeout(?)", old)
    c.close()


def test_trace_keeps_nul_bytes(tmp):
    """The per-call trace stores the text as given, NUL bytes included."""
    c = connect(os.path.join(tmp, "trace.db"))
    c.execute("SELECT bert_trace(1)")
    text = "a\x00b[MASK]"
    got = c.execute("SELECT bert_fill(?)", (text,)).fetchone()[0]
    row = c.execute("SELECT text, length(CAST(text AS BLOB)) FROM bertfill_trace ORDER BY id DESC LIMIT 1").fetchone()
    check("trace_text_with_nul_whole", row is not None and row[1] == len(text.encode()),
          "trace row %r for a %d-byte text" % (row, len(text.encode())))
    check("fill_text_with_nul_prefix_kept", got is not None and got.startswith("a\x00b"), repr(got))
    c.close()


def main():
    if not os.path.isdir(TINY):
        print("FAIL reliability: no test models in %s (make models)" % MODELS)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        test_model_changed(tmp)
        test_untrusted_schema(tmp)
        test_trace_keeps_nul_bytes(tmp)
    test_busy_then_usable()
    return exit_code()


if __name__ == "__main__":
    sys.exit(main())
