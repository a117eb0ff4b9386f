/*
** gemm.h — the encoder's matrix products, y = x W^T, on the run's own threads.
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
** by the threads of a bf_pool: the caller plus helper threads that spin
** briefly after each job and then sleep.  The same pool runs other per-unit
** work (attention heads, LayerNorm rows) through bf_pool_run.
**
** Without AVX-512 (checked at run time; BERTFILL_NO_AVX512=1 pretends so)
** gemm_xwt returns GEMM_NO_KERNEL and the caller uses BLAS.
*/
#ifndef BERTFILL_GEMM_H
#define BERTFILL_GEMM_H

#define GEMM_DOT_MAX_T 16   /* up to this many rows of x: the dot kernel */
#define GEMM_MAX_OUT 3      /* outputs sharing one x in one gemm_xwt call (q, k, v) */

enum { GEMM_OK = 0, GEMM_NO_KERNEL = 1, GEMM_NOMEM = 2 };

typedef struct bf_pool bf_pool;

/* A pool with no helper threads yet (they start on first use); NULL on OOM. */
bf_pool *bf_pool_new(void);
void bf_pool_free(bf_pool *p);   /* joins the helpers; NULL is fine */

/* fn(arg, unit, tid) for every unit in [0, nunits), shared dynamically by up
** to nthreads threads (the caller is tid 0; helpers are started as needed and
** a helper that cannot be started just leaves its share to the others).
** Returns when all units are done.  p may be NULL: the caller does it all. */
typedef void (*bf_unit_fn)(void *arg, int unit, int tid);
void bf_pool_run(bf_pool *p, int nthreads, int nunits, bf_unit_fn fn, void *arg);

/* One output of gemm_xwt: y[T, n] = x[T, K] w[n, K]^T. */
typedef struct gemm_out { float *y; const float *w; int n; } gemm_out;

/* All nout (1..GEMM_MAX_OUT) products of one x, as one job of the pool.
** GEMM_OK, GEMM_NO_KERNEL (no AVX-512: use BLAS), or GEMM_NOMEM (the panel
** buffers could not be allocated: use BLAS). */
int gemm_xwt(bf_pool *p, int nthreads, const float *x, int T, int K,
             int nout, const gemm_out *out);

/* 1 if the CPU has AVX-512 (and the OS keeps its registers), unless the
** environment variable BERTFILL_NO_AVX512 is set to something other than
** "0" when first asked: then the portable code (plain C and OpenBLAS) runs. */
int gemm_have_avx512(void);

#endif
