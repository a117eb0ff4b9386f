/*
** loadgen.c — the Locust scenario without a web server: N clients, each with
** its own SQLite connection, call `SELECT bert_fill(?)` as fast as they can
** for a bounded time; one invocation measures one point.  tests/load/run.sh
** runs the matrix (clients 1..50, threads/processes, repeated/unique texts,
** cache on/off) and draws the plots.
**
**   loadgen --ext ./bertfill --mode threads|procs --clients N --duration S
**           --set five|unique|random [--wait "MIN MAX"] [--db FILE]
**           [--setup SQL] [--busy-ms MS] [--csv FILE] [--label CACHE]
**           [--header] [--csv-header]
**
** --set random: each request one of the five sentences at random.
** --wait "MIN MAX": think time, the services' Locust users (wait_time =
** between(MIN, MAX)): after each request a client waits a uniformly random
** MIN..MAX seconds; each client also starts after a random 0..MAX seconds,
** as Locust users spawn over time instead of all at once.  Latency is the
** request alone, never the wait.
**
** The model is the extension's: BERTFILL_MODEL in the environment.
**
** One point:
**   1. every client opens FILE (its own connection), loads the extension,
**      runs --setup (e.g. "SELECT bert_cache('off')"), prepares the query and
**      makes one warm-up call (model loading, first touch of the weights);
**   2. when all are ready the statistics are reset and all start together;
**   3. each client loops: next text, step, check the row, record the latency;
**      requests started before the deadline are finished and counted;
**   4. the driver prints one table row and appends one CSV row (--label is
**      written in the CSV's cache column, e.g. on / off).
** Threads mode: one process, N threads.  Processes mode: N forked processes
** (nothing of SQLite is touched before the fork); results come back through
** a shared anonymous mapping, and each process reports its own bertfill
** stage totals, which are summed.
**
** Client latencies go to a log histogram with 1% buckets (so percentiles are
** within 1%); mean and max are exact.  CPU: user+system time of the clients
** over the run divided by (wall time x cores); sys_busy: the whole machine
** from /proc/stat over the run (other work on the machine shows up there).
*/
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_CLIENTS 256
#define NB 2400                 /* latency buckets: 1 us * 1.01^i, up to ~2.3e10 us */
#define LOG_STEP 0.00995033085  /* log(1.01) */

/* The five sentences of the Python fill-mask services' Locust test. */
static const char *const FIVE[5] = {
  "今天天气真[MASK]啊，适合出去玩。",
  "学习要持之以恒，不能三天打鱼，两天[MASK]。",
  "他说话总是模棱两可，让人捉摸不[MASK]。",
  "这件事已经[MASK]木难支，无法挽回了。",
  "我们应当尊老爱[MASK]，弘扬传统美德。",
};

/* Stages as named by bertfill_stats, in table order. */
#define NSTAGE 7
static const char *const STAGES[NSTAGE] = {
  "call", "queue", "tokenize", "encode", "topk", "cache_read", "cache_write",
};
#define NCOUNT 9
static const char *const COUNTERS[NCOUNT] = {
  "calls", "hit_lru", "hit_table", "miss", "encoder_runs", "busy", "cache_writes",
  "cache_skipped", "seqs",
};

/* The timeline of a call through a batcher (issue 38): stages, and the
** counters of how the machine-wide lead was taken.  Printed, not in the CSV. */
#define NTL 5
static const char *const TL_STAGES[NTL] = {
  "batch_wait", "lead_handover", "batch_start", "batch_write", "batch_wake",
};
#define NLEAD 5
static const char *const LEADS[NLEAD] = {
  "shared_lead_post", "shared_lead_woken", "shared_lead_timer", "shared_lead_slot",
  "shared_leader_changes",
};

typedef struct server_stats {
  double tl_total_ms[NTL];
  uint64_t tl_count, lead[NLEAD];
  double stage_total_ms[NSTAGE];
  double stage_p95_ms[NSTAGE];   /* threads mode only (per-process histograms) */
  uint64_t counter[NCOUNT];
  int ok;
} server_stats;

/* One client's results (in shared memory in processes mode). */
typedef struct client_res {
  uint64_t n, errors, sum_ns, max_ns;
  uint64_t cpu_ns;               /* processes mode: this process's CPU over the run */
  int setup_failed;
  char first_error[200];
  uint64_t rng;                  /* --set random and --wait */
  server_stats srv;              /* processes mode */
  uint32_t hist[NB];
} client_res;

typedef struct shared {
  atomic_int ready, go;
  uint64_t deadline_ns;
  client_res res[];
} shared;

static struct {
  const char *ext, *mode, *set, *db, *setup, *csv, *label;
  int clients, busy_ms;
  double duration;
  double wait_min, wait_max;     /* think time in seconds; 0 0: none */
} opt = {"./bertfill", "threads", "five", "build/load/load.db", "", NULL, "", 1, 5000, 5.0, 0, 0};

static shared *g_sh;
static int g_procs;
static pthread_barrier_t g_bar;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "loadgen: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  exit(2);
}

static int bucket_of(uint64_t ns) {
  double us = (double)ns / 1000.0;
  if (us <= 1.0) return 0;
  int i = (int)(log(us) / LOG_STEP);
  return i < 0 ? 0 : i >= NB ? NB - 1 : i;
}
static double bucket_upper_ms(int i) { return exp((i + 1) * LOG_STEP) / 1000.0; }

/* splitmix64: a client's own random numbers, seeded by its index. */
static uint64_t next_random(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static double uniform01(uint64_t *state) { return (double)(next_random(state) >> 11) / 9007199254740992.0; }

/* Sleep for a uniformly random lo..hi seconds, but not past the deadline. */
static void think(uint64_t *rng, double lo, double hi, uint64_t deadline) {
  uint64_t until = now_ns() + (uint64_t)((lo + (hi - lo) * uniform01(rng)) * 1e9);
  if (until > deadline) until = deadline;
  struct timespec ts = {(time_t)(until / 1000000000ull), (long)(until % 1000000000ull)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
  }
}

/* Text number j of client c: the five sentences in turn, one of them at
** random (random), or (unique) the same with a prefix that makes every
** request of the point a different text. */
static void make_text(char *buf, size_t n, int c, uint64_t j, uint64_t *rng) {
  const char *s = FIVE[(c + j) % 5];
  if (!strcmp(opt.set, "random")) s = FIVE[next_random(rng) % 5];
  if (!strcmp(opt.set, "unique"))
    snprintf(buf, n, "第%llu位顾客说：%s", (unsigned long long)(j * (uint64_t)opt.clients + (uint64_t)c + 1), s);
  else
    snprintf(buf, n, "%s", s);
}

static void set_error(client_res *r, const char *msg) {
  r->errors++;
  if (!r->first_error[0]) snprintf(r->first_error, sizeof r->first_error, "%s", msg);
}

static sqlite3 *open_conn(client_res *r) {
  sqlite3 *db = NULL;
  char *err = NULL;
  if (sqlite3_open_v2(opt.db, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) != SQLITE_OK) {
    snprintf(r->first_error, sizeof r->first_error, "open %s: %s", opt.db, sqlite3_errmsg(db));
    sqlite3_close(db);
    return NULL;
  }
  sqlite3_busy_timeout(db, opt.busy_ms);
  sqlite3_enable_load_extension(db, 1);
  if (sqlite3_load_extension(db, opt.ext, NULL, &err) != SQLITE_OK) {
    snprintf(r->first_error, sizeof r->first_error, "load_extension(%s): %s", opt.ext,
             err ? err : "?");
    sqlite3_free(err);
    sqlite3_close(db);
    return NULL;
  }
  if (opt.setup[0] && sqlite3_exec(db, opt.setup, NULL, NULL, &err) != SQLITE_OK) {
    snprintf(r->first_error, sizeof r->first_error, "setup \"%s\": %s", opt.setup,
             err ? err : "?");
    sqlite3_free(err);
    sqlite3_close(db);
    return NULL;
  }
  return db;
}

/* Read the stage totals and counters of this process from bertfill_stats. */
static void read_server_stats(sqlite3 *db, server_stats *s) {
  memset(s, 0, sizeof *s);
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(db, "SELECT name, kind, count, total_ms, p95_ms FROM bertfill_stats",
                         -1, &st, NULL) != SQLITE_OK)
    return;
  while (sqlite3_step(st) == SQLITE_ROW) {
    const char *name = (const char *)sqlite3_column_text(st, 0);
    const char *kind = (const char *)sqlite3_column_text(st, 1);
    if (!name || !kind) continue;
    if (!strcmp(kind, "stage")) {
      for (int i = 0; i < NTL; i++)
        if (!strcmp(name, TL_STAGES[i])) {
          s->tl_total_ms[i] = sqlite3_column_double(st, 3);
          if (i == 0) s->tl_count = (uint64_t)sqlite3_column_int64(st, 2);
        }
      for (int i = 0; i < NSTAGE; i++)
        if (!strcmp(name, STAGES[i])) {
          s->stage_total_ms[i] = sqlite3_column_double(st, 3);
          s->stage_p95_ms[i] = sqlite3_column_double(st, 4);
        }
    } else if (!strcmp(kind, "counter")) {
      for (int i = 0; i < NCOUNT; i++)
        if (!strcmp(name, COUNTERS[i])) s->counter[i] = (uint64_t)sqlite3_column_int64(st, 2);
      for (int i = 0; i < NLEAD; i++)
        if (!strcmp(name, LEADS[i])) s->lead[i] = (uint64_t)sqlite3_column_int64(st, 2);
    }
  }
  s->ok = sqlite3_finalize(st) == SQLITE_OK;
}

static void reset_server_stats(sqlite3 *db) {
  sqlite3_exec(db, "SELECT bert_stats_reset()", NULL, NULL, NULL);
}

static uint64_t cpu_self_ns(int who) {
  struct rusage ru;
  getrusage(who, &ru);
  return (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000ull +
         (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000ull;
}

/* One request; returns 1 on success. */
static int one_request(sqlite3_stmt *st, const char *text, client_res *r) {
  sqlite3_bind_text(st, 1, text, -1, SQLITE_STATIC);
  int rc = sqlite3_step(st);
  int ok = rc == SQLITE_ROW && sqlite3_column_type(st, 0) == SQLITE_TEXT &&
           !strstr((const char *)sqlite3_column_text(st, 0), "[MASK]");
  if (!ok) {
    char msg[200];
    if (rc == SQLITE_ROW)
      snprintf(msg, sizeof msg, "bad result for %s", text);
    else
      snprintf(msg, sizeof msg, "%s", sqlite3_errmsg(sqlite3_db_handle(st)));
    set_error(r, msg);
  }
  sqlite3_reset(st);
  sqlite3_clear_bindings(st);
  return ok;
}

/* The client body shared by both modes; sync() waits for the start signal
** and returns the deadline. */
static void client_run(int c, client_res *r, uint64_t (*sync)(int ready_ok, sqlite3 *db)) {
  sqlite3 *db = open_conn(r);
  sqlite3_stmt *st = NULL;
  char text[512];
  if (db && sqlite3_prepare_v2(db, "SELECT bert_fill(?1)", -1, &st, NULL) != SQLITE_OK) {
    snprintf(r->first_error, sizeof r->first_error, "prepare: %s", sqlite3_errmsg(db));
    sqlite3_close(db);
    db = NULL;
  }
  if (db) {   /* warm-up, not counted */
    snprintf(text, sizeof text, "%s", FIVE[c % 5]);
    if (!strcmp(opt.set, "unique")) snprintf(text, sizeof text, "第0位顾客说：%s", FIVE[c % 5]);
    /* A warm-up call that finds every encoder slot taken (many clients
    ** starting at once on a big model) is retried for up to a minute. */
    client_res tmp = {0};
    int ok = 0;
    for (int attempt = 0; attempt < 600 && !ok; attempt++) {
      tmp.first_error[0] = 0;
      ok = one_request(st, text, &tmp);
      if (!ok && !strstr(tmp.first_error, "busy")) break;
      if (!ok) {
        struct timespec ts = {0, 100000000};
        nanosleep(&ts, NULL);
      }
    }
    if (!ok) {
      snprintf(r->first_error, sizeof r->first_error, "warm-up: %.180s", tmp.first_error);
      sqlite3_finalize(st);
      sqlite3_close(db);
      db = NULL;
    }
  }
  r->setup_failed = db == NULL;
  r->rng = (uint64_t)(c + 1) * 0xD1B54A32D192ED03ull;
  uint64_t deadline = sync(db != NULL, db);
  if (!db) return;
  if (opt.wait_max > 0) think(&r->rng, 0, opt.wait_max, deadline);   /* staggered start */
  for (uint64_t j = 0;; j++) {
    uint64_t t0 = now_ns();
    if (t0 >= deadline) break;
    make_text(text, sizeof text, c, j, &r->rng);
    if (one_request(st, text, r)) {
      uint64_t dt = now_ns() - t0;
      r->n++;
      r->sum_ns += dt;
      if (dt > r->max_ns) r->max_ns = dt;
      r->hist[bucket_of(dt)]++;
    }
    if (opt.wait_max > 0) think(&r->rng, opt.wait_min, opt.wait_max, deadline);
  }
  if (g_procs) read_server_stats(db, &r->srv);   /* this process's share */
  sqlite3_finalize(st);
  sqlite3_close(db);
}

/* ---- threads mode ---- */
static uint64_t thread_sync(int ok, sqlite3 *db) {
  (void)ok;
  (void)db;
  pthread_barrier_wait(&g_bar);   /* ready */
  pthread_barrier_wait(&g_bar);   /* go: main has reset the stats and set the deadline */
  return g_sh->deadline_ns;
}
static void *thread_main(void *arg) {
  int c = (int)(intptr_t)arg;
  client_run(c, &g_sh->res[c], thread_sync);
  return NULL;
}

/* ---- processes mode ---- */
static int g_ready_fd = -1, g_go_fd = -1;
static uint64_t g_cpu0;
static uint64_t proc_sync(int ok, sqlite3 *db) {
  if (db) reset_server_stats(db);   /* this process's stats: after its own warm-up */
  char b = ok ? 'r' : 'e';
  if (write(g_ready_fd, &b, 1) != 1) _exit(3);
  char x;
  while (read(g_go_fd, &x, 1) < 0 && errno == EINTR) {
  }
  g_cpu0 = cpu_self_ns(RUSAGE_SELF);
  return g_sh->deadline_ns;
}

static void read_proc_stat(uint64_t *busy, uint64_t *total) {
  *busy = *total = 0;
  FILE *f = fopen("/proc/stat", "r");
  if (!f) return;
  unsigned long long v[10] = {0};
  if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
             &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9]) >= 4) {
    for (int i = 0; i < 8; i++) *total += v[i];   /* guest time is already in user */
    *busy = *total - v[3] - v[4];                 /* minus idle and iowait */
  }
  fclose(f);
}

static int ncores(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

/* Milliseconds with about three significant digits. */
static void fmt_ms(char *buf, size_t n, double ms) {
  if (ms == 0) snprintf(buf, n, "0");
  else if (ms < 0.01) snprintf(buf, n, "%.4f", ms);
  else if (ms < 1) snprintf(buf, n, "%.3f", ms);
  else if (ms < 100) snprintf(buf, n, "%.2f", ms);
  else snprintf(buf, n, "%.0f", ms);
}

static void csv_field(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"') fputc('"', f);
    fputc(*s == '\n' ? ' ' : *s, f);
  }
  fputc('"', f);
}

static const char CSV_HEADER[] =
    "mode,set,cache,clients,duration_s,requests,errors,rps,mean_ms,p50_ms,p95_ms,"
    "p99_ms,max_ms,err_pct,cpu_pct,sys_busy_pct,cores,calls,hit_lru,hit_table,miss,"
    "encoder_runs,busy,cache_writes,cache_skipped,seqs,call_ms,queue_ms,tokenize_ms,encode_ms,"
    "topk_ms,cache_read_ms,cache_write_ms,queue_p95_ms,encode_p95_ms,first_error,wait_s";

static void print_header(void) {
  printf("%7s %8s %8s %8s %8s %8s %8s %6s %5s %5s | %7s %7s %7s %7s %7s %7s %7s | %5s %5s\n",
         "clients", "req/s", "mean", "p50", "p95", "p99", "max", "err%", "cpu%", "busy%",
         "call", "queue", "tok", "encode", "topk", "c.read", "c.write", "hit%", "batch");
  printf("%7s %8s %8s %8s %8s %8s %8s %6s %5s %5s | %55s |\n", "", "", "ms", "ms", "ms",
         "ms", "ms", "", "", "", "server-side ms per request (bertfill_stats)");
}

static void usage(void) {
  fprintf(stderr,
          "usage: loadgen [--ext PATH] [--mode threads|procs] [--clients N] [--duration S]\n"
          "               [--set five|unique|random] [--wait \"MIN MAX\"] [--db FILE]\n"
          "               [--setup SQL] [--busy-ms MS] [--csv FILE] [--label TEXT]\n"
          "               [--header] [--csv-header]\n");
  exit(2);
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define ARG(name) (!strcmp(a, name) && (v || (usage(), 0)) && ++i)
    if (!strcmp(a, "--header")) { print_header(); return 0; }
    else if (!strcmp(a, "--csv-header")) { puts(CSV_HEADER); return 0; }
    else if (ARG("--ext")) opt.ext = v;
    else if (ARG("--mode")) opt.mode = v;
    else if (ARG("--clients")) opt.clients = atoi(v);
    else if (ARG("--duration")) opt.duration = atof(v);
    else if (ARG("--set")) opt.set = v;
    else if (ARG("--wait")) {
      if (sscanf(v, "%lf %lf", &opt.wait_min, &opt.wait_max) != 2) die("--wait takes \"MIN MAX\" seconds");
    }
    else if (ARG("--db")) opt.db = v;
    else if (ARG("--setup")) opt.setup = v;
    else if (ARG("--busy-ms")) opt.busy_ms = atoi(v);
    else if (ARG("--csv")) opt.csv = v;
    else if (ARG("--label")) opt.label = v;
    else usage();
#undef ARG
  }
  int procs = g_procs = !strcmp(opt.mode, "procs");
  if (!procs && strcmp(opt.mode, "threads")) die("--mode must be threads or procs, not %s", opt.mode);
  if (strcmp(opt.set, "five") && strcmp(opt.set, "unique") && strcmp(opt.set, "random"))
    die("--set must be five, unique or random");
  if (!(opt.wait_min >= 0 && opt.wait_max >= opt.wait_min && opt.wait_max <= 600))
    die("--wait: 0 <= MIN <= MAX <= 600 seconds");
  if (opt.clients < 1 || opt.clients > MAX_CLIENTS) die("--clients must be 1..%d", MAX_CLIENTS);
  if (!(opt.duration > 0 && opt.duration <= 3600)) die("--duration must be in (0, 3600] seconds");

  size_t shsize = sizeof(shared) + (size_t)opt.clients * sizeof(client_res);
  g_sh = mmap(NULL, shsize, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (g_sh == MAP_FAILED) die("mmap: %s", strerror(errno));
  memset(g_sh, 0, shsize);

  /* The driver's own connection: creates the database in WAL mode (so the
  ** clients' cache reads and writes do not block each other) and, in threads
  ** mode, resets and reads the process-wide stats. */
  int n = opt.clients, nready = 0;
  server_stats srv = {0};
  uint64_t t_go = 0, t_end = 0, cpu_ns = 0, pb0, pt0, pb1, pt1;
  pid_t pids[MAX_CLIENTS];
  pthread_t th[MAX_CLIENTS];
  sqlite3 *main_db = NULL;
  {
    sqlite3 *db;
    if (sqlite3_open(opt.db, &db) != SQLITE_OK) die("open %s: %s", opt.db, sqlite3_errmsg(db));
    if (sqlite3_exec(db, "PRAGMA journal_mode=WAL", 0, 0, 0) != SQLITE_OK)
      die("%s: cannot set WAL mode: %s", opt.db, sqlite3_errmsg(db));
    sqlite3_close(db);
  }
  if (!procs) {   /* nothing of the extension is loaded in the parent in processes mode */
    client_res dummy = {0};
    main_db = open_conn(&dummy);
    if (!main_db) die("%s", dummy.first_error);
  }

  if (!procs) {
    pthread_barrier_init(&g_bar, NULL, (unsigned)n + 1);
    for (int c = 0; c < n; c++)
      if (pthread_create(&th[c], NULL, thread_main, (void *)(intptr_t)c)) die("pthread_create failed");
    pthread_barrier_wait(&g_bar);   /* all warmed up */
    for (int c = 0; c < n; c++) nready += !g_sh->res[c].setup_failed;
    reset_server_stats(main_db);
    read_proc_stat(&pb0, &pt0);
    cpu_ns = cpu_self_ns(RUSAGE_SELF);
    t_go = now_ns();
    g_sh->deadline_ns = t_go + (uint64_t)(opt.duration * 1e9);
    pthread_barrier_wait(&g_bar);   /* go */
    for (int c = 0; c < n; c++) pthread_join(th[c], NULL);
    t_end = now_ns();
    cpu_ns = cpu_self_ns(RUSAGE_SELF) - cpu_ns;
    read_proc_stat(&pb1, &pt1);
    read_server_stats(main_db, &srv);
    sqlite3_close(main_db);
  } else {
    int rp[2], gp[2];
    if (pipe(rp) || pipe(gp)) die("pipe: %s", strerror(errno));
    fflush(NULL);
    for (int c = 0; c < n; c++) {
      pid_t p = fork();
      if (p < 0) die("fork: %s", strerror(errno));
      if (p == 0) {
        close(rp[0]);
        close(gp[1]);
        g_ready_fd = rp[1];
        g_go_fd = gp[0];
        client_res *r = &g_sh->res[c];
        client_run(c, r, proc_sync);
        if (!r->setup_failed) {
          r->cpu_ns = cpu_self_ns(RUSAGE_SELF) - g_cpu0;
        }
        _exit(0);
      }
      pids[c] = p;
    }
    close(rp[1]);
    close(gp[0]);
    for (int c = 0; c < n; c++) {   /* wait for every process to be ready (or failed) */
      char b;
      ssize_t k = read(rp[0], &b, 1);
      if (k != 1) break;
      nready += b == 'r';
    }
    read_proc_stat(&pb0, &pt0);
    t_go = now_ns();
    g_sh->deadline_ns = t_go + (uint64_t)(opt.duration * 1e9);
    close(gp[1]);                   /* go: every child's read() returns */
    for (int c = 0; c < n; c++) waitpid(pids[c], NULL, 0);
    t_end = now_ns();
    read_proc_stat(&pb1, &pt1);
    close(rp[0]);
  }

  /* Merge the clients. */
  client_res *all = calloc(1, sizeof *all);
  if (!all) die("out of memory");
  char first_error[200] = "";
  for (int c = 0; c < n; c++) {
    client_res *r = &g_sh->res[c];
    all->n += r->n;
    all->errors += r->errors;
    all->sum_ns += r->sum_ns;
    if (r->max_ns > all->max_ns) all->max_ns = r->max_ns;
    for (int i = 0; i < NB; i++) all->hist[i] += r->hist[i];
    if (!first_error[0] && r->first_error[0])
      snprintf(first_error, sizeof first_error, "%s", r->first_error);
    if (procs && !r->setup_failed) {
      cpu_ns += r->cpu_ns;
      for (int i = 0; i < NSTAGE; i++) srv.stage_total_ms[i] += r->srv.stage_total_ms[i];
      for (int i = 0; i < NCOUNT; i++) srv.counter[i] += r->srv.counter[i];
      for (int i = 0; i < NTL; i++) srv.tl_total_ms[i] += r->srv.tl_total_ms[i];
      for (int i = 0; i < NLEAD; i++) srv.lead[i] += r->srv.lead[i];
      srv.tl_count += r->srv.tl_count;
      srv.ok |= r->srv.ok;
    }
  }
  if (nready == 0) die("no client could start: %s", first_error[0] ? first_error : "?");

  double wall = (double)(t_end - t_go) / 1e9;
  int cores = ncores();
  uint64_t total = all->n + all->errors;
  double rps = (double)all->n / wall;
  double mean = all->n ? (double)all->sum_ns / (double)all->n / 1e6 : 0;
  double q[3] = {0, 0, 0};
  const double qs[3] = {0.50, 0.95, 0.99};
  for (int k = 0; k < 3 && all->n; k++) {
    uint64_t rank = (uint64_t)ceil(qs[k] * (double)all->n), cum = 0;
    if (rank < 1) rank = 1;
    for (int i = 0; i < NB; i++) {
      cum += all->hist[i];
      if (cum >= rank) { q[k] = bucket_upper_ms(i); break; }
    }
    double mx = (double)all->max_ns / 1e6;
    if (q[k] > mx) q[k] = mx;
  }
  double maxms = (double)all->max_ns / 1e6;
  double errpct = total ? 100.0 * (double)all->errors / (double)total : 0;
  double cpupct = 100.0 * ((double)cpu_ns / 1e9) / (wall * cores);
  double busypct = pt1 > pt0 ? 100.0 * (double)(pb1 - pb0) / (double)(pt1 - pt0) : 0;
  uint64_t calls = srv.counter[0];
  double per[NSTAGE];
  for (int i = 0; i < NSTAGE; i++) per[i] = calls ? srv.stage_total_ms[i] / (double)calls : 0;
  double hitpct = calls ? 100.0 * (double)(srv.counter[1] + srv.counter[2]) / (double)calls : 0;

  char f[12][16];
  const double lat[5] = {mean, q[0], q[1], q[2], maxms};
  for (int i = 0; i < 5; i++) fmt_ms(f[i], sizeof f[i], lat[i]);
  for (int i = 0; i < NSTAGE; i++) fmt_ms(f[5 + i], sizeof f[5 + i], per[i]);
  double avg_batch = srv.counter[4] ? (double)srv.counter[8] / (double)srv.counter[4] : 0;
  printf("%7d %8.1f %8s %8s %8s %8s %8s %6.2f %5.0f %5.0f | %7s %7s %7s %7s %7s %7s %7s | %5.1f %5.1f\n",
         n, rps, f[0], f[1], f[2], f[3], f[4], errpct, cpupct, busypct, f[5], f[6], f[7], f[8],
         f[9], f[10], f[11], hitpct, avg_batch);
  if (srv.tl_count) { /* the timeline of the calls that went through a batcher */
    double tl[NTL];
    for (int i = 0; i < NTL; i++) tl[i] = srv.tl_total_ms[i] / (double)srv.tl_count;
    printf("        (timeline of %llu batched calls, mean ms: wait %.2f (no leader %.2f), start "
           "%.2f, write %.2f, wake %.2f, the rest (the run, tokenize, SQL) %.2f; leads taken: "
           "at post %llu, woken %llu, timer %llu, after a slot %llu; leader changes %llu)\n",
           (unsigned long long)srv.tl_count, tl[0], tl[1], tl[2], tl[3], tl[4],
           mean - tl[0] - tl[2] - tl[3] - tl[4],
           (unsigned long long)srv.lead[0], (unsigned long long)srv.lead[1],
           (unsigned long long)srv.lead[2], (unsigned long long)srv.lead[3],
           (unsigned long long)srv.lead[4]);
  }
  if (nready < n) printf("        (%d of %d clients could not start: %s)\n", n - nready, n, first_error);
  else if (all->errors) printf("        (first error: %s)\n", first_error);
  fflush(stdout);

  if (opt.csv) {
    FILE *f = fopen(opt.csv, "a");
    if (!f) die("cannot append to %s: %s", opt.csv, strerror(errno));
    fprintf(f, "%s,%s,", opt.mode, opt.set);
    csv_field(f, opt.label);
    fprintf(f, ",%d,%.3f,%llu,%llu,%.2f,%.4f,%.4f,%.4f,%.4f,%.4f,%.3f,%.1f,%.1f,%d", n, wall,
            (unsigned long long)all->n, (unsigned long long)all->errors, rps, mean, q[0], q[1],
            q[2], maxms, errpct, cpupct, busypct, cores);
    for (int i = 0; i < NCOUNT; i++) fprintf(f, ",%llu", (unsigned long long)srv.counter[i]);
    for (int i = 0; i < NSTAGE; i++) fprintf(f, ",%.4f", per[i]);
    if (procs) fprintf(f, ",,");
    else fprintf(f, ",%.4f,%.4f", srv.stage_p95_ms[1], srv.stage_p95_ms[3]);
    fputc(',', f);
    csv_field(f, first_error);
    if (opt.wait_max > 0) fprintf(f, ",\"%g %g\"\n", opt.wait_min, opt.wait_max);
    else fprintf(f, ",\n");
    fclose(f);
  }
  free(all);
  munmap(g_sh, shsize);
  return 0;
}
