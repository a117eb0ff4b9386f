/*
** test_qgemm.c — the int8 products of ext/engine/qgemm.c:
**   - quantizing: weights within half a step, the row sums, the u8 rows of
**     x within half a step with 0.0 exact; NaN and zero rows;
**   - the portable kernel's int32 sums against an int64 loop (exact), and
**     its y against a double loop of the dequantized math (float rounding);
**   - every SIMD kernel the CPU has (AVX2; AVX512-VNNI where present, else
**     "skip") against the portable one: the same codes, the same int32 sums
**     and bit-identical y;
**   - shapes: bert-base's (768 -> 768, 768 -> 3072, 3072 -> 768, the
**     21128-word decoder), small odd ones with k not a multiple of any
**     vector, 1..200 rows of x, strides, several blocks of rows per job;
**   - the largest sums (k = QG_MAX_K at full scale: no overflow or
**     saturation on any path);
**   - the product on 3 threads (gemm_xwt_int8, the job splitter shared
**     with fp32) gives the same y, bit for bit;
**   - how far int8 is from fp32 on random data ("#" lines, and a bound).
*/
#include <math.h>
#include <stdint.h>
#include "gemm.h"
#include "pool.h"
#include "qgemm.h"
#include "testlib.h"

static unsigned rng = 2024;
static float frand(void) { /* uniform in [-1, 1) */
  rng = rng * 1103515245u + 12345u;
  return (float)((rng >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}
static float gauss(void) { return (frand() + frand() + frand() + frand()) * 0.866f; }
static float gelu(float v) { return 0.5f * v * (1 + erff(v / sqrtf(2))); }
/* An element-by-element post operation (gemm.h): y = y / 2 + bias. */
static void test_post(float *y, const float *bias, int n) {
  for (int i = 0; i < n; i++) y[i] = y[i] * 0.5f + bias[i];
}

static bf_pool *pool;
static gemm_scratch scratch;
static int npaths;
static qg_path paths[3]; /* the SIMD paths this CPU has */
static char why[512];

typedef struct wq {
  int8_t *q;
  float *scale;
  int32_t *sum;
  qg_weights w;
} wq;

static int wq_make(wq *m, const float *w, int n, int k) {
  m->q = malloc(qg_weights_bytes(n, k > 0 && k <= QG_MAX_K ? k : 1));
  m->scale = malloc(sizeof(float) * n);
  m->sum = malloc(sizeof(int32_t) * n);
  int rc = qg_quantize_weights(w, n, k, m->q, m->scale, m->sum);
  m->w = (qg_weights){n, k, m->q, m->scale, m->sum};
  return rc;
}
static void wq_free(wq *m) {
  free(m->q);
  free(m->scale);
  free(m->sum);
}

/* code j of row r of x, whatever the path's storage */
static int xcode(const qg_rows *x, int r, int j) {
  size_t at = (size_t)r * x->ldq + j;
  return x->path == QG_AVX2 ? ((const int16_t *)x->q)[at] : ((const uint8_t *)x->q)[at];
}

/* One shape through every path; returns 0 when all agrees, else 1 with why[]. */
static int check_shape(const float *x, size_t ldx, const float *W, const float *bias, int T, int N,
                       int K, size_t ldy, double *relerr) {
  int bad = 0;
  wq m;
  if (wq_make(&m, W, N, K) != 0) {
    snprintf(why, sizeof why, "weights refused");
    return 1;
  }
  void *buf = malloc(qg_rows_bytes(T, K));
  qg_rows X;
  qg_quantize_rows(&X, buf, x, T, K, ldx, QG_PORTABLE);
  int32_t *c = malloc(sizeof(int32_t) * T * N);
  float *y = malloc(sizeof(float) * T * ldy);
  qg_matmul_i32(c, (size_t)N, &X, &m.w);
  qg_matmul(y, ldy, &X, &m.w, bias);

  /* exact sums and dequantized math */
  double err2 = 0, ref2 = 0;
  for (int r = 0; r < T && !bad; r++)
    for (int i = 0; i < N && !bad; i++) {
      int64_t s = 0;
      double d = 0, a = 0, f = 0;
      for (int j = 0; j < K; j++) {
        int xq = xcode(&X, r, j) - X.zero[r], wqv = qg_weight_code(&m.w, i, j);
        s += (int64_t)xq * wqv;
        double t = (X.scale[r] * (double)xq) * (m.scale[i] * (double)wqv);
        d += t;
        a += fabs(t);
        f += (double)x[(size_t)r * ldx + j] * W[(size_t)i * K + j];
      }
      double b = bias ? bias[i] : 0;
      d += b;
      a += fabs(b);
      f += b;
      if (s != c[(size_t)r * N + i]) {
        snprintf(why, sizeof why, "portable int32 sum [%d][%d] = %d, int64 loop %lld", r, i,
                 c[(size_t)r * N + i], (long long)s);
        bad = 1;
      }
      double v = y[(size_t)r * ldy + i];
      if (!(fabs(v - d) <= 1e-6 * a + 1e-30)) {
        snprintf(why, sizeof why, "portable y[%d][%d] = %.9g, dequantized double math %.9g", r, i,
                 v, d);
        bad = 1;
      }
      err2 += (v - f) * (v - f);
      ref2 += f * f;
    }
  if (relerr) *relerr = sqrt(err2 / (ref2 + 1e-300));

  /* every SIMD path: the same codes, sums and y */
  for (int p = 0; p < npaths && !bad; p++) {
    void *buf2 = malloc(qg_rows_bytes(T, K));
    qg_rows X2;
    qg_quantize_rows(&X2, buf2, x, T, K, ldx, paths[p]);
    int32_t *c2 = malloc(sizeof(int32_t) * T * N);
    float *y2 = malloc(sizeof(float) * T * ldy);
    memset(y2, 0, sizeof(float) * T * ldy);
    memset(y, 0, sizeof(float) * T * ldy); /* compare only what both write */
    qg_matmul(y, ldy, &X, &m.w, bias);
    qg_matmul_i32(c2, (size_t)N, &X2, &m.w);
    qg_matmul(y2, ldy, &X2, &m.w, bias);
    const char *pn = qg_path_name(paths[p]);
    for (int r = 0; r < T && !bad; r++) {
      if (X2.zero[r] != X.zero[r] || memcmp(&X2.scale[r], &X.scale[r], sizeof(float)) != 0) {
        snprintf(why, sizeof why, "%s: row %d quantized with another scale or zero", pn, r);
        bad = 1;
      }
      for (int j = 0; j < K && !bad; j++)
        if (xcode(&X2, r, j) != xcode(&X, r, j)) {
          snprintf(why, sizeof why, "%s: code [%d][%d] differs", pn, r, j);
          bad = 1;
        }
    }
    for (size_t e = 0; e < (size_t)T * N && !bad; e++)
      if (c2[e] != c[e]) {
        snprintf(why, sizeof why, "%s: int32 sum [%zu][%zu] = %d, portable %d", pn, e / N, e % N,
                 c2[e], c[e]);
        bad = 1;
      }
    if (!bad && memcmp(y, y2, sizeof(float) * T * ldy) != 0) {
      snprintf(why, sizeof why, "%s: y not bit-identical to the portable y", pn);
      bad = 1;
    }
    /* on the threads of a pool (gemm_xwt_int8: the job splitter's units,
    ** taken in any order by 3 threads), the same y */
    if (!bad) {
      memset(y2, 0, sizeof(float) * T * ldy);
      float *yp = ldy == (size_t)N ? y2 : malloc(sizeof(float) * T * N);
      gemm_out8 o = {yp, &m.w, bias, NULL, NULL};
      int rc = gemm_xwt_int8(pool, &scratch, 3, &X2, 1, &o);
      for (int r = 0; r < T && yp != y2; r++)
        memcpy(y2 + (size_t)r * ldy, yp + (size_t)r * N, sizeof(float) * N);
      if (yp != y2) free(yp);
      if (rc != GEMM_OK || memcmp(y, y2, sizeof(float) * T * ldy) != 0) {
        snprintf(why, sizeof why, "%s: on 3 threads (gemm_xwt_int8 %d) another y", pn, rc);
        bad = 1;
      }
    }
    /* with a post operation on each unit's columns (1 and 3 threads): y and
    ** then post on whole rows */
    for (int nt = 1; nt <= 3 && !bad; nt += 2) {
      float *yp = malloc(sizeof(float) * T * N), *want = malloc(sizeof(float) * T * N);
      float *pb = malloc(sizeof(float) * N);
      for (int i = 0; i < N; i++) pb[i] = (float)(i % 7) - 3.0f;
      for (int r = 0; r < T; r++) {
        memcpy(want + (size_t)r * N, y + (size_t)r * ldy, sizeof(float) * N);
        test_post(want + (size_t)r * N, pb, N);
      }
      gemm_out8 o = {yp, &m.w, bias, test_post, pb};
      int rc = gemm_xwt_int8(pool, &scratch, nt, &X2, 1, &o);
      if (rc != GEMM_OK || memcmp(yp, want, sizeof(float) * T * N) != 0) {
        snprintf(why, sizeof why, "%s: with post on %d threads (gemm_xwt_int8 %d) another y", pn,
                 nt, rc);
        bad = 1;
      }
      free(yp);
      free(want);
      free(pb);
    }
    free(buf2);
    free(c2);
    free(y2);
  }
  free(buf);
  free(c);
  free(y);
  wq_free(&m);
  return bad;
}

static float *rand_mat(size_t n, float scale) {
  float *a = malloc(sizeof(float) * (n ? n : 1));
  for (size_t i = 0; i < n; i++) a[i] = frand() * scale;
  return a;
}

int main(void) {
  const char *off = getenv("BERTFILL_NO_AVX512");
  if (off && strcmp(off, "1") == 0) {
    /* every kernel is checked in the run without it (tests/c/t_c.sh qgemm) */
    CHECK("qgemm: BERTFILL_NO_AVX512=1 rules out the AVX-512 kernel",
          qg_best_path() != QG_AVX512VNNI && qg_path_supported(qg_best_path()));
    TL_EXIT();
  }
  CHECK("qgemm: best path is supported", qg_path_supported(qg_best_path()));
  pool = bf_pool_new();
  for (qg_path p = QG_AVX2; p <= QG_AVX512VNNI; p++) {
    char name[96];
    snprintf(name, sizeof name, "qgemm %s kernel", qg_path_name(p));
    if (qg_path_supported(p)) paths[npaths++] = p;
    else SKIP(name, p == QG_AVX2 ? "this CPU has no AVX2" : "this CPU has no AVX512-VNNI");
  }
  printf("# qgemm: best path %s; checked against portable:", qg_path_name(qg_best_path()));
  for (int p = 0; p < npaths; p++) printf(" %s", qg_path_name(paths[p]));
  printf("\n");

  /* ---- quantizing weights ---- */
  {
    int n = 5, k = 37;
    float *w = rand_mat((size_t)n * k, 0.3f);
    for (int j = 0; j < k; j++) w[2 * k + j] = 0; /* a row of zeros */
    w[3 * k + 4] = -2.5f;                         /* a row with one large value */
    wq m;
    int rc = wq_make(&m, w, n, k), bad = 0;
    for (int i = 0; i < n; i++) {
      int32_t s = 0, amax = 0;
      for (int j = 0; j < k; j++) {
        int q = qg_weight_code(&m.w, i, j);
        s += q;
        if (abs(q) > amax) amax = abs(q);
        if (q < -127 || fabsf(w[i * k + j] - m.scale[i] * q) > m.scale[i] * 0.5001f) bad++;
      }
      if (s != m.sum[i] || (i != 2 && amax != 127)) bad++;
    }
    CHECK("qgemm: weights within half a step, sums right, 127 reached", rc == 0 && bad == 0);
    CHECK("qgemm: a row of zero weights has scale 0 and codes 0",
          m.scale[2] == 0 && m.sum[2] == 0 && qg_weight_code(&m.w, 2, 0) == 0);
    CHECK("qgemm: the large weight is -127", qg_weight_code(&m.w, 3, 4) == -127);
    /* the packed layout: every code once, the padding (rows 5-63, k 37-39) 0 */
    {
      size_t bytes = qg_weights_bytes(n, k), nonpad = 0, zeros_pad = 0;
      for (size_t e = 0; e < bytes; e++) {
        size_t c = (e / 4) % 64, g = e / 256, j = g * 4 + e % 4; /* one panel: n <= 64 */
        if ((int)c < n && (int)j < k) nonpad++;
        else zeros_pad += m.q[e] == 0;
      }
      CHECKF("qgemm: packed codes: panels of 64 outputs x 4 values, padding 0",
             bytes == 64 * 40 && nonpad == (size_t)n * k && zeros_pad == bytes - nonpad &&
               m.q[(1 * 64 + 3) * 4 + 2] == qg_weight_code(&m.w, 3, 6),
             "bytes %zu, codes %zu, zero padding %zu", bytes, nonpad, zeros_pad);
    }
    wq_free(&m);
    w[7] = NAN;
    rc = wq_make(&m, w, n, k);
    CHECK("qgemm: weights with a NaN are refused", rc == -1);
    wq_free(&m);
    w[7] = INFINITY;
    rc = wq_make(&m, w, n, k);
    CHECK("qgemm: weights with an infinity are refused", rc == -1);
    wq_free(&m);
    CHECK("qgemm: rows longer than QG_MAX_K are refused",
          qg_quantize_weights(w, 1, QG_MAX_K + 1, NULL, NULL, NULL) == -1);
    free(w);
  }

  /* ---- quantizing rows of x ---- */
  {
    int t = 6, k = 41;
    float *x = rand_mat((size_t)t * k, 2.0f);
    for (int j = 0; j < k; j++) x[1 * k + j] = fabsf(x[1 * k + j]) + 0.5f;  /* all positive */
    for (int j = 0; j < k; j++) x[2 * k + j] = -fabsf(x[2 * k + j]) - 0.5f; /* all negative */
    for (int j = 0; j < k; j++) x[3 * k + j] = gelu(x[3 * k + j]);
    for (int j = 0; j < k; j++) x[4 * k + j] = 0;
    x[0 * k + 5] = 0;
    void *buf = malloc(qg_rows_bytes(t, k));
    qg_rows X;
    qg_quantize_rows(&X, buf, x, t, k, (size_t)k, QG_PORTABLE);
    int bad = 0;
    for (int r = 0; r < t; r++) {
      if (X.zero[r] < 0 || X.zero[r] > 255) bad++;
      for (int j = 0; j < k; j++) {
        float d = X.scale[r] * (float)(xcode(&X, r, j) - X.zero[r]);
        if (fabsf(x[r * k + j] - d) > X.scale[r] * 0.501f) bad++;
      }
    }
    CHECK("qgemm: rows of x within half a step (mixed, positive, negative, GELU, zero rows)",
          bad == 0);
    CHECK("qgemm: 0.0 in x is exact (code = zero point)", xcode(&X, 0, 5) == X.zero[0]);
    CHECK("qgemm: an all-positive row has zero point 0, all-negative 255",
          X.zero[1] == 0 && X.zero[2] == 255);
    CHECKF("qgemm: a GELU row uses its range (zero point near 255*0.17/max)",
           X.zero[3] > 0 && X.zero[3] < 60, "zero point %d", X.zero[3]);
    CHECK("qgemm: a zero row has scale 0", X.scale[4] == 0 && X.zero[4] == 0);
    free(buf);
    free(x);
  }

  /* ---- NaN and zero rows through the product ---- */
  {
    int t = 3, k = 70, n = 9;
    float *x = rand_mat((size_t)t * k, 1.0f), *w = rand_mat((size_t)n * k, 0.1f);
    float *bias = rand_mat((size_t)n, 1.0f);
    x[1 * k + 33] = NAN;
    for (int j = 0; j < k; j++) x[2 * k + j] = 0;
    wq m;
    wq_make(&m, w, n, k);
    for (int p = -1; p < npaths; p++) {
      qg_path path = p < 0 ? QG_PORTABLE : paths[p];
      void *buf = malloc(qg_rows_bytes(t, k));
      qg_rows X;
      qg_quantize_rows(&X, buf, x, t, k, (size_t)k, path);
      float y[27];
      qg_matmul(y, (size_t)n, &X, &m.w, bias);
      int nan1 = 0, fin0 = 0, bias2 = 0;
      for (int i = 0; i < n; i++) {
        nan1 += isnan(y[n + i]) != 0;
        fin0 += isfinite(y[i]) != 0;
        bias2 += y[2 * n + i] == bias[i];
      }
      char name[128];
      snprintf(name, sizeof name,
               "qgemm %s: a row with NaN gives NaN, others finite, a zero row the bias",
               qg_path_name(path));
      CHECK(name, nan1 == n && fin0 == n && bias2 == n);
      free(buf);
    }
    wq_free(&m);
    free(x);
    free(w);
    free(bias);
  }

  /* ---- the largest sums: k = QG_MAX_K, every code at its extreme ---- */
  {
    int t = 2, n = 2, k = QG_MAX_K;
    float *x = malloc(sizeof(float) * t * k), *w = malloc(sizeof(float) * n * k);
    for (int j = 0; j < k; j++) {
      x[j] = 1.0f;      /* row 0: codes 255, zero 0 */
      x[k + j] = -1.0f; /* row 1: codes 0, zero 255 */
      w[j] = -1.0f;     /* W row 0: -127 */
      w[k + j] = 1.0f;  /* W row 1: +127 */
    }
    wq m;
    wq_make(&m, w, n, k);
    for (int p = -1; p < npaths; p++) {
      qg_path path = p < 0 ? QG_PORTABLE : paths[p];
      void *buf = malloc(qg_rows_bytes(t, k));
      qg_rows X;
      qg_quantize_rows(&X, buf, x, t, k, (size_t)k, path);
      int32_t c[4];
      float y[4];
      qg_matmul_i32(c, 2, &X, &m.w);
      qg_matmul(y, 2, &X, &m.w, NULL);
      int32_t e = 255 * 127 * k; /* 2,122,383,360 */
      char name[128];
      snprintf(name, sizeof name, "qgemm %s: k = %d at full scale, exact (|sum| = %d)",
               qg_path_name(path), k, e);
      CHECKF(name, c[0] == -e && c[1] == e && c[2] == e && c[3] == -e, "sums %d %d %d %d", c[0],
             c[1], c[2], c[3]);
      snprintf(name, sizeof name, "qgemm %s: ... and y = x W^T", qg_path_name(path));
      CHECKF(name, fabsf(y[0] + k) < 1e-5f * k && fabsf(y[1] - k) < 1e-5f * k, "y %g %g", y[0],
             y[1]);
      free(buf);
    }
    wq_free(&m);
    free(x);
    free(w);
  }

  /* ---- small odd shapes, 1..200 rows, strides ---- */
  {
    static const int Ts[] = {1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 17, 24, 31, 33, 64, 65, 129, 200};
    static const int NKs[][2] = {{1, 1},     {3, 5},   {7, 17},  {13, 31}, {5, 15},
                                 {47, 16},   {48, 33}, {49, 63}, {17, 64}, {50, 65},
                                 {100, 129}, {9, 200}, {4, 1000}};
    int nshape = 0, nbad = 0;
    char first[512] = "";
    for (size_t b = 0; b < sizeof NKs / sizeof NKs[0]; b++)
      for (size_t a = 0; a < sizeof Ts / sizeof Ts[0]; a++) {
        int T = Ts[a], N = NKs[b][0], K = NKs[b][1];
        size_t ldx = (size_t)K + (a % 2 ? 3 : 0), ldy = (size_t)N + (b % 2 ? 5 : 0);
        float *x = rand_mat((size_t)T * ldx, 1.5f), *W = rand_mat((size_t)N * K, 0.2f);
        float *bias = a % 3 ? rand_mat((size_t)N, 1.0f) : NULL;
        if (a % 4 == 1)
          for (size_t e = 0; e < (size_t)T * ldx; e++) x[e] = gelu(x[e]);
        if (check_shape(x, ldx, W, bias, T, N, K, ldy, NULL)) {
          if (!nbad) snprintf(first, sizeof first, "T=%d N=%d K=%d: %.400s", T, N, K, why);
          nbad++;
        }
        nshape++;
        free(x);
        free(W);
        free(bias);
      }
    char name[128];
    snprintf(name, sizeof name, "qgemm: %d small shapes, every path agrees with the exact math",
             nshape);
    CHECKF(name, nbad == 0, "%d shapes failed, first %s", nbad, first);
  }

  /* ---- several blocks of rows in one job (long rows) ---- */
  {
    int T = 100, N = 50, K = 2000;
    float *x = rand_mat((size_t)T * K, 1.0f), *W = rand_mat((size_t)N * K, 0.05f);
    int bad = check_shape(x, (size_t)K, W, NULL, T, N, K, (size_t)N, NULL);
    CHECKF("qgemm: 100 rows of 2000 (several blocks of rows per job)", !bad, "%s", why);
    free(x);
    free(W);
  }
  /* ---- many rows: several blocks of rows, a partial last block of 16
  ** outputs and a partial last tile of rows ---- */
  {
    int T = 1000, N = 100, K = 322;
    float *x = rand_mat((size_t)T * K, 1.0f), *W = rand_mat((size_t)N * K, 0.05f);
    int bad = check_shape(x, (size_t)K, W, NULL, T, N, K, (size_t)N, NULL);
    CHECKF("qgemm: 1000 rows of 322 into 100 (blocks of rows, partial tiles)", !bad, "%s", why);
    free(x);
    free(W);
  }

  /* ---- bert-base shapes, and int8 against fp32 ---- */
  {
    static const struct {
      int N, K, gelu_x;
      int T[3];
    } S[] = {
      {768, 768, 0, {1, 24, 128}},  /* Q, K, V, attention output */
      {3072, 768, 0, {16, 0, 0}},   /* feed-forward up */
      {768, 3072, 1, {17, 128, 0}}, /* feed-forward down, x after GELU */
      {21128, 768, 0, {1, 5, 0}},   /* MLM decoder */
    };
    for (size_t s = 0; s < sizeof S / sizeof S[0]; s++) {
      int N = S[s].N, K = S[s].K;
      float *W = malloc(sizeof(float) * N * K);
      for (size_t e = 0; e < (size_t)N * K; e++) W[e] = gauss() * 0.03f;
      float *bias = rand_mat((size_t)N, 0.1f);
      for (int a = 0; a < 3 && S[s].T[a]; a++) {
        int T = S[s].T[a];
        float *x = malloc(sizeof(float) * T * K);
        for (size_t e = 0; e < (size_t)T * K; e++) x[e] = S[s].gelu_x ? gelu(gauss()) : gauss();
        double rel = 0;
        int bad = check_shape(x, (size_t)K, W, bias, T, N, K, (size_t)N, &rel);
        char name[128];
        snprintf(name, sizeof name, "qgemm: bert-base %d -> %d, %d rows, every path exact", K, N,
                 T);
        CHECKF(name, !bad, "%s", why);
        printf("# int8 vs fp32, %d -> %d, %d rows%s: relative error of y %.4f\n", K, N, T,
               S[s].gelu_x ? " (x after GELU)" : "", rel);
        snprintf(name, sizeof name, "qgemm: bert-base %d -> %d, %d rows, int8 within 2%% of fp32",
                 K, N, T);
        CHECKF(name, rel < 0.02, "relative error %.4f", rel);
        free(x);
      }
      free(W);
      free(bias);
    }
  }
  bf_pool_free(pool);
  gemm_scratch_free(&scratch);
  TL_EXIT();
}
