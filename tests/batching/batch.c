/*
** batch.c — dynamic batching (ext/sqlite/batcher.c) from the outside: many
** threads, each with its own connection, calling bert_fill and
** fill_candidates at once, half of them on one model and half on another,
** with different k, and with bad texts in between; every result is compared
** with a single-threaded run of the same call with batching off.
**
**   batch EXT MODEL_A MODEL_B THREADS CALLS on|off|fallback [--expect-merged]
**
** Reference: one connection per model, bert_batching(0), cache off: for each
** of NTEXTS texts, bert_fill and fill_candidates(text, k) for every k in KS.
** Then THREADS threads (cache off, bert_max_concurrent(1): one encoder run at
** a time, so callers queue) make CALLS calls each after a common start.
**
** Mode "off" (bert_batching(0)): every result must equal the reference bit
** for bit, and no encoder run may hold more than one sequence.
** Mode "on": token ids must be identical and scores within 1e-5 (a merged
** batch takes other matrix kernels, which round differently, ~1e-6); where
** two candidates are closer than that in the reference, their order may
** swap (counted as "near-tie swaps", not as mismatches).  With
** --expect-merged at least one encoder run must have held more than one
** sequence (t_batching.sh sets BERTFILL_BATCH_GATHER so that it is certain).
**
** Mode "fallback" (run with LD_PRELOAD=bigalloc.so and BERTFILL_BATCH_GATHER):
** batching on, every thread on MODEL_B, texts of 17-21 tokens, and every
** allocation larger than any single sentence's encoder scratch refused, so
** every merged run fails with "out of memory": the batcher must then run
** each sequence alone, and every call must succeed, bit-identical to the
** reference, with no merged run counted and at least one refused.
**
** Every bad text (too long, invalid UTF-8) must fail with its own error and
** nothing else may fail.  Prints one summary line and exits 1 on any
** mismatch, unexpected error or missing batch.
*/
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NTEXTS 40
#define NK 5
static const int KS[NK] = { 1, 3, 5, 8, 12 };
#define MAXC 64                       /* candidates of one call: masks x k <= 3 x 12 */

typedef struct { int n; int mask[MAXC], rank[MAXC], id[MAXC]; double score[MAXC]; } cands;

static const char *ext, *models[2];
static char *texts[NTEXTS];
static char *ref_fill[2][NTEXTS];
static cands ref_cand[2][NTEXTS][NK];
static int nthreads, ncalls, batching, fallback;
static double tol;

static void die(const char *what, sqlite3 *db) {
  fprintf(stderr, "batch: %s: %s\n", what, db ? sqlite3_errmsg(db) : "");
  exit(1);
}

static void exec(sqlite3 *db, const char *sql) {
  char *err = NULL;
  if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
    fprintf(stderr, "batch: %s: %s\n", sql, err ? err : "?");
    exit(1);
  }
}

static sqlite3 *open_conn(const char *model) {
  sqlite3 *db;
  if (sqlite3_open(":memory:", &db) != SQLITE_OK) die("open", db);
  sqlite3_enable_load_extension(db, 1);
  char *err = NULL;
  if (sqlite3_load_extension(db, ext, NULL, &err) != SQLITE_OK) {
    fprintf(stderr, "batch: cannot load %s: %s\n", ext, err ? err : "?");
    exit(1);
  }
  char *sql = sqlite3_mprintf("SELECT bert_load(%Q), bert_cache('off')", model);
  exec(db, sql);
  sqlite3_free(sql);
  return db;
}

/* bert_fill(text): malloc'ed result or NULL with *err (malloc'ed). */
static char *do_fill(sqlite3_stmt *st, const char *text, int len, char **err) {
  sqlite3_reset(st);
  sqlite3_bind_text(st, 1, text, len, SQLITE_STATIC);
  if (sqlite3_step(st) != SQLITE_ROW) {
    *err = strdup(sqlite3_errmsg(sqlite3_db_handle(st)));
    return NULL;
  }
  return strdup((const char *)sqlite3_column_text(st, 0));
}

/* fill_candidates(text, k) into c: 0, or -1 with *err. */
static int do_cand(sqlite3_stmt *st, const char *text, int len, int k, cands *c, char **err) {
  sqlite3_reset(st);
  sqlite3_bind_text(st, 1, text, len, SQLITE_STATIC);
  sqlite3_bind_int(st, 2, k);
  c->n = 0;
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW && c->n < MAXC) {
    c->mask[c->n] = sqlite3_column_int(st, 0);
    c->rank[c->n] = sqlite3_column_int(st, 1);
    c->id[c->n] = sqlite3_column_int(st, 2);
    c->score[c->n] = sqlite3_column_double(st, 3);
    c->n++;
  }
  if (rc != SQLITE_DONE) {
    *err = strdup(rc == SQLITE_ROW ? "too many rows" : sqlite3_errmsg(sqlite3_db_handle(st)));
    return -1;
  }
  return 0;
}

static void prepare(sqlite3 *db, sqlite3_stmt **fill, sqlite3_stmt **cand) {
  if (sqlite3_prepare_v2(db, "SELECT bert_fill(?1)", -1, fill, NULL) != SQLITE_OK) die("prepare", db);
  if (sqlite3_prepare_v2(db, "SELECT mask, rank, token_id, score FROM fill_candidates(?1, ?2)",
                         -1, cand, NULL) != SQLITE_OK) die("prepare", db);
}

/* Does got match want?  0: no; 1: yes; 2: yes, with a near-tie swap. */
static int same_cands(const cands *got, const cands *want) {
  if (got->n != want->n) return 0;
  int swapped = 0;
  for (int i = 0; i < got->n; i++) {
    if (got->mask[i] != want->mask[i] || got->rank[i] != want->rank[i]) return 0;
    if (tol == 0) {
      if (got->id[i] != want->id[i] || got->score[i] != want->score[i]) return 0;
      continue;
    }
    if (fabs(got->score[i] - want->score[i]) > tol) return 0;
    if (got->id[i] == want->id[i]) continue;
    /* A different token at this rank: only where the reference has a
    ** candidate of (nearly) the same score, i.e. a near tie. */
    int ok = 0, last = -1;
    for (int j = 0; j < want->n; j++) {
      if (want->mask[j] != got->mask[i]) continue;
      last = j;
      if (want->id[j] == got->id[i]) ok = fabs(want->score[j] - got->score[i]) <= tol;
    }
    int listed = 0;
    for (int j = 0; j < want->n; j++) listed |= want->mask[j] == got->mask[i] && want->id[j] == got->id[i];
    if (!listed && last >= 0) ok = fabs(want->score[last] - got->score[i]) <= tol;  /* beyond the list */
    if (!ok) return 0;
    swapped = 1;
  }
  return swapped ? 2 : 1;
}

/* Is bert_fill's result allowed to differ from the reference?  Only when
** some mask's top two reference candidates are within tol. */
static int fill_near_tie(const cands *k5) {
  if (tol == 0) return 0;
  for (int i = 0; i + 1 < k5->n; i++)
    if (k5->rank[i] == 1 && k5->mask[i + 1] == k5->mask[i] &&
        fabs(k5->score[i] - k5->score[i + 1]) <= tol) return 1;
  return 0;
}

static char long_text[1024];
static const char bad_utf8[] = "\xff[MASK]";

typedef struct {
  int id;
  long compared, mismatches, swaps, errors, bad_ok;
  pthread_barrier_t *opened, *start;
} worker;

static void *work(void *arg) {
  worker *w = arg;
  int mi = fallback ? 1 : w->id & 1;        /* half the threads on each model */
  sqlite3 *db = open_conn(models[mi]);
  sqlite3_stmt *fill, *cand;
  prepare(db, &fill, &cand);
  pthread_barrier_wait(w->opened);
  pthread_barrier_wait(w->start);
  for (int j = 0; j < ncalls; j++) {
    /* distinct texts at each step, except every 4th step, where pairs of
    ** threads (same model) ask for the same text at once */
    int pair = fallback ? w->id & ~1 : w->id & ~2;   /* same model */
    int i = j % 4 == 3 ? (j * nthreads + pair) % NTEXTS : (j * nthreads + w->id) % NTEXTS;
    int kind = (j + w->id) % 3;
    char *err = NULL;
    if ((j + 1) % 7 == 0) {                 /* a bad text: fails alone */
      int too_long = (j / 7 + w->id) & 1;
      char *got = do_fill(fill, too_long ? long_text : bad_utf8, -1, &err);
      const char *want = too_long ? "tokens long" : "invalid UTF-8 at byte 0";
      if (got || !err || !strstr(err, want)) {
        if (w->errors++ < 3)
          fprintf(stderr, "batch: thread %d call %d: bad text gave %s\n", w->id, j, got ? got : err ? err : "?");
      } else {
        w->bad_ok++;
      }
      free(got);
      free(err);
      continue;
    }
    if (kind == 0) {
      char *got = do_fill(fill, texts[i], -1, &err);
      if (!got) {
        if (w->errors++ < 3) fprintf(stderr, "batch: thread %d call %d: %s\n", w->id, j, err);
        free(err);
        continue;
      }
      if (strcmp(got, ref_fill[mi][i]) != 0) {
        if (fill_near_tie(&ref_cand[mi][i][2])) w->swaps++;
        else if (w->mismatches++ < 3)
          fprintf(stderr, "batch: MISMATCH bert_fill thread %d text %d:\n got  %s\n want %s\n",
                  w->id, i, got, ref_fill[mi][i]);
      }
      free(got);
    } else {
      int ki = (j + 2 * w->id) % NK;
      cands got;
      if (do_cand(cand, texts[i], -1, KS[ki], &got, &err) != 0) {
        if (w->errors++ < 3) fprintf(stderr, "batch: thread %d call %d: %s\n", w->id, j, err);
        free(err);
        continue;
      }
      int s = same_cands(&got, &ref_cand[mi][i][ki]);
      if (s == 2) w->swaps++;
      if (s == 0 && w->mismatches++ < 3) {
        fprintf(stderr, "batch: MISMATCH fill_candidates thread %d text %d k %d:\n", w->id, i, KS[ki]);
        for (int r = 0; r < got.n && r < 6; r++)
          fprintf(stderr, "  got %d %d %d %.9g   want %d %d %d %.9g\n", got.mask[r], got.rank[r],
                  got.id[r], got.score[r], ref_cand[mi][i][ki].mask[r], ref_cand[mi][i][ki].rank[r],
                  ref_cand[mi][i][ki].id[r], ref_cand[mi][i][ki].score[r]);
      }
    }
    w->compared++;
  }
  sqlite3_finalize(fill);
  sqlite3_finalize(cand);
  if (sqlite3_close(db) != SQLITE_OK) { fprintf(stderr, "batch: close failed\n"); w->errors++; }
  return NULL;
}

static sqlite3_int64 stat_value(sqlite3 *db, const char *name) {
  sqlite3_stmt *st;
  sqlite3_int64 v = -1;
  if (sqlite3_prepare_v2(db, "SELECT count FROM bertfill_stats WHERE name = ?1", -1, &st, NULL) != SQLITE_OK)
    die("stats", db);
  sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
  if (sqlite3_step(st) == SQLITE_ROW) v = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return v;
}

int main(int argc, char **argv) {
  if (argc < 7) {
    fprintf(stderr, "usage: batch EXT MODEL_A MODEL_B THREADS CALLS on|off [--expect-merged]\n");
    return 2;
  }
  ext = argv[1];
  models[0] = argv[2];
  models[1] = argv[3];
  nthreads = atoi(argv[4]);
  ncalls = atoi(argv[5]);
  fallback = strcmp(argv[6], "fallback") == 0;
  batching = fallback || strcmp(argv[6], "on") == 0;
  int expect_merged = argc > 7 && strcmp(argv[7], "--expect-merged") == 0;
  tol = batching && !fallback ? 1e-5 : 0;
  void (*bigalloc_arm)(size_t) = NULL;
  long (*bigalloc_failures)(void) = NULL;
  if (fallback) {
    *(void **)&bigalloc_arm = dlsym(RTLD_DEFAULT, "bigalloc_arm");
    *(void **)&bigalloc_failures = dlsym(RTLD_DEFAULT, "bigalloc_failures");
    if (!bigalloc_arm || !bigalloc_failures) {
      fprintf(stderr, "batch: mode fallback needs LD_PRELOAD=bigalloc.so\n");
      return 2;
    }
  }
  if (nthreads < 1 || nthreads > 256 || ncalls < 1) { fprintf(stderr, "batch: bad arguments\n"); return 2; }

  /* Texts of common characters (in every test vocabulary), 1-3 masks. */
  static const char chars[] = "的一是不了人我在有他这为之大来以个中上们到说国和地也子时道出而要于就下得可你年生自会那后能对着事其里所去行过家十用发天如然作方成者多日都三小军二无同么经法当起与好看学进种将还分";
  int nchars = (int)(sizeof chars - 1) / 3;
  unsigned seed = 777;
  for (int i = 0; i < NTEXTS; i++) {
    char buf[512];
    int n = 0, len = 3 + (int)((seed = seed * 1103515245u + 12345u) >> 16) % 30;
    int masks = 1 + i % 3;
    if (fallback) { len = 14 + (int)(seed >> 16) % 5; masks = 1; }   /* 17-21 tokens */
    for (int c = 0; c < len; c++) {
      seed = seed * 1103515245u + 12345u;
      if (masks && (int)((seed >> 16) % len) < 2) { memcpy(buf + n, "[MASK]", 6); n += 6; masks--; continue; }
      memcpy(buf + n, chars + 3 * ((seed >> 16) % nchars), 3);
      n += 3;
    }
    while (masks--) { memcpy(buf + n, "[MASK]", 6); n += 6; }
    buf[n] = 0;
    texts[i] = strdup(buf);
  }
  int n = 0;                                /* longer than any test model takes */
  for (int c = 0; c < 300; c++) { memcpy(long_text + n, "我", 3); n += 3; }
  memcpy(long_text + n, "[MASK]", 7);

  /* Reference: one thread per model, batching off, cache off. */
  sqlite3 *db = NULL;
  for (int mi = 0; mi < 2; mi++) {
    sqlite3 *r = open_conn(models[mi]);
    exec(r, "SELECT bert_batching(0)");
    sqlite3_stmt *fill, *cand;
    prepare(r, &fill, &cand);
    for (int i = 0; i < NTEXTS; i++) {
      char *err = NULL;
      if (!(ref_fill[mi][i] = do_fill(fill, texts[i], -1, &err))) {
        fprintf(stderr, "batch: reference text %d: %s\n", i, err);
        return 1;
      }
      for (int ki = 0; ki < NK; ki++)
        if (do_cand(cand, texts[i], -1, KS[ki], &ref_cand[mi][i][ki], &err) != 0) {
          fprintf(stderr, "batch: reference text %d k %d: %s\n", i, KS[ki], err);
          return 1;
        }
    }
    sqlite3_finalize(fill);
    sqlite3_finalize(cand);
    if (mi == (fallback ? 1 : 0)) db = r; else sqlite3_close(r);   /* stays open: settings, stats */
  }
  char sql[200];
  snprintf(sql, sizeof sql, "SELECT bert_batching(%d), bert_max_concurrent(1), bert_busy_timeout(600000), "
           "bert_stats_reset()", batching);
  exec(db, sql);

  pthread_t *th = calloc((size_t)nthreads, sizeof *th);
  worker *w = calloc((size_t)nthreads, sizeof *w);
  pthread_barrier_t opened, start;
  pthread_barrier_init(&opened, NULL, (unsigned)nthreads + 1);
  pthread_barrier_init(&start, NULL, (unsigned)nthreads + 1);
  for (int t = 0; t < nthreads; t++) {
    w[t].id = t;
    w[t].opened = &opened;
    w[t].start = &start;
    if (pthread_create(&th[t], NULL, work, &w[t]) != 0) { perror("pthread_create"); return 1; }
  }
  pthread_barrier_wait(&opened);            /* every connection open */
  size_t limit = 0;
  if (fallback) {
    /* Above the largest scratch buffer of one sentence (the feed-forward
    ** activations, tokens x intermediate_size floats), below that of any
    ** two: every merged run fails, no single one does. */
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db, "SELECT json_extract(bert_debug(), '$.model.config.intermediate_size')",
                           -1, &q, NULL) != SQLITE_OK || sqlite3_step(q) != SQLITE_ROW) die("config", db);
    int inter = sqlite3_column_int(q, 0);
    sqlite3_finalize(q);
    int maxt = 0, mint = 1 << 30;
    for (int i = 0; i < NTEXTS; i++) {
      char *sql = sqlite3_mprintf("SELECT json_array_length(bert_tokenize(%Q))", texts[i]);
      if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK || sqlite3_step(q) != SQLITE_ROW) die("tokens", db);
      int nt = sqlite3_column_int(q, 0);
      sqlite3_finalize(q);
      sqlite3_free(sql);
      if (nt > maxt) maxt = nt;
      if (nt < mint) mint = nt;
    }
    if (2 * mint <= maxt) { fprintf(stderr, "batch: texts of %d..%d tokens: no limit between one and two\n", mint, maxt); return 1; }
    limit = (size_t)maxt * (size_t)inter * sizeof(float) + 1;
    bigalloc_arm(limit);
  }
  pthread_barrier_wait(&start);
  long compared = 0, mismatches = 0, swaps = 0, errors = 0, bad_ok = 0, bad_want = 0;
  for (int t = 0; t < nthreads; t++) {
    pthread_join(th[t], NULL);
    compared += w[t].compared; mismatches += w[t].mismatches; swaps += w[t].swaps;
    errors += w[t].errors; bad_ok += w[t].bad_ok;
  }
  for (int j = 0; j < ncalls; j++) bad_want += (j + 1) % 7 == 0;
  bad_want *= nthreads;
  long refused = fallback ? bigalloc_failures() : 0;
  if (fallback) bigalloc_arm(0);
  pthread_barrier_destroy(&opened);
  pthread_barrier_destroy(&start);

  /* What the batcher did: encoder runs, sequences, and the largest batch. */
  sqlite3_int64 runs = stat_value(db, "encoder_runs"), seqs = stat_value(db, "seqs");
  sqlite3_int64 miss = stat_value(db, "miss"), merged = stat_value(db, "batches");
  int maxbatch = 0;
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(db, "SELECT name FROM bertfill_stats WHERE kind = 'batch' AND count > 0",
                         -1, &st, NULL) != SQLITE_OK) die("stats", db);
  while (sqlite3_step(st) == SQLITE_ROW) {
    const char *name = (const char *)sqlite3_column_text(st, 0);   /* batch_N, batch_LO_HI */
    const char *hi = strrchr(name, '_');
    int v = hi ? atoi(hi + 1) : 0;
    if (v > maxbatch) maxbatch = v;
  }
  sqlite3_finalize(st);
  exec(db, "SELECT bert_batching(1), bert_max_concurrent(0), bert_busy_timeout(2000)");
  sqlite3_close(db);

  printf("batching %s, threads %d x calls %d on %s: %ld results compared, %ld mismatches, "
         "%ld near-tie swaps, %ld errors, %ld/%ld bad texts rejected alone; %lld misses in %lld encoder "
         "runs (%lld merged, %lld sequences, largest batch %d)",
         fallback ? "on (merged runs made to fail)" : batching ? "on" : "off", nthreads, ncalls,
         fallback ? "1 model" : "2 models", compared, mismatches, swaps, errors, bad_ok, bad_want,
         (long long)miss, (long long)runs, (long long)merged, (long long)seqs, maxbatch);
  if (fallback) printf("; %ld allocations of >= %zu bytes refused", refused, limit);
  printf("\n");
  int bad = mismatches || errors || bad_ok != bad_want ||
            compared != (long)nthreads * ncalls - bad_want;
  if (!batching && (merged != 0 || runs != miss)) {
    printf("batching off, yet %lld runs held more than one sequence\n", (long long)merged);
    bad = 1;
  }
  if (expect_merged && merged < 1) { printf("no encoder run held more than one sequence\n"); bad = 1; }
  if (fallback && (refused < 1 || merged != 0)) {
    printf("fallback: %ld merged runs refused, %lld merged runs succeeded (want > 0 and 0)\n",
           refused, (long long)merged);
    bad = 1;
  }
  for (int i = 0; i < NTEXTS; i++) { free(texts[i]); free(ref_fill[0][i]); free(ref_fill[1][i]); }
  free(th);
  free(w);
  return bad ? 1 : 0;
}
