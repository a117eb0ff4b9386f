/*
** machine_guard.c — one budget of encoder runs for all the processes of a
** machine.  The overload guard (guard.c) bounds the runs of one process; N
** worker processes (the "more workers" deployment, or several applications)
** would still run N encoders at once on the same cores.  With the
** machine-wide guard on (BERTFILL_MACHINE_GUARD=1), every encoder run also
** takes one of the machine's slots, so at most that many run at once
** whatever the number of processes, and the others wait (at most the busy
** timeout, then "bertfill: busy: ...", as for the process's own guard).
**
** The slots are one-byte fcntl() record locks on a file, by default
** /dev/shm/bertfill-<uid>.slots (BERTFILL_MACHINE_GUARD_FILE names another):
** slot i is the write lock on byte LOCK_BASE + i.  The kernel drops a
** process's record locks when it exits however it exits, SIGKILL included,
** so a dead holder never leaks a slot (a POSIX semaphore would stay taken).
** Processes that use the same file share the slots; the default file is per
** user (created 0600, refused when it belongs to someone else or is a
** symbolic link: another user could otherwise hold every slot).  Give every
** process the same number of slots: a process with N uses slots 0..N-1.
**
** Record locks belong to the process, not to a thread: a second thread of
** the same process "taking" a byte the process holds would succeed, so the
** process keeps its own list of the bytes it holds (held[], under mu) and
** tries only the others.  Slots are interchangeable: a release gives back
** any byte the process holds.  Only one descriptor of the file is ever
** opened, and never closed (closing any descriptor of a file drops all the
** process's locks on it).  A forked child holds no locks: it forgets the
** parent's list.
**
** Waiting.  A waiter tries every slot; when all are taken it sleeps on a
** counter in the file's first bytes (shared mmap, a futex on Linux) that
** every release increments, so it wakes as soon as a slot is given back,
** and at least every 100 ms to try again (a holder that died wakes no one).
** Elsewhere than Linux it sleeps 2 ms between tries.
*/
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

#include "machine_guard.h"
#include "bounds.h"
#include "util.h"

#define FILE_SIZE 4096         /* the wake-up counter lives at offset 0 */
#define LOCK_BASE 4096         /* slot i: the byte at LOCK_BASE + i */
#define RECHECK_NS 100000000ull /* a sleeping waiter tries again this often */

static struct {
  pthread_once_t once;
  pthread_mutex_t mu;
  int fd;                 /* -1: no slot file */
  _Atomic uint32_t *wake; /* incremented by every release */
  unsigned char *held;    /* held[i]: this process holds slot i */
  int nheld;
  char path[PATH_MAX];
} mg = {.once = PTHREAD_ONCE_INIT, .mu = PTHREAD_MUTEX_INITIALIZER, .fd = -1};

static void forget_in_child(void) { /* the child inherits no record locks */
  if (mg.held) memset(mg.held, 0, BFX_MACHINE_SLOTS_MAX);
  mg.nheld = 0;
  pthread_mutex_init(&mg.mu, NULL);
}

static void open_failed(const char *what) {
  fprintf(stderr, "bertfill: machine-wide guard off: %s %s: %s\n", what, mg.path, strerror(errno));
  if (mg.fd >= 0) close(mg.fd);
  mg.fd = -1;
  mg.path[0] = 0;
}

static void machine_init(void) {
  const char *env = getenv("BERTFILL_MACHINE_GUARD_FILE");
  int by_default = !env || !*env;
  if (by_default) {
    const char *dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(mg.path, sizeof mg.path, "%s/bertfill-%u.slots", dir, (unsigned)geteuid());
  } else {
    snprintf(mg.path, sizeof mg.path, "%s", env);
  }
  mg.held = calloc(BFX_MACHINE_SLOTS_MAX, 1);
  const char *failed = NULL;
  struct stat st;
  void *p = MAP_FAILED;
  if (!mg.held) {
    errno = ENOMEM;
    failed = "cannot track the slots of";
  } else if ((mg.fd = open(mg.path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600)) < 0) {
    failed = "cannot open";
  } else if (fstat(mg.fd, &st) != 0) {
    failed = "cannot stat";
  } else if (!S_ISREG(st.st_mode) || (by_default && st.st_uid != geteuid())) {
    errno = EPERM;
    failed = "not a file of this user:";
  } else if (st.st_size < FILE_SIZE && ftruncate(mg.fd, FILE_SIZE) != 0) {
    failed = "cannot size";
  } else if ((p = mmap(NULL, FILE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, mg.fd, 0)) ==
             MAP_FAILED) {
    failed = "cannot map";
  }
  if (failed) {
    open_failed(failed);
    return;
  }
  mg.wake = p;
  pthread_atfork(NULL, NULL, forget_in_child);
}

/* The slot file, opened on first use; 0 when there is none. */
static int ready(void) {
  pthread_once(&mg.once, machine_init);
  return mg.fd >= 0;
}

static int lock_byte(int i, short type) {
  struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = LOCK_BASE + i, .l_len = 1};
  return fcntl(mg.fd, F_SETLK, &fl) == 0;
}

/* Take a free slot among the first n (mu held): 1 when taken. */
static int try_slots(int n) {
  for (int i = 0; i < n; i++) {
    if (mg.held[i] || !lock_byte(i, F_WRLCK)) continue;
    mg.held[i] = 1;
    mg.nheld++;
    return 1;
  }
  return 0;
}

static int clamp(int slots) {
  return slots < 1 ? 1 : slots > BFX_MACHINE_SLOTS_MAX ? BFX_MACHINE_SLOTS_MAX : slots;
}

/* Sleep until a release changes the counter from seen, or ns pass. */
static void wait_release(uint32_t seen, uint64_t ns) {
#ifdef __linux__
  struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
  syscall(SYS_futex, (uint32_t *)mg.wake, FUTEX_WAIT, seen, &ts, NULL, 0);
#else
  (void)seen;
  if (ns > 2000000) ns = 2000000;
  struct timespec ts = {0, (long)ns};
  nanosleep(&ts, NULL);
#endif
}

int bfx_machine_try_acquire(int slots) {
  if (!ready()) return -1;
  pthread_mutex_lock(&mg.mu);
  int got = try_slots(clamp(slots));
  pthread_mutex_unlock(&mg.mu);
  return got;
}

int bfx_machine_acquire_until(int slots, uint64_t deadline_ns) {
  if (!ready()) return -1;
  for (;;) {
    uint32_t seen = atomic_load(mg.wake); /* before trying: no release is missed */
    pthread_mutex_lock(&mg.mu);
    int got = try_slots(clamp(slots));
    pthread_mutex_unlock(&mg.mu);
    if (got) return 1;
    uint64_t now = bf_now_ns();
    if (now >= deadline_ns) return 0;
    uint64_t ns = deadline_ns - now;
    wait_release(seen, ns < RECHECK_NS ? ns : RECHECK_NS);
  }
}

void bfx_machine_release(void) {
  if (!ready()) return;
  pthread_mutex_lock(&mg.mu);
  for (int i = 0; i < BFX_MACHINE_SLOTS_MAX && mg.nheld > 0; i++) {
    if (!mg.held[i]) continue;
    lock_byte(i, F_UNLCK);
    mg.held[i] = 0;
    mg.nheld--;
    break;
  }
  pthread_mutex_unlock(&mg.mu);
  atomic_fetch_add(mg.wake, 1);
#ifdef __linux__
  syscall(SYS_futex, (uint32_t *)mg.wake, FUTEX_WAKE, 1, NULL, NULL, 0);
#endif
}

int bfx_machine_held(void) {
  if (!ready()) return 0;
  pthread_mutex_lock(&mg.mu);
  int n = mg.nheld;
  pthread_mutex_unlock(&mg.mu);
  return n;
}

int bfx_machine_busy(int slots) {
  if (!ready()) return -1;
  int n = clamp(slots), busy = 0;
  pthread_mutex_lock(&mg.mu);
  for (int i = 0; i < n; i++) {
    struct flock fl = {.l_type = F_WRLCK,
                       .l_whence = SEEK_SET,
                       .l_start = LOCK_BASE + i,
                       .l_len = 1};
    if (mg.held[i]) busy++; /* F_GETLK does not see the process's own locks */
    else if (fcntl(mg.fd, F_GETLK, &fl) == 0 && fl.l_type != F_UNLCK) busy++;
  }
  pthread_mutex_unlock(&mg.mu);
  return busy;
}

const char *bfx_machine_path(void) {
  ready();
  return mg.path;
}
