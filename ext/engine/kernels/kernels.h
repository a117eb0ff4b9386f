/*
** kernels.h — the engine's kernels, one set per instruction set, and the one
** place that chooses among them.  Engine-internal.
**
**   kernels/portable.c  plain C: the row operations and the int8 products;
**                       no fp32 products of its own (OpenBLAS does them,
**                       blas.h; without OpenBLAS, blas.c's plain C loops)
**   kernels/avx2.c      AVX2 and FMA, 8 floats at a time: the fp32 products,
**                       the row operations and the int8 products (CPUs
**                       without AVX-512: AMD Zen 2/3, Intel Haswell to Alder
**                       Lake)
**   kernels/avx512.c    AVX-512F, 16 floats at a time: the same, the int8
**                       products with AVX512-VNNI
**   kernels/dispatch.c  which set runs: cpuid and the environment, read once
**                       per process (kernels_chosen, gemm_kernels,
**                       kernels_int8_chosen)
**   kernels/int8.h      what the int8 kernels share (qgemm.h's products)
**
** Each file fills one kernel_set.  Who runs them: gemm.c's job splitter
** (gemm_xwt) cuts a product into units for the threads and runs the set's
** gemm_kernel_table; forward.c calls the set's row operations.
**
**   const kernel_set *k = kernels_chosen();
**   k->rows.layernorm(x, g, b, n, eps);
**   if (!k->gemm) ...the products go to OpenBLAS...
**
** Which set runs (decided at the first call, never from the CPU's name):
**   - the best the CPU has: GEMM_KERNELS_AVX512 (AVX-512F), else
**     GEMM_KERNELS_AVX2 (AVX2 and FMA), else GEMM_KERNELS_OPENBLAS (the
**     portable set: plain C row operations, OpenBLAS for the products);
**   - BERTFILL_KERNELS=avx512|avx2|openblas (util.h's bf_env_choice) caps
**     that choice: the set that runs is the best one the CPU has and the
**     setting allows (so "avx2" gives AVX2 on an AVX-512 CPU and the portable
**     set on a CPU without AVX2; "avx512" is the default).  For tests and
**     debugging.
**   - BERTFILL_NO_AVX512=1, the older setting, means BERTFILL_KERNELS=openblas:
**     the portable code (plain C and OpenBLAS), as it always did.
** The AVX2 and AVX-512 code is compiled into every x86-64 build made with gcc
** or clang, through target attributes (the rest of the engine stays
** x86-64-v2; avx2.h, avx512.h); -DBF_NO_AVX2 / -DBF_NO_AVX512 leave it out.
**
** The sets agree to about 1e-6, not to every bit (vector sums run in another
** order, exp and erf are polynomials); each one's results do not depend on
** the number of threads or on how the work is split.
*/
#ifndef BERTFILL_KERNELS_H
#define BERTFILL_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Up to this many rows of x the dot kernel runs (AVX-512, see dot_cols),
** more when the product is GEMM_DOT_DEEP_K or more deep. */
#define GEMM_DOT_MAX_T 24
#define GEMM_DOT_MAX_T_DEEP 48
#define GEMM_DOT_DEEP_K 2048
#define GEMM_AVX2_DOT_MAX_T 80 /* the same for the AVX2 kernels */

/* Output columns per panel of a packed W (gemm.h's gemm_pack_panels: the
** layout of model.packed.safetensors, packed.c). */
#define GEMM_PACK 64

/* n rows cut into nt register tiles of nearly equal height (8 rows in two:
** 4 + 4, not 6 + 2): the height of tile t, done rows being cut already.
** The kernels' one copy of that rule. */
static inline int kernels_tile_rows(int n, int done, int t, int nt) {
  return (n - done + (nt - t) - 1) / (nt - t);
}

/* The two fp32 product kernels of one instruction set, y[T,N] = x[T,K]
** W[N,K]^T with W as PyTorch stores it, and their shapes: what gemm_xwt's job
** splitter (gemm.c) needs to cut a job into units for them. */
typedef struct gemm_kernel_table {
  int dot_max_t;      /* up to this many rows of x: the dot kernel; more: the panel kernel */
  int dot_max_t_deep; /* the same when K >= GEMM_DOT_DEEP_K */
  int dot_tile;   /* a dot kernel unit's columns: a multiple of this (its tile heights divide it) */
  int dot_unit;   /* least columns per unit of work of the dot kernel */
  int panel;      /* output columns per strip of the panel kernel */
  int panel_rows; /* rows of x per register tile of the panel kernel */
  int lanes;      /* floats per vector: a panel buffer holds (K + lanes) * panel floats */
  /* columns [o0, o1) of y[T,N] = x[T,K] W[N,K]^T */
  void (*dot_cols)(float *y, const float *x, const float *W, int T, int N, int K, int o0, int o1);
  /* strip [n0, n0 + nr) of the same, through the panel buffer Wp (64-byte
  ** aligned); meanwhile rows [next, next + panel) of W (if next < N) are
  ** prefetched */
  void (*panel_strip)(float *Wp, float *y, const float *x, const float *W, int T, int N, int K,
                      int n0, int nr, int next);
  /* Optional (NULL: W is read in place only): columns [c0, c1) (c0 a
  ** multiple of GEMM_PACK) of the same product from W's packed panels Wp
  ** (gemm_pack_panels), for any number of rows; meanwhile the start of the
  ** panel of column next (if next < N) is prefetched.  packed_rows: rows of
  ** x per register tile. */
  int packed_rows;
  void (*packed_cols)(float *y, const float *x, const float *Wp, int T, int N, int K, int c0,
                      int c1, int next);
  /* Optional (NULL: forward.c's plain C head_plain), one attention
  ** head straight from the rows of q, k, v (strides ldq, ldk, ldv; d
  ** columns): the scores s[i * lds + j] = scale * q_i . k_j for i < Lq, j <
  ** L (lds: L rounded up to a multiple of 16 or more; kt: room for d * lds
  ** floats of scratch), and, once forward.c has made them probabilities p,
  ** ctx[i * ldc + c] = sum_j p[i * ldp + j] v[j * ldv + c]. */
  void (*att_scores)(float *s, int lds, const float *q, size_t ldq, int Lq, const float *k,
                     size_t ldk, int L, int d, float scale, float *kt);
  void (*att_values)(float *ctx, size_t ldc, const float *p, int ldp, int Lq, const float *v,
                     size_t ldv, int L, int d);
} gemm_kernel_table;

/* Whether y[T,N] = x[T,K] W[N,K]^T goes to kt's dot kernel (else its panel kernel). */
static inline int gemm_kernel_dot(const gemm_kernel_table *kt, int T, int K) {
  return T <= (K >= GEMM_DOT_DEEP_K ? kt->dot_max_t_deep : kt->dot_max_t);
}

/* The loops over one row of n floats that forward.c runs (LayerNorm, the
** residual and bias additions, bias + GELU, the softmax's max and
** exponentials). */
typedef struct row_kernel_table {
  /* in place: x = LayerNorm(x) * g + b, mean and variance summed in double */
  void (*layernorm)(float *x, const float *g, const float *b, int n, float eps);
  /* x[i] += a[i] + b[i]; b may be NULL (then x[i] += a[i]) */
  void (*add)(float *x, const float *a, const float *b, int n);
  /* y[i] = gelu(y[i] + bias[i]) = z/2 (1 + erf(z/sqrt 2)), the exact (erf) form */
  void (*gelu_row)(float *y, const float *bias, int n);
  /* the largest of x[0..n) into *max; returns 0 if some x[i] is NaN or
  ** infinite (*max is then unspecified: the portable one leaves it alone) */
  int (*max_finite)(const float *x, int n, float *max);
  /* the sum of e^(x[i] - mx), in double; each term stored in dst unless dst is NULL */
  double (*exp_sum)(float *dst, const float *x, int n, float mx);
} row_kernel_table;

/* Which set: GEMM_KERNELS_* (the names say "gemm" for history: they choose
** the row operations too). */
enum { GEMM_KERNELS_OPENBLAS = 0, GEMM_KERNELS_AVX2 = 1, GEMM_KERNELS_AVX512 = 2 };

/* The kernels of one instruction set. */
typedef struct kernel_set {
  int id;                        /* GEMM_KERNELS_* */
  const char *name;              /* "openblas", "avx2", "avx512" */
  const gemm_kernel_table *gemm; /* fp32 products; NULL: none of bertfill's own (OpenBLAS) */
  row_kernel_table rows;         /* row operations */
} kernel_set;

/* The int8 product kernel of one instruction set (qgemm.h, kernels/int8.h):
** the sums of rows [r0, r1) of x against outputs [i0, i1) of the packed W
** (i0 a multiple of INT8_PANEL), finished into o's y or c.  Its path is
** also how x must be quantized for it (qg_quantize_rows). */
struct int8_out;
typedef struct int8_kernel_table {
  int path;     /* qg_path: QG_PORTABLE, QG_AVX2, QG_AVX512VNNI */
  int row_tile; /* rows of x per register tile */
  void (*unit)(const struct int8_out *o, int r0, int r1, int i0, int i1);
  /* Optional (NULL: qgemm.c's own loops), for u8 codes: the two loops of
  ** quantizing one row of x (qgemm.c: quantize_row), giving its results
  ** exactly: the range, lo = min(0, row), hi = max(0, row), and bad = the
  ** sum of row[j] * 0 (NaN when a value is NaN or infinite, else 0); and the
  ** codes q8[j] = clamp(round(row[j] * inv) + z, 0, 255) for j < k. */
  void (*row_range)(const float *row, int k, float *lo, float *hi, float *bad);
  void (*row_codes)(const float *row, int k, float inv, int32_t z, uint8_t *q8);
} int8_kernel_table;

/* The bf16 product kernel (bf16 loads; gemm.h's gemm_xwt_bf16): for rows t
** < T of xh (bf16 pairs, KP words a row: rows below) and outputs [c0,
** c1) of the bf16 panels Wh (c0 a multiple of GEMM_PACK; gemm_pack_bf16),
** y[t * N + c] = the sum over the pairs, in order, of vdpbf16ps's step: for
** pair (x0, x1) of row t and (w0, w1) of output c,
**     acc = ftz(acc + x1 w1), then acc = ftz(acc + x0 w0)
** from acc = 0, each sum rounded to float once (the products are exact),
** with denormal inputs (acc, x's, w's) read as zero and denormal sums
** flushed to zero, as AVX512-BF16 does it; every kernel gives these bits.
** Meanwhile the panel of column next (if next < N) is prefetched. */
typedef struct bf16_kernel {
  const char *name; /* "portable", "avx512bf16" */
  int row_tile;     /* rows of x per register tile (units of work hold whole tiles) */
  void (*cols)(float *y, const uint32_t *xh, const uint32_t *Wh, int T, int N, int KP, int c0,
               int c1, int next);
  /* x[T, K] as rows of KP = ceil(K / 2) pairs of kernels_bf16_round's bf16
  ** (x[t][2i] in the low half of xh[t * KP + i], 0 past K) */
  void (*rows)(uint32_t *xh, const float *x, int T, int K);
} bf16_kernel;

/* A float as bf16: to nearest, ties to even; a denormal becomes a zero of
** its sign (AVX512-BF16 reads denormals so anyway); a NaN stays a NaN (made
** quiet).  Every bf16 kernel's rows, and the weights' panels, round so. */
static inline uint16_t kernels_bf16_round(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  if ((u & 0x7f800000u) == 0) u &= 0x80000000u;
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* Pair i of a row v of k floats: v[2i] and v[2i + 1] (0 past k) as bf16,
** v[2i] in the low half. */
static inline uint32_t kernels_bf16_pair(const float *v, int i, int k) {
  return kernels_bf16_round(v[2 * i]) |
         (uint32_t)(2 * i + 1 < k ? kernels_bf16_round(v[2 * i + 1]) : 0) << 16;
}

extern const kernel_set kernels_portable; /* portable.c */
extern const kernel_set kernels_avx2;     /* avx2.c: only in builds with avx2.h's BF_HAVE_AVX2 */
extern const kernel_set kernels_avx512;   /* avx512.c: only with avx512.h's BF_HAVE_AVX512 */
extern const int8_kernel_table int8_portable;   /* portable.c */
extern const int8_kernel_table int8_avx2;       /* avx2.c (BF_HAVE_AVX2) */
extern const int8_kernel_table int8_avx512vnni; /* avx512.c (BF_HAVE_AVX512); needs AVX512-VNNI */
extern const bf16_kernel bf16_portable;         /* portable.c */
extern const bf16_kernel bf16_avx512bf16;       /* avx512.c (BF_HAVE_AVX512); needs AVX512-BF16 */

/* ---- dispatch.c ---- */

/* The set that runs (see the top of this file); never NULL. */
const kernel_set *kernels_chosen(void);

/* kernels_chosen()->id, and the name of an id ("openblas", "avx2", "avx512";
** "?" for another number). */
int gemm_kernels(void);
const char *gemm_kernels_name(int kernels);

/* gemm_kernels() == GEMM_KERNELS_AVX512: the CPU has AVX-512 (and the OS
** keeps its registers) and the environment does not turn it off. */
int gemm_have_avx512(void);

/* The int8 kernels by path (qg_path): the table (NULL if this build has no
** such kernel); 1 if the CPU (and the OS) can run it; the best one the CPU
** has, BERTFILL_NO_AVX512=1 ruling out AVX512-VNNI (qg_best_path); and the
** one the engine runs, capped like the sets above (BERTFILL_KERNELS=avx2:
** the AVX2 kernel, =openblas: the portable one). */
const int8_kernel_table *kernels_int8(int path);
int kernels_int8_supported(int path);
int kernels_int8_best(void);
int kernels_int8_chosen(void);

/* The bf16 kernel: AVX512-BF16's where the CPU has it and the set that runs
** is AVX-512 (BERTFILL_KERNELS caps it like the others), else the portable
** one (the same bits, far slower); and whether the CPU can run AVX512-BF16's. */
const bf16_kernel *kernels_bf16_chosen(void);
int kernels_bf16_supported(void);

#endif
