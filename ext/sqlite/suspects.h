/*
** suspects.h — the spelling check in SQL (see suspects.c): fill_suspects
** (table-valued), bert_correct (scalar), fill_suspects_rows (the column
** form) and the setting bert_spelling_sensitivity.  Registered by
** sqlite3_bertfill_init (entry.c) with the connection's bfx_conn.
*/
#ifndef BERTFILL_SQLITE_SUSPECTS_H
#define BERTFILL_SQLITE_SUSPECTS_H

#include "sqlite3ext.h"

extern const sqlite3_module bfx_suspects_module;
extern const sqlite3_module bfx_suspects_rows_module;
void bfx_fn_correct(sqlite3_context *ctx, int argc, sqlite3_value **argv);
void bfx_fn_spelling_sensitivity(sqlite3_context *ctx, int argc, sqlite3_value **argv);

#endif
