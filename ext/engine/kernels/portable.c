/*
** portable.c — the portable kernel set (kernels.h): forward.c's loops over
** rows in plain C, for CPUs with neither AVX-512 nor AVX2 and FMA, and under
** BERTFILL_KERNELS=openblas, and all of arm64's.  No fp32 products of its
** own: gemm_xwt says GEMM_NO_KERNEL and forward.c gives them to OpenBLAS
** (blas.h; on a machine without OpenBLAS, blas.c's plain C loops).  expf and
** erff from libm; the vector sets' polynomials agree with them to ~1e-7.
** Also the int8 products' plain C, and the bf16 products' (the definition
** that the AVX512-BF16 kernel matches bit for bit, for every CPU without it).
*/
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

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

/* ---- bf16 (kernels.h's bf16_kernel): vdpbf16ps's arithmetic in C ---- */

/* A denormal read as zero (of its sign), as AVX512-BF16 reads its inputs
** and flushes its results. */
static inline float bf16_daz(float v) { return fabsf(v) < FLT_MIN ? copysignf(0.0f, v) : v; }

/* The bf16 in the low (lo = 1) or high half of a pair, as a float. */
static inline float bf16_half(uint32_t pair, int lo) {
  uint32_t u = lo ? pair << 16 : pair & 0xffff0000u;
  float f;
  memcpy(&f, &u, sizeof f);
  return bf16_daz(f);
}

/* One pair into acc: the high halves' product first, each sum rounded once
** (a product of two bf16 is exact in double, and so is its sum with a float
** wherever the rounding to float could depend on it). */
static inline float bf16_step(float acc, uint32_t x, uint32_t w) {
  acc = bf16_daz((float)((double)bf16_daz(acc) + (double)bf16_half(x, 0) * bf16_half(w, 0)));
  return bf16_daz((float)((double)acc + (double)bf16_half(x, 1) * bf16_half(w, 1)));
}

static void bf16_cols_portable(float *y, const uint32_t *xh, const uint32_t *Wh, int T, int N,
                               int KP, int c0, int c1, int next) {
  (void)next;
  for (int n0 = c0; n0 < c1; n0 += GEMM_PACK) {
    const uint32_t *wp = Wh + (size_t)(n0 / GEMM_PACK) * (size_t)KP * GEMM_PACK;
    int nc = c1 - n0 < GEMM_PACK ? c1 - n0 : GEMM_PACK; /* c1 <= N */
    for (int t = 0; t < T; t++) {
      const uint32_t *xr = xh + (size_t)t * KP;
      float acc[GEMM_PACK] = {0};
      for (int k = 0; k < KP; k++)
        for (int c = 0; c < nc; c++)
          acc[c] = bf16_step(acc[c], xr[k], wp[(size_t)k * GEMM_PACK + c]);
      memcpy(y + (size_t)t * N + n0, acc, (size_t)nc * sizeof *acc);
    }
  }
}

static void bf16_rows_portable(uint32_t *xh, const float *x, int T, int K) {
  int KP = (K + 1) / 2;
  for (int t = 0; t < T; t++) {
    const float *xr = x + (size_t)t * K;
    uint32_t *o = xh + (size_t)t * KP;
    for (int i = 0; i < KP; i++) o[i] = kernels_bf16_pair(xr, i, K);
  }
}

const bf16_kernel bf16_portable = {"portable", 1, bf16_cols_portable, bf16_rows_portable};
