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
    file: an error naming the file within seconds, never a hang.

Prints "ok NAME" / "FAIL NAME: why" / "skip NAME: why" (tests/run.sh).
"""
import os
import shutil
import signal
import subprocess
import tempfile

from bftest import DERIVED_FILES, EXT, TINY, check, exit_code, skip

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
        check("fifo_" + f, rc == 0 and out.split() == ["1", "1"], "%s: %s" % (died_how(rc), out[-300:]))
        shutil.rmtree(d)
    # the machine guard's slot file
    fifo = os.path.join(tmp, "slots")
    os.mkfifo(fifo)
    rc, out = shell(["SELECT bert_fill('我[MASK]你') NOT LIKE '%[MASK]%'"],
                    {"BERTFILL_MODEL": TINY, "BERTFILL_MACHINE_GUARD": "1",
                     "BERTFILL_MACHINE_GUARD_FILE": fifo}, timeout=10)
    check("fifo_machine_guard_file", rc == 0 and "not a regular file" in out and out.splitlines()[0] == "1",
          "%s: %s" % (died_how(rc), out[-300:]))


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
    return exit_code()


if __name__ == "__main__":
    raise SystemExit(main())
