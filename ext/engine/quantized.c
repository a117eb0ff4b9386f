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
**     "bertfill.int8.source"  I64 [3]  {format version, size and mtime (ns)
**                                       of the model.safetensors it was made
**                                       from}
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
** copy in the page cache, as they do the fp32 file) when it exists and its
** source entry matches the model.safetensors just loaded.  Otherwise it
** quantizes now (about a second for bert-base), writes the file under a
** temporary name and renames it into place (so readers never see half a
** file, and two processes doing this at once are harmless), and maps it.
** When the directory cannot be written (read-only, not ours, disk full), the
** quantized weights stay in private memory (int8_source "memory": about a
** quarter of the fp32 weights, per process).  The fp32 file stays mapped in
** both cases: the embeddings, LayerNorms and biases come from it.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

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

/* What identifies the model.safetensors an int8 file was made from. */
static void source_id(const bf_model *m, int64_t id[3]) {
  id[0] = INT8_FORMAT;
  id[1] = (int64_t)m->map_len;
  id[2] = m->map_mtime_ns;
}

/* ------------------------------------------------------ the file's layout */

/* Byte offsets of everything in the data area: the source entry (24 bytes),
** then scale and sum of every matrix (4-byte aligned), then the packed
** int8 codes of every matrix, each 64-byte aligned (the header is padded so
** that the data area starts on a multiple of 64 too: mapped, a block of 16
** outputs' four values is one cache line).  off[3*i + 0/1/2]: scale, sum,
** int8 of matrix i; off[3*nm]: end. */
static size_t *layout(bf_model *m, int nm) {
  size_t *off = malloc((3 * (size_t)nm + 1) * sizeof *off);
  if (!off) return NULL;
  size_t o = 3 * sizeof(int64_t);
  qmat q;
  for (int i = 0; i < nm; i++) {
    matrix_at(m, i, &q);
    off[3 * i] = o;
    o += (size_t)q.n * sizeof(float);
    off[3 * i + 1] = o;
    o += (size_t)q.n * sizeof(int32_t);
  }
  for (int i = 0; i < nm; i++) {
    matrix_at(m, i, &q);
    o = (o + 63) & ~(size_t)63;
    off[3 * i + 2] = o;
    o += qg_weights_bytes(q.n, q.k);
  }
  off[3 * nm] = o;
  return off;
}

/* Point the int8 copies into a data area laid out as off says. */
static void point_into(bf_model *m, int nm, const size_t *off, const unsigned char *data) {
  qmat q;
  for (int i = 0; i < nm; i++) {
    matrix_at(m, i, &q);
    *q.dst = (qg_weights){q.n, q.k, (const int8_t *)(data + off[3 * i + 2]),
                          (const float *)(data + off[3 * i]),
                          (const int32_t *)(data + off[3 * i + 1])};
  }
}

/* ------------------------------------------------- using an existing file */

/* 1 if f is an int8 file of this very model (source entry, and every
** tensor with the dtype, shape and place the layout gives it), else 0. */
static int file_matches(bf_model *m, const st_file *f, int nm, const size_t *off) {
  const st_tensor *t = st_find(f, SOURCE_TENSOR);
  int64_t want[3];
  source_id(m, want);
  if (!t || t->dtype != ST_I64 || t->n_elems != 3 || t->begin != 0 ||
      memcmp(t->data, want, sizeof want) != 0)
    return 0;
  if (f->data_len != off[3 * nm]) return 0;
  qmat q;
  char name[128];
  static const char *const part[3] = {"scale", "sum", "int8"};
  static const st_dtype dt[3] = {ST_F32, ST_I32, ST_I8};
  for (int i = 0; i < nm; i++) {
    matrix_at(m, i, &q);
    for (int p = 0; p < 3; p++) {
      snprintf(name, sizeof name, "%s.%s", q.name, part[p]);
      t = st_find(f, name);
      int ndim = p == 2 ? 4 : 1;
      if (!t || t->dtype != dt[p] || t->ndim != ndim || t->begin != off[3 * i + p]) return 0;
      if (p < 2 ? t->shape[0] != q.n
                : t->shape[0] != (q.n + 63) / 64 || t->shape[1] != (q.k + 3) / 4 ||
                    t->shape[2] != 64 || t->shape[3] != 4)
        return 0;
    }
  }
  return 1;
}

/* Map path and use it if it is this model's int8 file: 1; not there, or
** not a match (stale, other model, damaged): 0. */
static int use_file(bf_model *m, const char *path, int nm, const size_t *off) {
  st_file f;
  char ignored[256];
  if (st_open(&f, path, ignored, sizeof ignored) != 0) return 0;
  if (!file_matches(m, &f, nm, off)) {
    st_close(&f);
    return 0;
  }
  point_into(m, nm, off, f.data);
  m->map8 = f.map;
  m->map8_len = f.map_len;
  m->map8_fd = f.fd;
  m->map8_mtime_ns = f.mtime_ns;
  f.map = NULL; /* the model owns the mapping and the descriptor now */
  f.fd = -1;
  st_close(&f);
  m->int8_source = "file";
  return 1;
}

/* ------------------------------------------------------ making the file */

/* Quantize every matrix into data (laid out as off says), the source entry
** included.  0, or -1 with err (a weight that is NaN or infinite). */
static int quantize_all(bf_model *m, int nm, const size_t *off, unsigned char *data, char *err,
                        size_t errlen) {
  int64_t id[3];
  source_id(m, id);
  memcpy(data, id, sizeof id);
  qmat q;
  for (int i = 0; i < nm; i++) {
    matrix_at(m, i, &q);
    if (qg_quantize_weights(q.w, q.n, q.k, (int8_t *)(data + off[3 * i + 2]),
                            (float *)(data + off[3 * i]),
                            (int32_t *)(data + off[3 * i + 1])) != 0) {
      bf_errf(err, errlen,
              "%s/model.safetensors: the weights of %s hold NaN or infinity; they cannot be "
              "quantized to int8",
              m->dir, q.name);
      return -1;
    }
  }
  return 0;
}

/* The safetensors header for the layout off (JSON padded with spaces so
** that the 8-byte length and the header end on a multiple of 64 bytes: the
** data area, and so every int8 matrix, is 64-byte aligned in the file and
** in its mapping), malloc'd, length in *len; NULL when out of memory. */
static char *make_header(bf_model *m, int nm, const size_t *off, size_t *len) {
  size_t cap = 256 + (size_t)nm * 3 * 200, n = 0;
  char *h = malloc(cap);
  if (!h) return NULL;
  n += (size_t)snprintf(h + n, cap - n,
                        "{\"__metadata__\":{\"format\":\"bertfill int8 "
                        "weights\",\"version\":\"%d\","
                        "\"made_from\":\"model.safetensors\"},"
                        "\"%s\":{\"dtype\":\"I64\",\"shape\":[3],\"data_offsets\":[0,24]}",
                        INT8_FORMAT, SOURCE_TENSOR);
  qmat q;
  for (int i = 0; i < nm; i++) {
    matrix_at(m, i, &q);
    n += (size_t)
      snprintf(h + n, cap - n,
               ",\"%s.scale\":{\"dtype\":\"F32\",\"shape\":[%d],\"data_offsets\":[%zu,%zu]}"
               ",\"%s.sum\":{\"dtype\":\"I32\",\"shape\":[%d],\"data_offsets\":[%zu,%zu]}"
               ",\"%s.int8\":{\"dtype\":\"I8\",\"shape\":[%d,%d,64,4],"
               "\"data_offsets\":[%zu,%zu]}",
               q.name, q.n, off[3 * i], off[3 * i + 1], q.name, q.n, off[3 * i + 1],
               off[3 * i + 1] + (size_t)q.n * 4, q.name, (q.n + 63) / 64, (q.k + 3) / 4,
               off[3 * i + 2], off[3 * i + 2] + qg_weights_bytes(q.n, q.k));
  }
  n += (size_t)snprintf(h + n, cap - n, "}");
  while ((8 + n) % 64) h[n++] = ' ';
  *len = n;
  return h;
}

/* Write the data area (and its header) to path, replacing it whole
** (bf_write_file_replace): 0, or -1 (nothing left behind). */
static int write_file(bf_model *m, const char *path, int nm, const size_t *off,
                      const unsigned char *data) {
  size_t hlen = 0;
  char *header = make_header(m, nm, off, &hlen);
  if (!header) return -1;
  unsigned char n8[8];
  for (int i = 0; i < 8; i++) n8[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
  const void *part[3] = {n8, header, data};
  size_t len[3] = {8, hlen, off[3 * nm]};
  int rc = bf_write_file_replace(path, 3, part, len);
  free(header);
  return rc;
}

/* ---------------------------------------------------------------- entry */

int bf_quantized_attach(bf_model *m, char *err, size_t errlen) {
  int nm = n_matrices(m);
  size_t *off = layout(m, nm);
  char *path = bf_path_join(m->dir, INT8_FILE);
  int rc = -1;
  if (!off || !path) {
    bf_errf(err, errlen, "out of memory");
    goto done;
  }
  if (use_file(m, path, nm, off)) {
    rc = 0;
    goto done;
  }
  unsigned char *data = NULL;
  if (posix_memalign((void **)&data, 64, off[3 * nm]) != 0) {
    bf_errf(err, errlen, "out of memory quantizing %s to int8 (%zu bytes)", m->dir, off[3 * nm]);
    goto done;
  }
  memset(data, 0, off[3 * nm]); /* the alignment gaps too: the file holds no stray heap bytes */
  if (quantize_all(m, nm, off, data, err, errlen) != 0) {
    free(data);
    goto done;
  }
  if (write_file(m, path, nm, off, data) == 0 && use_file(m, path, nm, off)) {
    free(data);
  } else { /* the directory cannot be written: keep them in private memory */
    point_into(m, nm, off, data);
    m->own8 = data;
    m->int8_source = "memory";
  }
  rc = 0;
done:
  free(off);
  free(path);
  return rc;
}

void bf_quantized_detach(bf_model *m) {
  if (m->map8) munmap(m->map8, m->map8_len);
  if (m->map8_fd >= 0) close(m->map8_fd);
  free(m->own8);
  m->map8 = m->own8 = NULL;
  m->map8_fd = -1;
}
