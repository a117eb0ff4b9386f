/*
** gemm.c — y = x W^T: the one job splitter that cuts a product into units of
** work for the threads of a pool (pool.c) and runs the fp32 kernels of the
** set dispatch.c chose (kernels/kernels.h: AVX-512 or AVX2) through its
** gemm_kernel_table, or the int8 kernel x was quantized for (qgemm.h)
** through its int8_kernel_table.  See gemm.h for what is computed and when each kernel
** is used; the kernels themselves are in kernels/avx512.c and kernels/avx2.c.
*/
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gemm.h"
#include "kernels/int8.h"

void gemm_scratch_free(gemm_scratch *s) {
  if (!s) return;
  for (int i = 0; i < BF_POOL_MAX_THREADS; i++) free(s->panel[i]);
  free(s->xh);
  free(s->units);
  memset(s, 0, sizeof *s);
}

/* ---- one job: nout products of the same x, split into units of work ---- */

/* A unit of work: columns [c0, c1) of output o, rows [t0, t1) of x. */
typedef struct gemm_unit {
  int o, c0, c1, t0, t1;
} gemm_unit;

/* How a kernel wants its work cut (the one job splitter, fp32 and int8). */
typedef struct split_rule {
  int col_step;   /* a unit's columns are a multiple of this (but an output's last) */
  int col_min;    /* and at least this many (a multiple of col_step) */
  int shrink;     /* 1: runs of columns shrinking towards the end; 0: col_min each */
  int row_block;  /* at most this many rows per unit (0: all rows) */
  int row_step;   /* rows are cut at multiples of this (a register tile) */
  int split_tail; /* 1: the last nt runs of columns cut into two halves of the rows */
} split_rule;

/* The units of a job, in the order they are taken, into units (at most
** max_units; returns how many, or -1 if more were needed).  The threads take
** them dynamically, so that the last unit of each thread ends at nearly the
** same time they shrink towards the end:
**   - shrink: runs of columns, each a 1/(2 nt) share of what is left (at
**     least col_min, a multiple of col_step), long runs first for the
**     hardware prefetchers (the fp32 dot kernel; int8 for a few rows);
**   - else runs of col_min columns (a panel kernel's strip), the last nt of
**     them cut into two halves of the rows with split_tail (each half packs
**     the strip again, which costs far less than a thread waiting);
**   - row_block: each run of columns for every block of rows in turn (int8
**     from many rows on: neighbouring units share W, each keeps its rows of
**     x in L2). */
static int plan_units(const split_rule *rule, gemm_unit *units, int max_units, const int *n,
                      int nout, int T, int nt) {
  int k = 0, rb = rule->row_block > 0 && rule->row_block < T ? rule->row_block : T;
  long total = 0, done = 0;
  int runs = 0;
  for (int o = 0; o < nout; o++) {
    total += n[o];
    runs += (n[o] + rule->col_min - 1) / rule->col_min;
  }
  /* runs from this index on (counted over the whole job) are split in rows */
  int split_from = rule->split_tail && nt > 1 && rb == T && T >= 2 * rule->row_step
                     ? (runs - nt < 0 ? 0 : runs - nt)
                     : runs;
  int run = 0;
  for (int o = 0; o < nout; o++)
    for (int c0 = 0; c0 < n[o]; run++) {
      long size = rule->col_min;
      if (rule->shrink) {
        size = (total - done + 2L * nt - 1) / (2L * nt);
        size = (size + rule->col_step - 1) / rule->col_step * rule->col_step;
        if (size < rule->col_min) size = rule->col_min;
      }
      int c1 = n[o] - c0 <= size ? n[o] : c0 + (int)size;
      if (run >= split_from) {
        int mid = (T / 2 + rule->row_step - 1) / rule->row_step * rule->row_step;
        if (k + 2 > max_units) return -1;
        units[k++] = (gemm_unit){o, c0, c1, 0, mid};
        units[k++] = (gemm_unit){o, c0, c1, mid, T};
      } else {
        for (int t0 = 0; t0 < T; t0 += rb) {
          if (k >= max_units) return -1;
          units[k++] = (gemm_unit){o, c0, c1, t0, t0 + rb < T ? t0 + rb : T};
        }
      }
      done += c1 - c0;
      c0 = c1;
    }
  return k;
}

/* Room for the units of a job in s (an upper bound of what plan_units
** makes); 0, or -1 when out of memory. */
static int reserve_units(gemm_scratch *s, const split_rule *rule, const int *n, int nout, int T,
                         int nt, int *most) {
  long runs = 0;
  for (int o = 0; o < nout; o++) runs += n[o] / rule->col_min + 1;
  int rb = rule->row_block > 0 && rule->row_block < T ? rule->row_block : T;
  long m = (runs + 2L * nt) * ((T + rb - 1) / rb) * 2 + 16;
  if (m > INT32_MAX / (long)sizeof(gemm_unit)) return -1;
  if ((size_t)m > s->units_cap) {
    gemm_unit *units = malloc((size_t)m * sizeof *units);
    if (!units) return -1;
    free(s->units);
    s->units = units;
    s->units_cap = (size_t)m;
  }
  *most = (int)m;
  return 0;
}

/* The units of a job for the outputs of n[0..nout) columns and T rows on nt
** threads, planned into s's table (reserve_units, plan_units): how many into
** *nunits, and the table; NULL when out of memory. */
static const gemm_unit *plan_job(gemm_scratch *s, const split_rule *rule, const int *n, int nout,
                                 int T, int nt, int *nunits) {
  int most;
  if (reserve_units(s, rule, n, nout, T, nt, &most) != 0) return NULL;
  *nunits = plan_units(rule, s->units, most, n, nout, T, nt);
  return *nunits < 0 ? NULL : s->units;
}

/* The threads a job of work multiply-adds runs on: nthreads within [1,
** BF_POOL_MAX_THREADS], and 1 when it is too little to be worth waking
** anyone or there is no pool and scratch to share it with. */
static int job_threads(const bf_pool *p, const gemm_scratch *s, int nthreads, long work) {
  if (nthreads > BF_POOL_MAX_THREADS) nthreads = BF_POOL_MAX_THREADS;
  return nthreads < 1 || work < 65536 || !p || !s ? 1 : nthreads;
}

/* The first column of the strip the thread running unit u most likely takes
** next (the unit after the ones the other nt - 1 threads are taking now),
** if it is further along the same output; else n (none): what a kernel
** prefetches meanwhile. */
static int next_strip(const gemm_unit *units, int nunits, int u, int nt, int n) {
  int v = u + nt;
  return v < nunits && units[v].o == units[u].o && units[v].c0 > units[u].c0 ? units[v].c0 : n;
}

void gemm_post_rows(gemm_post_fn post, const float *post_bias, float *y, int n, int t0, int t1,
                    int c0, int c1) {
  if (!post) return;
  for (int t = t0; t < t1; t++) post(y + (size_t)t * n + c0, post_bias + c0, c1 - c0);
}

/* ---- fp32 ---- */

size_t gemm_packed_floats(int n, int k) {
  return (size_t)((n + GEMM_PACK - 1) / GEMM_PACK) * GEMM_PACK * (size_t)k;
}

void gemm_pack_panels(float *wp, const float *w, int n, int k) {
  enum { KB = 64 }; /* k in blocks, so that the panel's rows of W stay in cache */
  for (int p = 0; p < (n + GEMM_PACK - 1) / GEMM_PACK; p++) {
    float *dst = wp + (size_t)p * GEMM_PACK * (size_t)k;
    int rows = n - p * GEMM_PACK < GEMM_PACK ? n - p * GEMM_PACK : GEMM_PACK;
    for (int j0 = 0; j0 < k; j0 += KB) {
      int j1 = k - j0 < KB ? k : j0 + KB;
      for (int c = 0; c < GEMM_PACK; c++) {
        const float *row = c < rows ? w + (size_t)(p * GEMM_PACK + c) * (size_t)k : NULL;
        for (int j = j0; j < j1; j++) dst[(size_t)j * GEMM_PACK + c] = row ? row[j] : 0.0f;
      }
    }
  }
}

enum { KERNEL_DOT, KERNEL_PANEL, KERNEL_PACKED };

typedef struct gemm_job {
  const gemm_kernel_table *kt;
  gemm_scratch *s; /* panel[tid]: the panel buffer of each thread */
  const float *x;
  int T, K, nout, nt;
  int kernel; /* KERNEL_DOT, KERNEL_PANEL or KERNEL_PACKED */
  gemm_out out[GEMM_MAX_OUT];
  const gemm_unit *units;
  int nunits;
} gemm_job;

static void run_unit(void *arg, int u, int tid) {
  gemm_job *j = arg;
  const gemm_unit *w = &j->units[u];
  const gemm_out *g = &j->out[w->o];
  const float *x = j->x + (size_t)w->t0 * j->K;
  float *y = g->y + (size_t)w->t0 * g->n;
  int T = w->t1 - w->t0;
  if (j->kernel == KERNEL_DOT) {
    j->kt->dot_cols(y, x, g->w, T, g->n, j->K, w->c0, w->c1);
  } else {
    int next = next_strip(j->units, j->nunits, u, j->nt, g->n); /* prefetched meanwhile */
    if (j->kernel == KERNEL_PACKED)
      j->kt->packed_cols(y, x, g->wp, T, g->n, j->K, w->c0, w->c1, next);
    else
      j->kt->panel_strip(j->s->panel[tid], y, x, g->w, T, g->n, j->K, w->c0, w->c1 - w->c0, next);
  }
  gemm_post_rows(g->post, g->post_bias, g->y, g->n, w->t0, w->t1, w->c0, w->c1);
}

int gemm_xwt(bf_pool *p, gemm_scratch *s, int nthreads, const float *x, int T, int K, int nout,
             const gemm_out *out) {
  const gemm_kernel_table *kt = kernels_chosen()->gemm; /* NULL: none of our own (OpenBLAS) */
  if (!kt) return GEMM_NO_KERNEL;
  if (nout < 1 || nout > GEMM_MAX_OUT || T < 1 || K < 1) return GEMM_NO_KERNEL;
  long work = 0;
  for (int o = 0; o < nout; o++) work += (long)out[o].n * K;
  nthreads = job_threads(p, s, nthreads, work);
  int packed = kt->packed_cols != NULL;
  for (int o = 0; o < nout; o++) packed &= out[o].wp != NULL;
  int kernel = packed ? KERNEL_PACKED : gemm_kernel_dot(kt, T, K) ? KERNEL_DOT : KERNEL_PANEL;
  int panel = kernel == KERNEL_PANEL;

  /* panel buffers: one per thread that may take part (kept in s), or one of
  ** this call's own without s */
  size_t panel_floats = ((size_t)K + kt->lanes) * kt->panel;
  float *solo = NULL;
  if (panel && !s) {
    solo = aligned_alloc(64, panel_floats * sizeof(float));
    if (!solo) return GEMM_NOMEM;
  } else if (panel) {
    for (int t = 0; t < nthreads; t++) {
      if (s->panel_cap[t] >= panel_floats) continue;
      float *b = aligned_alloc(64, panel_floats * sizeof(float));
      if (!b) return GEMM_NOMEM;
      free(s->panel[t]);
      s->panel[t] = b;
      s->panel_cap[t] = panel_floats;
    }
  }

  if (nthreads == 1) { /* this thread does it all, strip after strip */
    float *wp = s ? s->panel[0] : solo;
    for (int o = 0; o < nout; o++) {
      if (kernel == KERNEL_PACKED) {
        kt->packed_cols(out[o].y, x, out[o].wp, T, out[o].n, K, 0, out[o].n, out[o].n);
      } else if (kernel == KERNEL_DOT) {
        kt->dot_cols(out[o].y, x, out[o].w, T, out[o].n, K, 0, out[o].n);
      } else {
        for (int c0 = 0; c0 < out[o].n; c0 += kt->panel) {
          int c1 = c0 + kt->panel < out[o].n ? c0 + kt->panel : out[o].n;
          kt->panel_strip(wp, out[o].y, x, out[o].w, T, out[o].n, K, c0, c1 - c0, c1);
        }
      }
      gemm_post_rows(out[o].post, out[o].post_bias, out[o].y, out[o].n, 0, T, 0, out[o].n);
    }
    free(solo);
    return GEMM_OK;
  }

  /* more threads (and so a pool and s): the units, planned into s's table */
  split_rule rule = {kt->dot_tile, kt->dot_unit, 1, 0, 1, 0};
  if (panel) rule = (split_rule){kt->panel, kt->panel, 0, 0, kt->panel_rows, 1};
  if (kernel == KERNEL_PACKED) rule = (split_rule){GEMM_PACK, GEMM_PACK, 0, 0, kt->packed_rows, 1};
  int n[GEMM_MAX_OUT];
  for (int o = 0; o < nout; o++) n[o] = out[o].n;
  gemm_job j;
  memset(&j, 0, sizeof j);
  if (!(j.units = plan_job(s, &rule, n, nout, T, nthreads, &j.nunits))) return GEMM_NOMEM;
  j.kt = kt;
  j.s = s;
  j.x = x;
  j.T = T;
  j.K = K;
  j.nout = nout;
  j.nt = nthreads;
  j.kernel = kernel;
  for (int o = 0; o < nout; o++) j.out[o] = out[o];
  bf_pool_run(p, nthreads, j.nunits, run_unit, &j);
  return GEMM_OK;
}

/* ---- bf16 ---- */

size_t gemm_bf16_words(int n, int k) {
  return (size_t)((n + GEMM_PACK - 1) / GEMM_PACK) * GEMM_PACK * (size_t)((k + 1) / 2);
}

void gemm_pack_bf16(uint32_t *wh, const float *w, int n, int k) {
  int KP = (k + 1) / 2;
  for (int p = 0; p < (n + GEMM_PACK - 1) / GEMM_PACK; p++) {
    uint32_t *dst = wh + (size_t)p * GEMM_PACK * (size_t)KP;
    for (int c = 0; c < GEMM_PACK; c++) {
      int r = p * GEMM_PACK + c;
      const float *row = r < n ? w + (size_t)r * k : NULL;
      for (int i = 0; i < KP; i++)
        dst[(size_t)i * GEMM_PACK + c] = row ? kernels_bf16_pair(row, i, k) : 0;
    }
  }
}

typedef struct bf16_job {
  const bf16_kernel *bk;
  const uint32_t *xh;
  int KP, nt, nunits;
  gemm_out out[GEMM_MAX_OUT];
  const gemm_unit *units;
} bf16_job;

static void run_unit_bf16(void *arg, int u, int tid) {
  (void)tid;
  const bf16_job *j = arg;
  const gemm_unit *w = &j->units[u];
  const gemm_out *g = &j->out[w->o];
  int next = next_strip(j->units, j->nunits, u, j->nt, g->n); /* prefetched meanwhile */
  j->bk->cols(g->y + (size_t)w->t0 * g->n, j->xh + (size_t)w->t0 * j->KP, g->wh, w->t1 - w->t0,
              g->n, j->KP, w->c0, w->c1, next);
  gemm_post_rows(g->post, g->post_bias, g->y, g->n, w->t0, w->t1, w->c0, w->c1);
}

int gemm_xwt_bf16(bf_pool *p, gemm_scratch *s, int nthreads, const float *x, int T, int K, int nout,
                  const gemm_out *out) {
  if (nout < 1 || nout > GEMM_MAX_OUT || T < 1 || K < 1) return GEMM_NOMEM;
  const bf16_kernel *bk = kernels_bf16_chosen();
  int KP = (K + 1) / 2;
  size_t words = (size_t)T * KP;
  uint32_t *xh = NULL, *solo = NULL;
  if (s && s->xh_cap >= words) {
    xh = s->xh;
  } else {
    xh = malloc(words * sizeof *xh);
    if (!xh) return GEMM_NOMEM;
    if (s) {
      free(s->xh);
      s->xh = xh;
      s->xh_cap = words;
    } else {
      solo = xh;
    }
  }
  bk->rows(xh, x, T, K);
  long work = 0;
  for (int o = 0; o < nout; o++) work += (long)out[o].n * K;
  nthreads = job_threads(p, s, nthreads, work);
  if (nthreads == 1) {
    for (int o = 0; o < nout; o++) {
      bk->cols(out[o].y, xh, out[o].wh, T, out[o].n, KP, 0, out[o].n, out[o].n);
      gemm_post_rows(out[o].post, out[o].post_bias, out[o].y, out[o].n, 0, T, 0, out[o].n);
    }
    free(solo);
    return GEMM_OK;
  }
  split_rule rule = {GEMM_PACK, GEMM_PACK, 0, 0, bk->row_tile, 1};
  int n[GEMM_MAX_OUT];
  for (int o = 0; o < nout; o++) n[o] = out[o].n;
  bf16_job j = {bk, xh, KP, nthreads, 0, {{0}}, NULL};
  for (int o = 0; o < nout; o++) j.out[o] = out[o];
  if (!(j.units = plan_job(s, &rule, n, nout, T, nthreads, &j.nunits))) return GEMM_NOMEM;
  bf_pool_run(p, nthreads, j.nunits, run_unit_bf16, &j);
  return GEMM_OK;
}

/* ---- int8 ---- */

typedef struct int8_job {
  const int8_kernel_table *kt;
  const qg_rows *x;
  int8_out out[GEMM_MAX_OUT];
  const gemm_out8 *gout;
  const gemm_unit *units;
} int8_job;

static void run_unit_int8(void *arg, int u, int tid) {
  (void)tid;
  const int8_job *j = arg;
  const gemm_unit *w = &j->units[u];
  const gemm_out8 *g = &j->gout[w->o];
  j->kt->unit(&j->out[w->o], w->t0, w->t1, w->c0, w->c1);
  gemm_post_rows(g->post, g->post_bias, g->y, g->w->n, w->t0, w->t1, w->c0, w->c1);
}

int gemm_xwt_int8(bf_pool *p, gemm_scratch *s, int nthreads, const qg_rows *x, int nout,
                  const gemm_out8 *out) {
  const int8_kernel_table *kt = kernels_int8(x->path);
  if (!kt || nout < 1 || nout > GEMM_MAX_OUT || x->t < 1) return GEMM_NO_KERNEL;
  int8_job j = {kt, x, {{0}}, out, NULL};
  int n[GEMM_MAX_OUT];
  long work = 0;
  for (int o = 0; o < nout; o++) {
    j.out[o] = (int8_out){out[o].y, (size_t)out[o].w->n, NULL, 0, x, out[o].w, out[o].bias};
    n[o] = out[o].w->n;
    work += (long)n[o] * x->k;
  }
  /* runs of whole panels of the packed W; for a few rows (one block) they
  ** shrink towards the end, for many rows each panel for every block of rows */
  int rb = qg_row_block(x);
  split_rule rule = {INT8_PANEL, INT8_PANEL, x->t <= rb, rb, kt->row_tile, 0};
  nthreads = job_threads(p, s, nthreads, work);
  if (nthreads == 1) {
    for (int o = 0; o < nout; o++) {
      qg_matmul(out[o].y, (size_t)n[o], x, out[o].w, out[o].bias);
      gemm_post_rows(out[o].post, out[o].post_bias, out[o].y, n[o], 0, x->t, 0, n[o]);
    }
    return GEMM_OK;
  }
  int nunits;
  if (!(j.units = plan_job(s, &rule, n, nout, x->t, nthreads, &nunits))) return GEMM_NOMEM;
  bf_pool_run(p, nthreads, nunits, run_unit_int8, &j);
  return GEMM_OK;
}
