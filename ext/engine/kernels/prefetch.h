/*
** prefetch.h — software prefetch of the rows of W a kernel reads next,
** spread over the arithmetic of what it reads now (kernels/avx2.c,
** kernels/avx512.c).  Engine-internal.
**
** The rows of W that follow the current ones are contiguous, so one
** sequential run of cache lines covers them: prefetch_plan spreads that run
** over the steps of k still to come (per lines every (mask + 1) steps), and
** each step of the kernel calls prefetch_step_l1 or prefetch_step_l2.  One
** sequential run matters: with the rows of a tile read side by side the
** hardware prefetchers see several short streams, and on AMD Zen 4 three
** interleaved rows of 768 floats read at 10-11 GB/s on one core, one row
** after another at 20-24.
*/
#ifndef BERTFILL_KERNELS_PREFETCH_H
#define BERTFILL_KERNELS_PREFETCH_H

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

typedef struct prefetch {
  const char *next; /* next line */
  long left;        /* lines still to prefetch */
  int mask, per;    /* per lines every (mask + 1) steps */
} prefetch;

/* A prefetch of the bytes at next over about steps steps (none if bytes <= 0). */
static inline prefetch prefetch_plan(const void *next, long bytes, long steps) {
  prefetch p = {(const char *)next, bytes > 0 ? (bytes + 63) / 64 : 0, 0, 1};
  if (steps < 1) steps = 1;
  if (p.left > steps) p.per = (int)((p.left + steps - 1) / steps);
  for (int s = 0; s < 4 && (steps >> (s + 1)) >= p.left; s++) p.mask = (p.mask << 1) | 1;
  return p;
}

/* Step k of the kernel: the next lines into L1 (T0) or into L2 (T1: they
** do not push the kernel's other operands out of L1). */
#define PREFETCH_STEP_(p, k, hint) \
  do { \
    if ((p)->left > 0 && ((k) & (p)->mask) == 0) \
      for (int i_ = 0; i_ < (p)->per && (p)->left > 0; i_++) { \
        _mm_prefetch((p)->next, hint); \
        (p)->next += 64; \
        (p)->left--; \
      } \
  } while (0)
static inline __attribute__((always_inline)) void prefetch_step_l1(prefetch *p, int k) {
  PREFETCH_STEP_(p, k, _MM_HINT_T0);
}
static inline __attribute__((always_inline)) void prefetch_step_l2(prefetch *p, int k) {
  PREFETCH_STEP_(p, k, _MM_HINT_T1);
}
#undef PREFETCH_STEP_
#endif

#endif
