#!/usr/bin/python3
"""Benchmark sentences for `make bench`, made from a model's vocab.txt.

    /usr/bin/python3 tests/bench/sentences.py MODEL_DIR OUT.tsv

Deterministic (fixed seed).  Every sentence is a run of single CJK characters
that are whole entries of the vocabulary, with exactly one [MASK]; a CJK
character is always one token for BertTokenizer (it is split off on its own
and found whole in the vocabulary), so a sentence of n characters is n + 2
tokens with [CLS] and [SEP].  That lets the peers (ONNX Runtime, PyTorch) use
the ids written here, while bertfill tokenizes the text itself and the C
driver checks it gets exactly these ids.

The five sentences of the demo's column (the INSERT INTO sentences of
sql/demo.sql, 16-21 tokens, with Chinese punctuation) are real text: they are
tokenized by model/build_vocab.py's Tokenizer (BertTokenizer's rules); with a
vocabulary that lacks one of their characters they are left out, with a note.

Output: one line per sentence, tab separated:
    set  text  ids(space separated, with [CLS]/[SEP])  mask_position
sets:  single-8 single-12 single-16 single-20 single-24 single-32 single-64
       single-128 (one sentence each; 12, 20 and 24 show the band of typical
       sentence lengths, 17-24 tokens, around 16)
       demo-1 .. demo-5 (one sentence each: the demo's five, in its order)
       batch-256  (256 sentences of 16-23 tokens)
       batch-2000 (2000 other sentences of 16-23 tokens; disjoint from
                   batch-256 so that a cache warmed by one set never answers
                   the other)
"""
import os, random, re, sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEMO_SQL = os.path.join(HERE, "..", "..", "sql", "demo.sql")
sys.path.insert(0, os.path.join(HERE, "..", "..", "model"))
import build_vocab  # noqa: E402

SINGLE_LENGTHS = (8, 16, 32, 64, 128)
# Made after everything else, from a second generator, so that the sentences
# above (and the batch sets) stay the ones of earlier runs.
MORE_SINGLE_LENGTHS = (12, 20, 24)
BATCH_SETS = (("batch-256", 256), ("batch-2000", 2000))
MIN_TOK, MAX_TOK = 16, 23


def load_vocab(path):
    with open(path, "rb") as f:
        data = f.read().decode("utf-8")
    toks = data.split("\n")          # "\n" only: an entry may be U+2028
    if toks and toks[-1] == "":
        toks.pop()
    return {t: i for i, t in enumerate(toks)}


def is_cjk(ch):
    cp = ord(ch)
    # Unified ideographs and extension A only: compatibility ideographs
    # (U+F900..) change under the NFD normalization of accent stripping.
    return 0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF


def demo_sentences(path=DEMO_SQL):
    """The texts of the demo's `INSERT INTO sentences(text) VALUES (...), ...;`."""
    with open(path, encoding="utf-8") as f:
        sql = f.read()
    m = re.search(r"INSERT INTO sentences\(text\) VALUES(.*?);", sql, re.S)
    if not m:
        sys.exit(f"sentences.py: {path} has no INSERT INTO sentences(text) VALUES ...;")
    return [t.replace("''", "'") for t in re.findall(r"'((?:[^']|'')*)'", m.group(1))]


def demo_rows(model_dir):
    """(set, text, ids, mask position) of each demo sentence; None (and a note) when
    the vocabulary cannot spell them."""
    tok = build_vocab.Tokenizer(model_dir)
    rows = []
    for i, text in enumerate(demo_sentences(), 1):
        ids = [tok.cls] + tok.encode(text) + [tok.sep]
        if tok.unk in ids or ids.count(tok.mask) != 1:
            print(f"sentences.py: note: no demo sentences ({model_dir}/vocab.txt cannot spell {text!r} "
                  "with one [MASK] and no [UNK])", file=sys.stderr)
            return []
        rows.append((f"demo-{i}", text, ids, ids.index(tok.mask)))
    return rows


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: sentences.py MODEL_DIR OUT.tsv")
    model_dir, out = sys.argv[1], sys.argv[2]
    vocab = load_vocab(os.path.join(model_dir, "vocab.txt"))
    for special in ("[CLS]", "[SEP]", "[MASK]"):
        if special not in vocab:
            sys.exit(f"sentences.py: {model_dir}/vocab.txt has no {special}")
    chars = sorted(t for t in vocab if len(t) == 1 and is_cjk(t))
    if len(chars) < 100:
        sys.exit(f"sentences.py: {model_dir}/vocab.txt has only {len(chars)} "
                 "single CJK characters; the benchmark needs a Chinese vocabulary")
    cls, sep, mask = vocab["[CLS]"], vocab["[SEP]"], vocab["[MASK]"]
    rng = random.Random(20261130)
    seen = set()

    def sentence(ntok):
        while True:
            n = ntok - 2
            text = [rng.choice(chars) for _ in range(n - 1)]
            pos = rng.randrange(1, n) if n > 2 else 0   # not the first char
            text.insert(pos, "[MASK]")
            s = "".join(text)
            if s in seen:
                continue
            seen.add(s)
            ids = [cls] + [mask if t == "[MASK]" else vocab[t] for t in text] + [sep]
            assert len(ids) == ntok
            return s, ids, pos + 1

    rows = []
    for n in SINGLE_LENGTHS:
        rows.append((f"single-{n}",) + sentence(n))
    batches = []
    for name, count in BATCH_SETS:
        for _ in range(count):
            batches.append((name,) + sentence(rng.randint(MIN_TOK, MAX_TOK)))
    rng = random.Random(20261201)
    rows += [(f"single-{n}",) + sentence(n) for n in MORE_SINGLE_LENGTHS]
    rows.sort(key=lambda r: int(r[0][7:]))
    rows += demo_rows(model_dir) + batches
    tmp = out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for name, s, ids, mpos in rows:
            f.write(f"{name}\t{s}\t{' '.join(map(str, ids))}\t{mpos}\n")
    os.replace(tmp, out)


if __name__ == "__main__":
    main()
