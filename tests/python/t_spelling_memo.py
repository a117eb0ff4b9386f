"""The spelling checks through the memo cache and the batcher, as the fill
functions (ext/sqlite/spelling_memo.h, batcher.c's bfx_batch_spell), with the
shipped model:
  - a second check of a text comes from the LRU, then (LRU emptied) from the
    cache table, bit for bit the same, the encoder not run; bert_correct and
    fill_suspects share an entry; another mode or sensitivity is another
    entry; bert_cache('off') reads and writes nothing; the trace says where
    each call's answer came from;
  - a table row that does not fit its text (each field altered in turn) is a
    miss: the answer is computed again, the row rewritten as it was;
  - 300 rows of random bytes flipped (fixed seed): never an error, and every
    row given is one the check could give for the text (its character, a
    margin at the threshold or above, the text with that fix);
  - fill_suspects_rows reads the memo and computes only what it lacks, and
    stores as bert_rows_cache() says ('none': nothing, 'room': the table);
  - threads calling fill_suspects, bert_correct and bert_fill at once, at two
    sensitivities (cache off, BERTFILL_BATCH_GATHER=3 in a child process):
    spelling checks merged into shared runs, every answer the same as the
    text's alone (same_rows: 1e-5 relative), fill and spelling never mixed.
"""
import json
import math
import os
import random
import sqlite3
import struct
import subprocess
import sys
import tempfile
import threading

from bftest import EXT, check, exit_code, skip
from t_spelling import COLS, MODEL, same_rows, suspects

TEXTS = ["我再家里", "今天天汽很好", "这是他地家", "我以经知道了", "他们再哪里", "小时侯我住在北京",
         "一心一意", "我喜欢吃苹果"]
TAG = struct.pack("<i", -4)  # BFC_TAG_SPELLING, the first id of the key


def connect(path=":memory:"):
    c = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    c.enable_load_extension(True)
    c.load_extension(EXT)
    c.execute("SELECT bert_load(?)", (MODEL,))
    return c


def stat(c, name):
    return c.execute("SELECT value FROM bertfill_stats WHERE name = ?", (name,)).fetchone()[0]


def stats(c, *names):
    return {n: stat(c, n) for n in names}


def delta(before, after):
    return {n: after[n] - before[n] for n in before}


def forget_lru(c):
    """Empty the process-wide LRU, keeping the table: bound it to one entry,
    put another text in it, unbind it."""
    was = c.execute("SELECT bert_cache_lru()").fetchone()[0]
    c.execute("SELECT bert_cache_lru(1)")
    c.execute("SELECT bert_fill('天[MASK]很好')")
    c.execute("SELECT bert_cache_lru(?)", (was,))


def spelling_rows(c):
    return c.execute("SELECT id, key, result FROM bertfill_cache WHERE substr(key, 1, 4) = ? "
                     "ORDER BY id", (TAG,)).fetchall()


def parse(blob):
    magic, masks, k = blob[:4], *struct.unpack("<II", blob[4:12])
    cands = [struct.unpack("<if", blob[12 + 8 * i:20 + 8 * i]) for i in range(masks * k)]
    return magic, masks, k, cands


def pack(magic, masks, k, cands):
    return magic + struct.pack("<II", masks, k) + b"".join(struct.pack("<if", i, p) for i, p in cands)


def check_lru_and_table(c):
    text = TEXTS[0]
    names = ("hit_lru", "hit_table", "miss", "encoder_runs", "cache_writes")
    s0 = stats(c, *names)
    first = suspects(c, text)
    d = delta(s0, stats(c, *names))
    check("memo.first_is_a_miss", d == {"hit_lru": 0, "hit_table": 0, "miss": 1, "encoder_runs": 1,
                                        "cache_writes": 1} and len(first) == 1, "%s %s" % (d, first))
    check("memo.one_row_written", len(spelling_rows(c)) == 1, str(spelling_rows(c)))
    s0 = stats(c, *names)
    again = suspects(c, text)
    d = delta(s0, stats(c, *names))
    check("memo.lru_hit", again == first and d["hit_lru"] == 1 and d["encoder_runs"] == 0
          and d["miss"] == 0, "%s %s vs %s" % (d, again, first))
    forget_lru(c)
    s0 = stats(c, *names)
    from_table = suspects(c, text)
    d = delta(s0, stats(c, *names))
    check("memo.table_hit", from_table == first and d["hit_table"] == 1 and d["encoder_runs"] == 0,
          "%s %s vs %s" % (d, from_table, first))
    s0 = stats(c, *names)
    corrected = c.execute("SELECT bert_correct(?)", (text,)).fetchone()[0]
    d = delta(s0, stats(c, *names))
    check("memo.correct_shares_the_entry", corrected == first[0][8] and d["hit_lru"] == 1
          and d["encoder_runs"] == 0, "%s %s" % (d, corrected))
    # another mode, another sensitivity: other entries
    s0 = stats(c, *names)
    suspects(c, text, "thorough")
    c.execute("SELECT bert_spelling_sensitivity(0.5)")
    loose = suspects(c, text)
    c.execute("SELECT bert_spelling_sensitivity(0.005)")
    d = delta(s0, stats(c, *names))
    check("memo.mode_and_sensitivity_in_key", d["miss"] == 2 and d["hit_lru"] == 0
          and len(spelling_rows(c)) == 3, "%s rows %d" % (d, len(spelling_rows(c))))
    check("memo.sensitivity_answers_differ", len(loose) > len(first), "%s vs %s" % (loose, first))
    # a text with nothing to flag is kept too (n = 0)
    s0 = stats(c, *names)
    clean = [suspects(c, "一心一意") for _ in range(2)]
    d = delta(s0, stats(c, *names))
    check("memo.clean_text", clean == [[], []] and d["miss"] == 1 and d["hit_lru"] == 1, str(d))
    # off: nothing read or written
    c.execute("SELECT bert_cache('off')")
    rows_before = len(spelling_rows(c))
    s0 = stats(c, *names)
    off = [suspects(c, TEXTS[1]) for _ in range(2)] + [suspects(c, text)]
    d = delta(s0, stats(c, *names))
    c.execute("SELECT bert_cache('on')")
    check("memo.off", d["hit_lru"] == 0 and d["hit_table"] == 0 and d["encoder_runs"] == 3
          and len(spelling_rows(c)) == rows_before and off[2] == first and off[0] == off[1],
          "%s %s" % (d, off))
    # the trace says where each answer came from
    c.execute("SELECT bert_trace(1)")
    suspects(c, TEXTS[2])
    suspects(c, TEXTS[2])
    src = [r[0] for r in c.execute("SELECT source FROM bertfill_trace WHERE func = 'fill_suspects' "
                                   "ORDER BY id")]
    c.execute("SELECT bert_trace(0)")
    check("memo.trace_source", src == ["encoder", "lru"], str(src))


def check_poisoned_rows(c):
    """Each field of a stored check altered in turn: never believed."""
    text = TEXTS[1]  # 今天天汽很好: one finding, 汽 -> 气
    honest = suspects(c, text)
    rows = [r for r in spelling_rows(c)]
    ours = [r for r in rows if r[1][8:] == b"".join(struct.pack("<i", i) for i in tokens_of(c, text))
            + struct.pack("<d", 0.005)]
    check("memo.poison.found_row", len(ours) == 1 and len(honest) == 1, "%d rows" % len(ours))
    if len(ours) != 1 or len(honest) != 1:
        return
    rid, key, blob = ours[0]
    magic, masks, k, cands = parse(blob)
    check("memo.poison.layout", masks == 1 and k == 4 and cands[0] == (1, 0.0)
          and cands[1][1] == 0.25, "%s %s %s" % (masks, k, cands))
    other_id = vocab_id("的")  # in the vocabulary, no confusable of 汽

    def alter(name, f):
        cs = [tuple(x) for x in cands]
        m2, k2, cs = f(masks, k, cs)
        n = c.execute("UPDATE bertfill_cache SET result = ? WHERE key = ?", (pack(magic, m2, k2, cs), key)).rowcount
        forget_lru(c)
        s0 = stats(c, "hit_table", "miss")
        got = suspects(c, text)
        d = delta(s0, stats(c, "hit_table", "miss"))
        now = c.execute("SELECT result FROM bertfill_cache WHERE key = ?", (key,)).fetchone()[0]
        check("memo.poison." + name, n == 1 and got == honest and d == {"hit_table": 0, "miss": 1}
              and now == blob, "%s %s vs %s" % (d, got, honest))

    alter("count_too_big", lambda m, k, cs: (m, k, [(2, 0.0)] + cs[1:]))
    alter("count_too_small", lambda m, k, cs: (m, k, [(0, 0.0)] + cs[1:]))
    alter("first_prob", lambda m, k, cs: (m, k, [(1, 0.5)] + cs[1:]))
    alter("token_moved", lambda m, k, cs: (m, k, cs[:1] + [(cs[1][0] + 1, cs[1][1])] + cs[2:]))
    alter("token_cls", lambda m, k, cs: (m, k, cs[:1] + [(0, cs[1][1])] + cs[2:]))
    alter("kind_shape", lambda m, k, cs: (m, k, cs[:1] + [(cs[1][0], 0.75)] + cs[2:]))
    alter("kind_bad", lambda m, k, cs: (m, k, cs[:1] + [(cs[1][0], 0.3)] + cs[2:]))
    alter("written_id", lambda m, k, cs: (m, k, cs[:2] + [(cs[2][0] + 1, cs[2][1])] + cs[3:]))
    alter("written_prob_up", lambda m, k, cs: (m, k, cs[:2] + [(cs[2][0], 0.9)] + cs[3:]))
    alter("suggestion_other", lambda m, k, cs: (m, k, cs[:3] + [(other_id, cs[3][1])]))
    alter("suggestion_prob_zero", lambda m, k, cs: (m, k, cs[:3] + [(cs[3][0], 0.0)]))
    alter("padding", lambda m, k, cs: (m, k + 1, cs + [(5, 0.0)]))
    alter("two_masks", lambda m, k, cs: (2, k, cs + cs))


VOCAB = None


def vocab_id(token):
    global VOCAB
    if VOCAB is None:
        with open(os.path.join(MODEL, "vocab.txt"), encoding="utf-8", newline="") as f:
            VOCAB = {t: i for i, t in enumerate(f.read().split("\n"))}
    return VOCAB[token]


def sane(text, rows, sensitivity=0.005):
    """Rows fill_suspects could give for text: each at a character of it, in
    order, with a margin at the threshold or above and its own correction."""
    last = -1
    for pos, off, w, ws, sug, ss, margin, kind, corrected in rows:
        if not (last < pos < len(text) and len(text[:pos].encode()) == off and text[pos] == w):
            return False
        if sug == w or kind not in ("same sound", "similar sound", "similar shape"):
            return False
        if not (0 < ws <= 1 and 0 < ss <= 1 and margin >= math.log(1 / sensitivity) - 1e-9):
            return False
        if corrected != text[:pos] + sug + text[pos + 1:]:
            return False
        last = pos
    return True


def check_random_rows(c):
    """Random bytes of a stored check flipped: never a crash or an error, and
    what is believed is a check the text could have."""
    rng = random.Random(39)
    bad = []
    believed = 0
    for text in (TEXTS[1], TEXTS[0], TEXTS[6]):
        honest = suspects(c, text)
        key, blob = [(r[1], r[2]) for r in spelling_rows(c)
                     if r[1][8:-8] == b"".join(struct.pack("<i", i) for i in tokens_of(c, text))
                     and r[1][4:8] == struct.pack("<i", 0)][0]
        for _ in range(100):
            b = bytearray(blob)
            for _ in range(rng.choice((1, 1, 2, 4))):
                at = rng.randrange(len(b))
                b[at] ^= 1 << rng.randrange(8)
            if rng.random() < 0.1:
                b = b[:rng.randrange(len(b))]
            c.execute("UPDATE bertfill_cache SET result = ? WHERE key = ?", (bytes(b), key))
            forget_lru(c)
            try:
                got = suspects(c, text)
            except sqlite3.Error as e:
                bad.append((text, str(e)))
                continue
            if got != honest:
                believed += 1
                if not sane(text, got):
                    bad.append((text, got))
        c.execute("UPDATE bertfill_cache SET result = ? WHERE key = ?", (blob, key))
    check("memo.random_rows", not bad, repr(bad[:3]))
    print("   (300 altered rows: %d believed, each a check the text could have)" % believed)


def tokens_of(c, text):
    return [vocab_id(t) for t in json.loads(c.execute("SELECT bert_tokenize(?)", (text,)).fetchone()[0])]


def check_rows(c):
    c.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, text TEXT)")
    c.executemany("INSERT INTO t(text) VALUES (?)", [(t,) for t in TEXTS])
    c.execute("SELECT bert_cache('clear')")
    for t in TEXTS[:2]:
        suspects(c, t)
    alone = {t: suspects(c, t) for t in TEXTS}

    def scan():
        s0 = stats(c, "seqs", "encoder_runs")
        got = c.execute("SELECT text, suspects FROM fill_suspects_rows('SELECT id, text FROM t')"
                        ).fetchall()
        return got, delta(s0, stats(c, "seqs", "encoder_runs"))

    c.execute("SELECT bert_cache('clear')")
    for t in TEXTS[:3]:
        suspects(c, t)
    c.execute("SELECT bert_rows_cache('none')")
    before = len(spelling_rows(c))
    got, d = scan()
    as_rows = {t: [[s[x] for x in COLS.split(", ")] for s in json.loads(j)] for t, j in got}
    check("memo.rows.same_as_alone", all(same_rows(as_rows[t], alone[t]) for t in TEXTS),
          "%s vs %s" % (as_rows, alone))
    check("memo.rows.computes_what_it_lacks", d == {"seqs": len(TEXTS) - 3, "encoder_runs": 1},
          str(d))
    check("memo.rows.none_stores_nothing", len(spelling_rows(c)) == before,
          "%d -> %d" % (before, len(spelling_rows(c))))
    c.execute("SELECT bert_rows_cache('room')")
    got, d = scan()
    check("memo.rows.room_stores", len(spelling_rows(c)) == len(TEXTS) and d["seqs"] == len(TEXTS) - 3,
          "%d rows, %s" % (len(spelling_rows(c)), d))
    again, d = scan()
    check("memo.rows.second_scan_from_memo", again == got and d == {"seqs": 0, "encoder_runs": 0},
          str(d))


# ------------------------------------------------------------ the batcher

THREADS = 6
ROUNDS = 4


def child():
    """Threads at once, each on its own connection, cache off; prints JSON."""
    cs = [connect() for _ in range(THREADS)]
    ref = connect()
    ref.execute("SELECT bert_cache('off'), bert_batching(0)")
    sens = {0: 0.005, 1: 0.5}
    want = {}
    for s in sens.values():
        ref.execute("SELECT bert_spelling_sensitivity(?)", (s,))
        for t in TEXTS:
            want[(s, t)] = suspects(ref, t)
            want[("correct", s, t)] = ref.execute("SELECT bert_correct(?)", (t,)).fetchone()[0]
    fills = {t: ref.execute("SELECT bert_fill(?)", (t,)).fetchone()[0]
             for t in ["今天天气[MASK]好", "我[MASK]家里"]}
    ref.execute("SELECT bert_batching(1)")
    for i, c in enumerate(cs):
        c.execute("SELECT bert_cache('off'), bert_spelling_sensitivity(?), bert_trace(1)",
                  (sens[i % 3 == 2],))
    s0 = stats(ref, "batches", "encoder_runs")
    start = threading.Barrier(THREADS)
    bad = []

    def work(i):
        c = cs[i]
        s = sens[i % 3 == 2]
        for r in range(ROUNDS):
            start.wait()
            t = TEXTS[(i + r) % len(TEXTS)]
            if i % 3 == 1 and r % 2:  # a fill call among the checks
                f = "今天天气[MASK]好" if i % 2 else "我[MASK]家里"
                got = c.execute("SELECT bert_fill(?)", (f,)).fetchone()[0]
                if got != fills[f]:
                    bad.append(("fill", f, got, fills[f]))
            elif r % 2:
                got = c.execute("SELECT bert_correct(?)", (t,)).fetchone()[0]
                if got != want[("correct", s, t)]:
                    bad.append(("correct", s, t, got, want[("correct", s, t)]))
            else:
                got = suspects(c, t)
                if not same_rows(got, want[(s, t)]):
                    bad.append(("suspects", s, t, got, want[(s, t)]))

    ts = [threading.Thread(target=work, args=(i,)) for i in range(THREADS)]
    for x in ts:
        x.start()
    for x in ts:
        x.join()
    d = delta(s0, stats(ref, "batches", "encoder_runs"))
    merged = sum(c.execute("SELECT count(*) FROM bertfill_trace WHERE func IN ('fill_suspects', "
                           "'bert_correct') AND batch_seqs > 1").fetchone()[0] for c in cs)
    print(json.dumps({"bad": bad, "delta": d, "merged": merged}, ensure_ascii=False))


def check_batcher():
    env = dict(os.environ, BERTFILL_BATCH_GATHER="3")
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child"], env=env,
                         capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        check("memo.batcher.ran", False, out.stderr[-800:])
        return
    r = json.loads(out.stdout.strip().splitlines()[-1])
    check("memo.batcher.same_as_alone", r["bad"] == [], json.dumps(r["bad"], ensure_ascii=False)[:800])
    calls = THREADS * ROUNDS
    check("memo.batcher.merged", r["merged"] >= 2 and r["delta"]["batches"] >= 1
          and r["delta"]["encoder_runs"] < calls, "%d checks in merged runs, %s" % (r["merged"], r["delta"]))


def main():
    if not os.path.exists(os.path.join(MODEL, "model.safetensors")):
        skip("spelling_memo", "model/bertfill-zh-tiny/model.safetensors is missing")
        return exit_code()
    with tempfile.TemporaryDirectory() as d:
        c = connect(os.path.join(d, "memo.db"))
        c.execute("SELECT bert_cache('on')")
        check_lru_and_table(c)
        check_poisoned_rows(c)
        check_random_rows(c)
        check_rows(c)
        c.close()
    check_batcher()
    return exit_code()


if __name__ == "__main__":
    if sys.argv[1:] == ["--child"]:
        child()
        sys.exit(0)
    sys.exit(main())
