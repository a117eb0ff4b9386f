#!/usr/bin/python3
"""Train the shipped tiny Chinese BERT (model/bertfill-zh-tiny) on corpus-zh.

    /usr/bin/python3 model/train.py --max-minutes 100          # train (resumes if it can)
    /usr/bin/python3 model/train.py --bench                    # time a few steps, no writes

A BertForMaskedLM written from the architecture in PyTorch (the transformers
package is not available): word + position + token-type embeddings and
LayerNorm, N post-LN encoder layers (self-attention, GELU(erf) feed-forward),
MLM head (dense + GELU + LayerNorm + decoder tied to the word embeddings, plus
a bias).  Parameter names are exactly those of Hugging Face's
BertForMaskedLM.state_dict(), so the exported model.safetensors loads like
bert-base-chinese (the tied cls.predictions.decoder.weight is not stored).

Data: ../shared/data/corpus-zh/train/*.txt.xz, less what model/heldout.py
holds out (the 1000 everyday evaluation lines, and every line that contains
an evaluation sentence or one of the demo's [MASK] texts: the counts are
printed at start), tokenized with the shipped vocab.txt (build_vocab.py, HF
BertTokenizer semantics), token ids cached in --work (never in git).  Each
file's lines, each followed by [SEP], form one token stream, cut into full
sequences [CLS] ... [SEP] of --seq-len tokens (no padding; --pack lines packs
whole lines instead, which leaves ~25% padding).  Half of the lines
(--drop-final-punct) lose their final 。！？；… so that the model does not
learn "the character before [SEP] is always punctuation" (a bare idiom like
半途而[MASK] was filled with 。 before this was added).  --mix gives each file
a weight w: an epoch takes floor(w) passes over the file's sequences plus a
random share w - floor(w) of them, all shuffled with a seed derived from
--seed and the epoch (the default down-weights the formulaic law texts and
repeats the small everyday files).
Initialisation (from scratch): N(0, 0.02) like BERT, except that the position
embeddings start as sinusoids (std 0.04) and the query and key weights get
+0.7 * identity, so every attention head starts out looking at nearby
characters (head 0 narrowly, the last head broadly).  With the plain random
start, a first run here sat for 1500+ steps on a "bag of characters" plateau
(loss ~5.5, attention uniform over the 128 positions); with this start the loss
fell below that within ~400 steps.  Only the starting point differs: the
architecture and parameters are plain BERT.
Masking: 15% of the character tokens, 80% [MASK] / 10% random / 10% kept,
from a torch generator whose state is checkpointed, so a resumed run sees the
same data and masks as an uninterrupted one.

Resuming: from --ckpt (model + optimizer + step + RNG state, default
build/train-zh-tiny/checkpoint.pt, kept out of git) when it exists, else from
the committed model/bertfill-zh-tiny/model.safetensors (optimizer state and
learning-rate schedule restart, with a fresh warmup), else from scratch.
A checkpoint whose schedule has finished continues at the final learning
rate unless --new-schedule (fresh warmup + decay, optimizer state kept).
Every --export-minutes and at the end the checkpoint is written and the
shipped model.safetensors (F16, the step in its metadata) + config.json are
exported.  The learning-rate decay ends at --total-steps or --max-minutes,
whichever comes first.
"""
import os

def cpu_has_avx512():
    """Whether /proc/cpuinfo lists avx512f (Debian's OpenBLAS 0.3.21 picks slow generic
    kernels on AVX-512 CPUs unless told the core, as ext/engine/blas.c does for the
    engine; forcing SkylakeX on a CPU without AVX-512 dies of SIGILL)."""
    try:
        with open("/proc/cpuinfo") as f:
            return any(l.startswith("flags") and " avx512f" in l for l in f)
    except OSError:
        return False

if "OPENBLAS_CORETYPE" not in os.environ and cpu_has_avx512():   # before torch loads OpenBLAS
    os.environ["OPENBLAS_CORETYPE"] = "SkylakeX"
import argparse, collections, hashlib, json, math, shutil, struct, sys, time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import build_vocab  # noqa: E402  (tokenizer reference + corpus reader)
import heldout      # noqa: E402  (the everyday held-out set and the leak guard)

MODEL_DIR = os.path.join(HERE, "bertfill-zh-tiny")

# ---------------------------------------------------------------- model

class Embeddings(nn.Module):
    def __init__(s, c):
        super().__init__()
        s.word_embeddings = nn.Embedding(c["vocab_size"], c["hidden_size"])
        s.position_embeddings = nn.Embedding(c["max_position_embeddings"], c["hidden_size"])
        s.token_type_embeddings = nn.Embedding(c["type_vocab_size"], c["hidden_size"])
        s.LayerNorm = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])

    def forward(s, ids):                      # ids [B,T]; token type 0 everywhere
        T = ids.shape[1]
        x = s.word_embeddings(ids) + s.position_embeddings.weight[:T] + s.token_type_embeddings.weight[0]
        return s.LayerNorm(x)

class SelfAttention(nn.Module):
    def __init__(s, c):
        super().__init__()
        H = c["hidden_size"]
        s.nh = c["num_attention_heads"]; s.hd = H // s.nh
        s.query = nn.Linear(H, H); s.key = nn.Linear(H, H); s.value = nn.Linear(H, H)

    def forward(s, x, bias):                  # x [B,T,H]; bias [B,1,1,T] (0 or -inf-ish) or None
        B, T, H = x.shape
        q = s.query(x).view(B, T, s.nh, s.hd).transpose(1, 2)
        k = s.key(x).view(B, T, s.nh, s.hd).transpose(1, 2)
        v = s.value(x).view(B, T, s.nh, s.hd).transpose(1, 2)
        a = (q @ k.transpose(-1, -2)) / math.sqrt(s.hd)
        if bias is not None:
            a = a + bias
        a = a.softmax(-1)
        return (a @ v).transpose(1, 2).reshape(B, T, H)

class DenseLN(nn.Module):                     # BertSelfOutput / BertOutput: LN(x W + b + residual)
    def __init__(s, c, din):
        super().__init__()
        s.dense = nn.Linear(din, c["hidden_size"])
        s.LayerNorm = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])

    def forward(s, h, resid):
        return s.LayerNorm(s.dense(h) + resid)

class Attention(nn.Module):
    def __init__(s, c):
        super().__init__()
        s.self = SelfAttention(c); s.output = DenseLN(c, c["hidden_size"])

    def forward(s, x, bias):
        return s.output(s.self(x, bias), x)

class Intermediate(nn.Module):
    def __init__(s, c):
        super().__init__()
        s.dense = nn.Linear(c["hidden_size"], c["intermediate_size"])

    def forward(s, x):
        return F.gelu(s.dense(x))             # exact (erf) GELU, HF "gelu"

class Layer(nn.Module):
    def __init__(s, c):
        super().__init__()
        s.attention = Attention(c); s.intermediate = Intermediate(c)
        s.output = DenseLN(c, c["intermediate_size"])

    def forward(s, x, bias):
        x = s.attention(x, bias)
        return s.output(s.intermediate(x), x)

class Encoder(nn.Module):
    def __init__(s, c):
        super().__init__()
        s.layer = nn.ModuleList([Layer(c) for _ in range(c["num_hidden_layers"])])

    def forward(s, x, bias):
        for l in s.layer:
            x = l(x, bias)
        return x

class Bert(nn.Module):
    def __init__(s, c):
        super().__init__()
        s.embeddings = Embeddings(c); s.encoder = Encoder(c)

    def forward(s, ids, bias=None):
        return s.encoder(s.embeddings(ids), bias)

class Transform(nn.Module):
    def __init__(s, c):
        super().__init__()
        s.dense = nn.Linear(c["hidden_size"], c["hidden_size"])
        s.LayerNorm = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])

    def forward(s, x):
        return s.LayerNorm(F.gelu(s.dense(x)))

class Predictions(nn.Module):
    def __init__(s, c):
        super().__init__()
        s.transform = Transform(c)
        s.bias = nn.Parameter(torch.zeros(c["vocab_size"]))

class Head(nn.Module):
    def __init__(s, c):
        super().__init__()
        s.predictions = Predictions(c)

class BertForMaskedLM(nn.Module):
    """state_dict() names == HF BertForMaskedLM's (decoder weight tied, not a parameter)."""

    def __init__(s, c):
        super().__init__()
        s.config = c
        s.bert = Bert(c); s.cls = Head(c)
        s.apply(s._init)

    def _init(s, m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight); nn.init.zeros_(m.bias)

    def logits_at(s, hidden):                 # hidden [N,H] -> [N,V]
        p = s.cls.predictions
        return F.linear(p.transform(hidden), s.bert.embeddings.word_embeddings.weight, p.bias)

    def forward(s, ids, positions=None, bias=None):
        """ids [B,T]; positions: LongTensor of flat indices into B*T, or None for all."""
        h = s.bert(ids, bias)
        h = h.reshape(-1, h.shape[-1])
        if positions is not None:
            h = h[positions]
        return s.logits_at(h)

def make_config(vocab_size, a):
    return {
        "architectures": ["BertForMaskedLM"],
        "model_type": "bert",
        "vocab_size": vocab_size,
        "hidden_size": a.hidden,
        "num_hidden_layers": a.layers,
        "num_attention_heads": a.heads,
        "intermediate_size": a.intermediate,
        "max_position_embeddings": a.max_pos,
        "type_vocab_size": 2,
        "layer_norm_eps": 1e-12,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
        "initializer_range": 0.02,
        "pad_token_id": 0,
        "position_embedding_type": "absolute",
    }

# ---------------------------------------------------------------- safetensors

_DT = {"F32": (np.float32, 4), "F16": (np.float16, 2)}

def save_safetensors(path, tensors, dtype="F16", metadata=None):
    """tensors: dict name -> torch tensor.  Writes path atomically."""
    npd = _DT[dtype][0]
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        arr = np.ascontiguousarray(tensors[name].detach().cpu().float().numpy().astype(npd))
        if dtype == "F16" and not np.all(np.isfinite(arr)):
            raise ValueError("%s does not fit in F16" % name)
        b = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b); off += len(b)
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h))); f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)

def load_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError("%s: too short for a safetensors file" % path)
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise ValueError("%s: header length %d beyond end of file" % (path, n))
    header = json.loads(data[8:8 + n].decode("utf-8"))
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        npd = {"F32": "<f4", "F16": "<f2"}[info["dtype"]]
        s, e = info["data_offsets"]
        arr = np.frombuffer(data, dtype=npd, count=(e - s) // np.dtype(npd).itemsize, offset=base + s)
        out[name] = torch.from_numpy(arr.astype(np.float32).reshape(info["shape"]))
    return out

def safetensors_metadata(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n).decode("utf-8")).get("__metadata__", {})

def export_model(model, out_dir, step, note=""):
    os.makedirs(out_dir, exist_ok=True)
    sd = {k: v for k, v in model.state_dict().items()}
    save_safetensors(os.path.join(out_dir, "model.safetensors"), sd, "F16",
                     {"format": "pt", "step": step, "note": note})
    tmp = os.path.join(out_dir, "config.json.tmp")
    with open(tmp, "w") as f:
        json.dump(model.config, f, indent=2); f.write("\n")
    os.replace(tmp, os.path.join(out_dir, "config.json"))

def load_exported(out_dir):
    with open(os.path.join(out_dir, "config.json")) as f:
        c = json.load(f)
    m = BertForMaskedLM(c)
    sd = load_safetensors(os.path.join(out_dir, "model.safetensors"))
    missing, unexpected = m.load_state_dict(sd, strict=False)
    if missing or unexpected:
        raise ValueError("%s: missing %s unexpected %s" % (out_dir, missing, unexpected))
    return m

# ---------------------------------------------------------------- data

def tokenize_corpus(lines, tok, work):
    """lines [(file, text)] -> (ids uint16 [N], line starts int64 [L+1], line file index int8 [L],
    file names); cached in work/ under a name that depends on the vocabulary and the lines."""
    h = hashlib.sha1()
    for fname, line in lines:
        h.update(fname.encode()); h.update(b"\t"); h.update(line.encode("utf-8")); h.update(b"\n")
    cache = os.path.join(work, "tokens-v%d-%s.npz" % (len(tok.itos), h.hexdigest()[:12]))
    if os.path.exists(cache):
        z = np.load(cache, allow_pickle=False)
        return z["ids"], z["starts"], z["fidx"], list(z["files"])
    t0 = time.time()
    files, ids, starts, fidx = [], [], [0], []
    for fname, line in lines:
        if not files or files[-1] != fname:
            files.append(fname)
        x = tok.encode(line)
        if not x:
            continue
        ids.extend(x); starts.append(len(ids)); fidx.append(len(files) - 1)
    ids = np.array(ids, dtype=np.uint16); starts = np.array(starts, dtype=np.int64)
    fidx = np.array(fidx, dtype=np.int8)
    os.makedirs(os.path.dirname(cache), exist_ok=True)
    np.savez(cache, ids=ids, starts=starts, fidx=fidx, files=np.array(files))
    print("tokenized %d lines, %d tokens in %.0fs -> %s" % (len(fidx), len(ids), time.time() - t0, cache),
          flush=True)
    return ids, starts, fidx, files

def pack(ids, starts, fidx, seq_len, cls, sep, mode="stream", drop_ids=(), drop_p=0.0, seed=0):
    """Sequences [CLS] ... [SEP] of at most seq_len tokens -> list of (file index, int32 array).
    mode "stream": each file's lines, each followed by [SEP], as one token stream cut
    into full-length pieces (no padding; a piece may start or end inside a line).
    mode "lines": greedy packing of whole lines (a longer line is cut into pieces)."""
    room = seq_len - 2                        # [CLS] ... [SEP]
    seqs = []
    rs = np.random.RandomState(seed + 7)
    drop = np.zeros(max(ids.max() + 1, max(drop_ids or [0]) + 1) if len(ids) else 1, dtype=bool)
    drop[list(drop_ids)] = True
    def emit(f, body):
        if len(body) and body[0] == sep:
            body = body[1:]
        if len(body) and body[-1] == sep:     # the final [SEP] closes it
            body = body[:-1]
        if len(body):
            seqs.append((f, np.concatenate([[cls], body, [sep]]).astype(np.int32)))
    if mode == "stream":
        bounds = np.flatnonzero(np.diff(fidx.astype(np.int64))) + 1
        for lo, hi in zip(np.concatenate([[0], bounds]), np.concatenate([bounds, [len(fidx)]])):
            parts = []
            last = ids[starts[lo + 1:hi + 1] - 1]
            cut = drop[last] & (rs.random_sample(hi - lo) < drop_p)
            for i in range(lo, hi):
                line = ids[starts[i]:starts[i + 1]]
                if cut[i - lo] and len(line) > 1:   # sometimes no final 。/！/？ before [SEP]
                    line = line[:-1]
                parts.append(line); parts.append(np.array([sep], dtype=ids.dtype))
            stream = np.concatenate(parts)
            for k in range(0, len(stream), room):
                emit(int(fidx[lo]), stream[k:k + room])
        return seqs
    cur, cur_f = [], -1
    def flush():
        nonlocal cur
        if cur:
            emit(cur_f, np.concatenate(cur)[:room])
        cur = []
    for i in range(len(fidx)):
        line = ids[starts[i]:starts[i + 1]]
        f = int(fidx[i])
        if f != cur_f:
            flush(); cur_f = f
        used = sum(len(c) for c in cur)
        if used and used + len(line) > room:
            flush(); used = 0
        while len(line) > room:               # a long line: cut into full pieces
            flush()
            cur = [line[:room]]; flush()
            line = line[room:]
        cur.append(np.concatenate([line, [sep]]))
    flush()
    return seqs

DEFAULT_MIX = ("laws=0.15,classic_novels=0.5,javaguide=0.4,kdconv=1,crosswoz=1,tatoeba_cmn=2,"
               "tencent_chitchat=3,moztw_cc0_zhtw=3,xiaoai_chitchat=3,xpersona_zh=3,chatterbot_zh=3")

def parse_mix(text, files):
    """"name=weight,..." (name: a training file without .txt.xz) -> weight per file index.
    Every file must be named; weight w means floor(w) passes over the file's sequences per
    epoch plus a random share w - floor(w) of them."""
    names = [f[:-len(".txt.xz")] if f.endswith(".txt.xz") else f for f in files]
    w = {}
    for part in text.split(","):
        name, _, val = part.partition("=")
        name = name.strip()
        if name not in names:
            sys.exit("--mix: %r is not a training file (files: %s)" % (name, ", ".join(names)))
        try:
            w[name] = float(val)
        except ValueError:
            sys.exit("--mix: %r: the weight must be a number" % part)
        if not 0 <= w[name] <= 100:
            sys.exit("--mix: %r: the weight must be between 0 and 100" % part)
    missing = [n for n in names if n not in w]
    if missing:
        sys.exit("--mix: no weight for %s" % ", ".join(missing))
    return [w[n] for n in names]

def single_lines(ids, starts, fidx, max_len, cls, sep, drop_ids=(), drop_p=0.0, seed=0):
    """Every line of at most max_len - 2 tokens as a sequence of its own, [CLS] line [SEP]
    (as bert_fill sees a sentence), the final punctuation dropped as in pack()."""
    rs = np.random.RandomState(seed + 11)
    drop = set(int(t) for t in drop_ids)
    out = []
    for i in range(len(fidx)):
        line = ids[starts[i]:starts[i + 1]]
        if not len(line) or len(line) > max_len - 2:
            continue
        if len(line) > 1 and int(line[-1]) in drop and rs.random_sample() < drop_p:
            line = line[:-1]
        out.append((int(fidx[i]), np.concatenate([[cls], line, [sep]]).astype(np.int32)))
    return out

class Data:
    def __init__(s, seqs, files, weights, seed, n_val):
        s.files = files
        rs = np.random.RandomState(seed)
        order = rs.permutation(len(seqs))
        s.val = [seqs[i][1] for i in order[:n_val]]
        rest = [seqs[i] for i in order[n_val:]]
        s.by_file = [np.array([i for i, (f, _) in enumerate(rest) if f == k], dtype=np.int64)
                     for k in range(len(files))]
        s.seqs = [x for _, x in rest]
        s.weights = weights; s.seed = seed

    def epoch_order(s, epoch):
        rs = np.random.RandomState(s.seed * 1000 + epoch + 1)
        parts = []
        for idx, w in zip(s.by_file, s.weights):
            parts += [idx] * int(w)
            parts.append(rs.permutation(idx)[:int(round(len(idx) * (w - int(w))))])
        return rs.permutation(np.concatenate(parts))

    def epoch_share(s):
        """Tokens per epoch by file, as {file: (sequences, share)}."""
        n = [len(idx) * w for idx, w in zip(s.by_file, s.weights)]
        return {f: (int(round(k)), k / sum(n)) for f, k in zip(s.files, n)}

def batch_tensor(seqs, pad):
    T = max(len(x) for x in seqs)
    ids = np.full((len(seqs), T), pad, dtype=np.int64)
    for i, x in enumerate(seqs):
        ids[i, :len(x)] = x
    ids = torch.from_numpy(ids)
    bias = None
    if any(len(x) < T for x in seqs):
        bias = torch.zeros(len(seqs), 1, 1, T)
        bias.masked_fill_((ids == pad)[:, None, None, :], -1e4)
    return ids, bias

def mask_batch(ids, gen, tok, vocab_size, p=0.15):
    """Whole-character masking (every token is one character or one ## piece).
    Returns (input ids, flat masked positions, target ids)."""
    special = (ids == tok.cls) | (ids == tok.sep) | (ids == tok.pad)
    r = torch.rand(ids.shape, generator=gen)
    sel = (r < p) & ~special
    if not sel.any():                        # at least one prediction
        cand = (~special).reshape(-1).nonzero().squeeze(1)
        sel.view(-1)[cand[0]] = True
    pos = sel.reshape(-1).nonzero().squeeze(1)
    tgt = ids.reshape(-1)[pos].clone()
    inp = ids.clone().reshape(-1)
    u = torch.rand(pos.shape, generator=gen)
    rnd = torch.randint(5, vocab_size, pos.shape, generator=gen)   # ids >= 5: not special
    repl = torch.where(u < 0.8, torch.full_like(tgt, tok.mask), torch.where(u < 0.9, rnd, tgt))
    inp[pos] = repl
    return inp.view_as(ids), pos, tgt

# ---------------------------------------------------------------- training

def init_special(model, cfg, a):
    """Optional initialisations for a run from scratch (see --pos-init, --qk-init-*)."""
    if a.pos_init == "sin":                   # learned positions, initialised as sinusoids
        P, H = cfg["max_position_embeddings"], cfg["hidden_size"]
        pos = torch.arange(P, dtype=torch.float32)[:, None]
        freq = torch.exp(-math.log(10000.0) * torch.arange(0, H, 2, dtype=torch.float32) / H)
        pe = torch.zeros(P, H); pe[:, 0::2] = torch.sin(pos * freq); pe[:, 1::2] = torch.cos(pos * freq)
        with torch.no_grad():
            model.bert.embeddings.position_embeddings.weight.copy_(pe * (a.pos_init_std / pe.std()))
    if a.qk_init_std:                          # larger query/key init: attention is not uniform at step 0
        with torch.no_grad():
            for l in model.bert.encoder.layer:
                nn.init.normal_(l.attention.self.query.weight, 0.0, a.qk_init_std)
                nn.init.normal_(l.attention.self.key.weight, 0.0, a.qk_init_std)
    if a.qk_init_eye:
        # query = key = identity (+ the N(0, 0.02) init): with sinusoidal positions the
        # attention logits start as position similarity, so every head starts out
        # attending to nearby characters (head 0 narrowly, the last head broadly);
        # this skips the long "bag of characters" plateau of a random start.
        with torch.no_grad():
            for l in model.bert.encoder.layer:
                l.attention.self.query.weight.add_(torch.eye(cfg["hidden_size"]) * a.qk_init_eye)
                l.attention.self.key.weight.add_(torch.eye(cfg["hidden_size"]) * a.qk_init_eye)

def lr_at(step, progress, a):
    """Linear warmup over a.warmup steps, then cosine decay to a.final_lr_frac * a.lr
    as progress goes 0 -> 1 (progress: the larger of the step fraction and the
    wall-time fraction, so a time-bounded run still ends with a decayed rate)."""
    if step < a.warmup:
        return a.lr * (step + 1) / a.warmup
    frac = min(1.0, max(0.0, progress))
    return a.lr * (a.final_lr_frac + (1 - a.final_lr_frac) * 0.5 * (1 + math.cos(math.pi * frac)))

@torch.no_grad()
def evaluate_val(model, data, tok, V, bs, seed):
    model.eval()
    gen = torch.Generator().manual_seed(seed + 12345)
    loss_sum, n, correct = 0.0, 0, 0
    for i in range(0, len(data.val), bs):
        ids, bias = batch_tensor(data.val[i:i + bs], tok.pad)
        inp, pos, tgt = mask_batch(ids, gen, tok, V)
        logits = model(inp, pos, bias)
        loss_sum += F.cross_entropy(logits, tgt, reduction="sum").item()
        correct += (logits.argmax(-1) == tgt).sum().item(); n += len(tgt)
    model.train()
    return loss_sum / n, correct / n

def main():
    ap = argparse.ArgumentParser(description="train the tiny Chinese BERT")
    ap.add_argument("--corpus", default=build_vocab.DEFAULT_CORPUS)
    ap.add_argument("--out", default=MODEL_DIR, help="shipped model dir (vocab.txt must be there)")
    ap.add_argument("--work", default=os.path.join(HERE, "..", "build", "train-zh-tiny"))
    ap.add_argument("--ckpt", default=None, help="checkpoint (default WORK/checkpoint.pt)")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--intermediate", type=int, default=1024)
    ap.add_argument("--max-pos", type=int, default=128)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--drop-final-punct", type=float, default=0.5,
                    help="drop a line's final 。！？；… with this probability (text typed without it is common)")
    ap.add_argument("--pack", choices=("stream", "lines"), default="stream",
                    help="stream: full-length sequences cut from each file's token stream; lines: whole lines")
    ap.add_argument("--lr", type=float, default=7e-4)
    ap.add_argument("--final-lr-frac", type=float, default=0.05)
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--total-steps", type=int, default=12000,
                    help="schedule length in steps (decay also ends at --max-minutes, whichever comes first)")
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--mix", default=DEFAULT_MIX,
                    help="passes per epoch over each training file's sequences (default %(default)s)")
    ap.add_argument("--single-every", type=int, default=0,
                    help="every N-th step trains on single lines ([CLS] line [SEP], as bert_fill sees a "
                         "sentence) instead of packed streams (0: never)")
    ap.add_argument("--single-batch", type=int, default=96, help="lines per single-line step")
    ap.add_argument("--single-max", type=int, default=48, help="longest single line, in tokens with [CLS]/[SEP]")
    ap.add_argument("--snapshots", default=None,
                    help="also copy each exported model into DIR/step-N (for the training curve)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-minutes", type=float, default=0, help="stop after this wall time (0: no limit)")
    ap.add_argument("--log-every", type=int, default=20)
    ap.add_argument("--export-minutes", type=float, default=10)
    ap.add_argument("--val-seqs", type=int, default=256)
    ap.add_argument("--new-schedule", action="store_true",
                    help="when resuming from the checkpoint, restart warmup + decay (keeps the optimizer state)")
    ap.add_argument("--pos-init", choices=("normal", "sin"), default="sin",
                    help="initial position embeddings (from scratch only): N(0, 0.02) or sinusoids scaled to --pos-init-std")
    ap.add_argument("--pos-init-std", type=float, default=0.04)
    ap.add_argument("--qk-init-std", type=float, default=0.0,
                    help="std of the initial query/key weights (0: 0.02 like the rest; from scratch only)")
    ap.add_argument("--qk-init-eye", type=float, default=0.7,
                    help="add this times the identity to the initial query and key weights (from scratch only)")
    ap.add_argument("--fresh", action="store_true", help="ignore checkpoint and committed weights")
    ap.add_argument("--bench", type=int, default=0, help="time N steps and exit (writes nothing)")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed); np.random.seed(a.seed)
    ckpt_path = a.ckpt or os.path.join(a.work, "checkpoint.pt")
    tok = build_vocab.Tokenizer(a.out)
    V = len(tok.itos)
    print("torch %s, %d thread(s), OPENBLAS_CORETYPE=%s, vocab %d" %
          (torch.__version__, torch.get_num_threads(), os.environ.get("OPENBLAS_CORETYPE"), V), flush=True)

    cfg = make_config(V, a)
    model = BertForMaskedLM(cfg)
    init_special(model, cfg, a)
    start_step, start_note = 0, "from scratch"
    ck = None
    if not a.fresh and not a.bench and os.path.exists(ckpt_path):
        ck = torch.load(ckpt_path)
        cfg = ck["config"]; model = BertForMaskedLM(cfg)
        model.load_state_dict(ck["model"]); start_step = ck["step"]
        start_note = "resumed from checkpoint %s at step %d" % (ckpt_path, start_step)
    elif not a.fresh and not a.bench and os.path.exists(os.path.join(a.out, "model.safetensors")):
        model = load_exported(a.out); cfg = model.config
        start_step = int(safetensors_metadata(os.path.join(a.out, "model.safetensors")).get("step", 0))
        start_note = "initialised from committed %s (optimizer + schedule restart)" % a.out
    if cfg["vocab_size"] != V:
        sys.exit("vocab.txt has %d entries but the model has %d" % (V, cfg["vocab_size"]))
    nparam = sum(p.numel() for p in model.parameters())
    print("model: %s, %.2fM parameters; %s" % (
        {k: cfg[k] for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                             "intermediate_size", "max_position_embeddings")}, nparam / 1e6, start_note),
          flush=True)

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "embeddings" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "embeddings" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=a.lr, betas=(0.9, 0.98), eps=1e-6)
    gen = torch.Generator().manual_seed(a.seed)
    if ck is not None:
        opt.load_state_dict(ck["optimizer"]); gen.set_state(ck["gen"])

    lines, removed = heldout.guarded_lines(a.corpus)
    dropped = collections.Counter(why for why, _, _ in removed)
    print("corpus: %d training lines; not trained on: %s" %
          (len(lines), ", ".join("%s %d" % kv for kv in sorted(dropped.items()))), flush=True)
    ids, starts, fidx, files = tokenize_corpus(lines, tok, a.work)
    final = [tok.stoi[c] for c in "。！？；….!?;" if c in tok.stoi]
    seqs = pack(ids, starts, fidx, a.seq_len, tok.cls, tok.sep, a.pack, final, a.drop_final_punct, a.seed)
    data = Data(seqs, files, parse_mix(a.mix, files), a.seed, a.val_seqs)
    per_epoch = len(data.epoch_order(0))
    singles = None
    if a.single_every:
        singles = Data(single_lines(ids, starts, fidx, a.single_max, tok.cls, tok.sep, final, a.drop_final_punct,
                                    a.seed), files, data.weights, a.seed + 1, 0)
        per_single = len(singles.epoch_order(0))
        print("single lines: %d lines of <= %d tokens, %d per epoch, a batch of %d every %d steps" %
              (len(singles.seqs), a.single_max, per_single, a.single_batch, a.single_every), flush=True)
    print("data: %d tokens, %d sequences of <= %d tokens (%d held out for validation); "
          "%d sequences per epoch: %s" %
          (len(ids), len(seqs), a.seq_len, len(data.val), per_epoch,
           ", ".join("%s %d (%.1f%%)" % (f, n, 100 * sh) for f, (n, sh) in data.epoch_share().items())),
          flush=True)

    # resume position: the optimizer schedule restarts when starting from committed weights
    # data position = step (global); the learning-rate schedule has its own counter,
    # restarted (fresh warmup) when starting from committed weights or with --new-schedule
    sched_step = ck.get("sched_step", ck["step"]) if ck is not None and not a.new_schedule else 0
    progress = ck.get("progress", 0.0) if ck is not None and not a.new_schedule else 0.0
    t_decay, p_decay0 = None, 0.0
    step = start_step
    total_done = ck["tokens"] if ck is not None else 0
    t_start = time.time(); t_log = t_start; t_export = t_start; tok_log = 0
    loss_acc, acc_acc, n_acc = 0.0, 0.0, 0
    model.train()

    def save(final=False):
        os.makedirs(os.path.dirname(ckpt_path) or ".", exist_ok=True)
        torch.save({"config": cfg, "model": model.state_dict(), "optimizer": opt.state_dict(),
                    "step": step, "gen": gen.get_state(), "tokens": total_done, "args": vars(a),
                    "progress": progress, "sched_step": sched_step},
                   ckpt_path + ".tmp")
        os.replace(ckpt_path + ".tmp", ckpt_path)
        vl, va = evaluate_val(model, data, tok, V, a.batch, a.seed)
        export_model(model, a.out, step, "val loss %.4f acc %.4f" % (vl, va))
        if a.snapshots:
            snap = os.path.join(a.snapshots, "step-%d" % step)
            shutil.rmtree(snap, ignore_errors=True)
            shutil.copytree(a.out, snap, ignore=shutil.ignore_patterns("*.int8.safetensors"))
        print("step %d: checkpoint %s, exported %s (F16); val loss %.4f masked acc %.4f%s" %
              (step, ckpt_path, a.out, vl, va, " [final]" if final else ""), flush=True)

    bench_t = []
    while True:
        epoch = (step * a.batch) // per_epoch
        if singles is not None and step % a.single_every == 0:
            src, n, at = singles, a.single_batch, (step // a.single_every) * a.single_batch
        else:
            src, n, at = data, a.batch, step * a.batch
        per = per_single if src is singles else per_epoch
        order = src.epoch_order(at // per)
        batch = [src.seqs[j] for j in order[at % per:at % per + n]]
        if len(batch) < n:                    # epoch tail: top up from the next epoch's start
            batch += [src.seqs[j] for j in src.epoch_order(at // per + 1)[:n - len(batch)]]
        x, bias = batch_tensor(batch, tok.pad)
        inp, pos, tgt = mask_batch(x, gen, tok, V)
        p_steps = (sched_step - a.warmup) / max(1, a.total_steps - a.warmup)
        p_time = 0.0
        if a.max_minutes and sched_step >= a.warmup:
            if t_decay is None:
                t_decay = time.time(); p_decay0 = progress
            p_time = p_decay0 + (1 - p_decay0) * (time.time() - t_decay) / max(1.0, a.max_minutes * 60 - (t_decay - t_start))
        progress = max(progress, p_steps, p_time)
        lr = lr_at(sched_step, progress, a)
        for g in opt.param_groups:
            g["lr"] = lr
        t0 = time.time()
        logits = model(inp, pos, bias)
        loss = F.cross_entropy(logits, tgt)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1; sched_step += 1
        ntok = int((x != tok.pad).sum()); total_done += ntok; tok_log += ntok
        loss_acc += loss.item(); acc_acc += (logits.argmax(-1) == tgt).float().mean().item(); n_acc += 1
        if a.bench:
            bench_t.append(time.time() - t0)
            if len(bench_t) >= a.bench:
                st = sorted(bench_t[1:]) or bench_t
                med = st[len(st) // 2]
                print("bench: median step %.3fs, %.0f tokens/s, loss %.3f" %
                      (med, a.batch * a.seq_len / med, loss.item()))
                return
            continue
        now = time.time()
        if step % a.log_every == 0:
            print("step %d epoch %d progress %.3f lr %.2e loss %.4f masked-acc %.4f %.0f tok/s elapsed %.1f min" %
                  (step, epoch, progress, lr, loss_acc / n_acc, acc_acc / n_acc, tok_log / (now - t_log),
                   (now - t_start) / 60), flush=True)
            loss_acc, acc_acc, n_acc, tok_log, t_log = 0.0, 0.0, 0, 0, now
        done = sched_step >= a.total_steps or (a.max_minutes and now - t_start >= a.max_minutes * 60)
        if done or now - t_export >= a.export_minutes * 60:
            save(final=done); t_export = time.time()
        if done:
            print("done: step %d, %d tokens seen in total, %.1f min this run" %
                  (step, total_done, (time.time() - t_start) / 60), flush=True)
            return

if __name__ == "__main__":
    main()
