/*
** tvf.c — the query plan of the table-valued functions (see tvf.h).
*/
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3
#include "tvf.h"

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
