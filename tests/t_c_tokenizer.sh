#!/usr/bin/env bash
# The tokenizer (ext/engine/tokenizer.c) against golden ids from an independent reference
# (tests/golden/tokenizer/make_golden.mjs, @huggingface/transformers), load errors,
# invalid UTF-8 and random input.  Cases on the real bert-base-chinese vocabulary are
# skipped when ../shared/data/bert-base-chinese is absent.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
bin=$BUILD/tests/test_tokenizer
if [ ! -x "$bin" ]; then echo "FAIL tokenizer: $bin is not built (make test-bins)"; exit 1; fi
work=$BUILD/tokenizer_dirs
rm -rf "$work" && mkdir -p "$work"
${BF_WRAP:-} "$bin" tests/golden/tokenizer_golden.tsv tests/golden/tokenizer_small \
  "$(pwd)/../shared/data/bert-base-chinese" "$work"
