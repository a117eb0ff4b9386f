#!/usr/bin/python3
"""The PyTorch peer of `make bench` (see tests/bench/run.sh).

    /usr/bin/python3 tests/bench/bench_torch.py MODEL_DIR SENTENCES.tsv OUT.json
        [--reps N] [--warmup N] [--rounds N] [--big-rounds N] [--batch N] [--limit N] [--threads N]
        [--sets single,demo,batch-256,batch-2000] [--precision fp32|int8]

Debian's python3-torch, the way a Python service runs a masked LM: torch.no_grad(),
torch.set_num_threads(N), padded batches with an attention mask, the MLM head only
at the [MASK] positions.  The BLAS core is whatever OPENBLAS_CORETYPE in the
environment makes it (run.sh runs this with SkylakeX and as installed).

Debian's torch runs its own ops on OpenMP threads and its matrix products on
OpenBLAS's pthreads; with the default OpenMP wait policy the idle OpenMP
threads spin while OpenBLAS works, and on 2 cores a single sentence gets 3-4x
slower.  run.sh therefore sets OMP_WAIT_POLICY=PASSIVE for the main PyTorch
column (the fast configuration, as a careful service would run it) and also
measures the default (spinning) one.

--precision int8: PyTorch's dynamic quantization,
torch.ao.quantization.quantize_dynamic on every nn.Linear (the encoder's six
matrices per layer, the MLM head's dense layer and decoder) with
per_channel_dynamic_qconfig: int8 weights, symmetric, one scale per output
channel (the scheme of bertfill's int8 mode and of the ONNX Runtime peer);
activations quantized to uint8 per tensor at run time.  The quantized engine is
the first of x86, fbgemm, onednn, qnnpack that this torch supports (Debian's:
onednn).  When none is, OUT.json gets {"missing": "<why>"} and run.sh reports it.

Writes its numbers and the top 5 ids and probabilities at every sentence's
[MASK] as JSON.
"""
import argparse
import json
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_bert  # noqa: E402


def read_sentences(path):
    sets = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line:
                name, text, ids, mpos = line.split("\t")
                sets.setdefault(name, []).append(([int(x) for x in ids.split()], int(mpos)))
    return sets


QENGINES = ("x86", "fbgemm", "onednn", "qnnpack")   # in order of preference


def quantize_int8(m):
    """(the model with dynamically quantized nn.Linear layers, the engine), or (None, why)."""
    engines = torch.backends.quantized.supported_engines
    engine = next((e for e in QENGINES if e in engines), None)
    if engine is None:
        return None, (f"PyTorch {torch.__version__} has no quantized engine for int8 Linear "
                      f"(torch.backends.quantized.supported_engines: {', '.join(engines)})")
    torch.backends.quantized.engine = engine
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic
    q = quantize_dynamic(m, {nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8)
    n = sum(1 for x in q.modules() if type(x).__name__ == "Linear" and "quantized" in type(x).__module__)
    return (q, n), engine


def run_batch(m, sents):
    """Padded batch in, (top-5 ids, top-5 probabilities) at each sentence's mask out."""
    B, S = len(sents), max(len(ids) for ids, _ in sents)
    ids = torch.zeros(B, S, dtype=torch.long)
    att = torch.zeros(B, S, dtype=torch.long)
    for b, (s, _) in enumerate(sents):
        ids[b, :len(s)] = torch.tensor(s)
        att[b, :len(s)] = 1
    h = m.encode(ids, att, torch.zeros_like(ids))
    at = h[torch.arange(B), torch.tensor([p for _, p in sents])]     # [B, H]: the masks only
    p, i = torch.softmax(m.head(at), dim=-1).topk(5, dim=-1)
    return list(zip(i.tolist(), p.tolist()))


def peak_rss_mb():
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("sentences")
    ap.add_argument("out")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--big-rounds", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sets", default="single,demo,batch-256,batch-2000")
    ap.add_argument("--precision", choices=("fp32", "int8"), default="fp32")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    want = a.sets.split(",")
    sets = {k: v for k, v in read_sentences(a.sentences).items()
            if k in want or k.split("-")[0] in want}
    blas = [x.strip(" ,") for x in torch.__config__.show().replace(",", "\n").splitlines() if "BLAS_INFO" in x]
    res = {"engine": f"PyTorch {torch.__version__} {a.precision}", "precision": a.precision,
           "torch_version": torch.__version__,
           "threads": torch.get_num_threads(), "batch_size": a.batch,
           "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", ""),
           "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
           "blas": blas[0] if blas else "", "single": {}, "batch": {}, "top1": {}, "top5": {}}
    tag = f"torch {a.precision} ({res['openblas_coretype'] or 'as installed'})"

    with torch.no_grad():
        t0 = time.perf_counter()
        m, cfg = torch_bert.load(a.model_dir)
        if a.precision == "int8":
            q, engine = quantize_int8(m)
            if q is None:
                print(f"bench_torch.py: MISSING: {engine}", file=sys.stderr)
                with open(a.out, "w") as f:
                    json.dump({"missing": engine}, f)
                return
            m, res["quantized_linear"] = q
            res["quantized_engine"] = engine
            res["quantization"] = ("torch.ao.quantization.quantize_dynamic(nn.Linear, per_channel_dynamic_qconfig, "
                                   f"qint8), engine {engine}")
        res["load_ms"] = (time.perf_counter() - t0) * 1e3
        first = sets.get("single-8") or next(iter(sets.values()))
        t0 = time.perf_counter()
        run_batch(m, first[:1])
        res["first_run_ms"] = (time.perf_counter() - t0) * 1e3

        for key in [k for k in sets if k.startswith(("single-", "demo-"))]:
            s = sets[key]
            for _ in range(a.warmup):
                run_batch(m, s)
            times = []
            for _ in range(a.reps):
                t0 = time.perf_counter()
                top = run_batch(m, s)
                times.append((time.perf_counter() - t0) * 1e3)
            n = key[7:] if key.startswith("single-") else key
            res["single"][n] = {"median_ms": statistics.median(times), "min_ms": min(times), "runs": len(times)}
            res["top1"][key] = [t[0][0] for t in top]
            res["top5"][key] = top
            print(f"{tag}: single {n} ({len(s[0][0])} tokens): {statistics.median(times):.1f} ms", file=sys.stderr)

        for key in [k for k in sets if k.startswith("batch-")]:
            s = sets[key][:a.limit] if a.limit > 0 else sets[key]
            rounds = a.rounds if key == "batch-256" else a.big_rounds
            secs = []
            for _ in range(rounds):
                top = []
                t0 = time.perf_counter()
                for i in range(0, len(s), a.batch):
                    top += run_batch(m, s[i:i + a.batch])
                secs.append(time.perf_counter() - t0)
            med = statistics.median(secs)
            res["batch"][key[6:]] = {"sentences": len(s), "seconds": secs, "sent_per_s": len(s) / med}
            res["top1"][key] = [t[0][0] for t in top]
            res["top5"][key] = top
            print(f"{tag}: {key} ({len(s)}): {len(s) / med:.1f} sentences/s", file=sys.stderr)

    res["peak_rss_mb"] = peak_rss_mb()
    ru = resource.getrusage(resource.RUSAGE_SELF)
    res["cpu_s"] = ru.ru_utime + ru.ru_stime
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
