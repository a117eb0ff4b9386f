/*
** rows_avx2.c — forward.c's loops over rows (LayerNorm, GELU, the softmax's
** max and exponentials, additions) with AVX2 and FMA, 8 floats at a time:
** what forward.c runs where gemm_kernels() chose GEMM_KERNELS_AVX2.  The same
** math as forward.c's AVX-512 versions (declared in avx2.h):
**   - exp8: e^x by range reduction (x = n ln2 + r) and a degree-7 Taylor
**     polynomial on |r| <= ln2/2 (error below 1 ulp of float), times 2^n
**     built in the exponent bits;
**   - GELU: erf by Abramowitz & Stegun 7.1.26 (absolute error < 1.5e-7);
**   - LayerNorm: mean and variance summed in double.
*/
#include <math.h>
#include <stdint.h>

#include "avx2.h"

#ifdef BF_HAVE_AVX2
#define INLINE static inline __attribute__((always_inline))

/* e^x for x in [-87, 88] (clamped; NaN stays NaN). */
INLINE AVX2 __m256 exp8(__m256 x) {
  x = _mm256_max_ps(_mm256_set1_ps(-87.0f), x); /* NaN stays NaN (2nd operand) */
  x = _mm256_min_ps(_mm256_set1_ps(88.0f), x);
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x); /* x - n ln2, ln2 in */
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);     /* two parts */
  __m256 p = _mm256_set1_ps(1.0f / 5040);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  /* 2^n for n in [-126, 127]: the exponent field alone */
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)),
                                23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

AVX2 void gelu_row_avx2(float *y, const float *bias, int n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign_bit = _mm256_castsi256_ps(_mm256_set1_epi32(INT32_MIN));
  for (int i = 0; i < n; i += 8) {
    __m256 z = _mm256_add_ps(load8(y + i, n - i), load8(bias + i, n - i));
    __m256 u = _mm256_mul_ps(z, _mm256_set1_ps((float)M_SQRT1_2));
    __m256 a = _mm256_andnot_ps(sign_bit, u); /* |u| */
    __m256 t = _mm256_div_ps(one, _mm256_fmadd_ps(_mm256_set1_ps(0.3275911f), a, one));
    __m256 q = _mm256_set1_ps(1.061405429f);
    q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(-1.453152027f));
    q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(1.421413741f));
    q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(-0.284496736f));
    q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(0.254829592f));
    q = _mm256_mul_ps(q, t);
    __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), _mm256_mul_ps(a, a)));
    __m256 erf_a = _mm256_fnmadd_ps(q, e, one); /* erf(|u|) */
    __m256 erf_u = _mm256_or_ps(erf_a, _mm256_and_ps(u, sign_bit));
    __m256 g = _mm256_mul_ps(_mm256_mul_ps(z, _mm256_set1_ps(0.5f)), _mm256_add_ps(one, erf_u));
    store8(y + i, n - i, g);
  }
}

/* The largest of the 8 lanes. */
INLINE AVX2 float hmax8(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

AVX2 int max_finite_avx2(const float *x, int n, float *max) {
  __m256 mx = _mm256_set1_ps(-INFINITY);
  __m256 bad = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 8) {
    __m256 v = load8(x + i, n - i);
    if (n - i < 8) v = _mm256_blendv_ps(mx, v, _mm256_castsi256_ps(tail8(n - i)));
    __m256 d = _mm256_sub_ps(v, v); /* 0 if finite, NaN if not */
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(d, d, _CMP_UNORD_Q));
    mx = _mm256_max_ps(mx, v);
  }
  *max = hmax8(mx);
  return _mm256_movemask_ps(bad) == 0;
}

/* Lanes 0-3 and 4-7 of v, as doubles, added to s0 and s1. */
INLINE AVX2 void add_pd(__m256d *s0, __m256d *s1, __m256 v) {
  *s0 = _mm256_add_pd(*s0, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
  *s1 = _mm256_add_pd(*s1, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
}

INLINE AVX2 double hsum4d(__m256d v) {
  __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
  return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

AVX2 double exp_sum_avx2(float *dst, const float *x, int n, float mx) {
  __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
  __m256 vmx = _mm256_set1_ps(mx);
  for (int i = 0; i < n; i += 8) {
    __m256 e = exp8(_mm256_sub_ps(load8(x + i, n - i), vmx));
    if (n - i < 8) e = _mm256_and_ps(e, _mm256_castsi256_ps(tail8(n - i))); /* 0 past the end */
    if (dst) store8(dst + i, n - i, e);
    add_pd(&s0, &s1, e);
  }
  return hsum4d(_mm256_add_pd(s0, s1));
}

AVX2 void layernorm_avx2(float *x, const float *g, const float *b, int n, float eps) {
  __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
  for (int i = 0; i < n; i += 8) add_pd(&s0, &s1, load8(x + i, n - i));
  double mean = hsum4d(_mm256_add_pd(s0, s1)) / n;
  __m256d vm = _mm256_set1_pd(mean);
  s0 = _mm256_setzero_pd();
  s1 = _mm256_setzero_pd();
  for (int i = 0; i < n; i += 8) {
    __m256i m = tail8(n - i);
    __m256 v = load8(x + i, n - i);
    __m256d m0 = _mm256_castsi256_pd(_mm256_cvtepi32_epi64(_mm256_castsi256_si128(m)));
    __m256d m1 = _mm256_castsi256_pd(_mm256_cvtepi32_epi64(_mm256_extracti128_si256(m, 1)));
    __m256d d0 = _mm256_and_pd(m0, _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), vm));
    __m256d d1 = _mm256_and_pd(m1, _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), vm));
    s0 = _mm256_fmadd_pd(d0, d0, s0);
    s1 = _mm256_fmadd_pd(d1, d1, s1);
  }
  double var = hsum4d(_mm256_add_pd(s0, s1)) / n;
  __m256 mf = _mm256_set1_ps((float)mean), rstd = _mm256_set1_ps((float)(1.0 / sqrt(var + eps)));
  for (int i = 0; i < n; i += 8) {
    __m256 v = _mm256_mul_ps(_mm256_sub_ps(load8(x + i, n - i), mf), rstd);
    v = _mm256_fmadd_ps(v, load8(g + i, n - i), load8(b + i, n - i));
    store8(x + i, n - i, v);
  }
}

AVX2 void add_avx2(float *x, const float *a, const float *b, int n) {
  for (int i = 0; i < n; i += 8) {
    __m256 v = load8(a + i, n - i);
    if (b) v = _mm256_add_ps(v, load8(b + i, n - i));
    store8(x + i, n - i, _mm256_add_ps(load8(x + i, n - i), v));
  }
}
#endif
