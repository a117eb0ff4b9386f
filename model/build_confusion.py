#!/usr/bin/python3
"""Build ext/engine/confusion_table.inc, the confusion sets of fill_suspects, from Unicode's Unihan.

    /usr/bin/python3 model/build_confusion.py            # writes ext/engine/confusion_table.inc
    /usr/bin/python3 model/build_confusion.py --check    # exit 1 when the committed table differs
    /usr/bin/python3 model/build_confusion.py --show 己未的   # each character's sets, as the C reads them

Input (stdlib only): the Unihan files of Debian's `unicode-data` package
(/usr/share/unicode/Unihan_*.txt.bz2, Unicode 15.0.0 in Debian 12) and the
Han characters of bert-base-chinese's vocab.txt (split on "\n" only; its
7,322 one-character tokens of the CJK Unified Ideographs blocks, every one in
the Basic Multilingual Plane).  The fields read:

  Unihan_Readings.txt            kMandarin, kTGHZ2013, kHanyuPinlu (modern readings;
                                 kXHC1983, then kHanyuPinyin only for a character
                                 without any of those), kHanyuPinlu's counts
                                 (frequency of each reading in a modern corpus)
  Unihan_DictionaryLikeData.txt  kCangjie, kFourCornerCode, kFrequency
  Unihan_IRGSources.txt          kTotalStrokes, kRSUnicode (radical)
  Unihan_Variants.txt            kSimplifiedVariant, kTraditionalVariant (such pairs
                                 are a script choice, not a typo: never confusables)

Licence: the Unihan data are (c) Unicode, Inc., used under the Unicode License
(ext/engine/LICENSE-Unicode.txt, shipped as licenses/unicode in the release
tarballs); the generated table carries the same notice.

What the table holds (ext/engine/confusion.c reads it; docs/spelling.md):
  * same sound: characters sharing a toneless syllable (tones are ignored:
    a pinyin input method types none).  Each syllable keeps its
    SAME_SOUND_KEEP most frequent characters as suggestions (by
    kHanyuPinlu's count of that reading, then kFrequency, then code point);
    "yi" has 120 characters in the vocab, the writer who typed one meant a
    common one.
  * similar sound: syllables one edit apart under the "fuzzy pinyin" pairs
    of the common input methods (Sogou, Google Pinyin, fcitx, ibus-pinyin
    offer exactly these as options because speakers of southern Mandarin,
    Wu, Min and Cantonese merge them): initials z/zh c/ch s/sh n/l r/l f/h,
    finals an/ang en/eng in/ing (with ian/iang and uan/uang through an/ang).
    The resulting syllable must exist.  Each such syllable gives its
    SIMILAR_SOUND_KEEP most frequent characters.
  * similar shape: two characters at most 2 strokes apart whose Cangjie codes
    (the components, in writing order) are one edit apart, or whose four-corner
    codes (the shapes of the four corners) share their four digits while the
    Cangjie codes are at most two edits apart, with more conditions (the same
    radical, strokes) where the evidence is thin: shape_score() says which.
    They are ranked by a score (same Cangjie 4, a component added at the end
    3.5, changed 3, swapped 2, two edits 1; same four-corner digits 3, and its
    fifth digit 1 more; same strokes 1, one apart 0.5; same radical 0.5) and
    the SHAPE_KEEP best kept per character (1.35 on average; 3,139 of the
    7,322 characters have none).  Of 31 known shape confusions 25 are found
    (己/已, 己/巳, 已/巳, 未/末, 拨/拔, 侯/候, 戊/戌, 戌/戍, 人/入, 土/士, 日/曰, 大/太,
    干/于, 今/令, 折/拆, 辨/辩, 栗/粟, 冶/治, 崇/祟, 茶/荼, 鸟/乌, 王/玉, 历/厉,
    卯/卵, 狠/狼); 贝/见, 干/千, 自/目, 免/兔, 即/既 and 被/披 are not: their Cangjie
    codes and four-corner codes both differ too much.
"""
import argparse, bz2, collections, os, sys, unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
UNIHAN_DIR = "/usr/share/unicode"
VOCAB = os.path.join(ROOT, "..", "shared", "data", "bert-base-chinese", "vocab.txt")
OUT = os.path.join(ROOT, "ext", "engine", "confusion_table.inc")

SAME_SOUND_KEEP = 24
SIMILAR_SOUND_KEEP = 6
SHAPE_KEEP = 6

INITIAL_PAIRS = (("zh", "z"), ("ch", "c"), ("sh", "s"), ("n", "l"), ("r", "l"), ("f", "h"))
FINAL_PAIRS = (("an", "ang"), ("en", "eng"), ("in", "ing"))
INITIALS = ("zh", "ch", "sh", "b", "p", "m", "f", "d", "t", "n", "l", "g", "k", "h", "j", "q", "x",
            "r", "z", "c", "s", "y", "w")

FIELDS = {"Unihan_Readings": ("kMandarin", "kTGHZ2013", "kHanyuPinlu", "kXHC1983", "kHanyuPinyin"),
          "Unihan_DictionaryLikeData": ("kCangjie", "kFourCornerCode", "kFrequency"),
          "Unihan_IRGSources": ("kTotalStrokes", "kRSUnicode"),
          "Unihan_Variants": ("kSimplifiedVariant", "kTraditionalVariant")}


def is_han(ch):
    c = ord(ch)
    return (0x4E00 <= c <= 0x9FFF or 0x3400 <= c <= 0x4DBF or 0x20000 <= c <= 0x323AF
            or 0xF900 <= c <= 0xFAFF)


def vocab_han(path=VOCAB):
    """The vocab's one-character Han tokens, in vocab order (split on \\n only)."""
    with open(path, encoding="utf-8", newline="") as f:
        toks = f.read().split("\n")
    seen, out = set(), []
    for t in toks:
        if len(t) == 1 and is_han(t) and t not in seen:
            seen.add(t)
            out.append(t)
    return out


def open_unihan(unihan_dir, name):
    for suffix, opener in ((".txt", open), (".txt.bz2", bz2.open)):
        p = os.path.join(unihan_dir, name + suffix)
        if os.path.exists(p):
            return opener(p, "rt", encoding="utf-8")
    raise FileNotFoundError("%s/%s.txt(.bz2) not found: install Debian's unicode-data package"
                            % (unihan_dir, name))


def load_unihan(unihan_dir=UNIHAN_DIR, chars=None):
    """{character: {field: value}} for the fields of FIELDS (only `chars` when given)."""
    data = collections.defaultdict(dict)
    for name, fields in FIELDS.items():
        with open_unihan(unihan_dir, name) as f:
            for line in f:
                if line.startswith("#") or not line.strip():
                    continue
                cp, field, value = line.rstrip("\n").split("\t", 2)
                if field not in fields:
                    continue
                ch = chr(int(cp[2:], 16))
                if chars is None or ch in chars:
                    data[ch][field] = value
    return data


def toneless(pinyin):
    """'zài' -> 'zai', 'lǘ' -> 'lv', 'ê̄' -> 'e': Unihan's pinyin without tone marks, ü as v."""
    d = unicodedata.normalize("NFD", pinyin.strip().lower())
    d = d.replace("u\u0308", "v")
    return "".join(c for c in d if not unicodedata.combining(c))


def readings(d, wide=False):
    """[(syllable, pinlu count or None)] of one character's data, most used first.
    The modern readings (kMandarin, kTGHZ2013, kHanyuPinlu); kXHC1983 then
    kHanyuPinyin only when none.  wide=True: the union of every field (the
    evaluation's wider table draws its errors from it)."""
    pinlu = {}
    for item in d.get("kHanyuPinlu", "").split():
        syl, _, count = item.partition("(")
        s = toneless(syl)
        pinlu[s] = pinlu.get(s, 0) + int(count.rstrip(")"))

    def dict_field(value):  # "0224.040:de 0231.060:dí,dì" -> ['de', 'di', 'di']
        return [toneless(r) for item in value.split() for r in item.partition(":")[2].split(",")]

    modern = [toneless(r) for r in d.get("kMandarin", "").split()]
    modern += dict_field(d.get("kTGHZ2013", "")) + list(pinlu)
    rest = dict_field(d.get("kXHC1983", "")) + dict_field(d.get("kHanyuPinyin", ""))
    syls = modern + rest if wide else (modern or dict_field(d.get("kXHC1983", "")) or
                                       dict_field(d.get("kHanyuPinyin", "")))
    order = []
    for s in syls:
        if s and s.isascii() and s.isalpha() and s not in order:
            order.append(s)
    # most used first: pinlu count, then the order above (kMandarin's reading first)
    order.sort(key=lambda s: -pinlu.get(s, -1))
    return [(s, pinlu.get(s)) for s in order]


def split_syllable(s):
    for ini in INITIALS:
        if s.startswith(ini) and len(s) > len(ini):
            return ini, s[len(ini):]
    return "", s


def similar_syllables(s, inventory):
    """The syllables of `inventory` one fuzzy-pinyin edit from s, in a fixed order."""
    ini, fin = split_syllable(s)
    out = []
    for a, b in INITIAL_PAIRS:
        for x, y in ((a, b), (b, a)):
            if ini == x:
                out.append(y + fin)
    for a, b in FINAL_PAIRS:
        for x, y in ((a, b), (b, a)):
            if fin.endswith(x) and not (x == "an" and fin.endswith("ang")) and \
               not (x == "en" and fin.endswith("eng")) and not (x == "in" and fin.endswith("ing")):
                out.append(ini + fin[:len(fin) - len(x)] + y)
    seen = []
    for t in out:
        if t != s and t in inventory and t not in seen:
            seen.append(t)
    return seen


def frequency_key(ch, d, syl):
    """Sort key (ascending = more frequent) of character ch as a writing of syllable syl."""
    rs = dict(readings(d, wide=True))
    count = rs.get(syl)
    freq = int(d["kFrequency"]) if "kFrequency" in d else 6
    return (-(count if count is not None else -1), freq, ord(ch))


def cangjie_distance(a, b):
    """Optimal string alignment distance (edits and swaps of neighbours)."""
    n, m = len(a), len(b)
    dp = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n + 1):
        dp[i][0] = i
    for j in range(m + 1):
        dp[0][j] = j
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            dp[i][j] = min(dp[i - 1][j] + 1, dp[i][j - 1] + 1, dp[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                dp[i][j] = min(dp[i][j], dp[i - 2][j - 2] + 1)
    return dp[n][m]


def shape_info(d):
    cj = d.get("kCangjie", "")
    fcs = d.get("kFourCornerCode", "").split()
    strokes = d.get("kTotalStrokes", "").split()
    rad = d.get("kRSUnicode", "").split(".")[0] if "kRSUnicode" in d else None
    return cj, fcs, int(strokes[0]) if strokes else None, rad


def shape_score(a, b):
    """0 when a and b (shape_info) are not similar enough, else a score: higher is closer.
    Similar: at most 2 strokes apart and one of
      A. Cangjie codes one edit apart (not a swap), at most 1 stroke apart, and the same
         radical, the same four-corner digits or one code the other's start (今 OIN, 令 OINI);
         a code of one or two letters only with a start, or the same radical and strokes;
      B. the same four-corner digits and Cangjie codes at most two edits apart, with the same
         radical, one edit, or at most 1 stroke apart;
      C. the same Cangjie code."""
    cja, fca, sa, ra = a
    cjb, fcb, sb, rb = b
    if sa is None or sb is None or abs(sa - sb) > 2 or not cja or not cjb:
        return 0.0
    dist = cangjie_distance(cja, cjb)
    prefix = cja.startswith(cjb) or cjb.startswith(cja)
    swap = dist == 1 and sorted(cja) == sorted(cjb)
    fc_same = bool({f[:4] for f in fca} & {f[:4] for f in fcb})
    radical = ra is not None and ra == rb
    strokes = abs(sa - sb)
    short = min(len(cja), len(cjb)) < 3 and not prefix and not (radical and strokes == 0)
    if not ((dist == 1 and not swap and not short and strokes <= 1 and (radical or fc_same or prefix)) or
            (fc_same and dist <= 2 and (radical or dist == 1 or strokes <= 1)) or dist == 0):
        return 0.0
    score = {0: 4.0, 1: 2.0 if swap else 3.5 if prefix else 3.0, 2: 1.0}[dist]
    if fc_same:
        score += 3.0 + (1.0 if set(fca) & set(fcb) and all("." in f for f in set(fca) & set(fcb))
                        else 0.0)
    score += {0: 1.0, 1: 0.5}.get(strokes, 0.0)
    if radical:
        score += 0.5
    return score


def deletion_keys(code):
    keys = {code}
    for i in range(len(code)):
        keys.add(code[:i] + code[i + 1:])
    return keys


def variant_pairs(data, chars):
    pairs = set()
    for ch in chars:
        for field in ("kSimplifiedVariant", "kTraditionalVariant"):
            for item in data[ch].get(field, "").split():
                v = chr(int(item.split("<")[0][2:], 16))
                if v != ch:
                    pairs.add((ch, v))
                    pairs.add((v, ch))
    return pairs


def shape_neighbours(chars, data, exclude):
    """{ch: [neighbour, ...]} best first (score, then frequency)."""
    info = {ch: shape_info(data[ch]) for ch in chars}
    blocks = collections.defaultdict(set)
    for ch in chars:
        cj, fcs, _, _ = info[ch]
        if cj:
            for k in deletion_keys(cj):
                blocks["c" + k].add(ch)
        for f in fcs:
            blocks["f" + f[:4]].add(ch)
    cands = collections.defaultdict(set)
    for members in blocks.values():
        if len(members) > 400:  # a one-letter Cangjie key: not a shape
            continue
        for a in members:
            cands[a] |= members
    out = {}
    for ch in chars:
        scored = []
        for o in cands[ch]:
            if o == ch or (ch, o) in exclude:
                continue
            s = shape_score(info[ch], info[o])
            if s > 0:
                scored.append((-s, int(data[o].get("kFrequency", 6)), ord(o), o))
        scored.sort()
        out[ch] = [o for *_, o in scored[:SHAPE_KEEP]]
    return out


def build(unihan_dir=UNIHAN_DIR, vocab=VOCAB):
    chars = sorted(vocab_han(vocab), key=ord)
    data = load_unihan(unihan_dir, set(chars))
    charset = set(chars)
    exclude = variant_pairs(data, chars)
    reads = {ch: [s for s, _ in readings(data[ch])] for ch in chars}
    inventory = sorted({s for rs in reads.values() for s in rs})
    members = {s: [] for s in inventory}
    for ch in chars:
        for s in reads[ch]:
            members[s].append(ch)
    for s in inventory:
        members[s].sort(key=lambda ch: frequency_key(ch, data[ch], s))
    similar = {s: similar_syllables(s, set(inventory)) for s in inventory}
    shapes = shape_neighbours(chars, data, exclude)
    return {"chars": chars, "reads": reads, "inventory": inventory, "members": members,
            "similar": similar, "shapes": shapes, "exclude": sorted(p for p in exclude
                                                                    if p[0] in charset and p[1] in charset)}


def confusables(t, ch):
    """[(character, kind)] for written ch, as ext/engine/confusion.c computes them (the C test's
    independent reference and --show)."""
    if ch not in t["reads"]:
        return []
    excl = set(t["exclude"])
    mine = set(t["reads"][ch])
    near = {s2 for s in t["reads"][ch] for s2 in t["similar"][s]}
    out, seen = [], {ch}

    def kind_of(o):
        if mine & set(t["reads"][o]):
            return 1
        if near & set(t["reads"][o]):
            return 2
        return 3

    for want in (1, 2, 3):
        sources = []
        if want == 1:
            sources = [c for s in t["reads"][ch] for c in t["members"][s][:SAME_SOUND_KEEP]]
        elif want == 2:
            sources = [c for s in t["reads"][ch] for s2 in t["similar"][s]
                       for c in t["members"][s2][:SIMILAR_SOUND_KEEP]]
        sources += t["shapes"][ch]
        for o in sources:
            if o in seen or (ch, o) in excl or kind_of(o) != want:
                continue
            seen.add(o)
            out.append((o, want))
    return out


def c_array(name, ctype, values, per_line=16, comments=None):
    lines = ["static const %s %s[%d] = {" % (ctype, name, len(values))]
    if comments:
        for vals, comment in comments:
            lines.append("  " + ", ".join(str(v) for v in vals) + ("," if vals else "") +
                         " /* %s */" % comment)
    else:
        for i in range(0, len(values), per_line):
            lines.append("  " + ", ".join(str(v) for v in values[i:i + per_line]) + ",")
    lines.append("};")
    return "\n".join(lines)


def emit(t):
    chars, inventory = t["chars"], t["inventory"]
    idx = {ch: i for i, ch in enumerate(chars)}
    sidx = {s: i for i, s in enumerate(inventory)}
    assert all(ord(c) < 0x10000 for c in chars), "a character beyond the BMP: widen bf_conf_char"
    assert len(chars) < 0xFFFF and len(inventory) < 0xFFFF
    read_start, read_pool = [0], []
    shape_start, shape_pool = [0], []
    for ch in chars:
        read_pool += [sidx[s] for s in t["reads"][ch]]
        read_start.append(len(read_pool))
        shape_pool += [idx[o] for o in t["shapes"][ch]]
        shape_start.append(len(shape_pool))
    mem_start, mem_pool, mem_comments = [0], [], []
    sim_start, sim_pool = [0], []
    for s in inventory:
        keep = [idx[c] for c in t["members"][s][:SAME_SOUND_KEEP]]
        mem_pool += keep
        mem_start.append(len(mem_pool))
        mem_comments.append((keep, "%d %s %s" % (sidx[s], s, "".join(chars[i] for i in keep))))
        sim_pool += [sidx[x] for x in t["similar"][s]]
        sim_start.append(len(sim_pool))
    excl = [(idx[a], idx[b]) for a, b in t["exclude"]]
    excl_flat = [v for pair in excl for v in pair]
    assert max(len(mem_pool), len(read_pool), len(shape_pool), len(sim_pool)) < 0xFFFF
    # confusion.c's fixed room: 32 syllables and 128 similar syllables per character
    assert max(len(t["reads"][ch]) for ch in chars) <= 32
    assert max(sum(len(t["similar"][s]) for s in t["reads"][ch]) for ch in chars) <= 128
    max_count = max(len(confusables(t, ch)) for ch in chars)
    parts = [
        "/* confusion_table.inc — GENERATED by model/build_confusion.py: do not edit; run\n"
        "** /usr/bin/python3 model/build_confusion.py to make it again.\n"
        "**\n"
        "** Data derived from Unicode's Unihan database (Unicode 15.0.0, Debian's unicode-data):\n"
        "** Copyright (c) 1991-2022 Unicode, Inc.  Used under the Unicode License\n"
        "** (ext/engine/LICENSE-Unicode.txt; licenses/unicode in the release tarballs).\n"
        "**\n"
        "** %d characters (the Han characters of bert-base-chinese's vocab), %d toneless\n"
        "** syllables; each syllable's suggestions are its %d most frequent characters,\n"
        "** similar syllables give %d each, shape neighbours at most %d per character.\n"
        "** Read by ext/engine/confusion.c only. */" % (len(chars), len(inventory), SAME_SOUND_KEEP,
                                                       SIMILAR_SOUND_KEEP, SHAPE_KEEP),
        "#define BF_CONF_NCHARS %d" % len(chars),
        "#define BF_CONF_NSYLLABLES %d" % len(inventory),
        "#define BF_CONF_SAME_SOUND_KEEP %d" % SAME_SOUND_KEEP,
        "#define BF_CONF_SIMILAR_SOUND_KEEP %d" % SIMILAR_SOUND_KEEP,
        "#define BF_CONF_NEXCLUDED %d" % len(excl),
        "#define BF_CONF_MAX_COUNT %d /* the most confusables of one character */" % max_count,
        "/* the characters, ascending code points */",
        c_array("bf_conf_char", "uint16_t", [ord(c) for c in chars]),
        "/* character i's syllables (most used first): bf_conf_reading[bf_conf_reading_start[i] .. [i+1]) */",
        c_array("bf_conf_reading_start", "uint16_t", read_start),
        c_array("bf_conf_reading", "uint16_t", read_pool),
        "/* syllable s's suggestions, most frequent first (character indices):\n"
        "** bf_conf_member[bf_conf_member_start[s] .. [s+1]) */",
        c_array("bf_conf_member_start", "uint16_t", mem_start),
        c_array("bf_conf_member", "uint16_t", mem_pool, comments=mem_comments),
        "/* syllable s's similar syllables: bf_conf_similar[bf_conf_similar_start[s] .. [s+1]) */",
        c_array("bf_conf_similar_start", "uint16_t", sim_start),
        c_array("bf_conf_similar", "uint16_t", sim_pool),
        "/* character i's shape neighbours, best first: bf_conf_shape[bf_conf_shape_start[i] .. [i+1]) */",
        c_array("bf_conf_shape_start", "uint16_t", shape_start),
        c_array("bf_conf_shape", "uint16_t", shape_pool),
        "/* simplified/traditional variant pairs (a, b), sorted: never confusables of each other */",
        c_array("bf_conf_excluded", "uint16_t", excl_flat),
    ]
    return "\n".join(parts) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--unihan-dir", default=UNIHAN_DIR)
    ap.add_argument("--vocab", default=VOCAB)
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--check", action="store_true", help="compare with --out instead of writing it")
    ap.add_argument("--show", help="print the confusables of these characters")
    ap.add_argument("--dump", action="store_true",
                    help="every character's confusables, as tests/c/test_confusion --dump prints them")
    a = ap.parse_args()
    t = build(a.unihan_dir, a.vocab)
    if a.show:
        names = {1: "same sound", 2: "similar sound", 3: "similar shape"}
        for ch in a.show:
            print(ch, t["reads"].get(ch), "shape:", "".join(t["shapes"].get(ch, [])))
            for k in (1, 2, 3):
                print("  %-13s %s" % (names[k], "".join(o for o, kk in confusables(t, ch) if kk == k)))
        return 0
    if a.dump:
        for ch in t["chars"]:
            c = confusables(t, ch)
            if c:
                print("U+%04X\t%s" % (ord(ch), " ".join("U+%04X:%d" % (ord(o), k) for o, k in c)))
        return 0
    text = emit(t)
    if a.check:
        with open(a.out, encoding="utf-8") as f:
            same = f.read() == text
        print("%s: %s" % (a.out, "the same as built from %s" % a.unihan_dir if same else
                          "DIFFERS from what %s builds" % a.unihan_dir))
        return 0 if same else 1
    with open(a.out, "w", encoding="utf-8") as f:
        f.write(text)
    print("wrote %s: %d characters, %d syllables" % (a.out, len(t["chars"]), len(t["inventory"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
