/*
** oom_threads.c — allocation failures while many threads share encoder
** runs (dynamic batching: a leader runs one bf_fill for the queued calls of
** several connections).  Run with failmalloc.so in LD_PRELOAD
** (tests/reliability/oom.sh):
**
**   oom_threads EXT MODEL_DIR THREADS SECONDS
**
** THREADS threads, each with its own connection (cache off, so every call
** runs the encoder; one encoder slot and batching on, so calls are merged),
** call bert_fill and fill_candidates on 24 texts whose results were computed
** before; meanwhile the main thread arms the shim again and again so that
** the n-th allocation from then on fails (n random in 1..400, whichever
** thread makes it).  Every call must either succeed with the reference
** result (scores to 1e-5: merged batches round differently) or fail with
** SQLITE_NOMEM / an error that names memory; anything else, or a crash, is
** a failure.  Prints the calls, the failures injected and how they surfaced.
*/
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NT 24
static void (*arm)(long);
static long (*state)(long *);
static const char *ext, *model;
static char texts[NT][128];
static char ref_fill[NT][256];
static int ref_id[NT][3];
static double ref_score[NT][3];
static volatile int stop;
static long calls, ok_calls, nomem, memerr, other, wrong;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char first_bad[400];
static pthread_barrier_t ready;   /* connections open before any failure */

static sqlite3 *open_conn(void) {
  sqlite3 *db;
  char *err = NULL;
  if (sqlite3_open(":memory:", &db) != SQLITE_OK) exit(1);
  sqlite3_enable_load_extension(db, 1);
  if (sqlite3_load_extension(db, ext, NULL, &err) != SQLITE_OK) { fprintf(stderr, "load: %s\n", err); exit(1); }
  char sql[1200];
  snprintf(sql, sizeof sql, "SELECT bert_load('%s'), bert_cache('off')", model);
  if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) { fprintf(stderr, "%s\n", err); exit(1); }
  return db;
}

/* kind 0: bert_fill into out; kind 1: the top 3 ids/scores of mask 0. */
static int call(sqlite3 *db, int kind, int i, char *out, int *ids, double *scores) {
  sqlite3_stmt *st;
  const char *sql = kind == 0 ? "SELECT bert_fill(?1)"
                              : "SELECT token_id, score FROM fill_candidates(?1, 3) WHERE mask = 0";
  int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
  if (rc != SQLITE_OK) return rc;
  if ((rc = sqlite3_bind_text(st, 1, texts[i], -1, SQLITE_STATIC)) != SQLITE_OK) { sqlite3_finalize(st); return rc; }
  int r = 0;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (kind == 0) {
      int type = sqlite3_column_type(st, 0);
      const char *z = (const char *)sqlite3_column_text(st, 0);
      if (!z && type != SQLITE_NULL) { rc = SQLITE_NOMEM; break; }
      snprintf(out, 256, "%s", z ? z : "(null)");
    } else if (r < 3) {
      ids[r] = sqlite3_column_int(st, 0);
      scores[r] = sqlite3_column_double(st, 1);
      r++;
    }
  }
  if (rc == SQLITE_DONE && kind == 1 && r != 3) rc = -1;
  sqlite3_finalize(st);
  return rc;
}

static void *work(void *arg) {
  int id = (int)(long)arg;
  sqlite3 *db = open_conn();
  pthread_barrier_wait(&ready);
  unsigned seed = (unsigned)id * 7919u + 1;
  while (!stop) {
    int i = (int)((seed = seed * 1103515245u + 12345u) >> 16) % NT, kind = (int)(seed >> 8) & 1;
    char out[256] = "";
    int ids[3];
    double sc[3];
    int rc = call(db, kind, i, out, ids, sc);
    const char *msg = sqlite3_errmsg(db);
    pthread_mutex_lock(&mu);
    calls++;
    if (rc == SQLITE_DONE) {
      int good = kind == 0 ? strcmp(out, ref_fill[i]) == 0
                           : ids[0] == ref_id[i][0] && ids[1] == ref_id[i][1] && ids[2] == ref_id[i][2] &&
                             fabs(sc[0] - ref_score[i][0]) < 1e-5 && fabs(sc[1] - ref_score[i][1]) < 1e-5 &&
                             fabs(sc[2] - ref_score[i][2]) < 1e-5;
      if (good) ok_calls++;
      else if (!wrong++) snprintf(first_bad, sizeof first_bad, "wrong result for text %d kind %d: '%s'", i, kind, out);
    } else if ((rc & 0xff) == SQLITE_NOMEM) nomem++;
    else if (msg && strstr(msg, "memory")) memerr++;
    else if (!other++) snprintf(first_bad, sizeof first_bad, "rc %d: %s", rc, msg ? msg : "");
    pthread_mutex_unlock(&mu);
  }
  sqlite3_close(db);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 5) { fprintf(stderr, "usage: oom_threads EXT MODEL_DIR THREADS SECONDS\n"); return 2; }
  ext = argv[1]; model = argv[2];
  int nthreads = atoi(argv[3]);
  double secs = atof(argv[4]);
  arm = (void (*)(long))dlsym(RTLD_DEFAULT, "failmalloc_arm");
  state = (long (*)(long *))dlsym(RTLD_DEFAULT, "failmalloc_state");
  if (!arm || !state) { fprintf(stderr, "oom_threads: run with LD_PRELOAD=failmalloc.so\n"); return 2; }
  static const char *chars[] = { "的", "一", "是", "不", "了", "人", "我", "在", "有", "他", "这", "为" };
  sqlite3 *db = open_conn();
  for (int i = 0; i < NT; i++) {
    snprintf(texts[i], 128, "[MASK]");
    for (int j = 0; j < 3 + i % 5; j++) strcat(texts[i], chars[(i * 7 + j * 3) % 12]);
    if (i % 2) strcat(texts[i], "[MASK]");
    int ids[3];
    double sc[3];
    if (call(db, 0, i, ref_fill[i], NULL, NULL) != SQLITE_DONE || call(db, 1, i, NULL, ids, sc) != SQLITE_DONE) {
      fprintf(stderr, "oom_threads: reference: %s\n", sqlite3_errmsg(db));
      return 1;
    }
    memcpy(ref_id[i], ids, sizeof ids);
    memcpy(ref_score[i], sc, sizeof sc);
  }
  if (sqlite3_exec(db, "SELECT bert_max_concurrent(1), bert_busy_timeout(600000), bert_batching(1)",
                   NULL, NULL, NULL) != SQLITE_OK) { fprintf(stderr, "settings: %s\n", sqlite3_errmsg(db)); return 1; }
  pthread_t th[64];
  if (nthreads > 64) nthreads = 64;
  pthread_barrier_init(&ready, NULL, (unsigned)nthreads + 1);
  for (int t = 0; t < nthreads; t++) pthread_create(&th[t], NULL, work, (void *)(long)t);
  pthread_barrier_wait(&ready);
  struct timespec t0, now;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  long injected = 0;
  unsigned seed = 99;
  for (;;) {
    clock_gettime(CLOCK_MONOTONIC, &now);
    if ((now.tv_sec - t0.tv_sec) + (now.tv_nsec - t0.tv_nsec) / 1e9 > secs) break;
    long f;
    state(&f);
    injected += f;
    arm(1 + (long)((seed = seed * 1103515245u + 12345u) >> 16) % 400);
    usleep(2000);
  }
  long f;
  state(&f);
  injected += f;
  arm(0);
  stop = 1;
  for (int t = 0; t < nthreads; t++) pthread_join(th[t], NULL);
  sqlite3_close(db);
  printf("threads %d, %.0f s: %ld calls, %ld failures injected: %ld correct, %ld SQLITE_NOMEM, "
         "%ld errors naming memory, %ld other errors, %ld wrong\n",
         nthreads, secs, calls, injected, ok_calls, nomem, memerr, other, wrong);
  if (other || wrong) printf("first: %s\n", first_bad);
  return other || wrong || injected == 0 ? 1 : 0;
}
