/*
** guard.c — overload guard: at most N encoder runs at once in the
** process (env BERTFILL_MAX_CONCURRENT or SELECT bert_max_concurrent(n)).
** The default (also n = 0) is cores / threads per run (bert_threads), at
** least 1, so runs x threads never exceed the cores: with the default of one
** thread per core that is ONE run at a time using every core, and callers
** that arrive meanwhile are merged into batches (batcher.c).  A caller waits
** for a free slot at most the busy timeout (default 2000 ms; env
** BERTFILL_BUSY_TIMEOUT_MS or SELECT bert_busy_timeout(ms)), then fails with
**   bertfill: busy: 2 encoder runs in progress, waited 2000 ms
** instead of piling up without limit.  Cache hits never take a slot.
**
** Slots go first come, first served: a caller that finds others waiting
** queues behind them even when a slot has just come free.  Without that, a
** column being filled (fill_rows, bert_prefill: one full run right after
** another) took the slot back before the woken bert_fill callers could run,
** and they waited several of its runs instead of one.
**
** Each slot comes with a bf_run (the encoder's scratch memory for one
** thread); finished runs are kept in a pool of at most N for reuse, so
** scratch memory is bounded by N runs.
**
** Machine-wide (machine_guard.c): with BERTFILL_MACHINE_GUARD=1 a run also
** takes one of the machine's slots, shared by every process that uses the
** same slot file, after its process slot and within the same busy timeout:
** BERTFILL_MACHINE_SLOTS of them (default, and 0: cores / threads per run,
** like the process's own bound), so N worker processes together run no more
** encoders at once than one process would.  Read once from the environment.
**
** FORK.  A child has one thread, the one that called fork(): the runs other
** threads of the parent had in flight, and the callers they had queued, are
** not the child's, and it would count them forever ("busy: 1 encoder runs in
** progress" on every call).  In the child (pthread_atfork) the guard starts
** again empty: no run in flight, nobody queued, a fresh mutex and condition
** variable (another thread may have held them at the fork), the settings
** kept.  The pool of finished runs is dropped too, not freed: another thread
** may have been moving it at the fork (a run is scratch memory; its helper
** threads were the parent's, pool.c).  machine_guard.c forgets the parent's
** machine slots in the same way.
*/
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3
#include "guard.h"
#include "bounds.h"
#include "machine_guard.h"
#include "stats.h"
#include "util.h"

/* A caller waiting for a slot, in the queue of waiters (on its stack). */
typedef struct waiter {
  struct waiter *next;
} waiter;

static struct {
  pthread_once_t once;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* broadcast: a slot came free, or the queue's head changed */
  int max;           /* as set; 0: automatic (see eff_max) */
  int in_flight, timeout_ms;
  waiter *head, *tail; /* callers waiting for a slot, first come first */
  int machine;         /* the machine-wide guard is on */
  int machine_slots;   /* as set; 0: automatic (see machine_max) */
  bf_run **pool;
  int npool, cap;
} guard = {.once = PTHREAD_ONCE_INIT, .mu = PTHREAD_MUTEX_INITIALIZER};

/* The condition variable, new, on CLOCK_MONOTONIC (as bf_now_ns). */
static void cv_init(void) {
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  pthread_cond_init(&guard.cv, &a);
  pthread_condattr_destroy(&a);
}

/* In a forked child: the runs and waiters of the parent's other threads
** are not the child's.  Start empty, settings kept (see FORK above). */
static void forget_in_child(void) {
  pthread_mutex_init(&guard.mu, NULL);
  cv_init();
  guard.in_flight = 0;
  guard.head = guard.tail = NULL;
  guard.pool = NULL;
  guard.npool = guard.cap = 0;
}

static void guard_init(void) {
  cv_init();
  guard.max = (int)bf_env_int("BERTFILL_MAX_CONCURRENT", 0, BFX_MAX_CONCURRENT_MAX, 0);
  guard.timeout_ms = (int)bf_env_int("BERTFILL_BUSY_TIMEOUT_MS", 0, BFX_BUSY_TIMEOUT_MAX_MS,
                                     BFX_DEFAULT_BUSY_TIMEOUT_MS);
  guard.machine = bf_env_flag("BERTFILL_MACHINE_GUARD", 0);
  guard.machine_slots = (int)bf_env_int("BERTFILL_MACHINE_SLOTS", 0, BFX_MACHINE_SLOTS_MAX, 0);
  bf_blas_init(NULL, 0); /* the automatic bound needs the thread count (0 if no BLAS) */
  pthread_atfork(NULL, NULL, forget_in_child);
}

/* The guard's mutex, initialising the guard on first use. */
static void guard_lock(void) {
  pthread_once(&guard.once, guard_init);
  pthread_mutex_lock(&guard.mu);
}
static void guard_unlock(void) { pthread_mutex_unlock(&guard.mu); }

/* cores / threads per run, at least 1. */
static int auto_max(void) {
  int cores = bf_ncores(), th = bf_blas_threads();
  if (th <= 0 || th > cores) th = cores; /* before OpenBLAS is loaded: one per core */
  int n = cores / th;
  return n > 0 ? n : 1;
}

/* The bound in effect: as set, or automatic. */
static int eff_max(void) { return guard.max > 0 ? guard.max : auto_max(); }

/* The machine's slots: as set, or automatic; 0 when the machine-wide guard
** is off. */
static int machine_max(void) {
  if (!guard.machine) return 0;
  return guard.machine_slots > 0 ? guard.machine_slots : auto_max();
}

/* Give back a process slot (guard.mu not held). */
static void give_back_slot(void) {
  pthread_mutex_lock(&guard.mu);
  guard.in_flight--;
  pthread_cond_broadcast(&guard.cv);
  pthread_mutex_unlock(&guard.mu);
}

/* The queue of waiters (guard.mu held). */
static void queue_join(waiter *w) {
  w->next = NULL;
  if (guard.tail) guard.tail->next = w;
  else guard.head = w;
  guard.tail = w;
}
static void queue_leave(waiter *w) {
  waiter **p = &guard.head, *prev = NULL;
  while (*p && *p != w) {
    prev = *p;
    p = &(*p)->next;
  }
  if (!*p) return;
  *p = w->next;
  if (guard.tail == w) guard.tail = prev;
  pthread_cond_broadcast(&guard.cv); /* the next in the queue may take a slot still free */
}

/* A caller not in the queue may take a slot now (guard.mu held). */
static int slot_free_for_newcomer(void) { return guard.in_flight < eff_max() && !guard.head; }

/* A machine slot for a run that has its process slot: 1 when taken (or when
** the machine-wide guard is off or has no slot file), 0 when every slot
** stayed taken until deadline_ns (deadline 0: no wait). */
static int take_machine_slot(uint64_t deadline_ns) {
  int n = machine_max();
  if (n == 0) return 1;
  int got = deadline_ns ? bfx_machine_acquire_until(n, deadline_ns) : bfx_machine_try_acquire(n);
  return got != 0; /* < 0: no slot file (said on stderr, once): no machine-wide bound */
}

/* A run for a slot just taken (guard.in_flight already counted, and the
** machine slot), or NULL (slots given back) when out of memory. */
static bf_run *take_run(void) {
  bf_run *r = NULL;
  pthread_mutex_lock(&guard.mu);
  if (guard.npool > 0) r = guard.pool[--guard.npool];
  pthread_mutex_unlock(&guard.mu);
  if (!r && !(r = bf_run_new())) {
    if (guard.machine) bfx_machine_release();
    give_back_slot();
  }
  return r;
}

void bfx_guard_busy_error(bfx_err *e, int in_flight, uint64_t waited_ns) {
  int machine = machine_max();
  if (machine)
    bfx_errf(e, SQLITE_ERROR, BF_CT_BUSY,
             "bertfill: busy: %d encoder runs in progress, waited %d ms (machine-wide guard: %d "
             "slots)",
             in_flight, (int)(waited_ns / 1000000), machine);
  else
    bfx_errf(e, SQLITE_ERROR, BF_CT_BUSY,
             "bertfill: busy: %d encoder runs in progress, waited %d ms", in_flight,
             (int)(waited_ns / 1000000));
}

bf_run *bfx_guard_acquire_until(uint64_t deadline_ns, uint64_t *waited_ns, bfx_err *e) {
  uint64_t t0 = bf_now_ns();
  guard_lock();
  if (!slot_free_for_newcomer()) { /* wait in the queue for a slot and our turn */
    struct timespec ts = {(time_t)(deadline_ns / 1000000000ull),
                          (long)(deadline_ns % 1000000000ull)};
    waiter me;
    queue_join(&me);
    while (guard.head != &me || guard.in_flight >= eff_max()) {
      int rc = pthread_cond_timedwait(&guard.cv, &guard.mu, &ts);
      if (rc == ETIMEDOUT && (guard.head != &me || guard.in_flight >= eff_max())) {
        int n = guard.in_flight;
        queue_leave(&me);
        guard_unlock();
        *waited_ns = bf_now_ns() - t0;
        bfx_guard_busy_error(e, n, *waited_ns);
        return NULL;
      }
    }
    queue_leave(&me);
  }
  guard.in_flight++;
  guard_unlock();
  if (!take_machine_slot(deadline_ns ? deadline_ns : 1)) {
    give_back_slot();
    *waited_ns = bf_now_ns() - t0;
    bfx_guard_busy_error(e, bfx_machine_busy(machine_max()), *waited_ns);
    return NULL;
  }
  *waited_ns = bf_now_ns() - t0;
  bf_run *r = take_run();
  if (!r) bfx_err_nomem(e);
  return r;
}

bf_run *bfx_guard_acquire(uint64_t *waited_ns, bfx_err *e) {
  return bfx_guard_acquire_until(bfx_guard_deadline_ns(bf_now_ns()), waited_ns, e);
}

bf_run *bfx_guard_try_acquire(int *nomem) {
  *nomem = 0;
  guard_lock();
  if (!slot_free_for_newcomer()) {
    guard_unlock();
    return NULL;
  }
  guard.in_flight++;
  guard_unlock();
  if (!take_machine_slot(0)) {
    give_back_slot();
    return NULL;
  }
  bf_run *r = take_run();
  if (!r) *nomem = 1;
  return r;
}

uint64_t bfx_guard_deadline_ns(uint64_t from_ns) {
  return from_ns + (uint64_t)bfx_guard_timeout_ms() * 1000000ull;
}

void bfx_guard_release(bf_run *r) {
  if (guard.machine) bfx_machine_release(); /* guard.machine never changes after guard_init */
  pthread_mutex_lock(&guard.mu);
  guard.in_flight--;
  if (r && guard.npool < eff_max()) {
    if (guard.npool == guard.cap) {
      int cap = guard.cap ? 2 * guard.cap : 8;
      bf_run **p = realloc(guard.pool, (size_t)cap * sizeof *p);
      if (p) {
        guard.pool = p;
        guard.cap = cap;
      }
    }
    if (guard.npool < guard.cap) {
      guard.pool[guard.npool++] = r;
      r = NULL;
    }
  }
  pthread_cond_broadcast(&guard.cv);
  pthread_mutex_unlock(&guard.mu);
  if (r) bf_run_free(r);
}

int bfx_guard_max(void) {
  guard_lock();
  int n = eff_max();
  guard_unlock();
  return n;
}

int bfx_guard_max_auto(void) {
  guard_lock();
  int a = guard.max == 0;
  guard_unlock();
  return a;
}

void bfx_guard_set_max(int n) {
  bf_run *extra[64];
  int nextra = 0;
  guard_lock();
  guard.max = n > 0 ? n : 0;
  while (guard.npool > eff_max() && nextra < 64) extra[nextra++] = guard.pool[--guard.npool];
  pthread_cond_broadcast(&guard.cv);
  guard_unlock();
  for (int i = 0; i < nextra; i++) bf_run_free(extra[i]);
}

int bfx_guard_timeout_ms(void) {
  guard_lock();
  int ms = guard.timeout_ms;
  guard_unlock();
  return ms;
}

void bfx_guard_set_timeout_ms(int ms) {
  guard_lock();
  guard.timeout_ms = ms >= 0 ? ms : BFX_DEFAULT_BUSY_TIMEOUT_MS;
  guard_unlock();
}

int bfx_guard_in_flight(void) {
  guard_lock();
  int n = guard.in_flight;
  guard_unlock();
  return n;
}

int bfx_guard_queued(void) {
  guard_lock();
  int n = 0;
  for (const waiter *w = guard.head; w; w = w->next) n++;
  guard_unlock();
  return n;
}

int bfx_guard_machine_slots(void) {
  guard_lock();
  int n = machine_max();
  guard_unlock();
  return n;
}
