/*
** prefill.c — bert_prefill(text), an aggregate that fills the memo
** cache for a whole column at batch speed:
**
**   SELECT bert_prefill(text) FROM t;        -- number of texts computed
**   UPDATE t SET filled = bert_fill(text);   -- now answered from the cache
**
** Each text (NULLs are passed over) is tokenized and lands in exactly one
** of four counts:
**   computed   went through the encoder, in batches of up to
**              BFX_BATCH_MAX_SEQS sequences or BFX_BATCH_MAX_TOKENS tokens
**              per run (all tokens of a batch go through each matrix product
**              together); the results are stored in the cache
**   cached     already in the cache (the table in mode 'on', the LRU in mode
**              'memory'), or a repeat of a text already counted
**   no mask    nothing to compute (bert_fill returns such a text unchanged,
**              whatever its length)
**   skipped    texts bert_fill would reject (invalid UTF-8, longer than the
**              model's limit): an aggregate over a column does not stop at
**              one bad row; bert_fill reports it with its row
** Memory stays bounded: one batch at a time.  The result is the number
** computed.
**
** Progress goes to stderr, at most once a second, when stderr is a terminal
** or BERTFILL_PROGRESS=1 (BERTFILL_PROGRESS=0 turns it off; the words of
** bf_env_flag, util.h); the counts of the last line add up to texts read:
**   bert_prefill: 1200 texts read, 1100 computed, 85 texts/s
**   bert_prefill: done: 2000 texts read, 1840 computed, 150 cached or repeated, 8 without a
**   mask, 2 skipped (what bert_fill rejects), 21.8 s
**
** With bert_cache('off') there is nowhere to keep the results: error.
**
** Nor when the cache cannot keep them all: the UPDATE that follows would
** find the first texts evicted by the last ones and compute every text a
** second time, one at a time.  As soon as the texts it computed outnumber
** what the cache holds (bert_cache_limit rows of the table in mode 'on' on
** a writable database, or bert_cache_lru entries of the LRU), bert_prefill
** stops with an error that points to fill_rows (rows.c), which fills a
** column of any size in one pass.  What it computed so far stays cached.
**
** bert_prefill(text, 'joint') warms the whole-word fills instead (what
** fill_sequences(text) and bert_fill(text, 'joint') read, beam width 5):
**   SELECT bert_prefill(text, 'joint') FROM t;
**   UPDATE t SET filled = bert_fill(text, 'joint');
** Those texts are computed one after the other (each mask of a text is one
** encoder run of the beam's hypotheses, joint.c); cached ones and repeats
** are skipped.  A NULL second argument skips the row.
*/
#include <stdio.h>
#include <string.h>

#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3
#include "prefill.h"
#include "bounds.h"
#include "cache.h"
#include "column_batch.h"
#include "conn.h"
#include "errors.h"
#include "joint.h"
#include "lookup.h"
#include "stats.h"
#include "text.h"
#include "util.h"

typedef struct prefill {
  int started, failed;
  bfx_conn *c;
  bf_model *m;                                           /* retained until the final step */
  int k;                                                 /* candidates per mask to compute */
  bfx_column_batch batch;                                /* the texts of the next encoder run */
  sqlite3_int64 read, computed, cached, nomask, skipped; /* read = the sum of the rest */
  bfx_column_progress progress;
} prefill;

static void progress(prefill *p, int final) {
  double secs;
  if (!bfx_column_progress_due(&p->progress, final, &secs)) return;
  if (final)
    fprintf(stderr,
            "bert_prefill: done: %lld texts read, %lld computed, %lld cached or repeated, "
            "%lld without a mask, %lld skipped (what bert_fill rejects), %.1f s\n",
            (long long)p->read, (long long)p->computed, (long long)p->cached, (long long)p->nomask,
            (long long)p->skipped, secs);
  else
    fprintf(stderr, "bert_prefill: %lld texts read, %lld computed, %.0f texts/s\n",
            (long long)p->read, (long long)p->computed,
            secs > 0 ? (double)p->computed / secs : 0.0);
}

/* How many texts the cache keeps, and the setting that bounds it: the LRU
** (bert_cache_lru), or in mode 'on' on a writable database the table
** (bert_cache_limit) when that holds more. */
static sqlite3_int64 cache_capacity(bfx_conn *c, const char **setting) {
  sqlite3_int64 n = bfc_lru_max_entries();
  sqlite3_int64 table = bfc_table_capacity(c->db, c->cache_mode == BFX_CACHE_ON, c->cache_limit);
  *setting = table > n ? "bert_cache_limit" : "bert_cache_lru";
  return table > n ? table : n;
}

/* The error when the texts computed outnumber what the cache keeps. */
static void check_capacity(prefill *p, bfx_err *e) {
  const char *setting;
  sqlite3_int64 cap = cache_capacity(p->c, &setting);
  if (p->computed <= cap) return;
  bfx_errf(e, SQLITE_ERROR, BF_CT_ERR_OTHER,
           "%lld texts computed but the cache keeps %lld (%s), so the UPDATE after bert_prefill "
           "would compute them again; fill the column in one pass with fill_rows: UPDATE t SET "
           "filled = f.filled FROM fill_rows('SELECT rowid, text FROM t') AS f WHERE t.rowid = "
           "f.key",
           (long long)p->computed, (long long)cap, setting);
}

/* Encode the batch and store its results in the cache. */
static int encode_and_store_batch(sqlite3_context *ctx, prefill *p) {
  bfx_column_batch *b = &p->batch;
  if (b->n == 0) return SQLITE_OK;
  bfx_err e = BFX_ERR_NONE;
  if (bfx_column_batch_encode(b, p->m, p->k, &e) == SQLITE_OK) {
    /* one transaction in autocommit mode: one commit (and fsync) per batch
    ** instead of one per text */
    bfx_column_batch_store(b, p->c, p->m, -1);
    p->computed += b->n;
    check_capacity(p, &e);
  }
  bfx_column_batch_next(b);
  if (e.rc != SQLITE_OK) {
    p->failed = 1;
    bfx_err where = e; /* say where the error came from */
    if (e.rc != SQLITE_NOMEM) bfx_errf(&where, e.rc, e.kind, "bert_prefill: %s", e.msg);
    bfx_error(ctx, &where);
    return e.rc;
  }
  return SQLITE_OK;
}

/* bert_prefill(text, 'joint'): the whole-word fills of t, from the memo or
** computed now. */
static void prefill_joint(sqlite3_context *ctx, prefill *p, const bf_tokens *t) {
  bfx_err e = BFX_ERR_NONE;
  bfx_result res;
  int rc = bfx_joint_fill(p->c, p->m, t, BFX_DEFAULT_K, BFX_JOINT_PREFILL, &res, &e);
  if (rc == SQLITE_OK && strcmp(res.source, "encoder") == 0) p->computed++;
  else if (rc == SQLITE_OK) p->cached++;
  bfx_result_clear(&res);
  if (rc != SQLITE_OK) {
    p->failed = 1;
    bfx_err where = e; /* say where the error came from */
    if (e.rc != SQLITE_NOMEM && strncmp(e.msg, "bert_prefill", 12) != 0)
      bfx_errf(&where, e.rc, e.kind, "bert_prefill: %s", e.msg);
    bfx_error(ctx, &where);
  }
}

void bfx_prefill_step(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  prefill *p = sqlite3_aggregate_context(ctx, sizeof *p);
  if (!p) {
    sqlite3_result_error_nomem(ctx);
    return;
  }
  if (p->failed) return;
  bfx_err e = BFX_ERR_NONE;
  if (!p->started) {
    p->started = 1;
    p->c = sqlite3_user_data(ctx);
    if (p->c->cache_mode == BFX_CACHE_OFF) {
      p->failed = 1;
      sqlite3_result_error(ctx,
                           "bert_prefill: the cache is off, so there is nowhere to keep "
                           "the results; turn it on with SELECT bert_cache('on') or "
                           "bert_cache('memory')",
                           -1);
      return;
    }
    bf_model *m = bfx_conn_model_current(p->c, &e);
    if (!m) {
      p->failed = 1;
      bfx_error(ctx, &e);
      return;
    }
    bf_model_retain(m);
    p->m = m;
    int vocab = bf_model_config(m)->vocab_size;
    p->k = BFX_MIN_K < vocab ? BFX_MIN_K : vocab;
    bfx_column_progress_start(&p->progress);
  }
  int joint = argc == 2 ? bfx_arg_joint(argv[1], "bert_prefill", &e) : 0;
  if (joint < 0) {
    p->failed = 1;
    bfx_error(ctx, &e);
    return;
  }
  if (argc == 2 && !joint) return; /* NULL mode: as bert_fill(text, NULL), nothing to warm */
  const char *s;
  int n;
  int a = bfx_arg_text(argv[0], &s, &n);
  if (a == 0) return;
  if (a < 0) {
    p->failed = 1;
    sqlite3_result_error_nomem(ctx);
    return;
  }
  p->read++;

  bf_tokens *t;
  switch (bfx_column_batch_tokenize(&p->batch, "bert_prefill", p->m, s, n, &t, &e)) {
    case BFX_COLUMN_TEXT_NOMEM:
      p->failed = 1;
      bfx_error(ctx, &e);
      return;
    case BFX_COLUMN_NO_MASK: p->nomask++; goto out;
    case BFX_COLUMN_BAD: p->skipped++; goto out;
    case BFX_COLUMN_FILL: break;
  }
  if (joint) {
    prefill_joint(ctx, p, t);
    if (p->failed) return;
    goto out;
  }

  /* The table first in mode 'on', where it is kept longest; an entry found
  ** only in the LRU is copied into the table. */
  bfx_result res;
  int seq;
  bfx_column_place place = bfx_column_batch_place(&p->batch, p->c, p->m, p->k,
                                                  BFX_GET_KEEP | BFX_GET_NO_LRU, &res, &seq);
  bfx_result_clear(&res);
  switch (place) {
    case BFX_COLUMN_NOMEM:
      p->failed = 1;
      sqlite3_result_error_nomem(ctx);
      return;
    case BFX_COLUMN_CACHED:
    case BFX_COLUMN_REPEAT: p->cached++; goto out;
    case BFX_COLUMN_NO_ROOM: /* run the batch; the text starts the next one */
      if (encode_and_store_batch(ctx, p) != SQLITE_OK) return;
      break;
    case BFX_COLUMN_NEW: break;
  }
  if (bfx_column_batch_full(&p->batch))
    if (encode_and_store_batch(ctx, p) != SQLITE_OK) return;
out:
  progress(p, 0);
}

void bfx_prefill_final(sqlite3_context *ctx) {
  prefill *p = sqlite3_aggregate_context(ctx, 0);
  if (!p) {
    sqlite3_result_int(ctx, 0);
    return;
  }
  if (!p->failed && p->m) encode_and_store_batch(ctx, p);
  if (!p->failed) {
    if (p->read > 0) progress(p, 1);
    sqlite3_result_int64(ctx, p->computed);
  }
  bfx_column_batch_free(&p->batch);
  if (p->m) bf_model_release(p->m);
  p->m = NULL;
}
