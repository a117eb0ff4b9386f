/*
** avx2.c — the AVX2 kernel set (kernels.h): y = x W^T and forward.c's loops
** over rows with AVX2 and FMA, 8 floats at a time, for CPUs without AVX-512
** (AMD Zen 2/3, Intel Haswell to Alder Lake; or BERTFILL_KERNELS=avx2).
** gemm.c's job splitter runs the products (cutting the work into units for
** the threads), forward.c the row operations, both through kernels_avx2.
**
** The products: the same two kernels as avx512.c, in 8-lane form for the 16
** ymm registers, W read in place:
**
** Dot kernel (rows of x <= GEMM_AVX2_DOT_MAX_T): a tile of 3 rows of W x 4
** tokens keeps 12 accumulators of 8 lanes (plus 3 rows of W and 1 token: all
** 16 registers); sums run over K and are reduced at the end.  Each row of W
** comes from memory once and is reused from L1 for every token, while the
** next 3 rows are prefetched, spread over the tiles of all the tokens (so
** that memory and arithmetic overlap at every T, not only in the first tile:
** 1.5x faster at 24-40 tokens than prefetching in the first tile).
**
** Panel kernel (more rows): for each strip of PANEL = 16 output columns,
**   1. pack: Wp[k][j] = W[n0 + j][k] (8x8 transposes in registers; rows past
**      the end of W and k past K are zero), 16*K floats, stays in L2;
**   2. for every MR = 6 rows of x: c[i][0..16) += x[i][k] * Wp[k][0..16)
**      over k, 12 accumulators, one broadcast of x per 2 FMAs (the 6x16 tile
**      of BLIS's Haswell kernel);
**   while the strip this thread will likely take next is prefetched, spread
**   over the arithmetic.  (Strips of 32 or 48 columns measured 10-25% slower
**   on AMD Zen 3: their panels of the 3072-long rows no longer fit in L2.)
**
** Where they cross (bert-base shapes, AMD EPYC Zen 3, 2 threads): the dot
** kernel is faster up to about 100 rows (at 24-64 by 15-25%), the panel
** kernel from 128 on (5%); one thread crosses at 64-80.  Hence dot up to
** GEMM_AVX2_DOT_MAX_T = 80, and no step at 17 rows as in the AVX-512 code.
** Float accumulation in a fixed order per output element (results do not
** depend on the number of threads or on how the work is split).
**
** Attention of one head (att_scores, att_values): as avx512.c's, tiles of 3
** queries by 24 keys or columns.  Measured here only on an AMD Zen 4 with
** BERTFILL_KERNELS=avx2 (int8 batch of 32 x 20 tokens: attention 3.3% ->
** 2.3% of the time against the former products on copies); not on an
** AVX2-only CPU.
**
** The row operations: the same math as avx512.c's,
**   - exp8: e^x by range reduction (x = n ln2 + r) and a degree-7 Taylor
**     polynomial on |r| <= ln2/2 (error below 1 ulp of float), times 2^n
**     built in the exponent bits;
**   - GELU: erf by Abramowitz & Stegun 7.1.26 (absolute error < 1.5e-7);
**   - LayerNorm: mean and variance summed in double.
*/
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "avx2.h"
#include "gemm.h"
#include "int8.h"
#include "kernels.h"
#include "prefetch.h"

#ifdef BF_HAVE_AVX2
#define INLINE static inline __attribute__((always_inline))

/* ---- dot kernel ---- */
#define TILE_R 3 /* rows of W per tile */
#define TILE_J 4 /* tokens per tile: 12 accumulators + 3 rows of W + 1 token in registers */
#define DOT_UNIT (8 * TILE_R) /* least columns per unit of work */

/* acc[i][j] += w[i*K + k + d ..] * x[j*K + k + d ..], 8 lanes, LOAD(pointer) each. */
#define DOT_STEP(LOAD, d) \
  do { \
    _Pragma("GCC unroll 4") for (int i = 0; i < R; i++) wv[i] = LOAD(w + (size_t)i * K + k + d); \
    _Pragma("GCC unroll 4") for (int j = 0; j < J; j++) { \
      __m256 xv = LOAD(x + (size_t)j * K + k + d); \
      _Pragma("GCC unroll 4") for (int i = 0; i < R; i++) \
        acc[i][j] = _mm256_fmadd_ps(wv[i], xv, acc[i][j]); \
    } \
  } while (0)

/* y[j*ldy + i] = dot(w[i*K ...], x[j*K ...]) for i < R rows of W, j < J tokens
** (R and J are constants after inlining, so acc[][] lives in registers). */
INLINE AVX2 void dot_tile(float *y, int ldy, const float *x, const float *w, int K, const int R,
                          const int J, prefetch *pf) {
  __m256 acc[TILE_R][TILE_J], wv[TILE_R];
#pragma GCC unroll 4
  for (int i = 0; i < R; i++)
#pragma GCC unroll 4
    for (int j = 0; j < J; j++) acc[i][j] = _mm256_setzero_ps();
  int k = 0;
  for (; k + 16 <= K; k += 16) { /* one cache line of each row per iteration */
    prefetch_step_l1(pf, k >> 4);
    DOT_STEP(_mm256_loadu_ps, 0);
    DOT_STEP(_mm256_loadu_ps, 8);
  }
  if (k + 8 <= K) {
    DOT_STEP(_mm256_loadu_ps, 0);
    k += 8;
  }
  if (k < K) {
    __m256i m = tail8(K - k);
#define MASKED(p) _mm256_maskload_ps(p, m)
    DOT_STEP(MASKED, 0);
#undef MASKED
  }
#pragma GCC unroll 4
  for (int i = 0; i < R; i++)
#pragma GCC unroll 4
    for (int j = 0; j < J; j++) y[(size_t)j * ldy + i] = hsum8(acc[i][j]);
}

/* All T rows of x against the R rows of W at w (R constant after inlining),
** while the next rows of W after them (which follow in memory) are prefetched. */
INLINE AVX2 void dot_rows(float *y, int N, const float *x, const float *w, int K, int T,
                          const int R, int next) {
  prefetch pf = prefetch_plan(w + (size_t)R * K, (long)next * K * (long)sizeof(float),
                              (T + TILE_J - 1) / TILE_J * (K / 16L));
  int t = 0;
  for (; t + TILE_J <= T; t += TILE_J)
    dot_tile(y + (size_t)t * N, N, x + (size_t)t * K, w, K, R, TILE_J, &pf);
  switch (T - t) {
    case 3: dot_tile(y + (size_t)t * N, N, x + (size_t)t * K, w, K, R, 3, &pf); break;
    case 2: dot_tile(y + (size_t)t * N, N, x + (size_t)t * K, w, K, R, 2, &pf); break;
    case 1: dot_tile(y + (size_t)t * N, N, x + (size_t)t * K, w, K, R, 1, &pf); break;
    default: break;
  }
}

/* Columns [o0, o1) of y[T,N] = x[T,K] W[N,K]^T. */
AVX2 static void dot_cols(float *y, const float *x, const float *W, int T, int N, int K, int o0,
                          int o1) {
  int o = o0;
  for (; o + TILE_R <= o1; o += TILE_R) {
    int next = o1 - (o + TILE_R) < TILE_R ? o1 - (o + TILE_R) : TILE_R;
    dot_rows(y + o, N, x, W + (size_t)o * K, K, T, TILE_R, next);
  }
  if (o1 - o == 2) dot_rows(y + o, N, x, W + (size_t)o * K, K, T, 2, 0);
  else if (o1 - o == 1) dot_rows(y + o, N, x, W + (size_t)o * K, K, T, 1, 0);
}

/* ---- panel kernel ---- */
#define NZ 2           /* ymm of output columns per register tile */
#define PANEL (8 * NZ) /* output columns per strip: one register tile */
#define MR (12 / NZ)   /* rows of x per register tile: 12 accumulators */
_Static_assert(MR == 6, "panel_strip's switch lists tiles of 1..6 rows");

/* In place: r[i] (row i of an 8x8 block) becomes column i. */
INLINE AVX2 void transpose8(__m256 r[8]) {
  __m256 t[8], s[8];
  for (int i = 0; i < 4; i++) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; i++) {
    s[4 * i + 0] = _mm256_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0x44);
    s[4 * i + 1] = _mm256_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0xEE);
    s[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    s[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  for (int i = 0; i < 4; i++) {
    r[i] = _mm256_permute2f128_ps(s[i], s[4 + i], 0x20);
    r[4 + i] = _mm256_permute2f128_ps(s[i], s[4 + i], 0x31);
  }
}

/* Wp[k*PANEL + j] = W[(n0 + j)*K + k] for j < nr (<= PANEL), k < K; 0 for j >= nr. */
AVX2 static void pack_panel(float *Wp, const float *W, int K, int n0, int nr) {
  for (int h = 0; h < PANEL / 8; h++) {
    for (int k = 0; k < K; k += 8) {
      __m256i m = tail8(K - k);
      __m256 r[8];
#pragma GCC unroll 8
      for (int j = 0; j < 8; j++) {
        int row = h * 8 + j;
        const float *src = W + (size_t)(n0 + row) * K + k;
        r[j] = row >= nr    ? _mm256_setzero_ps()
               : K - k >= 8 ? _mm256_loadu_ps(src)
                            : _mm256_maskload_ps(src, m);
      }
      transpose8(r);
      int kn = K - k < 8 ? K - k : 8;
      for (int i = 0; i < kn; i++) _mm256_store_ps(Wp + (size_t)(k + i) * PANEL + 8 * h, r[i]);
    }
  }
}

/* y[i*ldy + 0..PANEL) = sum_k x[i*ldx + k] * Wp[k*PANEL + 0..PANEL) for i < R
** (a constant after inlining); only the first nc (<= PANEL) columns are stored. */
INLINE AVX2 void panel_tile(const int R, const float *x, int ldx, const float *Wp, int K, float *y,
                            int ldy, int nc, prefetch *pf) {
  __m256 c[MR][NZ];
#pragma GCC unroll 8
  for (int i = 0; i < R; i++)
#pragma GCC unroll 4
    for (int z = 0; z < NZ; z++) c[i][z] = _mm256_setzero_ps();
  for (int k = 0; k < K; k++) {
    prefetch_step_l1(pf, k);
    __m256 b[NZ];
#pragma GCC unroll 4
    for (int z = 0; z < NZ; z++) b[z] = _mm256_load_ps(Wp + (size_t)k * PANEL + 8 * z);
#pragma GCC unroll 8
    for (int i = 0; i < R; i++) {
      __m256 a = _mm256_broadcast_ss(x + (size_t)i * ldx + k);
#pragma GCC unroll 4
      for (int z = 0; z < NZ; z++) c[i][z] = _mm256_fmadd_ps(a, b[z], c[i][z]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; i++)
#pragma GCC unroll 4
    for (int z = 0; z < NZ; z++) store8(y + (size_t)i * ldy + 8 * z, nc - 8 * z, c[i][z]);
}

/* Strip [n0, n0 + nr) of y[T,N] = x[T,K] W[N,K]^T, through the panel Wp;
** meanwhile rows [next, next + PANEL) of W (if next < N) are prefetched. */
AVX2 static void panel_strip(float *Wp, float *y, const float *x, const float *W, int T, int N,
                             int K, int n0, int nr, int next) {
  pack_panel(Wp, W, K, n0, nr);
  int rows = next >= N ? 0 : N - next < PANEL ? N - next : PANEL;
  prefetch pf = prefetch_plan(W + (size_t)next * K, (long)rows * K * (long)sizeof(float),
                              (T + MR - 1) / MR * (long)K);
  for (int t = 0; t < T; t += MR) {
    const float *xt = x + (size_t)t * K;
    float *yt = y + (size_t)t * N + n0;
    switch (T - t < MR ? T - t : MR) {
#define TILE(r) \
  case r: panel_tile(r, xt, K, Wp, K, yt, N, nr, &pf); break;
      TILE(1) TILE(2) TILE(3) TILE(4) TILE(5) TILE(6)
#undef TILE
    }
  }
}

/* ---- row operations ---- */
/* e^x for x in [-87, 88] (clamped; NaN stays NaN). */
INLINE AVX2 __m256 exp8(__m256 x) {
  x = _mm256_max_ps(_mm256_set1_ps(-87.0f), x); /* NaN stays NaN (2nd operand) */
  x = _mm256_min_ps(_mm256_set1_ps(88.0f), x);
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x); /* x - n ln2, ln2 in */
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);     /* two parts */
  __m256 p = _mm256_set1_ps(1.0f / 5040);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  /* 2^n for n in [-126, 127]: the exponent field alone */
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)),
                                23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

AVX2 static void gelu_row_avx2(float *y, const float *bias, int n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign_bit = _mm256_castsi256_ps(_mm256_set1_epi32(INT32_MIN));
  for (int i = 0; i < n; i += 8) {
    __m256 z = _mm256_add_ps(load8(y + i, n - i), load8(bias + i, n - i));
    __m256 u = _mm256_mul_ps(z, _mm256_set1_ps((float)M_SQRT1_2));
    __m256 a = _mm256_andnot_ps(sign_bit, u); /* |u| */
    __m256 t = _mm256_div_ps(one, _mm256_fmadd_ps(_mm256_set1_ps(0.3275911f), a, one));
    __m256 q = _mm256_set1_ps(1.061405429f);
    q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(-1.453152027f));
    q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(1.421413741f));
    q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(-0.284496736f));
    q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(0.254829592f));
    q = _mm256_mul_ps(q, t);
    __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), _mm256_mul_ps(a, a)));
    __m256 erf_a = _mm256_fnmadd_ps(q, e, one); /* erf(|u|) */
    __m256 erf_u = _mm256_or_ps(erf_a, _mm256_and_ps(u, sign_bit));
    __m256 g = _mm256_mul_ps(_mm256_mul_ps(z, _mm256_set1_ps(0.5f)), _mm256_add_ps(one, erf_u));
    store8(y + i, n - i, g);
  }
}

/* The largest of the 8 lanes. */
INLINE AVX2 float hmax8(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

AVX2 static int max_finite_avx2(const float *x, int n, float *max) {
  __m256 mx = _mm256_set1_ps(-INFINITY);
  __m256 bad = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 8) {
    __m256 v = load8(x + i, n - i);
    if (n - i < 8) v = _mm256_blendv_ps(mx, v, _mm256_castsi256_ps(tail8(n - i)));
    __m256 d = _mm256_sub_ps(v, v); /* 0 if finite, NaN if not */
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(d, d, _CMP_UNORD_Q));
    mx = _mm256_max_ps(mx, v);
  }
  *max = hmax8(mx);
  return _mm256_movemask_ps(bad) == 0;
}

/* Lanes 0-3 and 4-7 of v, as doubles, added to s0 and s1. */
INLINE AVX2 void add_pd(__m256d *s0, __m256d *s1, __m256 v) {
  *s0 = _mm256_add_pd(*s0, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
  *s1 = _mm256_add_pd(*s1, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
}

INLINE AVX2 double hsum4d(__m256d v) {
  __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
  return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

AVX2 static double exp_sum_avx2(float *dst, const float *x, int n, float mx) {
  __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
  __m256 vmx = _mm256_set1_ps(mx);
  for (int i = 0; i < n; i += 8) {
    __m256 e = exp8(_mm256_sub_ps(load8(x + i, n - i), vmx));
    if (n - i < 8) e = _mm256_and_ps(e, _mm256_castsi256_ps(tail8(n - i))); /* 0 past the end */
    if (dst) store8(dst + i, n - i, e);
    add_pd(&s0, &s1, e);
  }
  return hsum4d(_mm256_add_pd(s0, s1));
}

AVX2 static void layernorm_avx2(float *x, const float *g, const float *b, int n, float eps) {
  __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
  for (int i = 0; i < n; i += 8) add_pd(&s0, &s1, load8(x + i, n - i));
  double mean = hsum4d(_mm256_add_pd(s0, s1)) / n;
  __m256d vm = _mm256_set1_pd(mean);
  s0 = _mm256_setzero_pd();
  s1 = _mm256_setzero_pd();
  for (int i = 0; i < n; i += 8) {
    __m256i m = tail8(n - i);
    __m256 v = load8(x + i, n - i);
    __m256d m0 = _mm256_castsi256_pd(_mm256_cvtepi32_epi64(_mm256_castsi256_si128(m)));
    __m256d m1 = _mm256_castsi256_pd(_mm256_cvtepi32_epi64(_mm256_extracti128_si256(m, 1)));
    __m256d d0 = _mm256_and_pd(m0, _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), vm));
    __m256d d1 = _mm256_and_pd(m1, _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), vm));
    s0 = _mm256_fmadd_pd(d0, d0, s0);
    s1 = _mm256_fmadd_pd(d1, d1, s1);
  }
  double var = hsum4d(_mm256_add_pd(s0, s1)) / n;
  __m256 mf = _mm256_set1_ps((float)mean), rstd = _mm256_set1_ps((float)(1.0 / sqrt(var + eps)));
  for (int i = 0; i < n; i += 8) {
    __m256 v = _mm256_mul_ps(_mm256_sub_ps(load8(x + i, n - i), mf), rstd);
    v = _mm256_fmadd_ps(v, load8(g + i, n - i), load8(b + i, n - i));
    store8(x + i, n - i, v);
  }
}

AVX2 static void add_avx2(float *x, const float *a, const float *b, int n) {
  for (int i = 0; i < n; i += 8) {
    __m256 v = load8(a + i, n - i);
    if (b) v = _mm256_add_ps(v, load8(b + i, n - i));
    store8(x + i, n - i, _mm256_add_ps(load8(x + i, n - i), v));
  }
}

/* ---- attention of one head (gemm_kernel_table.att_scores / att_values) ----
** As kernels/avx512.c's, 8 lanes: the keys transposed once (8x8 blocks),
** register tiles of up to ATT_QR queries by ATT_NZ vectors of 8 (keys for
** the scores, columns for the values), no horizontal sums, q, k, v and ctx
** read and written in place. */
#define ATT_QR 3 /* queries per tile ... */
#define ATT_NZ 3 /* ... by 3 vectors of 8: 9 accumulators */

/* kt[c * ldt + j] = k[j * ldk + c] for j < L, c < d; lanes j in [L, L
** rounded up to 8) 0. */
AVX2 static void transpose_keys(float *kt, int ldt, const float *k, size_t ldk, int L, int d) {
  for (int j0 = 0; j0 < L; j0 += 8)
    for (int c0 = 0; c0 < d; c0 += 8) {
      __m256 r[8];
#pragma GCC unroll 8
      for (int j = 0; j < 8; j++)
        r[j] = j0 + j < L ? load8(k + (size_t)(j0 + j) * ldk + c0, d - c0) : _mm256_setzero_ps();
      transpose8(r);
      int cn = d - c0 < 8 ? d - c0 : 8;
      for (int i = 0; i < cn; i++) _mm256_storeu_ps(kt + (size_t)(c0 + i) * ldt + j0, r[i]);
    }
}

/* s[i * lds + j] = scale * sum_c q[i * ldq + c] kt[c * ldt + j] for i < QR,
** j < min(n, 8 NV). */
INLINE AVX2 void score_tile(float *s, int lds, const float *q, size_t ldq, const float *kt, int ldt,
                            int d, float scale, int n, const int QR, const int NV) {
  __m256 acc[ATT_QR][ATT_NZ];
#pragma GCC unroll 4
  for (int i = 0; i < QR; i++)
#pragma GCC unroll 4
    for (int z = 0; z < NV; z++) acc[i][z] = _mm256_setzero_ps();
  for (int c = 0; c < d; c++) {
    __m256 b[ATT_NZ];
#pragma GCC unroll 4
    for (int z = 0; z < NV; z++) b[z] = _mm256_loadu_ps(kt + (size_t)c * ldt + 8 * z);
#pragma GCC unroll 4
    for (int i = 0; i < QR; i++) {
      __m256 a = _mm256_broadcast_ss(q + (size_t)i * ldq + c);
#pragma GCC unroll 4
      for (int z = 0; z < NV; z++) acc[i][z] = _mm256_fmadd_ps(a, b[z], acc[i][z]);
    }
  }
  const __m256 sc = _mm256_set1_ps(scale);
#pragma GCC unroll 4
  for (int i = 0; i < QR; i++)
#pragma GCC unroll 4
    for (int z = 0; z < NV; z++)
      store8(s + (size_t)i * lds + 8 * z, n - 8 * z, _mm256_mul_ps(acc[i][z], sc));
}

/* ctx[i * ldc + c] = sum_j p[i * ldp + j] v[j * ldv + c] for i < QR, j < L,
** c < min(n, 8 NV). */
INLINE AVX2 void value_tile(float *ctx, size_t ldc, const float *p, int ldp, const float *v,
                            size_t ldv, int L, int n, const int QR, const int NV) {
  __m256 acc[ATT_QR][ATT_NZ];
#pragma GCC unroll 4
  for (int i = 0; i < QR; i++)
#pragma GCC unroll 4
    for (int z = 0; z < NV; z++) acc[i][z] = _mm256_setzero_ps();
  for (int j = 0; j < L; j++) {
    __m256 b[ATT_NZ];
#pragma GCC unroll 4
    for (int z = 0; z < NV; z++) b[z] = load8(v + (size_t)j * ldv + 8 * z, n - 8 * z);
#pragma GCC unroll 4
    for (int i = 0; i < QR; i++) {
      __m256 a = _mm256_broadcast_ss(p + (size_t)i * ldp + j);
#pragma GCC unroll 4
      for (int z = 0; z < NV; z++) acc[i][z] = _mm256_fmadd_ps(a, b[z], acc[i][z]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < QR; i++)
#pragma GCC unroll 4
    for (int z = 0; z < NV; z++) store8(ctx + (size_t)i * ldc + 8 * z, n - 8 * z, acc[i][z]);
}

/* The tile for qr (1..ATT_QR) queries and nz (1..ATT_NZ) vectors, made
** constants by the switches. */
INLINE AVX2 void score_tile_nz(float *s, int lds, const float *q, size_t ldq, const float *kt,
                               int ldt, int d, float scale, int n, const int QR, int nz) {
  switch (nz) {
    case 1: score_tile(s, lds, q, ldq, kt, ldt, d, scale, n, QR, 1); break;
    case 2: score_tile(s, lds, q, ldq, kt, ldt, d, scale, n, QR, 2); break;
    default: score_tile(s, lds, q, ldq, kt, ldt, d, scale, n, QR, 3); break;
  }
}

INLINE AVX2 void value_tile_nz(float *ctx, size_t ldc, const float *p, int ldp, const float *v,
                               size_t ldv, int L, int n, const int QR, int nz) {
  switch (nz) {
    case 1: value_tile(ctx, ldc, p, ldp, v, ldv, L, n, QR, 1); break;
    case 2: value_tile(ctx, ldc, p, ldp, v, ldv, L, n, QR, 2); break;
    default: value_tile(ctx, ldc, p, ldp, v, ldv, L, n, QR, 3); break;
  }
}

/* How many vectors of the chunk of 8 ATT_NZ columns from c0 of n hold any. */
INLINE int att_vectors(int n, int c0) {
  int nz = (n - c0 + 7) / 8;
  return nz < ATT_NZ ? nz : ATT_NZ;
}

AVX2 static void att_scores(float *s, int lds, const float *q, size_t ldq, int Lq, const float *k,
                            size_t ldk, int L, int d, float scale, float *kt) {
  transpose_keys(kt, lds, k, ldk, L, d);
  const int nt = (Lq + ATT_QR - 1) / ATT_QR;
  for (int j0 = 0; j0 < L; j0 += 8 * ATT_NZ) {
    int nz = att_vectors(L, j0);
    for (int t = 0, i = 0, qr; t < nt; t++, i += qr) {
      qr = kernels_tile_rows(Lq, i, t, nt);
      float *st = s + (size_t)i * lds + j0;
      const float *qt = q + (size_t)i * ldq;
      switch (qr) {
        case 1: score_tile_nz(st, lds, qt, ldq, kt + j0, lds, d, scale, L - j0, 1, nz); break;
        case 2: score_tile_nz(st, lds, qt, ldq, kt + j0, lds, d, scale, L - j0, 2, nz); break;
        default: score_tile_nz(st, lds, qt, ldq, kt + j0, lds, d, scale, L - j0, 3, nz); break;
      }
    }
  }
}

AVX2 static void att_values(float *ctx, size_t ldc, const float *p, int ldp, int Lq, const float *v,
                            size_t ldv, int L, int d) {
  const int nt = (Lq + ATT_QR - 1) / ATT_QR;
  for (int c0 = 0; c0 < d; c0 += 8 * ATT_NZ) {
    int nz = att_vectors(d, c0);
    for (int t = 0, i = 0, qr; t < nt; t++, i += qr) {
      qr = kernels_tile_rows(Lq, i, t, nt);
      float *ct = ctx + (size_t)i * ldc + c0;
      const float *pt = p + (size_t)i * ldp;
      switch (qr) {
        case 1: value_tile_nz(ct, ldc, pt, ldp, v + c0, ldv, L, d - c0, 1, nz); break;
        case 2: value_tile_nz(ct, ldc, pt, ldp, v + c0, ldv, L, d - c0, 2, nz); break;
        default: value_tile_nz(ct, ldc, pt, ldp, v + c0, ldv, L, d - c0, 3, nz); break;
      }
    }
  }
}

/* The set: gemm.c's job splitter runs the products, forward.c the rows. */
static const gemm_kernel_table gemm_avx2 = {
  .dot_max_t = GEMM_AVX2_DOT_MAX_T,
  .dot_max_t_deep = GEMM_AVX2_DOT_MAX_T,
  .dot_tile = TILE_R,
  .dot_unit = DOT_UNIT,
  .panel = PANEL,
  .panel_rows = MR,
  .lanes = 8,
  .dot_cols = dot_cols,
  .panel_strip = panel_strip,
  .att_scores = att_scores,
  .att_values = att_values,
};

const kernel_set kernels_avx2 = {
  .id = GEMM_KERNELS_AVX2,
  .name = "avx2",
  .gemm = &gemm_avx2,
  .rows =
    {
      .layernorm = layernorm_avx2,
      .add = add_avx2,
      .gelu_row = gelu_row_avx2,
      .max_finite = max_finite_avx2,
      .exp_sum = exp_sum_avx2,
    },
};
/* ---- int8 products (kernels/int8.h) ----
** vpmaddwd on int16 (vpmaddubsw would saturate: u8*s8 pairs reach 64770):
** x's codes were widened to int16 when quantized.  For each block of 16
** outputs of the packed W,
**   1. widen, INT8_AVX2_KC values of k at a time: P[k/2][j] = (W[j][k],
**      W[j][k + 1]) as two int16, 16 outputs' pairs per 64 bytes (per group
**      of four values of k: four 16-byte loads, vpshufb into pairs,
**      vpunpck, vpmovsxbw), 16 KB that stay in L1 while every tile of rows
**      passes them (the tiles' sums kept between chunks);
**   2. for every 6 rows of x: c[m][j] += x[m][k] W[j][k] + x[m][k + 1]
**      W[j][k + 1] for the 16 j at once: one vpmaddwd of a broadcast pair of
**      x with 8 pairs of P, 12 accumulators (the 6x16 tile of BLIS's Haswell
**      kernel, in integers: exact);
**   3. the sums through finish8_avx2 (int8_finish_one's arithmetic, 8
**      outputs at a time).
** The block after this one is prefetched while its tiles run.  (Reading the
** packed W straight, four codes of x broadcast and two partial sums per
** output, needs 24 accumulators for 6 rows: measured 25-40% slower, from
** the spills, on Zen 5 with this instruction set.)  No FMA in the target:
** the epilogue's multiply and add stay two roundings, as in
** int8_finish_one. */
#define INT8_AVX2 __attribute__((target("avx2")))
#define INT8_AVX2_MR 6 /* rows of x per tile, by 16 outputs (12 accumulators) */
#ifndef INT8_AVX2_KC
#define INT8_AVX2_KC 512 /* values of k per widened chunk of a block (16 KB) */
#endif

/* finish_one for 8 outputs [i, i + 8) of row r, all inside W: the same
** operations in the same order (the target has no FMA to contract them). */
INLINE INT8_AVX2 void finish8_avx2(const int8_out *o, int r, int i, __m256i acc) {
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

/* Block wb of the packed W (KG groups) widened into P (KG * 64 int16,
** 32-byte aligned): pair 2g + h holds, for the 16 outputs j, (W[j][4g + 2h],
** W[j][4g + 2h + 1]). */
INT8_AVX2 static void widen_block_avx2(int16_t *P, const int8_t *wb, size_t KG) {
  const __m128i pairs = _mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
  for (size_t g = 0; g < KG; g++) {
    const int8_t *s = wb + g * INT8_GROUP_BYTES; /* 4 outputs x 4 values per 16 bytes */
    __m128i c0 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)s), pairs);
    __m128i c1 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(s + 16)), pairs);
    __m128i c2 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(s + 32)), pairs);
    __m128i c3 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(s + 48)), pairs);
    int16_t *d = P + g * 64;
    _mm256_store_si256((__m256i *)d, _mm256_cvtepi8_epi16(_mm_unpacklo_epi64(c0, c1)));
    _mm256_store_si256((__m256i *)(d + 16), _mm256_cvtepi8_epi16(_mm_unpacklo_epi64(c2, c3)));
    _mm256_store_si256((__m256i *)(d + 32), _mm256_cvtepi8_epi16(_mm_unpackhi_epi64(c0, c1)));
    _mm256_store_si256((__m256i *)(d + 48), _mm256_cvtepi8_epi16(_mm_unpackhi_epi64(c2, c3)));
  }
}

/* TR rows of x (from row r) by the 16 outputs of P, over the values of k
** [k0, k1) (P holds them from its start); the sums start from part (TR x 16
** int32) unless first, and go back to part unless last, when they are
** finished into outputs [i0, i0 + nc).  Meanwhile npf lines of the next
** block (pf, then every INT8_GROUP_BYTES) are prefetched, one every few
** steps. */
INLINE INT8_AVX2 void tile_avx2(const int8_out *o, const int16_t *x, size_t ldq, const int16_t *P,
                                size_t k0, size_t k1, int32_t *part, int first, int last, int r,
                                int i0, int nc, const char *pf, int npf, const int TR) {
  __m256i c[INT8_AVX2_MR][2];
#pragma GCC unroll 6
  for (int m = 0; m < TR; m++) {
    if (first) {
      c[m][0] = c[m][1] = _mm256_setzero_si256();
    } else {
      c[m][0] = _mm256_loadu_si256((const __m256i *)(part + m * 16));
      c[m][1] = _mm256_loadu_si256((const __m256i *)(part + m * 16 + 8));
    }
  }
  int every = npf > 0 ? (int)((k1 - k0) / 2) / npf : 0, n = 0, step = 0;
  for (size_t k = k0; k < k1; k += 2) {
    const int16_t *pk = P + (k - k0) * 16;
    __m256i b0 = _mm256_load_si256((const __m256i *)pk);
    __m256i b1 = _mm256_load_si256((const __m256i *)(pk + 16));
#pragma GCC unroll 6
    for (int m = 0; m < TR; m++) {
      int32_t pair;
      memcpy(&pair, x + (size_t)m * ldq + k, 4);
      __m256i a = _mm256_set1_epi32(pair);
      c[m][0] = _mm256_add_epi32(c[m][0], _mm256_madd_epi16(b0, a));
      c[m][1] = _mm256_add_epi32(c[m][1], _mm256_madd_epi16(b1, a));
    }
    if (every && n < npf && ++step >= every) {
      _mm_prefetch(pf + (size_t)n++ * INT8_GROUP_BYTES, _MM_HINT_T1);
      step = 0;
    }
  }
#pragma GCC unroll 6
  for (int m = 0; m < TR; m++) {
    if (!last) {
      _mm256_storeu_si256((__m256i *)(part + m * 16), c[m][0]);
      _mm256_storeu_si256((__m256i *)(part + m * 16 + 8), c[m][1]);
    } else if (nc == 16) {
      finish8_avx2(o, r + m, i0, c[m][0]);
      finish8_avx2(o, r + m, i0 + 8, c[m][1]);
    } else {
      int32_t sum[16];
      _mm256_storeu_si256((__m256i *)sum, c[m][0]);
      _mm256_storeu_si256((__m256i *)(sum + 8), c[m][1]);
      for (int j = 0; j < nc; j++) int8_finish_one(o, r + m, i0 + j, sum[j]);
    }
  }
}

/* One row of x (row r) against the 32 outputs of blocks b and b + 1 (b
** even: side by side in each group of the packed W; outputs past W are the
** padding's zeros), straight from the packed W: four codes of x broadcast,
** each 16 bytes of W (4 outputs x 4 values) sign-extended, two partial sums
** per output added at the end.  For one row, widening W first (the path
** below) costs more than it saves: measured on Zen 5 (this instruction
** set, 2 threads, W from memory), one row 1.2-1.5x faster than widening. */
INT8_AVX2 static void row_pair_avx2(const int8_out *o, const int16_t *x, int r, int b, int i1) {
  const size_t KG = (size_t)o->x->ldq / 4;
  const int8_t *wb = int8_block_at(o->w, b);
  __m256i acc[8];
  for (int p = 0; p < 8; p++) acc[p] = _mm256_setzero_si256();
  for (size_t g = 0; g < KG; g++) {
    int64_t quad;
    memcpy(&quad, x + g * 4, 8);
    __m256i xb = _mm256_set1_epi64x(quad);
    _mm_prefetch((const char *)(wb + (g + 16) * INT8_GROUP_BYTES), _MM_HINT_T0);
    _mm_prefetch((const char *)(wb + (g + 16) * INT8_GROUP_BYTES + 64), _MM_HINT_T0);
#pragma GCC unroll 8
    for (int p = 0; p < 8; p++) {
      __m256i w = _mm256_cvtepi8_epi16(
        _mm_loadu_si128((const __m128i *)(wb + g * INT8_GROUP_BYTES + p * 16)));
      acc[p] = _mm256_add_epi32(acc[p], _mm256_madd_epi16(w, xb));
    }
  }
  for (int h = 0; h < 4; h++) { /* 8 outputs each: hadd gives [0 1 4 5 | 2 3 6 7], permute orders */
    __m256i v = _mm256_permute4x64_epi64(_mm256_hadd_epi32(acc[2 * h], acc[2 * h + 1]), 0xD8);
    int i = b * 16 + h * 8;
    if (i + 8 <= i1) {
      finish8_avx2(o, r, i, v);
    } else {
      int32_t sum[8];
      _mm256_storeu_si256((__m256i *)sum, v);
      for (int j = 0; i + j < i1; j++) int8_finish_one(o, r, i + j, sum[j]);
    }
  }
}

INT8_AVX2 static void int8_unit_avx2(const int8_out *o, int r0, int r1, int i0, int i1) {
  const int16_t *x = o->x->q;
  const size_t ldq = (size_t)o->x->ldq;
  /* P: a chunk of kc values of k of one block, widened (INT8_AVX2_KC: 16 KB,
  ** stays in L1 while every tile of rows passes it; from 2 tiles of rows on
  ** the whole block at once, measured faster there); part: the tiles' sums
  ** between chunks */
  const size_t kc = r1 - r0 > 2 * INT8_AVX2_MR || ldq < INT8_AVX2_KC ? ldq : INT8_AVX2_KC;
  int16_t *P = r1 - r0 > 1 ? aligned_alloc(32, kc * 16 * sizeof(int16_t)) : NULL;
  int32_t *part = r1 - r0 > 1 ? malloc((size_t)(r1 - r0) * 16 * sizeof(int32_t)) : NULL;
  if (!P || !part) { /* one row (or no memory for P): straight from the packed W, row by row */
    for (int r = r0; r < r1; r++)
      for (int b = i0 / 16; b * 16 < i1; b += 2) row_pair_avx2(o, x + (size_t)r * ldq, r, b, i1);
    free(P);
    free(part);
    _mm256_zeroupper();
    return;
  }
  for (int b = i0 / 16; b * 16 < i1; b++) {
    int nc = i1 - b * 16 < 16 ? i1 - b * 16 : 16;
    const int8_t *wb = int8_block_at(o->w, b);
    /* the next block's lines, spread over this block's tiles (the packed W is
    ** read once, block after block: for a few rows it comes from memory) */
    const char *next = (b + 1) * 16 < o->w->n ? (const char *)int8_block_at(o->w, b + 1) : NULL;
    const int nt = (r1 - r0 + INT8_AVX2_MR - 1) / INT8_AVX2_MR; /* tiles of nearly equal height */
    for (size_t k0 = 0; k0 < ldq; k0 += kc) {
      size_t k1 = ldq - k0 < kc ? ldq : k0 + kc;
      widen_block_avx2(P, wb + k0 / 4 * INT8_GROUP_BYTES, (k1 - k0) / 4);
      int lines = next ? (int)((k1 - k0) / 4) : 0; /* the next block's groups of this chunk */
      const char *nx = next ? next + k0 / 4 * INT8_GROUP_BYTES : NULL;
      for (int i = 0, r = r0, mr; i < nt; i++, r += mr) {
        mr = kernels_tile_rows(r1, r, i, nt);
        /* tile i prefetches its share of them: line n is group n's 64 bytes */
        int l0 = lines * i / nt, l1 = lines * (i + 1) / nt;
        const char *pf = nx ? nx + (size_t)l0 * INT8_GROUP_BYTES : NULL;
        const int16_t *xr = x + (size_t)r * ldq;
        int32_t *pr = part + (size_t)(r - r0) * 16;
        int first = k0 == 0, last = k1 == ldq;
        switch (mr) {
#define T(m) \
  case m: tile_avx2(o, xr, ldq, P, k0, k1, pr, first, last, r, b * 16, nc, pf, l1 - l0, m); break;
          T(6) T(5) T(4) T(3) T(2) T(1)
#undef T
        }
      }
    }
  }
  free(part);
  free(P);
  _mm256_zeroupper();
}

const int8_kernel_table int8_avx2 = {QG_AVX2, INT8_AVX2_MR, int8_unit_avx2, NULL, NULL};
#endif /* BF_HAVE_AVX2 */
