/*
** qgemm.h — int8 matrix products: y = x W^T (+ bias) with 8-bit weights and
** 8-bit activations, summed exactly in int32.
**
** What is quantized, and how:
**   - Weights W [n][k] (PyTorch's Linear layout, y = x W^T): symmetric int8
**     per output row, W[i][j] ~ scale[i] * q[i][j], q in [-127, 127] (never
**     -128).  Stored as three plain arrays that can be written to a file and
**     mmapped (for example as tensors of a .safetensors file): the int8
**     matrix, row-major [n][k] like the fp32 one; fp32 scale[n]; and int32
**     sum[n] = sum_j q[i][j], which the activation offset below needs.
**   - Activations x [t][k]: asymmetric u8 per row, computed at run time,
**     x[r][j] ~ scale[r] * (q[r][j] - zero[r]), q in [0, 255], zero in
**     [0, 255], 0.0 exact.  The range of a row is [min(0, min x), max(0, max
**     x)] in 255 steps: a row after GELU (>= -0.17) gets twice the
**     resolution a symmetric code would give it, and u8 x s8 is what
**     AVX512-VNNI's vpdpbusd multiplies.  (This is ONNX Runtime's
**     DynamicQuantizeLinear, but per row instead of per tensor.)
**
** What is computed: for each row r of x and each output i,
**     acc = sum_j (qx[r][j] - zero[r]) * qw[i][j]
**         = sum_j qx[r][j] * qw[i][j] - zero[r] * sum[i]      (exact int32)
**     y[r][i] = (float)acc * (xscale[r] * wscale[i]) + bias[i]
** The sums are exact integer arithmetic (|acc| <= 255 * 127 * k < 2^31 for
** k <= QG_MAX_K, with no saturating step on any path), so every kernel gives
** the same int32 sums and, with one shared epilogue, bit-identical y.
**
** How W is laid out (one layout for every kernel, in memory and in the
** int8 file, so that processes share it): packed for vpdpbusd, in panels of
** 64 outputs, each output's 4 values of k side by side.  For panel p (rows
** 64p to 64p + 63 of W) and group g of 4 columns (k = 4g to 4g + 3):
**     q[((p * KG + g) * 64 + c) * 4 + e] = W[64p + c][4g + e]
** with KG = ceil(k / 4); rows past n and columns past k are 0
** (qg_weights_bytes(n, k) bytes in all; qg_weight_code reads one code).
** The whole matrix is then one stream, panel after panel, and each 64
** bytes hold 16 outputs' next four weights: one vpdpbusd with four bytes of
** x broadcast adds 64 products into 16 sums, with no horizontal reduction.
**
** Kernels (chosen once per quantized activation matrix, see qg_path; in
** kernels/portable.c, avx2.c, avx512.c); all read the packed W in place,
** with no copy per call:
**   QG_PORTABLE    plain C;
**   QG_AVX2        vpmaddwd on int16 (x is widened to int16 when quantized);
**   QG_AVX512VNNI  vpdpbusd on u8 x and s8 W.
** BERTFILL_NO_AVX512=1 rules out the AVX-512 kernel.
**
** Usage:
**     // at load (or once, into a file that is mmapped later)
**     int8_t *wq = aligned_alloc(64, qg_weights_bytes(n, k));
**     qg_quantize_weights(w, n, k, wq, wscale, wsum);
**     qg_weights W = { n, k, wq, wscale, wsum };
**     // per product: quantize x, then multiply (x may serve several W)
**     qg_rows X;
**     void *buf = malloc(qg_rows_bytes(t, k));
**     qg_quantize_rows(&X, buf, x, t, k, ldx, qg_best_path());
**     qg_matmul(y, ldy, &X, &W, bias);                 // one thread
** On the threads of a pool: gemm_xwt_int8 (gemm.h), which cuts the product
** into units (blocks of rows of x by runs of outputs) with the same job
** splitter as the fp32 products; y does not depend on how they are shared.
*/
#ifndef BERTFILL_QGEMM_H
#define BERTFILL_QGEMM_H

#include <stddef.h>
#include <stdint.h>

#define QG_MAX_K 65536 /* longest row: 255 * 127 * QG_MAX_K < 2^31 */

typedef enum { QG_PORTABLE = 0, QG_AVX2 = 1, QG_AVX512VNNI = 2 } qg_path;

/* The fastest kernel this CPU (and the OS) supports; BERTFILL_NO_AVX512
** (read when first asked) rules out QG_AVX512VNNI. */
qg_path qg_best_path(void);
/* 1 if the CPU supports path (ignores BERTFILL_NO_AVX512: tests use it). */
int qg_path_supported(qg_path path);
const char *qg_path_name(qg_path path); /* "portable", "avx2", "avx512vnni" */

/* ------------------------------------------------------------ weights */

typedef struct qg_weights {
  int n, k;           /* W is [n][k]; 1 <= k <= QG_MAX_K */
  const int8_t *q;    /* packed (see the top), values in [-127, 127] */
  const float *scale; /* [n] W[i][j] ~ scale[i] * qg_weight_code(w, i, j) */
  const int32_t *sum; /* [n] sum over j of qg_weight_code(w, i, j) */
} qg_weights;

/* Bytes of the packed codes of W [n][k]: ceil(n/64)*64 * ceil(k/4)*4. */
size_t qg_weights_bytes(int n, int k);

/* The code of W[i][j] in the packed layout. */
static inline int qg_weight_code(const qg_weights *w, int i, int j) {
  size_t kg = ((size_t)w->k + 3) / 4;
  return w
    ->q[(((size_t)(i / 64) * kg + (size_t)(j / 4)) * 64 + (size_t)(i % 64)) * 4 + (size_t)(j % 4)];
}

/* Quantize w [n][k] (row-major fp32) into q (qg_weights_bytes(n, k) bytes,
** packed), scale [n], sum [n]: scale[i] = max_j |w[i][j]| / 127, code =
** round(w / scale) (a row of zeros gets scale 0 and codes 0).  Returns 0;
** -1 if w holds a NaN or infinity (the outputs are then unspecified) or k
** is not in 1..QG_MAX_K (nothing written). */
int qg_quantize_weights(const float *w, int n, int k, int8_t *q, float *scale, int32_t *sum);

/* ------------------------------------------------------------ activations */

typedef struct qg_rows {
  int t, k;            /* t rows of k values */
  qg_path path;        /* the kernel that will multiply them */
  int ldq;             /* codes per row of q: k rounded up to 4 (the extra codes are 0) */
  const void *q;       /* [t][ldq]: uint8_t, or for QG_AVX2 int16_t (same values) */
  const float *scale;  /* [t] */
  const int32_t *zero; /* [t] */
} qg_rows;

/* Bytes of buffer qg_quantize_rows needs for t rows of k (any path). */
size_t qg_rows_bytes(int t, int k);

/* Quantize x [t][k] (row r at x + r*ldx) into buf (qg_rows_bytes(t, k)
** bytes, any alignment) and describe the result in *out, for the kernel
** path (which must be supported: qg_best_path() or qg_path_supported).  A
** row with a NaN or infinity gets scale NaN, so that its outputs are NaN as
** they would be in fp32.  buf must outlive *out. */
void qg_quantize_rows(qg_rows *out, void *buf, const float *x, int t, int k, size_t ldx,
                      qg_path path);

/* The same in two steps, so that the rows can be quantized by several
** threads: qg_rows_init lays buf out for t rows of k and describes them in
** *out (no codes yet); qg_quantize_rows_range quantizes rows [r0, r1) of x
** into that buffer (calls for disjoint ranges may run at once).  Together
** over all rows they give exactly what qg_quantize_rows gives. */
void qg_rows_init(qg_rows *out, void *buf, int t, int k, qg_path path);
void qg_quantize_rows_range(const qg_rows *out, const float *x, size_t ldx, int r0, int r1);

/* ------------------------------------------------------------ products */

/* y[r*ldy + i] = (x W^T)[r][i] + bias[i] (bias may be NULL) for all t rows
** of x and n outputs, on the calling thread.  x->k must equal w->k. */
void qg_matmul(float *y, size_t ldy, const qg_rows *x, const qg_weights *w, const float *bias);

/* The exact sums only: c[r*ldc + i] = sum_j (qx[r][j] - zero[r]) * qw[i][j]
** (for tests and for callers that dequantize themselves). */
void qg_matmul_i32(int32_t *c, size_t ldc, const qg_rows *x, const qg_weights *w);

/* Rows of x per block of a product: as many as keep the block's codes in
** L2 while W passes (a multiple of 24, at least 24); gemm_xwt_int8 cuts
** its units with it too. */
int qg_row_block(const qg_rows *x);

#endif
