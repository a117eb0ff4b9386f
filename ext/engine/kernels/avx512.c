/*
** avx512.c — the AVX-512 kernel set (kernels.h): y = x W^T and forward.c's
** loops over rows with AVX-512F, 16 floats at a time.  gemm.c's job splitter
** runs the products (cutting the work into units for the threads), forward.c
** the row operations, both through kernels_avx512.
**
** The products: the weights stay as PyTorch stores them ([out, in], read in
** place from the mmap).  Two kernels cover every size the encoder meets:
**
** Dot kernel (rows of x <= GEMM_DOT_MAX_T, or GEMM_DOT_MAX_T_DEEP for K >=
** GEMM_DOT_DEEP_K: one short sentence, a few masks): a tile of 6 rows of W
** x 4 tokens (3 x 8 for 7-8 tokens) keeps 24 accumulators of 16 lanes; sums
** run over K (in chunks of 768, so that 6 rows of W stay in L1) and are
** reduced at the end.  Each row of W comes from memory once and is reused
** from L1 for every token, while the rows after the tile
** (which follow in memory) are prefetched into L2 as one sequential run,
** spread over the tiles of all the tokens (prefetch.h).
**
** Panel kernel (more rows): for each strip of PANEL = 48 output columns,
**   1. pack: Wp[k][j] = W[n0 + j][k] (16x16 transposes in registers; rows past
**      the end of W and k past K are zero), 48*K floats, stays in L2;
**   2. for every MR = 8 rows of x: c[i][0..48) += x[i][k] * Wp[k][0..48) over
**      k, 24 accumulators, one broadcast of x and three loads of Wp per 3 FMAs;
**   while the strip this thread will likely take next is prefetched, spread
**   over the arithmetic.  (Strips of 32 or 64 columns, 12 or 6 rows, measured
**   3-7% slower on a bert-base layer.)  The classic blocked-GEMM inner loop:
**   it replaces OpenBLAS, which repacks all of W on every call and is 20-30%
**   slower here for the sizes of one sentence.
** Float accumulation in a fixed order per output element (any order is as
** exact as a BLAS; results do not depend on the number of threads).
**
** Attention of one head (att_scores, att_values; forward.c runs the
** softmax between them): read in place from the rows of q, k and v, the keys
** transposed once (16x16 blocks), register tiles of 6 queries by 64 keys
** (scores) or 64 columns (values), no horizontal sums.  Before them the head
** went through the products above on copies of its columns: a batch of 32
** sentences of 20 tokens spent ~11% of its time in attention (the copies
** alone ~5%), now ~5% (int8, AMD Zen 4: 5-6% faster as a whole).
**
** The row operations (what dominates once the products are fast):
**   - exp16: e^x by range reduction (x = n ln2 + r) and a degree-7 Taylor
**     polynomial on |r| <= ln2/2 (error below 1 ulp of float).
**   - gelu: erf by Abramowitz & Stegun 7.1.26 (absolute error < 1.5e-7), the
**     formula PyTorch's own vectorized CPU erf uses.
**   - LayerNorm: mean and variance summed in double.
** The portable set's expf and erff (libm) give the same results to ~1e-7.
*/
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "avx512.h"
#include "int8.h"
#include "kernels.h"
#include "prefetch.h"

#ifdef BF_HAVE_AVX512
#define INLINE static inline __attribute__((always_inline))

/* ---- dot kernel ---- */
/* Two tile shapes, 24 accumulators of 16 lanes each.  7-8 tokens: one tile
** of 3 rows of W x all the tokens, W's rows in registers (dot_tile_w).
** Otherwise tiles of 6 rows of W x up to 4 tokens, the tokens' rows in
** registers and W's rows loaded as they are used (dot_tile_x). */
#define DOT_W_TILE_MIN 7 /* from this many tokens up to 8: dot_tile_w */
#define DOT_W_TILE_MAX 8
#define DOT_X_RW 6  /* dot_tile_x: rows of W ... */
#define DOT_X_TJ 4  /* ... by up to this many tokens */
#define DOT_KC 768  /* dot_tile_x runs k in chunks of this many (a multiple of 16) */
#define DOT_STEP 12 /* columns per unit of work: a multiple of both tile heights (3, 6) */
#define DOT_UNIT 24 /* least columns per unit of work (a multiple of DOT_STEP) */
_Static_assert(DOT_STEP % 3 == 0 && DOT_STEP % DOT_X_RW == 0, "units hold whole tiles");
_Static_assert(DOT_KC % 16 == 0, "chunks of whole vectors");

/* y[j*ldy + i] = dot(w[i*K ...], x[j*K ...]) for i < R rows of W, j < J tokens
** (R and J are constants after inlining, so acc[][] lives in registers). */
INLINE AVX512 void dot_tile_w(float *y, int ldy, const float *x, const float *w, int K, const int R,
                              const int J, prefetch *pf) {
  __m512 acc[3][8], wv[3];
#pragma GCC unroll 8
  for (int i = 0; i < R; i++)
#pragma GCC unroll 8
    for (int j = 0; j < J; j++) acc[i][j] = _mm512_setzero_ps();
  for (int k = 0; k < K; k += 16) {
    __mmask16 m = tail16(K - k);
#pragma GCC unroll 8
    for (int i = 0; i < R; i++) wv[i] = _mm512_maskz_loadu_ps(m, w + (size_t)i * K + k);
    prefetch_step_l2(pf, k >> 4);
#pragma GCC unroll 8
    for (int j = 0; j < J; j++) {
      __m512 xv = _mm512_maskz_loadu_ps(m, x + (size_t)j * K + k);
#pragma GCC unroll 8
      for (int i = 0; i < R; i++) acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; i++)
#pragma GCC unroll 8
    for (int j = 0; j < J; j++) y[(size_t)j * ldy + i] = _mm512_reduce_add_ps(acc[i][j]);
}

/* out[i] = the sum of the 16 lanes of v[i] for i < n (n <= 8, a constant
** after inlining), each summed in the same order whatever n is: pairs of
** lanes within each 128-bit quarter, then the quarters. */
INLINE AVX512 void hsum_rows(float *out, const __m512 *v, const int n) {
  __m512 a[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; i++) a[i] = i < n ? v[i] : _mm512_setzero_ps();
  __m512 s[4];
#pragma GCC unroll 4
  for (int i = 0; i < 4; i++)
    s[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]),
                         _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
  __m512 u0 = _mm512_add_ps(_mm512_shuffle_ps(s[0], s[1], 0x44),
                            _mm512_shuffle_ps(s[0], s[1], 0xEE));
  __m512 u1 = _mm512_add_ps(_mm512_shuffle_ps(s[2], s[3], 0x44),
                            _mm512_shuffle_ps(s[2], s[3], 0xEE));
  __m512 w = _mm512_add_ps(_mm512_shuffle_f32x4(u0, u1, 0x88), _mm512_shuffle_f32x4(u0, u1, 0xDD));
  __m512 f = _mm512_add_ps(_mm512_shuffle_f32x4(w, w, 0x88), _mm512_shuffle_f32x4(w, w, 0xDD));
  _mm512_mask_storeu_ps(out, (__mmask16)((1u << n) - 1), f); /* lanes 0-7 hold the sums */
}

/* The same over k in [k0, k1) for R rows of W x J tokens (constants), the
** tokens' rows in registers: the sums start at 0 (k0 == 0) or from part,
** and end in y (k1 == K) or in part (16 lanes per sum, 64-byte aligned). */
INLINE AVX512 void dot_tile_x(float *y, int ldy, const float *x, const float *w, int K, int k0,
                              int k1, const int R, const int J, prefetch *pf, float *part) {
  __m512 acc[DOT_X_RW][DOT_X_TJ];
#pragma GCC unroll 8
  for (int i = 0; i < R; i++)
#pragma GCC unroll 4
    for (int j = 0; j < J; j++)
      acc[i][j] = k0 == 0 ? _mm512_setzero_ps() : _mm512_load_ps(part + 16 * (i * J + j));
  for (int k = k0; k < k1; k += 16) {
    __mmask16 m = tail16(K - k);
    __m512 xv[DOT_X_TJ];
#pragma GCC unroll 4
    for (int j = 0; j < J; j++) xv[j] = _mm512_maskz_loadu_ps(m, x + (size_t)j * K + k);
    prefetch_step_l2(pf, k >> 4);
#pragma GCC unroll 8
    for (int i = 0; i < R; i++) {
      __m512 wv = _mm512_maskz_loadu_ps(m, w + (size_t)i * K + k);
#pragma GCC unroll 4
      for (int j = 0; j < J; j++) acc[i][j] = _mm512_fmadd_ps(wv, xv[j], acc[i][j]);
    }
  }
  if (k1 < K) {
#pragma GCC unroll 8
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
      for (int j = 0; j < J; j++) _mm512_store_ps(part + 16 * (i * J + j), acc[i][j]);
    return;
  }
#pragma GCC unroll 4
  for (int j = 0; j < J; j++) {
    __m512 col[DOT_X_RW];
#pragma GCC unroll 8
    for (int i = 0; i < R; i++) col[i] = acc[i][j];
    hsum_rows(y + (size_t)j * ldy, col, R);
  }
}

/* The rows of W after [o, o + R) in [o, o1), read next: one run of lines
** prefetched over the steps of k of all nt tiles. */
INLINE AVX512 prefetch dot_prefetch(const float *W, int K, int o, int R, int o1, int TR, int nt) {
  int next = o1 - (o + R) < TR ? o1 - (o + R) : TR;
  return prefetch_plan(W + (size_t)(o + R) * K, (long)next * K * (long)sizeof(float),
                       (long)nt * ((K + 15) / 16));
}

/* Columns [o0, o1) with one dot_tile_w of 3 rows of W by all T (7..8) tokens. */
INLINE AVX512 void dot_cols_w(float *y, const float *x, const float *W, int T, int N, int K, int o0,
                              int o1) {
  for (int o = o0; o < o1;) {
    const int R = o1 - o >= 3 ? 3 : 1;
    prefetch pf = dot_prefetch(W, K, o, R, o1, 3, 1);
    float *yo = y + o;
    const float *wo = W + (size_t)o * K;
    if (R == 3) {
      if (T == 8) dot_tile_w(yo, N, x, wo, K, 3, 8, &pf);
      else dot_tile_w(yo, N, x, wo, K, 3, 7, &pf);
    } else {
      if (T == 8) dot_tile_w(yo, N, x, wo, K, 1, 8, &pf);
      else dot_tile_w(yo, N, x, wo, K, 1, 7, &pf);
    }
    o += R;
  }
}

/* Tokens [t, t + J) (J 1..4) against rows [o, o + R) (R 6 or 1), k in [k0, k1). */
INLINE AVX512 void dot_tile_x_any(float *y, int N, const float *x, const float *w, int K, int k0,
                                  int k1, int J, const int R, prefetch *pf, float *part) {
  switch (J) {
    case 1: dot_tile_x(y, N, x, w, K, k0, k1, R, 1, pf, part); break;
    case 2: dot_tile_x(y, N, x, w, K, k0, k1, R, 2, pf, part); break;
    case 3: dot_tile_x(y, N, x, w, K, k0, k1, R, 3, pf, part); break;
    default: dot_tile_x(y, N, x, w, K, k0, k1, R, 4, pf, part); break;
  }
}

/* Columns [o0, o1) with dot_tile_x: for each 6 rows of W, k in chunks of
** DOT_KC (6 rows of a chunk, 18 KB, stay in L1 for every tile of tokens;
** the tiles' partial sums wait in part between chunks). */
INLINE AVX512 void dot_cols_x(float *y, const float *x, const float *W, int T, int N, int K, int o0,
                              int o1) {
  enum { MAX_TILES = (GEMM_DOT_MAX_T_DEEP + DOT_X_TJ - 1) / DOT_X_TJ };
  _Static_assert(GEMM_DOT_MAX_T <= GEMM_DOT_MAX_T_DEEP, "part holds the tiles of the most rows");
  float part[MAX_TILES][DOT_X_RW * DOT_X_TJ * 16] __attribute__((aligned(64)));
  const int nt = (T + DOT_X_TJ - 1) / DOT_X_TJ;
  for (int o = o0; o < o1;) {
    const int R = o1 - o >= DOT_X_RW ? DOT_X_RW : 1;
    prefetch pf = dot_prefetch(W, K, o, R, o1, DOT_X_RW, nt);
    const float *wo = W + (size_t)o * K;
    for (int k0 = 0; k0 < K; k0 += DOT_KC) {
      int k1 = K - k0 > DOT_KC ? k0 + DOT_KC : K;
      for (int i = 0, t = 0; i < nt; i++) {
        int J = T - t < DOT_X_TJ ? T - t : DOT_X_TJ;
        float *yt = y + (size_t)t * N + o;
        const float *xt = x + (size_t)t * K;
        if (R == DOT_X_RW) dot_tile_x_any(yt, N, xt, wo, K, k0, k1, J, DOT_X_RW, &pf, part[i]);
        else dot_tile_x_any(yt, N, xt, wo, K, k0, k1, J, 1, &pf, part[i]);
        t += J;
      }
    }
    o += R;
  }
}

/* Columns [o0, o1) of y[T,N] = x[T,K] W[N,K]^T, T <= GEMM_DOT_MAX_T_DEEP.
** Measured on AMD Zen 5 (bench_gemm fp32, W from memory, 2 threads, best
** of interleaved rounds; one sentence for the whole encoder):
**   - Tiles of 6 rows of W x 4 tokens, the tokens in registers, against the
**     4 x 6 tiles with W's rows in registers that ran here before: 12-40
**     rows 20-40% faster on the 768-deep products (12 rows 140-150 GFLOP/s
**     against 103-106, 24 rows 172-183 against 135), 7-26% on the
**     3072-deep one with k in chunks (12 rows 184-192 against 152; without
**     chunks slower than 4 x 6: 6 rows of 3072 floats do not stay in L1).
**     8 x 3, 6 x 3, 4 x 5 and 12 x 2 were slower; chunks of 256 or 384 no
**     better than 768.  At 1-6 rows 6 x 4 is 0-40% faster than one 3 x 8
**     tile, at 8 rows 10-15% slower on the 768-deep products: 7-8 tokens
**     keep the 3 x 8 tile.
**   - The tokens in tiles of 4 and one of what is left (13: 4 + 4 + 4 + 1):
**     nearly equal tiles (4 + 3 + 3 + 3) were 8% slower at 13 and 17
**     tokens, level at 19-24.
**   - A token's 6 sums through one shuffle tree (hsum_rows) instead of 6
**     reductions: 12-24 tokens 3-4% faster; the 3 x 8 tile showed no
**     difference and keeps its reductions.
**   - Against the panel kernel: level at 24 rows on the 768-deep products,
**     behind from 28; ahead up to 48 rows on the 3072-deep one (32 rows
**     228-230 against 190-192, 48 rows 230-236 against 232-234): hence
**     GEMM_DOT_MAX_T and GEMM_DOT_MAX_T_DEEP (kernels.h).
** The next rows of W are prefetched into L2 (T1) as one sequential run: on
** AMD Zen 4 the former prefetch (the next tile's rows at the same k, into
** L1) left W read at 10-18 GB/s; with this one bench_gemm at 8 rows on 2
** threads ran 101-143 GFLOP/s (was 54-71).  T0 instead of T1 pushed x's
** rows out of L1 there (30-45% slower); with the 6 x 4 tiles on Zen 5,
** T0, and prefetching one or two blocks of rows further ahead, measured
** within noise. */
AVX512 static void dot_cols(float *y, const float *x, const float *W, int T, int N, int K, int o0,
                            int o1) {
  if (T >= DOT_W_TILE_MIN && T <= DOT_W_TILE_MAX) dot_cols_w(y, x, W, T, N, K, o0, o1);
  else dot_cols_x(y, x, W, T, N, K, o0, o1);
}

/* ---- panel kernel ---- */
#define PANEL_NZ \
  3 /* zmm of output columns per strip (48 columns, 8 rows of x per tile: measured best of 2, 3, 4) */
#define PANEL (16 * PANEL_NZ) /* output columns per strip */
#define MR (24 / PANEL_NZ)    /* rows of x per register tile: 24 accumulators */
_Static_assert(MR == 8, "panel_strip's switch lists tiles of 1..8 rows");

/* In place: r[i] (row i of a 16x16 block) becomes column i. */
INLINE AVX512 void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; i++) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; i++) {
    r[4 * i + 0] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0x44);
    r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0xEE);
    r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  for (int i = 0; i < 4; i++) {
    t[i] = _mm512_shuffle_f32x4(r[i], r[4 + i], 0x88);
    t[4 + i] = _mm512_shuffle_f32x4(r[i], r[4 + i], 0xDD);
    t[8 + i] = _mm512_shuffle_f32x4(r[8 + i], r[12 + i], 0x88);
    t[12 + i] = _mm512_shuffle_f32x4(r[8 + i], r[12 + i], 0xDD);
  }
  for (int i = 0; i < 4; i++) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0x88);
    r[8 + i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0xDD);
    r[4 + i] = _mm512_shuffle_f32x4(t[4 + i], t[12 + i], 0x88);
    r[12 + i] = _mm512_shuffle_f32x4(t[4 + i], t[12 + i], 0xDD);
  }
}

/* Wp[k*PANEL + j] = W[(n0 + j)*K + k] for j < nr (<= PANEL), k < K; 0 for j >= nr. */
AVX512 static void pack_panel(float *Wp, const float *W, int K, int n0, int nr) {
  for (int h = 0; h < PANEL / 16; h++) {
    for (int k = 0; k < K; k += 16) {
      __mmask16 m = tail16(K - k);
      __m512 r[16];
#pragma GCC unroll 16
      for (int j = 0; j < 16; j++) {
        int row = h * 16 + j;
        r[j] = row < nr ? _mm512_maskz_loadu_ps(m, W + (size_t)(n0 + row) * K + k)
                        : _mm512_setzero_ps();
      }
      transpose16(r);
      int kn = K - k < 16 ? K - k : 16;
      for (int i = 0; i < kn; i++) _mm512_store_ps(Wp + (size_t)(k + i) * PANEL + 16 * h, r[i]);
    }
  }
}

/* The register tile of both kernels that read W as panels (panel_strip's
** packed strip, packed_cols' panels of the packed file): y[i*ldy + 0..16 nz)
** (+)= sum over k in [k0, k1) of x[i*ldx + k] * Wp[k*ldw + 0..16 nz) for i <
** R (R and nz constants after inlining, R * nz <= 24 accumulators), one
** broadcast of x and nz loads of Wp per nz FMAs; add: y += the sums, else y
** = them; lanes outside m[z] (columns 16z..16z+15) are neither read nor
** stored.  Each step also runs the prefetches pf and own (may be a plan of
** nothing). */
INLINE AVX512 void bcast_tile(const int R, const int nz, const float *x, int ldx, const float *Wp,
                              int ldw, int k0, int k1, float *y, int ldy, const __mmask16 *m,
                              int add, prefetch *pf, prefetch *own) {
  __m512 c[8][4];
#pragma GCC unroll 8
  for (int i = 0; i < R; i++)
#pragma GCC unroll 4
    for (int z = 0; z < nz; z++) c[i][z] = _mm512_setzero_ps();
  for (int k = k0; k < k1; k++) {
    prefetch_step_l1(own, k);
    prefetch_step_l1(pf, k);
    __m512 b[4];
#pragma GCC unroll 4
    for (int z = 0; z < nz; z++) b[z] = _mm512_loadu_ps(Wp + (size_t)k * ldw + 16 * z);
#pragma GCC unroll 8
    for (int i = 0; i < R; i++) {
      __m512 a = _mm512_set1_ps(x[(size_t)i * ldx + k]);
#pragma GCC unroll 4
      for (int z = 0; z < nz; z++) c[i][z] = _mm512_fmadd_ps(a, b[z], c[i][z]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; i++)
#pragma GCC unroll 4
    for (int z = 0; z < nz; z++) {
      float *d = y + (size_t)i * ldy + 16 * z;
      if (add) c[i][z] = _mm512_add_ps(c[i][z], _mm512_maskz_loadu_ps(m[z], d));
      _mm512_mask_storeu_ps(d, m[z], c[i][z]);
    }
}

/* Strip [n0, n0 + nr) of y[T,N] = x[T,K] W[N,K]^T, through the panel Wp;
** meanwhile rows [next, next + PANEL) of W (if next < N) are prefetched. */
AVX512 static void panel_strip(float *Wp, float *y, const float *x, const float *W, int T, int N,
                               int K, int n0, int nr, int next) {
  pack_panel(Wp, W, K, n0, nr);
  __mmask16 m[PANEL_NZ];
  for (int z = 0; z < PANEL_NZ; z++) m[z] = tail16(nr - 16 * z);
  int rows = next >= N ? 0 : N - next < PANEL ? N - next : PANEL;
  prefetch pf = prefetch_plan(W + (size_t)(next < N ? next : 0) * K,
                              (long)rows * K * (long)sizeof(float), (long)((T + MR - 1) / MR) * K);
  prefetch none = prefetch_plan(NULL, 0, 1);
  for (int t = 0; t < T; t += MR) {
    const float *xt = x + (size_t)t * K;
    float *yt = y + (size_t)t * N + n0;
    switch (T - t < MR ? T - t : MR) {
#define TILE(r) \
  case r: bcast_tile(r, PANEL_NZ, xt, K, Wp, PANEL, 0, K, yt, N, m, 0, &pf, &none); break;
      TILE(1) TILE(2) TILE(3) TILE(4) TILE(5) TILE(6) TILE(7) TILE(8)
#undef TILE
    }
  }
}

/* ---- packed kernel ----
** W from the packed file (packed.c): panels of GEMM_PACK = 64 outputs, k-major
** ([N/64][K][64], gemm_pack_panels), made once, so no packing per call and W
** read as one sequential stream.  For each panel, k in chunks of PACK_KC
** (64 x 768 floats = 192 KB, in L2 for every tile of rows after the first),
** and per chunk every tile of up to PACK_MR = 6 rows of x (4 x 6 = 24
** accumulators; the rows cut into tiles of nearly equal height).  The first
** tile of a chunk prefetches the chunk's own rows PACK_AHEAD steps of k
** ahead, and every tile a share of the next chunk (of this panel, or the
** first of the panel this thread takes next), so that memory streams while
** the tiles compute.  Measured on the Zen 5 (AMD EPYC family 26, 2 cores),
** 12 bert-base layers with W from memory against the dot kernel: 16-32 rows
** 0.61-0.79x the time, 8-12 rows 0.88-0.91x. */
#define PACK_NZ (GEMM_PACK / 16)
#define PACK_MR 6
#define PACK_KC 768
#define PACK_AHEAD 12
_Static_assert(PACK_NZ *PACK_MR <= 24 && PACK_MR <= 8, "bcast_tile's accumulators");

AVX512 static void packed_cols(float *y, const float *x, const float *Wp, int T, int N, int K,
                               int c0, int c1, int next) {
  const long panel_floats = (long)K * GEMM_PACK;
  int nt = (T + PACK_MR - 1) / PACK_MR;
  for (int n0 = c0; n0 < c1; n0 += GEMM_PACK) {
    const float *wp = Wp + (size_t)(n0 / GEMM_PACK) * (size_t)panel_floats;
    __mmask16 m[PACK_NZ];
    for (int z = 0; z < PACK_NZ; z++) m[z] = tail16(N - n0 - 16 * z);
    int after = n0 + GEMM_PACK < c1 ? n0 + GEMM_PACK : next; /* this thread's next panel */
    for (int k0 = 0; k0 < K; k0 += PACK_KC) {
      int k1 = K - k0 < PACK_KC ? K : k0 + PACK_KC;
      const float *nx = NULL; /* the chunk after this one */
      long nk = 0;
      if (k1 < K) {
        nx = wp + (size_t)k1 * GEMM_PACK;
        nk = K - k1 < PACK_KC ? K - k1 : PACK_KC;
      } else if (after < N) {
        nx = Wp + (size_t)(after / GEMM_PACK) * (size_t)panel_floats;
        nk = K < PACK_KC ? K : PACK_KC;
      }
      prefetch pf = prefetch_plan(nx, nk * GEMM_PACK * (long)sizeof(float), (long)nt * (k1 - k0));
      prefetch own = prefetch_plan(wp + (size_t)(k0 + PACK_AHEAD) * GEMM_PACK,
                                   (long)(k1 - k0 - PACK_AHEAD) * GEMM_PACK * (long)sizeof(float),
                                   k1 - k0 - PACK_AHEAD);
      prefetch none = prefetch_plan(NULL, 0, 1);
      for (int t = 0, done = 0; t < nt; t++) {
        int R = kernels_tile_rows(T, done, t, nt);
        const float *xt = x + (size_t)done * K;
        float *yt = y + (size_t)done * N + n0;
        prefetch *o = t == 0 ? &own : &none;
        switch (R) {
#define TILE(r) \
  case r: bcast_tile(r, PACK_NZ, xt, K, wp, GEMM_PACK, k0, k1, yt, N, m, k0 > 0, &pf, o); break;
          TILE(1) TILE(2) TILE(3) TILE(4) TILE(5) TILE(6)
#undef TILE
        }
        done += R;
      }
    }
  }
}

/* ---- attention of one head (gemm_kernel_table.att_scores / att_values) ----
** Straight from the rows of q, k and v (stride ld, d columns of the head):
** no copies of q or v, keys transposed once into kt; register tiles of up
** to ATT_QR queries by ATT_NZ vectors of 16 (keys for the scores, columns
** for the values), accumulated over d (scores) or the keys (values) by
** broadcasts, no horizontal sums. */
#define ATT_QR 6 /* queries per tile ... */
#define ATT_NZ 4 /* ... by 4 vectors of 16: 24 accumulators */

/* kt[c * ldt + j] = k[j * ldk + c] for j < L, c < d; lanes j in [L, ldt) 0. */
AVX512 static void transpose_keys(float *kt, int ldt, const float *k, size_t ldk, int L, int d) {
  for (int j0 = 0; j0 < L; j0 += 16)
    for (int c0 = 0; c0 < d; c0 += 16) {
      __mmask16 m = tail16(d - c0);
      __m512 r[16];
#pragma GCC unroll 16
      for (int j = 0; j < 16; j++)
        r[j] = j0 + j < L ? _mm512_maskz_loadu_ps(m, k + (size_t)(j0 + j) * ldk + c0)
                          : _mm512_setzero_ps();
      transpose16(r);
      int cn = d - c0 < 16 ? d - c0 : 16;
      for (int i = 0; i < cn; i++) _mm512_storeu_ps(kt + (size_t)(c0 + i) * ldt + j0, r[i]);
    }
}

/* s[i * lds + j] = scale * sum_c q[i * ldq + c] kt[c * ldt + j] for i < QR,
** j < 16 NZ (inside m). */
INLINE AVX512 void score_tile(float *s, int lds, const float *q, size_t ldq, const float *kt,
                              int ldt, int d, float scale, const __mmask16 *m, const int QR,
                              const int NZ) {
  __m512 acc[ATT_QR][ATT_NZ];
#pragma GCC unroll 8
  for (int i = 0; i < QR; i++)
#pragma GCC unroll 4
    for (int z = 0; z < NZ; z++) acc[i][z] = _mm512_setzero_ps();
  for (int c = 0; c < d; c++) {
    __m512 b[ATT_NZ];
#pragma GCC unroll 4
    for (int z = 0; z < NZ; z++) b[z] = _mm512_loadu_ps(kt + (size_t)c * ldt + 16 * z);
#pragma GCC unroll 8
    for (int i = 0; i < QR; i++) {
      __m512 a = _mm512_set1_ps(q[(size_t)i * ldq + c]);
#pragma GCC unroll 4
      for (int z = 0; z < NZ; z++) acc[i][z] = _mm512_fmadd_ps(a, b[z], acc[i][z]);
    }
  }
  const __m512 sc = _mm512_set1_ps(scale);
#pragma GCC unroll 8
  for (int i = 0; i < QR; i++)
#pragma GCC unroll 4
    for (int z = 0; z < NZ; z++)
      _mm512_mask_storeu_ps(s + (size_t)i * lds + 16 * z, m[z], _mm512_mul_ps(acc[i][z], sc));
}

/* ctx[i * ldc + c] = sum_j p[i * ldp + j] v[j * ldv + c] for i < QR, j < L,
** c < 16 NZ (inside m). */
INLINE AVX512 void value_tile(float *ctx, size_t ldc, const float *p, int ldp, const float *v,
                              size_t ldv, int L, const __mmask16 *m, const int QR, const int NZ) {
  __m512 acc[ATT_QR][ATT_NZ];
#pragma GCC unroll 8
  for (int i = 0; i < QR; i++)
#pragma GCC unroll 4
    for (int z = 0; z < NZ; z++) acc[i][z] = _mm512_setzero_ps();
  for (int j = 0; j < L; j++) {
    __m512 b[ATT_NZ];
#pragma GCC unroll 4
    for (int z = 0; z < NZ; z++) b[z] = _mm512_maskz_loadu_ps(m[z], v + (size_t)j * ldv + 16 * z);
#pragma GCC unroll 8
    for (int i = 0; i < QR; i++) {
      __m512 a = _mm512_set1_ps(p[(size_t)i * ldp + j]);
#pragma GCC unroll 4
      for (int z = 0; z < NZ; z++) acc[i][z] = _mm512_fmadd_ps(a, b[z], acc[i][z]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < QR; i++)
#pragma GCC unroll 4
    for (int z = 0; z < NZ; z++)
      _mm512_mask_storeu_ps(ctx + (size_t)i * ldc + 16 * z, m[z], acc[i][z]);
}

/* The tile for qr (1..ATT_QR) queries and nz (1..ATT_NZ) vectors, made
** constants by the switches. */
INLINE AVX512 void score_tile_nz(float *s, int lds, const float *q, size_t ldq, const float *kt,
                                 int ldt, int d, float scale, const __mmask16 *m, const int QR,
                                 int nz) {
  switch (nz) {
    case 1: score_tile(s, lds, q, ldq, kt, ldt, d, scale, m, QR, 1); break;
    case 2: score_tile(s, lds, q, ldq, kt, ldt, d, scale, m, QR, 2); break;
    case 3: score_tile(s, lds, q, ldq, kt, ldt, d, scale, m, QR, 3); break;
    default: score_tile(s, lds, q, ldq, kt, ldt, d, scale, m, QR, 4); break;
  }
}

INLINE AVX512 void value_tile_nz(float *ctx, size_t ldc, const float *p, int ldp, const float *v,
                                 size_t ldv, int L, const __mmask16 *m, const int QR, int nz) {
  switch (nz) {
    case 1: value_tile(ctx, ldc, p, ldp, v, ldv, L, m, QR, 1); break;
    case 2: value_tile(ctx, ldc, p, ldp, v, ldv, L, m, QR, 2); break;
    case 3: value_tile(ctx, ldc, p, ldp, v, ldv, L, m, QR, 3); break;
    default: value_tile(ctx, ldc, p, ldp, v, ldv, L, m, QR, 4); break;
  }
}

/* The masks of the chunk of 16 ATT_NZ columns from c0 of n, and how many of
** its vectors hold any. */
INLINE AVX512 int att_chunk(__mmask16 *m, int n, int c0) {
  for (int z = 0; z < ATT_NZ; z++) m[z] = tail16(n - c0 - 16 * z);
  int nz = (n - c0 + 15) / 16;
  return nz < ATT_NZ ? nz : ATT_NZ;
}

/* s[i * lds + j] = scale q_i . k_j for i < Lq, j < L (lds >= L rounded up
** to 16); kt: room for d * lds floats. */
AVX512 static void att_scores(float *s, int lds, const float *q, size_t ldq, int Lq, const float *k,
                              size_t ldk, int L, int d, float scale, float *kt) {
  transpose_keys(kt, lds, k, ldk, L, d);
  const int nt = (Lq + ATT_QR - 1) / ATT_QR;
  for (int j0 = 0; j0 < L; j0 += 16 * ATT_NZ) {
    __mmask16 m[ATT_NZ];
    int nz = att_chunk(m, L, j0);
    for (int t = 0, i = 0, qr; t < nt; t++, i += qr) {
      qr = kernels_tile_rows(Lq, i, t, nt);
      float *st = s + (size_t)i * lds + j0;
      const float *qt = q + (size_t)i * ldq;
      switch (qr) {
        case 1: score_tile_nz(st, lds, qt, ldq, kt + j0, lds, d, scale, m, 1, nz); break;
        case 2: score_tile_nz(st, lds, qt, ldq, kt + j0, lds, d, scale, m, 2, nz); break;
        case 3: score_tile_nz(st, lds, qt, ldq, kt + j0, lds, d, scale, m, 3, nz); break;
        case 4: score_tile_nz(st, lds, qt, ldq, kt + j0, lds, d, scale, m, 4, nz); break;
        case 5: score_tile_nz(st, lds, qt, ldq, kt + j0, lds, d, scale, m, 5, nz); break;
        default: score_tile_nz(st, lds, qt, ldq, kt + j0, lds, d, scale, m, 6, nz); break;
      }
    }
  }
}

/* ctx[i * ldc + c] = sum_j p[i * ldp + j] v_j[c] for i < Lq, c < d. */
AVX512 static void att_values(float *ctx, size_t ldc, const float *p, int ldp, int Lq,
                              const float *v, size_t ldv, int L, int d) {
  const int nt = (Lq + ATT_QR - 1) / ATT_QR;
  for (int c0 = 0; c0 < d; c0 += 16 * ATT_NZ) {
    __mmask16 m[ATT_NZ];
    int nz = att_chunk(m, d, c0);
    for (int t = 0, i = 0, qr; t < nt; t++, i += qr) {
      qr = kernels_tile_rows(Lq, i, t, nt);
      float *ct = ctx + (size_t)i * ldc + c0;
      const float *pt = p + (size_t)i * ldp;
      switch (qr) {
        case 1: value_tile_nz(ct, ldc, pt, ldp, v + c0, ldv, L, m, 1, nz); break;
        case 2: value_tile_nz(ct, ldc, pt, ldp, v + c0, ldv, L, m, 2, nz); break;
        case 3: value_tile_nz(ct, ldc, pt, ldp, v + c0, ldv, L, m, 3, nz); break;
        case 4: value_tile_nz(ct, ldc, pt, ldp, v + c0, ldv, L, m, 4, nz); break;
        case 5: value_tile_nz(ct, ldc, pt, ldp, v + c0, ldv, L, m, 5, nz); break;
        default: value_tile_nz(ct, ldc, pt, ldp, v + c0, ldv, L, m, 6, nz); break;
      }
    }
  }
}

/* ---- row operations ---- */

/* e^x for x in [-87, 88] (clamped; NaN stays NaN). */
static inline AVX512 __m512 exp16(__m512 x) {
  x = _mm512_max_ps(_mm512_set1_ps(-87.0f), x); /* NaN stays NaN (2nd operand) */
  x = _mm512_min_ps(_mm512_set1_ps(88.0f), x);
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x); /* x - n ln2, ln2 in */
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);     /* two parts */
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n); /* p * 2^n */
}

/* y[i] = gelu(y[i] + bias[i]) = z/2 (1 + erf(z/sqrt 2)) for i < n. */
AVX512 static void gelu_row_avx512(float *y, const float *bias, int n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int i = 0; i < n; i += 16) {
    __mmask16 m = tail16(n - i);
    __m512 z = _mm512_add_ps(_mm512_maskz_loadu_ps(m, y + i), _mm512_maskz_loadu_ps(m, bias + i));
    __m512 u = _mm512_mul_ps(z, _mm512_set1_ps((float)M_SQRT1_2));
    __m512 a = _mm512_abs_ps(u);
    __m512 t = _mm512_div_ps(one, _mm512_fmadd_ps(_mm512_set1_ps(0.3275911f), a, one));
    __m512 q = _mm512_set1_ps(1.061405429f);
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(-1.453152027f));
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(1.421413741f));
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(-0.284496736f));
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(0.254829592f));
    q = _mm512_mul_ps(q, t);
    __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_mul_ps(a, a)));
    __m512 erf_a = _mm512_fnmadd_ps(q, e, one); /* erf(|u|) */
    __m512i sign = _mm512_and_epi32(_mm512_castps_si512(u), _mm512_set1_epi32(INT32_MIN));
    __m512 erf_u = _mm512_castsi512_ps(_mm512_or_epi32(_mm512_castps_si512(erf_a), sign));
    __m512 g = _mm512_mul_ps(_mm512_mul_ps(z, _mm512_set1_ps(0.5f)), _mm512_add_ps(one, erf_u));
    _mm512_mask_storeu_ps(y + i, m, g);
  }
}

/* Largest of x[0..n); returns 0 if some x[i] is NaN or infinite. */
AVX512 static int max_finite_avx512(const float *x, int n, float *max) {
  __m512 mx = _mm512_set1_ps(-INFINITY);
  __mmask16 bad = 0;
  for (int i = 0; i < n; i += 16) {
    __mmask16 m = tail16(n - i);
    __m512 v = _mm512_mask_loadu_ps(mx, m, x + i);
    __m512 d = _mm512_sub_ps(v, v); /* 0 if finite, NaN if not */
    bad |= _mm512_cmp_ps_mask(d, d, _CMP_UNORD_Q) & m;
    mx = _mm512_max_ps(mx, v);
  }
  *max = _mm512_reduce_max_ps(mx);
  return bad == 0;
}

/* sum of e^(x[i] - mx) in double; stored into dst too unless dst is NULL. */
AVX512 static double exp_sum_avx512(float *dst, const float *x, int n, float mx) {
  __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
  __m512 vmx = _mm512_set1_ps(mx);
  for (int i = 0; i < n; i += 16) {
    __mmask16 m = tail16(n - i);
    __m512 e = _mm512_maskz_mov_ps(m, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), vmx)));
    if (dst) _mm512_mask_storeu_ps(dst + i, m, e);
    s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
    s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
  }
  return _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
}

/* In place: x = LayerNorm(x) * g + b over n floats, mean and variance in double. */
AVX512 static void layernorm_avx512(float *x, const float *g, const float *b, int n, float eps) {
  __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
  for (int i = 0; i < n; i += 16) {
    __m512 v = _mm512_maskz_loadu_ps(tail16(n - i), x + i);
    s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
    s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
  }
  double mean = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1)) / n;
  __m512d vm = _mm512_set1_pd(mean);
  s0 = _mm512_setzero_pd();
  s1 = _mm512_setzero_pd();
  for (int i = 0; i < n; i += 16) {
    __mmask16 m = tail16(n - i);
    __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    __m512d d0 = _mm512_maskz_sub_pd((__mmask8)m, _mm512_cvtps_pd(_mm512_castps512_ps256(v)), vm);
    __m512d d1 = _mm512_maskz_sub_pd((__mmask8)(m >> 8),
                                     _mm512_cvtps_pd(_mm256_castpd_ps(
                                       _mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))),
                                     vm);
    s0 = _mm512_fmadd_pd(d0, d0, s0);
    s1 = _mm512_fmadd_pd(d1, d1, s1);
  }
  double var = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1)) / n;
  __m512 mf = _mm512_set1_ps((float)mean), rstd = _mm512_set1_ps((float)(1.0 / sqrt(var + eps)));
  for (int i = 0; i < n; i += 16) {
    __mmask16 m = tail16(n - i);
    __m512 v = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), mf), rstd);
    v = _mm512_fmadd_ps(v, _mm512_maskz_loadu_ps(m, g + i), _mm512_maskz_loadu_ps(m, b + i));
    _mm512_mask_storeu_ps(x + i, m, v);
  }
}

/* x[i] += a[i] + b[i] (b may be NULL) for i < n. */
AVX512 static void add_avx512(float *x, const float *a, const float *b, int n) {
  for (int i = 0; i < n; i += 16) {
    __mmask16 m = tail16(n - i);
    __m512 v = _mm512_maskz_loadu_ps(m, a + i);
    if (b) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, b + i));
    _mm512_mask_storeu_ps(x + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, x + i), v));
  }
}

/* The set: gemm.c's job splitter runs the products, forward.c the rows. */
static const gemm_kernel_table gemm_avx512 = {
  .dot_max_t = GEMM_DOT_MAX_T,
  .dot_max_t_deep = GEMM_DOT_MAX_T_DEEP,
  .dot_tile = DOT_STEP,
  .dot_unit = DOT_UNIT,
  .panel = PANEL,
  .panel_rows = MR,
  .lanes = 16,
  .dot_cols = dot_cols,
  .panel_strip = panel_strip,
  .packed_rows = PACK_MR,
  .packed_cols = packed_cols,
  .att_scores = att_scores,
  .att_values = att_values,
};

const kernel_set kernels_avx512 = {
  .id = GEMM_KERNELS_AVX512,
  .name = "avx512",
  .gemm = &gemm_avx512,
  .rows =
    {
      .layernorm = layernorm_avx512,
      .add = add_avx512,
      .gelu_row = gelu_row_avx512,
      .max_finite = max_finite_avx512,
      .exp_sum = exp_sum_avx512,
    },
};
/* ---- int8 products on AVX512-VNNI (kernels/int8.h) ----
** vpdpbusd on u8 x and s8 W: register tiles of up to INT8_VNNI_MR rows of x
** by INT8_VNNI_NR blocks of 16 outputs (one panel of the packed W), per
** group of four values of k TB loads of W and TR broadcasts of four bytes of
** x, TR * TB vpdpbusd, no horizontal reduction.  Measured on AMD Zen 5 (one
** core, W warm in cache): 675-835 GOP/s, about the 813 GOP/s that
** vpdpbusd peaks at there.  The first pass over a panel prefetches W
** INT8_PF_GROUPS groups (4 KB) ahead: from memory, a few rows of x run 3-8%
** faster with it (measured 0, 2, 4 and 8 KB). */
#define VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))
#define RN (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC) /* explicit rounding: never an FMA */
#define INT8_VNNI_MR 6                                     /* rows of x ... */
#define INT8_VNNI_NR 4 /* ... by blocks of 16 outputs per tile (24 accumulators) */
#define INT8_PF_GROUPS 16

/* finish_one for the outputs [i, i + 16) inside mask m of TR rows from r:
** the same operations in the same order (explicit rounding: no FMA); W's
** sums, scales and biases of these outputs loaded once for all the rows. */
INLINE VNNI void finish16_vnni(const int8_out *o, int r, int i, __mmask16 m, const __m512i *acc,
                               const int TR) {
  const __m512i wsum = _mm512_maskz_loadu_epi32(m, o->w->sum + i);
  const __m512 wscale = _mm512_maskz_loadu_ps(m, o->w->scale + i);
  const __m512 bias = o->bias ? _mm512_maskz_loadu_ps(m, o->bias + i) : _mm512_setzero_ps();
#pragma GCC unroll 8
  for (int t = 0; t < TR; t++) {
    __m512i a = _mm512_sub_epi32(acc[t],
                                 _mm512_mullo_epi32(_mm512_set1_epi32(o->x->zero[r + t]), wsum));
    if (o->c) {
      _mm512_mask_storeu_epi32(o->c + (size_t)(r + t) * o->ldc + i, m, a);
      continue;
    }
    __m512 s = _mm512_mul_round_ps(_mm512_set1_ps(o->x->scale[r + t]), wscale, RN);
    __m512 v = _mm512_mul_round_ps(_mm512_cvt_roundepi32_ps(a, RN), s, RN);
    if (o->bias) v = _mm512_add_round_ps(v, bias, RN);
    _mm512_mask_storeu_ps(o->y + (size_t)(r + t) * o->ldy + i, m, v);
  }
}

/* acc += u8 x s8 in groups of four (vpdpbusd).  Written as asm so that the
** compiler sees the accumulator as one in-out register: with the intrinsic,
** GCC 12 copies every accumulator through another register (and the stack)
** on each step, which halved the kernel's speed. */
INLINE VNNI __m512i dpbusd(__m512i acc, __m512i u8, __m512i s8) {
  __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u8), "v"(s8));
  return acc;
}

/* TR rows of x (from row r) by TB blocks of 16 outputs (from block b, the
** first at wb, KG * 64 bytes apart): per group of four values of k, TB
** loads of W and TR broadcasts of four bytes of x, TR * TB vpdpbusd. */
INLINE VNNI void tile_vnni(const int8_out *o, const uint8_t *x, size_t ldq, const int8_t *wb, int r,
                           int b, int i1, int pf, const int TR, const int TB) {
  __m512i acc[INT8_VNNI_MR][INT8_VNNI_NR];
#pragma GCC unroll 8
  for (int m = 0; m < TR; m++)
#pragma GCC unroll 4
    for (int z = 0; z < TB; z++) acc[m][z] = _mm512_setzero_si512();
  const size_t KG = ldq / 4;
  for (size_t g = 0; g < KG; g++) {
    __m512i w[INT8_VNNI_NR];
    if (pf) /* the first pass over these columns: W ahead, from memory */
#pragma GCC unroll 4
      for (int z = 0; z < 4; z++)
        _mm_prefetch((const char *)(wb + (g + INT8_PF_GROUPS) * INT8_GROUP_BYTES + z * 64),
                     _MM_HINT_T0);
#pragma GCC unroll 4
    for (int z = 0; z < TB; z++)
      w[z] = _mm512_loadu_si512((const void *)(wb + g * INT8_GROUP_BYTES + z * 64));
#pragma GCC unroll 8
    for (int m = 0; m < TR; m++) {
      int32_t quad;
      memcpy(&quad, x + (size_t)m * ldq + g * 4, 4);
      __m512i xb = _mm512_set1_epi32(quad);
#pragma GCC unroll 4
      for (int z = 0; z < TB; z++) acc[m][z] = dpbusd(acc[m][z], xb, w[z]);
    }
  }
#pragma GCC unroll 4
  for (int z = 0; z < TB; z++) {
    int i = (b + z) * 16, n = i1 - i < 16 ? i1 - i : 16;
    __m512i col[INT8_VNNI_MR];
#pragma GCC unroll 8
    for (int m = 0; m < TR; m++) col[m] = acc[m][z];
    if (n > 0) finish16_vnni(o, r, i, (__mmask16)((1u << n) - 1), col, TR);
  }
}

VNNI static void int8_unit_vnni(const int8_out *o, int r0, int r1, int i0, int i1) {
  const uint8_t *x = o->x->q;
  const size_t ldq = (size_t)o->x->ldq;
  const int b1 = (i1 + 15) / 16;
  for (int b = i0 / 16; b < b1; b += INT8_VNNI_NR) {
    const int8_t *wb = int8_block_at(o->w, b);
    /* tiles of nearly equal height (8 rows: 4 + 4, not 6 + 2), always a
    ** whole panel wide (the packed W is zero past n: a last panel's extra
    ** outputs are computed and not stored; one tile width keeps the
    ** kernel's instances few: clang's sanitizer builds took minutes on 24) */
    const int nt = (r1 - r0 + INT8_VNNI_MR - 1) / INT8_VNNI_MR;
    for (int i = 0, r = r0, mr; i < nt; i++, r += mr) {
      mr = kernels_tile_rows(r1, r, i, nt);
      const uint8_t *xr = x + (size_t)r * ldq;
      switch (mr) {
#define T(a) \
  case a: tile_vnni(o, xr, ldq, wb, r, b, i1, r == r0, a, INT8_VNNI_NR); break;
        T(1) T(2) T(3) T(4) T(5) T(6)
#undef T
      }
    }
  }
  _mm256_zeroupper();
}
/* Quantizing a row of x (int8_kernel_table.row_range / row_codes): 16
** floats at a time; min, max, the product by 0, cvtps2dq (round to nearest
** even) and the clamp give the very numbers of qgemm.c's loops. */
VNNI static void row_range_avx512(const float *row, int k, float *lo, float *hi, float *bad) {
  __m512 vlo = _mm512_setzero_ps(), vhi = vlo, vbad = vlo;
  for (int j = 0; j < k; j += 16) {
    __mmask16 m = tail16(k - j);
    __m512 v = _mm512_maskz_loadu_ps(m, row + j); /* lanes past k: 0, inside the range */
    vlo = _mm512_min_ps(vlo, v);
    vhi = _mm512_max_ps(vhi, v);
    vbad = _mm512_add_ps(vbad, _mm512_mul_ps(v, _mm512_setzero_ps()));
  }
  *lo = _mm512_reduce_min_ps(vlo);
  *hi = _mm512_reduce_max_ps(vhi);
  *bad = _mm512_reduce_add_ps(vbad);
}

VNNI static void row_codes_avx512(const float *row, int k, float inv, int32_t z, uint8_t *q8) {
  const __m512 vinv = _mm512_set1_ps(inv);
  const __m512i vz = _mm512_set1_epi32(z), v0 = _mm512_setzero_si512(),
                v255 = _mm512_set1_epi32(255);
  for (int j = 0; j < k; j += 16) {
    __mmask16 m = tail16(k - j);
    __m512i c = _mm512_add_epi32(_mm512_cvtps_epi32(
                                   _mm512_mul_ps(_mm512_maskz_loadu_ps(m, row + j), vinv)),
                                 vz);
    c = _mm512_min_epi32(_mm512_max_epi32(c, v0), v255);
    _mm_mask_storeu_epi8(q8 + j, m, _mm512_cvtepi32_epi8(c));
  }
}

const int8_kernel_table int8_avx512vnni = {QG_AVX512VNNI, INT8_VNNI_MR, int8_unit_vnni,
                                           row_range_avx512, row_codes_avx512};
/* ---- bf16 kernel (AVX512-BF16) ----
** The packed kernel's loop on bf16 panels (gemm_pack_bf16: per pair of k,
** 64 outputs' two weights side by side, so 64 bytes hold 16 outputs' pair):
** tiles of up to BF16_MR rows of x by the panel's 64 outputs, each step a
** broadcast pair of x and vdpbf16ps into 24 accumulators.  k runs in chunks
** of BF16_KC pairs (64 x 384 x 4 bytes = 96 KB, in L2 for the tiles after
** the first); a chunk after the first starts from the sums in y, so that
** every output sums its pairs in order from the first (the bits of
** kernels.h's bf16_kernel). */
#define AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,fma")))
#define BF16_MR 6
#define BF16_KC 384
#define BF16_AHEAD 12

INLINE AVX512BF16 void bf16_tile(const int R, const uint32_t *x, int ldx, const uint32_t *Wp,
                                 int k0, int k1, float *y, int ldy, const __mmask16 *m, int carry,
                                 prefetch *pf, prefetch *own) {
  __m512 c[BF16_MR][PACK_NZ];
#pragma GCC unroll 6
  for (int i = 0; i < R; i++)
#pragma GCC unroll 4
    for (int z = 0; z < PACK_NZ; z++)
      c[i][z] = carry ? _mm512_maskz_loadu_ps(m[z], y + (size_t)i * ldy + 16 * z)
                      : _mm512_setzero_ps();
  for (int k = k0; k < k1; k++) {
    prefetch_step_l1(own, k);
    prefetch_step_l1(pf, k);
    __m512i b[PACK_NZ];
#pragma GCC unroll 4
    for (int z = 0; z < PACK_NZ; z++)
      b[z] = _mm512_loadu_si512((const void *)(Wp + (size_t)k * GEMM_PACK + 16 * z));
#pragma GCC unroll 6
    for (int i = 0; i < R; i++) {
      __m512i a = _mm512_set1_epi32((int)x[(size_t)i * ldx + k]);
#pragma GCC unroll 4
      for (int z = 0; z < PACK_NZ; z++)
        c[i][z] = _mm512_dpbf16_ps(c[i][z], (__m512bh)a, (__m512bh)b[z]);
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < R; i++)
#pragma GCC unroll 4
    for (int z = 0; z < PACK_NZ; z++)
      _mm512_mask_storeu_ps(y + (size_t)i * ldy + 16 * z, m[z], c[i][z]);
}

AVX512BF16 static void bf16_cols(float *y, const uint32_t *xh, const uint32_t *Wh, int T, int N,
                                 int KP, int c0, int c1, int next) {
  const long panel_words = (long)KP * GEMM_PACK;
  int nt = (T + BF16_MR - 1) / BF16_MR;
  for (int n0 = c0; n0 < c1; n0 += GEMM_PACK) {
    const uint32_t *wp = Wh + (size_t)(n0 / GEMM_PACK) * (size_t)panel_words;
    __mmask16 m[PACK_NZ];
    for (int z = 0; z < PACK_NZ; z++) m[z] = tail16((c1 < N ? c1 : N) - n0 - 16 * z);
    int after = n0 + GEMM_PACK < c1 ? n0 + GEMM_PACK : next; /* this thread's next panel */
    for (int k0 = 0; k0 < KP; k0 += BF16_KC) {
      int k1 = KP - k0 < BF16_KC ? KP : k0 + BF16_KC;
      const uint32_t *nx = NULL; /* the chunk after this one */
      long nk = 0;
      if (k1 < KP) {
        nx = wp + (size_t)k1 * GEMM_PACK;
        nk = KP - k1 < BF16_KC ? KP - k1 : BF16_KC;
      } else if (after < N) {
        nx = Wh + (size_t)(after / GEMM_PACK) * (size_t)panel_words;
        nk = KP < BF16_KC ? KP : BF16_KC;
      }
      prefetch pf = prefetch_plan(nx, nk * GEMM_PACK * (long)sizeof(uint32_t),
                                  (long)nt * (k1 - k0));
      prefetch own = prefetch_plan(wp + (size_t)(k0 + BF16_AHEAD) * GEMM_PACK,
                                   (long)(k1 - k0 - BF16_AHEAD) * GEMM_PACK *
                                     (long)sizeof(uint32_t),
                                   k1 - k0 - BF16_AHEAD);
      prefetch none = prefetch_plan(NULL, 0, 1);
      for (int t = 0, done = 0; t < nt; t++) {
        int R = kernels_tile_rows(T, done, t, nt);
        const uint32_t *xt = xh + (size_t)done * KP;
        float *yt = y + (size_t)done * N + n0;
        prefetch *o = t == 0 ? &own : &none;
        switch (R) {
#define TILE(r) \
  case r: bf16_tile(r, xt, KP, wp, k0, k1, yt, N, m, k0 > 0, &pf, o); break;
          TILE(1) TILE(2) TILE(3) TILE(4) TILE(5) TILE(6)
#undef TILE
        }
        done += R;
      }
    }
  }
}

/* kernels_bf16_round on 16 floats at a time (the same integer steps) */
AVX512BF16 static void bf16_rows(uint32_t *xh, const float *x, int T, int K) {
  const __m512i abs = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  const __m512i sign = _mm512_set1_epi32((int)0x80000000u), half = _mm512_set1_epi32(0x7fff);
  const __m512i one = _mm512_set1_epi32(1), quiet = _mm512_set1_epi32(0x40);
  int KP = (K + 1) / 2;
  for (int t = 0; t < T; t++) {
    const float *xr = x + (size_t)t * K;
    uint16_t *o = (uint16_t *)(xh + (size_t)t * KP);
    for (int k = 0; k < K; k += 16) {
      __mmask16 m = tail16(K - k);
      __m512i u = _mm512_maskz_loadu_epi32(m, xr + k);
      __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs), inf);
      __mmask16 den = _mm512_testn_epi32_mask(u, inf);
      u = _mm512_mask_and_epi32(u, den, u, sign);
      __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, half),
                                                     _mm512_and_si512(_mm512_srli_epi32(u, 16),
                                                                      one)),
                                    16);
      r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), quiet);
      _mm256_mask_storeu_epi16(o + k, m, _mm512_cvtepi32_epi16(r));
    }
    if (K % 2) o[K] = 0; /* the last pair's high half */
  }
}

const bf16_kernel bf16_avx512bf16 = {"avx512bf16", BF16_MR, bf16_cols, bf16_rows};
#endif /* BF_HAVE_AVX512 */
