/*
** bench_gemm.c — bertfill's own matrix-product kernels against the machine
** and against oneDNN, on the shapes of bert-base's encoder (make bench-gemm).
**
** For each product (768 -> 768: query/key/value/attention output, 768 ->
** 3072: feed-forward up, 3072 -> 768: feed-forward down) and each number of
** rows of x (1 .. 2000: one short sentence to a batch), the time of one
** product on BENCH_THREADS threads (default 2), as GOP/s (2 M N K / s) and as
** the GB/s at which W was read:
**   int8   bertfill's int8 kernel (qgemm.h: the kernel bert_load(dir, 'int8')
**          runs on this CPU; BERTFILL_KERNELS caps it as it does the engine),
**   dnnl8  oneDNN's dnnl_gemm_u8s8s32 on the same codes (W row-major),
**   fp32   bertfill's fp32 kernels (gemm.h),
**   dnnl32 oneDNN's dnnl_sgemm;
** oneDNN only when this was built with -DWITH_DNNL (libdnnl-dev; make
** bench-gemm does that when the header is installed) and OMP_NUM_THREADS is
** the thread count.  W comes from memory as in the encoder, not from a warm
** cache: each timing walks enough copies of W (>= 128 MB) that none is still
** cached when it comes round again (BENCH_WARM=1: one copy, warm in the
** caches, as oneDNN's own benchmarks time it).  Numbers are medians of
** BENCH_REPS walks.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gemm.h"
#include "pool.h"
#include "qgemm.h"
#ifdef OLD_ROW_MAJOR /* an engine before the packed layout (for A/B runs) */
#define qg_weights_bytes(n, k) ((size_t)(n) * (size_t)(k))
#endif
#ifdef WITH_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}
static unsigned rng = 7;
static float frand(void) {
  rng = rng * 1103515245u + 12345u;
  return (float)((rng >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}
static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

enum { INT8, DNNL8, FP32, DNNL32, NENG };
static const char *eng_name[NENG] = {"int8", "dnnl8", "fp32", "dnnl32"};

typedef struct shape {
  int N, K, ncopy;
  float *wf;        /* [N][K] fp32 (copy 0) */
  qg_weights *w8;   /* ncopy packed int8 copies */
  int8_t *wrow;     /* ncopy row-major int8 copies (oneDNN) */
  float *wfc;       /* ncopy fp32 copies */
} shape;

static bf_pool *pool;
static gemm_scratch scratch;
static int nthreads = 2, reps = 5;

/* seconds for one product (median of reps walks over every copy) */
static double time_one(int eng, shape *s, int M, const float *x, void *xq_buf, float *y,
                       int32_t *c) {
  double t[32];
  qg_rows X;
  qg_quantize_rows(&X, xq_buf, x, M, s->K, (size_t)s->K, qg_best_path());
  uint8_t *xu8 = malloc((size_t)M * s->K);
  for (size_t e = 0; e < (size_t)M * s->K; e++) xu8[e] = (uint8_t)(e * 7);
  for (int r = 0; r < reps; r++) {
    double t0 = now();
    for (int i = 0; i < s->ncopy; i++) {
      switch (eng) {
        case INT8: {
          gemm_out8 o = {y, &s->w8[i], NULL, NULL, NULL};
          gemm_xwt_int8(pool, &scratch, nthreads, &X, 1, &o);
          break;
        }
        case FP32: {
          gemm_out o = {y, s->wfc + (size_t)i * s->N * s->K, s->N, NULL, NULL};
          gemm_xwt(pool, &scratch, nthreads, x, M, s->K, 1, &o);
          break;
        }
#ifdef WITH_DNNL
        case DNNL8: {
          int32_t co = 0;
          dnnl_gemm_u8s8s32('N', 'T', 'F', M, s->N, s->K, 1.f, xu8, s->K, 0,
                            s->wrow + (size_t)i * s->N * s->K, s->K, 0, 0.f, c, s->N, &co);
          break;
        }
        case DNNL32:
          dnnl_sgemm('N', 'T', M, s->N, s->K, 1.f, x, s->K, s->wfc + (size_t)i * s->N * s->K,
                     s->K, 0.f, y, s->N);
          break;
#endif
        default: break;
      }
    }
    t[r] = (now() - t0) / s->ncopy;
  }
  free(xu8);
  qsort(t, reps, sizeof t[0], cmpd);
  return t[reps / 2];
}

int main(int argc, char **argv) {
  const char *e = getenv("BENCH_THREADS");
  if (e) nthreads = atoi(e);
  e = getenv("BENCH_REPS");
  if (e) reps = atoi(e);
  if (reps < 1) reps = 1;
  if (reps > 32) reps = 32;
  int warm = getenv("BENCH_WARM") && atoi(getenv("BENCH_WARM")); /* one copy of W: from cache */
  int want[NENG] = {1, 0, 1, 0};
#ifdef WITH_DNNL
  want[DNNL8] = want[DNNL32] = 1;
#endif
  if (argc > 1) { /* engines to run, e.g. "int8 dnnl8" */
    memset(want, 0, sizeof want);
    for (int a = 1; a < argc; a++)
      for (int g = 0; g < NENG; g++)
        if (!strcmp(argv[a], eng_name[g])) want[g] = 1;
  }
  int Ms[16] = {1, 8, 16, 20, 24, 32, 64, 128, 640, 2000}, nM = 10;
  if ((e = getenv("BENCH_M")) != NULL) { /* rows to time, e.g. "1 16 2000" */
    nM = 0;
    for (char *t = strtok(strdup(e), " ,"); t && nM < 16; t = strtok(NULL, " ,")) Ms[nM++] = atoi(t);
  }
  static const int NK[3][2] = {{768, 768}, {3072, 768}, {768, 3072}};
  pool = bf_pool_new();
  printf("# bench_gemm: %d threads, int8 kernel %s, fp32 kernels %s, W %s, median of %d\n",
         nthreads, qg_path_name(qg_best_path()), gemm_kernels_name(gemm_kernels()),
         warm ? "warm (one copy)" : "from memory", reps);
  printf("%-6s %5s %5s %5s %9s %8s %7s\n", "engine", "M", "N", "K", "ms", "GOP/s", "W GB/s");
  for (int sh = 0; sh < 3; sh++) {
    shape s = {NK[sh][0], NK[sh][1], 0, 0, 0, 0, 0};
    size_t nk = (size_t)s.N * s.K;
    s.ncopy = warm ? 1 : (int)((128u << 20) / nk) + 1;
    s.wf = malloc(nk * sizeof(float));
    for (size_t i = 0; i < nk; i++) s.wf[i] = frand() * 0.05f;
    s.w8 = calloc(s.ncopy, sizeof *s.w8);
    int8_t *packed = aligned_alloc(64, qg_weights_bytes(s.N, s.K) * s.ncopy);
    float *scale = malloc(sizeof(float) * s.N);
    int32_t *sum = malloc(sizeof(int32_t) * s.N);
    qg_quantize_weights(s.wf, s.N, s.K, packed, scale, sum);
    for (int i = 0; i < s.ncopy; i++) {
      memcpy(packed + i * qg_weights_bytes(s.N, s.K), packed, qg_weights_bytes(s.N, s.K));
      s.w8[i] = (qg_weights){s.N, s.K, packed + i * qg_weights_bytes(s.N, s.K), scale, sum};
    }
    if (want[DNNL8]) {
      s.wrow = malloc(nk * s.ncopy);
      for (size_t i = 0; i < nk * s.ncopy; i++) s.wrow[i] = (int8_t)(i * 13);
    }
    if (want[FP32] || want[DNNL32]) {
      s.wfc = malloc(nk * s.ncopy * sizeof(float));
      for (int i = 0; i < s.ncopy; i++) memcpy(s.wfc + i * nk, s.wf, nk * sizeof(float));
    }
    for (int a = 0; a < nM; a++) {
      int M = Ms[a];
      float *x = malloc(sizeof(float) * M * s.K), *y = malloc(sizeof(float) * M * s.N);
      int32_t *c = malloc(sizeof(int32_t) * M * s.N);
      for (size_t i = 0; i < (size_t)M * s.K; i++) x[i] = frand();
      void *xq = malloc(qg_rows_bytes(M, s.K));
      int save = reps;
      if ((double)M * s.N * s.K * s.ncopy > 2e11) reps = reps > 3 ? 3 : reps; /* big: fewer */
      for (int g = 0; g < NENG; g++) {
        if (!want[g]) continue;
        double t = time_one(g, &s, M, x, xq, y, c);
        double wbytes = (double)nk * (g == FP32 || g == DNNL32 ? 4 : 1);
        printf("%-6s %5d %5d %5d %9.4f %8.1f %7.1f\n", eng_name[g], M, s.N, s.K, t * 1e3,
               2.0 * M * s.N * s.K / t / 1e9, wbytes / t / 1e9);
        fflush(stdout);
      }
      reps = save;
      free(x);
      free(y);
      free(c);
      free(xq);
    }
    free(s.wf);
    free(s.w8);
    free(packed);
    free(scale);
    free(sum);
    free(s.wrow);
    free(s.wfc);
  }
  gemm_scratch_free(&scratch);
  bf_pool_free(pool);
  return 0;
}
