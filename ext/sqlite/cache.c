/*
** cache.c — the memo cache: a process-wide LRU in memory, in front of the
** bertfill_cache table of each database.  See cache.h for the key,
** the value, the table layout and the rules for writes.
*/
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3
#include "cache.h"

int32_t *bfc_tagged_key(int32_t tag, int32_t arg, const int32_t *ids, int n, const int32_t *more,
                        int nmore) {
  int32_t *key = sqlite3_malloc64(((size_t)n + (size_t)nmore + 2) * sizeof *key);
  if (!key) return NULL;
  key[0] = tag;
  key[1] = arg;
  if (n > 0) memcpy(key + 2, ids, (size_t)n * sizeof *ids);
  if (nmore > 0) memcpy(key + 2 + n, more, (size_t)nmore * sizeof *more);
  return key;
}

/* ======================================================================
** LRU: hash table (chained) + doubly linked recency list, one mutex.
** An entry is one malloc: the struct, then the ids, then the candidates.
** ====================================================================== */
typedef struct lru_ent {
  struct lru_ent *prev, *next; /* recency: lru.head.next is the newest */
  struct lru_ent *hnext;       /* hash chain */
  uint64_t h;
  char fp[17];
  int n, n_masks, k;
  size_t bytes;
  int32_t *ids;
  bf_cand *c;
} lru_ent;

static struct {
  pthread_mutex_t mu;
  lru_ent head; /* sentinel of the recency list */
  lru_ent **tab;
  size_t nbuckets; /* power of two (0 before first use) */
  long count;
  size_t bytes;
  long max_entries;
  size_t max_bytes;
} lru = {PTHREAD_MUTEX_INITIALIZER,
         {&lru.head, &lru.head, 0, 0, "", 0, 0, 0, 0, 0, 0},
         0,
         0,
         0,
         0,
         BFC_DEFAULT_LRU_ENTRIES,
         BFC_DEFAULT_LRU_BYTES};

/* Fork.  A thread of the parent holding the LRU's mutex at fork() would
** leave it held, forever, in the child, and the LRU half changed.  So the
** mutex is taken before fork() (pthread_atfork; no other lock is ever taken
** under it, and it is held only for a lookup, an insertion or an eviction)
** and given back after it, in the parent and in the child: the child gets
** the LRU whole, as it was between two operations. */
static pthread_once_t lru_once = PTHREAD_ONCE_INIT;
static void lru_before_fork(void) { pthread_mutex_lock(&lru.mu); }
static void lru_after_fork(void) { pthread_mutex_unlock(&lru.mu); }
static void lru_at_fork(void) { pthread_atfork(lru_before_fork, lru_after_fork, lru_after_fork); }

/* The LRU's mutex, taken (the fork handlers set up on first use). */
static void lru_lock(void) {
  pthread_once(&lru_once, lru_at_fork);
  pthread_mutex_lock(&lru.mu);
}

static uint64_t key_hash(const char *fp, const int32_t *ids, int n) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a offset */
  for (const char *p = fp; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
  for (int i = 0; i < n; i++) {
    h ^= (uint32_t)ids[i];
    h *= 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
  }
  return h ^ (uint64_t)n;
}

static lru_ent **lru_slot(uint64_t h, const char *fp, const int32_t *ids, int n) {
  lru_ent **pp = &lru.tab[h & (lru.nbuckets - 1)];
  for (; *pp; pp = &(*pp)->hnext) {
    lru_ent *e = *pp;
    if (e->h == h && e->n == n && strcmp(e->fp, fp) == 0 &&
        memcmp(e->ids, ids, (size_t)n * sizeof *ids) == 0)
      return pp;
  }
  return pp;
}

static void list_unlink(lru_ent *e) {
  e->prev->next = e->next;
  e->next->prev = e->prev;
}
static void list_push_front(lru_ent *e) {
  e->next = lru.head.next;
  e->prev = &lru.head;
  lru.head.next->prev = e;
  lru.head.next = e;
}

static void lru_remove(lru_ent *e) {
  lru_ent **pp = &lru.tab[e->h & (lru.nbuckets - 1)];
  while (*pp != e) pp = &(*pp)->hnext;
  *pp = e->hnext;
  list_unlink(e);
  lru.count--;
  lru.bytes -= e->bytes;
  free(e);
}

static void lru_evict(void) {
  while (lru.count > 0 && (lru.count > lru.max_entries || lru.bytes > lru.max_bytes))
    lru_remove(lru.head.prev);
}

/* Make room for one more entry in the hash table (called with the lock). */
static int lru_grow(void) {
  if (lru.nbuckets && (size_t)lru.count < lru.nbuckets) return 1;
  size_t nb = lru.nbuckets ? lru.nbuckets * 2 : 1024;
  lru_ent **t = calloc(nb, sizeof *t);
  if (!t) return lru.nbuckets != 0; /* keep going with long chains */
  for (size_t i = 0; i < lru.nbuckets; i++) {
    lru_ent *e = lru.tab[i];
    while (e) {
      lru_ent *nx = e->hnext;
      e->hnext = t[e->h & (nb - 1)];
      t[e->h & (nb - 1)] = e;
      e = nx;
    }
  }
  free(lru.tab);
  lru.tab = t;
  lru.nbuckets = nb;
  return 1;
}

int bfc_lru_get(const char *fp, const int32_t *ids, int n, int n_masks, int k_need, int *k_have,
                bf_cand **out) {
  uint64_t h = key_hash(fp, ids, n);
  int rc = 0;
  *out = NULL;
  lru_lock();
  if (lru.nbuckets) {
    lru_ent *e = *lru_slot(h, fp, ids, n);
    if (e && e->k >= k_need && e->n_masks == n_masks) {
      size_t sz = (size_t)e->n_masks * (size_t)e->k * sizeof(bf_cand);
      bf_cand *c = sqlite3_malloc64(sz ? sz : 1);
      if (!c) rc = -1;
      else {
        if (sz) memcpy(c, e->c, sz);
        *out = c;
        *k_have = e->k;
        list_unlink(e);
        list_push_front(e);
        rc = 1;
      }
    }
  }
  pthread_mutex_unlock(&lru.mu);
  return rc;
}

void bfc_lru_put(const char *fp, const int32_t *ids, int n, int n_masks, int k, const bf_cand *c) {
  size_t nc = (size_t)n_masks * (size_t)k;
  size_t bytes = sizeof(lru_ent) + (size_t)n * sizeof(int32_t) + nc * sizeof(bf_cand);
  if (n < 0 || k < 1 || strlen(fp) > 16) return;
  uint64_t h = key_hash(fp, ids, n);
  lru_lock();
  if (bytes > lru.max_bytes || lru.max_entries < 1 || !lru_grow()) goto done;
  lru_ent **pp = lru_slot(h, fp, ids, n);
  if (*pp) {
    lru_ent *old = *pp;
    if (old->k >= k && old->n_masks == n_masks) { /* already as good */
      list_unlink(old);
      list_push_front(old);
      goto done;
    }
    lru_remove(old);
    pp = lru_slot(h, fp, ids, n);
  }
  lru_ent *e = malloc(bytes);
  if (!e) goto done;
  memset(e, 0, sizeof *e);
  e->h = h;
  memcpy(e->fp, fp, strlen(fp) + 1);
  e->n = n;
  e->n_masks = n_masks;
  e->k = k;
  e->bytes = bytes;
  e->c = (bf_cand *)(e + 1); /* candidates first: 8-byte aligned */
  e->ids = (int32_t *)(e->c + nc);
  memcpy(e->c, c, nc * sizeof *c);
  memcpy(e->ids, ids, (size_t)n * sizeof *ids);
  e->hnext = NULL;
  *pp = e;
  list_push_front(e);
  lru.count++;
  lru.bytes += bytes;
  lru_evict();
done:
  pthread_mutex_unlock(&lru.mu);
}

long bfc_lru_clear(void) {
  lru_lock();
  long n = lru.count;
  while (lru.count > 0) lru_remove(lru.head.prev);
  pthread_mutex_unlock(&lru.mu);
  return n;
}

/* New bounds (0: keep that one), evicting what no longer fits. */
static void lru_set_bounds(long max_entries, size_t max_bytes) {
  lru_lock();
  if (max_entries > 0) lru.max_entries = max_entries;
  if (max_bytes > 0) lru.max_bytes = max_bytes;
  lru_evict();
  pthread_mutex_unlock(&lru.mu);
}

void bfc_lru_set_max_entries(long n) { lru_set_bounds(n > 0 ? n : BFC_DEFAULT_LRU_ENTRIES, 0); }
void bfc_lru_set_max_bytes(size_t n) { lru_set_bounds(0, n > 0 ? n : BFC_DEFAULT_LRU_BYTES); }

long bfc_lru_max_entries(void) {
  lru_lock();
  long n = lru.max_entries;
  pthread_mutex_unlock(&lru.mu);
  return n;
}

size_t bfc_lru_max_bytes(void) {
  lru_lock();
  size_t n = lru.max_bytes;
  pthread_mutex_unlock(&lru.mu);
  return n;
}

void bfc_lru_usage(long *entries, size_t *bytes) {
  lru_lock();
  *entries = lru.count;
  *bytes = lru.bytes;
  pthread_mutex_unlock(&lru.mu);
}

/* ======================================================================
** Cache table.
** ====================================================================== */
static const char *const create_sql =
  "CREATE TABLE IF NOT EXISTS main." BFC_TABLE "(\n"
  "  id INTEGER PRIMARY KEY,  -- write order: the oldest rows are evicted first\n"
  "  model TEXT NOT NULL,     -- bertfill model fingerprint\n"
  "  key BLOB NOT NULL,       -- token ids the model sees, int32 little-endian\n"
  "  k INTEGER NOT NULL,      -- candidates per mask in result\n"
  "  result BLOB NOT NULL,    -- 'BFC1', u32 masks, u32 k, (i32 id, f32 prob) per mask and rank\n"
  "  created INTEGER NOT NULL,-- unix time of the write\n"
  "  UNIQUE(model, key))";

static void put_u32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)v;
  p[1] = (unsigned char)(v >> 8);
  p[2] = (unsigned char)(v >> 16);
  p[3] = (unsigned char)(v >> 24);
}
static uint32_t get_u32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* ids as 4-byte little-endian integers (sqlite3_malloc'ed). */
static unsigned char *encode_key(const int32_t *ids, int n) {
  unsigned char *k = sqlite3_malloc64((size_t)n * 4 + 1);
  if (k)
    for (int i = 0; i < n; i++) put_u32(k + 4 * (size_t)i, (uint32_t)ids[i]);
  return k;
}

static int table_exists(sqlite3 *db) {
  sqlite3_stmt *st = NULL;
  int yes = 0;
  if (sqlite3_prepare_v2(db,
                         "SELECT 1 FROM main.sqlite_schema WHERE type='table' AND name='" BFC_TABLE
                         "'",
                         -1, &st, NULL) == SQLITE_OK)
    yes = sqlite3_step(st) == SQLITE_ROW;
  sqlite3_finalize(st);
  return yes;
}

int bfc_table_get(sqlite3 *db, const char *fp, const int32_t *ids, int n, int n_masks, int k_need,
                  int vocab, int *k_have, bf_cand **out) {
  sqlite3_stmt *st = NULL;
  int rc = 0;
  *out = NULL;
  /* A missing table fails to prepare: that is a miss. */
  if (sqlite3_prepare_v2(db, "SELECT k, result FROM main." BFC_TABLE " WHERE model=?1 AND key=?2",
                         -1, &st, NULL) != SQLITE_OK) {
    sqlite3_finalize(st);
    return sqlite3_errcode(db) == SQLITE_NOMEM ? -1 : 0;
  }
  unsigned char *key = encode_key(ids, n);
  if (!key) {
    sqlite3_finalize(st);
    return -1;
  }
  sqlite3_bind_text(st, 1, fp, -1, SQLITE_STATIC);
  sqlite3_bind_blob(st, 2, key, n * 4, SQLITE_STATIC);
  if (sqlite3_step(st) == SQLITE_ROW) {
    int64_t k = sqlite3_column_int64(st, 0);
    const unsigned char *b = sqlite3_column_blob(st, 1);
    int64_t len = sqlite3_column_bytes(st, 1);
    /* Trust nothing read from the file: shape, ids and probabilities. */
    if (b && len >= 12 && memcmp(b, "BFC1", 4) == 0 && get_u32(b + 4) == (uint32_t)n_masks &&
        get_u32(b + 8) == (uint64_t)k && k >= k_need && k >= 1 && k <= BF_MAX_K &&
        len == 12 + (int64_t)n_masks * k * 8) {
      size_t nc = (size_t)n_masks * (size_t)k;
      bf_cand *c = sqlite3_malloc64(nc ? nc * sizeof *c : 1);
      if (!c) rc = -1;
      else {
        int good = 1;
        for (size_t i = 0; i < nc && good; i++) {
          uint32_t id = get_u32(b + 12 + 8 * i), pb = get_u32(b + 16 + 8 * i);
          float p;
          memcpy(&p, &pb, 4);
          c[i].id = (int32_t)id;
          c[i].prob = p;
          if ((int64_t)id >= vocab || !(p >= 0.0f && p <= 1.0f)) good = 0;
        }
        if (good) {
          *out = c;
          *k_have = (int)k;
          rc = 1;
        } else sqlite3_free(c);
      }
    }
  }
  sqlite3_finalize(st);
  sqlite3_free(key);
  return rc;
}

/* The connection's busy timeout in ms, or -1 when it cannot be read.  0
** means no handler or an application's own handler (left alone). */
static int busy_timeout(sqlite3 *db) {
  sqlite3_stmt *st = NULL;
  int ms = -1;
  if (sqlite3_prepare_v2(db, "PRAGMA busy_timeout", -1, &st, NULL) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW)
    ms = sqlite3_column_int(st, 0);
  sqlite3_finalize(st);
  return ms;
}

static int write_row(sqlite3 *db, const char *fp, const unsigned char *key, int keylen,
                     const unsigned char *val, int vallen, int k) {
  sqlite3_stmt *st = NULL;
  static const char *ins = "INSERT OR REPLACE INTO main." BFC_TABLE
                           "(model, key, k, result, created) VALUES(?1, ?2, ?3, ?4, ?5)";
  int rc = sqlite3_prepare_v2(db, ins, -1, &st, NULL);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(st);
    st = NULL;
    if (rc == SQLITE_NOMEM || table_exists(db)) return rc;
    rc = sqlite3_exec(db, create_sql, NULL, NULL, NULL);
    if (rc != SQLITE_OK) return rc;
    rc = sqlite3_prepare_v2(db, ins, -1, &st, NULL);
    if (rc != SQLITE_OK) {
      sqlite3_finalize(st);
      return rc;
    }
  }
  sqlite3_bind_text(st, 1, fp, -1, SQLITE_STATIC);
  sqlite3_bind_blob(st, 2, key, keylen, SQLITE_STATIC);
  sqlite3_bind_int(st, 3, k);
  sqlite3_bind_blob(st, 4, val, vallen, SQLITE_STATIC);
  sqlite3_bind_int64(st, 5, (sqlite3_int64)time(NULL));
  rc = sqlite3_step(st);
  sqlite3_finalize(st);
  return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

int bfc_table_put(sqlite3 *db, const char *fp, const int32_t *ids, int n, int n_masks, int k,
                  const bf_cand *c, int64_t limit, int64_t *writes_since_trim) {
  if (sqlite3_db_readonly(db, "main") != 0) return 0; /* read-only file or connection */
  size_t nc = (size_t)n_masks * (size_t)k;
  size_t vallen = 12 + nc * 8;
  if (vallen > 0x7fffffff || (size_t)n * 4 > 0x7fffffff) return 0;
  unsigned char *key = encode_key(ids, n);
  unsigned char *val = sqlite3_malloc64(vallen);
  int written = 0;
  if (key && val) {
    memcpy(val, "BFC1", 4);
    put_u32(val + 4, (uint32_t)n_masks);
    put_u32(val + 8, (uint32_t)k);
    for (size_t i = 0; i < nc; i++) {
      uint32_t pb;
      memcpy(&pb, &c[i].prob, 4);
      put_u32(val + 12 + 8 * i, (uint32_t)c[i].id);
      put_u32(val + 16 + 8 * i, pb);
    }
    /* Wait for another writer at most BFC_BUSY_BUDGET_MS, not the
    ** connection's full busy timeout (Python's default is 5 s). */
    int old = busy_timeout(db);
    if (old > BFC_BUSY_BUDGET_MS) sqlite3_busy_timeout(db, BFC_BUSY_BUDGET_MS);
    int rc = write_row(db, fp, key, n * 4, val, (int)vallen, k);
    if (rc == SQLITE_OK) {
      written = 1;
      int64_t every = limit / 64 > 1 ? limit / 64 : 1;
      if (++*writes_since_trim >= every) {
        *writes_since_trim = 0;
        bfc_table_trim(db, limit);
      }
    }
    if (old > BFC_BUSY_BUDGET_MS) sqlite3_busy_timeout(db, old);
  }
  sqlite3_free(key);
  sqlite3_free(val);
  return written;
}

int bfc_group_begin(sqlite3 *db) {
  if (!sqlite3_get_autocommit(db) || sqlite3_db_readonly(db, "main") != 0) return 0;
  /* A running write statement (INSERT ... SELECT bert_prefill(...)) already
  ** holds a transaction that our writes join; RELEASE would fail under it. */
  for (sqlite3_stmt *s = sqlite3_next_stmt(db, NULL); s; s = sqlite3_next_stmt(db, s))
    if (sqlite3_stmt_busy(s) && !sqlite3_stmt_readonly(s)) return 0;
  int old = busy_timeout(db);
  if (old > BFC_BUSY_BUDGET_MS) sqlite3_busy_timeout(db, BFC_BUSY_BUDGET_MS);
  /* The table is created outside the group: rolling back a schema change
  ** would abort the user's running statement. */
  int ok = table_exists(db) || sqlite3_exec(db, create_sql, NULL, NULL, NULL) == SQLITE_OK;
  if (ok) ok = sqlite3_exec(db, "SAVEPOINT bertfill_cache_group", NULL, NULL, NULL) == SQLITE_OK;
  if (old > BFC_BUSY_BUDGET_MS) sqlite3_busy_timeout(db, old);
  return ok;
}

int bfc_group_end(sqlite3 *db) {
  int old = busy_timeout(db);
  if (old > BFC_BUSY_BUDGET_MS) sqlite3_busy_timeout(db, BFC_BUSY_BUDGET_MS);
  int ok = sqlite3_exec(db, "RELEASE bertfill_cache_group", NULL, NULL, NULL) == SQLITE_OK;
  if (!ok) {
    sqlite3_exec(db, "ROLLBACK TO bertfill_cache_group", NULL, NULL, NULL);
    if (sqlite3_exec(db, "RELEASE bertfill_cache_group", NULL, NULL, NULL) != SQLITE_OK &&
        !sqlite3_get_autocommit(db))
      sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
  }
  if (old > BFC_BUSY_BUDGET_MS) sqlite3_busy_timeout(db, old);
  return ok;
}

int64_t bfc_table_rows(sqlite3 *db) {
  if (!table_exists(db)) return 0;
  sqlite3_stmt *st = NULL;
  int64_t n = -1;
  if (sqlite3_prepare_v2(db, "SELECT count(*) FROM main." BFC_TABLE, -1, &st, NULL) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW)
    n = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return n;
}

int64_t bfc_table_capacity(sqlite3 *db, int table_on, int64_t limit) {
  return table_on && sqlite3_db_readonly(db, "main") == 0 ? limit : 0;
}

int bfc_table_trim(sqlite3 *db, int64_t limit) {
  sqlite3_stmt *st = NULL;
  if (limit < 1) limit = 1;
  int rc = sqlite3_prepare_v2(db,
                              "DELETE FROM main." BFC_TABLE
                              " WHERE id < (SELECT id FROM main." BFC_TABLE
                              " ORDER BY id DESC LIMIT 1 OFFSET ?1)",
                              -1, &st, NULL);
  if (rc == SQLITE_OK) {
    sqlite3_bind_int64(st, 1, limit - 1);
    rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) rc = SQLITE_OK;
  }
  sqlite3_finalize(st);
  return rc;
}

int bfc_table_clear(sqlite3 *db, int64_t *deleted, char **err) {
  *deleted = 0;
  if (!table_exists(db)) return SQLITE_OK;
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(db, "DELETE FROM main." BFC_TABLE, -1, &st, NULL);
  if (rc == SQLITE_OK) {
    rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) {
      rc = SQLITE_OK;
      *deleted = sqlite3_changes(db);
    }
  }
  if (rc != SQLITE_OK) *err = sqlite3_mprintf("%s", sqlite3_errmsg(db));
  sqlite3_finalize(st);
  return rc;
}
