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

#endif
