/*
** sqlite_ext.h — internal header of the SQLite layer of bertfill (the files
** ext/sqlite_*.c).  Not a public API: applications use SQL only.
**
** Pieces and the file that owns each:
**   sqlite_ext.c         entry point, scalar functions, the flags table
**   sqlite_models.c      process-wide registry of loaded models; the model of
**                        each connection (bert_load / BERTFILL_MODEL / default)
**   sqlite_guard.c       overload guard: bounded number of concurrent encoder
**                        runs, bounded wait, and the pool of bf_run scratch
**   sqlite_cache.c/.h    memo cache: process-wide LRU + bertfill_cache table
**   sqlite_batcher.c/.h  dynamic batching: concurrent callers' sequences
**                        merged into one encoder run
**   sqlite_fill.c        one lookup-or-encode step shared by every function;
**                        text helpers (arguments, UTF-8, "[MASK]" positions)
**   sqlite_candidates.c  the fill_candidates table-valued function
**   sqlite_prefill.c     the bert_prefill aggregate (batch filling)
*/
#ifndef BERTFILL_SQLITE_EXT_H
#define BERTFILL_SQLITE_EXT_H

#include <stdint.h>
#include <stddef.h>
#include "sqlite3ext.h"
#include "bertfill.h"

/* Cache modes of a connection (bert_cache). */
enum { BFX_CACHE_OFF = 0, BFX_CACHE_MEMORY = 1, BFX_CACHE_ON = 2 };

/* Candidates computed for every entry so that bert_fill (k = 1) and
** fill_candidates (default k = 5) share cache entries. */
#define BFX_MIN_K 5
#define BFX_DEFAULT_K 5

/* State of one database connection.  Shared by every function and the
** module registered on it; freed when the last of them is destroyed
** (sqlite3_close, or the extension loaded again). */
typedef struct bfx_conn {
  sqlite3 *db;
  int refs;                 /* registrations holding this state */
  bf_model *model;          /* current model (retained), NULL until first use */
  const char *model_source; /* "bert_load", "BERTFILL_MODEL" or "default" */
  int cache_mode;           /* BFX_CACHE_* */
  int64_t cache_limit;      /* max rows of the cache table */
  int64_t writes_since_trim;
} bfx_conn;

/* ---- sqlite_models.c ---- */
/* The connection's model, loading it on first use.  NULL with *err set
** (sqlite3_malloc'ed message) when there is none; *nomem when out of memory. */
bf_model *bfx_model(bfx_conn *c, char **err);
/* Load dir (NULL: back to BERTFILL_MODEL / the default model) as the
** connection's model. */
int bfx_model_set(bfx_conn *c, const char *dir, char **err);
/* Release the connection's model (at connection close). */
void bfx_model_drop(bfx_conn *c);
/* "name: 12 layers, hidden 768, vocab 21128, F32" (sqlite3_malloc'ed). */
char *bfx_model_describe(bf_model *m);
/* Where the default model is looked for (sqlite3_malloc'ed, for messages). */
char *bfx_default_model_paths(void);
/* Number of models loaded in the process right now. */
int bfx_models_loaded(void);
/* The path of the loaded extension file ("" if unknown). */
const char *bfx_extension_path(void);
/* Never unload the extension (dlopen RTLD_NODELETE), whatever SQLite does. */
void bfx_pin_library(void);

/* ---- sqlite_guard.c ---- */
/* Take an encoder slot, waiting at most the busy timeout.  On success
** returns a scratch run to use (give it back with bfx_guard_release).
** On timeout returns NULL with *err = "bertfill: busy: ..." and *busy = 1;
** on allocation failure NULL with *busy = 0 and *err = NULL. */
bf_run *bfx_guard_acquire(uint64_t *waited_ns, char **err, int *busy);
/* The same, waiting at most until deadline_ns (CLOCK_MONOTONIC, bf_now_ns). */
bf_run *bfx_guard_acquire_until(uint64_t deadline_ns, uint64_t *waited_ns, char **err, int *busy);
/* A slot only if one is free now: NULL when none (*nomem = 0) or out of
** memory (*nomem = 1). */
bf_run *bfx_guard_try_acquire(int *nomem);
/* from_ns + the busy timeout. */
uint64_t bfx_guard_deadline_ns(uint64_t from_ns);
void bfx_guard_release(bf_run *r);
int bfx_guard_max(void);            /* max concurrent encoder runs in effect */
void bfx_guard_set_max(int n);      /* n <= 0: automatic, max(1, cores / threads) */
int bfx_guard_max_auto(void);       /* 1 when the bound is the automatic one */
int bfx_guard_timeout_ms(void);
void bfx_guard_set_timeout_ms(int ms);
int bfx_guard_in_flight(void);
int bfx_ncores(void);

/* ---- sqlite_fill.c ---- */
/* Result of filling one token sequence: for each mask, k candidates. */
typedef struct bfx_result {
  int k;                    /* candidates per mask held in c */
  int n_masks;
  bf_cand *c;               /* n_masks * k, sqlite3_malloc'ed */
  const char *source;       /* "lru", "table", "encoder", "none" */
  uint64_t queue_ns, encode_ns, topk_ns, cache_read_ns, cache_write_ns;
} bfx_result;
void bfx_result_clear(bfx_result *r);

/* Error of a lookup-or-encode: an SQLite result code (SQLITE_ERROR,
** SQLITE_NOMEM, SQLITE_BUSY) and a message. */
typedef struct bfx_err {
  int rc;
  int kind;                 /* bf_counter to count, or -1 */
  char msg[512];
} bfx_err;

/* The text of argument v as UTF-8 bytes: text as is, numbers as SQLite
** converts them, blobs as raw bytes.  Returns 0 for NULL (*p = NULL). */
int bfx_arg_text(sqlite3_value *v, const char **p, int *n);
/* Offset of the first invalid UTF-8 byte, or -1 when the bytes are valid. */
long bfx_utf8_invalid_at(const char *s, long n);
/* Byte offsets of the literal "[MASK]" occurrences (left to right, not
** overlapping); writes at most max, returns how many there are. */
int bfx_mask_offsets(const char *s, int n, int *off, int max);

/* Tokenize (checking UTF-8 first).  fname prefixes messages. */
int bfx_tokenize(const char *fname, bf_model *m, const char *s, int n,
                 bf_tokens *t, uint64_t *ns, bfx_err *e);
/* Candidates for t with at least k per mask (k is capped at the vocabulary
** size): from the LRU, the cache table, or the encoder (then stored). */
int bfx_fill(const char *fname, bfx_conn *c, bf_model *m, const bf_tokens *t,
             int k, bfx_result *res, bfx_err *e);
/* Run the encoder once over nseq sequences (all with masks), taking an
** encoder slot first: out gets k candidates per mask (see bf_fill).  Times
** are added to r (may be NULL); stats are counted. */
int bfx_encode(bf_model *m, int nseq, const bf_tokens *seqs, int k,
               bf_cand *out, bfx_result *r, bfx_err *e);
/* The same on a run the caller holds (no slot taken or given back). */
int bfx_encode_on(bf_model *m, bf_run *run, int nseq, const bf_tokens *seqs, int k,
                  bf_cand *out, bfx_result *r, bfx_err *e);
/* Store candidates of t (k per mask) in the LRU and, in mode 'on', the
** table.  Write time is added to r (may be NULL).  Returns 1 when a table
** row was written, 0 when the write was skipped, -1 when no table write was
** due (mode 'memory' / 'off').  count = 0: leave the cache_writes /
** cache_skipped counters to the caller. */
int bfx_store(bfx_conn *c, bf_model *m, const bf_tokens *t, int k,
              const bf_cand *cands, bfx_result *r, int count);
/* The model's limit on tokens per sequence. */
int bfx_max_tokens(bf_model *m);
/* Report e on ctx (and count it). */
void bfx_error(sqlite3_context *ctx, const bfx_err *e);
void bfx_errf(bfx_err *e, int rc, int kind, const char *fmt, ...);
/* Copy an engine / sqlite3_malloc'ed message into e. */
void bfx_err_model(bfx_err *e, const char *fname, char *msg, int nomem);

/* Record one call in the stats trace when tracing is on. */
void bfx_trace(sqlite3 *db, const char *func, const char *text, int text_len,
               const bfx_result *r, uint64_t t0, uint64_t tok_ns, int tokens,
               int is_error);

/* ---- sqlite_candidates.c / sqlite_prefill.c ---- */
int bfx_register_candidates(sqlite3 *db, bfx_conn *c);
int bfx_register_prefill(sqlite3 *db, bfx_conn *c);
void bfx_conn_unref(void *p);   /* xDestroy of every registration */
void bfx_conn_ref(bfx_conn *c);

#endif
