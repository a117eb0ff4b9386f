/*
** qgemm.c — int8 products y = x W^T with exact int32 sums: quantizing W
** (packed, qgemm.h) and the rows of x, and the product on one thread.  The
** kernels are kernels/'s (portable.c, avx2.c, avx512.c: int8_kernel_table),
** the parallel product gemm.c's (gemm_xwt_int8: the one job splitter of
** fp32 and int8).
*/
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/int8.h"
#include "kernels/kernels.h"
#include "qgemm.h"
#include "util.h"

#define QG_BLOCK_BYTES 98304 /* quantized x per block of rows (stays in L2 while W passes) */

#if defined(__x86_64__) && defined(__GNUC__)
#define QG_X86 1
#include <immintrin.h>
#else
#define QG_X86 0
#endif

/* ------------------------------------------------------------ paths */

/* The kernels and the choice among them are kernels/'s (dispatch.c). */
int qg_path_supported(qg_path path) { return kernels_int8_supported(path); }
qg_path qg_best_path(void) { return (qg_path)kernels_int8_best(); }

const char *qg_path_name(qg_path path) {
  switch (path) {
    case QG_PORTABLE: return "portable";
    case QG_AVX2: return "avx2";
    case QG_AVX512VNNI: return "avx512vnni";
  }
  return "?";
}

/* ------------------------------------------------------------ quantizing */

size_t qg_weights_bytes(int n, int k) {
  return (size_t)((n + INT8_PANEL - 1) / INT8_PANEL) * INT8_PANEL * (((size_t)k + 3) / 4) * 4;
}

int qg_quantize_weights(const float *w, int n, int k, int8_t *q, float *scale, int32_t *sum) {
  if (k < 1 || k > QG_MAX_K) return -1;
  size_t kg = ((size_t)k + 3) / 4;
  memset(q, 0, qg_weights_bytes(n, k)); /* the padding: rows past n, columns past k */
  int bad = 0;
  for (int i = 0; i < n; i++) {
    const float *row = w + (size_t)i * k;
    int8_t *qb = q + (size_t)(i / INT8_PANEL) * kg * INT8_GROUP_BYTES +
                 (size_t)(i % INT8_PANEL) * 4;
    float amax = 0;
    for (int j = 0; j < k; j++) {
      if (!isfinite(row[j])) bad = 1;
      else if (fabsf(row[j]) > amax) amax = fabsf(row[j]);
    }
    int32_t s = 0;
    if (amax < 127 * FLT_MIN) { /* zeros (or too small to scale): all codes are 0 */
      scale[i] = 0;
    } else {
      scale[i] = amax / 127;
      float inv = 127 / amax;
      for (int j = 0; j < k; j++) {
        long v = isfinite(row[j]) ? lrintf(row[j] * inv) : 0;
        v = v > 127 ? 127 : v < -127 ? -127 : v;
        qb[(size_t)(j / 4) * INT8_GROUP_BYTES + j % 4] = (int8_t)v; /* W[i][j] */
        s += (int32_t)v;
      }
    }
    sum[i] = s;
  }
  return bad ? -1 : 0;
}

static size_t round64(size_t n) { return (n + 63) & ~(size_t)63; }

static int round4(int k) { return (k + 3) & ~3; }

size_t qg_rows_bytes(int t, int k) {
  return 64 + round64((size_t)t * round4(k) * 2) + round64((size_t)t * sizeof(float)) +
         round64((size_t)t * sizeof(int32_t));
}

/* Round to nearest, ties to even (the default rounding mode): the same
** instruction (cvtss2si / cvtps2dq) wherever x86 quantizes, so that a
** scalar tail and a vector body give the same codes. */
static inline int32_t round_nearest(float v) {
#if QG_X86
  return _mm_cvtss_si32(_mm_set_ss(v));
#else
  return (int32_t)lrintf(v);
#endif
}

/* One row of x: its range, and its codes into q8 or q16 (one is NULL). */
static void quantize_row(const int8_kernel_table *kt, const float *row, int k, float *scale,
                         int32_t *zero, uint8_t *q8, int16_t *q16) {
  float lo = 0, hi = 0, bad = 0; /* bad: sum of v * 0, NaN if any v is NaN or infinite */
  int j = 0;
  if (kt && kt->row_range) {
    kt->row_range(row, k, &lo, &hi, &bad);
    j = k;
  }
#if QG_X86
  __m128 vlo = _mm_setzero_ps(), vhi = vlo, vbad = vlo, zf = vlo;
  if (j == 0) {
    for (; j + 4 <= k; j += 4) {
      __m128 v = _mm_loadu_ps(row + j);
      vlo = _mm_min_ps(vlo, v);
      vhi = _mm_max_ps(vhi, v);
      vbad = _mm_add_ps(vbad, _mm_mul_ps(v, zf));
    }
    float a[4], b[4], c[4];
    _mm_storeu_ps(a, vlo);
    _mm_storeu_ps(b, vhi);
    _mm_storeu_ps(c, vbad);
    for (int i = 0; i < 4; i++) {
      lo = a[i] < lo ? a[i] : lo;
      hi = b[i] > hi ? b[i] : hi;
      bad += c[i];
    }
  }
#endif
  for (; j < k; j++) {
    float v = row[j];
    lo = v < lo ? v : lo;
    hi = v > hi ? v : hi;
    bad += v * 0;
  }
  float inv = 0;
  int32_t z = 0;
  if (bad != 0 || !isfinite(hi - lo)) {
    *scale = NAN; /* the row's outputs become NaN, as in fp32; its codes are 0 */
  } else if (hi - lo < 255 * FLT_MIN) {
    *scale = 0; /* zeros: codes = zero point = 0 */
  } else {
    *scale = (hi - lo) / 255;
    inv = 255 / (hi - lo);
    z = round_nearest(-lo * inv);
    z = z < 0 ? 0 : z > 255 ? 255 : z;
  }
  *zero = z;
  j = 0;
  if (q8 && kt && kt->row_codes) {
    kt->row_codes(row, k, inv, z, q8);
    j = k;
  }
#if QG_X86
  /* |v * inv| <= 255: no overflow; packus / min-max clamp the codes to [0, 255] */
  __m128 vinv = _mm_set1_ps(inv);
  __m128i vz = _mm_set1_epi32(z), v0 = _mm_setzero_si128(), v255 = _mm_set1_epi16(255);
  for (; j + 16 <= k; j += 16) {
    __m128i c0 = _mm_add_epi32(_mm_cvtps_epi32(_mm_mul_ps(_mm_loadu_ps(row + j), vinv)), vz);
    __m128i c1 = _mm_add_epi32(_mm_cvtps_epi32(_mm_mul_ps(_mm_loadu_ps(row + j + 4), vinv)), vz);
    __m128i c2 = _mm_add_epi32(_mm_cvtps_epi32(_mm_mul_ps(_mm_loadu_ps(row + j + 8), vinv)), vz);
    __m128i c3 = _mm_add_epi32(_mm_cvtps_epi32(_mm_mul_ps(_mm_loadu_ps(row + j + 12), vinv)), vz);
    __m128i w01 = _mm_packs_epi32(c0, c1), w23 = _mm_packs_epi32(c2, c3);
    if (q8) {
      _mm_storeu_si128((__m128i *)(q8 + j), _mm_packus_epi16(w01, w23));
    } else {
      _mm_storeu_si128((__m128i *)(q16 + j), _mm_min_epi16(_mm_max_epi16(w01, v0), v255));
      _mm_storeu_si128((__m128i *)(q16 + j + 8), _mm_min_epi16(_mm_max_epi16(w23, v0), v255));
    }
  }
#endif
  for (; j < k; j++) {
    int32_t v = round_nearest(row[j] * inv) + z;
    v = v < 0 ? 0 : v > 255 ? 255 : v;
    if (q8) q8[j] = (uint8_t)v;
    else q16[j] = (int16_t)v;
  }
  for (; j < round4(k); j++) { /* the row's padding to whole groups of 4: W is 0 there */
    if (q8) q8[j] = 0;
    else q16[j] = 0;
  }
}

void qg_rows_init(qg_rows *out, void *buf, int t, int k, qg_path path) {
  char *p = (char *)(((uintptr_t)buf + 63) & ~(uintptr_t)63);
  int ldq = round4(k);
  size_t qbytes = round64((size_t)t * ldq * 2);
  float *scale = (float *)(p + qbytes);
  int32_t *zero = (int32_t *)(p + qbytes + round64((size_t)t * sizeof(float)));
  *out = (qg_rows){t, k, path, ldq, p, scale, zero};
}

void qg_quantize_rows_range(const qg_rows *X, const float *x, size_t ldx, int r0, int r1) {
  char *p = (char *)X->q; /* the buffer qg_rows_init laid out: this call fills rows [r0, r1) */
  const int8_kernel_table *kt = kernels_int8(X->path); /* its loops, where it has them */
  for (int r = r0; r < r1; r++) {
    uint8_t *q8 = X->path == QG_AVX2 ? NULL : (uint8_t *)p + (size_t)r * X->ldq;
    int16_t *q16 = X->path == QG_AVX2 ? (int16_t *)p + (size_t)r * X->ldq : NULL;
    quantize_row(kt, x + (size_t)r * ldx, X->k, (float *)&X->scale[r], (int32_t *)&X->zero[r], q8,
                 q16);
  }
}

void qg_quantize_rows(qg_rows *out, void *buf, const float *x, int t, int k, size_t ldx,
                      qg_path path) {
  qg_rows_init(out, buf, t, k, path);
  qg_quantize_rows_range(out, x, ldx, 0, t);
}

/* ------------------------------------------------------------ products */

/* All of y = x W^T on this thread, through the kernel x was quantized for:
** blocks of rows of x (QG_BLOCK_BYTES of codes, kept in L2) by strips of
** INT8_PANEL outputs.  (Threads: gemm_xwt_int8, gemm.h.) */
static void product(const int8_out *o) {
  const int8_kernel_table *kt = kernels_int8(o->x->path);
  int rb = qg_row_block(o->x);
  for (int r0 = 0; r0 < o->x->t; r0 += rb)
    for (int i0 = 0; i0 < o->w->n; i0 += INT8_PANEL)
      kt->unit(o, r0, r0 + rb < o->x->t ? r0 + rb : o->x->t, i0,
               i0 + INT8_PANEL < o->w->n ? i0 + INT8_PANEL : o->w->n);
}

int qg_row_block(const qg_rows *x) {
  size_t row_bytes = (size_t)x->ldq * (x->path == QG_AVX2 ? 2 : 1);
  size_t most = QG_BLOCK_BYTES / row_bytes;
  most = most < 24 ? 24 : most > 264 ? 264 : most; /* whole tiles: 3, 6 and 8 divide 24 */
  size_t nrb = ((size_t)x->t + most - 1) / most;   /* blocks of about the same size */
  size_t rb = nrb ? ((size_t)x->t + nrb - 1) / nrb : 24;
  return (int)((rb + 23) / 24 * 24);
}

void qg_matmul(float *y, size_t ldy, const qg_rows *x, const qg_weights *w, const float *bias) {
  int8_out o = {y, ldy, NULL, 0, x, w, bias};
  product(&o);
}

void qg_matmul_i32(int32_t *c, size_t ldc, const qg_rows *x, const qg_weights *w) {
  int8_out o = {NULL, 0, c, ldc, x, w, NULL};
  product(&o);
}
