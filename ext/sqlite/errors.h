/*
** errors.h — errors of the SQLite layer: an SQLite result code, the stats
** counter it counts, and a message for the user; reported on a function's
** context or a virtual table.
**
** Every message is valid UTF-8, whatever it quotes, so that clients that
** decode it (Python's sqlite3, Node.js) see the error and not a decoding
** failure.  User input (an argument, a path, a text) goes into a message
** through bfx_quote: at most BFX_QUOTE_MAX bytes of it, invalid bytes and
** control characters written as \xNN:
**   bfx_quote q;
**   bfx_errf(e, SQLITE_ERROR, BF_CT_ERR_INPUT, "f: k must be ... (got %s)",
**            bfx_quoted(&q, z, n));
** and bfx_errf escapes whatever invalid bytes reach it anyway (an engine
** message naming a file, SQLite's own message).
*/
#ifndef BERTFILL_SQLITE_ERRORS_H
#define BERTFILL_SQLITE_ERRORS_H

#include "sqlite3ext.h"
#include "bounds.h"

typedef struct bfx_err {
  int rc;   /* SQLITE_OK, SQLITE_ERROR or SQLITE_NOMEM */
  int kind; /* bf_counter to count when reported, or -1 */
  char msg[1024];
} bfx_err;

#define BFX_ERR_NONE \
  { 0, -1, "" }

/* The message is formatted, then every byte that is not part of valid
** UTF-8 is written as \xNN; a message too long for e->msg is cut between
** characters. */
void bfx_errf(bfx_err *e, int rc, int kind, const char *fmt, ...)
  __attribute__((format(printf, 4, 5)));
/* SQLITE_NOMEM, "out of memory" (counted as err_nomem). */
void bfx_err_nomem(bfx_err *e);
/* An engine return code (BF_ERR_*) and its message, prefixed "fname: ". */
void bfx_err_engine(bfx_err *e, const char *fname, int rc, const char *msg);

/* Count e in the stats without reporting it (an error kept in a row). */
void bfx_err_count(const bfx_err *e);

/* User input s[0..n) (n < 0: up to its NUL) made fit for a message, in q:
** valid UTF-8 as it is, except control characters; those and every byte
** that is not part of valid UTF-8 as \xNN (so x'eda080' is \xED\xA0\x80);
** longer than BFX_QUOTE_MAX bytes: its start and its end around "...".
** Returns q->s.  NULL s gives "". */
typedef struct bfx_quote {
  char s[4 * BFX_QUOTE_MAX + 4];
} bfx_quote;
const char *bfx_quoted(bfx_quote *q, const char *s, long n);

/* Report e as the result of ctx, and count it. */
void bfx_error(sqlite3_context *ctx, const bfx_err *e);
/* Report e as the error of a virtual table's statement, and count it;
** returns the code for the xFilter (or other method) to return. */
int bfx_error_vtab(sqlite3_vtab *vt, const bfx_err *e);

#endif
