/*
** test_lru.c — unit tests of the memo cache's in-memory LRU
** (ext/sqlite/cache.c): hits and misses by key (model fingerprint, token
** ids, number of masks) and by the k asked for, widening an entry to a
** larger k, recency, eviction by the entry bound and by the byte bound,
** an entry too large to keep, clear, and growth of the hash table.
** Links the SQLite layer's objects (see test_sqlite.h).
*/
#define SQLITE_CORE 1
#include <stdint.h>
#include "testlib.h"
#include "test_sqlite.h"
#include "cache.h"

static const char *FP = "0123456789abcdef";

/* n_masks * k candidates that tell one entry from another. */
static void make_cands(bf_cand *c, int n_masks, int k, int seed) {
  for (int i = 0; i < n_masks * k; i++) {
    c[i].id = seed * 1000 + i;
    c[i].prob = 1.0f / (float)(i + 1 + seed);
  }
}

/* Token ids of key number key (n of them). */
static void make_ids(int32_t *ids, int n, int key) {
  for (int i = 0; i < n; i++) ids[i] = key * 31 + i;
}

/* bfc_lru_get: 1 on a hit holding exactly want[0 .. n_masks * k_want). */
static int hit_with(const char *fp, const int32_t *ids, int n, int n_masks, int k_need,
                    const bf_cand *want, int k_want) {
  int have = -1;
  bf_cand *out = NULL;
  int rc = bfc_lru_get(fp, ids, n, n_masks, k_need, &have, &out);
  int ok = rc == 1 && have == k_want && out &&
           memcmp(out, want, (size_t)n_masks * (size_t)k_want * sizeof *out) == 0;
  sqlite3_free(out);
  return ok;
}

static int miss(const char *fp, const int32_t *ids, int n, int n_masks, int k_need) {
  int have = -1;
  bf_cand *out = NULL;
  int rc = bfc_lru_get(fp, ids, n, n_masks, k_need, &have, &out);
  sqlite3_free(out);
  return rc == 0 && out == NULL;
}

static long entries(void) {
  long n;
  size_t b;
  bfc_lru_usage(&n, &b);
  return n;
}

static size_t bytes(void) {
  long n;
  size_t b;
  bfc_lru_usage(&n, &b);
  return b;
}

static void test_keys_and_k(void) {
  int32_t ids[6], other[6];
  bf_cand c5[2 * 5], c8[2 * 8], c3[2 * 3];
  make_ids(ids, 6, 1);
  make_ids(other, 6, 1);
  other[3]++;
  CHECK("lru_empty_miss", miss(FP, ids, 6, 2, 1));
  make_cands(c5, 2, 5, 1);
  bfc_lru_put(FP, ids, 6, 2, 5, c5);
  CHECK("lru_hit", hit_with(FP, ids, 6, 2, 5, c5, 5));
  CHECK("lru_hit_smaller_k", hit_with(FP, ids, 6, 2, 1, c5, 5));
  CHECK("lru_miss_larger_k", miss(FP, ids, 6, 2, 6));
  CHECK("lru_miss_other_model", miss("fedcba9876543210", ids, 6, 2, 1));
  CHECK("lru_miss_other_ids", miss(FP, other, 6, 2, 1));
  CHECK("lru_miss_prefix_ids", miss(FP, ids, 5, 2, 1));
  CHECK("lru_miss_other_mask_count", miss(FP, ids, 6, 3, 1));

  make_cands(c8, 2, 8, 2);
  bfc_lru_put(FP, ids, 6, 2, 8, c8); /* wider: replaces */
  CHECK("lru_widened", hit_with(FP, ids, 6, 2, 6, c8, 8));
  CHECK("lru_widened_one_entry", entries() == 1);
  make_cands(c3, 2, 3, 3);
  bfc_lru_put(FP, ids, 6, 2, 3, c3); /* narrower: kept as it was */
  CHECK("lru_narrower_kept", hit_with(FP, ids, 6, 2, 8, c8, 8));

  bfc_lru_put("0123456789abcdef0", ids, 6, 2, 5, c5); /* not a fingerprint: ignored */
  CHECK("lru_long_fingerprint_ignored", entries() == 1);
  bfc_lru_put(FP, ids, 6, 2, 0, c5); /* k = 0: ignored */
  CHECK("lru_k0_ignored", entries() == 1);

  CHECK("lru_clear_count", bfc_lru_clear() == 1);
  CHECK("lru_clear_empty", entries() == 0 && bytes() == 0);
  CHECK("lru_clear_miss", miss(FP, ids, 6, 2, 1));
}

static void test_evict_entries(void) {
  int32_t ids[4][4];
  bf_cand c[4][5];
  bfc_lru_clear();
  bfc_lru_set_max_entries(3);
  CHECK("lru_max_entries_set", bfc_lru_max_entries() == 3);
  for (int i = 0; i < 3; i++) {
    make_ids(ids[i], 4, 10 + i);
    make_cands(c[i], 1, 5, 10 + i);
    bfc_lru_put(FP, ids[i], 4, 1, 5, c[i]);
  }
  CHECK("lru_three_entries", entries() == 3);
  CHECK("lru_touch_oldest", hit_with(FP, ids[0], 4, 1, 5, c[0], 5)); /* 0 is now the newest */
  make_ids(ids[3], 4, 13);
  make_cands(c[3], 1, 5, 13);
  bfc_lru_put(FP, ids[3], 4, 1, 5, c[3]);
  CHECK("lru_evict_count", entries() == 3);
  CHECK("lru_evict_least_recent", miss(FP, ids[1], 4, 1, 1));
  CHECK("lru_evict_keeps_touched", hit_with(FP, ids[0], 4, 1, 5, c[0], 5));
  CHECK("lru_evict_keeps_others",
        hit_with(FP, ids[2], 4, 1, 5, c[2], 5) && hit_with(FP, ids[3], 4, 1, 5, c[3], 5));
  bfc_lru_set_max_entries(1); /* lowering the bound evicts at once */
  CHECK("lru_lower_bound_evicts", entries() == 1 && hit_with(FP, ids[3], 4, 1, 5, c[3], 5));
  bfc_lru_set_max_entries(0);
  CHECK("lru_max_entries_default", bfc_lru_max_entries() == BFC_DEFAULT_LRU_ENTRIES);
}

static void test_evict_bytes(void) {
  int32_t ids[3][8];
  bf_cand c[3][4 * 10];
  bfc_lru_clear();
  for (int i = 0; i < 3; i++) {
    make_ids(ids[i], 8, 20 + i);
    make_cands(c[i], 4, 10, 20 + i);
  }
  bfc_lru_put(FP, ids[0], 8, 4, 10, c[0]);
  size_t one = bytes();
  CHECK("lru_bytes_counted", one > 4 * 10 * sizeof(bf_cand) && entries() == 1);
  bfc_lru_set_max_bytes(2 * one + one / 2); /* room for two of these */
  bfc_lru_put(FP, ids[1], 8, 4, 10, c[1]);
  bfc_lru_put(FP, ids[2], 8, 4, 10, c[2]);
  CHECK("lru_bytes_evict_count", entries() == 2 && bytes() == 2 * one);
  CHECK("lru_bytes_evict_oldest", miss(FP, ids[0], 8, 4, 1));
  CHECK("lru_bytes_keep_newest",
        hit_with(FP, ids[1], 8, 4, 10, c[1], 10) && hit_with(FP, ids[2], 8, 4, 10, c[2], 10));
  bfc_lru_set_max_bytes(one - 1); /* lowering the bound evicts at once */
  CHECK("lru_bytes_lower_bound_evicts", entries() == 0 && bytes() == 0);
  bfc_lru_put(FP, ids[0], 8, 4, 10, c[0]); /* larger than the bound: not kept */
  CHECK("lru_too_large_not_kept", entries() == 0 && miss(FP, ids[0], 8, 4, 1));
  bfc_lru_set_max_bytes(0);
  CHECK("lru_max_bytes_default", bfc_lru_max_bytes() == BFC_DEFAULT_LRU_BYTES);
}

/* More entries than the first hash table has buckets (1024): all found. */
static void test_many(void) {
  enum { N = 3000 };
  bfc_lru_clear();
  bf_cand c[5];
  int32_t ids[7];
  for (int i = 0; i < N; i++) {
    make_ids(ids, 7, 1000 + i);
    make_cands(c, 1, 5, i);
    bfc_lru_put(FP, ids, 7, 1, 5, c);
  }
  int found = 0;
  for (int i = 0; i < N; i++) {
    make_ids(ids, 7, 1000 + i);
    make_cands(c, 1, 5, i);
    found += hit_with(FP, ids, 7, 1, 5, c, 5);
  }
  CHECKF("lru_many_entries", found == N && entries() == N, "%d of %d found", found, N);
  CHECK("lru_many_clear", bfc_lru_clear() == N && entries() == 0);
}

/* Tagged keys of the whole-word functions (bfc_tagged_key): the tag, the
** argument, the ids, then the extra ids; they never meet per-mask entries
** of the same tokens, nor each other when the tag or the argument differs. */
static void test_tagged_keys(void) {
  bfc_lru_clear();
  int32_t ids[6], more[2] = {40, 41};
  make_ids(ids, 6, 7);
  bf_cand plain[10], seq5[10], seq3[6], score[2];
  make_cands(plain, 2, 5, 1);
  make_cands(seq5, 2, 5, 2);
  make_cands(seq3, 2, 3, 3);
  make_cands(score, 2, 1, 4);
  int32_t *k5 = bfc_tagged_key(BFC_TAG_SEQUENCES, 5, ids, 6, NULL, 0);
  int32_t *k3 = bfc_tagged_key(BFC_TAG_SEQUENCES, 3, ids, 6, NULL, 0);
  int32_t *sc = bfc_tagged_key(BFC_TAG_SCORE, 6, ids, 6, more, 2);
  CHECK("lru_tagged_key_layout", k5 && sc && k5[0] == BFC_TAG_SEQUENCES && k5[1] == 5 &&
                                   !memcmp(k5 + 2, ids, sizeof ids) && sc[0] == BFC_TAG_SCORE &&
                                   sc[1] == 6 && sc[8] == 40 && sc[9] == 41);
  bfc_lru_put(FP, ids, 6, 2, 5, plain);
  bfc_lru_put(FP, k5, 8, 2, 5, seq5);
  bfc_lru_put(FP, k3, 8, 2, 3, seq3);
  bfc_lru_put(FP, sc, 10, 2, 1, score);
  CHECK("lru_tagged_apart", hit_with(FP, ids, 6, 2, 5, plain, 5) &&
                              hit_with(FP, k5, 8, 2, 5, seq5, 5) &&
                              hit_with(FP, k3, 8, 2, 3, seq3, 3) &&
                              hit_with(FP, sc, 10, 2, 1, score, 1) && entries() == 4);
  sqlite3_free(k5);
  sqlite3_free(k3);
  sqlite3_free(sc);
  bfc_lru_clear();
}

int main(void) {
  if (!test_sqlite_api()) {
    printf("FAIL lru_setup: no SQLite routines\n");
    return 1;
  }
  test_keys_and_k();
  test_evict_entries();
  test_evict_bytes();
  test_many();
  test_tagged_keys();
  TL_EXIT();
}
