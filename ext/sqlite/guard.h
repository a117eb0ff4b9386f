/*
** guard.h — the overload guard: a bounded number of encoder runs at once in
** the process, a bounded wait for a free slot, and the pool of bf_run
** scratch that comes with each slot (see guard.c).
*/
#ifndef BERTFILL_SQLITE_GUARD_H
#define BERTFILL_SQLITE_GUARD_H

#include <stdint.h>
#include "bertfill.h"
#include "errors.h"

/* Take an encoder slot, waiting at most the busy timeout, behind the
** callers already waiting (first come, first served).  On success
** returns a scratch run to use (give it back with bfx_guard_release).  On
** timeout NULL with e = "bertfill: busy: ..." (SQLITE_ERROR, counted as
** busy); out of memory NULL with e = SQLITE_NOMEM.  The wait goes to
** *waited_ns either way. */
bf_run *bfx_guard_acquire(uint64_t *waited_ns, bfx_err *e);
/* The same, waiting at most until deadline_ns (CLOCK_MONOTONIC, bf_now_ns). */
bf_run *bfx_guard_acquire_until(uint64_t deadline_ns, uint64_t *waited_ns, bfx_err *e);
/* A slot only if one is free now and nobody waits for one: NULL when
** none (*nomem = 0) or out of memory (*nomem = 1). */
bf_run *bfx_guard_try_acquire(int *nomem);
void bfx_guard_release(bf_run *r);
/* from_ns + the busy timeout. */
uint64_t bfx_guard_deadline_ns(uint64_t from_ns);
/* The busy error: "bertfill: busy: N encoder runs in progress, waited T ms". */
void bfx_guard_busy_error(bfx_err *e, int in_flight, uint64_t waited_ns);

int bfx_guard_max(void);       /* max concurrent encoder runs in effect */
void bfx_guard_set_max(int n); /* n <= 0: automatic, max(1, cores / threads) */
int bfx_guard_max_auto(void);  /* 1 when the bound is the automatic one */
int bfx_guard_timeout_ms(void);
void bfx_guard_set_timeout_ms(int ms);
int bfx_guard_in_flight(void);
int bfx_guard_queued(void); /* callers waiting for a slot right now */
/* Slots of the machine-wide guard in effect (machine_guard.c); 0: off. */
int bfx_guard_machine_slots(void);

#endif
