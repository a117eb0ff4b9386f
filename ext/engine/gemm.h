/*
** gemm.h — the encoder's matrix products, y = x W^T, on bertfill's own
** AVX-512 kernels.  Engine-internal.
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
** Work is split into units (runs of output columns; the last strips of a job
** also by rows, so that the units shrink towards its end) taken dynamically
** by the threads of a bf_pool (pool.h).
**
**   gemm_scratch s = {0};
**   gemm_out o = { y, W, N };                      // y[T,N] = x[T,K] W[N,K]^T
**   if (gemm_xwt(pool, &s, nthreads, x, T, K, 1, &o) != GEMM_OK)
**     ...use BLAS...
**   gemm_scratch_free(&s);
**
** Without AVX-512 (checked at run time; BERTFILL_NO_AVX512=1 pretends so)
** gemm_xwt returns GEMM_NO_KERNEL and the caller uses BLAS.
*/
#ifndef BERTFILL_GEMM_H
#define BERTFILL_GEMM_H

#include <stddef.h>
#include "pool.h"

#define GEMM_DOT_MAX_T 16 /* up to this many rows of x: the dot kernel */
#define GEMM_MAX_OUT 3    /* outputs sharing one x in one gemm_xwt call (q, k, v) */

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
  struct gemm_unit *units;
  size_t units_cap;
} gemm_scratch;
void gemm_scratch_free(gemm_scratch *s); /* frees the buffers; s itself stays */

/* All nout (1..GEMM_MAX_OUT) products of one x, as one job of the pool p
** on up to nthreads threads.  p and s may be NULL: then the calling thread
** does it all, with a panel buffer of this call's own.  GEMM_OK,
** GEMM_NO_KERNEL (no AVX-512: use BLAS), or GEMM_NOMEM (the buffers could
** not be allocated: use BLAS). */
int gemm_xwt(bf_pool *p, gemm_scratch *s, int nthreads, const float *x, int T, int K, int nout,
             const gemm_out *out);

/* 1 if the CPU has AVX-512 (and the OS keeps its registers), unless the
** environment variable BERTFILL_NO_AVX512 is on (util.h's rule) when first
** asked: then the portable code (plain C and OpenBLAS) runs. */
int gemm_have_avx512(void);

#endif
