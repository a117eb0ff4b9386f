/*
** derived.c — a file of weights made from model.safetensors and kept next
** to it (or in the per-user cache): layout, record, the checks that it was made from these very
** weights and is whole, writing and mapping (derived.h).
**
** Why a file is trusted (issue 41): the size and modification time of
** model.safetensors are not enough (two models of one shape unpacked with
** the same mtime, by a reproducible tarball, cp -p or rsync -t, have the
** same size and mtime; a derived file damaged in place keeps its size, and
** its mtime can be set back), and a wrong file gives wrong answers with
** nothing to see, which the shared queue and the memo cache then spread
** under the true fingerprint.  So the record says what the file was made
** from and what it holds, and derived_map checks both before a load uses it:
**
**   - its provenance: the record's weights hash (bf_fp_hash_bytes of
**     model.safetensors, what the fingerprint keys on) must be the weights'
**     hash.  That hash is not computed again when the record also holds the
**     identity of the weights file it was made from (device, inode, size,
**     mtime, ctime: model.h's bf_file_id) and that is the identity of the
**     file just mapped: a file with other bytes has another identity (the
**     kernel sets ctime on every change and no tool sets it back; a copy or
**     a file renamed into place has another inode).  The identity is
**     recorded only for a weights file that had settled when it was mapped
**     (fingerprint.c's settle rule: a change within the same clock tick
**     could keep its times) and had not changed when the file was written.
**     Otherwise the hash is the one model.fingerprint keeps for this very
**     file, or model.safetensors is hashed now (bert-base, 409 MB in the
**     page cache: about 45 ms on one core of a Zen 5; once per new copy of
**     the weights: the hash then goes into model.fingerprint).
**   - its integrity: the record holds a checksum of every tensor
**     (bf_fp_hash_bytes of its bytes), and every tensor is read and checked
**     at every load, with pread() (a file truncated meanwhile cannot raise
**     SIGBUS here) on the engine's helper threads (pool.h), before any
**     answer comes from it.  Measured on bert-base (a 2-core Zen 5 VM, the
**     files in the page cache, bert_load in a fresh process): fp32 with its
**     340 MB of panels 55 ms instead of 35; int8 (103 MB) and bf16 (204 MB)
**     about 10 ms more than before.  That is cheap enough to do in the load
**     itself rather than in the warm-up: so a damaged file is made again by
**     the very load that finds it, and no call, shared queue or memo cache
**     entry ever comes from a file not yet checked.  A file that fails says
**     so once on stderr ("... is damaged ...: made again").
**
** A file that fails either check (or is stale, of another format, or not
** laid out as the spec says) is made again from the weights and replaces
** the old one whole (bf_write_file_replace: a temporary file renamed into
** place).  Temporary files left by a writer that was killed are removed at
** the next load (util.h's bf_remove_stale_temps).
**
** Where (issue 37): next to the weights, or, where the model's directory
** cannot be written (a model installed in site-packages, node_modules,
** /usr/share, a read-only mount), in the model's folder of the per-user
** cache directory (fingerprint.c's bf_model_file: this user's, 0700, no
** links; its files opened with O_NOFOLLOW and used only when they are this
** user's), so that processes still share one copy.  derived_map looks next
** to the weights first, then there; derived_write writes next to the
** weights, else there.  Only where neither can be written does the load do
** without the file as its caller says (one line on stderr, once per
** process; bert_debug's model.cache_dir_error says why).
*/
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "derived.h"
#include "pool.h"
#include "util.h"

/* The record: I64 [RECORD_HEAD + n] */
enum {
  R_VERSION,      /* the spec's format version */
  R_WEIGHTS_HASH, /* bf_fp_hash_bytes of model.safetensors */
  R_DEV,          /* its identity, or all five 0 (not recorded) */
  R_INO,
  R_SIZE,
  R_MTIME,
  R_CTIME,
  RECORD_HEAD /* then the checksum of each tensor, in the spec's order */
};

static size_t record_bytes(const derived_spec *d) {
  return (size_t)(RECORD_HEAD + d->n) * sizeof(int64_t);
}

void derived_layout(derived_spec *d) {
  size_t o = record_bytes(d);
  for (int i = 0; i < d->n; i++) {
    o = (o + d->t[i].align - 1) & ~(d->t[i].align - 1);
    d->t[i].off = o;
    o += d->t[i].bytes;
  }
  d->data_len = o;
}

void derived_zero_gaps(const derived_spec *d, unsigned char *data) {
  size_t o = record_bytes(d);
  for (int i = 0; i < d->n; i++) {
    memset(data + o, 0, d->t[i].off - o);
    o = d->t[i].off + d->t[i].bytes;
  }
}

/* 1 if f is laid out as d says: the record, and every tensor with the
** dtype, shape and place d gives it; else 0. */
static int layout_matches(const derived_spec *d, const st_file *f) {
  const st_tensor *t = st_find(f, d->source);
  if (!t || t->dtype != ST_I64 || t->n_elems != (uint64_t)(RECORD_HEAD + d->n) || t->begin != 0 ||
      f->data_len != d->data_len || f->n != d->n + 1)
    return 0;
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

/* 1 if the record r was made by this format from m's weights: the identity
** it holds is the mapped file's, or the hash it holds is the weights' (known,
** or hashed now); else 0. */
static int made_from_these_weights(bf_model *m, const derived_spec *d, const int64_t *r) {
  if (r[R_VERSION] != d->version) return 0;
  const bf_file_id *id = &m->map_id;
  if (r[R_INO] != 0 && (unsigned long long)r[R_DEV] == id->dev &&
      (unsigned long long)r[R_INO] == id->ino && (unsigned long long)r[R_SIZE] == id->size &&
      r[R_MTIME] == id->mtime_ns && r[R_CTIME] == id->ctime_ns)
    return 1;
  uint64_t h;
  return bf_model_weights_hash(m, &h) == 0 && (uint64_t)r[R_WEIGHTS_HASH] == h;
}

/* ---- the integrity check, a tensor per unit on the helper threads ---- */

typedef struct verify_job {
  const derived_spec *d;
  const int64_t *sums; /* the record's checksums */
  int fd;
  uint64_t data_at;    /* where the data area starts in the file */
  unsigned char **buf; /* a BF_FP_CHUNK buffer per thread */
  atomic_int bad;      /* 1 + a tensor found wrong, or 0 */
} verify_job;

static void verify_one(void *arg, int unit, int tid) {
  verify_job *j = arg;
  const derived_tensor *w = &j->d->t[unit];
  uint64_t h;
  if (bf_fp_hash_file(j->fd, j->data_at + w->off, w->bytes, j->buf[tid], &h) != 0 ||
      h != (uint64_t)j->sums[unit]) {
    int none = 0;
    atomic_compare_exchange_strong(&j->bad, &none, unit + 1);
  }
}

/* 1 if every tensor of f has the checksum its record gives, else 0 (and
** one line on stderr saying which file is damaged). */
static int tensors_whole(const derived_spec *d, const st_file *f, const int64_t *r) {
  int nt = bf_pool_threads();
  if (nt > d->n) nt = d->n;
  if (nt < 1) nt = 1;
  unsigned char *bufs[BF_POOL_MAX_THREADS] = {0};
  verify_job j = {.d = d,
                  .sums = r + RECORD_HEAD,
                  .fd = f->fd,
                  .data_at = 8 + f->header_len,
                  .buf = bufs};
  atomic_init(&j.bad, 0);
  int ok = 1;
  for (int i = 0; i < nt && ok; i++) ok = (bufs[i] = malloc(BF_FP_CHUNK)) != NULL;
  if (ok) {
    bf_pool *p = nt > 1 ? bf_pool_new() : NULL;
    bf_pool_run(p, p ? nt : 1, d->n, verify_one, &j);
    bf_pool_free(p);
  }
  for (int i = 0; i < nt; i++) free(bufs[i]);
  if (!ok) return 0; /* out of memory: not shown whole, so not used */
  int bad = atomic_load(&j.bad);
  if (bad)
    fprintf(stderr,
            "bertfill: %s is damaged (the bytes of %s are not those it was written with); "
            "it is made again from model.safetensors\n",
            f->path, d->t[bad - 1].name);
  return bad == 0;
}

/* derived_map at one place (fingerprint.c's BF_IN_DIR or BF_IN_CACHE). */
static int map_at(bf_model *m, const derived_spec *d, int where, const unsigned char **data) {
  char *path = bf_model_file(m, d->file, where, 0);
  if (!path) return 0;
  bf_remove_stale_temps(path);
  st_file f;
  char ignored[256];
  int rc = (where == BF_IN_CACHE ? st_open_private(&f, path, ignored, sizeof ignored)
                                 : st_open(&f, path, ignored, sizeof ignored)) == 0;
  if (!rc) {
    free(path);
    return 0;
  }
  int64_t *r = layout_matches(d, &f) ? malloc(record_bytes(d)) : NULL;
  rc = r != NULL;
  if (rc) {
    memcpy(r, st_find(&f, d->source)->data, record_bytes(d));
    rc = made_from_these_weights(m, d, r) && tensors_whole(d, &f, r);
  }
  free(r);
  if (!rc) {
    free(path);
    st_close(&f);
    return 0;
  }
  *data = f.data;
  m->dmap = f.map;
  m->dmap_len = f.map_len;
  m->dmap_fd = f.fd;
  m->dmap_mtime_ns = f.mtime_ns;
  free(m->dmap_path);
  m->dmap_path = path;
  f.map = NULL; /* the model owns the mapping and the descriptor now */
  f.fd = -1;
  st_close(&f);
  return 1;
}

int derived_map(bf_model *m, const derived_spec *d, const unsigned char **data) {
  return map_at(m, d, BF_IN_DIR, data) || map_at(m, d, BF_IN_CACHE, data);
}

/* The record of d for m's weights and the tensors in data, into data[0..):
** 0, or -1 when the weights changed since they were loaded or cannot be
** hashed (then the file is not written: it could not be checked). */
static int make_record(bf_model *m, const derived_spec *d, unsigned char *data) {
  uint64_t h;
  bf_file_id now;
  if (bf_model_weights_hash(m, &h) != 0 || bf_file_id_of(m->map_fd, &now) != 0 ||
      !bf_file_id_same(&now, &m->map_id))
    return -1;
  int64_t *r = malloc(record_bytes(d));
  if (!r) return -1;
  memset(r, 0, record_bytes(d));
  r[R_VERSION] = d->version;
  r[R_WEIGHTS_HASH] = (int64_t)h;
  if (m->map_id_settled) {
    r[R_DEV] = (int64_t)now.dev;
    r[R_INO] = (int64_t)now.ino;
    r[R_SIZE] = (int64_t)now.size;
    r[R_MTIME] = now.mtime_ns;
    r[R_CTIME] = now.ctime_ns;
  }
  for (int i = 0; i < d->n; i++)
    r[RECORD_HEAD + i] = (int64_t)bf_fp_hash_bytes(data + d->t[i].off, d->t[i].bytes);
  memcpy(data, r, record_bytes(d));
  free(r);
  return 0;
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
                        "\"%s\":{\"dtype\":\"I64\",\"shape\":[%d],\"data_offsets\":[0,%zu]}",
                        d->format, d->version, d->source, RECORD_HEAD + d->n, record_bytes(d));
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

/* Said once per process on stderr when a derived file could be written
** neither next to the weights nor in the cache: each process then does
** without it (bert_debug's model.cache_dir_error says why). */
static void say_not_written(bf_model *m, const derived_spec *d) {
  static atomic_int said;
  if (atomic_exchange(&said, 1)) return;
  fprintf(stderr,
          "bertfill: %s could be written neither in %s nor in the per-user cache directory "
          "(%s): this process does without it (bert_debug() shows how)\n",
          d->file, m->dir,
          atomic_load(&m->cache_error_state) == 2 ? m->cache_error : "cannot be written");
}

int derived_write(bf_model *m, const derived_spec *d, unsigned char *data) {
  if (make_record(m, d, data) != 0) return -1;
  size_t hlen = 0;
  char *header = make_header(d, &hlen);
  int rc = -1;
  if (!header) return -1;
  unsigned char n8[8];
  for (int i = 0; i < 8; i++) n8[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
  const void *part[3] = {n8, header, data};
  size_t len[3] = {8, hlen, d->data_len};
  for (int where = BF_IN_DIR; where <= BF_IN_CACHE && rc != 0; where++) {
    char *path = bf_model_file(m, d->file, where, 1);
    if (path) rc = bf_write_file_replace(path, 3, part, len);
    free(path);
  }
  free(header);
  if (rc != 0) say_not_written(m, d);
  return rc;
}

void derived_unmap(bf_model *m) {
  if (m->dmap) munmap(m->dmap, m->dmap_len);
  if (m->dmap_fd >= 0) close(m->dmap_fd);
  free(m->dmap_path);
  m->dmap = NULL;
  m->dmap_fd = -1;
  m->dmap_path = NULL;
}
