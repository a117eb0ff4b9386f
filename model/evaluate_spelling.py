#!/usr/bin/python3
"""Evaluate bertfill's spelling check (fill_suspects / bert_correct) on held-out text, rerunnably.

    /usr/bin/python3 model/evaluate_spelling.py                  # everything (docs/spelling-evaluation.md)
    /usr/bin/python3 model/evaluate_spelling.py --sets everyday --precisions fp32 --no-baseline
    /usr/bin/python3 model/evaluate_spelling.py --sets everyday-dev --repeats 8 --precisions fp32  # tuning
    /usr/bin/python3 model/evaluate_spelling.py --quick          # the small fixed set of make test
    /usr/bin/python3 model/evaluate_spelling.py --quick --record tests/golden/spelling_quick.json

The sets (fixed seed, built at run time into --out-dir, by default
build/spelling-eval/: GSDSimp is CC BY-SA, so the built set is never committed):
  everyday      TEST: the everyday lines held out of the shipped model's
                training (model/heldout.py) but the development part: 750 of
                the 1000;
  everyday-dev  DEVELOPMENT, never scored as a test: every 4th of those 1000
                lines (index % 4 == 3 in heldout.everyday_heldout's order, 250
                lines), the lines the engine's defaults (error-model costs,
                screen slack, default sensitivity: ext/engine/spelling.h) were
                chosen on.  Tune on it: --sets everyday-dev;
  gsdsimp       TEST: the sentences of ../shared/data/corpus-zh/eval/gsdsimp.txt
                (Chinese Wikipedia, UD GSDSimp); nothing was tuned on it;
each limited to texts of at most MAX_CHARS characters (the shipped model takes
128 tokens), then shuffled; the first half is corrupted, the second half is
left clean.  A corrupted sentence gets 1 error (75%), 2 (20%) or 3 (5%),
about 1.3 on average, at distinct Han characters, each of a kind drawn as
  70% same sound    a character of one of the written character's syllables:
                    85% from the syllable's 24 most frequent (an input method's
                    first pages, weighted 1/rank), else any character of the
                    syllable: a WIDER table than the detector's, which suggests
                    only the 24 most frequent;
  10% similar sound any character of a fuzzy-pinyin neighbour syllable (z/zh,
                    n/l, in/ing, ...), not only the 6 most frequent the detector uses;
  10% similar shape one of the character's shape neighbours;
  10% random        any Han character;
always a character of the shipped model's vocabulary (5,432 Han characters;
the same set for every model), never a simplified/traditional variant of the
original (a choice of script, not an error).  The sets come from the
committed table ext/engine/confusion_table.inc (model/build_confusion.py), read
here as data: no unicode-data needed.

Systems, each through the extension with /usr/bin/python3's sqlite3, per model
and precision (--precisions fp32,int8):
  baseline  issue 39's naive loop: every Han character masked in turn,
            fill_candidates(masked, 200); flagged when a same-pinyin character
            (one whose main reading, toneless, is the written one's: what a user
            comparing each character's usual pinyin finds) is >= 30 times
            likelier than the written one (a written character outside the top
            200 counts as likely as the 200th: an upper bound), replaced by the
            likeliest such character.  One encoder pass per character.
  recipe    bert_correct through fill_suspects_rows (the column form: one
            screening run per batch, the suspects verified), mode 'fast', over
            a sweep of bert_spelling_sensitivity (--sensitivities, and the
            extension's default always), and mode
            'thorough' at the default.  Skipped, saying so, when the extension
            has no fill_suspects_rows.

Scores (strict; a sentence is "changed" when the output differs from the input):
  sentence detection   TP = a corrupted sentence whose changed positions are
                       exactly its error positions; P = TP / changed sentences
                       (every changed sentence counts, clean ones too);
                       R = TP / corrupted sentences; F1
  sentence correction  TP = a corrupted sentence whose output is the original
                       text; P = TP / changed sentences; R = TP / corrupted
  character level      detection P/R over changed vs error positions;
                       correction P/R (a changed position given its original)
  false alarms         changed positions in clean sentences per 1,000 of their
                       Han characters; and the share of clean sentences changed
bert-base-chinese cannot be had on this machine (no download): pass
--model DIR where it is installed.
"""
import argparse, hashlib, json, os, random, re, sqlite3, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TABLE = os.path.join(ROOT, "ext", "engine", "confusion_table.inc")
SHIPPED = os.path.join(HERE, "bertfill-zh-tiny")
GSDSIMP = os.path.join(ROOT, "..", "shared", "data", "corpus-zh", "eval", "gsdsimp.txt")
SEED = 20261204
MAX_CHARS = 100
SENSITIVITIES = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2)  # and the default, always
QUICK_SENTENCES = 24           # --quick: the first 24 usable GSDSimp sentences, 12 corrupted
BASELINE_K = 200
BASELINE_RATIO = 30.0
KIND_WEIGHTS = (("same sound", 0.70), ("similar sound", 0.10), ("similar shape", 0.10),
                ("random", 0.10))
N_ERRORS = ((1, 0.75), (2, 0.20), (3, 0.05))


def is_han(ch):
    c = ord(ch)
    return 0x4E00 <= c <= 0x9FFF or 0x3400 <= c <= 0x4DBF or 0xF900 <= c <= 0xFAFF


# ------------------------------------------------------------------ the confusion table, as data

def read_table(path=TABLE):
    """The arrays of confusion_table.inc: {name: [int, ...]}."""
    with open(path, encoding="utf-8") as f:
        text = re.sub(r"/\*.*?\*/", "", f.read(), flags=re.S)
    arrays = {}
    for m in re.finditer(r"static const uint16_t (\w+)\[(\d+)\] = \{(.*?)\};", text, re.S):
        vals = [int(v) for v in m.group(3).replace("\n", " ").split(",") if v.strip()]
        assert len(vals) == int(m.group(2)), m.group(1)
        arrays[m.group(1)] = vals
    return arrays


class Confusions:
    """The corruption sets: wider than the detector's (every character of a syllable)."""

    def __init__(s, vocab_chars, path=TABLE):
        a = read_table(path)
        s.chars = [chr(c) for c in a["bf_conf_char"]]
        idx = {c: i for i, c in enumerate(s.chars)}
        s.idx = idx

        def span(start, pool, i):
            return pool[start[i]:start[i + 1]]

        s.reads = {c: span(a["bf_conf_reading_start"], a["bf_conf_reading"], i) for i, c in enumerate(s.chars)}
        nsyl = len(a["bf_conf_member_start"]) - 1
        s.top = [[s.chars[j] for j in span(a["bf_conf_member_start"], a["bf_conf_member"], k)]
                 for k in range(nsyl)]
        s.similar = [span(a["bf_conf_similar_start"], a["bf_conf_similar"], k) for k in range(nsyl)]
        s.shapes = {c: [s.chars[j] for j in span(a["bf_conf_shape_start"], a["bf_conf_shape"], i)]
                    for i, c in enumerate(s.chars)}
        ex = a["bf_conf_excluded"]
        s.excluded = {(s.chars[ex[k]], s.chars[ex[k + 1]]) for k in range(0, len(ex), 2)}
        s.vocab = set(vocab_chars) & set(s.chars)
        s.all_of = [[] for _ in range(nsyl)]     # every character of each syllable (uncapped)
        for c in s.chars:
            for k in s.reads[c]:
                s.all_of[k].append(c)
        s.random_pool = sorted(s.vocab)

    def same_pinyin(s, ch):
        """The characters whose main reading (the most used) is ch's, toneless: the baseline's
        "same pinyin", as a user comparing each character's usual pinyin finds them."""
        if not s.reads.get(ch):
            return set()
        if not hasattr(s, "by_main"):
            s.by_main = {}
            for c in s.chars:
                if s.reads[c]:
                    s.by_main.setdefault(s.reads[c][0], set()).add(c)
        return s.by_main.get(s.reads[ch][0], set()) - {ch}

    def ok(s, orig, c):
        return c != orig and c in s.vocab and (orig, c) not in s.excluded

    def corrupt_char(s, orig, kind, rng):
        """A replacement for orig of that kind, or None when it has none."""
        if kind == "same sound" or kind == "similar sound":
            syls = list(s.reads.get(orig, ()))
            if kind == "similar sound":
                syls = [t for k in syls for t in s.similar[k]]
            if not syls:
                return None
            k = rng.choice(syls)
            if rng.random() < 0.85:
                cands = [c for c in s.top[k] if s.ok(orig, c)]
                if cands:
                    w = [1.0 / (r + 1) for r in range(len(cands))]
                    return rng.choices(cands, weights=w)[0]
            cands = sorted(c for c in s.all_of[k] if s.ok(orig, c))
            return rng.choice(cands) if cands else None
        if kind == "similar shape":
            cands = [c for c in s.shapes.get(orig, ()) if s.ok(orig, c)]
            return rng.choice(cands) if cands else None
        c = rng.choice(s.random_pool)
        return c if s.ok(orig, c) else None


def vocab_han(model_dir):
    with open(os.path.join(model_dir, "vocab.txt"), encoding="utf-8", newline="") as f:
        return [t for t in f.read().split("\n") if len(t) == 1 and is_han(t)]


# ------------------------------------------------------------------------------ the test set

DEV_EVERY, DEV_REMAINDER = 4, 3   # everyday-dev: the held-out lines i with i % 4 == 3
SETS = ("everyday", "everyday-dev", "gsdsimp")


def everyday_sentences(part):
    """The everyday held-out lines of one part: "test" (750) or "dev" (every 4th: 250)."""
    sys.path.insert(0, HERE)
    import build_vocab, heldout  # noqa: E401  (numpy; reads the training corpus: ~10 s)
    lines = [line for _, line in heldout.everyday_heldout(build_vocab.DEFAULT_CORPUS)]
    dev = part == "dev"
    return [line for i, line in enumerate(lines) if (i % DEV_EVERY == DEV_REMAINDER) == dev]


def gsdsimp_sentences(path=GSDSIMP):
    with open(path, encoding="utf-8") as f:
        return [l.rstrip("\n") for l in f if l.strip()]


def build_set(name, sentences, conf, seed, limit=None, shuffle=True):
    """[{"set", "original", "input", "errors": {pos: (orig, kind)}}], half corrupted, half clean."""
    usable = [t.strip() for t in sentences if 0 < len(t.strip()) <= MAX_CHARS and "[MASK]" not in t
              and sum(1 for c in t if c in conf.vocab) >= 4]
    rng = random.Random("%s/%d" % (name, seed))
    if shuffle:
        rng.shuffle(usable)
    if limit:
        usable = usable[:limit]
    half = len(usable) // 2
    items = []
    for n, text in enumerate(usable):
        item = {"set": name, "original": text, "input": text, "errors": {}}
        if n < half:
            chars = list(text)
            eligible = [i for i, c in enumerate(chars) if c in conf.vocab]
            k = rng.choices([e for e, _ in N_ERRORS], weights=[w for _, w in N_ERRORS])[0]
            for pos in rng.sample(eligible, min(k, len(eligible))):
                kind = rng.choices([k_ for k_, _ in KIND_WEIGHTS], weights=[w for _, w in KIND_WEIGHTS])[0]
                new = None
                for try_kind in (kind, "same sound", "random", "random", "random"):
                    new = conf.corrupt_char(chars[pos], try_kind, rng)
                    if new:
                        kind = try_kind
                        break
                if new:
                    item["errors"][pos] = (chars[pos], kind)
                    chars[pos] = new
            item["input"] = "".join(chars)
        items.append(item)
    return items


def write_set(items, path):
    """Writes the set as JSON lines; returns their sha256 (the same seed gives the same set)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    text = "".join(json.dumps({"set": it["set"], "original": it["original"], "input": it["input"],
                               "errors": {str(p): v for p, v in sorted(it["errors"].items())}},
                              ensure_ascii=False) + "\n" for it in items)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# ---------------------------------------------------------------------------------- systems

def connect(ext, model, precision):
    c = sqlite3.connect(":memory:", isolation_level=None)
    c.enable_load_extension(True)
    c.load_extension(ext)
    c.enable_load_extension(False)
    c.execute("SELECT bert_load(?, ?)", (model, precision)).fetchone()
    return c


def baseline(c, conf, text):
    """Issue 39's naive loop on one text: the output text."""
    chars = list(text)
    out = list(chars)
    for i, ch in enumerate(chars):
        if ch not in conf.vocab:
            continue
        masked = "".join(chars[:i]) + "[MASK]" + "".join(chars[i + 1:])
        rows = c.execute("SELECT token, score FROM fill_candidates(?, ?)", (masked, BASELINE_K)).fetchall()
        if not rows:
            continue
        scores = {t: p for t, p in rows}
        p_written = scores.get(ch, rows[-1][1])
        same = conf.same_pinyin(ch)
        best = max(((p, t) for t, p in rows if t in same and (ch, t) not in conf.excluded), default=None)
        if best and best[0] >= BASELINE_RATIO * p_written:
            out[i] = best[1]
    return "".join(out)


def has_recipe(c):
    try:
        c.execute("SELECT bert_spelling_sensitivity()").fetchone()
        return True
    except sqlite3.OperationalError:
        return False


def recipe(c, texts, mode, sensitivity=None):
    """bert_correct of every text through fill_suspects_rows, at that sensitivity."""
    default = c.execute("SELECT bert_spelling_sensitivity()").fetchone()[0]
    if sensitivity is not None:
        c.execute("SELECT bert_spelling_sensitivity(?)", (sensitivity,)).fetchone()
    c.execute("DROP TABLE IF EXISTS eval_texts")
    c.execute("CREATE TEMP TABLE eval_texts(id INTEGER PRIMARY KEY, text TEXT)")
    c.executemany("INSERT INTO eval_texts VALUES (?, ?)", list(enumerate(texts)))
    out = [None] * len(texts)
    for key, corrected, error in c.execute(
            "SELECT key, corrected, error FROM fill_suspects_rows('SELECT id, text FROM eval_texts', ?)",
            (mode,)):
        out[key] = texts[key] if error else corrected
    c.execute("SELECT bert_spelling_sensitivity(?)", (default,)).fetchone()
    return out


# ----------------------------------------------------------------------------------- scores

def score(items, outputs):
    corrupted = [(it, o) for it, o in zip(items, outputs) if it["errors"]]
    clean = [(it, o) for it, o in zip(items, outputs) if not it["errors"]]
    changed = det_tp = cor_tp = 0
    flags = flag_hit = flag_fixed = n_err = 0
    clean_flags = clean_chars = clean_changed = 0
    by_kind = {}                  # error kind: [errors, detected, fixed]
    for it, out in zip(items, outputs):
        inp, orig = it["input"], it["original"]
        if len(out) != len(inp):
            pos = set(range(max(len(out), len(inp))))
        else:
            pos = {i for i in range(len(inp)) if out[i] != inp[i]}
        err = set(it["errors"])
        for p_, (_, kind) in it["errors"].items():
            k = by_kind.setdefault(kind, [0, 0, 0])
            k[0] += 1
            k[1] += p_ in pos
            k[2] += p_ in pos and len(out) == len(orig) and out[p_] == orig[p_]
        if out != inp:
            changed += 1
        if err:
            det_tp += pos == err
            cor_tp += out == orig
            n_err += len(err)
            flag_hit += len(pos & err)
            flag_fixed += sum(1 for p in pos & err if len(out) == len(orig) and out[p] == orig[p])
        else:
            clean_flags += len(pos)
            clean_chars += sum(1 for ch in inp if is_han(ch))
            clean_changed += out != inp
        flags += len(pos)

    def prf(tp, p_den, r_den):
        p = tp / p_den if p_den else 0.0
        r = tp / r_den if r_den else 0.0
        return round(p, 4), round(r, 4), round(2 * p * r / (p + r) if p + r else 0.0, 4)

    n_cor, n_clean = len(corrupted), len(clean)
    return {"sentences": len(items), "corrupted": n_cor, "errors": n_err, "changed": changed,
            "det_tp": det_tp, "cor_tp": cor_tp, "flags": flags, "flag_hit": flag_hit,
            "flag_fixed": flag_fixed, "clean_flags": clean_flags, "clean_chars": clean_chars,
            "clean_changed": clean_changed, "by_kind": by_kind,
            "det": prf(det_tp, changed, n_cor), "cor": prf(cor_tp, changed, n_cor),
            "char_det": prf(flag_hit, flags, n_err)[:2], "char_cor": prf(flag_fixed, flags, n_err)[:2],
            "clean_flagged_pct": round(100.0 * clean_changed / n_clean, 2) if n_clean else 0.0,
            "fa_per_1000": round(1000.0 * clean_flags / clean_chars, 2) if clean_chars else 0.0}


def row(label, s, secs):
    d, c = s["det"], s["cor"]
    return ("| %s | %.3f | %.3f | **%.3f** | %.3f | %.3f | %.3f | %.3f / %.3f | %.1f%% | %.1f | %.0f |"
            % (label, d[0], d[1], d[2], c[0], c[1], c[2], s["char_det"][0], s["char_det"][1],
               s["clean_flagged_pct"], s["fa_per_1000"], secs))


HEADER = ("| system | det P | det R | det F1 | cor P | cor R | cor F1 | char det P / R "
          "| clean flagged | FA / 1k chars | s |\n|---|---|---|---|---|---|---|---|---|---|---|")


def evaluate(a, sets, conf, log):
    results = []
    for precision in a.precisions:
        c = connect(a.ext, a.model, precision)
        recipe_ok = has_recipe(c)
        if not recipe_ok:
            log("recipe: skipped: this extension has no bert_spelling_sensitivity / fill_suspects_rows")
        default = c.execute("SELECT bert_spelling_sensitivity()").fetchone()[0] if recipe_ok else None
        for name, items in sets:
            texts = [it["input"] for it in items]
            log("\n### %s, %s, %s (%d sentences: %d corrupted with %d errors, %d clean)\n" % (
                name, os.path.basename(os.path.normpath(a.model)), precision, len(items),
                sum(1 for it in items if it["errors"]), sum(len(it["errors"]) for it in items),
                sum(1 for it in items if not it["errors"])))
            log(HEADER)
            runs = []
            if not a.no_baseline:
                runs.append(("baseline (mask each, ×%g)" % BASELINE_RATIO, lambda: [baseline(c, conf, t) for t in texts]))
            if recipe_ok:
                for sens in sorted(set(a.sensitivities) | {default}):
                    label = "fast, sensitivity %g%s" % (sens, " (default)" if abs(sens - default) < 1e-12 else "")
                    runs.append((label, lambda sens=sens: recipe(c, texts, "fast", sens)))
                if not a.no_thorough:
                    runs.append(("thorough, sensitivity %g (default)" % default,
                                 lambda: recipe(c, texts, "thorough", default)))
            for label, fn in runs:
                t0 = time.time()
                outs = fn()
                secs = time.time() - t0
                s = score(items, outs)
                results.append({"set": name, "precision": precision, "system": label,
                                "seconds": round(secs, 2), **s})
                log(row(label, s, secs))
            kinds = [k for k, _ in KIND_WEIGHTS]
            log("\nErrors found / fixed by kind (of how many):\n")
            log("| system | " + " | ".join(kinds) + " |\n|---|" + "---|" * len(kinds))
            for r in results:
                if r["set"] == name and r["precision"] == precision and \
                        (r["system"].startswith(("baseline", "thorough")) or "(default)" in r["system"]):
                    bk = r["by_kind"]
                    log("| %s | " % r["system"] + " | ".join(
                        "%d / %d (%d)" % (bk[k][1], bk[k][2], bk[k][0]) if k in bk else "-" for k in kinds) + " |")
        c.close()
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ext", default=os.path.join(ROOT, "bertfill"), help="the extension (./bertfill)")
    ap.add_argument("--model", default=SHIPPED)
    ap.add_argument("--precisions", default="fp32,int8")
    ap.add_argument("--sets", default="everyday,gsdsimp",
                    help="of %s; the test sets by default (everyday-dev is for tuning)" % ", ".join(SETS))
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--limit", type=int, default=0, help="at most this many sentences per set")
    ap.add_argument("--repeats", type=int, default=1,
                    help="each set built this many times (seeds seed, seed+1, ...), one after the "
                         "other: more decisions to tune on (everyday-dev has only 250 lines)")
    ap.add_argument("--sensitivities", default=",".join("%g" % s for s in SENSITIVITIES))
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("--no-thorough", action="store_true")
    ap.add_argument("--quick", action="store_true",
                    help="the first %d usable GSDSimp sentences, fp32, baseline and the default" % QUICK_SENTENCES)
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "build", "spelling-eval"))
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--record", help="--quick: write the counts to check (tests/python/t_spelling_eval.py)")
    a = ap.parse_args()
    a.precisions = a.precisions.split(",")
    a.sensitivities = [float(s) for s in a.sensitivities.split(",") if s]
    if a.repeats < 1:
        ap.error("--repeats: at least 1")
    bad = [n for n in a.sets.split(",") if n not in SETS]
    if bad:
        ap.error("--sets: no set %s (the sets: %s)" % (", ".join(bad), ", ".join(SETS)))
    conf = Confusions(vocab_han(SHIPPED))
    if not os.path.exists(GSDSIMP) and ("gsdsimp" in a.sets or a.quick):
        print("evaluate_spelling.py: skipped: %s is absent" % GSDSIMP)
        return 0
    sets = []
    if a.quick:
        a.precisions, a.no_thorough = ["fp32"], True
        a.sensitivities = []          # the default only
        sets.append(("gsdsimp-quick", build_set("gsdsimp-quick", gsdsimp_sentences(), conf, a.seed,
                                                limit=QUICK_SENTENCES, shuffle=False)))
    else:
        for name in a.sets.split(","):
            sents = (everyday_sentences("test") if name == "everyday" else
                     everyday_sentences("dev") if name == "everyday-dev" else gsdsimp_sentences())
            items = []
            for seed in range(a.seed, a.seed + a.repeats):
                items += build_set(name, sents, conf, seed, limit=a.limit or None)
            sets.append((name, items))
    hashes = {name: write_set(items, os.path.join(a.out_dir, name + ".jsonl")) for name, items in sets}
    print("evaluate_spelling.py: %s, %s; test sets in %s" % (
        a.model, ",".join(a.precisions), a.out_dir), flush=True)
    results = evaluate(a, sets, conf, lambda line: print(line, flush=True))
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump(results, f, ensure_ascii=False, indent=1)
    if a.record:
        keys = ("sentences", "corrupted", "errors", "changed", "det_tp", "cor_tp", "flags", "flag_hit",
                "flag_fixed", "clean_flags", "clean_chars")
        rec = {"command": "/usr/bin/python3 model/evaluate_spelling.py --quick --record " + a.record,
               "model": os.path.relpath(a.model, ROOT), "seed": a.seed, "set_sha256": hashes,
               "results": {r["system"]: {k: r[k] for k in keys} for r in results}}
        with open(a.record, "w", encoding="utf-8") as f:
            json.dump(rec, f, ensure_ascii=False, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
