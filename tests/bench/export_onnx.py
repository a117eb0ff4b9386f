#!/usr/bin/python3
"""Export a Hugging Face-layout BERT masked LM to ONNX for the ONNX Runtime peer of `make bench`.

    /usr/bin/python3 tests/bench/export_onnx.py MODEL_DIR OUT.onnx

The same weights as MODEL_DIR/model.safetensors, through tests/bench/torch_bert.py,
exported with Debian's python3-torch (torch.onnx.export, opset 14) the way models are
usually exported for ONNX Runtime: inputs input_ids, attention_mask, token_type_ids
(int64, [batch, sequence], both axes dynamic), output logits [batch, sequence, vocab].

Before exporting, the module is checked against the project's reference forward pass
(model/reference.py) on a padded batch of two sentences: probabilities at the masks
must agree within 1e-4, or nothing is written.
"""
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "model"))
import torch_bert  # noqa: E402
import reference   # noqa: E402


def check_against_reference(model_dir, m):
    ref = reference.Bert(model_dir, torch.float32)
    cls, sep, mask = (ref.vocab.index(t) for t in ("[CLS]", "[SEP]", "[MASK]"))
    g = torch.Generator().manual_seed(1)
    seqs = []
    for n, where in ((9, [3]), (20, [1, 14])):
        body = torch.randint(1000, ref.V - 1, (n - 2,), generator=g).tolist()
        for w in where:
            body[w] = mask
        seqs.append([cls] + body + [sep])
    S = max(len(s) for s in seqs)
    ids = torch.zeros(len(seqs), S, dtype=torch.long)
    att = torch.zeros(len(seqs), S, dtype=torch.long)
    for b, s in enumerate(seqs):
        ids[b, :len(s)] = torch.tensor(s)
        att[b, :len(s)] = 1
    with torch.no_grad():
        probs = torch.softmax(m(ids, att, torch.zeros_like(ids)), dim=-1)
    worst = 0.0
    for b, s in enumerate(seqs):
        pos, p = ref.probs(s)
        worst = max(worst, float((probs[b, pos].double() - p.double()).abs().max()))
    del ref
    if worst > 1e-4:
        sys.exit(f"export_onnx.py: tests/bench/torch_bert.py disagrees with model/reference.py "
                 f"by {worst:.2e} (> 1e-4) on {model_dir}; not exporting")
    print(f"export_onnx.py: torch_bert matches model/reference.py (max |dp| {worst:.1e})", file=sys.stderr)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: export_onnx.py MODEL_DIR OUT.onnx")
    model_dir, out = sys.argv[1], sys.argv[2]
    torch.set_num_threads(2)
    m, cfg = torch_bert.load(model_dir)
    check_against_reference(model_dir, m)
    ids = torch.tensor([[101, 2769, 103, 102], [101, 103, 102, 0]], dtype=torch.long)
    att = (ids != 0).long()
    t0 = time.time()
    tmp = out + ".tmp"
    with torch.no_grad():
        torch.onnx.export(
            m, (ids, att, torch.zeros_like(ids)), tmp,
            input_names=["input_ids", "attention_mask", "token_type_ids"],
            output_names=["logits"],
            dynamic_axes={"input_ids": {0: "batch", 1: "sequence"},
                          "attention_mask": {0: "batch", 1: "sequence"},
                          "token_type_ids": {0: "batch", 1: "sequence"},
                          "logits": {0: "batch", 1: "sequence"}},
            opset_version=14, do_constant_folding=True)
    os.replace(tmp, out)
    print(f"export_onnx.py: wrote {out} ({os.path.getsize(out) / 1e6:.0f} MB, torch {torch.__version__}, "
          f"opset 14, {time.time() - t0:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
