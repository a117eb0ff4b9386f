#!/usr/bin/python3
"""Build the character-level vocabulary of the shipped tiny Chinese BERT.

    /usr/bin/python3 model/build_vocab.py [--corpus DIR] [--out model/bertfill-zh-tiny] [--min-count 2]

Reads the training corpus (../shared/data/corpus-zh/train/*.txt.xz, with lzma;
nothing of it is copied anywhere), runs Hugging Face BertTokenizer's basic
tokenizer over it and writes, into --out:

  vocab.txt              one token per line ("\n" separated), ids = line numbers:
                         [PAD] [UNK] [CLS] [SEP] [MASK], printable ASCII, common
                         full-width punctuation, then every character of the
                         corpus seen at least --min-count times (most frequent
                         first); every character that is neither CJK nor
                         punctuation also gets its "##" continuation form, so
                         "Java 2026" becomes j ##a ##v ##a 2 ##0 ##2 ##6, never [UNK].
  tokenizer_config.json  {"do_lower_case": true, ...}

This module is also the Python reference of the tokenizer used at training and
evaluation time (train.py and evaluate.py import it): BasicTokenizer +
WordpieceTokenizer exactly as in Hugging Face transformers' BertTokenizer
(clean text, CJK characters split, lowercase + accent strip, whitespace and
punctuation split, greedy longest-match WordPiece with "##", [UNK] for a word
that cannot be matched or is longer than 100 characters).
"""
import argparse, collections, glob, json, lzma, os, sys, unicodedata

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
DO_LOWER_CASE = True
MAX_CHARS_PER_WORD = 100

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_CORPUS = os.path.join(HERE, "..", "..", "shared", "data", "corpus-zh", "train")
DEFAULT_OUT = os.path.join(HERE, "bertfill-zh-tiny")

# ---------------------------------------------------------------- HF BertTokenizer semantics

def is_whitespace(ch):
    if ch in (" ", "\t", "\n", "\r"):
        return True
    return unicodedata.category(ch) == "Zs"

def is_control(ch):
    if ch in ("\t", "\n", "\r"):
        return False
    return unicodedata.category(ch) in ("Cc", "Cf")

def is_punctuation(ch):
    cp = ord(ch)
    if (33 <= cp <= 47) or (58 <= cp <= 64) or (91 <= cp <= 96) or (123 <= cp <= 126):
        return True
    return unicodedata.category(ch).startswith("P")

def is_cjk(cp):
    return ((0x4E00 <= cp <= 0x9FFF) or (0x3400 <= cp <= 0x4DBF) or
            (0x20000 <= cp <= 0x2A6DF) or (0x2A700 <= cp <= 0x2B73F) or
            (0x2B740 <= cp <= 0x2B81F) or (0x2B820 <= cp <= 0x2CEAF) or
            (0xF900 <= cp <= 0xFAFF) or (0x2F800 <= cp <= 0x2FA1F))

def basic_tokenize(text, lower=DO_LOWER_CASE):
    """BasicTokenizer.tokenize (tokenize_chinese_chars=True, strip_accents=None)."""
    out = []
    for ch in text:                          # _clean_text + _tokenize_chinese_chars
        cp = ord(ch)
        if cp == 0 or cp == 0xFFFD or is_control(ch):
            continue
        if is_whitespace(ch):
            out.append(" ")
        elif is_cjk(cp):
            out.append(" "); out.append(ch); out.append(" ")
        else:
            out.append(ch)
    text = unicodedata.normalize("NFC", "".join(out))
    words = []
    for tok in text.split():                 # whitespace_tokenize
        if lower:
            tok = tok.lower()
            tok = "".join(c for c in unicodedata.normalize("NFD", tok)
                          if unicodedata.category(c) != "Mn")
        cur = []
        for c in tok:                        # _run_split_on_punc
            if is_punctuation(c):
                if cur:
                    words.append("".join(cur)); cur = []
                words.append(c)
            else:
                cur.append(c)
        if cur:
            words.append("".join(cur))
    return words

class Tokenizer:
    """vocab.txt + tokenizer_config.json -> ids, as HF BertTokenizer would give."""

    def __init__(self, model_dir):
        with open(os.path.join(model_dir, "vocab.txt"), encoding="utf-8", newline="") as f:
            data = f.read()
        toks = data.split("\n")
        if toks and toks[-1] == "":
            toks.pop()
        self.itos = toks
        self.stoi = {}
        for i, t in enumerate(toks):
            self.stoi.setdefault(t, i)
        self.lower = DO_LOWER_CASE
        p = os.path.join(model_dir, "tokenizer_config.json")
        if os.path.exists(p):
            with open(p, encoding="utf-8") as f:
                self.lower = bool(json.load(f).get("do_lower_case", True))
        self.unk = self.stoi["[UNK]"]; self.cls = self.stoi["[CLS]"]
        self.sep = self.stoi["[SEP]"]; self.mask = self.stoi["[MASK]"]
        self.pad = self.stoi["[PAD]"]
        self._cache = {}

    def wordpiece(self, word):
        r = self._cache.get(word)
        if r is not None:
            return r
        if len(word) > MAX_CHARS_PER_WORD:
            r = [self.unk]
        else:
            r = []; start = 0
            while start < len(word):
                end = len(word); cur = None
                while start < end:
                    sub = word[start:end]
                    if start > 0:
                        sub = "##" + sub
                    if sub in self.stoi:
                        cur = self.stoi[sub]; break
                    end -= 1
                if cur is None:
                    r = [self.unk]; break
                r.append(cur); start = end
        if len(self._cache) < 1000000:
            self._cache[word] = r
        return r

    def encode(self, text):
        """Token ids of text, without [CLS]/[SEP].  The literal "[MASK]" is
        kept as the mask token (HF treats special tokens as never-split)."""
        ids = []
        parts = text.split("[MASK]")
        for k, part in enumerate(parts):
            if k:
                ids.append(self.mask)
            for w in basic_tokenize(part, self.lower):
                ids.extend(self.wordpiece(w))
        return ids

# ---------------------------------------------------------------- vocabulary

def corpus_lines(corpus_dir):
    files = sorted(glob.glob(os.path.join(corpus_dir, "*.txt.xz")))
    if not files:
        sys.exit("no *.txt.xz files in %s" % corpus_dir)
    for fn in files:
        with lzma.open(fn, "rt", encoding="utf-8") as f:
            for line in f:
                yield os.path.basename(fn), line.rstrip("\n")

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", default=DEFAULT_CORPUS)
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--min-count", type=int, default=2)
    a = ap.parse_args()

    first = collections.Counter()   # character as the start of a word (or CJK/punct)
    cont = collections.Counter()    # character inside a word (needs "##")
    for _, line in corpus_lines(a.corpus):
        for w in basic_tokenize(line):
            first[w[0]] += 1
            for c in w[1:]:
                cont[c] += 1
    total = first + cont

    vocab = list(SPECIALS)
    seen = set(vocab)
    def add(t):
        if t not in seen:
            seen.add(t); vocab.append(t)
    def needs_cont(c):
        return not is_cjk(ord(c)) and not is_punctuation(c)

    # printable ASCII (lowercased: no capitals) and its continuation forms
    for cp in range(33, 127):
        c = chr(cp)
        if DO_LOWER_CASE and c.isupper():
            continue
        add(c)
    for cp in range(33, 127):
        c = chr(cp)
        if (DO_LOWER_CASE and c.isupper()) or not needs_cont(c):
            continue
        add("##" + c)
    # common full-width / CJK punctuation and symbols (kept even if rare in the corpus)
    for c in "，。、；：？！“”‘’（）《》〈〉【】「」『』〔〕…—～·－％＋＝／＼＠＃＆＊｜～￥°℃№":
        c = unicodedata.normalize("NFD", c.lower()) if DO_LOWER_CASE else c
        c = "".join(x for x in c if unicodedata.category(x) != "Mn")
        if len(c) == 1:
            add(c)
            if needs_cont(c):
                add("##" + c)
    # every corpus character seen at least min_count times, most frequent first
    for c, n in sorted(total.items(), key=lambda kv: (-kv[1], kv[0])):
        if n < a.min_count or is_whitespace(c) or c == "\n":
            continue
        add(c)
        if needs_cont(c):
            add("##" + c)
    for t in vocab:
        assert "\n" not in t and t.strip() == t and t, repr(t)

    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "vocab.txt"), "w", encoding="utf-8", newline="") as f:
        f.write("\n".join(vocab) + "\n")
    with open(os.path.join(a.out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"do_lower_case": DO_LOWER_CASE, "tokenize_chinese_chars": True,
                   "strip_accents": None, "model_max_length": 128,
                   "tokenizer_class": "BertTokenizer",
                   "unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                   "cls_token": "[CLS]", "mask_token": "[MASK]"}, f, indent=2)
        f.write("\n")
    ncjk = sum(1 for t in vocab if len(t) == 1 and is_cjk(ord(t)))
    print("vocab: %d entries (%d CJK characters, %d '##' forms), min count %d -> %s"
          % (len(vocab), ncjk, sum(1 for t in vocab if t.startswith("##")), a.min_count, a.out))

if __name__ == "__main__":
    main()
