/*
** test_gemm.c — the matrix kernels of ext/engine/kernels/avx512.c and
** kernels/avx2.c, run by gemm.c's job splitter (gemm_xwt), against a plain
** double loop: y[T,N] = x[T,K] W[N,K]^T
** for shapes that hit every path (dot kernel up to GEMM_DOT_MAX_T rows, or
** GEMM_DOT_MAX_T_DEEP for K >= GEMM_DOT_DEEP_K, or GEMM_AVX2_DOT_MAX_T rows;
** panel kernel beyond; K in chunks and a tail; K and N not multiples of 8,
** 16 or 32; one to three outputs per job; 1, 2 and 3 threads), results
** independent of the thread count.  It checks the kernels gemm_kernels()
** chose (tests/c/t_c.sh gemm runs it under each BERTFILL_KERNELS setting); where
** that is GEMM_KERNELS_OPENBLAS gemm_xwt must say GEMM_NO_KERNEL (checked).
** The thread pool itself: test_pool.c.
*/
#include <math.h>
#include "gemm.h"
#include "util.h"
#include "testlib.h"

static unsigned rng = 12345;
static float frand(void) {
  rng = rng * 1103515245u + 12345u;
  return (float)((rng >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}

/* max |y - x W^T| / (|x| |w| K)-scaled, against double sums */
static double max_err(const float *y, const float *x, const float *W, int T, int N, int K) {
  double worst = 0;
  for (int t = 0; t < T; t++)
    for (int n = 0; n < N; n++) {
      double s = 0, a = 0;
      for (int k = 0; k < K; k++) {
        s += (double)x[(size_t)t * K + k] * W[(size_t)n * K + k];
        a += fabs((double)x[(size_t)t * K + k] * W[(size_t)n * K + k]);
      }
      double e = fabs(y[(size_t)t * N + n] - s) / (a + 1e-30);
      if (!(e <= worst)) worst = e; /* NaN counts as worst */
    }
  return worst;
}

/* An element-by-element post operation (gemm.h): y = y / 2 + bias. */
static float post_bias[256];
static void test_post(float *y, const float *bias, int n) {
  for (int i = 0; i < n; i++) y[i] = y[i] * 0.5f + bias[i];
}

/* The attention kernels of the set (kernels.h: att_scores, att_values),
** where it has them, against double loops: queries, keys and values read
** with strides from wider rows (as forward.c's q, k, v), Lq and L across the
** tiles' remainders (6 queries, 64 keys or columns per tile), d not a
** multiple of 16 too; outside the outputs nothing is written. */
static void test_attention(const gemm_kernel_table *kt) {
  if (!kt->att_scores || !kt->att_values) {
    printf("# gemm: the %s set has no attention kernels (forward.c runs plain C)\n",
           gemm_kernels_name(gemm_kernels()));
    return;
  }
  static const int Ls[] = {1, 2, 5, 6, 7, 13, 16, 17, 20, 33, 64, 65, 130};
  static const int ds[] = {1, 8, 20, 64, 80};
  int nrun = 0, nbad = 0;
  double worst = 0;
  char why[200] = "";
  for (size_t a = 0; a < sizeof Ls / sizeof Ls[0]; a++)
    for (size_t b = 0; b < sizeof ds / sizeof ds[0]; b++)
      for (int qcase = 0; qcase < 3; qcase++) {
        int L = Ls[a], d = ds[b], Lq = qcase == 0 ? L : qcase == 1 ? (L + 1) / 2 : 1;
        size_t ld = (size_t)3 * d + 5; /* rows wider than a head, as in forward.c */
        int lds = ((L + 15) & ~15) + (qcase == 2 ? 16 : 0);
        float *q = malloc(sizeof(float) * Lq * ld), *k = malloc(sizeof(float) * L * ld);
        float *v = malloc(sizeof(float) * L * ld), *ctx = malloc(sizeof(float) * Lq * ld);
        float *S = malloc(sizeof(float) * Lq * lds), *kt2 = malloc(sizeof(float) * d * lds);
        for (size_t i = 0; i < Lq * ld; i++) q[i] = frand(), ctx[i] = 7;
        for (size_t i = 0; i < L * ld; i++) k[i] = frand(), v[i] = frand();
        for (int i = 0; i < Lq * lds; i++) S[i] = 7;
        float scale = 0.125f;
        kt->att_scores(S, lds, q + 2, ld, Lq, k + 2, ld, L, d, scale, kt2);
        double e = 0;
        int outside = 0;
        for (int i = 0; i < Lq; i++)
          for (int j = 0; j < lds; j++) {
            float got = S[(size_t)i * lds + j];
            if (j >= L) {
              outside |= got != 7;
              continue;
            }
            double r = 0, mag = 0;
            for (int c = 0; c < d; c++) {
              r += (double)q[i * ld + 2 + c] * k[j * ld + 2 + c];
              mag += fabs((double)q[i * ld + 2 + c] * k[j * ld + 2 + c]);
            }
            double err = fabs(got - r * scale) / (mag * scale + 1e-30);
            if (!(err <= e)) e = err;
          }
        /* probabilities-like weights for the values: any numbers do */
        for (int i = 0; i < Lq; i++)
          for (int j = 0; j < L; j++) S[(size_t)i * lds + j] = frand();
        kt->att_values(ctx + 3, ld, S, lds, Lq, v + 3, ld, L, d);
        for (int i = 0; i < Lq; i++)
          for (size_t c = 0; c < ld; c++) {
            float got = ctx[i * ld + c];
            if (c < 3 || c >= 3 + (size_t)d) {
              outside |= got != 7;
              continue;
            }
            double r = 0, mag = 0;
            for (int j = 0; j < L; j++) {
              r += (double)S[(size_t)i * lds + j] * v[j * ld + c];
              mag += fabs((double)S[(size_t)i * lds + j] * v[j * ld + c]);
            }
            double err = fabs(got - r) / (mag + 1e-30);
            if (!(err <= e)) e = err;
          }
        nrun++;
        if (e > worst) worst = e;
        if (!(e < 1e-5) || outside) {
          nbad++;
          snprintf(why, sizeof why, "L=%d Lq=%d d=%d: relative error %g%s", L, Lq, d, e,
                   outside ? ", wrote outside its outputs" : "");
        }
        free(q), free(k), free(v), free(ctx), free(S), free(kt2);
      }
  CHECKF("gemm: attention kernels match double loops (relative 1e-5), strided rows", nbad == 0,
         "%d of %d wrong; last: %s", nbad, nrun, why);
  printf("# gemm: attention kernels, %d shapes, worst relative error %.3g\n", nrun, worst);
}

/* gemm_pack_panels against its definition (gemm.h), element by element:
** wp[p][j][c] = W[p * GEMM_PACK + c][j], 0 past the last row; nothing
** written past gemm_packed_floats. */
static void test_pack_layout(void) {
  static const int NKs[][2] = {{1, 1}, {64, 3}, {65, 70}, {130, 129}, {200, 7}};
  int nbad = 0;
  char why[160] = "";
  for (size_t b = 0; b < sizeof NKs / sizeof NKs[0]; b++) {
    int n = NKs[b][0], k = NKs[b][1];
    size_t nf = gemm_packed_floats(n, k);
    float *w = malloc(sizeof(float) * n * k), *wp = malloc(sizeof(float) * (nf + 16));
    for (int i = 0; i < n * k; i++) w[i] = frand();
    for (size_t i = 0; i < nf + 16; i++) wp[i] = NAN;
    gemm_pack_panels(wp, w, n, k);
    if (nf != (size_t)((n + 63) / 64) * 64 * k)
      nbad++, snprintf(why, sizeof why, "n=%d k=%d: size %zu", n, k, nf);
    for (int p = 0; p < (n + 63) / 64; p++)
      for (int j = 0; j < k; j++)
        for (int c = 0; c < 64; c++) {
          int r = p * 64 + c;
          float want = r < n ? w[(size_t)r * k + j] : 0.0f;
          if (memcmp(&wp[((size_t)p * k + j) * 64 + c], &want, sizeof want) != 0) {
            nbad++;
            snprintf(why, sizeof why, "n=%d k=%d: panel %d, k %d, column %d", n, k, p, j, c);
          }
        }
    for (int i = 0; i < 16; i++)
      if (!isnan(wp[nf + i]))
        nbad++, snprintf(why, sizeof why, "n=%d k=%d: written past the end", n, k);
    free(w);
    free(wp);
  }
  CHECKF("gemm: gemm_pack_panels lays W out as gemm.h says", nbad == 0, "%d wrong; last: %s", nbad,
         why);
}

int main(void) {
  for (int i = 0; i < 256; i++) post_bias[i] = frand();
  bf_pool *p = bf_pool_new();
  gemm_scratch s = {0};
  CHECK("gemm: pool created", p != NULL);

  test_pack_layout();
  int kernels = gemm_kernels();
  const char *name = gemm_kernels_name(kernels);
  int dot_max = kernels == GEMM_KERNELS_AVX512 ? GEMM_DOT_MAX_T : GEMM_AVX2_DOT_MAX_T;
  int dot_max_deep = kernels == GEMM_KERNELS_AVX512 ? GEMM_DOT_MAX_T_DEEP : GEMM_AVX2_DOT_MAX_T;
  CHECK("gemm: gemm_have_avx512() agrees with gemm_kernels()",
        gemm_have_avx512() == (kernels == GEMM_KERNELS_AVX512));
  const char *cap = getenv("BERTFILL_KERNELS");
  int cap_ok = bf_env_flag("BERTFILL_NO_AVX512", 0) ? kernels == GEMM_KERNELS_OPENBLAS
               : !cap                               ? 1
               : !strcmp(cap, "avx2")               ? kernels <= GEMM_KERNELS_AVX2
               : !strcmp(cap, "openblas")           ? kernels == GEMM_KERNELS_OPENBLAS
                                                    : 1;
  CHECKF("gemm: BERTFILL_KERNELS and BERTFILL_NO_AVX512 cap the kernels", cap_ok, "got %s", name);
  if (kernels == GEMM_KERNELS_OPENBLAS) {
    float x = 1, w = 1, y = 0;
    gemm_out o = {&y, &w, 1, NULL, NULL, NULL};
    CHECK("gemm: no kernels: GEMM_NO_KERNEL",
          gemm_xwt(p, &s, 1, &x, 1, 1, 1, &o) == GEMM_NO_KERNEL);
    if (getenv("BERTFILL_KERNELS") || getenv("BERTFILL_NO_AVX512"))
      printf("# gemm kernels turned off by the environment; they are checked in the runs without "
             "it\n");
    else SKIP("gemm kernels", "this CPU has neither AVX-512 nor AVX2 and FMA");
    bf_pool_free(p);
    gemm_scratch_free(&s);
    TL_EXIT();
  }
  printf("# gemm: checking the %s kernels (dot kernel up to %d rows, %d for K >= %d)\n", name,
         dot_max, dot_max_deep, GEMM_DOT_DEEP_K);

  /* every remainder of the tiles: 6x4 and 3x8 (AVX-512 dot), 3x4 (AVX2 dot), 6x16 and 8x48
  ** (panel); both sides of each switch between the kernels */
  _Static_assert(GEMM_DOT_MAX_T == 24 && GEMM_DOT_MAX_T_DEEP == 48 && GEMM_AVX2_DOT_MAX_T == 80,
                 "Ts lists 24, 25, 48, 49, 80, 81");
  _Static_assert(GEMM_DOT_DEEP_K == 2048, "NKs lists K 2047 and 2100 (chunks of 768 and a tail)");
  static const int Ts[] = {1,  2,  3,  4,  5,  6,  7,  8,  13, 16, 17, 19, 23, 24, 25,
                           31, 32, 33, 36, 37, 48, 49, 64, 80, 81, 84, 85, 86, 89, 130};
  static const int NKs[][2] = {{1, 1},    {7, 5},    {31, 17},  {32, 16},   {33, 48},
                               {64, 100}, {100, 33}, {96, 768}, {200, 129}, {50, 7},
                               {49, 9},   {17, 24},  {2, 3},    {13, 2100}, {7, 2047}};
  int nshape = 0, nbad = 0;
  double worst = 0;
  char why[256] = "";
  for (size_t a = 0; a < sizeof Ts / sizeof Ts[0]; a++)
    for (size_t b = 0; b < sizeof NKs / sizeof NKs[0]; b++) {
      int T = Ts[a], N = NKs[b][0], K = NKs[b][1];
      float *x = malloc(sizeof(float) * T * K), *W = malloc(sizeof(float) * 3 * N * K);
      float *y[3], *y1 = malloc(sizeof(float) * T * N);
      for (int i = 0; i < T * K; i++) x[i] = frand();
      for (int i = 0; i < 3 * N * K; i++) W[i] = frand();
      for (int i = 0; i < 3; i++) y[i] = malloc(sizeof(float) * T * N);
      /* three outputs of different widths share x: N, N-1 (if > 0), N */
      int n2 = N > 1 ? N - 1 : N;
      /* each output's W also packed into panels (gemm_pack_panels) */
      float *Wp[3];
      for (int i = 0; i < 3; i++) {
        Wp[i] = malloc(sizeof(float) * gemm_packed_floats(N, K));
        gemm_pack_panels(Wp[i], W + (size_t)i * N * K, i == 1 ? n2 : N, K);
      }
      for (int pk = 0; pk < 2; pk++) { /* W in place, then packed */
        gemm_out o[3] = {{y[0], W, N, NULL, NULL, pk ? Wp[0] : NULL},
                         {y[1], W + (size_t)N * K, n2, NULL, NULL, pk ? Wp[1] : NULL},
                         {y[2], W + (size_t)2 * N * K, N, NULL, NULL, pk ? Wp[2] : NULL}};
        const char *how = pk ? " packed" : "";
        for (int nt = 1; nt <= 3; nt++) {
          for (int i = 0; i < 3; i++)
            for (int j = 0; j < T * N; j++) y[i][j] = NAN;
          int rc = gemm_xwt(p, &s, nt, x, T, K, 3, o);
          nshape++;
          if (rc != GEMM_OK) {
            nbad++;
            snprintf(why, sizeof why, "T=%d N=%d K=%d%s threads=%d: rc %d", T, N, K, how, nt, rc);
            continue;
          }
          for (int i = 0; i < 3; i++) {
            double e = max_err(y[i], x, o[i].w, T, o[i].n, K);
            if (e > worst) worst = e;
            if (!(e < 1e-5)) {
              nbad++;
              snprintf(why, sizeof why, "T=%d N=%d K=%d%s threads=%d output %d: relative error %g",
                       T, o[i].n, K, how, nt, i, e);
            }
          }
          if (nt == 1) memcpy(y1, y[0], sizeof(float) * T * N);
          else if (memcmp(y1, y[0], sizeof(float) * T * N) != 0) {
            nbad++;
            snprintf(why, sizeof why, "T=%d N=%d K=%d%s: %d threads differ from 1 thread", T, N, K,
                     how, nt);
          }
        }
        /* a post operation runs on each unit's columns: the same y as the
      ** product and then post on whole rows, on 1-3 threads */
        for (int t = 0; t < T; t++) test_post(y1 + (size_t)t * N, post_bias, N);
        for (int nt = 1; nt <= 3; nt++) {
          for (int j = 0; j < T * N; j++) y[0][j] = NAN;
          gemm_out op = {y[0], W, N, test_post, post_bias, o[0].wp};
          int rc = gemm_xwt(p, &s, nt, x, T, K, 1, &op);
          nshape++;
          if (rc != GEMM_OK || memcmp(y1, y[0], sizeof(float) * T * N) != 0) {
            nbad++;
            snprintf(why, sizeof why, "T=%d N=%d K=%d%s threads=%d: with post, rc %d, another y", T,
                     N, K, how, nt, rc);
          }
        }
        /* one output, no pool */
        for (int j = 0; j < T * N; j++) y[0][j] = NAN;
        gemm_out o1 = {y[0], W, N, NULL, NULL, o[0].wp};
        int rc = gemm_xwt(NULL, NULL, 2, x, T, K, 1, &o1);
        double e = rc == GEMM_OK ? max_err(y[0], x, W, T, N, K) : 1;
        nshape++;
        if (!(e < 1e-5)) {
          nbad++;
          snprintf(why, sizeof why, "T=%d N=%d K=%d%s without a pool: rc %d error %g", T, N, K, how,
                   rc, e);
        }
      }
      for (int i = 0; i < 3; i++) free(Wp[i]);
      free(x);
      free(W);
      free(y1);
      for (int i = 0; i < 3; i++) free(y[i]);
    }
  CHECKF("gemm: all shapes, W in place and packed, match the double loop (relative 1e-5), same "
         "bits for 1-3 threads",
         nbad == 0, "%d of %d runs wrong; last: %s", nbad, nshape, why);
  printf("# gemm: %d runs, worst relative error %.3g\n", nshape, worst);

  test_attention(kernels_chosen()->gemm);

  float x = 1, w = 2, y = 0;
  gemm_out bad = {&y, &w, 1, NULL, NULL, NULL};
  CHECK("gemm: 0 outputs refused", gemm_xwt(p, &s, 1, &x, 1, 1, 0, &bad) != GEMM_OK);
  CHECK("gemm: 4 outputs refused", gemm_xwt(p, &s, 1, &x, 1, 1, 4, &bad) != GEMM_OK);
  bf_pool_free(p);
  gemm_scratch_free(&s);
  TL_EXIT();
}
