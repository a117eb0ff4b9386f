#!/usr/bin/python3
"""t_convert_bin.py — model/convert_bin.py: a pytorch_model.bin to model.safetensors.

From test models of make_test_models.py (tiny: F32; tiny-bf16: BF16;
tiny-legacy: old names, an untied decoder, an int64 buffer), this suite writes
pytorch_model.bin files laid out as torch.save writes them, in both formats
(the zip of PyTorch 1.6 and later, and the legacy one before it), with what a
real masked-LM checkpoint holds that a plain copy would not:
  * tied weights: cls.predictions.decoder.weight in the storage of the word
    embeddings, cls.predictions.decoder.bias in that of cls.predictions.bias
    (safetensors' save_file refuses such tensors);
  * tensors at an offset into a storage they share (a layer's query, key
    and value weights in one storage), and a strided view (a weight stored
    transposed, read with strides (1, n)).
The writer here needs no torch: a pickle with torch's global names and
persistent ids, as torch.save makes it.  With torch installed (Debian:
python3-torch) the same state dict is also written by torch.save itself, in
both formats; without it those checks are skipped.

Checks, for each: the directory with only pytorch_model.bin fails to load with
the error that names model/convert_bin.py; the script converts it; every
tensor of the original model.safetensors is there with the same bytes, the
tied names too; the converted model loads and answers fill_candidates exactly
as the original does.  A pickle that names another global (os.system) is
refused and writes nothing; an existing model.safetensors is never written
over; a tensor reaching past its storage is refused.
"""
import collections
import io
import json
import os
import pickle
import shutil
import sqlite3
import struct
import subprocess
import sys
import tempfile
import types
import zipfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bftest import EXT, MODELS, check, exit_code, skip  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONVERT = os.path.join(ROOT, "model", "convert_bin.py")
NP = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "I64": np.int64}
STORAGE_OF = {"F32": "FloatStorage", "F16": "HalfStorage", "BF16": "BFloat16Storage", "I64": "LongStorage"}


def read_safetensors(path):
    """name -> (dtype, shape, bytes)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        out[name] = (t["dtype"], tuple(t["shape"]), data[8 + n + a:8 + n + b])
    return out


# ---- a pickle as torch.save writes it, without torch -----------------------

def fake_torch():
    """Modules named torch and torch._utils whose names the pickle refers to."""
    torch = types.ModuleType("torch")
    utils = types.ModuleType("torch._utils")
    for cls in STORAGE_OF.values():
        setattr(torch, cls, type(cls, (), {"__module__": "torch"}))

    def _rebuild_tensor_v2(*args):
        raise AssertionError("never called: the writer only pickles")
    _rebuild_tensor_v2.__module__ = "torch._utils"
    _rebuild_tensor_v2.__qualname__ = "_rebuild_tensor_v2"
    utils._rebuild_tensor_v2 = _rebuild_tensor_v2
    torch._utils = utils
    return torch, utils


class FakeStorage:
    def __init__(self, key, dtype, array):
        self.key, self.dtype, self.array = key, dtype, array


class FakeTensor:
    def __init__(self, storage, offset, size, stride):
        self.storage, self.offset, self.size, self.stride = storage, offset, size, stride

    def __reduce__(self):
        rebuild = sys.modules["torch._utils"]._rebuild_tensor_v2
        return (rebuild, (self.storage, self.offset, tuple(self.size), tuple(self.stride), False,
                          collections.OrderedDict()))


def contiguous_stride(shape):
    stride, acc = [], 1
    for n in reversed(shape):
        stride.insert(0, acc)
        acc *= n
    return stride


def state_dict_of(weights):
    """A state dict of FakeTensors for weights (name -> (dtype, shape, bytes)),
    with tied, offset and strided tensors as a real checkpoint has them."""
    sd = collections.OrderedDict()
    sd._metadata = collections.OrderedDict([("", {"version": 1})])  # as module.state_dict() has
    storages = []

    def new_storage(dtype, array):
        s = FakeStorage(str(len(storages)), dtype, np.ascontiguousarray(array))
        storages.append(s)
        return s

    arrays = {n: np.frombuffer(b, dtype=NP[d]).reshape(shape) for n, (d, shape, b) in weights.items()}
    done = set()
    # one storage for query, key and value of each layer, at offsets
    for name in weights:
        if name.endswith(".attention.self.query.weight"):
            base = name[:-len("query.weight")]
            parts = [base + p + ".weight" for p in ("query", "key", "value")]
            if all(p in arrays for p in parts):
                d = weights[name][0]
                s = new_storage(d, np.concatenate([arrays[p].ravel() for p in parts]))
                at = 0
                for p in parts:
                    shape = arrays[p].shape
                    sd[p] = FakeTensor(s, at, shape, contiguous_stride(shape))
                    at += arrays[p].size
                    done.add(p)
    # a strided view: the first intermediate weight stored transposed
    for name in weights:
        if name.endswith(".intermediate.dense.weight") and name not in done:
            d, shape, _ = weights[name]
            s = new_storage(d, arrays[name].T)
            sd[name] = FakeTensor(s, 0, shape, [1, shape[0]])
            done.add(name)
            break
    for name, (d, shape, _) in weights.items():
        if name not in done:
            sd[name] = FakeTensor(new_storage(d, arrays[name]), 0, shape, contiguous_stride(shape))
    # tied: the decoder in the word embeddings' storage, its bias in cls.predictions.bias's
    emb = [n for n in sd if n.endswith("embeddings.word_embeddings.weight")][0]
    dec = "cls.predictions.decoder.weight"
    if dec not in sd:
        sd[dec] = FakeTensor(sd[emb].storage, 0, sd[emb].size, sd[emb].stride)
    if "cls.predictions.bias" in sd and "cls.predictions.decoder.bias" not in sd:
        b = sd["cls.predictions.bias"]
        sd["cls.predictions.decoder.bias"] = FakeTensor(b.storage, 0, b.size, b.stride)
    return sd, storages


class TorchPickler(pickle.Pickler):
    def __init__(self, f, legacy):
        super().__init__(f, protocol=2)
        self.legacy = legacy

    def persistent_id(self, obj):
        if not isinstance(obj, FakeStorage):
            return None
        cls = getattr(sys.modules["torch"], STORAGE_OF[obj.dtype])
        pid = ("storage", cls, obj.key, "cpu", obj.array.size)
        return pid + (None,) if self.legacy else pid


def with_fake_torch(fn):
    saved = {k: sys.modules.get(k) for k in ("torch", "torch._utils")}
    torch, utils = fake_torch()
    sys.modules["torch"], sys.modules["torch._utils"] = torch, utils
    try:
        return fn()
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


def write_zip(path, sd, storages):
    def pickled():
        buf = io.BytesIO()
        TorchPickler(buf, legacy=False).dump(sd)
        return buf.getvalue()
    data = with_fake_torch(pickled)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", data)
        z.writestr("archive/byteorder", "little")
        for s in storages:
            z.writestr("archive/data/" + s.key, s.array.tobytes())
        z.writestr("archive/version", "3\n")


def write_legacy(path, sd, storages):
    def pickled():
        buf = io.BytesIO()
        for head in (0x1950A86A20F9469CFC6C, 1001,
                     {"protocol_version": 1001, "little_endian": True,
                      "type_sizes": {"short": 2, "int": 4, "long": 4}}):
            pickle.dump(head, buf, protocol=2)
        TorchPickler(buf, legacy=True).dump(sd)
        pickle.dump([s.key for s in storages], buf, protocol=2)
        for s in storages:
            buf.write(struct.pack("<q", s.array.size))
            buf.write(s.array.tobytes())
        return buf.getvalue()
    data = with_fake_torch(pickled)
    with open(path, "wb") as f:
        f.write(data)


def write_with_torch(path, weights, legacy):
    """torch.save of the same tensors, tied as above; False without torch."""
    try:
        import torch
    except ImportError:
        return False
    sd = collections.OrderedDict()
    for n, (d, shape, b) in weights.items():
        a = np.frombuffer(b, dtype=NP[d]).reshape(shape).copy()
        t = torch.from_numpy(a.view(np.int16)).view(torch.bfloat16) if d == "BF16" else torch.from_numpy(a)
        sd[n] = t
    emb = [n for n in sd if n.endswith("embeddings.word_embeddings.weight")][0]
    sd.setdefault("cls.predictions.decoder.weight", sd[emb])
    torch.save(sd, path, _use_new_zipfile_serialization=not legacy)
    return True


# ---- the checks --------------------------------------------------------------

def answers(model_dir, texts):
    c = sqlite3.connect(":memory:")
    c.enable_load_extension(True)
    c.load_extension(EXT)
    c.execute("select bert_cache('off')")
    try:
        c.execute("select bert_load(?)", (model_dir,))
        return [c.execute("select token, score from fill_candidates(?, 5)", (t,)).fetchall() for t in texts]
    except sqlite3.OperationalError as e:
        return "ERROR " + str(e)
    finally:
        c.close()


def convert(args):
    return subprocess.run([sys.executable, CONVERT] + args, capture_output=True, text=True, timeout=300)


TEXTS = ["[MASK]", "a [MASK] b", "的[MASK]是", "[MASK][MASK] x"]


def check_one(label, src, write):
    weights = read_safetensors(os.path.join(src, "model.safetensors"))
    want = answers(src, TEXTS)
    with tempfile.TemporaryDirectory() as tmp:
        d = os.path.join(tmp, "m")
        os.makedirs(d)
        for f in os.listdir(src):
            if f in ("config.json", "vocab.txt", "tokenizer_config.json", "tokenizer.json"):
                shutil.copy(os.path.join(src, f), d)
        if write(os.path.join(d, "pytorch_model.bin"), weights) is False:
            skip("convert.%s" % label, "no torch (Debian: python3-torch)")
            return
        got = answers(d, TEXTS)
        check("convert.%s.load_error_names_script" % label,
              isinstance(got, str) and "pytorch_model.bin" in got and "model/convert_bin.py" in got, got)
        r = convert([d])
        check("convert.%s.runs" % label, r.returncode == 0 and "wrote" in r.stdout, r.stdout + r.stderr)
        if r.returncode != 0:
            return
        out = read_safetensors(os.path.join(d, "model.safetensors"))
        same = [n for n in weights if out.get(n) == weights[n]]
        check("convert.%s.same_tensors" % label, len(same) == len(weights),
              "differ: %s" % [n for n in weights if n not in same][:5])
        emb = [n for n in weights if n.endswith("embeddings.word_embeddings.weight")][0]
        tied = "cls.predictions.decoder.weight" not in weights  # the writer tied it
        check("convert.%s.tied_written_each" % label,
              out.get("cls.predictions.decoder.weight", (None, None, None))[2] ==
              (weights[emb][2] if tied else weights["cls.predictions.decoder.weight"][2]) and
              ("cls.predictions.decoder.bias" not in out or
               out["cls.predictions.decoder.bias"][2] == out["cls.predictions.bias"][2]),
              sorted(out)[:8])
        got = answers(d, TEXTS)
        check("convert.%s.same_answers" % label, got == want and not isinstance(got, str),
              "original %r\n      converted %r" % (want if isinstance(want, str) else want[:1],
                                                  got if isinstance(got, str) else got[:1]))
        r = convert([d])
        check("convert.%s.never_overwrites" % label, r.returncode == 1 and "exists" in r.stderr,
              r.stdout + r.stderr)


def check_refuses_code():
    """A pickle naming os.system is refused; nothing is written."""
    with tempfile.TemporaryDirectory() as tmp:
        bad = os.path.join(tmp, "pytorch_model.bin")

        class Evil:
            def __reduce__(self):
                return (os.system, ("touch %s" % os.path.join(tmp, "ran"),))
        buf = io.BytesIO()
        pickle.dump(collections.OrderedDict(x=Evil()), buf, protocol=2)
        with zipfile.ZipFile(bad, "w") as z:
            z.writestr("archive/data.pkl", buf.getvalue())
        r = convert([tmp])
        check("convert.refuses_other_globals",
              r.returncode == 1 and "refused" in r.stderr and "system" in r.stderr and
              not os.path.exists(os.path.join(tmp, "ran")) and
              not os.path.exists(os.path.join(tmp, "model.safetensors")), r.stdout + r.stderr)


def check_refuses_out_of_range():
    """A tensor that reaches past the end of its storage is refused, not read."""
    with tempfile.TemporaryDirectory() as tmp:
        st = FakeStorage("0", "F32", np.zeros(6, dtype=np.float32))
        sd = collections.OrderedDict(w=FakeTensor(st, 4, (2, 2), (2, 1)))
        write_zip(os.path.join(tmp, "pytorch_model.bin"), sd, [st])
        r = convert([tmp])
        check("convert.refuses_out_of_range",
              r.returncode == 1 and "reaches element 7 of a storage of 6" in r.stderr and
              not os.path.exists(os.path.join(tmp, "model.safetensors")), r.stdout + r.stderr)


def main():
    if not os.path.isdir(os.path.join(MODELS, "tiny")):
        skip("convert", "no test models (make models)")
        return exit_code()
    for name in ("tiny", "tiny-bf16", "tiny-legacy", "tiny-f16"):
        src = os.path.join(MODELS, name)
        check_one("%s.zip" % name, src, lambda p, w: write_zip(p, *state_dict_of(w)))
        check_one("%s.legacy" % name, src, lambda p, w: write_legacy(p, *state_dict_of(w)))
    src = os.path.join(MODELS, "tiny")
    check_one("tiny.torch_zip", src, lambda p, w: write_with_torch(p, w, legacy=False))
    check_one("tiny.torch_legacy", src, lambda p, w: write_with_torch(p, w, legacy=True))
    check_refuses_code()
    check_refuses_out_of_range()
    return exit_code()


if __name__ == "__main__":
    sys.exit(main())
