/*
** gemm_avx2.c — y = x W^T with AVX2 and FMA, for CPUs without AVX-512
** (gemm.c's gemm_xwt runs them, through gemm_avx2_table, when gemm_kernels()
** chose GEMM_KERNELS_AVX2; its job splitter cuts the work into units for the
** threads).  The same two kernels as gemm.c, in 8-lane form for the 16 ymm
** registers, W read in place:
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
*/
#include "avx2.h"
#include "gemm.h"

#ifdef BF_HAVE_AVX2
#define INLINE static inline __attribute__((always_inline))

/* Prefetching the rows of W that this thread will most likely read next
** (they are contiguous), spread over the arithmetic of the current rows so
** that memory and arithmetic overlap: per lines every (mask + 1) steps. */
typedef struct prefetch {
  const char *next; /* next line */
  long left;        /* lines still to prefetch */
  int mask, per;
} prefetch;

INLINE void prefetch_step(prefetch *p, int k) {
  if (p->left > 0 && (k & p->mask) == 0)
    for (int i = 0; i < p->per; i++) {
      _mm_prefetch(p->next, _MM_HINT_T0);
      p->next += 64;
      p->left--;
    }
}

/* A prefetch of the n floats at next over about steps steps. */
static prefetch prefetch_plan(const float *next, long n, long steps) {
  prefetch p = {(const char *)next, (n * (long)sizeof(float) + 63) / 64, 0, 1};
  if (steps < 1) steps = 1;
  if (p.left > steps) p.per = (int)((p.left + steps - 1) / steps);
  for (int s = 0; s < 4 && (steps >> (s + 1)) >= p.left; s++) p.mask = (p.mask << 1) | 1;
  return p;
}

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
    prefetch_step(pf, k >> 4);
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
  prefetch pf = prefetch_plan(w + (size_t)R * K, (long)next * K,
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
    prefetch_step(pf, k);
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
  prefetch pf = prefetch_plan(W + (size_t)next * K, (long)rows * K, (T + MR - 1) / MR * (long)K);
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

/* The job splitter (gemm.c) runs them from this table. */
const gemm_kernel_table gemm_avx2_table = {
  .dot_max_t = GEMM_AVX2_DOT_MAX_T,
  .dot_tile = TILE_R,
  .dot_unit = DOT_UNIT,
  .panel = PANEL,
  .panel_rows = MR,
  .lanes = 8,
  .dot_cols = dot_cols,
  .panel_strip = panel_strip,
};
#endif /* BF_HAVE_AVX2 */
