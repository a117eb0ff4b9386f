/*
** suspects.c — the spelling check of ext/engine/spelling.h in SQL:
**
**   SELECT * FROM fill_suspects('他在也不来了');
**   position byte_offset written written_score suggestion suggestion_score margin kind       corrected
**   1        3           在      0.004         再         0.93             5.4    same sound 他再也不来了
**
**   SELECT bert_correct('他在也不来了');            -- 他再也不来了
**   SELECT bert_spelling_sensitivity(0.1);         -- flag more (default 0.05)
**   SELECT * FROM fill_suspects_rows('SELECT rowid, text FROM t');
**       -- key text corrected suspects error: a whole column at batch speed
**
** fill_suspects(text [, mode]): one row per suspicious character, in
** order of position.  Columns:
**   position          0-based index of the character in the text (code points)
**   byte_offset       its first byte in the text
**   written           the character as written
**   written_score     P(written | the rest of the text), the position masked
**   suggestion        the character meant, most likely
**   suggestion_score  P(suggestion | the rest of the text)
**   margin            ln suggestion_score - ln written_score - cost(kind), nats
**                     (spelling.h's error model); a row has margin >=
**                     ln(1 / bert_spelling_sensitivity())
**   kind              'same sound', 'similar sound' or 'similar shape'
**   corrected         the text with that one fix
**   text, mode        HIDDEN: the arguments; mode 'fast' (default: one
**                     screening run, then the suspects verified) or
**                     'thorough' (every eligible character verified)
** bert_correct(text [, mode]): the text with every fix fill_suspects lists
** applied (NULL for NULL).  fill_suspects_rows(sql [, mode]): the query's
** (key, text) rows, each with `corrected` (bert_correct's result),
** `suspects` (JSON: the rows fill_suspects gives, [] for none) and `error`
** (NULL, or why this text cannot be checked: one bad row does not stop the
** others); texts are read in batches of BFX_BATCH_MAX_SEQS texts /
** BFX_BATCH_MAX_TOKENS tokens, each batch checked with one screening run
** and batched verifying runs: memory bounded by one batch.
**
** Errors: a text that is not TEXT (a number, a blob), a text holding [MASK]
** (use bert_fill or fill_candidates), a text longer than the model takes
** (the fill functions' message), invalid UTF-8, a mode other than 'fast'
** or 'thorough'.
**
** As the fill functions: a check is looked up in the memo cache first
** (spelling_memo.h: keyed by the model, the text's tokens, the mode and the
** sensitivity; bert_cache() turns it off, and a table row that does not fit
** the text is computed again); fill_suspects and bert_correct then go
** through the batcher (batcher.c: calls of other threads at the same time are
** checked together, one screening run over all their texts), counted as
** calls, hits and misses; fill_suspects_rows checks each batch of its rows
** on an encoder slot of its own and stores what it computes as
** bert_rows_cache() says (as fill_rows; it counts no calls, hits or misses).
** Every check runs on an encoder slot of the overload guard (counted as one
** encoder run of its texts).  The machine-wide queue (shared_batch.c) is not
** used: its slots hold candidate lists.
**
** Eponymous-only and DIRECTONLY (entry.c): as fill_candidates and
** fill_rows.
*/
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3
#include "suspects.h"
#include "batcher.h"
#include "bounds.h"
#include "conn.h"
#include "encode.h"
#include "lookup.h"
#include "rows.h"
#include "spelling.h"
#include "spelling_memo.h"
#include "stats.h"
#include "text.h"
#include "tvf.h"
#include "util.h"

/* ------------------------------------------------------ shared helpers */

/* The mode argument: 0 'fast' (or NULL, or absent), 1 'thorough'; -1 with e
** set for anything else. */
static int arg_mode(const char *fname, sqlite3_value *v, bfx_err *e) {
  if (!v || sqlite3_value_type(v) == SQLITE_NULL) return 0;
  if (sqlite3_value_type(v) == SQLITE_TEXT) {
    const char *z = (const char *)sqlite3_value_text(v);
    if (z && sqlite3_stricmp(z, "fast") == 0) return 0;
    if (z && sqlite3_stricmp(z, "thorough") == 0) return 1;
  }
  bfx_quote q;
  bfx_errf(e, SQLITE_ERROR, BF_CT_ERR_INPUT, "%s: the mode must be 'fast' or 'thorough' (got %s)",
           fname, bfx_arg_shown(v, &q));
  return -1;
}

/* The text argument: 1 with s, n for TEXT; 0 for NULL; -1 with e set for
** anything else. */
static int arg_text(const char *fname, sqlite3_value *v, const char **s, int *n, bfx_err *e) {
  int type = sqlite3_value_type(v);
  if (type == SQLITE_NULL) return 0;
  if (type != SQLITE_TEXT) {
    bfx_quote q;
    bfx_errf(e, SQLITE_ERROR, BF_CT_ERR_INPUT, "%s: the text must be TEXT (got %s)", fname,
             bfx_arg_shown(v, &q));
    return -1;
  }
  *s = (const char *)sqlite3_value_text(v);
  *n = sqlite3_value_bytes(v);
  if (!*s) {
    bfx_err_nomem(e);
    return -1;
  }
  return 1;
}

/* Tokenize s[0..n) for a check into t: invalid UTF-8, a [MASK], a text
** longer than the model takes are errors (e). */
static int tokenize_text(const char *fname, bf_model *m, const char *s, int n, bf_tokens *t,
                         uint64_t *ns, bfx_err *e) {
  int rc = bfx_tokenize(fname, m, s, n, t, ns, e);
  if (rc != SQLITE_OK) return rc;
  if (t->n_masks > 0) {
    bfx_errf(e, SQLITE_ERROR, BF_CT_ERR_INPUT,
             "%s: the text holds [MASK]; %s checks written text: to fill blanks use bert_fill "
             "or fill_candidates",
             fname, fname);
    return SQLITE_ERROR;
  }
  if (t->n > bfx_max_tokens(m)) {
    bfx_errf(e, SQLITE_ERROR, BF_CT_ERR_TOOLONG,
             "%s: the text is %d tokens long ([CLS] and [SEP] included) but the model "
             "takes at most %d (max_position_embeddings): %d too many; check it in parts",
             fname, t->n, bfx_max_tokens(m), t->n - bfx_max_tokens(m));
    return SQLITE_ERROR;
  }
  return SQLITE_OK;
}

/* s[0..n) with findings f[0..nf) applied (all, or only the one `only` >= 0). */
static void append_corrected(sqlite3_str *out, const char *s, int n, const bf_suspect *f, int nf,
                             int only) {
  int at = 0;
  for (int i = 0; i < nf; i++) {
    if (only >= 0 && i != only) continue;
    char b[8];
    size_t bl = bf_utf8_put(f[i].suggestion, b);
    sqlite3_str_append(out, s + at, f[i].byte_offset - at);
    sqlite3_str_append(out, b, (int)bl);
    at = f[i].byte_offset + f[i].byte_len;
  }
  sqlite3_str_append(out, s + at, n - at);
}

/* One text checked alone: call begun (counted, model), tokenized, looked up
** in the memo, checked (through the batcher) and stored. */
typedef struct one_check {
  bfx_call call;
  bf_spell_text x;
  bfx_result res; /* no candidates: where the findings came from, the times (the trace) */
} one_check;

static const bfx_call_kind suspects_kind = {"fill_suspects", "fill_suspects", BF_CT_CALLS,
                                            BF_ST_CALL};
static const bfx_call_kind correct_kind = {"bert_correct", "bert_correct", BF_CT_CALLS, BF_ST_CALL};

static int one_check_run(one_check *k, bfx_conn *c, const bfx_call_kind *kind, const char *s, int n,
                         int thorough) {
  bfx_call *call = &k->call;
  memset(k, 0, sizeof *k);
  int rc = bfx_call_begin_with(call, c, kind, s, n, tokenize_text);
  if (rc != SQLITE_OK) return rc;
  k->x = (bf_spell_text){.s = s, .n = n, .t = &call->t};
  k->res.source = "none";
  double sensitivity = c->spelling_sensitivity;
  int hit = bfx_spell_memo_get(c, call->m, &k->x, thorough, sensitivity, 1, 0, &k->res.source,
                               &k->res.times);
  if (hit < 0) {
    bfx_err_nomem(&call->e);
    return SQLITE_NOMEM;
  }
  if (hit) return SQLITE_OK;
  bf_stats_add(BF_CT_MISS, 1);
  rc = bfx_batch_spell(call->m, &k->x, thorough, sensitivity, &k->res.times, &call->e);
  if (rc != SQLITE_OK) return rc;
  k->res.source = "encoder";
  bfx_spell_memo_put(c, call->m, 1, &k->x, thorough, sensitivity, -1, &k->res.times);
  return SQLITE_OK;
}

static void one_check_end(one_check *k, int failed) {
  bfx_call_end(&k->call, &k->res, failed);
  free(k->x.found);
  k->x.found = NULL;
}

/* ---------------------------------------------------------- bert_correct */

void bfx_fn_correct(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  bfx_conn *c = sqlite3_user_data(ctx);
  bfx_err e = BFX_ERR_NONE;
  const char *s;
  int n;
  int got = arg_text("bert_correct", argv[0], &s, &n, &e);
  int thorough = got < 0 ? -1 : arg_mode("bert_correct", argc > 1 ? argv[1] : NULL, &e);
  if (got < 0 || thorough < 0) {
    bfx_error(ctx, &e);
    return;
  }
  if (got == 0) return; /* NULL */
  one_check k;
  int failed = one_check_run(&k, c, &correct_kind, s, n, thorough) != SQLITE_OK;
  if (failed) bfx_error(ctx, &k.call.e);
  else {
    sqlite3_str *out = sqlite3_str_new(NULL);
    append_corrected(out, s, n, k.x.found, k.x.n_found, -1);
    bfx_result_str(ctx, out);
  }
  one_check_end(&k, failed);
}

/* ------------------------------------------------- bert_spelling_sensitivity */

void bfx_fn_spelling_sensitivity(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  bfx_conn *c = sqlite3_user_data(ctx);
  if (argc > 0 && sqlite3_value_type(argv[0]) != SQLITE_NULL) {
    int type = sqlite3_value_numeric_type(argv[0]);
    double v = type == SQLITE_INTEGER || type == SQLITE_FLOAT ? sqlite3_value_double(argv[0]) : NAN;
    if (!(v >= BF_SPELL_MIN_SENSITIVITY && v <= BF_SPELL_MAX_SENSITIVITY)) {
      bfx_quote q;
      char *m = sqlite3_mprintf("bert_spelling_sensitivity: the sensitivity must be a number "
                                "from %g to %g (default %g; higher flags more) (got %s)",
                                BF_SPELL_MIN_SENSITIVITY, BF_SPELL_MAX_SENSITIVITY,
                                BF_SPELL_DEFAULT_SENSITIVITY, bfx_arg_shown(argv[0], &q));
      if (m) sqlite3_result_error(ctx, m, -1);
      else sqlite3_result_error_nomem(ctx);
      sqlite3_free(m);
      return;
    }
    c->spelling_sensitivity = v;
  }
  sqlite3_result_double(ctx, c->spelling_sensitivity);
}

/* --------------------------------------------------------- fill_suspects */

enum {
  COL_POSITION,
  COL_BYTE_OFFSET,
  COL_WRITTEN,
  COL_WRITTEN_SCORE,
  COL_SUGGESTION,
  COL_SUGGESTION_SCORE,
  COL_MARGIN,
  COL_KIND,
  COL_CORRECTED,
  COL_TEXT,
  COL_MODE
};

typedef struct sus_vtab {
  sqlite3_vtab base;
  bfx_conn *c;
} sus_vtab;

typedef struct sus_cursor {
  sqlite3_vtab_cursor base;
  char *text; /* copy of the text */
  int n;
  int thorough;
  bf_suspect *found;
  int n_found;
  int row;
} sus_cursor;

static int sus_connect_as(sqlite3 *db, void *aux, sqlite3_vtab **ppVtab, const char *schema) {
  int rc = sqlite3_declare_vtab(db, schema);
  if (rc != SQLITE_OK) return rc;
  sus_vtab *v = sqlite3_malloc(sizeof *v);
  if (!v) return SQLITE_NOMEM;
  memset(v, 0, sizeof *v);
  v->c = aux;
  sqlite3_vtab_config(db, SQLITE_VTAB_DIRECTONLY);
  *ppVtab = &v->base;
  return SQLITE_OK;
}

static int sus_connect(sqlite3 *db, void *aux, int argc, const char *const *argv,
                       sqlite3_vtab **ppVtab, char **pzErr) {
  (void)argc, (void)argv, (void)pzErr;
  return sus_connect_as(db, aux, ppVtab,
                        "CREATE TABLE x(position INTEGER, byte_offset INTEGER, written TEXT, "
                        "written_score REAL, suggestion TEXT, suggestion_score REAL, margin REAL, "
                        "kind TEXT, corrected TEXT, text HIDDEN, mode HIDDEN)");
}

static int sus_disconnect(sqlite3_vtab *pVtab) {
  sqlite3_free(pVtab);
  return SQLITE_OK;
}

static int sus_open(sqlite3_vtab *pVtab, sqlite3_vtab_cursor **ppCursor) {
  (void)pVtab;
  sus_cursor *cur = sqlite3_malloc(sizeof *cur);
  if (!cur) return SQLITE_NOMEM;
  memset(cur, 0, sizeof *cur);
  *ppCursor = &cur->base;
  return SQLITE_OK;
}

static void sus_reset(sus_cursor *cur) {
  sqlite3_free(cur->text);
  free(cur->found);
  memset(&cur->text, 0, sizeof *cur - offsetof(sus_cursor, text));
}

static int sus_close(sqlite3_vtab_cursor *cursor) {
  sus_reset((sus_cursor *)cursor);
  sqlite3_free(cursor);
  return SQLITE_OK;
}

static int sus_best_index(sqlite3_vtab *pVtab, sqlite3_index_info *info) {
  (void)pVtab;
  int rc = bfx_tvf_best_index(info, COL_TEXT, COL_MODE);
  if (rc == SQLITE_OK && (info->idxNum & BFX_TVF_TEXT) && info->nOrderBy == 1 &&
      info->aOrderBy[0].iColumn == COL_POSITION && !info->aOrderBy[0].desc)
    info->orderByConsumed = 1;
  return rc;
}

/* An error of an xFilter, on the cursor's table. */
static int vtab_error(sqlite3_vtab_cursor *cursor, bfx_err *e) {
  sqlite3_free(cursor->pVtab->zErrMsg);
  cursor->pVtab->zErrMsg = sqlite3_mprintf("%s", e->msg);
  if (e->kind >= 0) bf_stats_add((bf_counter)e->kind, 1);
  return e->rc != SQLITE_OK ? e->rc : SQLITE_ERROR;
}

static int sus_filter(sqlite3_vtab_cursor *cursor, int idxNum, const char *idxStr, int argc,
                      sqlite3_value **argv) {
  (void)idxStr, (void)argc;
  sus_cursor *cur = (sus_cursor *)cursor;
  sus_reset(cur);
  bfx_err e = BFX_ERR_NONE;
  if (!(idxNum & BFX_TVF_TEXT)) {
    bfx_errf(&e, SQLITE_ERROR, BF_CT_ERR_INPUT,
             "fill_suspects: the text argument is missing; use fill_suspects(text [, mode]), "
             "e.g. SELECT * FROM fill_suspects('他在也不来了')");
    return vtab_error(cursor, &e);
  }
  const char *s;
  int n;
  int got = arg_text("fill_suspects", argv[0], &s, &n, &e);
  int thorough = got < 0 ? -1
                         : arg_mode("fill_suspects", (idxNum & BFX_TVF_K) ? argv[1] : NULL, &e);
  if (got < 0 || thorough < 0) return vtab_error(cursor, &e);
  cur->thorough = thorough;
  if (got == 0) return SQLITE_OK; /* NULL: no rows */
  one_check k;
  int rc = one_check_run(&k, ((sus_vtab *)cursor->pVtab)->c, &suspects_kind, s, n, thorough);
  if (rc != SQLITE_OK) {
    rc = vtab_error(cursor, &k.call.e);
    one_check_end(&k, 1);
    return rc;
  }
  cur->text = sqlite3_malloc64((size_t)n + 1);
  if (!cur->text) {
    one_check_end(&k, 1);
    return SQLITE_NOMEM;
  }
  memcpy(cur->text, s, (size_t)n);
  cur->text[n] = 0;
  cur->n = n;
  cur->found = k.x.found;
  cur->n_found = k.x.n_found;
  k.x.found = NULL;
  one_check_end(&k, 0);
  return SQLITE_OK;
}

static int sus_next(sqlite3_vtab_cursor *cursor) {
  ((sus_cursor *)cursor)->row++;
  return SQLITE_OK;
}

static int sus_eof(sqlite3_vtab_cursor *cursor) {
  sus_cursor *cur = (sus_cursor *)cursor;
  return cur->row >= cur->n_found;
}

static void result_char(sqlite3_context *ctx, uint32_t c) {
  char b[8];
  size_t n = bf_utf8_put(c, b);
  sqlite3_result_text(ctx, b, (int)n, SQLITE_TRANSIENT);
}

static int sus_column(sqlite3_vtab_cursor *cursor, sqlite3_context *ctx, int col) {
  sus_cursor *cur = (sus_cursor *)cursor;
  const bf_suspect *f = &cur->found[cur->row];
  switch (col) {
    case COL_POSITION: sqlite3_result_int(ctx, f->position); break;
    case COL_BYTE_OFFSET: sqlite3_result_int(ctx, f->byte_offset); break;
    case COL_WRITTEN: result_char(ctx, f->written); break;
    case COL_WRITTEN_SCORE: sqlite3_result_double(ctx, f->written_score); break;
    case COL_SUGGESTION: result_char(ctx, f->suggestion); break;
    case COL_SUGGESTION_SCORE: sqlite3_result_double(ctx, f->suggestion_score); break;
    case COL_MARGIN: sqlite3_result_double(ctx, f->margin); break;
    case COL_KIND:
      sqlite3_result_text(ctx, bf_confusion_kind_name(f->kind), -1, SQLITE_STATIC);
      break;
    case COL_CORRECTED: {
      sqlite3_str *out = sqlite3_str_new(NULL);
      append_corrected(out, cur->text, cur->n, cur->found, cur->n_found, cur->row);
      bfx_result_str(ctx, out);
      break;
    }
    case COL_TEXT: sqlite3_result_text(ctx, cur->text, cur->n, SQLITE_TRANSIENT); break;
    case COL_MODE:
      sqlite3_result_text(ctx, cur->thorough ? "thorough" : "fast", -1, SQLITE_STATIC);
      break;
  }
  return SQLITE_OK;
}

static int sus_rowid(sqlite3_vtab_cursor *cursor, sqlite_int64 *pRowid) {
  *pRowid = ((sus_cursor *)cursor)->row + 1;
  return SQLITE_OK;
}

const sqlite3_module bfx_suspects_module = {
  .iVersion = 0,
  .xConnect = sus_connect,
  .xBestIndex = sus_best_index,
  .xDisconnect = sus_disconnect,
  .xOpen = sus_open,
  .xClose = sus_close,
  .xFilter = sus_filter,
  .xNext = sus_next,
  .xEof = sus_eof,
  .xColumn = sus_column,
  .xRowid = sus_rowid,
};

/* ---------------------------------------------------- fill_suspects_rows */

enum { RCOL_KEY, RCOL_TEXT, RCOL_CORRECTED, RCOL_SUSPECTS, RCOL_ERROR, RCOL_SQL, RCOL_MODE };

/* One row of the query, kept until it is yielded. */
typedef struct srow {
  sqlite3_value *key, *text;
  bf_tokens t;
  int checked;     /* its tokens go to the batch's check */
  char *error;     /* sqlite3_malloc'ed, or NULL */
  bf_spell_text x; /* after the check */
} srow;

typedef struct srows_cursor {
  sqlite3_vtab_cursor base;
  bfx_conn *c;
  bf_model *m;
  sqlite3_stmt *query;
  char *sql;
  int thorough;
  double sensitivity; /* the connection's, when the scan started */
  int64_t table_room; /* rows the cache table may still take ('room') */
  int done;           /* the query has no more rows */
  srow rows[BFX_BATCH_MAX_SEQS];
  int nrows, at; /* rows of the batch, the one yielded */
  sqlite3_int64 rowid;
} srows_cursor;

static int srows_connect(sqlite3 *db, void *aux, int argc, const char *const *argv,
                         sqlite3_vtab **ppVtab, char **pzErr) {
  (void)argc, (void)argv, (void)pzErr;
  return sus_connect_as(db, aux, ppVtab,
                        "CREATE TABLE x(key, text, corrected TEXT, suspects TEXT, error TEXT, "
                        "sql HIDDEN, mode HIDDEN)");
}

static int srows_open(sqlite3_vtab *pVtab, sqlite3_vtab_cursor **ppCursor) {
  srows_cursor *cur = sqlite3_malloc(sizeof *cur);
  if (!cur) return SQLITE_NOMEM;
  memset(cur, 0, sizeof *cur);
  cur->c = ((sus_vtab *)pVtab)->c;
  *ppCursor = &cur->base;
  return SQLITE_OK;
}

static void srow_clear(srow *r) {
  sqlite3_value_free(r->key);
  sqlite3_value_free(r->text);
  bf_tokens_free(&r->t);
  sqlite3_free(r->error);
  free(r->x.found);
  memset(r, 0, sizeof *r);
}

static void srows_batch_clear(srows_cursor *cur) {
  for (int i = 0; i < cur->nrows; i++) srow_clear(&cur->rows[i]);
  cur->nrows = cur->at = 0;
}

static void srows_reset(srows_cursor *cur) {
  srows_batch_clear(cur);
  sqlite3_finalize(cur->query);
  cur->query = NULL;
  sqlite3_free(cur->sql);
  cur->sql = NULL;
  if (cur->m) bf_model_release(cur->m);
  cur->m = NULL;
  cur->done = 0;
  cur->rowid = 0;
}

static int srows_close(sqlite3_vtab_cursor *cursor) {
  srows_reset((srows_cursor *)cursor);
  sqlite3_free(cursor);
  return SQLITE_OK;
}

/* The next batch of rows: read until BFX_BATCH_MAX_SEQS rows or
** BFX_BATCH_MAX_TOKENS tokens to check, then one check of them all. */
static int srows_next_batch(srows_cursor *cur, bfx_err *e) {
  srows_batch_clear(cur);
  int tokens = 0, nx = 0;
  bf_spell_text xs[BFX_BATCH_MAX_SEQS];
  int which[BFX_BATCH_MAX_SEQS];
  while (!cur->done && cur->nrows < BFX_BATCH_MAX_SEQS && tokens < BFX_BATCH_MAX_TOKENS) {
    int rc = sqlite3_step(cur->query);
    if (rc == SQLITE_DONE) {
      cur->done = 1;
      break;
    }
    if (rc != SQLITE_ROW) {
      bfx_errf(e, SQLITE_ERROR, BF_CT_ERR_INPUT, "fill_suspects_rows: the query failed: %s",
               sqlite3_errmsg(cur->c->db));
      return SQLITE_ERROR;
    }
    srow *r = &cur->rows[cur->nrows++];
    r->key = sqlite3_value_dup(sqlite3_column_value(cur->query, 0));
    r->text = sqlite3_value_dup(sqlite3_column_value(cur->query, 1));
    if (!r->key || !r->text) {
      bfx_err_nomem(e);
      return SQLITE_NOMEM;
    }
    const char *s;
    int n;
    bfx_err why = BFX_ERR_NONE;
    int got = arg_text("fill_suspects_rows", r->text, &s, &n, &why);
    if (got > 0 &&
        tokenize_text("fill_suspects_rows", cur->m, s, n, &r->t, NULL, &why) == SQLITE_OK) {
      r->checked = 1;
      r->x = (bf_spell_text){.s = s, .n = n, .t = &r->t};
      int hit = bfx_spell_memo_get(cur->c, cur->m, &r->x, cur->thorough, cur->sensitivity, 0, 1,
                                   NULL, NULL);
      if (hit < 0) {
        bfx_err_nomem(e);
        return SQLITE_NOMEM;
      }
      if (hit) continue;
      xs[nx] = r->x;
      which[nx++] = cur->nrows - 1;
      tokens += r->t.n;
    } else if (got != 0) {
      if (why.rc == SQLITE_NOMEM) {
        bfx_err_nomem(e);
        return SQLITE_NOMEM;
      }
      if (why.kind >= 0) bf_stats_add((bf_counter)why.kind, 1);
      r->error = sqlite3_mprintf("%s", why.msg);
      if (!r->error) {
        bfx_err_nomem(e);
        return SQLITE_NOMEM;
      }
    }
  }
  if (nx == 0) return SQLITE_OK;
  int rc = bfx_encode_spelling(cur->m, nx, xs, cur->thorough, cur->sensitivity, NULL, e);
  if (rc != SQLITE_OK) return rc;
  for (int i = 0; i < nx; i++) cur->rows[which[i]].x = xs[i];
  bfx_conn *c = cur->c;
  int64_t room;
  if (bfx_cache_rows_store(c, cur->table_room, &room))
    cur->table_room -= bfx_spell_memo_put(c, cur->m, nx, xs, cur->thorough, cur->sensitivity, room,
                                          NULL);
  return SQLITE_OK;
}

static int srows_advance(srows_cursor *cur) {
  if (cur->at + 1 < cur->nrows) {
    cur->at++;
    return SQLITE_OK;
  }
  bfx_err e = BFX_ERR_NONE;
  if (srows_next_batch(cur, &e) != SQLITE_OK) return vtab_error(&cur->base, &e);
  return SQLITE_OK;
}

static int srows_best_index(sqlite3_vtab *pVtab, sqlite3_index_info *info) {
  (void)pVtab;
  return bfx_tvf_best_index(info, RCOL_SQL, RCOL_MODE);
}

static int srows_filter(sqlite3_vtab_cursor *cursor, int idxNum, const char *idxStr, int argc,
                        sqlite3_value **argv) {
  (void)idxStr, (void)argc;
  srows_cursor *cur = (srows_cursor *)cursor;
  srows_reset(cur);
  bfx_err e = BFX_ERR_NONE;
  if (!(idxNum & BFX_TVF_TEXT) || sqlite3_value_type(argv[0]) != SQLITE_TEXT) {
    bfx_quote q;
    bfx_errf(&e, SQLITE_ERROR, BF_CT_ERR_INPUT,
             "fill_suspects_rows: the query must be TEXT (got %s); use fill_suspects_rows(sql "
             "[, mode]), e.g. SELECT * FROM fill_suspects_rows('SELECT rowid, text FROM t')",
             (idxNum & BFX_TVF_TEXT) ? bfx_arg_shown(argv[0], &q) : "none");
    return vtab_error(cursor, &e);
  }
  cur->thorough = arg_mode("fill_suspects_rows", (idxNum & BFX_TVF_K) ? argv[1] : NULL, &e);
  if (cur->thorough < 0) return vtab_error(cursor, &e);
  cur->sql = sqlite3_mprintf("%s", (const char *)sqlite3_value_text(argv[0]));
  if (!cur->sql) return SQLITE_NOMEM;
  bf_model *m = bfx_conn_model_current(cur->c, &e);
  if (!m) return vtab_error(cursor, &e);
  bf_model_retain(m);
  cur->m = m;
  cur->sensitivity = cur->c->spelling_sensitivity;
  cur->table_room = bfx_cache_rows_room(cur->c);
  if (bfx_prepare_key_text_query(cur->c->db, "fill_suspects_rows", cur->sql, &cur->query, &e) !=
      SQLITE_OK)
    return vtab_error(cursor, &e);
  if (srows_next_batch(cur, &e) != SQLITE_OK) return vtab_error(cursor, &e);
  return SQLITE_OK;
}

static int srows_next(sqlite3_vtab_cursor *cursor) {
  srows_cursor *cur = (srows_cursor *)cursor;
  cur->rowid++;
  return srows_advance(cur);
}

static int srows_eof(sqlite3_vtab_cursor *cursor) {
  srows_cursor *cur = (srows_cursor *)cursor;
  return cur->at >= cur->nrows;
}

/* The findings of a row as JSON: the columns of fill_suspects. */
static void suspects_json(sqlite3_str *out, const srow *r, const char *s, int n) {
  sqlite3_str_appendchar(out, 1, '[');
  for (int i = 0; i < r->x.n_found; i++) {
    const bf_suspect *f = &r->x.found[i];
    char w[8] = {0}, g[8] = {0};
    bf_utf8_put(f->written, w);
    bf_utf8_put(f->suggestion, g);
    sqlite3_str_appendf(out,
                        "%s{\"position\":%d,\"byte_offset\":%d,\"written\":\"%s\","
                        "\"written_score\":%!.9g,\"suggestion\":\"%s\",\"suggestion_score\":%!.9g,"
                        "\"margin\":%!.9g,\"kind\":\"%s\",\"corrected\":",
                        i ? "," : "", f->position, f->byte_offset, w, (double)f->written_score, g,
                        (double)f->suggestion_score, f->margin, bf_confusion_kind_name(f->kind));
    sqlite3_str *one = sqlite3_str_new(NULL);
    append_corrected(one, s, n, r->x.found, r->x.n_found, i);
    char *z = sqlite3_str_finish(one);
    bfx_json_string(out, z);
    sqlite3_free(z);
    sqlite3_str_appendchar(out, 1, '}');
  }
  sqlite3_str_appendchar(out, 1, ']');
}

static int srows_column(sqlite3_vtab_cursor *cursor, sqlite3_context *ctx, int col) {
  srows_cursor *cur = (srows_cursor *)cursor;
  const srow *r = &cur->rows[cur->at];
  const char *s = r->checked ? (const char *)sqlite3_value_text(r->text) : NULL;
  int n = r->checked ? sqlite3_value_bytes(r->text) : 0;
  switch (col) {
    case RCOL_KEY: sqlite3_result_value(ctx, r->key); break;
    case RCOL_TEXT: sqlite3_result_value(ctx, r->text); break;
    case RCOL_CORRECTED:
      if (r->checked) {
        sqlite3_str *out = sqlite3_str_new(NULL);
        append_corrected(out, s, n, r->x.found, r->x.n_found, -1);
        bfx_result_str(ctx, out);
      }
      break;
    case RCOL_SUSPECTS:
      if (r->checked) {
        sqlite3_str *out = sqlite3_str_new(NULL);
        suspects_json(out, r, s, n);
        bfx_result_str(ctx, out);
      }
      break;
    case RCOL_ERROR:
      if (r->error) sqlite3_result_text(ctx, r->error, -1, SQLITE_TRANSIENT);
      break;
    case RCOL_SQL: sqlite3_result_text(ctx, cur->sql, -1, SQLITE_TRANSIENT); break;
    case RCOL_MODE:
      sqlite3_result_text(ctx, cur->thorough ? "thorough" : "fast", -1, SQLITE_STATIC);
      break;
  }
  return SQLITE_OK;
}

static int srows_rowid(sqlite3_vtab_cursor *cursor, sqlite_int64 *pRowid) {
  *pRowid = ((srows_cursor *)cursor)->rowid + 1;
  return SQLITE_OK;
}

const sqlite3_module bfx_suspects_rows_module = {
  .iVersion = 0,
  .xConnect = srows_connect,
  .xBestIndex = srows_best_index,
  .xDisconnect = sus_disconnect,
  .xOpen = srows_open,
  .xClose = srows_close,
  .xFilter = srows_filter,
  .xNext = srows_next,
  .xEof = srows_eof,
  .xColumn = srows_column,
  .xRowid = srows_rowid,
};
