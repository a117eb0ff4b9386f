#!/usr/bin/env bash
# t_oom.sh — out-of-memory: each allocation made by bert_fill,
# fill_candidates, bert_tokenize, bert_prefill, fill_rows, bert_load and a connection's
# first call fails in turn (an LD_PRELOAD shim); every failure must come back
# as SQLITE_NOMEM (or an error saying "out of memory"), or be absorbed with a
# correct result, the connection must work afterwards, and no block may
# leak (the shim counts live blocks).  See
# tests/reliability/oom.c.
exec bash "$(dirname "$0")/oom.sh"
