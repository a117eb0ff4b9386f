/*
** avx2.h — what the engine's AVX2 code shares (kernels/avx2.c).
** Engine-internal.
**
** Like the AVX-512 code (avx512.h), the AVX2 code is compiled into every
** x86-64 build made with gcc or clang through target attributes (the rest of
** the engine stays x86-64-v2), and runs only where dispatch.c chose
** GEMM_KERNELS_AVX2 (kernels.h): a CPU with AVX2 and FMA but no AVX-512 (or
** BERTFILL_KERNELS=avx2).
** Building with -DBF_NO_AVX2 leaves it out.
**
**   #include "avx2.h"
**   #ifdef BF_HAVE_AVX2
**   AVX2 static void scale(float *x, int n, float s) {
**     for (int i = 0; i < n; i += 8)       // x[i..i+8) or the tail x[i..n)
**       store8(x + i, n - i, _mm256_mul_ps(load8(x + i, n - i), _mm256_set1_ps(s)));
**   }
**   #endif
*/
#ifndef BERTFILL_AVX2_H
#define BERTFILL_AVX2_H

#if defined(__x86_64__) && defined(__GNUC__) && !defined(BF_NO_AVX2)
#include <immintrin.h>

#define BF_HAVE_AVX2 1
#define AVX2 __attribute__((target("avx2,fma")))

/* Lanes i < n of an 8-wide chunk, as the mask of _mm256_maskload_ps and
** _mm256_maskstore_ps (none if n <= 0, all if n >= 8). */
static inline __attribute__((always_inline)) AVX2 __m256i tail8(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* p[0..8) when n >= 8, else p[0..n) and zeros (nothing past p[n-1] is read):
** full loads and stores in the loop, masked ones (slow on AMD) at its end. */
static inline __attribute__((always_inline)) AVX2 __m256 load8(const float *p, int n) {
  return n >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, tail8(n));
}
static inline __attribute__((always_inline)) AVX2 void store8(float *p, int n, __m256 v) {
  if (n >= 8) _mm256_storeu_ps(p, v);
  else _mm256_maskstore_ps(p, tail8(n), v);
}

/* The sum of the 8 lanes of v, always in the same order. */
static inline __attribute__((always_inline)) AVX2 float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
#endif

#endif
