#!/usr/bin/python3
"""t_spelling.py — the spelling check (ext/engine/spelling.c, ext/sqlite/suspects.c):
fill_suspects, bert_correct, fill_suspects_rows and bert_spelling_sensitivity on
the shipped model (model/bertfill-zh-tiny).

  - hand-made cases with known answers, each verified on the shipped model
    (的/地/得, 在/再, 以/已, a shape confusion, a clean idiom, a name and a
    number left alone, a character outside the vocabulary), in modes fast and
    thorough, in fp32, int8 and bf16;
  - every argument misuse: its exact message;
  - the probabilities equal to the independent PyTorch reference
    (tests/golden/spelling.json), made by
      /usr/bin/python3 model/reference.py --spelling model/bertfill-zh-tiny \
        tests/golden/spelling.json 我再家里 他们再哪里 这是他地家 我得书在桌子上 我以经知道了 今天天汽很好 小时侯我住在北京 祝你生曰快乐 这是我自已的事 我门去学校吧 一心一意 画蛇添足 张伟在北京工作 他跑的很快 我的生曰是五月;
  - the column form row by row the same as each text alone (several batches,
    bad rows among them), and its memory bounded by one batch;
  - the same results with the memo cache on and off, and alone or with other
    texts.
"""
import json
import math
import os
import sqlite3
import subprocess
import sys

from bftest import EXT, check, error_of, exit_code, file_sha256, skip

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "model", "bertfill-zh-tiny")
GOLDEN = os.path.join(ROOT, "tests", "golden", "spelling.json")
TOL = 1e-4
COST = {"same sound": 0.0, "similar sound": 1.5, "similar shape": 2.5}  # spelling.h

# (text, [(position, written, suggestion, kind)], corrected): what the shipped
# model finds at the default sensitivity, checked by hand.
CASES = [
    ("我再家里", [(1, "再", "在", "same sound")], "我在家里"),
    ("他们再哪里", [(2, "再", "在", "same sound")], "他们在哪里"),
    ("这是他地家", [(3, "地", "的", "same sound")], "这是他的家"),
    ("我得书在桌子上", [(1, "得", "的", "same sound")], "我的书在桌子上"),
    ("我以经知道了", [(1, "以", "已", "same sound")], "我已经知道了"),
    ("今天天汽很好", [(3, "汽", "气", "same sound")], "今天天气很好"),
    ("祝你生曰快乐", [(3, "曰", "日", "similar shape")], "祝你生日快乐"),
    ("这是我自已的事", [(4, "已", "己", "similar shape")], "这是我自己的事"),
    ("小时侯我住在北京", [(2, "侯", "候", "same sound")], "小时候我住在北京"),
    # left alone: an idiom, a name, a number, Latin letters, clean text
    ("一心一意", [], "一心一意"),
    ("画蛇添足", [], "画蛇添足"),
    ("张伟在北京工作", [], "张伟在北京工作"),
    ("他在2019年来到北京", [], "他在2019年来到北京"),
    ("我喜欢吃苹果", [], "我喜欢吃苹果"),
    # 縡 (same sound as 在) is not in the shipped vocabulary: [UNK], never judged
    ("我縡家里", [], "我縡家里"),
    # position counts characters, byte_offset bytes: after Latin letters
    ("OK，我门去学校吧", [(4, "门", "们", "same sound")], "OK，我们去学校吧"),
]

COLS = "position, byte_offset, written, written_score, suggestion, suggestion_score, margin, kind, corrected"


def connect(precision=None):
    c = sqlite3.connect(":memory:", isolation_level=None)
    c.enable_load_extension(True)
    c.load_extension(EXT)
    if precision:
        c.execute("SELECT bert_load(?, ?)", (MODEL, precision))
    else:
        c.execute("SELECT bert_load(?)", (MODEL,))
    return c


def suspects(c, text, mode=None):
    if mode:
        return c.execute("SELECT %s FROM fill_suspects(?, ?)" % COLS, (text, mode)).fetchall()
    return c.execute("SELECT %s FROM fill_suspects(?)" % COLS, (text,)).fetchall()


def check_cases(c, tag):
    vocab = set(open(os.path.join(MODEL, "vocab.txt"), encoding="utf-8").read().split("\n"))
    for mode in ("fast", "thorough"):
        for text, want, fixed in CASES:
            rows = suspects(c, text, mode)
            got = [(r[0], r[2], r[4], r[7]) for r in rows]
            ok = got == want
            why = "got %s, want %s" % (got, want)
            for r in rows:
                if ok and text.encode()[r[1]:].decode()[:1] != r[2]:
                    ok, why = False, "byte_offset %d does not point at %s" % (r[1], r[2])
                if ok and r[4] not in vocab:
                    ok, why = False, "suggestion %s is not in the vocabulary" % r[4]
                if ok and text[:r[0]] + r[4] + text[r[0] + 1:] != r[8]:
                    ok, why = False, "corrected %s" % r[8]
                if ok and not (r[6] >= math.log(1 / 0.005) and 0 < r[3] < r[5] <= 1):
                    ok, why = False, "margin %s, scores %s %s" % (r[6], r[3], r[5])
            check("spelling.%s.%s.%s" % (tag, mode, text), ok, why)
            corr = c.execute("SELECT bert_correct(?, ?)", (text, mode)).fetchone()[0]
            check("spelling.%s.%s.correct.%s" % (tag, mode, text), corr == fixed,
                  "bert_correct gave %s, want %s" % (corr, fixed))


def check_errors(c):
    long_text = "我" * 200
    want = [
        ("SELECT bert_correct(12)", "bert_correct: the text must be TEXT (got 12)"),
        ("SELECT bert_correct(x'e68891')", "bert_correct: the text must be TEXT (got a blob)"),
        ("SELECT * FROM fill_suspects(3.5)", "fill_suspects: the text must be TEXT (got 3.5)"),
        ("SELECT bert_correct('今天天气真[MASK]啊')",
         "bert_correct: the text holds [MASK]; bert_correct checks written text: to fill blanks "
         "use bert_fill or fill_candidates"),
        ("SELECT * FROM fill_suspects('今天天气真[MASK]啊')",
         "fill_suspects: the text holds [MASK]; fill_suspects checks written text: to fill "
         "blanks use bert_fill or fill_candidates"),
        ("SELECT bert_correct('%s')" % long_text,
         "bert_correct: the text is 202 tokens long ([CLS] and [SEP] included) but the model "
         "takes at most 128 (max_position_embeddings): 74 too many; check it in parts"),
        ("SELECT bert_correct('我再家里', 'quick')",
         "bert_correct: the mode must be 'fast' or 'thorough' (got quick)"),
        ("SELECT * FROM fill_suspects('我再家里', 3)",
         "fill_suspects: the mode must be 'fast' or 'thorough' (got 3)"),
        ("SELECT * FROM fill_suspects",
         "fill_suspects: the text argument is missing; use fill_suspects(text [, mode]), e.g. "
         "SELECT * FROM fill_suspects('他在也不来了')"),
        ("SELECT bert_correct(CAST(x'ff' AS TEXT))",
         "bert_correct: invalid UTF-8 at byte 0 of the text (byte value 0xFF)"),
        ("SELECT bert_spelling_sensitivity(0)",
         "bert_spelling_sensitivity: the sensitivity must be a number from 1e-09 to 1e+09 "
         "(default 0.005; higher flags more) (got 0)"),
        ("SELECT bert_spelling_sensitivity('high')",
         "bert_spelling_sensitivity: the sensitivity must be a number from 1e-09 to 1e+09 "
         "(default 0.005; higher flags more) (got high)"),
        ("SELECT * FROM fill_suspects_rows(5)",
         "fill_suspects_rows: the query must be TEXT (got 5); use fill_suspects_rows(sql "
         "[, mode]), e.g. SELECT * FROM fill_suspects_rows('SELECT rowid, text FROM t')"),
        ("SELECT * FROM fill_suspects_rows('SELECT 1')",
         "fill_suspects_rows: the query returns 1 column; it must return 2: (key, text)"),
        ("SELECT * FROM fill_suspects_rows('SELECT 1, ''我再家里''', 'slow')",
         "fill_suspects_rows: the mode must be 'fast' or 'thorough' (got slow)"),
    ]
    for n, (sql, msg) in enumerate(want):
        got = error_of(c, sql)
        check("spelling.error.%d" % n, got == msg, "%s: got %r, want %r" % (sql, got, msg))
    check("spelling.null", c.execute("SELECT bert_correct(NULL)").fetchone()[0] is None and
          c.execute("SELECT count(*) FROM fill_suspects(NULL)").fetchone()[0] == 0,
          "NULL must give NULL and no rows")
    check("spelling.sensitivity.default",
          c.execute("SELECT bert_spelling_sensitivity()").fetchone()[0] == 0.005, "not 0.005")


def check_sensitivity(c):
    """A higher sensitivity flags a superset; the default's rows are those with margin >= ln 200."""
    text = "我的生曰是五月，他再哪里"  # thorough at 1e9: 生 (声), 曰, 再 and more
    every = suspects(c, text, "thorough")
    c.execute("SELECT bert_spelling_sensitivity(1e9)")
    wide = suspects(c, text, "thorough")
    c.execute("SELECT bert_spelling_sensitivity(0.005)")
    keep = [r for r in wide if r[6] >= math.log(200)]
    check("spelling.sensitivity.threshold", keep == every and len(wide) > len(every),
          "default %s, all %s" % (every, wide))


def check_reference(c):
    weights = os.path.join(MODEL, "model.safetensors")
    with open(GOLDEN, encoding="utf-8") as f:
        gold = json.load(f)
    same = gold["safetensors_sha256"] == file_sha256(weights)
    check("spelling.golden_matches_weights", same,
          "tests/golden/spelling.json was made from other weights; renew it with "
          "model/reference.py --spelling (see its header)")
    if not same:
        return
    c.execute("SELECT bert_spelling_sensitivity(1e9)")  # every eligible position a row
    worst, rows_checked, sugg_checked = 0.0, 0, 0
    for seq in gold["sequences"]:
        ok, why = True, ""
        for r in suspects(c, seq["text"], "thorough"):
            ch = seq["chars"][r[0]]
            top = dict(ch["top"])
            d = abs(r[3] - ch["p_written"])
            if ch["written"] != r[2] or d > TOL:
                ok, why = False, "position %d: %s %.6g, reference %s %.6g" % (r[0], r[2], r[3], ch["written"], ch["p_written"])
                break
            worst = max(worst, d)
            if r[4] in top:
                d = abs(r[5] - top[r[4]])
                sugg_checked += 1
            else:  # not among the reference's top: at most its last
                d = max(0.0, r[5] - ch["top"][-1][1])
            if d > TOL:
                ok, why = False, "position %d: %s %.6g, reference %s" % (r[0], r[4], r[5], top.get(r[4]))
                break
            worst = max(worst, d)
            want_margin = math.log(r[5]) - math.log(r[3]) - COST[r[7]]
            if abs(r[6] - want_margin) > 1e-4:
                ok, why = False, "position %d: margin %.6f, from the scores %.6f" % (r[0], r[6], want_margin)
                break
            rows_checked += 1
        check("spelling.reference.%s" % seq["text"], ok, why)
    c.execute("SELECT bert_spelling_sensitivity(0.005)")
    check("spelling.reference.count", rows_checked >= 40 and sugg_checked >= 20,
          "only %d rows, %d suggestions compared" % (rows_checked, sugg_checked))
    print("# largest |engine - reference| probability: %.2e" % worst)


def same_rows(a, b):
    """Rows of fill_suspects alike: the same characters, kinds and texts, and
    scores and margins within 1e-5 relative (a batch of other sizes sums in
    another order: fill_rows' tests allow 1e-6 absolute)."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        for u, v in zip(x, y):
            if isinstance(u, float) or isinstance(v, float):
                if not math.isclose(u, v, rel_tol=1e-5, abs_tol=1e-9):
                    return False
            elif u != v:
                return False
    return True


def check_rows(c):
    texts = [t for t, _, _ in CASES] * 5  # 75 texts: three batches of 32
    c.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, text)")
    c.executemany("INSERT INTO t(text) VALUES (?)", [(t,) for t in texts])
    c.execute("INSERT INTO t(text) VALUES (NULL), (42), ('今天天气真[MASK]啊'), ('我再家里')")
    for mode in ("fast", "thorough"):
        got = c.execute("SELECT key, text, corrected, suspects, error FROM fill_suspects_rows("
                        "'SELECT id, text FROM t ORDER BY id', ?)", (mode,)).fetchall()
        ok, why = len(got) == len(texts) + 4, "%d rows" % len(got)
        for key, text, corrected, sus, error in got if ok else []:
            if not isinstance(text, str) or "[MASK]" in text:
                want_err = None if text is None else error_of(c, "SELECT bert_correct(?)", (text,)).replace(
                    "bert_correct", "fill_suspects_rows", 2)
                if corrected is not None or sus is not None or error != want_err:
                    ok, why = False, "row %d: %r %r %r, want error %r" % (key, corrected, sus, error, want_err)
                    break
                continue
            alone = suspects(c, text, mode)
            as_json = [[s["position"], s["byte_offset"], s["written"], s["written_score"], s["suggestion"],
                        s["suggestion_score"], s["margin"], s["kind"], s["corrected"]] for s in json.loads(sus)]
            want = c.execute("SELECT bert_correct(?, ?)", (text, mode)).fetchone()[0]
            if error is not None or corrected != want or not same_rows(as_json, alone):
                ok, why = False, "row %d %s: %s %s, alone %s %s" % (key, text, corrected, sus, want, alone)
                break
        check("spelling.rows.%s" % mode, ok, why)


MEMORY = r"""
import resource, sqlite3, sys
c = sqlite3.connect(":memory:")
c.enable_load_extension(True)
c.load_extension(sys.argv[1])
c.execute("SELECT bert_load(?)", (sys.argv[2],))
q = ("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < %d) "
     "SELECT i, '我再家里，小时侯我住在北京' || i FROM n")
def run(rows):
    k = 0
    for r in c.execute("SELECT corrected FROM fill_suspects_rows(?)", (q % rows,)):
        k += 1
    assert k == rows, k
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
small = run(300)
big = run(3000)
print(small, big)
"""


def check_memory():
    out = subprocess.run([sys.executable, "-c", MEMORY, EXT, MODEL], capture_output=True, text=True)
    if out.returncode != 0:
        check("spelling.rows.memory", False, out.stderr[-500:])
        return
    small, big = (int(x) for x in out.stdout.split())
    check("spelling.rows.memory", big - small < 8 * 1024,
          "peak RSS grew from %d KB (300 rows) to %d KB (3000 rows)" % (small, big))


def check_cache_and_company(c):
    text = "我再家里"
    alone = suspects(c, text)
    c.execute("SELECT bert_cache('off')")
    off = suspects(c, text)
    c.execute("SELECT bert_cache('on')")
    again = suspects(c, text)
    check("spelling.cache", alone == off == again, "%s / %s / %s" % (alone, off, again))
    many = c.execute("SELECT key, suspects FROM fill_suspects_rows('SELECT 1, ''我再家里'' UNION ALL "
                     "SELECT 2, ''一心一意'' UNION ALL SELECT 3, ''今天天汽很好''')").fetchall()
    first = [[s["position"], s["byte_offset"], s["written"], s["written_score"], s["suggestion"],
              s["suggestion_score"], s["margin"], s["kind"], s["corrected"]] for s in json.loads(many[0][1])]
    check("spelling.batched_as_alone", same_rows(first, alone), "%s vs %s" % (first, alone))


def main():
    if not os.path.exists(os.path.join(MODEL, "model.safetensors")):
        skip("spelling", "model/bertfill-zh-tiny/model.safetensors is missing")
        return exit_code()
    c = connect()
    check_cases(c, "fp32")
    check_errors(c)
    check_sensitivity(c)
    check_reference(c)
    check_cache_and_company(c)
    check_rows(c)
    check_memory()
    for precision in ("int8", "bf16"):
        check_cases(connect(precision), precision)
    return exit_code()


if __name__ == "__main__":
    sys.exit(main())
