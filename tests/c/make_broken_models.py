#!/usr/bin/env python3
"""make_broken_models.py — model directories for tests/c/test_model_load.c.

    /usr/bin/python3 tests/c/make_broken_models.py OUT_DIR [MODELS_DIR]

Writes into OUT_DIR tiny random models (made with model/gen_random_model.py)
in every supported variant, and broken copies of them, plus OUT_DIR/cases.tsv,
the manifest the C test follows.  Expected values come from this script,
which reads the safetensors files on its own (json + numpy), not from the
code under test.  Manifest lines (tab-separated):

  load  NAME DIR V H L A I P T EPS DTYPE   loads, with these config values
  err   NAME DIR SUBSTR...                 fails; the message contains each SUBSTR
  val   DIR FIELD INDEX F32BITS            loaded weight FIELD[INDEX] has these bits
  same  NAME DIR1 DIR2                     every loaded weight is bitwise equal
  disp  DIR ID TEXT                        bf_model_token(model, ID) is TEXT

FIELD is the bf_model member (word_emb, 0.q_w, dec_b, ...).  MODELS_DIR
(optional, e.g. build/models from `make models`): every model there gets a
"load" line with its config.json values.
"""
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
GEN = os.path.join(HERE, "..", "..", "model", "gen_random_model.py")
TINY = ["--layers", "2", "--hidden", "32", "--heads", "4", "--intermediate", "64",
        "--vocab-size", "600", "--max-pos", "64", "--type-vocab", "2", "--seed", "7"]

lines = []


def gen(out, *extra):
    subprocess.run([sys.executable, GEN, out] + TINY + list(extra), check=True,
                   stdout=subprocess.DEVNULL)


# ---- reading / writing safetensors independently of the C code ----

def read_st(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    return header, raw[8 + n:]


def write_st(path, header, data, pad_to=8):
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * ((pad_to - len(hb) % pad_to) % pad_to)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb + data)


def tensor_f32(header, data, name):
    e = header[name]
    b, en = e["data_offsets"]
    buf = data[b:en]
    if e["dtype"] == "F32":
        return np.frombuffer(buf, "<f4").astype(np.float32)
    if e["dtype"] == "F16":
        return np.frombuffer(buf, "<f2").astype(np.float32)
    if e["dtype"] == "BF16":
        u = np.frombuffer(buf, "<u2").astype(np.uint32) << np.uint32(16)
        return u.view(np.float32)
    raise ValueError(e["dtype"])


LAYER_FIELDS = {
    "attention.self.query.weight": "q_w", "attention.self.query.bias": "q_b",
    "attention.self.key.weight": "k_w", "attention.self.key.bias": "k_b",
    "attention.self.value.weight": "v_w", "attention.self.value.bias": "v_b",
    "attention.output.dense.weight": "ao_w", "attention.output.dense.bias": "ao_b",
    "attention.output.LayerNorm.weight": "aln_g", "attention.output.LayerNorm.bias": "aln_b",
    "intermediate.dense.weight": "i_w", "intermediate.dense.bias": "i_b",
    "output.dense.weight": "o_w", "output.dense.bias": "o_b",
    "output.LayerNorm.weight": "oln_g", "output.LayerNorm.bias": "oln_b",
}
TOP_FIELDS = {
    "embeddings.word_embeddings.weight": "word_emb",
    "embeddings.position_embeddings.weight": "pos_emb",
    "embeddings.token_type_embeddings.weight": "type_emb",
    "embeddings.LayerNorm.weight": "emb_ln_g", "embeddings.LayerNorm.bias": "emb_ln_b",
    "cls.predictions.transform.dense.weight": "head_w",
    "cls.predictions.transform.dense.bias": "head_b",
    "cls.predictions.transform.LayerNorm.weight": "head_ln_g",
    "cls.predictions.transform.LayerNorm.bias": "head_ln_b",
    "cls.predictions.decoder.weight": "dec_w",
    "cls.predictions.bias": "dec_b",
}


def field_of(stored):
    """bf_model member for a stored tensor name, or None (pooler, NSP, ...)."""
    n = stored
    if n.startswith("bert."):
        n = n[5:]
    if n.endswith(".gamma"):
        n = n[:-6] + ".weight"
    if n.endswith(".beta"):
        n = n[:-5] + ".bias"
    if n in TOP_FIELDS:
        return TOP_FIELDS[n]
    if n.startswith("encoder.layer."):
        rest = n[len("encoder.layer."):]
        num, _, sub = rest.partition(".")
        if sub in LAYER_FIELDS:
            return num + "." + LAYER_FIELDS[sub]
    return None


def emit_vals(d):
    header, data = read_st(os.path.join(d, "model.safetensors"))
    names = [k for k in header if k != "__metadata__"]
    for name in names:
        f = field_of(name)
        if f is None:
            continue
        x = tensor_f32(header, data, name)
        for i in sorted({0, len(x) // 3, len(x) // 2, len(x) - 1}):
            bits = int(x[i:i + 1].view(np.uint32)[0])
            lines.append("val\t%s\t%s\t%d\t%08x" % (d, f, i, bits))
    if "cls.predictions.decoder.weight" not in header:       # tied
        name = [n for n in names if field_of(n) == "word_emb"][0]
        x = tensor_f32(header, data, name)
        for i in (0, len(x) - 1):
            lines.append("val\t%s\tdec_w\t%d\t%08x" % (d, i, int(x[i:i + 1].view(np.uint32)[0])))


def load_line(name, d):
    c = json.load(open(os.path.join(d, "config.json")))
    header, _ = read_st(os.path.join(d, "model.safetensors"))
    dts = {v["dtype"] for k, v in header.items()
           if k != "__metadata__" and field_of(k) is not None}
    dtype = dts.pop() if len(dts) == 1 else "mixed"
    lines.append("load\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.9g\t%s" % (
        name, d, c["vocab_size"], c["hidden_size"], c["num_hidden_layers"],
        c["num_attention_heads"], c["intermediate_size"], c["max_position_embeddings"],
        c.get("type_vocab_size", 2), c.get("layer_norm_eps", 1e-12), dtype))


def to_f32_copy(src, dst):
    """Same model with every float tensor decoded by numpy and stored as F32."""
    shutil.copytree(src, dst)
    header, data = read_st(os.path.join(src, "model.safetensors"))
    out, chunks, off = {}, [], 0
    for k, v in header.items():
        if k == "__metadata__":
            out[k] = v
            continue
        if v["dtype"] in ("F16", "BF16", "F32"):
            b = tensor_f32(header, data, k).astype("<f4").tobytes()
            dt = "F32"
        else:
            b = data[v["data_offsets"][0]:v["data_offsets"][1]]
            dt = v["dtype"]
        out[k] = {"dtype": dt, "shape": v["shape"], "data_offsets": [off, off + len(b)]}
        chunks.append(b)
        off += len(b)
    write_st(os.path.join(dst, "model.safetensors"), out, b"".join(chunks))


# ---- broken variants ----

def variant(base, root, name):
    d = os.path.join(root, name)
    shutil.copytree(base, d)
    return d


def err(name, d, *subs):
    lines.append("\t".join(["err", name, d] + list(subs)))


def edit_config(d, fn):
    p = os.path.join(d, "config.json")
    c = json.load(open(p))
    fn(c)
    json.dump(c, open(p, "w"), indent=2)


def edit_header(d, fn, data_fn=None):
    p = os.path.join(d, "model.safetensors")
    header, data = read_st(p)
    fn(header)
    if data_fn:
        data = data_fn(data)
    write_st(p, header, data)


def raw_file(d, content):
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(content)


def main():
    root = os.path.abspath(sys.argv[1])
    models = sys.argv[2] if len(sys.argv) > 2 else None
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    J = lambda n: os.path.join(root, n)
    ST = "model.safetensors"

    # good models
    gen(J("base"))
    gen(J("legacy"), "--legacy-names")
    gen(J("noprefix"), "--no-prefix")
    gen(J("legacy_noprefix"), "--legacy-names", "--no-prefix")
    gen(J("untied"), "--untied")
    gen(J("f16"), "--dtype", "F16")
    gen(J("bf16"), "--dtype", "BF16", "--untied")
    gen(J("unaligned"), "--unaligned")
    gen(J("extras"), "--include-pooler", "--position-ids")
    to_f32_copy(J("f16"), J("f16_as_f32"))
    to_f32_copy(J("bf16"), J("bf16_as_f32"))
    shutil.copytree(J("base"), J("base_copy"))
    for n in ("base", "legacy", "noprefix", "legacy_noprefix", "untied", "f16", "bf16",
              "unaligned", "extras", "f16_as_f32", "bf16_as_f32", "base_copy"):
        load_line(n, J(n))
    for n in ("base", "legacy", "noprefix", "untied", "f16", "bf16", "unaligned", "extras"):
        emit_vals(J(n))
    for a, b in (("base", "legacy"), ("base", "noprefix"), ("base", "legacy_noprefix"),
                 ("base", "unaligned"), ("base", "extras"), ("f16", "f16_as_f32"),
                 ("bf16", "bf16_as_f32")):
        lines.append("same\t%s=%s\t%s\t%s" % (a, b, J(a), J(b)))

    # one weight byte changed (for the fingerprint test): the last byte of the
    # data area (cls.predictions.bias), and a copy with a config change only
    d = variant(J("base"), root, "onebyte")
    with open(os.path.join(d, ST), "r+b") as f:
        f.seek(-1, 2)
        b = f.read(1)
        f.seek(-1, 2)
        f.write(bytes([b[0] ^ 0x01]))
    load_line("onebyte", d)
    # display strings: a vocabulary with "##" continuations (and "##" itself)
    d = variant(J("base"), root, "hashvocab")
    with open(os.path.join(d, "vocab.txt"), "rb") as f:
        toks = f.read().decode("utf-8").split("\n")
    for i, t in zip(range(100, 110), ["##a", "##ing", "##", "###", "##中", "a##", "##x##", "#",
                                      "###b", "##1"]):
        toks[i] = t
    with open(os.path.join(d, "vocab.txt"), "wb") as f:
        f.write("\n".join(toks).encode("utf-8"))
    for i in range(95, 112):
        t = toks[i]
        shown = t[2:] if t.startswith("##") and len(t) > 2 else t
        lines.append("disp\t%s\t%d\t%s" % (d, i, shown))
    d = variant(J("base"), root, "config_extra")
    edit_config(d, lambda c: c.update({"finetuning_task": "fill-mask"}))
    load_line("config_extra", d)

    base = J("base")
    hdr, _ = read_st(os.path.join(base, ST))
    V, H, I = 600, 32, 64

    # directory-level problems
    err("missing_dir", J("does_not_exist"), "does_not_exist", "not found")
    with open(J("plain_file"), "w") as f:
        f.write("x")
    err("not_a_dir", J("plain_file"), "plain_file", "not a directory")
    d = variant(base, root, "no_config"); os.remove(os.path.join(d, "config.json"))
    err("missing_config", d, "config.json", "missing")
    d = variant(base, root, "bad_config")
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write('{\n  "vocab_size": 600,\n  "hidden_size": 32,\n}\n')
    err("malformed_config", d, "config.json", "not valid JSON", "line 4")
    d = variant(base, root, "empty_config")
    open(os.path.join(d, "config.json"), "w").close()
    err("empty_config", d, "config.json", "empty")
    d = variant(base, root, "config_array")
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write("[1, 2]")
    err("config_not_object", d, "config.json", "object")
    d = variant(base, root, "config_no_hidden"); edit_config(d, lambda c: c.pop("hidden_size"))
    err("config_missing_key", d, "config.json", "missing \"hidden_size\"")
    d = variant(base, root, "config_str"); edit_config(d, lambda c: c.update(hidden_size="32"))
    err("config_wrong_type", d, "config.json", "hidden_size", "integer")
    d = variant(base, root, "config_neg"); edit_config(d, lambda c: c.update(num_hidden_layers=-1))
    err("config_out_of_range", d, "config.json", "num_hidden_layers", "range")
    d = variant(base, root, "config_heads"); edit_config(d, lambda c: c.update(num_attention_heads=5))
    err("config_heads_divide", d, "config.json", "divisible")
    d = variant(base, root, "config_act"); edit_config(d, lambda c: c.update(hidden_act="gelu_new"))
    err("config_hidden_act", d, "config.json", "hidden_act", "gelu_new")
    d = variant(base, root, "config_type"); edit_config(d, lambda c: c.update(model_type="roberta"))
    err("config_model_type", d, "config.json", "roberta")
    d = variant(base, root, "config_eps"); edit_config(d, lambda c: c.update(layer_norm_eps=0))
    err("config_eps", d, "config.json", "layer_norm_eps")
    d = variant(base, root, "config_posemb")
    edit_config(d, lambda c: c.update(position_embedding_type="relative_key"))
    err("config_position_embedding_type", d, "config.json", "relative_key")
    d = variant(base, root, "no_vocab"); os.remove(os.path.join(d, "vocab.txt"))
    err("missing_vocab", d, "vocab.txt")
    d = variant(base, root, "vocab_short")
    with open(os.path.join(d, "vocab.txt"), "rb") as f:
        toks = f.read().split(b"\n")
    with open(os.path.join(d, "vocab.txt"), "wb") as f:
        f.write(b"\n".join(toks[:550]) + b"\n")
    err("vocab_size_mismatch", d, "vocab.txt", "550", "vocab_size", "600")
    d = variant(base, root, "config_vocab"); edit_config(d, lambda c: c.update(vocab_size=601))
    err("config_vocab_mismatch", d, "vocab.txt", "601")
    d = variant(base, root, "no_weights"); os.remove(os.path.join(d, ST))
    err("missing_safetensors", d, ST, "missing")
    d = variant(base, root, "pytorch_bin"); os.remove(os.path.join(d, ST))
    open(os.path.join(d, "pytorch_model.bin"), "wb").write(b"PK\x03\x04")
    err("pytorch_bin_only", d, ST, "pytorch_model.bin", "convert")
    d = variant(base, root, "sharded"); os.remove(os.path.join(d, ST))
    open(os.path.join(d, "model.safetensors.index.json"), "w").write("{}")
    err("sharded_only", d, ST, "model.safetensors.index.json")

    # file-level problems
    with open(os.path.join(base, ST), "rb") as f:
        good = f.read()
    n_hdr = struct.unpack("<Q", good[:8])[0]
    d = variant(base, root, "zero_len"); raw_file(d, b"")
    err("zero_length_file", d, ST, "empty")
    d = variant(base, root, "five_bytes"); raw_file(d, b"\x10\x00\x00\x00\x00")
    err("shorter_than_8_bytes", d, ST, "truncated")
    d = variant(base, root, "truncated"); raw_file(d, good[:len(good) - 1000])
    err("truncated_file", d, ST, "truncated", "out of range")
    d = variant(base, root, "trunc_header"); raw_file(d, good[:8 + n_hdr // 2])
    err("truncated_in_header", d, ST, "truncated: header says %d bytes" % n_hdr)
    d = variant(base, root, "hlen_big"); raw_file(d, struct.pack("<Q", 8000) + b"{" + b" " * 111)
    err("header_length_beyond_file", d, ST, "truncated: header says 8000 bytes but file has 120")
    d = variant(base, root, "hlen_huge"); raw_file(d, struct.pack("<Q", 200 * 1000 * 1000) + b"{}")
    err("header_too_large", d, ST, "header too large")
    d = variant(base, root, "hlen_2_64"); raw_file(d, b"\xff" * 8 + b"{}")
    err("header_length_2^64", d, ST, "header too large")
    d = variant(base, root, "not_json")
    raw_file(d, struct.pack("<Q", 16) + b"this is not json" + good[8 + n_hdr:])
    err("non_json_header", d, ST, "not valid JSON")
    d = variant(base, root, "header_array"); raw_file(d, struct.pack("<Q", 2) + b"[]")
    err("header_not_object", d, ST, "not an object")
    d = variant(base, root, "header_nul"); raw_file(d, struct.pack("<Q", 4) + b"{\x00\x00}")
    err("header_with_nul_bytes", d, ST, "not valid JSON")
    d = variant(base, root, "header_deep")
    deep = b"{\"a\":" * 200 + b"1" + b"}" * 200
    raw_file(d, struct.pack("<Q", len(deep)) + deep)
    err("header_nested_too_deep", d, ST, "nested deeper")

    first = "bert.embeddings.word_embeddings.weight"
    ffn_w = "bert.encoder.layer.1.intermediate.dense.weight"
    ffn_b = "bert.encoder.layer.1.output.dense.bias"
    size = len(good) - 8 - n_hdr

    def set_off(name, b, e):
        return lambda h: h[name].update(data_offsets=[b, e])
    d = variant(base, root, "off_range")
    last = max((k for k in hdr if k != "__metadata__"), key=lambda k: hdr[k]["data_offsets"][1])
    b0, e0 = hdr[last]["data_offsets"]
    edit_header(d, set_off(last, b0 + 4096, e0 + 4096))
    err("offsets_out_of_range", d, ST, "out of range", last)
    d = variant(base, root, "off_reversed")
    edit_header(d, set_off(first, 100, 0))
    err("offsets_reversed", d, ST, first, "end before")
    d = variant(base, root, "off_overlap")
    b1, e1 = hdr[ffn_b]["data_offsets"]
    edit_header(d, set_off(ffn_b, b1 - 4, e1 - 4))
    err("overlapping_offsets", d, ST, "overlapping", ffn_b)
    d = variant(base, root, "off_bytes")
    edit_header(d, lambda h: h[ffn_w].update(shape=[I, H + 1]))
    err("wrong_byte_count", d, ST, "wrong byte count", ffn_w, "[64,33]")
    d = variant(base, root, "shape_overflow")
    edit_header(d, lambda h: h[ffn_w].update(shape=[1 << 40, 1 << 40, 1 << 40]))
    err("shape_overflow", d, ST, "wrong byte count", ffn_w)
    d = variant(base, root, "shape_neg")
    edit_header(d, lambda h: h[ffn_w].update(shape=[-64, -32]))
    err("negative_shape", d, ST, ffn_w, "shape")
    d = variant(base, root, "wrong_shape")
    edit_header(d, lambda h: h[ffn_w].update(shape=[H, I]))
    err("wrong_shape", d, ST, ffn_w, "has shape [32,64], expected [64,32]", "intermediate_size")
    d = variant(base, root, "wrong_ndim")
    edit_header(d, lambda h: h[ffn_b].update(shape=[1, H]))
    err("wrong_rank", d, ST, ffn_b, "[1,32]", "expected [32]")
    d = variant(base, root, "no_tensor")
    edit_header(d, lambda h: h.pop(ffn_b))
    err("missing_tensor", d, ST, "missing tensor", "encoder.layer.1.output.dense.bias")
    d = variant(base, root, "no_head")
    edit_header(d, lambda h: [h.pop(k) for k in list(h) if k.startswith("cls.")])
    err("missing_mlm_head", d, ST, "missing tensor 'cls.predictions", "BertForMaskedLM")
    d = variant(base, root, "no_bias")
    edit_header(d, lambda h: h.pop("cls.predictions.bias"))
    err("missing_output_bias", d, ST, "cls.predictions.bias", "cls.predictions.decoder.bias")
    d = variant(base, root, "dtype_i32")
    edit_header(d, lambda h: h[ffn_w].update(dtype="I32"))
    err("unsupported_dtype", d, ST, "unsupported dtype I32 for tensor '%s'" % ffn_w)
    d = variant(base, root, "dtype_f64")
    edit_header(d, lambda h: h[ffn_b].update(dtype="F64", shape=[H // 2]))
    err("unsupported_dtype_f64", d, ST, "unsupported dtype F64", ffn_b)
    d = variant(base, root, "dtype_unknown")
    edit_header(d, lambda h: h[ffn_w].update(dtype="F7"))
    err("unknown_dtype", d, ST, "unknown dtype", "F7", ffn_w)
    d = variant(base, root, "no_dtype")
    edit_header(d, lambda h: h[ffn_w].pop("dtype"))
    err("entry_without_dtype", d, ST, ffn_w, "dtype")
    d = variant(base, root, "dup_name")
    p = os.path.join(d, ST)
    hb = json.dumps(hdr, separators=(",", ":"))
    dup = '"%s":%s,' % (ffn_b, json.dumps(hdr[ffn_b], separators=(",", ":")))
    hb = ("{" + dup + hb[1:]).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    raw_file(d, struct.pack("<Q", len(hb)) + hb + good[8 + n_hdr:])
    err("duplicate_tensor_name", d, ST, "appears twice", ffn_b)
    d = variant(base, root, "metadata_bad")
    edit_header(d, lambda h: h.update(__metadata__=[1]))
    err("metadata_not_object", d, ST, "__metadata__")
    d = variant(base, root, "bad_decoder")
    def add_dec(h):
        h["cls.predictions.decoder.weight"] = {"dtype": "F32", "shape": [V, H - 1],
                                               "data_offsets": [size, size + V * (H - 1) * 4]}
    edit_header(d, add_dec, lambda data: data + b"\0" * (V * (H - 1) * 4))
    err("untied_decoder_wrong_shape", d, ST, "cls.predictions.decoder.weight", "[600,31]")

    # config disagreeing with the weights
    d = variant(base, root, "cfg_inter"); edit_config(d, lambda c: c.update(intermediate_size=128))
    err("config_intermediate_vs_weights", d, ST, "has shape", "intermediate_size")
    d = variant(base, root, "cfg_hidden")
    edit_config(d, lambda c: c.update(hidden_size=64, num_attention_heads=4))
    err("config_hidden_vs_weights", d, ST, "word_embeddings", "[600,32]", "expected [600,64]")
    d = variant(base, root, "cfg_layers_more"); edit_config(d, lambda c: c.update(num_hidden_layers=3))
    err("config_more_layers_than_weights", d, ST, "missing tensor", "encoder.layer.2.")
    d = variant(base, root, "cfg_layers_less"); edit_config(d, lambda c: c.update(num_hidden_layers=1))
    err("config_fewer_layers_than_weights", d, ST, "layer 1", "num_hidden_layers")
    d = variant(base, root, "cfg_maxpos"); edit_config(d, lambda c: c.update(max_position_embeddings=128))
    err("config_max_position_vs_weights", d, ST, "position_embeddings", "max_position_embeddings")
    d = variant(base, root, "cfg_types"); edit_config(d, lambda c: c.update(type_vocab_size=3))
    err("config_type_vocab_vs_weights", d, ST, "token_type_embeddings", "type_vocab_size")

    # models made by `make models`, if any
    if models and os.path.isdir(models):
        for n in sorted(os.listdir(models)):
            m = os.path.join(models, n)
            if os.path.isfile(os.path.join(m, "config.json")) and \
               os.path.isfile(os.path.join(m, ST)):
                load_line("models/" + n, m)

    with open(os.path.join(root, "cases.tsv"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
