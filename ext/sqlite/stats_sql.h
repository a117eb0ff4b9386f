/*
** stats_sql.h — the SQL face of the process-wide stats (ext/sqlite/stats.h):
** the bertfill_stats table-valued function, bert_stats() (JSON) and
** bert_stats_reset().  Registered by sqlite3_bertfill_init (entry.c).
*/
#ifndef BERTFILL_SQLITE_STATS_SQL_H
#define BERTFILL_SQLITE_STATS_SQL_H

#include "sqlite3ext.h"

/* bert_stats(): every metric as one JSON object. */
void bfx_fn_stats(sqlite3_context *ctx, int argc, sqlite3_value **argv);
/* bert_stats_reset(): the same JSON, then every metric zeroed. */
void bfx_fn_stats_reset(sqlite3_context *ctx, int argc, sqlite3_value **argv);
/* bertfill_stats: eponymous-only, read-only; one row per metric. */
extern const sqlite3_module bfx_stats_module;

#endif
