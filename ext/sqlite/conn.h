/*
** conn.h — the state bertfill keeps for one database connection: its
** model (from the registry, models.c), its cache settings.  One bfx_conn is the user data of every
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
#include "errors.h"

/* Cache modes of a connection (bert_cache). */
enum { BFX_CACHE_OFF = 0, BFX_CACHE_MEMORY = 1, BFX_CACHE_ON = 2 };
/* Where fill_rows stores what it computes (bert_rows_cache): nowhere; the
** LRU always and the table while it has room (default); both always. */
enum { BFX_ROWS_CACHE_NONE = 0, BFX_ROWS_CACHE_ROOM = 1, BFX_ROWS_CACHE_ALL = 2 };

typedef struct bfx_conn {
  sqlite3 *db;
  int refs;                 /* registrations holding this state */
  bf_model *model;          /* current model (retained), NULL until first use */
  const char *model_source; /* "bert_load", "BERTFILL_MODEL" or "default" */
  int cache_mode;           /* BFX_CACHE_* */
  int64_t cache_limit;      /* max rows of the cache table */
  int64_t writes_since_trim;
  int rows_cache;              /* BFX_ROWS_CACHE_* */
  double spelling_sensitivity; /* bert_spelling_sensitivity (suspects.c) */
  int trusted_schema;          /* loaded with sqlite3_bertfill_trusted_init (entry.c) */
} bfx_conn;

/* A new state for db with one reference, its cache settings from
** BERTFILL_CACHE and BERTFILL_CACHE_LIMIT; NULL when out of memory. */
bfx_conn *bfx_conn_new(sqlite3 *db);
void bfx_conn_ref(bfx_conn *c);
/* Drop a reference (the xDestroy of every registration): at zero the
** connection lets go of its model and the state is freed. */
void bfx_conn_unref(void *c);

/* The connection's model, chosen on first use (BERTFILL_MODEL, else the
** shipped default model); NULL with e set when there is none (the message
** says how to provide one) or out of memory. */
bf_model *bfx_conn_model(bfx_conn *c, bfx_err *e);
/* The same for a call that computes with the model (every fill function):
** NULL with the engine's "changed on disk" / "rewritten in place" error when
** its weights file changed since loading (one fstat; bf_model_check), even
** where the answer could come from the cache. */
bf_model *bfx_conn_model_current(bfx_conn *c, bfx_err *e);
/* bert_load: make the model in dir (NULL: back to BERTFILL_MODEL / the
** default model), loaded in precision, the connection's model.  SQLITE_OK, or an error code with
** e set (the current model stays). */
int bfx_conn_set_model(bfx_conn *c, const char *dir, bf_precision precision, bfx_err *e);

/* "on", "memory", "off" (any letter case) -> BFX_CACHE_*; -1 otherwise. */
int bfx_cache_mode_parse(const char *s);
const char *bfx_cache_mode_name(int mode);
/* "none", "room", "all" (any letter case) -> BFX_ROWS_CACHE_*; -1 otherwise. */
int bfx_rows_cache_parse(const char *s);
const char *bfx_rows_cache_name(int mode);

#endif
