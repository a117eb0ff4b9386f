/*
** errors.c — building and reporting the SQLite layer's errors (see errors.h).
** Every error is counted in the process-wide stats when it is reported.
*/
#include <stdarg.h>
#include <stdio.h>

#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3
#include "errors.h"
#include "bertfill.h"
#include "stats.h"

void bfx_errf(bfx_err *e, int rc, int kind, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  e->rc = rc;
  e->kind = kind;
  vsnprintf(e->msg, sizeof e->msg, fmt, ap);
  va_end(ap);
}

void bfx_err_nomem(bfx_err *e) { bfx_errf(e, SQLITE_NOMEM, BF_CT_ERR_NOMEM, "out of memory"); }

void bfx_err_engine(bfx_err *e, const char *fname, int rc, const char *msg) {
  int kind;
  switch (rc) {
    case BF_ERR_NOMEM: bfx_err_nomem(e); return;
    case BF_ERR_INPUT: kind = BF_CT_ERR_INPUT; break;
    case BF_ERR_TOOLONG: kind = BF_CT_ERR_TOOLONG; break;
    case BF_ERR_MODEL:
    case BF_ERR_IO: kind = BF_CT_ERR_MODEL; break;
    default: kind = BF_CT_ERR_OTHER; break;
  }
  bfx_errf(e, SQLITE_ERROR, kind, "%s: %s", fname, msg);
}

void bfx_err_count(const bfx_err *e) {
  if (e->kind >= 0) bf_stats_add((bf_counter)e->kind, 1);
}

void bfx_error(sqlite3_context *ctx, const bfx_err *e) {
  bfx_err_count(e);
  if (e->rc == SQLITE_NOMEM) sqlite3_result_error_nomem(ctx);
  else sqlite3_result_error(ctx, e->msg, -1);
}

int bfx_error_vtab(sqlite3_vtab *vt, const bfx_err *e) {
  bfx_err_count(e);
  if (e->rc == SQLITE_NOMEM) return SQLITE_NOMEM;
  sqlite3_free(vt->zErrMsg);
  vt->zErrMsg = sqlite3_mprintf("%s", e->msg);
  return SQLITE_ERROR;
}
