/*
** dispatch.c — which kernel set runs (kernels.h): what cpuid says the CPU
** has, capped by BERTFILL_KERNELS / BERTFILL_NO_AVX512, decided once per
** process at the first call; and which int8 kernel (kernels_int8_*).  The
** one place the engine reads cpuid for its kernels.
*/
#include <stdatomic.h>

#include "avx2.h"
#include "avx512.h"
#include "kernels.h"
#include "qgemm.h"
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

/* ---- int8 (kernels.h: kernels_int8*) ---- */

const int8_kernel_table *kernels_int8(int path) {
  switch (path) {
    case QG_PORTABLE: return &int8_portable;
#ifdef BF_HAVE_AVX2
    case QG_AVX2: return &int8_avx2;
#endif
#ifdef BF_HAVE_AVX512
    case QG_AVX512VNNI: return &int8_avx512vnni;
#endif
    default: return NULL;
  }
}

int kernels_int8_supported(int path) {
  if (!kernels_int8(path)) return 0;
  if (path == QG_PORTABLE) return 1;
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init(); /* also checks that the OS saves the ymm/zmm state */
  if (path == QG_AVX2) return __builtin_cpu_supports("avx2") != 0;
  if (path == QG_AVX512VNNI)
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
#endif
  return 0;
}

int kernels_int8_best(void) {
  static atomic_int known = -1;
  int v = atomic_load(&known);
  if (v < 0) {
    v = QG_PORTABLE;
    if (kernels_int8_supported(QG_AVX512VNNI) && !bf_env_flag("BERTFILL_NO_AVX512", 0))
      v = QG_AVX512VNNI;
    else if (kernels_int8_supported(QG_AVX2)) v = QG_AVX2;
    atomic_store(&known, v);
  }
  return v;
}

int kernels_int8_chosen(void) {
  switch (gemm_kernels()) {
    case GEMM_KERNELS_AVX512: return kernels_int8_best();
    case GEMM_KERNELS_AVX2: return kernels_int8_supported(QG_AVX2) ? QG_AVX2 : QG_PORTABLE;
    default: return QG_PORTABLE;
  }
}

/* ---- bf16 (kernels.h: kernels_bf16_*) ---- */

int kernels_bf16_supported(void) {
#if defined(BF_HAVE_AVX512) && defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
#else
  return 0;
#endif
}

const bf16_kernel *kernels_bf16_chosen(void) {
#ifdef BF_HAVE_AVX512
  if (gemm_kernels() == GEMM_KERNELS_AVX512 && kernels_bf16_supported()) return &bf16_avx512bf16;
#endif
  return &bf16_portable;
}
