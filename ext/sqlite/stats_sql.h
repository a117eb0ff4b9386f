/*
** sqlite_stats.h — SQL surface of the process-wide stats (ext/stats.h):
** the bertfill_stats table-valued function, bert_stats() (JSON),
** bert_stats_reset(), and the optional per-call trace.
** Called once per connection from sqlite3_bertfill_init (ext/sqlite_ext.c).
*/
#ifndef BERTFILL_SQLITE_STATS_H
#define BERTFILL_SQLITE_STATS_H
#include <stdint.h>
#include "sqlite3ext.h"

int bf_register_stats(sqlite3 *db, char **pzErrMsg);

/* Per-call trace (off by default; see bert_trace() in sqlite_stats.c).
** The caller fills one record per bert_fill / fill_candidates call and hands
** it to bf_trace_record, which appends it to the bertfill_trace table of db
** when tracing is on for that connection (a no-op otherwise). */
typedef struct bf_trace_rec {
  const char *func;        /* "bert_fill", "fill_candidates", ... */
  const char *text;        /* the input text (may be NULL) */
  int text_len;            /* its length in bytes (it may hold NUL); < 0: NUL-terminated */
  const char *source;      /* "lru", "table", "encoder", "error" */
  uint64_t total_ns, queue_ns, tokenize_ns, encode_ns, topk_ns, cache_read_ns, cache_write_ns;
  int tokens, masks;
} bf_trace_rec;
int bf_trace_enabled(sqlite3 *db);
void bf_trace_record(sqlite3 *db, const bf_trace_rec *rec);

#endif
