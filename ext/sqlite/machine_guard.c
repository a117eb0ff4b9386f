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
** Waiting, first come first served.  A caller enters a waiting room: a
** table in the file's first page (shared mmap) where it writes when it
** arrived, holding the record lock of its entry meanwhile.  Only the
** longest-waiting caller alive may take a free slot; an entry whose lock is
** gone belongs to a process that died, and is cleared by whoever meets it.
** Waiters sleep on a counter in the same page (a futex on Linux) that every
** release and every departure from the room increments, so the next one
** wakes as soon as a slot is given back, and at least every 100 ms to look
** again (a holder that died wakes no one).  Elsewhere than Linux they sleep
** 2 ms between looks.  Without the room (more than MAX_WAITERS callers
** waiting machine-wide) a caller takes whatever slot it finds free.
**
** The slot file stays after the last process exits (unlike the shared
** batcher's queue files, shared_batch.c LEAVING): it holds no text, only
** the times at which callers now waiting arrived (each cleared when its
** caller leaves the room); it is one 4 KB file per user, not per model;
** its inode is the budget itself, so removing it while another process
** opens it by name would split the machine's slots into two budgets for as
** long as both live (a lock-protected leave as in shared_batch.c would be
** needed, for 4 KB); and a file that BERTFILL_MACHINE_GUARD_FILE names is
** one the user chose, not the library's to remove.
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

#define FILE_SIZE 4096  /* the shared page: the counter and the waiting room */
#define MAX_WAITERS 448 /* entries of the waiting room */
#define LOCK_BASE 4096  /* slot i: the byte at LOCK_BASE + i */
#define WAITER_BASE (LOCK_BASE + BFX_MACHINE_SLOTS_MAX) /* waiting-room entry j: this + j */
#define RECHECK_NS 100000000ull /* a sleeping waiter looks again this often */

/* The shared page of the slot file. */
typedef struct shared {
  _Atomic uint32_t wake; /* incremented by every release and every departure */
  uint32_t pad[15];
  _Atomic uint64_t arrived[MAX_WAITERS]; /* entry j: when its caller arrived (ns); 0: free */
} shared;
_Static_assert(sizeof(shared) <= FILE_SIZE, "the shared page");

static struct {
  pthread_once_t once;
  pthread_mutex_t mu;
  int fd;              /* -1: no slot file */
  shared *sh;          /* its first page */
  unsigned char *held; /* held[i]: this process holds slot i */
  int nheld;
  unsigned char waiting[MAX_WAITERS]; /* waiting[j]: entry j is one of this process's */
  char path[PATH_MAX];
} mg = {.once = PTHREAD_ONCE_INIT, .mu = PTHREAD_MUTEX_INITIALIZER, .fd = -1};

static void forget_in_child(void) { /* the child inherits no record locks */
  if (mg.held) memset(mg.held, 0, BFX_MACHINE_SLOTS_MAX);
  mg.nheld = 0;
  memset(mg.waiting, 0, sizeof mg.waiting);
  pthread_mutex_init(&mg.mu, NULL);
}

/* One line on stderr: "WHAT PATH: WHY" (why NULL: strerror(errno)). */
static void open_failed(const char *what, const char *why) {
  fprintf(stderr, "bertfill: machine-wide guard off: %s %s: %s\n", what, mg.path,
          why ? why : strerror(errno));
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
  const char *failed = NULL, *why = NULL;
  struct stat st;
  void *p = MAP_FAILED;
  if (!mg.held) {
    errno = ENOMEM;
    failed = "cannot track the slots of";
  } else if ((mg.fd = bf_open_regular(mg.path, O_RDWR | O_CREAT | O_NOFOLLOW, 0600, &st)) < 0) {
    failed = "cannot open";
    why = bf_open_failure(errno);
  } else if (by_default && st.st_uid != geteuid()) {
    errno = EPERM;
    failed = "not a file of this user:";
  } else if (st.st_size < FILE_SIZE && ftruncate(mg.fd, FILE_SIZE) != 0) {
    failed = "cannot size";
  } else if ((errno = bf_reserve_file(mg.fd, FILE_SIZE, 0)) != 0) {
    failed = "cannot reserve the memory of (is its file system full?)";
  } else if ((p = mmap(NULL, FILE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, mg.fd, 0)) ==
             MAP_FAILED) {
    failed = "cannot map";
  }
  if (failed) {
    open_failed(failed, why);
    return;
  }
  mg.sh = p;
  pthread_atfork(NULL, NULL, forget_in_child);
}

/* The slot file, opened on first use; 0 when there is none. */
static int ready(void) {
  pthread_once(&mg.once, machine_init);
  return mg.fd >= 0;
}

/* Set (F_WRLCK, 1 when taken) or drop (F_UNLCK) the record lock on one byte. */
static int lock_byte(off_t at, short type) {
  struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = at, .l_len = 1};
  return fcntl(mg.fd, F_SETLK, &fl) == 0;
}

/* 1 when another process holds the record lock on the byte at. */
static int locked_elsewhere(off_t at) {
  struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = at, .l_len = 1};
  return fcntl(mg.fd, F_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
}

static int clamp(int slots) {
  return slots < 1 ? 1 : slots > BFX_MACHINE_SLOTS_MAX ? BFX_MACHINE_SLOTS_MAX : slots;
}

/* Take a free slot among the first n (mu held): 1 when taken. */
static int try_slots(int n) {
  for (int i = 0; i < n; i++) {
    if (mg.held[i] || !lock_byte(LOCK_BASE + i, F_WRLCK)) continue;
    mg.held[i] = 1;
    mg.nheld++;
    return 1;
  }
  return 0;
}

/* ---- the waiting room (mu held in all of these) ---- */

/* An entry for a caller that arrived at now: its index, or -1 when the room
** is full.  The entry's lock is taken before its time is written, and the
** time cleared before the lock is dropped: a time with no lock behind it
** is a dead caller's. */
static int enter(uint64_t now) {
  for (int pass = 0; pass < 2; pass++) { /* free entries first, then dead ones */
    for (int j = 0; j < MAX_WAITERS; j++) {
      if (mg.waiting[j] || (pass == 0 && atomic_load(&mg.sh->arrived[j]) != 0)) continue;
      if (!lock_byte(WAITER_BASE + j, F_WRLCK)) continue; /* someone alive has it */
      atomic_store(&mg.sh->arrived[j], now);
      mg.waiting[j] = 1;
      return j;
    }
  }
  return -1;
}

static void leave(int j) {
  atomic_store(&mg.sh->arrived[j], 0);
  lock_byte(WAITER_BASE + j, F_UNLCK);
  mg.waiting[j] = 0;
}

/* Is the caller of entry j (arrived at t) alive?  A dead one's entry is
** cleared. */
static int alive(int j, uint64_t t) {
  if (mg.waiting[j] || locked_elsewhere(WAITER_BASE + j)) return 1;
  uint64_t expect = t; /* dead, or leaving right now: clear it unless reused meanwhile */
  atomic_compare_exchange_strong(&mg.sh->arrived[j], &expect, 0);
  return 0;
}

/* 1 when no live caller has waited longer than entry me (me < 0: when no
** live caller waits at all). */
static int first_in_line(int me) {
  uint64_t mine = me >= 0 ? atomic_load(&mg.sh->arrived[me]) : UINT64_MAX;
  for (int j = 0; j < MAX_WAITERS; j++) {
    uint64_t t = atomic_load(&mg.sh->arrived[j]);
    if (j == me || t == 0 || t > mine || (t == mine && j > me)) continue;
    if (alive(j, t)) return 0;
  }
  return 1;
}

/* Wake every sleeping waiter: the first in line among them may go on. */
static void wake_all(void) {
  atomic_fetch_add(&mg.sh->wake, 1);
#ifdef __linux__
  syscall(SYS_futex, (uint32_t *)&mg.sh->wake, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
#endif
}

/* Sleep until the counter moves from seen, or ns pass. */
static void wait_turn(uint32_t seen, uint64_t ns) {
#ifdef __linux__
  struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
  syscall(SYS_futex, (uint32_t *)&mg.sh->wake, FUTEX_WAIT, seen, &ts, NULL, 0);
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
  int got = first_in_line(-1) && try_slots(clamp(slots)); /* never ahead of a waiter */
  pthread_mutex_unlock(&mg.mu);
  return got;
}

int bfx_machine_acquire_until(int slots, uint64_t deadline_ns) {
  if (!ready()) return -1;
  int n = clamp(slots);
  uint64_t now = bf_now_ns();
  pthread_mutex_lock(&mg.mu);
  int me = enter(now);
  pthread_mutex_unlock(&mg.mu);
  for (;;) {
    uint32_t seen = atomic_load(&mg.sh->wake); /* before looking: no wake-up is missed */
    pthread_mutex_lock(&mg.mu);
    int got = first_in_line(me) && try_slots(n);
    int done = got || now >= deadline_ns;
    if (done && me >= 0) leave(me);
    pthread_mutex_unlock(&mg.mu);
    if (done) {
      /* the next in line may go on: to another free slot, or to this place */
      if (me >= 0 && (!got || n > 1)) wake_all();
      return got;
    }
    uint64_t ns = deadline_ns - now;
    wait_turn(seen, ns < RECHECK_NS ? ns : RECHECK_NS);
    now = bf_now_ns();
  }
}

void bfx_machine_release(void) {
  if (!ready()) return;
  pthread_mutex_lock(&mg.mu);
  for (int i = 0; i < BFX_MACHINE_SLOTS_MAX && mg.nheld > 0; i++) {
    if (!mg.held[i]) continue;
    lock_byte(LOCK_BASE + i, F_UNLCK);
    mg.held[i] = 0;
    mg.nheld--;
    break;
  }
  pthread_mutex_unlock(&mg.mu);
  wake_all();
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
  for (int i = 0; i < n; i++) /* F_GETLK does not see the process's own locks */
    busy += mg.held[i] || locked_elsewhere(LOCK_BASE + i);
  pthread_mutex_unlock(&mg.mu);
  return busy;
}

const char *bfx_machine_path(void) {
  ready();
  return mg.path;
}
