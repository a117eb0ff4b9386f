/*
** threads.c — many connections in many threads of one process calling
** bert_fill and fill_candidates at once on one shared model: every result
** must be identical to a single-threaded run.
**
**   threads EXT MODEL_DIR THREADS CALLS [ROUNDS]
**
** EXT is the extension (./bertfill); MODEL_DIR the model every connection
** loads with bert_load (one shared copy in the process).  First one thread
** computes the reference results of NTEXTS texts with the cache off.  Then,
** per round, THREADS threads each open their own in-memory connection and
** make CALLS calls (alternating bert_fill and fill_candidates(text, 5), texts
** chosen so that threads hit the same texts at the same time), comparing
** every result with the reference: round 1 with the cache off (every call
** runs the encoder), later rounds with the cache on (shared LRU,
** per-connection tables) and the LRU cleared at the start of each round.
** THREADS_MODE=exact (default): bert_batching(0) and bert_max_concurrent =
** THREADS, so up to THREADS encoder runs at once, and results must be equal
** byte for byte.  THREADS_MODE=batched: bert_batching(1) and one encoder
** slot, so concurrent calls are merged into shared encoder runs (the
** batches counter says how many); tokens must be equal, scores within
** 1e-5 (other GEMM shapes round differently).
**
** Prints "threads T calls C rounds R: N results compared, M mismatches,
** E errors" and, per round, the process RSS: scratch memory must stay bounded
** (the RSS after the last round may exceed the RSS after round 2 by at most
** 8 MB, or $BF_THREADS_RSS_SLACK_MB).  Exits 1 on any mismatch, error or growth.  Built by
** tests/c/t_c.sh threads (plain; valgrind in make valgrind) and
** tests/reliability/tsan.sh (ThreadSanitizer).
*/
#include <math.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NTEXTS 48
static const char *ext, *model;
static char *texts[NTEXTS];
static char *ref_fill[NTEXTS], *ref_cand[NTEXTS];
static int nthreads, ncalls;
static int cache_on;

static void die(const char *what, sqlite3 *db) {
  fprintf(stderr, "threads: %s: %s\n", what, db ? sqlite3_errmsg(db) : "");
  exit(1);
}

static sqlite3 *open_conn(void) {
  sqlite3 *db;
  if (sqlite3_open(":memory:", &db) != SQLITE_OK) die("open", db);
  sqlite3_enable_load_extension(db, 1);
  char *err = NULL;
  if (sqlite3_load_extension(db, ext, NULL, &err) != SQLITE_OK) {
    fprintf(stderr, "threads: cannot load %s: %s\n", ext, err ? err : "?");
    exit(1);
  }
  char sql[1200];
  snprintf(sql, sizeof sql, "SELECT bert_load('%s')", model);
  if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
    fprintf(stderr, "threads: %s: %s\n", sql, err ? err : "?");
    exit(1);
  }
  if (sqlite3_exec(db, cache_on ? "SELECT bert_cache('on')" : "SELECT bert_cache('off')",
                   NULL, NULL, NULL) != SQLITE_OK) die("bert_cache", db);
  return db;
}

/* Result of one call as a string (malloc'ed), or NULL with *err set. */
static char *call(sqlite3 *db, sqlite3_stmt *fill, sqlite3_stmt *cand, int kind, int i, char **err) {
  sqlite3_stmt *st = kind == 0 ? fill : cand;
  sqlite3_reset(st);
  sqlite3_bind_text(st, 1, texts[i], -1, SQLITE_STATIC);
  size_t cap = 256, n = 0;
  char *out = malloc(cap);
  out[0] = 0;
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    char line[1024];
    if (kind == 0)
      snprintf(line, sizeof line, "%s", (const char *)sqlite3_column_text(st, 0));
    else   /* mask rank token token_id score(exact bits via %a) sequence */
      snprintf(line, sizeof line, "%d %d %s %d %a %s\n", sqlite3_column_int(st, 0),
               sqlite3_column_int(st, 1), (const char *)sqlite3_column_text(st, 2),
               sqlite3_column_int(st, 3), sqlite3_column_double(st, 4),
               (const char *)sqlite3_column_text(st, 5));
    size_t l = strlen(line);
    if (n + l + 1 > cap) { cap = 2 * (n + l + 1); out = realloc(out, cap); }
    memcpy(out + n, line, l + 1);
    n += l;
  }
  if (rc != SQLITE_DONE) {
    *err = strdup(sqlite3_errmsg(db));
    free(out);
    return NULL;
  }
  return out;
}

static void prepare(sqlite3 *db, sqlite3_stmt **fill, sqlite3_stmt **cand) {
  if (sqlite3_prepare_v2(db, "SELECT bert_fill(?1)", -1, fill, NULL) != SQLITE_OK) die("prepare", db);
  if (sqlite3_prepare_v2(db, "SELECT mask, rank, token, token_id, score, sequence "
                         "FROM fill_candidates(?1, 5)", -1, cand, NULL) != SQLITE_OK) die("prepare", db);
}

/* Exact mode: byte for byte.  Batched mode: candidates merged into one
** encoder run with other texts agree to ~1e-6 (other GEMM shapes): the same
** tokens in the same order, scores within 1e-5. */
static int batched;
static int same(const char *got, const char *want, int kind) {
  if (strcmp(got, want) == 0) return 1;
  if (!batched || kind == 0) return 0;
  while (*got && *want) {
    const char *eg = strchr(got, '\n'), *ew = strchr(want, '\n');
    if (!eg || !ew) return 0;
    int m1, r1, id1, m2, r2, id2;
    char t1[256], t2[256];
    double s1, s2;
    int n1 = 0, n2 = 0;
    if (sscanf(got, "%d %d %255s %d %la %n", &m1, &r1, t1, &id1, &s1, &n1) != 5 ||
        sscanf(want, "%d %d %255s %d %la %n", &m2, &r2, t2, &id2, &s2, &n2) != 5) return 0;
    if (m1 != m2 || r1 != r2 || id1 != id2 || strcmp(t1, t2) != 0 || fabs(s1 - s2) > 1e-5) return 0;
    if (eg - (got + n1) != ew - (want + n2) || memcmp(got + n1, want + n2, (size_t)(eg - (got + n1))) != 0)
      return 0;                                   /* the sequence column */
    got = eg + 1;
    want = ew + 1;
  }
  return *got == 0 && *want == 0;
}

typedef struct { int id; long compared, mismatches, errors; pthread_barrier_t *start; } worker;

static void *work(void *arg) {
  worker *w = arg;
  sqlite3 *db = open_conn();
  sqlite3_stmt *fill, *cand;
  prepare(db, &fill, &cand);
  pthread_barrier_wait(w->start);
  for (int j = 0; j < ncalls; j++) {
    int i = (j * 5 + w->id / 2) % NTEXTS;      /* pairs of threads on the same text */
    int kind = (j + w->id) & 1;
    char *err = NULL;
    char *got = call(db, fill, cand, kind, i, &err);
    if (!got) {
      if (w->errors++ < 3) fprintf(stderr, "threads: thread %d call %d: %s\n", w->id, j, err);
      free(err);
      continue;
    }
    const char *want = kind == 0 ? ref_fill[i] : ref_cand[i];
    if (!same(got, want, kind) && w->mismatches++ < 3)
      fprintf(stderr, "threads: MISMATCH thread %d text %d kind %d:\n got  %.300s\n want %.300s\n",
              w->id, i, kind, got, want);
    w->compared++;
    free(got);
  }
  sqlite3_finalize(fill);
  sqlite3_finalize(cand);
  if (sqlite3_close(db) != SQLITE_OK) { fprintf(stderr, "threads: close failed\n"); w->errors++; }
  return NULL;
}

static long counter(sqlite3 *db, const char *name) {
  sqlite3_stmt *st;
  long v = -1;
  if (sqlite3_prepare_v2(db, "SELECT value FROM bertfill_stats WHERE name = ?1", -1, &st, NULL) != SQLITE_OK)
    return -1;
  sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
  if (sqlite3_step(st) == SQLITE_ROW) v = (long)sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return v;
}

static long rss_kb(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kb = -1;
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, "VmRSS:", 6) == 0) kb = atol(line + 6);
  if (f) fclose(f);
  return kb;
}

int main(int argc, char **argv) {
  if (argc < 5) { fprintf(stderr, "usage: threads EXT MODEL_DIR THREADS CALLS [ROUNDS]\n"); return 2; }
  ext = argv[1];
  model = argv[2];
  nthreads = atoi(argv[3]);
  ncalls = atoi(argv[4]);
  int rounds = argc > 5 ? atoi(argv[5]) : 3;
  if (sqlite3_threadsafe() == 0) { fprintf(stderr, "threads: SQLite built without threads\n"); return 1; }

  /* Texts of common characters (in every test vocabulary), 1-3 masks. */
  static const char chars[] = "的一是不了人我在有他这为之大来以个中上们到说国和地也子时道出而要于就下得可你年生自会那后能对着事其里所去行过家十用发天如然作方成者多日都三小军二无同么经法当起与好看学进种将还分";
  int nchars = (int)(sizeof chars - 1) / 3;
  unsigned seed = 12345;
  for (int i = 0; i < NTEXTS; i++) {
    char buf[512];
    int n = 0, len = 4 + (int)((seed = seed * 1103515245u + 12345u) >> 16) % 28;
    int masks = 1 + i % 3;
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

  /* Reference: one thread, cache off. */
  sqlite3 *db = open_conn();
  sqlite3_stmt *fill, *cand;
  prepare(db, &fill, &cand);
  for (int i = 0; i < NTEXTS; i++) {
    char *err = NULL;
    ref_fill[i] = call(db, fill, cand, 0, i, &err);
    ref_cand[i] = call(db, fill, cand, 1, i, &err);
    if (!ref_fill[i] || !ref_cand[i]) { fprintf(stderr, "threads: reference text %d: %s\n", i, err); return 1; }
  }
  const char *mode = getenv("THREADS_MODE");
  batched = mode && strcmp(mode, "batched") == 0;
  char sql[128];
  /* exact: every thread its own encoder slot, no dynamic batching;
  ** batched: one slot, concurrent calls merged into shared encoder runs */
  snprintf(sql, sizeof sql, "SELECT bert_max_concurrent(%d), bert_busy_timeout(600000)",
           batched ? 1 : nthreads);
  if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK) die("settings", db);
  if (sqlite3_exec(db, batched ? "SELECT bert_batching(1)" : "SELECT bert_batching(0)",
                   NULL, NULL, NULL) != SQLITE_OK && batched) die("bert_batching", db);
  long batches0 = counter(db, "batches");
  sqlite3_finalize(fill);
  sqlite3_finalize(cand);

  long compared = 0, mismatches = 0, errors = 0, rss[16] = { 0 };
  for (int r = 0; r < rounds && r < 16; r++) {
    cache_on = r > 0;
    sqlite3_exec(db, "SELECT bert_cache('clear')", NULL, NULL, NULL);   /* empties the shared LRU */
    pthread_t *th = calloc((size_t)nthreads, sizeof *th);
    worker *w = calloc((size_t)nthreads, sizeof *w);
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)nthreads);
    for (int t = 0; t < nthreads; t++) {
      w[t].id = t;
      w[t].start = &start;
      if (pthread_create(&th[t], NULL, work, &w[t]) != 0) { perror("pthread_create"); return 1; }
    }
    for (int t = 0; t < nthreads; t++) {
      pthread_join(th[t], NULL);
      compared += w[t].compared; mismatches += w[t].mismatches; errors += w[t].errors;
    }
    pthread_barrier_destroy(&start);
    free(th);
    free(w);
    rss[r] = rss_kb();
    printf("round %d (cache %s): RSS %ld kB\n", r + 1, cache_on ? "on" : "off", rss[r]);
  }
  long merged = counter(db, "batches") - batches0;
  sqlite3_close(db);
  const char *slack = getenv("BF_THREADS_RSS_SLACK_MB");   /* TSan: its shadow memory grows */
  long slack_kb = (slack ? atol(slack) : 8) * 1024;
  int grew = rounds >= 3 && rss[rounds - 1] > rss[1] + slack_kb;
  printf("threads %d calls %d rounds %d (%s): %ld results compared, %ld mismatches, %ld errors, "
         "%ld merged encoder runs%s\n", nthreads, ncalls, rounds,
         batched ? "batched, scores to 1e-5" : "exact", compared, mismatches, errors, merged,
         grew ? ", RSS GREW" : "");
  for (int i = 0; i < NTEXTS; i++) { free(texts[i]); free(ref_fill[i]); free(ref_cand[i]); }
  return mismatches || errors || grew || compared != (long)nthreads * ncalls * rounds ? 1 : 0;
}
