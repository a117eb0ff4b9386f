#!/usr/bin/env python3
"""convert_bin.py — a PyTorch pytorch_model.bin to the model.safetensors bertfill reads.

    python3 model/convert_bin.py DIR              # DIR/pytorch_model.bin -> DIR/model.safetensors
    python3 model/convert_bin.py IN.bin OUT.safetensors

Needs python3 and numpy only (Debian: python3-numpy): neither torch nor the
safetensors package.  Runs anywhere, on the machine of the model or another.

A pytorch_model.bin is a pickle of the state dict (tensor name -> tensor) whose
tensors point into storages kept beside it:
  * the zip format of torch.save since PyTorch 1.6: ARCHIVE/data.pkl, the
    pickle, and ARCHIVE/data/KEY, the raw bytes of storage KEY (little-endian);
  * the legacy format before it (bert-base-chinese's pytorch_model.bin of
    2019 is one): a magic number, a version and system information, the
    pickle, the list of storage keys, then each storage as its element count
    (8 bytes) and its bytes.
The pickle names each storage by a persistent id ('storage', TYPE, KEY,
LOCATION, NUMEL[, VIEW]) and rebuilds each tensor with
torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...).  This
script reads both with pickle.Unpickler and numpy: it never imports torch, and
the unpickler builds nothing but dicts, tuples and the few torch names listed
in ALLOWED (no other global of the pickle is looked up, so a malicious file
cannot run code through it).

Tensors that share a storage (a masked LM's decoder tied to the word
embeddings, cls.predictions.decoder.bias tied to cls.predictions.bias) are
written once each, under each of their names, as the safetensors format
wants (no two tensors overlap).  Each tensor is written contiguous (its
offset and strides applied), in the dtype of its storage (F32, F16, BF16,
F64, I64, I32, I16, I8, U8, BOOL), the tensors ordered by element size then
name so that each starts at a multiple of its element size; the header is
padded to 8 bytes.  The file is written beside OUT and renamed into place;
an existing OUT is left alone (remove it first).

Tested by tests/python/t_convert_bin.py (tied weights, shared storages with
offsets, strided views, both formats, F32/F16/BF16/I64; the converted model
answers as the original).  ext/engine/load.c's error for a directory with
only pytorch_model.bin points here.
"""
import collections
import json
import os
import pickle
import struct
import sys
import zipfile

import numpy as np

# storage type (as the pickle names it) -> (safetensors dtype, numpy dtype
# of the same size; bfloat16 is carried as its 16 bits)
STORAGES = {
    "FloatStorage": ("F32", np.float32),
    "DoubleStorage": ("F64", np.float64),
    "HalfStorage": ("F16", np.float16),
    "BFloat16Storage": ("BF16", np.uint16),
    "LongStorage": ("I64", np.int64),
    "IntStorage": ("I32", np.int32),
    "ShortStorage": ("I16", np.int16),
    "CharStorage": ("I8", np.int8),
    "ByteStorage": ("U8", np.uint8),
    "BoolStorage": ("BOOL", np.bool_),
}
LEGACY_MAGIC = 0x1950A86A20F9469CFC6C


class ConvertError(Exception):
    pass


class StorageType:
    def __init__(self, name):
        self.name = name
        self.dtype, self.np = STORAGES[name]


class Tensor:
    """A tensor of the pickle: where its elements are in which storage."""

    def __init__(self, storage, offset, size, stride):
        self.storage, self.offset = storage, int(offset)
        self.size, self.stride = tuple(int(s) for s in size), tuple(int(s) for s in stride)


def rebuild_tensor(storage, offset, size, stride, *rest):
    return Tensor(storage, offset, size, stride)


def rebuild_parameter(data, requires_grad=False, backward_hooks=None, *rest):
    return data


ALLOWED = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("torch._utils", "_rebuild_tensor_v2"): rebuild_tensor,
    ("torch._utils", "_rebuild_tensor"): rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): rebuild_parameter,
    ("torch", "Size"): tuple,
}


class Unpickler(pickle.Unpickler):
    """Builds only what ALLOWED names; storages come from storage(key,
    type, numel, view)."""

    def __init__(self, f, storage):
        super().__init__(f)
        self.storage = storage

    def find_class(self, module, name):
        if module == "torch" and name in STORAGES:
            return StorageType(name)
        if (module, name) in ALLOWED:
            return ALLOWED[(module, name)]
        raise ConvertError("the pickle uses %s.%s, which is not part of a state dict of tensors: "
                           "refused (this script builds only tensors and dicts)" % (module, name))

    def persistent_load(self, pid):
        if not isinstance(pid, tuple) or not pid or pid[0] not in ("storage", b"storage"):
            raise ConvertError("unknown persistent id %r in the pickle" % (pid,))
        stype, key, _location, numel = pid[1], pid[2], pid[3], pid[4]
        if not isinstance(stype, StorageType):
            raise ConvertError("storage of unknown type %r" % (stype,))
        view = pid[5] if len(pid) > 5 else None
        return self.storage(str(key), stype, int(numel), view)


class Storage:
    def __init__(self, stype, key, numel):
        self.type, self.key, self.numel = stype, key, numel
        self.array = None  # numpy array of numel elements, filled in by the reader
        self.base, self.base_offset = None, 0  # a legacy view: elements of another storage

    def elements(self):
        if self.base is not None:
            a = self.base.elements()[self.base_offset:self.base_offset + self.numel]
        else:
            a = self.array
        if a is None or len(a) != self.numel:
            raise ConvertError("storage %s: %s elements found, %d expected" %
                               (self.key, "no" if a is None else len(a), self.numel))
        return a


def read_zip(path):
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        pkl = [n for n in names if n.endswith("/data.pkl") and n.count("/") == 1]
        if len(pkl) != 1:
            raise ConvertError("%s: a zip without one ARCHIVE/data.pkl: not a PyTorch checkpoint" % path)
        top = pkl[0][:-len("data.pkl")]
        if top + "byteorder" in names and z.read(top + "byteorder").strip() != b"little":
            raise ConvertError("%s: saved on a big-endian machine: not supported" % path)
        storages = {}

        def storage(key, stype, numel, view):
            if key not in storages:
                storages[key] = Storage(stype, key, numel)
            return storages[key]

        with z.open(pkl[0]) as f:
            obj = Unpickler(f, storage).load()
        for key, s in storages.items():
            name = top + "data/" + key
            if name not in names:
                raise ConvertError("%s: storage %s is missing (%s)" % (path, key, name))
            raw = z.read(name)
            size = np.dtype(s.type.np).itemsize
            if len(raw) < s.numel * size:
                raise ConvertError("%s: storage %s has %d bytes, %d expected" %
                                   (path, key, len(raw), s.numel * size))
            s.array = np.frombuffer(raw, dtype=s.type.np, count=s.numel)
    return obj


def read_legacy(path):
    with open(path, "rb") as f:
        try:
            magic = pickle.load(f)
        except Exception:
            magic = None
        if magic != LEGACY_MAGIC:
            raise ConvertError("%s: neither a zip nor a legacy PyTorch file: not a pytorch_model.bin" % path)
        version = pickle.load(f)
        if version != 1001:
            raise ConvertError("%s: legacy format version %r: not supported" % (path, version))
        info = pickle.load(f)
        if isinstance(info, dict) and not info.get("little_endian", True):
            raise ConvertError("%s: saved on a big-endian machine: not supported" % path)
        storages, views = {}, []

        def storage(key, stype, numel, view):
            if key not in storages:
                storages[key] = Storage(stype, key, numel)
            if view is None:
                return storages[key]
            view_key, offset, view_size = view
            v = Storage(stype, str(view_key), int(view_size))
            v.base, v.base_offset = storages[key], int(offset)
            views.append(v)
            return v

        obj = Unpickler(f, storage).load()
        keys = pickle.load(f)
        for key in keys:
            s = storages.get(str(key))
            if s is None:
                raise ConvertError("%s: storage %s is listed but not used" % (path, key))
            head = f.read(8)
            if len(head) != 8:
                raise ConvertError("%s: ends before storage %s" % (path, key))
            (numel,) = struct.unpack("<q", head)
            size = np.dtype(s.type.np).itemsize
            raw = f.read(numel * size)
            if numel != s.numel or len(raw) != numel * size:
                raise ConvertError("%s: storage %s holds %d elements, %d expected" % (path, key, numel, s.numel))
            s.array = np.frombuffer(raw, dtype=s.type.np)
    return obj


def tensor_bytes(name, t):
    a = t.storage.elements()
    size = a.itemsize
    if any(n < 0 for n in t.size) or any(s < 0 for s in t.stride) or len(t.size) != len(t.stride):
        raise ConvertError("%s: size %r, stride %r: not a tensor this script can write" % (name, t.size, t.stride))
    count = 1
    for n in t.size:
        count *= n
    if count:
        last = t.offset + sum((n - 1) * s for n, s in zip(t.size, t.stride))
        if t.offset < 0 or last >= len(a):
            raise ConvertError("%s: reaches element %d of a storage of %d" % (name, last, len(a)))
        view = np.lib.stride_tricks.as_strided(a[t.offset:], shape=t.size,
                                               strides=[s * size for s in t.stride], writeable=False)
        return np.ascontiguousarray(view).tobytes()
    return b""


def state_dict(obj, path):
    if isinstance(obj, dict) and obj and all(isinstance(v, Tensor) for v in obj.values()):
        return obj
    if isinstance(obj, dict):
        for k in ("state_dict", "model"):
            if isinstance(obj.get(k), dict):
                return state_dict(obj[k], path)
        bad = [k for k, v in obj.items() if not isinstance(v, Tensor)][:5]
        raise ConvertError("%s: not a state dict of tensors (the values of %s are not tensors)" %
                           (path, ", ".join(map(repr, bad)) or "none"))
    raise ConvertError("%s: holds a %s, not a state dict of tensors" % (path, type(obj).__name__))


def write_safetensors(tensors, out):
    """tensors: name -> Tensor; each written whole, contiguous, one at a
    time (the memory needed: the storages and one tensor)."""
    order = sorted(tensors, key=lambda n: (-np.dtype(tensors[n].storage.type.np).itemsize, n))
    header, at = {}, 0
    for name in order:
        t = tensors[name]
        n = np.dtype(t.storage.type.np).itemsize
        for d in t.size:
            n *= d
        header[name] = {"dtype": t.storage.type.dtype, "shape": list(t.size), "data_offsets": [at, at + n]}
        at += n
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-(8 + len(h)) % 8)
    tmp = "%s.tmp.%d" % (out, os.getpid())
    try:
        with open(tmp, "wb") as f:
            f.write(struct.pack("<Q", len(h)))
            f.write(h)
            for name in order:
                f.write(tensor_bytes(name, tensors[name]))
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return 8 + len(h) + at


def convert(src, out):
    if os.path.exists(out):
        raise ConvertError("%s exists: remove it first (this script never writes over a file)" % out)
    if not os.path.isfile(src):
        raise ConvertError("%s: no such file" % src)
    obj = read_zip(src) if zipfile.is_zipfile(src) else read_legacy(src)
    sd = state_dict(obj, src)
    size = write_safetensors(sd, out)
    return len(sd), size


def main(argv):
    if len(argv) == 1 and os.path.isdir(argv[0]):
        src, out = os.path.join(argv[0], "pytorch_model.bin"), os.path.join(argv[0], "model.safetensors")
    elif len(argv) == 2:
        src, out = argv
    else:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    try:
        n, size = convert(src, out)
    except (ConvertError, pickle.UnpicklingError, zipfile.BadZipFile, EOFError) as e:
        print("convert_bin: %s" % e, file=sys.stderr)
        return 1
    print("convert_bin: wrote %s: %d tensors, %d bytes" % (out, n, size))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
