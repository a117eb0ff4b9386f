/*
** pool.h — the engine's own helper threads: run units of work in parallel.
**
**   bf_pool *p = bf_pool_new();             // no threads yet
**   bf_pool_run(p, 4, nrows, do_row, &job); // do_row(&job, unit, tid) once
**                                           // per unit, on up to 4 threads
**   bf_pool_free(p);
**
** The caller of bf_pool_run is thread 0 and works too; helper threads are
** started on first need (never more than BF_POOL_MAX_THREADS - 1) and take
** units dynamically until none is left.  Between jobs a helper spins
** briefly (the jobs of a forward pass come every few tens of microseconds),
** then sleeps.  tid (0 .. nthreads-1) lets a unit use per-thread scratch.
** A pool belongs to one bf_run and so to one calling thread at a time.
** After fork() the child's pool runs everything on the calling thread.
**
** The engine's thread setting is the pool's too: bf_pool_threads() is how
** many threads one encoder run uses (forward.c, at most BF_POOL_MAX_THREADS
** of them for its own kernels), and OpenBLAS is given the same number
** (blas.c), so that a product on OpenBLAS uses as many.
*/
#ifndef BERTFILL_POOL_H
#define BERTFILL_POOL_H

/* Threads of one pool, the caller included: the most any parallel loop of
** the engine uses (and sizes per-thread scratch for). */
#define BF_POOL_MAX_THREADS 16

typedef struct bf_pool bf_pool;

/* A pool with no helper threads yet (they start on first use); NULL on OOM. */
bf_pool *bf_pool_new(void);
void bf_pool_free(bf_pool *p); /* joins the helpers; NULL is fine */

/* fn(arg, unit, tid) for every unit in [0, nunits), shared dynamically by up
** to nthreads threads (the caller is tid 0; helpers are started as needed and
** a helper that cannot be started just leaves its share to the others).
** Returns when all units are done.  p may be NULL: the caller does it all. */
typedef void (*bf_unit_fn)(void *arg, int unit, int tid);
void bf_pool_run(bf_pool *p, int nthreads, int nunits, bf_unit_fn fn, void *arg);

/* The engine's thread setting (>= 1).  Until it is set: the first of
** OPENBLAS_NUM_THREADS, GOTO_NUM_THREADS and OMP_NUM_THREADS that holds a
** positive number (read as OpenBLAS reads them: atoi, so "4,2" is 4), at most
** the cores this process may run on (bf_ncores); else those cores.  Read once. */
int bf_pool_threads(void);
/* Set it: n <= 0 means the cores (bf_ncores).  The public way is
** bf_blas_set_threads (bertfill.h), which also gives it to OpenBLAS. */
void bf_pool_set_threads(int n);

#endif
