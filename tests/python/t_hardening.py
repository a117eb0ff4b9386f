#!/usr/bin/python3
"""t_hardening.py — nothing outside the process can crash or hang it.

bertfill runs inside someone else's process (a shell, a web app, a
database node), so a file that changes under it must give an SQL error,
never SIGBUS, and a file that is not a regular file must be refused, never
block.  Each check runs the real sqlite3 shell (or Python) in a child
process with a time limit, so a crash shows as its signal and a hang as a
timeout instead of taking this suite down:

  * truncated weights after bert_load: fp32 and int8 x warm-up on/off x
    cache off/memory/on, with and without a first call before the
    truncation (so that the fingerprint is known or must be computed from
    the shrunk file), and truncated right after bert_load while the warm-up
    threads may still be reading: exit status 1 and the documented
    "changed on disk" error, never a signal;
  * a FIFO (and a directory) in place of each file of a model directory,
    through bert_load and BERTFILL_MODEL, and as the machine guard's slot
    file: an error naming the file within seconds, never a hang;
  * fork() while other threads are inside bert_fill (one in the encoder,
    one queued for it): the child's own calls are answered, never "busy"
    forever on the parent's runs and queue (guard.c, batcher.c), never a
    hang on a lock another thread held at the fork.

Prints "ok NAME" / "FAIL NAME: why" / "skip NAME: why" (tests/run.sh).
"""
import json
import os
import shutil
import signal
import subprocess
import tempfile

from bftest import DERIVED_FILES, EXT, MODELS, TINY, check, exit_code, run_client, skip

SQLITE3 = shutil.which("sqlite3")
MODEL_FILES = ("config.json", "vocab.txt", "tokenizer_config.json", "model.safetensors")
TIMEOUT = 30


def copy_model(tmp, name="m"):
    d = os.path.join(tmp, name)
    os.mkdir(d)
    for f in os.listdir(TINY):
        if f in DERIVED_FILES:
            continue
        shutil.copy(os.path.join(TINY, f), d)
    return d


def shell(args, env_extra=None, timeout=TIMEOUT):
    """Run the sqlite3 shell on :memory: with args; (returncode, output).
    A signal is a negative return code; a hang is "timeout"."""
    env = dict(os.environ)
    env.pop("BERTFILL_MODEL", None)
    env.update(env_extra or {})
    try:
        r = subprocess.run([SQLITE3, ":memory:", ".load " + EXT] + args, env=env, timeout=timeout,
                           stdin=subprocess.DEVNULL, capture_output=True, text=True)
    except subprocess.TimeoutExpired:
        return "timeout", ""
    return r.returncode, r.stdout + r.stderr


def died_how(rc):
    if rc == "timeout":
        return "hung (no answer in %d s)" % TIMEOUT
    if isinstance(rc, int) and rc < 0:
        return "killed by %s" % signal.Signals(-rc).name
    return "exit status %s" % rc


def test_truncation(tmp):
    n = 0
    for precision in ("fp32", "int8", "bf16"):
        for warm in ("0", "1"):
            for cache in ("off", "memory", "on"):
                for first_call in (False, True):
                    for size in (4096, 0):
                        n += 1
                        d = copy_model(tmp, "t%d" % n)
                        st = os.path.join(d, "model.safetensors")
                        fill = "SELECT bert_fill('今天天气真[MASK]啊')"
                        args = ["SELECT bert_load('%s', '%s') IS NOT NULL" % (d, precision)]
                        if first_call:
                            args.append(fill)
                        args += [".shell truncate -s %d %s" % (size, st), fill]
                        rc, out = shell(args, {"BERTFILL_WARM_UP": warm, "BERTFILL_CACHE": cache})
                        name = "truncated_%s_warmup%s_cache_%s_%s_to_%d" % (
                            precision, warm, cache, "after_a_call" if first_call else "first_call",
                            size)
                        check(name, rc == 1 and "changed on disk after it was loaded" in out,
                              "%s: %s" % (died_how(rc), out[-300:]))
                        shutil.rmtree(d)
    # truncated at once, while the warm-up threads may still be reading
    # the pages and hashing (no call at all: the process then exits)
    for i in range(20):
        d = copy_model(tmp, "w%d" % i)
        st = os.path.join(d, "model.safetensors")
        rc, out = shell(["SELECT bert_load('%s') IS NOT NULL" % d, ".shell truncate -s 0 " + st,
                         ".shell sleep 0.05"], {"BERTFILL_WARM_UP": "1", "BERTFILL_CACHE": "on"})
        if rc != 0:
            check("truncated_during_warm_up", False, "%s: %s" % (died_how(rc), out[-300:]))
            break
        shutil.rmtree(d)
    else:
        check("truncated_during_warm_up", True)


def test_fifos(tmp):
    for f in MODEL_FILES + ("tokenizer.json",):
        for kind in ("fifo", "dir"):
            d = copy_model(tmp, "%s-%s" % (kind, f))
            p = os.path.join(d, f)
            if os.path.exists(p):
                os.unlink(p)
            os.mkfifo(p) if kind == "fifo" else os.mkdir(p)
            rc, out = shell(["SELECT bert_load('%s')" % d], timeout=10)
            check("%s_%s" % (kind, f), rc == 1 and "%s: not a regular file" % p in out,
                  "%s: %s" % (died_how(rc), out[-300:]))
            if f == "config.json" and kind == "fifo":
                rc, out = shell(["SELECT bert_fill('我[MASK]你')"], {"BERTFILL_MODEL": d}, timeout=10)
                check("fifo_through_BERTFILL_MODEL", rc == 1 and "not a regular file" in out,
                      "%s: %s" % (died_how(rc), out[-300:]))
            shutil.rmtree(d)
    # the files bertfill writes next to the weights: a FIFO there is ignored
    # (model.fingerprint) or replaced (model.int8.safetensors,
    # model.packed.safetensors, model.bf16.safetensors), never waited on
    for f, precision in (("model.fingerprint", "fp32"), ("model.int8.safetensors", "int8"),
                         ("model.packed.safetensors", "fp32"), ("model.bf16.safetensors", "bf16")):
        d = copy_model(tmp, "fifo-" + f)
        os.mkfifo(os.path.join(d, f))
        rc, out = shell(["SELECT bert_load('%s', '%s') IS NOT NULL" % (d, precision),
                         "SELECT bert_fill('今天天气真[MASK]啊') NOT LIKE '%[MASK]%'"],
                        {"BERTFILL_CACHE": "on"}, timeout=10)
        # (on a CPU without AVX512-BF16 bf16 also warns that it runs a slow loop)
        said = [l for l in out.splitlines() if l.strip() and not l.startswith("bertfill: bf16 runs")]
        check("fifo_" + f, rc == 0 and said == ["1", "1"], "%s: %s" % (died_how(rc), out[-300:]))
        shutil.rmtree(d)
    # the machine guard's slot file
    fifo = os.path.join(tmp, "slots")
    os.mkfifo(fifo)
    rc, out = shell(["SELECT bert_fill('我[MASK]你') NOT LIKE '%[MASK]%'"],
                    {"BERTFILL_MODEL": TINY, "BERTFILL_MACHINE_GUARD": "1",
                     "BERTFILL_MACHINE_GUARD_FILE": fifo}, timeout=10)
    check("fifo_machine_guard_file", rc == 0 and "not a regular file" in out and out.splitlines()[0] == "1",
          "%s: %s" % (died_how(rc), out[-300:]))

# Two threads call bert_fill in a loop (one in the encoder, the other queued
# for it); the main thread forks while both are inside a call (their calls
# began before the fork and ended after it: checked, else the fork does not
# count), and the child calls bert_fill once on a connection of its own.
# Prints {"proved": forks that counted, "results": the child's answers}.
FORK_CLIENT = """
import ctypes, json, os, random, sqlite3, sys, threading, time
ext = sys.argv[1]
# SQLite's allocator takes a lock of its own for its memory statistics: a
# thread inside SQLite at the fork would leave it taken in the child, a hang
# of SQLite's (it says not to fork with threads), not bertfill's.  Off.
lib = ctypes.CDLL("libsqlite3.so.0")
if lib.sqlite3_shutdown() or lib.sqlite3_config(9, ctypes.c_int(0)) or lib.sqlite3_initialize():
    raise SystemExit("cannot turn SQLite's memory statistics off")  # 9: SQLITE_CONFIG_MEMSTATUS
rng = random.Random(5)
def text():
    return "".join(chr(rng.randrange(0x4E00, 0x4F00)) for _ in range(60)) + "[MASK]" + \
        "".join(chr(rng.randrange(0x4E00, 0x4F00)) for _ in range(60))
def conn():
    c = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    c.enable_load_extension(True)
    c.load_extension(ext)
    return c
stop = False
spans = {0: [], 1: []}
def work(i):
    c = conn()
    r = random.Random(i)
    while not stop:
        t = "".join(chr(r.randrange(0x4E00, 0x9F00)) for _ in range(120)) + "[MASK]"
        t0 = time.monotonic()
        c.execute("select bert_fill(?)", (t,)).fetchall()
        spans[i].append((t0, time.monotonic()))
ths = [threading.Thread(target=work, args=(i,)) for i in (0, 1)]
for t in ths: t.start()
dbg = conn()
while min(len(s) for s in spans.values()) < 3:
    if not all(t.is_alive() for t in ths):
        raise SystemExit("a calling thread failed")
    time.sleep(0.01)
results, proved, tries = [], 0, 0
while proved < 3 and tries < 200:
    tries += 1
    d = json.loads(dbg.execute("select bert_debug()").fetchone()[0])
    if d["guard"]["in_flight"] < 1: continue
    rd, wr = os.pipe()
    t_fork = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(rd)
        try:
            c = conn()
            c.execute("select bert_busy_timeout(1000)").fetchall()
            got = "ok: " + c.execute("select bert_fill(?)", (text(),)).fetchone()[0][:8]
        except Exception as e:
            got = "error: " + str(e)
        os.write(wr, got.encode())
        os._exit(0)
    os.close(wr)
    deadline = time.monotonic() + 30
    st = None
    while True:
        w = os.waitpid(pid, os.WNOHANG)
        if w != (0, 0):
            st = w[1]
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9); os.waitpid(pid, 0); break
        time.sleep(0.01)
    got = os.read(rd, 4096).decode() or ("hung" if st is None else "died: status %d" % st)
    os.close(rd)
    # the fork counts when both callers were inside bert_fill at the fork
    while not all(s and s[-1][1] > t_fork for s in spans.values()): time.sleep(0.005)
    inside = all(any(a < t_fork < b for a, b in s) for s in spans.values())
    if inside:
        proved += 1
        results.append(got)
stop = True
for t in ths: t.join()
print(json.dumps({"proved": proved, "tries": tries, "results": results}))
"""


def test_fork_in_encoder():
    env = dict(os.environ, BERTFILL_MODEL=os.path.join(MODELS, "small"),
               BERTFILL_SHARED_BATCH="0")  # else the parent could answer the child
    r = run_client(FORK_CLIENT, [], env=env)
    try:
        out = json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        check("fork_in_encoder", False, "client failed: %s" % (r.stdout + r.stderr)[-500:])
        return
    if out["proved"] < 3:
        skip("fork_in_encoder", "no fork landed inside both calls in %d tries" % out["tries"])
        return
    bad = [x for x in out["results"] if not x.startswith("ok: ")]
    check("fork_in_encoder", not bad, "the child's call failed: %s" % bad)


def main():
    if not SQLITE3:
        skip("hardening", "no sqlite3 shell (apt-get install sqlite3)")
        return 0
    if not os.path.isdir(TINY):
        skip("hardening", "no test models in %s (make models)" % TINY)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        test_truncation(tmp)
        test_fifos(tmp)
    test_fork_in_encoder()
    return exit_code()


if __name__ == "__main__":
    raise SystemExit(main())
