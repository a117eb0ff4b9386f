/*
** prefill.h — bert_prefill(text), the aggregate that fills the memo cache
** for a whole column at batch speed (see prefill.c).  Registered by
** sqlite3_bertfill_init (entry.c) with the connection's bfx_conn as its
** user data.
*/
#ifndef BERTFILL_SQLITE_PREFILL_H
#define BERTFILL_SQLITE_PREFILL_H

#include "sqlite3ext.h"

void bfx_prefill_step(sqlite3_context *ctx, int argc, sqlite3_value **argv);
void bfx_prefill_final(sqlite3_context *ctx);

#endif
