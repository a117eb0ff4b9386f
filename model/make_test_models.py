#!/usr/bin/env python3
"""make_test_models.py — the small random models used by `make test`.

    /usr/bin/python3 model/make_test_models.py OUT_DIR [NAME ...]

writes OUT_DIR/NAME/ (Hugging Face layout, see gen_random_model.py) for every
model in MODELS below (or only the NAMEs given).  Idempotent: a model whose
OUT_DIR/NAME/.stamp records the same options and the same generator source is
left alone.  Takes about a second in all; needs only numpy.

The golden outputs in tests/golden/forward_NAME.json were computed from these
models by model/reference.py; each golden records the sha256 of the
model.safetensors it was made from, and tests/c/t_c.sh forward checks it.
"""
import hashlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_random_model  # noqa: E402

TINY = ["--layers", "2", "--hidden", "32", "--heads", "4", "--intermediate", "64",
        "--vocab-size", "600", "--max-pos", "64"]

# name -> gen_random_model options
MODELS = {
    # the plain case: F32, tied decoder, modern names, "bert." prefix
    "tiny": TINY + ["--seed", "1"],
    "tiny-f16": TINY + ["--seed", "2", "--dtype", "F16"],
    "tiny-bf16": TINY + ["--seed", "3", "--dtype", "BF16", "--eps", "1e-6"],
    # bert-base-chinese's old checkpoint style and odd shapes: gamma/beta, no
    # prefix, untied decoder, pooler + NSP head + int64 position_ids to ignore,
    # head size 12, sizes that are not multiples of 8, type_vocab 3, and an
    # eps large enough that reading it wrong changes the probabilities
    "tiny-legacy": ["--layers", "3", "--hidden", "36", "--heads", "3", "--intermediate", "100",
                    "--vocab-size", "601", "--max-pos", "40", "--type-vocab", "3", "--eps", "0.02",
                    "--seed", "4", "--legacy-names", "--no-prefix", "--untied",
                    "--include-pooler", "--position-ids"],
    # data section 2 bytes past an 8-byte boundary: F32 tensors misaligned
    "tiny-unaligned": TINY + ["--seed", "5", "--unaligned"],
    # bert-base-chinese's vocabulary layout ([MASK] = 103), longer sequences
    "small": ["--layers", "4", "--hidden", "128", "--heads", "4", "--intermediate", "512",
              "--vocab-size", "2000", "--max-pos", "128", "--seed", "6"],
    # what README.md's real-model recipe downloads, as tests/clients/t_docs.py
    # serves it to that recipe: bert-base-chinese's files (config.json,
    # vocab.txt, tokenizer_config.json, model.safetensors in F32), vocabulary
    # layout (21128 entries, [MASK] = 103) and 512 positions, but 2 layers of
    # hidden size 64 (6 MB, not 412)
    "base-layout": ["--layers", "2", "--hidden", "64", "--heads", "4", "--intermediate", "128",
                    "--vocab-size", "21128", "--max-pos", "512", "--seed", "7"],
}


def generator_digest():
    h = hashlib.sha256()
    with open(os.path.join(HERE, "gen_random_model.py"), "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: make_test_models.py OUT_DIR [NAME ...]")
    out = sys.argv[1]
    names = sys.argv[2:] or list(MODELS)
    for n in names:
        if n not in MODELS:
            sys.exit("make_test_models: unknown model %r (known: %s)" % (n, ", ".join(MODELS)))
    digest = generator_digest()
    for name in names:
        d = os.path.join(out, name)
        stamp = os.path.join(d, ".stamp")
        want = "gen_random_model.py %s\nsha256 of generator %s\n" % (" ".join(MODELS[name]), digest)
        if os.path.exists(stamp) and os.path.exists(os.path.join(d, "model.safetensors")):
            with open(stamp) as f:
                if f.read() == want:
                    continue
        if os.path.exists(stamp):
            os.remove(stamp)
        size = gen_random_model.main([d] + MODELS[name])
        with open(stamp, "w") as f:
            f.write(want)
        print("made %s (%d bytes)" % (d, size))


if __name__ == "__main__":
    main()
