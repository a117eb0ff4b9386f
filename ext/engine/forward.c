/*
** forward.c — the BERT encoder and the masked-LM head.
**
** bf_fill() runs a batch of token sequences through the model and returns the
** top-k candidates for every [MASK].  The math, for T tokens of hidden size H
** (all sequences of the batch concatenated: no padding, ever):
**
**   x      = LayerNorm(word[id] + type[0] + pos[p])          p restarts at 0 per sequence
**   for each layer:
**     q,k,v  = x Wq^T + bq,  x Wk^T + bk,  x Wv^T + bv        GEMMs over all T tokens
**     ctx_h  = softmax(q_h k_h^T / sqrt(d)) v_h               per sequence, per head
**     x      = LayerNorm(x + ctx Wo^T + bo)
**     x      = LayerNorm(x + gelu(x Wi^T + bi) Wo2^T + bo2)   gelu(z) = z/2 (1 + erf(z/sqrt 2))
**   at the M [MASK] rows only:
**     h      = LayerNorm(gelu(x Wh^T + bh))
**     logits = h Wdec^T + bdec                                [M, vocab]
**     p      = softmax(logits), keep the k largest
**              (bf_fill_scored: and p of one given token per mask)
**
** The weights are used as PyTorch stores them ([out, in], so y = x W^T).
** The matrix products with the weights run on the AVX-512 or AVX2 kernels of
** kernels/ through gemm.c's job splitter (q, k and v as one job), shared
** with the run's helper threads (pool.c); on CPUs with neither they go to
** OpenBLAS (bf_sgemm, blas.h; where OpenBLAS is not installed, blas.c's
** plain C loops, on the calling thread).  Each product goes to one or the other, never
** both, so that the two thread pools do not run at once.  The rest is loops
** over rows, through the row operations of the same kernel set
** (kernels/kernels.h: AVX-512, AVX2, or plain C), shared by the same threads,
** and the attention of each head: the set's attention kernels straight from
** the rows of q, k and v (AVX-512, AVX2), else plain C.
** A bf_run holds the scratch buffers (grown on demand, kept for the next call),
** the helper threads and the stage timings of the last call.
*/
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bertfill.h"
#include "blas.h"
#include "gemm.h"
#include "model.h"
#include "pool.h"
#include "qgemm.h"
#include "util.h"

/* The MLM head runs over at most this many masks at a time, which bounds the
** [masks, vocab] logits buffer (128 x 21128 floats = 10.8 MB). */
#define HEAD_CHUNK 128

/* A growable scratch buffer. */
typedef struct buf {
  void *p;
  size_t cap;
} buf;

/* Where one sequence of the batch is: its tokens are rows [row, row + len)
** of x, its masks rows [mask, mask + nmask) of xm (all masks in order). */
typedef struct seq_span {
  int row, len, mask, nmask;
} seq_span;

struct bf_run {
  buf x;             /* [T,H]  hidden state */
  buf q, k, v;       /* [T,H]  queries, keys, values */
  buf ctx;           /* [T,H]  attention context (heads side by side) */
  buf tmp;           /* [T,H]  output of a dense layer, before the residual */
  buf ffn;           /* [T,I]  intermediate activations */
  buf att;           /* scratch of one attention head per thread (see head_kernels) */
  buf seq;           /* [nrun] seq_span of each sequence that has masks */
  buf xm;            /* [M,H]  output of the last layer at the masks */
  buf mrow;          /* [M]    row of x for each mask, in order */
  buf hm;            /* [HEAD_CHUNK,H]  MLM head activations */
  buf logits;        /* [HEAD_CHUNK,V] */
  buf heap;          /* [k]    top-k selection */
  buf qx;            /* int8 models: the quantized rows of a product's x */
  bf_pool *pool;     /* helper threads of the parallel loops; NULL until needed */
  gemm_scratch gemm; /* buffers of the GEMM kernels, kept between calls */
  bf_timings t;
};

/* ---------------------------------------------------------------- helpers */

/* Make b hold at least n elements of size sz (contents are not kept).  A
** buffer far larger than needed (left by a huge batch) is given back.  On
** failure b is unchanged and NULL is returned. */
static void *buf_reserve(buf *b, size_t n, size_t sz) {
  if (n == 0) n = 1;
  if (n > SIZE_MAX / sz) return NULL;
  size_t bytes = n * sz;
  if (bytes <= b->cap && !(b->cap > ((size_t)64 << 20) && bytes < b->cap / 4)) return b->p;
  void *p = malloc(bytes);
  if (!p) return NULL;
  free(b->p);
  b->p = p;
  b->cap = bytes;
  return p;
}

/* ------------------------------------------------------------ the layers */

/* The row operations of the kernel set dispatch.c chose (kernels/kernels.h,
** where each one's meaning is written). */
static const row_kernel_table *row_ops(void) { return &kernels_chosen()->rows; }

/* In place: x[n] = LayerNorm(x[n]) * g + b, mean and variance in double. */
static void layernorm(float *x, const float *g, const float *b, int n, float eps) {
  row_ops()->layernorm(x, g, b, n, eps);
}

/* x[i] += a[i] + b[i] for i < n; b may be NULL. */
static void add(float *x, const float *a, const float *b, int n) { row_ops()->add(x, a, b, n); }

/* The largest of x[0..n) into *max; returns 0 if some x[i] is NaN or infinite. */
static int max_finite(const float *x, int n, float *max) {
  return row_ops()->max_finite(x, n, max);
}

/* Sum of e^(x[i] - mx), in double; each term is stored in dst unless dst is NULL. */
static double exp_sum(float *dst, const float *x, int n, float mx) {
  return row_ops()->exp_sum(dst, x, n, mx);
}

/* In place: p[i] = e^(p[i] - max) / sum, for one row of n scores. */
static void softmax(float *p, int n) {
  float mx = p[0];
  int found = max_finite(p, n, &mx); /* mx is the largest and every p[i] is finite */
  if (!found)                        /* NaN/Inf: the plain loop */
    for (int i = 1; i < n; i++)
      if (p[i] > mx) mx = p[i];
  float inv = (float)(1.0 / exp_sum(p, p, n, mx));
  for (int i = 0; i < n; i++) p[i] *= inv;
}

/* Threads for the run's parallel loops: the engine's thread setting
** (bf_pool_threads, pool.h), at most BF_POOL_MAX_THREADS. */
static int run_threads(void) {
  int n = bf_pool_threads();
  return n < 1 ? 1 : n > BF_POOL_MAX_THREADS ? BF_POOL_MAX_THREADS : n;
}

/* The run's thread pool, made on first use (NULL if it cannot be: then the
** caller does all the work). */
static bf_pool *run_pool(bf_run *r) {
  if (!r->pool) r->pool = bf_pool_new();
  return r->pool;
}

/* One product with a weight of the model: y[T,n] = x[T,in] W^T (+ b), W as
** PyTorch stores it ([n,in]); w8 is its int8 copy (int8 models).  The bias
** b (may be NULL) is added as y[t][i] += b[i], one rounding, either in the
** int8 epilogue or by a row pass after the fp32 product: the same numbers.
** Or, with b NULL, post (may be NULL) runs on y's rows inside the product's
** job, a unit's columns at a time while they are in cache (gemm.h):
** post(y[t], post_bias, n), the feed-forward's gelu_row. */
typedef struct product {
  float *y;
  const float *w;
  const float *wp;    /* w as packed panels (model.packed.safetensors), or NULL */
  const uint32_t *wh; /* w as bf16 panels (bf16 models: model.bf16.safetensors) */
  const qg_weights *w8;
  int n;
  const float *b;
  gemm_post_fn post;
  const float *post_bias;
} product;

static void rows_run(bf_run *r, int kind, int T, int n, float *x, float *y, const float *bias,
                     const float *g, const float *b, float eps);
enum { ROWS_BIAS, ROWS_RESLN };

/* bf16 (every o[i].wh set, a bf16 model): gemm.c's bf16 products, on this
** thread alone when the job's buffers cannot be allocated; 0 when there are
** no bf16 panels or even that fails (out of memory for x's bf16 copy). */
static int products_bf16(bf_run *r, const float *x, int T, int in, int np, const gemm_out *o) {
  for (int i = 0; i < np; i++)
    if (!o[i].wh) return 0;
  return gemm_xwt_bf16(run_pool(r), &r->gemm, run_threads(), x, T, in, np, o) == GEMM_OK ||
         gemm_xwt_bf16(NULL, NULL, 1, x, T, in, np, o) == GEMM_OK;
}

/* fp32: bertfill's kernels through gemm.c, or OpenBLAS on CPUs without
** AVX-512 or AVX2 (or if the kernels' panel buffers cannot be allocated);
** a bf16 model's bf16 products (products_bf16), and only where those cannot
** run the fp32 products of the same weights. */
static void products_fp32(bf_run *r, const float *x, int T, int in, int np, const product *p) {
  gemm_out o[3];
  for (int i = 0; i < np; i++)
    o[i] = (gemm_out){p[i].y, p[i].w, p[i].n, p[i].post, p[i].post_bias, p[i].wp, p[i].wh};
  if (!products_bf16(r, x, T, in, np, o) &&
      gemm_xwt(run_pool(r), &r->gemm, run_threads(), x, T, in, np, o) != GEMM_OK)
    for (int i = 0; i < np; i++) {
      bf_sgemm(0, 1, T, p[i].n, in, 1.0f, x, in, p[i].w, in, 0.0f, p[i].y, p[i].n);
      gemm_post_rows(p[i].post, p[i].post_bias, p[i].y, p[i].n, 0, T, 0, p[i].n);
    }
  for (int i = 0; i < np; i++)
    if (p[i].b) rows_run(r, ROWS_BIAS, T, p[i].n, NULL, p[i].y, p[i].b, NULL, NULL, 0);
}

const char *bf_int8_kernels(void) { return qg_path_name((qg_path)kernels_int8_chosen()); }
const char *bf_bf16_kernels(void) { return kernels_bf16_chosen()->name; }

#define QUANTIZE_ROWS 32 /* rows of x per unit of the quantizing job */

/* int8: x quantized once per row into r->qx (reserve_scratch sized it) for
** the int8 kernel dispatch.c chose (kernels_int8_chosen: capped like the
** fp32 set), then all np products as one job of the pool (gemm_xwt_int8);
** without memory for its table of units, on this thread alone. */
typedef struct quantize_job {
  const qg_rows *X;
  const float *x;
} quantize_job;

static void quantize_unit(void *arg, int u, int tid) {
  (void)tid;
  const quantize_job *j = arg;
  int r0 = u * QUANTIZE_ROWS, r1 = r0 + QUANTIZE_ROWS < j->X->t ? r0 + QUANTIZE_ROWS : j->X->t;
  qg_quantize_rows_range(j->X, j->x, (size_t)j->X->k, r0, r1);
}

static void products_int8(bf_run *r, const float *x, int T, int in, int np, const product *p) {
  qg_rows X;
  qg_rows_init(&X, r->qx.p, T, in, (qg_path)kernels_int8_chosen());
  /* x's rows quantized on the pool's threads when there are many (a batch) */
  quantize_job qj = {&X, x};
  int units = (T + QUANTIZE_ROWS - 1) / QUANTIZE_ROWS;
  bf_pool_run(units > 1 ? run_pool(r) : NULL, run_threads(), units, quantize_unit, &qj);
  gemm_out8 o[3];
  for (int i = 0; i < np; i++)
    o[i] = (gemm_out8){p[i].y, p[i].w8, p[i].b, p[i].post, p[i].post_bias};
  if (gemm_xwt_int8(run_pool(r), &r->gemm, run_threads(), &X, np, o) != GEMM_OK)
    gemm_xwt_int8(NULL, NULL, 1, &X, np, o); /* this thread alone: no table of units */
}

/* The np (at most 3) products of one x[T,in], in the model's precision. */
static void products(bf_run *r, int int8, const float *x, int T, int in, int np, const product *p) {
  if (int8) products_int8(r, x, T, in, np, p);
  else products_fp32(r, x, T, in, np, p);
}

/* y[T,n] = x[T,in] W^T (+ b) for one weight (fp32 W, its packed or bf16
** panels Wp or Wh, or its int8 copy w8). */
static void linear(bf_run *r, int int8, float *y, const float *x, const float *W, const float *Wp,
                   const uint32_t *Wh, const qg_weights *w8, const float *b, int T, int n, int in) {
  product p = {y, W, Wp, Wh, w8, n, b, NULL, NULL};
  products(r, int8, x, T, in, 1, &p);
}

/* One attention head of one sequence on the kernel set's attention kernels
** (kernels.h; single thread: heads are the units of work): ctx[i] =
** softmax(scale q_i K^T) V for the Lq query rows q/ctx over the L tokens
** k/v (rows of stride H, d columns), straight from those rows: the scores
** S[Lq, lds] (lds: L rounded up to 16), their softmax, then the values.
** scratch holds (L + d) * lds floats (att_floats).  Returns 0 if the set has
** no attention kernels (the portable set). */
static int head_kernels(const float *q, int Lq, const float *k, const float *v, int L, float *ctx,
                        int d, int H, float scale, float *scratch) {
  const gemm_kernel_table *kt = kernels_chosen()->gemm;
  if (!kt || !kt->att_scores) return 0;
  int lds = (L + 15) & ~15;
  float *S = scratch, *KT = S + (size_t)Lq * lds;
  kt->att_scores(S, lds, q, (size_t)H, Lq, k, (size_t)H, L, d, scale, KT);
  for (int i = 0; i < Lq; i++) softmax(S + (size_t)i * lds, L);
  kt->att_values(ctx, (size_t)H, S, lds, Lq, v, (size_t)H, L, d);
  return 1;
}

/* One attention head, plain C (CPUs without AVX-512 or AVX2); same arguments
** (S: Lq * L floats of scratch). */
static void head_plain(const float *q, int Lq, const float *k, const float *v, int L, float *ctx,
                       int d, int H, float scale, float *S) {
  for (int i = 0; i < Lq; i++) {
    float *s = S + (size_t)i * L;
    for (int j = 0; j < L; j++) {
      float acc = 0.0f;
      for (int c = 0; c < d; c++) acc += q[(size_t)i * H + c] * k[(size_t)j * H + c];
      s[j] = acc * scale;
    }
    softmax(s, L);
    for (int c = 0; c < d; c++) {
      float acc = 0.0f;
      for (int j = 0; j < L; j++) acc += s[j] * v[(size_t)j * H + c];
      ctx[(size_t)i * H + c] = acc;
    }
  }
}

/* Self-attention of every sequence of the batch, one unit of the pool per
** (sequence, head): head h reads columns [h*d, (h+1)*d) of q, k, v and writes
** the same columns of ctx.  The keys and values of a sequence are the rows
** of all its tokens; its queries (rows of q and ctx) too, or in the last
** layer (at_masks) the rows of its masks only.  Each thread has its own
** scratch. */
typedef struct att_job {
  bf_run *r;
  const seq_span *seq;
  int at_masks; /* queries: 0 all tokens, 1 the masks only */
  int nh, d, H;
  float scale;
  size_t per_thread; /* floats of scratch per thread */
} att_job;

static void att_unit(void *arg, int u, int tid) {
  att_job *j = arg;
  const seq_span *sq = &j->seq[u / j->nh];
  int h = u % j->nh, L = sq->len;
  int Lq = j->at_masks ? sq->nmask : sq->len, qrow = j->at_masks ? sq->mask : sq->row;
  size_t o = (size_t)sq->row * j->H + (size_t)h * j->d;
  size_t oq = (size_t)qrow * j->H + (size_t)h * j->d;
  const float *q = (float *)j->r->q.p + oq;
  const float *k = (float *)j->r->k.p + o, *v = (float *)j->r->v.p + o;
  float *ctx = (float *)j->r->ctx.p + oq;
  float *S = (float *)j->r->att.p + (size_t)tid * j->per_thread;
  if (!head_kernels(q, Lq, k, v, L, ctx, j->d, j->H, j->scale, S))
    head_plain(q, Lq, k, v, L, ctx, j->d, j->H, j->scale, S);
}

static void attention(bf_run *r, const bf_config *c, const seq_span *seq, int nseq, int at_masks,
                      size_t per_thread) {
  int nh = c->num_attention_heads, d = c->hidden_size / nh;
  att_job j = {r, seq, at_masks, nh, d, c->hidden_size, 1.0f / sqrtf((float)d), per_thread};
  bf_pool_run(run_pool(r), run_threads(), nseq * nh, att_unit, &j);
}

/* Loops over rows, shared by the pool in chunks of rows:
**   ROWS_BIAS   y[t] += bias
**   ROWS_RESLN  x[t] = LayerNorm(x[t] + y[t] + bias) */
typedef struct rows_job {
  int kind, T, n, chunk;
  float *x, *y;
  const float *bias, *g, *b;
  float eps;
} rows_job;

static void rows_unit(void *arg, int u, int tid) {
  rows_job *j = arg;
  (void)tid;
  int t1 = (u + 1) * j->chunk < j->T ? (u + 1) * j->chunk : j->T;
  for (int t = u * j->chunk; t < t1; t++) {
    float *y = j->y + (size_t)t * j->n;
    switch (j->kind) {
      case ROWS_BIAS: add(y, j->bias, NULL, j->n); break;
      default: {
        float *x = j->x + (size_t)t * j->n;
        add(x, y, j->bias, j->n);
        layernorm(x, j->g, j->b, j->n, j->eps);
      }
    }
  }
}

static void rows_run(bf_run *r, int kind, int T, int n, float *x, float *y, const float *bias,
                     const float *g, const float *b, float eps) {
  rows_job j = {kind, T, n, 0, x, y, bias, g, b, eps};
  j.chunk = n >= 16384 ? 1 : 16384 / n; /* ~16k floats per unit */
  int units = (T + j.chunk - 1) / j.chunk;
  bf_pool_run(units > 1 ? run_pool(r) : NULL, run_threads(), units, rows_unit, &j);
}

/* Floats of attention scratch one thread needs for sequences of up to L
** tokens (see head_kernels; head_plain needs less). */
static size_t att_floats(const bf_config *c, int L) {
  size_t d = (size_t)(c->hidden_size / c->num_attention_heads);
  return ((size_t)L + d) * (((size_t)L + 15) & ~(size_t)15);
}

/* One encoder layer over the T tokens of the nseq sequences seq (the
** longest has L tokens), x[T,H] in place.  The last layer (xm != NULL) only
** needs its output at the M masks, whose rows of x are mrow: keys and values
** still come from all T tokens, but the queries, attention output and
** feed-forward run on the M mask rows only, into xm[M,H] (the same numbers
** as the full layer gives at those rows). */
static void encoder_layer(bf_run *r, const bf_config *c, int int8, const bf_layer *w,
                          const seq_span *seq, int nseq, int L, int T, float *xm,
                          const size_t *mrow, int M) {
  int H = c->hidden_size, I = c->intermediate_size;
  float eps = c->layer_norm_eps;
  float *x = r->x.p, *q = r->q.p, *k = r->k.p, *v = r->v.p;
  float *ctx = r->ctx.p, *tmp = r->tmp.p, *ffn = r->ffn.p;
  int R = T; /* rows that go on: all tokens, or the masks */

  if (!xm) {
    product qkv[3] = {{q, w->q_w, w->q_p, w->q_h, &w->q8, H, w->q_b, NULL, NULL},
                      {k, w->k_w, w->k_p, w->k_h, &w->k8, H, w->k_b, NULL, NULL},
                      {v, w->v_w, w->v_p, w->v_h, &w->v8, H, w->v_b, NULL, NULL}};
    products(r, int8, x, T, H, 3, qkv); /* one job: q, k and v share x */
  } else {
    R = M;
    for (int i = 0; i < M; i++) memcpy(xm + (size_t)i * H, x + mrow[i] * H, H * sizeof(float));
    product kv[2] = {{k, w->k_w, w->k_p, w->k_h, &w->k8, H, w->k_b, NULL, NULL},
                     {v, w->v_w, w->v_p, w->v_h, &w->v8, H, w->v_b, NULL, NULL}};
    products(r, int8, x, T, H, 2, kv);
    linear(r, int8, q, xm, w->q_w, w->q_p, w->q_h, &w->q8, w->q_b, M, H, H);
    x = xm;
  }
  attention(r, c, seq, nseq, xm != NULL, att_floats(c, L));

  linear(r, int8, tmp, ctx, w->ao_w, w->ao_p, w->ao_h, &w->ao8, NULL, R, H, H);
  rows_run(r, ROWS_RESLN, R, H, x, tmp, w->ao_b, w->aln_g, w->aln_b, eps);

  product up = {ffn, w->i_w, w->i_p, w->i_h, &w->i8, I, NULL, row_ops()->gelu_row, w->i_b};
  products(r, int8, x, R, H, 1, &up); /* ffn = gelu(x Wi^T + bi) */
  linear(r, int8, tmp, ffn, w->o_w, w->o_p, w->o_h, &w->o8, NULL, R, H, I);
  rows_run(r, ROWS_RESLN, R, H, x, tmp, w->o_b, w->oln_g, w->oln_b, eps);
}

/* ----------------------------------------------------------------- top-k */

/* A candidate under selection: better = higher logit, then lower id. */
typedef struct topk_entry {
  float logit;
  int32_t id;
} topk_entry;

static int worse(topk_entry a, topk_entry b) {
  return a.logit < b.logit || (a.logit == b.logit && a.id > b.id);
}

/* Min-heap on "worse": h[0] is the worst of the k kept so far. */
static void sift_down(topk_entry *h, int n, int i) {
  for (;;) {
    int l = 2 * i + 1, rr = l + 1, m = i;
    if (l < n && worse(h[l], h[m])) m = l;
    if (rr < n && worse(h[rr], h[m])) m = rr;
    if (m == i) return;
    topk_entry t = h[i];
    h[i] = h[m];
    h[m] = t;
    i = m;
  }
}

static int cand_cmp(const void *pa, const void *pb) {
  const bf_cand *a = pa, *b = pb;
  if (a->prob != b->prob) return a->prob > b->prob ? -1 : 1;
  return (a->id > b->id) - (a->id < b->id);
}

/* Softmax over one row of V logits and the k most probable tokens, sorted;
** also the probability of token want into *want_prob (want < 0: none).
** Returns 0, or -1 if a logit is NaN or infinite. */
static int topk_row(const float *logits, int V, int k, topk_entry *h, bf_cand *out, int32_t want,
                    float *want_prob) {
  float mx;
  if (!max_finite(logits, V, &mx)) return -1;
  double sum = exp_sum(NULL, logits, V, mx);
  if (want >= 0) *want_prob = (float)(expf(logits[want] - mx) / sum); /* as for the top k */

  /* The k best by a size-k min-heap: O(V log k), never a sort of V. */
  int n = 0;
  for (int i = 0; i < V; i++) {
    topk_entry e = {logits[i], i};
    if (n < k) {
      h[n++] = e;
      if (n == k)
        for (int j = k / 2 - 1; j >= 0; j--) sift_down(h, k, j);
    } else if (e.logit >= h[0].logit && worse(h[0], e)) {
      h[0] = e;
      sift_down(h, k, 0);
    }
  }
  for (int j = 0; j < k; j++) {
    out[j].id = h[j].id;
    out[j].prob = (float)(expf(h[j].logit - mx) / sum);
  }
  qsort(out, k, sizeof *out, cand_cmp);
  return 0;
}

/* -------------------------------------------------------------- bf_fill */

bf_run *bf_run_new(void) { return calloc(1, sizeof(bf_run)); }

void bf_run_free(bf_run *r) {
  if (!r) return;
  buf *all[] = {&r->x,   &r->q,  &r->k,    &r->v,  &r->ctx,    &r->tmp,  &r->ffn, &r->att,
                &r->seq, &r->xm, &r->mrow, &r->hm, &r->logits, &r->heap, &r->qx};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]->p);
  bf_pool_free(r->pool);
  gemm_scratch_free(&r->gemm);
  free(r);
}

const char *bf_gemm_kernels(void) { return gemm_kernels_name(gemm_kernels()); }

const bf_timings *bf_run_timings(const bf_run *r) {
  static const bf_timings none;
  return r ? &r->t : &none;
}

/* The part of a bf_fill batch that runs: the sequences that have masks. */
typedef struct batch {
  size_t T, M; /* their tokens and masks */
  int nrun;    /* how many they are */
  int longest; /* tokens of the longest */
  int32_t mask_id;
} batch;

/* The checks every run shares: the heads divide the hidden size. */
static int check_heads(const bf_config *c, char *err, size_t errlen) {
  if (c->num_attention_heads < 1 || c->hidden_size % c->num_attention_heads != 0) {
    bf_errf(err, errlen, "hidden_size %d is not a multiple of num_attention_heads %d",
            c->hidden_size, c->num_attention_heads);
    return BF_ERR_MODEL;
  }
  return BF_OK;
}

/* Sequence s of a run: not empty, no longer than the model takes, every id
** in the vocabulary; *masks gets the number of its [MASK] ids. */
static int check_sequence(const bf_model *m, int s, const bf_tokens *t, int32_t mask_id, int *masks,
                          char *err, size_t errlen) {
  int V = m->cfg.vocab_size, P = m->cfg.max_position_embeddings;
  if (t->n > P) {
    bf_errf(err, errlen,
            "input is %d tokens long; this model accepts at most %d (max_position_embeddings)",
            t->n, P);
    return BF_ERR_TOOLONG;
  }
  if (t->n < 1 || !t->ids) {
    bf_errf(err, errlen, "sequence %d is empty (%d tokens)", s, t->n);
    return BF_ERR_INPUT;
  }
  int nm = 0;
  for (int i = 0; i < t->n; i++) {
    if (t->ids[i] < 0 || t->ids[i] >= V) {
      bf_errf(err, errlen,
              "token id %ld at position %d of sequence %d is out of range "
              "(the vocabulary has %d entries)",
              (long)t->ids[i], i, s, V);
      return BF_ERR_INPUT;
    }
    nm += t->ids[i] == mask_id;
  }
  *masks = nm;
  return BF_OK;
}

/* A batch with something to run: its weights as loaded (changed on disk
** since: other weights or SIGBUS ahead), its size within bounds. */
static int check_batch_size(const bf_model *m, const batch *b, char *err, size_t errlen) {
  int rc = bf_model_check(m, err, errlen);
  if (rc != BF_OK) return rc;
  if (b->T > INT_MAX / 4) {
    bf_errf(err, errlen, "a batch of %zu tokens is too large; split it", b->T);
    return BF_ERR_NOMEM;
  }
  return BF_OK;
}

/* Step 1: check everything from outside before touching any memory, and
** measure the batch into b.  BF_OK (also when there is no mask: b->M == 0,
** nothing to run) or an error code with err set. */
static int check_inputs(const bf_model *m, int nseq, const bf_tokens *seqs, int k,
                        const bf_cand *out, batch *b, char *err, size_t errlen) {
  int V = m->cfg.vocab_size;
  if (nseq < 0 || (nseq > 0 && !seqs)) {
    bf_errf(err, errlen, "bf_fill: bad sequence list (nseq = %d)", nseq);
    return BF_ERR_INPUT;
  }
  if (k < 1 || k > BF_MAX_K || k > V) {
    bf_errf(err, errlen,
            "k must be between 1 and %d (the vocabulary size or %d, whichever is smaller); got %d",
            V < BF_MAX_K ? V : BF_MAX_K, BF_MAX_K, k);
    return BF_ERR_INPUT;
  }
  int rc = check_heads(&m->cfg, err, errlen);
  if (rc != BF_OK) return rc;
  memset(b, 0, sizeof *b);
  b->mask_id = bf_tokenizer_mask_id(m->tok);
  for (int s = 0; s < nseq; s++) {
    const bf_tokens *t = &seqs[s];
    int nm;
    if ((rc = check_sequence(m, s, t, b->mask_id, &nm, err, errlen)) != BF_OK) return rc;
    if (nm != t->n_masks) {
      bf_errf(err, errlen, "sequence %d says it has %d [MASK] tokens but its ids hold %d", s,
              t->n_masks, nm);
      return BF_ERR_INPUT;
    }
    if (nm > 0) {
      b->T += t->n;
      b->M += nm;
      b->nrun++;
      if (t->n > b->longest) b->longest = t->n;
    }
  }
  if (b->M == 0) return BF_OK;
  if (!out) {
    bf_errf(err, errlen, "bf_fill: no output array");
    return BF_ERR_INPUT;
  }
  return check_batch_size(m, b, err, errlen);
}

/* Step 1b: the wanted tokens of bf_fill_scored, one per mask: -1 or an id
** of the vocabulary.  BF_OK or BF_ERR_INPUT with err set. */
static int check_wanted(const bf_model *m, const batch *b, const int32_t *want,
                        const float *want_prob, char *err, size_t errlen) {
  if (!want) return BF_OK;
  if (!want_prob) {
    bf_errf(err, errlen, "bf_fill_scored: no array for the probabilities");
    return BF_ERR_INPUT;
  }
  for (size_t j = 0; j < b->M; j++)
    if (want[j] < -1 || want[j] >= m->cfg.vocab_size) {
      bf_errf(err, errlen,
              "bf_fill_scored: wanted token id %ld at mask %zu is out of range "
              "(the vocabulary has %d entries)",
              (long)want[j], j, m->cfg.vocab_size);
      return BF_ERR_INPUT;
    }
  return BF_OK;
}

/* Step 2: the scratch buffers for batch b and k candidates.  0 when out of
** memory. */
static int reserve_scratch(bf_run *r, const bf_model *m, const batch *b, int k) {
  const bf_config *c = &m->cfg;
  size_t T = b->T, M = b->M, H = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
  size_t V = (size_t)c->vocab_size, Mc = M < HEAD_CHUNK ? M : HEAD_CHUNK;
  return buf_reserve(&r->x, T * H, sizeof(float)) && buf_reserve(&r->q, T * H, sizeof(float)) &&
         buf_reserve(&r->k, T * H, sizeof(float)) && buf_reserve(&r->v, T * H, sizeof(float)) &&
         buf_reserve(&r->ctx, T * H, sizeof(float)) && buf_reserve(&r->tmp, T * H, sizeof(float)) &&
         buf_reserve(&r->ffn, T * I, sizeof(float)) &&
         buf_reserve(&r->att, (size_t)run_threads() * att_floats(c, b->longest), sizeof(float)) &&
         buf_reserve(&r->seq, (size_t)b->nrun, sizeof(seq_span)) &&
         buf_reserve(&r->xm, M * H, sizeof(float)) && buf_reserve(&r->mrow, M, sizeof(size_t)) &&
         buf_reserve(&r->hm, Mc * H, sizeof(float)) &&
         buf_reserve(&r->logits, Mc * V, sizeof(float)) &&
         buf_reserve(&r->heap, (size_t)k, sizeof(topk_entry)) &&
         (m->precision != BF_PRECISION_INT8 ||
          buf_reserve(&r->qx, qg_rows_bytes((int)T, (int)(I > H ? I : H)), 1));
}

/* Step 3: the embeddings of the sequences that have masks, one after the
** other, into x; where each of them lies (r->seq) and the row of x of each
** mask (r->mrow). */
static void embed(bf_run *r, const bf_model *m, int nseq, const bf_tokens *seqs, const batch *b,
                  int nprobe, const bf_probe *probes) {
  int H = m->cfg.hidden_size;
  float eps = m->cfg.layer_norm_eps;
  seq_span *seq = r->seq.p;
  size_t *mrow = r->mrow.p;
  float *x = r->x.p;
  size_t row = 0, mi = 0;
  int pi = 0; /* probes: the next one (they come ordered by sequence, then position) */
  for (int s = 0, j = 0; s < nseq; s++) {
    const bf_tokens *t = &seqs[s];
    int nq = t->n_masks;
    if (probes) {
      int p0 = pi;
      while (pi < nprobe && probes[pi].seq == s)
        mrow[mi + (size_t)(pi - p0)] = row + probes[pi].pos, pi++;
      nq = pi - p0;
    }
    if (nq == 0) continue;
    seq[j++] = (seq_span){.row = (int)row, .len = t->n, .mask = (int)mi, .nmask = nq};
    if (probes) mi += (size_t)nq;
    for (int p = 0; p < t->n; p++, row++) {
      float *xr = x + row * H;
      const float *we = m->word_emb + (size_t)t->ids[p] * H;
      const float *pe = m->pos_emb + (size_t)p * H;
      const float *te = m->type_emb;     /* token type 0 */
      memcpy(xr, we, H * sizeof(float)); /* (word + type) + position, PyTorch's order */
      add(xr, te, NULL, H);
      add(xr, pe, NULL, H);
      layernorm(xr, m->emb_ln_g, m->emb_ln_b, H, eps);
      if (!probes && t->ids[p] == b->mask_id) mrow[mi++] = row;
    }
  }
}

/* Step 4: the encoder layers over x; the output of the last one at the
** masks goes to xm[M,H]. */
static void encode(bf_run *r, const bf_model *m, const batch *b) {
  const bf_config *c = &m->cfg;
  int H = c->hidden_size, nl = c->num_hidden_layers;
  const size_t *mrow = r->mrow.p;
  float *x = r->x.p, *xm = r->xm.p;
  for (int l = 0; l < nl; l++)
    encoder_layer(r, c, m->precision == BF_PRECISION_INT8, &m->layers[l], r->seq.p, b->nrun,
                  b->longest, (int)b->T, l == nl - 1 ? xm : NULL, mrow, (int)b->M);
  if (nl == 0)
    for (size_t i = 0; i < b->M; i++) memcpy(xm + i * H, x + mrow[i] * H, H * sizeof(float));
}

/* Step 5: the MLM head at n masks (rows xm[n,H], contiguous):
** logits[n,V] = LayerNorm(gelu(xm Wh^T + bh)) Wdec^T + bdec. */
static void mlm_head(bf_run *r, const bf_model *m, const float *xm, int n) {
  int H = m->cfg.hidden_size, V = m->cfg.vocab_size;
  float *hm = r->hm.p, *logits = r->logits.p;
  int int8 = m->precision == BF_PRECISION_INT8;
  product dense = {hm,   m->head_w,           NULL,     m->head_h, &m->head8, H,
                   NULL, row_ops()->gelu_row, m->head_b};
  products(r, int8, xm, n, H, 1, &dense); /* hm = gelu(xm Wh^T + bh) */
  for (int i = 0; i < n; i++) {
    float *hr = hm + (size_t)i * H;
    layernorm(hr, m->head_ln_g, m->head_ln_b, H, m->cfg.layer_norm_eps);
  }
  linear(r, int8, logits, hm, m->dec_w, NULL, m->dec_h, &m->dec8, m->dec_b, n, V, H);
}

/* Step 6: softmax and the k most probable tokens of each of the n rows of
** logits, into out[n,k]; with want, also the probability of token want[i]
** of row i (-1: none, 0) into want_prob[i].  BF_OK, or BF_ERR_MODEL with
** err set. */
static int topk_rows(bf_run *r, int V, int n, int k, bf_cand *out, const int32_t *want,
                     float *want_prob, char *err, size_t errlen) {
  const float *logits = r->logits.p;
  for (int i = 0; i < n; i++) {
    int32_t w = want ? want[i] : -1;
    if (want) want_prob[i] = 0;
    if (topk_row(logits + (size_t)i * V, V, k, r->heap.p, out + (size_t)i * k, w,
                 want ? want_prob + i : NULL) != 0) {
      bf_errf(err, errlen, "the model produced NaN/Inf (corrupt weights?)");
      return BF_ERR_MODEL;
    }
  }
  return BF_OK;
}

/* The part of a run that bf_fill and bf_probe_run share, once the batch b is
** checked: the scratch for it (k candidates per mask), the embeddings (at the
** probes' positions when there are probes, else at the masks), the encoder
** layers, timed into r->t.  BF_OK or BF_ERR_NOMEM with err set. */
static int embed_and_encode(bf_run *r, const bf_model *m, int nseq, const bf_tokens *seqs,
                            const batch *b, int k, int nprobe, const bf_probe *probes, char *err,
                            size_t errlen) {
  if (!reserve_scratch(r, m, b, k)) {
    bf_errf(err, errlen, "out of memory for the scratch buffers of %zu tokens in %d sequences",
            b->T, b->nrun);
    return BF_ERR_NOMEM;
  }
  r->t.tokens = (int)b->T;
  r->t.masks = (int)b->M;
  r->t.seqs = b->nrun;
  uint64_t t0 = bf_now_ns();
  embed(r, m, nseq, seqs, b, nprobe, probes);
  uint64_t t1 = bf_now_ns();
  r->t.embed_ns = t1 - t0;
  encode(r, m, b);
  r->t.encode_ns = bf_now_ns() - t1;
  return BF_OK;
}

int bf_fill(const bf_model *m, bf_run *r, int nseq, const bf_tokens *seqs, int k, bf_cand *out,
            char *err, size_t errlen) {
  return bf_fill_scored(m, r, nseq, seqs, k, out, NULL, NULL, err, errlen);
}

int bf_fill_scored(const bf_model *m, bf_run *r, int nseq, const bf_tokens *seqs, int k,
                   bf_cand *out, const int32_t *want, float *want_prob, char *err, size_t errlen) {
  if (err && errlen > 0) err[0] = 0;
  if (!m || !r) {
    bf_errf(err, errlen, "bf_fill: no model or no run");
    return BF_ERR_INPUT;
  }
  memset(&r->t, 0, sizeof r->t);
  batch b;
  int rc = check_inputs(m, nseq, seqs, k, out, &b, err, errlen);
  if (rc == BF_OK) rc = check_wanted(m, &b, want, want_prob, err, errlen);
  if (rc != BF_OK || b.M == 0) return rc; /* an error, or no mask: nothing to run */
  if ((rc = embed_and_encode(r, m, nseq, seqs, &b, k, 0, NULL, err, errlen)) != BF_OK) return rc;

  /* the head and the top k, HEAD_CHUNK masks at a time */
  int H = m->cfg.hidden_size, V = m->cfg.vocab_size;
  const float *xm = r->xm.p;
  for (size_t m0 = 0; m0 < b.M; m0 += HEAD_CHUNK) {
    int n = b.M - m0 < HEAD_CHUNK ? (int)(b.M - m0) : HEAD_CHUNK;
    uint64_t ta = bf_now_ns();
    mlm_head(r, m, xm + m0 * H, n);
    uint64_t tb = bf_now_ns();
    r->t.head_ns += tb - ta;
    rc = topk_rows(r, V, n, k, out + m0 * k, want ? want + m0 : NULL, want ? want_prob + m0 : NULL,
                   err, errlen);
    if (rc != BF_OK) return rc;
    r->t.topk_ns += bf_now_ns() - tb;
  }
  return BF_OK;
}

/* ------------------------------------------------------------- bf_probe */

/* Step 1 of bf_probe: the sequences and the probes checked (ordered,
** positions and ids in range), the batch measured into b as check_inputs
** does for masks.  BF_OK (b->M == 0: no probe, nothing to run) or an error
** code with err set. */
static int check_probes(const bf_model *m, int nseq, const bf_tokens *seqs, int nprobe,
                        const bf_probe *probes, int what, batch *b, char *err, size_t errlen) {
  int V = m->cfg.vocab_size;
  if (nseq < 0 || (nseq > 0 && !seqs) || nprobe < 0 || (nprobe > 0 && !probes)) {
    bf_errf(err, errlen, "bf_probe: bad sequence or probe list (%d, %d)", nseq, nprobe);
    return BF_ERR_INPUT;
  }
  if (what != BF_PROBE_LOGITS && what != BF_PROBE_PROBS) {
    bf_errf(err, errlen, "bf_probe: unknown kind of result %d", what);
    return BF_ERR_INPUT;
  }
  int rc = check_heads(&m->cfg, err, errlen);
  if (rc != BF_OK) return rc;
  memset(b, 0, sizeof *b);
  b->mask_id = bf_tokenizer_mask_id(m->tok);
  for (int s = 0; s < nseq; s++) {
    int nm;
    if ((rc = check_sequence(m, s, &seqs[s], b->mask_id, &nm, err, errlen)) != BF_OK) return rc;
  }
  int last_seq = -1;
  for (int i = 0; i < nprobe; i++) {
    const bf_probe *p = &probes[i];
    if (p->seq < 0 || p->seq >= nseq || p->pos < 0 || p->pos >= seqs[p->seq].n) {
      bf_errf(err, errlen, "bf_probe: probe %d is at sequence %d, token %d: out of range", i,
              p->seq, p->pos);
      return BF_ERR_INPUT;
    }
    if (i > 0 && (p->seq < probes[i - 1].seq ||
                  (p->seq == probes[i - 1].seq && p->pos <= probes[i - 1].pos))) {
      bf_errf(err, errlen, "bf_probe: probe %d is out of order (by sequence, then position)", i);
      return BF_ERR_INPUT;
    }
    if (p->n_ids < 0 || (p->n_ids > 0 && (!p->ids || !p->out))) {
      bf_errf(err, errlen, "bf_probe: probe %d has a bad list of ids (%d)", i, p->n_ids);
      return BF_ERR_INPUT;
    }
    for (int j = 0; j < p->n_ids; j++)
      if (p->ids[j] < 0 || p->ids[j] >= V) {
        bf_errf(err, errlen, "bf_probe: token id %ld of probe %d is out of range", (long)p->ids[j],
                i);
        return BF_ERR_INPUT;
      }
    if (p->seq != last_seq) {
      last_seq = p->seq;
      b->T += (size_t)seqs[p->seq].n;
      b->nrun++;
      if (seqs[p->seq].n > b->longest) b->longest = seqs[p->seq].n;
    }
    b->M++;
  }
  if (b->M == 0) return BF_OK;
  return check_batch_size(m, b, err, errlen);
}

/* BF_PROBE_LOGITS at n probes (rows xm[n,H]): the head's dense layer, gelu
** and LayerNorm in the model's precision, then for each wanted id one dot
** product with its row of the decoder (fp32: the tied word embedding) plus
** its bias: the logit the whole head gives that id, without the other
** V - n_ids rows. */
static void probe_logits(bf_run *r, const bf_model *m, const float *xm, int n,
                         const bf_probe *probes) {
  int H = m->cfg.hidden_size;
  float *hm = r->hm.p;
  int int8 = m->precision == BF_PRECISION_INT8;
  product dense = {hm,   m->head_w,           NULL,     m->head_h, &m->head8, H,
                   NULL, row_ops()->gelu_row, m->head_b};
  products(r, int8, xm, n, H, 1, &dense);
  for (int i = 0; i < n; i++) {
    float *hr = hm + (size_t)i * H;
    layernorm(hr, m->head_ln_g, m->head_ln_b, H, m->cfg.layer_norm_eps);
    for (int j = 0; j < probes[i].n_ids; j++) {
      const float *w = m->dec_w + (size_t)probes[i].ids[j] * H;
      double acc = 0;
      for (int c = 0; c < H; c++) acc += (double)hr[c] * w[c];
      probes[i].out[j] = (float)acc + (m->dec_b ? m->dec_b[probes[i].ids[j]] : 0.0f);
    }
  }
}

/* BF_PROBE_PROBS at n probes: the whole head (mlm_head), then each wanted
** id's probability as topk_row computes it.  BF_OK or BF_ERR_MODEL. */
static int probe_probs(bf_run *r, const bf_model *m, const float *xm, int n, const bf_probe *probes,
                       char *err, size_t errlen) {
  int V = m->cfg.vocab_size;
  mlm_head(r, m, xm, n);
  const float *logits = r->logits.p;
  for (int i = 0; i < n; i++) {
    const float *row = logits + (size_t)i * V;
    float mx;
    if (!max_finite(row, V, &mx)) {
      bf_errf(err, errlen, "the model produced NaN/Inf (corrupt weights?)");
      return BF_ERR_MODEL;
    }
    double sum = exp_sum(NULL, row, V, mx);
    for (int j = 0; j < probes[i].n_ids; j++)
      probes[i].out[j] = (float)(expf(row[probes[i].ids[j]] - mx) / sum);
  }
  return BF_OK;
}

int bf_probe_run(const bf_model *m, bf_run *r, int nseq, const bf_tokens *seqs, int nprobe,
                 const bf_probe *probes, int what, char *err, size_t errlen) {
  if (err && errlen > 0) err[0] = 0;
  if (!m || !r) {
    bf_errf(err, errlen, "bf_probe: no model or no run");
    return BF_ERR_INPUT;
  }
  memset(&r->t, 0, sizeof r->t);
  batch b;
  int rc = check_probes(m, nseq, seqs, nprobe, probes, what, &b, err, errlen);
  if (rc != BF_OK || b.M == 0) return rc;
  rc = embed_and_encode(r, m, nseq, seqs, &b, 1, nprobe, probes, err, errlen);
  if (rc != BF_OK) return rc;
  int H = m->cfg.hidden_size;
  const float *xm = r->xm.p;
  for (size_t m0 = 0; m0 < b.M; m0 += HEAD_CHUNK) {
    int n = b.M - m0 < HEAD_CHUNK ? (int)(b.M - m0) : HEAD_CHUNK;
    uint64_t ta = bf_now_ns();
    if (what == BF_PROBE_LOGITS) probe_logits(r, m, xm + m0 * H, n, probes + m0);
    else if ((rc = probe_probs(r, m, xm + m0 * H, n, probes + m0, err, errlen)) != BF_OK) return rc;
    r->t.head_ns += bf_now_ns() - ta;
  }
  return BF_OK;
}
