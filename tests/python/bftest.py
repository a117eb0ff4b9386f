"""bftest.py — what the Python test suites share: where the build, the test
models and the extension are, and the check lines tests/run.sh counts
("ok NAME", "FAIL NAME: why", "skip NAME: why"), and error_of."""
import hashlib
import os
import sqlite3
import sys

BUILD = os.environ.get("BUILD", "build")
MODELS = os.path.abspath(os.path.join(BUILD, "models"))
EXT = os.path.abspath(os.environ.get("BERTFILL_EXT", "./bertfill"))
TINY = os.path.join(MODELS, "tiny")

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
