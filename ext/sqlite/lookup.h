/*
** lookup.h — the one path from tokens to candidates that every SQL
** function takes: the LRU, then the cache table, then the encoder (through
** the batcher), storing what the encoder computed (see lookup.c); and the
** start and end every call of a fill function shares (bfx_call).
*/
#ifndef BERTFILL_SQLITE_LOOKUP_H
#define BERTFILL_SQLITE_LOOKUP_H

#include <stdint.h>
#include "bertfill.h"
#include "conn.h"
#include "encode.h"
#include "errors.h"
#include "stats.h"

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

/* One call of a fill function (bert_fill, bert_score, fill_candidates,
** fill_sequences, ...) once its text argument is read: the call counted, the
** connection's model, the text's tokens; at its end its time and its row of
** the trace (trace.h).
**
**   static const bfx_call_kind kind = {"bert_fill", "bert_fill", BF_CT_CALLS, BF_ST_CALL};
**   bfx_call call;
**   bfx_result res = {0};
**   int failed = 1;
**   if (bfx_call_begin(&call, c, &kind, s, n) != SQLITE_OK) goto done;
**   ...bfx_lookup_or_encode(kind.fname, c, call.m, &call.t, k, &res, &call.e)...
**   failed = 0;
** done:
**   if (failed) bfx_error(ctx, &call.e);
**   bfx_call_end(&call, &res, failed);
**   bfx_result_clear(&res); */
typedef struct bfx_call_kind {
  const char *fname;  /* prefixes its messages: "bert_fill" */
  const char *traced; /* its name in the trace: "bert_fill(joint)" */
  bf_counter counter; /* counts its calls: BF_CT_CALLS */
  bf_stage stage;     /* the stage of a whole call, timed: BF_ST_CALL */
} bfx_call_kind;

typedef struct bfx_call {
  const bfx_call_kind *kind;
  bfx_conn *c;
  const char *s; /* the text (the caller's), n bytes */
  int n;
  uint64_t t0, tok_ns; /* start (bf_now_ns), time spent tokenizing */
  bf_model *m;         /* the connection's model; NULL: none (e says why) */
  bf_tokens t;         /* the text's tokens */
  bfx_err e;           /* why the call failed */
} bfx_call;

/* Count the call, start its clock, find the model and tokenize s[0..n).
** SQLITE_OK, or an error code with call->e set (call->m NULL: no model).
** Either way bfx_call_end ends it. */
int bfx_call_begin(bfx_call *call, bfx_conn *c, const bfx_call_kind *kind, const char *s, int n);
/* The call's time; its trace row (when it had a model) with the candidates
** in res (may be NULL) and whether it failed; frees its tokens. */
void bfx_call_end(bfx_call *call, const bfx_result *res, int failed);

#endif
