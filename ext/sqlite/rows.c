/*
** rows.c — fill_rows(sql [, k]), a table-valued function that fills a
** whole column at batch speed, whatever its number of rows:
**
**   SELECT * FROM fill_rows('SELECT rowid, text FROM t');
**
**   key  text                filled            masks  error
**   ---  ------------------  ----------------  -----  -----
**   1    今天天气真[MASK]啊  今天天气真好啊    NULL   NULL
**   2    NULL                NULL              NULL   NULL
**
**   UPDATE t SET filled = f.filled                    -- the whole column,
**     FROM fill_rows('SELECT rowid, text FROM t') AS f  -- one statement
**    WHERE t.rowid = f.key;                           -- (SQLite 3.33+)
**
** The query (first argument) runs on the same connection and must be one
** read-only SELECT returning two columns, (key, text); it cannot have
** parameters.  Each of its rows gives one row of fill_rows, in the query's
** order:
**   key     the query's first column, as it is
**   text    the query's second column, as it is
**   filled  the text with each [MASK] filled, exactly what bert_fill(text)
**           returns; the text itself when it has no [MASK]; NULL for a NULL
**           text and for a text that cannot be filled
**   masks   with k given: JSON, per mask (left to right) its top k
**           candidates, best first:
**             [[{"token":"好","token_id":1962,"score":0.62},...],...]
**           ([] for a text without [MASK]); NULL without k
**   error   NULL, or why this text cannot be filled (invalid UTF-8, longer
**           than the model takes, ...: bert_fill's message, "fill_rows: ..."),
**           counted in bertfill_stats (err_input, err_toolong).  One bad
**           row does not stop the others; select WHERE error IS NOT NULL.
**   sql, k  HIDDEN: the arguments (k from 1 to 1000, at most the vocabulary)
**   mode    HIDDEN: fill_rows(sql, k, 'joint') (k may be NULL) fills each
**           text's masks together, exactly as bert_fill(text, 'joint')
**           (joint.h; k: the beam's width, default as there); texts go one
**           at a time (each is a beam search of its own), `masks` is NULL
** An error of the query itself (it does not prepare, it writes, it has not
** two columns, it fails while running), no model, out of memory, or an
** encoder that stays busy past bert_busy_timeout stops the statement.
**
** How: rows are read from the query in batches: up to
** BFX_ROWS_BATCH_MAX_ROWS rows, and no more once the texts to compute
** fill one encoder run (BFX_BATCH_MAX_SEQS sequences / BFX_BATCH_MAX_TOKENS
** tokens, bounds.h; the texts' side of a batch is column_batch.c, which
** bert_prefill reads with too).  Each text is tokenized; a text found
** in the memo cache (the LRU, then the table in mode 'on') is answered from
** it, a repeat within the batch shares its sequence, and the rest go
** through the encoder in one run without padding (an encoder slot of the
** overload guard, guard.c).  Memory stays bounded by one batch.
** Not through the batcher (batcher.c), as bert_prefill: its runs are
** already full (measured, docs/columns.md: 31.9 of 32 sequences per run on
** 3,000 eval sentences), so a run has no room to share, and a bert_fill
** caller merged into one would wait a whole run (50 ms there) instead of
** running its own (2 ms) after it.  It takes the guard's slot as the
** batcher's leader does; the guard serves in order (guard.c), so callers
** that wait meanwhile run before its next batch, not after several.
**
** What it computes goes to the cache as bert_rows_cache() says (settings.c):
** 'room' (default) to the LRU, and to the table only while the table has
** fewer rows than bert_cache_limit (counted when the scan starts): a big
** column never evicts what other queries put there, nor grows the table
** past its bound; 'all' to both, evicting the oldest table rows as
** bert_fill does; 'none' nowhere.  bert_cache('off') reads and writes
** nothing; a read-only database gets no table writes.
**
** Progress goes to stderr as for bert_prefill (BERTFILL_PROGRESS):
**   fill_rows: 1200 rows, 1100 computed, 85 rows/s
**   fill_rows: done: 2000 rows, 1850 computed, 150 cached or repeated, 0 errors, 21.8 s
** bertfill_stats counts rows, rows_batches and rows_seqs (and the encoder's
** own counters); fill_rows counts no calls, hits or misses.
**
** Eponymous-only, DIRECTONLY (registered in entry.c): it runs the SQL it is
** given, so never from a view or trigger.
*/
#include <stdio.h>
#include <string.h>

#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3
#include "rows.h"
#include "bounds.h"
#include "column_batch.h"
#include "conn.h"
#include "errors.h"
#include "joint.h"
#include "lookup.h"
#include "stats.h"
#include "text.h"
#include "tvf.h"
#include "util.h"

enum { COL_KEY, COL_TEXT, COL_FILLED, COL_MASKS, COL_ERROR, COL_SQL, COL_K, COL_MODE };

/* idxNum bit of the plan: the mode ('joint') is the last argument. */
enum { ROWS_MODE = 4 };

#define MAX_ROWS BFX_ROWS_BATCH_MAX_ROWS

typedef struct rows_vtab {
  sqlite3_vtab base;
  bfx_conn *c;
} rows_vtab;

/* One row of the query, from reading to answering. */
typedef struct row {
  sqlite3_value *key, *text; /* as the query returned them */
  const char *s;             /* the text's bytes, inside text (NULL: a NULL text) */
  int n;
  int n_masks;
  int *off;     /* byte offset of each "[MASK]" in s */
  int seq;      /* its sequence in the batch's encoder run, or -1 */
  bf_cand *hit; /* or its candidates from the cache, hit_k per mask */
  int hit_k;
  char *filled, *masks, *error; /* the answer (NULL: SQL NULL) */
  int filled_n;
} row;

typedef struct rows_cursor {
  sqlite3_vtab_cursor base;
  bfx_conn *c;
  bf_model *m;         /* retained while the cursor has a query */
  sqlite3_stmt *query; /* the user's SELECT */
  char *sql;
  int k;       /* candidates per mask in `masks`; 0: no masks column */
  int joint;   /* 'joint': each text's masks filled together (joint.h), one text at a time */
  int beam;    /* its beam width: k, or BFX_DEFAULT_K as bert_fill(text, 'joint') */
  int k_enc;   /* candidates per mask the encoder computes (cache entries) */
  int done;    /* the query has no more rows */
  int pending; /* rows[nrows] was read but waits for the next batch (its tokens wait in seqs) */
  row rows[MAX_ROWS + 1];
  int nrows, at;         /* rows of this batch, and the one the cursor is on */
  bfx_column_batch seqs; /* the sequences of the batch's encoder run */
  int64_t table_room;    /* rows the cache table may still take ('room') */
  sqlite3_int64 rowid;
  bfx_column_progress progress;
  sqlite3_int64 read, computed, reused, errors;
} rows_cursor;

/* ---- the vtab ---- */

static int rows_connect(sqlite3 *db, void *aux, int argc, const char *const *argv,
                        sqlite3_vtab **ppVtab, char **pzErr) {
  (void)argc;
  (void)argv;
  (void)pzErr;
  int rc = sqlite3_declare_vtab(db, "CREATE TABLE x(key, text, filled TEXT, masks TEXT, "
                                    "error TEXT, sql HIDDEN, k HIDDEN, mode HIDDEN)");
  if (rc != SQLITE_OK) return rc;
  rows_vtab *v = sqlite3_malloc(sizeof *v);
  if (!v) return SQLITE_NOMEM;
  memset(v, 0, sizeof *v);
  v->c = aux;
  sqlite3_vtab_config(db, SQLITE_VTAB_DIRECTONLY);
  *ppVtab = &v->base;
  return SQLITE_OK;
}

static int rows_disconnect(sqlite3_vtab *pVtab) {
  sqlite3_free(pVtab);
  return SQLITE_OK;
}

static int rows_open(sqlite3_vtab *pVtab, sqlite3_vtab_cursor **ppCursor) {
  rows_cursor *cur = sqlite3_malloc(sizeof *cur);
  if (!cur) return SQLITE_NOMEM;
  memset(cur, 0, sizeof *cur);
  cur->c = ((rows_vtab *)pVtab)->c;
  *ppCursor = &cur->base;
  return SQLITE_OK;
}

static void row_clear(row *r) {
  sqlite3_value_free(r->key);
  sqlite3_value_free(r->text);
  sqlite3_free(r->off);
  sqlite3_free(r->hit);
  sqlite3_free(r->filled);
  sqlite3_free(r->masks);
  sqlite3_free(r->error);
  memset(r, 0, sizeof *r);
}

static void cursor_reset(rows_cursor *cur) {
  for (int i = 0; i <= MAX_ROWS; i++) row_clear(&cur->rows[i]);
  bfx_column_batch_free(&cur->seqs);
  sqlite3_finalize(cur->query);
  sqlite3_free(cur->sql);
  if (cur->m) bf_model_release(cur->m);
  bfx_conn *c = cur->c;
  memset((char *)cur + sizeof cur->base, 0, sizeof *cur - sizeof cur->base);
  cur->c = c;
}

static int rows_close(sqlite3_vtab_cursor *cursor) {
  cursor_reset((rows_cursor *)cursor);
  sqlite3_free(cursor);
  return SQLITE_OK;
}

/*
** The plan, as for fill_candidates (tvf.h): sql (argument 1) must come from
** an equality constraint (without one, xFilter reports the missing query);
** k (argument 2) is optional; a constraint that exists but is not usable in
** this plan returns SQLITE_CONSTRAINT so that SQLite picks another join
** order.  The cost is high and independent of any other table, so that in
**   UPDATE t SET ... FROM fill_rows(...) AS f WHERE t.rowid = f.key
** fill_rows runs once, as the outer loop, and t is looked up by rowid.
*/
static int rows_best_index(sqlite3_vtab *pVtab, sqlite3_index_info *info) {
  (void)pVtab;
  int rc = bfx_tvf_best_index(info, COL_SQL, COL_K);
  if (rc != SQLITE_OK || !(info->idxNum & BFX_TVF_TEXT)) return rc;
  /* the mode (argument 3), after sql and k */
  int argv_n = info->idxNum & BFX_TVF_K ? 2 : 1, unusable = 0;
  for (int i = 0; i < info->nConstraint; i++) {
    const struct sqlite3_index_constraint *cs = &info->aConstraint[i];
    if (cs->iColumn != COL_MODE || cs->op != SQLITE_INDEX_CONSTRAINT_EQ) continue;
    if (!cs->usable) {
      unusable = 1;
      continue;
    }
    info->aConstraintUsage[i].argvIndex = argv_n + 1;
    info->aConstraintUsage[i].omit = 1;
    info->idxNum |= ROWS_MODE;
    unusable = 0;
    break;
  }
  if (unusable) return SQLITE_CONSTRAINT;
  info->estimatedCost = 1e12;
  info->estimatedRows = 1000000;
  return SQLITE_OK;
}

/* ---- progress on stderr ---- */

static void progress(rows_cursor *cur, int final) {
  double secs;
  if (!bfx_column_progress_due(&cur->progress, final, &secs)) return;
  if (final)
    fprintf(stderr,
            "fill_rows: done: %lld rows, %lld computed, %lld cached or repeated, %lld errors, "
            "%.1f s\n",
            (long long)cur->read, (long long)cur->computed, (long long)cur->reused,
            (long long)cur->errors, secs);
  else
    fprintf(stderr, "fill_rows: %lld rows, %lld computed, %.0f rows/s\n", (long long)cur->read,
            (long long)cur->computed, secs > 0 ? (double)cur->read / secs : 0.0);
}

/* ---- one batch ---- */

/* r cannot be filled: why goes into the row (0), or -1 out of memory. */
static int row_error(rows_cursor *cur, row *r, bfx_err *why) {
  if (why->rc == SQLITE_NOMEM) return -1;
  bfx_err_count(why);
  r->error = sqlite3_mprintf("%s", why->msg);
  if (!r->error) return -1;
  cur->errors++;
  return 0;
}

/* r's filled text: each [MASK] replaced by the first of its candidates in c
** (stride per mask).  SQLITE_OK or SQLITE_NOMEM. */
static int set_filled(rows_cursor *cur, row *r, const bf_cand *c, size_t stride) {
  sqlite3_str *o = sqlite3_str_new(NULL);
  bfx_append_filled(o, cur->m, r->s, r->n, r->off, r->n_masks, c, stride);
  r->filled_n = sqlite3_str_length(o);
  if (sqlite3_str_errcode(o) != SQLITE_OK) {
    sqlite3_free(sqlite3_str_finish(o));
    return SQLITE_NOMEM;
  }
  r->filled = sqlite3_str_finish(o);
  return r->filled ? SQLITE_OK : SQLITE_NOMEM;
}

/* 'joint': the best whole fill of r (tokens t, masks found), exactly what
** bert_fill(text, 'joint') gives with the default beam: one text at a time,
** through the memo cache as that function uses it.  0, or -1 out of memory. */
static int joint_row(rows_cursor *cur, row *r, const bf_tokens *t) {
  bfx_result res;
  memset(&res, 0, sizeof res);
  bfx_err why = BFX_ERR_NONE;
  int rc = bfx_joint_fill(cur->c, cur->m, t, cur->beam, BFX_JOINT_CALL, &res, &why);
  if (rc == SQLITE_OK) {
    rc = set_filled(cur, r, res.c, (size_t)res.k); /* row 0: the best fill */
    cur->computed++;
  }
  bfx_result_clear(&res);
  sqlite3_free(r->off);
  r->off = NULL;
  if (rc == SQLITE_NOMEM) return -1;
  return rc == SQLITE_OK ? 0 : row_error(cur, r, &why);
}

/* Read the text of r: r gets an error, a plain answer, cached candidates
** or the sequence it repeats (returns 0), or it is a new sequence of the
** run (r->seq, returns 1), or it waits for the next run (cur->pending,
** returns 1); -1 out of memory. */
static int read_text(rows_cursor *cur, row *r) {
  int n;
  r->seq = -1;
  int a = bfx_arg_text(r->text, &r->s, &n);
  if (a < 0) return -1;
  if (a == 0) return 0; /* NULL text: NULL filled */
  r->n = n;

  bf_tokens *t;
  bfx_err why = BFX_ERR_NONE;
  switch (bfx_column_batch_tokenize(&cur->seqs, "fill_rows", cur->m, r->s, n, &t, &why)) {
    case BFX_COLUMN_TEXT_NOMEM: return -1;
    case BFX_COLUMN_BAD: return row_error(cur, r, &why);
    case BFX_COLUMN_NO_MASK: /* nothing to fill: the text itself */
      r->filled = sqlite3_malloc64((size_t)n + 1);
      if (!r->filled) return -1;
      memcpy(r->filled, r->s, (size_t)n);
      r->filled[n] = 0;
      r->filled_n = n;
      return 0;
    case BFX_COLUMN_FILL: break;
  }
  r->n_masks = t->n_masks;
  r->off = sqlite3_malloc64((size_t)t->n_masks * sizeof *r->off);
  if (!r->off) return -1;
  if (bfx_find_masks("fill_rows", cur->m, r->s, n, t, r->off, &why) != SQLITE_OK)
    return why.rc == SQLITE_NOMEM ? -1 : row_error(cur, r, &why);
  if (cur->joint) return joint_row(cur, r, t);

  /* A hit in the table is not copied into the LRU. */
  bfx_result res;
  switch (bfx_column_batch_place(&cur->seqs, cur->c, cur->m, cur->k > 0 ? cur->k : 1,
                                 BFX_GET_NO_LRU, &res, &r->seq)) {
    case BFX_COLUMN_NOMEM: return -1;
    case BFX_COLUMN_CACHED:
      r->hit = res.c;
      r->hit_k = res.k;
      cur->reused++;
      return 0;
    case BFX_COLUMN_REPEAT: cur->reused++; return 0;
    case BFX_COLUMN_NO_ROOM: cur->pending = 1; return 1;
    case BFX_COLUMN_NEW: return 1;
  }
  return 1;
}

/* Store the batch's computed candidates in the cache, as bert_rows_cache
** says. */
static void store_batch(rows_cursor *cur) {
  bfx_conn *c = cur->c;
  int64_t room;
  if (!bfx_cache_rows_store(c, cur->table_room, &room)) return;
  cur->table_room -= bfx_column_batch_store(&cur->seqs, c, cur->m, room);
}

/* The answer of r from its candidates c (k per mask). */
static int answer(rows_cursor *cur, row *r, const bf_cand *c, int k) {
  if (set_filled(cur, r, c, (size_t)k) != SQLITE_OK) return SQLITE_NOMEM;
  if (cur->k == 0) return SQLITE_OK;
  sqlite3_str *o = sqlite3_str_new(NULL);
  sqlite3_str_appendchar(o, 1, '[');
  for (int i = 0; i < r->n_masks; i++) {
    sqlite3_str_appendall(o, i ? ",[" : "[");
    for (int j = 0; j < cur->k; j++) {
      const bf_cand *cd = &c[(size_t)i * k + j];
      const char *tok = bf_model_token(cur->m, cd->id);
      sqlite3_str_appendall(o, j ? ",{\"token\":" : "{\"token\":");
      bfx_json_string(o, tok ? tok : "");
      sqlite3_str_appendf(o, ",\"token_id\":%d,\"score\":%.9g}", (int)cd->id, (double)cd->prob);
    }
    sqlite3_str_appendchar(o, 1, ']');
  }
  sqlite3_str_appendchar(o, 1, ']');
  if (sqlite3_str_errcode(o) != SQLITE_OK) {
    sqlite3_free(sqlite3_str_finish(o));
    return SQLITE_NOMEM;
  }
  r->masks = sqlite3_str_finish(o);
  return r->masks ? SQLITE_OK : SQLITE_NOMEM;
}

/* Run the encoder over the batch's sequences, store them, and answer every
** row of the batch. */
static int encode_and_answer(rows_cursor *cur, bfx_err *e) {
  bfx_column_batch *b = &cur->seqs;
  if (bfx_column_batch_encode(b, cur->m, cur->k_enc, e) != SQLITE_OK) {
    if (e->rc != SQLITE_NOMEM) {
      bfx_err where = *e; /* say where the error came from */
      bfx_errf(e, where.rc, where.kind, "fill_rows: %s", where.msg);
    }
    return e->rc;
  }
  if (b->n > 0) {
    bf_stats_add(BF_CT_ROWS_SEQS, (uint64_t)b->n);
    cur->computed += b->n;
    store_batch(cur);
  }
  int rc = SQLITE_OK;
  for (int i = 0; i < cur->nrows && rc == SQLITE_OK; i++) {
    row *r = &cur->rows[i];
    if (r->hit) rc = answer(cur, r, r->hit, r->hit_k);
    else if (r->seq >= 0) rc = answer(cur, r, bfx_column_batch_cands(b, r->seq), cur->k_enc);
    sqlite3_free(r->hit);
    sqlite3_free(r->off);
    r->hit = NULL;
    r->off = NULL;
  }
  if (rc != SQLITE_OK) bfx_err_nomem(e);
  return rc;
}

/* The next batch: read rows until the batch is full or the query ends,
** and answer them.  SQLITE_OK (cur->nrows may be 0 at the end), or an
** error in e. */
static int next_batch(rows_cursor *cur, bfx_err *e) {
  for (int i = 0; i < cur->nrows; i++) row_clear(&cur->rows[i]);
  bfx_column_batch_next(&cur->seqs); /* a text that did not fit the last run starts this one */
  int carried = cur->pending;
  if (carried) { /* and so does its row */
    row tmp = cur->rows[0];
    cur->rows[0] = cur->rows[cur->nrows];
    cur->rows[cur->nrows] = tmp;
    cur->rows[0].seq = 0;
  }
  cur->nrows = carried;
  cur->at = cur->pending = 0;
  while (!cur->done && cur->nrows < MAX_ROWS && !bfx_column_batch_full(&cur->seqs)) {
    int rc = sqlite3_step(cur->query);
    if (rc == SQLITE_DONE) {
      cur->done = 1;
      break;
    }
    if (rc != SQLITE_ROW) {
      sqlite3 *db = cur->c->db;
      if (rc == SQLITE_NOMEM) bfx_err_nomem(e);
      else
        bfx_errf(e, SQLITE_ERROR, BF_CT_ERR_INPUT, "fill_rows: the query failed: %s",
                 sqlite3_errmsg(db));
      return e->rc;
    }
    row *r = &cur->rows[cur->nrows];
    row_clear(r);
    r->key = sqlite3_value_dup(sqlite3_column_value(cur->query, 0));
    r->text = sqlite3_value_dup(sqlite3_column_value(cur->query, 1));
    cur->read++;
    bf_stats_add(BF_CT_ROWS, 1);
    if ((r->key && r->text ? read_text(cur, r) : -1) < 0) {
      bfx_err_nomem(e);
      return SQLITE_NOMEM;
    }
    if (cur->pending) break; /* no room in this run: the next batch starts with it */
    cur->nrows++;
  }
  if (cur->nrows > 0) {
    bf_stats_add(BF_CT_ROWS_BATCHES, 1);
    int rc = encode_and_answer(cur, e);
    if (rc != SQLITE_OK) return rc;
  }
  if (!cur->done || cur->pending) progress(cur, 0);
  else if (cur->read > 0) progress(cur, 1); /* once: no batch follows */
  return SQLITE_OK;
}

/* The next row: the next of this batch, else a new batch. */
static int advance(rows_cursor *cur) {
  cur->rowid++;
  if (++cur->at < cur->nrows) return SQLITE_OK;
  if (cur->done && !cur->pending) {
    cur->nrows = cur->at = 0;
    return SQLITE_OK;
  }
  bfx_err e = BFX_ERR_NONE;
  if (next_batch(cur, &e) != SQLITE_OK) {
    cur->done = 1;
    cur->pending = 0;
    cur->nrows = cur->at = 0;
    return bfx_error_vtab(cur->base.pVtab, &e);
  }
  return SQLITE_OK;
}

/* ---- the query ---- */

/* Prepare sql as the cursor's query and check it: one read-only SELECT
** of two columns, without parameters. */
int bfx_prepare_key_text_query(sqlite3 *db, const char *fname, const char *sql,
                               sqlite3_stmt **query, bfx_err *e) {
  const char *tail = NULL;
  int rc = sqlite3_prepare_v2(db, sql, -1, query, &tail);
  if (rc == SQLITE_NOMEM) {
    bfx_err_nomem(e);
    return rc;
  }
  if (rc != SQLITE_OK) {
    bfx_errf(e, SQLITE_ERROR, BF_CT_ERR_INPUT, "%s: the query does not prepare: %s", fname,
             sqlite3_errmsg(db));
    return SQLITE_ERROR;
  }
  const char *why = NULL;
  if (!*query) why = "is empty";
  else if (sqlite3_stmt_isexplain(*query)) why = "is an EXPLAIN";
  else if (!sqlite3_stmt_readonly(*query)) why = "writes to the database";
  if (!why && tail && *tail) { /* anything but spaces and comments after it? */
    sqlite3_stmt *more = NULL;
    rc = sqlite3_prepare_v2(db, tail, -1, &more, NULL);
    if (rc != SQLITE_OK || more) why = "has more than one statement";
    sqlite3_finalize(more);
  }
  if (why) {
    bfx_errf(e, SQLITE_ERROR, BF_CT_ERR_INPUT,
             "%s: the query %s; it must be one SELECT that returns (key, text), "
             "e.g. 'SELECT rowid, text FROM t'",
             fname, why);
    return SQLITE_ERROR;
  }
  int cols = sqlite3_column_count(*query);
  if (cols != 2) {
    bfx_errf(e, SQLITE_ERROR, BF_CT_ERR_INPUT,
             "%s: the query returns %d column%s; it must return 2: (key, text)", fname, cols,
             cols == 1 ? "" : "s");
    return SQLITE_ERROR;
  }
  int params = sqlite3_bind_parameter_count(*query);
  if (params > 0) {
    const char *name = sqlite3_bind_parameter_name(*query, 1);
    bfx_errf(e, SQLITE_ERROR, BF_CT_ERR_INPUT,
             "%s: the query has %d parameter%s (%s) that %s cannot bind; write "
             "the values into the query",
             fname, params, params == 1 ? "" : "s", name ? name : "?", fname);
    return SQLITE_ERROR;
  }
  return SQLITE_OK;
}

static int rows_filter(sqlite3_vtab_cursor *cursor, int idxNum, const char *idxStr, int argc,
                       sqlite3_value **argv) {
  (void)idxStr;
  rows_cursor *cur = (rows_cursor *)cursor;
  sqlite3_vtab *vt = cursor->pVtab;
  bfx_conn *c = cur->c;
  bfx_err e = BFX_ERR_NONE;
  cursor_reset(cur);
  cur->done = 1; /* until the query is ready */
  if (!(idxNum & BFX_TVF_TEXT) || argc < 1 || sqlite3_value_type(argv[0]) != SQLITE_TEXT) {
    bfx_errf(&e, SQLITE_ERROR, BF_CT_ERR_INPUT,
             "fill_rows: %s; use fill_rows(sql [, k]), e.g. "
             "SELECT * FROM fill_rows('SELECT rowid, text FROM t')",
             !(idxNum & BFX_TVF_TEXT) || argc < 1 ? "missing query argument"
                                                  : "the query must be a text");
    return bfx_error_vtab(vt, &e);
  }
  if (idxNum & ROWS_MODE) {
    sqlite3_value *v = argv[argc - 1];
    const char *z = (const char *)sqlite3_value_text(v);
    if (sqlite3_value_type(v) != SQLITE_NULL && !(z && sqlite3_stricmp(z, "joint") == 0)) {
      bfx_quote q;
      if (!z) return SQLITE_NOMEM;
      bfx_errf(&e, SQLITE_ERROR, BF_CT_ERR_INPUT,
               "fill_rows: the third argument must be 'joint' (got '%s'); fill_rows(sql [, k]) "
               "fills each [MASK] on its own",
               bfx_quoted(&q, z, sqlite3_value_bytes(v)));
      return bfx_error_vtab(vt, &e);
    }
    cur->joint = z != NULL;
  }
  sqlite3_int64 k; /* 0: no masks column; 'joint': the beam, as fill_sequences' k */
  int rc = bfx_tvf_k(vt, "fill_rows", cur->joint ? BFX_SEQUENCES_MAX_K : BF_MAX_K, 0, idxNum, argc,
                     argv, &k);
  if (rc != SQLITE_OK) return rc;
  cur->sql = sqlite3_mprintf("%s", (const char *)sqlite3_value_text(argv[0]));
  if (!cur->sql) return SQLITE_NOMEM;
  bf_model *m = bfx_conn_model_current(c, &e);
  if (!m) return bfx_error_vtab(vt, &e);
  bf_model_retain(m);
  cur->m = m;
  int vocab = bf_model_config(m)->vocab_size;
  cur->k = (int)(k < vocab ? k : vocab);
  if (cur->joint) { /* k is the beam's width; no masks column */
    cur->beam = cur->k > 0 ? cur->k : BFX_DEFAULT_K;
    cur->k = 0;
  }
  cur->k_enc = cur->k > BFX_MIN_K ? cur->k : BFX_MIN_K;
  if (cur->k_enc > vocab) cur->k_enc = vocab;
  if (bfx_prepare_key_text_query(cur->c->db, "fill_rows", cur->sql, &cur->query, &e) != SQLITE_OK) {
    rc = bfx_error_vtab(vt, &e);
    cursor_reset(cur);
    cur->done = 1;
    return rc;
  }
  cur->done = 0;
  cur->table_room = bfx_cache_rows_room(c);
  bfx_column_progress_start(&cur->progress);
  cur->rowid = 0;
  cur->at = -1;
  cur->nrows = 0;
  return advance(cur);
}

static int rows_next(sqlite3_vtab_cursor *cursor) { return advance((rows_cursor *)cursor); }

static int rows_eof(sqlite3_vtab_cursor *cursor) {
  rows_cursor *cur = (rows_cursor *)cursor;
  return cur->at >= cur->nrows;
}

static int rows_column(sqlite3_vtab_cursor *cursor, sqlite3_context *ctx, int col) {
  rows_cursor *cur = (rows_cursor *)cursor;
  const row *r = &cur->rows[cur->at];
  switch (col) {
    case COL_KEY: sqlite3_result_value(ctx, r->key); break;
    case COL_TEXT: sqlite3_result_value(ctx, r->text); break;
    case COL_FILLED:
      if (r->filled) sqlite3_result_text(ctx, r->filled, r->filled_n, SQLITE_TRANSIENT);
      break;
    case COL_MASKS:
      if (r->masks) sqlite3_result_text(ctx, r->masks, -1, SQLITE_TRANSIENT);
      else if (cur->k > 0 && r->filled) sqlite3_result_text(ctx, "[]", 2, SQLITE_STATIC);
      break;
    case COL_ERROR:
      if (r->error) sqlite3_result_text(ctx, r->error, -1, SQLITE_TRANSIENT);
      break;
    case COL_SQL: sqlite3_result_text(ctx, cur->sql, -1, SQLITE_TRANSIENT); break;
    case COL_K:
      if (cur->k > 0 || cur->joint) sqlite3_result_int(ctx, cur->joint ? cur->beam : cur->k);
      break;
    case COL_MODE:
      if (cur->joint) sqlite3_result_text(ctx, "joint", 5, SQLITE_STATIC);
      break;
  }
  return SQLITE_OK;
}

static int rows_rowid(sqlite3_vtab_cursor *cursor, sqlite_int64 *pRowid) {
  *pRowid = ((rows_cursor *)cursor)->rowid;
  return SQLITE_OK;
}

/* xCreate NULL: eponymous-only (no CREATE VIRTUAL TABLE); no xUpdate: read-only. */
const sqlite3_module bfx_rows_module = {
  .iVersion = 0,
  .xConnect = rows_connect,
  .xBestIndex = rows_best_index,
  .xDisconnect = rows_disconnect,
  .xOpen = rows_open,
  .xClose = rows_close,
  .xFilter = rows_filter,
  .xNext = rows_next,
  .xEof = rows_eof,
  .xColumn = rows_column,
  .xRowid = rows_rowid,
};
