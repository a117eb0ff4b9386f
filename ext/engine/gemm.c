/*
** gemm.c — y = x W^T: the one job splitter that cuts a product into units of
** work for the threads of a pool (pool.c) and runs the fp32 kernels of the
** set dispatch.c chose (kernels/kernels.h: AVX-512 or AVX2) through its
** gemm_kernel_table.  See gemm.h for what is computed and when each kernel
** is used; the kernels themselves are in kernels/avx512.c and kernels/avx2.c.
*/
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gemm.h"

void gemm_scratch_free(gemm_scratch *s) {
  if (!s) return;
  for (int i = 0; i < BF_POOL_MAX_THREADS; i++) free(s->panel[i]);
  free(s->units);
  memset(s, 0, sizeof *s);
}

/* ---- one job: nout products of the same x, split into units of work ---- */

/* A unit of work: columns [c0, c1) of output o, rows [t0, t1) of x. */
typedef struct gemm_unit {
  int o, c0, c1, t0, t1;
} gemm_unit;

typedef struct gemm_job {
  const gemm_kernel_table *kt;
  gemm_scratch *s; /* panel[tid]: the panel buffer of each thread */
  const float *x;
  int T, K, nout, nt;
  int panel; /* 1: panel kernel, 0: dot kernel */
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
  if (j->panel) {
    float *wp = j->s->panel[tid];
    /* meanwhile prefetch the strip this thread most likely takes next: the
    ** unit after the ones the other threads are taking now */
    int next = g->n, v = u + j->nt;
    if (v < j->nunits && j->units[v].o == w->o && j->units[v].c0 > w->c0) next = j->units[v].c0;
    j->kt->panel_strip(wp, y, x, g->w, T, g->n, j->K, w->c0, w->c1 - w->c0, next);
  } else {
    j->kt->dot_cols(y, x, g->w, T, g->n, j->K, w->c0, w->c1);
  }
}

/* The units of a job, in the order they are taken, into units (at most
** max_units; returns how many, or -1 if more were needed).  The threads take
** them dynamically, so that the last unit of each thread ends at nearly the
** same time they shrink towards the end:
**   - dot kernel: runs of columns, each a 1/(2 nt) share of what is left (at
**     least kt->dot_unit, a multiple of kt->dot_tile), long runs first for
**     the hardware prefetchers;
**   - panel kernel: one strip of kt->panel columns each, but the last nt
**     strips of the job are cut into two halves of the rows (each half packs
**     the strip again, which costs far less than a thread waiting). */
static int plan_units(const gemm_kernel_table *kt, gemm_unit *units, int max_units,
                      const gemm_out *out, int nout, int T, int panel, int nt) {
  int n = 0;
  if (panel) {
    const int strip = kt->panel, mr = kt->panel_rows;
    int strips = 0;
    for (int o = 0; o < nout; o++) strips += (out[o].n + strip - 1) / strip;
    /* strips from this index on (counted over the whole job) are split */
    int split_from = nt > 1 && T >= 2 * mr ? (strips - nt < 0 ? 0 : strips - nt) : strips;
    int s = 0;
    for (int o = 0; o < nout; o++)
      for (int c0 = 0; c0 < out[o].n; c0 += strip, s++) {
        int c1 = c0 + strip < out[o].n ? c0 + strip : out[o].n;
        if (s < split_from) {
          if (n >= max_units) return -1;
          units[n++] = (gemm_unit){o, c0, c1, 0, T};
        } else {
          int mid = (T / 2 + mr - 1) / mr * mr; /* a multiple of the register tile */
          if (n + 2 > max_units) return -1;
          units[n++] = (gemm_unit){o, c0, c1, 0, mid};
          units[n++] = (gemm_unit){o, c0, c1, mid, T};
        }
      }
    return n;
  }
  long total = 0, done = 0;
  for (int o = 0; o < nout; o++) total += out[o].n;
  for (int o = 0; o < nout; o++)
    for (int c0 = 0; c0 < out[o].n;) {
      long left = total - done, size = (left + 2L * nt - 1) / (2L * nt);
      size = (size + kt->dot_tile - 1) / kt->dot_tile * kt->dot_tile;
      if (size < kt->dot_unit) size = kt->dot_unit;
      int c1 = out[o].n - c0 <= size ? out[o].n : c0 + (int)size;
      if (n >= max_units) return -1;
      units[n++] = (gemm_unit){o, c0, c1, 0, T};
      done += c1 - c0;
      c0 = c1;
    }
  return n;
}

int gemm_xwt(bf_pool *p, gemm_scratch *s, int nthreads, const float *x, int T, int K, int nout,
             const gemm_out *out) {
  const gemm_kernel_table *kt = kernels_chosen()->gemm; /* NULL: none of our own (OpenBLAS) */
  if (!kt) return GEMM_NO_KERNEL;
  if (nout < 1 || nout > GEMM_MAX_OUT || T < 1 || K < 1) return GEMM_NO_KERNEL;
  if (nthreads < 1) nthreads = 1;
  if (nthreads > BF_POOL_MAX_THREADS) nthreads = BF_POOL_MAX_THREADS;
  long work = 0, cols = 0;
  for (int o = 0; o < nout; o++) {
    work += (long)out[o].n * K;
    cols += out[o].n;
  }
  if (work < 65536 || !p || !s) nthreads = 1; /* too little to be worth waking anyone */
  int panel = T > kt->dot_max_t;

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
      if (!panel) {
        kt->dot_cols(out[o].y, x, out[o].w, T, out[o].n, K, 0, out[o].n);
        continue;
      }
      for (int c0 = 0; c0 < out[o].n; c0 += kt->panel) {
        int c1 = c0 + kt->panel < out[o].n ? c0 + kt->panel : out[o].n;
        kt->panel_strip(wp, out[o].y, x, out[o].w, T, out[o].n, K, c0, c1 - c0, c1);
      }
    }
    free(solo);
    return GEMM_OK;
  }

  /* more threads (and so a pool and s): the units, planned into s's table */
  long most = 2 * (cols / (panel ? kt->panel : kt->dot_unit) + 2L * nout + nthreads) + 16;
  if (most > INT32_MAX / (long)sizeof(gemm_unit)) return GEMM_NOMEM;
  if ((size_t)most > s->units_cap) {
    gemm_unit *units = malloc((size_t)most * sizeof *units);
    if (!units) return GEMM_NOMEM;
    free(s->units);
    s->units = units;
    s->units_cap = (size_t)most;
  }
  gemm_job j;
  memset(&j, 0, sizeof j);
  j.kt = kt;
  j.s = s;
  j.x = x;
  j.T = T;
  j.K = K;
  j.nout = nout;
  j.nt = nthreads;
  j.panel = panel;
  for (int o = 0; o < nout; o++) j.out[o] = out[o];
  j.units = s->units;
  j.nunits = plan_units(kt, s->units, (int)most, out, nout, T, panel, nthreads);
  if (j.nunits < 0) return GEMM_NOMEM;
  bf_pool_run(p, nthreads, j.nunits, run_unit, &j);
  return GEMM_OK;
}
