/*
** safetensors.c — map a .safetensors file and validate its header.
** See safetensors.h.  Only the header is read; tensor data stays in the
** page cache until someone touches it.
*/
#include "safetensors.h"
#include "json.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const struct {
  const char *name;
  st_dtype dt;
  size_t size;
} DTYPES[] = {
  {"F32", ST_F32, 4},   {"F16", ST_F16, 2},         {"BF16", ST_BF16, 2},       {"F64", ST_F64, 8},
  {"I64", ST_I64, 8},   {"I32", ST_I32, 4},         {"I16", ST_I16, 2},         {"I8", ST_I8, 1},
  {"U64", ST_U64, 8},   {"U32", ST_U32, 4},         {"U16", ST_U16, 2},         {"U8", ST_U8, 1},
  {"BOOL", ST_BOOL, 1}, {"F8_E4M3", ST_F8_E4M3, 1}, {"F8_E5M2", ST_F8_E5M2, 1},
};

/* The weights are mapped at a 2 MB boundary and marked MADV_HUGEPAGE, so
** that the kernel can map the page cache's 2 MB folios of the file with one
** page-table entry each instead of 512 (file offset 0 lands on a boundary,
** as a PMD mapping needs), and reads the pages not yet cached as such
** folios.  It matters where many processes map the same weights: every
** mapping of a folio is walked by whoever looks at its pages (the
** kernel's reclaim and memory monitors, such as DAMON: a monitor with a
** pageout scheme took 12% of a core with 50 processes mapping a 233 MB
** file through 4 KB entries; docs/performance.md, issue 38), and a run
** misses the TLB less.  Folios already cached small stay small (nothing
** is lost); off Linux, or for a file under 2 MB, a plain mapping. */
#define MAP_ALIGN ((size_t)2 << 20)
static void *map_read_only(int fd, size_t size) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (size >= MAP_ALIGN) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE), span = size + MAP_ALIGN;
    char *r = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r != MAP_FAILED) {
      char *a = r + ((MAP_ALIGN - (uintptr_t)r % MAP_ALIGN) % MAP_ALIGN);
      void *m = mmap(a, size, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0);
      if (m == MAP_FAILED) {
        int e = errno;
        munmap(r, span);
        errno = e;
        return MAP_FAILED;
      }
      char *end = a + (size + page - 1) / page * page; /* the file mapping's end */
      if (a > r) munmap(r, (size_t)(a - r));
      if (r + span > end) munmap(end, (size_t)(r + span - end));
      (void)madvise(m, size, MADV_HUGEPAGE); /* a hint: refused (THP off) is fine */
      return m;
    }
  }
#endif
  return mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
}

const char *st_dtype_name(st_dtype t) {
  for (size_t i = 0; i < sizeof DTYPES / sizeof DTYPES[0]; i++)
    if (DTYPES[i].dt == t) return DTYPES[i].name;
  return "?";
}

const char *st_shape_str(const int64_t *shape, int ndim, char *buf, size_t buflen) {
  size_t o = 0;
  if (!buflen) return buf;
  buf[0] = 0;
  o += (size_t)snprintf(buf, buflen, "[");
  for (int i = 0; i < ndim && o < buflen; i++)
    o += (size_t)snprintf(buf + o, buflen - o, "%s%lld", i ? "," : "", (long long)shape[i]);
  if (o < buflen) snprintf(buf + o, buflen - o, "]");
  return buf;
}

static int cmp_name(const void *a, const void *b) {
  return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

/* Where the data of tensor idx lies in the data area. */
typedef struct {
  size_t begin, end;
  int idx;
} byte_range;
static int cmp_range(const void *a, const void *b) {
  const byte_range *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return 0;
}

void st_close(st_file *f) {
  if (!f) return;
  for (int i = 0; i < f->n; i++) free(f->tensors[i].name);
  free(f->tensors);
  if (f->map) munmap(f->map, f->map_len);
  if (f->map && f->fd >= 0) close(f->fd); /* fd is valid only along with the mapping */
  free(f->path);
  memset(f, 0, sizeof *f);
  f->fd = -1;
}

/* Parse one header entry into t.  0 or -1 with err. */
static int parse_entry(const char *path, const char *name, const json_value *v, const st_file *f,
                       st_tensor *t, char *err, size_t errlen) {
  if (v->type != JSON_OBJECT) {
    bf_errf(err, errlen, "%s: bad header: entry for tensor '%s' is %s, not an object", path, name,
            json_type_a(v->type));
    return -1;
  }
  const char *dt;
  if (json_get_string(v, "dtype", &dt) != JSON_OK) {
    bf_errf(err, errlen, "%s: bad header: tensor '%s' has no \"dtype\" string", path, name);
    return -1;
  }
  size_t k;
  for (k = 0; k < sizeof DTYPES / sizeof DTYPES[0]; k++)
    if (strcmp(dt, DTYPES[k].name) == 0) break;
  if (k == sizeof DTYPES / sizeof DTYPES[0]) {
    bf_errf(err, errlen, "%s: unknown dtype \"%.20s\" for tensor '%s'", path, dt, name);
    return -1;
  }
  t->dtype = DTYPES[k].dt;
  t->dtype_name = DTYPES[k].name;
  t->elem_size = DTYPES[k].size;

  const json_value *shape = json_get(v, "shape");
  if (!shape || shape->type != JSON_ARRAY) {
    bf_errf(err, errlen, "%s: bad header: tensor '%s' has no \"shape\" list", path, name);
    return -1;
  }
  if (json_len(shape) > ST_MAX_DIMS) {
    bf_errf(err, errlen, "%s: tensor '%s' has %zu dimensions (at most %d supported)", path, name,
            json_len(shape), ST_MAX_DIMS);
    return -1;
  }
  t->ndim = (int)json_len(shape);
  uint64_t n = 1;
  int overflow = 0;
  for (int i = 0; i < t->ndim; i++) {
    const json_value *d = json_at(shape, (size_t)i);
    if (d->type != JSON_NUMBER || !d->is_int || d->i < 0) {
      bf_errf(err, errlen,
              "%s: bad header: tensor '%s' shape entry %d is not a non-negative integer", path,
              name, i);
      return -1;
    }
    t->shape[i] = d->i;
    if (d->i != 0 && n > UINT64_MAX / (uint64_t)d->i) overflow = 1;
    else n *= (uint64_t)d->i;
  }
  for (int i = 0; i < t->ndim; i++)
    if (t->shape[i] == 0) {
      n = 0;
      overflow = 0;
    }
  t->n_elems = n;

  const json_value *off = json_get(v, "data_offsets");
  if (!off || off->type != JSON_ARRAY || json_len(off) != 2) {
    bf_errf(err, errlen, "%s: bad header: tensor '%s' has no \"data_offsets\" [begin, end]", path,
            name);
    return -1;
  }
  const json_value *b = json_at(off, 0), *e = json_at(off, 1);
  if (b->type != JSON_NUMBER || !b->is_int || b->i < 0 || e->type != JSON_NUMBER || !e->is_int ||
      e->i < 0) {
    bf_errf(err, errlen, "%s: bad header: tensor '%s' data_offsets are not non-negative integers",
            path, name);
    return -1;
  }
  if (b->i > e->i) {
    bf_errf(err, errlen,
            "%s: bad header: tensor '%s' data_offsets [%lld,%lld] end before they begin", path,
            name, (long long)b->i, (long long)e->i);
    return -1;
  }
  if ((uint64_t)e->i > f->data_len) {
    bf_errf(err, errlen,
            "%s: offsets out of range (truncated file?): tensor '%s' data_offsets [%lld,%lld] "
            "but the data area has only %zu bytes (file %zu bytes, header %zu)",
            path, name, (long long)b->i, (long long)e->i, f->data_len, f->map_len, f->header_len);
    return -1;
  }
  t->begin = (size_t)b->i;
  t->end = (size_t)e->i;
  uint64_t bytes = t->end - t->begin;
  char sb[128];
  if (overflow || n > UINT64_MAX / t->elem_size || n * t->elem_size != bytes) {
    bf_errf(err, errlen,
            "%s: wrong byte count for tensor '%s': shape %s of %s needs %s%llu bytes but "
            "data_offsets [%zu,%zu] hold %llu",
            path, name, st_shape_str(t->shape, t->ndim, sb, sizeof sb), t->dtype_name,
            overflow || n > UINT64_MAX / t->elem_size ? "more than " : "",
            overflow || n > UINT64_MAX / t->elem_size ? (unsigned long long)UINT64_MAX
                                                      : (unsigned long long)(n * t->elem_size),
            t->begin, t->end, (unsigned long long)bytes);
    return -1;
  }
  t->data = f->data + t->begin;
  return 0;
}

/* Step 1: open and map the file read-only into f (map, fd, mtime, path).
** On an error before the mapping exists f is left as it was. */
static int map_file(st_file *f, const char *path, int private, char *err, size_t errlen) {
  struct stat st;
  int fd = bf_open_regular(path, O_RDONLY | (private ? O_NOFOLLOW : 0), 0, &st);
  if (fd < 0) {
    bf_errf(err, errlen, "%s: %s", path, bf_open_failure(errno));
    return -1;
  }
  if (private && st.st_uid != geteuid()) {
    bf_errf(err, errlen, "%s: belongs to another user (uid %u)", path, (unsigned)st.st_uid);
    close(fd);
    return -1;
  }
  size_t size = (size_t)st.st_size;
  if (size == 0) {
    bf_errf(err, errlen, "%s: empty file (0 bytes), not a safetensors file", path);
    close(fd);
    return -1;
  }
  if (size < 8) {
    bf_errf(err, errlen,
            "%s: truncated: %zu bytes is too short for a safetensors file "
            "(needs an 8-byte header length first)",
            path, size);
    close(fd);
    return -1;
  }
  void *map = map_read_only(fd, size);
  int merr = errno;
  if (map == MAP_FAILED) {
    close(fd);
    bf_errf(err, errlen, "%s: cannot mmap %zu bytes: %s", path, size, strerror(merr));
    return -1;
  }
  f->map = map;
  f->map_len = size;
  f->fd = fd;
  f->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
  f->path = strdup(path);
  if (!f->path) {
    bf_errf(err, errlen, "%s: out of memory", path);
    return -1;
  }
  return 0;
}

/* Step 2: the 8-byte header length, checked against the file size; where
** the data area is. */
static int find_data_area(st_file *f, const char *path, char *err, size_t errlen) {
  const unsigned char *p = f->map;
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | p[i];
  if (hlen > ST_MAX_HEADER) {
    bf_errf(err, errlen,
            "%s: header too large: header length says %llu bytes (limit %u); "
            "not a safetensors file or corrupt",
            path, (unsigned long long)hlen, ST_MAX_HEADER);
    return -1;
  }
  if (hlen > f->map_len - 8) {
    bf_errf(err, errlen, "%s: truncated: header says %llu bytes but file has %zu", path,
            (unsigned long long)hlen, f->map_len);
    return -1;
  }
  f->header_len = (size_t)hlen;
  f->data = p + 8 + hlen;
  f->data_len = f->map_len - 8 - (size_t)hlen;
  return 0;
}

/* Step 3: the JSON header into f->tensors, each entry checked by
** parse_entry; "__metadata__" must be an object and is otherwise ignored. */
static int parse_header(st_file *f, const char *path, char *err, size_t errlen) {
  char jerr[200];
  json_value *h = json_parse((const char *)f->map + 8, f->header_len, jerr, sizeof jerr);
  if (!h) {
    bf_errf(err, errlen, "%s: header is not valid JSON (%s)", path, jerr);
    return -1;
  }
  int rc = -1;
  if (h->type != JSON_OBJECT) {
    bf_errf(err, errlen, "%s: header is %s, not an object", path, json_type_a(h->type));
    goto done;
  }
  size_t nt = 0;
  for (size_t i = 0; i < json_len(h); i++)
    if (strcmp(json_key(h, i, NULL), "__metadata__") != 0) nt++;
  f->tensors = calloc(nt ? nt : 1, sizeof *f->tensors);
  if (!f->tensors) {
    bf_errf(err, errlen, "%s: out of memory", path);
    goto done;
  }
  for (size_t i = 0; i < json_len(h); i++) {
    size_t kl;
    const char *name = json_key(h, i, &kl);
    const json_value *v = json_at(h, i);
    if (strlen(name) != kl) {
      bf_errf(err, errlen, "%s: bad header: a tensor name contains a NUL character", path);
      goto done;
    }
    if (strcmp(name, "__metadata__") == 0) {
      if (v->type != JSON_OBJECT) {
        bf_errf(err, errlen, "%s: bad header: \"__metadata__\" is %s, not an object", path,
                json_type_a(v->type));
        goto done;
      }
      continue;
    }
    st_tensor *t = &f->tensors[f->n];
    if (parse_entry(path, name, v, f, t, err, errlen) != 0) goto done;
    t->name = strdup(name);
    if (!t->name) {
      bf_errf(err, errlen, "%s: out of memory", path);
      goto done;
    }
    f->n++;
  }
  rc = 0;
done:
  json_free(h);
  return rc;
}

/* Step 4: sort the tensors by name (for st_find); no name twice. */
static int sort_names(st_file *f, const char *path, char *err, size_t errlen) {
  qsort(f->tensors, (size_t)f->n, sizeof *f->tensors, cmp_name);
  for (int i = 1; i < f->n; i++)
    if (strcmp(f->tensors[i - 1].name, f->tensors[i].name) == 0) {
      bf_errf(err, errlen, "%s: bad header: tensor '%s' appears twice", path, f->tensors[i].name);
      return -1;
    }
  return 0;
}

/* Step 5: no two tensors overlap.  In order of offset, each must begin at or
** after the previous end (empty tensors occupy nothing and never overlap). */
static int check_overlaps(const st_file *f, const char *path, char *err, size_t errlen) {
  if (f->n <= 1) return 0;
  byte_range *r = malloc((size_t)f->n * sizeof *r);
  if (!r) {
    bf_errf(err, errlen, "%s: out of memory", path);
    return -1;
  }
  for (int i = 0; i < f->n; i++) r[i] = (byte_range){f->tensors[i].begin, f->tensors[i].end, i};
  qsort(r, (size_t)f->n, sizeof *r, cmp_range);
  const st_tensor *prev = NULL;
  int rc = 0;
  for (int i = 0; i < f->n && rc == 0; i++) {
    const st_tensor *t = &f->tensors[r[i].idx];
    if (t->begin == t->end) continue;
    if (prev && t->begin < prev->end) {
      bf_errf(err, errlen,
              "%s: overlapping offsets: tensor '%s' [%zu,%zu] overlaps tensor '%s' [%zu,%zu]", path,
              t->name, t->begin, t->end, prev->name, prev->begin, prev->end);
      rc = -1;
    }
    prev = t;
  }
  free(r);
  return rc;
}

static int open_file(st_file *f, const char *path, int private, char *err, size_t errlen) {
  memset(f, 0, sizeof *f);
  f->fd = -1;
  if (err && errlen) err[0] = 0;
  if (map_file(f, path, private, err, errlen) != 0 || find_data_area(f, path, err, errlen) != 0 ||
      parse_header(f, path, err, errlen) != 0 || sort_names(f, path, err, errlen) != 0 ||
      check_overlaps(f, path, err, errlen) != 0) {
    st_close(f);
    return -1;
  }
  return 0;
}

int st_open(st_file *f, const char *path, char *err, size_t errlen) {
  return open_file(f, path, 0, err, errlen);
}

int st_open_private(st_file *f, const char *path, char *err, size_t errlen) {
  return open_file(f, path, 1, err, errlen);
}

const st_tensor *st_find(const st_file *f, const char *name) {
  int lo = 0, hi = f->n - 1;
  while (lo <= hi) {
    int mid = lo + (hi - lo) / 2;
    int c = strcmp(name, f->tensors[mid].name);
    if (c == 0) return &f->tensors[mid];
    if (c < 0) hi = mid - 1;
    else lo = mid + 1;
  }
  return NULL;
}

static float bits_f32(uint32_t u) {
  float x;
  memcpy(&x, &u, 4);
  return x;
}

float st_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1F, man = h & 0x3FF;
  if (exp == 0x1F) /* inf / nan (payload kept) */
    return bits_f32(sign | 0x7F800000u | (man << 13));
  if (exp == 0) {
    if (man == 0) return bits_f32(sign); /* +-0 */
    /* subnormal: man * 2^-24, exact in float */
    float v = (float)man * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

float st_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

/* ---- bulk conversion ---- */

static void f16_n_scalar(const unsigned char *src, float *dst, size_t n) {
  for (size_t i = 0; i < n; i++)
    dst[i] = st_f16_to_f32((uint16_t)(src[2 * i] | (src[2 * i + 1] << 8)));
}

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <immintrin.h>
__attribute__((target("avx,f16c"))) static void f16_n_f16c(const unsigned char *src, float *dst,
                                                           size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(src + 2 * i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  f16_n_scalar(src + 2 * i, dst + i, n - i);
}
#include <cpuid.h>
/* CPUID + XGETBV rather than __builtin_cpu_supports("f16c"), which clang 14
** does not know. */
static int have_f16c(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
  if (!(c & bit_OSXSAVE) || !(c & bit_AVX) || !(c & bit_F16C)) return 0;
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (lo & 6) == 6; /* the OS saves the XMM and YMM registers */
}
#else
static void f16_n_f16c(const unsigned char *src, float *dst, size_t n) {
  f16_n_scalar(src, dst, n);
}
static int have_f16c(void) { return 0; }
#endif

void st_f16_to_f32_n(const void *src, float *dst, size_t n) {
  static int cached = -1; /* every thread computes the same value */
  int f16c = __atomic_load_n(&cached, __ATOMIC_RELAXED);
  if (f16c < 0) {
    f16c = have_f16c();
    __atomic_store_n(&cached, f16c, __ATOMIC_RELAXED);
  }
  if (f16c) f16_n_f16c(src, dst, n);
  else f16_n_scalar(src, dst, n);
}

void st_bf16_to_f32_n(const void *src, float *dst, size_t n) {
  const unsigned char *s = src;
  uint32_t *d = (uint32_t *)(void *)dst;
  for (size_t i = 0; i < n; i++) {
    uint16_t h;
    memcpy(&h, s + 2 * i, 2); /* little-endian host (x86, arm64) */
    d[i] = (uint32_t)h << 16;
  }
}
