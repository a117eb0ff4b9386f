/*
** bench_bertfill.c — the bertfill side of `make bench` (see tests/bench/run.sh).
**
**   bench_bertfill engine MODEL_DIR SENTENCES.tsv OUT.json [options]
**       the engine (build/libbfengine.a, ext/engine/bertfill.h) called directly:
**       load time, single-sentence latency, batch throughput, per-stage
**       timings (bf_run_timings), the top 5 ids and probabilities at every
**       sentence's [MASK] (bf_fill with k = 5), peak RSS.
**   bench_bertfill sql MODEL_DIR SENTENCES.tsv OUT.json --ext ./bertfill.so [options]
**       the same model through the SQLite extension: cache-hit latency of a
**       repeated bert_fill(), and filling a table column in one statement
**       (SELECT bert_prefill(text) FROM t, then UPDATE t SET filled = bert_fill(text)).
**       "column fill, N rows": the batch-2000 set as a column, filled by
**       UPDATE ... FROM fill_rows(...), by bert_prefill + UPDATE, and by a plain
**       UPDATE (bert_fill per row); then with bert_cache_limit and bert_cache_lru
**       lowered below N (fill_rows + UPDATE, and bert_prefill, which refuses).
**
** Options: --reps N (timed runs per single-sentence length, default 20)
**          --warmup N (untimed runs first, default 3)
**          --rounds N (rounds of the 256-sentence batch, default 3)
**          --big-rounds N (rounds of the 2000-sentence batch, default 2)
**          --batch N (sentences per bf_fill call in engine mode, default 32)
**          --limit N (use at most N sentences of each batch set; 0 = all)
**          --threads N (BLAS threads; 0 = the engine's default)
**          --hits N (cache-hit calls timed in sql mode, default 20000)
**          --column 0 (leave out the column fill: its plain UPDATE alone runs
**                     the encoder once per row, minutes on a bert-base model)
**          --precision fp32|int8|bf16 (default fp32: the model loaded with
**                     bf_model_load_as(dir, BF_PRECISION_INT8 or _BF16, ...)
**                     in engine mode, SELECT bert_load(dir, 'int8') in sql
**                     mode; fp32 is plain bf_model_load / bert_load(dir))
**
** A mode this build of bertfill does not have (int8 before bertfill.h defines
** BF_HAVE_PRECISION, or a bertfill.so whose bert_load refuses 'int8') is not an
** error: OUT.json gets {"missing": "<why>"} and run.sh reports it as MISSING.
**
** Each mode runs in its own process so that its peak RSS is its own.  The
** sentences file is made by tests/bench/sentences.py; the engine must tokenize
** each text to exactly the ids written there (checked, counted in the JSON).
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <sqlite3.h>
#include "bertfill.h"

#define MAXSET 16

typedef struct sent { char *text; int32_t *ids; int n; int mpos; } sent;
typedef struct sset { char name[32]; sent *s; int n, cap; } sset;

static sset sets[MAXSET];
static int nsets;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void die(const char *fmt, const char *a, const char *b) {
  fprintf(stderr, "bench_bertfill: ");
  fprintf(stderr, fmt, a, b);
  fprintf(stderr, "\n");
  exit(1);
}

static void *xrealloc(void *p, size_t n) {
  p = realloc(p, n);
  if (!p) die("out of memory%s%s", "", "");
  return p;
}

static sset *get_set(const char *name) {
  for (int i = 0; i < nsets; i++) if (!strcmp(sets[i].name, name)) return &sets[i];
  if (nsets == MAXSET) die("too many sets in the sentences file%s%s", "", "");
  sset *s = &sets[nsets++];
  memset(s, 0, sizeof *s);
  snprintf(s->name, sizeof s->name, "%s", name);
  return s;
}

static void read_sentences(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) die("cannot open %s%s", path, "");
  char *line = NULL; size_t cap = 0; ssize_t len;
  while ((len = getline(&line, &cap, f)) > 0) {
    if (line[len - 1] == '\n') line[--len] = 0;
    char *f1 = strtok(line, "\t"), *f2 = strtok(NULL, "\t"), *f3 = strtok(NULL, "\t"), *f4 = strtok(NULL, "\t");
    if (!f1 || !f2 || !f3 || !f4) die("%s: malformed line%s", path, "");
    sset *ss = get_set(f1);
    if (ss->n == ss->cap) { ss->cap = ss->cap ? 2 * ss->cap : 16; ss->s = xrealloc(ss->s, ss->cap * sizeof *ss->s); }
    sent *s = &ss->s[ss->n++];
    s->text = strdup(f2);
    s->n = 0; s->ids = NULL;
    for (char *p = strtok(f3, " "); p; p = strtok(NULL, " ")) {
      s->ids = xrealloc(s->ids, (s->n + 1) * sizeof *s->ids);
      s->ids[s->n++] = atoi(p);
    }
    s->mpos = atoi(f4);
  }
  free(line);
  fclose(f);
}

static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
static double median(double *x, int n) {
  qsort(x, n, sizeof *x, cmpd);
  return n % 2 ? x[n / 2] : (x[n / 2 - 1] + x[n / 2]) / 2;
}

static double cpu_s(void) {   /* CPU time of this process, all threads */
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
}

static double peak_rss_mb(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256]; long kb = -1;
  if (f) {
    while (fgets(line, sizeof line, f)) if (!strncmp(line, "VmHWM:", 6)) kb = atol(line + 6);
    fclose(f);
  }
  if (kb < 0) { struct rusage ru; getrusage(RUSAGE_SELF, &ru); kb = ru.ru_maxrss; }
  return kb / 1024.0;
}

static void json_str(FILE *o, const char *s) {
  fputc('"', o);
  for (; *s; s++) {
    unsigned char c = *s;
    if (c == '"' || c == '\\') fprintf(o, "\\%c", c);
    else if (c < 0x20) fprintf(o, "\\u%04x", c);
    else fputc(c, o);
  }
  fputc('"', o);
}

/* ---- options ---- */
static int o_big_rounds = 2;
static int o_reps = 20, o_warmup = 3, o_rounds = 3, o_batch = 32, o_limit = 0, o_threads = 0, o_hits = 20000;
static const char *o_ext = NULL;
static int o_column = 1;
static const char *o_precision = "fp32";
#define TOPK 5 /* candidates kept per [MASK]: the agreement table compares top-5 sets */

static int is_single(const sset *s) { return !strncmp(s->name, "single-", 7) || !strncmp(s->name, "demo-", 5); }
/* Key of a single-sentence set in the JSON: "16" for single-16, "demo-1" for demo-1. */
static const char *single_key(const sset *s) { return strncmp(s->name, "single-", 7) ? s->name : s->name + 7; }

/* The run cannot be made in this build: say why in OUT.json (run.sh reports it). */
static int write_missing(const char *out, const char *why) {
  FILE *o = fopen(out, "w");
  if (!o) die("cannot write %s%s", out, "");
  fprintf(o, "{\"missing\": ");
  json_str(o, why);
  fprintf(o, "}\n");
  fclose(o);
  fprintf(stderr, "bench_bertfill: MISSING: %s\n", why);
  return 0;
}

/* One sentence's top-5 at its [MASK] as JSON: [[id, ...], [prob, ...]]. */
static void top5_json(FILE *o, const bf_cand *c) {
  fprintf(o, "[[");
  for (int r = 0; r < TOPK; r++) fprintf(o, "%s%d", r ? "," : "", c[r].id);
  fprintf(o, "],[");
  for (int r = 0; r < TOPK; r++) fprintf(o, "%s%.7g", r ? "," : "", c[r].prob);
  fprintf(o, "]]");
}

static int set_len(const sset *s) { return o_limit > 0 && s->n > o_limit ? o_limit : s->n; }
static int rounds_for(const sset *s) {
  return strcmp(s->name, "batch-256") ? o_big_rounds : o_rounds;
}

/* ================================================================ engine mode */

typedef struct stage_acc { double embed, encode, head, topk; long tokens, seqs; } stage_acc;
static void acc_add(stage_acc *a, const bf_timings *t) {
  a->embed += t->embed_ns * 1e-6; a->encode += t->encode_ns * 1e-6;
  a->head += t->head_ns * 1e-6; a->topk += t->topk_ns * 1e-6;
  a->tokens += t->tokens; a->seqs += t->seqs;
}
static void acc_json(FILE *o, const stage_acc *a, double div) {
  fprintf(o, "{\"embed_ms\": %.4f, \"encode_ms\": %.4f, \"head_ms\": %.4f, \"topk_ms\": %.4f, "
          "\"tokens\": %ld, \"seqs\": %ld}", a->embed / div, a->encode / div, a->head / div,
          a->topk / div, a->tokens, a->seqs);
}

static int engine_mode(const char *dir, const char *out) {
  char err[512];
  double t0 = now_s();
  if (bf_blas_init(err, sizeof err) != BF_OK) die("OpenBLAS: %s%s", err, "");
  double blas_ms = (now_s() - t0) * 1e3;
  if (o_threads > 0) bf_blas_set_threads(o_threads);
  t0 = now_s();
#ifdef BF_HAVE_PRECISION
  bf_precision want = BF_PRECISION_FP32;
  if (bf_precision_parse(o_precision, &want) != 0)
    return write_missing(out, "this bertfill has no such precision (bf_precision_parse)");
  bf_model *m = bf_model_load_as(dir, want, err, sizeof err);
  const char *precision = m ? bf_precision_name(bf_model_precision(m)) : "";
#else
  if (strcmp(o_precision, "fp32"))
    return write_missing(out, "this bertfill has no int8 mode yet (ext/engine/bertfill.h does not define "
                              "BF_HAVE_PRECISION: no bf_model_load_as)");
  bf_model *m = bf_model_load(dir, err, sizeof err);
  const char *precision = "fp32";
#endif
  double load_ms = (now_s() - t0) * 1e3;
  if (!m) die("%s%s", err, "");
  const bf_tokenizer *tok = bf_model_tokenizer(m);
  bf_run *run = bf_run_new();
  if (!run) die("out of memory%s%s", "", "");

  /* Tokenize everything once to check the ids against the file. */
  int mismatches = 0, total = 0;
  bf_tokens tk = {0};
  for (int i = 0; i < nsets; i++)
    for (int j = 0; j < set_len(&sets[i]); j++) {
      sent *s = &sets[i].s[j];
      if (bf_tokenize(tok, s->text, -1, &tk, err, sizeof err) != BF_OK) die("tokenize: %s%s", err, "");
      total++;
      if (tk.n != s->n || memcmp(tk.ids, s->ids, s->n * sizeof *s->ids)) mismatches++;
    }
  if (mismatches)
    fprintf(stderr, "bench_bertfill: WARNING: %d of %d sentences tokenize differently from sentences.py\n",
            mismatches, total);

  FILE *o = fopen(out, "w");
  if (!o) die("cannot write %s%s", out, "");
  fprintf(o, "{\n \"engine\": \"bertfill (engine, C, %s)\",\n \"precision\": \"%s\",\n \"blas_core\": ", precision,
          precision);
  json_str(o, bf_blas_core());
  fprintf(o, ",\n \"blas_config\": ");
  json_str(o, bf_blas_config());
  fprintf(o, ",\n \"threads\": %d,\n \"batch_size\": %d,\n \"blas_init_ms\": %.3f,\n \"model_load_ms\": %.3f,\n"
          " \"load_ms\": %.3f,\n \"dtype\": \"%s\",\n \"token_mismatches\": %d,\n",
          bf_blas_threads(), o_batch, blas_ms, load_ms, blas_ms + load_ms, bf_model_dtype(m), mismatches);
  fprintf(o, " \"gemm_kernels\": \"%s\",\n \"int8_kernels\": \"%s\",\n \"bf16_kernels\": \"%s\",\n",
          bf_gemm_kernels(), bf_int8_kernels(), bf_bf16_kernels());

  bf_cand cand[4096];
  /* First fill: pages of the mmapped weights come in here. */
  {
    sset *ss = get_set("single-8");
    if (!ss->n) die("sentences file has no single-8 set%s%s", "", "");
    t0 = now_s();
    if (bf_tokenize(tok, ss->s[0].text, -1, &tk, err, sizeof err) != BF_OK ||
        bf_fill(m, run, 1, &tk, 1, cand, err, sizeof err) != BF_OK)
      die("bf_fill: %s%s", err, "");
    fprintf(o, " \"first_run_ms\": %.3f,\n", (now_s() - t0) * 1e3);
  }

  /* Single sentences. */
  fprintf(o, " \"single\": {");
  int first = 1;
  char top1_json[1 << 16]; size_t tj = 0;
  top1_json[0] = 0;
  char *t5buf = NULL; size_t t5len = 0;
  FILE *t5 = open_memstream(&t5buf, &t5len);
  for (int i = 0; i < nsets; i++) {
    sset *ss = &sets[i];
    if (!is_single(ss)) continue;
    sent *s = &ss->s[0];
    double *times = malloc(o_reps * sizeof *times);
    stage_acc st[4];
    double *ee = malloc(o_reps * sizeof *ee), *en = malloc(o_reps * sizeof *en),
           *hd = malloc(o_reps * sizeof *hd), *tp = malloc(o_reps * sizeof *tp);
    memset(st, 0, sizeof st);
    for (int r = 0; r < o_warmup + o_reps; r++) {
      double a = now_s();
      if (bf_tokenize(tok, s->text, -1, &tk, err, sizeof err) != BF_OK ||
          bf_fill(m, run, 1, &tk, TOPK, cand, err, sizeof err) != BF_OK)
        die("bf_fill: %s%s", err, "");
      double b = now_s();
      if (r >= o_warmup) {
        const bf_timings *t = bf_run_timings(run);
        int k = r - o_warmup;
        times[k] = (b - a) * 1e3;
        ee[k] = t->embed_ns * 1e-6; en[k] = t->encode_ns * 1e-6; hd[k] = t->head_ns * 1e-6; tp[k] = t->topk_ns * 1e-6;
      }
    }
    double med = median(times, o_reps);
    fprintf(o, "%s\n  \"%s\": {\"median_ms\": %.4f, \"min_ms\": %.4f, \"runs\": %d, \"stages_median\": "
            "{\"embed_ms\": %.4f, \"encode_ms\": %.4f, \"head_ms\": %.4f, \"topk_ms\": %.4f}}",
            first ? "" : ",", single_key(ss), med, times[0], o_reps, median(ee, o_reps), median(en, o_reps),
            median(hd, o_reps), median(tp, o_reps));
    tj += snprintf(top1_json + tj, sizeof top1_json - tj, "%s\n  \"%s\": [%d]", tj ? "," : "", ss->name, cand[0].id);
    fprintf(t5, "%s\n  \"%s\": [", ftell(t5) ? "," : "", ss->name);
    top5_json(t5, cand);
    fprintf(t5, "]");
    fprintf(stderr, "bertfill %s: single %s (%d tokens): %.1f ms\n", precision, single_key(ss), s->n, med);
    first = 0;
    free(times); free(ee); free(en); free(hd); free(tp);
  }
  fprintf(o, "\n },\n \"batch\": {");

  /* Batches: o_batch sentences per bf_fill, all tokens of a batch in each GEMM. */
  first = 1;
  int32_t *top = NULL;
  char *topbuf = NULL; size_t toplen = 0;
  FILE *tops = open_memstream(&topbuf, &toplen);
  bf_tokens *tks = calloc(o_batch, sizeof *tks);
  bf_cand *bc = malloc((size_t)o_batch * 64 * TOPK * sizeof *bc);
  for (int i = 0; i < nsets; i++) {
    sset *ss = &sets[i];
    if (strncmp(ss->name, "batch-", 6)) continue;
    int n = set_len(ss), R = rounds_for(ss);
    double *secs = malloc(R * sizeof *secs);
    top = xrealloc(top, n * sizeof *top);
    stage_acc acc;
    for (int r = 0; r < R; r++) {
      memset(&acc, 0, sizeof acc);
      double a = now_s();
      for (int j = 0; j < n; j += o_batch) {
        int nb = n - j < o_batch ? n - j : o_batch, nm = 0;
        for (int b = 0; b < nb; b++) {
          if (bf_tokenize(tok, ss->s[j + b].text, -1, &tks[b], err, sizeof err) != BF_OK)
            die("tokenize: %s%s", err, "");
          nm += tks[b].n_masks;
        }
        if (nm > o_batch * 64) die("too many masks in a batch%s%s", "", "");
        if (bf_fill(m, run, nb, tks, TOPK, bc, err, sizeof err) != BF_OK) die("bf_fill: %s%s", err, "");
        acc_add(&acc, bf_run_timings(run));
        for (int b = 0; b < nb; b++) top[j + b] = bc[b * TOPK].id;   /* one mask per sentence */
        if (r == R - 1) {   /* the top 5 of the last round */
          if (!j) fprintf(t5, "%s\n  \"%s\": [", ftell(t5) ? "," : "", ss->name);
          for (int b = 0; b < nb; b++) {
            if (j + b) fputc(',', t5);
            top5_json(t5, bc + b * TOPK);
          }
          if (j + nb >= n) fputc(']', t5);
        }
      }
      secs[r] = now_s() - a;
    }
    double med = median(secs, R);
    fprintf(o, "%s\n  \"%s\": {\"sentences\": %d, \"sent_per_s\": %.3f, \"seconds\": [", first ? "" : ",",
            ss->name + 6, n, n / med);
    for (int r = 0; r < R; r++) fprintf(o, "%s%.4f", r ? ", " : "", secs[r]);
    fprintf(o, "], \"stages_last_round\": ");
    acc_json(o, &acc, 1.0);
    fprintf(o, "}");
    fprintf(tops, ",\n  \"%s\": [", ss->name);
    for (int j = 0; j < n; j++) fprintf(tops, "%s%d", j ? "," : "", top[j]);
    fprintf(tops, "]");
    fprintf(stderr, "bertfill %s: %s (%d): %.1f sentences/s\n", precision, ss->name, n, n / med);
    first = 0;
    free(secs);
  }
  fclose(tops);
  fclose(t5);
  fprintf(o, "\n },\n \"top1\": {%s%s\n },\n", top1_json, topbuf ? topbuf : "");
  fprintf(o, " \"top5\": {%s\n },\n", t5buf ? t5buf : "");
  free(t5buf);
  fprintf(o, " \"cpu_s\": %.3f,\n \"peak_rss_mb\": %.1f\n}\n", cpu_s(), peak_rss_mb());
  fclose(o);
  free(topbuf); free(top); free(bc);
  for (int b = 0; b < o_batch; b++) bf_tokens_free(&tks[b]);
  free(tks);
  bf_tokens_free(&tk);
  bf_run_free(run);
  bf_model_release(m);
  return 0;
}

/* ================================================================ SQL mode */

static sqlite3 *db;

static void exec(const char *sql) {
  char *msg = NULL;
  if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) die("SQL error in %s: %s", sql, msg ? msg : "?");
}

static sqlite3_stmt *prep(const char *sql) {
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) die("cannot prepare %s: %s", sql, sqlite3_errmsg(db));
  return st;
}

static void step_all(sqlite3_stmt *st, const char *what) {
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {}
  if (rc != SQLITE_DONE) die("%s: %s", what, sqlite3_errmsg(db));
  sqlite3_reset(st);
}

/* ---- column fill, N rows, through SQL ---- */

static long long counter(const char *name) {
  sqlite3_stmt *st = prep("SELECT value FROM bertfill_stats WHERE name = ?");
  sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
  long long v = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
  sqlite3_finalize(st);
  return v;
}

static void column_table(const sset *ss, int n) {
  exec("SELECT bert_cache('clear')");
  exec("DROP TABLE IF EXISTS t; CREATE TABLE t(id INTEGER PRIMARY KEY, text TEXT, filled TEXT)");
  exec("BEGIN");
  sqlite3_stmt *st = prep("INSERT INTO t(text) VALUES (?)");
  for (int j = 0; j < n; j++) {
    sqlite3_bind_text(st, 1, ss->s[j].text, -1, SQLITE_STATIC);
    step_all(st, "insert");
  }
  sqlite3_finalize(st);
  exec("COMMIT");
}

/* One way of filling the column, timed: each statement in turn (one with an
** error stops the run, and the error is reported instead of a rate). */
static void column_run(FILE *o, const char *label, int n, const char *const *sqls, int first,
                       char **filled) {
  long long s0 = counter("seqs"), r0 = counter("encoder_runs");
  double t0 = now_s();
  const char *err = NULL;
  char *msg = NULL;
  for (int i = 0; sqls[i] && !err; i++)
    if (sqlite3_exec(db, sqls[i], NULL, NULL, &msg) != SQLITE_OK) err = msg ? msg : "?";
  double secs = now_s() - t0;
  long long seqs = counter("seqs") - s0, runs = counter("encoder_runs") - r0;
  fprintf(o, "%s\n   \"%s\": {\"seconds\": %.4f, \"seqs\": %lld, \"encoder_runs\": %lld", first ? "" : ",",
          label, secs, seqs, runs);
  if (err) {
    fprintf(o, ", \"error\": ");
    json_str(o, err);
    fprintf(stderr, "bertfill sql: column fill, %d rows, %s: error after %.1f s: %.80s...\n", n, label, secs, err);
  } else {
    fprintf(o, ", \"sent_per_s\": %.3f", n / secs);
    fprintf(stderr, "bertfill sql: column fill, %d rows, %s: %.1f s, %.1f sentences/s, %lld sequences\n", n, label,
            secs, n / secs, seqs);
  }
  fprintf(o, "}");
  sqlite3_free(msg);
  if (filled && !err) {   /* the column as text, to compare the ways */
    sqlite3_stmt *st = prep("SELECT group_concat(coalesce(filled, '<NULL>'), char(10)) FROM (SELECT filled FROM t ORDER BY id)");
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
      *filled = strdup((const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
  }
}

/* The batch-2000 set as a column: fill_rows + UPDATE, bert_prefill + UPDATE and a plain UPDATE
** with the default cache bounds, then fill_rows and bert_prefill with the bounds lowered below N. */
static void column_fill(FILE *o) {
  sset *ss = get_set("batch-2000");
  if (!ss->n) return;
  int n = set_len(ss);
  int limit = n / 4 > 1 ? n / 4 : 1, lru = n / 8 > 1 ? n / 8 : 1;
  static const char *const rows_sql[] = {
    "UPDATE t SET filled = f.filled FROM fill_rows('SELECT rowid, text FROM t') AS f WHERE t.rowid = f.key", NULL};
  static const char *const prefill_sql[] = {
    "SELECT bert_prefill(text) FROM t", "UPDATE t SET filled = bert_fill(text)", NULL};
  static const char *const plain_sql[] = {"UPDATE t SET filled = bert_fill(text)", NULL};
  char *a = NULL, *b = NULL, *c = NULL, *d = NULL;
  sqlite3_stmt *st = prep("SELECT bert_cache_limit(), bert_cache_lru()");
  long long old_limit = 100000, old_lru = 10000;
  if (sqlite3_step(st) == SQLITE_ROW) { old_limit = sqlite3_column_int64(st, 0); old_lru = sqlite3_column_int64(st, 1); }
  sqlite3_finalize(st);
  fprintf(o, " \"column\": {\"sentences\": %d,\n  \"default\": {\"cache_limit\": %lld, \"lru\": %lld,",
          n, old_limit, old_lru);
  column_table(ss, n);
  column_run(o, "fill_rows", n, rows_sql, 1, &a);
  column_table(ss, n);
  column_run(o, "prefill", n, prefill_sql, 0, &b);
  column_table(ss, n);
  column_run(o, "plain", n, plain_sql, 0, &c);
  char q[128];
  snprintf(q, sizeof q, "SELECT bert_cache_limit(%d), bert_cache_lru(%d)", limit, lru);
  exec(q);
  fprintf(o, "},\n  \"lowered\": {\"cache_limit\": %d, \"lru\": %d,", limit, lru);
  column_table(ss, n);
  column_run(o, "fill_rows", n, rows_sql, 1, &d);
  column_table(ss, n);
  column_run(o, "prefill", n, prefill_sql, 0, NULL);
  snprintf(q, sizeof q, "SELECT bert_cache_limit(%lld), bert_cache_lru(%lld)", old_limit, old_lru);
  exec(q);
  int same = a && b && c && d && !strcmp(a, b) && !strcmp(a, c) && !strcmp(a, d);
  fprintf(o, "},\n  \"same_filled\": %s},\n", same ? "true" : "false");
  if (!same) fprintf(stderr, "bertfill sql: column fill: the ways of filling the column disagree\n");
  free(a); free(b); free(c); free(d);
}

static int sql_mode(const char *dir, const char *out, const char *dbpath) {
  char *msg = NULL;
  remove(dbpath);
  if (sqlite3_open(dbpath, &db) != SQLITE_OK) die("cannot open %s: %s", dbpath, sqlite3_errmsg(db));
  sqlite3_enable_load_extension(db, 1);
  double t0 = now_s();
  if (sqlite3_load_extension(db, o_ext, NULL, &msg) != SQLITE_OK) die("cannot load %s: %s", o_ext, msg ? msg : "?");
  double ext_ms = (now_s() - t0) * 1e3;

  /* Model selection and load through SQL: bert_load(dir) is fp32 (run.sh
  ** unsets BERTFILL_PRECISION), bert_load(dir, 'int8') the int8 mode. */
  int fp32 = !strcmp(o_precision, "fp32");
  sqlite3_stmt *st = NULL;
  t0 = now_s();
  int rc = sqlite3_prepare_v2(db, fp32 ? "SELECT bert_load(?)" : "SELECT bert_load(?, ?)", -1, &st, NULL);
  if (rc == SQLITE_OK) {
    sqlite3_bind_text(st, 1, dir, -1, SQLITE_STATIC);
    if (!fp32) sqlite3_bind_text(st, 2, o_precision, -1, SQLITE_STATIC);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {}
  }
  double load_ms = (now_s() - t0) * 1e3;
  if (rc != SQLITE_DONE) {
    char why[1024];
    snprintf(why, sizeof why, "%s: SELECT bert_load(dir%s) failed: %s", o_ext, fp32 ? "" : ", 'int8'",
             sqlite3_errmsg(db));
    if (fp32) die("%s%s", why, "");
    sqlite3_finalize(st);
    sqlite3_close(db);
    return write_missing(out, why);
  }
  sqlite3_finalize(st);
  if (!fp32) {   /* bert_debug() says which mode the connection's model is in */
    st = prep("SELECT instr(bert_debug(), '\"precision\":\"' || ? || '\"')");
    sqlite3_bind_text(st, 1, o_precision, -1, SQLITE_STATIC);
    int says = sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0) > 0;
    sqlite3_finalize(st);
    if (!says) die("%s: after SELECT bert_load(dir, 'int8'), bert_debug() has no \"precision\":\"%s\"", o_ext, o_precision);
  }
  if (o_threads > 0) {
    char q[64];
    snprintf(q, sizeof q, "SELECT bert_threads(%d)", o_threads);
    if (sqlite3_exec(db, q, NULL, NULL, &msg) != SQLITE_OK) {
      fprintf(stderr, "bench_bertfill: note: %s (threads left at the default)\n", msg);
      sqlite3_free(msg); msg = NULL;
    }
  }

  FILE *o = fopen(out, "w");
  if (!o) die("cannot write %s%s", out, "");
  fprintf(o, "{\n \"engine\": \"bertfill (SQL, %s, %s)\",\n \"precision\": \"%s\",\n \"sqlite_version\": \"%s\",\n"
          " \"extension_load_ms\": %.3f,\n \"bert_load_ms\": %.3f,\n", o_ext, o_precision, o_precision,
          sqlite3_libversion(), ext_ms, load_ms);

  /* Cache hit: the same text again and again. */
  sset *ss = get_set("single-16");
  if (!ss->n) die("sentences file has no single-16 set%s%s", "", "");
  st = prep("SELECT bert_fill(?)");
  sqlite3_bind_text(st, 1, ss->s[0].text, -1, SQLITE_STATIC);
  t0 = now_s();
  step_all(st, "bert_fill");
  double miss_ms = (now_s() - t0) * 1e3;
  for (int i = 0; i < 1000; i++) step_all(st, "bert_fill");
  int blocks = 20, per = o_hits / blocks > 0 ? o_hits / blocks : 1;
  double us[64];
  for (int b = 0; b < blocks; b++) {
    t0 = now_s();
    for (int i = 0; i < per; i++) step_all(st, "bert_fill");
    us[b] = (now_s() - t0) * 1e6 / per;
  }
  sqlite3_finalize(st);
  double hit_us = median(us, blocks);
  fprintf(o, " \"first_fill_ms\": %.3f,\n \"cache_hit_us\": %.3f,\n \"cache_hit_calls\": %d,\n", miss_ms, hit_us,
          blocks * per);
  fprintf(stderr, "bertfill sql: cache hit %.2f us per bert_fill (first call %.1f ms)\n", hit_us, miss_ms);

  /* Cache-table hit: an LRU of one entry and two texts taken in turn, so
  ** every call misses the LRU and reads the bertfill_cache table. */
  {
    sset *s32 = get_set("single-32");
    sqlite3_stmt *lru = prep("SELECT bert_cache_lru()");
    long lru_max = sqlite3_step(lru) == SQLITE_ROW ? (long)sqlite3_column_int64(lru, 0) : 10000;
    sqlite3_finalize(lru);
    if (s32->n) {
      sqlite3_stmt *a = prep("SELECT bert_fill(?)"), *b = prep("SELECT bert_fill(?)");
      sqlite3_bind_text(a, 1, ss->s[0].text, -1, SQLITE_STATIC);
      sqlite3_bind_text(b, 1, s32->s[0].text, -1, SQLITE_STATIC);
      step_all(a, "bert_fill"); step_all(b, "bert_fill");
      exec("SELECT bert_cache_lru(1)");
      int calls = o_hits / 4 > 100 ? o_hits / 4 : 100;
      for (int i = 0; i < 100; i++) { step_all(a, "bert_fill"); step_all(b, "bert_fill"); }
      for (int blk = 0; blk < blocks; blk++) {
        t0 = now_s();
        for (int i = 0; i < calls / blocks / 2 + 1; i++) { step_all(a, "bert_fill"); step_all(b, "bert_fill"); }
        us[blk] = (now_s() - t0) * 1e6 / (2 * (calls / blocks / 2 + 1));
      }
      sqlite3_finalize(a); sqlite3_finalize(b);
      char q[64];
      snprintf(q, sizeof q, "SELECT bert_cache_lru(%ld)", lru_max);
      exec(q);
      fprintf(o, " \"cache_table_hit_us\": %.3f,\n", median(us, blocks));
      fprintf(stderr, "bertfill sql: cache-table hit (LRU missed) %.2f us per bert_fill\n", median(us, blocks));
    }
  }

  /* The same column filled row by row, without bert_prefill: one encoder
  ** run per row (what an UPDATE costs without the batched path). */
  ss = get_set("batch-256");
  if (ss->n) {
    int n = set_len(ss);
    exec("SELECT bert_cache('clear')");
    exec("DROP TABLE IF EXISTS t; CREATE TABLE t(id INTEGER PRIMARY KEY, text TEXT, filled TEXT)");
    exec("BEGIN");
    st = prep("INSERT INTO t(text) VALUES (?)");
    for (int j = 0; j < n; j++) {
      sqlite3_bind_text(st, 1, ss->s[j].text, -1, SQLITE_STATIC);
      step_all(st, "insert");
    }
    sqlite3_finalize(st);
    exec("COMMIT");
    t0 = now_s();
    exec("UPDATE t SET filled = bert_fill(text)");
    double secs = now_s() - t0;
    fprintf(o, " \"row_by_row_update\": {\"sentences\": %d, \"seconds\": %.4f, \"sent_per_s\": %.3f},\n",
            n, secs, n / secs);
    fprintf(stderr, "bertfill sql: UPDATE without bert_prefill, %d rows: %.1f sentences/s\n", n, n / secs);
  }

  /* A column in one statement: bert_prefill aggregate, then the UPDATE;
  ** the cache emptied before each round. */
  fprintf(o, " \"prefill\": {");
  int first = 1;
  char *fillbuf = NULL; size_t filllen = 0;
  FILE *fills = open_memstream(&fillbuf, &filllen);
  for (int i = 0; i < nsets; i++) {
    ss = &sets[i];
    if (strncmp(ss->name, "batch-", 6)) continue;
    int n = set_len(ss), R = rounds_for(ss);
    double *tot = malloc(R * sizeof *tot), pre = 0, upd = 0;
    fprintf(o, "%s\n  \"%s\": {\"sentences\": %d, \"rounds\": [", first ? "" : ",", ss->name + 6, n);
    for (int r = 0; r < R; r++) {
      exec("SELECT bert_cache('clear')");
      exec("DROP TABLE IF EXISTS t; CREATE TABLE t(id INTEGER PRIMARY KEY, text TEXT, filled TEXT)");
      exec("BEGIN");
      st = prep("INSERT INTO t(text) VALUES (?)");
      for (int j = 0; j < n; j++) {
        sqlite3_bind_text(st, 1, ss->s[j].text, -1, SQLITE_STATIC);
        step_all(st, "insert");
      }
      sqlite3_finalize(st);
      exec("COMMIT");
      t0 = now_s();
      st = prep("SELECT bert_prefill(text) FROM t");
      step_all(st, "bert_prefill");
      sqlite3_finalize(st);
      double t1 = now_s();
      exec("UPDATE t SET filled = bert_fill(text)");
      double t2 = now_s();
      pre = t1 - t0; upd = t2 - t1; tot[r] = t2 - t0;
      fprintf(o, "%s{\"prefill_s\": %.4f, \"update_s\": %.4f}", r ? ", " : "", pre, upd);
    }
    double med = median(tot, R);
    fprintf(o, "], \"sent_per_s\": %.3f}", n / med);
    fprintf(stderr, "bertfill sql: %s (%d): prefill %.2f s + update %.2f s; %.1f sentences/s\n", ss->name, n,
            pre, upd, n / med);
    free(tot);
    st = prep("SELECT filled FROM t ORDER BY id");
    fprintf(fills, "%s\n  \"%s\": [", first ? "" : ",", ss->name);
    int j = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
      const char *f = (const char *)sqlite3_column_text(st, 0);
      if (j++) fputc(',', fills);
      json_str(fills, f ? f : "");
    }
    fprintf(fills, "]");
    sqlite3_finalize(st);
    first = 0;
  }
  fclose(fills);
  fprintf(o, "\n },\n \"filled\": {%s\n },\n", fillbuf ? fillbuf : "");
  free(fillbuf);

  if (o_column) column_fill(o);

  /* Whatever the extension reports about itself (BLAS core, threads). */
  st = NULL;
  if (sqlite3_prepare_v2(db, "SELECT bert_debug()", -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) {
    fprintf(o, " \"bert_debug\": ");
    json_str(o, (const char *)sqlite3_column_text(st, 0));
    fprintf(o, ",\n");
  }
  sqlite3_finalize(st);
  fprintf(o, " \"cpu_s\": %.3f,\n \"peak_rss_mb\": %.1f\n}\n", cpu_s(), peak_rss_mb());
  fclose(o);
  sqlite3_close(db);
  return 0;
}

int main(int argc, char **argv) {
  const char *pos[4]; int np = 0;
  for (int i = 1; i < argc; i++) {
    if (!strncmp(argv[i], "--", 2) && i + 1 < argc) {
      const char *k = argv[i] + 2, *v = argv[++i];
      if (!strcmp(k, "reps")) o_reps = atoi(v);
      else if (!strcmp(k, "warmup")) o_warmup = atoi(v);
      else if (!strcmp(k, "rounds")) o_rounds = atoi(v);
      else if (!strcmp(k, "big-rounds")) o_big_rounds = atoi(v);
      else if (!strcmp(k, "batch")) o_batch = atoi(v);
      else if (!strcmp(k, "limit")) o_limit = atoi(v);
      else if (!strcmp(k, "threads")) o_threads = atoi(v);
      else if (!strcmp(k, "hits")) o_hits = atoi(v);
      else if (!strcmp(k, "column")) o_column = atoi(v);
      else if (!strcmp(k, "ext")) o_ext = v;
      else if (!strcmp(k, "precision")) o_precision = v;
      else die("unknown option --%s%s", k, "");
    } else if (np < 4) pos[np++] = argv[i];
    else die("too many arguments%s%s", "", "");
  }
  if (np != 4 || (strcmp(pos[0], "engine") && strcmp(pos[0], "sql")))
    die("usage: bench_bertfill engine|sql MODEL_DIR SENTENCES.tsv OUT.json [--reps N ...]%s%s", "", "");
  if (o_reps < 1 || o_rounds < 1 || o_big_rounds < 1 || o_batch < 1 || o_batch > 4096 || o_warmup < 0 || o_hits < 20)
    die("bad option values%s%s", "", "");
  if (strcmp(o_precision, "fp32") && strcmp(o_precision, "int8") && strcmp(o_precision, "bf16"))
    die("--precision %s: expected fp32, int8 or bf16%s", o_precision, "");
  read_sentences(pos[2]);
  if (!strcmp(pos[0], "engine")) return engine_mode(pos[1], pos[3]);
  if (!o_ext) die("sql mode needs --ext PATH_TO_bertfill.so%s%s", "", "");
  char dbpath[1024];
  snprintf(dbpath, sizeof dbpath, "%s.db", pos[3]);
  return sql_mode(pos[1], pos[3], dbpath);
}
