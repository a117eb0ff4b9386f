/*
** gemm.h — the encoder's matrix products, y = x W^T, on bertfill's own
** kernels (AVX-512 or AVX2).  Engine-internal.
**
** The weights stay as PyTorch stores them ([out, in], read in place from the
** mmap).  Two AVX-512 kernels (gemm.c) cover every size the encoder meets:
**   - up to GEMM_DOT_MAX_T rows of x (one short sentence, a few masks): dot
**     products straight from the rows of W, which are read once from memory
**     and reused from L1 for every token;
**   - more rows: W is copied 48 rows at a time into a small transposed panel
**     (in L2) and an 8x48 register tile of y is accumulated from broadcasts
**     of x, the classic blocked-GEMM inner loop.  This replaces OpenBLAS,
**     which repacks all of W on every call and is 20-30% slower here for the
**     sizes of one sentence.
** On CPUs with AVX2 and FMA but no AVX-512 (AMD Zen 2/3, Intel Haswell to
** Alder Lake) the same two kinds of kernel in 8-lane form run instead
** (gemm_avx2.c; dot kernel up to GEMM_AVX2_DOT_MAX_T rows).
** Both run through one job splitter (gemm.c, gemm_kernel_table below): work
** is split into units (runs of output columns; the last strips of a job also
** by rows, so that the units shrink towards its end) taken dynamically by the
** threads of a bf_pool (pool.h).
**
**   gemm_scratch s = {0};
**   gemm_out o = { y, W, N };                      // y[T,N] = x[T,K] W[N,K]^T
**   if (gemm_xwt(pool, &s, nthreads, x, T, K, 1, &o) != GEMM_OK)
**     ...use BLAS...
**   gemm_scratch_free(&s);
**
** Which kernels run (gemm_kernels(), decided once per process, at the first
** call, from cpuid and the environment; never from the CPU's name):
**   - the best the CPU has: GEMM_KERNELS_AVX512 (AVX-512F), else
**     GEMM_KERNELS_AVX2 (AVX2 and FMA), else GEMM_KERNELS_OPENBLAS (gemm_xwt
**     returns GEMM_NO_KERNEL and the caller uses BLAS);
**   - BERTFILL_KERNELS=avx512|avx2|openblas (util.h's bf_env_choice) caps
**     that choice: the kernels that run are the best ones the CPU has and the
**     setting allows (so "avx2" gives AVX2 on an AVX-512 CPU and OpenBLAS on
**     a CPU without AVX2; "avx512" is the default).  For tests and debugging.
**   - BERTFILL_NO_AVX512=1, the older setting, means BERTFILL_KERNELS=openblas:
**     the portable code (plain C and OpenBLAS), as it always did.
*/
#ifndef BERTFILL_GEMM_H
#define BERTFILL_GEMM_H

#include <stddef.h>
#include "pool.h"

#ifndef GEMM_DOT_MAX_T
#define GEMM_DOT_MAX_T 16 /* up to this many rows of x: the dot kernel (AVX-512) */
#endif
#define GEMM_AVX2_DOT_MAX_T 80 /* the same for the AVX2 kernels */
#define GEMM_MAX_OUT 3         /* outputs sharing one x in one gemm_xwt call (q, k, v) */

enum { GEMM_OK = 0, GEMM_NO_KERNEL = 1, GEMM_NOMEM = 2 };

/* One output of gemm_xwt: y[T, n] = x[T, K] w[n, K]^T. */
typedef struct gemm_out {
  float *y;
  const float *w;
  int n;
} gemm_out;

/* The buffers gemm_xwt keeps between calls (zero-initialise; one per pool):
** the packed panel of W of each thread, and the table of units of a job. */
typedef struct gemm_scratch {
  float *panel[BF_POOL_MAX_THREADS];
  size_t panel_cap[BF_POOL_MAX_THREADS]; /* floats */
  struct gemm_unit *units;               /* (gemm.c) */
  size_t units_cap;
} gemm_scratch;
void gemm_scratch_free(gemm_scratch *s); /* frees the buffers; s itself stays */

/* All nout (1..GEMM_MAX_OUT) products of one x, as one job of the pool p
** on up to nthreads threads.  p and s may be NULL: then the calling thread
** does it all, with a panel buffer of this call's own.  GEMM_OK,
** GEMM_NO_KERNEL (GEMM_KERNELS_OPENBLAS: use BLAS), or GEMM_NOMEM (the
** buffers could not be allocated: use BLAS). */
int gemm_xwt(bf_pool *p, gemm_scratch *s, int nthreads, const float *x, int T, int K, int nout,
             const gemm_out *out);

/* Which kernels gemm_xwt runs (see the top of this file). */
enum { GEMM_KERNELS_OPENBLAS = 0, GEMM_KERNELS_AVX2 = 1, GEMM_KERNELS_AVX512 = 2 };
int gemm_kernels(void);
const char *gemm_kernels_name(int kernels); /* "openblas", "avx2", "avx512" */

/* gemm_kernels() == GEMM_KERNELS_AVX512: the CPU has AVX-512 (and the OS
** keeps its registers) and the environment does not turn it off. */
int gemm_have_avx512(void);

/* The two kernels of one instruction set and their shapes: what gemm_xwt's
** job splitter (gemm.c) needs to cut a job into units for them.  The
** AVX-512 table is gemm.c's own; the AVX2 one is gemm_avx2_table. */
typedef struct gemm_kernel_table {
  int dot_max_t;  /* up to this many rows of x: the dot kernel; more: the panel kernel */
  int dot_tile;   /* columns of W per tile of the dot kernel */
  int dot_unit;   /* least columns per unit of work of the dot kernel */
  int panel;      /* output columns per strip of the panel kernel */
  int panel_rows; /* rows of x per register tile of the panel kernel */
  int lanes;      /* floats per vector: a panel buffer holds (K + lanes) * panel floats */
  /* columns [o0, o1) of y[T,N] = x[T,K] W[N,K]^T */
  void (*dot_cols)(float *y, const float *x, const float *W, int T, int N, int K, int o0, int o1);
  /* strip [n0, n0 + nr) of the same, through the panel buffer Wp (64-byte
  ** aligned); meanwhile rows [next, next + panel) of W (if next < N) are
  ** prefetched */
  void (*panel_strip)(float *Wp, float *y, const float *x, const float *W, int T, int N, int K,
                      int n0, int nr, int next);
} gemm_kernel_table;

/* The AVX2 kernels (gemm_avx2.c), which gemm_xwt runs when gemm_kernels() is
** GEMM_KERNELS_AVX2; the CPU must have AVX2 and FMA.  Only in builds with
** them (avx2.h's BF_HAVE_AVX2: not with -DBF_NO_AVX2, not off x86-64). */
extern const gemm_kernel_table gemm_avx2_table;

#endif
