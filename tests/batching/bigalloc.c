/*
** bigalloc.c — an LD_PRELOAD shim for the batching test (batch.c, mode
** "fallback"): once armed, every malloc / calloc / realloc / posix_memalign /
** aligned_alloc / memalign of at least LIMIT bytes fails.  A merged batch
** needs larger encoder scratch buffers than any single sentence of the test,
** so with the limit between the two every merged run fails with "out of
** memory" and the batcher must rerun its sequences one by one, each
** succeeding: one run's failure never fails the callers it merged.
**   void bigalloc_arm(size_t limit)   0 disarms
**   long bigalloc_failures(void)      allocations refused since arming
*/
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>

static void *(*real_malloc)(size_t);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static int (*real_posix_memalign)(void **, size_t, size_t);
static void *(*real_aligned_alloc)(size_t, size_t);
static void *(*real_memalign)(size_t, size_t);
static size_t limit;            /* 0: off */
static long failures;

static char boot[4096];         /* for dlsym's own calloc before real_calloc is known */
static size_t boot_used;

static void init(void) {
  if (real_malloc) return;
  real_calloc = dlsym(RTLD_NEXT, "calloc");
  real_realloc = dlsym(RTLD_NEXT, "realloc");
  real_posix_memalign = dlsym(RTLD_NEXT, "posix_memalign");
  real_aligned_alloc = dlsym(RTLD_NEXT, "aligned_alloc");
  real_memalign = dlsym(RTLD_NEXT, "memalign");
  real_malloc = dlsym(RTLD_NEXT, "malloc");
}

static int refuse(size_t n) {
  size_t l = __atomic_load_n(&limit, __ATOMIC_RELAXED);
  if (l == 0 || n < l) return 0;
  __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
  return 1;
}

void bigalloc_arm(size_t n) {
  __atomic_store_n(&failures, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&limit, n, __ATOMIC_RELAXED);
}

long bigalloc_failures(void) { return __atomic_load_n(&failures, __ATOMIC_RELAXED); }

static int in_boot(void *p) { return (char *)p >= boot && (char *)p < boot + sizeof boot; }

void *malloc(size_t n) {
  init();
  if (refuse(n)) { errno = ENOMEM; return NULL; }
  return real_malloc(n);
}

void *calloc(size_t a, size_t b) {
  if (!real_calloc) {           /* during dlsym */
    size_t n = (a * b + 15) & ~(size_t)15;
    if (boot_used + n > sizeof boot) return NULL;
    void *p = boot + boot_used;
    boot_used += n;
    return p;
  }
  if (b && a > (size_t)-1 / b) { errno = ENOMEM; return NULL; }
  if (refuse(a * b)) { errno = ENOMEM; return NULL; }
  return real_calloc(a, b);
}

void *realloc(void *p, size_t n) {
  init();
  if (in_boot(p)) return NULL;
  if (refuse(n)) { errno = ENOMEM; return NULL; }
  return real_realloc(p, n);
}

void free(void *p) {
  static void (*real_free)(void *);
  if (!p || in_boot(p)) return;
  if (!real_free) real_free = dlsym(RTLD_NEXT, "free");
  real_free(p);
}

int posix_memalign(void **out, size_t align, size_t n) {
  init();
  if (refuse(n)) return ENOMEM;
  return real_posix_memalign(out, align, n);
}

void *aligned_alloc(size_t align, size_t n) {
  init();
  if (refuse(n)) { errno = ENOMEM; return NULL; }
  return real_aligned_alloc(align, n);
}

void *memalign(size_t align, size_t n) {
  init();
  if (refuse(n)) { errno = ENOMEM; return NULL; }
  return real_memalign(align, n);
}
