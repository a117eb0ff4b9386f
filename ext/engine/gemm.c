/*
** gemm.c — y = x W^T: which kernels run (gemm_kernels: AVX-512 here, AVX2 in
** gemm_avx2.c, or none), the AVX-512 kernels, and the one job splitter that
** cuts a product into units of work for the threads of a pool (pool.c) and
** runs either set of kernels through its gemm_kernel_table.  See gemm.h for
** what is computed and when each kernel is used.
**
** Dot kernel (rows of x <= GEMM_DOT_MAX_T): a tile of 3 rows of W x 8 tokens
** keeps 24 accumulators of 16 lanes; sums run over K and are reduced at the
** end.  Each row of W comes from memory once and is reused from L1.
**
** Panel kernel (more rows): for each strip of PANEL = 48 output columns,
**   1. pack: Wp[k][j] = W[n0 + j][k] (16x16 transposes in registers; rows past
**      the end of W and k past K are zero), 48*K floats, stays in L2;
**   2. for every MR = 8 rows of x: c[i][0..48) += x[i][k] * Wp[k][0..48) over
**      k, 24 accumulators, one broadcast of x and three loads of Wp per 3 FMAs;
**   while the strip this thread will likely take next is prefetched, spread
**   over the arithmetic.  (Strips of 32 or 64 columns, 12 or 6 rows, measured
**   3-7% slower on a bert-base layer.)
** Float accumulation in a fixed order per output element (any order is as
** exact as a BLAS; results do not depend on the number of threads).
*/
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "avx2.h"
#include "avx512.h"
#include "gemm.h"
#include "util.h"

void gemm_scratch_free(gemm_scratch *s) {
  if (!s) return;
  for (int i = 0; i < BF_POOL_MAX_THREADS; i++) free(s->panel[i]);
  free(s->units);
  memset(s, 0, sizeof *s);
}

/* ----------------------------------------------------------- dispatch */

/* The best kernels the CPU has (libgcc's cpuid checks also ask the OS, via
** XGETBV, whether it saves the ymm/zmm registers). */
static int cpu_kernels(void) {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
#ifdef BF_HAVE_AVX512
  if (__builtin_cpu_supports("avx512f")) return GEMM_KERNELS_AVX512;
#endif
#ifdef BF_HAVE_AVX2
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return GEMM_KERNELS_AVX2;
#endif
#endif
  return GEMM_KERNELS_OPENBLAS;
}

static const char *const kernel_names[] = {"openblas", "avx2", "avx512"}; /* GEMM_KERNELS_* */

const char *gemm_kernels_name(int kernels) {
  return kernels >= 0 && kernels <= GEMM_KERNELS_AVX512 ? kernel_names[kernels] : "?";
}

int gemm_kernels(void) {
  static atomic_int known = -1;
  int v = atomic_load(&known);
  if (v < 0) {
    /* the cap from the environment (tests, debugging): see gemm.h */
    int cap = bf_env_choice("BERTFILL_KERNELS", kernel_names, 3, GEMM_KERNELS_AVX512);
    if (bf_env_flag("BERTFILL_NO_AVX512", 0)) cap = GEMM_KERNELS_OPENBLAS;
    v = cpu_kernels();
    if (v > cap) v = cap;
    atomic_store(&known, v);
  }
  return v;
}

int gemm_have_avx512(void) { return gemm_kernels() == GEMM_KERNELS_AVX512; }

/* ------------------------------------------------------------ kernels */

#ifdef BF_HAVE_AVX512
#define INLINE static inline __attribute__((always_inline))

/* ---- dot kernel ---- */
#define TILE_R 3 /* rows of W per tile */
#define TILE_J 8 /* tokens per tile: 24 accumulators + 3 rows of W + 1 token in registers */
#define DOT_UNIT (8 * TILE_R) /* least columns per unit of work */

/* y[j*ldy + i] = dot(w[i*K ...], x[j*K ...]) for i < R rows of W, j < J tokens
** (R and J are constants after inlining, so acc[][] lives in registers). */
INLINE AVX512 void dot_tile(float *y, int ldy, const float *x, const float *w, int K, const int R,
                            const int J) {
  __m512 acc[TILE_R][TILE_J], wv[TILE_R];
#pragma GCC unroll 8
  for (int i = 0; i < R; i++)
#pragma GCC unroll 8
    for (int j = 0; j < J; j++) acc[i][j] = _mm512_setzero_ps();
  for (int k = 0; k < K; k += 16) {
    __mmask16 m = tail16(K - k);
#pragma GCC unroll 8
    for (int i = 0; i < R; i++) wv[i] = _mm512_maskz_loadu_ps(m, w + (size_t)i * K + k);
#pragma GCC unroll 8 /* the next tile's rows of W, which follow these in memory */
    for (int i = 0; i < R; i++)
      _mm_prefetch((const char *)(w + (size_t)(R + i) * K + k), _MM_HINT_T0);
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

/* Tokens [t, t + J) against rows [o, o + R) of W, J (1..TILE_J) and R (1 or
** TILE_R) made constants by the switch. */
INLINE AVX512 void dot_tile_any(float *y, int N, const float *x, const float *w, int K, int J,
                                const int R) {
  switch (J) {
#define J_(j) \
  case j: dot_tile(y, N, x, w, K, R, j); break;
    J_(1) J_(2) J_(3) J_(4) J_(5) J_(6) J_(7) J_(8)
#undef J_
  }
}

/* Columns [o0, o1) of y[T,N] = x[T,K] W[N,K]^T.  The T tokens are cut into
** ceil(T / TILE_J) tiles of nearly equal size (17 tokens: 6 + 6 + 5, not
** 8 + 8 + 1): a tile of few tokens has too few accumulators to hide the
** FMA latency. */
AVX512 static void dot_cols(float *y, const float *x, const float *W, int T, int N, int K, int o0,
                            int o1) {
  const int nt = (T + TILE_J - 1) / TILE_J;
  int o = o0;
  for (; o + TILE_R <= o1; o += TILE_R)
    for (int i = 0, t = 0; i < nt; i++) {
      int J = (T - t + (nt - i) - 1) / (nt - i);
      dot_tile_any(y + (size_t)t * N + o, N, x + (size_t)t * K, W + (size_t)o * K, K, J, TILE_R);
      t += J;
    }
  for (; o < o1; o++)
    for (int i = 0, t = 0; i < nt; i++) {
      int J = (T - t + (nt - i) - 1) / (nt - i);
      dot_tile_any(y + (size_t)t * N + o, N, x + (size_t)t * K, W + (size_t)o * K, K, J, 1);
      t += J;
    }
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

/* Prefetching the rows of W that this thread will most likely pack next (they
** are contiguous), spread over the arithmetic of the current strip so that
** memory and arithmetic overlap: one cache line every (mask + 1) steps of k. */
typedef struct prefetch {
  const char *next; /* next line */
  long left;        /* lines still to prefetch */
  int mask;
} prefetch;

INLINE void prefetch_step(prefetch *p, int k) {
  if (p->left > 0 && (k & p->mask) == 0) {
    _mm_prefetch(p->next, _MM_HINT_T0);
    p->next += 64;
    p->left--;
  }
}

/* y[i*ldy + 0..PANEL) = sum_k x[i*ldx + k] * Wp[k][0..PANEL) for i < R (a
** constant after inlining); lanes outside m[z] (columns 16z..16z+15) are not stored. */
INLINE AVX512 void panel_tile(const int R, const float *x, int ldx, const float *Wp, int K,
                              float *y, int ldy, const __mmask16 *m, prefetch *pf) {
  __m512 c[MR][PANEL_NZ];
#pragma GCC unroll 8
  for (int i = 0; i < R; i++)
#pragma GCC unroll 4
    for (int z = 0; z < PANEL_NZ; z++) c[i][z] = _mm512_setzero_ps();
  for (int k = 0; k < K; k++) {
    prefetch_step(pf, k);
    __m512 b[PANEL_NZ];
#pragma GCC unroll 4
    for (int z = 0; z < PANEL_NZ; z++) b[z] = _mm512_load_ps(Wp + (size_t)k * PANEL + 16 * z);
#pragma GCC unroll 8
    for (int i = 0; i < R; i++) {
      __m512 a = _mm512_set1_ps(x[(size_t)i * ldx + k]);
#pragma GCC unroll 4
      for (int z = 0; z < PANEL_NZ; z++) c[i][z] = _mm512_fmadd_ps(a, b[z], c[i][z]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; i++)
#pragma GCC unroll 4
    for (int z = 0; z < PANEL_NZ; z++)
      _mm512_mask_storeu_ps(y + (size_t)i * ldy + 16 * z, m[z], c[i][z]);
}

/* Strip [n0, n0 + nr) of y[T,N] = x[T,K] W[N,K]^T, through the panel Wp;
** meanwhile rows [next, next + PANEL) of W (if next < N) are prefetched. */
AVX512 static void panel_strip(float *Wp, float *y, const float *x, const float *W, int T, int N,
                               int K, int n0, int nr, int next) {
  pack_panel(Wp, W, K, n0, nr);
  __mmask16 m[PANEL_NZ];
  for (int z = 0; z < PANEL_NZ; z++) m[z] = tail16(nr - 16 * z);
  prefetch pf = {0};
  if (next < N) {
    int rows = N - next < PANEL ? N - next : PANEL, tiles = (T + MR - 1) / MR;
    pf.next = (const char *)(W + (size_t)next * K);
    pf.left = ((long)rows * K * (long)sizeof(float) + 63) / 64;
    long steps = (long)tiles * K; /* steps of k in this strip: one line every 2^s of them */
    for (int s = 0; s < 4 && (steps >> (s + 1)) >= pf.left; s++) pf.mask = (pf.mask << 1) | 1;
  }
  for (int t = 0; t < T; t += MR) {
    const float *xt = x + (size_t)t * K;
    float *yt = y + (size_t)t * N + n0;
    switch (T - t < MR ? T - t : MR) {
#define TILE(r) \
  case r: panel_tile(r, xt, K, Wp, K, yt, N, m, &pf); break;
      TILE(1) TILE(2) TILE(3) TILE(4) TILE(5) TILE(6) TILE(7) TILE(8)
#undef TILE
    }
  }
}

static const gemm_kernel_table avx512_table = {
  .dot_max_t = GEMM_DOT_MAX_T,
  .dot_tile = TILE_R,
  .dot_unit = DOT_UNIT,
  .panel = PANEL,
  .panel_rows = MR,
  .lanes = 16,
  .dot_cols = dot_cols,
  .panel_strip = panel_strip,
};
#endif /* BF_HAVE_AVX512 */

/* The table of the kernels gemm_kernels() chose, or NULL: none (OpenBLAS). */
static const gemm_kernel_table *kernel_table(void) {
  switch (gemm_kernels()) {
#ifdef BF_HAVE_AVX512
    case GEMM_KERNELS_AVX512: return &avx512_table;
#endif
#ifdef BF_HAVE_AVX2
    case GEMM_KERNELS_AVX2: return &gemm_avx2_table;
#endif
    default: return NULL;
  }
}

/* ---- one job: nout products of the same x, split into units of work ---- */

/* A unit of work: columns [c0, c1) of output o, rows [t0, t1) of x. */
typedef struct gemm_unit {
  int o, c0, c1, t0, t1;
} gemm_unit;

typedef struct gemm_job {
  const gemm_kernel_table *kt;
  gemm_scratch *s; /* panel[tid]: the panel buffer of each thread */
  const float *x;
  int T, K, nout, nt;
  int panel; /* 1: panel kernel, 0: dot kernel */
  gemm_out out[GEMM_MAX_OUT];
  const gemm_unit *units;
  int nunits;
} gemm_job;

static void run_unit(void *arg, int u, int tid) {
  gemm_job *j = arg;
  const gemm_unit *w = &j->units[u];
  const gemm_out *g = &j->out[w->o];
  const float *x = j->x + (size_t)w->t0 * j->K;
  float *y = g->y + (size_t)w->t0 * g->n;
  int T = w->t1 - w->t0;
  if (j->panel) {
    float *wp = j->s->panel[tid];
    /* meanwhile prefetch the strip this thread most likely takes next: the
    ** unit after the ones the other threads are taking now */
    int next = g->n, v = u + j->nt;
    if (v < j->nunits && j->units[v].o == w->o && j->units[v].c0 > w->c0) next = j->units[v].c0;
    j->kt->panel_strip(wp, y, x, g->w, T, g->n, j->K, w->c0, w->c1 - w->c0, next);
  } else {
    j->kt->dot_cols(y, x, g->w, T, g->n, j->K, w->c0, w->c1);
  }
}

/* The units of a job, in the order they are taken, into units (at most
** max_units; returns how many, or -1 if more were needed).  The threads take
** them dynamically, so that the last unit of each thread ends at nearly the
** same time they shrink towards the end:
**   - dot kernel: runs of columns, each a 1/(2 nt) share of what is left (at
**     least kt->dot_unit, a multiple of kt->dot_tile), long runs first for
**     the hardware prefetchers;
**   - panel kernel: one strip of kt->panel columns each, but the last nt
**     strips of the job are cut into two halves of the rows (each half packs
**     the strip again, which costs far less than a thread waiting). */
static int plan_units(const gemm_kernel_table *kt, gemm_unit *units, int max_units,
                      const gemm_out *out, int nout, int T, int panel, int nt) {
  int n = 0;
  if (panel) {
    const int strip = kt->panel, mr = kt->panel_rows;
    int strips = 0;
    for (int o = 0; o < nout; o++) strips += (out[o].n + strip - 1) / strip;
    /* strips from this index on (counted over the whole job) are split */
    int split_from = nt > 1 && T >= 2 * mr ? (strips - nt < 0 ? 0 : strips - nt) : strips;
    int s = 0;
    for (int o = 0; o < nout; o++)
      for (int c0 = 0; c0 < out[o].n; c0 += strip, s++) {
        int c1 = c0 + strip < out[o].n ? c0 + strip : out[o].n;
        if (s < split_from) {
          if (n >= max_units) return -1;
          units[n++] = (gemm_unit){o, c0, c1, 0, T};
        } else {
          int mid = (T / 2 + mr - 1) / mr * mr; /* a multiple of the register tile */
          if (n + 2 > max_units) return -1;
          units[n++] = (gemm_unit){o, c0, c1, 0, mid};
          units[n++] = (gemm_unit){o, c0, c1, mid, T};
        }
      }
    return n;
  }
  long total = 0, done = 0;
  for (int o = 0; o < nout; o++) total += out[o].n;
  for (int o = 0; o < nout; o++)
    for (int c0 = 0; c0 < out[o].n;) {
      long left = total - done, size = (left + 2L * nt - 1) / (2L * nt);
      size = (size + kt->dot_tile - 1) / kt->dot_tile * kt->dot_tile;
      if (size < kt->dot_unit) size = kt->dot_unit;
      int c1 = out[o].n - c0 <= size ? out[o].n : c0 + (int)size;
      if (n >= max_units) return -1;
      units[n++] = (gemm_unit){o, c0, c1, 0, T};
      done += c1 - c0;
      c0 = c1;
    }
  return n;
}

int gemm_xwt(bf_pool *p, gemm_scratch *s, int nthreads, const float *x, int T, int K, int nout,
             const gemm_out *out) {
  const gemm_kernel_table *kt = kernel_table();
  if (!kt) return GEMM_NO_KERNEL;
  if (nout < 1 || nout > GEMM_MAX_OUT || T < 1 || K < 1) return GEMM_NO_KERNEL;
  if (nthreads < 1) nthreads = 1;
  if (nthreads > BF_POOL_MAX_THREADS) nthreads = BF_POOL_MAX_THREADS;
  long work = 0, cols = 0;
  for (int o = 0; o < nout; o++) {
    work += (long)out[o].n * K;
    cols += out[o].n;
  }
  if (work < 65536 || !p || !s) nthreads = 1; /* too little to be worth waking anyone */
  int panel = T > kt->dot_max_t;

  /* panel buffers: one per thread that may take part (kept in s), or one of
  ** this call's own without s */
  size_t panel_floats = ((size_t)K + kt->lanes) * kt->panel;
  float *solo = NULL;
  if (panel && !s) {
    solo = aligned_alloc(64, panel_floats * sizeof(float));
    if (!solo) return GEMM_NOMEM;
  } else if (panel) {
    for (int t = 0; t < nthreads; t++) {
      if (s->panel_cap[t] >= panel_floats) continue;
      float *b = aligned_alloc(64, panel_floats * sizeof(float));
      if (!b) return GEMM_NOMEM;
      free(s->panel[t]);
      s->panel[t] = b;
      s->panel_cap[t] = panel_floats;
    }
  }

  if (nthreads == 1) { /* this thread does it all, strip after strip */
    float *wp = s ? s->panel[0] : solo;
    for (int o = 0; o < nout; o++) {
      if (!panel) {
        kt->dot_cols(out[o].y, x, out[o].w, T, out[o].n, K, 0, out[o].n);
        continue;
      }
      for (int c0 = 0; c0 < out[o].n; c0 += kt->panel) {
        int c1 = c0 + kt->panel < out[o].n ? c0 + kt->panel : out[o].n;
        kt->panel_strip(wp, out[o].y, x, out[o].w, T, out[o].n, K, c0, c1 - c0, c1);
      }
    }
    free(solo);
    return GEMM_OK;
  }

  /* more threads (and so a pool and s): the units, planned into s's table */
  long most = 2 * (cols / (panel ? kt->panel : kt->dot_unit) + 2L * nout + nthreads) + 16;
  if (most > INT32_MAX / (long)sizeof(gemm_unit)) return GEMM_NOMEM;
  if ((size_t)most > s->units_cap) {
    gemm_unit *units = malloc((size_t)most * sizeof *units);
    if (!units) return GEMM_NOMEM;
    free(s->units);
    s->units = units;
    s->units_cap = (size_t)most;
  }
  gemm_job j;
  memset(&j, 0, sizeof j);
  j.kt = kt;
  j.s = s;
  j.x = x;
  j.T = T;
  j.K = K;
  j.nout = nout;
  j.nt = nthreads;
  j.panel = panel;
  for (int o = 0; o < nout; o++) j.out[o] = out[o];
  j.units = s->units;
  j.nunits = plan_units(kt, s->units, (int)most, out, nout, T, panel, nthreads);
  if (j.nunits < 0) return GEMM_NOMEM;
  bf_pool_run(p, nthreads, j.nunits, run_unit, &j);
  return GEMM_OK;
}
