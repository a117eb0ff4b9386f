#!/usr/bin/python3
"""t_model_data.py — what the shipped model must never train on (model/heldout.py).

  * the everyday held-out set: 1000 lines of the six everyday files, the same
    on every call, each with at least 6 Han characters;
  * the leak guard drops a training line that holds a held-out line, a GSDSimp
    sentence, a demo sentence (any answer) or a demo clause with a blank, and
    keeps ordinary lines, including ones that share a few words with them;
  * train.py's --mix: every file needs a weight, unknown names and bad numbers
    are refused in words; --single-every's single-line sequences (needs
    python3-torch, as train.py does).

Needs ../shared/data/corpus-zh (skipped, saying so, when it is absent).
"""
import os
import subprocess
import sys

from bftest import check, exit_code, skip

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "model"))
import heldout  # noqa: E402

CORPUS = os.path.join(ROOT, "..", "shared", "data", "corpus-zh")


def main():
    if not os.path.isdir(os.path.join(CORPUS, "train")) or not os.path.isdir(os.path.join(CORPUS, "eval")):
        skip("model_data", "../shared/data/corpus-zh is absent (the training and evaluation text)")
        return exit_code()
    train_dir = os.path.join(CORPUS, "train")
    held = heldout.everyday_heldout(train_dir)
    check("model_data.heldout_count", len(held) == heldout.EVERYDAY_HELDOUT_LINES, "%d lines" % len(held))
    check("model_data.heldout_stable", held == heldout.everyday_heldout(train_dir), "a second draw differs")
    check("model_data.heldout_everyday_files", all(f in heldout.EVERYDAY_FILES for f, _ in held),
          sorted(set(f for f, _ in held) - set(heldout.EVERYDAY_FILES)))
    short = [l for _, l in held if heldout.han_count(l) < heldout.EVERYDAY_MIN_HAN]
    check("model_data.heldout_long_enough", not short, short[:3])
    check("model_data.heldout_distinct", len(set(l for _, l in held)) == len(held), "repeated lines")

    g = heldout.LeakGuard(train_dir)
    line = held[0][1]
    cases = [
        ("heldout_itself", line, True),
        ("heldout_inside", "他说：" + line + "然后走了。", True),
        ("heldout_spaced", " ".join(line), True),
        ("gsdsimp_inside", "据说" + heldout.gsdsimp_sentences()[3], True),
        ("demo_with_answer", "今天天气真好啊，适合出去玩。", True),
        ("demo_without_answer", "今天天气真啊，适合出去玩。", True),
        ("demo_clause", "昨天下雨了，今天天气真好啊！", True),
        ("idiom_carrier", "这就叫" + heldout.evaluated_idioms()[0] + "。", True),
        ("plain", "我们明天早上去图书馆看书。", False),
        ("shares_words", "今天天气不错，我们去公园吧。", False),
        ("idiom_in_text", "他做事总是" + heldout.evaluated_idioms()[0] + "。", False),
    ]
    for name, text, dropped in cases:
        why = g.reason(text)
        check("model_data.guard_" + name, (why is not None) == dropped, "%r -> %r" % (text, why))
    check("model_data.demo_texts", len(g.demos) >= 5 and all("[MASK]" in t for t in g.demos), g.demos)

    try:
        import torch  # noqa: F401
    except ImportError:
        skip("model_data.mix", "no PyTorch (apt-get install python3-torch)")
        return exit_code()
    import train
    files = ["a.txt.xz", "b.txt.xz"]
    check("model_data.mix_weights", train.parse_mix("a=0.5,b=2", files) == [0.5, 2.0])
    for bad, words in (("a=1", "no weight for b"), ("a=1,b=1,c=1", "'c' is not a training file"),
                       ("a=x,b=1", "the weight must be a number"), ("a=-1,b=1", "between 0 and 100")):
        r = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, 'model'); import train; "
                            "train.parse_mix(%r, %r)" % (bad, files)], cwd=ROOT, capture_output=True, text=True)
        check("model_data.mix_error " + bad, r.returncode != 0 and words in r.stderr, r.stderr.strip()[-200:])
    import numpy as np
    ids = np.array([10, 11, 12, 7, 20, 21, 22, 23, 24, 25, 30, 7], dtype=np.uint16)
    starts = np.array([0, 4, 10, 12]); fidx = np.array([0, 0, 1], dtype=np.int8)
    got = train.single_lines(ids, starts, fidx, 6, 2, 3)
    check("model_data.single_lines", [(f, list(x)) for f, x in got] == [(0, [2, 10, 11, 12, 7, 3]), (1, [2, 30, 7, 3])],
          got)
    cut = train.single_lines(ids, starts, fidx, 6, 2, 3, drop_ids=[7], drop_p=1.0)
    check("model_data.single_lines_drop_final", [list(x) for _, x in cut] == [[2, 10, 11, 12, 3], [2, 30, 3]], cut)
    return exit_code()


if __name__ == "__main__":
    sys.exit(main())
