/*
** forward.c — the BERT encoder and the masked-LM head, on OpenBLAS.
**
** bf_fill() runs a batch of token sequences through the model and returns the
** top-k candidates for every [MASK].  The math, for T tokens of hidden size H
** (all sequences of the batch concatenated: no padding, ever):
**
**   x      = LayerNorm(word[id] + type[0] + pos[p])          p restarts at 0 per sequence
**   for each layer:
**     q,k,v  = x Wq^T + bq,  x Wk^T + bk,  x Wv^T + bv        GEMMs over all T tokens
**     ctx_h  = softmax(q_h k_h^T / sqrt(d)) v_h               per sequence, per head
**     x      = LayerNorm(x + ctx Wo^T + bo)
**     x      = LayerNorm(x + gelu(x Wi^T + bi) Wo2^T + bo2)   gelu(z) = z/2 (1 + erf(z/sqrt 2))
**   at the M [MASK] rows only:
**     h      = LayerNorm(gelu(x Wh^T + bh))
**     logits = h Wdec^T + bdec                                [M, vocab]
**     p      = softmax(logits), keep the k largest
**
** The weights are used as PyTorch stores them ([out, in], so y = x W^T).
** Matrix products over many tokens go through bf_sgemm (OpenBLAS, blas.h).
** Up to BF_SMALL_M rows (one sentence, a few masks), where OpenBLAS would
** spend most of its time repacking the weights, an AVX-512 kernel in this file
** reads them in place, sharing the work with helper threads of the run.  The
** rest is loops over rows (AVX-512 when the CPU has it, plain C otherwise).
** A bf_run holds the scratch buffers (grown on demand, kept for the next call),
** the helper threads and the stage timings of the last call.
*/
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>
#include <stdatomic.h>

#include "bertfill.h"
#include "model.h"
#include "blas.h"

/* GEMMs with at most this many rows of activations (tokens, or masks in the
** head) use the small-M kernel below instead of OpenBLAS, when the CPU has
** AVX-512.  0 turns the kernel off. */
#ifndef BF_SMALL_M
#define BF_SMALL_M 32
#endif
#define MAX_THREADS 16

/* The MLM head runs over at most this many masks at a time, which bounds the
** [masks, vocab] logits buffer (128 x 21128 floats = 10.8 MB). */
#define HEAD_CHUNK 128

/* A growable scratch buffer. */
typedef struct buf { void *p; size_t cap; } buf;

/* Helper threads for the small-M kernel (see "AVX-512 kernels" below). */
typedef struct helper_arg { struct pool *p; int i; unsigned seen; } helper_arg;
typedef struct pool {
  int n;                          /* helper threads started (the caller is one more) */
  pthread_t th[MAX_THREADS];
  helper_arg args[MAX_THREADS];
  pthread_mutex_t mu;
  pthread_cond_t cv;
  atomic_uint gen;                /* bumped once per job */
  atomic_int pending;             /* helpers still working on the current job */
  atomic_int quit;
  int nt;                         /* threads sharing the current job, caller included */
  float *y; const float *x, *w;   /* the job: y[T,N] = x[T,K] w[N,K]^T */
  int T, N, K;
  pid_t pid;                      /* process that started the helpers */
} pool;

struct bf_run {
  buf x;       /* [T,H]  hidden state */
  buf q, k, v; /* [T,H]  queries, keys, values */
  buf ctx;     /* [T,H]  attention context (heads side by side) */
  buf tmp;     /* [T,H]  output of a dense layer, before the residual */
  buf ffn;     /* [T,I]  intermediate activations */
  buf att;     /* [L,L]  attention probabilities of one head */
  buf seq;     /* [nseq] index of each sequence that has masks */
  buf mrow;    /* [M]    row of x for each mask, in order */
  buf hm, hm2; /* [HEAD_CHUNK,H]  MLM head activations */
  buf logits;  /* [HEAD_CHUNK,V] */
  buf heap;    /* [k]    top-k selection */
  pool *pool;  /* NULL until a small GEMM runs with more than one thread */
  bf_timings t;
};

/* ---------------------------------------------------------------- helpers */

static int fail(char *err, size_t errlen, int code, const char *fmt, ...) {
  if (err && errlen > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return code;
}

/* Make b hold at least n elements of size sz (contents are not kept).  A
** buffer far larger than needed (left by a huge batch) is given back.  On
** failure b is unchanged and NULL is returned. */
static void *need(buf *b, size_t n, size_t sz) {
  if (n == 0) n = 1;
  if (n > SIZE_MAX / sz) return NULL;
  size_t bytes = n * sz;
  if (bytes <= b->cap && !(b->cap > ((size_t)64 << 20) && bytes < b->cap / 4)) return b->p;
  void *p = malloc(bytes);
  if (!p) return NULL;
  free(b->p);
  b->p = p;
  b->cap = bytes;
  return p;
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------- AVX-512 kernels */

/* The CPU-specific part: when the CPU has AVX-512 (checked at run time; the
** rest of the file is plain C), the loops that dominate once the GEMMs are
** fast run 16 floats at a time:
**   - small_gemm_cols: y[T,N] = x[T,K] W[N,K]^T for small T.  OpenBLAS repacks
**     all of W on every call, which costs more than the arithmetic when T is
**     one sentence or a few masks; this kernel reads each row of W straight
**     from the mmap once and reuses it from L1 for every token: tiles of
**     3 rows of W x 8 tokens keep 24 accumulators busy.  Sums run over K in 16
**     lanes and are reduced at the end (float accumulation, like any BLAS).
**   - exp16: e^x by range reduction (x = n ln2 + r) and a degree-7 Taylor
**     polynomial on |r| <= ln2/2 (error below 1 ulp of float).
**   - gelu: erf by Abramowitz & Stegun 7.1.26 (absolute error < 1.5e-7), the
**     formula PyTorch's own vectorized CPU erf uses.
** The scalar fallbacks (expf, erff from libm) give the same results to ~1e-7. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(BF_NO_AVX512)
#include <immintrin.h>
#define HAVE_AVX512 1
#define AVX512 __attribute__((target("avx512f,fma")))
#define TILE_R 3  /* rows of W per tile of the small-M kernel */
#define TILE_J 8  /* tokens per tile: 24 accumulators + 3 rows of W + 1 token in registers */

static int have_avx512(void) {
  static atomic_int known = -1;
  int v = atomic_load(&known);
  if (v < 0) {
    __builtin_cpu_init();
    v = __builtin_cpu_supports("avx512f") ? 1 : 0;  /* also checks the OS saves zmm state */
    atomic_store(&known, v);
  }
  return v;
}

/* Lanes i < n of a 16-wide chunk. */
static inline __mmask16 tail16(int n) {
  return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1);
}

static inline AVX512 __m512 exp16(__m512 x) {
  x = _mm512_max_ps(_mm512_set1_ps(-87.0f), x);  /* NaN stays NaN (2nd operand) */
  x = _mm512_min_ps(_mm512_set1_ps(88.0f), x);
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);   /* x - n ln2, ln2 in */
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);       /* two parts */
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);  /* p * 2^n */
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
    __m512 erf_a = _mm512_fnmadd_ps(q, e, one);                       /* erf(|u|) */
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
    __m512 d = _mm512_sub_ps(v, v);  /* 0 if finite, NaN if not */
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
    s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
  }
  return _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
}

/* In place: x = LayerNorm(x) * g + b over n floats, mean and variance in double. */
AVX512 static void layernorm_avx512(float *x, const float *g, const float *b, int n, float eps) {
  __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
  for (int i = 0; i < n; i += 16) {
    __m512 v = _mm512_maskz_loadu_ps(tail16(n - i), x + i);
    s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
    s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
  }
  double mean = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1)) / n;
  __m512d vm = _mm512_set1_pd(mean);
  s0 = _mm512_setzero_pd(); s1 = _mm512_setzero_pd();
  for (int i = 0; i < n; i += 16) {
    __mmask16 m = tail16(n - i);
    __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    __m512d d0 = _mm512_maskz_sub_pd((__mmask8)m, _mm512_cvtps_pd(_mm512_castps512_ps256(v)), vm);
    __m512d d1 = _mm512_maskz_sub_pd((__mmask8)(m >> 8),
        _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))), vm);
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

/* y[j*ldy + i] = dot(w[i*K ...], x[j*K ...]) for i < R rows of W, j < J tokens
** (R and J are constants after inlining, so acc[][] lives in registers). */
static inline __attribute__((always_inline)) AVX512
void dot_tile(float *y, int ldy, const float *x, const float *w, int K, const int R, const int J) {
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
AVX512 static void small_gemm_cols(float *y, const float *x, const float *W,
                                   int T, int N, int K, int o0, int o1) {
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

/* ---- helper threads for small_gemm ----
** The kernel replaces OpenBLAS calls, so OpenBLAS's own threads are idle while
** it runs and the run's helpers take the other cores: bf_blas_threads()
** threads in all (the caller included), so a thread setting made for OpenBLAS
** holds here too.  A helper
** spins briefly for the next job (the GEMMs of a forward pass come every few
** tens of microseconds), then sleeps on a condition variable. */
#define SPIN_NS 500000

/* Share i of p->nt: a range of columns, a multiple of TILE_R wide. */
static void pool_share(pool *p, int i) {
  int per = ((p->N + p->nt - 1) / p->nt + TILE_R - 1) / TILE_R * TILE_R;
  long o0 = (long)i * per, o1 = o0 + per < p->N ? o0 + per : p->N;
  if (o0 < o1) small_gemm_cols(p->y, p->x, p->w, p->T, p->N, p->K, (int)o0, (int)o1);
}

static void *pool_helper(void *arg) {
  helper_arg *a = arg;
  pool *p = a->p;
  unsigned seen = a->seen;
  for (;;) {
    uint64_t t0 = now_ns();
    for (int spins = 1; atomic_load(&p->gen) == seen && !atomic_load(&p->quit); spins++) {
      _mm_pause();
      if (spins % 64 == 0) sched_yield();  /* let the caller have this core if it needs it */
      if (spins % 64 == 0 && now_ns() - t0 > SPIN_NS) {
        pthread_mutex_lock(&p->mu);
        while (atomic_load(&p->gen) == seen && !atomic_load(&p->quit)) pthread_cond_wait(&p->cv, &p->mu);
        pthread_mutex_unlock(&p->mu);
      }
    }
    if (atomic_load(&p->quit)) return NULL;
    seen = atomic_load(&p->gen);
    if (a->i < p->nt) pool_share(p, a->i);
    atomic_fetch_sub(&p->pending, 1);
  }
}

/* Give the run at least want-1 helpers; returns how many threads (caller
** included) can share a job.  A thread that cannot be started is not an
** error: the work is shared among fewer. */
static int pool_grow(bf_run *r, int want) {
  if (want > MAX_THREADS) want = MAX_THREADS;
  if (want <= 1) return 1;
  if (r->pool && r->pool->pid != getpid())
    r->pool = NULL;  /* a child after fork(): the helpers stayed in the parent; leave theirs alone */
  if (!r->pool) {
    pool *p = calloc(1, sizeof *p);
    if (!p) return 1;
    if (pthread_mutex_init(&p->mu, NULL) != 0) { free(p); return 1; }
    if (pthread_cond_init(&p->cv, NULL) != 0) { pthread_mutex_destroy(&p->mu); free(p); return 1; }
    p->pid = getpid();
    r->pool = p;
  }
  pool *p = r->pool;
  while (p->n < want - 1) {
    helper_arg *a = &p->args[p->n];
    a->p = p; a->i = p->n + 1; a->seen = atomic_load(&p->gen);
    if (pthread_create(&p->th[p->n], NULL, pool_helper, a) != 0) break;
    p->n++;
  }
  return p->n + 1 < want ? p->n + 1 : want;
}

static void pool_free(pool *p) {
  if (!p || p->pid != getpid()) return;  /* after fork(), the helpers are the parent's */
  pthread_mutex_lock(&p->mu);
  atomic_store(&p->quit, 1);
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < p->n; i++) pthread_join(p->th[i], NULL);
  pthread_cond_destroy(&p->cv);
  pthread_mutex_destroy(&p->mu);
  free(p);
}

/* y[T,N] = x[T,K] W[N,K]^T on the small-M kernel, split over the threads. */
static void small_gemm(bf_run *r, float *y, const float *x, const float *W, int T, int N, int K) {
  int nt = bf_blas_threads();
  if ((size_t)N * K < 65536) nt = 1;  /* too little to be worth waking anyone */
  nt = pool_grow(r, nt);
  if (nt <= 1) { small_gemm_cols(y, x, W, T, N, K, 0, N); return; }
  pool *p = r->pool;
  p->nt = nt; p->y = y; p->x = x; p->w = W; p->T = T; p->N = N; p->K = K;
  atomic_store(&p->pending, p->n);
  pthread_mutex_lock(&p->mu);
  atomic_fetch_add(&p->gen, 1);
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  pool_share(p, 0);
  for (int spins = 1; atomic_load(&p->pending) > 0; spins++) {
    _mm_pause();
    if (spins % 64 == 0) sched_yield();  /* a helper may be waiting for this core */
  }
}
#else
static int have_avx512(void) { return 0; }
#endif /* HAVE_AVX512 */

/* ------------------------------------------------------------ the layers */

/* In place: x[n] = LayerNorm(x[n]) * g + b, mean and variance in double. */
static void layernorm(float *x, const float *g, const float *b, int n, float eps) {
#ifdef HAVE_AVX512
  if (have_avx512()) { layernorm_avx512(x, g, b, n, eps); return; }
#endif
  double mean = 0, var = 0;
  for (int i = 0; i < n; i++) mean += x[i];
  mean /= n;
  for (int i = 0; i < n; i++) { double d = x[i] - mean; var += d * d; }
  var /= n;
  float m = (float)mean, rstd = (float)(1.0 / sqrt(var + eps));
  for (int i = 0; i < n; i++) x[i] = (x[i] - m) * rstd * g[i] + b[i];
}

/* x[i] += a[i] + b[i] for i < n; b may be NULL. */
static void add(float *x, const float *a, const float *b, int n) {
#ifdef HAVE_AVX512
  if (have_avx512()) { add_avx512(x, a, b, n); return; }
#endif
  if (b) for (int i = 0; i < n; i++) x[i] += a[i] + b[i];
  else   for (int i = 0; i < n; i++) x[i] += a[i];
}

/* x[t] = LayerNorm(x[t] + (y[t] + bias)) for each of T rows of width n. */
static void add_bias_residual_layernorm(float *x, const float *y, const float *bias,
                                        const float *g, const float *b, int T, int n, float eps) {
  for (int t = 0; t < T; t++) {
    add(x + (size_t)t * n, y + (size_t)t * n, bias, n);
    layernorm(x + (size_t)t * n, g, b, n, eps);
  }
}

/* y[t] += bias for each of T rows of width n. */
static void add_bias(float *y, const float *bias, int T, int n) {
  for (int t = 0; t < T; t++) add(y + (size_t)t * n, bias, NULL, n);
}

/* y[i] = gelu(y[i] + bias[i]) = z/2 (1 + erf(z/sqrt 2)), the exact (erf) form, for i < n. */
static void gelu_row(float *y, const float *bias, int n) {
#ifdef HAVE_AVX512
  if (have_avx512()) { gelu_row_avx512(y, bias, n); return; }
#endif
  for (int i = 0; i < n; i++) {
    float z = y[i] + bias[i];
    y[i] = 0.5f * z * (1.0f + erff(z * (float)M_SQRT1_2));
  }
}

static void add_bias_gelu(float *y, const float *bias, int T, int n) {
  for (int t = 0; t < T; t++) gelu_row(y + (size_t)t * n, bias, n);
}

/* The largest of x[0..n) into *max; returns 0 if some x[i] is NaN or infinite. */
static int max_finite(const float *x, int n, float *max) {
#ifdef HAVE_AVX512
  if (have_avx512()) return max_finite_avx512(x, n, max);
#endif
  float mx = -INFINITY;
  for (int i = 0; i < n; i++) {
    if (!isfinite(x[i])) return 0;
    if (x[i] > mx) mx = x[i];
  }
  *max = mx;
  return 1;
}

/* Sum of e^(x[i] - mx), in double; each term is stored in dst unless dst is NULL. */
static double exp_sum(float *dst, const float *x, int n, float mx) {
#ifdef HAVE_AVX512
  if (have_avx512()) return exp_sum_avx512(dst, x, n, mx);
#endif
  double sum = 0;
  for (int i = 0; i < n; i++) {
    float e = expf(x[i] - mx);
    if (dst) dst[i] = e;
    sum += e;
  }
  return sum;
}

/* In place: p[i] = e^(p[i] - max) / sum, for one row of n scores. */
static void softmax(float *p, int n) {
  float mx = p[0];
  for (int i = 1; i < n; i++) if (p[i] > mx) mx = p[i];
  float inv = (float)(1.0 / exp_sum(p, p, n, mx));
  for (int i = 0; i < n; i++) p[i] *= inv;
}

/* y[T,out] = x[T,in] W^T   (W as PyTorch stores it: [out,in]) */
static void matmul(bf_run *r, float *y, const float *x, const float *W, int T, int out, int in) {
#ifdef HAVE_AVX512
  if (T <= BF_SMALL_M && have_avx512()) { small_gemm(r, y, x, W, T, out, in); return; }
#endif
  bf_sgemm(0, 1, T, out, in, 1.0f, x, in, W, in, 0.0f, y, out);
}

/* Self-attention of one sequence of L tokens starting at row off of q,k,v:
** every head h reads columns [h*d, (h+1)*d) and writes the same columns of ctx. */
static void attention(bf_run *r, const bf_config *c, int off, int L) {
  int H = c->hidden_size, nh = c->num_attention_heads, d = H / nh;
  float scale = 1.0f / sqrtf((float)d);
  float *att = r->att.p;
  for (int h = 0; h < nh; h++) {
    const float *q = (float *)r->q.p + (size_t)off * H + h * d;
    const float *k = (float *)r->k.p + (size_t)off * H + h * d;
    const float *v = (float *)r->v.p + (size_t)off * H + h * d;
    float *ctx = (float *)r->ctx.p + (size_t)off * H + h * d;
    bf_sgemm(0, 1, L, L, d, scale, q, H, k, H, 0.0f, att, L);   /* scores = q k^T / sqrt(d) */
    for (int i = 0; i < L; i++) softmax(att + (size_t)i * L, L);
    bf_sgemm(0, 0, L, d, L, 1.0f, att, L, v, H, 0.0f, ctx, H);  /* ctx = P v */
  }
}

/* One encoder layer over all T tokens of the batch. */
static void encoder_layer(bf_run *r, const bf_config *c, const bf_layer *w,
                          int nseq, const int *seq, const bf_tokens *seqs, int T) {
  int H = c->hidden_size, I = c->intermediate_size;
  float eps = c->layer_norm_eps;
  float *x = r->x.p, *q = r->q.p, *k = r->k.p, *v = r->v.p;
  float *ctx = r->ctx.p, *tmp = r->tmp.p, *ffn = r->ffn.p;

  matmul(r, q, x, w->q_w, T, H, H); add_bias(q, w->q_b, T, H);
  matmul(r, k, x, w->k_w, T, H, H); add_bias(k, w->k_b, T, H);
  matmul(r, v, x, w->v_w, T, H, H); add_bias(v, w->v_b, T, H);
  for (int s = 0, off = 0; s < nseq; off += seqs[seq[s]].n, s++)
    attention(r, c, off, seqs[seq[s]].n);

  matmul(r, tmp, ctx, w->ao_w, T, H, H);
  add_bias_residual_layernorm(x, tmp, w->ao_b, w->aln_g, w->aln_b, T, H, eps);

  matmul(r, ffn, x, w->i_w, T, I, H);
  add_bias_gelu(ffn, w->i_b, T, I);
  matmul(r, tmp, ffn, w->o_w, T, H, I);
  add_bias_residual_layernorm(x, tmp, w->o_b, w->oln_g, w->oln_b, T, H, eps);
}

/* ----------------------------------------------------------------- top-k */

/* A candidate under selection: better = higher logit, then lower id. */
typedef struct hent { float logit; int32_t id; } hent;

static int worse(hent a, hent b) {
  return a.logit < b.logit || (a.logit == b.logit && a.id > b.id);
}

/* Min-heap on "worse": h[0] is the worst of the k kept so far. */
static void sift_down(hent *h, int n, int i) {
  for (;;) {
    int l = 2 * i + 1, rr = l + 1, m = i;
    if (l < n && worse(h[l], h[m])) m = l;
    if (rr < n && worse(h[rr], h[m])) m = rr;
    if (m == i) return;
    hent t = h[i]; h[i] = h[m]; h[m] = t;
    i = m;
  }
}

static int cand_cmp(const void *pa, const void *pb) {
  const bf_cand *a = pa, *b = pb;
  if (a->prob != b->prob) return a->prob > b->prob ? -1 : 1;
  return (a->id > b->id) - (a->id < b->id);
}

/* Softmax over one row of V logits and the k most probable tokens, sorted.
** Returns 0, or -1 if a logit is NaN or infinite. */
static int topk_row(const float *logits, int V, int k, hent *h, bf_cand *out) {
  float mx;
  if (!max_finite(logits, V, &mx)) return -1;
  double sum = exp_sum(NULL, logits, V, mx);

  /* The k best by a size-k min-heap: O(V log k), never a sort of V. */
  int n = 0;
  for (int i = 0; i < V; i++) {
    hent e = { logits[i], i };
    if (n < k) {
      h[n++] = e;
      if (n == k) for (int j = k / 2 - 1; j >= 0; j--) sift_down(h, k, j);
    } else if (e.logit >= h[0].logit && worse(h[0], e)) {
      h[0] = e;
      sift_down(h, k, 0);
    }
  }
  for (int j = 0; j < k; j++) {
    out[j].id = h[j].id;
    out[j].prob = (float)(expf(h[j].logit - mx) / sum);
  }
  qsort(out, k, sizeof *out, cand_cmp);
  return 0;
}

/* -------------------------------------------------------------- bf_fill */

bf_run *bf_run_new(void) {
  return calloc(1, sizeof(bf_run));
}

void bf_run_free(bf_run *r) {
  if (!r) return;
  buf *all[] = { &r->x, &r->q, &r->k, &r->v, &r->ctx, &r->tmp, &r->ffn, &r->att,
                 &r->seq, &r->mrow, &r->hm, &r->hm2, &r->logits, &r->heap };
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]->p);
#ifdef HAVE_AVX512
  pool_free(r->pool);
#endif
  free(r);
}

const bf_timings *bf_run_timings(const bf_run *r) {
  static const bf_timings none;
  return r ? &r->t : &none;
}

int bf_fill(const bf_model *m, bf_run *r, int nseq, const bf_tokens *seqs,
            int k, bf_cand *out, char *err, size_t errlen) {
  if (err && errlen > 0) err[0] = 0;
  if (!m || !r) return fail(err, errlen, BF_ERR_INPUT, "bf_fill: no model or no run");
  memset(&r->t, 0, sizeof r->t);
  const bf_config *c = &m->cfg;
  int H = c->hidden_size, I = c->intermediate_size, V = c->vocab_size;
  int P = c->max_position_embeddings;
  float eps = c->layer_norm_eps;

  /* ---- check everything from outside before touching any memory ---- */
  if (nseq < 0 || (nseq > 0 && !seqs))
    return fail(err, errlen, BF_ERR_INPUT, "bf_fill: bad sequence list (nseq = %d)", nseq);
  if (k < 1 || k > BF_MAX_K || k > V)
    return fail(err, errlen, BF_ERR_INPUT,
                "k must be between 1 and %d (the vocabulary size or %d, whichever is smaller); got %d",
                V < BF_MAX_K ? V : BF_MAX_K, BF_MAX_K, k);
  if (c->num_attention_heads < 1 || H % c->num_attention_heads != 0)
    return fail(err, errlen, BF_ERR_MODEL, "hidden_size %d is not a multiple of num_attention_heads %d",
                H, c->num_attention_heads);
  int32_t mask_id = bf_tokenizer_mask_id(m->tok);
  size_t T = 0, M = 0;
  int nrun = 0;
  for (int s = 0; s < nseq; s++) {
    const bf_tokens *t = &seqs[s];
    if (t->n > P)
      return fail(err, errlen, BF_ERR_TOOLONG,
                  "input is %d tokens long; this model accepts at most %d (max_position_embeddings)",
                  t->n, P);
    if (t->n < 1 || !t->ids)
      return fail(err, errlen, BF_ERR_INPUT, "sequence %d is empty (%d tokens)", s, t->n);
    int nm = 0;
    for (int i = 0; i < t->n; i++) {
      if (t->ids[i] < 0 || t->ids[i] >= V)
        return fail(err, errlen, BF_ERR_INPUT,
                    "token id %ld at position %d of sequence %d is out of range (the vocabulary has %d entries)",
                    (long)t->ids[i], i, s, V);
      nm += t->ids[i] == mask_id;
    }
    if (nm != t->n_masks)
      return fail(err, errlen, BF_ERR_INPUT,
                  "sequence %d says it has %d [MASK] tokens but its ids hold %d", s, t->n_masks, nm);
    if (nm > 0) { T += t->n; M += nm; nrun++; }
  }
  if (M == 0) return BF_OK;  /* nothing to fill: nothing to run */
  /* weights changed on disk since loading: other weights or SIGBUS ahead */
  int rc_model = bf_model_check(m, err, errlen);
  if (rc_model != BF_OK) return rc_model;
  if (!out) return fail(err, errlen, BF_ERR_INPUT, "bf_fill: no output array");
  if (T > INT_MAX / 4)
    return fail(err, errlen, BF_ERR_NOMEM, "a batch of %zu tokens is too large; split it", T);

  /* ---- scratch memory ---- */
  int Lmax = 0;
  for (int s = 0; s < nseq; s++) if (seqs[s].n_masks > 0 && seqs[s].n > Lmax) Lmax = seqs[s].n;
  size_t Mc = M < HEAD_CHUNK ? M : HEAD_CHUNK;
  if (!need(&r->x, T * H, sizeof(float)) || !need(&r->q, T * H, sizeof(float)) ||
      !need(&r->k, T * H, sizeof(float)) || !need(&r->v, T * H, sizeof(float)) ||
      !need(&r->ctx, T * H, sizeof(float)) || !need(&r->tmp, T * H, sizeof(float)) ||
      !need(&r->ffn, T * I, sizeof(float)) ||
      !need(&r->att, (size_t)Lmax * Lmax, sizeof(float)) ||
      !need(&r->seq, nrun, sizeof(int)) || !need(&r->mrow, M, sizeof(size_t)) ||
      !need(&r->hm, Mc * H, sizeof(float)) || !need(&r->hm2, Mc * H, sizeof(float)) ||
      !need(&r->logits, Mc * V, sizeof(float)) || !need(&r->heap, k, sizeof(hent)))
    return fail(err, errlen, BF_ERR_NOMEM,
                "out of memory for the scratch buffers of %zu tokens in %d sequences", T, nrun);
  r->t.tokens = (int)T; r->t.masks = (int)M; r->t.seqs = nrun;

  /* ---- embeddings ---- */
  uint64_t t0 = now_ns();
  int *seq = r->seq.p;
  size_t *mrow = r->mrow.p;
  float *x = r->x.p;
  size_t row = 0, mi = 0;
  for (int s = 0, j = 0; s < nseq; s++) {
    const bf_tokens *t = &seqs[s];
    if (t->n_masks == 0) continue;
    seq[j++] = s;
    for (int p = 0; p < t->n; p++, row++) {
      float *xr = x + row * H;
      const float *we = m->word_emb + (size_t)t->ids[p] * H;
      const float *pe = m->pos_emb + (size_t)p * H;
      const float *te = m->type_emb;  /* token type 0 */
      memcpy(xr, we, H * sizeof(float));  /* (word + type) + position, PyTorch's order */
      add(xr, te, NULL, H);
      add(xr, pe, NULL, H);
      layernorm(xr, m->emb_ln_g, m->emb_ln_b, H, eps);
      if (t->ids[p] == mask_id) mrow[mi++] = row;
    }
  }
  uint64_t t1 = now_ns();
  r->t.embed_ns = t1 - t0;

  /* ---- encoder ---- */
  for (int l = 0; l < c->num_hidden_layers; l++)
    encoder_layer(r, c, &m->layers[l], nrun, seq, seqs, (int)T);
  uint64_t t2 = now_ns();
  r->t.encode_ns = t2 - t1;

  /* ---- MLM head at the masks, HEAD_CHUNK masks at a time ---- */
  for (size_t m0 = 0; m0 < M; m0 += Mc) {
    uint64_t ta = now_ns();
    int n = (int)(M - m0 < Mc ? M - m0 : Mc);
    float *hm = r->hm.p, *hm2 = r->hm2.p, *logits = r->logits.p;
    for (int i = 0; i < n; i++) memcpy(hm + (size_t)i * H, x + mrow[m0 + i] * H, H * sizeof(float));
    matmul(r, hm2, hm, m->head_w, n, H, H);
    add_bias_gelu(hm2, m->head_b, n, H);
    for (int i = 0; i < n; i++) {
      float *hr = hm2 + (size_t)i * H;
      layernorm(hr, m->head_ln_g, m->head_ln_b, H, eps);
    }
    matmul(r, logits, hm2, m->dec_w, n, V, H);
    add_bias(logits, m->dec_b, n, V);
    uint64_t tb = now_ns();
    r->t.head_ns += tb - ta;

    for (int i = 0; i < n; i++)
      if (topk_row(logits + (size_t)i * V, V, k, r->heap.p, out + (m0 + i) * k) != 0)
        return fail(err, errlen, BF_ERR_MODEL, "the model produced NaN/Inf (corrupt weights?)");
    r->t.topk_ns += now_ns() - tb;
  }
  return BF_OK;
}
