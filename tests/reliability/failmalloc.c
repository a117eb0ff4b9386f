/*
** failmalloc.c — an LD_PRELOAD allocator shim that makes the Nth allocation
** fail, for the out-of-memory test (oom.c).  It wraps malloc, calloc,
** realloc, posix_memalign, aligned_alloc and memalign of the whole process
** (SQLite's allocations, the engine's, libc's own) and forwards to the real
** ones.  Controlled through two functions the test finds with dlsym:
**   void failmalloc_arm(long n)   the n-th allocation from now fails (n >= 1);
**                                 n <= 0 disarms
**   long failmalloc_state(long *failed)  allocations counted since arming;
**                                 *failed = 1 when the failure was injected
**   long failmalloc_live(void)    blocks allocated and not yet freed (all
**                                 of the process): a leak shows as growth,
**                                 without the allocator's own caching noise
** One failure per arming ("fail once", as SQLite's own malloc tests do
** first): what follows must cope with the error, then work again.
** FAILMALLOC_BT=1 prints the stack of each injected failure on stderr.
*/
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <stdlib.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

static void *(*real_malloc)(size_t);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static int (*real_posix_memalign)(void **, size_t, size_t);
static void *(*real_aligned_alloc)(size_t, size_t);
static void *(*real_memalign)(size_t, size_t);

static long countdown = -1;   /* allocations left before the failing one; <0: off */
static long counted, failed;
static long live;

#define LIVE(d) __atomic_add_fetch(&live, (d), __ATOMIC_RELAXED)
long failmalloc_live(void) { return __atomic_load_n(&live, __ATOMIC_RELAXED); }

/* dlsym may call calloc before real_calloc is known: serve it from here. */
static char boot[4096];
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

static int fail_now(void) {
  if (__atomic_load_n(&countdown, __ATOMIC_RELAXED) < 0) return 0;
  __atomic_add_fetch(&counted, 1, __ATOMIC_RELAXED);
  long left = __atomic_sub_fetch(&countdown, 1, __ATOMIC_RELAXED);
  if (left == 0) {              /* this one */
    __atomic_store_n(&countdown, -1, __ATOMIC_RELAXED);
    __atomic_store_n(&failed, 1, __ATOMIC_RELAXED);
    if (getenv("FAILMALLOC_BT")) {      /* where the failure was injected */
      void *bt[24];
      int n = backtrace(bt, 24);
      backtrace_symbols_fd(bt, n, 2);
    }
    return 1;
  }
  return 0;
}

void failmalloc_arm(long n) {
  static int warm;
  if (!warm) { void *bt[2]; warm = 1; backtrace(bt, 2); }   /* loads libgcc_s now */
  __atomic_store_n(&counted, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&failed, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&countdown, n > 0 ? n : -1, __ATOMIC_RELAXED);
}

long failmalloc_state(long *f) {
  if (f) *f = __atomic_load_n(&failed, __ATOMIC_RELAXED);
  return __atomic_load_n(&counted, __ATOMIC_RELAXED);
}

void *malloc(size_t n) {
  init();
  if (fail_now()) { errno = ENOMEM; return NULL; }
  void *p = real_malloc(n);
  if (p) LIVE(1);
  return p;
}

void *calloc(size_t a, size_t b) {
  if (!real_calloc) {           /* during dlsym */
    size_t n = (a * b + 15) & ~(size_t)15;
    if (boot_used + n > sizeof boot) return NULL;
    void *p = boot + boot_used;
    boot_used += n;
    return p;
  }
  if (fail_now()) { errno = ENOMEM; return NULL; }
  void *p = real_calloc(a, b);
  if (p) LIVE(1);
  return p;
}

void *realloc(void *p, size_t n) {
  init();
  if ((char *)p >= boot && (char *)p < boot + sizeof boot) {
    void *q = real_malloc(n);
    if (q) memcpy(q, p, n < sizeof boot ? n : sizeof boot);
    return q;
  }
  if (fail_now()) { errno = ENOMEM; return NULL; }
  void *q = real_realloc(p, n);
  if (!p && q) LIVE(1);                 /* realloc(NULL, n) = malloc(n) */
  else if (p && n == 0 && !q) LIVE(-1); /* realloc(p, 0) frees p */
  return q;
}

void free(void *p) {
  static void (*real_free)(void *);
  if ((char *)p >= boot && (char *)p < boot + sizeof boot) return;
  if (!real_free) real_free = dlsym(RTLD_NEXT, "free");
  if (p) LIVE(-1);
  real_free(p);
}

int posix_memalign(void **out, size_t align, size_t n) {
  init();
  if (fail_now()) return ENOMEM;
  int rc = real_posix_memalign(out, align, n);
  if (rc == 0) LIVE(1);
  return rc;
}

void *aligned_alloc(size_t align, size_t n) {
  init();
  if (fail_now()) { errno = ENOMEM; return NULL; }
  void *p = real_aligned_alloc(align, n);
  if (p) LIVE(1);
  return p;
}

void *memalign(size_t align, size_t n) {
  init();
  if (fail_now()) { errno = ENOMEM; return NULL; }
  void *p = real_memalign(align, n);
  if (p) LIVE(1);
  return p;
}
