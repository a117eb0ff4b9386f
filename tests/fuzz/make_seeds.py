#!/usr/bin/env python3
"""make_seeds.py — writes the seed corpora of the fuzz targets:

    /usr/bin/python3 tests/fuzz/make_seeds.py      (from the repository root)

tests/fuzz/corpus/<target>/ gets a few small, hand-picked inputs per target
(see the fuzz_*.c files for the input formats).  The model seeds are tiny
random models made by model/gen_random_model.py, packed in fuzz_model's
format.  Deterministic; the corpora are committed, so this only needs to run
again when a format changes.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(HERE, "corpus")


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def tokenizer_seeds():
    texts = {
        "zh_mask": "今天天气真[MASK]啊",
        "two_masks": "[MASK]京是中国的首[MASK]。",
        "mixed": "iPhone 15 Pro 售价 7999 元，约合 $1,099.00！",
        "accents": "Café naïve ÅNGSTRÖM straße Ǆ",
        "punct": "「你好」——『世界』…《书》（括号）【方括】",
        "special": "[CLS][SEP][PAD][UNK][MASK][mask] [ MASK ]",
        "spaces": "\t a\u00a0b\u3000c\u2028d\u2029e\r\n",
        "control": "a\x00b\x01c\x7fd\u200be\ufeff",
        "long_word": "x" * 150 + " " + "ab" * 60,
        "emoji": "😀👍🏽 ❤️ 𠀀𪚥",
        "fullwidth": "ＡＢＣ１２３［ＭＡＳＫ］",
        "empty": "",
    }
    for k, v in texts.items():
        put("tokenizer", k, v)
    put("tokenizer", "invalid_utf8", b"ok \xff\xfe \xc0\x80 \xed\xa0\x80 \xf4\x90\x80\x80 end")
    put("tokenizer", "truncated_utf8", "天".encode()[:2])


def json_seeds(micro):
    with open(os.path.join(micro, "config.json"), "rb") as f:
        put("json", "config", f.read())
    with open(os.path.join(micro, "tokenizer_config.json"), "rb") as f:
        put("json", "tokenizer_config", f.read())
    put("json", "escapes", r'{"a":"\u00e9\ud83d\ude00\n\t\"\\\/","b":[true,false,null],"c":{}}')
    put("json", "numbers", "[0,-0,1.5e300,-2.5E-300,9223372036854775807,-9223372036854775808,"
                           "9223372036854775808,1e400,0.1,123456789012345678901234567890]")
    put("json", "deep", "[" * 64 + "]" * 64)
    put("json", "too_deep", "[" * 65 + "]" * 65)
    put("json", "dup_keys", '{"a":1,"a":2,"":3,"\\u0000":4}')
    put("json", "bad", '{"a":01,"b":[1,],}')
    put("json", "header", '{"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2,3],'
                          '"data_offsets":[0,24]}}')


def pack_model(d, with_tok_config=True):
    files = []
    for name in ("config.json", "vocab.txt", "tokenizer_config.json"):
        p = os.path.join(d, name)
        if name == "tokenizer_config.json" and not with_tok_config:
            files.append(b"")
            continue
        with open(p, "rb") as f:
            files.append(f.read())
    with open(os.path.join(d, "model.safetensors"), "rb") as f:
        st = f.read()
    head = b"".join(struct.pack("<H", len(x)) for x in files)
    return head + b"".join(files) + st


def model_seeds(tmp):
    gen = os.path.join(ROOT, "model", "gen_random_model.py")
    base = ["--layers", "1", "--hidden", "8", "--heads", "2", "--intermediate", "8",
            "--vocab-size", "110", "--max-pos", "16"]
    variants = {
        "f32": ["--seed", "11"],
        "f16": ["--seed", "12", "--dtype", "F16"],
        "bf16_unaligned": ["--seed", "13", "--dtype", "BF16", "--unaligned"],
        "legacy": ["--seed", "14", "--legacy-names", "--no-prefix", "--untied", "--position-ids"],
    }
    dirs = {}
    for name, extra in variants.items():
        d = os.path.join(tmp, name)
        subprocess.check_call([sys.executable, gen, d] + base + extra, stdout=subprocess.DEVNULL)
        put("model", name, pack_model(d, with_tok_config=(name != "legacy")))
        dirs[name] = d
    return dirs["f32"]


def sql_seeds():
    # opcodes and argument types: see fuzz_sql.c
    W = lambda i: bytes([9, i])                   # a word from the list
    T = lambda s: bytes([4, len(s)]) + s          # text
    B = lambda s: bytes([5, len(s)]) + s          # blob
    M = lambda s: bytes([6, len(s)]) + s          # text, 0x01 -> [MASK]
    I = lambda i: bytes([12, i])                  # interesting integer
    N = bytes([0])                                # NULL
    progs = {
        "fill": bytes([0]) + W(0) + bytes([0]) + W(3) + bytes([1]) + N,
        "cands": bytes([2]) + W(0) + I(4) + bytes([3]) + W(2) + I(0) + bytes([4]) + W(4),
        "k_edges": bytes([2]) + W(3) + I(1) + bytes([2]) + W(3) + I(6) + bytes([2]) + W(3) + I(13)
                   + bytes([2]) + W(3) + bytes([3]) + b"\x00" * 7 + b"\x7f",
        "tokenize": bytes([5]) + M("天\x01气 ab\x01".encode()) + bytes([5]) + B(b"\xff\x01[MASK]"),
        "prefill": bytes([6]) + W(0) + W(3) + N + bytes([0]) + W(0),
        "where": bytes([7]) + W(1) + I(3) + bytes([8]) + I(3),
        "join": bytes([9]) + W(0) + W(2) + I(4),
        "load": bytes([10, 1]) + bytes([0]) + W(3) + bytes([10, 0]) + bytes([10, 4]) + bytes([0]) + W(3)
                + bytes([10, 2]) + bytes([10, 3]),
        "cache": bytes([11]) + W(21) + bytes([0]) + W(3) + bytes([11]) + W(23) + bytes([11]) + W(22)
                 + bytes([0]) + W(3) + bytes([12]) + I(2) + I(3),
        "settings": bytes([13]) + I(2) + I(0) + bytes([13]) + bytes([3]) + b"\x00" * 6 + b"\xf0\x7f" + T(b"x"),
        "huge": bytes([0, 7, 0x10, 0x00, 1]) + bytes([2, 7, 0x00, 0x40, 0]) + I(4),
        "blobs": bytes([0, 8, 3, 2, 8, 1, 5]) + bytes([14]) + B(b"\x00[MASK]") + W(0),
        "json_each": bytes([15]) + W(0) + W(1) + W(19),
    }
    for k, v in progs.items():
        put("sql", k, v)


def main():
    if os.path.isdir(CORPUS):
        shutil.rmtree(CORPUS)
    tmp = tempfile.mkdtemp()
    try:
        tokenizer_seeds()
        micro = model_seeds(tmp)
        json_seeds(micro)
        sql_seeds()
    finally:
        shutil.rmtree(tmp)
    n = sum(len(fs) for _, _, fs in os.walk(CORPUS))
    print("make_seeds: %d seed files in %s" % (n, os.path.relpath(CORPUS, ROOT)))


if __name__ == "__main__":
    main()
