/*
** settings.h — the SQL functions that read and change settings: the cache
** of the connection, and the process-wide encoder settings (see
** settings.c).  Registered by sqlite3_bertfill_init (entry.c) with the
** connection's bfx_conn as their user data.
*/
#ifndef BERTFILL_SQLITE_SETTINGS_H
#define BERTFILL_SQLITE_SETTINGS_H

#include "sqlite3ext.h"

void bfx_fn_cache(sqlite3_context *ctx, int argc, sqlite3_value **argv);
void bfx_fn_cache_limit(sqlite3_context *ctx, int argc, sqlite3_value **argv);
void bfx_fn_cache_lru(sqlite3_context *ctx, int argc, sqlite3_value **argv);
void bfx_fn_threads(sqlite3_context *ctx, int argc, sqlite3_value **argv);
void bfx_fn_max_concurrent(sqlite3_context *ctx, int argc, sqlite3_value **argv);
void bfx_fn_busy_timeout(sqlite3_context *ctx, int argc, sqlite3_value **argv);
void bfx_fn_batching(sqlite3_context *ctx, int argc, sqlite3_value **argv);
void bfx_fn_rows_cache(sqlite3_context *ctx, int argc, sqlite3_value **argv);

#endif
