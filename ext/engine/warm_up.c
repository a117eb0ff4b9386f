/*
** warm_up.c — after a load, the weights come into the page tables and the
** fingerprint is computed, so that the first call after bert_load pays for
** neither (bf_model_warm_up, the last step of bf_model_load_as).
*/
#include "model.h"
#include "util.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif

/* Bring the pages of a mapping into this process's page tables (they are in
** the page cache once any process has read the file): MADV_POPULATE_READ.
** Only a kernel that does not know it (EINVAL: before Linux 5.14) gets one
** read per page instead; any other failure (EFAULT: the file was truncated
** since loading) stops here, where reading would raise SIGBUS. */
static void populate(const bf_model *m, const void *p, size_t len) {
  if (!p || !len) return;
  if (madvise((void *)p, len, MADV_POPULATE_READ) == 0 || errno != EINVAL) return;
  if (bf_model_check(m, NULL, 0) != BF_OK) return; /* changed on disk: leave it */
  const volatile unsigned char *c = p;
  long page = sysconf(_SC_PAGESIZE);
  for (size_t i = 0; i < len; i += (size_t)(page > 0 ? page : 4096)) (void)c[i];
}

/* The warm-up: the weights the products use come into the page tables (an
** fp32 model's packed file, or its whole file when it has none; an int8 or
** bf16 model's int8 or bf16 file; the fp32 file then holds only embeddings,
** LayerNorms, biases and (int8) the head's matrices, which the first calls
** bring in),
** then the fingerprint is computed, so that the first call after bert_load
** pays for neither.
**
** The pages come in WARM_CHUNK at a time from several threads (one per core,
** at most WARM_THREADS: measured on 2 cores, 409 MB in 31-34 ms with 2
** threads, 38-64 ms with one), and the load waits for them, but at most
** until WARM_WAIT_NS after the load began: a call right after loading then
** finds its pages mapped.  What is left after that, and the fingerprint,
** go on in the background at the lowest priority (nice 19), so that they do
** not take the cores from the first calls.  The threads are detached (a
** process that exits at once does not wait for them) and hold a reference
** to the model. */
#define WARM_CHUNK (4u << 20)
#define WARM_THREADS 4
#define WARM_WAIT_NS 40000000ull
#define WARM_PARTS 3

typedef struct warm_job {
  bf_model *m;
  struct {
    const char *p;
    size_t len;
  } part[WARM_PARTS]; /* what to bring in, in this order */
  int nparts;
  size_t len;          /* of all parts */
  atomic_size_t next;  /* next chunk to populate */
  atomic_int left;     /* threads still populating */
  atomic_int detached; /* the load stopped waiting: lower the priority */
  atomic_int refs;     /* threads and the load holding the job */
  pthread_mutex_t mu;
  pthread_cond_t done; /* signalled when left reaches 0 */
} warm_job;

static void warm_job_release(warm_job *w) {
  if (atomic_fetch_sub(&w->refs, 1) != 1) return;
  bf_model_release(w->m);
  pthread_mutex_destroy(&w->mu);
  pthread_cond_destroy(&w->done);
  free(w);
}

/* This thread to nice 19 (Linux: the priority of one thread). */
static void lower_priority(void) { (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19); }

static void *warm_up(void *arg) {
  warm_job *w = arg;
  int lowered = 0;
  for (;;) {
    if (!lowered && atomic_load(&w->detached)) {
      lower_priority();
      lowered = 1;
    }
    size_t off = atomic_fetch_add(&w->next, WARM_CHUNK);
    if (off >= w->len) break;
    int i = 0; /* the part that holds off: its bytes from there, at most a chunk */
    while (off >= w->part[i].len) off -= w->part[i++].len;
    size_t left = w->part[i].len - off;
    populate(w->m, w->part[i].p + off, left < WARM_CHUNK ? left : WARM_CHUNK);
  }
  pthread_mutex_lock(&w->mu);
  int last = atomic_fetch_sub(&w->left, 1) == 1;
  if (last) pthread_cond_broadcast(&w->done);
  pthread_mutex_unlock(&w->mu);
  if (last) { /* the fingerprint, in the background */
    if (!lowered) lower_priority();
    bf_model_fingerprint(w->m);
  }
  warm_job_release(w);
  return NULL;
}

/* One more part to bring in (nothing if p is NULL). */
static void add_part(warm_job *w, const void *p, size_t len) {
  if (!p || !len || w->nparts == WARM_PARTS) return;
  w->part[w->nparts].p = p;
  w->part[w->nparts++].len = len;
  w->len += len;
}

/* Start the warm-up threads and wait for the pages until WARM_WAIT_NS after
** t0 (when the load began).  BERTFILL_WARM_UP=0 turns it off. */
void bf_model_warm_up(bf_model *m, uint64_t t0) {
  if (!bf_env_flag("BERTFILL_WARM_UP", 1)) return;
  warm_job *w = calloc(1, sizeof *w);
  if (!w) return;
  w->m = m;
  if (m->precision != BF_PRECISION_FP32) { /* the int8 or bf16 file (none: a copy in memory) */
    add_part(w, m->dmap, m->dmap_len);
  } else if (m->dmap) {
    /* the packed panels, then the fp32 file's matrices that are not packed:
    ** the MLM head's (its decoder is usually the word embeddings), in the
    ** order a run reads them */
    const bf_config *c = &m->cfg;
    add_part(w, m->dmap, m->dmap_len);
    add_part(w, m->head_w, (size_t)c->hidden_size * c->hidden_size * sizeof(float));
    add_part(w, m->dec_w, (size_t)c->vocab_size * c->hidden_size * sizeof(float));
  } else { /* the products read the fp32 file in place: all of it */
    add_part(w, m->map, m->map_len);
  }
  pthread_mutex_init(&w->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&w->done, &ca);
  pthread_condattr_destroy(&ca);
  int n = bf_ncores();
  n = n < 1 ? 1 : n > WARM_THREADS ? WARM_THREADS : n;
  bf_model_retain(m);
  atomic_init(&w->refs, 1); /* the load's */
  pthread_attr_t a;
  int started = 0;
  if (pthread_attr_init(&a) == 0) {
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    for (int i = 0; i < n; i++) {
      pthread_t t;
      atomic_fetch_add(&w->refs, 1);
      atomic_fetch_add(&w->left, 1);
      if (pthread_create(&t, &a, warm_up, w) != 0) {
        atomic_fetch_sub(&w->left, 1);
        atomic_fetch_sub(&w->refs, 1);
        break;
      }
      started++;
    }
    pthread_attr_destroy(&a);
  }
  if (started) {
    uint64_t end = t0 + WARM_WAIT_NS;
    struct timespec ts = {(time_t)(end / 1000000000ull), (long)(end % 1000000000ull)};
    pthread_mutex_lock(&w->mu);
    while (atomic_load(&w->left) > 0)
      if (pthread_cond_timedwait(&w->done, &w->mu, &ts) != 0) break; /* timed out */
    atomic_store(&w->detached, 1);
    pthread_mutex_unlock(&w->mu);
  }
  warm_job_release(w);
}
