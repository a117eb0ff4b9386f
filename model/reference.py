#!/usr/bin/env python3
"""reference.py — an independent PyTorch BertForMaskedLM, and the golden outputs.

    /usr/bin/python3 model/make_test_models.py build/models
    /usr/bin/python3 model/reference.py build/models tests/golden [NAME ...]
    /usr/bin/python3 model/reference.py --mutations build/models [NAME ...]
    /usr/bin/python3 model/reference.py --joint build/models tests/golden [NAME ...]
    /usr/bin/python3 model/reference.py --int8 build/models tests/golden [NAME ...]

--int8 writes tests/golden/int8_NAME.json for tiny (or the NAMEs given): the
same sequences through the int8 scheme of bertfill's int8 mode,
written here from its definition (ext/engine/qgemm.h), not from the C code:
every Linear of the encoder and of the MLM head multiplies with
    weights:      per output row i, s_i = max_j |W_ij| / 127 (float32),
                  q_ij = round_half_even(W_ij * (127 / max_j |W_ij|)), in [-127, 127]
    activations:  per row r, lo = min(0, min x_r), hi = max(0, max x_r),
                  t_r = (hi - lo) / 255, z_r = round(-lo * 255 / (hi - lo)),
                  u_rj = clamp(round(x_rj * 255 / (hi - lo)) + z_r, 0, 255)
    product:      y_ri = float32(sum_j (u_rj - z_r) q_ij) * float32(t_r s_i) + b_i
(scales and codes in float32 arithmetic as the engine does them; the integer
sums exact); everything else (embeddings, LayerNorm, attention, softmax,
GELU) in float64 as in the fp32 reference.  The C engine's int8 output
differs from this only where a float32 rounding puts an activation on the
other side of a code boundary.  On tiny (2 layers) no code moves and the
engine matches to ~4e-7.  Deeper random models amplify a moved code: on small
(4 layers) scaling the word embeddings by 1 + 1e-7 moves this reference's own
int8 probabilities by 0.02, so an exact int8 golden for it would test noise;
its int8 mode is checked by agreement with fp32 instead (tests/python/t_int8.py).

--shipped writes the golden of the shipped model (tests/golden/shipped.json)
for the texts given (the model card's examples): for each [MASK] its top-5
tokens and probabilities, from the float64 pass below on the committed F16
weights; tests/python/t_shipped.py checks the C engine's fill_candidates against it
(|dp| <= 1e-4).  Texts are Han characters, full-width punctuation and [MASK],
one token per character (text_ids).

    /usr/bin/python3 model/reference.py --shipped model/bertfill-zh-tiny tests/golden/shipped.json TEXT ...

--spelling writes the golden of the spelling check (tests/golden/spelling.json)
on the shipped model for the texts given (Han characters and full-width
punctuation, one token per character): for every character of every text,
the text with that one character replaced by [MASK], and there the
probability of the written character and the top-SPELL_TOP characters with
theirs (float64 pass as --shipped).  tests/python/t_spelling.py checks every
written_score and suggestion_score of fill_suspects(text, 'thorough') against
it (|dp| <= 1e-4), and that margin = ln suggestion_score - ln written_score -
cost(kind).

    /usr/bin/python3 model/reference.py --spelling model/bertfill-zh-tiny tests/golden/spelling.json TEXT ...

--joint writes tests/golden/joint_NAME.json for tiny and small (or the NAMEs
given): whole-word fills by the chain rule and the beam search (see "Joint
decoding" below), checked by tests/python/t_joint.py.

For each test model build/models/NAME (every one made by make_test_models.py,
or the NAMEs given) this runs a fixed set of token-id sequences through a
forward pass written here from the architecture — not from the C engine, and
without the transformers package — and writes tests/golden/forward_NAME.json:
the model's name, the sha256 of its model.safetensors, and for every [MASK] of
every sequence the top-5 (id, probability) and the probability of the 6th.

Needs Debian's python3-torch and python3-numpy; developers run it by hand after
changing the generator (CI never does: it only compares against the committed
goldens, after checking that the sha256 still matches).

Precision: the whole forward pass runs in float64 on the stored weights
(F16/BF16 widened to float32 exactly as the C engine does, then to float64),
so the goldens are the model's exact output up to ~1e-15; the C engine's
float32 results are checked against them.  The same pass is also run in
float32 and the largest float32-vs-float64 difference is printed, to show how
much of the 1e-4 tolerance plain float32 arithmetic uses.

The architecture (post-LayerNorm BERT, Devlin et al. 2018), for token ids
x_1..x_n (n <= max_position_embeddings), hidden size H, A heads of d = H/A:
    h = LN(E_word[x_i] + E_pos[i] + E_type[0])
    per layer:  q, k, v = h Wq^T + bq, h Wk^T + bk, h Wv^T + bv   (split into A heads)
                a = softmax(q k^T / sqrt(d)) v   (per head, over all n positions)
                h = LN(h + a Wo^T + bo)
                h = LN(h + gelu(h Wi^T + bi) W2^T + b2)        gelu(x) = x (1 + erf(x/sqrt 2)) / 2
    at each [MASK]:  t = LN(gelu(h Wt^T + bt));  logits = t D^T + b;  p = softmax(logits)
where D is cls.predictions.decoder.weight, or E_word when that tensor is absent
(tied), b is cls.predictions.bias, and LN(x) = (x - mean) / sqrt(var + eps) * g + beta.

Joint decoding (the definitions of issue 12, written here from them, not from
ext/sqlite/joint.c).  For the masks m_1..m_n of a sequence, in order,
    P(t_1..t_n) = prod_i p_i(t_i)
where p_i is the softmax at m_i of the sequence with m_1..m_{i-1} replaced by
t_1..t_{i-1} (m_i..m_n still [MASK]): chain_score.  beam_search(k) keeps the
k best partial fills by cumulative log-probability: step i extends each by its
top k tokens at m_i (on its own sequence), ties to the lower token ids compared
position by position.  It also reports the margin: the smallest gap, over the
steps, between the k-th and (k+1)-th partial fill by probability among all
extensions of the beam by every token of the vocabulary.  (A token outside a
fill's own top k is never in the k best: the k tokens above it extend the same
fill with at least its probability.)  Where the margin exceeds the C engine's
float32 error, the C beam search must find the very same fills.
"""
import hashlib
import json
import math
import os
import random
import struct
import sys
import zlib

import numpy as np
import torch

K = 5


# ---------------------------------------------------------------- safetensors
def read_safetensors(path):
    """name -> float64 numpy array, for every floating tensor in the file."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError("%s: shorter than 8 bytes" % path)
    (hlen,) = struct.unpack("<Q", data[:8])
    if 8 + hlen > len(data):
        raise ValueError("%s: header length %d past end of file" % (path, hlen))
    header = json.loads(data[8:8 + hlen].decode("utf-8"))
    base = 8 + hlen
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        lo, hi = t["data_offsets"]
        n = 1
        for s in t["shape"]:
            n *= s
        raw = data[base + lo:base + hi]
        dt = t["dtype"]
        if dt == "F32":
            a = np.frombuffer(raw, dtype="<f4")
        elif dt == "F16":
            a = np.frombuffer(raw, dtype="<f2").astype(np.float32)
        elif dt == "BF16":
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            continue                              # e.g. int64 position_ids
        if a.size != n:
            raise ValueError("%s: tensor %s has %d values, shape says %d" % (path, name, a.size, n))
        out[name] = a.reshape(t["shape"]).astype(np.float64)
    return out


def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


# ---------------------------------------------------------------- model
class Bert:
    def __init__(self, d, dtype=torch.float64):
        with open(os.path.join(d, "config.json")) as f:
            self.cfg = cfg = json.load(f)
        assert cfg.get("hidden_act", "gelu") == "gelu"
        with open(os.path.join(d, "vocab.txt"), "rb") as f:
            vocab = f.read().decode("utf-8").split("\n")
        if vocab and vocab[-1] == "":
            vocab.pop()
        self.vocab = vocab
        self.tensors = read_safetensors(os.path.join(d, "model.safetensors"))
        self.dt = dtype
        self.V, self.H = cfg["vocab_size"], cfg["hidden_size"]
        self.A, self.L = cfg["num_attention_heads"], cfg["num_hidden_layers"]
        self.P, self.eps = cfg["max_position_embeddings"], cfg["layer_norm_eps"]
        g = self.get
        self.word = g("bert.embeddings.word_embeddings.weight")
        self.pos = g("bert.embeddings.position_embeddings.weight")
        self.typ = g("bert.embeddings.token_type_embeddings.weight")
        self.emb_ln = self.ln("bert.embeddings.LayerNorm")
        self.layers = []
        for i in range(self.L):
            p = "bert.encoder.layer.%d." % i
            self.layers.append(dict(
                q=self.lin(p + "attention.self.query"), k=self.lin(p + "attention.self.key"),
                v=self.lin(p + "attention.self.value"), ao=self.lin(p + "attention.output.dense"),
                aln=self.ln(p + "attention.output.LayerNorm"), i=self.lin(p + "intermediate.dense"),
                o=self.lin(p + "output.dense"), oln=self.ln(p + "output.LayerNorm")))
        self.head = self.lin("cls.predictions.transform.dense")
        self.head_ln = self.ln("cls.predictions.transform.LayerNorm")
        self.tied = not self.has("cls.predictions.decoder.weight")
        self.dec_w = self.word if self.tied else g("cls.predictions.decoder.weight")
        self.dec_b = g("cls.predictions.bias") if self.has("cls.predictions.bias") \
            else g("cls.predictions.decoder.bias")
        assert self.word.shape == (self.V, self.H) and self.pos.shape[0] == self.P
        assert self.dec_w.shape == (self.V, self.H) and self.dec_b.shape == (self.V,)
        self.mask_id = vocab.index("[MASK]")

    def _names(self, name):
        yield name
        if name.startswith("bert."):
            yield name[5:]

    def has(self, name):
        return any(n in self.tensors for n in self._names(name))

    def get(self, name):
        for n in self._names(name):
            if n in self.tensors:
                return torch.tensor(self.tensors[n], dtype=self.dt)
        raise KeyError("tensor %s not found" % name)

    def lin(self, base):
        return self.get(base + ".weight"), self.get(base + ".bias")

    def ln(self, base):
        w = base + (".weight" if self.has(base + ".weight") else ".gamma")
        b = base + (".bias" if self.has(base + ".bias") else ".beta")
        return self.get(w), self.get(b)

    def layernorm(self, x, p):
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        eps = 1e-12 if self.bug == "eps-1e-12" else self.eps
        return (x - mu) / torch.sqrt(var + eps) * p[0] + (0 if self.bug == "no-ln-bias" else p[1])

    @staticmethod
    def linear(x, p):
        return x @ p[0].T + p[1]

    bug = None       # --mutations: name of a deliberate mistake to make

    def decoder(self, m):
        """logits = t D^T + b at the masks (Int8Bert: in int8, as a Linear)."""
        return m @ self.dec_w.T + (0 if self.bug == "no-output-bias" else self.dec_b)

    def gelu(self, x):
        if self.bug == "gelu-tanh":
            return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
        return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))

    def probs(self, ids):
        """Softmax over the vocabulary at every [MASK] of ids: [n_masks, V]."""
        n, H, A = len(ids), self.H, self.A
        d = H // A
        t = torch.tensor(ids, dtype=torch.long)
        h = self.word[t] + self.pos[:n] + self.typ[1 if self.bug == "token-type-1" else 0]
        if self.bug == "pos-off-by-one":             # (the last position wraps)
            h = h - self.pos[:n] + self.pos[torch.arange(1, n + 1) % self.P]
        h = self.layernorm(h, self.emb_ln)
        for ly in self.layers:
            q = self.linear(h, ly["q"]).view(n, A, d).transpose(0, 1)   # [A, n, d]
            k = self.linear(h, ly["k"]).view(n, A, d).transpose(0, 1)
            v = self.linear(h, ly["v"]).view(n, A, d).transpose(0, 1)
            s = q @ k.transpose(1, 2) / math.sqrt(H if self.bug == "scale-sqrt-H" else d)  # [A, n, n]
            if self.bug == "causal":
                s = s + torch.triu(torch.full((n, n), -1e30, dtype=s.dtype), 1)
            s = torch.exp(s - s.max(-1, keepdim=True).values)
            a = (s / s.sum(-1, keepdim=True)) @ v                        # [A, n, d]
            a = a.transpose(0, 1).reshape(n, H)
            if self.bug == "heads-transposed":
                a = a.reshape(n, d, A).transpose(1, 2).reshape(n, H)
            h = self.layernorm(h + self.linear(a, ly["ao"]), ly["aln"])
            f = self.linear(self.gelu(self.linear(h, ly["i"])), ly["o"])
            h = self.layernorm(h + f, ly["oln"])
        pos = [i for i, x in enumerate(ids) if x == self.mask_id]
        if not pos:
            return pos, torch.zeros((0, self.V), dtype=self.dt)
        m = self.layernorm(self.gelu(self.linear(h[pos], self.head)), self.head_ln)
        logits = self.decoder(m)
        logits = logits - logits.max(-1, keepdim=True).values
        e = torch.exp(logits)
        return pos, e / e.sum(-1, keepdim=True)


# How far the C engine's int8 probabilities may be from Int8Bert's: a float32
# rounding that moves one activation across a code boundary changes a
# probability by ~1e-4 (see --int8 above); 2e-3 leaves room, and is still 20x
# below the int8-vs-fp32 differences the test models show (0.04-0.06).
INT8_TOL = 2e-3


class Int8Bert(Bert):
    """Bert with every Linear in the int8 scheme (see --int8 above)."""

    def __init__(self, d, dtype=torch.float64):
        super().__init__(d, dtype)
        self._q = {}

    def _quant_weight(self, w):
        key = id(w)
        if key not in self._q:
            w32 = w.to(torch.float32)
            amax = w32.abs().max(1).values
            inv = torch.where(amax > 0, torch.tensor(127.0, dtype=torch.float32) / amax,
                              torch.zeros_like(amax))
            q = torch.clamp(torch.round(w32 * inv[:, None]), -127, 127).to(torch.int64)
            self._q[key] = (q, amax / torch.tensor(127.0, dtype=torch.float32), w)
        return self._q[key][0], self._q[key][1]

    def linear(self, x, p):   # (an instance method here: it needs the weight cache)
        q, ws = self._quant_weight(p[0])
        x32 = x.to(torch.float32)
        lo = torch.clamp(x32.min(-1).values, max=0.0)
        hi = torch.clamp(x32.max(-1).values, min=0.0)
        rng = hi - lo
        t = rng / torch.tensor(255.0, dtype=torch.float32)
        inv = torch.where(rng > 0, torch.tensor(255.0, dtype=torch.float32) / rng,
                          torch.zeros_like(rng))
        z = torch.clamp(torch.round(-lo * inv), 0, 255)
        u = torch.clamp(torch.round(x32 * inv[:, None]) + z[:, None], 0, 255).to(torch.int64)
        acc = (u - z[:, None].to(torch.int64)) @ q.T                   # exact integers
        y = acc.to(torch.float32) * (t[:, None] * ws[None, :])
        return y.to(self.dt) + p[1]

    def decoder(self, m):   # the decoder is a Linear too: in int8
        return self.linear(m, (self.dec_w, self.dec_b))


def int8_goldens(models_dir, golden_dir, names):
    """tests/golden/int8_NAME.json: the goldens' format, from Int8Bert, plus
    the agreement of int8 with the float64 reference on the same masks."""
    for name in names or ["tiny"]:
        d = os.path.join(models_dir, name)
        m8, m64 = Int8Bert(d), Bert(d, torch.float64)
        seqs, ids = make_sequences(m64, name)
        out, agree, total, dmax = [], 0, 0, 0.0
        for s in seqs:
            pos, p = m8.probs(s)
            _, p64 = m64.probs(s)
            masks, tops = mask_entries(pos, p)
            for r, (v, ix) in enumerate(tops):
                agree += int(ix[0] == int(torch.argmax(p64[r])))
                total += 1
                dmax = max(dmax, abs(v[0] - float(p64[r][ix[0]])))
            out.append({"ids": s, "masks": masks})
        doc = {
            "model": name,
            "safetensors_sha256": file_sha256(os.path.join(d, "model.safetensors")),
            "generator": "model/make_test_models.py (model/gen_random_model.py)",
            "reference": "model/reference.py --int8: the int8 scheme of qgemm.h on the stored weights",
            "precision": "int8",
            "tolerance": INT8_TOL,
            "top1_agreement_with_fp64": [agree, total],
            **model_fields(d, m64),
            "ids": ids,
            "k": K,
            "sequences": out,
        }
        path = os.path.join(golden_dir, "int8_%s.json" % name)
        with open(path, "w") as f:
            f.write(dump(doc))
        print("%s: int8 top-1 agrees with float64 on %d of %d masks; max |dp| of the top-1 %.4f -> %s"
              % (name, agree, total, dmax, path))


# ---------------------------------------------------------------- inputs
def make_sequences(m, name):
    """A fixed, varied set of [CLS] ... [SEP] id sequences for model m."""
    rng = random.Random(zlib.crc32(name.encode()))
    special = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}
    ids = {t: m.vocab.index(t) for t in special}
    content = [i for i, t in enumerate(m.vocab) if t not in special and not t.startswith("[unused")]
    P = m.P
    lengths = [3, 3, 4, 5, 5, 6, 8, 9, 12, 16, 17, 23, 31, 32, 33, 47, P // 2, P - 1, P, P, P]
    lengths = [n for n in lengths if n <= P]
    seqs = []
    for j, n in enumerate(lengths):
        body = [rng.choice(content) if rng.random() > 0.03 else ids["[UNK]"] for _ in range(n - 2)]
        if j == 0:
            nm, where = 1, [0]                       # [CLS] [MASK] [SEP]
        elif j == 1:
            nm, where = 0, []                        # no mask at all
        elif j == 4:
            nm, where = 3, [0, 1, 2]                 # every content token masked
        elif j == len(lengths) - 1:
            nm, where = 0, []                        # longest, no mask
        else:
            nm = min(n - 2, [1, 2, 3, 1, 2, 0][j % 6])
            where = sorted(rng.sample(range(n - 2), nm))
            if j % 5 == 2 and nm:                    # masks at the very ends
                where[0] = 0
                where[-1] = n - 3
                where = sorted(set(where))
        for w in where:
            body[w] = ids["[MASK]"]
        seqs.append([ids["[CLS]"]] + body + [ids["[SEP]"]])
    return seqs, ids


def mask_entries(pos, p):
    """The golden entries of the masks at positions pos with distributions p
    (top K and the probability of the next), and each mask's (v, ix): its
    K + 1 largest probabilities and their ids."""
    entries, tops = [], []
    for r, at in enumerate(pos):
        v, ix = torch.topk(p[r], K + 1)
        v, ix = v.tolist(), ix.tolist()
        tops.append((v, ix))
        entries.append({"pos": at, "top": [[i, round(x, 10)] for i, x in zip(ix[:K], v[:K])],
                        "next_prob": round(v[K], 10)})
    return entries, tops


def model_fields(model_dir, m64):
    """What a golden says of its model: dtype, config, tied decoder."""
    return {
        "dtype": next(iter({t["dtype"] for t in _header(model_dir).values()} - {"I64"})),
        "config": {k: m64.cfg[k] for k in ("vocab_size", "hidden_size", "num_hidden_layers",
                                            "num_attention_heads", "intermediate_size",
                                            "max_position_embeddings", "type_vocab_size",
                                            "layer_norm_eps")},
        "tied": m64.tied,
    }


def golden_for(model_dir, name):
    m64 = Bert(model_dir, torch.float64)
    m32 = Bert(model_dir, torch.float32)
    seqs, ids = make_sequences(m64, name)
    out_seqs, stats = [], {"fp32_vs_fp64": 0.0, "margins": [], "top1": set()}
    for s in seqs:
        pos, p = m64.probs(s)
        pos32, p32 = m32.probs(s)
        masks, tops = mask_entries(pos, p)
        for r, (v, ix) in enumerate(tops):
            d32 = float((p32[r].double() - p[r]).abs().max())
            stats["fp32_vs_fp64"] = max(stats["fp32_vs_fp64"], d32)
            stats["margins"].append(v[0] - v[1])
            stats["top1"].add(ix[0])
        out_seqs.append({"ids": s, "masks": masks})
    doc = {
        "model": name,
        "safetensors_sha256": file_sha256(os.path.join(model_dir, "model.safetensors")),
        "generator": "model/make_test_models.py (model/gen_random_model.py)",
        "reference": "model/reference.py: float64 forward pass on the stored weights",
        **model_fields(model_dir, m64),
        "ids": ids,
        "k": K,
        "sequences": out_seqs,
    }
    return doc, stats


def _header(model_dir):
    with open(os.path.join(model_dir, "model.safetensors"), "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        h = json.loads(f.read(n))
    h.pop("__metadata__", None)
    return h


def dump(doc):
    """JSON with one sequence per line."""
    seqs = doc["sequences"]
    head = json.dumps({k: v for k, v in doc.items() if k != "sequences"}, indent=1, ensure_ascii=False)
    lines = [json.dumps(s, separators=(",", ":")) for s in seqs]
    return head[:-2] + ',\n "sequences": [\n  ' + ",\n  ".join(lines) + "\n ]\n}\n"


# ---------------------------------------------------------------- joint decoding
def probs_at(m, ids, at):
    """The distribution at the [MASK] at position at of ids (float64 numpy, [V]).
    (A fill may be the [MASK] token itself: that position then stays a mask.)"""
    pos, p = m.probs(ids)
    return p[pos.index(at)].numpy()


def fill(ids, mask_at, tokens):
    """ids with its first len(tokens) masks (positions mask_at) replaced."""
    out = list(ids)
    for at, t in zip(mask_at, tokens):
        out[at] = t
    return out


def chain_score(m, ids, answer):
    """P(answer) by the chain rule: (P, [p_1..p_n])."""
    mask_at = [i for i, x in enumerate(ids) if x == m.mask_id]
    assert len(answer) == len(mask_at) > 0
    ps = []
    for i in range(len(answer)):
        ps.append(float(probs_at(m, fill(ids, mask_at, answer[:i]), mask_at[i])[answer[i]]))
    return math.prod(ps), ps


def top_ids(p, k):
    """The k most probable token ids of p, ties to the lower id."""
    order = np.lexsort((np.arange(len(p)), -p))      # by -p, then by id
    return [int(i) for i in order[:k]]


def beam_search(m, ids, k):
    """The k best whole fills of ids: ([(tokens, [p_i], P)], margin)."""
    mask_at = [i for i, x in enumerate(ids) if x == m.mask_id]
    k = min(k, m.V)
    beam = [((), (), 0.0)]                            # tokens, probabilities, log P
    margin = float("inf")
    for i in range(len(mask_at)):
        ext, every = [], []
        for toks, ps, lp in beam:
            p = probs_at(m, fill(ids, mask_at, toks), mask_at[i])
            every.append(math.exp(lp) * p)              # P of every extension
            for t in top_ids(p, k):
                ext.append((lp + math.log(p[t]), toks + (t,), ps + (float(p[t]),)))
        ext.sort(key=lambda e: (-e[0], e[1]))
        beam = [(t, ps, lp) for lp, t, ps in ext[:k]]
        allp = np.sort(np.concatenate(every))[::-1]
        if len(allp) > k:
            margin = min(margin, float(allp[k - 1] - allp[k]))
    return [(list(t), list(ps), math.prod(ps)) for t, ps, _ in beam], margin


# Texts of the joint goldens: [MASK] and characters of the test vocabularies.
JOINT_FILLS = [  # (text, k)
    ("我们今天去山[MASK][MASK]看花", 5),             # two masks, adjacent
    ("[MASK]天我们去山里看[MASK]", 5),               # two masks apart, at the ends
    ("他[MASK]说[MASK]话[MASK]", 3),                 # three masks apart
    ("[MASK][MASK]天气[MASK]好[MASK]", 5),           # four masks
    ("你[MASK][MASK]什么", 1),                       # k = 1: greedy
    ("今天天气真[MASK]", 5),                         # one mask: fill_candidates' rows
    ("小猫[MASK][MASK]鱼", 10),                      # a wider beam
    ("[MASK][MASK][MASK]", 4),                       # nothing but masks
]
JOINT_SCORES = [  # (text, answer as given, the answer's tokens)
    ("我们今天去山[MASK][MASK]看花", "里面", ["里", "面"]),
    ("[MASK]天我们去山里看[MASK]", '["今","花"]', ["今", "花"]),
    ("他[MASK]说[MASK]话[MASK]", "也不好", ["也", "不", "好"]),
    ("今天天气真[MASK]", "好", ["好"]),
    ("小猫[MASK][MASK]鱼", "吃龙", ["吃", "龙"]),
]
JOINT_WORDPIECE = [  # needs ## entries (small's vocabulary): a word-piece answer
    ("他说[MASK][MASK]好", "goods", ["good", "##s"]),
    ("[MASK]你[MASK]", "wording", ["word", "##ing"]),
]


def text_ids(m, text):
    """[CLS] + one id per character or [MASK] + [SEP] (the texts above only)."""
    ids, rest = [m.vocab.index("[CLS]")], text
    while rest:
        if rest.startswith("[MASK]"):
            ids.append(m.mask_id)
            rest = rest[6:]
        else:
            ids.append(m.vocab.index(rest[0]))
            rest = rest[1:]
    return ids + [m.vocab.index("[SEP]")]


def sig(x):
    """x to 12 significant digits (probabilities can be far below 1e-12)."""
    return float("%.12g" % x)


def joint_golden_for(model_dir, name):
    m = Bert(model_dir, torch.float64)
    fills, scores = [], []
    for text, k in JOINT_FILLS:
        ids = text_ids(m, text)
        rows, margin = beam_search(m, ids, k)
        fills.append({"text": text, "ids": ids, "k": k, "margin": margin,
                      "rows": [{"tokens": [m.vocab[t] for t in toks], "ids": toks,
                                "p": [sig(x) for x in ps], "P": sig(P)}
                               for toks, ps, P in rows]})
    cases = JOINT_SCORES + (JOINT_WORDPIECE if "##s" in m.vocab else [])
    for text, answer, toks in cases:
        ids = text_ids(m, text)
        aids = [m.vocab.index(t) for t in toks]
        P, ps = chain_score(m, ids, aids)
        scores.append({"text": text, "ids": ids, "answer": answer, "tokens": toks,
                       "answer_ids": aids, "p": [sig(x) for x in ps], "P": sig(P)})
    return {
        "model": name,
        "safetensors_sha256": file_sha256(os.path.join(model_dir, "model.safetensors")),
        "reference": "model/reference.py --joint: chain rule and beam search on the float64 "
                     "forward pass",
        "fills": fills,
        "scores": scores,
    }


def joint_goldens(models_dir, golden_dir, names):
    torch.set_num_threads(1)
    for name in names or ["tiny"]:
        doc = joint_golden_for(os.path.join(models_dir, name), name)
        path = os.path.join(golden_dir, "joint_%s.json" % name)
        with open(path, "w") as f:
            f.write(json.dumps(doc, ensure_ascii=False, indent=1) + "\n")
        margins = sorted(f["margin"] for f in doc["fills"] if f["margin"] != float("inf"))
        print("%s: %d fills (smallest margins %s), %d scores -> %s"
              % (name, len(doc["fills"]), ", ".join("%.1e" % x for x in margins[:3]),
                 len(doc["scores"]), path))


MUTATIONS = ["gelu-tanh", "eps-1e-12", "no-ln-bias", "token-type-1", "pos-off-by-one",
             "scale-sqrt-H", "causal", "heads-transposed", "no-output-bias"]


def mutations(models_dir, names):
    """How far each deliberate mistake moves the top-5 probabilities (the C
    test tolerates 1e-4): shows that the goldens can catch it."""
    for name in names:
        m = Bert(os.path.join(models_dir, name))
        seqs, _ = make_sequences(m, name)
        base = [m.probs(s)[1] for s in seqs]
        row = []
        for bug in MUTATIONS:
            m.bug = bug
            worst = 0.0
            for s, b in zip(seqs, base):
                p = m.probs(s)[1]
                if len(p):
                    top = torch.topk(b, K, dim=-1).indices
                    worst = max(worst, float((p.gather(1, top) - b.gather(1, top)).abs().max()))
            m.bug = None
            row.append("%s %.1e" % (bug, worst))
        print("%s: %s" % (name, ", ".join(row)))


def shipped_golden(model_dir, path, texts):
    """tests/golden/shipped.json: top-K of every [MASK] of each text (see --shipped)."""
    torch.set_num_threads(1)
    m = Bert(model_dir, torch.float64)
    out = []
    for text in texts:
        ids = text_ids(m, text)
        pos, p = m.probs(ids)
        out.append({"text": text, "ids": ids,
                    "masks": [[[m.vocab[i], sig(x)] for x, i in zip(*(t.tolist() for t in torch.topk(p[r], K)))]
                              for r in range(len(pos))]})
    doc = {"model": os.path.basename(os.path.normpath(model_dir)),
           "safetensors_sha256": file_sha256(os.path.join(model_dir, "model.safetensors")),
           "reference": "model/reference.py --shipped: float64 forward pass on the stored weights",
           "k": K, "sequences": out}
    with open(path, "w", encoding="utf-8") as f:
        f.write(dump(doc))
    for s_ in out:
        print("%s  %s" % (s_["text"], " | ".join(" ".join("%s:%.4f" % (t, x) for t, x in mk) for mk in s_["masks"])))
    print("-> %s" % path)


SPELL_TOP = 20


def spelling_golden(model_dir, path, texts):
    """tests/golden/spelling.json: each character of each text masked in turn (see --spelling)."""
    torch.set_num_threads(1)
    m = Bert(model_dir, torch.float64)
    out = []
    for text in texts:
        ids = text_ids(m, text)
        chars = []
        for i in range(1, len(ids) - 1):
            masked = list(ids)
            masked[i] = m.mask_id
            _, p = m.probs(masked)
            p = p[0]
            top = torch.topk(p, SPELL_TOP)
            chars.append({"written": m.vocab[ids[i]], "p_written": sig(float(p[ids[i]])),
                          "top": [[m.vocab[j], sig(x)] for x, j in zip(top.values.tolist(), top.indices.tolist())]})
        out.append({"text": text, "chars": chars})
    doc = {"model": os.path.basename(os.path.normpath(model_dir)),
           "safetensors_sha256": file_sha256(os.path.join(model_dir, "model.safetensors")),
           "reference": "model/reference.py --spelling: float64 forward pass on the stored weights, "
                        "each character masked in turn",
           "top": SPELL_TOP, "sequences": out}
    with open(path, "w", encoding="utf-8") as f:
        f.write(dump(doc))
    print("%d texts, %d characters -> %s" % (len(out), sum(len(s_["chars"]) for s_ in out), path))


def main():
    if len(sys.argv) > 3 and sys.argv[1] == "--spelling":
        spelling_golden(sys.argv[2], sys.argv[3], sys.argv[4:])
        return
    if len(sys.argv) > 3 and sys.argv[1] == "--shipped":
        shipped_golden(sys.argv[2], sys.argv[3], sys.argv[4:])
        return
    if len(sys.argv) > 3 and sys.argv[1] == "--int8":
        torch.set_num_threads(1)
        int8_goldens(sys.argv[2], sys.argv[3], sys.argv[4:])
        return
    if len(sys.argv) > 3 and sys.argv[1] == "--joint":
        joint_goldens(sys.argv[2], sys.argv[3], sys.argv[4:])
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--mutations":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import make_test_models
        mutations(sys.argv[2], sys.argv[3:] or list(make_test_models.MODELS))
        return
    if len(sys.argv) < 3:
        sys.exit("usage: reference.py MODELS_DIR GOLDEN_DIR [NAME ...]")
    models_dir, golden_dir = sys.argv[1], sys.argv[2]
    names = sys.argv[3:]
    if not names:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import make_test_models
        names = list(make_test_models.MODELS)
    torch.set_num_threads(1)
    os.makedirs(golden_dir, exist_ok=True)
    for name in names:
        doc, st = golden_for(os.path.join(models_dir, name), name)
        nm = sum(len(s["masks"]) for s in doc["sequences"])
        mg = sorted(st["margins"])
        path = os.path.join(golden_dir, "forward_%s.json" % name)
        with open(path, "w") as f:
            f.write(dump(doc))
        print("%s: %d sequences, %d masks, %d distinct top-1 ids; top1-top2 margin min %.4f "
              "median %.4f; max |fp32 - fp64| prob %.2e -> %s"
              % (name, len(doc["sequences"]), nm, len(st["top1"]), mg[0], mg[len(mg) // 2],
                 st["fp32_vs_fp64"], path))


if __name__ == "__main__":
    main()
