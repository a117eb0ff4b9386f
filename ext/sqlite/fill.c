/*
** sqlite_fill.c — the one path every SQL function takes from text to
** candidates:
**
**   argument -> UTF-8 check -> tokens -> LRU -> cache table -> encoder
**                                          (hit)    (hit)      (miss: store)
**
** plus the small text helpers the functions share (argument text, UTF-8
** validation, positions of the literal "[MASK]"s) and error reporting.
** Every step records its time and counters in the process-wide stats
** (ext/stats.h).
*/
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3
#include "layer.h"
#include "batcher.h"
#include "cache.h"
#include "stats_sql.h"
#include "stats.h"

/* ---- text helpers ---- */

int bfx_arg_text(sqlite3_value *v, const char **p, int *n) {
  *p = NULL;
  *n = 0;
  switch (sqlite3_value_type(v)) {
    case SQLITE_NULL:
      return 0;
    case SQLITE_BLOB:                       /* raw bytes, validated as UTF-8 later */
      *p = sqlite3_value_blob(v);
      *n = sqlite3_value_bytes(v);
      if (!*p) *p = "";
      return 1;
    default:                                /* text, or a number as SQLite writes it */
      *p = (const char *)sqlite3_value_text(v);
      *n = sqlite3_value_bytes(v);
      return *p ? 1 : -1;                   /* NULL here: out of memory */
  }
}

long bfx_utf8_invalid_at(const char *s, long n) {
  const unsigned char *p = (const unsigned char *)s;
  long i = 0;
  while (i < n) {
    unsigned c = p[i];
    if (c < 0x80) { i++; continue; }
    int len;
    unsigned cp, min;
    if (c >= 0xC2 && c <= 0xDF) { len = 2; cp = c & 0x1F; min = 0x80; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; cp = c & 0x0F; min = 0x800; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; cp = c & 0x07; min = 0x10000; }
    else return i;
    if (n - i < len) return i;
    for (int j = 1; j < len; j++) {
      if ((p[i + j] & 0xC0) != 0x80) return i;
      cp = cp << 6 | (p[i + j] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return -1;
}

int bfx_mask_offsets(const char *s, int n, int *off, int max) {
  int count = 0;
  for (int i = 0; i + 6 <= n;) {
    if (memcmp(s + i, "[MASK]", 6) == 0) {
      if (count < max) off[count] = i;
      count++;
      i += 6;
    } else {
      i++;
    }
  }
  return count;
}

/* ---- errors ---- */

void bfx_errf(bfx_err *e, int rc, int kind, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  e->rc = rc;
  e->kind = kind;
  vsnprintf(e->msg, sizeof e->msg, fmt, ap);
  va_end(ap);
}

void bfx_err_model(bfx_err *e, const char *fname, char *msg, int nomem) {
  (void)fname;
  if (!msg || nomem) bfx_errf(e, SQLITE_NOMEM, BF_CT_ERR_NOMEM, "out of memory");
  else bfx_errf(e, SQLITE_ERROR, BF_CT_ERR_MODEL, "%s", msg);
  sqlite3_free(msg);
}

void bfx_error(sqlite3_context *ctx, const bfx_err *e) {
  if (e->kind >= 0) bf_stats_add((bf_counter)e->kind, 1);
  if (e->rc == SQLITE_NOMEM) sqlite3_result_error_nomem(ctx);
  else sqlite3_result_error(ctx, e->msg, -1);
}

/* Map an engine return code and message to an SQL error. */
static void engine_err(bfx_err *e, const char *fname, int rc, const char *msg) {
  switch (rc) {
    case BF_ERR_NOMEM: bfx_errf(e, SQLITE_NOMEM, BF_CT_ERR_NOMEM, "out of memory"); break;
    case BF_ERR_INPUT: bfx_errf(e, SQLITE_ERROR, BF_CT_ERR_INPUT, "%s: %s", fname, msg); break;
    case BF_ERR_TOOLONG: bfx_errf(e, SQLITE_ERROR, BF_CT_ERR_TOOLONG, "%s: %s", fname, msg); break;
    case BF_ERR_MODEL: case BF_ERR_IO:
      bfx_errf(e, SQLITE_ERROR, BF_CT_ERR_MODEL, "%s: %s", fname, msg); break;
    default: bfx_errf(e, SQLITE_ERROR, BF_CT_ERR_OTHER, "%s: %s", fname, msg); break;
  }
}

/* ---- tokenize ---- */

int bfx_max_tokens(bf_model *m) { return bf_model_config(m)->max_position_embeddings; }

int bfx_tokenize(const char *fname, bf_model *m, const char *s, int n,
                 bf_tokens *t, uint64_t *ns, bfx_err *e) {
  uint64_t t0 = bf_now_ns();
  long bad = bfx_utf8_invalid_at(s, n);
  if (bad >= 0) {
    bfx_errf(e, SQLITE_ERROR, BF_CT_ERR_INPUT,
             "%s: invalid UTF-8 at byte %ld of the text (byte value 0x%02X)", fname, bad,
             (unsigned char)s[bad]);
    return SQLITE_ERROR;
  }
  char msg[256] = "";
  int rc = bf_tokenize(bf_model_tokenizer(m), s, n, t, msg, sizeof msg);
  uint64_t dt = bf_now_ns() - t0;
  bf_stats_time(BF_ST_TOKENIZE, dt);
  if (ns) *ns += dt;
  if (rc != BF_OK) {
    engine_err(e, fname, rc, msg);
    return e->rc;
  }
  return SQLITE_OK;
}

/* ---- encoder ---- */

int bfx_encode(bf_model *m, int nseq, const bf_tokens *seqs, int k,
               bf_cand *out, bfx_result *r, bfx_err *e) {
  uint64_t waited = 0;
  char *gerr = NULL;
  int busy = 0;
  bf_run *run = bfx_guard_acquire(&waited, &gerr, &busy);
  bf_stats_time(BF_ST_QUEUE, waited);
  if (r) r->queue_ns += waited;
  if (!run) {
    if (busy) bfx_errf(e, SQLITE_ERROR, BF_CT_BUSY, "%s", gerr ? gerr : "bertfill: busy");
    else bfx_errf(e, SQLITE_NOMEM, BF_CT_ERR_NOMEM, "out of memory");
    sqlite3_free(gerr);
    return e->rc;
  }
  int rc = bfx_encode_on(m, run, nseq, seqs, k, out, r, e);
  bfx_guard_release(run);
  return rc;
}

int bfx_encode_on(bf_model *m, bf_run *run, int nseq, const bf_tokens *seqs, int k,
                  bf_cand *out, bfx_result *r, bfx_err *e) {
  char msg[256] = "";
  int rc = bf_fill(m, run, nseq, seqs, k, out, msg, sizeof msg);
  const bf_timings *tm = bf_run_timings(run);
  uint64_t enc = tm->embed_ns + tm->encode_ns + tm->head_ns, topk = tm->topk_ns;
  int tokens = tm->tokens, masks = tm->masks;
  if (rc != BF_OK) {
    engine_err(e, "bertfill", rc, msg);
    return e->rc;
  }
  if (tokens <= 0 || masks <= 0) {          /* count from the input when the engine does not */
    tokens = masks = 0;
    for (int i = 0; i < nseq; i++)
      if (seqs[i].n_masks > 0) { tokens += seqs[i].n; masks += seqs[i].n_masks; }
  }
  bf_stats_add(BF_CT_ENCODER_RUNS, 1);
  if (nseq > 1) bf_stats_add(BF_CT_BATCHES, 1);
  bf_stats_add(BF_CT_SEQS, (uint64_t)nseq);
  bf_stats_add(BF_CT_TOKENS, (uint64_t)tokens);
  bf_stats_add(BF_CT_MASKS, (uint64_t)masks);
  bf_stats_batch(nseq);
  bf_stats_time(BF_ST_ENCODE, enc);
  bf_stats_time(BF_ST_TOPK, topk);
  if (r) { r->encode_ns += enc; r->topk_ns += topk; }
  return SQLITE_OK;
}

int bfx_store(bfx_conn *c, bf_model *m, const bf_tokens *t, int k,
              const bf_cand *cands, bfx_result *r, int count) {
  if (c->cache_mode == BFX_CACHE_OFF || t->n_masks == 0) return -1;
  const char *fp = bf_model_fingerprint(m);
  if (!fp || !fp[0]) return -1;
  uint64_t t0 = bf_now_ns();
  int written = -1;
  bfc_lru_put(fp, t->ids, t->n, t->n_masks, k, cands);
  if (c->cache_mode == BFX_CACHE_ON) {
    written = bfc_table_put(c->db, fp, t->ids, t->n, t->n_masks, k, cands, c->cache_limit,
                            &c->writes_since_trim);
    if (count) bf_stats_add(written ? BF_CT_CACHE_WRITES : BF_CT_CACHE_SKIPPED, 1);
  }
  uint64_t dt = bf_now_ns() - t0;
  bf_stats_time(BF_ST_CACHE_WRITE, dt);
  if (r) r->cache_write_ns += dt;
  return written;
}

/* ---- lookup or encode ---- */

void bfx_result_clear(bfx_result *r) {
  sqlite3_free(r->c);
  memset(r, 0, sizeof *r);
}

int bfx_fill(const char *fname, bfx_conn *c, bf_model *m, const bf_tokens *t,
             int k, bfx_result *res, bfx_err *e) {
  int vocab = bf_model_config(m)->vocab_size;
  memset(res, 0, sizeof *res);
  if (k > vocab) k = vocab;
  res->k = k;
  res->n_masks = t->n_masks;
  res->source = "none";
  if (t->n_masks == 0) return SQLITE_OK;
  if (t->n > bfx_max_tokens(m)) {
    bfx_errf(e, SQLITE_ERROR, BF_CT_ERR_TOOLONG,
             "%s: the text is %d tokens long ([CLS] and [SEP] included) but the model "
             "takes at most %d (max_position_embeddings)", fname, t->n, bfx_max_tokens(m));
    return SQLITE_ERROR;
  }

  /* 1. the LRU, 2. the cache table */
  if (c->cache_mode != BFX_CACHE_OFF) {
    uint64_t t0 = bf_now_ns();
    const char *fp = bf_model_fingerprint(m);
    int have = 0, hit = 0;
    bf_cand *cands = NULL;
    if (fp && fp[0]) {
      hit = bfc_lru_get(fp, t->ids, t->n, t->n_masks, k, &have, &cands);
      if (hit == 1) {
        res->source = "lru";
        bf_stats_add(BF_CT_HIT_LRU, 1);
      } else if (hit == 0 && c->cache_mode == BFX_CACHE_ON) {
        hit = bfc_table_get(c->db, fp, t->ids, t->n, t->n_masks, k, vocab, &have, &cands);
        if (hit == 1) {
          res->source = "table";
          bf_stats_add(BF_CT_HIT_TABLE, 1);
          bfc_lru_put(fp, t->ids, t->n, t->n_masks, have, cands);
        }
      }
    }
    uint64_t dt = bf_now_ns() - t0;
    bf_stats_time(BF_ST_CACHE_READ, dt);
    res->cache_read_ns = dt;
    if (hit < 0) {
      bfx_errf(e, SQLITE_NOMEM, BF_CT_ERR_NOMEM, "out of memory");
      return SQLITE_NOMEM;
    }
    if (hit == 1) {
      res->c = cands;
      res->k = have;
      return SQLITE_OK;
    }
  }

  /* 3. the encoder: at least BFX_MIN_K candidates so every function can
  ** use the entry later. */
  bf_stats_add(BF_CT_MISS, 1);
  int keff = k > BFX_MIN_K ? k : BFX_MIN_K;
  if (keff > vocab) keff = vocab;
  size_t nc = (size_t)t->n_masks * (size_t)keff;
  bf_cand *cands = sqlite3_malloc64(nc * sizeof *cands);
  if (!cands) {
    bfx_errf(e, SQLITE_NOMEM, BF_CT_ERR_NOMEM, "out of memory");
    return SQLITE_NOMEM;
  }
  int rc = bfx_batch_encode(m, t, keff, cands, res, e);
  if (rc != SQLITE_OK) {
    sqlite3_free(cands);
    return rc;
  }
  res->source = "encoder";
  res->c = cands;
  res->k = keff;
  bfx_store(c, m, t, keff, cands, res, 1);
  return SQLITE_OK;
}

/* ---- trace ---- */

void bfx_trace(sqlite3 *db, const char *func, const char *text, int text_len,
               const bfx_result *r, uint64_t t0, uint64_t tok_ns, int tokens,
               int is_error) {
  if (!bf_trace_enabled(db)) return;
  bf_trace_rec rec;
  memset(&rec, 0, sizeof rec);
  rec.func = func;
  rec.text = text;          /* bytes as given, NUL bytes included */
  rec.text_len = text ? text_len : -1;
  rec.source = is_error ? "error" : (r && r->source ? r->source : "none");
  rec.total_ns = bf_now_ns() - t0;
  rec.tokenize_ns = tok_ns;
  if (r) {
    rec.queue_ns = r->queue_ns;
    rec.encode_ns = r->encode_ns;
    rec.topk_ns = r->topk_ns;
    rec.cache_read_ns = r->cache_read_ns;
    rec.cache_write_ns = r->cache_write_ns;
    rec.masks = r->n_masks;
  }
  rec.tokens = tokens;
  bf_trace_record(db, &rec);
}
