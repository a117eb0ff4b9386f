/*
** derived.c — a file of weights made from model.safetensors and kept next
** to it: layout, header, matching, writing and mapping (derived.h).
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "derived.h"
#include "util.h"

#define SOURCE_BYTES (3 * sizeof(int64_t))

void derived_layout(derived_spec *d) {
  size_t o = SOURCE_BYTES;
  for (int i = 0; i < d->n; i++) {
    o = (o + d->t[i].align - 1) & ~(d->t[i].align - 1);
    d->t[i].off = o;
    o += d->t[i].bytes;
  }
  d->data_len = o;
}

static void source_id(const bf_model *m, const derived_spec *d, int64_t id[3]) {
  id[0] = d->version;
  id[1] = (int64_t)m->map_len;
  id[2] = m->map_mtime_ns;
}

void derived_source_id(const bf_model *m, const derived_spec *d, unsigned char *data) {
  int64_t id[3];
  source_id(m, d, id);
  memcpy(data, id, sizeof id);
}

void derived_zero_gaps(const derived_spec *d, unsigned char *data) {
  size_t o = SOURCE_BYTES;
  for (int i = 0; i < d->n; i++) {
    memset(data + o, 0, d->t[i].off - o);
    o = d->t[i].off + d->t[i].bytes;
  }
}

/* 1 if f is d's file of this very model (source entry, and every tensor
** with the dtype, shape and place d gives it), else 0. */
static int file_matches(const bf_model *m, const derived_spec *d, const st_file *f) {
  const st_tensor *t = st_find(f, d->source);
  int64_t want[3];
  source_id(m, d, want);
  if (!t || t->dtype != ST_I64 || t->n_elems != 3 || t->begin != 0 ||
      memcmp(t->data, want, sizeof want) != 0)
    return 0;
  if (f->data_len != d->data_len || f->n != d->n + 1) return 0;
  for (int i = 0; i < d->n; i++) {
    const derived_tensor *w = &d->t[i];
    t = st_find(f, w->name);
    if (!t || t->dtype != w->dtype || t->ndim != w->ndim || t->begin != w->off ||
        t->end - t->begin != w->bytes)
      return 0;
    for (int k = 0; k < w->ndim; k++)
      if (t->shape[k] != w->shape[k]) return 0;
  }
  return 1;
}

int derived_map(bf_model *m, const derived_spec *d, const unsigned char **data) {
  char *path = bf_path_join(m->dir, d->file);
  st_file f;
  char ignored[256];
  int rc = path && st_open(&f, path, ignored, sizeof ignored) == 0;
  free(path);
  if (!rc) return 0;
  if (!file_matches(m, d, &f)) {
    st_close(&f);
    return 0;
  }
  *data = f.data;
  m->dmap = f.map;
  m->dmap_len = f.map_len;
  m->dmap_fd = f.fd;
  m->dmap_mtime_ns = f.mtime_ns;
  m->dmap_file = d->file;
  f.map = NULL; /* the model owns the mapping and the descriptor now */
  f.fd = -1;
  st_close(&f);
  return 1;
}

/* The safetensors header of d (JSON padded with spaces so that the 8-byte
** length and the header end on a multiple of 64 bytes), malloc'd, length in
** *len; NULL when out of memory. */
static char *make_header(const derived_spec *d, size_t *len) {
  size_t cap = 512 + (size_t)d->n * 384, n = 0;
  char *h = malloc(cap);
  if (!h) return NULL;
  n += (size_t)snprintf(h + n, cap - n,
                        "{\"__metadata__\":{\"format\":\"%s\",\"version\":\"%d\","
                        "\"made_from\":\"model.safetensors\"},"
                        "\"%s\":{\"dtype\":\"I64\",\"shape\":[3],\"data_offsets\":[0,%zu]}",
                        d->format, d->version, d->source, SOURCE_BYTES);
  for (int i = 0; i < d->n; i++) {
    const derived_tensor *w = &d->t[i];
    n += (size_t)snprintf(h + n, cap - n, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", w->name,
                          st_dtype_name(w->dtype));
    for (int k = 0; k < w->ndim; k++)
      n += (size_t)snprintf(h + n, cap - n, "%s%lld", k ? "," : "", (long long)w->shape[k]);
    n += (size_t)snprintf(h + n, cap - n, "],\"data_offsets\":[%zu,%zu]}", w->off,
                          w->off + w->bytes);
  }
  n += (size_t)snprintf(h + n, cap - n, "}");
  while ((8 + n) % 64) h[n++] = ' ';
  *len = n;
  return h;
}

int derived_write(const bf_model *m, const derived_spec *d, const unsigned char *data) {
  size_t hlen = 0;
  char *header = make_header(d, &hlen);
  char *path = bf_path_join(m->dir, d->file);
  int rc = -1;
  if (header && path) {
    unsigned char n8[8];
    for (int i = 0; i < 8; i++) n8[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    const void *part[3] = {n8, header, data};
    size_t len[3] = {8, hlen, d->data_len};
    rc = bf_write_file_replace(path, 3, part, len);
  }
  free(header);
  free(path);
  return rc;
}

void derived_unmap(bf_model *m) {
  if (m->dmap) munmap(m->dmap, m->dmap_len);
  if (m->dmap_fd >= 0) close(m->dmap_fd);
  m->dmap = NULL;
  m->dmap_fd = -1;
}
