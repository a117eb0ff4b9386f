/*
** stats_sql.c — the SQL face of bertfill's process-wide statistics
** (ext/sqlite/stats.h).
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
**   SELECT bert_stats('prometheus');     -- the Prometheus text format (prometheus.c)
**
**   SELECT bert_stats_reset();           -- returns the JSON above, then zeroes everything
**
** The per-call trace (bert_trace, the table bertfill_trace) is in trace.c.
**
** Statistics are per process, shared by every connection; the trace is per
** connection.  Counters are read without locks (see stats.c).  Percentiles
** come from fixed log-scale histograms: each is the upper edge of its bucket
** (at most 12.5% above the true value) and never above max_ms.
**
** How the counters relate (what ext/sqlite/lookup.c and encode.c record):
** each call with non-NULL text counts one `calls` and one `call` sample; a
** call that reaches the cache is exactly one of hit_lru, hit_table, miss; a
** call stopped before (invalid UTF-8, too long, no model) counts its err_*
** instead; a text without [MASK] counts none of them.  Each miss is one
** sequence (seqs) of an encoder run unless it fails with busy — concurrent
** misses may share one run (dynamic batching), so encoder_runs <= seqs and
** the encode / topk stages have one sample per run, queue one per call; hits
** never run the encoder.  bert_prefill adds batched runs without counting
** calls; so does fill_rows, which counts its rows, rows_batches and
** rows_seqs (rows.c).
**
** The whole-word functions (fill_sequences, bert_fill(text, 'joint'),
** bert_score; joint.c) count apart: each call with non-NULL arguments is one
** `joint_calls` and one sample of the `joint` stage, and one of joint_hits,
** joint_misses unless stopped before (err_*) or without a mask; a miss makes
** one encoder run per mask (bert_score: one in all), counted in joint_runs
** and also in encoder_runs, seqs, tokens, masks and the encode / topk /
** queue stages.  bert_prefill(text, 'joint') adds joint_runs only.
**
** The spelling functions (fill_suspects, bert_correct; suspects.c) count as
** the fill calls: one `calls` and one `call` sample each, then one of
** hit_lru, hit_table, miss; a miss is one sequence of an encoder run (a
** spelling check: its screening and verifying runs, counted as one run),
** merged runs counted in batches and the batch sizes.  fill_suspects_rows
** counts no calls, hits or misses, as fill_rows: only its runs and seqs.
**
** The flags of bert_stats, bert_stats_reset and bertfill_stats, and why,
** are in the table of entry.c.
*/
#include <stdio.h>
#include <string.h>

#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3
#include "stats_sql.h"
#include "prometheus.h"
#include "stats.h"
#include "text.h"
#include "trace.h"

/* ------------------------------------------------------------------------ */
/* A snapshot of every metric as rows (shared by the table and the JSON).   */

#define MAX_BATCH_ROWS 32
#define MAX_ROWS (BF_CT__N + 2 + BF_ST__N + MAX_BATCH_ROWS)

typedef struct stat_row {
  char name[32];
  const char *kind;
  uint64_t count;
  int timed;           /* stage row with at least one sample */
  bf_stage_summary st; /* stages */
  int has_value;
  int value_is_real;
  uint64_t ivalue;
  double rvalue;
  int lo, hi; /* batch rows */
} stat_row;

static double ms(uint64_t ns) { return (double)ns / 1e6; }

/* The next row of rows (*n of them so far), zeroed, of the given kind. */
static stat_row *new_row(stat_row *rows, int *n, const char *kind) {
  stat_row *r = &rows[(*n)++];
  memset(r, 0, sizeof *r);
  r->kind = kind;
  return r;
}

static int snapshot_rows(stat_row *rows) {
  int n = 0;
  for (int c = 0; c < BF_CT__N; c++) {
    stat_row *r = new_row(rows, &n, "counter");
    snprintf(r->name, sizeof r->name, "%s", bf_counter_name((bf_counter)c));
    r->count = r->ivalue = bf_stats_counter((bf_counter)c);
    r->has_value = 1;
  }
  stat_row *r = new_row(rows, &n, "counter");
  snprintf(r->name, sizeof r->name, "trace_skipped");
  r->count = r->ivalue = bfx_trace_skipped();
  r->has_value = 1;

  r = new_row(rows, &n, "gauge");
  snprintf(r->name, sizeof r->name, "since_reset_s");
  r->has_value = r->value_is_real = 1;
  r->rvalue = (double)bf_stats_since_reset_ns() / 1e9;

  for (int s = 0; s < BF_ST__N; s++) {
    r = new_row(rows, &n, "stage");
    snprintf(r->name, sizeof r->name, "%s", bf_stage_name((bf_stage)s));
    bf_stats_stage((bf_stage)s, &r->st);
    r->count = r->st.count;
    r->timed = r->st.count > 0;
  }
  int lo[MAX_BATCH_ROWS], hi[MAX_BATCH_ROWS];
  uint64_t cnt[MAX_BATCH_ROWS];
  int nb = bf_stats_batch_buckets(lo, hi, cnt, MAX_BATCH_ROWS);
  for (int b = 0; b < nb; b++) {
    r = new_row(rows, &n, "batch");
    if (lo[b] == hi[b]) snprintf(r->name, sizeof r->name, "batch_%d", lo[b]);
    else if (hi[b] == 0x7fffffff) snprintf(r->name, sizeof r->name, "batch_%d_up", lo[b]);
    else snprintf(r->name, sizeof r->name, "batch_%d_%d", lo[b], hi[b]);
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
    if (!first) sqlite3_str_appendchar(s, 1, ',');
    bfx_json_string(s, rows[i].name);
    sqlite3_str_appendf(s, ":%llu", (unsigned long long)rows[i].ivalue);
    first = 0;
  }
  sqlite3_str_appendall(s, "},\"stages\":{");
  first = 1;
  for (int i = 0; i < n; i++) {
    const stat_row *r = &rows[i];
    if (strcmp(r->kind, "stage")) continue;
    if (!first) sqlite3_str_appendchar(s, 1, ',');
    bfx_json_string(s, r->name);
    sqlite3_str_appendf(s, ":{\"count\":%llu,\"total_ms\":%.6f", (unsigned long long)r->st.count,
                        ms(r->st.total_ns));
    if (r->timed)
      sqlite3_str_appendf(s,
                          ",\"mean_ms\":%.6f,\"p50_ms\":%.6f,\"p95_ms\":%.6f,"
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
    sqlite3_str_appendf(s, "%s{\"lo\":%d,\"hi\":%d,\"count\":%llu}", first ? "" : ",", r->lo, r->hi,
                        (unsigned long long)r->count);
    first = 0;
  }
  sqlite3_str_appendall(s, "]}");
}

/* The snapshot as JSON, the result of ctx (plain text: wrap in json() to embed). */
static void result_json(sqlite3_context *ctx) {
  sqlite3_str *s = sqlite3_str_new(sqlite3_context_db_handle(ctx));
  stats_json(s);
  bfx_result_str(ctx, s);
}

void bfx_fn_stats(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  const char *format = argc > 0 ? (const char *)sqlite3_value_text(argv[0]) : NULL;
  if (!format || sqlite3_stricmp(format, "json") == 0) {
    result_json(ctx);
  } else if (sqlite3_stricmp(format, "prometheus") == 0) {
    sqlite3_str *s = sqlite3_str_new(sqlite3_context_db_handle(ctx));
    bfx_prometheus(s);
    bfx_result_str(ctx, s);
  } else {
    sqlite3_result_error(ctx, "bert_stats: the format must be 'json' (the default) or 'prometheus'",
                         -1);
  }
}

void bfx_fn_stats_reset(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  (void)argc;
  (void)argv;
  result_json(ctx);
  bf_stats_reset();
  bfx_trace_skipped_reset();
}

/* ------------------------------------------------------------------------ */
/* bertfill_stats: an eponymous-only, read-only virtual table.              */

enum {
  COL_NAME,
  COL_KIND,
  COL_COUNT,
  COL_TOTAL,
  COL_MEAN,
  COL_P50,
  COL_P95,
  COL_P99,
  COL_MAX,
  COL_VALUE
};

typedef struct stats_cursor {
  sqlite3_vtab_cursor base;
  int n, i;
  stat_row rows[MAX_ROWS];
} stats_cursor;

static int stats_connect(sqlite3 *db, void *aux, int argc, const char *const *argv,
                         sqlite3_vtab **ppVtab, char **pzErr) {
  (void)aux;
  (void)argc;
  (void)argv;
  (void)pzErr;
  int rc = sqlite3_declare_vtab(db, "CREATE TABLE x(name TEXT, kind TEXT, count INTEGER, total_ms "
                                    "REAL, mean_ms REAL,"
                                    " p50_ms REAL, p95_ms REAL, p99_ms REAL, max_ms REAL, value)");
  if (rc != SQLITE_OK) return rc;
  sqlite3_vtab *v = sqlite3_malloc(sizeof *v);
  if (!v) return SQLITE_NOMEM;
  memset(v, 0, sizeof *v);
  *ppVtab = v;
  return SQLITE_OK;
}

static int stats_disconnect(sqlite3_vtab *v) {
  sqlite3_free(v);
  return SQLITE_OK;
}

static int stats_open(sqlite3_vtab *v, sqlite3_vtab_cursor **pp) {
  (void)v;
  stats_cursor *c = sqlite3_malloc(sizeof *c);
  if (!c) return SQLITE_NOMEM;
  memset(c, 0, sizeof *c);
  *pp = &c->base;
  return SQLITE_OK;
}

static int stats_close(sqlite3_vtab_cursor *cur) {
  sqlite3_free(cur);
  return SQLITE_OK;
}

/* Every scan takes one snapshot of all metrics, so the rows of one query
** are consistent with each other (as far as relaxed counters allow). */
static int stats_filter(sqlite3_vtab_cursor *cur, int idxNum, const char *idxStr, int argc,
                        sqlite3_value **argv) {
  (void)idxNum;
  (void)idxStr;
  (void)argc;
  (void)argv;
  stats_cursor *c = (stats_cursor *)cur;
  c->n = snapshot_rows(c->rows);
  c->i = 0;
  return SQLITE_OK;
}

static int stats_next(sqlite3_vtab_cursor *cur) {
  ((stats_cursor *)cur)->i++;
  return SQLITE_OK;
}

static int stats_eof(sqlite3_vtab_cursor *cur) {
  stats_cursor *c = (stats_cursor *)cur;
  return c->i >= c->n;
}

static int stats_column(sqlite3_vtab_cursor *cur, sqlite3_context *ctx, int col) {
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
    case COL_P50:
    case COL_P95:
    case COL_P99:
    case COL_MAX: {
      if (!r->timed) {
        sqlite3_result_null(ctx);
        break;
      }
      uint64_t v = col == COL_P50   ? s->p50_ns
                   : col == COL_P95 ? s->p95_ns
                   : col == COL_P99 ? s->p99_ns
                                    : s->max_ns;
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

static int stats_rowid(sqlite3_vtab_cursor *cur, sqlite3_int64 *pRowid) {
  *pRowid = ((stats_cursor *)cur)->i + 1;
  return SQLITE_OK;
}

/* Some 40 rows held in memory: a full scan is the only plan, and it is
** cheap; SQLite applies any WHERE clause itself. */
static int stats_best_index(sqlite3_vtab *v, sqlite3_index_info *info) {
  (void)v;
  info->estimatedCost = 50;
  info->estimatedRows = 50;
  return SQLITE_OK;
}

/* xCreate NULL: eponymous-only (no CREATE VIRTUAL TABLE); no xUpdate: read-only. */
const sqlite3_module bfx_stats_module = {
  .iVersion = 0,
  .xConnect = stats_connect,
  .xBestIndex = stats_best_index,
  .xDisconnect = stats_disconnect,
  .xOpen = stats_open,
  .xClose = stats_close,
  .xFilter = stats_filter,
  .xNext = stats_next,
  .xEof = stats_eof,
  .xColumn = stats_column,
  .xRowid = stats_rowid,
};
