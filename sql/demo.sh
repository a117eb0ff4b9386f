#!/usr/bin/env bash
# sql/demo.sh — what `make demo` runs (after `make` built ./bertfill.so): the
# queries of sql/demo.sql in the sqlite3 shell, on the shipped model
# model/bertfill-zh-tiny or on the model directory in $BERTFILL_MODEL, e.g.
#   BERTFILL_MODEL=/path/to/bert-base-chinese make demo
# What it prints on the shipped model is in docs/demo.md, checked by
# tests/clients/t_docs.py.
set -u
cd "$(dirname "$0")/.."
if ! command -v sqlite3 >/dev/null; then
  echo "demo: the sqlite3 shell is missing (Debian: apt-get install sqlite3)" >&2; exit 1
fi
if [ ! -f bertfill.so ]; then echo "demo: ./bertfill.so is missing: run make first" >&2; exit 1; fi
if [ -n "${BERTFILL_MODEL:-}" ]; then
  echo "bertfill demo on the model in \$BERTFILL_MODEL=$BERTFILL_MODEL"
elif [ -f model/bertfill-zh-tiny/model.safetensors ]; then
  echo "bertfill demo on the shipped model model/bertfill-zh-tiny"
else
  echo "demo: no model: model/bertfill-zh-tiny/model.safetensors is missing and BERTFILL_MODEL is not set." >&2
  echo "      Point BERTFILL_MODEL at a model directory (config.json, vocab.txt, model.safetensors)," >&2
  echo "      e.g. bert-base-chinese from https://huggingface.co/google-bert/bert-base-chinese" >&2
  exit 1
fi
sqlite3 -bail :memory: <sql/demo.sql
