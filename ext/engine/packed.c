/*
** packed.c — the encoder's matrices packed into the panels the kernels read:
** fp32 panels for a model loaded as BF_PRECISION_FP32 (bf_packed_attach),
** bf16 panels for one loaded as BF_PRECISION_BF16 (bf_bf16_attach).
**
** The products of an fp32 load run fastest from W packed into panels of
** GEMM_PACK = 64 outputs, k-major (gemm.h's gemm_pack_panels; the AVX-512
** kernel set's packed kernel reads them as one sequential stream, with no
** copying per call); a bf16 load's products read only bf16 panels (gemm.h's
** gemm_pack_bf16: per pair of k, each output's two weights side by side, as
** vdpbf16ps takes them).  The six matrices of every encoder layer (query,
** key, value, attention output, intermediate, output) get such a copy, and
** in bf16 the MLM head's two as well (an fp32 load reads those in place:
** they run for the masks only).  The copy
** is a deterministic function of model.safetensors, so it is made once and
** kept next to it (derived.h: written under a temporary name, renamed into
** place, mapped read-only and shared by every process; used only when it
** proves it was made from these weights and every tensor's checksum holds,
** derived.c):
**
**   dir/model.packed.safetensors                (fp32 loads)
**     "bertfill.packed.source"  I64 [7 + n]  the record (derived.h: the
**                                         weights' hash and identity, a
**                                         checksum per tensor)
**     "<matrix>.panels"          F32 [ceil(n/64), k, 64]  (64-byte aligned)
**   dir/model.bf16.safetensors                  (bf16 loads)
**     "bertfill.bf16.source"    I64 [7 + n]  (the same)
**     "<matrix>.panels"          BF16 [ceil(n/64), ceil(k/2), 64, 2]
**   with <matrix> "encoder.layer.L.attention.self.query", ... (and in the
**   bf16 file "cls.predictions.transform.dense", "cls.predictions.decoder")
**
** The fp32 file is as large as the encoder's matrices (340 MB for
** bert-base; the first fp32 load makes it in 1.7-2.2 s on a Zen 5), the bf16
** file half that and the head's (204 MB; 2.3 s).  fp32 packing is only worth it, and only happens, when the
** kernel set has a packed kernel (AVX-512).  A read-only directory keeps
** these files in the model's folder of the per-user cache instead (derived.c).
** When the kernels have no use for panels, when BERTFILL_PACKED=0, or when
** the file can be written neither there nor next to the weights (no HOME,
** a cache directory refused, disk full), the fp32 products read W in place
** as before (packed_source says why): never a private copy, which would cost
** every process the matrices' size again.  A bf16 load needs its panels:
** where the file cannot be written they are made in private memory
** (packed_source "memory").
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "derived.h"
#include "gemm.h"
#include "model.h"
#include "util.h"

#define PACKED_FILE "model.packed.safetensors"
#define PACKED_FORMAT 1 /* bump when the layout changes */
#define SOURCE_TENSOR "bertfill.packed.source"
#define BF16_FILE "model.bf16.safetensors"
#define BF16_FORMAT 1
#define BF16_SOURCE "bertfill.bf16.source"

/* Matrix i of m (6 per layer, then, for bf16 only, the MLM head's dense and
** decoder): its fp32 weight [n][k], where its fp32 and its bf16 panels go
** (fp32: NULL for the head's), and the name of its panels' tensor. */
typedef struct matrix {
  const float *w;
  int n, k;
  const float **fp32;    /* the layer's *_p */
  const uint32_t **bf16; /* the layer's *_h */
  char name[128];
} matrix;

static matrix matrix_at(bf_model *m, int i) {
  int H = m->cfg.hidden_size, I = m->cfg.intermediate_size, L = m->cfg.num_hidden_layers;
  if (i >= 6 * L) { /* bf16 only: the MLM head's two (fp32 loads read them in place) */
    int dec = i > 6 * L;
    matrix a = {.w = dec ? m->dec_w : m->head_w,
                .n = dec ? m->cfg.vocab_size : H,
                .k = H,
                .bf16 = dec ? &m->dec_h : &m->head_h};
    snprintf(a.name, sizeof a.name, "cls.predictions.%s.panels",
             dec ? "decoder" : "transform.dense");
    return a;
  }
  bf_layer *y = &m->layers[i / 6];
  static const char *const sub[6] = {"attention.self.query", "attention.self.key",
                                     "attention.self.value", "attention.output.dense",
                                     "intermediate.dense",   "output.dense"};
  matrix a = {.n = i % 6 == 4 ? I : H, .k = i % 6 == 5 ? I : H};
  switch (i % 6) {
    case 0: a.w = y->q_w, a.fp32 = &y->q_p, a.bf16 = &y->q_h; break;
    case 1: a.w = y->k_w, a.fp32 = &y->k_p, a.bf16 = &y->k_h; break;
    case 2: a.w = y->v_w, a.fp32 = &y->v_p, a.bf16 = &y->v_h; break;
    case 3: a.w = y->ao_w, a.fp32 = &y->ao_p, a.bf16 = &y->ao_h; break;
    case 4: a.w = y->i_w, a.fp32 = &y->i_p, a.bf16 = &y->i_h; break;
    default: a.w = y->o_w, a.fp32 = &y->o_p, a.bf16 = &y->o_h; break;
  }
  snprintf(a.name, sizeof a.name, "encoder.layer.%d.%s.panels", i / 6, sub[i % 6]);
  return a;
}

/* Why the products cannot use panels, or NULL when they can. */
static const char *why_not(void) {
  const gemm_kernel_table *kt = kernels_chosen()->gemm;
  if (!kt || !kt->packed_cols) return "in place (no AVX-512 kernels)";
  if (!bf_env_flag("BERTFILL_PACKED", 1)) return "in place (BERTFILL_PACKED=0)";
  return NULL;
}

/* The panels of every matrix of m in kind bf16 (1) or fp32 (0): from the
** file of spec d when it is m's, else made now into a buffer and written
** there.  Returns the data area the panels are in (the mapped file, or
** *owned when the file could not be written or mapped: the caller keeps or
** frees it), or NULL when out of memory. */
static const unsigned char *attach(bf_model *m, derived_spec *d, int bf16, void **owned) {
  int nm = d->n;
  *owned = NULL;
  for (int i = 0; i < nm; i++) {
    matrix a = matrix_at(m, i);
    derived_tensor *t = &d->t[i];
    snprintf(t->name, sizeof t->name, "%s", a.name);
    t->dtype = bf16 ? ST_BF16 : ST_F32;
    t->ndim = bf16 ? 4 : 3;
    t->shape[0] = (a.n + GEMM_PACK - 1) / GEMM_PACK;
    t->shape[1] = bf16 ? (a.k + 1) / 2 : a.k;
    t->shape[2] = GEMM_PACK;
    t->shape[3] = 2;
    t->bytes = bf16 ? gemm_bf16_words(a.n, a.k) * sizeof(uint32_t)
                    : gemm_packed_floats(a.n, a.k) * sizeof(float);
    t->align = 64;
  }
  derived_layout(d);
  const unsigned char *mapped = NULL;
  if (derived_map(m, d, &mapped)) return mapped;
  unsigned char *data = NULL;
  if (posix_memalign((void **)&data, 64, d->data_len) != 0) return NULL;
  derived_zero_gaps(d, data);
  for (int i = 0; i < nm; i++) {
    matrix a = matrix_at(m, i);
    if (bf16) gemm_pack_bf16((uint32_t *)(data + d->t[i].off), a.w, a.n, a.k);
    else gemm_pack_panels((float *)(data + d->t[i].off), a.w, a.n, a.k);
  }
  if (derived_write(m, d, data) == 0 && derived_map(m, d, &mapped)) {
    free(data);
    return mapped;
  }
  *owned = data;
  return data;
}

void bf_packed_attach(bf_model *m) {
  m->packed_source = why_not();
  if (m->packed_source) return;
  int nm = 6 * m->cfg.num_hidden_layers;
  if (nm == 0) {
    m->packed_source = "in place (no layers)";
    return;
  }
  derived_tensor *t = calloc((size_t)nm, sizeof *t);
  m->packed_source = "in place (out of memory)";
  if (!t) return;
  derived_spec d =
    {PACKED_FILE, "bertfill packed fp32 weights", SOURCE_TENSOR, PACKED_FORMAT, t, nm, 0};
  void *owned;
  const unsigned char *data = attach(m, &d, 0, &owned);
  if (owned) { /* not written: in place rather than a private copy */
    free(owned);
    m->packed_source = "in place (neither the directory nor the cache directory could be written)";
  } else if (data) {
    for (int i = 0; i < nm; i++) *matrix_at(m, i).fp32 = (const float *)(data + t[i].off);
    m->packed_source = "file";
  }
  free(t);
}

int bf_bf16_attach(bf_model *m, char *err, size_t errlen) {
  int nm = 6 * m->cfg.num_hidden_layers + 2; /* and the MLM head's two */
  derived_tensor *t = calloc((size_t)nm, sizeof *t);
  if (!t) {
    bf_errf(err, errlen, "out of memory for the bf16 weights");
    return -1;
  }
  derived_spec d = {BF16_FILE, "bertfill bf16 weights", BF16_SOURCE, BF16_FORMAT, t, nm, 0};
  const unsigned char *data = attach(m, &d, 1, &m->own_h);
  if (!data) {
    free(t);
    bf_errf(err, errlen, "out of memory for the bf16 weights (%zu MB)", d.data_len >> 20);
    return -1;
  }
  m->packed_source = m->own_h ? "memory" : "file";
  for (int i = 0; i < nm; i++) *matrix_at(m, i).bf16 = (const uint32_t *)(data + t[i].off);
  free(t);
  return 0;
}
