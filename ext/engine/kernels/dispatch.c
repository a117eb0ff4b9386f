/*
** dispatch.c — which kernel set runs (kernels.h): what cpuid says the CPU
** has, capped by BERTFILL_KERNELS / BERTFILL_NO_AVX512, decided once per
** process at the first call.  The one place the engine reads cpuid for its
** fp32 and row kernels (qgemm.c still has its own check for the int8 ones).
*/
#include <stdatomic.h>

#include "avx2.h"
#include "avx512.h"
#include "kernels.h"
#include "util.h"

/* The best set the CPU has (libgcc's cpuid checks also ask the OS, via
** XGETBV, whether it saves the ymm/zmm registers). */
static int cpu_kernels(void) {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
#ifdef BF_HAVE_AVX512
  if (__builtin_cpu_supports("avx512f")) return GEMM_KERNELS_AVX512;
#endif
#ifdef BF_HAVE_AVX2
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return GEMM_KERNELS_AVX2;
#endif
#endif
  return GEMM_KERNELS_OPENBLAS;
}

static const char *const kernel_names[] = {"openblas", "avx2", "avx512"}; /* GEMM_KERNELS_* */

const char *gemm_kernels_name(int kernels) {
  return kernels >= 0 && kernels <= GEMM_KERNELS_AVX512 ? kernel_names[kernels] : "?";
}

int gemm_kernels(void) {
  static atomic_int known = -1;
  int v = atomic_load(&known);
  if (v < 0) {
    /* the cap from the environment (tests, debugging): see kernels.h */
    int cap = bf_env_choice("BERTFILL_KERNELS", kernel_names, 3, GEMM_KERNELS_AVX512);
    if (bf_env_flag("BERTFILL_NO_AVX512", 0)) cap = GEMM_KERNELS_OPENBLAS;
    v = cpu_kernels();
    if (v > cap) v = cap;
    atomic_store(&known, v);
  }
  return v;
}

int gemm_have_avx512(void) { return gemm_kernels() == GEMM_KERNELS_AVX512; }

const kernel_set *kernels_chosen(void) {
  switch (gemm_kernels()) {
#ifdef BF_HAVE_AVX512
    case GEMM_KERNELS_AVX512: return &kernels_avx512;
#endif
#ifdef BF_HAVE_AVX2
    case GEMM_KERNELS_AVX2: return &kernels_avx2;
#endif
    default: return &kernels_portable;
  }
}
