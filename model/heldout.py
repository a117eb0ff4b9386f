#!/usr/bin/python3
"""What the shipped model must never train on, in one place (train.py and evaluate.py import it).

    /usr/bin/python3 model/heldout.py            # counts: held-out lines, guarded texts, dropped lines

1. The everyday held-out set: EVERYDAY_HELDOUT_LINES lines of the six everyday
   files of corpus-zh/train (EVERYDAY_FILES), chosen before any training by a
   seeded draw (numpy RandomState(EVERYDAY_HELDOUT_SEED)) among their lines
   with at least EVERYDAY_MIN_HAN Han characters, read in sorted file order.
   evaluate.py masks one Han character of each; train.py never sees them.
2. The leak guard.  train.py drops every training line that
   - contains a held-out everyday line or a GSDSimp evaluation sentence
     (compared with all whitespace removed), or
   - contains one of the demo's [MASK] sentences (sql/demo.sql) with any
     answer of 0-3 characters in each blank, or
   - has a clause (split at ，。！？；：) that is a demo clause holding a blank
     (at least 4 other characters) with any answer of 1-3 characters: so
     "今天天气真好啊，我们去公园吧。" is dropped because of the demo's
     "今天天气真[MASK]啊，适合出去玩。", or
   - contains an idiom carrier sentence of the evaluation ("这就叫" + one of
     the evaluated idioms).
   Idioms themselves are not removed from running text: they are what the
   idiom evaluation asks the model to know, as in the first edition (lines that
   are nothing but an idiom were already removed from the corpus, SOURCES.md).
"""
import collections, os, re, sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import build_vocab  # noqa: E402

EVERYDAY_FILES = ("chatterbot_zh.txt.xz", "moztw_cc0_zhtw.txt.xz", "tatoeba_cmn.txt.xz",
                  "tencent_chitchat.txt.xz", "xiaoai_chitchat.txt.xz", "xpersona_zh.txt.xz")
EVERYDAY_HELDOUT_LINES = 1000
EVERYDAY_HELDOUT_SEED = 20261201
EVERYDAY_MIN_HAN = 6
DEMO_SQL = os.path.join(HERE, "..", "sql", "demo.sql")
EVAL_DIR = os.path.join(HERE, "..", "..", "shared", "data", "corpus-zh", "eval")
CARRIER = "这就叫{}。"
CLAUSE_SPLIT = re.compile(r"[，。！？；：]")
KEY = 5                                       # n-gram length of the containment index


def han_count(text):
    return sum(1 for c in text if build_vocab.is_cjk(ord(c)))


def squeeze(text):
    return re.sub(r"\s+", "", text)


def everyday_heldout(corpus):
    """The held-out everyday lines, in corpus order: [(file, line)]."""
    cands = [(f, line) for f, line in build_vocab.corpus_lines(corpus)
             if f in EVERYDAY_FILES and han_count(line) >= EVERYDAY_MIN_HAN]
    if len(cands) < EVERYDAY_HELDOUT_LINES:
        sys.exit("heldout: only %d everyday lines with >= %d Han characters in %s" %
                 (len(cands), EVERYDAY_MIN_HAN, corpus))
    pick = np.random.RandomState(EVERYDAY_HELDOUT_SEED).choice(len(cands), EVERYDAY_HELDOUT_LINES,
                                                               replace=False)
    return [cands[i] for i in sorted(pick)]


def demo_texts(path=DEMO_SQL):
    """Every quoted SQL string of sql/demo.sql that holds a [MASK] and Han text
    (comment lines and .print captions are skipped)."""
    with open(path, encoding="utf-8") as f:
        sql = "\n".join(l for l in f.read().split("\n") if not l.lstrip().startswith(("--", ".")))
    return sorted(set(t for t in re.findall(r"'([^']*)'", sql) if "[MASK]" in t and han_count(t)))


def gsdsimp_sentences(eval_dir=EVAL_DIR):
    with open(os.path.join(eval_dir, "gsdsimp.txt"), encoding="utf-8") as f:
        return [l.rstrip("\n") for l in f if l.strip()]


def evaluated_idioms(eval_dir=EVAL_DIR, n=2000):
    """The n most frequent four-Han-character idioms of eval/idioms.txt (evaluate.py's list)."""
    out = []
    with open(os.path.join(eval_dir, "idioms.txt"), encoding="utf-8") as f:
        for line in f:
            w = line.split("\t")[0]
            if len(w) == 4 and all(build_vocab.is_cjk(ord(c)) for c in w):
                out.append(w)
            if len(out) >= n:
                break
    return out


def blank_pattern(text, lo, hi):
    parts = [re.escape(squeeze(p)) for p in text.split("[MASK]")]
    return ("[^，。！？；：]{%d,%d}" % (lo, hi)).join(parts)


class LeakGuard:
    """reason(line) -> None, or why the line must not be trained on."""

    def __init__(s, corpus, eval_dir=EVAL_DIR, demo_sql=DEMO_SQL):
        s.held = everyday_heldout(corpus)     # [(file, line)]
        s.exact = {}                          # squeezed text -> reason
        for _, line in s.held:
            s.exact.setdefault(squeeze(line), "contains an everyday held-out line")
        for sent in gsdsimp_sentences(eval_dir):
            s.exact.setdefault(squeeze(sent), "contains a GSDSimp sentence")
        for w in evaluated_idioms(eval_dir):
            s.exact.setdefault(squeeze(CARRIER.format(w))[:-1], "contains an idiom carrier sentence")
        short = [t for t in s.exact if len(t) < KEY]
        if short:
            sys.exit("heldout: guarded texts shorter than %d characters: %s" % (KEY, short[:5]))
        s.index = collections.defaultdict(list)
        for t in s.exact:
            s.index[t[:KEY]].append(t)
        s.demos = demo_texts(demo_sql)
        pats = [blank_pattern(t, 0, 3) for t in s.demos]
        clauses = set()
        for t in s.demos:
            for c in CLAUSE_SPLIT.split(squeeze(t)):
                if "[MASK]" in c and len(c.replace("[MASK]", "")) >= 4:
                    clauses.add(c)
        s.demo_clauses = sorted(clauses)
        s.demo_re = re.compile("|".join(pats))
        s.clause_re = re.compile("|".join("(?:^|[，。！？；：])%s(?:$|[，。！？；：])" % blank_pattern(c, 1, 3)
                                          for c in s.demo_clauses))

    def reason(s, line):
        t = squeeze(line)
        for i in range(len(t) - KEY + 1):
            for cand in s.index.get(t[i:i + KEY], ()):
                if t.startswith(cand, i):
                    return s.exact[cand]
        if s.demo_re.search(t):
            return "contains a demo sentence"
        if s.clause_re.search(t):
            return "has a demo clause"
        return None


def guarded_lines(corpus, guard=None):
    """The training lines: [(file, line)] with the held-out lines and the guard's hits
    removed, and the removed lines as [(reason, file, line)].  guard: a LeakGuard of
    corpus (made here when not given)."""
    g = guard or LeakGuard(corpus)
    held = set(g.held)
    kept, removed = [], []
    for f, line in build_vocab.corpus_lines(corpus):
        why = "held out (everyday evaluation)" if (f, line) in held else g.reason(line)
        if why:
            removed.append((why, f, line))
        else:
            kept.append((f, line))
    return kept, removed


def main():
    corpus = build_vocab.DEFAULT_CORPUS
    g = LeakGuard(corpus)
    print("everyday held-out: %d lines (seed %d, >= %d Han characters) from %s" %
          (len(g.held), EVERYDAY_HELDOUT_SEED, EVERYDAY_MIN_HAN,
           ", ".join("%s %d" % kv for kv in sorted(collections.Counter(f for f, _ in g.held).items()))))
    print("demo texts guarded: %d; demo clauses: %s" % (len(g.demos), " ".join(g.demo_clauses)))
    kept, removed = guarded_lines(corpus, g)
    print("training lines kept: %d; dropped: %s" % (len(kept), dict(collections.Counter(w for w, _, _ in removed))))
    if "-v" in sys.argv:
        for why, f, line in removed:
            if not why.startswith("held out"):
                print("  %s: %s: %s" % (why, f, line[:80]))


if __name__ == "__main__":
    main()
