/*
** sqlite_stats.c — the SQL face of bertfill's process-wide statistics
** (ext/stats.h) and of the optional per-call trace.
**
**   SELECT * FROM bertfill_stats;
**        -- one row per metric:
**        --   name      'calls', 'hit_lru', ... / 'call', 'encode', ... / 'batch_9_16'
**        --   kind      'counter' | 'gauge' | 'stage' | 'batch'
**        --   count     counter value / samples of a stage / encoder runs in a batch bucket
**        --   total_ms, mean_ms, p50_ms, p95_ms, p99_ms, max_ms   (stages only)
**        --   value     counter value, gauge value (seconds) or batch-bucket count;
**        --             NULL for stages
**   SELECT name, count, p50_ms, p95_ms, p99_ms FROM bertfill_stats WHERE kind = 'stage';
**   SELECT value FROM bertfill_stats WHERE name = 'encoder_runs';
**
**   SELECT bert_stats();                 -- the same as one JSON object:
**        {"since_reset_s":1.5,"counters":{"calls":3,...},
**         "stages":{"encode":{"count":2,"total_ms":..,"mean_ms":..,"p50_ms":..,
**                             "p95_ms":..,"p99_ms":..,"max_ms":..},...},
**         "batches":[{"lo":1,"hi":1,"count":2},...]}
**   SELECT json_extract(bert_stats(), '$.stages.encode.p95_ms');
**
**   SELECT bert_stats_reset();           -- returns the JSON above, then zeroes everything
**
**   SELECT bert_trace(1);                -- trace every bert_fill / fill_candidates call of
**   SELECT bert_trace(1, 1000);          -- this connection into the table bertfill_trace
**   SELECT bert_trace(0);                -- (keeping at most the newest 1000 rows; default
**   SELECT bert_trace();                 -- 100000); returns the new / current state 1|0
**   SELECT * FROM bertfill_trace ORDER BY total_ms DESC LIMIT 10;   -- the slowest calls
**
** bertfill_trace(id, ts, func, text, source, total_ms, queue_ms, tokenize_ms,
** encode_ms, topk_ms, cache_read_ms, cache_write_ms, tokens, masks):
** ts is UTC ('YYYY-MM-DD HH:MM:SS.SSS', what SQLite's date functions read);
** source is where the answer came from: 'lru', 'table', 'encoder' or 'error';
** text is the input as given (a BLOB when it is not valid UTF-8).
** The table is created by bert_trace(1) (an error there if the database cannot
** be written).  Writing a trace row never breaks the user's statement: if the
** insert fails (read-only or locked database, table dropped, ...) the row is
** skipped and counted in the 'trace_skipped' counter.  Trace rows are ordinary
** rows of the user's transaction: they commit or roll back with it.
**
** While a statement that names bertfill_trace runs on the connection (say
** SELECT bert_fill(text) FROM bertfill_trace), calls are not traced: each
** row appended to the table being scanned would be scanned in turn.
**
** Statistics are per process, shared by every connection; the trace is per
** connection.  Counters are read without locks (see stats.c).  Percentiles
** come from fixed log-scale histograms: each is the upper edge of its bucket
** (at most 12.5% above the true value) and never above max_ms.
**
** How the counters relate (what ext/sqlite_fill.c records): each call with
** non-NULL text counts one `calls` and one `call` sample; a call that reaches
** the cache is exactly one of hit_lru, hit_table, miss; a call stopped before
** (invalid UTF-8, too long, no model) counts its err_* instead; a text without
** [MASK] counts none of them.  Each miss is one sequence (seqs) of an
** encoder run unless it fails with busy — concurrent misses may share one run
** (dynamic batching), so encoder_runs <= seqs and the encode / topk stages
** have one sample per run, queue one per call; hits never run the encoder.
** bert_prefill adds batched runs without counting calls.
**
** Flags (why each function has the ones it has):
**   bert_stats(), bertfill_stats: no side effects and read no file or table, but
**     their value changes from call to call (not DETERMINISTIC) and exposes the
**     activity of every connection in the process — timing and cache-hit counts
**     of other users' queries.  That is harmless for the database owner, so they
**     may be used in views and triggers of a trusted schema, but not INNOCUOUS:
**     with PRAGMA trusted_schema=OFF an untrusted schema cannot read them.
**   bert_stats_reset(): DIRECTONLY — it has a process-wide side effect (erases
**     the statistics every connection sees), so only SQL the application runs
**     itself may call it, never a view or trigger planted in a database file.
**   bert_trace(): DIRECTONLY — it creates and writes a table.
*/
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include "stats_sql.h"
#include "stats.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define TRACE_TABLE "bertfill_trace"
#define TRACE_DEFAULT_MAX_ROWS 100000

static _Atomic uint64_t g_trace_skipped;   /* trace rows that could not be written */

/* ------------------------------------------------------------------------ */
/* A snapshot of every metric as rows (shared by the table and the JSON).   */

#define MAX_BATCH_ROWS 32
#define MAX_ROWS (BF_CT__N + 2 + BF_ST__N + MAX_BATCH_ROWS)

typedef struct stat_row {
  char name[32];
  const char *kind;
  uint64_t count;
  int timed;                 /* stage row with at least one sample */
  bf_stage_summary st;       /* stages */
  int has_value;
  int value_is_real;
  uint64_t ivalue;
  double rvalue;
  int lo, hi;                /* batch rows */
} stat_row;

static double ms(uint64_t ns) { return (double)ns / 1e6; }

static int snapshot_rows(stat_row *rows) {
  int n = 0;
  for (int c = 0; c < BF_CT__N; c++) {
    stat_row *r = &rows[n++];
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", bf_counter_name((bf_counter)c));
    r->kind = "counter";
    r->count = r->ivalue = bf_stats_counter((bf_counter)c);
    r->has_value = 1;
  }
  {
    stat_row *r = &rows[n++];
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "trace_skipped");
    r->kind = "counter";
    r->count = r->ivalue = atomic_load_explicit(&g_trace_skipped, memory_order_relaxed);
    r->has_value = 1;
  }
  {
    stat_row *r = &rows[n++];
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "since_reset_s");
    r->kind = "gauge";
    r->has_value = r->value_is_real = 1;
    r->rvalue = (double)bf_stats_since_reset_ns() / 1e9;
  }
  for (int s = 0; s < BF_ST__N; s++) {
    stat_row *r = &rows[n++];
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", bf_stage_name((bf_stage)s));
    r->kind = "stage";
    bf_stats_stage((bf_stage)s, &r->st);
    r->count = r->st.count;
    r->timed = r->st.count > 0;
  }
  int lo[MAX_BATCH_ROWS], hi[MAX_BATCH_ROWS];
  uint64_t cnt[MAX_BATCH_ROWS];
  int nb = bf_stats_batch_buckets(lo, hi, cnt, MAX_BATCH_ROWS);
  for (int b = 0; b < nb; b++) {
    stat_row *r = &rows[n++];
    memset(r, 0, sizeof *r);
    if (lo[b] == hi[b]) snprintf(r->name, sizeof r->name, "batch_%d", lo[b]);
    else if (hi[b] == 0x7fffffff) snprintf(r->name, sizeof r->name, "batch_%d_up", lo[b]);
    else snprintf(r->name, sizeof r->name, "batch_%d_%d", lo[b], hi[b]);
    r->kind = "batch";
    r->count = r->ivalue = cnt[b];
    r->has_value = 1;
    r->lo = lo[b];
    r->hi = hi[b];
  }
  return n;
}

/* The snapshot as JSON, appended to s. */
static void stats_json(sqlite3_str *s) {
  stat_row rows[MAX_ROWS];
  int n = snapshot_rows(rows);
  sqlite3_str_appendf(s, "{\"since_reset_s\":%.6f", (double)bf_stats_since_reset_ns() / 1e9);
  sqlite3_str_appendall(s, ",\"counters\":{");
  int first = 1;
  for (int i = 0; i < n; i++) {
    if (strcmp(rows[i].kind, "counter")) continue;
    sqlite3_str_appendf(s, "%s\"%s\":%llu", first ? "" : ",", rows[i].name,
                        (unsigned long long)rows[i].ivalue);
    first = 0;
  }
  sqlite3_str_appendall(s, "},\"stages\":{");
  first = 1;
  for (int i = 0; i < n; i++) {
    const stat_row *r = &rows[i];
    if (strcmp(r->kind, "stage")) continue;
    sqlite3_str_appendf(s, "%s\"%s\":{\"count\":%llu,\"total_ms\":%.6f", first ? "" : ",",
                        r->name, (unsigned long long)r->st.count, ms(r->st.total_ns));
    if (r->timed)
      sqlite3_str_appendf(s, ",\"mean_ms\":%.6f,\"p50_ms\":%.6f,\"p95_ms\":%.6f,"
                          "\"p99_ms\":%.6f,\"max_ms\":%.6f}",
                          ms(r->st.total_ns) / (double)r->st.count, ms(r->st.p50_ns),
                          ms(r->st.p95_ns), ms(r->st.p99_ns), ms(r->st.max_ns));
    else
      sqlite3_str_appendall(s, ",\"mean_ms\":null,\"p50_ms\":null,\"p95_ms\":null,"
                               "\"p99_ms\":null,\"max_ms\":null}");
    first = 0;
  }
  sqlite3_str_appendall(s, "},\"batches\":[");
  first = 1;
  for (int i = 0; i < n; i++) {
    const stat_row *r = &rows[i];
    if (strcmp(r->kind, "batch")) continue;
    sqlite3_str_appendf(s, "%s{\"lo\":%d,\"hi\":%d,\"count\":%llu}", first ? "" : ",", r->lo,
                        r->hi, (unsigned long long)r->count);
    first = 0;
  }
  sqlite3_str_appendall(s, "]}");
}

static void result_json(sqlite3_context *ctx) {
  sqlite3_str *s = sqlite3_str_new(sqlite3_context_db_handle(ctx));
  stats_json(s);
  int rc = sqlite3_str_errcode(s);
  char *z = sqlite3_str_finish(s);
  if (rc != SQLITE_OK || !z) {
    sqlite3_free(z);
    sqlite3_result_error_nomem(ctx);
    return;
  }
  sqlite3_result_text(ctx, z, -1, sqlite3_free);   /* plain text: wrap in json() to embed */
}

/* bert_stats() */
static void fn_stats(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  result_json(ctx);
}

/* bert_stats_reset(): the statistics just before the reset, as JSON. */
static void fn_stats_reset(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  result_json(ctx);
  bf_stats_reset();
  atomic_store_explicit(&g_trace_skipped, 0, memory_order_relaxed);
}

/* ------------------------------------------------------------------------ */
/* bertfill_stats: an eponymous-only, read-only virtual table.              */

enum { COL_NAME, COL_KIND, COL_COUNT, COL_TOTAL, COL_MEAN, COL_P50, COL_P95, COL_P99,
       COL_MAX, COL_VALUE };

typedef struct stats_cursor {
  sqlite3_vtab_cursor base;
  int n, i;
  stat_row rows[MAX_ROWS];
} stats_cursor;

static int st_connect(sqlite3 *db, void *aux, int argc, const char *const *argv,
                      sqlite3_vtab **ppVtab, char **pzErr) {
  int rc = sqlite3_declare_vtab(db,
      "CREATE TABLE x(name TEXT, kind TEXT, count INTEGER, total_ms REAL, mean_ms REAL,"
      " p50_ms REAL, p95_ms REAL, p99_ms REAL, max_ms REAL, value)");
  if (rc != SQLITE_OK) return rc;
  sqlite3_vtab *v = sqlite3_malloc(sizeof *v);
  if (!v) return SQLITE_NOMEM;
  memset(v, 0, sizeof *v);
  *ppVtab = v;
  return SQLITE_OK;
}

static int st_disconnect(sqlite3_vtab *v) {
  sqlite3_free(v);
  return SQLITE_OK;
}

static int st_open(sqlite3_vtab *v, sqlite3_vtab_cursor **pp) {
  stats_cursor *c = sqlite3_malloc(sizeof *c);
  if (!c) return SQLITE_NOMEM;
  memset(c, 0, sizeof *c);
  *pp = &c->base;
  return SQLITE_OK;
}

static int st_close(sqlite3_vtab_cursor *cur) {
  sqlite3_free(cur);
  return SQLITE_OK;
}

/* Every scan takes one snapshot of all metrics, so the rows of one query
** are consistent with each other (as far as relaxed counters allow). */
static int st_filter(sqlite3_vtab_cursor *cur, int idxNum, const char *idxStr, int argc,
                     sqlite3_value **argv) {
  stats_cursor *c = (stats_cursor *)cur;
  c->n = snapshot_rows(c->rows);
  c->i = 0;
  return SQLITE_OK;
}

static int st_next(sqlite3_vtab_cursor *cur) {
  ((stats_cursor *)cur)->i++;
  return SQLITE_OK;
}

static int st_eof(sqlite3_vtab_cursor *cur) {
  stats_cursor *c = (stats_cursor *)cur;
  return c->i >= c->n;
}

static int st_column(sqlite3_vtab_cursor *cur, sqlite3_context *ctx, int col) {
  stats_cursor *c = (stats_cursor *)cur;
  const stat_row *r = &c->rows[c->i];
  const bf_stage_summary *s = &r->st;
  switch (col) {
    case COL_NAME: sqlite3_result_text(ctx, r->name, -1, SQLITE_TRANSIENT); break;
    case COL_KIND: sqlite3_result_text(ctx, r->kind, -1, SQLITE_STATIC); break;
    case COL_COUNT:
      if (!strcmp(r->kind, "gauge")) sqlite3_result_null(ctx);
      else sqlite3_result_int64(ctx, (sqlite3_int64)r->count);
      break;
    case COL_TOTAL:
      if (!strcmp(r->kind, "stage")) sqlite3_result_double(ctx, ms(s->total_ns));
      else sqlite3_result_null(ctx);
      break;
    case COL_MEAN:
      if (r->timed) sqlite3_result_double(ctx, ms(s->total_ns) / (double)s->count);
      else sqlite3_result_null(ctx);
      break;
    case COL_P50: case COL_P95: case COL_P99: case COL_MAX: {
      if (!r->timed) { sqlite3_result_null(ctx); break; }
      uint64_t v = col == COL_P50 ? s->p50_ns : col == COL_P95 ? s->p95_ns
                 : col == COL_P99 ? s->p99_ns : s->max_ns;
      sqlite3_result_double(ctx, ms(v));
      break;
    }
    case COL_VALUE:
      if (!r->has_value) sqlite3_result_null(ctx);
      else if (r->value_is_real) sqlite3_result_double(ctx, r->rvalue);
      else sqlite3_result_int64(ctx, (sqlite3_int64)r->ivalue);
      break;
  }
  return SQLITE_OK;
}

static int st_rowid(sqlite3_vtab_cursor *cur, sqlite3_int64 *pRowid) {
  *pRowid = ((stats_cursor *)cur)->i + 1;
  return SQLITE_OK;
}

/* Some 40 rows held in memory: a full scan is the only plan, and it is
** cheap; SQLite applies any WHERE clause itself. */
static int st_best_index(sqlite3_vtab *v, sqlite3_index_info *info) {
  info->estimatedCost = 50;
  info->estimatedRows = 50;
  return SQLITE_OK;
}

/* xCreate NULL: eponymous-only (no CREATE VIRTUAL TABLE); no xUpdate: read-only. */
static sqlite3_module stats_module = {
  .iVersion = 0,
  .xConnect = st_connect,
  .xBestIndex = st_best_index,
  .xDisconnect = st_disconnect,
  .xOpen = st_open,
  .xClose = st_close,
  .xFilter = st_filter,
  .xNext = st_next,
  .xEof = st_eof,
  .xColumn = st_column,
  .xRowid = st_rowid,
};

/* ------------------------------------------------------------------------ */
/* Per-connection trace state.                                              */
/*                                                                          */
/* bf_trace_enabled(db) is called on every bert_fill, from any thread, with */
/* only the connection in hand, so the states live in a small process-wide  */
/* registry.  While no connection traces, the check is one relaxed load.    */
/* A state is registered by bf_register_stats and removed when SQLite drops */
/* bert_trace (connection close, or the extension registered again).       */

typedef struct trace_state {
  sqlite3 *db;
  int enabled;
  sqlite3_int64 max_rows;
  struct trace_state *next;
} trace_state;

static pthread_mutex_t g_reg_mu = PTHREAD_MUTEX_INITIALIZER;
static trace_state *g_reg;
static _Atomic int g_n_tracing;       /* connections with tracing on */
static _Thread_local int t_in_record; /* guards against re-entry through triggers */

static void reg_add(trace_state *st) {
  pthread_mutex_lock(&g_reg_mu);
  st->next = g_reg;
  g_reg = st;
  pthread_mutex_unlock(&g_reg_mu);
}

static void reg_remove(void *p) {
  trace_state *st = p;
  pthread_mutex_lock(&g_reg_mu);
  for (trace_state **pp = &g_reg; *pp; pp = &(*pp)->next)
    if (*pp == st) { *pp = st->next; break; }
  if (st->enabled) atomic_fetch_sub_explicit(&g_n_tracing, 1, memory_order_relaxed);
  pthread_mutex_unlock(&g_reg_mu);
  sqlite3_free(st);
}

/* Newest state registered for db with tracing on; copies max_rows out. */
static int reg_lookup(sqlite3 *db, sqlite3_int64 *max_rows) {
  if (atomic_load_explicit(&g_n_tracing, memory_order_relaxed) == 0) return 0;
  int on = 0;
  pthread_mutex_lock(&g_reg_mu);
  for (trace_state *st = g_reg; st; st = st->next)
    if (st->db == db) {
      on = st->enabled;
      if (max_rows) *max_rows = st->max_rows;
      break;
    }
  pthread_mutex_unlock(&g_reg_mu);
  return on;
}

int bf_trace_enabled(sqlite3 *db) {
  return db && reg_lookup(db, NULL);
}

static const char trace_schema[] =
    "CREATE TABLE IF NOT EXISTS main." TRACE_TABLE "("
    "id INTEGER PRIMARY KEY, ts TEXT NOT NULL, func TEXT, text TEXT, source TEXT,"
    " total_ms REAL, queue_ms REAL, tokenize_ms REAL, encode_ms REAL, topk_ms REAL,"
    " cache_read_ms REAL, cache_write_ms REAL, tokens INTEGER, masks INTEGER)";

static void utc_now(char *buf, size_t n) {
  struct timespec ts;
  struct tm tm;
  clock_gettime(CLOCK_REALTIME, &ts);
  gmtime_r(&ts.tv_sec, &tm);
  size_t k = strftime(buf, n, "%Y-%m-%d %H:%M:%S", &tm);
  snprintf(buf + k, n - k, ".%03d", (int)(ts.tv_nsec / 1000000));
}

/* 1 when s[0..n) is well-formed UTF-8 (no overlongs, surrogates or > U+10FFFF). */
static int utf8_valid(const unsigned char *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    unsigned c = s[i];
    if (c < 0x80) { i++; continue; }
    int len = (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3
            : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
    if (!len || i + (size_t)len > n) return 0;
    for (int k = 1; k < len; k++)
      if ((s[i + k] & 0xC0) != 0x80) return 0;
    unsigned c1 = s[i + 1];
    if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 > 0x9F) || (c == 0xF0 && c1 < 0x90) ||
        (c == 0xF4 && c1 > 0x8F))
      return 0;
    i += (size_t)len;
  }
  return 1;
}

/* 1 when a running statement of db names the trace table (see the top). */
static int trace_table_in_use(sqlite3 *db) {
  for (sqlite3_stmt *p = sqlite3_next_stmt(db, NULL); p; p = sqlite3_next_stmt(db, p)) {
    const char *q;
    if (sqlite3_stmt_busy(p) && (q = sqlite3_sql(p)) &&
        sqlite3_strlike("%" TRACE_TABLE "%", q, 0) == 0)
      return 1;
  }
  return 0;
}

static void skip_trace(void) {
  atomic_fetch_add_explicit(&g_trace_skipped, 1, memory_order_relaxed);
}

void bf_trace_record(sqlite3 *db, const bf_trace_rec *rec) {
  sqlite3_int64 max_rows = TRACE_DEFAULT_MAX_ROWS;
  if (!db || !rec || !reg_lookup(db, &max_rows)) return;
  if (t_in_record) return;
  if (trace_table_in_use(db)) { skip_trace(); return; }
  t_in_record = 1;
  /* Keep the user's last_insert_rowid(): the trace row is not theirs. */
  sqlite3_int64 user_rowid = sqlite3_last_insert_rowid(db);
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(db,
      "INSERT INTO main." TRACE_TABLE "(ts, func, text, source, total_ms, queue_ms,"
      " tokenize_ms, encode_ms, topk_ms, cache_read_ms, cache_write_ms, tokens, masks)"
      " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)", -1, &st, NULL);
  if (rc == SQLITE_OK) {
    char ts[40];
    utc_now(ts, sizeof ts);
    sqlite3_bind_text(st, 1, ts, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, rec->func ? rec->func : "", -1, SQLITE_STATIC);
    if (rec->text) {   /* text that is not UTF-8 (the error case) is kept as a blob */
      size_t n = rec->text_len >= 0 ? (size_t)rec->text_len : strlen(rec->text);
      if (utf8_valid((const unsigned char *)rec->text, n))
        sqlite3_bind_text(st, 3, rec->text, (int)n, SQLITE_STATIC);
      else
        sqlite3_bind_blob(st, 3, rec->text, (int)n, SQLITE_STATIC);
    }
    if (rec->source) sqlite3_bind_text(st, 4, rec->source, -1, SQLITE_STATIC);
    const uint64_t t[7] = {rec->total_ns, rec->queue_ns, rec->tokenize_ns, rec->encode_ns,
                           rec->topk_ns, rec->cache_read_ns, rec->cache_write_ns};
    for (int i = 0; i < 7; i++) sqlite3_bind_double(st, 5 + i, ms(t[i]));
    sqlite3_bind_int(st, 12, rec->tokens);
    sqlite3_bind_int(st, 13, rec->masks);
    rc = sqlite3_step(st);
    rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
  }
  sqlite3_int64 id = sqlite3_last_insert_rowid(db);
  sqlite3_finalize(st);
  if (rc == SQLITE_OK && max_rows > 0 && id > max_rows) {
    /* Bounded: drop the rows that fell out of the window (a rowid range). */
    if (sqlite3_prepare_v2(db, "DELETE FROM main." TRACE_TABLE " WHERE id <= ?1", -1, &st,
                           NULL) == SQLITE_OK) {
      sqlite3_bind_int64(st, 1, id - max_rows);
      sqlite3_step(st);
      sqlite3_finalize(st);
    }
  }
  if (rc != SQLITE_OK) skip_trace();
  sqlite3_set_last_insert_rowid(db, user_rowid);
  t_in_record = 0;
}

/* bert_trace() / bert_trace(on) / bert_trace(on, max_rows) */
static void fn_trace(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  trace_state *st = sqlite3_user_data(ctx);
  sqlite3 *db = sqlite3_context_db_handle(ctx);
  if (argc > 2) {
    sqlite3_result_error(ctx, "bert_trace takes at most 2 arguments: bert_trace(on [, max_rows])", -1);
    return;
  }
  if (argc == 0) {
    sqlite3_result_int(ctx, st->enabled);
    return;
  }
  if (sqlite3_value_type(argv[0]) == SQLITE_NULL) {
    sqlite3_result_error(ctx, "bert_trace(on): on must be 1 (start tracing) or 0 (stop), not NULL", -1);
    return;
  }
  int on = sqlite3_value_int(argv[0]) != 0;
  sqlite3_int64 max_rows = st->max_rows;
  if (argc >= 2) {
    if (sqlite3_value_type(argv[1]) != SQLITE_INTEGER || sqlite3_value_int64(argv[1]) < 1) {
      sqlite3_result_error(ctx, "bert_trace(on, max_rows): max_rows must be a positive integer "
                                "(the newest rows kept in " TRACE_TABLE ")", -1);
      return;
    }
    max_rows = sqlite3_value_int64(argv[1]);
  }
  if (on && !st->enabled) {
    char *err = NULL;
    if (sqlite3_exec(db, trace_schema, NULL, NULL, &err) != SQLITE_OK) {
      char *msg = sqlite3_mprintf("bert_trace: cannot create the trace table " TRACE_TABLE
                                  ": %s", err ? err : sqlite3_errmsg(db));
      sqlite3_free(err);
      if (msg) sqlite3_result_error(ctx, msg, -1);
      else sqlite3_result_error_nomem(ctx);
      sqlite3_free(msg);
      return;
    }
  }
  pthread_mutex_lock(&g_reg_mu);
  if (on != st->enabled) atomic_fetch_add_explicit(&g_n_tracing, on ? 1 : -1, memory_order_relaxed);
  st->enabled = on;
  st->max_rows = max_rows;
  pthread_mutex_unlock(&g_reg_mu);
  sqlite3_result_int(ctx, on);
}

/* ------------------------------------------------------------------------ */

int bf_register_stats(sqlite3 *db, char **pzErrMsg) {
  int rc = sqlite3_create_module(db, "bertfill_stats", &stats_module, NULL);
  const int stats_flags = SQLITE_UTF8;   /* see "Flags" at the top */
  const int direct = SQLITE_UTF8 | SQLITE_DIRECTONLY;
  if (rc == SQLITE_OK)
    rc = sqlite3_create_function(db, "bert_stats", 0, stats_flags, NULL, fn_stats, NULL, NULL);
  if (rc == SQLITE_OK)
    rc = sqlite3_create_function(db, "bert_stats_reset", 0, direct, NULL, fn_stats_reset,
                                 NULL, NULL);
  if (rc == SQLITE_OK) {
    trace_state *st = sqlite3_malloc(sizeof *st);
    if (!st) {
      rc = SQLITE_NOMEM;
    } else {
      memset(st, 0, sizeof *st);
      st->db = db;
      st->max_rows = TRACE_DEFAULT_MAX_ROWS;
      reg_add(st);
      /* Any number of arguments (checked in fn_trace), so that a single
      ** registration owns st; SQLite calls reg_remove when the function is
      ** dropped (connection closed) — or right away if registering fails. */
      rc = sqlite3_create_function_v2(db, "bert_trace", -1, direct, st, fn_trace, NULL, NULL,
                                      reg_remove);
    }
  }
  if (rc != SQLITE_OK && pzErrMsg)
    *pzErrMsg = sqlite3_mprintf("bertfill: cannot register the stats functions: %s",
                                sqlite3_errstr(rc));
  return rc;
}
