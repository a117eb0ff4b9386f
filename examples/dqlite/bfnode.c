/* bfnode.c — one dqlite node with bertfill in every connection it opens.
**
** dqlite (Canonical's Raft-replicated SQLite, Debian's libdqlite-dev) runs the
** SQL of every client on the leader and replicates the WAL frames a write
** produces.  This program registers bertfill with sqlite3_auto_extension, so
** each database connection the node opens has bert_fill, fill_candidates,
** bert_prefill, ... and then runs a node:
**
**   bfnode --id 1 --address 127.0.0.1:24101 --dir build/cluster/n1
**   bfnode --id 2 --address 127.0.0.1:24102 --dir build/cluster/n2 --join 127.0.0.1:24101
**   bfnode --id 3 --address 127.0.0.1:24103 --dir build/cluster/n3 \
**          --join 127.0.0.1:24101,127.0.0.1:24102
**
**   dqlite -s 127.0.0.1:24101,127.0.0.1:24102,127.0.0.1:24103 demo \
**     "SELECT bert_fill('中华人民共[MASK]国')"
**
** Options:
**   --id N             the node's id: 1 bootstraps a new cluster (with an empty
**                      --dir); every other node joins one.  Same id on restart.
**   --address H:P      the address other nodes and clients use; also bound
**   --dir DIR          Raft log and snapshots (created if missing)
**   --join H:P[,H:P]   nodes of the cluster to join: asks them for the leader,
**                      then the leader to add this node and make it a voter
**                      (skipped when it already is one, so a restart may pass
**                      it again)
**   --extension PATH   the bertfill extension (default: bertfill.so in the
**                      directory above this program's: build/bfnode finds
**                      the repository's ./bertfill.so)
**   --latency-ms MS    dqlite_node_set_network_latency_ms: heartbeat 1.5 x MS,
**                      election timeout 15 x MS (default: dqlite's 500/3000 ms)
**
** The node runs until SIGTERM or SIGINT, then stops cleanly.  It prints
** "bfnode N: ready" once it serves clients (and, with --join, is a voter).
**
** How a node joins.  libdqlite 1.11's C API has no join call (dqlite.h:
** create, bind address, start, stop, recover; nothing that adds a node to a
** cluster), and go-dqlite 1.11.5's `dqlite` shell has .cluster, .leader,
** .remove, .describe, .weight, .dump and .reconfigure but no .add.  Joining
** is a client request: the new node is started with its id and address, then
** the leader is sent ADD (id, address) and ASSIGN (id, voter), which is what
** go-dqlite's app package does.  join_cluster() below speaks those requests
** of dqlite's wire protocol (version 1) itself: an 8-byte handshake, then
** messages of an 8-byte header (body size in 8-byte words, type, schema, 0)
** and a body of little-endian uint64s and NUL-terminated texts padded to 8.
*/
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <dqlite.h>
#include <sqlite3.h>

/* dqlite wire protocol 1 (dqlite src/protocol.h, request.h, response.h) */
enum { PROTOCOL_VERSION = 1 };
enum { REQ_LEADER = 0, REQ_ADD = 12, REQ_ASSIGN = 13, REQ_CLUSTER = 16 };
enum { RESP_FAILURE = 0, RESP_SERVER = 1, RESP_SERVERS = 3, RESP_EMPTY = 8 };
enum { ROLE_VOTER = 0 };
enum { CLUSTER_FORMAT_V1 = 1 }; /* id, address and role of each node */

#define JOIN_TIMEOUT_S 60

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

/* ---- a message body: little-endian uint64s and padded texts ---- */

typedef struct {
  unsigned char data[4096];
  size_t len; /* bytes written, or the read position */
  size_t cap; /* bytes available when reading */
} body;

static void put_u64(body *b, uint64_t v) {
  for (int i = 0; i < 8; i++) b->data[b->len++] = (unsigned char)(v >> (8 * i));
}

static void put_text(body *b, const char *s) {
  size_t n = strlen(s) + 1;
  memcpy(b->data + b->len, s, n);
  b->len += n;
  while (b->len % 8) b->data[b->len++] = 0;
}

static int get_u64(body *b, uint64_t *v) {
  if (b->len + 8 > b->cap) return -1;
  *v = 0;
  for (int i = 0; i < 8; i++) *v |= (uint64_t)b->data[b->len++] << (8 * i);
  return 0;
}

static int get_text(body *b, const char **s) {
  const unsigned char *end = memchr(b->data + b->len, 0, b->cap - b->len);
  if (end == NULL) return -1;
  *s = (const char *)b->data + b->len;
  b->len = (size_t)(end - b->data) + 1;
  while (b->len % 8) b->len++;
  return b->len <= b->cap ? 0 : -1;
}

/* ---- one connection to a node ---- */

static int write_all(int fd, const void *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p = (const char *)p + w;
    n -= (size_t)w;
  }
  return 0;
}

static int read_all(int fd, void *p, size_t n) {
  while (n > 0) {
    ssize_t r = read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    p = (char *)p + r;
    n -= (size_t)r;
  }
  return 0;
}

/* Connects to "HOST:PORT" and sends the protocol version; -1 on failure. */
static int wire_connect(const char *address) {
  char host[256];
  const char *colon = strrchr(address, ':');
  if (colon == NULL || (size_t)(colon - address) >= sizeof host) return -1;
  memcpy(host, address, (size_t)(colon - address));
  host[colon - address] = 0;
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res;
  if (getaddrinfo(host, colon + 1, &hints, &res) != 0) return -1;
  int fd = socket(res->ai_family, res->ai_socktype, res->ai_protocol);
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) != 0) {
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd < 0) return -1;
  struct timeval tv = {30, 0}; /* ASSIGN waits for the new node to catch up */
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  body hello = {0};
  put_u64(&hello, PROTOCOL_VERSION);
  if (write_all(fd, hello.data, hello.len) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* Sends one request and reads the response into *resp; returns the response
** type, or -1 on a broken connection.  A FAILURE response is printed. */
static int wire_call(int fd, int type, const body *req, body *resp) {
  unsigned char hdr[8] = {0};
  uint32_t words = (uint32_t)(req->len / 8);
  for (int i = 0; i < 4; i++) hdr[i] = (unsigned char)(words >> (8 * i));
  hdr[4] = (unsigned char)type;
  if (write_all(fd, hdr, 8) != 0 || write_all(fd, req->data, req->len) != 0) return -1;
  if (read_all(fd, hdr, 8) != 0) return -1;
  words = (uint32_t)hdr[0] | (uint32_t)hdr[1] << 8 | (uint32_t)hdr[2] << 16 |
          (uint32_t)hdr[3] << 24;
  if ((size_t)words * 8 > sizeof resp->data) return -1;
  resp->len = 0;
  resp->cap = (size_t)words * 8;
  if (read_all(fd, resp->data, resp->cap) != 0) return -1;
  if (hdr[4] == RESP_FAILURE) {
    uint64_t code = 0;
    const char *msg = "?";
    if (get_u64(resp, &code) == 0) get_text(resp, &msg);
    fprintf(stderr, "bfnode: request %d refused: %s (code %llu)\n", type, msg,
            (unsigned long long)code);
  }
  return hdr[4];
}

/* The leader's address as `via` sees it, into out; -1 when unknown. */
static int ask_leader(const char *via, char *out, size_t outlen) {
  int fd = wire_connect(via);
  if (fd < 0) return -1;
  body req = {0}, resp = {0};
  put_u64(&req, 0);
  uint64_t id;
  const char *address;
  int rc = -1;
  if (wire_call(fd, REQ_LEADER, &req, &resp) == RESP_SERVER && get_u64(&resp, &id) == 0 &&
      get_text(&resp, &address) == 0 && address[0] && strlen(address) < outlen) {
    strcpy(out, address);
    rc = 0;
  }
  close(fd);
  return rc;
}

/* This node's role in the leader's configuration: 0 voter, 1 stand-by,
** 2 spare, 3 not a member; -1 on error. */
static int role_of(int fd, uint64_t id) {
  body req = {0}, resp = {0};
  put_u64(&req, CLUSTER_FORMAT_V1);
  if (wire_call(fd, REQ_CLUSTER, &req, &resp) != RESP_SERVERS) return -1;
  uint64_t n, sid, role;
  const char *address;
  if (get_u64(&resp, &n) != 0) return -1;
  for (uint64_t i = 0; i < n; i++) {
    if (get_u64(&resp, &sid) || get_text(&resp, &address) || get_u64(&resp, &role)) return -1;
    if (sid == id) return (int)role;
  }
  return 3;
}

/* One attempt: find the leader through any of `peers` (comma-separated), make
** this node a voter there.  0 when it is one. */
static int join_once(const char *peers, uint64_t id, const char *address) {
  char leader[256] = "";
  char list[1024];
  snprintf(list, sizeof list, "%s", peers);
  for (char *save, *p = strtok_r(list, ",", &save); p; p = strtok_r(NULL, ",", &save))
    if (ask_leader(p, leader, sizeof leader) == 0) break;
  if (!leader[0]) return -1;
  int fd = wire_connect(leader);
  if (fd < 0) return -1;
  int rc = -1, role = role_of(fd, id);
  body req = {0}, resp = {0};
  if (role == 3) { /* not a member: ADD makes it a spare */
    put_u64(&req, id);
    put_text(&req, address);
    if (wire_call(fd, REQ_ADD, &req, &resp) == RESP_EMPTY) role = 2;
  }
  if (role == 1 || role == 2) { /* ASSIGN voter: returns once it caught up */
    req.len = 0;
    put_u64(&req, id);
    put_u64(&req, ROLE_VOTER);
    if (wire_call(fd, REQ_ASSIGN, &req, &resp) == RESP_EMPTY) role = 0;
  }
  if (role == 0) rc = 0;
  close(fd);
  return rc;
}

static int join_cluster(const char *peers, uint64_t id, const char *address) {
  long long deadline = now_ms() + JOIN_TIMEOUT_S * 1000;
  while (join_once(peers, id, address) != 0) {
    if (now_ms() > deadline) return -1;
    sleep_ms(250);
  }
  return 0;
}

/* ---- bertfill in every connection ---- */

typedef int (*init_fn)(sqlite3 *, char **, const sqlite3_api_routines *);

/* The default extension: ../bertfill.so relative to this program
** (build/bfnode -> ./bertfill.so in the repository). */
static void default_extension(char *out, size_t n) {
  char self[PATH_MAX - 16]; /* room for "/bertfill.so" */
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) {
    snprintf(out, n, "./bertfill.so");
    return;
  }
  self[len] = 0;
  for (int up = 0; up < 2; up++) {
    char *slash = strrchr(self, '/');
    if (slash) *slash = 0;
  }
  snprintf(out, n, "%s/bertfill.so", self);
}

/* No write inside a running autocommit read.  dqlite 1.11 replicates the WAL
** frames of EXEC requests only: after stepping an EXEC it polls its VFS for
** the new frames (dqlite_vfs_poll).  A QUERY is stepped without that poll,
** because dqlite assumes that a query does not write.  bert_fill and
** bert_prefill in a SELECT do write: they store their answers in the memo
** cache table (bertfill_cache).  Outside an explicit transaction that write
** stays in the leader's VFS, never replicated, and the leader's next write
** lock aborts the node: "src/vfs.c:1701: vfsFileShmLock: Assertion
** `wal->n_tx == 0' failed" (seen with Debian's libdqlite0 1.11.1, a QUERY_SQL
** "SELECT bert_fill(...)" outside BEGIN, then any statement).
**
** So every connection gets an authorizer that refuses, while the connection
** is in autocommit mode and every statement running on it is read-only, the
** statements bertfill would prepare to write: INSERT, UPDATE, DELETE, CREATE
** and a BEGIN or SAVEPOINT.  bertfill treats a refused cache write like one on
** a read-only database: the answer is computed and returned, the write
** skipped.  Writes inside UPDATE/INSERT/DELETE and inside BEGIN ... COMMIT
** (what the `dqlite` shell sends for every command) are not affected: their
** frames go out with the statement or with the COMMIT. */
static int nested_in_autocommit_read(sqlite3 *db) {
  if (!sqlite3_get_autocommit(db)) return 0;
  int reading = 0;
  for (sqlite3_stmt *s = sqlite3_next_stmt(db, NULL); s; s = sqlite3_next_stmt(db, s)) {
    if (!sqlite3_stmt_busy(s)) continue;
    if (!sqlite3_stmt_readonly(s)) return 0;
    reading = 1;
  }
  return reading;
}

static int guard_writes(void *arg, int action, const char *a1, const char *a2, const char *a3,
                        const char *a4) {
  (void)a2;
  (void)a3;
  (void)a4;
  switch (action) {
    case SQLITE_INSERT:
    case SQLITE_UPDATE:
    case SQLITE_DELETE:
    case SQLITE_CREATE_TABLE:
    case SQLITE_CREATE_INDEX:
    case SQLITE_DROP_TABLE:
    case SQLITE_DROP_INDEX:
    case SQLITE_ALTER_TABLE: break;
    case SQLITE_TRANSACTION: /* a1: BEGIN, COMMIT or ROLLBACK */
    case SQLITE_SAVEPOINT:   /* a1: BEGIN, RELEASE or ROLLBACK */
      if (a1 == NULL || strcmp(a1, "BEGIN") != 0) return SQLITE_OK;
      break;
    default: return SQLITE_OK;
  }
  return nested_in_autocommit_read((sqlite3 *)arg) ? SQLITE_DENY : SQLITE_OK;
}

/* bertfill's entry point, found with dlsym, then the guard above. */
static init_fn bertfill_init;

static int open_connection(sqlite3 *db, char **err, const sqlite3_api_routines *api) {
  int rc = bertfill_init(db, err, api);
  if (rc == SQLITE_OK) rc = sqlite3_set_authorizer(db, guard_writes, db);
  return rc;
}

static int register_bertfill(const char *path) {
  void *so = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
  if (so == NULL) {
    fprintf(stderr, "bfnode: %s\n", dlerror());
    return -1;
  }
  bertfill_init = (init_fn)dlsym(so, "sqlite3_bertfill_init");
  if (bertfill_init == NULL) {
    fprintf(stderr, "bfnode: %s: no sqlite3_bertfill_init\n", path);
    return -1;
  }
  return sqlite3_auto_extension((void (*)(void))open_connection) == SQLITE_OK ? 0 : -1;
}

/* Keeps the default model (BERTFILL_MODEL, else the shipped one) loaded for
** the life of the process.  bertfill shares one loaded model among the
** connections of a process and unloads it when the last one closes; a dqlite
** client's connection lasts one `dqlite` shell call, so without this every
** call would map the weights again and fault them in (bert-base: 400 MB). */
static sqlite3 *keep_model_loaded(unsigned long long id) {
  sqlite3 *db = NULL;
  sqlite3_stmt *st = NULL;
  if (sqlite3_open(":memory:", &db) == SQLITE_OK &&
      sqlite3_prepare_v2(db, "SELECT bert_load(NULL)", -1, &st, NULL) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW)
    printf("bfnode %llu: model %s\n", id, sqlite3_column_text(st, 0));
  else printf("bfnode %llu: no model loaded yet: %s\n", id, sqlite3_errmsg(db));
  sqlite3_finalize(st);
  return db;
}

static void usage(void) {
  fprintf(stderr, "usage: bfnode --id N --address HOST:PORT --dir DIR [--join HOST:PORT,...]\n"
                  "              [--extension PATH] [--latency-ms MS]\n");
  exit(2);
}

int main(int argc, char **argv) {
  static const struct option opts[] =
    {{"id", 1, 0, 'i'},        {"address", 1, 0, 'a'},    {"dir", 1, 0, 'd'}, {"join", 1, 0, 'j'},
     {"extension", 1, 0, 'e'}, {"latency-ms", 1, 0, 'l'}, {0, 0, 0, 0}};
  unsigned long long id = 0;
  const char *address = NULL, *dir = NULL, *join = NULL;
  char extension[PATH_MAX] = "";
  unsigned latency_ms = 0;
  for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
    switch (c) {
      case 'i': id = strtoull(optarg, NULL, 10); break;
      case 'a': address = optarg; break;
      case 'd': dir = optarg; break;
      case 'j': join = optarg; break;
      case 'e': snprintf(extension, sizeof extension, "%s", optarg); break;
      case 'l': latency_ms = (unsigned)strtoul(optarg, NULL, 10); break;
      default: usage();
    }
  }
  if (id == 0 || address == NULL || dir == NULL || optind != argc) usage();
  if (!extension[0]) default_extension(extension, sizeof extension);
  if (register_bertfill(extension) != 0) return 1;
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
    perror(dir);
    return 1;
  }

  /* A peer that went away must be an error on the socket, not SIGPIPE's
  ** silent exit: without this, killing one node kills the others. */
  signal(SIGPIPE, SIG_IGN);
  /* dqlite's threads inherit this mask; main waits for the signals below */
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, NULL);

  dqlite_node *node;
  if (dqlite_node_create(id, address, dir, &node) != 0) {
    fprintf(stderr, "bfnode %llu: dqlite_node_create failed\n", id);
    return 1;
  }
  int rv = dqlite_node_set_bind_address(node, address);
  if (rv == 0 && latency_ms) rv = dqlite_node_set_network_latency_ms(node, latency_ms);
  if (rv == 0) rv = dqlite_node_start(node);
  if (rv != 0) {
    fprintf(stderr, "bfnode %llu: %s\n", id, dqlite_node_errmsg(node));
    dqlite_node_destroy(node);
    return 1;
  }
  printf("bfnode %llu: serving %s, data in %s, extension %s\n", id, address, dir, extension);
  sqlite3 *model_holder = keep_model_loaded(id);
  fflush(stdout);
  if (join && join_cluster(join, id, address) != 0) {
    fprintf(stderr, "bfnode %llu: could not join %s within %d s\n", id, join, JOIN_TIMEOUT_S);
    dqlite_node_stop(node);
    dqlite_node_destroy(node);
    sqlite3_close(model_holder);
    return 1;
  }
  printf("bfnode %llu: ready\n", id);
  fflush(stdout);

  int sig;
  sigwait(&stop, &sig);
  printf("bfnode %llu: signal %d, stopping\n", id, sig);
  fflush(stdout);
  dqlite_node_stop(node);
  dqlite_node_destroy(node);
  sqlite3_close(model_holder);
  return 0;
}
