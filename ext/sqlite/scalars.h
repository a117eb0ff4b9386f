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

#endif
