#!/usr/bin/python3
"""t_joint.py — whole-word fills (fill_sequences, bert_fill(text, 'joint'),
bert_score) against the reference, through Python's sqlite3 module:

  * goldens: tests/golden/joint_NAME.json, made by
      /usr/bin/python3 model/reference.py --joint build/models tests/golden
    (the chain rule and the beam search on the float64 PyTorch forward pass).
    Every probability within 1e-4 of the reference (and within 1e-3 of it,
    relatively); the very same fills, rank by rank, wherever the reference's
    margin between the k-th and (k+1)-th partial fill exceeds 1e-4 (two
    rows closer than 1e-4 may swap);
  * one mask: fill_sequences(text, k) has fill_candidates(text, k)'s rows;
  * ties: on a copy of the tiny model whose MLM head gives every text the
    same distribution, with equal probabilities on purpose: ties go to the
    lower token ids, position by position;
  * the cost and the memo: one encoder run per mask (bert_score: one), a
    repeated call runs none and takes microseconds, k is part of the key,
    the cache table keeps the results across connections;
  * several threads at once.

Run by tests/run.sh (BERTFILL_EXT = the extension without .so, BUILD = the
build directory with models/).  Prints "ok NAME" / "FAIL NAME: why" / "skip".
"""
import json
import os
import shutil
import sqlite3
import struct
import sys
import tempfile
import threading
import time

import numpy as np

from bftest import EXT, MODELS, check, exit_code, file_sha256, skip

HERE = os.path.dirname(os.path.abspath(__file__))
TOL = 1e-4


def connect(model, path=":memory:"):
    c = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    c.enable_load_extension(True)
    c.load_extension(EXT)
    c.enable_load_extension(False)
    c.execute("SELECT bert_load(?)", (model,)).fetchone()
    return c


def counters(c):
    return json.loads(c.execute("SELECT bert_stats()").fetchone()[0])["counters"]


def rows_of(c, text, k):
    return c.execute("SELECT rank, fill, tokens, token_ids, score, sequence "
                     "FROM fill_sequences(?, ?)", (text, k)).fetchall()


def close(a, b):
    return abs(a - b) <= TOL and abs(a - b) <= 1e-3 * max(abs(b), 1e-30) + 1e-12


# ---------------------------------------------------------------- goldens
def test_golden(name):
    path = os.path.join(HERE, "..", "golden", "joint_%s.json" % name)
    model = os.path.join(MODELS, name)
    with open(path) as f:
        g = json.load(f)
    if file_sha256(os.path.join(model, "model.safetensors")) != g["safetensors_sha256"]:
        check("golden_%s_model" % name, False, "%s is not the model the golden was made from: "
              "rerun model/reference.py --joint" % model)
        return
    c = connect(model)
    c.execute("SELECT bert_cache('off')")
    vocab = [l.rstrip("\n") for l in open(os.path.join(model, "vocab.txt"), encoding="utf-8")]
    for i, fcase in enumerate(g["fills"]):
        text, k, ref, margin = fcase["text"], fcase["k"], fcase["rows"], fcase["margin"]
        tag = "golden_%s_fill%d_%dmasks_k%d" % (name, i, len(ref[0]["ids"]), k)
        toks = json.loads(c.execute("SELECT bert_tokenize(?)", (text,)).fetchone()[0])
        if [vocab.index(t) for t in toks] != fcase["ids"]:
            check(tag + "_tokens", False, "bert_tokenize %r, golden ids %r" % (toks, fcase["ids"]))
            continue
        got = rows_of(c, text, k)
        ok = len(got) == len(ref)
        why = "%d rows, reference %d" % (len(got), len(ref))
        by_ids = {tuple(r["ids"]): r for r in ref}
        for r, row in enumerate(got if ok else []):
            ids, score = json.loads(row[3]), row[4]
            want = ref[r]
            if ids != want["ids"]:
                # the reference's rows closer than TOL to this rank may come in either order
                other = by_ids.get(tuple(ids))
                if margin > TOL and not (other and abs(other["P"] - want["P"]) <= TOL):
                    ok, why = False, "rank %d: %r, reference %r (margin %.1e)" % (
                        r + 1, ids, want["ids"], margin)
                    break
                if not other:          # a near-tie took another path: the score only
                    if abs(score - want["P"]) > TOL:
                        ok, why = False, "rank %d: score %.6g, reference %.6g" % (
                            r + 1, score, want["P"])
                    continue
                want = other
            if not close(score, want["P"]):
                ok, why = False, "rank %d %r: score %.9g, reference %.9g" % (
                    r + 1, ids, score, want["P"])
                break
            if json.loads(row[2]) != [vocab[x] for x in ids]:
                ok, why = False, "rank %d: tokens %s for ids %r" % (r + 1, row[2], ids)
                break
        check(tag, ok, why)
        # bert_score of every reference row: the chain rule on its own
        bad = []
        for want in ref:
            p = c.execute("SELECT bert_score(?, ?)", (text, json.dumps(want["tokens"]))).fetchone()[0]
            if not close(p, want["P"]):
                bad.append("%r: %.9g, reference %.9g" % (want["tokens"], p, want["P"]))
        check(tag + "_scores", not bad, "; ".join(bad[:3]))
    for i, s in enumerate(g["scores"]):
        tag = "golden_%s_score%d_%s" % (name, i, "json" if s["answer"].startswith("[") else
                                       "wordpiece" if any(t.startswith("##") for t in s["tokens"])
                                       else "text")
        if not s["answer"].startswith("["):
            toks = json.loads(c.execute("SELECT bert_tokenize(?)", (s["answer"],)).fetchone()[0])
            if toks[1:-1] != s["tokens"]:
                check(tag, False, "the answer tokenizes to %r, golden %r" % (toks, s["tokens"]))
                continue
        p = c.execute("SELECT bert_score(?, ?)", (s["text"], s["answer"])).fetchone()[0]
        check(tag, close(p, s["P"]), "%.9g, reference %.9g" % (p, s["P"]))
    c.close()


# ---------------------------------------------------------------- one mask
def test_one_mask(model):
    c = connect(model)
    bad = []
    for text in ["今天天气真[MASK]啊", "[MASK]", "我们去山里看[MASK]花", "他说[MASK]"]:
        for k in (1, 2, 5, 10, 37, 100):
            a = c.execute("SELECT token_id, token, score, sequence FROM fill_candidates(?, ?)",
                          (text, k)).fetchall()
            b = [(json.loads(r[3])[0], r[1], r[4], r[5]) for r in rows_of(c, text, k)]
            if a != b:
                bad.append("%s k=%d" % (text, k))
    check("one_mask_rows_are_fill_candidates", not bad, ", ".join(bad))
    c.close()


# ---------------------------------------------------------------- ties
def read_st(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n]), bytearray(raw[8 + n:]), raw[:8 + n]


def tie_model(src, dst, mask_logit=0.0, flat=True):
    """tiny with a head that ignores the text: LayerNorm weight and bias 0,
    so the logits are cls.predictions.bias, set to: 5 at ids 100 and 200, 4
    at 150 and 300, mask_logit at [MASK] (id 4), 0 elsewhere.  Every mask has
    the same distribution with exact ties (no rounding can break them).
    flat=False: the head as it is, only mask_logit added to the bias of
    [MASK]."""
    shutil.copytree(src, dst)
    header, data, head = read_st(os.path.join(src, "model.safetensors"))

    def put(name, values):
        t = header[name]
        assert t["dtype"] == "F32", t
        lo, hi = t["data_offsets"]
        a = np.asarray(values, dtype="<f4").reshape(-1)
        assert a.nbytes == hi - lo
        data[lo:hi] = a.tobytes()

    names = list(header)
    ln = [n for n in names if "predictions.transform.LayerNorm" in n]
    bias = [n for n in names if n.endswith("predictions.bias")]
    assert len(ln) == 2 and len(bias) == 1, names
    if flat:
        for n in ln:
            put(n, np.zeros(header[n]["shape"]))
        b = np.zeros(header[bias[0]]["shape"])
        b[100] = b[200] = 5.0
        b[150] = b[300] = 4.0
        b[4] = mask_logit
    else:
        lo, hi = header[bias[0]]["data_offsets"]
        b = np.frombuffer(bytes(data[lo:hi]), dtype="<f4").astype(np.float64)
        b[4] += mask_logit
    put(bias[0], b)
    with open(os.path.join(dst, "model.safetensors"), "wb") as f:
        f.write(head + bytes(data))


def test_ties(tmp):
    d = os.path.join(tmp, "ties")
    tie_model(os.path.join(MODELS, "tiny"), d)
    c = connect(d)
    c.execute("SELECT bert_cache('off')")
    one = [r[0] for r in c.execute("SELECT token_id FROM fill_candidates('[MASK]', 4)")]
    check("ties_one_mask_lower_id_first", one == [100, 200, 150, 300], repr(one))
    got = [json.loads(r[3]) for r in rows_of(c, "[MASK]好[MASK]", 5)]
    want = [[100, 100], [100, 200], [200, 100], [200, 200], [100, 150]]
    check("ties_two_masks_position_by_position", got == want, repr(got))
    got = [json.loads(r[3]) for r in rows_of(c, "[MASK][MASK][MASK]", 3)]
    check("ties_three_masks", got == [[100, 100, 100], [100, 100, 200], [100, 200, 100]], repr(got))
    scores = [r[4] for r in rows_of(c, "[MASK]好[MASK]", 4)]
    check("ties_equal_scores", len(set(scores)) == 1, repr(scores))
    got = [json.loads(r[3]) for r in rows_of(c, "[MASK][MASK]", 1)]
    check("ties_k1_greedy_lowest", got == [[100, 100]], repr(got))
    c.close()
    # [MASK] itself the most probable fill: that mask stays open in the next texts
    d = os.path.join(tmp, "ties-mask")
    tie_model(os.path.join(MODELS, "tiny"), d, mask_logit=6.0)
    c = connect(d)
    c.execute("SELECT bert_cache('off')")
    rows = rows_of(c, "[MASK]好[MASK]", 3)
    got = [json.loads(r[3]) for r in rows]
    p4 = c.execute("SELECT score FROM fill_candidates('[MASK]', 1)").fetchone()[0]
    check("mask_as_fill", got == [[4, 4], [4, 100], [4, 200]] and abs(rows[0][4] - p4 * p4) < 1e-12
          and rows[0][5] == "[MASK]好[MASK]", repr(rows))
    s = c.execute("SELECT bert_score('[MASK]好[MASK]', '[\"[MASK]\",\"[MASK]\"]')").fetchone()[0]
    check("mask_as_answer", abs(s - p4 * p4) < 1e-12, "%r vs %r" % (s, p4 * p4))
    c.close()
    # ... and on a head that reads the text: a fill [MASK], t has P = p_1([MASK]) p_2(t) of
    # the text itself (m_1 stays a mask), i.e. fill_candidates' scores at masks 0 and 1
    d = os.path.join(tmp, "mask-likely")
    tie_model(os.path.join(MODELS, "tiny"), d, mask_logit=30.0, flat=False)
    c = connect(d)
    c.execute("SELECT bert_cache('off')")
    text = "我们[MASK]天去[MASK]里"
    per = {(r[0], r[1]): r[2] for r in c.execute(
        "SELECT mask, token_id, score FROM fill_candidates(?, 600)", (text,))}
    rows = rows_of(c, text, 5)
    masked = [(json.loads(r[3]), r[4]) for r in rows if json.loads(r[3])[0] == 4]
    bad = [(ids, p) for ids, p in masked
           if abs(p - per[(0, 4)] * per[(1, ids[1])]) > 1e-4 * p]
    check("mask_as_fill_reads_the_right_mask", masked and not bad and per[(0, 4)] > 0.5,
          "%r %r p([MASK]) %.3f" % (masked, bad, per[(0, 4)]))
    c.close()


# ---------------------------------------------------------------- cost and memo
def test_cost_and_memo(model, tmp):
    path = os.path.join(tmp, "memo.db")
    c = connect(model, path)
    c.execute("SELECT bert_cache('on')")
    c.execute("SELECT bert_cache('clear')")
    c.execute("SELECT bert_stats_reset()")
    text = "我们[MASK]天去[MASK]里看[MASK]花[MASK]"
    rows = rows_of(c, text, 5)
    v = counters(c)
    check("cost_runs_per_mask", v["joint_runs"] == 4 and v["encoder_runs"] == 4 and
          v["seqs"] == 1 + 5 * 3 and v["joint_misses"] == 1 and v["joint_calls"] == 1, repr(v))
    check("cost_no_per_mask_counters", v["calls"] == 0 and v["miss"] == 0, repr(v))
    again = rows_of(c, text, 5)
    v2 = counters(c)
    check("memo_same_rows", again == rows)
    check("memo_no_encoder", v2["encoder_runs"] == 4 and v2["joint_hits"] == 1, repr(v2))
    t0 = time.perf_counter()
    for _ in range(50):
        c.execute("SELECT bert_fill(?, 'joint')", (text,)).fetchone()
    per_call = (time.perf_counter() - t0) / 50
    check("memo_microseconds", per_call < 2e-3, "%.0f us per cached call" % (per_call * 1e6))
    check("memo_bert_fill_joint_shares_k5", counters(c)["encoder_runs"] == 4)
    rows_of(c, text, 3)
    v3 = counters(c)
    check("memo_k_in_key", v3["joint_misses"] == 2 and v3["encoder_runs"] == 8, repr(v3))
    # per-mask results are other entries: fill_candidates still misses
    c.execute("SELECT * FROM fill_candidates(?)", (text,)).fetchall()
    v4 = counters(c)
    check("memo_apart_from_per_mask", v4["miss"] == 1 and v4["hit_lru"] == 0, repr(v4))
    # bert_score: one run for all masks, then memoized
    p1 = c.execute("SELECT bert_score(?, '好山水天')", (text,)).fetchone()[0]
    v5 = counters(c)
    p2 = c.execute("SELECT bert_score(?, '好山水天')", (text,)).fetchone()[0]
    v6 = counters(c)
    check("score_one_run", v5["joint_runs"] - v4["joint_runs"] == 1 and
          v5["seqs"] - v4["seqs"] == 4, repr(v5))
    check("score_memo", p1 == p2 and v6["encoder_runs"] == v5["encoder_runs"] and
          v6["joint_hits"] == v5["joint_hits"] + 1, repr(v6))
    p3 = c.execute("SELECT bert_score(?, '好山水水')", (text,)).fetchone()[0]
    check("score_answer_in_key", p3 != p1 and counters(c)["joint_runs"] == v6["joint_runs"] + 1)
    keys = [r[0] for r in c.execute("SELECT hex(substr(key, 1, 4)) FROM bertfill_cache")]
    check("table_tagged_keys", keys.count("FEFFFFFF") == 2 and keys.count("FDFFFFFF") == 2 and
          len(keys) == 5, repr(keys))
    st = {r[0]: r[1] for r in c.execute("SELECT name, count FROM bertfill_stats")}
    check("stats_joint_stage", st["joint"] == counters(c)["joint_calls"] and st["joint"] >= 56,
          repr(st["joint"]))
    c.close()
    # another connection (the LRU emptied): from the table
    c = connect(model, path)
    c.execute("SELECT bert_cache_lru(1)").fetchone()
    c.execute("SELECT bert_cache_lru(10000)").fetchone()
    v0 = counters(c)
    again = rows_of(c, text, 5)
    p4 = c.execute("SELECT bert_score(?, '好山水天')", (text,)).fetchone()[0]
    v1 = counters(c)
    check("table_hit_after_reconnect", again == rows and p4 == p1 and
          v1["encoder_runs"] == v0["encoder_runs"], repr((v0, v1)))
    c.close()


def test_threads(model):
    texts = ["线程%d：我们[MASK]天去[MASK]里" % i for i in range(8)]
    c = connect(model)
    c.execute("SELECT bert_cache('off')")
    want = {t: rows_of(c, t, 4) for t in texts}
    c.close()
    errors, bad = [], []

    def work(i):
        try:
            cc = connect(model)
            cc.execute("SELECT bert_cache('off')")
            for t in texts[i:] + texts[:i]:
                got = rows_of(cc, t, 4)
                if [r[3] for r in got] != [r[3] for r in want[t]] or \
                        any(abs(a[4] - b[4]) > 1e-5 for a, b in zip(got, want[t])):
                    bad.append(t)
            cc.close()
        except Exception as e:  # noqa: BLE001 — reported below
            errors.append(repr(e))

    th = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    check("threads_same_results", not errors and not bad, "%r %r" % (errors[:2], bad[:2]))


def main():
    if not os.path.exists(EXT + ".so"):
        print("FAIL t_joint: %s.so not built" % EXT)
        return 1
    tiny = os.path.join(MODELS, "tiny")
    if not os.path.exists(os.path.join(tiny, "model.safetensors")):
        print("skip t_joint: no test models in %s (run make models)" % MODELS)
        return 0
    for name in ("tiny", "small"):
        if os.path.exists(os.path.join(MODELS, name, "model.safetensors")):
            test_golden(name)
        else:
            skip("golden_" + name, "no model %s (make models)" % name)
    test_one_mask(tiny)
    with tempfile.TemporaryDirectory() as tmp:
        test_ties(tmp)
        test_cost_and_memo(tiny, tmp)
    test_threads(tiny)
    return exit_code()


if __name__ == "__main__":
    sys.exit(main())
