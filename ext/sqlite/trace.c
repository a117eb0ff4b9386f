/*
** trace.c — the optional per-call trace of a connection.
**
**   SELECT bert_trace(1);                -- trace every bert_fill / fill_candidates call of
**   SELECT bert_trace(1, 1000);          -- this connection into the table bertfill_trace
**   SELECT bert_trace(0);                -- (keeping at most the newest 1000 rows; default
**   SELECT bert_trace();                 -- 100000); returns the new / current state 1|0
**                                        -- (NULL for either argument: keep it as it is)
**   SELECT * FROM bertfill_trace ORDER BY total_ms DESC LIMIT 10;   -- the slowest calls
**
** bertfill_trace(id, ts, func, text, source, total_ms, queue_ms, tokenize_ms,
** encode_ms, topk_ms, cache_read_ms, cache_write_ms, tokens, masks, wait_ms,
** start_ms, write_ms, wake_ms, handover_ms, batch_seqs, leader_pid, lead):
** ts is UTC ('YYYY-MM-DD HH:MM:SS.SSS', what SQLite's date functions read);
** source is where the answer came from: 'lru', 'table', 'encoder' or 'error';
** text is the input as given (a BLOB when it is not valid UTF-8).
** The last eight are the timeline of a call whose encoder run went through a
** batcher (batcher.c, shared_batch.c; NULL otherwise): wait_ms from posted
** to taken into a batch (handover_ms of it with no leader), start_ms from
** taken to the run's start, encode_ms + topk_ms the run, write_ms from its
** end to the answer handed over, wake_ms from there to the caller running;
** batch_seqs the sequences of its batch, leader_pid the process that ran it,
** lead how that leader got the lead ('alone', 'queue', 'post', 'woken',
** 'timer', 'slot': encode.h).  tokenize_ms + cache_read_ms + wait_ms +
** start_ms + encode_ms + topk_ms + write_ms + wake_ms + cache_write_ms make
** total_ms but for the SQL layer's own work (tests/python/t_timeline.py).
** A table made by an older version gets the new columns (ALTER TABLE) when
** tracing starts.
** The table is created by bert_trace(1) (an error there if the database cannot
** be written).  Writing a trace row never breaks the user's statement: if the
** insert fails (read-only or locked database, table dropped, ...) the row is
** skipped and counted in the 'trace_skipped' counter (bertfill_stats).  Trace
** rows are ordinary rows of the user's transaction: they commit or roll back
** with it.
**
** While a statement that names bertfill_trace runs on the connection (say
** SELECT bert_fill(text) FROM bertfill_trace), calls are not traced: each
** row appended to the table being scanned would be scanned in turn.
*/
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3
#include "trace.h"
#include "bounds.h"
#include "errors.h"
#include "encode.h"
#include "lookup.h"
#include "text.h"
#include "util.h"

#define TRACE_TABLE "bertfill_trace"
#define TRACE_DEFAULT_MAX_ROWS 100000

static _Atomic uint64_t trace_skipped; /* trace rows that could not be written */

uint64_t bfx_trace_skipped(void) {
  return atomic_load_explicit(&trace_skipped, memory_order_relaxed);
}

void bfx_trace_skipped_reset(void) {
  atomic_store_explicit(&trace_skipped, 0, memory_order_relaxed);
}

/* ---- per-connection trace state ----
** Whether db traces is asked on every bert_fill, from any thread, with only
** the connection in hand, so the states live in a small process-wide
** registry.  While no connection traces, the check is one relaxed load.  A
** state is registered with bert_trace (bfx_trace_state_new) and removed
** when SQLite drops that function (connection close, or the extension
** registered again). */

typedef struct trace_state {
  sqlite3 *db;
  int enabled;
  sqlite3_int64 max_rows;
  struct trace_state *next;
} trace_state;

static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static trace_state *registry;
static _Atomic int n_tracing;         /* connections with tracing on */
static _Thread_local int t_in_record; /* guards against re-entry through triggers */

static void reg_add(trace_state *st) {
  pthread_mutex_lock(&registry_mu);
  st->next = registry;
  registry = st;
  pthread_mutex_unlock(&registry_mu);
}

void bfx_trace_state_free(void *p) {
  trace_state *st = p;
  pthread_mutex_lock(&registry_mu);
  for (trace_state **pp = &registry; *pp; pp = &(*pp)->next)
    if (*pp == st) {
      *pp = st->next;
      break;
    }
  if (st->enabled) atomic_fetch_sub_explicit(&n_tracing, 1, memory_order_relaxed);
  pthread_mutex_unlock(&registry_mu);
  sqlite3_free(st);
}

/* Newest state registered for db with tracing on; copies max_rows out. */
static int reg_lookup(sqlite3 *db, sqlite3_int64 *max_rows) {
  if (atomic_load_explicit(&n_tracing, memory_order_relaxed) == 0) return 0;
  int on = 0;
  pthread_mutex_lock(&registry_mu);
  for (trace_state *st = registry; st; st = st->next)
    if (st->db == db) {
      on = st->enabled;
      if (max_rows) *max_rows = st->max_rows;
      break;
    }
  pthread_mutex_unlock(&registry_mu);
  return on;
}

/* ---- one call ---- */

typedef struct trace_rec {
  const char *func;   /* "bert_fill", "fill_candidates", ... */
  const char *text;   /* the input text (may be NULL) */
  int text_len;       /* its length in bytes (it may hold NUL); < 0: NUL-terminated */
  const char *source; /* "lru", "table", "encoder", "error" */
  uint64_t total_ns, queue_ns, tokenize_ns, encode_ns, topk_ns, cache_read_ns, cache_write_ns;
  int tokens, masks;
  int batched; /* the timeline below is set */
  uint64_t wait_ns, start_ns, write_ns, wake_ns, handover_ns;
  int batch_seqs, leader_pid, lead;
} trace_rec;

static const char trace_schema[] =
  "CREATE TABLE IF NOT EXISTS main." TRACE_TABLE "("
  "id INTEGER PRIMARY KEY, ts TEXT NOT NULL, func TEXT, text TEXT, source TEXT,"
  " total_ms REAL, queue_ms REAL, tokenize_ms REAL, encode_ms REAL, topk_ms REAL,"
  " cache_read_ms REAL, cache_write_ms REAL, tokens INTEGER, masks INTEGER, wait_ms REAL,"
  " start_ms REAL, write_ms REAL, wake_ms REAL, handover_ms REAL, batch_seqs INTEGER,"
  " leader_pid INTEGER, lead TEXT)";

/* The columns added since the table's first version: a table an older
** version made gets them when tracing starts. */
static const char *const trace_added[][2] = {
  {"wait_ms", "REAL"},       {"start_ms", "REAL"},    {"write_ms", "REAL"},
  {"wake_ms", "REAL"},       {"handover_ms", "REAL"}, {"batch_seqs", "INTEGER"},
  {"leader_pid", "INTEGER"}, {"lead", "TEXT"},
};

/* Adds the columns of trace_added that the table lacks: SQLITE_OK or the
** error (in *err, to be freed with sqlite3_free). */
static int trace_upgrade(sqlite3 *db, char **err) {
  int n = (int)(sizeof trace_added / sizeof trace_added[0]);
  for (int i = 0; i < n; i++) {
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db,
                                "SELECT 1 FROM pragma_table_info('" TRACE_TABLE
                                "', 'main') WHERE name = ?1",
                                -1, &st, NULL);
    if (rc != SQLITE_OK) {
      *err = sqlite3_mprintf("%s", sqlite3_errmsg(db));
      return rc;
    }
    sqlite3_bind_text(st, 1, trace_added[i][0], -1, SQLITE_STATIC);
    int have = sqlite3_step(st) == SQLITE_ROW;
    sqlite3_finalize(st);
    if (have) continue;
    char *sql = sqlite3_mprintf("ALTER TABLE main." TRACE_TABLE " ADD COLUMN %s %s",
                                trace_added[i][0], trace_added[i][1]);
    if (!sql) return SQLITE_NOMEM;
    rc = sqlite3_exec(db, sql, NULL, NULL, err);
    sqlite3_free(sql);
    if (rc != SQLITE_OK) return rc;
  }
  return SQLITE_OK;
}

static void utc_now(char *buf, size_t n) {
  struct timespec ts;
  struct tm tm;
  clock_gettime(CLOCK_REALTIME, &ts);
  gmtime_r(&ts.tv_sec, &tm);
  size_t k = strftime(buf, n, "%Y-%m-%d %H:%M:%S", &tm);
  snprintf(buf + k, n - k, ".%03d", (int)(ts.tv_nsec / 1000000));
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

static void skip_trace(void) { atomic_fetch_add_explicit(&trace_skipped, 1, memory_order_relaxed); }

static void trace_record(sqlite3 *db, const trace_rec *rec) {
  sqlite3_int64 max_rows = TRACE_DEFAULT_MAX_ROWS;
  if (!db || !rec || !reg_lookup(db, &max_rows)) return;
  if (t_in_record) return;
  if (trace_table_in_use(db)) {
    skip_trace();
    return;
  }
  t_in_record = 1;
  /* Keep the user's last_insert_rowid(): the trace row is not theirs. */
  sqlite3_int64 user_rowid = sqlite3_last_insert_rowid(db);
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(db,
                              "INSERT INTO main." TRACE_TABLE
                              "(ts, func, text, source, total_ms, queue_ms,"
                              " tokenize_ms, encode_ms, topk_ms, cache_read_ms, cache_write_ms, "
                              "tokens, masks, wait_ms, start_ms, write_ms, wake_ms, handover_ms,"
                              " batch_seqs, leader_pid, lead)"
                              " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13,"
                              " ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21)",
                              -1, &st, NULL);
  if (rc == SQLITE_OK) {
    char ts[40];
    utc_now(ts, sizeof ts);
    sqlite3_bind_text(st, 1, ts, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, rec->func ? rec->func : "", -1, SQLITE_STATIC);
    if (rec->text) { /* text that is not UTF-8 (the error case) is kept as a blob */
      size_t n = rec->text_len >= 0 ? (size_t)rec->text_len : strlen(rec->text);
      if (bf_utf8_invalid_at(rec->text, n, NULL, 0) < 0)
        sqlite3_bind_text(st, 3, rec->text, (int)n, SQLITE_STATIC);
      else sqlite3_bind_blob(st, 3, rec->text, (int)n, SQLITE_STATIC);
    }
    if (rec->source) sqlite3_bind_text(st, 4, rec->source, -1, SQLITE_STATIC);
    const uint64_t t[7] = {rec->total_ns, rec->queue_ns,      rec->tokenize_ns,   rec->encode_ns,
                           rec->topk_ns,  rec->cache_read_ns, rec->cache_write_ns};
    for (int i = 0; i < 7; i++) sqlite3_bind_double(st, 5 + i, (double)t[i] / 1e6); /* ms */
    sqlite3_bind_int(st, 12, rec->tokens);
    sqlite3_bind_int(st, 13, rec->masks);
    if (rec->batched) { /* NULL otherwise */
      const uint64_t b[5] = {rec->wait_ns, rec->start_ns, rec->write_ns, rec->wake_ns,
                             rec->handover_ns};
      for (int i = 0; i < 5; i++) sqlite3_bind_double(st, 14 + i, (double)b[i] / 1e6);
      sqlite3_bind_int(st, 19, rec->batch_seqs);
      sqlite3_bind_int(st, 20, rec->leader_pid);
      const char *lead = bfx_lead_name(rec->lead);
      if (lead) sqlite3_bind_text(st, 21, lead, -1, SQLITE_STATIC);
    }
    rc = sqlite3_step(st);
    rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
  }
  sqlite3_int64 id = sqlite3_last_insert_rowid(db);
  sqlite3_finalize(st);
  if (rc == SQLITE_OK && max_rows > 0 && id > max_rows) {
    /* Bounded: drop the rows that fell out of the window (a rowid range). */
    if (sqlite3_prepare_v2(db, "DELETE FROM main." TRACE_TABLE " WHERE id <= ?1", -1, &st, NULL) ==
        SQLITE_OK) {
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
void bfx_fn_trace(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  trace_state *st = sqlite3_user_data(ctx);
  sqlite3 *db = sqlite3_context_db_handle(ctx);
  if (argc > 2) {
    sqlite3_result_error(ctx, "bert_trace takes at most 2 arguments: bert_trace(on [, max_rows])",
                         -1);
    return;
  }
  /* Each argument: NULL (or left out) keeps what is set; otherwise it must
  ** be in range (the error shape of bfx_int_arg_msg). */
  int on = st->enabled;
  sqlite3_int64 v, max_rows = st->max_rows;
  char *bad = NULL;
  if (argc >= 1 && sqlite3_value_type(argv[0]) != SQLITE_NULL) {
    if (bfx_arg_int(argv[0], 0, 1, &v)) on = (int)v;
    else if (!(bad = bfx_int_arg_msg("bert_trace", "on", 0, "stop", 1, "start tracing", argv[0])))
      goto nomem;
  }
  if (!bad && argc >= 2 && sqlite3_value_type(argv[1]) != SQLITE_NULL) {
    if (bfx_arg_int(argv[1], 1, BFX_TRACE_ROWS_MAX, &v)) max_rows = v;
    else if (!(bad = bfx_int_arg_msg("bert_trace", "max_rows (the newest rows kept)", 1, NULL,
                                     BFX_TRACE_ROWS_MAX, NULL, argv[1])))
      goto nomem;
  }
  if (bad) {
    sqlite3_result_error(ctx, bad, -1);
    sqlite3_free(bad);
    return;
  }
  if (on && !st->enabled) {
    char *err = NULL;
    if (sqlite3_exec(db, trace_schema, NULL, NULL, &err) != SQLITE_OK ||
        trace_upgrade(db, &err) != SQLITE_OK) {
      bfx_err e = BFX_ERR_NONE;
      bfx_errf(&e, SQLITE_ERROR, -1,
               "bert_trace: cannot create the trace table " TRACE_TABLE ": %s",
               err ? err : sqlite3_errmsg(db));
      sqlite3_free(err);
      bfx_error(ctx, &e);
      return;
    }
  }
  pthread_mutex_lock(&registry_mu);
  if (on != st->enabled) atomic_fetch_add_explicit(&n_tracing, on ? 1 : -1, memory_order_relaxed);
  st->enabled = on;
  st->max_rows = max_rows;
  pthread_mutex_unlock(&registry_mu);
  sqlite3_result_int(ctx, on);
  return;
nomem:
  sqlite3_result_error_nomem(ctx);
}

void *bfx_trace_state_new(sqlite3 *db) {
  trace_state *st = sqlite3_malloc(sizeof *st);
  if (!st) return NULL;
  memset(st, 0, sizeof *st);
  st->db = db;
  st->max_rows = TRACE_DEFAULT_MAX_ROWS;
  reg_add(st);
  return st;
}

void bfx_trace_call(sqlite3 *db, const char *func, const char *text, int text_len,
                    const bfx_result *r, uint64_t t0, uint64_t tok_ns, int tokens, int is_error) {
  if (!db || !reg_lookup(db, NULL)) return;
  trace_rec rec;
  memset(&rec, 0, sizeof rec);
  rec.func = func;
  rec.text = text; /* bytes as given, NUL bytes included */
  rec.text_len = text ? text_len : -1;
  rec.source = is_error ? "error" : (r && r->source ? r->source : "none");
  rec.total_ns = bf_now_ns() - t0;
  rec.tokenize_ns = tok_ns;
  if (r) {
    rec.queue_ns = r->times.queue_ns;
    rec.encode_ns = r->times.encode_ns;
    rec.topk_ns = r->times.topk_ns;
    rec.cache_read_ns = r->times.cache_read_ns;
    rec.cache_write_ns = r->times.cache_write_ns;
    rec.masks = r->n_masks;
    rec.batched = r->times.batch_seqs > 0;
    rec.wait_ns = r->times.wait_ns;
    rec.start_ns = r->times.start_ns;
    rec.write_ns = r->times.write_ns;
    rec.wake_ns = r->times.wake_ns;
    rec.handover_ns = r->times.handover_ns;
    rec.batch_seqs = r->times.batch_seqs;
    rec.leader_pid = r->times.leader_pid;
    rec.lead = r->times.lead;
  }
  rec.tokens = tokens;
  trace_record(db, &rec);
}
