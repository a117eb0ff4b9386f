/*
** portable.c — the portable kernel set (kernels.h): forward.c's loops over
** rows in plain C, for CPUs with neither AVX-512 nor AVX2 and FMA, and under
** BERTFILL_KERNELS=openblas.  No products of its own: gemm_xwt says
** GEMM_NO_KERNEL and forward.c gives them to OpenBLAS (blas.h).  expf and
** erff from libm; the vector sets' polynomials agree with them to ~1e-7.
*/
#include <math.h>
#include <stddef.h>

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
