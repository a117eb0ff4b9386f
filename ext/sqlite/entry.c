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
**   SELECT bert_load('/path/to/model-dir', 'int8');   -- int8 products (faster)
**   BERTFILL_MODEL=/path/to/model-dir                 -- environment variable
**   BERTFILL_PRECISION=int8                           -- precision of the above
**   model/bertfill-zh-tiny                            -- shipped with bertfill
** A model directory is the Hugging Face layout: config.json, vocab.txt,
** model.safetensors (+ tokenizer_config.json).  Loaded models are shared by
** every connection of the process (one copy, reference counted).
**
** Filling a whole column at batch speed, any number of rows, in memory
** bounded by one batch: fill_rows(sql [, k]) runs the query, fills its
** texts in batches through the encoder and yields (key, text, filled, masks,
** error) (see rows.c):
**   UPDATE t SET filled = f.filled
**     FROM fill_rows('SELECT rowid, text FROM t WHERE filled IS NULL') AS f
**    WHERE t.rowid = f.key;
** bert_prefill(text) is an aggregate that computes the distinct texts in
** batches into the cache, for an UPDATE with bert_fill after it; it stops
** with an error when the cache cannot keep them all (see prefill.c).
** Whole-word fills: the masks of a text as one blank, decoded together by
** the chain rule (sequences.c, wholeword.c, joint.c):
**   SELECT * FROM fill_sequences('两天[MASK][MASK]', 3);
**       -- rank fill tokens token_ids score sequence: the 3 best whole fills
**   SELECT bert_fill('两天[MASK][MASK]', 'joint');     -- the best one, filled in
**   SELECT bert_score('两天[MASK][MASK]', '晒网');      -- P of a given answer
**
**   SELECT bert_prefill(text) FROM t;           -- returns texts computed
**   UPDATE t SET filled = bert_fill(text);
** Progress on stderr ("bert_prefill: 1200 texts read, 1100 computed, 85
** texts/s") when stderr is a terminal or BERTFILL_PROGRESS=1
** (BERTFILL_PROGRESS=0: never).
**
** The memo cache (see cache.h).  Results are kept in an in-memory
** LRU (process-wide) and in the table bertfill_cache of the main database,
** keyed by the model's fingerprint and the tokens the model sees.
**   SELECT bert_cache();               -- 'on' (default), 'memory' or 'off'
**   SELECT bert_cache('memory');       -- LRU only, never write the table
**   SELECT bert_cache('clear');        -- empty both; returns rows deleted
**   SELECT bert_cache_limit(50000);    -- bound on table rows (default 100000)
**   SELECT bert_cache_lru(20000);      -- bound on LRU entries (default 10000)
**   SELECT bert_rows_cache('all');     -- what fill_rows stores: 'room' (default),
**                                      -- 'all', 'none' (see rows.c)
** Cache writes never make a statement fail: on a read-only or locked
** database the result is computed and the write skipped.  A write joins the
** user's transaction when one is open.
**
** Settings and diagnostics (no argument or NULL: read the setting; a value
** out of range is an error, never clamped; docs/settings.md has the table):
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
** Triggers and views that fill (opt-in).  An application that wants
**   CREATE TRIGGER fill AFTER INSERT ON t BEGIN
**     UPDATE t SET filled = bert_fill(new.text) WHERE rowid = new.rowid; END;
** loads bertfill through the other entry point:
**   .load ./bertfill sqlite3_bertfill_trusted_init        -- the shell
**   SELECT load_extension('./bertfill', 'sqlite3_bertfill_trusted_init');
** On that connection the functions marked UNLESS_TRUSTED below (bert_fill,
** fill_candidates) are registered without DIRECTONLY, and without
** INNOCUOUS: SQLite then lets views and triggers use them only while PRAGMA
** trusted_schema is on (its default), and refuses them ("unsafe use of
** bert_fill()") when the application turns it off for a database it does not
** trust.  Everything that reads paths, runs given SQL or changes settings
** (bert_load, fill_rows, bert_prefill, ...) stays DIRECTONLY.  A setting
** function cannot do this: SQLite refuses to replace a function while a
** statement runs, so the choice is made when the extension is loaded (from
** SQL, only as the first load on the connection).
**
** The extension pins itself in memory (RTLD_NODELETE) on first load: loaded
** models, the LRU and the engine's threads are process-wide and must
** outlive the connection that loaded the library.
**
** Inside: ext/README.md is the map of the files of ext/sqlite and ext/engine
** and of the one way calls run (tests/project/t_structure.py checks it).
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
#include "rows.h"
#include "scalars.h"
#include "sequences.h"
#include "settings.h"
#include "stats_sql.h"
#include "suspects.h"
#include "trace.h"
#include "wholeword.h"

/* What a registration gets as its user data (a module: its client data). */
enum user_data {
  NO_DATA,    /* NULL */
  CONN,       /* the connection's bfx_conn, one reference each */
  TRACE_STATE /* the connection's trace state (trace.c) */
};

#define DIRECT SQLITE_DIRECTONLY
/* Not an SQLite flag (removed before registering): DIRECTONLY too, except
** on a connection loaded through sqlite3_bertfill_trusted_init. */
#define UNLESS_TRUSTED 0x40000000

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
  {"bert_fill", 1, DIRECT | UNLESS_TRUSTED, bfx_fn_fill, 0, 0, CONN,
   "loads a model (reads files) on first use; writes the bertfill_cache table; through "
   "sqlite3_bertfill_trusted_init usable by triggers and views while PRAGMA trusted_schema is "
   "on"},
  {"bert_fill", 2, DIRECT, bfx_fn_fill_joint, 0, 0, CONN, "as bert_fill(text)"},
  {"bert_score", 2, DIRECT, bfx_fn_score, 0, 0, CONN, "as bert_fill(text)"},
  {"bert_prefill", 1, DIRECT, 0, bfx_prefill_step, bfx_prefill_final, CONN,
   "reads model files, writes the bertfill_cache table"},
  {"bert_prefill", 2, DIRECT, 0, bfx_prefill_step, bfx_prefill_final, CONN,
   "as bert_prefill(text)"},
  {"bert_tokenize", 1, DIRECT, bfx_fn_tokenize, 0, 0, CONN, "loads the model's files on first use"},
  {"bert_load", 1, DIRECT, bfx_fn_load, 0, 0, CONN, "reads any directory it is given"},
  {"bert_load", 2, DIRECT, bfx_fn_load, 0, 0, CONN,
   "as bert_load(dir); 'int8' may write model.int8.safetensors into the directory"},
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
  {"bert_rows_cache", 0, DIRECT, bfx_fn_rows_cache, 0, 0, CONN, "as bert_rows_cache(mode)"},
  {"bert_rows_cache", 1, DIRECT, bfx_fn_rows_cache, 0, 0, CONN,
   "changes what fill_rows writes to the cache table"},
  {"bert_correct", 1, DIRECT, bfx_fn_correct, 0, 0, CONN, "as bert_fill(text)"},
  {"bert_correct", 2, DIRECT, bfx_fn_correct, 0, 0, CONN, "as bert_fill(text)"},
  {"bert_spelling_sensitivity", 0, DIRECT, bfx_fn_spelling_sensitivity, 0, 0, CONN,
   "as bert_spelling_sensitivity(value)"},
  {"bert_spelling_sensitivity", 1, DIRECT, bfx_fn_spelling_sensitivity, 0, 0, CONN,
   "changes the connection's spelling sensitivity"},
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
   "DIRECTONLY (sqlite3_vtab_config in xConnect) unless loaded through "
   "sqlite3_bertfill_trusted_init: as bert_fill"},
  {"fill_rows", &bfx_rows_module, CONN,
   "DIRECTONLY (sqlite3_vtab_config in xConnect): runs the SQL it is given, reads model "
   "files, writes the bertfill_cache table"},
  {"fill_sequences", &bfx_sequences_module, CONN,
   "DIRECTONLY (sqlite3_vtab_config in xConnect): as bert_fill"},
  {"fill_suspects", &bfx_suspects_module, CONN,
   "DIRECTONLY (sqlite3_vtab_config in xConnect): as bert_fill"},
  {"fill_suspects_rows", &bfx_suspects_rows_module, CONN,
   "DIRECTONLY (sqlite3_vtab_config in xConnect): as fill_rows"},
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
  int flags = f->flags & ~UNLESS_TRUSTED;
  if (c->trusted_schema && (f->flags & UNLESS_TRUSTED)) flags &= ~SQLITE_DIRECTONLY;
  return sqlite3_create_function_v2(db, f->name, f->n_arg, SQLITE_UTF8 | flags, data, f->xFunc,
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

/* Register everything on db; trusted: see "Triggers and views" above. */
static int init(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi, int trusted) {
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
  c->trusted_schema = trusted;

  int rc = SQLITE_OK;
  for (size_t i = 0; i < COUNT(functions) && rc == SQLITE_OK; i++) {
    rc = register_function(db, c, &functions[i]);
    if (rc == SQLITE_BUSY && pzErrMsg) /* replacing a function while a statement runs */
      *pzErrMsg = sqlite3_mprintf("bertfill: cannot replace %s() while a statement runs; load "
                                  "bertfill this way as the "
                                  "first load on a new connection, or outside SQL (.load in the "
                                  "shell)",
                                  functions[i].name);
    else if (rc != SQLITE_OK && pzErrMsg)
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

#ifdef _WIN32
__declspec(dllexport)
#endif
  int sqlite3_bertfill_init(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi) {
  return init(db, pzErrMsg, pApi, 0);
}

#ifdef _WIN32
__declspec(dllexport)
#endif
  int sqlite3_bertfill_trusted_init(sqlite3 *db, char **pzErrMsg,
                                    const sqlite3_api_routines *pApi) {
  return init(db, pzErrMsg, pApi, 1);
}
