/*
** model.c — the loaded model as an object: made empty (bf_model_new) and
** filled by load.c, shared by reference count, freed with everything it
** owns (mappings, converted tensors, the int8 copy), and read through the
** accessors of bertfill.h.  Its layout is model.h's.
*/
#include "derived.h"
#include "model.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

bf_model *bf_model_new(const char *dir) {
  bf_model *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  pthread_mutex_init(&m->fp_mu, NULL);
  m->int8_source = "";
  m->packed_source = "";
  m->dmap_fd = -1;
  atomic_init(&m->refcount, 1);
  m->dir = strdup(dir);
  if (!m->dir) {
    bf_model_free(m);
    return NULL;
  }
  return m;
}

void bf_model_free(bf_model *m) {
  if (!m) return;
  if (m->tok) bf_tokenizer_free(m->tok);
  free(m->display);
  for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
  free(m->owned);
  free(m->layers);
  bf_quantized_detach(m);
  free(m->own_h);
  derived_unmap(m);
  if (m->map) {
    munmap(m->map, m->map_len);
    if (m->map_fd >= 0) close(m->map_fd);
  }
  pthread_mutex_destroy(&m->fp_mu);
  free(m->cache_dir);
  free(m->dir);
  free(m);
}

void bf_model_retain(bf_model *m) {
  if (m) atomic_fetch_add_explicit(&m->refcount, 1, memory_order_relaxed);
}

void bf_model_release(bf_model *m) {
  if (!m) return;
  if (atomic_fetch_sub_explicit(&m->refcount, 1, memory_order_acq_rel) == 1) bf_model_free(m);
}

const bf_config *bf_model_config(const bf_model *m) { return &m->cfg; }
const bf_tokenizer *bf_model_tokenizer(const bf_model *m) { return m->tok; }
const char *bf_model_dir(const bf_model *m) { return m->dir; }
const char *bf_model_dtype(const bf_model *m) { return m->dtype; }
bf_precision bf_model_precision(const bf_model *m) { return m->precision; }
const char *bf_model_int8_source(const bf_model *m) { return m->int8_source; }
const char *bf_model_packed_source(const bf_model *m) { return m->packed_source; }
const char *bf_model_derived_file(const bf_model *m) { return m->dmap_path ? m->dmap_path : ""; }
const char *bf_model_cache_dir(const bf_model *m) { return m->cache_dir ? m->cache_dir : ""; }
const char *bf_model_cache_error(const bf_model *m) {
  return atomic_load(&((bf_model *)m)->cache_error_state) == 2 ? m->cache_error : "";
}

const char *bf_model_token(const bf_model *m, int32_t id) {
  if (!m || id < 0 || id >= m->cfg.vocab_size) return NULL;
  return m->display[id];
}

int bf_precision_parse(const char *name, bf_precision *out) {
  if (name && strcasecmp(name, "fp32") == 0) *out = BF_PRECISION_FP32;
  else if (name && strcasecmp(name, "int8") == 0) *out = BF_PRECISION_INT8;
  else if (name && strcasecmp(name, "bf16") == 0) *out = BF_PRECISION_BF16;
  else return -1;
  return 0;
}

const char *bf_precision_name(bf_precision p) {
  return p == BF_PRECISION_INT8 ? "int8" : p == BF_PRECISION_BF16 ? "bf16" : "fp32";
}
