/*
** test_batcher.c — unit tests of dynamic batching (ext/sqlite/batcher.c),
** driven without SQL: threads call bfx_batch_encode directly while the
** test holds the one encoder slot of the overload guard, so that exactly
** the calls it wants are queued when it lets go.  Checked:
**   - queued calls are merged into one encoder run, each caller gets the
**     candidates it gets alone (cut to its own k);
**   - a batch takes at most BFX_BATCH_MAX_SEQS sequences and
**     BFX_BATCH_MAX_TOKENS tokens, the rest go in the next one;
**   - identical sequences are computed once;
**   - a merged run that fails is run again one sequence at a time: the bad
**     sequence fails alone, the others succeed;
**   - different models never share a run;
**   - a call that finds the slot free and nobody queued runs alone at once
**     (bit-identical), and so does every call with batching off;
**   - a queued call gives up after the busy timeout with the busy error,
**     with batching on and off;
**   - the guard's slots go first come, first served: a caller that comes
**     when others wait gets a slot after them, even when it gave one back
**     a moment ago (a column's runs one after another, guard.c).
** Links the SQLite layer's objects (see test_sqlite.h).
**   usage: test_batcher TINY_MODEL_DIR SMALL_MODEL_DIR
** (the small model's 128 positions let a batch reach the token bound
** before the sequence bound).  BF_BATCHER_QUICK=1 (set under valgrind)
** skips that case: it runs over 2048 tokens at once.
*/
#define SQLITE_CORE 1
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <unistd.h>
#include "testlib.h"
#include "test_sqlite.h"
#include "batcher.h"
#include "bounds.h"
#include "guard.h"
#include "stats.h"

#define MAX_CALLS 48
#define KMAX 5

/* One caller: a sequence with one mask and the k it asks for. */
typedef struct call {
  bf_model *m;
  bf_tokens t;
  int k;
  bf_cand out[KMAX];
  bf_cand ref[KMAX]; /* the same sequence run alone, k = KMAX */
  bfx_times times;
  bfx_err e;
  int rc;
} call;

static call calls[MAX_CALLS];

/* [CLS] len pseudo-random tokens [MASK] [SEP], different for each seed. */
static int make_seq(bf_model *m, bf_tokens *t, int len, int seed) {
  char err[256];
  bf_tokens cms = {0};
  if (bf_tokenize(bf_model_tokenizer(m), "[MASK]", -1, &cms, err, sizeof err) != BF_OK ||
      cms.n != 3) {
    printf("FAIL batcher_setup: cannot tokenize [MASK]: %s\n", err);
    return 0;
  }
  int vocab = bf_model_config(m)->vocab_size, mask = cms.ids[1];
  t->ids = malloc((size_t)(len + 3) * sizeof *t->ids);
  if (!t->ids) return 0;
  t->cap = len + 3;
  t->n = 0;
  t->ids[t->n++] = cms.ids[0];
  for (int j = 0; j < len; j++) {
    int32_t id = (int32_t)((seed * 7919 + j * 104729) % (vocab - 200) + 200);
    t->ids[t->n++] = id == mask ? id + 1 : id;
  }
  t->ids[t->n++] = mask;
  t->ids[t->n++] = cms.ids[2];
  t->n_masks = 1;
  bf_tokens_free(&cms);
  return 1;
}

/* Set up calls[0..n) on model m: sequences of len tokens + 3, k cycling
** 1..KMAX, and the reference of each computed alone. */
static int setup(int n, bf_model *m, int len, int seed0) {
  for (int i = 0; i < n; i++) {
    call *c = &calls[i];
    bf_tokens_free(&c->t);
    memset(c, 0, sizeof *c);
    c->m = m;
    c->k = 1 + i % KMAX;
    if (!make_seq(m, &c->t, len, seed0 + i)) return 0;
    bfx_err e = BFX_ERR_NONE;
    if (bfx_encode(m, 1, &c->t, KMAX, c->ref, NULL, &e) != SQLITE_OK) {
      printf("FAIL batcher_setup: reference run: %s\n", e.msg);
      return 0;
    }
  }
  return 1;
}

static void *run_call(void *p) {
  call *c = p;
  c->e = (bfx_err)BFX_ERR_NONE;
  c->rc = bfx_batch_encode(c->m, &c->t, c->k, c->out, &c->times, &c->e);
  return NULL;
}

/* 1 when the call got the reference's first k candidates: the same ids
** (two of nearly equal probability may swap) and probabilities within
** float rounding (a merged run takes other matrix kernels).  exact: bit
** for bit. */
static int matches(const call *c, int exact) {
  if (c->rc != SQLITE_OK) return 0;
  if (exact) return memcmp(c->out, c->ref, (size_t)c->k * sizeof *c->out) == 0;
  for (int r = 0; r < c->k; r++) {
    if (fabsf(c->out[r].prob - c->ref[r].prob) > 1e-5f) return 0;
    if (c->out[r].id == c->ref[r].id) continue;
    int tie = (r > 0 && fabsf(c->ref[r].prob - c->ref[r - 1].prob) < 1e-5f) ||
              (r + 1 < KMAX && fabsf(c->ref[r].prob - c->ref[r + 1].prob) < 1e-5f);
    if (!tie) return 0;
  }
  return 1;
}

typedef struct counts {
  uint64_t runs, batches, seqs, busy;
} counts;

static counts now_counts(void) {
  counts c = {bf_stats_counter(BF_CT_ENCODER_RUNS), bf_stats_counter(BF_CT_BATCHES),
              bf_stats_counter(BF_CT_SEQS), bf_stats_counter(BF_CT_BUSY)};
  return c;
}

static counts since(counts a) {
  counts b = now_counts();
  counts d = {b.runs - a.runs, b.batches - a.batches, b.seqs - a.seqs, b.busy - a.busy};
  return d;
}

/* Hold the encoder slot; start calls[0..n) in threads; once all n are
** queued let go of the slot; wait for them.  0 when they never queued. */
static int run_queued(int n) {
  bfx_err e = BFX_ERR_NONE;
  uint64_t waited;
  bf_run *slot = bfx_guard_acquire(&waited, &e);
  if (!slot) {
    printf("FAIL batcher_slot: %s\n", e.msg);
    return 0;
  }
  pthread_t th[MAX_CALLS];
  for (int i = 0; i < n; i++) pthread_create(&th[i], NULL, run_call, &calls[i]);
  int queued = 0;
  for (int w = 0; w < 20000 && !(queued = bfx_batch_queued() == n); w++) usleep(1000);
  bfx_guard_release(slot);
  for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
  if (!queued) printf("FAIL batcher_queue: %d calls never all queued\n", n);
  return queued;
}

/* Start calls[0..n) in threads and wait for them (nothing held). */
static void run_concurrently(int n) {
  pthread_t th[MAX_CALLS];
  for (int i = 0; i < n; i++) pthread_create(&th[i], NULL, run_call, &calls[i]);
  for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
}

static int all_match(int from, int to, int exact) {
  int ok = 1;
  for (int i = from; i < to; i++)
    if (!matches(&calls[i], exact)) {
      printf("   call %d: rc %d (%s), k %d, got id %d p %.7f, alone id %d p %.7f\n", i, calls[i].rc,
             calls[i].e.msg, calls[i].k, calls[i].out[0].id, (double)calls[i].out[0].prob,
             calls[i].ref[0].id, (double)calls[i].ref[0].prob);
      ok = 0;
    }
  return ok;
}

static void test_merge(bf_model *m) {
  if (!setup(4, m, 8, 1)) return;
  counts c0 = now_counts();
  if (!run_queued(4)) return;
  counts d = since(c0);
  CHECK("batcher_merge_results", all_match(0, 4, 0));
  CHECKF("batcher_merge_one_run", d.runs == 1 && d.batches == 1 && d.seqs == 4,
         "runs %llu batches %llu seqs %llu", (unsigned long long)d.runs,
         (unsigned long long)d.batches, (unsigned long long)d.seqs);
  CHECK("batcher_merge_times", calls[1].times.queue_ns > 0 && calls[1].times.encode_ns > 0);
}

static void test_limit_seqs(bf_model *m) {
  int n = BFX_BATCH_MAX_SEQS + 8; /* short: the sequence bound binds */
  if (!setup(n, m, 3, 100)) return;
  counts c0 = now_counts();
  if (!run_queued(n)) return;
  counts d = since(c0);
  CHECK("batcher_limit_seqs_results", all_match(0, n, 0));
  CHECKF("batcher_limit_seqs_two_runs", d.runs == 2 && d.seqs == (uint64_t)n, "runs %llu seqs %llu",
         (unsigned long long)d.runs, (unsigned long long)d.seqs);
}

static void test_limit_tokens(bf_model *small) {
  int len = 117, n = 20; /* 120 tokens: 17 to a batch */
  const char *quick = getenv("BF_BATCHER_QUICK");
  if (quick && quick[0] == '1') {
    SKIP("batcher_limit_tokens", "BF_BATCHER_QUICK: over 2048 tokens is too slow here");
    return;
  }
  if (bf_model_config(small)->max_position_embeddings < len + 3) {
    SKIP("batcher_limit_tokens", "the small model takes fewer than 120 tokens");
    return;
  }
  if (!setup(n, small, len, 200)) return;
  counts c0 = now_counts();
  if (!run_queued(n)) return;
  counts d = since(c0);
  CHECK("batcher_limit_tokens_results", all_match(0, n, 0));
  CHECKF("batcher_limit_tokens_two_runs", d.runs == 2 && d.seqs == (uint64_t)n,
         "runs %llu seqs %llu (at most %d tokens a run)", (unsigned long long)d.runs,
         (unsigned long long)d.seqs, BFX_BATCH_MAX_TOKENS);
}

static void test_identical(bf_model *m) {
  if (!setup(4, m, 6, 300)) return;
  for (int i = 1; i < 4; i++) { /* four callers, one sequence */
    memcpy(calls[i].t.ids, calls[0].t.ids, (size_t)calls[0].t.n * sizeof *calls[0].t.ids);
    memcpy(calls[i].ref, calls[0].ref, sizeof calls[0].ref);
  }
  counts c0 = now_counts();
  if (!run_queued(4)) return;
  counts d = since(c0);
  CHECK("batcher_identical_results", all_match(0, 4, 0));
  CHECKF("batcher_identical_computed_once", d.runs == 1 && d.seqs == 1, "runs %llu seqs %llu",
         (unsigned long long)d.runs, (unsigned long long)d.seqs);
}

static void test_fallback(bf_model *m) {
  if (!setup(4, m, 6, 400)) return;
  calls[2].t.ids[3] = bf_model_config(m)->vocab_size + 5; /* fails bf_fill's checks */
  counts c0 = now_counts();
  if (!run_queued(4)) return;
  counts d = since(c0);
  CHECK("batcher_fallback_others_succeed", all_match(0, 2, 0) && all_match(3, 4, 0));
  CHECKF("batcher_fallback_bad_fails_alone",
         calls[2].rc == SQLITE_ERROR && strncmp(calls[2].e.msg, "bertfill: token id", 18) == 0,
         "rc %d: %s", calls[2].rc, calls[2].e.msg);
  CHECKF("batcher_fallback_one_by_one", d.runs == 3 && d.seqs == 3 && d.batches == 0,
         "runs %llu seqs %llu batches %llu", (unsigned long long)d.runs, (unsigned long long)d.seqs,
         (unsigned long long)d.batches);
}

static void test_two_models(bf_model *a, bf_model *b) {
  if (!setup(4, a, 5, 500)) return;
  for (int i = 2; i < 4; i++) {
    bf_tokens_free(&calls[i].t);
    calls[i].m = b;
    bfx_err e = BFX_ERR_NONE;
    if (!make_seq(b, &calls[i].t, 5, 600 + i) ||
        bfx_encode(b, 1, &calls[i].t, KMAX, calls[i].ref, NULL, &e) != SQLITE_OK) {
      printf("FAIL batcher_two_models_setup: %s\n", e.msg);
      return;
    }
  }
  counts c0 = now_counts();
  if (!run_queued(4)) return;
  counts d = since(c0);
  CHECK("batcher_two_models_results", all_match(0, 4, 0));
  CHECKF("batcher_two_models_two_runs", d.runs == 2 && d.batches == 2 && d.seqs == 4,
         "runs %llu batches %llu seqs %llu", (unsigned long long)d.runs,
         (unsigned long long)d.batches, (unsigned long long)d.seqs);
}

static void test_alone(bf_model *m) {
  if (!setup(4, m, 7, 700)) return;
  counts c0 = now_counts();
  run_call(&calls[0]); /* slot free, nobody queued */
  CHECK("batcher_alone_exact", all_match(0, 1, 1) && since(c0).runs == 1);
  bfx_batching_set(0);
  CHECK("batcher_off", bfx_batching() == 0);
  c0 = now_counts();
  run_concurrently(4); /* each waits for the slot in turn */
  counts d = since(c0);
  CHECK("batcher_off_exact", all_match(0, 4, 1));
  CHECKF("batcher_off_one_by_one", d.runs == 4 && d.batches == 0, "runs %llu batches %llu",
         (unsigned long long)d.runs, (unsigned long long)d.batches);
  bfx_batching_set(1);
}

static void test_busy(bf_model *m) {
  if (!setup(1, m, 4, 800)) return;
  int old_timeout = bfx_guard_timeout_ms();
  bfx_guard_set_timeout_ms(50);
  bfx_err e = BFX_ERR_NONE;
  uint64_t waited;
  bf_run *slot = bfx_guard_acquire(&waited, &e);
  for (int off = 0; off < 2 && slot; off++) {
    bfx_batching_set(!off);
    run_call(&calls[0]);
    const char *want = "bertfill: busy: 1 encoder runs in progress, waited ";
    CHECKF(off ? "batcher_off_busy" : "batcher_busy",
           calls[0].rc == SQLITE_ERROR && calls[0].e.kind == BF_CT_BUSY &&
             strncmp(calls[0].e.msg, want, strlen(want)) == 0 &&
             calls[0].times.queue_ns >= 40000000ull,
           "rc %d kind %d: %s", calls[0].rc, calls[0].e.kind, calls[0].e.msg);
  }
  bfx_batching_set(1);
  if (slot) bfx_guard_release(slot);
  else printf("FAIL batcher_busy_slot: %s\n", e.msg);
  bfx_guard_set_timeout_ms(old_timeout);
  CHECK("batcher_busy_none_queued", bfx_batch_queued() == 0 && bfx_guard_in_flight() == 0);
}

static atomic_int order_next;
static int order_of[3];

/* A caller that takes the guard's slot, notes when, and gives it back. */
static void *slot_taker(void *arg) {
  int who = (int)(intptr_t)arg;
  bfx_err e = BFX_ERR_NONE;
  uint64_t waited;
  bf_run *r = bfx_guard_acquire(&waited, &e);
  order_of[who] = r ? atomic_fetch_add(&order_next, 1) : -1;
  if (r) bfx_guard_release(r);
  return NULL;
}

static void test_guard_order(void) {
  bfx_err e = BFX_ERR_NONE;
  uint64_t waited;
  bf_run *slot = bfx_guard_acquire(&waited, &e); /* the one slot */
  if (!slot) {
    printf("FAIL guard_order_slot: %s\n", e.msg);
    return;
  }
  atomic_store(&order_next, 0);
  pthread_t th[2];
  int started = 0;
  for (int i = 0; i < 2; i++) { /* two callers queue, one after the other */
    if (pthread_create(&th[i], NULL, slot_taker, (void *)(intptr_t)i) != 0) break;
    started++;
    while (bfx_guard_queued() < i + 1) usleep(1000);
  }
  bfx_guard_release(slot);
  slot = bfx_guard_acquire(&waited, &e); /* at once again, as fill_rows does */
  order_of[2] = slot ? atomic_fetch_add(&order_next, 1) : -1;
  if (slot) bfx_guard_release(slot);
  for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
  CHECKF("guard_first_come_first_served",
         started == 2 && order_of[0] == 0 && order_of[1] == 1 && order_of[2] == 2,
         "order: first waiter %d, second waiter %d, the one that gave the slot back %d",
         order_of[0], order_of[1], order_of[2]);
  CHECK("guard_order_none_left", bfx_guard_queued() == 0 && bfx_guard_in_flight() == 0);
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: test_batcher TINY_MODEL_DIR SMALL_MODEL_DIR\n");
    return 2;
  }
  unsetenv("BERTFILL_BATCH_GATHER");
  unsetenv("BERTFILL_BATCHING");
  /* batcher.c's own queue (threads of one process), which the machine-wide
  ** batcher (shared_batch.c, tests/python/t_shared_batch.py) is in front of */
  setenv("BERTFILL_SHARED_BATCH", "0", 1);
  if (!test_sqlite_api()) {
    printf("FAIL batcher_setup: no SQLite routines\n");
    return 1;
  }
  char err[512];
  bf_model *tiny = bf_model_load(argv[1], err, sizeof err);
  bf_model *small = tiny ? bf_model_load(argv[2], err, sizeof err) : NULL;
  if (!tiny || !small) {
    printf("FAIL batcher_setup: %s\n", err);
    return 1;
  }
  bfx_guard_set_max(1);             /* one slot: the test holds it */
  bfx_guard_set_timeout_ms(600000); /* valgrind is slow */
  CHECK("batcher_on_by_default", bfx_batching() == 1);
  test_merge(tiny);
  test_limit_seqs(tiny);
  test_limit_tokens(small);
  test_identical(tiny);
  test_fallback(tiny);
  test_two_models(tiny, small);
  test_alone(tiny);
  test_busy(tiny);
  test_guard_order();
  for (int i = 0; i < MAX_CALLS; i++) bf_tokens_free(&calls[i].t);
  bf_model_release(tiny);
  bf_model_release(small);
  TL_EXIT();
}
