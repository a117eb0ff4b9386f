/*
** gemm.h — the encoder's matrix products, y = x W^T, on bertfill's own
** kernels (AVX-512 or AVX2).  Engine-internal.
**
** The weights stay as PyTorch stores them ([out, in], read in place from the
** mmap).  Each instruction set has two kernels (kernels/avx512.c,
** kernels/avx2.c; their gemm_kernel_table, kernels/kernels.h) that cover
** every size the encoder meets:
**   - up to dot_max_t rows of x (GEMM_DOT_MAX_T with AVX-512, or
**     GEMM_DOT_MAX_T_DEEP when K >= GEMM_DOT_DEEP_K; GEMM_AVX2_DOT_MAX_T
**     with AVX2: one short sentence, a few masks; kernels.h's
**     gemm_kernel_dot): dot products straight from the rows of W, which are
**     read once from memory and reused from L1 for every token;
**   - more rows: W is copied a strip at a time into a small transposed panel
**     (in L2) and a register tile of y is accumulated from broadcasts of x,
**     the classic blocked-GEMM inner loop.  This replaces OpenBLAS, which
**     repacks all of W on every call and is 20-30% slower here for the sizes
**     of one sentence.
** When every output comes with W already packed (gemm_out.wp: the panels of
** model.packed.safetensors, packed.c) and the set has a packed kernel
** (AVX-512), that kernel runs for any number of rows: the same register
** tiles as the panel kernel on the packed panels, with no copying per call.
** Both run through one job splitter (gemm.c): work is split into units (runs
** of output columns; the last strips of a job also by rows, so that the
** units shrink towards its end) taken dynamically by the threads of a
** bf_pool (pool.h).
**
**   gemm_scratch s = {0};
**   gemm_out o = { y, W, N };                      // y[T,N] = x[T,K] W[N,K]^T
**   if (gemm_xwt(pool, &s, nthreads, x, T, K, 1, &o) != GEMM_OK)
**     ...use BLAS...
**   gemm_scratch_free(&s);
**
** Which kernels run is the kernel set dispatch.c chose (kernels_chosen(),
** gemm_kernels(): cpuid, capped by BERTFILL_KERNELS=avx512|avx2|openblas and
** BERTFILL_NO_AVX512=1; see kernels/kernels.h).  The portable set has no
** products of its own: gemm_xwt then returns GEMM_NO_KERNEL and the caller
** uses BLAS.
*/
#ifndef BERTFILL_GEMM_H
#define BERTFILL_GEMM_H

#include <stddef.h>
#include <stdint.h>
#include "kernels/kernels.h"
#include "pool.h"
#include "qgemm.h"

#define GEMM_MAX_OUT 3 /* outputs sharing one x in one gemm_xwt call (q, k, v) */

enum { GEMM_OK = 0, GEMM_NO_KERNEL = 1, GEMM_NOMEM = 2 };

/* What runs on each row of y once its product is done, in place over the
** columns a unit of work computed (while they are still in cache):
** post(y_row + c0, post_bias + c0, c1 - c0), e.g. the row set's gelu_row
** (kernels.h): y = gelu(y + bias).  It must work element by element, so that
** y does not depend on how the columns were cut.  NULL: nothing. */
typedef void (*gemm_post_fn)(float *y, const float *bias, int n);

/* post(y[t] + c0, post_bias + c0, c1 - c0) for rows [t0, t1) of a y with n
** columns (nothing if post is NULL): what each unit runs, and what a
** caller's own fallback product runs over all of y. */
void gemm_post_rows(gemm_post_fn post, const float *post_bias, float *y, int n, int t0, int t1,
                    int c0, int c1);

/* One output of gemm_xwt: y[T, n] = x[T, K] w[n, K]^T, then post. */
typedef struct gemm_out {
  float *y;
  const float *w;
  int n;
  gemm_post_fn post; /* may be NULL */
  const float *post_bias;
  const float *wp;    /* w packed by gemm_pack_panels, or NULL (then w is read in place) */
  const uint32_t *wh; /* w as bf16 panels (gemm_pack_bf16): gemm_xwt_bf16 reads only these */
} gemm_out;

/* W[n, k] packed into panels for the kernel sets' packed kernels
** (kernels.h's packed_cols): wp[p][j][c] = W[p * GEMM_PACK + c][j] for
** panel p < ceil(n / GEMM_PACK), j < k, c < GEMM_PACK (0 past the last
** row of W): gemm_packed_floats(n, k) floats. */
size_t gemm_packed_floats(int n, int k);
void gemm_pack_panels(float *wp, const float *w, int n, int k);

/* bf16 (bf16 loads): W[n, k] as bf16 panels: wh[p][i][c] = the pair
** (W[r][2i], W[r][2i + 1]) of row r = p * GEMM_PACK + c, each rounded by
** kernels.h's kernels_bf16_round, W[r][2i] in the low half (0 past W):
** gemm_bf16_words(n, k) words. */
size_t gemm_bf16_words(int n, int k);
void gemm_pack_bf16(uint32_t *wh, const float *w, int n, int k);

/* The buffers gemm_xwt keeps between calls (zero-initialise; one per pool):
** the packed panel of W of each thread, x as bf16 pairs, and the table of
** units of a job. */
typedef struct gemm_scratch {
  float *panel[BF_POOL_MAX_THREADS];
  size_t panel_cap[BF_POOL_MAX_THREADS]; /* floats */
  uint32_t *xh;                          /* gemm_xwt_bf16's x */
  size_t xh_cap;                         /* words */
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

/* The same from bf16 panels (every out[o].wh set; out[o].w is not read):
** x rounded to bf16 once (the kernel's rows), then the bf16 kernel dispatch.c
** chose (kernels_bf16_chosen: AVX512-BF16 or the portable one, the same
** bits) on the same job splitter; y does not depend on the threads.  GEMM_OK
** or GEMM_NOMEM (nothing was computed). */
int gemm_xwt_bf16(bf_pool *p, gemm_scratch *s, int nthreads, const float *x, int T, int K, int nout,
                  const gemm_out *out);

/* One output of gemm_xwt_int8: y[T, w->n] = x W^T + bias (bias may be
** NULL), then post (gemm_out's). */
typedef struct gemm_out8 {
  float *y;
  const qg_weights *w;
  const float *bias;
  gemm_post_fn post; /* may be NULL */
  const float *post_bias;
} gemm_out8;

/* The same for int8 (qgemm.h): all nout products of one quantized x (its
** kernel is x->path's), cut into units by the same job splitter as
** gemm_xwt, on up to nthreads threads of p (p and s may be NULL: the
** calling thread does it all).  y does not depend on how the units are
** shared (bit for bit).  GEMM_OK, GEMM_NO_KERNEL (no kernel for x->path in
** this build) or GEMM_NOMEM (nothing was computed). */
int gemm_xwt_int8(bf_pool *p, gemm_scratch *s, int nthreads, const qg_rows *x, int nout,
                  const gemm_out8 *out);

#endif
