/*
** test_machine_guard.c — unit tests of the machine-wide encoder slots
** (ext/sqlite/machine_guard.c), with real processes: a slot held by one
** process is taken for another; a holder killed with SIGKILL leaks no slot
** (the kernel drops its record locks); a waiter wakes as soon as a slot is
** given back (not at its 100 ms recheck); waiters are served in the order
** they came, and one killed while waiting holds up no one; two threads of
** one process never share a slot; the wait ends at the deadline; a forked child holds none of
** its parent's slots.  The slot file is a fresh one under $TMPDIR
** (BERTFILL_MACHINE_GUARD_FILE), so other runs on the machine do not count.
** Links the SQLite layer's objects (see test_sqlite.h).
*/
#define SQLITE_CORE 1
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>
#include "testlib.h"
#include "test_sqlite.h"
#include "machine_guard.h"
#include "util.h"

#define MS 1000000ull

/* A child process that takes `slots` slot(s) of n, says so on the pipe, and
** then holds them: until killed, or for hold_ms and then gives them back. */
static pid_t holder(int n, int slots, int hold_ms, int *ready_fd) {
  int p[2];
  if (pipe(p) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    char ok = 1;
    for (int i = 0; i < slots; i++)
      if (bfx_machine_acquire_until(n, bf_now_ns() + 2000 * MS) != 1) ok = 0;
    if (write(p[1], &ok, 1) != 1) _exit(2);
    if (hold_ms < 0) pause();
    usleep((useconds_t)hold_ms * 1000);
    for (int i = 0; i < slots; i++) bfx_machine_release();
    _exit(0);
  }
  close(p[1]);
  *ready_fd = p[0];
  return pid;
}

static int wait_ready(int fd) {
  char ok = 0;
  int r = (int)read(fd, &ok, 1);
  close(fd);
  return r == 1 && ok == 1;
}

/* A child that waits for one of n slots (until its deadline, wait_ms), writes
** its id on fd when it has it, holds it for hold_ms and exits. */
static pid_t waiter(int n, char id, int wait_ms, int hold_ms, int fd) {
  pid_t pid = fork();
  if (pid == 0) {
    if (bfx_machine_acquire_until(n, bf_now_ns() + (uint64_t)wait_ms * MS) != 1) _exit(1);
    if (write(fd, &id, 1) != 1) _exit(2);
    usleep((useconds_t)hold_ms * 1000);
    bfx_machine_release();
    _exit(0);
  }
  return pid;
}

typedef struct {
  int n, got;
} thread_arg;

static void *take_one(void *a) {
  thread_arg *t = a;
  t->got = bfx_machine_try_acquire(t->n);
  return NULL;
}

int main(void) {
  if (!test_sqlite_api()) {
    printf("FAIL machine_guard: no SQLite API\n");
    return 1;
  }
  char path[256];
  snprintf(path, sizeof path, "%s/bf-machine-guard-%d.slots",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
  setenv("BERTFILL_MACHINE_GUARD_FILE", path, 1);

  CHECK("mg_first_slot", bfx_machine_try_acquire(1) == 1 && bfx_machine_held() == 1);
  CHECK("mg_path", strcmp(bfx_machine_path(), path) == 0);
  CHECK("mg_same_process_not_twice", bfx_machine_try_acquire(1) == 0);
  bfx_machine_release();
  CHECK("mg_released", bfx_machine_held() == 0 && bfx_machine_busy(4) == 0);

  /* another process holds the only slot; SIGKILL gives it back */
  int fd;
  pid_t pid = holder(1, 1, -1, &fd);
  CHECK("mg_child_took_slot", wait_ready(fd));
  CHECK("mg_held_by_other", bfx_machine_try_acquire(1) == 0 && bfx_machine_busy(1) == 1);
  CHECK("mg_second_slot_free", bfx_machine_try_acquire(2) == 1);
  bfx_machine_release();
  uint64_t t0 = bf_now_ns();
  int got = bfx_machine_acquire_until(1, t0 + 150 * MS);
  uint64_t dt = bf_now_ns() - t0;
  CHECKF("mg_timeout", got == 0 && dt >= 150 * MS && dt < 400 * MS, "got %d after %.1f ms", got,
         (double)dt / 1e6);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  CHECK("mg_sigkill_no_leak", bfx_machine_try_acquire(1) == 1);
  bfx_machine_release();

  /* every slot of two held elsewhere, both killed: none leaked */
  pid = holder(2, 2, -1, &fd);
  CHECK("mg_child_took_two", wait_ready(fd));
  CHECK("mg_all_taken", bfx_machine_try_acquire(2) == 0 && bfx_machine_busy(2) == 2);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  CHECK("mg_sigkill_two_no_leak", bfx_machine_busy(2) == 0 && bfx_machine_try_acquire(2) == 1 &&
                                    bfx_machine_try_acquire(2) == 1 && bfx_machine_held() == 2);
  bfx_machine_release();
  bfx_machine_release();

  /* a waiter wakes when the holder gives the slot back (150 ms after it
  ** said it was ready): before the recheck at 200 ms would find it */
  int quick = 0;
  for (int round = 0; round < 5 && !quick; round++) {
    pid = holder(1, 1, 150, &fd);
    wait_ready(fd);
    t0 = bf_now_ns();
    got = bfx_machine_acquire_until(1, t0 + 2000 * MS);
    dt = bf_now_ns() - t0;
    int status = 0;
    waitpid(pid, &status, 0);
    bfx_machine_release();
    quick = got == 1 && dt >= 140 * MS && dt < 185 * MS;
    if (!quick) printf("# round %d: got %d after %.1f ms\n", round, got, (double)dt / 1e6);
  }
  CHECK("mg_woken_by_release", quick);

  /* first come, first served: three waiters get the slot in the order
  ** they came, whatever order the wake-ups come in */
  int order[2];
  if (pipe(order) != 0) return 1;
  pid = holder(1, 1, 300, &fd);
  wait_ready(fd);
  pid_t w[3];
  for (int i = 0; i < 3; i++) {
    w[i] = waiter(1, (char)('A' + i), 5000, 30, order[1]);
    usleep(40 * 1000);
  }
  char got3[4] = "";
  for (int i = 0; i < 3; i++)
    if (read(order[0], &got3[i], 1) != 1) break;
  for (int i = 0; i < 3; i++) waitpid(w[i], NULL, 0);
  waitpid(pid, NULL, 0);
  CHECKF("mg_first_come_first_served", strcmp(got3, "ABC") == 0, "order %s", got3);

  /* a waiter killed while it waits does not hold up the line: this process
  ** gets the slot when the holder lets go, not at its deadline */
  pid = holder(1, 1, 200, &fd);
  wait_ready(fd);
  pid_t dead = waiter(1, 'D', 5000, 0, order[1]);
  usleep(50 * 1000); /* it is waiting, ahead of this process */
  t0 = bf_now_ns();
  kill(dead, SIGKILL);
  waitpid(dead, NULL, 0);
  got = bfx_machine_acquire_until(1, t0 + 3000 * MS);
  dt = bf_now_ns() - t0;
  waitpid(pid, NULL, 0);
  CHECKF("mg_dead_waiter_skipped", got == 1 && dt < 400 * MS, "got %d after %.1f ms", got,
         (double)dt / 1e6);
  bfx_machine_release();
  close(order[0]);
  close(order[1]);

  /* threads of one process: distinct slots */
  thread_arg a[3] = {{2, -1}, {2, -1}, {2, -1}};
  pthread_t th[3];
  for (int i = 0; i < 3; i++) pthread_create(&th[i], NULL, take_one, &a[i]);
  for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
  CHECKF("mg_threads_distinct_slots",
         a[0].got + a[1].got + a[2].got == 2 && bfx_machine_held() == 2 && bfx_machine_busy(2) == 2,
         "got %d %d %d, held %d", a[0].got, a[1].got, a[2].got, bfx_machine_held());
  /* a forked child does not hold its parent's slots */
  pid = fork();
  if (pid == 0) _exit(bfx_machine_held() == 0 && bfx_machine_try_acquire(2) == 0 ? 0 : 1);
  int status = -1;
  waitpid(pid, &status, 0);
  CHECK("mg_fork_child_holds_none", WIFEXITED(status) && WEXITSTATUS(status) == 0);
  bfx_machine_release();
  bfx_machine_release();
  CHECK("mg_all_released", bfx_machine_held() == 0 && bfx_machine_busy(2) == 0);

  unlink(path);
  TL_EXIT();
}
