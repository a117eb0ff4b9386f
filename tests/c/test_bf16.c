/*
** test_bf16.c — the bf16 products (bf16 loads): gemm.c's rounding to bf16
** and its two layouts (gemm_bf16_rows, gemm_pack_bf16), and gemm_xwt_bf16
** with every bf16 kernel this CPU can run:
**   - the portable kernel against this file's own loop, written from the
**     definition in kernels.h (each pair's two products in double, high
**     halves first, denormals flushed) — the same bits;
**   - the same loop against a plain double product of the rounded inputs
**     (the sums agree to float rounding: the definition is a dot product);
**   - the AVX512-BF16 kernel (where the CPU has it) against the portable one,
**     bit for bit, on shapes that hit every path (tiles of 1-6 rows, chunks
**     of 384 pairs with the sums carried, K odd, N not a multiple of 16 or
**     64, one to three outputs, 1-3 threads), and on values where vdpbf16ps's
**     flushing shows (denormal inputs, tiny products, huge ones);
**   - results independent of the thread count.
*/
#include <float.h>
#include <math.h>
#include <stdint.h>
#include "gemm.h"
#include "util.h"
#include "testlib.h"

static unsigned rng = 2024;
static float frand(void) {
  rng = rng * 1103515245u + 12345u;
  return (float)((rng >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}

static float from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* kernels.h's definition, independently: v denormal -> 0 of its sign. */
static float flush(float v) { return fpclassify(v) == FP_SUBNORMAL ? copysignf(0.0f, v) : v; }
static float half(uint32_t pair, int hi) {
  return flush(from_bits(hi ? pair & 0xffff0000u : pair << 16));
}
static float ref_dot(const uint32_t *x, const uint32_t *w, int ldw, int KP) {
  float acc = 0.0f;
  for (int i = 0; i < KP; i++) {
    uint32_t a = x[i], b = w[(size_t)i * ldw];
    acc = flush((float)((double)flush(acc) + (double)half(a, 1) * half(b, 1)));
    acc = flush((float)((double)acc + (double)half(a, 0) * half(b, 0)));
  }
  return acc;
}

static void test_round(void) {
  static const struct {
    uint32_t in;
    uint16_t out;
  } cases[] = {
    {0x3f800000u, 0x3f80}, /* 1 */
    {0x3f808000u, 0x3f80}, /* a tie, to even (down) */
    {0x3f818000u, 0x3f82}, /* a tie, to even (up) */
    {0x3f808001u, 0x3f81}, /* above the tie */
    {0x3f807fffu, 0x3f80}, /* below it */
    {0x7f7fffffu, 0x7f80}, /* the largest float rounds to infinity */
    {0xff800000u, 0xff80}, /* -infinity */
    {0x7fc00001u, 0x7fc0}, /* a NaN stays one */
    {0x7f800001u, 0x7fc0}, /* a signalling NaN becomes quiet (not infinity) */
    {0x00000001u, 0x0000}, /* the smallest denormal */
    {0x007fffffu, 0x0000}, /* a denormal that would round up to a normal: zero */
    {0x807fffffu, 0x8000}, /* the same, negative */
    {0x00800000u, 0x0080}, /* the smallest normal */
    {0x80000000u, 0x8000}, /* -0 */
  };
  int nbad = 0;
  char why[120] = "";
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint16_t got = kernels_bf16_round(from_bits(cases[i].in));
    if (got != cases[i].out)
      nbad++, snprintf(why, sizeof why, "%08x -> %04x, want %04x", cases[i].in, got, cases[i].out);
  }
  CHECKF("bf16: kernels_bf16_round rounds to nearest even, flushes denormals, keeps NaN", nbad == 0,
         "%s", why);
}

static void test_layouts(void) {
  static const int NKs[][2] = {{1, 1}, {64, 3}, {65, 70}, {130, 129}, {200, 8}};
  int nbad = 0;
  char why[160] = "";
  for (size_t b = 0; b < sizeof NKs / sizeof NKs[0]; b++) {
    int n = NKs[b][0], k = NKs[b][1], KP = (k + 1) / 2;
    size_t nw = gemm_bf16_words(n, k);
    float *w = malloc(sizeof(float) * n * k);
    uint32_t *wh = malloc(sizeof(uint32_t) * (nw + 16)), *xh = malloc(sizeof(uint32_t) * n * KP);
    for (int i = 0; i < n * k; i++) w[i] = frand();
    for (size_t i = 0; i < nw + 16; i++) wh[i] = 0xdeadbeefu;
    gemm_pack_bf16(wh, w, n, k);
    bf16_portable.rows(xh, w, n, k); /* W's rows as an x of n rows */
    if (nw != (size_t)((n + 63) / 64) * 64 * KP)
      nbad++, snprintf(why, sizeof why, "n=%d k=%d: size %zu", n, k, nw);
    for (int r = 0; r < ((n + 63) / 64) * 64; r++)
      for (int i = 0; i < KP; i++) {
        uint32_t lo = r < n ? kernels_bf16_round(w[(size_t)r * k + 2 * i]) : 0;
        uint32_t hi = r < n && 2 * i + 1 < k ? kernels_bf16_round(w[(size_t)r * k + 2 * i + 1]) : 0;
        uint32_t want = lo | hi << 16;
        if (wh[((size_t)(r / 64) * KP + i) * 64 + r % 64] != want)
          nbad++, snprintf(why, sizeof why, "n=%d k=%d: panel of row %d, pair %d", n, k, r, i);
        if (r < n && xh[(size_t)r * KP + i] != want)
          nbad++, snprintf(why, sizeof why, "n=%d k=%d: x row %d, pair %d", n, k, r, i);
      }
    for (int i = 0; i < 16; i++)
      if (wh[nw + i] != 0xdeadbeefu)
        nbad++, snprintf(why, sizeof why, "n=%d k=%d: written past the end", n, k);
    free(w);
    free(wh);
    free(xh);
  }
  CHECKF("bf16: gemm_pack_bf16 and the portable rows lay out pairs as gemm.h says", nbad == 0,
         "%d wrong; last: %s", nbad, why);
}

/* y = x W^T through gemm_xwt_bf16 for every shape, with the kernel that
** kernels_bf16_chosen() gives; into ys[shape] (allocated here). */
typedef struct shape {
  int T, N, K, nout;
} shape;

static const shape shapes[] = {
  {1, 1, 1, 1},       {1, 64, 768, 1},   {2, 65, 3, 1},     {3, 130, 769, 2}, {5, 200, 770, 3},
  {6, 64, 800, 1},    {7, 100, 1537, 1}, {12, 768, 768, 3}, {13, 63, 2, 2},   {20, 3072, 768, 1},
  {20, 768, 3072, 1}, {37, 130, 100, 2}, {64, 256, 256, 3}, {130, 70, 40, 1},
};
#define NSHAPES ((int)(sizeof shapes / sizeof shapes[0]))

static float *weights[NSHAPES][3], *xs[NSHAPES];
static uint32_t *packed[NSHAPES][3];

static void make_inputs(void) {
  for (int s = 0; s < NSHAPES; s++) {
    const shape *h = &shapes[s];
    xs[s] = malloc(sizeof(float) * h->T * h->K);
    for (int i = 0; i < h->T * h->K; i++) xs[s][i] = frand() * 2;
    for (int o = 0; o < h->nout; o++) {
      weights[s][o] = malloc(sizeof(float) * h->N * h->K);
      for (int i = 0; i < h->N * h->K; i++) weights[s][o][i] = frand() * 0.1f;
      packed[s][o] = malloc(sizeof(uint32_t) * gemm_bf16_words(h->N, h->K));
      gemm_pack_bf16(packed[s][o], weights[s][o], h->N, h->K);
    }
  }
}

static void run_all(bf_pool *p, gemm_scratch *sc, int threads, float *ys[NSHAPES][3], int *fails) {
  for (int s = 0; s < NSHAPES; s++) {
    const shape *h = &shapes[s];
    gemm_out out[3];
    for (int o = 0; o < h->nout; o++) {
      ys[s][o] = malloc(sizeof(float) * h->T * h->N);
      for (int i = 0; i < h->T * h->N; i++) ys[s][o][i] = NAN;
      out[o] = (gemm_out){ys[s][o], NULL, h->N, NULL, NULL, NULL, packed[s][o]};
    }
    if (gemm_xwt_bf16(p, sc, threads, xs[s], h->T, h->K, h->nout, out) != GEMM_OK) (*fails)++;
  }
}

static void free_ys(float *ys[NSHAPES][3]) {
  for (int s = 0; s < NSHAPES; s++)
    for (int o = 0; o < shapes[s].nout; o++) free(ys[s][o]);
}

/* ys against the definition (bits) and against double (within rounding). */
static void check_definition(float *ys[NSHAPES][3], const char *kernel) {
  int nbits = 0, nclose = 0;
  char why[200] = "";
  double worst = 0;
  for (int s = 0; s < NSHAPES; s++) {
    const shape *h = &shapes[s];
    int KP = (h->K + 1) / 2;
    uint32_t *xh = malloc(sizeof(uint32_t) * h->T * KP);
    bf16_portable.rows(xh, xs[s], h->T, h->K);
    for (int o = 0; o < h->nout; o++)
      for (int t = 0; t < h->T; t++)
        for (int c = 0; c < h->N; c++) {
          const uint32_t *wc = packed[s][o] + (size_t)(c / 64) * 64 * KP + c % 64;
          float want = ref_dot(xh + (size_t)t * KP, wc, 64, KP),
                got = ys[s][o][(size_t)t * h->N + c];
          if (memcmp(&want, &got, sizeof got) != 0) {
            nbits++;
            snprintf(why, sizeof why, "T=%d N=%d K=%d out %d y[%d][%d] = %a, want %a", h->T, h->N,
                     h->K, o, t, c, got, want);
          }
          double d = 0, mag = 0;
          for (int i = 0; i < KP; i++) {
            uint32_t a = xh[(size_t)t * KP + i], b = wc[(size_t)i * 64];
            double p = (double)half(a, 0) * half(b, 0) + (double)half(a, 1) * half(b, 1);
            d += p;
            mag += fabs((double)half(a, 0) * half(b, 0)) + fabs((double)half(a, 1) * half(b, 1));
          }
          double err = fabs(got - d) / (mag + 1e-30);
          if (err > worst) worst = err;
          if (err > 2.0 * h->K * FLT_EPSILON) nclose++;
        }
    free(xh);
  }
  CHECKF(kernel, nbits == 0, "%d outputs differ from kernels.h's definition; last: %s", nbits, why);
  printf("# %s: worst |y - double| / sum|x w| %.2e\n", kernel, worst);
  CHECKF("bf16: the definition is the dot product of the rounded inputs (to float rounding)",
         nclose == 0, "%d outputs off", nclose);
}

/* vdpbf16ps's flushing: every pair of a set of special values. */
static void test_special(const bf16_kernel *a, const bf16_kernel *b) {
  static const uint16_t vals[] = {0x0000, 0x8000, 0x0001, 0x807f, 0x0080, 0x3f80, 0xbf80, 0x1f80,
                                  0x2000, 0x0f00, 0x7f7f, 0xff7f, 0x4000, 0x00ff, 0x3c00, 0x6000};
  enum { NV = sizeof vals / sizeof vals[0], KP = NV * NV };
  static uint32_t x[KP], w[KP * 64];
  static float ya[64], yb[64];
  int nbad = 0;
  for (int rep = 0; rep < 40; rep++) {
    for (int i = 0; i < KP; i++) {
      x[i] = vals[(i + rep) % NV] | (uint32_t)vals[(i / NV + 3 * rep) % NV] << 16;
      for (int c = 0; c < 64; c++)
        w[(size_t)i * 64 + c] = vals[(i * 7 + c + rep) % NV] | (uint32_t)vals[(i + 5 * c) % NV]
                                                                 << 16;
    }
    a->cols(ya, x, w, 1, 64, KP, 0, 64, 64);
    b->cols(yb, x, w, 1, 64, KP, 0, 64, 64);
    for (int c = 0; c < 64; c++) {
      float r = ref_dot(x, w + c, 64, KP);
      if (memcmp(&ya[c], &yb[c], sizeof r) != 0 || memcmp(&ya[c], &r, sizeof r) != 0) nbad++;
    }
  }
  CHECKF("bf16: denormal, tiny and huge values: the AVX512-BF16 kernel, the portable one and the "
         "definition agree bit for bit",
         nbad == 0, "%d differ", nbad);
}

/* The kernel's rows against the portable ones on every kind of float. */
static void test_rows(const bf16_kernel *k) {
  enum { T = 5, K = 37, KP = (K + 1) / 2 };
  static const uint32_t special[] = {0x00000001u, 0x007fffffu, 0x807fffffu, 0x00800000u,
                                     0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0xff800000u,
                                     0x7fc00001u, 0x7f800001u, 0x80000000u, 0xffffffffu};
  float x[T * K];
  uint32_t a[T * KP], b[T * KP];
  int nbad = 0;
  for (int rep = 0; rep < 200; rep++) {
    for (int i = 0; i < T * K; i++) {
      rng = rng * 1103515245u + 12345u;
      uint32_t u = rep % 2 ? special[(rng >> 8) % (sizeof special / sizeof special[0])]
                           : rng ^ (rng << 13);
      memcpy(&x[i], &u, sizeof u);
    }
    memset(a, 0xab, sizeof a);
    memset(b, 0xcd, sizeof b);
    k->rows(a, x, T, K);
    bf16_portable.rows(b, x, T, K);
    if (memcmp(a, b, sizeof a) != 0) nbad++;
  }
  CHECKF("bf16: the AVX512-BF16 kernel's rows give the portable rows' bits (K odd, every kind "
         "of float)",
         nbad == 0, "%d of 200 differ", nbad);
}

int main(void) {
  bf_pool *p = bf_pool_new();
  gemm_scratch sc = {0};
  CHECK("bf16: pool created", p != NULL);
  test_round();
  test_layouts();
  make_inputs();

  const bf16_kernel *chosen = kernels_bf16_chosen();
  printf("# bf16 kernel: %s (AVX512-BF16 on this CPU: %s)\n", chosen->name,
         kernels_bf16_supported() ? "yes" : "no");
  static float *ys1[NSHAPES][3], *ys[NSHAPES][3];
  int fails = 0;
  run_all(p, &sc, 1, ys1, &fails);
  CHECKF("bf16: gemm_xwt_bf16 computes every shape", fails == 0, "%d failed", fails);
  char name[120];
  snprintf(name, sizeof name, "bf16: the %s kernel gives kernels.h's definition, bit for bit",
           chosen->name);
  check_definition(ys1, name);
  for (int threads = 2; threads <= 3; threads++) {
    run_all(p, &sc, threads, ys, &fails);
    int nbad = 0;
    for (int s = 0; s < NSHAPES; s++)
      for (int o = 0; o < shapes[s].nout; o++)
        if (memcmp(ys[s][o], ys1[s][o], sizeof(float) * shapes[s].T * shapes[s].N) != 0) nbad++;
    snprintf(name, sizeof name, "bf16: %d threads give the bits of one", threads);
    CHECKF(name, nbad == 0 && fails == 0, "%d products differ", nbad);
    free_ys(ys);
  }
  if (chosen != &bf16_portable) {
    /* the portable kernel on the same inputs, straight */
    int nbad = 0;
    for (int s = 0; s < NSHAPES; s++) {
      const shape *h = &shapes[s];
      int KP = (h->K + 1) / 2;
      uint32_t *xh = malloc(sizeof(uint32_t) * h->T * KP);
      float *y = malloc(sizeof(float) * h->T * h->N);
      bf16_portable.rows(xh, xs[s], h->T, h->K);
      for (int o = 0; o < h->nout; o++) {
        bf16_portable.cols(y, xh, packed[s][o], h->T, h->N, KP, 0, h->N, h->N);
        if (memcmp(y, ys1[s][o], sizeof(float) * h->T * h->N) != 0) nbad++;
      }
      free(xh);
      free(y);
    }
    CHECKF("bf16: the AVX512-BF16 kernel gives the portable kernel's bits", nbad == 0,
           "%d products differ", nbad);
    test_special(chosen, &bf16_portable);
    test_rows(chosen);
  } else {
    SKIP("bf16: the AVX512-BF16 kernel", kernels_bf16_supported() ? "turned off by BERTFILL_KERNELS"
                                                                  : "this CPU has no AVX512-BF16");
  }
  free_ys(ys1);
  gemm_scratch_free(&sc);
  bf_pool_free(p);
  TL_EXIT();
}
