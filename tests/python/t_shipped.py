#!/usr/bin/python3
"""t_shipped.py — the shipped model (model/bertfill-zh-tiny) in the C engine gives the
probabilities of the independent reference on the model card's examples.

tests/golden/shipped.json is made by

    /usr/bin/python3 model/reference.py --shipped model/bertfill-zh-tiny tests/golden/shipped.json TEXT ...

(a float64 PyTorch forward pass written from the architecture, on the committed
F16 weights; the texts are the examples of model/MODEL_CARD.md).  For every
[MASK] of every text, fill_candidates(text, 5) must list the reference's five
tokens, each probability within 1e-4 (two tokens closer than 1e-4 may swap
places).  The golden names the sha256 of the weights it was made from: after
retraining, a stale golden fails here with the command that renews it.
"""
import json
import os
import sqlite3
import sys

from bftest import EXT, check, exit_code, file_sha256, skip

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "model", "bertfill-zh-tiny")
GOLDEN = os.path.join(ROOT, "tests", "golden", "shipped.json")
TOL = 1e-4


def main():
    weights = os.path.join(MODEL, "model.safetensors")
    if not os.path.exists(weights):
        skip("shipped", "model/bertfill-zh-tiny/model.safetensors is missing")
        return exit_code()
    with open(GOLDEN, encoding="utf-8") as f:
        gold = json.load(f)
    same = gold["safetensors_sha256"] == file_sha256(weights)
    check("shipped.golden_matches_weights", same,
          "tests/golden/shipped.json was made from other weights; renew it with "
          "model/reference.py --shipped (see its header)")
    if not same:
        return exit_code()
    c = sqlite3.connect(":memory:")
    c.enable_load_extension(True)
    c.load_extension(EXT)
    c.execute("SELECT bert_load(?)", (MODEL,))
    worst = 0.0
    for n, seq in enumerate(gold["sequences"]):
        text = seq["text"]
        rows = c.execute("SELECT mask, rank, token, score FROM fill_candidates(?, 5) ORDER BY mask, rank",
                         (text,)).fetchall()
        got = {}
        for mask, rank, token, score in rows:
            got.setdefault(mask, []).append((token, score))
        ok, why = len(got) == len(seq["masks"]), "%d masks, the reference has %d" % (len(got), len(seq["masks"]))
        for m, want in enumerate(seq["masks"]):
            if not ok:
                break
            have = got.get(m, [])
            for r, (tok, p) in enumerate(want):
                # the same token at this rank, or a swap with a neighbour closer than TOL
                near = [s for t, s in have if t == tok]
                if not near or abs(near[0] - p) > TOL:
                    ok, why = False, "mask %d rank %d: reference %s %.6f, engine %s" % (m, r + 1, tok, p, have)
                    break
                worst = max(worst, abs(near[0] - p))
                if have[r][0] != tok and abs(have[r][1] - p) > TOL:
                    ok, why = False, "mask %d rank %d: reference %s, engine %s" % (m, r + 1, tok, have)
                    break
        check("shipped.reference.%d %s" % (n, text), ok, why)
    check("shipped.reference.count", len(gold["sequences"]) >= 10,
          "the golden holds %d texts; the card's examples are more" % len(gold["sequences"]))
    print("# largest |engine - reference| probability: %.2e" % worst)
    return exit_code()


if __name__ == "__main__":
    sys.exit(main())
