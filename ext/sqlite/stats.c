/*
** stats.c — process-wide counters and stage-latency histograms (see stats.h).
**
** Everything here is a relaxed atomic: recording never locks, never
** allocates, and costs a handful of uncontended-or-not atomic adds.  Memory
** is fixed at compile time (about 15 KiB for all stages together).
**
** Latency histogram (one per stage), log-linear like HdrHistogram:
**
**   bucket 0                 t < 64 ns
**   octave e (6 <= e < 37)   [2^e, 2^(e+1)) split into 8 equal sub-buckets,
**                            so a bucket is at most 12.5% wide relative to
**                            its lower edge
**   last bucket              t >= 2^37 ns (about 137 s)
**
**   250 buckets in all.  A quantile is reported as the upper edge of the
**   bucket holding it (so it over-states by at most 12.5%), clamped to the
**   largest value actually recorded, which keeps p50 <= p95 <= p99 <= max.
**
** Batch sizes: exact buckets for 1..8 sequences, then power-of-two ranges
** 9-16, 17-32, ... 513-1024, and 1025 and up.
**
** Readers take no snapshot lock: a summary read while other threads record
** may see a count that is a few samples ahead of the buckets.  Reset stores
** zero everywhere; samples recorded during a reset may be half-counted.
** Both are fine for monitoring and never produce a crash or garbage.
*/
#include "stats.h"
#include "util.h"

#include <stdatomic.h>

#define H_MIN_EXP 6  /* 2^6 = 64 ns: below is the underflow bucket */
#define H_MAX_EXP 37 /* 2^37 ns ~ 137 s: at or above is the overflow bucket */
#define H_SUB_BITS 3 /* 8 sub-buckets per octave */
#define H_SUB (1 << H_SUB_BITS)
#define H_NBUCKETS (1 + (H_MAX_EXP - H_MIN_EXP) * H_SUB + 1)

#define B_EXACT 8                /* batch sizes 1..8 exactly */
#define B_NBUCKETS (B_EXACT + 8) /* + 9-16, ..., 513-1024, 1025+ */

typedef struct {
  _Alignas(64) _Atomic uint64_t v;
} padded_counter;

typedef struct {
  _Alignas(64) _Atomic uint64_t count;
  _Atomic uint64_t total_ns;
  _Atomic uint64_t max_ns;
  _Atomic uint64_t bucket[H_NBUCKETS];
} stage_hist;

static padded_counter g_counter[BF_CT__N];
static stage_hist g_stage[BF_ST__N];
static _Alignas(64) _Atomic uint64_t g_batch[B_NBUCKETS];
static _Atomic uint64_t g_epoch_ns; /* load time or last reset */

static const char *const stage_names[BF_ST__N] = {
  "call",  "queue",      "tokenize",    "encode",      "topk",       "cache_read",    "cache_write",
  "joint", "batch_wait", "batch_start", "batch_write", "batch_wake", "lead_handover",
};
static const char *const counter_names[BF_CT__N] = {
  "calls",
  "hit_lru",
  "hit_table",
  "miss",
  "encoder_runs",
  "batches",
  "seqs",
  "tokens",
  "masks",
  "cache_writes",
  "cache_skipped",
  "err_input",
  "err_toolong",
  "err_model",
  "err_nomem",
  "err_other",
  "busy",
  "rows",
  "rows_batches",
  "rows_seqs",
  "joint_calls",
  "joint_hits",
  "joint_misses",
  "joint_runs",
  "shared_served",
  "shared_batches",
  "shared_remote",
  "shared_leader_changes",
  "shared_fallback",
  "shared_rerun",
  "shared_reclaimed",
  "shared_lead_post",
  "shared_lead_woken",
  "shared_lead_timer",
  "shared_lead_slot",
};

const char *bf_stage_name(bf_stage s) { return (s >= 0 && s < BF_ST__N) ? stage_names[s] : "?"; }
const char *bf_counter_name(bf_counter c) {
  return (c >= 0 && c < BF_CT__N) ? counter_names[c] : "?";
}

/* The statistics epoch starts when the code is loaded (program start, or
** dlopen of the extension). */
__attribute__((constructor)) static void stats_init(void) {
  atomic_store_explicit(&g_epoch_ns, bf_now_ns(), memory_order_relaxed);
}

uint64_t bf_stats_since_reset_ns(void) {
  uint64_t e = atomic_load_explicit(&g_epoch_ns, memory_order_relaxed);
  uint64_t now = bf_now_ns();
  return now > e ? now - e : 0;
}

/* ---- histogram math ---- */

static int floor_log2(uint64_t x) { return 63 - __builtin_clzll(x); } /* x > 0 */

int bf_hist_bucket(uint64_t ns) {
  if (ns < ((uint64_t)1 << H_MIN_EXP)) return 0;
  int e = floor_log2(ns);
  if (e >= H_MAX_EXP) return H_NBUCKETS - 1;
  int sub = (int)((ns >> (e - H_SUB_BITS)) & (H_SUB - 1));
  return 1 + (e - H_MIN_EXP) * H_SUB + sub;
}

/* Exclusive upper edge of bucket i in ns (UINT64_MAX for the overflow bucket). */
uint64_t bf_hist_upper(int i) {
  if (i <= 0) return (uint64_t)1 << H_MIN_EXP;
  if (i >= H_NBUCKETS - 1) return UINT64_MAX;
  int e = H_MIN_EXP + (i - 1) / H_SUB, sub = (i - 1) % H_SUB;
  return ((uint64_t)1 << e) + ((uint64_t)(sub + 1) << (e - H_SUB_BITS));
}

int bf_hist_nbuckets(void) { return H_NBUCKETS; }

/* ---- recording ---- */

void bf_stats_add(bf_counter c, uint64_t n) {
  if (c < 0 || c >= BF_CT__N) return;
  atomic_fetch_add_explicit(&g_counter[c].v, n, memory_order_relaxed);
}

void bf_stats_time(bf_stage s, uint64_t ns) {
  if (s < 0 || s >= BF_ST__N) return;
  stage_hist *h = &g_stage[s];
  atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&h->total_ns, ns, memory_order_relaxed);
  atomic_fetch_add_explicit(&h->bucket[bf_hist_bucket(ns)], 1, memory_order_relaxed);
  uint64_t m = atomic_load_explicit(&h->max_ns, memory_order_relaxed);
  while (ns > m && !atomic_compare_exchange_weak_explicit(&h->max_ns, &m, ns, memory_order_relaxed,
                                                          memory_order_relaxed)) {}
}

static int batch_bucket(int nseq) {
  if (nseq <= B_EXACT) return nseq - 1;
  int b = B_EXACT + (floor_log2((uint64_t)(nseq - 1)) - 3); /* 9-16 -> 8, 17-32 -> 9 ... */
  return b < B_NBUCKETS ? b : B_NBUCKETS - 1;
}

static void batch_range(int b, int *lo, int *hi) {
  if (b < B_EXACT) {
    *lo = *hi = b + 1;
    return;
  }
  int e = b - B_EXACT + 3; /* 8 -> 9..16 */
  *lo = (1 << e) + 1;
  *hi = (b == B_NBUCKETS - 1) ? 0x7fffffff : (1 << (e + 1));
}

void bf_stats_batch(int nseq) {
  if (nseq < 1) return;
  atomic_fetch_add_explicit(&g_batch[batch_bucket(nseq)], 1, memory_order_relaxed);
}

void bf_stats_reset(void) {
  for (int c = 0; c < BF_CT__N; c++)
    atomic_store_explicit(&g_counter[c].v, 0, memory_order_relaxed);
  for (int s = 0; s < BF_ST__N; s++) {
    stage_hist *h = &g_stage[s];
    atomic_store_explicit(&h->count, 0, memory_order_relaxed);
    atomic_store_explicit(&h->total_ns, 0, memory_order_relaxed);
    atomic_store_explicit(&h->max_ns, 0, memory_order_relaxed);
    for (int i = 0; i < H_NBUCKETS; i++)
      atomic_store_explicit(&h->bucket[i], 0, memory_order_relaxed);
  }
  for (int b = 0; b < B_NBUCKETS; b++) atomic_store_explicit(&g_batch[b], 0, memory_order_relaxed);
  atomic_store_explicit(&g_epoch_ns, bf_now_ns(), memory_order_relaxed);
}

/* ---- reading ---- */

uint64_t bf_stats_counter(bf_counter c) {
  if (c < 0 || c >= BF_CT__N) return 0;
  return atomic_load_explicit(&g_counter[c].v, memory_order_relaxed);
}

/* Quantile q (0 < q <= 1) from a copy of the buckets: upper edge of the
** bucket holding the ceil(q * n)-th smallest sample, clamped to max. */
static uint64_t quantile(const uint64_t *b, uint64_t n, uint64_t max, double q) {
  if (n == 0) return 0;
  if (q <= 0) q = 1e-12;
  if (q > 1) q = 1;
  double r = q * (double)n;
  uint64_t rank = (uint64_t)r;
  if ((double)rank < r) rank++;
  if (rank < 1) rank = 1;
  if (rank > n) rank = n;
  uint64_t cum = 0;
  for (int i = 0; i < H_NBUCKETS; i++) {
    cum += b[i];
    if (cum >= rank) {
      uint64_t u = bf_hist_upper(i);
      return u < max ? u : max;
    }
  }
  return max;
}

static uint64_t snapshot(bf_stage s, uint64_t *b, uint64_t *max) {
  const stage_hist *h = &g_stage[s];
  uint64_t n = 0;
  for (int i = 0; i < H_NBUCKETS; i++) {
    b[i] = atomic_load_explicit(&h->bucket[i], memory_order_relaxed);
    n += b[i];
  }
  *max = atomic_load_explicit(&h->max_ns, memory_order_relaxed);
  return n;
}

void bf_stats_stage(bf_stage s, bf_stage_summary *out) {
  *out = (bf_stage_summary){0};
  if (s < 0 || s >= BF_ST__N) return;
  const stage_hist *h = &g_stage[s];
  uint64_t b[H_NBUCKETS], max;
  uint64_t n = snapshot(s, b, &max);
  out->count = atomic_load_explicit(&h->count, memory_order_relaxed);
  out->total_ns = atomic_load_explicit(&h->total_ns, memory_order_relaxed);
  out->max_ns = max;
  out->p50_ns = quantile(b, n, max, 0.50);
  out->p95_ns = quantile(b, n, max, 0.95);
  out->p99_ns = quantile(b, n, max, 0.99);
}

int bf_stats_stage_buckets(bf_stage s, uint64_t *count, int max) {
  if (s < 0 || s >= BF_ST__N) return 0;
  int n = max < H_NBUCKETS ? max : H_NBUCKETS;
  for (int i = 0; i < n; i++)
    count[i] = atomic_load_explicit(&g_stage[s].bucket[i], memory_order_relaxed);
  return n < 0 ? 0 : n;
}

uint64_t bf_stats_stage_quantile(bf_stage s, double q) {
  if (s < 0 || s >= BF_ST__N) return 0;
  uint64_t b[H_NBUCKETS], max;
  uint64_t n = snapshot(s, b, &max);
  return quantile(b, n, max, q);
}

int bf_stats_batch_buckets(int *lo, int *hi, uint64_t *count, int max) {
  int n = 0;
  for (int b = 0; b < B_NBUCKETS; b++) {
    uint64_t c = atomic_load_explicit(&g_batch[b], memory_order_relaxed);
    if (c == 0) continue;
    if (max <= 0) {
      n++;
      continue;
    } /* counting only */
    if (n >= max) break;
    batch_range(b, &lo[n], &hi[n]);
    count[n] = c;
    n++;
  }
  return n;
}
