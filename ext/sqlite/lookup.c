/*
** lookup.c — the one path every SQL function takes from tokens to
** candidates:
**
**   tokens -> LRU -> cache table -> encoder (batcher.c)
**             (hit)   (hit)         (miss: store in the cache)
**
** Every step records its time and counters in the process-wide stats
** (ext/sqlite/stats.h).  And how a call of a fill function starts (counted,
** model, tokens) and ends (timed, traced): bfx_call; and the whole call of
** the functions whose result is the filled text (bert_fill(text) in
** scalars.c, bert_fill(text, 'joint') in wholeword.c): bfx_fill_text.
*/
#include <string.h>

#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3
#include "lookup.h"
#include "batcher.h"
#include "bounds.h"
#include "cache.h"
#include "stats.h"
#include "text.h"
#include "trace.h"
#include "util.h"

void bfx_result_clear(bfx_result *r) {
  sqlite3_free(r->c);
  memset(r, 0, sizeof *r);
}

int bfx_cache_get(bfx_conn *c, bf_model *m, const bf_tokens *t, int k, int how, bfx_result *res) {
  return bfx_cache_get_checked(c, m, t, k, how, NULL, NULL, res);
}

int bfx_cache_get_checked(bfx_conn *c, bf_model *m, const bf_tokens *t, int k, int how,
                          bfx_entry_check check, void *arg, bfx_result *res) {
  if (c->cache_mode == BFX_CACHE_OFF) return 0;
  const char *fp = bf_model_fingerprint(m);
  if (!fp || !fp[0]) return 0;
  uint64_t t0 = bf_now_ns();
  int table = c->cache_mode == BFX_CACHE_ON, vocab = bf_model_config(m)->vocab_size;
  int keep = table && (how & BFX_GET_KEEP), have = 0, hit = 0;
  bf_cand *cands = NULL;
  const char *from = "table";
  if (keep) hit = bfc_table_get(c->db, fp, t->ids, t->n, t->n_masks, k, vocab, &have, &cands);
  if (hit == 0) {
    hit = bfc_lru_get(fp, t->ids, t->n, t->n_masks, k, &have, &cands);
    if (hit != 0) from = "lru";
  }
  if (hit == 0 && table && !keep)
    hit = bfc_table_get(c->db, fp, t->ids, t->n, t->n_masks, k, vocab, &have, &cands);
  if (hit == 1 && check && (hit = check(arg, cands, have)) != 1) { /* not one to use: a miss */
    sqlite3_free(cands);
    cands = NULL;
  }
  if (hit == 1 && from[0] == 't' && !(how & BFX_GET_NO_LRU))
    bfc_lru_put(fp, t->ids, t->n, t->n_masks, have, cands);
  uint64_t dt = bf_now_ns() - t0;
  bf_stats_time(BF_ST_CACHE_READ, dt);
  res->times.cache_read_ns += dt;
  if (hit != 1) return hit;
  if (how & BFX_GET_COUNT) bf_stats_add(from[0] == 'l' ? BF_CT_HIT_LRU : BF_CT_HIT_TABLE, 1);
  if (keep && from[0] == 'l') bfx_cache_put(c, m, t, have, cands, &res->times);
  res->c = cands;
  res->k = have;
  res->source = from;
  return 1;
}

int64_t bfx_cache_put_batch(bfx_conn *c, bf_model *m, int nseq, const bf_tokens *seqs, int k,
                            const bf_cand *cands, int64_t room, bfx_times *tm) {
  if (c->cache_mode == BFX_CACHE_OFF) return 0;
  const char *fp = bf_model_fingerprint(m);
  if (!fp || !fp[0]) return 0;
  int table = c->cache_mode == BFX_CACHE_ON && room != 0;
  int grouped = table && nseq > 1 && bfc_group_begin(c->db);
  uint64_t written = 0, skipped = 0;
  size_t at = 0; /* the first mask of sequence i */
  for (int i = 0; i < nseq; at += (size_t)seqs[i].n_masks, i++) {
    const bf_tokens *t = &seqs[i];
    const bf_cand *ci = cands + at * (size_t)k;
    if (t->n_masks == 0) continue;
    uint64_t t0 = bf_now_ns();
    bfc_lru_put(fp, t->ids, t->n, t->n_masks, k, ci);
    if (table && (room < 0 || (int64_t)written < room)) {
      if (bfc_table_put(c->db, fp, t->ids, t->n, t->n_masks, k, ci, c->cache_limit,
                        &c->writes_since_trim))
        written++;
      else skipped++;
    }
    uint64_t dt = bf_now_ns() - t0;
    bf_stats_time(BF_ST_CACHE_WRITE, dt);
    if (tm) tm->cache_write_ns += dt;
  }
  if (grouped && !bfc_group_end(c->db)) { /* rolled back: none was written */
    skipped += written;
    written = 0;
  }
  if (written) bf_stats_add(BF_CT_CACHE_WRITES, written);
  if (skipped) bf_stats_add(BF_CT_CACHE_SKIPPED, skipped);
  return (int64_t)written;
}

int64_t bfx_cache_rows_room(bfx_conn *c) {
  if (c->rows_cache != BFX_ROWS_CACHE_ROOM) return 0;
  int64_t cap = bfc_table_capacity(c->db, c->cache_mode == BFX_CACHE_ON, c->cache_limit);
  if (cap <= 0) return 0;
  int64_t have = bfc_table_rows(c->db);
  return have >= 0 && have < cap ? cap - have : 0;
}

int bfx_cache_rows_store(const bfx_conn *c, int64_t left, int64_t *room) {
  if (c->rows_cache == BFX_ROWS_CACHE_NONE) return 0;
  *room = c->rows_cache == BFX_ROWS_CACHE_ALL ? -1 : left;
  return 1;
}

void bfx_cache_put(bfx_conn *c, bf_model *m, const bf_tokens *t, int k, const bf_cand *cands,
                   bfx_times *tm) {
  bfx_cache_put_batch(c, m, 1, t, k, cands, -1, tm);
}

int bfx_lookup_or_encode(bfx_conn *c, bf_model *m, const bf_tokens *t, int k, bfx_result *res,
                         bfx_err *e) {
  int vocab = bf_model_config(m)->vocab_size;
  memset(res, 0, sizeof *res);
  if (k > vocab) k = vocab;
  res->k = k;
  res->n_masks = t->n_masks;
  res->source = "none";
  if (t->n_masks == 0) return SQLITE_OK;

  int hit = bfx_cache_get(c, m, t, k, BFX_GET_COUNT, res);
  if (hit < 0) {
    bfx_err_nomem(e);
    return SQLITE_NOMEM;
  }
  if (hit == 1) return SQLITE_OK;

  /* 3. the encoder: at least BFX_MIN_K candidates so every function can
  ** use the entry later. */
  bf_stats_add(BF_CT_MISS, 1);
  int keff = k > BFX_MIN_K ? k : BFX_MIN_K;
  if (keff > vocab) keff = vocab;
  size_t nc = (size_t)t->n_masks * (size_t)keff;
  bf_cand *cands = sqlite3_malloc64(nc * sizeof *cands);
  if (!cands) {
    bfx_err_nomem(e);
    return SQLITE_NOMEM;
  }
  int rc = bfx_batch_encode(m, t, keff, cands, &res->times, e);
  if (rc != SQLITE_OK) {
    sqlite3_free(cands);
    return rc;
  }
  res->source = "encoder";
  res->c = cands;
  res->k = keff;
  bfx_cache_put(c, m, t, keff, cands, &res->times);
  return SQLITE_OK;
}

int bfx_call_begin_with(bfx_call *call, bfx_conn *c, const bfx_call_kind *kind, const char *s,
                        int n, bfx_tokenize_fn tokenize) {
  memset(call, 0, sizeof *call);
  call->kind = kind;
  call->c = c;
  call->s = s;
  call->n = n;
  call->e = (bfx_err)BFX_ERR_NONE;
  call->t0 = bf_now_ns();
  bf_stats_add(kind->counter, 1);
  call->m = bfx_conn_model_current(c, &call->e);
  if (!call->m) return call->e.rc != SQLITE_OK ? call->e.rc : SQLITE_ERROR;
  return tokenize(kind->fname, call->m, s, n, &call->t, &call->tok_ns, &call->e);
}

int bfx_call_begin(bfx_call *call, bfx_conn *c, const bfx_call_kind *kind, const char *s, int n) {
  return bfx_call_begin_with(call, c, kind, s, n, bfx_tokenize_fill);
}

void bfx_call_end(bfx_call *call, const bfx_result *res, int failed) {
  bf_stats_time(call->kind->stage, bf_now_ns() - call->t0);
  if (call->m)
    bfx_trace_call(call->c->db, call->kind->traced, call->s, call->n, res, call->t0, call->tok_ns,
                   call->t.n, failed);
  bf_tokens_free(&call->t);
}

void bfx_fill_text(sqlite3_context *ctx, bfx_conn *c, const bfx_call_kind *kind, const char *s,
                   int n, bfx_fill_best best) {
  bfx_call call;
  bfx_result res;
  memset(&res, 0, sizeof res);
  int *off = NULL;
  int failed = 1;
  if (bfx_call_begin(&call, c, kind, s, n) != SQLITE_OK) goto done;
  if (call.t.n_masks == 0) { /* nothing to fill: the text as it is */
    sqlite3_result_text(ctx, s, n, SQLITE_TRANSIENT);
    failed = 0;
    goto done;
  }
  off = sqlite3_malloc64((size_t)call.t.n_masks * sizeof *off);
  if (!off) {
    bfx_err_nomem(&call.e);
    goto done;
  }
  if (bfx_find_masks(kind->fname, call.m, s, n, &call.t, off, &call.e) != SQLITE_OK) goto done;
  if (best(&call, &res) != SQLITE_OK) goto done;
  sqlite3_str *out = sqlite3_str_new(NULL); /* row 0: the best fill */
  bfx_append_filled(out, call.m, s, n, off, call.t.n_masks, res.c, (size_t)res.k);
  bfx_result_str(ctx, out);
  failed = 0;
done:
  if (failed) bfx_error(ctx, &call.e);
  bfx_call_end(&call, &res, failed);
  bfx_result_clear(&res);
  sqlite3_free(off);
}
