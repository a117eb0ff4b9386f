/*
** portable.c — the portable kernel set (kernels.h): forward.c's loops over
** rows in plain C, for CPUs with neither AVX-512 nor AVX2 and FMA, and under
** BERTFILL_KERNELS=openblas.  No products of its own: gemm_xwt says
** GEMM_NO_KERNEL and forward.c gives them to OpenBLAS (blas.h).  expf and
** erff from libm; the vector sets' polynomials agree with them to ~1e-7.
*/
#include <math.h>
#include <stddef.h>

#include "int8.h"
#include "kernels.h"

static void layernorm_portable(float *x, const float *g, const float *b, int n, float eps) {
  double mean = 0, var = 0;
  for (int i = 0; i < n; i++) mean += x[i];
  mean /= n;
  for (int i = 0; i < n; i++) {
    double d = x[i] - mean;
    var += d * d;
  }
  var /= n;
  float m = (float)mean, rstd = (float)(1.0 / sqrt(var + eps));
  for (int i = 0; i < n; i++) x[i] = (x[i] - m) * rstd * g[i] + b[i];
}

static void add_portable(float *x, const float *a, const float *b, int n) {
  if (b)
    for (int i = 0; i < n; i++) x[i] += a[i] + b[i];
  else
    for (int i = 0; i < n; i++) x[i] += a[i];
}

static void gelu_row_portable(float *y, const float *bias, int n) {
  for (int i = 0; i < n; i++) {
    float z = y[i] + bias[i];
    y[i] = 0.5f * z * (1.0f + erff(z * (float)M_SQRT1_2));
  }
}

static int max_finite_portable(const float *x, int n, float *max) {
  float mx = -INFINITY;
  for (int i = 0; i < n; i++) {
    if (!isfinite(x[i])) return 0;
    if (x[i] > mx) mx = x[i];
  }
  *max = mx;
  return 1;
}

static double exp_sum_portable(float *dst, const float *x, int n, float mx) {
  double sum = 0;
  for (int i = 0; i < n; i++) {
    float e = expf(x[i] - mx);
    if (dst) dst[i] = e;
    sum += e;
  }
  return sum;
}

const kernel_set kernels_portable = {
  .id = GEMM_KERNELS_OPENBLAS,
  .name = "openblas",
  .gemm = NULL,
  .rows =
    {
      .layernorm = layernorm_portable,
      .add = add_portable,
      .gelu_row = gelu_row_portable,
      .max_finite = max_finite_portable,
      .exp_sum = exp_sum_portable,
    },
};

/* ---- int8 products (kernels/int8.h) ---- */

/* Rows [r0, r1) of x against outputs [i0, i1): per block of 16 outputs,
** per row, 16 sums over the groups of four values of k. */
static void int8_unit_portable(const int8_out *o, int r0, int r1, int i0, int i1) {
  const uint8_t *x = o->x->q;
  const size_t ldq = (size_t)o->x->ldq, KG = ldq / 4;
  for (int b = i0 / 16; b * 16 < i1; b++) {
    const int8_t *wb = int8_block_at(o->w, b);
    int nc = i1 - b * 16 < 16 ? i1 - b * 16 : 16;
    for (int r = r0; r < r1; r++) {
      const uint8_t *xr = x + (size_t)r * ldq;
      int32_t acc[16] = {0};
      for (size_t g = 0; g < KG; g++) {
        const int8_t *wg = wb + g * INT8_GROUP_BYTES;
        const uint8_t *xg = xr + g * 4;
        for (int c = 0; c < 16; c++)
          acc[c] += xg[0] * wg[4 * c] + xg[1] * wg[4 * c + 1] + xg[2] * wg[4 * c + 2] +
                    xg[3] * wg[4 * c + 3];
      }
      for (int c = 0; c < nc; c++) int8_finish_one(o, r, b * 16 + c, acc[c]);
    }
  }
}

const int8_kernel_table int8_portable = {QG_PORTABLE, 1, int8_unit_portable, NULL, NULL};
