/*
** scalars.c — the scalar SQL functions that fill, tokenize, load and
** describe:
**
**   bert_fill(text)        the text with each [MASK] replaced by its best
**                          candidate (NULL for NULL; a text without a mask as
**                          it is)
**   bert_tokenize(text)    the tokens the model sees, as a JSON array
**   bert_load(dir [, precision])  make the model in dir the connection's
**                          model (NULL: back to BERTFILL_MODEL / the
**                          default), in precision 'fp32' (exact, the default
**                          unless BERTFILL_PRECISION says otherwise), 'int8'
**                          or 'bf16'
**   bert_debug()           JSON: kernels, BLAS, model, cache, guard, batching
**   bert_version()         the version of bertfill, e.g. '0.1.0' (version.h)
**
** Each one is a short sequence of steps from the layers below: argument
** text (text.c), the connection's model (models.c), tokens (text.c),
** candidates (lookup.c), a result or an error (errors.c).
*/
#include <stdlib.h>
#include <string.h>

#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3
#include "scalars.h"
#include "batcher.h"
#include "bounds.h"
#include "cache.h"
#include "conn.h"
#include "errors.h"
#include "guard.h"
#include "lookup.h"
#include "machine_guard.h"
#include "shared_batch.h"
#include "models.h"
#include "stats.h"
#include "text.h"
#include "util.h"
#include "version.h"

/* The connection's model, or an error reported on ctx. */
static bf_model *need_model(sqlite3_context *ctx, bfx_conn *c, bfx_err *e) {
  bf_model *m = bfx_conn_model(c, e);
  if (!m) bfx_error(ctx, e);
  return m;
}

/* The text argument v: 1 with s, n; 0 after setting the result (NULL for a
** NULL argument, or out of memory). */
static int text_arg(sqlite3_context *ctx, sqlite3_value *v, const char **s, int *n) {
  int a = bfx_arg_text(v, s, n);
  if (a == 0) sqlite3_result_null(ctx);
  else if (a < 0) sqlite3_result_error_nomem(ctx);
  return a > 0;
}

/* ---- bert_fill(text) ---- */

/* The best candidate of each mask on its own: rank 1 of fill_candidates. */
static int best_candidates(bfx_call *call, bfx_result *res) {
  return bfx_lookup_or_encode(call->c, call->m, &call->t, 1, res, &call->e);
}

void bfx_fn_fill(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  (void)argc;
  static const bfx_call_kind kind = {"bert_fill", "bert_fill", BF_CT_CALLS, BF_ST_CALL};
  const char *s;
  int n;
  if (!text_arg(ctx, argv[0], &s, &n)) return;
  bfx_fill_text(ctx, sqlite3_user_data(ctx), &kind, s, n, best_candidates);
}

/* ---- bert_tokenize(text) ---- */

void bfx_fn_tokenize(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  (void)argc;
  bfx_conn *c = sqlite3_user_data(ctx);
  const char *s;
  int n;
  if (!text_arg(ctx, argv[0], &s, &n)) return;
  bfx_err e = BFX_ERR_NONE;
  bf_model *m = need_model(ctx, c, &e);
  if (!m) return;
  bf_tokens t = {0};
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
    bfx_json_string(out, tok ? tok : "[UNK]");
  }
  sqlite3_str_appendchar(out, 1, ']');
  bf_tokens_free(&t);
  bfx_result_str(ctx, out);
}

/* ---- bert_load(dir [, precision]) ---- */

void bfx_fn_load(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  bfx_conn *c = sqlite3_user_data(ctx);
  const char *dir = argc > 0 ? (const char *)sqlite3_value_text(argv[0]) : NULL;
  if (argc > 0 && sqlite3_value_type(argv[0]) != SQLITE_NULL && !dir) {
    sqlite3_result_error_nomem(ctx);
    return;
  }
  if (dir && !dir[0]) {
    sqlite3_result_error(ctx,
                         "bert_load: empty directory name; pass the path of a model "
                         "directory (config.json, vocab.txt, model.safetensors), or NULL for "
                         "the default model",
                         -1);
    return;
  }
  bf_precision precision = bfx_default_precision();
  if (argc > 1 && sqlite3_value_type(argv[1]) != SQLITE_NULL) {
    const char *p = (const char *)sqlite3_value_text(argv[1]);
    if (!p) {
      sqlite3_result_error_nomem(ctx);
      return;
    }
    if (bf_precision_parse(p, &precision) != 0) {
      bfx_quote q;
      bfx_err e = BFX_ERR_NONE;
      bfx_errf(&e, SQLITE_ERROR, -1,
               "bert_load: unknown precision '%s': use 'fp32' (exact, the default), 'int8' "
               "(faster, approximate) or 'bf16' (between the two)",
               bfx_quoted(&q, p, -1));
      bfx_error(ctx, &e);
      return;
    }
  }
  bfx_err e = BFX_ERR_NONE;
  if (bfx_conn_set_model(c, dir, precision, &e) != SQLITE_OK) {
    bfx_error(ctx, &e);
    return;
  }
  char *d = bfx_model_describe(c->model);
  if (!d) {
    sqlite3_result_error_nomem(ctx);
    return;
  }
  sqlite3_result_text(ctx, d, -1, sqlite3_free);
}

/* ---- bert_debug() ---- */

/* {"gemm":..,"blas_core":..,"blas_config":..,["blas_error":..,]"threads":..,"cores":..,
** "extension":..,"sqlite_version":.. (opens the object) */
static void debug_engine(sqlite3_str *o) {
  char err[256] = "";
  int blas_ok = bf_blas_init(err, sizeof err) == BF_OK;
  sqlite3_str_appendall(o, "{\"gemm\":");
  bfx_json_string(o, bf_gemm_kernels());
  sqlite3_str_appendall(o, ",\"int8_kernels\":");
  bfx_json_string(o, bf_int8_kernels());
  sqlite3_str_appendall(o, ",\"bf16_kernels\":");
  bfx_json_string(o, bf_bf16_kernels());
  sqlite3_str_appendall(o, ",\"blas_core\":");
  bfx_json_string(o, blas_ok ? bf_blas_core() : "");
  sqlite3_str_appendall(o, ",\"blas_config\":");
  bfx_json_string(o, blas_ok ? bf_blas_config() : "");
  if (!blas_ok) {
    sqlite3_str_appendall(o, ",\"blas_error\":");
    bfx_json_string(o, err);
  }
  sqlite3_str_appendf(o, ",\"threads\":%d,\"cores\":%d", blas_ok ? bf_blas_threads() : 0,
                      bf_ncores());
  sqlite3_str_appendall(o, ",\"extension\":");
  bfx_json_string(o, bfx_extension_path());
  sqlite3_str_appendall(o, ",\"sqlite_version\":");
  bfx_json_string(o, sqlite3_libversion());
  sqlite3_str_appendall(o, ",\"version\":");
  bfx_json_string(o, BFX_VERSION);
}

/* ,"model":{..} or null,"env_model":..,"default_model_paths":..,"models_loaded":.. */
static void debug_model(sqlite3_str *o, bfx_conn *c) {
  sqlite3_str_appendall(o, ",\"model\":");
  if (c->model) {
    bf_model *m = c->model;
    const bf_config *f = bf_model_config(m);
    sqlite3_str_appendall(o, "{\"dir\":");
    bfx_json_string(o, bf_model_dir(m));
    sqlite3_str_appendall(o, ",\"source\":");
    bfx_json_string(o, c->model_source);
    sqlite3_str_appendall(o, ",\"dtype\":");
    bfx_json_string(o, bf_model_dtype(m));
    sqlite3_str_appendall(o, ",\"precision\":");
    bfx_json_string(o, bf_precision_name(bf_model_precision(m)));
    sqlite3_str_appendall(o, ",\"int8_weights\":");
    bfx_json_string(o, bf_model_int8_source(m));
    sqlite3_str_appendall(o, ",\"packed_weights\":");
    bfx_json_string(o, bf_model_packed_source(m));
    sqlite3_str_appendall(o, ",\"derived_file\":"); /* where: next to the weights, or the cache */
    bfx_json_string(o, bf_model_derived_file(m));
    sqlite3_str_appendall(o, ",\"cache_dir\":");
    bfx_json_string(o, bf_model_cache_dir(m));
    sqlite3_str_appendall(o, ",\"cache_dir_error\":");
    bfx_json_string(o, bf_model_cache_error(m));
    sqlite3_str_appendf(o,
                        ",\"config\":{\"vocab_size\":%d,\"hidden_size\":%d,"
                        "\"num_hidden_layers\":%d,\"num_attention_heads\":%d,"
                        "\"intermediate_size\":%d,\"max_position_embeddings\":%d,"
                        "\"type_vocab_size\":%d,\"layer_norm_eps\":%g}",
                        f->vocab_size, f->hidden_size, f->num_hidden_layers, f->num_attention_heads,
                        f->intermediate_size, f->max_position_embeddings, f->type_vocab_size,
                        (double)f->layer_norm_eps);
    sqlite3_str_appendall(o, ",\"fingerprint\":");
    bfx_json_string(o, bf_model_fingerprint(m));
    sqlite3_str_appendall(o, "}");
  } else {
    sqlite3_str_appendall(o, "null"); /* not loaded yet: loading is lazy */
  }
  const char *env = getenv("BERTFILL_MODEL");
  sqlite3_str_appendall(o, ",\"env_model\":");
  if (env) bfx_json_string(o, env);
  else sqlite3_str_appendall(o, "null");
  char *paths = bfx_default_model_paths();
  sqlite3_str_appendall(o, ",\"default_model_paths\":");
  bfx_json_string(o, paths ? paths : "");
  sqlite3_free(paths);
  sqlite3_str_appendf(o, ",\"models_loaded\":%d", bfx_models_loaded());
}

/* ,"cache":{..},"guard":{..},"batching":{..} (closes the object) */
static void debug_cache_guard_batching(sqlite3_str *o, bfx_conn *c) {
  long lru_n;
  size_t lru_b;
  bfc_lru_usage(&lru_n, &lru_b);
  sqlite3_str_appendf(o,
                      ",\"cache\":{\"mode\":\"%s\",\"table\":\"main.%s\",\"table_limit\":%lld,"
                      "\"lru_entries\":%ld,\"lru_max_entries\":%ld,\"lru_bytes\":%lld,"
                      "\"lru_max_bytes\":%lld,\"min_k\":%d}",
                      bfx_cache_mode_name(c->cache_mode), BFC_TABLE, (long long)c->cache_limit,
                      lru_n, bfc_lru_max_entries(), (long long)lru_b,
                      (long long)bfc_lru_max_bytes(), BFX_MIN_K);
  sqlite3_str_appendf(o,
                      ",\"guard\":{\"max_concurrent\":%d,\"max_concurrent_auto\":%s,"
                      "\"in_flight\":%d,\"waiting\":%d,\"busy_timeout_ms\":%d",
                      bfx_guard_max(), bfx_guard_max_auto() ? "true" : "false",
                      bfx_guard_in_flight(), bfx_guard_queued(), bfx_guard_timeout_ms());
  int machine = bfx_guard_machine_slots(); /* the machine-wide guard, when on */
  sqlite3_str_appendf(o, ",\"machine_slots\":%d", machine);
  if (machine) {
    sqlite3_str_appendf(o, ",\"machine_busy\":%d,\"machine_held\":%d,\"machine_file\":",
                        bfx_machine_busy(machine), bfx_machine_held());
    bfx_json_string(o, bfx_machine_path());
  }
  sqlite3_str_appendall(o, "}");
  sqlite3_str_appendf(o,
                      ",\"batching\":{\"on\":%s,\"max_seqs\":%d,\"max_tokens\":%d,"
                      "\"queued\":%d}",
                      bfx_batching() ? "true" : "false", BFX_BATCH_MAX_SEQS, BFX_BATCH_MAX_TOKENS,
                      bfx_batch_queued());
  /* the machine-wide queue of the connection's model (shared_batch.c) */
  bfx_shared_info si;
  bfx_shared_info_of(c->model, &si); /* not loaded yet: nothing to show */
  sqlite3_str_appendf(o, ",\"shared_batch\":{\"on\":%s,\"usable\":%s,\"file\":",
                      si.on ? "true" : "false", si.usable ? "true" : "false");
  bfx_json_string(o, si.path);
  sqlite3_str_appendf(o,
                      ",\"slots\":%d,\"posted\":%d,\"taken\":%d,\"leader_pid\":%d,"
                      "\"leader_changes\":%llu,\"batches\":%llu}}",
                      si.slots, si.posted, si.taken, si.leader_pid,
                      (unsigned long long)si.leader_changes, (unsigned long long)si.batches);
}

void bfx_fn_debug(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  (void)argc;
  (void)argv;
  bfx_conn *c = sqlite3_user_data(ctx);
  sqlite3_str *o = sqlite3_str_new(NULL);
  debug_engine(o);
  debug_model(o, c);
  debug_cache_guard_batching(o, c);
  bfx_result_str(ctx, o);
}

/* ---- bert_version() ---- */

void bfx_fn_version(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  (void)argc;
  (void)argv;
  sqlite3_result_text(ctx, BFX_VERSION, -1, SQLITE_STATIC);
}
