/*
** sqlite_ext.c — bertfill as a loadable SQLite extension: fill the [MASK]
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
** The memo cache (see sqlite_cache.h).  Results are kept in an in-memory
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
**                                      -- encoder runs (sqlite_batcher.c)
**   SELECT bert_debug();               -- JSON: BLAS core, model, cache, ...
**   SELECT bert_stats();  SELECT * FROM bertfill_stats;   -- sqlite_stats.c
**
** Errors are SQL errors with a message a user can act on: invalid UTF-8 (with
** the byte offset), a text longer than the model's limit, no model, a model
** that cannot be loaded, k out of range, "bertfill: busy: ..." when too many
** encoder runs are waiting.  NULL text gives NULL (bert_fill) or no rows
** (fill_candidates).  Numbers are filled as their text; blobs are read as
** UTF-8 bytes.
**
** Flags of each function, and why (SQLITE_DIRECTONLY: usable only in
** top-level SQL, never from a view, trigger, CHECK, DEFAULT, index or
** generated column, so a database schema from an untrusted source cannot
** make bertfill read files or write tables; none is SQLITE_DETERMINISTIC
** since the result depends on the connection's model, which bert_load can
** change; none is SQLITE_INNOCUOUS):
**
**   function             flags          why
**   -------------------  -------------  ------------------------------------
**   bert_fill(t)         DIRECTONLY     loads a model (reads files) on first
**                                       use; writes the bertfill_cache table
**   fill_candidates      DIRECTONLY     same as bert_fill (virtual table,
**                        (vtab config)  sqlite3_vtab_config VTAB_DIRECTONLY)
**   bert_prefill(t)      DIRECTONLY     reads model files, writes the cache
**   bert_tokenize(t)     DIRECTONLY     loads the model's files on first use
**   bert_load(dir)       DIRECTONLY     reads any directory it is given
**   bert_cache(...)      DIRECTONLY     'clear' deletes rows; mode changes
**   bert_cache_limit(n)  DIRECTONLY     deletes rows beyond the new bound
**   bert_cache_lru(n)    DIRECTONLY     changes a process-wide setting
**   bert_threads(n)      DIRECTONLY     changes a process-wide setting
**   bert_max_concurrent  DIRECTONLY     changes a process-wide setting
**   bert_busy_timeout    DIRECTONLY     changes a process-wide setting
**   bert_batching        DIRECTONLY     changes a process-wide setting
**   bert_debug()         DIRECTONLY     reveals file paths and the
**                                       environment; hashes the weight file
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
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT1
#include "layer.h"
#include "batcher.h"
#include "cache.h"
#include "stats_sql.h"
#include "stats.h"

/* ---- connection state ---- */

void bfx_conn_ref(bfx_conn *c) { c->refs++; }

void bfx_conn_unref(void *p) {
  bfx_conn *c = p;
  if (c && --c->refs == 0) {
    bfx_model_drop(c);
    sqlite3_free(c);
  }
}

static int parse_cache_mode(const char *s) {
  if (!s) return -1;
  if (sqlite3_stricmp(s, "on") == 0) return BFX_CACHE_ON;
  if (sqlite3_stricmp(s, "memory") == 0) return BFX_CACHE_MEMORY;
  if (sqlite3_stricmp(s, "off") == 0) return BFX_CACHE_OFF;
  return -1;
}

static const char *cache_mode_name(int m) {
  return m == BFX_CACHE_ON ? "on" : m == BFX_CACHE_MEMORY ? "memory" : "off";
}

/* ---- JSON output ---- */

static void json_string(sqlite3_str *out, const char *z) {
  sqlite3_str_appendchar(out, 1, '"');
  for (const unsigned char *p = (const unsigned char *)(z ? z : ""); *p; p++) {
    unsigned c = *p;
    if (c == '"' || c == '\\') { sqlite3_str_appendchar(out, 1, '\\'); sqlite3_str_appendchar(out, 1, (char)c); }
    else if (c == '\n') sqlite3_str_appendall(out, "\\n");
    else if (c == '\r') sqlite3_str_appendall(out, "\\r");
    else if (c == '\t') sqlite3_str_appendall(out, "\\t");
    else if (c < 0x20 || c == 0x7f) sqlite3_str_appendf(out, "\\u%04x", c);
    else if (c == 0xE2 && p[1] == 0x80 && (p[2] == 0xA8 || p[2] == 0xA9)) {
      sqlite3_str_appendf(out, "\\u%04x", p[2] == 0xA8 ? 0x2028 : 0x2029);  /* JS-safe */
      p += 2;
    } else sqlite3_str_appendchar(out, 1, (char)c);
  }
  sqlite3_str_appendchar(out, 1, '"');
}

static void result_str(sqlite3_context *ctx, sqlite3_str *s) {
  int rc = sqlite3_str_errcode(s);
  int n = sqlite3_str_length(s);
  char *z = sqlite3_str_finish(s);
  if (rc != SQLITE_OK || !z) { sqlite3_free(z); sqlite3_result_error_nomem(ctx); return; }
  sqlite3_result_text(ctx, z, n, sqlite3_free);
}

/* The connection's model, or an error reported on ctx. */
static bf_model *need_model(sqlite3_context *ctx, bfx_conn *c, bfx_err *e) {
  char *msg = NULL;
  bf_model *m = bfx_model(c, &msg);
  if (!m) {
    bfx_err_model(e, NULL, msg, msg == NULL);
    bfx_error(ctx, e);
  }
  return m;
}

/* ---- bert_fill(text) ---- */

static void fn_fill(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  bfx_conn *c = sqlite3_user_data(ctx);
  const char *s;
  int n;
  int a = bfx_arg_text(argv[0], &s, &n);
  if (a == 0) { sqlite3_result_null(ctx); return; }
  if (a < 0) { sqlite3_result_error_nomem(ctx); return; }
  uint64_t t0 = bf_now_ns(), tok_ns = 0;
  bf_stats_add(BF_CT_CALLS, 1);
  bfx_err e = { 0, -1, "" };
  bfx_result res;
  memset(&res, 0, sizeof res);
  bf_tokens t = { 0 };
  int *off = NULL;
  int failed = 1;
  bf_model *m = need_model(ctx, c, &e);
  if (!m) goto done;
  if (bfx_tokenize("bert_fill", m, s, n, &t, &tok_ns, &e) != SQLITE_OK) { bfx_error(ctx, &e); goto done; }
  if (t.n_masks == 0) {                      /* nothing to fill: the text as it is */
    sqlite3_result_text(ctx, s, n, SQLITE_TRANSIENT);
    failed = 0;
    goto done;
  }
  off = sqlite3_malloc64((size_t)t.n_masks * sizeof *off);
  if (!off) { bfx_errf(&e, SQLITE_NOMEM, BF_CT_ERR_NOMEM, "out of memory"); bfx_error(ctx, &e); goto done; }
  int literal = bfx_mask_offsets(s, n, off, t.n_masks);
  if (literal != t.n_masks) {
    bfx_errf(&e, SQLITE_ERROR, BF_CT_ERR_INPUT,
             "bert_fill: the text has %d \"[MASK]\" but the tokenizer found %d mask tokens",
             literal, t.n_masks);
    bfx_error(ctx, &e);
    goto done;
  }
  if (bfx_fill("bert_fill", c, m, &t, 1, &res, &e) != SQLITE_OK) { bfx_error(ctx, &e); goto done; }

  /* The text with the i-th "[MASK]" replaced by the top candidate of mask i. */
  sqlite3_str *out = sqlite3_str_new(NULL);
  int at = 0;
  for (int i = 0; i < t.n_masks; i++) {
    sqlite3_str_append(out, s + at, off[i] - at);
    const char *tok = bf_model_token(m, res.c[(size_t)i * res.k].id);
    sqlite3_str_appendall(out, tok ? tok : "");
    at = off[i] + 6;
  }
  sqlite3_str_append(out, s + at, n - at);
  result_str(ctx, out);
  failed = 0;
done:
  bf_stats_time(BF_ST_CALL, bf_now_ns() - t0);
  if (m) bfx_trace(c->db, "bert_fill", s, n, &res, t0, tok_ns, t.n, failed);
  bfx_result_clear(&res);
  bf_tokens_free(&t);
  sqlite3_free(off);
}

/* ---- bert_tokenize(text) ---- */

static void fn_tokenize(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  bfx_conn *c = sqlite3_user_data(ctx);
  const char *s;
  int n;
  int a = bfx_arg_text(argv[0], &s, &n);
  if (a == 0) { sqlite3_result_null(ctx); return; }
  if (a < 0) { sqlite3_result_error_nomem(ctx); return; }
  bfx_err e = { 0, -1, "" };
  bf_model *m = need_model(ctx, c, &e);
  if (!m) return;
  bf_tokens t = { 0 };
  if (bfx_tokenize("bert_tokenize", m, s, n, &t, NULL, &e) != SQLITE_OK) {
    bfx_error(ctx, &e);
    bf_tokens_free(&t);
    return;
  }
  const bf_tokenizer *tk = bf_model_tokenizer(m);
  sqlite3_str *out = sqlite3_str_new(NULL);
  sqlite3_str_appendchar(out, 1, '[');
  for (int i = 0; i < t.n; i++) {
    if (i) sqlite3_str_appendchar(out, 1, ',');
    const char *tok = bf_tokenizer_token(tk, t.ids[i]);
    json_string(out, tok ? tok : "[UNK]");
  }
  sqlite3_str_appendchar(out, 1, ']');
  bf_tokens_free(&t);
  result_str(ctx, out);
}

/* ---- bert_load(dir) ---- */

static void fn_load(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  bfx_conn *c = sqlite3_user_data(ctx);
  const char *dir = argc > 0 ? (const char *)sqlite3_value_text(argv[0]) : NULL;
  if (argc > 0 && sqlite3_value_type(argv[0]) != SQLITE_NULL && !dir) {
    sqlite3_result_error_nomem(ctx);
    return;
  }
  if (dir && !dir[0]) {
    sqlite3_result_error(ctx, "bert_load: empty directory name; pass the path of a model "
                         "directory (config.json, vocab.txt, model.safetensors), or NULL for "
                         "the default model", -1);
    return;
  }
  char *msg = NULL;
  int rc = bfx_model_set(c, dir, &msg);
  if (rc != SQLITE_OK) {
    bfx_err e = { 0, -1, "" };
    bfx_err_model(&e, "bert_load", msg, rc == SQLITE_NOMEM);
    bfx_error(ctx, &e);
    return;
  }
  char *d = bfx_model_describe(c->model);
  if (!d) { sqlite3_result_error_nomem(ctx); return; }
  sqlite3_result_text(ctx, d, -1, sqlite3_free);
}

/* ---- settings ---- */

/* Integer argument i in [lo, hi], or an error on ctx (returns 0). */
static int int_arg(sqlite3_context *ctx, sqlite3_value *v, const char *what,
                   sqlite3_int64 lo, sqlite3_int64 hi, sqlite3_int64 *out) {
  int t = sqlite3_value_numeric_type(v);
  double d = sqlite3_value_double(v);
  if ((t == SQLITE_INTEGER || (t == SQLITE_FLOAT && d >= -9e18 && d <= 9e18 &&
                                d == (double)(sqlite3_int64)d))) {  /* no UB cast of inf/huge */
    sqlite3_int64 x = t == SQLITE_INTEGER ? sqlite3_value_int64(v) : (sqlite3_int64)d;
    if (x >= lo && x <= hi) { *out = x; return 1; }
  }
  char *m = sqlite3_mprintf("%s must be an integer from %lld to %lld", what, (long long)lo, (long long)hi);
  if (m) sqlite3_result_error(ctx, m, -1); else sqlite3_result_error_nomem(ctx);
  sqlite3_free(m);
  return 0;
}

static void fn_cache(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  bfx_conn *c = sqlite3_user_data(ctx);
  if (argc == 0 || sqlite3_value_type(argv[0]) == SQLITE_NULL) {
    sqlite3_result_text(ctx, cache_mode_name(c->cache_mode), -1, SQLITE_STATIC);
    return;
  }
  const char *s = (const char *)sqlite3_value_text(argv[0]);
  if (s && sqlite3_stricmp(s, "clear") == 0) {
    int64_t deleted = 0;
    char *err = NULL;
    bfc_lru_clear();
    if (bfc_table_clear(c->db, &deleted, &err) != SQLITE_OK) {
      char *m = sqlite3_mprintf("bert_cache: cannot clear the bertfill_cache table: %s", err ? err : "error");
      sqlite3_result_error(ctx, m ? m : "bert_cache: cannot clear the bertfill_cache table", -1);
      sqlite3_free(m);
      sqlite3_free(err);
      return;
    }
    sqlite3_result_int64(ctx, deleted);
    return;
  }
  int mode = parse_cache_mode(s);
  if (mode < 0) {
    sqlite3_result_error(ctx, "bert_cache: the argument must be 'on', 'memory', 'off' or 'clear'", -1);
    return;
  }
  c->cache_mode = mode;
  sqlite3_result_text(ctx, cache_mode_name(mode), -1, SQLITE_STATIC);
}

static void fn_cache_limit(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  bfx_conn *c = sqlite3_user_data(ctx);
  sqlite3_int64 n;
  if (argc > 0 && sqlite3_value_type(argv[0]) != SQLITE_NULL) {
    if (!int_arg(ctx, argv[0], "bert_cache_limit: the number of rows", 1, (sqlite3_int64)1 << 40, &n)) return;
    c->cache_limit = n;
    c->writes_since_trim = 0;
    if (sqlite3_db_readonly(c->db, "main") == 0) bfc_table_trim(c->db, n);  /* best effort */
  }
  sqlite3_result_int64(ctx, c->cache_limit);
}

static void fn_cache_lru(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  sqlite3_int64 n;
  if (argc > 0 && sqlite3_value_type(argv[0]) != SQLITE_NULL) {
    if (!int_arg(ctx, argv[0], "bert_cache_lru: the number of entries", 1, 100000000, &n)) return;
    bfc_lru_set_max_entries((long)n);
  }
  sqlite3_result_int64(ctx, bfc_lru_max_entries());
}

static void fn_threads(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  char err[256] = "";
  if (bf_blas_init(err, sizeof err) != BF_OK) {
    char *m = sqlite3_mprintf("bert_threads: %s", err);
    sqlite3_result_error(ctx, m ? m : "bert_threads: OpenBLAS could not be loaded", -1);
    sqlite3_free(m);
    return;
  }
  sqlite3_int64 n;
  if (argc > 0 && sqlite3_value_type(argv[0]) != SQLITE_NULL) {
    if (!int_arg(ctx, argv[0], "bert_threads: the number of threads (0: one per core)", 0, 1024, &n)) return;
    bf_blas_set_threads((int)n);
  }
  sqlite3_result_int(ctx, bf_blas_threads());
}

static void fn_max_concurrent(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  sqlite3_int64 n;
  if (argc > 0 && sqlite3_value_type(argv[0]) != SQLITE_NULL) {
    if (!int_arg(ctx, argv[0], "bert_max_concurrent: the number of encoder runs (0: one per core)", 0, 1 << 20, &n)) return;
    bfx_guard_set_max((int)n);
  }
  sqlite3_result_int(ctx, bfx_guard_max());
}

static void fn_busy_timeout(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  sqlite3_int64 n;
  if (argc > 0 && sqlite3_value_type(argv[0]) != SQLITE_NULL) {
    if (!int_arg(ctx, argv[0], "bert_busy_timeout: milliseconds", 0, 1 << 30, &n)) return;
    bfx_guard_set_timeout_ms((int)n);
  }
  sqlite3_result_int(ctx, bfx_guard_timeout_ms());
}

static void fn_batching(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  sqlite3_int64 n;
  if (argc > 0 && sqlite3_value_type(argv[0]) != SQLITE_NULL) {
    if (!int_arg(ctx, argv[0], "bert_batching: 1 (on) or 0 (off)", 0, 1, &n)) return;
    bfx_batching_set((int)n);
  }
  sqlite3_result_int(ctx, bfx_batching());
}

/* ---- bert_debug() ---- */

static void fn_debug(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  bfx_conn *c = sqlite3_user_data(ctx);
  char err[256] = "";
  int blas_ok = bf_blas_init(err, sizeof err) == BF_OK;
  sqlite3_str *o = sqlite3_str_new(NULL);
  sqlite3_str_appendall(o, "{\"gemm\":");
  json_string(o, bf_gemm_kernels());
  sqlite3_str_appendall(o, ",\"blas_core\":");
  json_string(o, blas_ok ? bf_blas_core() : "");
  sqlite3_str_appendall(o, ",\"blas_config\":");
  json_string(o, blas_ok ? bf_blas_config() : "");
  if (!blas_ok) { sqlite3_str_appendall(o, ",\"blas_error\":"); json_string(o, err); }
  sqlite3_str_appendf(o, ",\"threads\":%d,\"cores\":%d", blas_ok ? bf_blas_threads() : 0, bfx_ncores());
  sqlite3_str_appendall(o, ",\"extension\":");
  json_string(o, bfx_extension_path());
  sqlite3_str_appendall(o, ",\"sqlite_version\":");
  json_string(o, sqlite3_libversion());
  sqlite3_str_appendall(o, ",\"model\":");
  if (c->model) {
    bf_model *m = c->model;
    const bf_config *f = bf_model_config(m);
    sqlite3_str_appendall(o, "{\"dir\":");
    json_string(o, bf_model_dir(m));
    sqlite3_str_appendall(o, ",\"source\":");
    json_string(o, c->model_source);
    sqlite3_str_appendall(o, ",\"dtype\":");
    json_string(o, bf_model_dtype(m));
    sqlite3_str_appendf(o, ",\"config\":{\"vocab_size\":%d,\"hidden_size\":%d,\"num_hidden_layers\":%d,"
                        "\"num_attention_heads\":%d,\"intermediate_size\":%d,"
                        "\"max_position_embeddings\":%d,\"type_vocab_size\":%d,\"layer_norm_eps\":%g}",
                        f->vocab_size, f->hidden_size, f->num_hidden_layers, f->num_attention_heads,
                        f->intermediate_size, f->max_position_embeddings, f->type_vocab_size,
                        (double)f->layer_norm_eps);
    sqlite3_str_appendall(o, ",\"fingerprint\":");
    json_string(o, bf_model_fingerprint(m));
    sqlite3_str_appendall(o, "}");
  } else {
    sqlite3_str_appendall(o, "null");       /* not loaded yet: loading is lazy */
  }
  const char *env = getenv("BERTFILL_MODEL");
  sqlite3_str_appendall(o, ",\"env_model\":");
  if (env) json_string(o, env); else sqlite3_str_appendall(o, "null");
  char *paths = bfx_default_model_paths();
  sqlite3_str_appendall(o, ",\"default_model_paths\":");
  json_string(o, paths ? paths : "");
  sqlite3_free(paths);
  sqlite3_str_appendf(o, ",\"models_loaded\":%d", bfx_models_loaded());
  long lru_n;
  size_t lru_b;
  bfc_lru_usage(&lru_n, &lru_b);
  sqlite3_str_appendf(o, ",\"cache\":{\"mode\":\"%s\",\"table\":\"main.%s\",\"table_limit\":%lld,"
                      "\"lru_entries\":%ld,\"lru_max_entries\":%ld,\"lru_bytes\":%lld,"
                      "\"lru_max_bytes\":%lld,\"min_k\":%d}",
                      cache_mode_name(c->cache_mode), BFC_TABLE, (long long)c->cache_limit, lru_n,
                      bfc_lru_max_entries(), (long long)lru_b, (long long)bfc_lru_max_bytes(), BFX_MIN_K);
  sqlite3_str_appendf(o, ",\"guard\":{\"max_concurrent\":%d,\"max_concurrent_auto\":%s,"
                      "\"in_flight\":%d,\"busy_timeout_ms\":%d}",
                      bfx_guard_max(), bfx_guard_max_auto() ? "true" : "false",
                      bfx_guard_in_flight(), bfx_guard_timeout_ms());
  sqlite3_str_appendf(o, ",\"batching\":{\"on\":%s,\"max_seqs\":%d,\"max_tokens\":%d,\"queued\":%d}}",
                      bfx_batching() ? "true" : "false", BFX_BATCH_MAX_SEQS, BFX_BATCH_MAX_TOKENS,
                      bfx_batch_queued());
  result_str(ctx, o);
}

/* ---- entry point ---- */

typedef struct fn_def {
  const char *name;
  int nargs;
  void (*xFunc)(sqlite3_context *, int, sqlite3_value **);
} fn_def;

static const fn_def functions[] = {
  { "bert_fill", 1, fn_fill },
  { "bert_tokenize", 1, fn_tokenize },
  { "bert_load", 1, fn_load },
  { "bert_debug", 0, fn_debug },
  { "bert_threads", 0, fn_threads },
  { "bert_threads", 1, fn_threads },
  { "bert_cache", 0, fn_cache },
  { "bert_cache", 1, fn_cache },
  { "bert_cache_limit", 0, fn_cache_limit },
  { "bert_cache_limit", 1, fn_cache_limit },
  { "bert_cache_lru", 0, fn_cache_lru },
  { "bert_cache_lru", 1, fn_cache_lru },
  { "bert_max_concurrent", 0, fn_max_concurrent },
  { "bert_max_concurrent", 1, fn_max_concurrent },
  { "bert_busy_timeout", 0, fn_busy_timeout },
  { "bert_busy_timeout", 1, fn_busy_timeout },
  { "bert_batching", 0, fn_batching },
  { "bert_batching", 1, fn_batching },
};

#ifdef _WIN32
__declspec(dllexport)
#endif
int sqlite3_bertfill_init(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi) {
  /* SQLITE_EXTENSION_INIT2(pApi), but written only when it changes: every
  ** connection passes the same routines, and other threads may be calling
  ** bertfill functions (reading sqlite3_api) while this one loads it. */
  if (sqlite3_api != pApi) sqlite3_api = pApi;
  if (sqlite3_libversion_number() < 3031000) {
    *pzErrMsg = sqlite3_mprintf("bertfill needs SQLite 3.31 or later (this is %s)", sqlite3_libversion());
    return SQLITE_ERROR;
  }
  bfx_pin_library();
  bfx_conn *c = sqlite3_malloc(sizeof *c);
  if (!c) return SQLITE_NOMEM;
  memset(c, 0, sizeof *c);
  c->db = db;
  c->refs = 1;                              /* held by this function until the end */
  const char *mode = getenv("BERTFILL_CACHE");
  c->cache_mode = parse_cache_mode(mode) >= 0 ? parse_cache_mode(mode) : BFX_CACHE_ON;
  const char *lim = getenv("BERTFILL_CACHE_LIMIT");
  c->cache_limit = lim && atoll(lim) > 0 ? atoll(lim) : BFC_DEFAULT_TABLE_LIMIT;

  int rc = SQLITE_OK;
  for (size_t i = 0; i < sizeof functions / sizeof functions[0] && rc == SQLITE_OK; i++) {
    bfx_conn_ref(c);                        /* dropped by xDestroy (also on failure) */
    rc = sqlite3_create_function_v2(db, functions[i].name, functions[i].nargs,
                                    SQLITE_UTF8 | SQLITE_DIRECTONLY, c, functions[i].xFunc,
                                    NULL, NULL, bfx_conn_unref);
  }
  if (rc == SQLITE_OK) rc = bfx_register_prefill(db, c);
  if (rc == SQLITE_OK) rc = bfx_register_candidates(db, c);
  if (rc == SQLITE_OK) rc = bf_register_stats(db, pzErrMsg);
  if (rc != SQLITE_OK && pzErrMsg && !*pzErrMsg)
    *pzErrMsg = sqlite3_mprintf("bertfill: cannot register its functions: %s", sqlite3_errstr(rc));
  bfx_conn_unref(c);
  return rc;
}
