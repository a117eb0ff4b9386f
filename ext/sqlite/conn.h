/*
** conn.h — the state bertfill keeps for one database connection: its
** model, its cache settings.  One bfx_conn is the user data of every
** function and module that sqlite3_bertfill_init registers on the
** connection; each registration holds a reference, and the state is freed
** when SQLite drops the last of them (sqlite3_close, or the extension
** loaded again).
*/
#ifndef BERTFILL_SQLITE_CONN_H
#define BERTFILL_SQLITE_CONN_H

#include <stdint.h>
#include "sqlite3ext.h"
#include "bertfill.h"

/* Cache modes of a connection (bert_cache). */
enum { BFX_CACHE_OFF = 0, BFX_CACHE_MEMORY = 1, BFX_CACHE_ON = 2 };

typedef struct bfx_conn {
  sqlite3 *db;
  int refs;                 /* registrations holding this state */
  bf_model *model;          /* current model (retained), NULL until first use */
  const char *model_source; /* "bert_load", "BERTFILL_MODEL" or "default" */
  int cache_mode;           /* BFX_CACHE_* */
  int64_t cache_limit;      /* max rows of the cache table */
  int64_t writes_since_trim;
} bfx_conn;

/* A new state for db with one reference, its cache settings from
** BERTFILL_CACHE and BERTFILL_CACHE_LIMIT; NULL when out of memory. */
bfx_conn *bfx_conn_new(sqlite3 *db);
void bfx_conn_ref(bfx_conn *c);
/* Drop a reference (the xDestroy of every registration): at zero the
** connection's model is released and the state freed. */
void bfx_conn_unref(void *c);

/* "on", "memory", "off" (any letter case) -> BFX_CACHE_*; -1 otherwise. */
int bfx_cache_mode_parse(const char *s);
const char *bfx_cache_mode_name(int mode);

#endif
