/*
** fingerprint.c — what a loaded model's files are, and whether they are
** still what was loaded.
**
** The fingerprint (bf_model_fingerprint) hashes config.json, vocab.txt,
** tokenizer_config.json and tokenizer.json (as read at load by model.c;
** absent files count as absent) and every byte of model.safetensors, with a
** 4-lane multiply-rotate hash (bf_fp_hash) in which changing any single
** 8-byte word always changes the result, and the precision of the load.
** The weights' part is kept in dir/model.fingerprint for the next loads of
** the same file (see "the fingerprint file").  It is computed on first
** request, or earlier by the warm-up that each load starts (warm_up.c).
**
** The identity of a file (device, inode, size, times: bf_file_id_of) tells
** whether a mapped file changed since loading (bf_model_check,
** bf_model_is_current) and, with the weights' hash (bf_model_weights_hash,
** which a load may ask for first), whether a derived file was made from
** these weights (derived.c).  bf_fp_hash_bytes / bf_fp_hash_file are the one
** definition of a file's hash, from memory or read with pread().
**
** Where the files a load derives are kept (bf_model_file; issue 37): next to
** the weights when the directory can be written, else in the model's folder
** of the per-user cache directory (util.h's bf_user_cache_dir:
** $XDG_CACHE_HOME/bertfill, ~/.cache/bertfill, or BERTFILL_CACHE_DIR), so
** that a model installed read-only (site-packages, node_modules, /usr/share,
** a read-only mount) still has one copy of each, shared by every process of
** the user, instead of one in each process's memory.  The folder is named
** after the model directory: its last component and a hash of its real path
** (NAME-0123456789abcdef), so two model directories never share a folder,
** a model replaced in place (an upgrade) reuses its folder rather than
** leaving the old files behind, and what a file holds is proved by its
** record anyway (derived.c; model.fingerprint by the identity it keeps).  It
** is made 0700 when first needed, and used only while it and the cache
** directory are directories of this user, not links, that group and others
** cannot write; its files are opened with O_NOFOLLOW and used only when they
** are this user's.  Otherwise, or without HOME, the load does as in a
** directory nothing can be written to, and m->cache_error says why
** (bert_debug's model.cache_dir_error).
*/
#include "model.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- file identity (model.h's bf_file_id) ---- */

int bf_file_id_of(int fd, bf_file_id *id) {
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) return -1;
  *id = (bf_file_id){(unsigned long long)st.st_dev, (unsigned long long)st.st_ino,
                     (unsigned long long)st.st_size,
                     (long long)st.st_mtim.tv_sec * 1000000000ll + st.st_mtim.tv_nsec,
                     (long long)st.st_ctim.tv_sec * 1000000000ll + st.st_ctim.tv_nsec};
  return 0;
}

int bf_file_id_same(const bf_file_id *a, const bf_file_id *b) {
  return a->dev == b->dev && a->ino == b->ino && a->size == b->size && a->mtime_ns == b->mtime_ns &&
         a->ctime_ns == b->ctime_ns;
}

/* ---- fingerprint hash ---- */

#define P1 0x9E3779B97F4A7C15ull
#define P2 0xC2B2AE3D27D4EB4Full
#define P3 0x165667B19E3779F9ull
#define P4 0x85EBCA77C2B2AE63ull

static inline uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static inline uint64_t rd64(const unsigned char *p) {
  uint64_t w;
  memcpy(&w, p, 8);
  return w;
}
/* each step is a bijection of the lane for a fixed word and of the word
** for a fixed lane, so one changed word always changes the lane */
static inline uint64_t step(uint64_t lane, uint64_t w) { return rotl64(lane ^ (w * P1), 31) * P2; }
static inline uint64_t fmix64(uint64_t k) { /* bijective finaliser (MurmurHash3) */
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ull;
  k ^= k >> 33;
  return k;
}

uint64_t bf_fp_hash(const unsigned char *p, size_t n, uint64_t seed) {
  uint64_t a = seed ^ P3, b = seed + P4, c = seed ^ P2, d = seed - P1;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a = step(a, rd64(p + i));
    b = step(b, rd64(p + i + 8));
    c = step(c, rd64(p + i + 16));
    d = step(d, rd64(p + i + 24));
  }
  for (; i + 8 <= n; i += 8) a = step(a, rd64(p + i));
  if (i < n) {
    unsigned char last[8] = {0};
    memcpy(last, p + i, n - i);
    b = step(b, rd64(last));
  }
  uint64_t h = fmix64(a);
  h = fmix64(h ^ b);
  h = fmix64(h ^ c);
  h = fmix64(h ^ d);
  return fmix64(h ^ (uint64_t)n);
}

/* One mapped file, dir/name (dir NULL: name is its path), against what it
** was when mapped: BF_OK, or BF_ERR_MODEL with err saying how it changed. */
static int check_file(int fd, size_t len, int64_t mtime_then, const char *dir, const char *name,
                      char *err, size_t errlen) {
  bf_file_id now;
  if (bf_file_id_of(fd, &now) != 0) return BF_OK; /* cannot tell: keep going */
  if ((size_t)now.size == len && now.mtime_ns == mtime_then) return BF_OK;
  if ((size_t)now.size != len)
    bf_errf(err, errlen,
            "%s%s%s changed on disk after it was loaded (%zu bytes then, %lld now): "
            "the model must be loaded again (replace model files with a new file and rename, "
            "never in place)",
            dir ? dir : "", dir ? "/" : "", name, len, (long long)now.size);
  else
    bf_errf(err, errlen,
            "%s%s%s was rewritten in place after it was loaded: the model must be "
            "loaded again (replace model files with a new file and rename, never in place)",
            dir ? dir : "", dir ? "/" : "", name);
  return BF_ERR_MODEL;
}

int bf_model_check(const bf_model *m, char *err, size_t errlen) {
  if (!m || !m->map) return BF_OK;
  int rc = check_file(m->map_fd, m->map_len, m->map_mtime_ns, m->dir, "model.safetensors", err,
                      errlen);
  if (rc == BF_OK && m->dmap)
    rc = check_file(m->dmap_fd, m->dmap_len, m->dmap_mtime_ns, NULL, m->dmap_path, err, errlen);
  return rc;
}

int bf_model_is_current(const bf_model *m) {
  struct stat now, then;
  if (!m || !m->map || m->map_fd < 0 || fstat(m->map_fd, &then) != 0) return 1;
  char *p = bf_path_join(m->dir, "model.safetensors");
  int same = p && stat(p, &now) == 0 && now.st_dev == then.st_dev && now.st_ino == then.st_ino;
  free(p);
  return same && bf_model_check(m, NULL, 0) == BF_OK;
}

/* A file's hash (model.safetensors', a derived file's tensors) is defined
** on chunks of BF_FP_CHUNK bytes, so that it can be computed while reading
** the file a chunk at a time: bf_fp_hash of each chunk seeded with the hash
** so far, then the length mixed in. */
uint64_t bf_fp_hash_bytes(const unsigned char *p, size_t n) {
  uint64_t h = 0;
  for (size_t off = 0; off < n; off += BF_FP_CHUNK)
    h = bf_fp_hash(p + off, n - off < BF_FP_CHUNK ? n - off : BF_FP_CHUNK, h);
  return fmix64(h ^ (uint64_t)n);
}

int bf_fp_hash_file(int fd, uint64_t off, size_t n, unsigned char *buf, uint64_t *out) {
  uint64_t h = 0;
  for (size_t at = 0; at < n; at += BF_FP_CHUNK) {
    size_t len = n - at < BF_FP_CHUNK ? n - at : BF_FP_CHUNK, got = 0;
    while (got < len) {
      ssize_t r = pread(fd, buf + got, len - got, (off_t)(off + at + got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return -1; /* the file shrank while it was read, or an I/O error */
      got += (size_t)r;
    }
    h = bf_fp_hash(buf, len, h);
  }
  *out = fmix64(h ^ (uint64_t)n);
  return 0;
}

/* The hash of model.safetensors into *out, read with pread() through the
** descriptor kept since loading (the very file that was mapped): reading
** does not map the pages into this process, so hashing a file whose
** products run from its int8 copy costs no resident memory.  Never reads
** the mapping: a file that shrank would raise SIGBUS there.  0, or -1 when
** a read fails or comes back short (the file shrank meanwhile), or when out
** of memory.  (bert-base, 409 MB in
** the page cache: 43-47 ms on one core of a Zen 5.) */
static int hash_weights(const bf_model *m, uint64_t *out) {
  if (m->map_fd < 0) return -1;
  unsigned char *b = malloc(BF_FP_CHUNK);
  if (!b) return -1;
  int rc = bf_fp_hash_file(m->map_fd, 0, m->map_len, b, out);
  free(b);
  return rc;
}

/* ---- where the files a load derives are kept (see the top) ---- */

void bf_model_cache_refused(bf_model *m, const char *fmt, ...) {
  int none = 0;
  if (!atomic_compare_exchange_strong(&m->cache_error_state, &none, 1)) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m->cache_error, sizeof m->cache_error, fmt, ap);
  va_end(ap);
  atomic_store(&m->cache_error_state, 2);
}

/* At load: m->cache_dir, ROOT/NAME-HASH (see the top), or NULL and why. */
static void locate_cache_dir(bf_model *m) {
  char why[320];
  char *root = bf_user_cache_dir(why, sizeof why);
  char *real = root ? realpath(m->dir, NULL) : NULL;
  if (!root) bf_model_cache_refused(m, "%s", why);
  else if (!real) bf_model_cache_refused(m, "%s: %s", m->dir, strerror(errno));
  if (root && real) {
    const char *base = strrchr(real, '/');
    base = base && base[1] ? base + 1 : "model";
    char name[96];
    size_t n = 0;
    for (const char *c = base; *c && n < 48; c++, n++) { /* a name that needs no quoting */
      int plain = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                  (*c >= '0' && *c <= '9') || *c == '-' || *c == '_' || (*c == '.' && n > 0);
      name[n] = plain ? *c : '_';
    }
    snprintf(name + n, sizeof name - n, "-%016llx",
             (unsigned long long)bf_fp_hash((const unsigned char *)real, strlen(real), 37));
    m->cache_dir = bf_path_join(root, name);
  }
  free(real);
  free(root);
}

char *bf_model_file(bf_model *m, const char *name, int where, int make) {
  if (where == BF_IN_DIR) return bf_path_join(m->dir, name);
  if (!m->cache_dir) return NULL;
  char why[320];
  char *root = strdup(m->cache_dir);
  char *slash = root ? strrchr(root, '/') : NULL;
  if (!slash) {
    free(root);
    return NULL;
  }
  /* the cache directory ("/" when the folder is at the top), then the model's folder */
  if (slash == root) slash[1] = 0;
  else *slash = 0;
  int ok = bf_private_dir(root, make, why, sizeof why) == 0 &&
           bf_private_dir(m->cache_dir, make, why, sizeof why) == 0;
  if (!ok && (make || errno != ENOENT)) bf_model_cache_refused(m, "%s", why);
  free(root);
  return ok ? bf_path_join(m->cache_dir, name) : NULL;
}

/* ---- the fingerprint file ----
**
** Hashing every byte of a 400 MB model takes 50-100 ms, and with the cache
** on the first call after each load needed it.  So the weights' hash is
** kept next to them, in dir/model.fingerprint (one line of text), with what
** identifies the very file it was computed from: device, inode, size,
** modification and change times (ns).  A load takes the hash from there
** only when all five match the model.safetensors it mapped.  The change
** time is set by the kernel on every write, rename or copy over the file
** (no tool sets it back), so a file with other bytes never matches; and a
** file changed less than FP_FILE_SETTLE_NS ago gets no fingerprint file (a
** change within the same clock tick could keep its times: git's "racy"
** index entries have the same cure).  Written like model.int8.safetensors
** (a temporary file renamed into place); a directory that cannot be written
** keeps it in the model's folder of the per-user cache (bf_model_file), and
** where neither can be written each load hashes. */
#define FP_FILE "model.fingerprint"
#define FP_FILE_FORMAT 1
#define FP_FILE_SETTLE_NS 2000000000ll

static int format_fp_line(char *buf, size_t n, const bf_file_id *id, uint64_t h) {
  return snprintf(buf, n, "bertfill-fingerprint %d %llu %llu %llu %lld %lld %016llx\n",
                  FP_FILE_FORMAT, id->dev, id->ino, id->size, id->mtime_ns, id->ctime_ns,
                  (unsigned long long)h);
}

/* 1 when a file of identity id had not changed for FP_FILE_SETTLE_NS at
** wall-clock time now_ns. */
static int settled(const bf_file_id *id, long long now_ns) {
  return now_ns - id->ctime_ns >= FP_FILE_SETTLE_NS && now_ns - id->mtime_ns >= FP_FILE_SETTLE_NS;
}

/* At load: the identity of the mapped file (m->map_id, and whether it had
** settled: derived.c records it in the files it makes only then), and the
** weights' hash from dir/model.fingerprint when it was made from that very
** file (m->weights_known = 1), else nothing. */
/* The hash model.fingerprint at path keeps for the file of identity id:
** 0, or -1 (none there, not a regular file, another user's in the cache,
** made from another file). */
static int read_fp_file(const char *path, int in_cache, const bf_file_id *id, uint64_t *out) {
  bf_remove_stale_temps(path);
  struct stat st;
  int fd = bf_open_regular(path, O_RDONLY | (in_cache ? O_NOFOLLOW : 0), 0, &st);
  if (fd >= 0 && in_cache && st.st_uid != geteuid()) {
    close(fd);
    fd = -1;
  }
  FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
  if (!f) {
    if (fd >= 0) close(fd);
    return -1;
  }
  char line[256], want[256];
  int ok = fgets(line, sizeof line, f) != NULL;
  fclose(f);
  unsigned long long h = 0;
  int version = 0;
  if (!ok ||
      sscanf(line, "bertfill-fingerprint %d %*u %*u %*u %*d %*d %16llx", &version, &h) != 2 ||
      version != FP_FILE_FORMAT)
    return -1;
  format_fp_line(want, sizeof want, id, h);
  if (strcmp(line, want) != 0) return -1; /* made from another file (or another version of it) */
  *out = h;
  return 0;
}

void bf_fp_read_file(bf_model *m) {
  bf_file_id id;
  if (bf_file_id_of(m->map_fd, &id) != 0) return;
  m->map_id = id;
  m->map_id_settled = settled(&id, (long long)bf_wall_ns());
  locate_cache_dir(m);
  uint64_t h;
  int found = 0;
  for (int where = BF_IN_DIR; where <= BF_IN_CACHE && !found; where++) {
    char *path = bf_model_file(m, FP_FILE, where, 0);
    found = path && read_fp_file(path, where == BF_IN_CACHE, &id, &h) == 0;
    free(path);
  }
  if (!found) return;
  m->weights_hash = h;
  m->weights_known = 1;
  m->weights_source = FP_FILE;
}

/* After hashing: keep the hash in model.fingerprint (next to the weights,
** else in the model's folder of the per-user cache) when the file did not
** change while it was hashed (before and after are its identity then) and
** had settled before.  Failures (neither can be written) are silent. */
static void write_fp_file(bf_model *m, const bf_file_id *before, uint64_t h) {
  bf_file_id after;
  if (bf_file_id_of(m->map_fd, &after) != 0 || !bf_file_id_same(before, &after)) return;
  if (!settled(before, (long long)bf_wall_ns())) return;
  char line[256];
  const void *part[1] = {line};
  size_t len[1] = {(size_t)format_fp_line(line, sizeof line, before, h)};
  int written = 0;
  for (int where = BF_IN_DIR; where <= BF_IN_CACHE && !written; where++) {
    char *path = bf_model_file(m, FP_FILE, where, 1);
    written = path && bf_write_file_replace(path, 1, part, len) == 0;
    free(path);
  }
}

/* Hashed outside the lock by whoever asks first: a caller never waits for
** the warm-up thread, which runs at the lowest priority (two may hash at
** once; both get the same value and the first one stored stays).  A load
** that checks a derived file against the weights (derived.c) may ask first.
** Weights changed on disk since the load have no hash, even one taken
** before they changed (at load, or from model.fingerprint): -1. */
int bf_model_weights_hash(bf_model *m, uint64_t *out) {
  if (bf_model_check(m, NULL, 0) != BF_OK) return -1;
  pthread_mutex_lock(&m->fp_mu);
  int known = m->weights_known;
  *out = m->weights_hash;
  pthread_mutex_unlock(&m->fp_mu);
  if (known) return 0;
  bf_file_id before;
  int have_id = bf_file_id_of(m->map_fd, &before) == 0;
  uint64_t w;
  if (hash_weights(m, &w) != 0) return -1; /* changed on disk: nothing to key on */
  if (have_id) write_fp_file(m, &before, w);
  pthread_mutex_lock(&m->fp_mu);
  if (!m->weights_known) {
    m->weights_hash = w;
    m->weights_known = 1;
    m->weights_source = "hashed";
  }
  *out = m->weights_hash;
  pthread_mutex_unlock(&m->fp_mu);
  return 0;
}

const char *bf_model_fingerprint(bf_model *m) {
  pthread_mutex_lock(&m->fp_mu);
  int known = m->fingerprint[0] != 0;
  pthread_mutex_unlock(&m->fp_mu);
  if (known) return m->fingerprint;
  uint64_t w;
  if (bf_model_weights_hash(m, &w) != 0) return NULL; /* changed on disk: nothing to key on */
  /* the precision is part of it: int8 answers are not fp32 answers */
  uint64_t h = fmix64(w ^ fmix64(m->fp_files ^ (uint64_t)m->precision * P3));
  char fp[sizeof m->fingerprint];
  snprintf(fp, sizeof fp, "%016llx", (unsigned long long)h);
  pthread_mutex_lock(&m->fp_mu);
  if (!m->fingerprint[0]) {
    memcpy(m->fingerprint, fp, sizeof fp);
    m->fp_source = m->weights_source;
  }
  pthread_mutex_unlock(&m->fp_mu);
  return m->fingerprint;
}
