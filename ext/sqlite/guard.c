/*
** sqlite_guard.c — overload guard: at most N encoder runs at once in the
** process (env BERTFILL_MAX_CONCURRENT or SELECT bert_max_concurrent(n)).
** The default (also n = 0) is cores / threads per run (bert_threads), at
** least 1, so runs x threads never exceed the cores: with the default of one
** thread per core that is ONE run at a time using every core, and callers
** that arrive meanwhile are merged into batches (sqlite_batcher.c).  A caller
** waits for a free slot at most the busy timeout (default 2000 ms; env BERTFILL_BUSY_TIMEOUT_MS or
** SELECT bert_busy_timeout(ms)), then fails with
**   bertfill: busy: 2 encoder runs in progress, waited 2000 ms
** instead of piling up without limit.  Cache hits never take a slot.
**
** Each slot comes with a bf_run (the encoder's scratch memory for one
** thread); finished runs are kept in a pool of at most N for reuse, so
** scratch memory is bounded by N runs.
*/
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3
#include "layer.h"

#define DEFAULT_TIMEOUT_MS 2000

static struct {
  pthread_once_t once;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int max;                  /* as set; 0: automatic (see eff_max) */
  int in_flight, timeout_ms;
  bf_run **pool;
  int npool, cap;
} g = { .once = PTHREAD_ONCE_INIT, .mu = PTHREAD_MUTEX_INITIALIZER };

int bfx_ncores(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

static int env_int(const char *name, int dflt, int lo, int hi) {
  const char *s = getenv(name);
  if (!s || !*s) return dflt;
  char *end;
  long v = strtol(s, &end, 10);
  if (*end || v < lo || v > hi) return dflt;
  return (int)v;
}

static void guard_init(void) {
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  pthread_cond_init(&g.cv, &a);
  pthread_condattr_destroy(&a);
  g.max = env_int("BERTFILL_MAX_CONCURRENT", 0, 0, 1 << 20);
  g.timeout_ms = env_int("BERTFILL_BUSY_TIMEOUT_MS", DEFAULT_TIMEOUT_MS, 0, 1 << 30);
  bf_blas_init(NULL, 0);   /* the automatic bound needs the thread count (0 if no BLAS) */
}

/* The bound in effect: as set, or cores / threads per run (at least 1). */
static int eff_max(void) {
  if (g.max > 0) return g.max;
  int cores = bfx_ncores(), th = bf_blas_threads();
  if (th <= 0 || th > cores) th = cores;   /* before OpenBLAS is loaded: one per core */
  int n = cores / th;
  return n > 0 ? n : 1;
}

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A run for a slot just taken (g.in_flight already counted), or NULL
** (slot given back) when out of memory. */
static bf_run *take_run(void) {
  bf_run *r = NULL;
  pthread_mutex_lock(&g.mu);
  if (g.npool > 0) r = g.pool[--g.npool];
  pthread_mutex_unlock(&g.mu);
  if (!r && !(r = bf_run_new())) {
    pthread_mutex_lock(&g.mu);
    g.in_flight--;
    pthread_cond_signal(&g.cv);
    pthread_mutex_unlock(&g.mu);
  }
  return r;
}

bf_run *bfx_guard_acquire_until(uint64_t deadline_ns, uint64_t *waited_ns, char **err, int *busy) {
  pthread_once(&g.once, guard_init);
  uint64_t t0 = mono_ns();
  *err = NULL;
  *busy = 0;
  pthread_mutex_lock(&g.mu);
  if (g.in_flight >= eff_max()) {
    struct timespec ts = { (time_t)(deadline_ns / 1000000000ull), (long)(deadline_ns % 1000000000ull) };
    while (g.in_flight >= eff_max()) {
      int rc = pthread_cond_timedwait(&g.cv, &g.mu, &ts);
      if (rc == ETIMEDOUT && g.in_flight >= eff_max()) {
        int n = g.in_flight;
        pthread_mutex_unlock(&g.mu);
        *waited_ns = mono_ns() - t0;
        *busy = 1;
        *err = sqlite3_mprintf("bertfill: busy: %d encoder runs in progress, waited %d ms",
                               n, (int)(*waited_ns / 1000000));
        return NULL;
      }
    }
  }
  g.in_flight++;
  pthread_mutex_unlock(&g.mu);
  *waited_ns = mono_ns() - t0;
  return take_run();
}

bf_run *bfx_guard_acquire(uint64_t *waited_ns, char **err, int *busy) {
  pthread_once(&g.once, guard_init);
  pthread_mutex_lock(&g.mu);
  uint64_t deadline = mono_ns() + (uint64_t)g.timeout_ms * 1000000ull;
  pthread_mutex_unlock(&g.mu);
  return bfx_guard_acquire_until(deadline, waited_ns, err, busy);
}

bf_run *bfx_guard_try_acquire(int *nomem) {
  pthread_once(&g.once, guard_init);
  *nomem = 0;
  pthread_mutex_lock(&g.mu);
  if (g.in_flight >= eff_max()) {
    pthread_mutex_unlock(&g.mu);
    return NULL;
  }
  g.in_flight++;
  pthread_mutex_unlock(&g.mu);
  bf_run *r = take_run();
  if (!r) *nomem = 1;
  return r;
}

uint64_t bfx_guard_deadline_ns(uint64_t from_ns) {
  return from_ns + (uint64_t)bfx_guard_timeout_ms() * 1000000ull;
}

void bfx_guard_release(bf_run *r) {
  pthread_mutex_lock(&g.mu);
  g.in_flight--;
  if (r && g.npool < eff_max()) {
    if (g.npool == g.cap) {
      int cap = g.cap ? 2 * g.cap : 8;
      bf_run **p = realloc(g.pool, (size_t)cap * sizeof *p);
      if (p) { g.pool = p; g.cap = cap; }
    }
    if (g.npool < g.cap) { g.pool[g.npool++] = r; r = NULL; }
  }
  pthread_cond_signal(&g.cv);
  pthread_mutex_unlock(&g.mu);
  if (r) bf_run_free(r);
}

int bfx_guard_max(void) {
  pthread_once(&g.once, guard_init);
  pthread_mutex_lock(&g.mu);
  int n = eff_max();
  pthread_mutex_unlock(&g.mu);
  return n;
}

int bfx_guard_max_auto(void) {
  pthread_once(&g.once, guard_init);
  pthread_mutex_lock(&g.mu);
  int a = g.max == 0;
  pthread_mutex_unlock(&g.mu);
  return a;
}

void bfx_guard_set_max(int n) {
  pthread_once(&g.once, guard_init);
  bf_run *extra[64];
  int nextra = 0;
  pthread_mutex_lock(&g.mu);
  g.max = n > 0 ? n : 0;
  while (g.npool > eff_max() && nextra < 64) extra[nextra++] = g.pool[--g.npool];
  pthread_cond_broadcast(&g.cv);
  pthread_mutex_unlock(&g.mu);
  for (int i = 0; i < nextra; i++) bf_run_free(extra[i]);
}

int bfx_guard_timeout_ms(void) {
  pthread_once(&g.once, guard_init);
  pthread_mutex_lock(&g.mu);
  int ms = g.timeout_ms;
  pthread_mutex_unlock(&g.mu);
  return ms;
}

void bfx_guard_set_timeout_ms(int ms) {
  pthread_once(&g.once, guard_init);
  pthread_mutex_lock(&g.mu);
  g.timeout_ms = ms >= 0 ? ms : DEFAULT_TIMEOUT_MS;
  pthread_mutex_unlock(&g.mu);
}

int bfx_guard_in_flight(void) {
  pthread_once(&g.once, guard_init);
  pthread_mutex_lock(&g.mu);
  int n = g.in_flight;
  pthread_mutex_unlock(&g.mu);
  return n;
}
