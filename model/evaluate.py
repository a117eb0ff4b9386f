#!/usr/bin/python3
"""Evaluate masked-character prediction of a BERT model directory (HF layout).

    /usr/bin/python3 model/evaluate.py                                  # model/bertfill-zh-tiny
    /usr/bin/python3 model/evaluate.py --model DIR --idioms 2000 --seed 7
    /usr/bin/python3 model/evaluate.py --probe '今天天气真[MASK]啊' 好   # rank + probability

Text the model never trained on (../shared/data/corpus-zh/eval/):
  gsdsimp   every sentence of eval/gsdsimp.txt (1000, Chinese Wikipedia via UD
            GSDSimp), one Han character chosen at random (fixed seed) replaced
            by [MASK]; sentences over max_position_embeddings tokens are cut to a
            window around the mask.
  idioms    the --idioms most frequent 4-character idioms of eval/idioms.txt, one
            of the four characters chosen at random (fixed seed), masked; scored
            bare ("[CLS] 实事[MASK]是 [SEP]") and inside a neutral carrier
            sentence ("这就叫实事[MASK]是。").
Top-1 / top-5 accuracy over the whole vocabulary softmax.  A target character
that is not in the vocabulary counts as a miss.  Baseline: the unigram
frequency model, which always answers the 5 most frequent Han characters of
the training corpus (../shared/data/corpus-zh/train/) in frequency order.

The model is run by the PyTorch BERT of train.py from the shipped
model.safetensors (F16 weights as shipped), tokenized by build_vocab.Tokenizer
(Hugging Face BertTokenizer semantics).
"""
import os
os.environ.setdefault("OPENBLAS_CORETYPE", "SkylakeX")
import argparse, collections, sys, time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import build_vocab  # noqa: E402
import train        # noqa: E402

EVAL_DIR = os.path.join(HERE, "..", "..", "shared", "data", "corpus-zh", "eval")
CARRIER = "这就叫{}。"

def han(c):
    return len(c) == 1 and build_vocab.is_cjk(ord(c))

class Scorer:
    def __init__(s, model_dir, threads):
        torch.set_num_threads(threads)
        s.tok = build_vocab.Tokenizer(model_dir)
        s.model = train.load_exported(model_dir).eval()
        s.maxlen = s.model.config["max_position_embeddings"]

    @torch.no_grad()
    def topk(s, items, k=5, bs=64):
        """items: list of token-id lists (with [CLS]/[SEP]), each with exactly one [MASK].
        -> (ids [N,k], probs [N,k], full prob rows are not kept)."""
        order = sorted(range(len(items)), key=lambda i: len(items[i]))
        ids_out = np.zeros((len(items), k), dtype=np.int64)
        pr_out = np.zeros((len(items), k), dtype=np.float32)
        for b in range(0, len(order), bs):
            idx = order[b:b + bs]
            x, bias = train.batch_tensor([np.array(items[i]) for i in idx], s.tok.pad)
            pos = (x.reshape(-1) == s.tok.mask).nonzero().squeeze(1)
            assert len(pos) == len(idx), "each item needs exactly one [MASK]"
            p = s.model(x, pos, bias).softmax(-1)
            v, j = p.topk(k, -1)
            ids_out[idx] = j.numpy(); pr_out[idx] = v.numpy()
        return ids_out, pr_out

    @torch.no_grad()
    def probe(s, text, expected):
        ids = [s.tok.cls] + s.tok.encode(text) + [s.tok.sep]
        x = torch.tensor([ids])
        pos = (x.reshape(-1) == s.tok.mask).nonzero().squeeze(1)
        p = s.model(x, pos).softmax(-1)
        res = []
        for r, e in zip(p, expected):
            eid = s.tok.stoi.get(e, s.tok.unk)
            rank = int((r > r[eid]).sum()) + 1
            top = [(s.tok.itos[int(j)], float(r[j])) for j in r.topk(5).indices]
            res.append((e, rank, float(r[eid]), top))
        return res

def window(ids, m, maxlen):
    """ids without [CLS]/[SEP], mask at m -> [CLS] window [SEP] fitting maxlen."""
    room = maxlen - 2
    if len(ids) > room:
        lo = max(0, min(m - room // 2, len(ids) - room))
        ids = ids[lo:lo + room]
    return ids

def gsd_items(sc, path, seed):
    rs = np.random.RandomState(seed)
    items, targets, cut = [], [], 0
    with open(path, encoding="utf-8") as f:
        sents = [l.rstrip("\n") for l in f if l.strip()]
    for sent in sents:
        ids = sc.tok.encode(sent)
        # Han positions: tokens that are one Han character, or [UNK] standing for one
        words = [w for w in build_vocab.basic_tokenize(sent, sc.tok.lower)]
        cands = []
        k = 0
        for w in words:                       # align basic-tokenizer words to ids
            pieces = sc.tok.wordpiece(w)
            if len(w) == 1 and han(w):
                cands.append((k, w))
            k += len(pieces)
        assert k == len(ids)
        if not cands:
            continue
        m, ch = cands[rs.randint(len(cands))]
        x = list(ids); x[m] = sc.tok.mask
        if len(x) > sc.maxlen - 2:
            cut += 1
            lo = max(0, min(m - (sc.maxlen - 2) // 2, len(x) - (sc.maxlen - 2)))
            x = x[lo:lo + sc.maxlen - 2]
        items.append([sc.tok.cls] + x + [sc.tok.sep]); targets.append(ch)
    return items, targets, len(sents), cut

def idiom_items(sc, path, n, seed, carrier):
    rs = np.random.RandomState(seed)
    idioms = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            w = line.split("\t")[0]
            if len(w) == 4 and all(han(c) for c in w):
                idioms.append(w)
            if len(idioms) >= n:
                break
    items, targets, texts = [], [], []
    for w in idioms:
        m = rs.randint(4)
        text = w[:m] + "[MASK]" + w[m + 1:]
        texts.append(text)
        if carrier:
            text = CARRIER.format(text)
        items.append([sc.tok.cls] + sc.tok.encode(text) + [sc.tok.sep]); targets.append(w[m])
    return items, targets, texts

def unigram_top(corpus, k=5):
    c = collections.Counter()
    for _, line in build_vocab.corpus_lines(corpus):
        c.update(ch for ch in line if han(ch))
    return [ch for ch, _ in c.most_common(k)]

def score(sc, targets, ids):
    tid = np.array([sc.tok.stoi.get(t, -1) for t in targets])
    top1 = float(np.mean(ids[:, 0] == tid)); top5 = float(np.mean((ids == tid[:, None]).any(1)))
    return top1, top5, int((tid < 0).sum())

def score_baseline(targets, top):
    return (float(np.mean([t == top[0] for t in targets])), float(np.mean([t in top for t in targets])))

def main():
    ap = argparse.ArgumentParser(description="masked-character evaluation")
    ap.add_argument("--model", default=os.path.join(HERE, "bertfill-zh-tiny"))
    ap.add_argument("--eval-dir", default=EVAL_DIR)
    ap.add_argument("--corpus", default=build_vocab.DEFAULT_CORPUS, help="for the unigram baseline")
    ap.add_argument("--idioms", type=int, default=2000, help="the N most frequent idioms")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--solid", type=int, default=0,
                    help="also list up to N idioms whose masked character is top-1 bare and in the carrier")
    ap.add_argument("--probe", nargs=2, action="append", metavar=("TEXT", "EXPECTED"),
                    help="print rank/probability of EXPECTED (one char per [MASK]) and the top 5; repeatable")
    a = ap.parse_args()

    for p in ("gsdsimp.txt", "idioms.txt"):
        if not os.path.exists(os.path.join(a.eval_dir, p)):
            sys.exit("evaluate: %s not found (the corpus-zh eval data is needed)" % os.path.join(a.eval_dir, p))
    t0 = time.time()
    sc = Scorer(a.model, a.threads)
    if a.probe:
        for text, exp in a.probe:
            for e, rank, prob, top in sc.probe(text, exp):
                print("%s  expected %s: rank %d, p=%.3f; top5 %s" %
                      (text, e, rank, prob, " ".join("%s:%.3f" % t for t in top)))
        return
    meta = train.safetensors_metadata(os.path.join(a.model, "model.safetensors"))
    base = unigram_top(a.corpus)

    rows = []
    items, tg, nsent, cut = gsd_items(sc, os.path.join(a.eval_dir, "gsdsimp.txt"), a.seed)
    ids, _ = sc.topk(items)
    m1, m5, oov = score(sc, tg, ids); b1, b5 = score_baseline(tg, base)
    rows.append(("GSDSimp sentences, 1 Han char masked", len(items), m1, m5, b1, b5, oov))
    solid = {}
    for carrier in (False, True):
        items, tg, idioms = idiom_items(sc, os.path.join(a.eval_dir, "idioms.txt"), a.idioms, a.seed, carrier)
        ids, pr = sc.topk(items)
        m1, m5, oov = score(sc, tg, ids); b1, b5 = score_baseline(tg, base)
        name = "idioms (top %d by freq), 1 char masked, %s" % (len(items), "in carrier “%s”" % CARRIER.format("…")
                                                                 if carrier else "bare")
        rows.append((name, len(items), m1, m5, b1, b5, oov))
        for i, (w, t) in enumerate(zip(idioms, tg)):
            ok = sc.tok.itos[ids[i, 0]] == t
            solid.setdefault(i, []).append((ok, float(pr[i, 0]), w, t))

    print("model %s (step %s, %s); unigram baseline answers %s; seed %d; %.0fs" %
          (os.path.relpath(a.model), meta.get("step", "?"), meta.get("note", ""), "".join(base), a.seed,
           time.time() - t0))
    print()
    print("| task | items | model top-1 | model top-5 | unigram top-1 | unigram top-5 |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, n, m1, m5, b1, b5, oov in rows:
        print("| %s%s | %d | %.1f%% | %.1f%% | %.1f%% | %.1f%% |" %
              (name, " (%d targets not in vocab)" % oov if oov else "", n, 100 * m1, 100 * m5, 100 * b1, 100 * b5))
    if a.solid:
        good = [(min(v[0][1], v[1][1]), v[0][2], v[0][3]) for v in solid.values() if v[0][0] and v[1][0]]
        good.sort(reverse=True)
        print()
        print("solid idioms (masked char top-1 bare and in carrier; min prob):")
        for p, w, t in good[:a.solid]:
            print("  %s -> %s  %.3f" % (w, t, p))

if __name__ == "__main__":
    main()
