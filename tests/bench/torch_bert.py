"""torch_bert.py — the PyTorch side of `make bench`: BertForMaskedLM as a service runs it.

Used by tests/bench/bench_torch.py (the PyTorch peer) and tests/bench/export_onnx.py
(the ONNX export for the ONNX Runtime peer).  model/reference.py is the project's
reference forward pass, but it takes one sequence at a time in float64; a Python
service runs padded batches with an attention mask in float32 through nn.Linear /
nn.LayerNorm / GELU(erf) exactly as Hugging Face's BertForMaskedLM does, so that is
what this module does.  export_onnx.py checks it against model/reference.py before
exporting.

Weights are read from model.safetensors with numpy (one copy into float32 tensors,
as transformers does when it loads a checkpoint); F16/BF16 are widened to float32.
"""
import json
import math
import os
import struct

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def read_safetensors_f32(path):
    """name -> float32 torch tensor for every floating tensor of the file."""
    with open(path, "rb") as f:
        (hlen,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(hlen).decode("utf-8"))
    mm = np.memmap(path, dtype=np.uint8, mode="r")
    base = 8 + hlen
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        lo, hi = t["data_offsets"]
        raw = mm[base + lo:base + hi]
        dt = t["dtype"]
        if dt == "F32":
            a = np.array(raw.view("<f4"))     # copy out of the map
        elif dt == "F16":
            a = raw.view("<f2").astype(np.float32)
        elif dt == "BF16":
            a = (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            continue
        out[name] = torch.from_numpy(a.reshape(t["shape"]))
    del mm
    return out


class Layer(nn.Module):
    def __init__(self, H, A, I, eps):
        super().__init__()
        self.A, self.d = A, H // A
        self.query, self.key, self.value = nn.Linear(H, H), nn.Linear(H, H), nn.Linear(H, H)
        self.attn_out, self.attn_ln = nn.Linear(H, H), nn.LayerNorm(H, eps=eps)
        self.inter, self.out, self.out_ln = nn.Linear(H, I), nn.Linear(I, H), nn.LayerNorm(H, eps=eps)

    def forward(self, h, ext_mask):
        B, S, H = h.shape

        def heads(x):
            return x.view(B, S, self.A, self.d).permute(0, 2, 1, 3)   # [B, A, S, d]
        q, k, v = heads(self.query(h)), heads(self.key(h)), heads(self.value(h))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.d) + ext_mask
        ctx = torch.matmul(torch.softmax(scores, dim=-1), v)
        ctx = ctx.permute(0, 2, 1, 3).reshape(B, S, H)
        h = self.attn_ln(h + self.attn_out(ctx))
        return self.out_ln(h + self.out(F.gelu(self.inter(h))))


class BertMLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        V, H, P = cfg["vocab_size"], cfg["hidden_size"], cfg["max_position_embeddings"]
        T, eps = cfg.get("type_vocab_size", 2), cfg.get("layer_norm_eps", 1e-12)
        self.word, self.pos, self.typ = nn.Embedding(V, H), nn.Embedding(P, H), nn.Embedding(T, H)
        self.emb_ln = nn.LayerNorm(H, eps=eps)
        self.layers = nn.ModuleList(Layer(H, cfg["num_attention_heads"], cfg["intermediate_size"], eps)
                                    for _ in range(cfg["num_hidden_layers"]))
        self.head_dense, self.head_ln = nn.Linear(H, H), nn.LayerNorm(H, eps=eps)
        self.decoder = nn.Linear(H, V)

    def encode(self, input_ids, attention_mask, token_type_ids):
        S = input_ids.shape[1]
        positions = torch.arange(S, dtype=torch.long, device=input_ids.device).unsqueeze(0)
        h = self.emb_ln(self.word(input_ids) + self.pos(positions) + self.typ(token_type_ids))
        ext = (1.0 - attention_mask[:, None, None, :].to(h.dtype)) * torch.finfo(h.dtype).min
        for layer in self.layers:
            h = layer(h, ext)
        return h

    def head(self, h):
        return self.decoder(self.head_ln(F.gelu(self.head_dense(h))))

    def forward(self, input_ids, attention_mask, token_type_ids):
        """Logits at every position, [B, S, V] (what an exported model gives)."""
        return self.head(self.encode(input_ids, attention_mask, token_type_ids))


def load(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    t = read_safetensors_f32(os.path.join(model_dir, "model.safetensors"))

    def get(name, *alts):
        for n in (name,) + alts:
            for cand in (n, n[5:] if n.startswith("bert.") else None):
                if cand and cand in t:
                    return t.pop(cand)
        raise KeyError(f"{model_dir}/model.safetensors: no tensor {name}")

    def lin(mod, base):
        mod.weight.data, mod.bias.data = get(base + ".weight"), get(base + ".bias")

    def ln(mod, base):
        mod.weight.data = get(base + ".weight", base + ".gamma")
        mod.bias.data = get(base + ".bias", base + ".beta")

    m = BertMLM(cfg)
    e = "bert.embeddings."
    m.word.weight.data = get(e + "word_embeddings.weight")
    m.pos.weight.data = get(e + "position_embeddings.weight")
    m.typ.weight.data = get(e + "token_type_embeddings.weight")
    ln(m.emb_ln, e + "LayerNorm")
    for i, ly in enumerate(m.layers):
        p = f"bert.encoder.layer.{i}."
        lin(ly.query, p + "attention.self.query")
        lin(ly.key, p + "attention.self.key")
        lin(ly.value, p + "attention.self.value")
        lin(ly.attn_out, p + "attention.output.dense")
        ln(ly.attn_ln, p + "attention.output.LayerNorm")
        lin(ly.inter, p + "intermediate.dense")
        lin(ly.out, p + "output.dense")
        ln(ly.out_ln, p + "output.LayerNorm")
    lin(m.head_dense, "cls.predictions.transform.dense")
    ln(m.head_ln, "cls.predictions.transform.LayerNorm")
    if "cls.predictions.decoder.weight" in t:
        m.decoder.weight.data = get("cls.predictions.decoder.weight")
    else:
        m.decoder.weight = m.word.weight                       # tied, as in bert-base-chinese
    m.decoder.bias.data = get("cls.predictions.bias", "cls.predictions.decoder.bias")
    m.eval()
    return m, cfg
