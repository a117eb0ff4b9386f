#!/usr/bin/python3
"""Evaluate masked-character prediction of a BERT model directory (HF layout).

    /usr/bin/python3 model/evaluate.py                                  # model/bertfill-zh-tiny
    /usr/bin/python3 model/evaluate.py --model DIR --idioms 2000 --seed 7
    /usr/bin/python3 model/evaluate.py --probe '今天天气真[MASK]啊' 好   # rank + probability

    /usr/bin/python3 model/evaluate.py --compare-rev 86b8da1            # + the first edition's column
    /usr/bin/python3 model/evaluate.py --curve DIR                      # top-5 of every DIR/step-N

Text the model never trained on (../shared/data/corpus-zh/eval/, and the
held-out lines of the training files, model/heldout.py):
  gsdsimp   every sentence of eval/gsdsimp.txt (1000, Chinese Wikipedia via UD
            GSDSimp), one Han character chosen at random (fixed seed) replaced
            by [MASK]; sentences over max_position_embeddings tokens are cut to a
            window around the mask.
  everyday  the 1000 everyday lines held out of training by model/heldout.py
            (a seeded draw from the six everyday files: Tatoeba, chit-chat,
            dialogue), one Han character masked the same way.
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
import argparse, collections, os, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import train        # noqa: E402  (first: it sets OPENBLAS_CORETYPE before torch loads)
import build_vocab  # noqa: E402
import heldout      # noqa: E402

import numpy as np  # noqa: E402
import torch        # noqa: E402

EVAL_DIR = heldout.EVAL_DIR
CARRIER = heldout.CARRIER

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
        """Rank and probability of each expected character at the [MASK]s of text."""
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

def masked_items(sc, sents, seed):
    """One Han character of each sentence, chosen at random (seed), replaced by [MASK];
    a sentence longer than the model's window is cut around the mask.
    -> (items, target characters, texts with [MASK], number cut)."""
    rs = np.random.RandomState(seed)
    items, targets, texts, cut = [], [], [], 0
    room = sc.maxlen - 2
    for sent in sents:
        ids = sc.tok.encode(sent)
        words = build_vocab.basic_tokenize(sent, sc.tok.lower)
        cands, k = [], 0                      # Han positions: one-character words
        for w in words:                       # (a token, or [UNK] standing for one)
            if len(w) == 1 and han(w):
                cands.append((k, w))
            k += len(sc.tok.wordpiece(w))
        assert k == len(ids)
        if not cands:
            continue
        m, ch = cands[rs.randint(len(cands))]
        x = list(ids); x[m] = sc.tok.mask
        if len(x) > room:
            cut += 1
            lo = max(0, min(m - room // 2, len(x) - room))
            x = x[lo:lo + room]
        items.append([sc.tok.cls] + x + [sc.tok.sep]); targets.append(ch)
        texts.append("".join(w if i != m else "[MASK]" for i, w in enumerate(words)))
    return items, targets, texts, cut

def idiom_items(sc, idioms, seed, carrier):
    rs = np.random.RandomState(seed)
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

TASKS = (("gsdsimp", "GSDSimp sentences, 1 Han char masked"),
         ("everyday", "everyday held-out sentences, 1 Han char masked"),
         ("idioms", "idioms (top {n} by freq), 1 char masked, bare"),
         ("carrier", "idioms (top {n} by freq), 1 char masked, in carrier “这就叫…。”"))

def eval_texts(a):
    """The evaluation's text, read once for every model evaluated: the GSDSimp sentences,
    the everyday held-out lines, the --idioms most frequent idioms."""
    return {"gsdsimp": heldout.gsdsimp_sentences(a.eval_dir),
            "everyday": [l for _, l in heldout.everyday_heldout(a.corpus)],
            "idioms": heldout.evaluated_idioms(a.eval_dir, a.idioms)}

def task_items(sc, texts, seed):
    """{task: (items, targets, texts)} of eval_texts() for the model behind sc (its tokenizer
    and window)."""
    out = {}
    for key in ("gsdsimp", "everyday"):
        items, tg, masked, _ = masked_items(sc, texts[key], seed)
        out[key] = (items, tg, masked)
    out["idioms"] = idiom_items(sc, texts["idioms"], seed, False)
    out["carrier"] = idiom_items(sc, texts["idioms"], seed, True)
    return out

def run_tasks(sc, texts, seed):
    """{task: (items count, top-1, top-5, targets not in vocab, top ids, top probs, targets, texts)}."""
    res = {}
    for key, (items, tg, masked) in task_items(sc, texts, seed).items():
        ids, pr = sc.topk(items)
        m1, m5, oov = score(sc, tg, ids)
        res[key] = (len(items), m1, m5, oov, ids, pr, tg, masked)
    return res

def model_from_rev(rev, tmp):
    """The shipped model files as committed at git revision rev, written into tmp."""
    rel = os.path.relpath(os.path.join(HERE, "bertfill-zh-tiny"), os.path.join(HERE, ".."))
    for name in ("config.json", "vocab.txt", "tokenizer_config.json", "model.safetensors"):
        r = subprocess.run(["git", "-C", os.path.join(HERE, ".."), "show", "%s:%s/%s" % (rev, rel, name)],
                           capture_output=True)
        if r.returncode:
            sys.exit("evaluate: git show %s:%s/%s: %s" % (rev, rel, name, r.stderr.decode().strip()))
        with open(os.path.join(tmp, name), "wb") as f:
            f.write(r.stdout)
    return tmp

def curve(a):
    """Top-1/top-5 of every snapshot DIR/step-N (train.py --snapshots), in step order."""
    snaps = sorted((int(d[5:]), os.path.join(a.curve, d)) for d in os.listdir(a.curve)
                   if d.startswith("step-") and d[5:].isdigit())
    if not snaps:
        sys.exit("evaluate: no step-N directories in %s" % a.curve)
    print("| step | " + " | ".join(k for k, _ in TASKS) + " |  (top-1 / top-5)")
    print("| ---: |" + " ---: |" * len(TASKS))
    texts = eval_texts(a)
    for step, d in snaps:
        res = run_tasks(Scorer(d, a.threads), texts, a.seed)
        print("| %d | %s |" % (step, " | ".join("%.1f%% / %.1f%%" % (100 * res[k][1], 100 * res[k][2])
                                                 for k, _ in TASKS)), flush=True)

def main():
    ap = argparse.ArgumentParser(description="masked-character evaluation")
    ap.add_argument("--model", default=os.path.join(HERE, "bertfill-zh-tiny"))
    ap.add_argument("--eval-dir", default=EVAL_DIR)
    ap.add_argument("--corpus", default=build_vocab.DEFAULT_CORPUS,
                    help="the training files: the everyday held-out lines and the unigram baseline")
    ap.add_argument("--idioms", type=int, default=2000, help="the N most frequent idioms")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--compare-rev", metavar="REV",
                    help="also evaluate the shipped model as committed at git revision REV")
    ap.add_argument("--curve", metavar="DIR", help="evaluate every DIR/step-N snapshot instead")
    ap.add_argument("--solid", type=int, default=0,
                    help="also list up to N idioms whose masked character is top-1 bare and in the carrier, "
                         "and up to N everyday and GSDSimp items the model gets top-1")
    ap.add_argument("--probe", nargs=2, action="append", metavar=("TEXT", "EXPECTED"),
                    help="print rank/probability of EXPECTED (one char per [MASK]) and the top 5; repeatable")
    a = ap.parse_args()

    for p in ("gsdsimp.txt", "idioms.txt"):
        if not os.path.exists(os.path.join(a.eval_dir, p)):
            sys.exit("evaluate: %s not found (the corpus-zh eval data is needed)" % os.path.join(a.eval_dir, p))
    t0 = time.time()
    if a.curve:
        return curve(a)
    sc = Scorer(a.model, a.threads)
    if a.probe:
        for text, exp in a.probe:
            for e, rank, prob, top in sc.probe(text, exp):
                print("%s  expected %s: rank %d, p=%.4f; top5 %s" %
                      (text, e, rank, prob, " ".join("%s:%.4f" % t for t in top)))
        return
    meta = train.safetensors_metadata(os.path.join(a.model, "model.safetensors"))
    base = unigram_top(a.corpus)
    texts = eval_texts(a)
    res = run_tasks(sc, texts, a.seed)
    old = None
    if a.compare_rev:
        with tempfile.TemporaryDirectory() as tmp:
            old = run_tasks(Scorer(model_from_rev(a.compare_rev, tmp), a.threads), texts, a.seed)

    print("model %s (step %s, %s); unigram baseline answers %s; seed %d; %.0fs" %
          (os.path.relpath(a.model), meta.get("step", "?"), meta.get("note", ""), "".join(base), a.seed,
           time.time() - t0))
    print()
    cols = "| task | items | model top-1 | model top-5 |"
    if old:
        cols += " %s top-1 | %s top-5 |" % (a.compare_rev, a.compare_rev)
    print(cols + " unigram top-1 | unigram top-5 |")
    print("| --- | ---: |" + " ---: |" * (cols.count("|") - 3 + 2))
    for key, name in TASKS:
        n, m1, m5, oov, _, _, tg, _ = res[key]
        b1, b5 = score_baseline(tg, base)
        row = "| %s%s | %d | %.1f%% | %.1f%% |" % (name.format(n=n), " (%d targets not in vocab)" % oov
                                                    if oov else "", n, 100 * m1, 100 * m5)
        if old:
            row += " %.1f%% | %.1f%% |" % (100 * old[key][1], 100 * old[key][2])
        print(row + " %.1f%% | %.1f%% |" % (100 * b1, 100 * b5))
    if a.solid:
        bare, carr = res["idioms"], res["carrier"]
        good = []
        for i, (w, t) in enumerate(zip(bare[7], bare[6])):
            if sc.tok.itos[bare[4][i, 0]] == t and sc.tok.itos[carr[4][i, 0]] == t:
                good.append((min(float(bare[5][i, 0]), float(carr[5][i, 0])), w, t))
        good.sort(reverse=True)
        print()
        print("solid idioms (masked char top-1 bare and in carrier; min prob):")
        for p, w, t in good[:a.solid]:
            print("  %s -> %s  %.3f" % (w, t, p))
        for key in ("everyday", "gsdsimp"):
            n, _, _, _, ids, pr, tg, texts = res[key]
            good = sorted(((float(pr[i, 0]), texts[i], t) for i, t in enumerate(tg)
                           if sc.tok.itos[ids[i, 0]] == t), reverse=True)
            print()
            print("solid %s items (masked char top-1; prob):" % key)
            for p, w, t in good[:a.solid]:
                print("  %s -> %s  %.3f" % (w, t, p))

if __name__ == "__main__":
    main()
