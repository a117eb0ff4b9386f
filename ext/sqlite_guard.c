/*
** sqlite_guard.c — overload guard: at most N encoder runs at once in the
** process (default: the number of cores; env BERTFILL_MAX_CONCURRENT or
** SELECT bert_max_concurrent(n)).  A caller waits for a free slot at most
** the busy timeout (default 2000 ms; env BERTFILL_BUSY_TIMEOUT_MS or
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
#include "sqlite_ext.h"

#define DEFAULT_TIMEOUT_MS 2000

static struct {
  pthread_once_t once;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int max, in_flight, timeout_ms;
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
  g.max = env_int("BERTFILL_MAX_CONCURRENT", bfx_ncores(), 1, 1 << 20);
  g.timeout_ms = env_int("BERTFILL_BUSY_TIMEOUT_MS", DEFAULT_TIMEOUT_MS, 0, 1 << 30);
}

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

bf_run *bfx_guard_acquire(uint64_t *waited_ns, char **err, int *busy) {
  pthread_once(&g.once, guard_init);
  uint64_t t0 = mono_ns();
  bf_run *r = NULL;
  *err = NULL;
  *busy = 0;
  pthread_mutex_lock(&g.mu);
  if (g.in_flight >= g.max) {
    uint64_t deadline = t0 + (uint64_t)g.timeout_ms * 1000000ull;
    struct timespec ts = { (time_t)(deadline / 1000000000ull), (long)(deadline % 1000000000ull) };
    while (g.in_flight >= g.max) {
      int rc = pthread_cond_timedwait(&g.cv, &g.mu, &ts);
      if (rc == ETIMEDOUT && g.in_flight >= g.max) {
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
  if (g.npool > 0) r = g.pool[--g.npool];
  pthread_mutex_unlock(&g.mu);
  *waited_ns = mono_ns() - t0;
  if (!r && !(r = bf_run_new())) {
    pthread_mutex_lock(&g.mu);
    g.in_flight--;
    pthread_cond_signal(&g.cv);
    pthread_mutex_unlock(&g.mu);
  }
  return r;
}

void bfx_guard_release(bf_run *r) {
  pthread_mutex_lock(&g.mu);
  g.in_flight--;
  if (r && g.npool < g.max) {
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
  int n = g.max;
  pthread_mutex_unlock(&g.mu);
  return n;
}

void bfx_guard_set_max(int n) {
  pthread_once(&g.once, guard_init);
  bf_run *extra[64];
  int nextra = 0;
  pthread_mutex_lock(&g.mu);
  g.max = n > 0 ? n : bfx_ncores();
  while (g.npool > g.max && nextra < 64) extra[nextra++] = g.pool[--g.npool];
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
