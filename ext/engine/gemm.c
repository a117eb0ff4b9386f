/*
** gemm.c — y = x W^T with AVX-512, and the thread pool that runs it.
** See gemm.h for what is computed and when each kernel is used.
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
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gemm.h"

#define MAX_THREADS 16

/* ------------------------------------------------------------ the pool */

typedef struct helper_arg { struct bf_pool *p; int tid; unsigned seen; } helper_arg;

struct bf_pool {
  int n;                          /* helper threads started (the caller is one more) */
  pthread_t th[MAX_THREADS];
  helper_arg args[MAX_THREADS];
  pthread_mutex_t mu;
  pthread_cond_t cv;
  atomic_uint gen;                /* bumped once per job */
  atomic_int pending;             /* helpers still on the current job */
  atomic_int quit;
  pid_t pid;                      /* process that started the helpers */
  /* the current job */
  int nt;                         /* threads taking part, caller included */
  int nunits;
  atomic_int next;                /* next unit to take */
  bf_unit_fn fn;
  void *arg;
  /* panel buffers of the GEMM, one per thread (tid) */
  float *wp[MAX_THREADS + 1];
  size_t wp_cap[MAX_THREADS + 1];  /* floats */
  struct xwt_part *part;          /* the GEMM's units of work (gemm_xwt) */
  size_t part_cap;
};

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

static void take_units(bf_pool *p, int tid) {
  int u;
  while ((u = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed)) < p->nunits)
    p->fn(p->arg, u, tid);
}

/* A helper spins briefly for the next job (the products of a forward pass
** come every few tens of microseconds), yielding the core now and then in
** case the caller needs it, then sleeps on the condition variable. */
#define SPIN_NS 500000

static void *helper_main(void *arg) {
  helper_arg *a = arg;
  bf_pool *p = a->p;
  unsigned seen = a->seen;
  for (;;) {
    uint64_t t0 = now_ns();
    for (int spins = 1; atomic_load(&p->gen) == seen && !atomic_load(&p->quit); spins++) {
      cpu_relax();
      if (spins % 64 == 0) sched_yield();
      if (spins % 64 == 0 && now_ns() - t0 > SPIN_NS) {
        pthread_mutex_lock(&p->mu);
        while (atomic_load(&p->gen) == seen && !atomic_load(&p->quit)) pthread_cond_wait(&p->cv, &p->mu);
        pthread_mutex_unlock(&p->mu);
      }
    }
    if (atomic_load(&p->quit)) return NULL;
    seen = atomic_load(&p->gen);
    if (a->tid < p->nt) take_units(p, a->tid);
    atomic_fetch_sub(&p->pending, 1);
  }
}

bf_pool *bf_pool_new(void) {
  bf_pool *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  if (pthread_mutex_init(&p->mu, NULL) != 0) { free(p); return NULL; }
  if (pthread_cond_init(&p->cv, NULL) != 0) { pthread_mutex_destroy(&p->mu); free(p); return NULL; }
  p->pid = getpid();
  return p;
}

void bf_pool_free(bf_pool *p) {
  if (!p) return;
  if (p->pid == getpid()) {  /* after fork() the helpers are the parent's: leave them */
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->quit, 1);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n; i++) pthread_join(p->th[i], NULL);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
  }
  for (int i = 0; i <= MAX_THREADS; i++) free(p->wp[i]);
  free(p->part);
  free(p);
}

/* Threads (caller included) that can take part: starts helpers up to want-1. */
static int pool_grow(bf_pool *p, int want) {
  if (want > MAX_THREADS) want = MAX_THREADS;
  if (want <= 1 || !p || p->pid != getpid()) return 1;  /* a child after fork(): no helpers */
  while (p->n < want - 1) {
    helper_arg *a = &p->args[p->n];
    a->p = p; a->tid = p->n + 1; a->seen = atomic_load(&p->gen);
    if (pthread_create(&p->th[p->n], NULL, helper_main, a) != 0) break;
    p->n++;
  }
  return p->n + 1 < want ? p->n + 1 : want;
}

void bf_pool_run(bf_pool *p, int nthreads, int nunits, bf_unit_fn fn, void *arg) {
  if (nunits <= 0) return;
  if (nthreads > nunits) nthreads = nunits;
  int nt = pool_grow(p, nthreads);
  if (nt <= 1) {
    for (int u = 0; u < nunits; u++) fn(arg, u, 0);
    return;
  }
  p->nt = nt; p->nunits = nunits; p->fn = fn; p->arg = arg;
  atomic_store(&p->next, 0);
  atomic_store(&p->pending, p->n);
  pthread_mutex_lock(&p->mu);
  atomic_fetch_add(&p->gen, 1);
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  take_units(p, 0);
  for (int spins = 1; atomic_load(&p->pending) > 0; spins++) {
    cpu_relax();
    if (spins % 64 == 0) sched_yield();  /* a helper may be waiting for this core */
  }
}

/* ------------------------------------------------------------ kernels */

#if defined(__x86_64__) && defined(__GNUC__) && !defined(BF_NO_AVX512)
#include <immintrin.h>
#define AVX512 __attribute__((target("avx512f,fma")))
#define INLINE static inline __attribute__((always_inline))

int gemm_have_avx512(void) {
  static atomic_int known = -1;
  int v = atomic_load(&known);
  if (v < 0) {
    const char *off = getenv("BERTFILL_NO_AVX512");  /* force the portable path (tests, debugging) */
    __builtin_cpu_init();
    v = __builtin_cpu_supports("avx512f") ? 1 : 0;  /* also checks the OS saves zmm state */
    if (off && *off && strcmp(off, "0") != 0) v = 0;
    atomic_store(&known, v);
  }
  return v;
}

/* Lanes i < n of a 16-wide chunk. */
INLINE __mmask16 tail16(int n) {
  return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

/* ---- dot kernel ---- */
#define TILE_R 3  /* rows of W per tile */
#define TILE_J 8  /* tokens per tile: 24 accumulators + 3 rows of W + 1 token in registers */
#define DOT_UNIT (8 * TILE_R)  /* least columns per unit of work */

/* y[j*ldy + i] = dot(w[i*K ...], x[j*K ...]) for i < R rows of W, j < J tokens
** (R and J are constants after inlining, so acc[][] lives in registers). */
INLINE AVX512 void dot_tile(float *y, int ldy, const float *x, const float *w, int K, const int R, const int J) {
  __m512 acc[TILE_R][TILE_J], wv[TILE_R];
#pragma GCC unroll 8
  for (int i = 0; i < R; i++)
#pragma GCC unroll 8
    for (int j = 0; j < J; j++) acc[i][j] = _mm512_setzero_ps();
  for (int k = 0; k < K; k += 16) {
    __mmask16 m = tail16(K - k);
#pragma GCC unroll 8
    for (int i = 0; i < R; i++) wv[i] = _mm512_maskz_loadu_ps(m, w + (size_t)i * K + k);
#pragma GCC unroll 8  /* the next tile's rows of W, which follow these in memory */
    for (int i = 0; i < R; i++) _mm_prefetch((const char *)(w + (size_t)(R + i) * K + k), _MM_HINT_T0);
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

/* Columns [o0, o1) of y[T,N] = x[T,K] W[N,K]^T. */
AVX512 static void dot_cols(float *y, const float *x, const float *W, int T, int N, int K, int o0, int o1) {
  int o = o0;
  for (; o + TILE_R <= o1; o += TILE_R) {
    const float *w = W + (size_t)o * K;
    int t = 0;
    for (; t + TILE_J <= T; t += TILE_J) dot_tile(y + (size_t)t * N + o, N, x + (size_t)t * K, w, K, TILE_R, TILE_J);
    for (; t + 4 <= T; t += 4) dot_tile(y + (size_t)t * N + o, N, x + (size_t)t * K, w, K, TILE_R, 4);
    for (; t < T; t++)         dot_tile(y + (size_t)t * N + o, N, x + (size_t)t * K, w, K, TILE_R, 1);
  }
  for (; o < o1; o++) {
    const float *w = W + (size_t)o * K;
    int t = 0;
    for (; t + TILE_J <= T; t += TILE_J) dot_tile(y + (size_t)t * N + o, N, x + (size_t)t * K, w, K, 1, TILE_J);
    for (; t + 4 <= T; t += 4) dot_tile(y + (size_t)t * N + o, N, x + (size_t)t * K, w, K, 1, 4);
    for (; t < T; t++)         dot_tile(y + (size_t)t * N + o, N, x + (size_t)t * K, w, K, 1, 1);
  }
}

/* ---- panel kernel ---- */
#define PANEL_NZ 3               /* zmm of output columns per strip (48 columns, 8 rows of x per tile: measured best of 2, 3, 4) */
#define PANEL (16 * PANEL_NZ)    /* output columns per strip */
#define MR (24 / PANEL_NZ)       /* rows of x per register tile: 24 accumulators */
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
        r[j] = row < nr ? _mm512_maskz_loadu_ps(m, W + (size_t)(n0 + row) * K + k) : _mm512_setzero_ps();
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
  const char *next;    /* next line */
  long left;           /* lines still to prefetch */
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
    for (int z = 0; z < PANEL_NZ; z++) _mm512_mask_storeu_ps(y + (size_t)i * ldy + 16 * z, m[z], c[i][z]);
}

/* Strip [n0, n0 + nr) of y[T,N] = x[T,K] W[N,K]^T, through the panel Wp;
** meanwhile rows [next, next + PANEL) of W (if next < N) are prefetched. */
AVX512 static void panel_strip(float *Wp, float *y, const float *x, const float *W,
                               int T, int N, int K, int n0, int nr, int next) {
  pack_panel(Wp, W, K, n0, nr);
  __mmask16 m[PANEL_NZ];
  for (int z = 0; z < PANEL_NZ; z++) m[z] = tail16(nr - 16 * z);
  prefetch pf = { 0 };
  if (next < N) {
    int rows = N - next < PANEL ? N - next : PANEL, tiles = (T + MR - 1) / MR;
    pf.next = (const char *)(W + (size_t)next * K);
    pf.left = ((long)rows * K * (long)sizeof(float) + 63) / 64;
    long steps = (long)tiles * K;  /* steps of k in this strip: one line every 2^s of them */
    for (int s = 0; s < 4 && (steps >> (s + 1)) >= pf.left; s++) pf.mask = (pf.mask << 1) | 1;
  }
  for (int t = 0; t < T; t += MR) {
    const float *xt = x + (size_t)t * K;
    float *yt = y + (size_t)t * N + n0;
    switch (T - t < MR ? T - t : MR) {
#define TILE(r) case r: panel_tile(r, xt, K, Wp, K, yt, N, m, &pf); break;
      TILE(1) TILE(2) TILE(3) TILE(4) TILE(5) TILE(6) TILE(7) TILE(8)
#undef TILE
    }
  }
}

/* ---- one job: nout products of the same x, split into units of work ---- */

/* A unit of work: columns [c0, c1) of output o, rows [t0, t1) of x. */
typedef struct xwt_part { int o, c0, c1, t0, t1; } xwt_part;

typedef struct xwt_job {
  bf_pool *p;
  const float *x;
  int T, K, nout, nt;
  int panel;                /* 1: panel kernel, 0: dot kernel */
  gemm_out out[GEMM_MAX_OUT];
  const xwt_part *part;     /* the units */
  int nparts;
} xwt_job;

AVX512 static void xwt_unit(void *arg, int u, int tid) {
  xwt_job *j = arg;
  const xwt_part *w = &j->part[u];
  const gemm_out *g = &j->out[w->o];
  const float *x = j->x + (size_t)w->t0 * j->K;
  float *y = g->y + (size_t)w->t0 * g->n;
  int T = w->t1 - w->t0;
  if (j->panel) {
    float *wp = j->p->wp[tid];
    /* meanwhile prefetch the strip this thread most likely takes next: the
    ** unit after the ones the other threads are taking now */
    int next = g->n, v = u + j->nt;
    if (v < j->nparts && j->part[v].o == w->o && j->part[v].c0 > w->c0) next = j->part[v].c0;
    panel_strip(wp, y, x, g->w, T, g->n, j->K, w->c0, w->c1 - w->c0, next);
  } else {
    dot_cols(y, x, g->w, T, g->n, j->K, w->c0, w->c1);
  }
}

/* The units of a job, in the order they are taken, into part (at most
** max_parts; returns how many, or -1 if more were needed).  The threads take
** them dynamically, so that the last unit of each thread ends at nearly the
** same time they shrink towards the end:
**   - dot kernel: runs of columns, each a 1/(2 nt) share of what is left (at
**     least DOT_UNIT), long runs first for the hardware prefetchers;
**   - panel kernel: one strip of PANEL columns each, but the last nt strips
**     of the job are cut into two halves of the rows (each half packs the
**     strip again, which costs far less than a thread waiting). */
static int plan_units(xwt_part *part, int max_parts, const gemm_out *out, int nout,
                      int T, int panel, int nt) {
  int n = 0;
  if (panel) {
    int split_from = 0;  /* strips from this index on (counted over the whole job) are split */
    int strips = 0;
    for (int o = 0; o < nout; o++) strips += (out[o].n + PANEL - 1) / PANEL;
    if (nt > 1 && T >= 2 * MR) split_from = strips - nt < 0 ? 0 : strips - nt;
    else split_from = strips;
    int s = 0;
    for (int o = 0; o < nout; o++)
      for (int c0 = 0; c0 < out[o].n; c0 += PANEL, s++) {
        int c1 = c0 + PANEL < out[o].n ? c0 + PANEL : out[o].n;
        if (s < split_from) {
          if (n >= max_parts) return -1;
          part[n++] = (xwt_part){ o, c0, c1, 0, T };
        } else {
          int mid = (T / 2 + MR - 1) / MR * MR;  /* a multiple of the register tile */
          if (n + 2 > max_parts) return -1;
          part[n++] = (xwt_part){ o, c0, c1, 0, mid };
          part[n++] = (xwt_part){ o, c0, c1, mid, T };
        }
      }
    return n;
  }
  long total = 0, done = 0;
  for (int o = 0; o < nout; o++) total += out[o].n;
  for (int o = 0; o < nout; o++)
    for (int c0 = 0; c0 < out[o].n;) {
      long left = total - done, size = (left + 2L * nt - 1) / (2L * nt);
      size = (size + TILE_R - 1) / TILE_R * TILE_R;
      if (size < DOT_UNIT) size = DOT_UNIT;
      int c1 = out[o].n - c0 <= size ? out[o].n : c0 + (int)size;
      if (n >= max_parts) return -1;
      part[n++] = (xwt_part){ o, c0, c1, 0, T };
      done += c1 - c0;
      c0 = c1;
    }
  return n;
}

int gemm_xwt(bf_pool *p, int nthreads, const float *x, int T, int K, int nout, const gemm_out *out) {
  if (!gemm_have_avx512()) return GEMM_NO_KERNEL;
  if (nout < 1 || nout > GEMM_MAX_OUT || T < 1 || K < 1) return GEMM_NO_KERNEL;
  if (nthreads < 1) nthreads = 1;
  if (nthreads > MAX_THREADS) nthreads = MAX_THREADS;
  long work = 0, cols = 0;
  for (int o = 0; o < nout; o++) { work += (long)out[o].n * K; cols += out[o].n; }
  if (work < 65536 || !p) nthreads = 1;  /* too little to be worth waking anyone */
  int panel = T > GEMM_DOT_MAX_T;

  /* panel buffers: one per thread that may take part (the pool's), or one of
  ** this call's own without a pool */
  size_t need = ((size_t)K + 16) * PANEL;  /* floats of one panel */
  float *solo = NULL;
  if (panel && !p) {
    solo = aligned_alloc(64, need * sizeof(float));
    if (!solo) return GEMM_NOMEM;
  } else if (panel) {
    for (int t = 0; t < nthreads; t++) {
      if (p->wp_cap[t] >= need) continue;
      float *b = aligned_alloc(64, need * sizeof(float));
      if (!b) return GEMM_NOMEM;
      free(p->wp[t]);
      p->wp[t] = b;
      p->wp_cap[t] = need;
    }
  }

  if (nthreads == 1) {  /* this thread does it all, strip after strip */
    float *wp = p ? p->wp[0] : solo;
    for (int o = 0; o < nout; o++) {
      if (!panel) { dot_cols(out[o].y, x, out[o].w, T, out[o].n, K, 0, out[o].n); continue; }
      for (int c0 = 0; c0 < out[o].n; c0 += PANEL) {
        int c1 = c0 + PANEL < out[o].n ? c0 + PANEL : out[o].n;
        panel_strip(wp, out[o].y, x, out[o].w, T, out[o].n, K, c0, c1 - c0, c1);
      }
    }
    free(solo);
    return GEMM_OK;
  }

  /* more threads (and so a pool): the units, planned into the pool's table */
  long most = 2 * (cols / (panel ? PANEL : DOT_UNIT) + 2L * nout + nthreads) + 16;
  if (most > INT32_MAX / (long)sizeof(xwt_part)) return GEMM_NOMEM;
  if ((size_t)most > p->part_cap) {
    xwt_part *part = malloc((size_t)most * sizeof *part);
    if (!part) return GEMM_NOMEM;
    free(p->part);
    p->part = part;
    p->part_cap = (size_t)most;
  }
  xwt_job j;
  memset(&j, 0, sizeof j);
  j.p = p; j.x = x; j.T = T; j.K = K; j.nout = nout; j.nt = nthreads; j.panel = panel;
  for (int o = 0; o < nout; o++) j.out[o] = out[o];
  j.part = p->part;
  j.nparts = plan_units(p->part, (int)most, out, nout, T, panel, nthreads);
  if (j.nparts < 0) return GEMM_NOMEM;
  bf_pool_run(p, nthreads, j.nparts, xwt_unit, &j);
  return GEMM_OK;
}

#else /* no AVX-512 kernels in this build */
int gemm_have_avx512(void) { return 0; }
int gemm_xwt(bf_pool *p, int nthreads, const float *x, int T, int K, int nout, const gemm_out *out) {
  (void)p; (void)nthreads; (void)x; (void)T; (void)K; (void)nout; (void)out;
  return GEMM_NO_KERNEL;
}
#endif
