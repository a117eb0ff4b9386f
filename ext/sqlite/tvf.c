/*
** tvf.c — the query plan and the xFilter of the table-valued functions of a
** text (see tvf.h).
*/
#include <string.h>

#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3
#include "tvf.h"
#include "bounds.h"
#include "text.h"

int bfx_tvf_best_index(sqlite3_index_info *info, int col_text, int col_k) {
  int text_i = -1, k_i = -1, text_unusable = 0, k_unusable = 0;
  for (int i = 0; i < info->nConstraint; i++) {
    const struct sqlite3_index_constraint *cs = &info->aConstraint[i];
    if (cs->iColumn != col_text && cs->iColumn != col_k) continue;
    if (cs->op != SQLITE_INDEX_CONSTRAINT_EQ) continue; /* checked by SQLite on our rows */
    if (!cs->usable) {
      if (cs->iColumn == col_text) text_unusable = 1;
      else k_unusable = 1;
      continue;
    }
    if (cs->iColumn == col_text && text_i < 0) text_i = i;
    if (cs->iColumn == col_k && k_i < 0) k_i = i;
  }
  if (text_i < 0) {
    if (text_unusable) return SQLITE_CONSTRAINT;
    info->idxNum = 0; /* a plan that no one would choose */
    info->estimatedCost = 1e300;
    info->estimatedRows = 2147483647;
    return SQLITE_OK;
  }
  if (k_i < 0 && k_unusable) return SQLITE_CONSTRAINT;
  info->aConstraintUsage[text_i].argvIndex = 1;
  info->aConstraintUsage[text_i].omit = 1;
  info->idxNum = BFX_TVF_TEXT;
  if (k_i >= 0) {
    info->aConstraintUsage[k_i].argvIndex = 2;
    info->aConstraintUsage[k_i].omit = 1;
    info->idxNum |= BFX_TVF_K;
  }
  /* One encoder run (or a cache lookup) per scan: expensive compared with
  ** reading a table row, and independent of any index. */
  info->estimatedCost = 1000.0;
  info->estimatedRows = 5;
  return SQLITE_OK;
}

void bfx_tvf_text_clear(bfx_tvf_text *x) {
  sqlite3_free(x->text);
  sqlite3_free(x->off);
  if (x->m) bf_model_release(x->m);
  memset(x, 0, sizeof *x);
}

int bfx_tvf_k(sqlite3_vtab *vt, const char *fname, int max_k, sqlite3_int64 dflt, int idxNum,
              int argc, sqlite3_value **argv, sqlite3_int64 *k) {
  *k = dflt;
  if (!(idxNum & BFX_TVF_K) || argc < 2 || sqlite3_value_type(argv[1]) == SQLITE_NULL)
    return SQLITE_OK;
  if (bfx_arg_int(argv[1], 1, max_k, k)) return SQLITE_OK;
  char *m = bfx_int_arg_msg(fname, "k", 1, NULL, max_k, NULL, argv[1]);
  if (!m) return SQLITE_NOMEM;
  bfx_err e = BFX_ERR_NONE;
  bfx_errf(&e, SQLITE_ERROR, BF_CT_ERR_INPUT, "%s", m);
  sqlite3_free(m);
  return bfx_error_vtab(vt, &e);
}

int bfx_tvf_filter(const bfx_tvf_fn *fn, bfx_conn *c, sqlite3_vtab_cursor *cursor, int idxNum,
                   int argc, sqlite3_value **argv, bfx_tvf_text *x, bfx_result *res) {
  sqlite3_vtab *vt = cursor->pVtab;
  const char *name = fn->kind.fname;
  if (!(idxNum & BFX_TVF_TEXT) || argc < 1) {
    bfx_err e = BFX_ERR_NONE;
    bfx_errf(&e, SQLITE_ERROR, BF_CT_ERR_INPUT,
             "%s: missing text argument; use %s(text [, k]), e.g. SELECT * FROM %s('%s', 5)", name,
             name, name, fn->example);
    return bfx_error_vtab(vt, &e);
  }
  sqlite3_int64 k;
  int rc = bfx_tvf_k(vt, name, fn->max_k, BFX_DEFAULT_K, idxNum, argc, argv, &k);
  if (rc != SQLITE_OK) return rc;
  const char *s;
  int n;
  int a = bfx_arg_text(argv[0], &s, &n);
  if (a == 0) return SQLITE_OK; /* NULL text: no rows */
  if (a < 0) return SQLITE_NOMEM;

  bfx_call call;
  if (bfx_call_begin(&call, c, &fn->kind, s, n) != SQLITE_OK) goto failed;
  bf_model_retain(call.m);
  x->m = call.m;
  x->text = sqlite3_malloc64((size_t)n + 1);
  x->off = sqlite3_malloc64((size_t)(call.t.n_masks ? call.t.n_masks : 1) * sizeof *x->off);
  if (!x->text || !x->off) {
    bfx_err_nomem(&call.e);
    goto failed;
  }
  memcpy(x->text, s, (size_t)n);
  x->text[n] = 0;
  x->n = n;
  if (call.t.n_masks == 0) goto done; /* nothing to fill: no rows */
  if (bfx_find_masks(name, call.m, s, n, &call.t, x->off, &call.e) != SQLITE_OK) goto failed;
  if (fn->rows(cursor, &call, (int)k, res) != SQLITE_OK) goto failed;
done:
  bfx_call_end(&call, res, 0);
  return SQLITE_OK;
failed:
  rc = bfx_error_vtab(vt, &call.e);
  bfx_call_end(&call, res, 1);
  return rc;
}
