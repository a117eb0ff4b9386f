/*
** int8.h — what the int8 product kernels of every instruction set share
** (kernels/portable.c, avx2.c, avx512.c): where a unit's sums go, the
** reference arithmetic that turns a sum into y, and where a block of 16
** outputs lies in the packed W (qgemm.h describes the layout).
** Engine-internal.
**
** A kernel's unit (int8_kernel_table.unit in kernels.h) computes rows
** [r0, r1) of x against outputs [i0, i1) of W, i0 a multiple of
** INT8_PANEL: for each block of 16 outputs, the exact int32 sums over k,
** then each sum through int8_finish_one's arithmetic (or a vector copy of
** it: the same operations in the same order, no fused multiply-add), so
** that every kernel gives bit-identical y.
*/
#ifndef BERTFILL_KERNELS_INT8_H
#define BERTFILL_KERNELS_INT8_H

#include <stddef.h>
#include <stdint.h>

#include "qgemm.h"

#define INT8_PANEL 64                     /* outputs per panel of the packed W */
#define INT8_GROUP_BYTES (INT8_PANEL * 4) /* one group of 4 values of k of a panel */

/* Where a unit's sums go: y (dequantized, + bias) or c (the int32 sums). */
typedef struct int8_out {
  float *y;
  size_t ldy;
  int32_t *c;
  size_t ldc;
  const qg_rows *x;
  const qg_weights *w;
  const float *bias; /* may be NULL */
} int8_out;

/* Block b of 16 outputs (b = i / 16): its four codes of group g (k = 4g ..
** 4g + 3) are 64 bytes at int8_block_at(w, b) + g * INT8_GROUP_BYTES. */
static inline const int8_t *int8_block_at(const qg_weights *w, int b) {
  size_t kg = ((size_t)w->k + 3) / 4;
  return w->q + (size_t)(b / (INT8_PANEL / 16)) * kg * INT8_GROUP_BYTES +
         (size_t)(b % (INT8_PANEL / 16)) * 64;
}

/* One output: the sum acc of row r of x and column i of W into y (or c):
** the reference arithmetic that every vector epilogue repeats exactly. */
static inline void int8_finish_one(const int8_out *o, int r, int i, int32_t acc) {
  int32_t a = acc - o->x->zero[r] * o->w->sum[i]; /* exact: |a| <= 255 * 127 * k */
  if (o->c) {
    o->c[(size_t)r * o->ldc + i] = a;
  } else {
    float s = o->x->scale[r] * o->w->scale[i];
    float v = (float)a * s;
    if (o->bias) v += o->bias[i];
    o->y[(size_t)r * o->ldy + i] = v;
  }
}

#endif
