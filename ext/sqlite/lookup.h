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
** entry later).  t comes from bfx_tokenize_fill, which refused a text too
** long for the model (text.h). */
int bfx_lookup_or_encode(bfx_conn *c, bf_model *m, const bf_tokens *t, int k, bfx_result *res,
                         bfx_err *e);

/* ---- the memo cache as every function reads and writes it ----
** A read goes to the LRU, then (mode 'on') to the cache table; an entry
** found in the table is copied into the LRU.  Every read is timed (the
** cache_read stage, res->times); every stored sequence is timed (the
** cache_write stage, tm) and every table write counted (cache_writes,
** cache_skipped).  Mode 'off' reads and writes nothing. */
enum {
  BFX_GET_COUNT = 1,  /* count the hit by where it was found (hit_lru, hit_table): a call's
                      ** own lookup (bfx_lookup_or_encode) */
  BFX_GET_NO_LRU = 2, /* an entry found in the table is not copied into the LRU (fill_rows,
                      ** bert_prefill: a column read back does not push out what is there) */
  BFX_GET_KEEP = 4    /* bert_prefill: it warms the place the cache keeps longest, the table
                      ** in mode 'on', so that is read first (a hit there is all it needs,
                      ** the LRU is not read, nothing is rewritten); an entry found only in
                      ** the LRU is then written to the table (counted as a write) */
};
/* Candidates of t with at least k per mask: 1 on a hit (res->c, res->k,
** res->source "lru" or "table"), 0 on a miss (res untouched but its
** times), -1 out of memory.  how: BFX_GET_* above. */
int bfx_cache_get(bfx_conn *c, bf_model *m, const bf_tokens *t, int k, int how, bfx_result *res);
/* Whether an entry found (c[0..k)) is one its reader can use: 1 yes, 0 no,
** -1 out of memory.  Run on every hit, LRU or table, before anything else
** is done with it (copied into the LRU, counted, returned). */
typedef int (*bfx_entry_check)(void *arg, const bf_cand *c, int k);
/* bfx_cache_get with check (may be NULL): an entry it refuses is a miss
** (returns 0), an out of memory -1; its time is the read's. */
int bfx_cache_get_checked(bfx_conn *c, bf_model *m, const bf_tokens *t, int k, int how,
                          bfx_entry_check check, void *arg, bfx_result *res);

/* Store the candidates of seqs[0..nseq) (k per mask, sequence after
** sequence as one encoder run writes them) in the LRU and, in mode 'on',
** the table: at most room table rows (room < 0: no bound; the others go to
** the LRU only).  Several sequences' table writes go in one transaction
** when the connection is in autocommit mode (bfc_group_begin: one commit
** instead of one per row; a group whose commit fails counts its rows as
** skipped).  Write times are added to tm (may be NULL).  Returns the table
** rows written. */
int64_t bfx_cache_put_batch(bfx_conn *c, bf_model *m, int nseq, const bf_tokens *seqs, int k,
                            const bf_cand *cands, int64_t room, bfx_times *tm);
/* The table rows a column form (fill_rows, fill_suspects_rows) may write as
** bert_rows_cache() says when its scan starts: in 'room', what the table
** still takes below bert_cache_limit (0 when the table is full, read-only or
** off); otherwise 0 (what the caller does with 'all' and 'none' is its own). */
int64_t bfx_cache_rows_room(bfx_conn *c);
/* A column form's next store, as bert_rows_cache() says: 0 in 'none' (store
** nothing); else 1, with *room the bound to pass to the store (-1 in 'all',
** no bound; in 'room' left, what bfx_cache_rows_room gave at the scan's
** start less the rows written since). */
int bfx_cache_rows_store(const bfx_conn *c, int64_t left, int64_t *room);
/* One sequence: bfx_cache_put_batch(c, m, 1, t, k, cands, -1, tm). */
void bfx_cache_put(bfx_conn *c, bf_model *m, const bf_tokens *t, int k, const bf_cand *cands,
                   bfx_times *tm);

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
**   ...bfx_lookup_or_encode(c, call.m, &call.t, k, &res, &call.e)...
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
/* bfx_call_begin with another tokenizer than bfx_tokenize_fill (same
** arguments, same contract): the spelling functions' refuses [MASK]. */
typedef int (*bfx_tokenize_fn)(const char *fname, bf_model *m, const char *s, int n, bf_tokens *t,
                               uint64_t *ns, bfx_err *e);
int bfx_call_begin_with(bfx_call *call, bfx_conn *c, const bfx_call_kind *kind, const char *s,
                        int n, bfx_tokenize_fn tokenize);
/* The call's time; its trace row (when it had a model) with the candidates
** in res (may be NULL) and whether it failed; frees its tokens. */
void bfx_call_end(bfx_call *call, const bfx_result *res, int failed);

/* What bert_fill(text) and bert_fill(text, 'joint') share: the result of ctx
** is the text s[0..n) with each [MASK] replaced by row 0 of the candidates
** best finds for the call's tokens (the text as it is when it has no mask),
** or the error of the call (kind: its name, counter and stage, above).
** best fills res, or sets call->e and returns an SQLite error code. */
typedef int (*bfx_fill_best)(bfx_call *call, bfx_result *res);
void bfx_fill_text(sqlite3_context *ctx, bfx_conn *c, const bfx_call_kind *kind, const char *s,
                   int n, bfx_fill_best best);

#endif
