/* test_stats.c — unit tests of ext/sqlite/stats.c: names, the histogram bucket rule,
** quantiles on known inputs (expected values worked out by hand and checked
** against exact sorted-array quantiles), batch-size buckets, reset, and exact
** counts under concurrent recording from several threads. */
#include "testlib.h"
#include "stats.h"

#include <pthread.h>
#include <stdint.h>

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* Exact quantile from sorted samples: the ceil(q*n)-th smallest. */
static uint64_t exact_q(const uint64_t *v, int n, double q) {
  int rank = (int)(q * n);
  if ((double)rank < q * n) rank++;
  if (rank < 1) rank = 1;
  return v[rank - 1];
}

static void test_names(void) {
  int ok = 1;
  for (int a = 0; a < BF_CT__N; a++) {
    const char *x = bf_counter_name((bf_counter)a);
    if (!x || !*x || !strcmp(x, "?")) ok = 0;
    for (int b = 0; b < a; b++)
      if (!strcmp(x, bf_counter_name((bf_counter)b))) ok = 0;
    for (int s = 0; s < BF_ST__N; s++)
      if (!strcmp(x, bf_stage_name((bf_stage)s))) ok = 0;
  }
  for (int a = 0; a < BF_ST__N; a++) {
    const char *x = bf_stage_name((bf_stage)a);
    if (!x || !*x || !strcmp(x, "?")) ok = 0;
    for (int b = 0; b < a; b++)
      if (!strcmp(x, bf_stage_name((bf_stage)b))) ok = 0;
  }
  CHECK("names_distinct_nonempty", ok);
  CHECK("names_known", !strcmp(bf_counter_name(BF_CT_CALLS), "calls") &&
                         !strcmp(bf_counter_name(BF_CT_HIT_LRU), "hit_lru") &&
                         !strcmp(bf_counter_name(BF_CT_BUSY), "busy") &&
                         !strcmp(bf_stage_name(BF_ST_CALL), "call") &&
                         !strcmp(bf_stage_name(BF_ST_ENCODE), "encode") &&
                         !strcmp(bf_stage_name(BF_ST_CACHE_WRITE), "cache_write"));
  CHECK("names_out_of_range",
        !strcmp(bf_counter_name(BF_CT__N), "?") && !strcmp(bf_stage_name((bf_stage)-1), "?"));
}

static void test_bucket_rule(void) {
  int nb = bf_hist_nbuckets();
  CHECKF("hist_size_bounded", nb > 100 && nb <= 512, "nbuckets=%d", nb);
  int ok_mono = 1;
  for (int i = 1; i < nb; i++)
    if (bf_hist_upper(i) <= bf_hist_upper(i - 1)) ok_mono = 0;
  CHECK("hist_upper_increasing", ok_mono);
  CHECK("hist_last_is_overflow", bf_hist_upper(nb - 1) == UINT64_MAX);
  /* Every value lies in [upper(i-1), upper(i)) of its bucket i, and a bucket
  ** in the resolved range (64 ns .. 2^37 ns) is at most 12.5% wide. */
  int ok_in = 1, ok_width = 1;
  uint64_t bad = 0;
  for (uint64_t v = 0; v < ((uint64_t)1 << 40); v = v < 300 ? v + 1 : v + v / 97 + 1) {
    int i = bf_hist_bucket(v);
    uint64_t lo = i ? bf_hist_upper(i - 1) : 0, hi = bf_hist_upper(i);
    if (i < 0 || i >= nb || v < lo || v >= hi) {
      ok_in = 0;
      bad = v;
    }
    if (i > 0 && i < nb - 1 && (double)(hi - lo) > 0.125 * (double)lo + 1e-9) ok_width = 0;
  }
  CHECKF("hist_value_in_its_bucket", ok_in, "value %llu", (unsigned long long)bad);
  CHECK("hist_bucket_width_12_5pct", ok_width);
  CHECK("hist_underflow",
        bf_hist_bucket(0) == 0 && bf_hist_bucket(63) == 0 && bf_hist_bucket(64) == 1);
  CHECK("hist_overflow",
        bf_hist_bucket((uint64_t)200e9) == nb - 1 && bf_hist_bucket(UINT64_MAX) == nb - 1);
  /* Hand-computed: 500000 ns is in octave 2^18 (262144..524288), 8 buckets of
  ** 32768 ns, sub-bucket 7 -> upper edge 524288. */
  CHECK("hist_upper_by_hand", bf_hist_upper(bf_hist_bucket(500000)) == 524288 &&
                                bf_hist_upper(bf_hist_bucket(950000)) == 524288 + 7 * 65536);
}

static void test_known_quantiles(void) {
  bf_stats_reset();
  bf_stage_summary s;
  bf_stats_stage(BF_ST_ENCODE, &s);
  CHECK("empty_stage_zero",
        s.count == 0 && s.total_ns == 0 && s.max_ns == 0 && s.p50_ns == 0 && s.p99_ns == 0);

  /* 1, 2, ..., 1000 microseconds. */
  for (int k = 1000; k >= 1; k--) bf_stats_time(BF_ST_ENCODE, (uint64_t)k * 1000);
  bf_stats_stage(BF_ST_ENCODE, &s);
  CHECK("known_count", s.count == 1000);
  CHECK("known_total", s.total_ns == 500500000ull);
  CHECK("known_max", s.max_ns == 1000000);
  /* p50: the 500th value, 500000 ns -> bucket upper edge 524288 (by hand).
  ** p95: 950000 -> 983040.  p99: 990000 -> 1048576, clamped to max 1000000. */
  CHECKF("known_p50", s.p50_ns == 524288, "p50=%llu", (unsigned long long)s.p50_ns);
  CHECKF("known_p95", s.p95_ns == 983040, "p95=%llu", (unsigned long long)s.p95_ns);
  CHECKF("known_p99", s.p99_ns == 1000000, "p99=%llu", (unsigned long long)s.p99_ns);
  CHECK("known_quantile_fn", bf_stats_stage_quantile(BF_ST_ENCODE, 0.5) == 524288 &&
                               bf_stats_stage_quantile(BF_ST_ENCODE, 1.0) == 1000000);
  bf_stats_stage(BF_ST_TOPK, &s);
  CHECK("other_stage_untouched", s.count == 0);
  /* the raw buckets (bert_stats('prometheus')): 1000 samples, 524 of them
  ** (1..524 us) below the edge 524288 ns */
  uint64_t b[512], total = 0, below = 0;
  int nb = bf_stats_stage_buckets(BF_ST_ENCODE, b, 512);
  for (int i = 0; i < nb; i++) {
    total += b[i];
    if (bf_hist_upper(i) <= 524288) below += b[i];
  }
  CHECKF("stage_buckets", nb == bf_hist_nbuckets() && total == 1000 && below == 524,
         "nb=%d total=%llu below=%llu", nb, (unsigned long long)total, (unsigned long long)below);
  CHECK("stage_buckets_bounds", bf_stats_stage_buckets(BF_ST_ENCODE, b, 3) == 3 &&
                                  bf_stats_stage_buckets((bf_stage)99, b, 512) == 0);

  /* A tail: 990 calls of 1 ms and 10 of 1 s -> p99 still ~1 ms, max 1 s;
  ** an 11th slow call moves p99 to the slow bucket (clamped to max). */
  bf_stats_reset();
  for (int i = 0; i < 990; i++) bf_stats_time(BF_ST_QUEUE, 1000000);
  for (int i = 0; i < 10; i++) bf_stats_time(BF_ST_QUEUE, 1000000000);
  bf_stats_stage(BF_ST_QUEUE, &s);
  CHECKF("tail_p99_fast", s.p99_ns >= 1000000 && s.p99_ns <= 1125000, "p99=%llu",
         (unsigned long long)s.p99_ns);
  CHECK("tail_max", s.max_ns == 1000000000);
  bf_stats_time(BF_ST_QUEUE, 1000000000);
  bf_stats_stage(BF_ST_QUEUE, &s);
  CHECKF("tail_p99_slow", s.p99_ns == 1000000000, "p99=%llu", (unsigned long long)s.p99_ns);

  /* Under- and overflow. */
  bf_stats_reset();
  bf_stats_time(BF_ST_TOPK, 0);
  bf_stats_time(BF_ST_TOPK, (uint64_t)200e9);
  bf_stats_stage(BF_ST_TOPK, &s);
  CHECK("underflow_overflow", s.count == 2 && s.p50_ns == 64 && s.p99_ns == (uint64_t)200e9 &&
                                s.max_ns == (uint64_t)200e9);

  /* Random skewed samples: every reported quantile is within [exact, exact*1.125]
  ** of the exact sorted-array quantile, and p50 <= p95 <= p99 <= max. */
  enum { N = 20000 };
  static uint64_t v[N];
  uint64_t x = 88172645463325252ull;
  int ok_range = 1, ok_mono = 1;
  for (int round = 0; round < 5; round++) {
    bf_stats_reset();
    for (int i = 0; i < N; i++) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;                         /* xorshift64 */
      int sh = (int)(x % (16 + 5 * round)); /* log-uniform-ish spread */
      v[i] = 100 + ((x >> 20) & ((1ull << sh) - 1)) + (1ull << sh);
      bf_stats_time(BF_ST_CALL, v[i]);
    }
    qsort(v, N, sizeof v[0], cmp_u64);
    bf_stats_stage(BF_ST_CALL, &s);
    const double qs[] = {0.5, 0.95, 0.99};
    const uint64_t got[] = {s.p50_ns, s.p95_ns, s.p99_ns};
    for (int j = 0; j < 3; j++) {
      uint64_t e = exact_q(v, N, qs[j]);
      if (got[j] < e || (double)got[j] > 1.125 * (double)e + 1) {
        ok_range = 0;
        printf("# round %d q=%.2f exact=%llu got=%llu\n", round, qs[j], (unsigned long long)e,
               (unsigned long long)got[j]);
      }
    }
    if (!(s.p50_ns <= s.p95_ns && s.p95_ns <= s.p99_ns && s.p99_ns <= s.max_ns)) ok_mono = 0;
    if (s.max_ns != v[N - 1] || s.count != N) ok_mono = 0;
  }
  CHECK("random_quantiles_within_12_5pct", ok_range);
  CHECK("random_quantiles_monotone", ok_mono);
}

static void test_batches_and_reset(void) {
  bf_stats_reset();
  const int sizes[] = {1, 1, 2, 8, 9, 16, 17, 1000, 5000, 0, -3};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) bf_stats_batch(sizes[i]);
  int lo[32], hi[32];
  uint64_t c[32];
  int n = bf_stats_batch_buckets(lo, hi, c, 32);
  const int elo[] = {1, 2, 8, 9, 17, 513, 1025}, ehi[] = {1, 2, 8, 16, 32, 1024, 0x7fffffff};
  const uint64_t ec[] = {2, 1, 1, 2, 1, 1, 1};
  int ok = n == 7;
  for (int i = 0; ok && i < 7; i++) ok = lo[i] == elo[i] && hi[i] == ehi[i] && c[i] == ec[i];
  CHECKF("batch_buckets", ok, "n=%d", n);
  CHECK("batch_count_only", bf_stats_batch_buckets(NULL, NULL, NULL, 0) == 7);
  CHECK("batch_max_respected", bf_stats_batch_buckets(lo, hi, c, 3) == 3 && lo[2] == 8);

  bf_stats_add(BF_CT_CALLS, 5);
  bf_stats_add(BF_CT_MISS, 2);
  bf_stats_add(BF_CT__N, 7);            /* ignored, no crash */
  bf_stats_time((bf_stage)BF_ST__N, 5); /* ignored */
  bf_stats_time(BF_ST_TOKENIZE, 1234);
  CHECK("counter_add", bf_stats_counter(BF_CT_CALLS) == 5 && bf_stats_counter(BF_CT_MISS) == 2 &&
                         bf_stats_counter(BF_CT_HIT_LRU) == 0 && bf_stats_counter(BF_CT__N) == 0);
  bf_stats_reset();
  bf_stage_summary s;
  bf_stats_stage(BF_ST_TOKENIZE, &s);
  int zero = 1;
  for (int k = 0; k < BF_CT__N; k++)
    if (bf_stats_counter((bf_counter)k)) zero = 0;
  CHECK("reset_counters", zero);
  CHECK("reset_stages", s.count == 0 && s.total_ns == 0 && s.max_ns == 0 && s.p99_ns == 0);
  CHECK("reset_batches", bf_stats_batch_buckets(NULL, NULL, NULL, 0) == 0);
  CHECK("since_reset_small", bf_stats_since_reset_ns() < 5000000000ull);
  uint64_t t0 = bf_now_ns(), t1 = bf_now_ns();
  CHECK("now_monotonic", t1 >= t0 && t0 > 0);
}

/* ---- concurrency: exact counts from several threads ---- */
enum { THREADS = 8, ITERS = 50000 };
static void *worker(void *arg) {
  int id = (int)(intptr_t)arg;
  for (int i = 0; i < ITERS; i++) {
    bf_stats_add(BF_CT_CALLS, 1);
    bf_stats_add(BF_CT_TOKENS, 3);
    bf_stats_time(BF_ST_ENCODE, (uint64_t)(i % 5000) * 1000 + 100 + id);
    bf_stats_batch(1 + i % 20);
  }
  return NULL;
}

static void test_concurrent(void) {
  bf_stats_reset();
  pthread_t th[THREADS];
  for (int t = 0; t < THREADS; t++) pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t);
  for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
  uint64_t want_total = 0, want_max = 0;
  for (int t = 0; t < THREADS; t++)
    for (int i = 0; i < ITERS; i++) {
      uint64_t ns = (uint64_t)(i % 5000) * 1000 + 100 + t;
      want_total += ns;
      if (ns > want_max) want_max = ns;
    }
  bf_stage_summary s;
  bf_stats_stage(BF_ST_ENCODE, &s);
  CHECKF("concurrent_counter_exact",
         bf_stats_counter(BF_CT_CALLS) == (uint64_t)THREADS * ITERS &&
           bf_stats_counter(BF_CT_TOKENS) == 3ull * THREADS * ITERS,
         "calls=%llu", (unsigned long long)bf_stats_counter(BF_CT_CALLS));
  CHECK("concurrent_stage_exact",
        s.count == (uint64_t)THREADS * ITERS && s.total_ns == want_total && s.max_ns == want_max);
  CHECK("concurrent_quantiles_monotone", s.p50_ns <= s.p95_ns && s.p95_ns <= s.p99_ns &&
                                           s.p99_ns <= s.max_ns && s.p50_ns >= 2400000 &&
                                           s.p50_ns <= 2700000);
  int lo[32], hi[32];
  uint64_t c[32], sum = 0;
  int n = bf_stats_batch_buckets(lo, hi, c, 32);
  for (int i = 0; i < n; i++) sum += c[i];
  CHECK("concurrent_batches_exact", sum == (uint64_t)THREADS * ITERS && n == 10);
}

int main(void) {
  test_names();
  test_bucket_rule();
  test_known_quantiles();
  test_batches_and_reset();
  test_concurrent();
  TL_EXIT();
}
