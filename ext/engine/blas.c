/*
** blas.c — OpenBLAS, loaded at run time, with the right kernels.
**
** Why dlopen: OpenBLAS picks its kernels ("core") once, when the library is
** loaded, from CPUID.  Debian 12's OpenBLAS 0.3.21 does not know Sapphire
** Rapids and silently falls back to Prescott (SSE3) kernels, about 5x slower
** for sgemm.  Its SkylakeX kernels run fine there, but the only way to ask
** for them is the OPENBLAS_CORETYPE environment variable, read when the
** library initialises.  Linking against OpenBLAS would initialise it before
** our code runs, so we dlopen() it ourselves:
**
**   1. If the process already has OpenBLAS loaded (dlopen RTLD_NOLOAD), use
**      it as it is: its core was chosen already.
**   2. Else, unless the user set OPENBLAS_CORETYPE, look at CPUID: with
**      AVX512F+BW+DQ+VL enabled by the OS (Skylake-X and newer, Sapphire
**      Rapids included) set OPENBLAS_CORETYPE=SkylakeX just for the dlopen
**      and remove it again, so child processes see the environment they had.
**      On other CPUs (Haswell-class AVX2, AMD without AVX-512) OpenBLAS
**      decides alone.
**   3. dlsym cblas_sgemm and the openblas_* helpers.
**   3b. No OpenBLAS on the machine (the release files of `make dist` need
**      nothing but the C library, docs/dist.md): not an error.  The products
**      that would go to it run on plain C loops here (sgemm_builtin, one
**      thread per call); bf_blas_core() says "builtin" and bf_blas_config()
**      why.  Which products those are: all the fp32 products on CPUs with
**      neither AVX-512 nor AVX2 (arm64 included) or under
**      BERTFILL_KERNELS=openblas, and elsewhere only the fallback when the
**      kernels' panel buffers cannot be allocated (forward.c).  A library
**      that loads but has no cblas_sgemm is still an error (a broken
**      install says so rather than running slower in silence).
**   4. Threads: the engine's own setting (bf_pool_threads, pool.h), given to
**      OpenBLAS (openblas_set_num_threads), not taken from it.  Its default
**      reads OPENBLAS_NUM_THREADS, GOTO_NUM_THREADS and OMP_NUM_THREADS as
**      OpenBLAS does (so they still set the number of both), else the cores
**      this process may run on; bf_blas_set_threads (bert_threads) sets it
**      for both.  What wins: a number set with bf_blas_set_threads, else
**      those variables, else the cores.  A number above what OpenBLAS
**      accepts (its MAX_THREADS, 64 in Debian's build) is cut down to it for
**      the engine too, as OpenBLAS does.
**
** bf_blas_init runs this once (pthread_once) and reports failure in words.
*/
#include "bertfill.h"
#include "blas.h"
#include "pool.h"
#include "util.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { RowMajor = 101, NoTrans = 111, Trans = 112 };

typedef void (*sgemm_fn)(int order, int ta, int tb, int M, int N, int K, float alpha,
                         const float *A, int lda, const float *B, int ldb, float beta, float *C,
                         int ldc);

static pthread_once_t once = PTHREAD_ONCE_INIT;
static void *lib;
static sgemm_fn p_sgemm;
static char *(*p_corename)(void);
static char *(*p_config)(void);
static void (*p_set_threads)(int);
static int (*p_get_threads)(void);
static char init_err[256];
static char core[64] = "";
static char config[256] = "";

/* 3b: C[M,N] = alpha op(A) op(B) + beta C in plain C, row-major, for a
** machine without OpenBLAS.  Each element one sum over k in order (the
** same bits for any M, N or thread); four columns at a time for the
** transB case the engine calls (rows of A and B both contiguous).  The
** arguments as cblas_sgemm's (order: RowMajor only, bf_sgemm's). */
static void sgemm_builtin(int order, int transA, int transB, int M, int N, int K, float alpha,
                          const float *A, int lda, const float *B, int ldb, float beta, float *C,
                          int ldc) {
  (void)order;
  int ta = transA == Trans, tb = transB == Trans;
  for (int i = 0; i < M; i++) {
    float *c = C + (size_t)i * ldc;
    int j = 0;
    if (!ta && tb)
      for (; j + 4 <= N; j += 4) {
        const float *a = A + (size_t)i * lda, *b0 = B + (size_t)j * ldb, *b1 = b0 + ldb,
                    *b2 = b1 + ldb, *b3 = b2 + ldb;
        float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        for (int k = 0; k < K; k++) {
          s0 += a[k] * b0[k];
          s1 += a[k] * b1[k];
          s2 += a[k] * b2[k];
          s3 += a[k] * b3[k];
        }
        float s[4] = {s0, s1, s2, s3};
        for (int u = 0; u < 4; u++) c[j + u] = alpha * s[u] + (beta != 0 ? beta * c[j + u] : 0);
      }
    for (; j < N; j++) {
      float s = 0;
      for (int k = 0; k < K; k++) {
        float a = ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
        float b = tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
        s += a * b;
      }
      c[j] = alpha * s + (beta != 0 ? beta * c[j] : 0);
    }
  }
}

/* Does the CPU (and the OS, via XCR0) support the AVX-512 subsets that
** OpenBLAS's SkylakeX kernels use? */
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
static int cpu_has_avx512_skx(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
  if (!(c & (1u << 27))) return 0; /* OSXSAVE */
  unsigned xlo, xhi;
  __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
  if ((xlo & 0xE6) != 0xE6) return 0; /* SSE, AVX, opmask, ZMM state enabled */
  if (__get_cpuid_max(0, NULL) < 7) return 0;
  __cpuid_count(7, 0, a, b, c, d);
  unsigned need = (1u << 16) | (1u << 17) | (1u << 30) | (1u << 31); /* F, DQ, BW, VL */
  return (b & need) == need;
}
#else
static int cpu_has_avx512_skx(void) { return 0; } /* not x86: OpenBLAS decides */
#endif

/* OpenBLAS to the engine's thread setting; a number OpenBLAS cuts down (above
** its MAX_THREADS) is cut down for the engine too, so that both agree. */
static void threads_to_blas(void) {
  if (!p_set_threads) return; /* not loaded (yet): blas_load gives it the setting */
  int n = bf_pool_threads();
  p_set_threads(n);
  int got = p_get_threads ? p_get_threads() : n;
  if (got > 0 && got < n) bf_pool_set_threads(got);
}

static void blas_load(void) {
  static const char *names[] = {"libopenblas.so.0", "libopenblas.so"};
  int n = (int)(sizeof names / sizeof names[0]);
  for (int i = 0; i < n && !lib; i++) lib = dlopen(names[i], RTLD_NOW | RTLD_NOLOAD);
  if (!lib) {
    int set_core = 0;
    if (!getenv("OPENBLAS_CORETYPE") && cpu_has_avx512_skx()) {
      setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
      set_core = 1;
    }
    for (int i = 0; i < n && !lib; i++) lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (set_core) unsetenv("OPENBLAS_CORETYPE");
  }
  if (!lib) { /* 3b: the built-in products */
    const char *why = dlerror();
    p_sgemm = sgemm_builtin;
    snprintf(core, sizeof core, "builtin");
    snprintf(config, sizeof config,
             "no OpenBLAS (%s): the products it would run use bertfill's plain C loops "
             "(slower; Debian: apt-get install libopenblas0-pthread)",
             why ? why : "dlopen failed");
    return;
  }
  p_sgemm = (sgemm_fn)dlsym(lib, "cblas_sgemm");
  *(void **)&p_corename = dlsym(lib, "openblas_get_corename");
  *(void **)&p_config = dlsym(lib, "openblas_get_config");
  *(void **)&p_set_threads = dlsym(lib, "openblas_set_num_threads");
  *(void **)&p_get_threads = dlsym(lib, "openblas_get_num_threads");
  if (!p_sgemm) {
    snprintf(init_err, sizeof init_err,
             "OpenBLAS was loaded but has no cblas_sgemm symbol (a broken or unusual build)");
    return;
  }
  if (p_corename) {
    const char *s = p_corename();
    snprintf(core, sizeof core, "%s", s ? s : "");
  }
  if (p_config) {
    const char *s = p_config();
    snprintf(config, sizeof config, "%s", s ? s : "");
  }
  threads_to_blas();
}

int bf_blas_init(char *err, size_t errlen) {
  pthread_once(&once, blas_load);
  if (!p_sgemm) {
    bf_errf(err, errlen, "%s", init_err);
    return BF_ERR_BLAS;
  }
  if (err && errlen) err[0] = 0;
  return BF_OK;
}

const char *bf_blas_core(void) { return p_sgemm ? core : ""; }
const char *bf_blas_config(void) { return p_sgemm ? config : ""; }

int bf_blas_max_threads(void) {
  const char *at = p_sgemm ? strstr(config, "MAX_THREADS=") : NULL;
  return at ? atoi(at + strlen("MAX_THREADS=")) : 0;
}

/* The engine's thread setting (pool.h), which OpenBLAS has too. */
int bf_blas_threads(void) { return bf_pool_threads(); }

void bf_blas_set_threads(int n) {
  bf_pool_set_threads(n);
  threads_to_blas();
}

void bf_sgemm(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc) {
  if (!p_sgemm) {
    /* Only reachable if a caller skipped bf_blas_init (bf_model_load calls
    ** it and fails when OpenBLAS is missing).  Never compute garbage. */
    char e[256];
    if (bf_blas_init(e, sizeof e) != BF_OK) {
      fprintf(stderr, "bertfill: %s\n", e);
      abort();
    }
  }
  p_sgemm(RowMajor, transA ? Trans : NoTrans, transB ? Trans : NoTrans, M, N, K, alpha, A, lda, B,
          ldb, beta, C, ldc);
}
