/*
** avx512.h — what the engine's AVX-512 code shares (kernels/avx512.c).
** Engine-internal.
**
** The AVX-512 code is compiled into every x86-64 build made with gcc or
** clang, through target attributes (the rest of the engine stays
** x86-64-v2), and runs only where dispatch.c chose GEMM_KERNELS_AVX512
** (kernels.h): the CPU has it and the environment does not turn it off.
** Building with -DBF_NO_AVX512 leaves it out.
**
**   #include "avx512.h"
**   #ifdef BF_HAVE_AVX512
**   AVX512 static void scale(float *x, int n, float s) {
**     for (int i = 0; i < n; i += 16) {
**       __mmask16 m = tail16(n - i);      // the lanes inside x[0..n)
**       __m512 v = _mm512_maskz_loadu_ps(m, x + i);
**       _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(v, _mm512_set1_ps(s)));
**     }
**   }
**   #endif
*/
#ifndef BERTFILL_AVX512_H
#define BERTFILL_AVX512_H

#if defined(__x86_64__) && defined(__GNUC__) && !defined(BF_NO_AVX512)
#include <immintrin.h>

#define BF_HAVE_AVX512 1
#define AVX512 __attribute__((target("avx512f,fma")))

/* Lanes i < n of a 16-wide chunk (none if n <= 0). */
static inline __attribute__((always_inline)) __mmask16 tail16(int n) {
  return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}
#endif

#endif
