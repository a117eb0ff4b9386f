/*
** errors.h — errors of the SQLite layer: an SQLite result code, the stats
** counter it counts, and a message for the user; reported on a function's
** context or a virtual table.
*/
#ifndef BERTFILL_SQLITE_ERRORS_H
#define BERTFILL_SQLITE_ERRORS_H

#include "sqlite3ext.h"

typedef struct bfx_err {
  int rc;   /* SQLITE_OK, SQLITE_ERROR or SQLITE_NOMEM */
  int kind; /* bf_counter to count when reported, or -1 */
  char msg[512];
} bfx_err;

#define BFX_ERR_NONE \
  { 0, -1, "" }

void bfx_errf(bfx_err *e, int rc, int kind, const char *fmt, ...)
  __attribute__((format(printf, 4, 5)));
/* SQLITE_NOMEM, "out of memory" (counted as err_nomem). */
void bfx_err_nomem(bfx_err *e);
/* An engine return code (BF_ERR_*) and its message, prefixed "fname: ". */
void bfx_err_engine(bfx_err *e, const char *fname, int rc, const char *msg);

/* Count e in the stats without reporting it (an error kept in a row). */
void bfx_err_count(const bfx_err *e);
/* Report e as the result of ctx, and count it. */
void bfx_error(sqlite3_context *ctx, const bfx_err *e);
/* Report e as the error of a virtual table's statement, and count it;
** returns the code for the xFilter (or other method) to return. */
int bfx_error_vtab(sqlite3_vtab *vt, const bfx_err *e);

#endif
