#!/usr/bin/python3
"""The int8 graph of the ONNX Runtime peer of `make bench`, made with Debian's python3-onnx.

    /usr/bin/python3 tests/bench/quantize_onnx.py MODEL.onnx OUT.onnx
    /usr/bin/python3 tests/bench/quantize_onnx.py --ops GRAPH.onnx      (op types of a graph)

Dynamic quantization the way onnxruntime.quantization.quantize_dynamic does it
with per_channel=True and weight_type=QInt8 (that tool is Python onnxruntime's,
which Debian does not package, so the graph is built here by hand).  Every
MatMul whose second input is a constant 2-D weight W [K, N] (in the export of
tests/bench/export_onnx.py: Q, K, V, attention output and both feed-forward
matrices of every layer, the MLM head's dense layer and its decoder, 74 in
bert-base) becomes

    x_q, x_scale, x_zp = DynamicQuantizeLinear(x)       uint8, one scale and zero
                                                        point per tensor, at run time
    y_i32 = MatMulInteger(x_q, W_q, x_zp, W_zp)          exact int32 sums
    y     = Cast(y_i32, float) * (x_scale * W_scale)     W_scale: one per column

with W_q = round(W / W_scale) in int8, symmetric (W_zp = 0, range -127..127),
W_scale[n] = max_k |W[k, n]| / 127: one scale per output channel.  x is
quantized once however many MatMuls read it (Q, K and V share one).  The bias
Add after each MatMul, the embeddings, LayerNorm, softmax, GELU and the
attention products (activation x activation) stay fp32, as in quantize_dynamic.
ONNX Runtime fuses each of these groups into its own kernel when it loads the
graph (graphOptimizationLevel 'all'); bench_ort.js --optimized saves what it
runs, and --ops here lists it.
"""
import collections
import os
import sys
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def quantize_weight(w):
    """float [K, N] -> (int8 [K, N], float32 scale [N]): symmetric, per column."""
    absmax = np.abs(w).max(axis=0).astype(np.float32)
    scale = np.where(absmax > 0, absmax / 127.0, 1.0).astype(np.float32)
    q = np.clip(np.round(w / scale), -127, 127).astype(np.int8)
    return q, scale


def quantize(model):
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    uses = collections.Counter(x for n in g.node for x in n.input)
    nodes, new_inits, dq = [], [], {}
    count = bytes_before = bytes_after = 0
    for n in g.node:
        w = inits.get(n.input[1]) if n.op_type == "MatMul" and len(n.input) == 2 else None
        if w is None or len(w.dims) != 2 or w.data_type != TensorProto.FLOAT:
            nodes.append(n)
            continue
        x, y, base = n.input[0], n.output[0], n.name or n.output[0]
        if x not in dq:   # one DynamicQuantizeLinear per activation tensor
            dq[x] = (f"{x}_quantized", f"{x}_scale", f"{x}_zero_point")
            nodes.append(helper.make_node("DynamicQuantizeLinear", [x], list(dq[x]), name=f"{x}_QuantizeLinear"))
        xq, xs, xzp = dq[x]
        wf = numpy_helper.to_array(w)
        wq, ws = quantize_weight(wf)
        wname = w.name
        new_inits += [numpy_helper.from_array(wq, f"{wname}_quantized"),
                      numpy_helper.from_array(ws, f"{wname}_scale"),
                      numpy_helper.from_array(np.zeros(ws.shape, np.int8), f"{wname}_zero_point")]
        nodes += [
            helper.make_node("MatMulInteger", [xq, f"{wname}_quantized", xzp, f"{wname}_zero_point"],
                             [f"{y}_int32"], name=f"{base}_MatMulInteger"),
            helper.make_node("Cast", [f"{y}_int32"], [f"{y}_float"], name=f"{base}_Cast", to=TensorProto.FLOAT),
            helper.make_node("Mul", [xs, f"{wname}_scale"], [f"{y}_scales"], name=f"{base}_scales_Mul"),
            helper.make_node("Mul", [f"{y}_float", f"{y}_scales"], [y], name=f"{base}_Mul"),
        ]
        uses[wname] -= 1
        count += 1
        bytes_before += wf.nbytes
        bytes_after += wq.nbytes + 2 * ws.nbytes + ws.size
    kept = [t for t in g.initializer if uses[t.name] > 0]
    del g.initializer[:]
    g.initializer.extend(kept + new_inits)
    del g.node[:]
    g.node.extend(nodes)
    return count, bytes_before, bytes_after


def op_counts(path):
    m = onnx.load(path, load_external_data=False)
    c = collections.Counter(f"{n.domain + '.' if n.domain else ''}{n.op_type}" for n in m.graph.node)
    return ", ".join(f"{k} {v}" for k, v in sorted(c.items(), key=lambda kv: (-kv[1], kv[0])))


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--ops":
        print(op_counts(sys.argv[2]))
        return
    if len(sys.argv) != 3:
        sys.exit("usage: quantize_onnx.py MODEL.onnx OUT.onnx  |  quantize_onnx.py --ops GRAPH.onnx")
    src, out = sys.argv[1], sys.argv[2]
    t0 = time.time()
    model = onnx.load(src)
    count, before, after = quantize(model)
    if count == 0:
        sys.exit(f"quantize_onnx.py: {src} has no MatMul with a constant float weight; nothing to quantize")
    onnx.checker.check_model(model)
    tmp = out + ".tmp"
    onnx.save(model, tmp)
    os.replace(tmp, out)
    print(f"quantize_onnx.py: wrote {out}: {count} weight MatMuls as DynamicQuantizeLinear + MatMulInteger "
          f"(int8 per-column weights, symmetric) + scale Mul; weights {before / 1e6:.0f} MB -> {after / 1e6:.0f} MB; "
          f"{os.path.getsize(out) / 1e6:.0f} MB in all, onnx {onnx.__version__}, {time.time() - t0:.0f} s",
          file=sys.stderr)


if __name__ == "__main__":
    main()
