#!/usr/bin/python3
"""bertfill's int8 mode against its fp32 on a trained model, through SQL.

    /usr/bin/python3 model/agreement.py                       # model/bertfill-zh-tiny, ./bertfill.so
    /usr/bin/python3 model/agreement.py --model DIR --ext ./bertfill.so --idioms 2000 --seed 7 --json OUT.json
    /usr/bin/python3 model/agreement.py --modes fp32,bf16     # bf16 against fp32 instead
    /usr/bin/python3 model/agreement.py --modes fp32,fp32     # checks this script: must agree 100%

The items of model/evaluate.py (GSDSimp: every sentence of eval/gsdsimp.txt with
one Han character masked; the 1000 everyday held-out lines the same way;
idioms: the --idioms most frequent, one character masked, bare and in the
carrier sentence), each filled by two connections of
the SQLite extension: one with SELECT bert_load(dir) (fp32; BERTFILL_PRECISION
is ignored here) and one with SELECT bert_load(dir, 'int8'), both with
bert_cache('off'), the top 5 from fill_candidates(text, 5).  For each task and
over all items it prints:
  agreement of int8 with fp32 (as the agreement table of `make bench`,
  tests/bench/report.py): top-1 agreement, top-5 overlap (mean |A ∩ B| / 5),
  max and median |Δp| of the top-1 probability (each mode's own top 1);
  top-1 and top-5 accuracy of each mode (the masked character among the
  candidates), as model/evaluate.py counts it;
and the targets of issue 11: GSDSimp top-1 agreement ≥ 98%, top-5 accuracy
within 1 point of fp32.

GSDSimp and everyday items are token ids (evaluate.py cuts long sentences to a window of
them); they are written back as text, one token after another with a space
between (BertTokenizer splits there anyway, "##" pieces joined), and checked
with bert_tokenize: items that do not come back as the same tokens are left
out and counted.

Skips (exit status 0, saying why) when the extension has no int8 mode, or
when the evaluation data (../shared/data/corpus-zh/eval) is not there.
"""
import argparse
import json
import os
import sqlite3
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def agreement_stats(pairs):
    """pairs: [((ids_a, probs_a), (ids_b, probs_b)), ...], one per [MASK], top 5 each (best first).
    -> {"n", "top1_same", "top1_pct", "top5_overlap", "dp_max", "dp_median"}, or None for no pairs.
    The one copy: tests/bench/report.py (the agreement table of make bench) imports it."""
    if not pairs:
        return None
    same = sum(1 for (ia, _), (ib, _) in pairs if ia[0] == ib[0])
    overlap = statistics.fmean(len(set(ia[:5]) & set(ib[:5])) / 5 for (ia, _), (ib, _) in pairs)
    dp = [abs(pa[0] - pb[0]) for (_, pa), (_, pb) in pairs]
    return {"n": len(pairs), "top1_same": same, "top1_pct": 100.0 * same / len(pairs),
            "top5_overlap": overlap, "dp_max": max(dp), "dp_median": statistics.median(dp)}


def skip(why):
    print(f"agreement.py: skipped: {why}")
    sys.exit(0)


def find(obj, key):
    """The first value of key anywhere in a parsed JSON object."""
    if isinstance(obj, dict):
        if key in obj:
            return obj[key]
        obj = list(obj.values())
    if isinstance(obj, list):
        for x in obj:
            v = find(x, key)
            if v is not None:
                return v
    return None


def connect(ext, model, mode):
    """A connection whose model is model in mode ('fp32': bert_load(dir); else bert_load(dir, mode)),
    cache off.  sqlite3.Error when the extension refuses."""
    db = sqlite3.connect(":memory:")
    db.enable_load_extension(True)
    db.load_extension(ext)
    db.enable_load_extension(False)
    db.execute("SELECT bert_cache('off')")
    if mode == "fp32":
        db.execute("SELECT bert_load(?)", (model,))
    else:
        db.execute("SELECT bert_load(?, ?)", (model, mode))
        got = find(json.loads(db.execute("SELECT bert_debug()").fetchone()[0]), "precision")
        if got != mode:
            sys.exit(f"agreement.py: bert_load(dir, '{mode}') gave a model whose bert_debug() precision is {got!r}")
    return db


def top5(db, text):
    """(ids, probs) of the top 5 at the text's one [MASK]."""
    rows = db.execute("SELECT token_id, score FROM fill_candidates(?, 5) ORDER BY rank", (text,)).fetchall()
    return [r[0] for r in rows], [r[1] for r in rows]


def detokenize(tok, ids):
    """Token ids with [CLS]/[SEP] -> a text that BertTokenizer splits into the same tokens."""
    out = []
    for i in ids[1:-1]:
        t = tok.itos[i]
        if t.startswith("##") and out:
            out[-1] += t[2:]
        else:
            out.append(t)
    return " ".join(out)


def main():
    ap = argparse.ArgumentParser(description="bertfill int8 against fp32 on a trained model, through SQL")
    ap.add_argument("--model", default=os.path.join(HERE, "bertfill-zh-tiny"))
    ap.add_argument("--ext", default=os.path.join(ROOT, "bertfill.so"))
    ap.add_argument("--eval-dir", default=os.path.join(ROOT, "..", "shared", "data", "corpus-zh", "eval"))
    ap.add_argument("--idioms", type=int, default=2000, help="the N most frequent idioms")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--modes", default="fp32,int8", help="the two modes compared (second against first)")
    ap.add_argument("--json", help="also write every number to this file")
    a = ap.parse_args()
    base_mode, test_mode = a.modes.split(",")
    os.environ.pop("BERTFILL_PRECISION", None)   # bert_load(dir) is fp32 here

    for p in ("gsdsimp.txt", "idioms.txt"):
        if not os.path.exists(os.path.join(a.eval_dir, p)):
            skip(f"{os.path.join(a.eval_dir, p)} not found (the corpus-zh evaluation data is needed)")
    if not os.path.exists(a.ext):
        sys.exit(f"agreement.py: {a.ext} not found: run make first")
    try:
        dbs = {m: connect(a.ext, a.model, m) for m in (base_mode, test_mode)}
    except sqlite3.Error as e:
        skip(f"{a.ext} has no {test_mode} mode: SELECT bert_load(dir, '{test_mode}') failed: {e}")

    sys.path.insert(0, HERE)
    import build_vocab   # noqa: E402
    import evaluate      # noqa: E402  (the items; imports torch)
    t0 = time.time()
    with open(os.path.join(a.model, "config.json")) as f:
        maxlen = json.load(f)["max_position_embeddings"]
    sc = argparse.Namespace(tok=build_vocab.Tokenizer(a.model), maxlen=maxlen)
    a.corpus = build_vocab.DEFAULT_CORPUS     # the everyday held-out lines (model/heldout.py)
    tasks = []
    for key, (items, targets, texts) in evaluate.task_items(sc, evaluate.eval_texts(a), a.seed).items():
        name = dict(evaluate.TASKS)[key].format(n=len(items))
        if key in ("gsdsimp", "everyday"):    # token ids, perhaps a window: written back as text
            tasks.append((name, [detokenize(sc.tok, x) for x in items], targets, items))
        else:
            tasks.append((name, [evaluate.CARRIER.format(t) if key == "carrier" else t for t in texts],
                          targets, None))

    results, all_pairs = [], []
    for name, texts, targets, items in tasks:
        pairs, hits, left_out = [], {base_mode: [0, 0], test_mode: [0, 0]}, 0
        for i, (text, target) in enumerate(zip(texts, targets)):
            if items is not None:   # the text must give back the item's tokens
                seen = json.loads(dbs[base_mode].execute("SELECT bert_tokenize(?)", (text,)).fetchone()[0])
                want = [sc.tok.itos[x] for x in items[i]]
                if [t for t in seen if t not in ("[CLS]", "[SEP]")] != want[1:-1]:
                    left_out += 1
                    continue
            got = {m: top5(db, text) for m, db in dbs.items()}
            tid = sc.tok.stoi.get(target, -1)
            for m, (cand, _) in got.items():
                hits[m][0] += cand[0] == tid
                hits[m][1] += tid in cand
            pairs.append((got[test_mode], got[base_mode]))
        n = len(pairs)
        r = agreement_stats(pairs) or {}
        r.update({"task": name, "items": n, "left_out": left_out,
                  **{f"{m}_top1": 100.0 * h[0] / max(n, 1) for m, h in hits.items()},
                  **{f"{m}_top5": 100.0 * h[1] / max(n, 1) for m, h in hits.items()}})
        results.append(r)
        all_pairs += pairs
    total = agreement_stats(all_pairs)

    print(f"model {os.path.relpath(a.model)}; {a.ext}; {test_mode} against {base_mode}, through SQL "
          f"(fill_candidates(text, 5), cache off); seed {a.seed}; {time.time() - t0:.0f}s")
    print()
    print(f"| task | items | top-1 agreement | top-5 overlap | max \\|Δp\\| top-1 | median \\|Δp\\| top-1 | "
          f"{base_mode} top-1 | {test_mode} top-1 | {base_mode} top-5 | {test_mode} top-5 |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in results:
        lo = f" ({r['left_out']} left out: tokenized differently)" if r["left_out"] else ""
        print(f"| {r['task']}{lo} | {r['items']} | {r['top1_pct']:.1f}% | {100 * r['top5_overlap']:.1f}% | "
              f"{r['dp_max']:.4f} | {r['dp_median']:.4f} | {r[base_mode + '_top1']:.1f}% | "
              f"{r[test_mode + '_top1']:.1f}% | {r[base_mode + '_top5']:.1f}% | {r[test_mode + '_top5']:.1f}% |")
    if total:
        print(f"| all items | {total['n']} | {total['top1_pct']:.1f}% | {100 * total['top5_overlap']:.1f}% | "
              f"{total['dp_max']:.4f} | {total['dp_median']:.4f} | | | | |")
    g = results[0]
    d5 = g[test_mode + "_top5"] - g[base_mode + "_top5"]
    print()
    print(f"target: GSDSimp top-1 agreement ≥ 98%: {g['top1_pct']:.1f}%, "
          f"{'met' if g['top1_pct'] >= 98 else 'missed'}")
    print(f"target: GSDSimp top-5 accuracy within 1 point of {base_mode}: {d5:+.1f} points, "
          f"{'met' if abs(d5) <= 1 else 'missed'}")
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump({"model": a.model, "modes": [base_mode, test_mode], "seed": a.seed, "tasks": results,
                       "all": total}, f, indent=1, ensure_ascii=False)


if __name__ == "__main__":
    main()
