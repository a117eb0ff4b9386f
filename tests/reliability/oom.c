/*
** oom.c — out-of-memory: every allocation made during a call fails in turn,
** and the call must fail cleanly (SQLITE_NOMEM, or an error that says it
** ran out of memory), never crash or return a wrong result, and the
** connection must work afterwards.  Run with the shim failmalloc.so in
** LD_PRELOAD (tests/reliability/oom.sh):
**
**   oom EXT MODEL_DIR OTHER_MODEL_DIR [STEP]
**
** Scenarios (each a statement on a connection that is already warmed up):
**   fill        SELECT bert_fill(?)           cache 'on' (LRU + table write)
**   candidates  SELECT * FROM fill_candidates(?, 3)
**   tokenize    SELECT bert_tokenize(?)
**   prefill     SELECT bert_prefill(x) FROM (three texts)
**   rows        SELECT ... FROM fill_rows('SELECT 1, <text> UNION ALL ...', 2)
**               (three texts: the inner query, a batch, the masks JSON)
**   load        SELECT bert_load(OTHER_MODEL_DIR)  (a fresh load: config,
**               vocab, safetensors header, tokenizer)
**   first_use   a new connection's first bert_fill (loads BERTFILL_MODEL)
** For N = 1, 2, ... (every STEP-th N past 50): arm the shim so that the
** N-th allocation from now fails, run the statement, disarm; then run it
** again and compare with the result computed without failures.  A scenario
** ends at the first N its statement does not reach.  Each statement uses a
** text not seen before, so every run misses the caches.
**
** Prints per scenario the allocations of one call, how the failures
** surfaced (SQLITE_NOMEM / an SQLITE_ERROR naming memory / other), "wrong"
** (a wrong result or an unusable connection afterwards) and the blocks
** leaked: the shim counts live blocks, and after the scenario (connections
** closed, caches bounded (LRU: three entries) and warmed up before) the count must
** be back where it was.  Exits 1 if anything surfaced other than as an
** out-of-memory error, was wrong, or leaked.
*/
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void (*arm)(long);
static long (*state)(long *);
static long (*live)(void);
static const char *ext, *model, *other;
static int text_seq;

static sqlite3 *open_conn(void) {
  sqlite3 *db;
  if (sqlite3_open(":memory:", &db) != SQLITE_OK) { fprintf(stderr, "oom: open\n"); exit(1); }
  sqlite3_enable_load_extension(db, 1);
  char *err = NULL;
  if (sqlite3_load_extension(db, ext, NULL, &err) != SQLITE_OK) {
    fprintf(stderr, "oom: load %s: %s\n", ext, err ? err : "?");
    exit(1);
  }
  return db;
}

/* A text not used before: the cache never has it. */
static void next_text(char *buf, size_t n) {
  static const char *chars[] = { "的", "一", "是", "不", "了", "人", "我", "在", "有", "他",
                                 "这", "为", "之", "大", "来", "以" };
  int v = text_seq++;
  snprintf(buf, n, "今天天气真[MASK]啊");
  for (int i = 0; i < 4; i++, v /= 16) strncat(buf, chars[v % 16], n - strlen(buf) - 1);
  strncat(buf, "[MASK]", n - strlen(buf) - 1);
}

typedef struct scen {
  const char *name;
  const char *sql;          /* ?1 .. ?3: texts; for load: the directory */
  int nargs;
} scen;

static const scen scens[] = {
  { "fill", "SELECT bert_fill(?1)", 1 },
  { "candidates", "SELECT group_concat(token_id || ':' || printf('%.6f', score)) FROM fill_candidates(?1, 3)", 1 },
  { "tokenize", "SELECT bert_tokenize(?1)", 1 },
  { "prefill", "SELECT bert_prefill(x) FROM (SELECT ?1 AS x UNION ALL SELECT ?2 UNION ALL SELECT ?3)", 3 },
  /* masks: the token ids only; the scores of a batch agree with another batch's to float rounding */
  { "rows", "SELECT group_concat(key || coalesce(filled, '-') || json_extract(masks, '$[0][1].token_id'), '|') "
            "FROM fill_rows("
            "'SELECT 1, ' || quote(?1) || ' UNION ALL SELECT 2, ' || quote(?2) || ' UNION ALL SELECT 3, ' || "
            "quote(?3), 2)", 3 },
  { "load", "SELECT bert_load(?1)", 1 },
  { "first_use", "SELECT bert_fill(?1)", 1 },
};

/* Run sql with texts t[] on db, the N-th allocation from the first step on
** failing when armn > 0 (preparing and binding are not part of the test);
** *out = first column of the first row (malloc'ed, may be NULL), *fired =
** whether the failure was injected, *count = allocations counted.  Returns
** the final rc (SQLITE_DONE on success). */
static int run_armed(sqlite3 *db, const char *sql, int nargs, char t[][128], long armn,
                     char **out, char **msg, long *fired, long *count) {
  sqlite3_stmt *st = NULL;
  *out = NULL;
  *msg = NULL;
  if (fired) *fired = 0;
  int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
  if (rc != SQLITE_OK) { *msg = strdup(sqlite3_errmsg(db)); return rc; }
  for (int i = 0; i < nargs; i++)
    if (sqlite3_bind_text(st, i + 1, t[i], -1, SQLITE_TRANSIENT) != SQLITE_OK) {
      *msg = strdup("bind failed");
      sqlite3_finalize(st);
      return SQLITE_NOMEM;
    }
  if (armn > 0) arm(armn);
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (!*out) {
      int type = sqlite3_column_type(st, 0);   /* before: a failed conversion makes it NULL */
      const char *z = (const char *)sqlite3_column_text(st, 0);
      if (!z && type != SQLITE_NULL) { rc = SQLITE_NOMEM; break; }  /* our own read ran out */
      *out = strdup(z ? z : "(null)");
    }
  }
  if (armn > 0) {
    long f;
    long c = state(&f);
    arm(0);
    if (fired) *fired = f;
    if (count) *count = c;
  }
  if (rc != SQLITE_DONE) *msg = strdup(sqlite3_errmsg(db));
  sqlite3_finalize(st);
  return rc;
}

static int run(sqlite3 *db, const char *sql, int nargs, char t[][128], char **out, char **msg) {
  return run_armed(db, sql, nargs, t, 0, out, msg, NULL, NULL);
}

static int mentions_memory(const char *m) {
  return m && (strstr(m, "out of memory") || strstr(m, "Cannot allocate memory") ||
               strstr(m, "memory"));
}

int main(int argc, char **argv) {
  if (argc < 4) { fprintf(stderr, "usage: oom EXT MODEL_DIR OTHER_MODEL_DIR [STEP]\n"); return 2; }
  ext = argv[1]; model = argv[2]; other = argv[3];
  int step = argc > 4 ? atoi(argv[4]) : 1;
  arm = (void (*)(long))dlsym(RTLD_DEFAULT, "failmalloc_arm");
  state = (long (*)(long *))dlsym(RTLD_DEFAULT, "failmalloc_state");
  live = (long (*)(void))dlsym(RTLD_DEFAULT, "failmalloc_live");
  if (!arm || !state || !live) { fprintf(stderr, "oom: run with LD_PRELOAD=failmalloc.so\n"); return 2; }
  setenv("BERTFILL_MODEL", model, 1);
  /* A lingering leader (shared_batch.c) keeps the machine-wide queue's lead
  ** in a thread of its own after a call, with what it allocated, until its
  ** linger ends: blocks alive after the call that no call leaked.  Off here,
  ** so that live blocks are the calls' own; its failure paths are not
  ** covered by this test. */
  setenv("BERTFILL_SHARED_LINGER_MS", "0", 1);
  int bad_total = 0;

  /* Warm-up of everything process-wide (OpenBLAS, the encoder slot pool,
  ** the stats, a one-entry LRU), so that a scenario that frees what it
  ** allocated ends with as many live blocks as it began with. */
  {
    sqlite3 *db = open_conn();
    char t[3][128];
    char *out, *msg;
    for (int i = 0; i < 3; i++) next_text(t[i], 128);
    /* three LRU entries: bert_prefill of three texts needs a cache that keeps them */
    const char *warm[] = { "SELECT bert_cache_lru(3)", "SELECT bert_fill(?1)",
                           "SELECT count(*) FROM fill_candidates(?1, 3)", "SELECT bert_tokenize(?1)",
                           "SELECT bert_prefill(x) FROM (SELECT ?1 AS x UNION ALL SELECT ?2 UNION ALL SELECT ?3)" };
    static const int nargs[] = { 0, 1, 1, 1, 3 };
    for (size_t i = 0; i < sizeof warm / sizeof warm[0]; i++) {
      if (run(db, warm[i], nargs[i], t, &out, &msg) != SQLITE_DONE) { fprintf(stderr, "oom: warm-up: %s\n", msg); return 1; }
      free(out); free(msg);
    }
    sqlite3_close(db);
  }

  for (size_t s = 0; s < sizeof scens / sizeof scens[0]; s++) {
    const scen *sc = &scens[s];
    int is_load = strcmp(sc->name, "load") == 0, is_first = strcmp(sc->name, "first_use") == 0;
    int is_prefill = strcmp(sc->name, "prefill") == 0;
    long nomem = 0, memerr = 0, other_err = 0, wrong = 0, ok_despite = 0, allocs = 0, tried = 0;
    char first_other[300] = "", first_mem[300] = "";
    long live_before = live();
    sqlite3 *db = open_conn();
    char t[3][128];
    char *out, *msg;
    sqlite3_exec(db, "SELECT bert_cache_limit(1)", NULL, NULL, NULL);
    /* warm up: model loaded, OpenBLAS initialised, cache table created */
    next_text(t[0], 128);
    if (run(db, "SELECT bert_fill(?1)", 1, t, &out, &msg) != SQLITE_DONE) {
      fprintf(stderr, "oom: warm-up: %s\n", msg);
      return 1;
    }
    free(out);
    for (long n = 1;; n = n < 50 ? n + 1 : n + step) {
      sqlite3 *use = db;
      if (is_first) use = open_conn();
      for (int i = 0; i < 3; i++) next_text(t[i], 128);
      if (is_load) snprintf(t[0], 128, "%s", other);
      /* reference: the same statement without failures, on a fresh
      ** connection (fresh texts would need another reference each time) */
      long f, c;
      int rc = run_armed(use, sc->sql, sc->nargs, t, n, &out, &msg, &f, &c);
      tried++;
      if (!f) {                 /* the call made fewer than n allocations: done */
        allocs = c;
        free(out); free(msg);
        if (is_first) sqlite3_close(use);
        break;
      }
      if (rc == SQLITE_DONE) ok_despite++;                 /* failure absorbed (e.g. cache write skipped) */
      else if ((rc & 0xff) == SQLITE_NOMEM) nomem++;
      else if (mentions_memory(msg)) { if (!memerr++) snprintf(first_mem, sizeof first_mem, "N=%ld rc %d: %s", n, rc, msg); }
      else { if (!other_err++) snprintf(first_other, sizeof first_other, "N=%ld rc %d: %s", n, rc, msg ? msg : ""); }
      char *got_fail = out;
      free(msg);
      /* the connection must work: the same statement again, no failures */
      char *again;
      rc = run(use, sc->sql, sc->nargs, t, &again, &msg);
      sqlite3 *fresh = open_conn();
      char *want = NULL, *msg2 = NULL;
      if (is_load) run(fresh, sc->sql, sc->nargs, t, &want, &msg2);
      else {
        if (!is_prefill) sqlite3_exec(fresh, "SELECT bert_cache('off')", NULL, NULL, NULL);
        run(fresh, sc->sql, sc->nargs, t, &want, &msg2);
      }
      /* bert_prefill returns how many texts it computed: compare only that
      ** it works again */
      int is_wrong = rc != SQLITE_DONE || !again || !want ||
                     (!is_prefill && strcmp(again, want) != 0) ||
                     (got_fail && !is_prefill && strcmp(got_fail, want) != 0);
      if (is_wrong) {
        if (wrong++ < 3)
          fprintf(stderr, "oom: %s N=%ld: after the failure: rc %d %s; got '%s' / '%s', want '%s'\n",
                  sc->name, n, rc, msg ? msg : "", got_fail ? got_fail : "-", again ? again : "-",
                  want ? want : "-");
      }
      free(got_fail); free(again); free(want); free(msg); free(msg2);
      sqlite3_close(fresh);
      if (is_load) {            /* back to the first model: the other one is released */
        run(use, "SELECT bert_load(NULL)", 0, t, &out, &msg);
        free(out); free(msg);
      }
      if (is_first) sqlite3_close(use);
      if (getenv("OOM_TRACE")) fprintf(stderr, "%s N=%ld %s, blocks in use %ld\n", sc->name, n,
                                       is_wrong ? "wrong" : "ok", live());
    }
    if (sqlite3_close(db) != SQLITE_OK) { fprintf(stderr, "oom: %s: close failed\n", sc->name); wrong++; }
    /* every block allocated since the scenario began is freed again: the
    ** caches are bounded (see main) and were warm before */
    long growth = live() - live_before;
    printf("%-11s %6ld allocations per call, %5ld failure points tried: %5ld SQLITE_NOMEM, "
           "%4ld error naming memory, %4ld absorbed (call succeeded), %ld blocks leaked, "
           "%ld other errors, %ld wrong\n",
           sc->name, allocs, tried - 1, nomem, memerr, ok_despite, growth, other_err, wrong);
    if (memerr) printf("            e.g. %s\n", first_mem);
    if (other_err) printf("            first other error: %s\n", first_other);
    bad_total += (int)(other_err + wrong + (growth != 0));
  }
  return bad_total ? 1 : 0;
}
