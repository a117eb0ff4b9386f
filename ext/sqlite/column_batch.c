/*
** column_batch.c — the batch of a column's texts for one encoder run, the
** one reader behind fill_rows (rows.c) and bert_prefill (prefill.c); how to
** use it: column_batch.h.
*/
#include <string.h>
#include <unistd.h>

#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3
#include "column_batch.h"
#include "encode.h"
#include "text.h"
#include "util.h"

bfx_column_text bfx_column_batch_tokenize(bfx_column_batch *b, const char *fname, bf_model *m,
                                          const char *s, int n, bf_tokens **t, bfx_err *why) {
  *t = &b->seqs[b->n];
  int rc = bfx_tokenize_fill(fname, m, s, n, *t, NULL, why);
  if (rc == SQLITE_OK && (*t)->n_masks == 0) return BFX_COLUMN_NO_MASK;
  if (rc == SQLITE_OK) return BFX_COLUMN_FILL;
  return why->rc == SQLITE_NOMEM ? BFX_COLUMN_TEXT_NOMEM : BFX_COLUMN_BAD;
}

static int same_tokens(const bf_tokens *a, const bf_tokens *b) {
  return a->n == b->n && memcmp(a->ids, b->ids, (size_t)a->n * sizeof *a->ids) == 0;
}

bfx_column_place bfx_column_batch_place(bfx_column_batch *b, bfx_conn *c, bf_model *m, int k,
                                        int how, bfx_result *res, int *seq) {
  const bf_tokens *t = &b->seqs[b->n];
  memset(res, 0, sizeof *res);
  int hit = bfx_cache_get(c, m, t, k, how, res);
  if (hit < 0) return BFX_COLUMN_NOMEM;
  if (hit) return BFX_COLUMN_CACHED;
  for (int i = 0; i < b->n; i++)
    if (same_tokens(&b->seqs[i], t)) {
      *seq = i;
      return BFX_COLUMN_REPEAT;
    }
  if (b->n > 0 && b->tokens + t->n > BFX_BATCH_MAX_TOKENS) {
    b->waiting = 1;
    return BFX_COLUMN_NO_ROOM;
  }
  *seq = b->n++;
  b->tokens += t->n;
  return BFX_COLUMN_NEW;
}

int bfx_column_batch_full(const bfx_column_batch *b) {
  return b->waiting || b->n == BFX_BATCH_MAX_SEQS || b->tokens >= BFX_BATCH_MAX_TOKENS;
}

int bfx_column_batch_encode(bfx_column_batch *b, bf_model *m, int k, bfx_err *e) {
  size_t masks = 0;
  for (int i = 0; i < b->n; i++) {
    b->at[i] = masks;
    masks += (size_t)b->seqs[i].n_masks;
  }
  b->k = k;
  if (b->n == 0) return SQLITE_OK;
  b->out = sqlite3_malloc64(masks * (size_t)k * sizeof *b->out);
  if (!b->out) {
    bfx_err_nomem(e);
    return SQLITE_NOMEM;
  }
  return bfx_encode(m, b->n, b->seqs, k, b->out, NULL, e);
}

const bf_cand *bfx_column_batch_cands(const bfx_column_batch *b, int seq) {
  return b->out + b->at[seq] * (size_t)b->k;
}

int64_t bfx_column_batch_store(const bfx_column_batch *b, bfx_conn *c, bf_model *m, int64_t room) {
  if (b->n == 0 || !b->out) return 0;
  return bfx_cache_put_batch(c, m, b->n, b->seqs, b->k, b->out, room, NULL);
}

void bfx_column_batch_next(bfx_column_batch *b) {
  sqlite3_free(b->out);
  b->out = NULL;
  if (b->waiting) { /* the text that did not fit starts this run */
    bf_tokens first = b->seqs[0];
    b->seqs[0] = b->seqs[b->n];
    b->seqs[b->n] = first;
    b->n = 1;
    b->tokens = b->seqs[0].n;
    b->waiting = 0;
  } else {
    b->n = b->tokens = 0;
  }
}

void bfx_column_batch_free(bfx_column_batch *b) {
  for (int i = 0; i <= BFX_BATCH_MAX_SEQS; i++) bf_tokens_free(&b->seqs[i]);
  sqlite3_free(b->out);
  memset(b, 0, sizeof *b);
}

void bfx_column_progress_start(bfx_column_progress *p) {
  p->on = bf_env_flag("BERTFILL_PROGRESS", isatty(2));
  p->t_start = p->t_last = bf_now_ns();
}

int bfx_column_progress_due(bfx_column_progress *p, int final, double *secs) {
  if (!p->on) return 0;
  uint64_t now = bf_now_ns();
  if (!final && now - p->t_last < 1000000000ull) return 0;
  p->t_last = now;
  *secs = (double)(now - p->t_start) / 1e9;
  return 1;
}
