/*
** entry.c — bertfill as a loadable SQLite extension: fill the [MASK]
** blanks of Chinese text with a BERT masked language model, in SQL.
**
** Build with `make` (makes ./bertfill.so), then in the sqlite3 shell:
**
**   .load ./bertfill
**   SELECT bert_fill('今天天气真[MASK]啊');            -- the text, each [MASK] filled
**   SELECT * FROM fill_candidates('今天天气真[MASK]啊', 3);
**       -- mask rank token token_id score sequence: top 3 per mask
**   SELECT s.id, c.token, c.score
**     FROM sentences s, fill_candidates(s.text) c WHERE c.rank = 1;
**   SELECT bert_tokenize('今天天气真[MASK]啊');
**       -- ["[CLS]","今","天","天","气","真","[MASK]","啊","[SEP]"]
**
** or from Python:  conn.enable_load_extension(True); conn.load_extension("./bertfill")
**
** The model.  Each connection uses one model, chosen on first use:
**   SELECT bert_load('/path/to/bert-base-chinese');   -- this connection
**   BERTFILL_MODEL=/path/to/model-dir                 -- environment variable
**   model/bertfill-zh-tiny                            -- shipped with bertfill
** A model directory is the Hugging Face layout: config.json, vocab.txt,
** model.safetensors (+ tokenizer_config.json).  Loaded models are shared by
** every connection of the process (one copy, reference counted).
**
** Filling a whole column at batch speed: bert_prefill(text) is an aggregate
** that runs the encoder over the distinct texts in batches and stores the
** results in the cache; the UPDATE that follows reads them from the cache.
**   SELECT bert_prefill(text) FROM t;           -- returns texts computed
**   UPDATE t SET filled = bert_fill(text);
** Progress on stderr ("bert_prefill: 1200 texts, 1100 computed, 85/s") when
** stderr is a terminal or BERTFILL_PROGRESS=1 (BERTFILL_PROGRESS=0: never).
**
** The memo cache (see cache.h).  Results are kept in an in-memory
** LRU (process-wide) and in the table bertfill_cache of the main database,
** keyed by the model's fingerprint and the tokens the model sees.
**   SELECT bert_cache();               -- 'on' (default), 'memory' or 'off'
**   SELECT bert_cache('memory');       -- LRU only, never write the table
**   SELECT bert_cache('clear');        -- empty both; returns rows deleted
**   SELECT bert_cache_limit(50000);    -- bound on table rows (default 100000)
**   SELECT bert_cache_lru(20000);      -- bound on LRU entries (default 10000)
** Cache writes never make a statement fail: on a read-only or locked
** database the result is computed and the write skipped.  A write joins the
** user's transaction when one is open.
**
** Settings and diagnostics:
**   SELECT bert_threads(2);            -- threads per encoder run (default: cores)
**   SELECT bert_max_concurrent(4);     -- encoder runs at once in the process
**                                      -- (default, and 0: cores / threads)
**   SELECT bert_busy_timeout(500);     -- ms to wait for a free encoder slot
**   SELECT bert_batching(0);           -- 1 (default): concurrent calls share
**                                      -- encoder runs (batcher.c)
**   SELECT bert_debug();               -- JSON: BLAS core, model, cache, ...
**   SELECT bert_stats();  SELECT * FROM bertfill_stats;   -- stats_sql.c
**   SELECT bert_trace(1);              -- trace each call into bertfill_trace (trace.c)
**
** Errors are SQL errors with a message a user can act on: invalid UTF-8 (with
** the byte offset), a text longer than the model's limit, no model, a model
** that cannot be loaded, k out of range, "bertfill: busy: ..." when too many
** encoder runs are waiting.  NULL text gives NULL (bert_fill) or no rows
** (fill_candidates).  Numbers are filled as their text; blobs are read as
** UTF-8 bytes.
**
** Flags.  Every function and module is in the tables `functions` and
** `modules` below, with its flags and the reason for them.  The rules:
** SQLITE_DIRECTONLY (usable only in top-level SQL, never from a view,
** trigger, CHECK, DEFAULT, index or generated column) for everything that
** reads files, writes tables or changes a setting, so that a database
** schema from an untrusted source cannot make bertfill do any of that;
** none is SQLITE_DETERMINISTIC, since results depend on the connection's
** model (which bert_load can change) or on the moment (bert_version: on
** the bertfill.so loaded, which an upgrade changes); only bert_version is
** SQLITE_INNOCUOUS.
**
** Caveat: SQLite 3.40 (Debian 12) still runs a DIRECTONLY function named in
** a CHECK constraint of a schema read from the file (views, triggers,
** DEFAULT clauses are refused; generated columns and expression indexes
** refuse bertfill anyway, as it is not deterministic).  Newer SQLite
** refuses CHECK constraints too.
**
** The extension pins itself in memory (RTLD_NODELETE) on first load: loaded
** models, the LRU and the engine's threads are process-wide and must
** outlive the connection that loaded the library.
**
** Inside (ext/sqlite; each file has a header of its own).  Calls run one
** way, from the top of this list to the bottom, never back up:
**   entry.c       the entry point and the tables of functions and modules
**   scalars.c     bert_fill, bert_tokenize, bert_load, bert_debug, bert_version
**   settings.c    bert_cache*, bert_threads, bert_max_concurrent, ...
**   candidates.c  the fill_candidates table-valued function
**   prefill.c     the bert_prefill aggregate
**   stats_sql.c   bertfill_stats, bert_stats, bert_stats_reset
**   prometheus.c  bert_stats('prometheus'): the Prometheus text format
**   trace.c       bert_trace and the per-call trace table
**   lookup.c      tokens -> LRU -> cache table -> encoder, and storing
**   batcher.c     dynamic batching of concurrent encoder calls
**   encode.c      one encoder run on a slot, counted in the stats
**   guard.c       the overload guard: encoder slots and their scratch
**   machine_guard.c  encoder slots shared by the processes of the machine
**   conn.c        the state of a connection (refcounted): its model, its cache
**   models.c      the registry of loaded models; the default model
**   cache.c       the LRU and the bertfill_cache table
**   text.c        arguments, "[MASK]" positions, tokenizing, text results
**   jsonw.c       JSON strings
**   errors.c      errors: building, counting, reporting
**   bounds.h      every limit and range;  api.c  SQLite's routines;
**   version.h     the version
** and below all of them the engine (ext/engine), which never sees SQLite.
** A new SQL function: write it in the file of its kind (or a new one that
** includes only what lies below it) and add a row to `functions`.
*/
#include <string.h>

#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3
#include "candidates.h"
#include "conn.h"
#include "models.h"
#include "prefill.h"
#include "scalars.h"
#include "settings.h"
#include "stats_sql.h"
#include "trace.h"

/* What a registration gets as its user data (a module: its client data). */
enum user_data {
  NO_DATA,    /* NULL */
  CONN,       /* the connection's bfx_conn, one reference each */
  TRACE_STATE /* the connection's trace state (trace.c) */
};

#define DIRECT SQLITE_DIRECTONLY

typedef struct sql_function {
  const char *name;
  int n_arg;                                               /* -1: any number */
  int flags;                                               /* besides SQLITE_UTF8 */
  void (*xFunc)(sqlite3_context *, int, sqlite3_value **); /* scalar */
  void (*xStep)(sqlite3_context *, int, sqlite3_value **); /* aggregate */
  void (*xFinal)(sqlite3_context *);
  enum user_data data;
  const char *why; /* why these flags */
} sql_function;

#define SETTING "changes a process-wide setting"

static const sql_function functions[] = {
  {"bert_fill", 1, DIRECT, bfx_fn_fill, 0, 0, CONN,
   "loads a model (reads files) on first use; writes the bertfill_cache table"},
  {"bert_prefill", 1, DIRECT, 0, bfx_prefill_step, bfx_prefill_final, CONN,
   "reads model files, writes the bertfill_cache table"},
  {"bert_tokenize", 1, DIRECT, bfx_fn_tokenize, 0, 0, CONN, "loads the model's files on first use"},
  {"bert_load", 1, DIRECT, bfx_fn_load, 0, 0, CONN, "reads any directory it is given"},
  {"bert_debug", 0, DIRECT, bfx_fn_debug, 0, 0, CONN,
   "reveals file paths and the environment; hashes the weight file"},
  {"bert_cache", 0, DIRECT, bfx_fn_cache, 0, 0, CONN, "as bert_cache(mode)"},
  {"bert_cache", 1, DIRECT, bfx_fn_cache, 0, 0, CONN,
   "'clear' deletes rows; changes the connection's cache mode"},
  {"bert_cache_limit", 0, DIRECT, bfx_fn_cache_limit, 0, 0, CONN, "as bert_cache_limit(n)"},
  {"bert_cache_limit", 1, DIRECT, bfx_fn_cache_limit, 0, 0, CONN,
   "deletes rows beyond the new bound"},
  {"bert_cache_lru", 0, DIRECT, bfx_fn_cache_lru, 0, 0, CONN, "as bert_cache_lru(n)"},
  {"bert_cache_lru", 1, DIRECT, bfx_fn_cache_lru, 0, 0, CONN, SETTING},
  {"bert_threads", 0, DIRECT, bfx_fn_threads, 0, 0, CONN, "as bert_threads(n)"},
  {"bert_threads", 1, DIRECT, bfx_fn_threads, 0, 0, CONN, SETTING},
  {"bert_max_concurrent", 0, DIRECT, bfx_fn_max_concurrent, 0, 0, CONN,
   "as bert_max_concurrent(n)"},
  {"bert_max_concurrent", 1, DIRECT, bfx_fn_max_concurrent, 0, 0, CONN, SETTING},
  {"bert_busy_timeout", 0, DIRECT, bfx_fn_busy_timeout, 0, 0, CONN, "as bert_busy_timeout(n)"},
  {"bert_busy_timeout", 1, DIRECT, bfx_fn_busy_timeout, 0, 0, CONN, SETTING},
  {"bert_batching", 0, DIRECT, bfx_fn_batching, 0, 0, CONN, "as bert_batching(n)"},
  {"bert_batching", 1, DIRECT, bfx_fn_batching, 0, 0, CONN, SETTING},
  {"bert_version", 0, SQLITE_INNOCUOUS, bfx_fn_version, 0, 0, NO_DATA,
   "a constant of the loaded bertfill.so: no side effect, reveals nothing about the process or "
   "its files, so any schema may use it; not DETERMINISTIC: an index or generated column must "
   "not depend on it, as an upgrade changes it"},
  {"bert_stats", 0, 0, bfx_fn_stats, 0, 0, NO_DATA,
   "no side effects, reads no file or table: views and triggers of a trusted schema may use "
   "it; not INNOCUOUS: it shows the activity of every connection of the process (timings, "
   "cache hits of other users' queries), so with PRAGMA trusted_schema=OFF an untrusted "
   "schema cannot read it"},
  {"bert_stats", 1, 0, bfx_fn_stats, 0, 0, NO_DATA,
   "as bert_stats(): the same statistics as JSON or in the Prometheus text format"},
  {"bert_stats_reset", 0, DIRECT, bfx_fn_stats_reset, 0, 0, NO_DATA,
   "erases the statistics every connection sees (a process-wide side effect)"},
  {"bert_trace", -1, DIRECT, bfx_fn_trace, 0, 0, TRACE_STATE,
   "creates and writes the bertfill_trace table (any number of arguments, checked by the "
   "function, so that one registration owns the connection's trace state)"},
};

typedef struct sql_module {
  const char *name;
  const sqlite3_module *module;
  enum user_data data;
  const char *flags_why; /* a module's flags are set by its xConnect */
} sql_module;

static const sql_module modules[] = {
  {"fill_candidates", &bfx_candidates_module, CONN,
   "DIRECTONLY (sqlite3_vtab_config in xConnect): as bert_fill"},
  {"bertfill_stats", &bfx_stats_module, NO_DATA, "none: as bert_stats"},
};

/* The user data for a registration, with its destructor (which SQLite
** calls when the registration is dropped, or at once if it fails); NULL
** data and *nomem = 1 when out of memory. */
static void *user_data(enum user_data kind, bfx_conn *c, sqlite3 *db, void (**destroy)(void *),
                       int *nomem) {
  *destroy = NULL;
  *nomem = 0;
  switch (kind) {
    case CONN:
      bfx_conn_ref(c);
      *destroy = bfx_conn_unref;
      return c;
    case TRACE_STATE: {
      void *st = bfx_trace_state_new(db);
      if (st) *destroy = bfx_trace_state_free;
      else *nomem = 1;
      return st;
    }
    case NO_DATA: break;
  }
  return NULL;
}

static int register_function(sqlite3 *db, bfx_conn *c, const sql_function *f) {
  void (*destroy)(void *);
  int nomem;
  void *data = user_data(f->data, c, db, &destroy, &nomem);
  if (nomem) return SQLITE_NOMEM;
  return sqlite3_create_function_v2(db, f->name, f->n_arg, SQLITE_UTF8 | f->flags, data, f->xFunc,
                                    f->xStep, f->xFinal, destroy);
}

static int register_module(sqlite3 *db, bfx_conn *c, const sql_module *m) {
  void (*destroy)(void *);
  int nomem;
  void *data = user_data(m->data, c, db, &destroy, &nomem);
  if (nomem) return SQLITE_NOMEM;
  return sqlite3_create_module_v2(db, m->name, m->module, data, destroy);
}

#define COUNT(a) (sizeof(a) / sizeof(a)[0])

#ifdef _WIN32
__declspec(dllexport)
#endif
  int sqlite3_bertfill_init(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi) {
  /* SQLITE_EXTENSION_INIT2(pApi), but written only when it changes: every
  ** connection passes the same routines, and other threads may be calling
  ** bertfill functions (reading sqlite3_api) while this one loads it. */
  if (sqlite3_api != pApi) sqlite3_api = pApi;
  if (sqlite3_libversion_number() < 3031000) {
    *pzErrMsg = sqlite3_mprintf("bertfill needs SQLite 3.31 or later (this is %s)",
                                sqlite3_libversion());
    return SQLITE_ERROR;
  }
  bfx_pin_library();
  bfx_conn *c = bfx_conn_new(db); /* this function's reference, dropped at the end */
  if (!c) return SQLITE_NOMEM;

  int rc = SQLITE_OK;
  for (size_t i = 0; i < COUNT(functions) && rc == SQLITE_OK; i++) {
    rc = register_function(db, c, &functions[i]);
    if (rc != SQLITE_OK && pzErrMsg)
      *pzErrMsg = functions[i].n_arg < 0
                    ? sqlite3_mprintf("bertfill: cannot register %s(...): %s", functions[i].name,
                                      sqlite3_errstr(rc))
                    : sqlite3_mprintf("bertfill: cannot register %s(%d): %s", functions[i].name,
                                      functions[i].n_arg, sqlite3_errstr(rc));
  }
  for (size_t i = 0; i < COUNT(modules) && rc == SQLITE_OK; i++) {
    rc = register_module(db, c, &modules[i]);
    if (rc != SQLITE_OK && pzErrMsg)
      *pzErrMsg = sqlite3_mprintf("bertfill: cannot register %s: %s", modules[i].name,
                                  sqlite3_errstr(rc));
  }
  bfx_conn_unref(c);
  return rc;
}
