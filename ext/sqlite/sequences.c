/*
** sequences.c — fill_sequences, a table-valued function that lists the k
** best whole fills of a text: all its [MASK]s filled together, ranked by
** their joint probability (the chain rule, joint.h), found by beam search.
**
**   SELECT rank, fill, score, sequence
**     FROM fill_sequences('学习要持之以恒，不能三天打鱼，两天[MASK][MASK]。', 3);
**
**   rank  fill  score   sequence
**   ----  ----  ------  ----------------------------------------
**   1     晒网  0.0531  学习要持之以恒，不能三天打鱼，两天晒网。
**   2     ...
**
** Columns:
**   rank       1..k, best first
**   fill       the tokens at the masks, joined ("##" word-piece prefixes
**              removed, as in fill_candidates.token)
**   tokens     JSON array of those tokens as the vocabulary has them
**              (what bert_score takes as an answer)
**   token_ids  JSON array of their ids
**   score      P, the joint probability of the fill (with one mask: the
**              score fill_candidates gives that token)
**   sequence   the text with every mask filled, everything else as written
**   text       HIDDEN: the input text (first argument)
**   k          HIDDEN: the beam width and number of rows (second argument;
**              default 5, from 1 to 100, and at most the vocabulary size)
**
** With one mask the rows are fill_candidates(text, k)'s: the same tokens in
** the same order with the same scores.  A NULL text, or one without a mask,
** gives no rows.  The text may come from another table in a join:
**
**   SELECT s.id, f.fill FROM s, fill_sequences(s.text, 3) f WHERE f.rank = 1;
**
** Each of the n masks costs one encoder run of the k hypotheses; results are
** memoized (cache.h) under the model, the tokens and k.  Eponymous-only and
** DIRECTONLY, as fill_candidates (registered in entry.c).
*/
#include <string.h>

#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3
#include "sequences.h"
#include "bounds.h"
#include "conn.h"
#include "joint.h"
#include "stats.h"
#include "text.h"
#include "tvf.h"

enum { COL_RANK, COL_FILL, COL_TOKENS, COL_TOKEN_IDS, COL_SCORE, COL_SEQUENCE, COL_TEXT, COL_K };

typedef struct seq_vtab {
  sqlite3_vtab base;
  bfx_conn *c;
} seq_vtab;

typedef struct seq_cursor {
  sqlite3_vtab_cursor base;
  bfx_tvf_text in; /* the text, its [MASK]s and the model (tvf.h) */
  bfx_result res;  /* rows: res.c[mask * res.k + row] */
  int k;           /* the k asked for (capped at the vocabulary) */
  sqlite3_int64 row, nrows;
} seq_cursor;

static int seq_connect(sqlite3 *db, void *aux, int argc, const char *const *argv,
                       sqlite3_vtab **ppVtab, char **pzErr) {
  (void)argc;
  (void)argv;
  (void)pzErr;
  int rc = sqlite3_declare_vtab(db, "CREATE TABLE x(rank INTEGER, fill TEXT, tokens TEXT, "
                                    "token_ids TEXT, score REAL, sequence TEXT, text HIDDEN, "
                                    "k HIDDEN)");
  if (rc != SQLITE_OK) return rc;
  seq_vtab *v = sqlite3_malloc(sizeof *v);
  if (!v) return SQLITE_NOMEM;
  memset(v, 0, sizeof *v);
  v->c = aux;
  sqlite3_vtab_config(db, SQLITE_VTAB_DIRECTONLY);
  *ppVtab = &v->base;
  return SQLITE_OK;
}

static int seq_disconnect(sqlite3_vtab *pVtab) {
  sqlite3_free(pVtab);
  return SQLITE_OK;
}

static int seq_open(sqlite3_vtab *pVtab, sqlite3_vtab_cursor **ppCursor) {
  (void)pVtab;
  seq_cursor *cur = sqlite3_malloc(sizeof *cur);
  if (!cur) return SQLITE_NOMEM;
  memset(cur, 0, sizeof *cur);
  *ppCursor = &cur->base;
  return SQLITE_OK;
}

static void cursor_reset(seq_cursor *cur) {
  bfx_result_clear(&cur->res);
  bfx_tvf_text_clear(&cur->in);
  memset((char *)cur + sizeof cur->base, 0, sizeof *cur - sizeof cur->base);
}

static int seq_close(sqlite3_vtab_cursor *cursor) {
  cursor_reset((seq_cursor *)cursor);
  sqlite3_free(cursor);
  return SQLITE_OK;
}

/* The plan (tvf.h); rows come ordered by rank, so ORDER BY rank is free. */
static int seq_best_index(sqlite3_vtab *pVtab, sqlite3_index_info *info) {
  (void)pVtab;
  int rc = bfx_tvf_best_index(info, COL_TEXT, COL_K);
  if (rc != SQLITE_OK || !(info->idxNum & BFX_TVF_TEXT)) return rc;
  if (info->nOrderBy == 1 && info->aOrderBy[0].iColumn == COL_RANK && !info->aOrderBy[0].desc)
    info->orderByConsumed = 1;
  return SQLITE_OK;
}

/* The rows: the k best whole fills, by beam search (joint.h). */
static int seq_rows(sqlite3_vtab_cursor *cursor, bfx_call *call, int k, bfx_result *res) {
  seq_cursor *cur = (seq_cursor *)cursor;
  int rc = bfx_joint_fill(call->c, call->m, &call->t, k, BFX_JOINT_CALL, res, &call->e);
  if (rc != SQLITE_OK) return rc;
  cur->k = res->k;
  cur->nrows = res->k;
  return SQLITE_OK;
}

static const bfx_tvf_fn fill_sequences = {
  .kind = {"fill_sequences", "fill_sequences", BF_CT_JOINT_CALLS, BF_ST_JOINT},
  .example = "两天[MASK][MASK]",
  .max_k = BFX_SEQUENCES_MAX_K,
  .rows = seq_rows,
};

static int seq_filter(sqlite3_vtab_cursor *cursor, int idxNum, const char *idxStr, int argc,
                      sqlite3_value **argv) {
  (void)idxStr;
  seq_cursor *cur = (seq_cursor *)cursor;
  cursor_reset(cur);
  int rc = bfx_tvf_filter(&fill_sequences, ((seq_vtab *)cursor->pVtab)->c, cursor, idxNum, argc,
                          argv, &cur->in, &cur->res);
  if (rc != SQLITE_OK) cursor_reset(cur);
  return rc;
}

static int seq_next(sqlite3_vtab_cursor *cursor) {
  ((seq_cursor *)cursor)->row++;
  return SQLITE_OK;
}

static int seq_eof(sqlite3_vtab_cursor *cursor) {
  seq_cursor *cur = (seq_cursor *)cursor;
  return cur->row >= cur->nrows;
}

/* The tokens of the current row as text: their display forms joined
** (COL_FILL), a JSON array of vocabulary entries (COL_TOKENS) or of ids
** (COL_TOKEN_IDS). */
static void row_tokens(sqlite3_context *ctx, const seq_cursor *cur, int col) {
  const bfx_result *r = &cur->res;
  const bf_tokenizer *tk = bf_model_tokenizer(cur->in.m);
  sqlite3_str *out = sqlite3_str_new(NULL);
  if (col != COL_FILL) sqlite3_str_appendchar(out, 1, '[');
  for (int i = 0; i < r->n_masks; i++) {
    int32_t id = r->c[(size_t)i * r->k + (size_t)cur->row].id;
    if (col == COL_FILL) {
      const char *tok = bf_model_token(cur->in.m, id);
      sqlite3_str_appendall(out, tok ? tok : "");
      continue;
    }
    if (i) sqlite3_str_appendchar(out, 1, ',');
    if (col == COL_TOKEN_IDS) sqlite3_str_appendf(out, "%d", (int)id);
    else bfx_json_string(out, bf_tokenizer_token(tk, id));
  }
  if (col != COL_FILL) sqlite3_str_appendchar(out, 1, ']');
  bfx_result_str(ctx, out);
}

static int seq_column(sqlite3_vtab_cursor *cursor, sqlite3_context *ctx, int col) {
  seq_cursor *cur = (seq_cursor *)cursor;
  switch (col) {
    case COL_RANK: sqlite3_result_int64(ctx, cur->row + 1); break;
    case COL_FILL:
    case COL_TOKENS:
    case COL_TOKEN_IDS: row_tokens(ctx, cur, col); break;
    case COL_SCORE: sqlite3_result_double(ctx, bfx_joint_p(&cur->res, (int)cur->row)); break;
    case COL_SEQUENCE: {
      sqlite3_str *out = sqlite3_str_new(NULL);
      bfx_append_filled(out, cur->in.m, cur->in.text, cur->in.n, cur->in.off, cur->res.n_masks,
                        cur->res.c + cur->row, (size_t)cur->res.k);
      bfx_result_str(ctx, out);
      break;
    }
    case COL_TEXT: sqlite3_result_text(ctx, cur->in.text, cur->in.n, SQLITE_TRANSIENT); break;
    case COL_K: sqlite3_result_int(ctx, cur->k); break;
  }
  return SQLITE_OK;
}

static int seq_rowid(sqlite3_vtab_cursor *cursor, sqlite_int64 *pRowid) {
  *pRowid = ((seq_cursor *)cursor)->row + 1;
  return SQLITE_OK;
}

/* xCreate NULL: eponymous-only (no CREATE VIRTUAL TABLE); no xUpdate: read-only. */
const sqlite3_module bfx_sequences_module = {
  .iVersion = 0,
  .xConnect = seq_connect,
  .xBestIndex = seq_best_index,
  .xDisconnect = seq_disconnect,
  .xOpen = seq_open,
  .xClose = seq_close,
  .xFilter = seq_filter,
  .xNext = seq_next,
  .xEof = seq_eof,
  .xColumn = seq_column,
  .xRowid = seq_rowid,
};
