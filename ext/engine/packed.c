/*
** packed.c — the packed fp32 panels of a model loaded as BF_PRECISION_FP32.
**
** The products of an fp32 load run fastest from W packed into panels of
** GEMM_PACK = 64 outputs, k-major (gemm.h's gemm_pack_panels; the AVX-512
** kernel set's packed kernel reads them as one sequential stream, with no
** copying per call).  The six matrices of every encoder layer (query, key,
** value, attention output, intermediate, output) get such a copy; the MLM
** head's two run for the masks only and stay in place.  The copy is a
** deterministic function of model.safetensors, so it is made once and kept
** next to it (derived.h: written under a temporary name, renamed into
** place, mapped read-only and shared by every process):
**
**   dir/model.packed.safetensors
**     "bertfill.packed.source"  I64 [3]  {format version, size and mtime (ns)
**                                         of the model.safetensors it was
**                                         made from}
**     "<matrix>.panels"          F32 [ceil(n/64), k, 64]  (64-byte aligned)
**   with <matrix> "encoder.layer.L.attention.self.query", ...
**
** It is as large as the encoder's matrices (340 MB for bert-base) and the
** first fp32 load makes it (1.7-2.2 s for bert-base on a Zen 5).  Packing is only
** worth it, and only happens, when the kernel set has a packed kernel
** (AVX-512).  When it does not, when BERTFILL_PACKED=0, or when the file
** cannot be written (read-only directory, disk full), the products read W in
** place as before (packed_source says why): never a private copy, which would
** cost every process the matrices' size again.
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

/* Matrix i (6 per layer) of m: its fp32 weight [n][k] and where its panels go. */
static void matrix_at(bf_model *m, int i, const float **w, int *n, int *k, const float ***dst,
                      char *name, size_t namelen) {
  int H = m->cfg.hidden_size, I = m->cfg.intermediate_size;
  bf_layer *y = &m->layers[i / 6];
  static const char *const sub[6] = {"attention.self.query", "attention.self.key",
                                     "attention.self.value", "attention.output.dense",
                                     "intermediate.dense",   "output.dense"};
  *n = i % 6 == 4 ? I : H;
  *k = i % 6 == 5 ? I : H;
  switch (i % 6) {
    case 0: *w = y->q_w, *dst = &y->q_p; break;
    case 1: *w = y->k_w, *dst = &y->k_p; break;
    case 2: *w = y->v_w, *dst = &y->v_p; break;
    case 3: *w = y->ao_w, *dst = &y->ao_p; break;
    case 4: *w = y->i_w, *dst = &y->i_p; break;
    default: *w = y->o_w, *dst = &y->o_p; break;
  }
  snprintf(name, namelen, "encoder.layer.%d.%s.panels", i / 6, sub[i % 6]);
}

/* Why the products cannot use panels, or NULL when they can. */
static const char *why_not(void) {
  const gemm_kernel_table *kt = kernels_chosen()->gemm;
  if (!kt || !kt->packed_cols) return "in place (no AVX-512 kernels)";
  if (!bf_env_flag("BERTFILL_PACKED", 1)) return "in place (BERTFILL_PACKED=0)";
  return NULL;
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
  const float *w, **dst;
  int n, k;
  for (int i = 0; i < nm; i++) {
    matrix_at(m, i, &w, &n, &k, &dst, t[i].name, sizeof t[i].name);
    t[i].dtype = ST_F32;
    t[i].ndim = 3;
    t[i].shape[0] = (n + GEMM_PACK - 1) / GEMM_PACK;
    t[i].shape[1] = k;
    t[i].shape[2] = GEMM_PACK;
    t[i].bytes = gemm_packed_floats(n, k) * sizeof(float);
    t[i].align = 64;
  }
  derived_spec d =
    {PACKED_FILE, "bertfill packed fp32 weights", SOURCE_TENSOR, PACKED_FORMAT, t, nm, 0};
  derived_layout(&d);
  const unsigned char *mapped = NULL;
  if (!derived_map(m, &d, &mapped)) {
    unsigned char *data = NULL;
    if (posix_memalign((void **)&data, 64, d.data_len) == 0) {
      derived_source_id(m, &d, data);
      derived_zero_gaps(&d, data);
      for (int i = 0; i < nm; i++) {
        matrix_at(m, i, &w, &n, &k, &dst, t[i].name, sizeof t[i].name);
        gemm_pack_panels((float *)(data + t[i].off), w, n, k);
      }
      if (derived_write(m, &d, data) != 0 || !derived_map(m, &d, &mapped))
        m->packed_source = "in place (the directory could not be written)";
      free(data);
    }
  }
  if (mapped) {
    for (int i = 0; i < nm; i++) {
      matrix_at(m, i, &w, &n, &k, &dst, t[i].name, sizeof t[i].name);
      *dst = (const float *)(mapped + t[i].off);
    }
    m->packed_source = "file";
  }
  free(t);
}
