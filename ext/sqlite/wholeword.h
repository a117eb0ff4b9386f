/*
** wholeword.h — the scalar SQL functions of whole-word fills (see
** wholeword.c).  Registered by sqlite3_bertfill_init (entry.c) with the
** connection's bfx_conn as their user data.
*/
#ifndef BERTFILL_SQLITE_WHOLEWORD_H
#define BERTFILL_SQLITE_WHOLEWORD_H

#include "sqlite3ext.h"

void bfx_fn_score(sqlite3_context *ctx, int argc, sqlite3_value **argv);      /* bert_score */
void bfx_fn_fill_joint(sqlite3_context *ctx, int argc, sqlite3_value **argv); /* bert_fill/2 */

#endif
