#!/usr/bin/env python3
"""gen_random_model.py — write a random BERT masked-LM in the Hugging Face layout.

    /usr/bin/python3 model/gen_random_model.py OUT_DIR [options]

writes OUT_DIR/config.json, vocab.txt, tokenizer_config.json and
model.safetensors (and, with --vocab, a copy of the tokenizer.json found beside
that vocab.txt, if any), exactly the files a user downloads for
google-bert/bert-base-chinese, but with random weights.  Needs only numpy.

Defaults give a model of bert-base-chinese's exact shape (12 layers, 768
hidden, 12 heads, 3072 intermediate, 21128 vocab, 512 positions, ~400 MB):

    /usr/bin/python3 model/gen_random_model.py build/bench-model \\
        --vocab ../shared/data/bert-base-chinese/vocab.txt

and a tiny one:

    /usr/bin/python3 model/gen_random_model.py /tmp/tiny --layers 2 --hidden 32 \\
        --heads 4 --intermediate 64 --vocab-size 600 --max-pos 64

The output is a pure function of the options: the same bytes on every machine
and every numpy version.  Random numbers come from a counter-based generator
written out below (splitmix64 of seed, tensor name and element index; a normal
deviate is the sum of the four 16-bit fields of one 64-bit word, i.e. an
Irwin-Hall(4) approximation of N(0,1), computed with exact integer and
correctly rounded float64 arithmetic only — no libm), so nothing depends on
numpy's own generators or on the CPU.  Each tensor is keyed by its canonical
(modern, "bert."-prefixed) name, so the naming options do not change values.

Weights:
  * embeddings and the untied decoder: N(0, 0.02);
  * Linear layers: N(0, --init-std), where "fan-in" (the default) means
    1/sqrt(in_features), times 2 for query and key (attention scores of std ~4:
    heads look at particular positions) and times 0.5 for the attention output
    dense (which otherwise, being nearly the same average at every position,
    drowns the residual and makes every [MASK] predict the same token).  Every
    sub-layer then matters to the output, which makes a test against a
    reference sensitive to errors in attention, GELU, residuals ... (with 0.02
    the encoder of a tiny model is almost the identity); biases N(0, 0.02);
  * LayerNorm weight 1 + N(0, 0.1), bias N(0, 0.1) (not exactly 1/0, so that
    swapping or dropping them shows);
  * the MLM head's LayerNorm weight and bias are multiplied by
    --logit-std / (0.02 * sqrt(hidden)), which makes the logits roughly
    N(0, logit-std^2): with the usual init every probability is ~1/vocab and
    the ranking is noise; with logit-std 4 the top candidate usually stands
    clearly above the runner-up.  cls.predictions.bias: N(0, 0.5).

Synthetic vocabulary (without --vocab):
  * vocab-size > 1000: laid out like bert-base-chinese: [PAD]=0,
    [unused1..99], [UNK]=100, [CLS]=101, [SEP]=102, [MASK]=103;
  * smaller: [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4;
  then printable ASCII without upper case (so do_lower_case is true), a few
  hundred common Chinese characters, ##-forms of letters and digits, a few
  English words, then more CJK ideographs from U+4E00 on, then their ##-forms,
  until vocab-size entries.  Chinese text made of common characters therefore
  tokenizes to real ids.

See model/README.md for the file format and the other tools.
"""
import argparse
import hashlib
import json
import os
import shutil
import struct
import sys

import numpy as np

# A few hundred common Chinese characters, most frequent first.
COMMON_HAN = (
    "的一是不了人我在有他这为之大来以个中上们到说国和地也子时道出而要于就下得可你年生自会那后能对着事其里所去行过家十"
    "用发天如然作方成者多日都三小军二无同么经法当起与好看学进种将还分此心前面又定见只主没公从知使意理已向因长回头全本"
    "明并被外点问今力别新代相开实正等比样特门把内高什部动电月再两体由工第最现何间机老手数路变文利命重通量走做身几产口"
    "民气感提各位常条色白合名海西东北南少世美给受思想光住表情每信目市友房打听话次应员近关先线山题安儿解流或书放记认音"
    "英王风飞金石米花草木林森水火土河湖江云雨雪车马牛羊鱼鸟虫猫狗猪鸡龙虎狼熊象蛇春夏秋冬早晚午夜星期周节假快乐爱恋朋"
    "父母兄弟姐妹爷奶叔姨男女孩宝贝哥夫妻吃喝睡玩跑跳唱歌读写坐站笑哭该必须红黄蓝绿紫黑灰粉橙冷热温暖凉坏真丑矮胖瘦短"
    "远慢旧啊吗呢吧呀哦嗯哈嘿喂哎唉哇京广州深圳杭津庆武汉华共首城农村乡镇街园校医院银商店超饭馆酒宾笔纸桌椅床窗灯视脑"
    "网络游戏影故闻报杂志照片图画衣服裤鞋帽袜包伞钱元角块百千万亿零四五六七八九半双师护士警察司演运科板秘领导干群众客"
    "邻居左右旁边哪谁怎候未刚才立刻突忽终接觉习休息旅购物洗澡扫班课考试毕业结婚买卖借送收拿找丢捡带穿脱戴否很太非更较"
    "稍微乎差些任另己咱她它但虽且果即管论除根据按至政府济社展化历史技术教育研究原义响系况件环境资源统务场企品质价格润"
)
ENGLISH_WORDS = ["the", "and", "is", "of", "to", "in", "it", "you", "that", "was",
                 "for", "on", "are", "with", "as", "be", "at", "one", "have", "this",
                 "from", "or", "had", "by", "hot", "but", "some", "what", "there", "we",
                 "can", "out", "other", "were", "all", "your", "when", "up", "use", "word",
                 "phone", "ok", "good", "bert", "##ing", "##ed", "##s", "##er", "##ly", "##tion"]

# ---------------------------------------------------------------- random numbers
M64 = (1 << 64) - 1
GAMMA = np.uint64(0x9E3779B97F4A7C15)


def _mix64_int(z):
    """splitmix64's finalizer on a Python int."""
    z &= M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def _mix64(z):
    """splitmix64's finalizer on a numpy uint64 array (wrapping arithmetic)."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def tensor_key(seed, name):
    h = 0xCBF29CE484222325                      # FNV-1a 64 of the name
    for b in name.encode():
        h = ((h ^ b) * 0x100000001B3) & M64
    return _mix64_int(_mix64_int(seed) ^ h)


# Irwin-Hall(4) of 16-bit uniforms: sum s of four integers in [0, 65535],
# mean 131070, variance 4 * (65536^2 - 1) / 12.
_IH_MEAN = 131070.0
_IH_SD = float(np.sqrt(np.float64(4 * (65536 ** 2 - 1)) / 12.0))


def normal(seed, name, n, mean=0.0, std=1.0, start=0):
    """n approximately N(mean, std^2) float32 values of the stream (seed, name),
    elements start .. start+n-1.  Exact integer / float64 arithmetic only."""
    key = np.uint64(tensor_key(seed, name))
    idx = np.arange(start + 1, start + n + 1, dtype=np.uint64)
    x = _mix64(key + idx * GAMMA)
    m = np.uint64(0xFFFF)
    s = ((x & m) + ((x >> np.uint64(16)) & m) + ((x >> np.uint64(32)) & m)
         + (x >> np.uint64(48))).astype(np.float64)
    z = (s - _IH_MEAN) / _IH_SD
    return (z * std + mean).astype(np.float32)


# ---------------------------------------------------------------- vocabulary
def read_vocab(path):
    """vocab.txt split on "\\n" only (entry 343 of bert-base-chinese is U+2028)."""
    with open(path, "rb") as f:
        text = f.read().decode("utf-8")
    toks = text.split("\n")
    if toks and toks[-1] == "":
        toks.pop()
    return toks


def synthetic_vocab(size):
    if size < 16:
        sys.exit("gen_random_model: --vocab-size must be at least 16")
    if size > 1000:
        toks = ["[PAD]"] + ["[unused%d]" % i for i in range(1, 100)] + \
               ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    else:
        toks = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    seen = set(toks)
    out = list(toks)

    def add(t):
        if len(out) < size and t not in seen:
            seen.add(t)
            out.append(t)

    for c in range(0x21, 0x7F):                 # printable ASCII, no upper case
        if not ("A" <= chr(c) <= "Z"):
            add(chr(c))
    for c in COMMON_HAN:
        add(c)
    for c in "abcdefghijklmnopqrstuvwxyz0123456789":
        add("##" + c)
    for w in ENGLISH_WORDS:
        add(w)
    for cp in range(0x4E00, 0xA000):            # more CJK ideographs
        add(chr(cp))
    for cp in range(0x4E00, 0xA000):
        add("##" + chr(cp))
    n = 100
    while len(out) < size:                       # never reached for sane sizes
        add("[unused%d]" % n)
        n += 1
    return out


# ---------------------------------------------------------------- tensors
def tensor_specs(a, V):
    """(canonical name, stored name, shape, kind) in file order."""
    H, I, L, P, T = a.hidden, a.intermediate, a.layers, a.max_pos, a.type_vocab
    pre = "" if a.no_prefix else "bert."

    def ln(base):
        w, b = ("gamma", "beta") if a.legacy_names else ("weight", "bias")
        return [(base + ".weight", base + "." + w, (H,), "ln_w"),
                (base + ".bias", base + "." + b, (H,), "ln_b")]

    def lin(base, o, i):
        return [(base + ".weight", base + ".weight", (o, i), "lin_w"),
                (base + ".bias", base + ".bias", (o,), "bias")]

    specs = []
    if a.position_ids:                           # int64 buffer of old checkpoints
        specs.append(("bert.embeddings.position_ids", "embeddings.position_ids",
                      (1, P), "posids"))
    specs += [("bert.embeddings.word_embeddings.weight", "embeddings.word_embeddings.weight", (V, H), "emb"),
              ("bert.embeddings.position_embeddings.weight", "embeddings.position_embeddings.weight", (P, H), "emb"),
              ("bert.embeddings.token_type_embeddings.weight", "embeddings.token_type_embeddings.weight", (T, H), "emb")]
    specs += ln("embeddings.LayerNorm")
    for l in range(L):
        p = "encoder.layer.%d." % l
        specs += lin(p + "attention.self.query", H, H)
        specs += lin(p + "attention.self.key", H, H)
        specs += lin(p + "attention.self.value", H, H)
        specs += lin(p + "attention.output.dense", H, H)
        specs += ln(p + "attention.output.LayerNorm")
        specs += lin(p + "intermediate.dense", I, H)
        specs += lin(p + "output.dense", H, I)
        specs += ln(p + "output.LayerNorm")
    if a.include_pooler:
        specs += lin("pooler.dense", H, H)
    # fix up: everything so far lives under "bert." (canonical) / pre (stored)
    specs = [(c if c.startswith("bert.") else "bert." + c, pre + s, sh, k) for c, s, sh, k in specs]
    cls = lin("cls.predictions.transform.dense", H, H)
    cls += [(c, s, sh, "head_" + k) for c, s, sh, k in ln("cls.predictions.transform.LayerNorm")]
    cls += [("cls.predictions.bias", "cls.predictions.bias", (V,), "out_bias")]
    if a.untied:
        cls += [("cls.predictions.decoder.weight", "cls.predictions.decoder.weight", (V, H), "emb")]
    if a.include_pooler:
        cls += lin("cls.seq_relationship", 2, H)
    return specs + cls


DTYPES = {"F32": (np.float32, 4), "F16": (np.float16, 2), "BF16": (np.uint16, 2), "I64": (np.int64, 8)}


def to_bf16_bits(x):
    """float32 -> bfloat16 bits, rounding to nearest, ties to even."""
    u = x.view(np.uint32).astype(np.uint64)
    u = (u + np.uint64(0x7FFF) + ((u >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)
    return u.astype(np.uint16)


def encode(x, dtype):
    if dtype == "F32":
        return x.astype("<f4").tobytes()
    if dtype == "F16":
        return x.astype("<f2").tobytes()
    return to_bf16_bits(x).astype("<u2").tobytes()


def values(a, canon, shape, kind, start, n):
    H = a.hidden
    head_scale = a.logit_std / (0.02 * np.sqrt(np.float64(H)))
    if kind == "emb":
        return normal(a.seed, canon, n, 0.0, 0.02, start)
    if kind == "lin_w":
        std = 1.0 / np.sqrt(np.float64(shape[1])) if a.init_std == "fan-in" else float(a.init_std)
        if a.init_std == "fan-in":
            if ".self.query." in canon or ".self.key." in canon:
                std *= 2.0                       # sharper attention
            elif ".attention.output.dense." in canon:
                std *= 0.5                       # attention adds to, not drowns, the residual
        return normal(a.seed, canon, n, 0.0, std, start)
    if kind == "bias":
        return normal(a.seed, canon, n, 0.0, 0.02, start)
    if kind == "ln_w":
        return normal(a.seed, canon, n, 1.0, 0.1, start)
    if kind == "ln_b":
        return normal(a.seed, canon, n, 0.0, 0.1, start)
    if kind == "head_ln_w":
        return normal(a.seed, canon, n, head_scale, 0.1 * head_scale, start)
    if kind == "head_ln_b":
        return normal(a.seed, canon, n, 0.0, 0.1 * head_scale, start)
    if kind == "out_bias":
        return normal(a.seed, canon, n, 0.0, 0.5, start)
    raise AssertionError(kind)


def write_safetensors(path, a, specs, chunk=1 << 22):
    header, off = {}, 0
    for canon, name, shape, kind in specs:
        dt = "I64" if kind == "posids" else a.dtype
        nbytes = int(np.prod(shape)) * DTYPES[dt][1]
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + nbytes]}
        off += nbytes
    header = {"__metadata__": {"format": "pt"}, **header}
    hb = json.dumps(header, separators=(",", ":")).encode()
    if a.unaligned:
        # pad so that the data starts 2 bytes past a multiple of 8: every F32
        # tensor is misaligned in memory (legal; a loader must copy them)
        pad = (8 - (8 + len(hb)) % 8) % 8 + 2
    else:
        pad = (8 - len(hb) % 8) % 8               # header padded to 8 bytes
    hb += b" " * pad
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for canon, name, shape, kind in specs:
            n = int(np.prod(shape))
            if kind == "posids":
                f.write(np.arange(n, dtype="<i8").tobytes())
                continue
            for s in range(0, n, chunk):
                f.write(encode(values(a, canon, shape, kind, s, min(chunk, n - s)), a.dtype))
    os.replace(tmp, path)
    return 8 + len(hb) + off


def config_json(a, V):
    return {
        "architectures": ["BertForMaskedLM"],
        "attention_probs_dropout_prob": 0.1,
        "classifier_dropout": None,
        "directionality": "bidi",
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "hidden_size": a.hidden,
        "initializer_range": 0.02,
        "intermediate_size": a.intermediate,
        "layer_norm_eps": a.eps,
        "max_position_embeddings": a.max_pos,
        "model_type": "bert",
        "num_attention_heads": a.heads,
        "num_hidden_layers": a.layers,
        "pad_token_id": 0,
        "position_embedding_type": "absolute",
        "torch_dtype": {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[a.dtype],
        "transformers_version": "4.30.2",
        "type_vocab_size": a.type_vocab,
        "use_cache": True,
        "vocab_size": V,
    }


def main(argv=None):
    p = argparse.ArgumentParser(description="Write a random BERT masked-LM in the Hugging Face layout.")
    p.add_argument("out_dir")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hidden", type=int, default=768)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--intermediate", type=int, default=3072)
    p.add_argument("--vocab-size", type=int, default=None, help="default: 21128, or the size of --vocab")
    p.add_argument("--max-pos", type=int, default=512)
    p.add_argument("--type-vocab", type=int, default=2)
    p.add_argument("--eps", type=float, default=1e-12)
    p.add_argument("--dtype", choices=["F32", "F16", "BF16"], default="F32")
    p.add_argument("--legacy-names", action="store_true", help="LayerNorm gamma/beta (bert-base-chinese's checkpoint)")
    p.add_argument("--no-prefix", action="store_true", help='tensor names without "bert."')
    p.add_argument("--untied", action="store_true", help="write cls.predictions.decoder.weight (default: tied, omitted)")
    p.add_argument("--include-pooler", action="store_true", help="add bert.pooler.* and cls.seq_relationship.*")
    p.add_argument("--position-ids", action="store_true", help="add the int64 buffer embeddings.position_ids")
    p.add_argument("--unaligned", action="store_true", help="misalign the data section (F32 tensors not 4-aligned)")
    p.add_argument("--vocab", help="use this vocab.txt instead of a synthetic one")
    p.add_argument("--lowercase", choices=["auto", "true", "false"], default="auto",
                   help="do_lower_case; auto: from the tokenizer_config.json beside --vocab, else true")
    p.add_argument("--init-std", default="fan-in", help='std of Linear weights: a number or "fan-in" (1/sqrt(in))')
    p.add_argument("--logit-std", type=float, default=4.0, help="target std of the MLM logits")
    a = p.parse_args(argv)
    if a.init_std != "fan-in":
        float(a.init_std)
    if a.hidden % a.heads:
        sys.exit("gen_random_model: --hidden must be a multiple of --heads")

    if a.vocab:
        vocab = read_vocab(a.vocab)
        if a.vocab_size is not None and a.vocab_size != len(vocab):
            sys.exit("gen_random_model: --vocab-size %d but %s has %d entries" % (a.vocab_size, a.vocab, len(vocab)))
    else:
        vocab = synthetic_vocab(a.vocab_size or 21128)
    V = len(vocab)
    if len(set(vocab)) != V:
        sys.exit("gen_random_model: vocabulary has duplicate entries")

    lower = True
    src_dir = os.path.dirname(os.path.abspath(a.vocab)) if a.vocab else None
    if a.lowercase != "auto":
        lower = a.lowercase == "true"
    elif src_dir and os.path.exists(os.path.join(src_dir, "tokenizer_config.json")):
        with open(os.path.join(src_dir, "tokenizer_config.json")) as f:
            lower = bool(json.load(f).get("do_lower_case", True))

    os.makedirs(a.out_dir, exist_ok=True)
    with open(os.path.join(a.out_dir, "config.json"), "w") as f:
        json.dump(config_json(a, V), f, indent=2, sort_keys=True)
        f.write("\n")
    with open(os.path.join(a.out_dir, "vocab.txt"), "wb") as f:
        f.write(("\n".join(vocab) + "\n").encode("utf-8"))
    tc = {"do_lower_case": lower, "tokenizer_class": "BertTokenizer", "model_max_length": a.max_pos,
          "unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
          "mask_token": "[MASK]", "tokenize_chinese_chars": True, "strip_accents": None}
    with open(os.path.join(a.out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(tc, f, indent=2, ensure_ascii=False)
        f.write("\n")
    tj = os.path.join(src_dir, "tokenizer.json") if src_dir else None
    if tj and os.path.exists(tj) and a.lowercase == "auto":
        shutil.copyfile(tj, os.path.join(a.out_dir, "tokenizer.json"))
    elif os.path.exists(os.path.join(a.out_dir, "tokenizer.json")):
        os.remove(os.path.join(a.out_dir, "tokenizer.json"))

    size = write_safetensors(os.path.join(a.out_dir, "model.safetensors"), a, tensor_specs(a, V))
    return size


if __name__ == "__main__":
    main()
