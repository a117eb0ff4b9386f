/*
** batcher.c — dynamic batching: calls from different connections
** (threads) that need the encoder at the same time share one encoder run.
**
** Why.  One sentence is memory-bound: a run of bert-base reads all 340 MB of
** fp32 weights for 16 tokens, and a second run started next to it reads them
** again while both fight for the same cores.  One run over both sentences
** reads the weights once (all tokens of a batch go through each matrix
** product together): on 2 cores with a bert-base-shaped model, 16 sentences
** in one run went through about 2.8x faster than one at a time.  And it
** keeps the process at one run x all cores, never oversubscribed.
**
** How (leader / followers, per model):
**
**   1. A call that misses the cache and finds an encoder slot free (the
**      overload guard, guard.c) and nobody queued runs at once, alone:
**      with no concurrency nothing changes and nothing waits (no window).
**   2. Otherwise it joins its model's queue.  The first one queued is the
**      leader: it waits for an encoder slot (while the current run finishes);
**      the others wait for the leader.
**   3. When the leader gets the slot it takes everything queued for its model
**      (itself first, then in arrival order, at most 32 sequences and 2048
**      tokens), runs it as ONE bf_fill batch with the largest k asked for,
**      and hands each caller its candidates (cut to its own k).  Callers
**      left over (beyond the limits) get the next leader among them.
**      Identical token sequences in a batch are computed once.
**   4. Overload: a queued call waits at most the busy timeout
**      (bert_busy_timeout, default 2000 ms) for a batch to take it, then
**      fails with "bertfill: busy: N encoder runs in progress, waited T ms"
**      (counted as `busy`); once taken it waits for its batch, which is
**      bounded work.  The wait is recorded as the `queue` stage and the
**      batch sizes as the kind = 'batch' rows of bertfill_stats (batch_1,
**      batch_2, ..., batch_9_16, ...); the counter `batches` counts runs of
**      more than one sequence, `seqs` the sequences computed.
**
** Requests for different models go into different queues (never one batch).
** So do the spelling checks (bfx_batch_spell: fill_suspects, bert_correct),
** one queue per model, mode and sensitivity: their leader runs one
** bf_spell_check over every text it takes (one screening run, then the
** verifying runs), under the same limits, the same busy timeout and the same
** fallback (each text again alone when the merged check fails).
** Each call is validated before it is queued (UTF-8, length against the
** model's limit, k), so a bad text fails alone; should a merged run still
** fail, each of its sequences is run again alone, so one sequence's error
** never fails the others.  bert_prefill does its own batching and takes an
** encoder slot directly.
**
** Results.  A merged batch gives each sentence the candidates it gets alone,
** in the same order, with probabilities that agree to float rounding (about
** 1e-6: matrix products over more rows take another kernel, as in
** bert_prefill's batches), not bit for bit; only two candidates that close
** could swap places.  With batching off, or with no concurrency, results are
** bit-exact reproductions of a single-sentence run.  (tests/batching/t_batching.sh)
**
** Settings (process-wide):
**   SELECT bert_batching();      -- 1 (on, the default) or 0
**   SELECT bert_batching(0);     -- off: every call runs alone, waiting for
**                                -- a slot of the guard as before
**   BERTFILL_BATCHING=0          -- environment: off from the start
** With the default bert_max_concurrent (cores / bert_threads, so 1 run at a
** time using all cores) batching is what makes concurrent callers cheap; with
** bert_max_concurrent(n) raised, calls batch only when all n slots are busy.
**
** Fork.  The calls queued by the parent's other threads, and their leader,
** live on those threads' stacks: in a child (one thread) nobody would ever
** lead them, and every call of the child would queue behind them until the
** busy timeout.  In the child (pthread_atfork) the queues start again empty,
** with a fresh mutex; the parent's queue records are dropped, not freed
** (another thread may have been changing them at the fork).  guard.c does
** the same for the encoder slots.
**
** Test hook: BERTFILL_BATCH_GATHER=n (environment, read once) makes a leader
** that has its slot wait until n calls are queued for its model (at most 250 ms)
** before taking them, so tests can make merged batches happen
** deterministically.  Not for production use.
*/
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3
#include "batcher.h"
#include "bounds.h"
#include "encode.h"
#include "guard.h"
#include "shared_batch.h"
#include "stats.h"
#include "util.h"

enum { R_PENDING, R_LEADER, R_TAKEN, R_DONE };

#define GATHER_WAIT_NS 250000000ull /* test hook: the longest a leader waits for company */

/* What a queue's calls ask for: candidates (bf_fill), or spelling checks of
** one mode and sensitivity (bf_spell_check): a batch holds one kind only. */
typedef struct qclass {
  int spelling, thorough;
  double sensitivity;
} qclass;

static const qclass fill_class = {0, 0, 0.0};

/* One waiting call.  Lives on its caller's stack until the call returns;
** the leader writes its results (out or x, e, times) and then marks it
** R_DONE. */
typedef struct req {
  struct req *next;   /* in the queue while R_PENDING */
  const bf_tokens *t; /* its tokens (a spelling check's: x->t) */
  int k;
  bf_cand *out;     /* t->n_masks * k, the caller's */
  bf_spell_text *x; /* a spelling check: the caller's text, its findings written */
  bfx_err *e;       /* the caller's */
  int state, rc;
  uint64_t t_enq, queue_ns, encode_ns, topk_ns;
  bfx_stamps st;     /* its timeline: posted, taken, run, done by the leader; back by its caller */
  pthread_cond_t cv; /* signalled on every change of state */
} req;

/* The queue of one model. */
typedef struct mqueue {
  struct mqueue *next;
  const bf_model *m;
  qclass cls;
  req *head, *tail; /* R_PENDING calls, in arrival order */
  int npending;
  req *leader; /* the call waiting for a slot for the next batch */
} mqueue;

static struct {
  pthread_once_t once;
  pthread_mutex_t mu;
  pthread_condattr_t cattr; /* CLOCK_MONOTONIC, like bf_now_ns */
  mqueue *queues;
  int leaders; /* queues with a leader */
  int queued;  /* calls waiting (pending or leader) */
  int gather;  /* test hook: BERTFILL_BATCH_GATHER */
  atomic_int on;
} batcher = {.once = PTHREAD_ONCE_INIT, .mu = PTHREAD_MUTEX_INITIALIZER};

/* In a forked child: the parent's queued calls are not the child's (see
** Fork above).  Settings kept. */
static void forget_in_child(void) {
  pthread_mutex_init(&batcher.mu, NULL);
  batcher.queues = NULL;
  batcher.leaders = 0;
  batcher.queued = 0;
}

static void batcher_init(void) {
  pthread_condattr_init(&batcher.cattr);
  pthread_condattr_setclock(&batcher.cattr, CLOCK_MONOTONIC);
  atomic_store(&batcher.on, bf_env_flag("BERTFILL_BATCHING", 1));
  batcher.gather = (int)bf_env_int("BERTFILL_BATCH_GATHER", 0, BFX_BATCH_MAX_SEQS, 0);
  pthread_atfork(NULL, NULL, forget_in_child);
}

int bfx_batching(void) {
  pthread_once(&batcher.once, batcher_init);
  return atomic_load(&batcher.on);
}

void bfx_batching_set(int on) {
  pthread_once(&batcher.once, batcher_init);
  atomic_store(&batcher.on, on ? 1 : 0);
}

int bfx_batch_queued(void) {
  pthread_once(&batcher.once, batcher_init);
  pthread_mutex_lock(&batcher.mu);
  int n = batcher.queued;
  pthread_mutex_unlock(&batcher.mu);
  return n;
}

/* ---- queues (batcher.mu held) ---- */

static mqueue *queue_find(const bf_model *m, const qclass *cls) {
  for (mqueue *q = batcher.queues; q; q = q->next)
    if (q->m == m && q->cls.spelling == cls->spelling && q->cls.thorough == cls->thorough &&
        q->cls.sensitivity == cls->sensitivity)
      return q;
  return NULL;
}

static void queue_free_if_idle(mqueue *q) {
  if (q->head || q->leader) return;
  for (mqueue **p = &batcher.queues; *p; p = &(*p)->next)
    if (*p == q) {
      *p = q->next;
      break;
    }
  free(q);
}

static req *queue_pop(mqueue *q) {
  req *r = q->head;
  if (r) {
    q->head = r->next;
    if (!q->head) q->tail = NULL;
    r->next = NULL;
    q->npending--;
  }
  return r;
}

static void queue_remove(mqueue *q, req *r) {
  req *prev = NULL;
  for (req *x = q->head; x; prev = x, x = x->next) {
    if (x != r) continue;
    if (prev) prev->next = x->next;
    else q->head = x->next;
    if (q->tail == x) q->tail = prev;
    x->next = NULL;
    q->npending--;
    return;
  }
}

/* Make the first pending call the leader of q (when there is one). */
static void promote(mqueue *q) {
  req *r = queue_pop(q);
  if (!r) return;
  r->state = R_LEADER;
  q->leader = r;
  batcher.leaders++;
  pthread_cond_signal(&r->cv);
}

static void busy_error(bfx_err *e, uint64_t waited_ns) {
  bfx_guard_busy_error(e, bfx_guard_in_flight(), waited_ns);
}

static int timedwait(pthread_cond_t *cv, uint64_t deadline_ns) {
  struct timespec ts = {(time_t)(deadline_ns / 1000000000ull), (long)(deadline_ns % 1000000000ull)};
  return pthread_cond_timedwait(cv, &batcher.mu, &ts);
}

/* ---- the batch ---- */

/* The moments of a batch's run in each member's timeline. */
static void stamp_run(req **members, int n, uint64_t run0, uint64_t run1) {
  for (int i = 0; i < n; i++) {
    members[i]->st.run0 = run0;
    members[i]->st.run1 = run1;
    members[i]->st.seqs = n;
    members[i]->st.leader_pid = (int)getpid();
    members[i]->st.lead = BFX_LEAD_QUEUE;
  }
}

/* Run the members of a batch on run (batcher.mu not held) and write each one's
** results; members[0] is the leader. */
static void run_merged(bf_model *m, bf_run *run, req **members, int n) {
  bf_tokens seqs[BFX_BATCH_MAX_SEQS];
  int slot[BFX_BATCH_MAX_SEQS];      /* member -> its sequence in seqs */
  size_t at[BFX_BATCH_MAX_SEQS + 1]; /* sequence -> its first mask in the output */
  int rc[BFX_BATCH_MAX_SEQS];
  bfx_err errs[BFX_BATCH_MAX_SEQS];
  int nu = 0, kmax = 0;
  for (int i = 0; i < n; i++) { /* identical sequences are computed once */
    const bf_tokens *t = members[i]->t;
    int u = 0;
    while (u < nu &&
           !(seqs[u].n == t->n && memcmp(seqs[u].ids, t->ids, (size_t)t->n * sizeof *t->ids) == 0))
      u++;
    if (u == nu) seqs[nu++] = *t;
    slot[i] = u;
    if (members[i]->k > kmax) kmax = members[i]->k;
  }
  at[0] = 0;
  for (int u = 0; u < nu; u++) at[u + 1] = at[u] + (size_t)seqs[u].n_masks;

  bfx_times times;
  memset(&times, 0, sizeof times);
  bf_cand *out = NULL;
  int direct = nu == 1 && members[0]->k == kmax; /* into the leader's buffer */
  if (direct) out = members[0]->out;
  else out = sqlite3_malloc64(at[nu] * (size_t)kmax * sizeof *out);
  if (!out) {
    for (int u = 0; u < nu; u++) {
      rc[u] = SQLITE_NOMEM;
      bfx_err_nomem(&errs[u]);
    }
  } else {
    errs[0].rc = 0;
    uint64_t run0 = bf_now_ns();
    int all = bfx_encode_on(m, run, nu, seqs, kmax, out, &times, &errs[0]);
    for (int u = 0; u < nu; u++) rc[u] = all;
    if (all != SQLITE_OK && nu > 1) {
      /* One sequence must not fail the others: each one again, alone. */
      for (int u = 0; u < nu; u++)
        rc[u] = bfx_encode_on(m, run, 1, &seqs[u], kmax, out + at[u] * (size_t)kmax, &times,
                              &errs[u]);
    } else {
      for (int u = 1; u < nu; u++) errs[u] = errs[0];
    }
    stamp_run(members, n, run0, bf_now_ns());
  }
  bfx_guard_release(run);

  for (int i = 0; i < n; i++) {
    req *r = members[i];
    int u = slot[i];
    r->encode_ns = times.encode_ns;
    r->topk_ns = times.topk_ns;
    r->rc = rc[u];
    if (rc[u] != SQLITE_OK) {
      *r->e = errs[u];
      continue;
    }
    if (r->out == out) continue;
    int nm = seqs[u].n_masks;
    for (int j = 0; j < nm; j++)
      memcpy(r->out + (size_t)j * r->k, out + (at[u] + (size_t)j) * (size_t)kmax,
             (size_t)r->k * sizeof *out);
  }
  if (!direct) sqlite3_free(out);
}

/* Check the texts of the spelling calls of a batch on run (batcher.mu not
** held) and hand each one its findings; members[0] is the leader. */
static void run_spelling(bf_model *m, bf_run *run, const qclass *cls, req **members, int n) {
  bf_spell_text xs[BFX_BATCH_MAX_SEQS];
  int rc[BFX_BATCH_MAX_SEQS];
  bfx_err errs[BFX_BATCH_MAX_SEQS];
  for (int i = 0; i < n; i++) xs[i] = *members[i]->x;
  bfx_times times;
  memset(&times, 0, sizeof times);
  errs[0].rc = 0;
  uint64_t run0 = bf_now_ns();
  int all = bfx_encode_spelling_on(m, run, n, xs, cls->thorough, cls->sensitivity, &times,
                                   &errs[0]);
  for (int i = 0; i < n; i++) rc[i] = all;
  if (all != SQLITE_OK && n > 1) {
    /* One text must not fail the others: each one again, alone. */
    for (int i = 0; i < n; i++)
      rc[i] = bfx_encode_spelling_on(m, run, 1, &xs[i], cls->thorough, cls->sensitivity, &times,
                                     &errs[i]);
  }
  stamp_run(members, n, run0, bf_now_ns());
  bfx_guard_release(run);
  for (int i = 0; i < n; i++) {
    req *r = members[i];
    r->encode_ns = times.encode_ns;
    r->rc = rc[i];
    if (rc[i] != SQLITE_OK) *r->e = errs[i]; /* n == 1: errs[0], the only one */
    else {
      r->x->found = xs[i].found;
      r->x->n_found = xs[i].n_found;
      r->x->verified = xs[i].verified;
    }
  }
}

/* The leader's part (batcher.mu held on entry and on return): get a slot, take
** the batch, run it, wake the others. */
static void lead(bf_model *m, mqueue *q, req *me, uint64_t deadline) {
  pthread_mutex_unlock(&batcher.mu);
  uint64_t waited = 0;
  bfx_err guard_err = BFX_ERR_NONE;
  bf_run *run = bfx_guard_acquire_until(deadline, &waited, &guard_err);
  pthread_mutex_lock(&batcher.mu);
  if (run && batcher.gather > 1) { /* test hook: wait for company */
    uint64_t until = bf_now_ns() + GATHER_WAIT_NS;
    while (q->npending + 1 < batcher.gather)
      if (timedwait(&me->cv, until) == ETIMEDOUT) break;
  }
  q->leader = NULL;
  batcher.leaders--;
  uint64_t now = bf_now_ns();
  me->queue_ns = now - me->t_enq;
  if (!run) {
    if (guard_err.rc == SQLITE_NOMEM) bfx_err_nomem(me->e);
    else busy_error(me->e, now - me->t_enq); /* the wait since the call was queued */
    me->rc = me->e->rc;
    if (q->head) promote(q);
    else queue_free_if_idle(q);
    me->state = R_DONE;
    return;
  }
  req *members[BFX_BATCH_MAX_SEQS];
  int n = 0, tokens = me->t->n;
  members[n++] = me;
  me->st.taken = now;
  while (q->head && n < BFX_BATCH_MAX_SEQS && tokens + q->head->t->n <= BFX_BATCH_MAX_TOKENS) {
    req *r = queue_pop(q);
    r->state = R_TAKEN;
    r->st.taken = now;
    r->queue_ns = now - r->t_enq;
    tokens += r->t->n;
    members[n++] = r;
  }
  qclass cls = q->cls; /* q may be gone once batcher.mu is let go */
  if (q->head) promote(q);
  else queue_free_if_idle(q);
  pthread_mutex_unlock(&batcher.mu);

  if (cls.spelling) run_spelling(m, run, &cls, members, n);
  else run_merged(m, run, members, n);

  pthread_mutex_lock(&batcher.mu);
  for (int i = 1; i < n; i++) {
    members[i]->st.done = bf_now_ns();
    members[i]->state = R_DONE;
    pthread_cond_signal(&members[i]->cv);
  }
  me->st.done = bf_now_ns();
  me->state = R_DONE;
}

/* A call alone on the run it holds: its candidates or its spelling check. */
static int run_alone(bf_model *m, bf_run *run, const qclass *cls, req *me, bfx_times *r) {
  if (cls->spelling)
    return bfx_encode_spelling_on(m, run, 1, me->x, cls->thorough, cls->sensitivity, r, me->e);
  return bfx_encode_on(m, run, 1, me->t, me->k, me->out, r, me->e);
}

/* Steps 1-3 of the header comment for the call me (t, k, out or x, e set)
** in the queue of (m, cls). */
static int batch_call(bf_model *m, const qclass *cls, req *me, bfx_times *r) {
  bfx_err *e = me->e;
  uint64_t t0 = bf_now_ns();
  pthread_mutex_lock(&batcher.mu);
  mqueue *q = queue_find(m, cls);

  /* 1. Nobody waiting and a slot free: run alone, now. */
  if (batcher.leaders == 0 && (!q || !q->head)) {
    int nomem = 0;
    bf_run *run = bfx_guard_try_acquire(&nomem);
    if (run || nomem) {
      pthread_mutex_unlock(&batcher.mu);
      uint64_t waited = bf_now_ns() - t0;
      bf_stats_time(BF_ST_QUEUE, waited);
      if (r) r->queue_ns += waited;
      if (!run) {
        bfx_err_nomem(e);
        return SQLITE_NOMEM;
      }
      bfx_stamps st = {.posted = t0,
                       .taken = t0 + waited,
                       .run0 = bf_now_ns(),
                       .seqs = 1,
                       .leader_pid = (int)getpid(),
                       .lead = BFX_LEAD_ALONE};
      int rc = run_alone(m, run, cls, me, r);
      bfx_guard_release(run);
      st.run1 = st.done = st.back = bf_now_ns();
      if (rc == SQLITE_OK) bfx_timeline(r, &st);
      return rc;
    }
  }

  /* 2. Queue up. */
  if (!q) {
    q = calloc(1, sizeof *q);
    if (!q) {
      pthread_mutex_unlock(&batcher.mu);
      bfx_err_nomem(e);
      return SQLITE_NOMEM;
    }
    q->m = m;
    q->cls = *cls;
    q->next = batcher.queues;
    batcher.queues = q;
  }
  me->t_enq = t0;
  me->st.posted = t0;
  me->state = R_PENDING;
  pthread_cond_init(&me->cv, &batcher.cattr);
  if (q->tail) q->tail->next = me;
  else q->head = me;
  q->tail = me;
  q->npending++;
  batcher.queued++;
  if (!q->leader) promote(q);
  else if (batcher.gather > 1) pthread_cond_signal(&q->leader->cv);
  uint64_t deadline = bfx_guard_deadline_ns(t0);

  /* 3. Wait to be taken into a batch, or to lead one. */
  while (me->state == R_PENDING) {
    if (timedwait(&me->cv, deadline) == ETIMEDOUT && me->state == R_PENDING) {
      queue_remove(q, me);
      queue_free_if_idle(q);
      me->queue_ns = bf_now_ns() - t0;
      me->rc = SQLITE_ERROR;
      busy_error(e, me->queue_ns);
      me->state = R_DONE;
    }
  }
  if (me->state == R_LEADER) lead(m, q, me, deadline);
  while (me->state != R_DONE) pthread_cond_wait(&me->cv, &batcher.mu);
  batcher.queued--;
  pthread_mutex_unlock(&batcher.mu);
  pthread_cond_destroy(&me->cv);
  me->st.back = bf_now_ns();
  if (me->rc == SQLITE_OK && me->st.seqs > 0) bfx_timeline(r, &me->st);

  bf_stats_time(BF_ST_QUEUE, me->queue_ns);
  if (r) {
    r->queue_ns += me->queue_ns;
    r->encode_ns += me->encode_ns;
    r->topk_ns += me->topk_ns;
  }
  return me->rc;
}

int bfx_batch_encode(bf_model *m, const bf_tokens *t, int k, bf_cand *out, bfx_times *r,
                     bfx_err *e) {
  pthread_once(&batcher.once, batcher_init);
  if (!atomic_load(&batcher.on)) return bfx_encode(m, 1, t, k, out, r, e);
  int shared_rc; /* 0. the machine-wide queue (shared_batch.c), when it takes the call */
  if (bfx_shared_encode(m, t, k, out, r, e, &shared_rc)) return shared_rc;
  req me;
  memset(&me, 0, sizeof me);
  me.t = t;
  me.k = k;
  me.out = out;
  me.e = e;
  return batch_call(m, &fill_class, &me, r);
}

int bfx_batch_spell(bf_model *m, bf_spell_text *x, int thorough, double sensitivity, bfx_times *r,
                    bfx_err *e) {
  pthread_once(&batcher.once, batcher_init);
  if (!atomic_load(&batcher.on)) return bfx_encode_spelling(m, 1, x, thorough, sensitivity, r, e);
  req me;
  memset(&me, 0, sizeof me);
  me.t = x->t;
  me.x = x;
  me.e = e;
  qclass cls = {1, thorough ? 1 : 0, sensitivity};
  return batch_call(m, &cls, &me, r);
}
