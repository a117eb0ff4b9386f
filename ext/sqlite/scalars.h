/*
** scalars.h — the scalar SQL functions that fill, tokenize, load and
** describe (see scalars.c).  Registered by sqlite3_bertfill_init (entry.c)
** with the connection's bfx_conn as their user data.
*/
#ifndef BERTFILL_SQLITE_SCALARS_H
#define BERTFILL_SQLITE_SCALARS_H

#include "sqlite3ext.h"
#include "conn.h"
#include "lookup.h"

void bfx_fn_fill(sqlite3_context *ctx, int argc, sqlite3_value **argv);     /* bert_fill */
void bfx_fn_tokenize(sqlite3_context *ctx, int argc, sqlite3_value **argv); /* bert_tokenize */
void bfx_fn_load(sqlite3_context *ctx, int argc, sqlite3_value **argv);     /* bert_load */
void bfx_fn_debug(sqlite3_context *ctx, int argc, sqlite3_value **argv);    /* bert_debug */
void bfx_fn_version(sqlite3_context *ctx, int argc, sqlite3_value **argv);  /* bert_version */

/* What bert_fill(text) and bert_fill(text, 'joint') share: the result of ctx
** is the text s[0..n) with each [MASK] replaced by row 0 of the candidates
** best finds for the call's tokens (the text as it is when it has no mask),
** or the error of the call (kind: its name, counter and stage, lookup.h).
** best fills res, or sets call->e and returns an SQLite error code. */
typedef int (*bfx_fill_best)(bfx_call *call, bfx_result *res);
void bfx_fill_text(sqlite3_context *ctx, bfx_conn *c, const bfx_call_kind *kind, const char *s,
                   int n, bfx_fill_best best);

#endif
