/*
** settings.c — the settings functions.  Each one without an argument (or
** with NULL) returns the setting; with one it changes the setting and
** returns the new value.
**
**   bert_cache([mode])          this connection's cache: 'on', 'memory',
**                               'off'; 'clear' empties the LRU and the table
**   bert_cache_limit([rows])    bound on the rows of the cache table (this
**                               connection)
**   bert_cache_lru([entries])   bound on the entries of the process-wide LRU
**   bert_threads([n])           threads per encoder run (0: one per core)
**   bert_max_concurrent([n])    encoder runs at once (0: cores / threads)
**   bert_busy_timeout([ms])     the longest wait for an encoder slot (0: none)
**   bert_batching([0|1])        dynamic batching of concurrent calls
**   bert_rows_cache([mode])     what fill_rows stores in the cache: 'room'
**                               (default: the LRU, and the table while it
**                               has fewer rows than bert_cache_limit),
**                               'all', 'none'
**
** The ranges are in bounds.h.  A value out of range or not an integer is an
** error in the one shape of bfx_int_arg_msg (text.h), never clamped:
**   bert_threads: the number of threads must be an integer from 0 (one per
**   core) to 64 (got 1000)
** A number written as text ('4') or as a whole real (4.0) counts as the
** integer, as SQLite's own integer arguments do.
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
** reporting the error of bfx_int_arg_msg on ctx. */
static int setting_arg(sqlite3_context *ctx, int argc, sqlite3_value **argv, const char *fname,
                       const char *what, sqlite3_int64 lo, const char *lo_means, sqlite3_int64 hi,
                       const char *hi_means, sqlite3_int64 *n) {
  if (argc == 0 || sqlite3_value_type(argv[0]) == SQLITE_NULL) return 0;
  if (bfx_arg_int(argv[0], lo, hi, n)) return 1;
  char *m = bfx_int_arg_msg(fname, what, lo, lo_means, hi, hi_means, argv[0]);
  if (m) sqlite3_result_error(ctx, m, -1);
  else sqlite3_result_error_nomem(ctx);
  sqlite3_free(m);
  return -1;
}

/* The error of a setting whose argument is none of its words: "fname: the
** argument must be WORDS (got GOT)". */
static void choice_error(sqlite3_context *ctx, const char *fname, const char *words,
                         const char *got) {
  bfx_err e = BFX_ERR_NONE;
  bfx_errf(&e, SQLITE_ERROR, -1, "%s: the argument must be %s (got %s)", fname, words, got);
  bfx_error(ctx, &e);
}

void bfx_fn_cache(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  bfx_conn *c = sqlite3_user_data(ctx);
  if (argc == 0 || sqlite3_value_type(argv[0]) == SQLITE_NULL) {
    sqlite3_result_text(ctx, bfx_cache_mode_name(c->cache_mode), -1, SQLITE_STATIC);
    return;
  }
  bfx_quote q; /* before sqlite3_value_text, which may change the value's type */
  const char *got = bfx_arg_shown(argv[0], &q);
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
    choice_error(ctx, "bert_cache", "'on', 'memory', 'off' or 'clear'", got);
    return;
  }
  c->cache_mode = mode;
  sqlite3_result_text(ctx, bfx_cache_mode_name(mode), -1, SQLITE_STATIC);
}

void bfx_fn_cache_limit(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  bfx_conn *c = sqlite3_user_data(ctx);
  sqlite3_int64 n;
  int given = setting_arg(ctx, argc, argv, "bert_cache_limit", "the number of rows", 1, NULL,
                          BFX_CACHE_LIMIT_MAX, NULL, &n);
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
  int given = setting_arg(ctx, argc, argv, "bert_cache_lru", "the number of entries", 1, NULL,
                          BFX_LRU_ENTRIES_MAX, NULL, &n);
  if (given < 0) return;
  if (given) bfc_lru_set_max_entries((long)n);
  sqlite3_result_int64(ctx, bfc_lru_max_entries());
}

/* bert_threads: the thread setting of the engine (bf_blas_set_threads).
** Its upper bound is what OpenBLAS accepts (MAX_THREADS of its build, 64 in
** Debian's), at most BFX_THREADS_MAX; a value OpenBLAS would cut down is an
** error, not a silent change. */
void bfx_fn_threads(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  char err[256] = "";
  if (bf_blas_init(err, sizeof err) != BF_OK) {
    bfx_err e = BFX_ERR_NONE;
    bfx_errf(&e, SQLITE_ERROR, -1, "bert_threads: %s", err);
    bfx_error(ctx, &e);
    return;
  }
  int hi = bf_blas_max_threads();
  if (hi <= 0 || hi > BFX_THREADS_MAX) hi = BFX_THREADS_MAX;
  sqlite3_int64 n;
  int given = setting_arg(ctx, argc, argv, "bert_threads", "the number of threads", 0,
                          "one per core", hi, NULL, &n);
  if (given < 0) return;
  if (given) {
    int before = bf_blas_threads();
    bf_blas_set_threads((int)n);
    int now = bf_blas_threads();
    if (n > 0 && now > 0 && now != n) { /* OpenBLAS cut it down: its limit is lower */
      bf_blas_set_threads(before);
      char *m = bfx_int_arg_msg("bert_threads", "the number of threads", 0, "one per core", now,
                                NULL, argv[0]);
      if (m) sqlite3_result_error(ctx, m, -1);
      else sqlite3_result_error_nomem(ctx);
      sqlite3_free(m);
      return;
    }
  }
  sqlite3_result_int(ctx, bf_blas_threads());
}

void bfx_fn_max_concurrent(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  sqlite3_int64 n;
  int given = setting_arg(ctx, argc, argv, "bert_max_concurrent",
                          "the number of encoder runs at once", 0, "cores / threads per run",
                          BFX_MAX_CONCURRENT_MAX, NULL, &n);
  if (given < 0) return;
  if (given) bfx_guard_set_max((int)n);
  sqlite3_result_int(ctx, bfx_guard_max());
}

void bfx_fn_busy_timeout(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  sqlite3_int64 n;
  int given = setting_arg(ctx, argc, argv, "bert_busy_timeout", "the wait in milliseconds", 0,
                          "never wait", BFX_BUSY_TIMEOUT_MAX_MS, NULL, &n);
  if (given < 0) return;
  if (given) bfx_guard_set_timeout_ms((int)n);
  sqlite3_result_int(ctx, bfx_guard_timeout_ms());
}

void bfx_fn_batching(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  sqlite3_int64 n;
  int given = setting_arg(ctx, argc, argv, "bert_batching", "the argument", 0, "off", 1, "on", &n);
  if (given < 0) return;
  if (given) bfx_batching_set((int)n);
  sqlite3_result_int(ctx, bfx_batching());
}

void bfx_fn_rows_cache(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  bfx_conn *c = sqlite3_user_data(ctx);
  if (argc > 0 && sqlite3_value_type(argv[0]) != SQLITE_NULL) {
    bfx_quote q; /* before sqlite3_value_text, which may change the value's type */
    const char *got = bfx_arg_shown(argv[0], &q);
    int mode = bfx_rows_cache_parse((const char *)sqlite3_value_text(argv[0]));
    if (mode < 0) {
      choice_error(ctx, "bert_rows_cache", "'room', 'all' or 'none'", got);
      return;
    }
    c->rows_cache = mode;
  }
  sqlite3_result_text(ctx, bfx_rows_cache_name(c->rows_cache), -1, SQLITE_STATIC);
}
