/*
** settings.c — the settings functions.  Each one without an argument (or
** with NULL) returns the setting; with one it changes the setting and
** returns the new value.
**
**   bert_cache([mode])          this connection's cache: 'on', 'memory',
**                               'off'; 'clear' empties the LRU and the table
**   bert_cache_limit([rows])    bound on the rows of the cache table
**   bert_cache_lru([entries])   bound on the entries of the process-wide LRU
**   bert_threads([n])           threads per encoder run (0: one per core)
**   bert_max_concurrent([n])    encoder runs at once (0: cores / threads)
**   bert_busy_timeout([ms])     the longest wait for an encoder slot
**   bert_batching([0|1])        dynamic batching of concurrent calls
**
** The ranges are in bounds.h; a value outside its range is an error that
** names the range.
*/
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3
#include "settings.h"
#include "batcher.h"
#include "bounds.h"
#include "cache.h"
#include "conn.h"
#include "errors.h"
#include "guard.h"
#include "text.h"

/* A setting's new value from its optional argument: 1 with *n when one is
** given and valid, 0 when none is given (no argument, or NULL), -1 after
** reporting "WHAT must be an integer from LO to HI" on ctx. */
static int setting_arg(sqlite3_context *ctx, int argc, sqlite3_value **argv, const char *what,
                       sqlite3_int64 lo, sqlite3_int64 hi, sqlite3_int64 *n) {
  if (argc == 0 || sqlite3_value_type(argv[0]) == SQLITE_NULL) return 0;
  if (bfx_arg_int(argv[0], lo, hi, n)) return 1;
  char *m = sqlite3_mprintf("%s must be an integer from %lld to %lld", what, (long long)lo,
                            (long long)hi);
  if (m) sqlite3_result_error(ctx, m, -1);
  else sqlite3_result_error_nomem(ctx);
  sqlite3_free(m);
  return -1;
}

void bfx_fn_cache(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  bfx_conn *c = sqlite3_user_data(ctx);
  if (argc == 0 || sqlite3_value_type(argv[0]) == SQLITE_NULL) {
    sqlite3_result_text(ctx, bfx_cache_mode_name(c->cache_mode), -1, SQLITE_STATIC);
    return;
  }
  const char *s = (const char *)sqlite3_value_text(argv[0]);
  if (s && sqlite3_stricmp(s, "clear") == 0) {
    int64_t deleted = 0;
    char *err = NULL;
    bfc_lru_clear();
    if (bfc_table_clear(c->db, &deleted, &err) != SQLITE_OK) {
      bfx_err e = BFX_ERR_NONE;
      bfx_errf(&e, SQLITE_ERROR, -1, "bert_cache: cannot clear the bertfill_cache table: %s",
               err ? err : "error");
      bfx_error(ctx, &e);
      sqlite3_free(err);
      return;
    }
    sqlite3_result_int64(ctx, deleted);
    return;
  }
  int mode = bfx_cache_mode_parse(s);
  if (mode < 0) {
    sqlite3_result_error(ctx, "bert_cache: the argument must be 'on', 'memory', 'off' or 'clear'",
                         -1);
    return;
  }
  c->cache_mode = mode;
  sqlite3_result_text(ctx, bfx_cache_mode_name(mode), -1, SQLITE_STATIC);
}

void bfx_fn_cache_limit(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  bfx_conn *c = sqlite3_user_data(ctx);
  sqlite3_int64 n;
  int given = setting_arg(ctx, argc, argv, "bert_cache_limit: the number of rows", 1,
                          BFX_CACHE_LIMIT_MAX, &n);
  if (given < 0) return;
  if (given) {
    c->cache_limit = n;
    c->writes_since_trim = 0;
    if (sqlite3_db_readonly(c->db, "main") == 0) bfc_table_trim(c->db, n); /* best effort */
  }
  sqlite3_result_int64(ctx, c->cache_limit);
}

void bfx_fn_cache_lru(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  sqlite3_int64 n;
  int given = setting_arg(ctx, argc, argv, "bert_cache_lru: the number of entries", 1,
                          BFX_LRU_ENTRIES_MAX, &n);
  if (given < 0) return;
  if (given) bfc_lru_set_max_entries((long)n);
  sqlite3_result_int64(ctx, bfc_lru_max_entries());
}

void bfx_fn_threads(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  char err[256] = "";
  if (bf_blas_init(err, sizeof err) != BF_OK) {
    bfx_err e = BFX_ERR_NONE;
    bfx_errf(&e, SQLITE_ERROR, -1, "bert_threads: %s", err);
    bfx_error(ctx, &e);
    return;
  }
  sqlite3_int64 n;
  int given = setting_arg(ctx, argc, argv, "bert_threads: the number of threads (0: one per core)",
                          0, BFX_THREADS_MAX, &n);
  if (given < 0) return;
  if (given) bf_blas_set_threads((int)n);
  sqlite3_result_int(ctx, bf_blas_threads());
}

void bfx_fn_max_concurrent(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  sqlite3_int64 n;
  int given = setting_arg(ctx, argc, argv,
                          "bert_max_concurrent: the number of encoder runs (0: one per core)", 0,
                          BFX_MAX_CONCURRENT_MAX, &n);
  if (given < 0) return;
  if (given) bfx_guard_set_max((int)n);
  sqlite3_result_int(ctx, bfx_guard_max());
}

void bfx_fn_busy_timeout(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  sqlite3_int64 n;
  int given = setting_arg(ctx, argc, argv, "bert_busy_timeout: milliseconds", 0,
                          BFX_BUSY_TIMEOUT_MAX_MS, &n);
  if (given < 0) return;
  if (given) bfx_guard_set_timeout_ms((int)n);
  sqlite3_result_int(ctx, bfx_guard_timeout_ms());
}

void bfx_fn_batching(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  sqlite3_int64 n;
  int given = setting_arg(ctx, argc, argv, "bert_batching: 1 (on) or 0 (off)", 0, 1, &n);
  if (given < 0) return;
  if (given) bfx_batching_set((int)n);
  sqlite3_result_int(ctx, bfx_batching());
}
