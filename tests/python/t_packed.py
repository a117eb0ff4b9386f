#!/usr/bin/python3
"""t_packed.py — the packed fp32 weights through SQL: model.packed.safetensors
(made by the first fp32 load where the kernels read panels, i.e. AVX-512;
reused; made again when stale or damaged; never required: BERTFILL_PACKED=0,
a directory the process cannot write, or a CPU without AVX-512 leave the
products reading the weights in place), bert_debug's packed_weights, an
error (never a crash) when the file changes under a loaded model, and the
same answers either way (to float rounding: the sums run in another order).

Each check copies a test model into a temporary directory, so that the file
it writes never lands in build/models.  Through /usr/bin/python3's sqlite3.
Run by tests/run.sh; prints "ok NAME" / "FAIL NAME: why" / "skip NAME: why".
"""
import json
import os
import shutil
import sys
import tempfile

from bftest import (MODELS, TINY, check, check_derived_file, check_cache_dir, check_read_only, connect, copy_model,
                    debug, exit_code, fresh_load, one, skip)

PACKED = "model.packed.safetensors"
TEXTS = ["我[MASK]你", "今天天气真[MASK]啊，适合出去玩。", "学习要持之以恒，不能三天打鱼，两天[MASK]。"]


def answers(c):
    one(c, "SELECT bert_cache('off')")
    return [c.execute("SELECT token, score FROM fill_candidates(?, 5) ORDER BY mask, rank",
                      (t,)).fetchall() for t in TEXTS]


def close_enough(a, b, tol=2e-5):
    """Same tokens in the same order, scores within tol."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if [t for t, _ in x] != [t for t, _ in y]:
            return False
        if any(abs(p - q) > tol for (_, p), (_, q) in zip(x, y)):
            return False
    return True


def in_place_answers(d):
    """The answers with the weights read in place, from a fresh process:
    (packed_weights, answers), or (None, None) after a failed check."""
    r = fresh_load(d, "fp32", TEXTS, env=dict(os.environ, BERTFILL_PACKED="0"))
    return (r[1]["model"]["packed_weights"], r[2]) if r else (None, None)


def test_file(tmp, model):
    d = copy_model(model, tmp, "file-" + os.path.basename(model))
    name = os.path.basename(model)
    c = connect()
    one(c, "SELECT bert_load(?)", (d,))
    dbg = debug(c)["model"]
    check("%s: bert_debug: packed weights from the file" % name,
          dbg.get("packed_weights") == "file", str(dbg))
    p = os.path.join(d, PACKED)
    check("%s: the first fp32 load writes %s" % (name, PACKED), os.path.exists(p))
    left = [f for f in os.listdir(d) if ".tmp." in f]
    check("%s: no temporary file left behind" % name, not left, str(left))
    got = answers(c)
    c.close()
    src, ref = in_place_answers(d)
    check("%s: BERTFILL_PACKED=0: weights read in place" % name,
          src == "in place (BERTFILL_PACKED=0)", str(src))
    check("%s: packed and in place give the same answers (scores within 2e-5)" % name,
          ref is not None and close_enough([[tuple(x) for x in r] for r in got], ref),
          "%s vs %s" % (got, ref))
    ino = os.stat(p).st_ino
    c = connect()
    one(c, "SELECT bert_load(?)", (d,))
    check("%s: a later load reuses the file (not rewritten)" % name, os.stat(p).st_ino == ino)
    check("%s: ... same answers, bit for bit" % name, answers(c) == got)
    one(c, "SELECT bert_load(?, 'int8')", (d,))
    check("%s: int8 has no packed weights" % name, debug(c)["model"].get("packed_weights") == "",
          str(debug(c)["model"]))
    c.close()


def test_stale_and_damaged(tmp):
    check_derived_file(copy_model(TINY, tmp, "stale"), PACKED, "SELECT bert_load(?)", answers,
                       made=lambda c: debug(c)["model"].get("packed_weights") == "file")


def test_read_only(tmp):
    """A directory the process cannot write: the weights read in place."""
    check_read_only(copy_model(TINY, tmp, "ro"), tmp, "fp32", PACKED, "packed_weights",
                    "in place (neither the directory nor the cache directory could be written)",
                    same_answers=False)


def test_cache_dir(tmp):
    """A directory the process cannot write (a model installed read-only): the
    file goes to the per-user cache directory, shared by the next process."""
    check_cache_dir(copy_model(TINY, tmp, "cache-dir"), tmp, "fp32", PACKED, "packed_weights")


def test_env_off(tmp):
    d = copy_model(TINY, tmp, "off")
    src, _ = in_place_answers(d)
    check("BERTFILL_PACKED=0: in place", src == "in place (BERTFILL_PACKED=0)", str(src))
    check("BERTFILL_PACKED=0: no file written", not os.path.exists(os.path.join(d, PACKED)))


def main():
    if not os.path.exists(os.path.join(TINY, "model.safetensors")):
        skip("packed", "test models missing (make models)")
        return 0
    c = connect()
    gemm = json.loads(one(c, "SELECT bert_debug()")).get("gemm")
    c.close()
    tmp = tempfile.mkdtemp(prefix="bf-packed-")
    try:
        if gemm != "avx512":
            # the kernels have no use for panels: nothing is made, and it says so
            d = copy_model(TINY, tmp, "no-avx512")
            c = connect()
            one(c, "SELECT bert_load(?)", (d,))
            src = debug(c)["model"].get("packed_weights")
            c.close()
            check("without AVX-512 kernels: weights in place, saying why",
                  src == "in place (no AVX-512 kernels)", str(src))
            check("without AVX-512 kernels: no file written",
                  not os.path.exists(os.path.join(d, PACKED)))
            skip("packed file", "the %s kernels read the weights in place" % gemm)
            return exit_code()
        for m in ("tiny", "small"):
            if os.path.isdir(os.path.join(MODELS, m)):
                test_file(tmp, os.path.join(MODELS, m))
        for t in (test_stale_and_damaged, test_read_only, test_cache_dir, test_env_off):
            t(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return exit_code()


if __name__ == "__main__":
    sys.exit(main())
