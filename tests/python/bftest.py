"""bftest.py — what the Python test suites share: where the build, the test
models and the extension are, the check lines tests/run.sh counts
("ok NAME", "FAIL NAME: why", "skip NAME: why"), error_of, and the helpers of
the tests of the files a load makes next to the weights (connect, one,
copy_model, run_client, check_derived_file, model_texts, candidates,
fresh_load, load_read_only, check_read_only, agreement, debug)."""
import hashlib
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys

BUILD = os.environ.get("BUILD", "build")
MODELS = os.path.abspath(os.path.join(BUILD, "models"))
EXT = os.path.abspath(os.environ.get("BERTFILL_EXT", "./bertfill"))
TINY = os.path.join(MODELS, "tiny")
# What loads write next to a model's weights (copy_model leaves them out).
DERIVED_FILES = ("model.int8.safetensors", "model.packed.safetensors", "model.bf16.safetensors",
                 "model.fingerprint")

_failures = 0


def ok(name):
    print("ok " + name, flush=True)


def fail(name, why):
    global _failures
    _failures += 1
    print("FAIL %s: %s" % (name, why), flush=True)


def skip(name, why):
    print("skip %s: %s" % (name, why), flush=True)


def check(name, cond, why=""):
    if cond:
        ok(name)
    else:
        fail(name, why or "condition is false")


def exit_code():
    """1 if any check failed so far, else 0."""
    return 1 if _failures else 0


def error_of(c, sql, args=()):
    """The message of the SQLite error that running sql on c raises, or None."""
    try:
        c.execute(sql, args).fetchall()
    except sqlite3.Error as e:
        return str(e)
    return None


def file_sha256(path):
    """The sha256 of a file, in hex (a golden names the weights it was made from)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def connect(path=":memory:"):
    """A connection (autocommit) with the extension loaded and no model."""
    c = sqlite3.connect(path, isolation_level=None)
    c.enable_load_extension(True)
    c.load_extension(EXT)
    c.enable_load_extension(False)
    return c


def one(c, sql, args=()):
    """The first column of the first row of sql."""
    return c.execute(sql, args).fetchone()[0]


def copy_model(src, tmp, name):
    """A copy of the model directory src as tmp/name, without DERIVED_FILES."""
    d = os.path.join(tmp, name)
    shutil.copytree(src, d, ignore=shutil.ignore_patterns(*DERIVED_FILES))
    return d


def run_client(code, args, env=None, tmp=None):
    """Python code in a fresh process: sys.argv[1] is the extension, then args.
    With tmp, the process runs as nobody when the tests run as root (root
    writes anywhere, so a read-only directory would not be one), and tmp, the
    directory above the model's copy, is opened to it.  subprocess's result."""
    pre = None
    if tmp is not None and os.geteuid() == 0:
        def pre():
            os.setgid(65534)
            os.setuid(65534)
        os.chmod(tmp, 0o755)
    return subprocess.run([sys.executable, "-c", code, EXT] + list(args), capture_output=True,
                          text=True, env=env, preexec_fn=pre, timeout=120)


def check_derived_file(d, name, load_sql, answers, made=None):
    """What every file a load derives from model.safetensors must do (the int8
    file, the packed fp32 file), in the model copy d: load_sql (with d as its
    parameter) writes d/name; a newer model.safetensors (as after a
    replacement) makes it again; a change under a loaded model is an error of
    bert_fill that names the file, never a crash; a truncated or garbage file
    is made again; answers(c) stays the same throughout.  made(c), if given,
    says whether a load read the file it made."""
    p = os.path.join(d, name)
    what = "the " + name.split(".")[1] + " file"
    c = connect()
    one(c, load_sql, (d,))
    want = answers(c)
    c.close()
    ino = os.stat(p).st_ino
    st = os.stat(os.path.join(d, "model.safetensors"))
    os.utime(os.path.join(d, "model.safetensors"), ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    c = connect()
    one(c, load_sql, (d,))
    check("a newer model.safetensors makes %s again" % what, os.stat(p).st_ino != ino)
    check("... with the same answers (same weights)", answers(c) == want)
    c.close()
    c = connect()
    one(c, load_sql, (d,))
    one(c, "SELECT bert_cache('off')")  # (the answers above are in the process's LRU)
    size = os.path.getsize(p)
    with open(p, "r+b") as f:
        f.seek(size - 100)
        f.write(bytes(100))
    e = error_of(c, "SELECT bert_fill('我[MASK]你')")
    check("%s rewritten in place: bert_fill says so" % what,
          e is not None and name + " was rewritten in place" in e, e)
    with open(p, "r+b") as f:
        f.truncate(size // 2)
    e = error_of(c, "SELECT bert_fill('我[MASK]你')")
    check("%s truncated in place: bert_fill says so" % what,
          e is not None and name + " changed on disk" in e, e)
    c.close()
    with open(p, "rb") as f:
        head = f.read(1000)
    for damage, data in (("truncated", head), ("garbage", b"\x00" * 5000)):
        with open(p, "wb") as f:
            f.write(data)
        c = connect()
        r = error_of(c, load_sql, (d,))
        check("%s %s: made again" % (what, damage),
              r is None and os.path.getsize(p) > 5000 and (made is None or made(c)) and
              answers(c) == want, r)
        c.close()


def model_texts(model, n, seed):
    """n texts of 8-30 characters from the model's vocabulary, one [MASK] each."""
    vocab = open(os.path.join(model, "vocab.txt"), encoding="utf-8").read().split("\n")
    chars = [t for t in vocab if len(t) == 1 and "\u4e00" <= t <= "\u9fff"]
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        w = [rnd.choice(chars) for _ in range(rnd.randint(8, 30))]
        w.insert(rnd.randint(0, len(w)), "[MASK]")
        out.append("".join(w))
    return out


def candidates(c, text, k=5):
    """fill_candidates(text, k) as (token, score) rows in mask and rank order."""
    return c.execute("SELECT token, score FROM fill_candidates(?, ?) ORDER BY mask, rank",
                     (text, k)).fetchall()


FRESH_CLIENT = r"""
import json, sqlite3, sys
c = sqlite3.connect(":memory:")
c.enable_load_extension(True)
c.load_extension(sys.argv[1])
d = c.execute("SELECT bert_load(?, ?)", (sys.argv[2], sys.argv[3])).fetchone()[0]
dbg = json.loads(c.execute("SELECT bert_debug()").fetchone()[0])
c.execute("SELECT bert_cache('off')").fetchone()
out = [c.execute("SELECT token, score FROM fill_candidates(?, 5) ORDER BY mask, rank", (t,)).fetchall()
       for t in json.loads(sys.argv[4])]
print(json.dumps([d, dbg, out]))
"""


def fresh_load(d, precision, texts, env=None, tmp=None):
    """bert_load(d, precision) in a fresh process (env: its environment; tmp:
    as nobody under root, see run_client), cache off, then the top 5 of each
    text: (description, bert_debug(), [candidates per text], stderr), or None
    after a failed check."""
    r = run_client(FRESH_CLIENT, [d, precision, json.dumps(texts)], env=env, tmp=tmp)
    if r.returncode != 0:
        check("bert_load(dir, '%s') in a fresh process" % precision, False, r.stderr.strip()[-400:])
        return None
    desc, dbg, out = json.loads(r.stdout)
    return desc, dbg, [[tuple(x) for x in rows] for rows in out], r.stderr


def load_read_only(d, tmp, precision):
    """fresh_load in a process that cannot write d (made read-only for it; as
    nobody under root): (description, bert_debug's model, the candidates of
    '我[MASK]你'), or None after a failed check."""
    os.chmod(d, 0o555)
    r = fresh_load(d, precision, ["我[MASK]你"], tmp=tmp)
    os.chmod(d, 0o755)
    return r and (r[0], r[1]["model"], r[2][0])


def debug(c):
    """bert_debug() of connection c, parsed."""
    return json.loads(one(c, "SELECT bert_debug()"))


def check_read_only(d, tmp, precision, name, field, want, same_answers):
    """bert_load(d, precision) where the process cannot write d: it loads,
    bert_debug's model[field] says want, d/name is not written, and (with
    same_answers) it answers as a load that could write d/name."""
    r = load_read_only(d, tmp, precision)
    if not r:
        return
    desc, model, got = r
    check("%s in a read-only directory loads" % precision, desc.endswith(precision), desc)
    check("... with %s %s" % (field, want), model[field] == want, model[field])
    check("... and writes nothing there", not os.path.exists(os.path.join(d, name)))
    if same_answers:
        c = connect()
        one(c, "SELECT bert_load(?, ?)", (d, precision))
        one(c, "SELECT bert_cache('off')")
        want_fill = [tuple(x) for x in candidates(c, "我[MASK]你")]
        c.close()
        check("... same answers as from the file", got == want_fill, "%s vs %s" % (got, want_fill))


def agreement(src, tmp, precision, n=300, seed=11):
    """precision against fp32 on a copy of the model src, over n texts of
    model_texts: (top-1 agreement, top-5 overlap, the sorted |dp| of fp32's
    top 1), each as a fraction."""
    d = copy_model(src, tmp, "agree-%s-%s" % (precision, os.path.basename(src)))
    texts = model_texts(src, n, seed)
    c = connect()
    one(c, "SELECT bert_cache('off')")
    one(c, "SELECT bert_load(?)", (d,))
    f = [candidates(c, t) for t in texts]
    one(c, "SELECT bert_load(?, ?)", (d, precision))
    q = [candidates(c, t) for t in texts]
    c.close()
    top1 = sum(a[0][0] == b[0][0] for a, b in zip(f, q)) / len(texts)
    overlap = sum(len({x[0] for x in a} & {x[0] for x in b}) for a, b in zip(f, q)) / (5 * len(texts))
    dp = sorted(abs(a[0][1] - dict(b).get(a[0][0], 0.0)) for a, b in zip(f, q))
    print("# %s: %s vs fp32 on %d texts: top-1 %.1f%%, top-5 overlap %.1f%%, |dp| of the fp32 "
          "top-1 median %.4f max %.4f" % (os.path.basename(src), precision, len(texts), 100 * top1,
                                          100 * overlap, dp[len(dp) // 2], dp[-1]))
    return top1, overlap, dp
