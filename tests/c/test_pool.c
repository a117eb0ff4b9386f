/*
** test_pool.c — the engine's thread pool (ext/engine/pool.c): bf_pool_run
** runs every unit exactly once, on 1 to BF_POOL_MAX_THREADS + 4 threads
** (more than the pool has are capped), with thread ids below the threads
** asked for; jobs one after the other on the same pool; no pool (NULL) and
** empty jobs.  The engine's thread setting (bf_pool_threads): its default
** (the cores, or OPENBLAS_NUM_THREADS / GOTO_NUM_THREADS / OMP_NUM_THREADS
** as OpenBLAS reads them: tests/c/t_c.sh pool runs it with each), and set.
*/
#include <stdatomic.h>
#include <stdlib.h>
#include "pool.h"
#include "util.h"
#include "testlib.h"

#define UNITS 1000

static atomic_int hits[UNITS];
static atomic_int bad_tid;

typedef struct job {
  int nthreads;
} job;

static void count_unit(void *arg, int u, int tid) {
  const job *j = arg;
  if (tid < 0 || tid >= j->nthreads || tid >= BF_POOL_MAX_THREADS) atomic_fetch_add(&bad_tid, 1);
  atomic_fetch_add(&hits[u], 1);
}

/* Units of hits[0..units) run other than exactly once. */
static int run_and_count(bf_pool *p, int nthreads, int units) {
  for (int u = 0; u < UNITS; u++) atomic_store(&hits[u], 0);
  job j = {nthreads};
  bf_pool_run(p, nthreads, units, count_unit, &j);
  int bad = 0;
  for (int u = 0; u < UNITS; u++) bad += atomic_load(&hits[u]) != (u < units);
  return bad;
}

int main(void) {
  bf_pool *p = bf_pool_new();
  CHECK("pool: created", p != NULL);

  static const int threads[] = {1, 2, 3, 4, 8, BF_POOL_MAX_THREADS, BF_POOL_MAX_THREADS + 4};
  for (size_t i = 0; i < sizeof threads / sizeof threads[0]; i++) {
    int nt = threads[i];
    char name[80];
    snprintf(name, sizeof name, "pool: %d units, %d threads, each once", UNITS, nt);
    int bad = run_and_count(p, nt, UNITS);
    CHECKF(name, bad == 0, "%d units not run exactly once", bad);
  }
  int bad = 0;
  for (int rep = 0; rep < 200; rep++) bad += run_and_count(p, 1 + rep % 4, 1 + rep % 7);
  CHECKF("pool: 200 small jobs one after the other", bad == 0, "%d units wrong", bad);
  CHECK("pool: every tid below the threads asked for", atomic_load(&bad_tid) == 0);

  CHECK("pool: no units, nothing run", run_and_count(p, 4, 0) == 0);
  CHECK("pool: NULL pool, the caller runs them all", run_and_count(NULL, 4, 3) == 0);
  bf_pool_free(p);
  bf_pool_free(NULL);
  CHECK("pool: freed (and NULL freed)", 1);

  /* the thread setting: BF_TEST_THREADS says what the environment should
  ** give (t_c.sh sets both); without it, none of the variables is set */
  int cores = bf_ncores();
  const char *want_env = getenv("BF_TEST_THREADS");
  int want = want_env ? atoi(want_env) : cores;
  if (want > cores) want = cores;
  CHECKF("pool: default thread setting (the environment, at most the cores)",
         bf_pool_threads() == want, "%d, expected %d (%d cores)", bf_pool_threads(), want, cores);
  bf_pool_set_threads(3);
  CHECKF("pool: thread setting 3", bf_pool_threads() == 3, "%d", bf_pool_threads());
  bf_pool_set_threads(0);
  CHECKF("pool: thread setting 0 is the cores", bf_pool_threads() == cores, "%d, %d cores",
         bf_pool_threads(), cores);
  bf_pool_set_threads(-2);
  CHECKF("pool: thread setting -2 is the cores", bf_pool_threads() == cores, "%d, %d cores",
         bf_pool_threads(), cores);
  TL_EXIT();
}
