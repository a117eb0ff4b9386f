/*
** pool.c — the engine's helper threads (see pool.h).
**
** One job at a time: bf_pool_run publishes fn/arg/nunits, bumps the job
** generation and wakes the helpers; every thread (the caller too) takes the
** next unit with an atomic counter until none is left; the caller then waits
** for the helpers to report done.  A helper that finds no new job spins for
** up to SPIN_NS, yielding now and then, and then sleeps on the condition
** variable until the next job (or bf_pool_free) wakes it.
**
** Also the engine's thread setting (bf_pool_threads, at the end): a number
** of the process, not of a pool.
*/
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "pool.h"
#include "util.h"

typedef struct helper_arg {
  struct bf_pool *p;
  int tid;
  unsigned seen;
} helper_arg;

struct bf_pool {
  int n; /* helper threads started (the caller is one more) */
  pthread_t th[BF_POOL_MAX_THREADS];
  helper_arg args[BF_POOL_MAX_THREADS];
  pthread_mutex_t mu;
  pthread_cond_t cv;
  atomic_uint gen;    /* bumped once per job */
  atomic_int pending; /* helpers still on the current job */
  atomic_int quit;
  pid_t pid; /* process that started the helpers */
  /* the current job */
  int nt; /* threads taking part, caller included */
  int nunits;
  atomic_int next; /* next unit to take */
  bf_unit_fn fn;
  void *arg;
};

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

static void take_units(bf_pool *p, int tid) {
  int u;
  while ((u = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed)) < p->nunits)
    p->fn(p->arg, u, tid);
}

/* How long a helper spins for the next job before it sleeps. */
#define SPIN_NS 500000
/* A spinning thread (a helper between jobs, the caller waiting for the
** helpers) yields its core once every SPIN_YIELD pauses, in case a thread
** of this process waits for it.  Every 64 (as before 2026-12-02) cost a
** 16-token int8 sentence 5-8% on a 2-core AMD Zen 4 VM, where a system call
** is dear (min of 15: 5.6-5.8 ms against 5.8-6.5; fp32 and batches alike). */
#define SPIN_YIELD 1024

static void *helper_main(void *arg) {
  helper_arg *a = arg;
  bf_pool *p = a->p;
  unsigned seen = a->seen;
  for (;;) {
    uint64_t t0 = bf_now_ns();
    for (int spins = 1; atomic_load(&p->gen) == seen && !atomic_load(&p->quit); spins++) {
      cpu_relax();
      if (spins % SPIN_YIELD == 0) sched_yield();
      if (spins % 64 == 0 && bf_now_ns() - t0 > SPIN_NS) {
        pthread_mutex_lock(&p->mu);
        while (atomic_load(&p->gen) == seen && !atomic_load(&p->quit))
          pthread_cond_wait(&p->cv, &p->mu);
        pthread_mutex_unlock(&p->mu);
      }
    }
    if (atomic_load(&p->quit)) return NULL;
    seen = atomic_load(&p->gen);
    if (a->tid < p->nt) take_units(p, a->tid);
    atomic_fetch_sub(&p->pending, 1);
  }
}

bf_pool *bf_pool_new(void) {
  bf_pool *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  if (pthread_mutex_init(&p->mu, NULL) != 0) {
    free(p);
    return NULL;
  }
  if (pthread_cond_init(&p->cv, NULL) != 0) {
    pthread_mutex_destroy(&p->mu);
    free(p);
    return NULL;
  }
  p->pid = getpid();
  return p;
}

void bf_pool_free(bf_pool *p) {
  if (!p) return;
  if (p->pid == getpid()) { /* after fork() the helpers are the parent's: leave them */
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->quit, 1);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n; i++) pthread_join(p->th[i], NULL);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
  }
  free(p);
}

/* Threads (caller included) that can take part: starts helpers up to want-1. */
static int pool_grow(bf_pool *p, int want) {
  if (want > BF_POOL_MAX_THREADS) want = BF_POOL_MAX_THREADS;
  if (want <= 1 || !p || p->pid != getpid()) return 1; /* a child after fork(): no helpers */
  while (p->n < want - 1) {
    helper_arg *a = &p->args[p->n];
    a->p = p;
    a->tid = p->n + 1;
    a->seen = atomic_load(&p->gen);
    if (pthread_create(&p->th[p->n], NULL, helper_main, a) != 0) break;
    p->n++;
  }
  return p->n + 1 < want ? p->n + 1 : want;
}

void bf_pool_run(bf_pool *p, int nthreads, int nunits, bf_unit_fn fn, void *arg) {
  if (nunits <= 0) return;
  if (nthreads > nunits) nthreads = nunits;
  int nt = pool_grow(p, nthreads);
  if (nt <= 1) {
    for (int u = 0; u < nunits; u++) fn(arg, u, 0);
    return;
  }
  p->nt = nt;
  p->nunits = nunits;
  p->fn = fn;
  p->arg = arg;
  atomic_store(&p->next, 0);
  atomic_store(&p->pending, p->n);
  pthread_mutex_lock(&p->mu);
  atomic_fetch_add(&p->gen, 1);
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  take_units(p, 0);
  for (int spins = 1; atomic_load(&p->pending) > 0; spins++) {
    cpu_relax();
    if (spins % SPIN_YIELD == 0) sched_yield(); /* a helper may be waiting for this core */
  }
}

/* ------------------------------------------------------ the thread setting */

static atomic_int threads_setting; /* 0: not set yet */

/* The default (pool.h): the environment variables OpenBLAS reads, in its
** order, each as OpenBLAS reads it (atoi; 0 or less: not set), at most the
** cores (as OpenBLAS caps them at its count of the processors). */
static int default_threads(void) {
  static const char *const names[] = {"OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS",
                                      "OMP_NUM_THREADS"};
  int cores = bf_ncores();
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    const char *v = getenv(names[i]);
    int n = v ? atoi(v) : 0;
    if (n > 0) return n < cores ? n : cores;
  }
  return cores;
}

int bf_pool_threads(void) {
  int n = atomic_load(&threads_setting);
  if (n > 0) return n;
  n = default_threads();
  int unset = 0; /* a setting made meanwhile wins */
  if (!atomic_compare_exchange_strong(&threads_setting, &unset, n)) n = unset;
  return n;
}

void bf_pool_set_threads(int n) { atomic_store(&threads_setting, n > 0 ? n : bf_ncores()); }
