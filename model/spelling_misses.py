#!/usr/bin/python3
"""Where the spelling check loses the errors it misses: each error of the
corrupted sentences of a set of model/evaluate_spelling.py, put in one class
(docs/spelling-evaluation.md, "Where the errors are lost"):

  fixed             fill_suspects (mode fast, default sensitivity) flags the
                    position and suggests the original
  flagged, wrong    ... flags it with another suggestion (a random error's
                    original is in no confusion set: never fixed)
  screened out      mode thorough flags it at the default, mode fast does not
                    (the screening run or its cap per text dropped it)
  below threshold   every confusable verified (thorough, the widest
                    sensitivity 1e9): the original is the best one, but its
                    margin is under ln(1 / sensitivity)
  another is best   ... a confusable other than the original is best (or the
                    original is no confusable of the written character)
  not judged        the position is not eligible (spelling.h) or has no
                    confusable in the vocabulary

    /usr/bin/python3 model/spelling_misses.py [--sets everyday-dev] [--repeats 8] [--precision fp32]

The set is built as evaluate_spelling.py builds it (same seed); tune only on
everyday-dev.  The memo cache is off.
"""
import argparse, collections, math, os, statistics, sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import evaluate_spelling as ev  # noqa: E402

CLASSES = ("fixed", "flagged, wrong", "screened out", "below threshold", "another is best", "not judged")


def findings(c, text, mode, sensitivity):
    c.execute("SELECT bert_spelling_sensitivity(?)", (sensitivity,))
    return {r[0]: (r[1], r[2]) for r in c.execute("SELECT position, suggestion, margin FROM fill_suspects(?, ?)",
                                          (text, mode))}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ext", default=os.path.join(ev.ROOT, "bertfill"))
    ap.add_argument("--model", default=ev.SHIPPED)
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--sets", default="everyday-dev", choices=ev.SETS)
    ap.add_argument("--repeats", type=int, default=8)
    a = ap.parse_args()
    if a.sets == "gsdsimp" and not os.path.exists(ev.GSDSIMP):
        print("spelling_misses.py: skipped: %s is absent" % ev.GSDSIMP)
        return 0
    conf = ev.Confusions(ev.vocab_han(ev.SHIPPED))
    sents = (ev.everyday_sentences("test") if a.sets == "everyday" else
             ev.everyday_sentences("dev") if a.sets == "everyday-dev" else ev.gsdsimp_sentences())
    items = []
    for seed in range(ev.SEED, ev.SEED + a.repeats):
        items += ev.build_set(a.sets, sents, conf, seed)
    c = ev.connect(a.ext, a.model, a.precision)
    c.execute("SELECT bert_cache('off')")
    default = c.execute("SELECT bert_spelling_sensitivity()").fetchone()[0]
    count = collections.defaultdict(collections.Counter)
    below = []
    for it in items:
        if not it["errors"]:
            continue
        text = it["input"]
        fast = findings(c, text, "fast", default)
        thorough = findings(c, text, "thorough", default)
        every = findings(c, text, "thorough", 1e9)
        for pos, (orig, kind) in it["errors"].items():
            if pos in fast:
                k = "fixed" if fast[pos][0] == orig else "flagged, wrong"
            elif pos in thorough:
                k = "screened out"
            elif pos not in every:
                k = "not judged"
            elif every[pos][0] == orig:
                k = "below threshold"
                below.append(every[pos][1])
            else:
                k = "another is best"
            count[kind][k] += 1
            count["all"][k] += 1
    kinds = [k for k in ("same sound", "similar sound", "similar shape", "random") if k in count] + ["all"]
    print("%s, %s, %s, %d repeats, sensitivity %g: errors by class (of how many)\n"
          % (a.sets, os.path.basename(os.path.normpath(a.model)), a.precision, a.repeats, default))
    print("| class | " + " | ".join(kinds) + " |")
    print("|---|" + "---|" * len(kinds))
    for cl in CLASSES:
        print("| %s | " % cl + " | ".join("%d" % count[k][cl] for k in kinds) + " |")
    print("| (errors) | " + " | ".join("%d" % sum(count[k].values()) for k in kinds) + " |")
    if below:
        below.sort()
        print("\nbelow threshold: margins median %.2f nats, quartiles %.2f and %.2f (the threshold %.2f)"
              % (statistics.median(below), below[len(below) // 4], below[3 * len(below) // 4],
                 -math.log(default)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
