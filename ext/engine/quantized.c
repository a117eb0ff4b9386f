/*
** quantized.c — the int8 weights of a model loaded as BF_PRECISION_INT8.
**
** Every Linear the forward pass multiplies by (per layer: query, key, value,
** attention output, intermediate, output; then the MLM head's dense layer
** and its decoder) gets an int8 copy, quantized by qg_quantize_weights
** (qgemm.h: symmetric int8 per output row, an fp32 scale and the int32 row
** sum per row).  The copy is a deterministic function of model.safetensors,
** so it is made once and kept next to it:
**
**   dir/model.int8.safetensors
**     "bertfill.int8.source"  I64 [7 + n]  the record (derived.h: the
**                                       weights' hash and identity, a
**                                       checksum per tensor)
**     "<matrix>.scale"        F32 [n]
**     "<matrix>.sum"          I32 [n]
**     "<matrix>.int8"         I8  [ceil(n/64), ceil(k/4), 64, 4]  (the codes
**                                       packed for the kernels, qgemm.h:
**                                       panels of 64 outputs, 4 values of k
**                                       side by side; 64-byte aligned)
**   with <matrix> "encoder.layer.L.attention.self.query", ...,
**   "cls.predictions.transform.dense", "cls.predictions.decoder".
**
** An int8 load maps that file read-only (MAP_SHARED: processes share one
** copy in the page cache, as they do the fp32 file) when it exists, its
** record proves it was made from the model.safetensors just loaded and
** every tensor's checksum holds (derived.c).  Otherwise it
** quantizes now (about a second for bert-base), writes the file under a
** temporary name and renames it into place (so readers never see half a
** file, and two processes doing this at once are harmless), and maps it.
** When the directory cannot be written (read-only, not ours, disk full), the
** file goes to the model's folder of the per-user cache (derived.c), still
** one copy for every process of the user; only when that cannot be written
** either (no HOME, a cache directory refused) do the quantized weights stay
** in private memory (int8_source "memory": about a quarter of the fp32
** weights, per process; bert_debug's model.cache_dir_error says why).  The fp32 file stays mapped in
** both cases: the embeddings, LayerNorms and biases come from it.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "derived.h"
#include "model.h"
#include "safetensors.h"
#include "util.h"

#define INT8_FILE "model.int8.safetensors"
#define INT8_FORMAT 2 /* bump when the quantization or the layout changes (2: packed codes) */
#define SOURCE_TENSOR "bertfill.int8.source"

/* One matrix to quantize: its fp32 weight [n][k], where its int8 copy goes,
** and its name in the file. */
typedef struct qmat {
  char name[96];
  const float *w;
  int n, k;
  qg_weights *dst;
} qmat;

/* The matrices of m in file order: 6 per layer, then the head's two. */
static int n_matrices(const bf_model *m) { return 6 * m->cfg.num_hidden_layers + 2; }

static void matrix_at(bf_model *m, int i, qmat *q) {
  int H = m->cfg.hidden_size, I = m->cfg.intermediate_size, V = m->cfg.vocab_size;
  int nl = m->cfg.num_hidden_layers;
  if (i >= 6 * nl) {
    int head = i == 6 * nl;
    *q = (qmat){.w = head ? m->head_w : m->dec_w,
                .n = head ? H : V,
                .k = H,
                .dst = head ? &m->head8 : &m->dec8};
    snprintf(q->name, sizeof q->name, "cls.predictions.%s", head ? "transform.dense" : "decoder");
    return;
  }
  bf_layer *y = &m->layers[i / 6];
  static const char *const sub[6] = {"attention.self.query", "attention.self.key",
                                     "attention.self.value", "attention.output.dense",
                                     "intermediate.dense",   "output.dense"};
  switch (i % 6) {
    case 0: *q = (qmat){.w = y->q_w, .n = H, .k = H, .dst = &y->q8}; break;
    case 1: *q = (qmat){.w = y->k_w, .n = H, .k = H, .dst = &y->k8}; break;
    case 2: *q = (qmat){.w = y->v_w, .n = H, .k = H, .dst = &y->v8}; break;
    case 3: *q = (qmat){.w = y->ao_w, .n = H, .k = H, .dst = &y->ao8}; break;
    case 4: *q = (qmat){.w = y->i_w, .n = I, .k = H, .dst = &y->i8}; break;
    default: *q = (qmat){.w = y->o_w, .n = H, .k = I, .dst = &y->o8}; break;
  }
  snprintf(q->name, sizeof q->name, "encoder.layer.%d.%s", i / 6, sub[i % 6]);
}

/* ------------------------------------------------------ the file's layout */

/* The int8 file of m (derived.h): scale and sum of every matrix (4-byte
** aligned), then the packed int8 codes of every matrix, each 64-byte
** aligned (mapped, a block of 16 outputs' four values is one cache line).
** t[3*i + 0/1/2]: scale, sum, int8 of matrix i.  Laid out; NULL when out of
** memory. */
static derived_tensor *int8_file(bf_model *m, int nm, derived_spec *d) {
  derived_tensor *t = calloc(3 * (size_t)nm, sizeof *t);
  if (!t) return NULL;
  qmat q;
  for (int i = 0; i < nm; i++) {
    matrix_at(m, i, &q);
    t[3 * i] = (derived_tensor){.dtype = ST_F32,
                                .ndim = 1,
                                .shape = {q.n},
                                .bytes = (size_t)q.n * sizeof(float),
                                .align = 4};
    t[3 * i + 1] = (derived_tensor){.dtype = ST_I32,
                                    .ndim = 1,
                                    .shape = {q.n},
                                    .bytes = (size_t)q.n * sizeof(int32_t),
                                    .align = 4};
    t[3 * i + 2] = (derived_tensor){.dtype = ST_I8,
                                    .ndim = 4,
                                    .shape = {(q.n + 63) / 64, (q.k + 3) / 4, 64, 4},
                                    .bytes = qg_weights_bytes(q.n, q.k),
                                    .align = 64};
    snprintf(t[3 * i].name, sizeof t->name, "%s.scale", q.name);
    snprintf(t[3 * i + 1].name, sizeof t->name, "%s.sum", q.name);
    snprintf(t[3 * i + 2].name, sizeof t->name, "%s.int8", q.name);
  }
  /* file order: every scale and sum, then every matrix's codes */
  derived_tensor *o = malloc(3 * (size_t)nm * sizeof *o);
  if (!o) {
    free(t);
    return NULL;
  }
  for (int i = 0; i < nm; i++) {
    o[2 * i] = t[3 * i];
    o[2 * i + 1] = t[3 * i + 1];
    o[2 * nm + i] = t[3 * i + 2];
  }
  free(t);
  *d = (derived_spec){INT8_FILE, "bertfill int8 weights", SOURCE_TENSOR, INT8_FORMAT, o, 3 * nm, 0};
  derived_layout(d);
  return o;
}

/* Point the int8 copies into a data area laid out as d says. */
static void point_into(bf_model *m, int nm, const derived_spec *d, const unsigned char *data) {
  qmat q;
  for (int i = 0; i < nm; i++) {
    matrix_at(m, i, &q);
    *q.dst = (qg_weights){q.n, q.k, (const int8_t *)(data + d->t[2 * nm + i].off),
                          (const float *)(data + d->t[2 * i].off),
                          (const int32_t *)(data + d->t[2 * i + 1].off)};
  }
}

/* ------------------------------------------------------ making the file */

/* Quantize every matrix into data (laid out as d says).  0, or -1 with err
** (a weight that is NaN or infinite). */
static int quantize_all(bf_model *m, int nm, const derived_spec *d, unsigned char *data, char *err,
                        size_t errlen) {
  qmat q;
  for (int i = 0; i < nm; i++) {
    matrix_at(m, i, &q);
    if (qg_quantize_weights(q.w, q.n, q.k, (int8_t *)(data + d->t[2 * nm + i].off),
                            (float *)(data + d->t[2 * i].off),
                            (int32_t *)(data + d->t[2 * i + 1].off)) != 0) {
      bf_errf(err, errlen,
              "%s/model.safetensors: the weights of %s hold NaN or infinity; they cannot be "
              "quantized to int8",
              m->dir, q.name);
      return -1;
    }
  }
  return 0;
}

/* ---------------------------------------------------------------- entry */

int bf_quantized_attach(bf_model *m, char *err, size_t errlen) {
  int nm = n_matrices(m);
  derived_spec d;
  derived_tensor *t = int8_file(m, nm, &d);
  const unsigned char *mapped;
  int rc = -1;
  if (!t) {
    bf_errf(err, errlen, "out of memory");
    return -1;
  }
  if (derived_map(m, &d, &mapped)) {
    point_into(m, nm, &d, mapped);
    m->int8_source = "file";
    rc = 0;
    goto done;
  }
  unsigned char *data = NULL;
  if (posix_memalign((void **)&data, 64, d.data_len) != 0) {
    bf_errf(err, errlen, "out of memory quantizing %s to int8 (%zu bytes)", m->dir, d.data_len);
    goto done;
  }
  derived_zero_gaps(&d, data);
  if (quantize_all(m, nm, &d, data, err, errlen) != 0) {
    free(data);
    goto done;
  }
  if (derived_write(m, &d, data) == 0 && derived_map(m, &d, &mapped)) {
    point_into(m, nm, &d, mapped);
    m->int8_source = "file";
    free(data);
  } else { /* neither the directory nor the cache can be written: private memory */
    point_into(m, nm, &d, data);
    m->own8 = data;
    m->int8_source = "memory";
  }
  rc = 0;
done:
  free(t);
  return rc;
}

void bf_quantized_detach(bf_model *m) {
  free(m->own8);
  m->own8 = NULL;
}
