/*
** candidates.c — fill_candidates, a table-valued function that lists
** the top-k candidates of every [MASK] in a text, built the way SQLite's own
** generate_series (ext/misc/series.c) and json_each are.
**
**   SELECT * FROM fill_candidates('今天天气真[MASK]啊', 3);
**
**   mask  rank  token  token_id  score   sequence
**   ----  ----  -----  --------  ------  ---------------
**   0     1     好     1962      0.62    今天天气真好啊
**   0     2     ...
**
** Columns:
**   mask      0-based index of the [MASK] in the text (left to right)
**   rank      1..k, best first
**   token     the candidate as text (a "##" word-piece prefix removed)
**   token_id  its id in the model's vocabulary
**   score     its probability (softmax over the whole vocabulary)
**   sequence  the text with this mask filled and the other masks left as
**             they are
**   text      HIDDEN: the input text (first argument)
**   k         HIDDEN: candidates per mask (second argument; default 5, from
**             1 to 1000, and at most the vocabulary size)
**
** Rows come out ordered by mask, then rank (an ORDER BY on those columns
** costs nothing).  A NULL text, or one without a mask, gives no rows.  The
** text argument is required; it may come from another table in a join:
**
**   SELECT s.id, c.token, c.score
**     FROM sentences s, fill_candidates(s.text) c WHERE c.rank = 1;
**
** Results come from the memo cache when they can (see cache.h).  The module
** is eponymous-only (no CREATE VIRTUAL TABLE) and DIRECTONLY: usable in
** top-level SQL, never from a view or trigger (registered in entry.c),
** unless bertfill was loaded through sqlite3_bertfill_trusted_init.
*/
#include <string.h>

#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3
#include "candidates.h"
#include "bounds.h"
#include "conn.h"
#include "lookup.h"
#include "stats.h"
#include "text.h"
#include "tvf.h"

enum { COL_MASK, COL_RANK, COL_TOKEN, COL_TOKEN_ID, COL_SCORE, COL_SEQUENCE, COL_TEXT, COL_K };

typedef struct cand_vtab {
  sqlite3_vtab base;
  bfx_conn *c;
} cand_vtab;

typedef struct cand_cursor {
  sqlite3_vtab_cursor base;
  bfx_tvf_text in; /* the text, its [MASK]s and the model (tvf.h) */
  int k;           /* rows per mask */
  int n_masks;
  bfx_result res; /* candidates: res.c[mask * res.k + rank] */
  sqlite3_int64 row, nrows;
} cand_cursor;

static int cand_connect(sqlite3 *db, void *aux, int argc, const char *const *argv,
                        sqlite3_vtab **ppVtab, char **pzErr) {
  (void)argc;
  (void)argv;
  (void)pzErr;
  int rc = sqlite3_declare_vtab(db, "CREATE TABLE x(mask INTEGER, rank INTEGER, token TEXT, "
                                    "token_id INTEGER, "
                                    "score REAL, sequence TEXT, text HIDDEN, k HIDDEN)");
  if (rc != SQLITE_OK) return rc;
  cand_vtab *v = sqlite3_malloc(sizeof *v);
  if (!v) return SQLITE_NOMEM;
  memset(v, 0, sizeof *v);
  v->c = aux;
  if (!v->c->trusted_schema) sqlite3_vtab_config(db, SQLITE_VTAB_DIRECTONLY); /* see entry.c */
  *ppVtab = &v->base;
  return SQLITE_OK;
}

static int cand_disconnect(sqlite3_vtab *pVtab) {
  sqlite3_free(pVtab);
  return SQLITE_OK;
}

static int cand_open(sqlite3_vtab *pVtab, sqlite3_vtab_cursor **ppCursor) {
  (void)pVtab;
  cand_cursor *cur = sqlite3_malloc(sizeof *cur);
  if (!cur) return SQLITE_NOMEM;
  memset(cur, 0, sizeof *cur);
  *ppCursor = &cur->base;
  return SQLITE_OK;
}

static void cursor_reset(cand_cursor *cur) {
  bfx_result_clear(&cur->res);
  bfx_tvf_text_clear(&cur->in);
  cur->k = cur->n_masks = 0;
  cur->row = cur->nrows = 0;
}

static int cand_close(sqlite3_vtab_cursor *cursor) {
  cursor_reset((cand_cursor *)cursor);
  sqlite3_free(cursor);
  return SQLITE_OK;
}

/* The plan (tvf.h); rows come ordered by (mask, rank), so ORDER BY mask /
** mask, rank is free. */
static int cand_best_index(sqlite3_vtab *pVtab, sqlite3_index_info *info) {
  (void)pVtab;
  int rc = bfx_tvf_best_index(info, COL_TEXT, COL_K);
  if (rc != SQLITE_OK || !(info->idxNum & BFX_TVF_TEXT)) return rc;
  if (info->nOrderBy >= 1 && info->nOrderBy <= 2) {
    int ok = info->aOrderBy[0].iColumn == COL_MASK && !info->aOrderBy[0].desc;
    if (info->nOrderBy == 2)
      ok = ok && info->aOrderBy[1].iColumn == COL_RANK && !info->aOrderBy[1].desc;
    if (ok) info->orderByConsumed = 1;
  }
  return SQLITE_OK;
}

/* The rows: the candidates of every mask, from the memo cache or the encoder. */
static int cand_rows(sqlite3_vtab_cursor *cursor, bfx_call *call, int k, bfx_result *res) {
  cand_cursor *cur = (cand_cursor *)cursor;
  int rc = bfx_lookup_or_encode(call->c, call->m, &call->t, k, res, &call->e);
  if (rc != SQLITE_OK) return rc;
  int vocab = bf_model_config(call->m)->vocab_size;
  cur->k = k < vocab ? k : vocab;
  cur->n_masks = call->t.n_masks;
  cur->nrows = (sqlite3_int64)cur->n_masks * cur->k;
  return SQLITE_OK;
}

static const bfx_tvf_fn fill_candidates = {
  .kind = {"fill_candidates", "fill_candidates", BF_CT_CALLS, BF_ST_CALL},
  .example = "今天天气真[MASK]啊",
  .max_k = BF_MAX_K,
  .rows = cand_rows,
};

static int cand_filter(sqlite3_vtab_cursor *cursor, int idxNum, const char *idxStr, int argc,
                       sqlite3_value **argv) {
  (void)idxStr;
  cand_cursor *cur = (cand_cursor *)cursor;
  cursor_reset(cur);
  int rc = bfx_tvf_filter(&fill_candidates, ((cand_vtab *)cursor->pVtab)->c, cursor, idxNum, argc,
                          argv, &cur->in, &cur->res);
  if (rc != SQLITE_OK) cursor_reset(cur);
  return rc;
}

static int cand_next(sqlite3_vtab_cursor *cursor) {
  ((cand_cursor *)cursor)->row++;
  return SQLITE_OK;
}

static int cand_eof(sqlite3_vtab_cursor *cursor) {
  cand_cursor *cur = (cand_cursor *)cursor;
  return cur->row >= cur->nrows;
}

static int cand_column(sqlite3_vtab_cursor *cursor, sqlite3_context *ctx, int col) {
  cand_cursor *cur = (cand_cursor *)cursor;
  int mask = (int)(cur->row / cur->k), rank = (int)(cur->row % cur->k);
  const bf_cand *cd = &cur->res.c[(size_t)mask * cur->res.k + rank];
  switch (col) {
    case COL_MASK: sqlite3_result_int(ctx, mask); break;
    case COL_RANK: sqlite3_result_int(ctx, rank + 1); break;
    case COL_TOKEN: {
      const char *tok = bf_model_token(cur->in.m, cd->id);
      sqlite3_result_text(ctx, tok ? tok : "", -1, SQLITE_TRANSIENT);
      break;
    }
    case COL_TOKEN_ID: sqlite3_result_int(ctx, cd->id); break;
    case COL_SCORE: sqlite3_result_double(ctx, (double)cd->prob); break;
    case COL_SEQUENCE: {
      const char *tok = bf_model_token(cur->in.m, cd->id);
      if (!tok) tok = "";
      int at = cur->in.off[mask];
      /* lengths, not %.*s: the text may hold NUL bytes */
      size_t tl = strlen(tok), rest = (size_t)(cur->in.n - at - BF_MASK_TEXT_LEN);
      size_t len = (size_t)at + tl + rest;
      char *z = sqlite3_malloc64(len + 1);
      if (!z) return SQLITE_NOMEM;
      memcpy(z, cur->in.text, (size_t)at);
      memcpy(z + at, tok, tl);
      memcpy(z + at + tl, cur->in.text + at + BF_MASK_TEXT_LEN, rest);
      z[len] = 0;
      sqlite3_result_text64(ctx, z, len, sqlite3_free, SQLITE_UTF8);
      break;
    }
    case COL_TEXT: sqlite3_result_text(ctx, cur->in.text, cur->in.n, SQLITE_TRANSIENT); break;
    case COL_K: sqlite3_result_int(ctx, cur->k); break;
  }
  return SQLITE_OK;
}

static int cand_rowid(sqlite3_vtab_cursor *cursor, sqlite_int64 *pRowid) {
  *pRowid = ((cand_cursor *)cursor)->row + 1;
  return SQLITE_OK;
}

/* xCreate NULL: eponymous-only (no CREATE VIRTUAL TABLE); no xUpdate: read-only. */
const sqlite3_module bfx_candidates_module = {
  .iVersion = 0,
  .xConnect = cand_connect,
  .xBestIndex = cand_best_index,
  .xDisconnect = cand_disconnect,
  .xOpen = cand_open,
  .xClose = cand_close,
  .xFilter = cand_filter,
  .xNext = cand_next,
  .xEof = cand_eof,
  .xColumn = cand_column,
  .xRowid = cand_rowid,
};
