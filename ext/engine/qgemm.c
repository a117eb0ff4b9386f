/*
** qgemm.c — int8 products y = x W^T with exact int32 sums.  See qgemm.h for
** the quantization, the packed layout of W and the arithmetic.
**
** Every kernel walks the same loops: for each block of 16 outputs (or
** QG_VNNI_NR blocks at once), for each tile of rows of x, the sums over k
** in registers, reading the block's packed W as one stream; then the
** tile's sums through the same arithmetic into y (finish_one, or the
** AVX2/AVX-512 epilogues doing the same operations in the same order, with
** no fused multiply-add), so all kernels give bit-identical y.
**
** Units of work: a block of rows of x (sized so that the block's quantized
** rows stay in L2 while a strip of W passes) times a strip of columns of W
** (whole blocks of 16).  For a few rows (one sentence) W comes from memory
** once, strip after strip, and the units keep both cores streaming it.
*/
#include <float.h>
#include <stdlib.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "qgemm.h"
#include "util.h"

#define QG_PANEL 64          /* outputs per panel of the packed W (qgemm.h) */
#define QG_STRIP 64          /* columns of y per unit: whole panels */
#define QG_BLOCK_BYTES 98304 /* quantized x per block of rows of a unit (L2) */
#ifndef QG_PF_GROUPS
#define QG_PF_GROUPS 16 /* prefetch distance in groups of 4 values of k (256 bytes each) */
#endif
#define QG_VNNI_MR 6 /* AVX512-VNNI tile: rows of x ... */
#define QG_VNNI_NR 4 /* ... by blocks of 16 outputs (24 accumulators) */
#define QG_AVX2_MR 3 /* AVX2 tile: rows of x by one block (12 accumulators) */

#if defined(__x86_64__) && defined(__GNUC__)
#define QG_X86 1
#include <immintrin.h>
#define AVX2 __attribute__((target("avx2")))
#define VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))
/* explicit rounding: the compiler may not contract these into an FMA */
#define RN (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
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

size_t qg_weights_bytes(int n, int k) {
  return (size_t)((n + QG_PANEL - 1) / QG_PANEL) * QG_PANEL * (((size_t)k + 3) / 4) * 4;
}

/* Block b of 16 outputs: its four codes of group g are 64 bytes at
** block_at(w, b) + g * QG_GROUP_BYTES. */
#define QG_GROUP_BYTES (QG_PANEL * 4)
static inline const int8_t *block_at(const qg_weights *w, int b) {
  size_t kg = ((size_t)w->k + 3) / 4;
  return w->q + (size_t)(b / (QG_PANEL / 16)) * kg * QG_GROUP_BYTES +
         (size_t)(b % (QG_PANEL / 16)) * 64;
}

int qg_quantize_weights(const float *w, int n, int k, int8_t *q, float *scale, int32_t *sum) {
  if (k < 1 || k > QG_MAX_K) return -1;
  size_t kg = ((size_t)k + 3) / 4;
  memset(q, 0, qg_weights_bytes(n, k)); /* the padding: rows past n, columns past k */
  int bad = 0;
  for (int i = 0; i < n; i++) {
    const float *row = w + (size_t)i * k;
    int8_t *qb = q + (size_t)(i / QG_PANEL) * kg * QG_GROUP_BYTES + (size_t)(i % QG_PANEL) * 4;
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
        qb[(size_t)(j / 4) * QG_GROUP_BYTES + j % 4] = (int8_t)v; /* W[i][j] */
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
  for (; j < round4(k); j++) { /* the row's padding to whole groups of 4: W is 0 there */
    if (q8) q8[j] = 0;
    else q16[j] = 0;
  }
}

void qg_quantize_rows(qg_rows *out, void *buf, const float *x, int t, int k, size_t ldx,
                      qg_path path) {
  char *p = (char *)(((uintptr_t)buf + 63) & ~(uintptr_t)63);
  int ldq = round4(k);
  size_t qbytes = round64((size_t)t * ldq * 2);
  float *scale = (float *)(p + qbytes);
  int32_t *zero = (int32_t *)(p + qbytes + round64((size_t)t * sizeof(float)));
  for (int r = 0; r < t; r++) {
    uint8_t *q8 = path == QG_AVX2 ? NULL : (uint8_t *)p + (size_t)r * ldq;
    int16_t *q16 = path == QG_AVX2 ? (int16_t *)p + (size_t)r * ldq : NULL;
    quantize_row(x + (size_t)r * ldx, k, &scale[r], &zero[r], q8, q16);
  }
  *out = (qg_rows){t, k, path, ldq, p, scale, zero};
}

/* ------------------------------------------------------------ epilogue */

/* Where a unit's sums go: y (dequantized, + bias) or c (the int32 sums). */
typedef struct tile_out {
  float *y;
  size_t ldy;
  int32_t *c;
  size_t ldc;
  const qg_rows *x;
  const qg_weights *w;
  const float *bias;
} tile_out;

/* One output: the sum acc of row r of x and column i of W into y (or c).
** The reference arithmetic every vector epilogue repeats exactly. */
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

/* ------------------------------------------------------------ portable */

/* Rows [r0, r1) of x against outputs [i0, i1) (i0 a multiple of 16). */
static void unit_portable(const tile_out *o, int r0, int r1, int i0, int i1) {
  const uint8_t *x = o->x->q;
  const size_t ldq = (size_t)o->x->ldq, KG = ldq / 4;
  for (int b = i0 / 16; b * 16 < i1; b++) {
    const int8_t *wb = block_at(o->w, b);
    int nc = i1 - b * 16 < 16 ? i1 - b * 16 : 16;
    for (int r = r0; r < r1; r++) {
      const uint8_t *xr = x + (size_t)r * ldq;
      int32_t acc[16] = {0};
      for (size_t g = 0; g < KG; g++) {
        const int8_t *wg = wb + g * QG_GROUP_BYTES;
        const uint8_t *xg = xr + g * 4;
        for (int c = 0; c < 16; c++)
          acc[c] += xg[0] * wg[4 * c] + xg[1] * wg[4 * c + 1] + xg[2] * wg[4 * c + 2] +
                    xg[3] * wg[4 * c + 3];
      }
      for (int c = 0; c < nc; c++) finish_one(o, r, b * 16 + c, acc[c]);
    }
  }
}

#if QG_X86
/* ------------------------------------------------------------ AVX2 */

/* finish_one for 8 outputs [i, i + 8) of row r, all inside W: the same
** operations in the same order (the target has no FMA to contract them). */
INLINE AVX2 void finish8_avx2(const tile_out *o, int r, int i, __m256i acc) {
  __m256i a = _mm256_sub_epi32(acc, _mm256_mullo_epi32(_mm256_set1_epi32(o->x->zero[r]),
                                                       _mm256_loadu_si256(
                                                         (const __m256i *)(o->w->sum + i))));
  if (o->c) {
    _mm256_storeu_si256((__m256i *)(o->c + (size_t)r * o->ldc + i), a);
    return;
  }
  __m256 s = _mm256_mul_ps(_mm256_set1_ps(o->x->scale[r]), _mm256_loadu_ps(o->w->scale + i));
  __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(a), s);
  if (o->bias) v = _mm256_add_ps(v, _mm256_loadu_ps(o->bias + i));
  _mm256_storeu_ps(o->y + (size_t)r * o->ldy + i, v);
}

/* MR rows of x (from row r) by the block of 16 outputs at wb: four codes of
** each row broadcast (as int16), W's 64 bytes of a group as four vectors of
** 4 outputs x 4 values (sign-extended), vpmaddwd giving two partial sums
** per output, added at the end. */
INLINE AVX2 void tile_avx2(const tile_out *o, const int16_t *x, size_t ldq, const int8_t *wb, int r,
                           int i0, int nc, const int MR) {
  __m256i acc[QG_AVX2_MR][4];
#pragma GCC unroll 4
  for (int m = 0; m < MR; m++)
#pragma GCC unroll 4
    for (int p = 0; p < 4; p++) acc[m][p] = _mm256_setzero_si256();
  const size_t KG = ldq / 4;
  for (size_t g = 0; g < KG; g++) {
    __m256i xb[QG_AVX2_MR];
#pragma GCC unroll 4
    for (int m = 0; m < MR; m++) {
      int64_t quad;
      memcpy(&quad, x + (size_t)m * ldq + g * 4, 8);
      xb[m] = _mm256_set1_epi64x(quad);
    }
#pragma GCC unroll 4
    for (int p = 0; p < 4; p++) {
      __m256i w = _mm256_cvtepi8_epi16(
        _mm_loadu_si128((const __m128i *)(wb + g * QG_GROUP_BYTES + p * 16)));
#pragma GCC unroll 4
      for (int m = 0; m < MR; m++)
        acc[m][p] = _mm256_add_epi32(acc[m][p], _mm256_madd_epi16(w, xb[m]));
    }
  }
#pragma GCC unroll 4
  for (int m = 0; m < MR; m++) {
    /* hadd: [c0 c1 c4 c5 | c2 c3 c6 c7]; the permute puts them in order */
    __m256i lo = _mm256_permute4x64_epi64(_mm256_hadd_epi32(acc[m][0], acc[m][1]), 0xD8);
    __m256i hi = _mm256_permute4x64_epi64(_mm256_hadd_epi32(acc[m][2], acc[m][3]), 0xD8);
    if (nc == 16) {
      finish8_avx2(o, r + m, i0, lo);
      finish8_avx2(o, r + m, i0 + 8, hi);
    } else {
      int32_t s[16];
      _mm256_storeu_si256((__m256i *)s, lo);
      _mm256_storeu_si256((__m256i *)(s + 8), hi);
      for (int c = 0; c < nc; c++) finish_one(o, r + m, i0 + c, s[c]);
    }
  }
}

AVX2 static void unit_avx2(const tile_out *o, int r0, int r1, int i0, int i1) {
  const int16_t *x = o->x->q;
  const size_t ldq = (size_t)o->x->ldq;
  for (int b = i0 / 16; b * 16 < i1; b++) {
    const int8_t *wb = block_at(o->w, b);
    int nc = i1 - b * 16 < 16 ? i1 - b * 16 : 16;
    /* tiles of nearly equal height (4 rows: 2 + 2, not 3 + 1) */
    const int nt = (r1 - r0 + QG_AVX2_MR - 1) / QG_AVX2_MR;
    for (int i = 0, r = r0, mr; i < nt; i++, r += mr) {
      mr = (r1 - r + (nt - i) - 1) / (nt - i);
      const int16_t *xr = x + (size_t)r * ldq;
      if (mr == 3) tile_avx2(o, xr, ldq, wb, r, b * 16, nc, 3);
      else if (mr == 2) tile_avx2(o, xr, ldq, wb, r, b * 16, nc, 2);
      else tile_avx2(o, xr, ldq, wb, r, b * 16, nc, 1);
    }
  }
  _mm256_zeroupper();
}

/* ------------------------------------------------------------ AVX512-VNNI */

/* finish_one for the outputs [i, i + 16) of row r inside mask m: the same
** operations in the same order (explicit rounding: no FMA). */
INLINE VNNI void finish16_vnni(const tile_out *o, int r, int i, __mmask16 m, __m512i acc) {
  __m512i a = _mm512_sub_epi32(acc, _mm512_mullo_epi32(_mm512_set1_epi32(o->x->zero[r]),
                                                       _mm512_maskz_loadu_epi32(m, o->w->sum + i)));
  if (o->c) {
    _mm512_mask_storeu_epi32(o->c + (size_t)r * o->ldc + i, m, a);
    return;
  }
  __m512 s = _mm512_mul_round_ps(_mm512_set1_ps(o->x->scale[r]),
                                 _mm512_maskz_loadu_ps(m, o->w->scale + i), RN);
  __m512 v = _mm512_mul_round_ps(_mm512_cvt_roundepi32_ps(a, RN), s, RN);
  if (o->bias) v = _mm512_add_round_ps(v, _mm512_maskz_loadu_ps(m, o->bias + i), RN);
  _mm512_mask_storeu_ps(o->y + (size_t)r * o->ldy + i, m, v);
}

/* acc += u8 x s8 in groups of four (vpdpbusd).  Written as asm so that the
** compiler sees the accumulator as one in-out register: with the intrinsic,
** GCC 12 copies every accumulator through another register (and the stack)
** on each step, which halved the kernel's speed. */
INLINE VNNI __m512i dpbusd(__m512i acc, __m512i u8, __m512i s8) {
  __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u8), "v"(s8));
  return acc;
}

/* MR rows of x (from row r) by NR blocks of 16 outputs (from block b, the
** first at wb, KG * 64 bytes apart): per group of four values of k, NR
** loads of W and MR broadcasts of four bytes of x, MR * NR vpdpbusd. */
INLINE VNNI void tile_vnni(const tile_out *o, const uint8_t *x, size_t ldq, const int8_t *wb, int r,
                           int b, int i1, int pf, const int MR, const int NR) {
  __m512i acc[QG_VNNI_MR][QG_VNNI_NR];
#pragma GCC unroll 8
  for (int m = 0; m < MR; m++)
#pragma GCC unroll 4
    for (int z = 0; z < NR; z++) acc[m][z] = _mm512_setzero_si512();
  const size_t KG = ldq / 4;
  for (size_t g = 0; g < KG; g++) {
    __m512i w[QG_VNNI_NR];
    if (pf) /* the first pass over these columns: W ahead, from memory */
#pragma GCC unroll 4
      for (int z = 0; z < 4; z++)
        _mm_prefetch((const char *)(wb + (g + QG_PF_GROUPS) * QG_GROUP_BYTES + z * 64),
                     _MM_HINT_T0);
#pragma GCC unroll 4
    for (int z = 0; z < NR; z++)
      w[z] = _mm512_loadu_si512((const void *)(wb + g * QG_GROUP_BYTES + z * 64));
#pragma GCC unroll 8
    for (int m = 0; m < MR; m++) {
      int32_t quad;
      memcpy(&quad, x + (size_t)m * ldq + g * 4, 4);
      __m512i xb = _mm512_set1_epi32(quad);
#pragma GCC unroll 4
      for (int z = 0; z < NR; z++) acc[m][z] = dpbusd(acc[m][z], xb, w[z]);
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < MR; m++)
#pragma GCC unroll 4
    for (int z = 0; z < NR; z++) {
      int i = (b + z) * 16, n = i1 - i < 16 ? i1 - i : 16;
      finish16_vnni(o, r + m, i, (__mmask16)((1u << n) - 1), acc[m][z]);
    }
}

VNNI static void unit_vnni(const tile_out *o, int r0, int r1, int i0, int i1) {
  const uint8_t *x = o->x->q;
  const size_t ldq = (size_t)o->x->ldq;
  const int b1 = (i1 + 15) / 16;
  for (int b = i0 / 16; b < b1; b += QG_VNNI_NR) {
    const int8_t *wb = block_at(o->w, b);
    int nr = b1 - b < QG_VNNI_NR ? b1 - b : QG_VNNI_NR;
    /* tiles of nearly equal height (8 rows: 4 + 4, not 6 + 2) */
    const int nt = (r1 - r0 + QG_VNNI_MR - 1) / QG_VNNI_MR;
    for (int i = 0, r = r0, mr; i < nt; i++, r += mr) {
      mr = (r1 - r + (nt - i) - 1) / (nt - i);
      const uint8_t *xr = x + (size_t)r * ldq;
      switch (mr * 8 + nr) {
#define T(a, c) \
  case a * 8 + c: tile_vnni(o, xr, ldq, wb, r, b, i1, r == r0, a, c); break;
        // clang-format off
        T(1, 1) T(1, 2) T(1, 3) T(1, 4) T(2, 1) T(2, 2) T(2, 3) T(2, 4)
        T(3, 1) T(3, 2) T(3, 3) T(3, 4) T(4, 1) T(4, 2) T(4, 3) T(4, 4)
        T(5, 1) T(5, 2) T(5, 3) T(5, 4) T(6, 1) T(6, 2) T(6, 3) T(6, 4)
        // clang-format on
#undef T
      }
    }
  }
  _mm256_zeroupper();
}
#endif

/* ------------------------------------------------------------ jobs */

static void job_init(qg_job *job, float *y, size_t ldy, int32_t *c, size_t ldc, const qg_rows *x,
                     const qg_weights *w, const float *bias) {
  /* blocks of at most QG_BLOCK_BYTES of x (at least 24 rows), all about
  ** the same size, in whole tiles (a multiple of 24 rows: 3, 6 and 8 divide it) */
  size_t row_bytes = (size_t)x->ldq * (x->path == QG_AVX2 ? 2 : 1);
  size_t most = QG_BLOCK_BYTES / row_bytes;
  most = most < 24 ? 24 : most > 264 ? 264 : most;
  size_t nrb = ((size_t)x->t + most - 1) / most;
  size_t rb = nrb ? ((size_t)x->t + nrb - 1) / nrb : 24;
  rb = (rb + 23) / 24 * 24;
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
  tile_out o = {job->y, job->ldy, job->c, job->ldc, job->x, job->w, job->bias};
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
