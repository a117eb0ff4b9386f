/*
** qgemm.c — int8 products y = x W^T with exact int32 sums.  See qgemm.h for
** the quantization and the arithmetic.
**
** Two kinds of kernel:
**   - dot kernels (portable, AVX2 below QG_PANEL_MIN_ROWS rows of x,
**     AVX512-VNNI): tiles of dot products, R rows of W (in place,
**     row-major) against J rows of quantized x, R*J accumulators in
**     registers summing along k, reduced to R*J int32 sums at the end of the
**     row (k past the last full vector: plain C).  While a tile runs, the
**     rows of W of the next tile (the next rows in memory) are prefetched:
**     one token (memory-bound) ran 25-30% faster.
**   - the AVX2 panel kernel (from QG_PANEL_MIN_ROWS rows of x on, k even):
**     16 rows of W packed into pairs once per unit, then outer products with
**     broadcast pairs of x (see "Panel kernel" below).
** Every kernel's int32 sums go through the same arithmetic into y (finish,
** or finish_block_avx2 8 columns at a time, the same operations in the
** same order), so all kernels give bit-identical y.
**
** Units of work: a block of rows of x (dot kernels: sized so that the
** block's quantized rows stay in L2 while a strip of W passes; panel
** kernel: up to QG_PANEL_ROWS rows) times a strip of QG_STRIP columns of W.
*/
#include <float.h>
#include <stdlib.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "qgemm.h"
#include "util.h"

#define QG_STRIP 48          /* columns of y per unit (a multiple of every tile's R) */
#define QG_BLOCK_BYTES 98304 /* quantized x per block of rows of a unit (L2) */
#define QG_PANEL_ROWS 480    /* rows of x per block for the AVX2 panel kernel, */
#define QG_PANEL_MIN_ROWS 12 /* used from this many rows of x on (and even k) */

#if defined(__x86_64__) && defined(__GNUC__)
#define QG_X86 1
#include <immintrin.h>
#define AVX2 __attribute__((target("avx2")))
#define VNNI __attribute__((target("avx512f,avx512bw,avx512vnni")))
#else
#define QG_X86 0
#endif
#define INLINE static inline __attribute__((always_inline))

/* ------------------------------------------------------------ paths */

int qg_path_supported(qg_path path) {
  switch (path) {
    case QG_PORTABLE: return 1;
#if QG_X86
    /* __builtin_cpu_supports also checks that the OS saves the ymm/zmm state */
    case QG_AVX2: __builtin_cpu_init(); return __builtin_cpu_supports("avx2") != 0;
    case QG_AVX512VNNI:
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vnni");
#else
    default: return 0;
#endif
  }
  return 0;
}

qg_path qg_best_path(void) {
  static atomic_int known = -1;
  int v = atomic_load(&known);
  if (v < 0) {
    v = QG_PORTABLE;
    if (qg_path_supported(QG_AVX512VNNI) && !bf_env_flag("BERTFILL_NO_AVX512", 0))
      v = QG_AVX512VNNI;
    else if (qg_path_supported(QG_AVX2)) v = QG_AVX2;
    atomic_store(&known, v);
  }
  return (qg_path)v;
}

const char *qg_path_name(qg_path path) {
  switch (path) {
    case QG_PORTABLE: return "portable";
    case QG_AVX2: return "avx2";
    case QG_AVX512VNNI: return "avx512vnni";
  }
  return "?";
}

/* ------------------------------------------------------------ quantizing */

int qg_quantize_weights(const float *w, int n, int k, int8_t *q, float *scale, int32_t *sum) {
  if (k < 1 || k > QG_MAX_K) return -1;
  int bad = 0;
  for (int i = 0; i < n; i++) {
    const float *row = w + (size_t)i * k;
    int8_t *qr = q + (size_t)i * k;
    float amax = 0;
    for (int j = 0; j < k; j++) {
      if (!isfinite(row[j])) bad = 1;
      else if (fabsf(row[j]) > amax) amax = fabsf(row[j]);
    }
    int32_t s = 0;
    if (amax < 127 * FLT_MIN) { /* zeros (or too small to scale): all q are 0 */
      scale[i] = 0;
      memset(qr, 0, (size_t)k);
    } else {
      scale[i] = amax / 127;
      float inv = 127 / amax;
      for (int j = 0; j < k; j++) {
        long v = isfinite(row[j]) ? lrintf(row[j] * inv) : 0;
        v = v > 127 ? 127 : v < -127 ? -127 : v;
        qr[j] = (int8_t)v;
        s += (int32_t)v;
      }
    }
    sum[i] = s;
  }
  return bad ? -1 : 0;
}

static size_t round64(size_t n) { return (n + 63) & ~(size_t)63; }

size_t qg_rows_bytes(int t, int k) {
  return 64 + round64((size_t)t * k * 2) + round64((size_t)t * sizeof(float)) +
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
static void quantize_row(const float *row, int k, float *scale, int32_t *zero, uint8_t *q8,
                         int16_t *q16) {
  float lo = 0, hi = 0, bad = 0; /* bad: sum of v * 0, NaN if any v is NaN or infinite */
  int j = 0;
#if QG_X86
  __m128 vlo = _mm_setzero_ps(), vhi = vlo, vbad = vlo, zf = vlo;
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
}

void qg_quantize_rows(qg_rows *out, void *buf, const float *x, int t, int k, size_t ldx,
                      qg_path path) {
  char *p = (char *)(((uintptr_t)buf + 63) & ~(uintptr_t)63);
  size_t qbytes = round64((size_t)t * k * 2);
  float *scale = (float *)(p + qbytes);
  int32_t *zero = (int32_t *)(p + qbytes + round64((size_t)t * sizeof(float)));
  for (int r = 0; r < t; r++) {
    uint8_t *q8 = path == QG_AVX2 ? NULL : (uint8_t *)p + (size_t)r * k;
    int16_t *q16 = path == QG_AVX2 ? (int16_t *)p + (size_t)r * k : NULL;
    quantize_row(x + (size_t)r * ldx, k, &scale[r], &zero[r], q8, q16);
  }
  *out = (qg_rows){t, k, path, p, scale, zero};
}

/* ------------------------------------------------------------ epilogue */

/* acc[i*J + j] (sums of qx * qw for row r0 + j of x, column i0 + i of W)
** into y (or c).  Not inlined into the kernels, so that every path runs
** the same float operations in the same order (no fused multiply-add). */
typedef struct tile_out {
  float *y;
  size_t ldy;
  int32_t *c;
  size_t ldc;
  const qg_rows *x;
  const qg_weights *w;
  const float *bias;
  int32_t
    *sums; /* AVX2: the unit's raw sums, row r - sr0, column i - si0 (NULL: finish per tile) */
  int ldsums, sr0, si0;
} tile_out;

/* One output: the sum acc of row r of x and column i of W into y (or c). */
static inline void finish_one(const tile_out *o, int r, int i, int32_t acc) {
  int32_t a = acc - o->x->zero[r] * o->w->sum[i]; /* exact: |a| <= 255 * 127 * k */
  if (o->c) {
    o->c[(size_t)r * o->ldc + i] = a;
  } else {
    float s = o->x->scale[r] * o->w->scale[i];
    float v = (float)a * s;
    if (o->bias) v += o->bias[i];
    o->y[(size_t)r * o->ldy + i] = v;
  }
}

__attribute__((noinline)) static void finish(const tile_out *o, const int32_t *acc, int r0, int J,
                                             int i0, int R) {
  for (int j = 0; j < J; j++)
    for (int i = 0; i < R; i++) finish_one(o, r0 + j, i0 + i, acc[i * J + j]);
}

/* Plain C sums of k in [k0, K) into acc (the tails of the vector kernels). */
INLINE void add_tail_u8(int32_t *acc, const uint8_t *x, size_t ldx, const int8_t *w, size_t ldw,
                        int k0, int K, int R, int J) {
  for (int i = 0; i < R; i++)
    for (int j = 0; j < J; j++) {
      int32_t s = 0;
      for (int k = k0; k < K; k++) s += (int32_t)x[(size_t)j * ldx + k] * w[(size_t)i * ldw + k];
      acc[i * J + j] += s;
    }
}

/* ------------------------------------------------------------ portable */

#define PT_R 4
#define PT_J 4

static void tile_portable(int32_t *acc, const uint8_t *x, const int8_t *w, int K, int R, int J) {
  for (int i = 0; i < R * J; i++) acc[i] = 0;
  add_tail_u8(acc, x, (size_t)K, w, (size_t)K, 0, K, R, J);
}

static void unit_portable(const tile_out *o, int r0, int r1, int i0, int i1) {
  const uint8_t *x = o->x->q;
  const int K = o->w->k;
  int32_t acc[PT_R * PT_J];
  for (int i = i0; i < i1; i += PT_R) {
    int R = i1 - i < PT_R ? i1 - i : PT_R;
    for (int r = r0; r < r1; r += PT_J) {
      int J = r1 - r < PT_J ? r1 - r : PT_J;
      tile_portable(acc, x + (size_t)r * K, o->w->q + (size_t)i * K, K, R, J);
      finish(o, acc, r, J, i, R);
    }
  }
}

/* ------------------------------------------------------------ AVX2 */

#if QG_X86
/* Tiles (rows of W x rows of x), measured on AMD Zen 3 (one core, bert-base
** shapes, 16-128 rows): 3 x 3 is best, 2 x 4 and 4 x 2 are 5-10% slower and
** 3 x 4 (17 ymm: spills) 25% slower.  The last 1-2 rows of a block (all of
** them for one token) take more rows of W at a time. */
#define A2_R 3
#define A2_J 3
static const int a2_rest_r[A2_J] = {0, 6, 4}; /* rows of W for 1, 2 rows of x */
#define MAX_TILE 16                           /* accumulators of any tile */

/* Lane i of the result = the sum of the 8 lanes of v[i], i < n (a constant
** after inlining; lanes past n are 0). */
INLINE AVX2 __m256i reduce8_avx2(const __m256i *v, const int n) {
  __m256i a[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; i++) a[i] = i < n ? v[i] : _mm256_setzero_si256();
  __m256i h01 = _mm256_hadd_epi32(a[0], a[1]), h23 = _mm256_hadd_epi32(a[2], a[3]);
  __m256i h45 = _mm256_hadd_epi32(a[4], a[5]), h67 = _mm256_hadd_epi32(a[6], a[7]);
  __m256i lo = _mm256_hadd_epi32(h01, h23), hi = _mm256_hadd_epi32(h45, h67);
  /* lo = [sums of lanes 0-3 of v0..v3 | lanes 4-7 of v0..v3], hi the same for v4..v7 */
  return _mm256_add_epi32(_mm256_permute2x128_si256(lo, hi, 0x20),
                          _mm256_permute2x128_si256(lo, hi, 0x31));
}

/* acc[i*J + j] = sum_k x[j*K + k] * w[i*K + k], i < R, j < J (constants
** after inlining): x int16 (the u8 codes), w int8 sign-extended on load.
** acc has room for a multiple of 8 entries. */
INLINE AVX2 void tile_avx2(int32_t *acc, const int16_t *x, const int8_t *w, int K, const int R,
                           const int J) {
  __m256i s[MAX_TILE], wv[8];
#pragma GCC unroll 16
  for (int e = 0; e < R * J; e++) s[e] = _mm256_setzero_si256();
  int k = 0;
  for (; k + 16 <= K; k += 16) {
    if ((k & 63) == 0) { /* the next tile's rows of W, which follow these in memory */
#pragma GCC unroll 8
      for (int i = 0; i < R; i++)
        _mm_prefetch((const char *)(w + (size_t)(R + i) * K + k), _MM_HINT_T0);
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; i++)
      wv[i] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(w + (size_t)i * K + k)));
#pragma GCC unroll 4
    for (int j = 0; j < J; j++) {
      __m256i xv = _mm256_loadu_si256((const __m256i *)(x + (size_t)j * K + k));
#pragma GCC unroll 8
      for (int i = 0; i < R; i++)
        s[i * J + j] = _mm256_add_epi32(s[i * J + j], _mm256_madd_epi16(wv[i], xv));
    }
  }
#pragma GCC unroll 2
  for (int e = 0; e < R * J; e += 8)
    _mm256_storeu_si256((__m256i *)(acc + e), reduce8_avx2(s + e, R * J - e < 8 ? R * J - e : 8));
  for (int i = 0; i < R; i++) /* the last k % 16 */
    for (int j = 0; j < J; j++) {
      int32_t t = 0;
      for (int kk = k; kk < K; kk++) t += (int32_t)x[(size_t)j * K + kk] * w[(size_t)i * K + kk];
      acc[i * J + j] += t;
    }
}

/* A tile's sums acc[i*J + j] into the unit's block (or through finish). */
INLINE void put_tile(const tile_out *o, const int32_t *acc, int r0, int J, int i0, int R) {
  if (!o->sums) {
    finish(o, acc, r0, J, i0, R);
    return;
  }
  int32_t *b = o->sums + (size_t)(r0 - o->sr0) * o->ldsums + (i0 - o->si0);
  for (int j = 0; j < J; j++)
    for (int i = 0; i < R; i++) b[(size_t)j * o->ldsums + i] = acc[i * J + j];
}

/* finish() for a whole block of sums (rows [r0, r1), columns [i0, i1)), 8
** columns at a time: the same operations in the same order as finish (the
** target has no FMA to contract them into), so the same y bit for bit. */
AVX2 static void finish_block_avx2(const tile_out *o, int r0, int r1, int i0, int i1) {
  const qg_weights *w = o->w;
  for (int r = r0; r < r1; r++) {
    const int32_t *b = o->sums + (size_t)(r - o->sr0) * o->ldsums - o->si0;
    int32_t z = o->x->zero[r];
    float sx = o->x->scale[r];
    __m256i vz = _mm256_set1_epi32(z);
    __m256 vsx = _mm256_set1_ps(sx);
    int i = i0;
    for (; i + 8 <= i1; i += 8) {
      __m256i a = _mm256_sub_epi32(_mm256_loadu_si256((const __m256i *)(b + i)),
                                   _mm256_mullo_epi32(vz, _mm256_loadu_si256(
                                                            (const __m256i *)(w->sum + i))));
      if (o->c) {
        _mm256_storeu_si256((__m256i *)(o->c + (size_t)r * o->ldc + i), a);
        continue;
      }
      __m256 sc = _mm256_mul_ps(vsx, _mm256_loadu_ps(w->scale + i));
      __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(a), sc);
      if (o->bias) v = _mm256_add_ps(v, _mm256_loadu_ps(o->bias + i));
      _mm256_storeu_ps(o->y + (size_t)r * o->ldy + i, v);
    }
    for (; i < i1; i++) finish_one(o, r, i, b[i]);
  }
}

/* Rows [r0, r1) of x against columns [i0, i1), in tiles of up to Rmax rows
** of W and A2_J rows of x (the switch lists every tile the callers make). */
AVX2 static void cols_avx2(const tile_out *o, int r0, int r1, int i0, int i1, int Rmax) {
  const int16_t *x = o->x->q;
  const int K = o->w->k;
  int32_t acc[MAX_TILE + 8];
  for (int i = i0; i < i1; i += Rmax) {
    int R = i1 - i < Rmax ? i1 - i : Rmax;
    const int8_t *w = o->w->q + (size_t)i * K;
    for (int r = r0; r < r1; r += A2_J) {
      int J = r1 - r < A2_J ? r1 - r : A2_J;
      const int16_t *xr = x + (size_t)r * K;
      switch (R * 8 + J) {
#define T(a, b) \
  case a * 8 + b: tile_avx2(acc, xr, w, K, a, b); break;
        // clang-format off
        T(3, 3) T(2, 3) T(1, 3)                         /* rows of x in threes */
        T(6, 1) T(5, 1) T(4, 1) T(3, 1) T(2, 1) T(1, 1) /* the last 1-2 */
        T(4, 2) T(3, 2) T(2, 2) T(1, 2)
        // clang-format on
#undef T
      }
      put_tile(o, acc, r, J, i, R);
    }
  }
}

/* Panel kernel, from QG_PANEL_MIN_ROWS rows of x on (fewer: the dot
** kernel, which reads W without packing it).  For each panel of PANEL_N
** columns of W,
**   1. pack: P[k/2][j] = (W[i + j][k], W[i + j][k + 1]) as two int16 (zero
**      past the strip's end), PANEL_N * K int16, stays in L1/L2;
**   2. for every PANEL_M rows of x: c[m][j] += x[m][k] W[i + j][k] +
**      x[m][k + 1] W[i + j][k + 1] for the 16 j at once: one vpmaddwd of a
**      broadcast pair of x (vpbroadcastd) with 8 pairs of P, 12 accumulators
**      (the 6x16 tile of BLIS's Haswell kernel, in integers: exact).
** While a panel is computed, the rows of W of the next one are prefetched,
** spread over its tiles (for one sentence W comes from memory: measured on
** Zen 3, 16-24 rows: 0.75-0.84x the time without, 3072-long rows ~0.95x
** with the T1 hint, 1.0x with T0).  Measured against the dot kernel on Zen
** 3 (one core, bert-base shapes): 0.75-0.85x the time from 12 rows on, 0.57x
** at 64-128 rows; at 8 rows 1.1-1.35x (packing costs), hence the threshold.
** K must be even (a pair per 32-bit lane). */
#define PANEL_M 6
#define PF_HINT _MM_HINT_T1 /* measured: T0 slowed the 3072-long rows (L1 too small) */
#define PANEL_N 16

/* Prefetching the next panel while a panel is computed: its lines n in
** [n, end) (line n: row n % 16, bytes 64 * (n / 16) on), one every `every`
** steps of k. */
typedef struct panel_pf {
  const int8_t *w; /* the next panel's first row; NULL: nothing to fetch */
  int n, end, every;
} panel_pf;

INLINE AVX2 void panel_tile_avx2(int32_t *acc, size_t lda, const int16_t *x, const int16_t *P,
                                 int K, const int M, const panel_pf *pf) {
  __m256i c[PANEL_M][2];
#pragma GCC unroll 6
  for (int m = 0; m < M; m++) c[m][0] = c[m][1] = _mm256_setzero_si256();
  int n = pf->n, step = pf->w ? 2 * pf->every : K;
  for (int k = 0; k < K;) {
    int kend = K - k < step ? K : k + step;
    for (; k < kend; k += 2) {
      __m256i b0 = _mm256_load_si256((const __m256i *)(P + (size_t)k * PANEL_N));
      __m256i b1 = _mm256_load_si256((const __m256i *)(P + (size_t)k * PANEL_N + 16));
#pragma GCC unroll 6
      for (int m = 0; m < M; m++) {
        int32_t pair;
        memcpy(&pair, x + (size_t)m * K + k, 4);
        __m256i a = _mm256_set1_epi32(pair);
        c[m][0] = _mm256_add_epi32(c[m][0], _mm256_madd_epi16(b0, a));
        c[m][1] = _mm256_add_epi32(c[m][1], _mm256_madd_epi16(b1, a));
      }
    }
    if (pf->w && n < pf->end) {
      _mm_prefetch((const char *)(pf->w + (size_t)(n & 15) * K + (size_t)(n >> 4) * 64), PF_HINT);
      n++;
    }
  }
  /* acc[m * lda + j]: row m of x, column j of the panel */
#pragma GCC unroll 6
  for (int m = 0; m < M; m++) {
    _mm256_storeu_si256((__m256i *)(acc + (size_t)m * lda), c[m][0]);
    _mm256_storeu_si256((__m256i *)(acc + (size_t)m * lda + 8), c[m][1]);
  }
}

/* 8x8 transpose of 16-bit elements: row p of the result = element p of
** each of a[0..7]. */
INLINE AVX2 void transpose8x16_avx2(__m128i *a) {
  __m128i b0 = _mm_unpacklo_epi16(a[0], a[1]), b1 = _mm_unpackhi_epi16(a[0], a[1]);
  __m128i b2 = _mm_unpacklo_epi16(a[2], a[3]), b3 = _mm_unpackhi_epi16(a[2], a[3]);
  __m128i b4 = _mm_unpacklo_epi16(a[4], a[5]), b5 = _mm_unpackhi_epi16(a[4], a[5]);
  __m128i b6 = _mm_unpacklo_epi16(a[6], a[7]), b7 = _mm_unpackhi_epi16(a[6], a[7]);
  __m128i c0 = _mm_unpacklo_epi32(b0, b2), c1 = _mm_unpackhi_epi32(b0, b2);
  __m128i c2 = _mm_unpacklo_epi32(b1, b3), c3 = _mm_unpackhi_epi32(b1, b3);
  __m128i c4 = _mm_unpacklo_epi32(b4, b6), c5 = _mm_unpackhi_epi32(b4, b6);
  __m128i c6 = _mm_unpacklo_epi32(b5, b7), c7 = _mm_unpackhi_epi32(b5, b7);
  a[0] = _mm_unpacklo_epi64(c0, c4);
  a[1] = _mm_unpackhi_epi64(c0, c4);
  a[2] = _mm_unpacklo_epi64(c1, c5);
  a[3] = _mm_unpackhi_epi64(c1, c5);
  a[4] = _mm_unpacklo_epi64(c2, c6);
  a[5] = _mm_unpackhi_epi64(c2, c6);
  a[6] = _mm_unpacklo_epi64(c3, c7);
  a[7] = _mm_unpackhi_epi64(c3, c7);
}

/* The panel of R <= PANEL_N rows of W (row-major, K int8 each, K even):
** P[k/2][j] = (w[j][k], w[j][k + 1]) as two int16, zero for j >= R.  16
** columns of k at a time: the 16 rows' bytes taken as 8 pairs each (16-bit
** elements), transposed, then sign-extended. */
AVX2 static void pack_panel_avx2(int16_t *P, const int8_t *w, int R, int K) {
  int k = 0;
  if (R == PANEL_N)
    for (; k + 16 <= K; k += 16) {
      __m128i lo[8], hi[8];
      for (int j = 0; j < 8; j++) {
        lo[j] = _mm_loadu_si128((const __m128i *)(w + (size_t)j * K + k));
        hi[j] = _mm_loadu_si128((const __m128i *)(w + (size_t)(j + 8) * K + k));
      }
      transpose8x16_avx2(lo);
      transpose8x16_avx2(hi);
      for (int p = 0; p < 8; p++) {
        int16_t *d = P + (size_t)(k + 2 * p) * PANEL_N;
        _mm256_store_si256((__m256i *)d, _mm256_cvtepi8_epi16(lo[p]));
        _mm256_store_si256((__m256i *)(d + 16), _mm256_cvtepi8_epi16(hi[p]));
      }
    }
  for (; k < K; k += 2)
    for (int j = 0; j < PANEL_N; j++) {
      P[(size_t)k * PANEL_N + 2 * j] = j < R ? w[(size_t)j * K + k] : 0;
      P[(size_t)k * PANEL_N + 2 * j + 1] = j < R ? w[(size_t)j * K + k + 1] : 0;
    }
}

/* Rows [r0, r1) of x against columns [i0, i1) on the panel kernel, into
** the unit's block of sums; 0 if it cannot run (odd K, no block, no memory
** for the panel): the caller uses the dot kernel. */
AVX2 static int panels_avx2(const tile_out *o, int r0, int r1, int i0, int i1) {
  const int K = o->w->k;
  if ((K & 1) || !o->sums) return 0;
  int16_t *P = aligned_alloc(32, (size_t)K * PANEL_N * sizeof(int16_t));
  if (!P) return 0;
  const int16_t *x = o->x->q;
  { /* the unit's first panel: all its lines asked for at once (later panels are prefetched
    ** while the one before them is computed) */
    int R = i1 - i0 < PANEL_N ? i1 - i0 : PANEL_N;
    for (int j = 0; j < R; j++)
      for (int k = 0; k < K; k += 64)
        _mm_prefetch((const char *)(o->w->q + (size_t)(i0 + j) * K + k), _MM_HINT_T0);
  }
  for (int i = i0; i < i1; i += PANEL_N) {
    int R = i1 - i < PANEL_N ? i1 - i : PANEL_N;
    pack_panel_avx2(P, o->w->q + (size_t)i * K, R, K);
    /* the 16 rows of W after this panel (the next panel, or the next strip's first) */
    const int8_t *next = i + 2 * PANEL_N <= o->w->n ? o->w->q + (size_t)(i + PANEL_N) * K : NULL;
    for (int r = r0; r < r1; r += PANEL_M) {
      int M = r1 - r < PANEL_M ? r1 - r : PANEL_M;
      const int16_t *xr = x + (size_t)r * K;
      int32_t *acc = o->sums + (size_t)(r - o->sr0) * o->ldsums + (i - o->si0);
      size_t lda = (size_t)o->ldsums;
      /* tile t of nt prefetches lines [t L / nt, (t + 1) L / nt) of the next panel */
      int t = (r - r0) / PANEL_M, nt = (r1 - r0 + PANEL_M - 1) / PANEL_M, L = PANEL_N * K / 64;
      panel_pf pfs = {next, t * L / nt, (t + 1) * L / nt, 1};
      if (pfs.end > pfs.n) pfs.every = (K / 2) / (pfs.end - pfs.n);
      if (pfs.every < 1) pfs.every = 1;
      const panel_pf *pf = &pfs;
      switch (M) {
        case 6: panel_tile_avx2(acc, lda, xr, P, K, 6, pf); break;
        case 5: panel_tile_avx2(acc, lda, xr, P, K, 5, pf); break;
        case 4: panel_tile_avx2(acc, lda, xr, P, K, 4, pf); break;
        case 3: panel_tile_avx2(acc, lda, xr, P, K, 3, pf); break;
        case 2: panel_tile_avx2(acc, lda, xr, P, K, 2, pf); break;
        default: panel_tile_avx2(acc, lda, xr, P, K, 1, pf); break;
      }
    }
  }
  free(P);
  return 1;
}

/* One unit: its sums into a block (rows x columns, the columns padded to
** whole panels), then finished 8 columns at a time; without memory for the
** block, each tile is finished as it ends. */
AVX2 static void unit_avx2(const tile_out *out, int r0, int r1, int i0, int i1) {
  tile_out o = *out;
  o.ldsums = (i1 - i0 + PANEL_N - 1) / PANEL_N * PANEL_N;
  o.sr0 = r0;
  o.si0 = i0;
  o.sums = malloc((size_t)(r1 - r0) * o.ldsums * sizeof(int32_t));
  if (!(r1 - r0 >= QG_PANEL_MIN_ROWS && panels_avx2(&o, r0, r1, i0, i1))) {
    int r3 = r0 + (r1 - r0) / A2_J * A2_J;
    if (r3 > r0) cols_avx2(&o, r0, r3, i0, i1, A2_R);
    if (r1 > r3) cols_avx2(&o, r3, r1, i0, i1, a2_rest_r[r1 - r3]);
  }
  if (o.sums) finish_block_avx2(&o, r0, r1, i0, i1);
  _mm256_zeroupper();
  free(o.sums);
}

/* ------------------------------------------------------------ AVX512-VNNI */

/* 4 rows of W x 4 rows of x: 16 accumulators + 4 rows of W + 1 row of x;
** the last 1-3 rows of a block with more rows of W.  (Not measured: no
** machine with AVX512-VNNI was at hand; see the tests for its checks.) */
#define VN_R 4
#define VN_J 4
static const int vn_rest_r[VN_J] = {0, 8, 6, 4};

/* acc[i*J + j] = sum_k x[j*K + k] * w[i*K + k]: vpdpbusd multiplies 64 u8
** of x by 64 s8 of W and adds groups of four products to 16 int32 lanes
** (no saturation: four products reach 4 * 255 * 127).  acc has room for a
** multiple of 8 entries. */
INLINE VNNI void tile_vnni(int32_t *acc, const uint8_t *x, const int8_t *w, int K, const int R,
                           const int J) {
  __m512i s[MAX_TILE], wv[8];
  __m256i h[MAX_TILE];
#pragma GCC unroll 16
  for (int e = 0; e < R * J; e++) s[e] = _mm512_setzero_si512();
  int k = 0;
  for (; k + 64 <= K; k += 64) {
#pragma GCC unroll 8 /* the next tile's rows of W, which follow these in memory */
    for (int i = 0; i < R; i++)
      _mm_prefetch((const char *)(w + (size_t)(R + i) * K + k), _MM_HINT_T0);
#pragma GCC unroll 8
    for (int i = 0; i < R; i++) wv[i] = _mm512_loadu_si512((const void *)(w + (size_t)i * K + k));
#pragma GCC unroll 4
    for (int j = 0; j < J; j++) {
      __m512i xv = _mm512_loadu_si512((const void *)(x + (size_t)j * K + k));
#pragma GCC unroll 8
      for (int i = 0; i < R; i++) s[i * J + j] = _mm512_dpbusd_epi32(s[i * J + j], xv, wv[i]);
    }
  }
#pragma GCC unroll 16
  for (int e = 0; e < R * J; e++) /* 16 lanes -> 8 */
    h[e] = _mm256_add_epi32(_mm512_castsi512_si256(s[e]), _mm512_extracti64x4_epi64(s[e], 1));
#pragma GCC unroll 2
  for (int e = 0; e < R * J; e += 8)
    _mm256_storeu_si256((__m256i *)(acc + e), reduce8_avx2(h + e, R * J - e < 8 ? R * J - e : 8));
  add_tail_u8(acc, x, (size_t)K, w, (size_t)K, k, K, R, J); /* the last k % 64 */
}

VNNI static void cols_vnni(const tile_out *o, int r0, int r1, int i0, int i1, int Rmax) {
  const uint8_t *x = o->x->q;
  const int K = o->w->k;
  int32_t acc[MAX_TILE + 8];
  for (int i = i0; i < i1; i += Rmax) {
    int R = i1 - i < Rmax ? i1 - i : Rmax;
    const int8_t *w = o->w->q + (size_t)i * K;
    for (int r = r0; r < r1; r += VN_J) {
      int J = r1 - r < VN_J ? r1 - r : VN_J;
      const uint8_t *xr = x + (size_t)r * K;
      switch (R * 8 + J) {
#define T(a, b) \
  case a * 8 + b: tile_vnni(acc, xr, w, K, a, b); break;
        // clang-format off
        T(4, 4) T(3, 4) T(2, 4) T(1, 4)
        T(8, 1) T(7, 1) T(6, 1) T(5, 1) T(4, 1) T(3, 1) T(2, 1) T(1, 1)
        T(6, 2) T(5, 2) T(4, 2) T(3, 2) T(2, 2) T(1, 2)
        T(4, 3) T(3, 3) T(2, 3) T(1, 3)
        // clang-format on
#undef T
      }
      _mm256_zeroupper(); /* finish is SSE code: no AVX-SSE transition */
      finish(o, acc, r, J, i, R);
    }
  }
}

VNNI static void unit_vnni(const tile_out *o, int r0, int r1, int i0, int i1) {
  int r4 = r0 + (r1 - r0) / VN_J * VN_J;
  if (r4 > r0) cols_vnni(o, r0, r4, i0, i1, VN_R);
  if (r1 > r4) cols_vnni(o, r4, r1, i0, i1, vn_rest_r[r1 - r4]);
}
#endif

/* ------------------------------------------------------------ jobs */

static void job_init(qg_job *job, float *y, size_t ldy, int32_t *c, size_t ldc, const qg_rows *x,
                     const qg_weights *w, const float *bias) {
  /* blocks of at most QG_BLOCK_BYTES of x (at least 12 rows), all about
  ** the same size, in whole tiles of 3 or 4 rows (a multiple of 12) */
  size_t row_bytes = (size_t)x->k * (x->path == QG_AVX2 ? 2 : 1);
  size_t most = QG_BLOCK_BYTES / row_bytes;
  most = most < 12 ? 12 : most > 252 ? 252 : most;
  /* the AVX2 panel kernel packs its strip of W once per unit: blocks of
  ** many rows keep that cost small (x then streams from L2/L3) */
  if (x->path == QG_AVX2 && x->t >= QG_PANEL_MIN_ROWS && !(x->k & 1)) most = QG_PANEL_ROWS;
  size_t nrb = ((size_t)x->t + most - 1) / most;
  size_t rb = nrb ? ((size_t)x->t + nrb - 1) / nrb : 12;
  rb = (rb + 11) / 12 * 12;
  *job = (qg_job){y, ldy, c, ldc, x, w, bias, (int)rb, QG_STRIP, 0, 0, 0};
  job->nrb = (x->t + job->row_block - 1) / job->row_block;
  job->ncs = (w->n + job->col_strip - 1) / job->col_strip;
  job->nunits = job->nrb * job->ncs;
}

void qg_job_init(qg_job *job, float *y, size_t ldy, const qg_rows *x, const qg_weights *w,
                 const float *bias) {
  job_init(job, y, ldy, NULL, 0, x, w, bias);
}

void qg_job_unit(void *arg, int u, int tid) {
  (void)tid;
  const qg_job *job = arg;
  int rb = u % job->nrb, cs = u / job->nrb; /* neighbouring units share a strip of W */
  int r0 = rb * job->row_block, r1 = r0 + job->row_block;
  int i0 = cs * job->col_strip, i1 = i0 + job->col_strip;
  if (r1 > job->x->t) r1 = job->x->t;
  if (i1 > job->w->n) i1 = job->w->n;
  tile_out o = {job->y, job->ldy, job->c, job->ldc, job->x, job->w, job->bias, NULL, 0, 0, 0};
  switch (job->x->path) {
#if QG_X86
    case QG_AVX2: unit_avx2(&o, r0, r1, i0, i1); return;
    case QG_AVX512VNNI: unit_vnni(&o, r0, r1, i0, i1); return;
#endif
    default: unit_portable(&o, r0, r1, i0, i1); return;
  }
}

void qg_matmul(float *y, size_t ldy, const qg_rows *x, const qg_weights *w, const float *bias) {
  qg_job job;
  job_init(&job, y, ldy, NULL, 0, x, w, bias);
  for (int u = 0; u < job.nunits; u++) qg_job_unit(&job, u, 0);
}

void qg_matmul_i32(int32_t *c, size_t ldc, const qg_rows *x, const qg_weights *w) {
  qg_job job;
  job_init(&job, NULL, 0, c, ldc, x, w, NULL);
  for (int u = 0; u < job.nunits; u++) qg_job_unit(&job, u, 0);
}
