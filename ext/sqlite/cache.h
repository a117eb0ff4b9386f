/*
** cache.h — the memo cache of bertfill: an in-memory LRU shared by
** the whole process, in front of a table inside each database.
**
** A cache entry is keyed by
**   - the model's fingerprint (bf_model_fingerprint: config, vocabulary and
**     every weight byte), so another model never sees this model's results;
**   - the token ids the model sees ([CLS] ... [SEP]): two texts share an
**     entry exactly when the tokenizer turns them into the same tokens
**     ('今天 天气真[MASK]啊' and '今天天气真[MASK]啊' do; 'ab[MASK]' and
**     'a b[MASK]' do not).
** Its value is, for each mask in order, the top k candidates (token id and
** probability), together with that k: a lookup that needs more candidates
** than an entry holds is a miss.
** The whole-word functions (joint.c) keep their results in the same LRU and
** table, under keys that begin with a negative tag (bfc_tagged_key below):
** no token id is negative, so they never meet a per-mask entry, and
** databases written before them need no change.
**
** The table (created in the main schema on the first write):
**   CREATE TABLE bertfill_cache(
**     id INTEGER PRIMARY KEY,  -- write order: the oldest rows are evicted first
**     model TEXT NOT NULL,     -- model fingerprint (16 hex digits)
**     key BLOB NOT NULL,       -- token ids, 4-byte little-endian each
**     k INTEGER NOT NULL,      -- candidates per mask in result
**     result BLOB NOT NULL,    -- "BFC1", u32 masks, u32 k, then per mask and
**                              -- rank: i32 token id, f32 probability (LE)
**     created INTEGER NOT NULL,-- unix time of the write
**     UNIQUE(model, key))
** Writes never make a user's statement fail: a read-only database or
** connection, a database locked by another writer (the wait is capped at
** BFC_BUSY_BUDGET_MS of the connection's own busy timeout), or any other
** write error just skips the write (counted as cache_skipped).  The write is
** a statement on the user's own connection: inside an open transaction it
** joins that transaction (and is rolled back with it); in autocommit mode it
** commits at once, even from inside a read-only SELECT.  So in autocommit
** mode every miss is one commit (an fsync in rollback-journal mode):
** bert_prefill and fill_rows group the writes of each batch into one
** transaction (bfx_cache_put_batch, lookup.h); a long
** SELECT with many misses is faster inside BEGIN ... COMMIT, or on a WAL
** database with PRAGMA synchronous=NORMAL.
*/
#ifndef BERTFILL_SQLITE_CACHE_H
#define BERTFILL_SQLITE_CACHE_H

#include <stdint.h>
#include "sqlite3ext.h"
#include "bertfill.h"

#define BFC_TABLE "bertfill_cache"
#define BFC_DEFAULT_TABLE_LIMIT 100000 /* rows */
#define BFC_DEFAULT_LRU_ENTRIES 10000
#define BFC_DEFAULT_LRU_BYTES (64u << 20)
#define BFC_BUSY_BUDGET_MS 10

/* ---- keys of the whole-word functions ----
**   fill_sequences(text, k):   BFC_TAG_SEQUENCES, k, the ids of the text
**   bert_score(text, answer):  BFC_TAG_SCORE, n, the n ids of the text, the
**                              ids of the answer
**   fill_suspects, bert_correct, fill_suspects_rows:
**                              BFC_TAG_SPELLING, mode, the ids of the text, the
**                              sensitivity (a double's 8 bytes as 2 ids)
** The beam width is part of the key: a wider beam is no superset of a
** narrower one.  Values have the per-mask layout (see joint.h), the spelling
** checks' one of its own in that shape (spelling_memo.c). */
enum { BFC_TAG_SEQUENCES = -2, BFC_TAG_SCORE = -3, BFC_TAG_SPELLING = -4 };
/* tag, arg, ids[0..n), more[0..nmore) as one key of n + nmore + 2 ids
** (sqlite3_malloc'ed; NULL when out of memory). */
int32_t *bfc_tagged_key(int32_t tag, int32_t arg, const int32_t *ids, int n, const int32_t *more,
                        int nmore);

/* ---- process-wide LRU ---- */
/* Look up (fp, ids[0..n)) holding n_masks masks and at least k_need
** candidates per mask.  Returns 1 on a hit with *out = sqlite3_malloc'ed
** copy of n_masks * (*k_have) candidates, 0 on a miss, -1 out of memory. */
int bfc_lru_get(const char *fp, const int32_t *ids, int n, int n_masks, int k_need, int *k_have,
                bf_cand **out);
/* Store (or widen) an entry.  Silently does nothing when out of memory or
** when the entry alone is larger than the byte bound. */
void bfc_lru_put(const char *fp, const int32_t *ids, int n, int n_masks, int k, const bf_cand *c);
long bfc_lru_clear(void);             /* returns entries dropped */
void bfc_lru_set_max_entries(long n); /* n <= 0: default */
long bfc_lru_max_entries(void);
void bfc_lru_set_max_bytes(size_t n); /* n == 0: default (no SQL function sets it) */
size_t bfc_lru_max_bytes(void);
void bfc_lru_usage(long *entries, size_t *bytes);

/* ---- cache table of one database ---- */
/* Same contract as bfc_lru_get, reading main.bertfill_cache (a missing
** table, a malformed row or any read error is a miss). */
int bfc_table_get(sqlite3 *db, const char *fp, const int32_t *ids, int n, int n_masks, int k_need,
                  int vocab, int *k_have, bf_cand **out);
/* Write an entry (replacing the one with the same key) and evict the oldest
** rows beyond limit now and then.  Returns 1 when written, 0 when skipped. */
int bfc_table_put(sqlite3 *db, const char *fp, const int32_t *ids, int n, int n_masks, int k,
                  const bf_cand *c, int64_t limit, int64_t *writes_since_trim);
/* Group many writes into one transaction (one commit, one fsync instead of
** one per row) when the connection is in autocommit mode and runs no write
** statement: creates the table if needed and opens a savepoint.  Returns 1
** when a group was opened; bfc_group_end then commits it (1) or, when the
** commit fails (e.g. SQLITE_BUSY), rolls the group back (0). */
int bfc_group_begin(sqlite3 *db);
int bfc_group_end(sqlite3 *db);
/* The number of rows of main.bertfill_cache (0 when there is no table),
** or -1 when it cannot be read. */
int64_t bfc_table_rows(sqlite3 *db);
/* How many rows the cache table of db holds at most: limit (the connection's
** bert_cache_limit) when the cache writes the table (table_on: mode 'on')
** and db's main database is writable; else 0 (all the cache holds is in the
** LRU, bfc_lru_max_entries).  What bert_prefill and fill_rows count on. */
int64_t bfc_table_capacity(sqlite3 *db, int table_on, int64_t limit);
/* Evict the oldest rows beyond limit.  SQLITE_OK or an error code. */
int bfc_table_trim(sqlite3 *db, int64_t limit);
/* Delete every row (all models).  SQLITE_OK with *deleted, or an error with
** *err (sqlite3_malloc'ed). */
int bfc_table_clear(sqlite3 *db, int64_t *deleted, char **err);

#endif
