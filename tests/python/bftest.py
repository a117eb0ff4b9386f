"""bftest.py — what the Python test suites share: where the build, the test
models and the extension are, the check lines tests/run.sh counts
("ok NAME", "FAIL NAME: why", "skip NAME: why"), error_of, and the helpers of
the tests of the files a load makes next to the weights (connect, one,
copy_model, run_client, check_derived_file with other_weights,
check_other_weights, check_damaged_in_place and check_stale_temps,
model_texts, candidates, fresh_load, load_read_only, check_read_only,
check_cache_dir with cache_env and private_dir, agreement, debug)."""
import array
import hashlib
import json
import os
import random
import shutil
import sqlite3
import struct
import subprocess
import sys
import time

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


def other_weights(src, dst):
    """Write to dst the weights of src with every encoder matrix's values in
    reverse order: a model of the same shape and the same size, other
    weights (other answers)."""
    with open(src, "rb") as f:
        data = bytearray(f.read())
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    for key, t in header.items():
        if ".encoder.layer." in "." + key and key.endswith("weight") and len(t["shape"]) == 2:
            assert t["dtype"] == "F32"
            b, e = (8 + n + x for x in t["data_offsets"])
            v = array.array("f", bytes(data[b:e]))
            v.reverse()
            data[b:e] = v.tobytes()
    with open(dst, "wb") as f:
        f.write(data)


def load_with_stderr(d, load_sql):
    """load_sql (with d as its parameter) in a fresh process: its stderr, or
    None when it failed."""
    code = ("import sqlite3, sys\nc = sqlite3.connect(':memory:')\nc.enable_load_extension(True)\n"
            "c.load_extension(sys.argv[1])\nc.execute(sys.argv[3], (sys.argv[2],)).fetchone()\n")
    r = run_client(code, [d, load_sql])
    return r.stderr if r.returncode == 0 else None


def check_other_weights(d, name, load_sql, answers, want, made):
    """Issue 41 (a): other weights of the same shape put in d's
    model.safetensors with the same size and mtime (rsync -t: a file renamed
    into place; cp -p: written in place) are not answered from the file made
    from the first ones: the load makes its own, and answers as a load of
    those weights in a fresh directory."""
    what = "the " + name.split(".")[1] + " file"
    w = os.path.join(d, "model.safetensors")
    p = os.path.join(d, name)
    ref = d + "-other"
    shutil.copytree(d, ref, ignore=shutil.ignore_patterns(*DERIVED_FILES))
    other_weights(w, os.path.join(ref, "model.safetensors"))
    c = connect()
    one(c, load_sql, (ref,))
    want2 = answers(c)
    c.close()
    check("other weights of the same shape give other answers (so the checks below can fail)",
          want2 != want)
    with open(w, "rb") as f:
        mine = f.read()
    with open(os.path.join(ref, "model.safetensors"), "rb") as f:
        theirs = f.read()
    st = os.stat(w)
    for how in ("written in place", "renamed into place"):  # the first meets a recorded identity
        for data, expect, whose in ((theirs, want2, "other"), (mine, want, "first")):
            if how == "renamed into place":
                with open(w + ".new", "wb") as f:
                    f.write(data)
                os.utime(w + ".new", ns=(st.st_atime_ns, st.st_mtime_ns))
                os.rename(w + ".new", w)
            else:
                with open(w, "r+b") as f:
                    f.write(data)
                os.utime(w, ns=(st.st_atime_ns, st.st_mtime_ns))
            ino = os.stat(p).st_ino
            c = connect()
            r = error_of(c, load_sql, (d,))
            got = answers(c) if r is None else None
            check("the %s weights %s, same size and mtime: %s made again, answers as a fresh "
                  "directory's" % (whose, how, what),
                  r is None and os.stat(p).st_ino != ino and (made is None or made(c)) and
                  got == expect, r or "%s vs %s" % (got, expect))
            c.close()
    shutil.rmtree(ref, ignore_errors=True)


def derived_header(p):
    """The safetensors header of the file p (a dict) and where its data starts."""
    with open(p, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n)), 8 + n


def derived_record(p):
    """The record of the derived file p: its I64 "bertfill.*.source" entry."""
    header, data = derived_header(p)
    key = [k for k in header if k.endswith(".source")][0]
    b, e = header[key]["data_offsets"]
    with open(p, "rb") as f:
        f.seek(data + b)
        return list(struct.unpack("<%dq" % ((e - b) // 8), f.read(e - b)))


def derived_tensors(p):
    """How many tensors the derived file p holds besides its record."""
    return len([k for k in derived_header(p)[0] if k != "__metadata__"]) - 1


def check_damaged_in_place(d, name, load_sql, answers, want, made, mtime_kept):
    """Issue 41 (b): the derived file damaged in place, its size kept (and,
    with mtime_kept, its mtime set back), is found out at the next load
    (which says so on stderr) and made again; the next load maps the new
    one."""
    what = "the " + name.split(".")[1] + " file"
    p = os.path.join(d, name)
    size, st = os.path.getsize(p), os.stat(p)
    with open(p, "r+b") as f:
        f.seek(size // 4)
        before = f.read(size // 4)
        f.seek(size // 4)
        f.write(bytes(size // 4))
    if mtime_kept:
        os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    check("%s damaged in place (size%s kept): the damage changed bytes" %
          (what, " and mtime" if mtime_kept else ""), before != bytes(size // 4))
    err = load_with_stderr(d, load_sql)
    check("... the next load says it is damaged and makes it again",
          err is not None and "%s is damaged" % name in err and os.stat(p).st_ino != st.st_ino,
          err)
    ino = os.stat(p).st_ino
    c = connect()
    r = error_of(c, load_sql, (d,))
    check("... and the load after maps the new one, with the same answers",
          r is None and os.stat(p).st_ino == ino and (made is None or made(c)) and
          answers(c) == want, r)
    c.close()


def check_stale_temps(d, name, load_sql, where=None, load=None):
    """Issue 6: the temporary files a writer killed while writing name left
    (NAME.tmp.PID.TID) are removed by a later load when the writer is gone
    and they have not changed for a minute; those of a live writer, recent
    ones, links, others' files and names not of that exact pattern stay.
    where: the folder they are in (default d); load: what loads (default
    load_sql in this process), run as loader_uid() when given."""
    p = os.path.join(where or d, name)
    uid = loader_uid() if load else os.geteuid()
    dead = subprocess.Popen(["true"])
    dead.wait()
    old = time.time_ns() - 120 * 10**9
    stale = "%s.tmp.%d.%x" % (p, dead.pid, 0x7f3a5c1ff640)
    reused = subprocess.Popen(["sleep", "60"])  # its pid is alive, but started after the file
    stale_reused = "%s.tmp.%d.%x" % (p, reused.pid, 0x7f3a5c1ff644)
    keep = {"a live writer's": "%s.tmp.1.%x" % (p, 0x7f3a5c1ff640),  # pid 1: alive, started first
            "a recent one": "%s.tmp.%d.%x" % (p, dead.pid, 0x7f3a5c1ff641),
            "a name not of the pattern": "%s.tmp.%d.%x.x" % (p, dead.pid, 0x7f3a5c1ff640),
            "a symbolic link": "%s.tmp.%d.%x" % (p, dead.pid, 0x7f3a5c1ff642)}
    if os.geteuid() == 0:
        keep["another user's"] = "%s.tmp.%d.%x" % (p, dead.pid, 0x7f3a5c1ff643)
    for f in [stale, stale_reused] + list(keep.values()):
        if f == keep["a symbolic link"]:
            os.symlink(os.path.join(d, "config.json"), f)
            os.utime(f, ns=(old, old), follow_symlinks=False)
            continue
        with open(f, "wb") as out:
            out.write(b"\0" * 4096)
        if uid != os.geteuid():
            os.chown(f, uid, uid)
        if f != keep["a recent one"]:
            os.utime(f, ns=(old, old))
    if "another user's" in keep:
        os.chown(keep["another user's"], *((65534, 65534) if uid == 0 else (0, 0)))
    if load:
        load()
    else:
        c = connect()
        one(c, load_sql, (d,))
        c.close()
    check("a stale %s.tmp.PID.TID left by a writer that is gone: removed by the next load" % name,
          not os.path.lexists(stale))
    check("... and one whose pid was taken since by a process started later: removed",
          not os.path.lexists(stale_reused))
    reused.kill()
    reused.wait()
    for what, f in keep.items():
        check("... %s temporary file stays" % what, os.path.lexists(f))
        os.unlink(f)


def uncached(answers):
    """answers(c), with c's memo cache off first."""
    def run(c):
        one(c, "SELECT bert_cache('off')")
        return answers(c)
    return run


def check_derived_file(d, name, load_sql, answers, made=None):
    """What every file a load derives from model.safetensors must do (the int8
    file, the packed fp32 file, the bf16 file), in the model copy d: load_sql
    (with d as its parameter) writes d/name; a touched model.safetensors
    (same bytes) keeps it; other weights of the same size and mtime make it
    again (check_other_weights); damage in place is found and made good
    (check_damaged_in_place); a change under a loaded model is an error of
    bert_fill that names the file, never a crash; a truncated or garbage
    file is made again; stale temporary files are removed
    (check_stale_temps); answers(c) stays the same throughout.  made(c), if
    given, says whether a load read the file it made."""
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
    check("a touched model.safetensors (same bytes) keeps %s (its weights hash matches)" % what,
          os.stat(p).st_ino == ino)
    check("... with the same answers", answers(c) == want)
    c.close()
    # weights settled (unchanged for 2 s): the file made now records their identity too
    changed = os.stat(os.path.join(d, "model.safetensors")).st_ctime_ns
    time.sleep(max(0.0, 2.2 - (time.time_ns() - changed) / 1e9))
    os.unlink(p)
    c = connect()
    one(c, load_sql, (d,))
    c.close()
    w = os.stat(os.path.join(d, "model.safetensors"))
    r = derived_record(p)
    check("made from settled weights, %s records their hash, identity and each tensor's checksum"
          % what, r[2:7] == [w.st_dev, w.st_ino, w.st_size, w.st_mtime_ns, w.st_ctime_ns] and
          len(r) == 7 + derived_tensors(p), str(r[:7]))
    check_other_weights(d, name, load_sql, answers, want, made)
    for mtime_kept in (False, True):
        check_damaged_in_place(d, name, load_sql, answers, want, made, mtime_kept)
    c = connect()
    one(c, load_sql, (d,))
    one(c, "SELECT bert_cache('off')")
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
    check_stale_temps(d, name, load_sql)

def check_cache_refused(d, tmp, precision, name, field, xdg):
    """check_cache_dir's cache directories refused (a symbolic link, mode
    0777, another user's: the old behaviour, with the reason in bert_debug),
    BERTFILL_CACHE_DIR choosing it (before XDG_CACHE_HOME) or turning it off,
    and no HOME."""
    # refused cache directories: the old behaviour, with the reason
    old = {"int8": "memory", "bf16": "memory"}.get(precision)
    other = os.path.join(tmp, "xdg-target")
    cases = [("a symbolic link", "is a symbolic link",
              lambda b: (private_dir(other), os.symlink(other, b))),
             ("of mode 0777", "group or others can write it",
              lambda b: private_dir(b, 0o777))]
    if os.geteuid() == 0:
        cases.append(("another user's", "belongs to another user",
                      lambda b: (private_dir(b), os.chown(b, 0, 0))))
    for what, why, make in cases:
        x = private_dir(os.path.join(tmp, "xdg-refused"))
        make(os.path.join(x, "bertfill"))
        r = load_read_only(d, tmp, precision, env=cache_env(XDG_CACHE_HOME=x))
        if not r:
            continue
        m = r[1]
        check("a cache directory that is %s is refused, with the reason in bert_debug" % what,
              (m[field] == old if old else m[field].startswith("in place")) and
              m.get("derived_file") == "" and why in m.get("cache_dir_error", "") and
              not any(name in fs for _, _, fs in os.walk(x)) and
              not any(name in fs for _, _, fs in os.walk(other)),
              "%s=%s, cache_dir_error %r" % (field, m[field], m.get("cache_dir_error")))
        shutil.rmtree(x, ignore_errors=True)
        shutil.rmtree(other, ignore_errors=True)
    # BERTFILL_CACHE_DIR: chooses the directory, or turns the cache off; no HOME
    chosen = os.path.join(private_dir(os.path.join(tmp, "chosen")), "cache")
    r = load_read_only(d, tmp, precision, env=cache_env(BERTFILL_CACHE_DIR=chosen,
                                                        XDG_CACHE_HOME=xdg))
    check("BERTFILL_CACHE_DIR names the cache directory (made 0700), before XDG_CACHE_HOME",
          r and r[1].get("derived_file", "").startswith(chosen + "/") and
          os.stat(chosen).st_mode & 0o777 == 0o700, r and r[1].get("derived_file"))
    for env, why in ((cache_env(BERTFILL_CACHE_DIR="0", XDG_CACHE_HOME=xdg),
                      "turned off by BERTFILL_CACHE_DIR=0"),
                     (cache_env(HOME=None), "HOME is not set")):
        r = load_read_only(d, tmp, precision, env=env)
        m = r and r[1]
        check("... %s: the old behaviour, and bert_debug says why" % why,
              m and (m[field] == old if old else m[field].startswith("in place")) and
              m.get("derived_file") == "" and why in m.get("cache_dir_error", ""),
              m and "%s=%s, %r" % (field, m[field], m.get("cache_dir_error")))


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
f = (dbg["model"] or {}).get("derived_file")  # the inodes this process maps it by
maps = sorted({int(l.split()[4]) for l in open("/proc/self/maps") if f and l.rstrip().endswith(f)})
print(json.dumps([d, dbg, out, maps]))
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
    desc, dbg, out, maps = json.loads(r.stdout)
    fresh_load.maps = maps  # the inodes by which it mapped bert_debug's model.derived_file
    return desc, dbg, [[tuple(x) for x in rows] for rows in out], r.stderr


def cache_env(**settings):
    """This environment without the settings of the per-user cache directory
    (XDG_CACHE_HOME, BERTFILL_CACHE_DIR), then with settings (None: unset)."""
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_CACHE_HOME", "BERTFILL_CACHE_DIR")}
    env.update({k: v for k, v in settings.items() if v is not None})
    for k in [k for k, v in settings.items() if v is None]:
        env.pop(k, None)
    return env


def load_read_only(d, tmp, precision, env=None):
    """fresh_load in a process that cannot write d (made read-only for it; as
    nobody under root): (description, bert_debug's model, the candidates of
    '我[MASK]你'), or None after a failed check.  env: its environment (by
    default, the per-user cache turned off: BERTFILL_CACHE_DIR=0)."""
    os.chmod(d, 0o555)
    r = fresh_load(d, precision, ["我[MASK]你"], env=env or cache_env(BERTFILL_CACHE_DIR="0"),
                   tmp=tmp)
    os.chmod(d, 0o755)
    return r and (r[0], r[1]["model"], r[2][0])


def loader_uid():
    """The user that the processes of load_read_only run as."""
    return 65534 if os.geteuid() == 0 else os.geteuid()


def private_dir(path, mode=0o700):
    """A directory of load_read_only's user (mode), made afresh."""
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    os.chmod(path, mode)
    if os.geteuid() == 0:
        os.chown(path, loader_uid(), loader_uid())
    return path


def check_cache_dir(d, tmp, precision, name, field, full=False):
    """Issue 37 item 6: a model directory the process cannot write (as one
    installed in site-packages): the file name a load derives goes to the
    model's folder of the per-user cache directory ($XDG_CACHE_HOME/bertfill),
    bert_debug says where, a second process maps the same file (the same
    inode, not made again), and the answers are those of a load that wrote it
    next to the weights.  With full: the cache directory refused (a symbolic
    link, another user's, mode 0777: the old behaviour with the reason),
    BERTFILL_CACHE_DIR choosing it or turning it off, no HOME, and the stale
    temporary files of a killed writer in the cache removed."""
    xdg = private_dir(os.path.join(tmp, "xdg-" + precision))
    env = cache_env(XDG_CACHE_HOME=xdg)
    if full:
        check_cache_refused(d, tmp, precision, name, field, xdg)
    runs = []
    for i in range(2):
        r = load_read_only(d, tmp, precision, env=env)
        if not r:
            return
        runs.append((r, list(fresh_load.maps)))
    (desc, model, got), maps = runs[0]
    (_, model2, got2), maps2 = runs[1]
    f = model.get("derived_file", "")
    check("%s in a read-only directory: %s made in the per-user cache ($XDG_CACHE_HOME/bertfill)"
          % (precision, name), model[field] == "file" and
          f.startswith(os.path.join(xdg, "bertfill") + "/") and f.endswith("/" + name) and
          os.path.isfile(f) and not os.path.exists(os.path.join(d, name)),
          "%s=%s, derived_file %r" % (field, model[field], f))
    if not os.path.isfile(f):
        return
    st = os.stat(f)
    folder = os.stat(os.path.dirname(f))
    check("... in a folder of this user's, mode 0700 (and the cache directory too)",
          folder.st_uid == loader_uid() and folder.st_mode & 0o777 == 0o700 and
          os.stat(os.path.join(xdg, "bertfill")).st_mode & 0o777 == 0o700 and
          st.st_uid == loader_uid(), oct(folder.st_mode))
    check("... bert_debug's model.cache_dir is that folder, with no error",
          model.get("cache_dir") == os.path.dirname(f) and model.get("cache_dir_error") == "",
          "%r %r" % (model.get("cache_dir"), model.get("cache_dir_error")))
    check("... a second process maps the same file (same inode, not made again)",
          model2.get("derived_file") == f and model2[field] == "file" and
          maps == [st.st_ino] and maps2 == [st.st_ino] and os.stat(f).st_ino == st.st_ino,
          "%s %s %s" % (maps, maps2, st.st_ino))
    c = connect()
    one(c, "SELECT bert_load(?, ?)", (d, precision))
    one(c, "SELECT bert_cache('off')")
    want = [tuple(x) for x in candidates(c, "我[MASK]你")]
    c.close()
    check("... both answer as a load that wrote it next to the weights",
          got == want and got2 == want, "%s / %s vs %s" % (got, got2, want))
    os.unlink(os.path.join(d, name))
    if not full:
        return
    # the folder of another model directory is another folder
    d2 = copy_model(d, tmp, "cache-other-" + precision)
    r = load_read_only(d2, tmp, precision, env=env)
    f2 = r and r[1].get("derived_file", "")
    check("another model directory gets a folder of its own in the cache",
          f2 and f2 != f and os.path.dirname(os.path.dirname(f2)) ==
          os.path.dirname(os.path.dirname(f)), "%r vs %r" % (f2, f))
    # model.fingerprint of settled weights: in the cache folder too
    changed = os.stat(os.path.join(d, "model.safetensors")).st_ctime_ns
    time.sleep(max(0.0, 2.2 - (time.time_ns() - changed) / 1e9))
    load_read_only(d, tmp, precision, env=env)  # its bert_debug() hashes the weights
    check("model.fingerprint of a read-only model: in the cache folder, not next to the weights",
          os.path.isfile(os.path.join(os.path.dirname(f), "model.fingerprint")) and
          not os.path.exists(os.path.join(d, "model.fingerprint")),
          str(os.listdir(os.path.dirname(f))))
    # stale temporary files of a killed writer, in the cache folder
    check_stale_temps(d, name, None, where=os.path.dirname(f),
                      load=lambda: load_read_only(d, tmp, precision, env=env))


def debug(c):
    """bert_debug() of connection c, parsed."""
    return json.loads(one(c, "SELECT bert_debug()"))


def check_read_only(d, tmp, precision, name, field, want, same_answers):
    """bert_load(d, precision) where the process cannot write d and the
    per-user cache is off (BERTFILL_CACHE_DIR=0): it loads, bert_debug's
    model[field] says want, d/name is not written, and (with same_answers)
    it answers as a load that could write d/name."""
    r = load_read_only(d, tmp, precision)
    if not r:
        return
    desc, model, got = r
    check("%s in a read-only directory loads" % precision, desc.endswith(precision), desc)
    check("... with %s %s (the per-user cache turned off)" % (field, want),
          model[field] == want, model[field])
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
