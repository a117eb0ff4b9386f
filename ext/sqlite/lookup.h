/*
** lookup.h — the one path from tokens to candidates that every SQL
** function takes: the LRU, then the cache table, then the encoder (through
** the batcher), storing what the encoder computed (see lookup.c).
*/
#ifndef BERTFILL_SQLITE_LOOKUP_H
#define BERTFILL_SQLITE_LOOKUP_H

#include "bertfill.h"
#include "conn.h"
#include "encode.h"
#include "errors.h"

/* Candidates of one token sequence: for each mask, k candidates. */
typedef struct bfx_result {
  int k; /* candidates per mask held in c */
  int n_masks;
  bf_cand *c;         /* n_masks * k, sqlite3_malloc'ed */
  const char *source; /* "lru", "table", "encoder", "none" */
  bfx_times times;
} bfx_result;
void bfx_result_clear(bfx_result *r);

/* Candidates for t with at least k per mask (k is capped at the vocabulary
** size): from the LRU, the cache table, or the encoder (then stored; the
** encoder computes at least BFX_MIN_K so that every function can use the
** entry later).  fname prefixes messages. */
int bfx_lookup_or_encode(const char *fname, bfx_conn *c, bf_model *m, const bf_tokens *t, int k,
                         bfx_result *res, bfx_err *e);

/* Store candidates of t (k per mask) in the LRU and, in mode 'on', the
** table.  Write time is added to tm (may be NULL).  Returns 1 when a table
** row was written, 0 when the write was skipped, -1 when no table write was
** due (mode 'memory' / 'off').  count = 0: leave the cache_writes /
** cache_skipped counters to the caller. */
int bfx_store(bfx_conn *c, bf_model *m, const bf_tokens *t, int k, const bf_cand *cands,
              bfx_times *tm, int count);

#endif
