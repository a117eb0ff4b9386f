/*
** shared_batch.c — the machine-wide batcher: the encoder requests of every
** process of one user that runs the same model go into one queue in shared
** memory, and whichever process holds the encoder takes them all into its
** batch.
**
** Why.  batcher.c merges the concurrent calls of one process's threads into
** one encoder run.  The classic deployment of a service is N worker
** processes instead (gunicorn/uvicorn workers, PHP-FPM, several scripts or
** sqlite3 shells): each would run its own encoder, N runs fight for the same
** cores and every one of them reads all the weights again.  With this
** module the processes behave like the threads of one process: one encoder
** run at a time on the machine, over everybody's waiting sentences.
**
** THE SHARED FILE
**
**   /dev/shm/bertfill-<uid>-batch-<fingerprint>   (/tmp when /dev/shm is not
**                                                 writable; BERTFILL_SHARED_
**                                                 BATCH_DIR names another dir)
**
** One file per user and model: <fingerprint> is bf_model_fingerprint(m),
** which mixes every weight byte, the config, the vocabulary and the
** precision, so requests of two models or of the fp32 and int8 loads of one
** model never meet, and two directories holding the same files do.  The
** file is opened with O_NOFOLLOW (a symbolic link is refused) and
** O_NONBLOCK, created 0600, and used only when fstat says: a regular file,
** one link, owned by this process's effective uid, mode exactly 0600, and
** of the expected size; and when its header has the magic, the layout
** version, every layout size and the fingerprint this build expects.
** Anything else (another user's file, a link, garbage, another build's
** layout) is refused with one line on stderr, and the process keeps its own
** batcher (batcher.c): never an error for a call.  A file of another size
** (an older bertfill's layout, or one cut short) that no process of this
** build is attached to (ATTACH_BYTE, see LEAVING) is removed and made
** again instead: an upgrade does not turn batching off until a reboot.
** Another user's processes compute another file name (their uid) and could
** not open this one (0600) anyway: texts never cross users.
**
**   +--------------------+  page 0: the header (magic, version, sizes,
**   | header             |  fingerprint; leader pid, leader changes,
**   +--------------------+  shared batches; progress, expect_ns: STALLS)
**   | slot 0             |  BFX_SHARED_SLOTS slots of fixed size, each:
**   | slot 1             |    state (a 32-bit word: the futex; the state in
**   | ...                |    its low 4 bits, the request's ticket above),
**   +--------------------+    n, n_masks, k, rc, owner pid, owner key,
**                             taker key, nonce, echo, times,
**                             token ids[BFX_SHARED_MAX_TOKENS],
**                             results[BFX_SHARED_MAX_MASKS * BFX_SHARED_MAX_K]
**
** About 800 KB with the bounds of bounds.h.  Calls beyond the bounds
** (longer texts, more masks, larger k) take the in-process path.  A slot
** holds a request's texts (its token ids, and then its results) only while
** the request is in flight: they are zeroed before the slot is FREE again,
** and the file is removed by the last process that leaves it (LEAVING).
**
** Every page of the file is reserved when the file is made (fallocate; on
** a file system that cannot, zeros written), and again, as a check, by
** every process that opens an existing one (fallocate KEEP_SIZE: a no-op
** where the pages exist; where the file system cannot reserve, the file
** must have a block for every byte).  A tmpfs page is otherwise allocated
** when first touched, and a full /dev/shm (Docker's default is 64 MB)
** answers that touch with SIGBUS: the host process would die.  When the
** reservation fails the file is refused like any other (one line on
** stderr, the process batches alone) and a new file is left empty, so the
** next process tries again.  What stays open: a process of the user that
** truncates the file (ftruncate, a shell's >, cp over it) while others
** have it mapped makes their next touch of a page beyond the new end a
** SIGBUS; a mapping cannot be protected from that short of a SIGBUS
** handler, which a library must not install (docs/security.md).
**
** Beyond the end of the file, bytes that are only ever record-locked (OFD
** locks, fcntl F_OFD_SETLK: they belong to the open file description, and
** the kernel drops them when the process dies, SIGKILL included):
**
**   INIT_BYTE     held while a process creates or checks the header and
**                 attaches, and while one leaves (LEAVING)
**   LEADER_BYTE   held by the process that runs the encoder: the leader
**   ATTACH_BYTE   read-locked (a shared lock) by every process that has the
**                 file open: a write lock nobody can take means "in use"
**   SLOT_BYTE(i)  held by the owner of slot i for as long as the slot is not
**                 FREE: a slot that is not FREE and whose byte nobody holds
**                 belongs to a dead process
**
** A SLOT'S LIFE (every change of state is one compare-and-swap)
**
**     FREE --owner--> FILLING --owner--> POSTED --leader--> TAKEN
**      ^                 ^                  |                 |
**      |                 +-owner: timeout,--+          leader: WRITING
**      |                   stall                              |
**      |                                               leader: DONE
**      +------------------------owner: answer read------------+
**
**   Every way back to FREE zeroes the slot's token ids and results first
**   (scrub): the owner's after it has read the answer or taken its request
**   back, and whoever reclaims a dead process's slot.
**
**   1. A call that misses the cache claims a FREE slot: it takes the slot's
**      lock byte first, then FREE -> FILLING; writes its token ids, n,
**      n_masks, k, rc = RC_PENDING and a nonce new for the request; then
**      POSTED with the request's ticket (from the nonce) in the state word
**      (a release store: the ids are visible to whoever sees POSTED).
**   2. It then tries to become the leader: the process-local flag (record
**      locks belong to the file description, so two threads of one process
**      would both "get" the byte) and then LEADER_BYTE, together with an
**      encoder slot of its own process's guard that is free right now
**      (guard.c, so the overload guard and the machine-wide guard still
**      apply).  The lead is never held while waiting for that slot: when
**      none is free it drops the lead, waits for a slot (at most RECHECK_NS)
**      without it, and tries again, so that a process whose slots are busy
**      with its own work never stalls the other processes.  A wait for a
**      slot that came to nothing goes straight back into the guard's queue
**      (first come, first served) rather than to sleep on the state word:
**      asleep there it would let a fill_rows of its process, one run right
**      after another, take the slot back each time.  The leader takes every
**      POSTED slot (POSTED -> TAKEN; its own first, then in slot order from
**      a rotating start, within BFX_BATCH_MAX_SEQS sequences and
**      BFX_BATCH_MAX_TOKENS tokens, as batcher.c), reads each slot's n,
**      n_masks, k and nonce ONCE into locals, checks those and uses only
**      them (the ids are copied into its own memory with that n: the file
**      may change under it, see TRUST), runs them as ONE bf_fill batch with
**      the largest k asked for (bfx_encode_on).  For each slot it then
**      moves TAKEN -> WRITING (a CAS on the state word with the ticket: a
**      slot that is no longer the request it took gets nothing written),
**      writes the k candidates, rc and the echo (a digest of the nonce, n,
**      n_masks, k and the ids it ran), marks it DONE and wakes its owner
**      (FUTEX_WAKE on the state word; not FUTEX_PRIVATE_FLAG: the word is
**      shared between processes) once it has taken its next batch, so that
**      the requests posted during a run make the next one (WAKES, at
**      defer_wake).  Once its own request is done it hands
**      the lead to its process's lingering thread (LINGER below), which
**      runs the next batches while requests keep coming, or gives the lead
**      up and wakes the owners of what is still POSTED, one of which leads
**      next: its caller does not wait for other people's batches.  A
**      poster that finds the lead held bumps the header's posts word and
**      wakes it (the lingering thread sleeps there).
**   3. Otherwise it sleeps on its slot's state word (FUTEX_WAIT, always with
**      a timeout of RECHECK_NS: a lost wake-up or a dead leader costs at most
**      that long) and looks again: DONE with its ticket -> it takes the
**      answer only when rc is 0 and the echo is the digest of its own nonce
**      and request (computed from its own memory), and the ids are within
**      the vocabulary; anything else is computed again in its own process;
**      still POSTED, TAKEN or WRITING and no leader -> it tries to lead; a
**      state word without its ticket -> someone wrote over it: computed in
**      its own process.  A slot still POSTED at the busy timeout goes back
**      POSTED -> FILLING -> FREE and the call fails with "bertfill: busy:
**      waited N ms in the machine-wide queue of this model: ..." (how many
**      other requests wait, how many are in the batch of which process, or
**      that none runs and who led last; this process's own encoder runs
**      when it has some), or the guard's message ("N encoder runs in
**      progress") when what it waited for was an encoder slot busy with its
**      own process's runs while no other process led.
**
** CRASHES
**
**   - A leader killed in the middle of a batch: its LEADER_BYTE lock dies
**     with it.  Its TAKEN (or WRITING) slots stay so; their owners wake
**     within RECHECK_NS, find no leader, and one of them becomes leader.  A
**     leader that has just taken the lead has no batch of its own yet, so
**     every TAKEN or WRITING slot it sees then is an orphan of a dead
**     leader: it takes it into its batch like a POSTED one (counted as
**     shared_rerun) and computes it again from its ids.  (A leader gives up
**     the lead only after marking its whole batch DONE.)
**   - A requester killed while waiting: its slot byte lock dies with it.
**     Whoever looks for a free slot and finds a POSTED, FILLING, DONE or
**     unknown state whose byte it can lock takes the slot over (one CAS from
**     the state it saw; counted as shared_reclaimed) and scrubs it; so does
**     every process that opens the file, for every such slot (sweep_dead),
**     so that the texts of the dead go at once.  A TAKEN or WRITING slot is
**     never taken over (a live leader may write it): it becomes DONE first;
**     except by a new leader before its first batch, for which it is an
**     orphan: when its owner is dead too (its byte can be locked), nobody
**     waits for it, and it is scrubbed and FREE instead of run again.
**   - A corrupt slot (n, n_masks, k out of the bounds, ids the engine
**     refuses): the leader marks it DONE with an error code; its owner runs
**     the call in its own process and gets its own error message.
**
** STALLS (a leader stopped: SIGSTOP, a debugger, Ctrl-Z; or descheduled)
**
**   A stopped leader keeps LEADER_BYTE (its locks live on), so nobody can
**   take the lead.  The leader bumps the header's progress counter when it
**   takes the lead, takes a batch and finishes one, and announces with each
**   batch the time it expects to run it (expect_ns: its last batch's time
**   per token times the tokens, plus the test hook's hold; before its first
**   batch an eighth of its busy timeout).  A requester whose lead attempt
**   found the lead held by another process, and that has seen no progress
**   for STALL_FACTOR times the announced time (at least STALL_MIN_NS, or
**   half its busy timeout when that is less; at most ABANDON_FACTOR busy
**   timeouts), counts the lead as stalled: a POSTED or TAKEN request is
**   taken back (-> FILLING -> FREE, scrubbed; the leader's CAS to WRITING
**   then fails and it writes nothing), a WRITING one is abandoned (its
**   byte dropped; the slot stays as it is until the leader, woken, marks
**   it DONE, and is reclaimed then), and the call runs in its own process.
**   Its next calls go there at once for as long as the lead is still held
**   elsewhere and progress has not moved (one F_OFD_GETLK), then the queue
**   is used again.  So a stopped leader costs every other process one wait
**   of about STALL_MIN_NS (tens of ms beyond) per stall, no error.  The
**   rule for a long batch: a lead is judged by the time it announced, so a
**   batch that takes what its leader expected (a slow CPU, 32 texts of 128
**   tokens in fp32) is waited for and not duplicated; a POSTED request that
**   such a batch keeps from running fails with the busy error at the busy
**   timeout as before.  Only a batch over STALL_FACTOR times its estimate
**   (the first batch of a leader: beyond half the busy timeout; a leader
**   descheduled meanwhile) makes its waiters compute in their processes:
**   the same answers, at the price of running beside it.  A TAKEN slot is
**   never waited for beyond ABANDON_FACTOR busy timeouts (a leader that
**   shows progress but never finishes it).  The stopped leader's writes
**   when it wakes go only into slots still TAKEN by its request (the CAS to
**   WRITING, ticket included); a slot that was taken back, freed and used
**   again has another ticket and gets nothing.
**
** TRUST.  The processes of one user can write the file (and each other's
** memory, as ptrace allows), so the file is data, never a pointer or a
** length used unchecked: every field is read once into a local before it
** is checked and then only the local is used, so no write to the file can
** make a leader read or write beyond a slot, and a requester accepts only
** an answer whose echo matches its own request (a state flipped to DONE,
** an n changed under the leader, a stale leader's write: computed again in
** its own process).  What a writer that imitates the protocol (copies the
** nonce, computes the digest, writes plausible candidates) can do: give
** wrong answers to that user's processes, which no check of data in
** memory they share can prevent.
**
** WHAT STAYS THE SAME
**
**   A request gets what it gets alone, as in batcher.c: same candidates in
**   the same order, probabilities equal to float rounding (a merged run
**   takes other kernels), and errors never travel between processes.  A
**   process alone pays a few system calls per call: two lock bytes taken and
**   dropped (about 10 us in all); the encoder run is the same.
**
** LEAVING: nothing left in the directory.  A process attaches to the file
** it opens: INIT_BYTE held, it read-locks ATTACH_BYTE after its checks.  At
** exit (atexit: exit(), a return from main, an interpreter's normal end)
** it leaves each file: ATTACH_BYTE dropped, then INIT_BYTE taken (waited
** for at most INIT_WAIT_NS), and when no other description holds
** ATTACH_BYTE (F_OFD_GETLK) and the file is still the one at the path
** (same device and inode), it is removed.  The race with an opener that
** has opened the file by name but not yet attached: the opener takes
** INIT_BYTE before it attaches, and once it holds it checks that its
** descriptor is still the file at the path (a link count of 0, or another
** inode there: the last leaver removed it meanwhile) and opens again (at
** most OPEN_TRIES times), so a file is never removed under a process that
** attached to it, and an opener never keeps a removed one.  Two processes
** leaving at once: each drops its ATTACH_BYTE before it waits for
** INIT_BYTE, so the second to hold it sees the first gone.  A herd (many
** processes starting or exiting together) holds INIT_BYTE one at a time
** for a few system calls each, at the start as before and now at the exit
** too; the file the last leaver removed is made again by the next process
** (made, reserved and removed: about 0.15 ms on tmpfs).  A new file that
** cannot be given its memory is removed at once (nobody uses a file
** without its size).  The mapping is never unmapped at exit (other threads
** may still be in a call).
**   What stays: a file whose processes all died without exit (a signal:
** SIGKILL, an unhandled SIGTERM, a crash; or _exit) stays, with the
** requests that were in flight then (finished ones were scrubbed), until
** the next process of the user and model opens it (sweep_dead and its
** first batch scrub the slots of the dead) and leaves it; a slot abandoned
** to a WRITING leader keeps that leader's results until it is reclaimed.
** Builds before this one take no ATTACH_BYTE: a file one of them uses can
** be removed under it by a newer process that leaves last; it goes on in
** the removed file with the old processes that share it (the same
** answers, without the newer ones' company).  The machine-wide guard's
** slot file is not removed (machine_guard.c says why).
**
** TIMELINE.  Every request carries its moments in its slot (bf_now_ns,
** CLOCK_MONOTONIC: one clock for the machine): posted_ns (its owner, just
** before POSTED); taken_ns, run0_ns and run1_ns (its batch's encoder run),
** done_ns (just before DONE), handover_ns (how long it waited with no
** leader: from its posting, or the header's released_ns when the last
** leader gave the lead up later, to this lead), leader_pid, seqs and lead
** (how the leader got the lead: BFX_LEAD_POST when the lead was free as it
** posted, WOKEN after a wake-up, TIMER after RECHECK_NS asleep, SLOT after
** a wait for an encoder slot of its own), all written by the leader while
** the slot is WRITING.  The owner reads them with the answer, adds the
** moment it runs again and hands them to bfx_timeline (encode.c), which
** checks their order (they come from another process: data, not trusted)
** and adds them to the caller's times (bertfill_trace) and the stages
** batch_wait, batch_start, batch_write, batch_wake, lead_handover.
**
** OPENING: a herd.  Processes that start together (a prefork server's
** workers) open the file at once, on two cores maybe fifty of them, each
** loading its model meanwhile.  A file that is ready (the right size, its
** header written) is checked and attached under a shared lock on
** INIT_BYTE, so its openers do not wait for each other; only a process
** that makes, replaces or repairs the file (new, another size, a blank
** header) takes the write lock, and so does one that leaves.  A waiter
** polls the lock with pauses growing from 0.5 to 8 ms (waiters polling
** every millisecond took the CPU from the holder they waited for).  The
** first call waits at most INIT_WAIT_NS (1 s); a holder stopped or
** descheduled longer makes that call take the in-process path, but the
** file is not given up: the first call after retry_ns tries again, with a
** wait of at most RETRY_WAIT_NS (10 ms), every RETRY_MIN_NS doubling to
** RETRY_MAX_NS (10 ms to 1 s) while it stays refused.  A busy INIT_BYTE
** is said on stderr only when it lasts BUSY_SAY_NS (5 s).  The other
** passing reasons (no descriptor or memory left, a file system full, a
** file of another size still in use, the file removed as fast as it is
** opened) are said once and tried again the same way; the lasting ones
** (a link, not a plain file, another user's, a mode other than 0600, a
** header this build does not know) are said once and tried again every
** LASTING_RETRY_NS (30 s), so that a file someone removed or repaired is
** used without a restart.  bert_debug()'s shared_batch.usable says
** whether the file is open now (and tries it when due).
**
** FORK.  A child shares its parent's open file descriptions, and so its
** record locks: in the child (pthread_atfork) every shared file is closed
** and unmapped and forgotten, and opened again, with a description of its
** own (and its own ATTACH_BYTE), on its first call; the child leaves only
** its own files at its exit.
**
** Settings (read once from the environment):
**   BERTFILL_SHARED_BATCH=0      off: every process batches alone (batcher.c)
**   BERTFILL_SHARED_BATCH_DIR    where the shared files are (tests)
**   BERTFILL_SHARED_LINGER_MS    how long a leader keeps the lead without a
**                                request (LINGER; default LINGER_MS, 0 off)
** With batching off (bert_batching(0), BERTFILL_BATCHING=0) the shared path
** is not used either.
** Test hooks, not for production: BERTFILL_SHARED_GATHER=n makes a leader
** wait (at most 250 ms) until n slots are POSTED before it takes them;
** BERTFILL_SHARED_HOLD_MS=n makes it sleep n ms after taking a batch and
** before running it (so a test can kill it in the middle of a batch).
**
** Stats (bertfill_stats, per process): shared_served (requests of other
** processes this process's encoder ran), shared_batches (its encoder runs
** that held requests of other processes), shared_remote (its own calls
** answered by another process), shared_leader_changes (times it took the
** lead from another process), shared_fallback (calls that took the
** in-process path: beyond the bounds, queue full, an error to reproduce,
** an answer refused, a stalled lead),
** shared_rerun (requests of a dead leader run again), shared_reclaimed
** (slots of dead processes, or left behind by an abandon, taken over and
** scrubbed; a dead leader's slot whose owner is dead too among them),
** shared_lead_post / _woken / _timer / _slot (leads taken, by how; see
** TIMELINE).  bert_debug() shows the queue:
** "shared_batch": {"on", "file", "slots", "posted", "taken", "leader_pid",
** "leader_changes", "batches"}.
*/
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
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

#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3
#include "shared_batch.h"
#include "bounds.h"
#include "encode.h"
#include "guard.h"
#include "stats.h"
#include "util.h"

#define MAGIC "BFSHBAT"
#define LAYOUT_VERSION 3
#define HEADER_SIZE 4096
#define NSLOTS BFX_SHARED_SLOTS
#define RECHECK_NS 10000000ull      /* a sleeping requester looks again this often */
#define GATHER_WAIT_NS 250000000ull /* test hook: the longest a leader waits for company */
#define STALL_MIN_NS 200000000ull   /* a lead quiet this long at least is stalled (see STALLS) */
#define STALL_FACTOR 4              /* ... or this many times the batch time it announced */
#define ABANDON_FACTOR 3            /* the longest wait for a TAKEN slot: this many busy timeouts */
#define INIT_WAIT_NS 1000000000ull  /* the longest a first open waits for another's INIT_BYTE */
#define RETRY_WAIT_NS 10000000ull   /* ... and a later try of a refused file (OPENING) */
#define RETRY_MIN_NS 10000000ull    /* a file refused for a passing reason: tried again after */
#define RETRY_MAX_NS 1000000000ull  /* this, doubled at each refusal in a row up to this */
#define LASTING_RETRY_NS 30000000000ull /* a file refused for a lasting reason: tried again */
#define BUSY_SAY_NS 5000000000ull       /* a file busy this long in a row is said on stderr */
#define OPEN_TRIES 8                    /* opens of a file removed between its open and its lock */
#define LINGER_MS 1000 /* default of BERTFILL_SHARED_LINGER_MS: how long a leader keeps the lead */

/* A slot's state word: the state in its low bits, the ticket of the request
** (new for every request, from its nonce) above them. */
enum { S_FREE = 0, S_FILLING = 1, S_POSTED = 2, S_TAKEN = 3, S_DONE = 4, S_WRITING = 5 };
#define STATE_BITS 0xFu
#define STATE_OF(w) ((w)&STATE_BITS)
#define TICKET_OF(w) ((w) & ~STATE_BITS)
#define RC_PENDING INT32_MIN /* rc of a request no leader has finished */

typedef struct sb_header {
  char magic[8];
  uint32_t version, header_size, slot_size, nslots;
  uint32_t max_tokens, max_masks, max_k, cand_size;
  char fingerprint[24];
  _Atomic uint32_t ready; /* 1 once the header is written */
  _Atomic uint32_t leader_pid;
  _Atomic uint64_t leader_key; /* the process key of the last leader */
  _Atomic uint64_t leader_changes;
  _Atomic uint64_t batches;     /* encoder runs that held requests of more than one process */
  _Atomic uint64_t progress;    /* bumped by the leader: lead taken, batch taken, batch done */
  _Atomic uint64_t expect_ns;   /* the leader's estimate of its current batch's run time */
  _Atomic uint64_t released_ns; /* when the last leader gave the lead up (bf_now_ns) */
  /* bumped by a poster that found the lead held: the futex word a lingering
  ** leader sleeps on (LINGER).  In bytes that builds before it left zero, so
  ** the layout version stays: their posters do not wake a lingering leader,
  ** whose requests then wait for the end of its linger (at most
  ** BERTFILL_SHARED_LINGER_MS), when it gives the lead up. */
  _Atomic uint32_t posts;
} sb_header;
_Static_assert(sizeof(sb_header) <= HEADER_SIZE, "the header page");

/* Every field is read once into a local before it is checked (another
** process of the user can write the file at any time): hence _Atomic. */
typedef struct sb_slot {
  _Alignas(64) _Atomic uint32_t state; /* S_* | ticket: the futex word of its owner */
  _Atomic uint32_t n, n_masks, k;
  _Atomic int32_t rc;         /* RC_PENDING; then the leader's: 0 valid, else run it yourself */
  _Atomic uint32_t owner_pid; /* for people reading the file */
  _Atomic uint64_t owner;     /* key of the owning process */
  _Atomic uint64_t taker;     /* key of the leader that took it */
  _Atomic uint64_t nonce;     /* the owner's, new for every request */
  _Atomic uint64_t echo;      /* the leader's: digest of the nonce and the request it ran */
  _Atomic uint64_t encode_ns, topk_ns;
  /* the timeline (TIMELINE): posted by the owner; the rest by the leader */
  _Atomic uint64_t posted_ns, taken_ns, run0_ns, run1_ns, done_ns, handover_ns;
  _Atomic uint32_t leader_pid, lead, seqs;
  int32_t ids[BFX_SHARED_MAX_TOKENS];
  bf_cand out[BFX_SHARED_MAX_MASKS * BFX_SHARED_MAX_K];
} sb_slot;

_Static_assert(offsetof(sb_slot, ids) == 132, "tests/python/t_shared_batch.py: SLOT_DATA");
#define FILE_SIZE ((size_t)HEADER_SIZE + (size_t)NSLOTS * sizeof(sb_slot))
#define INIT_BYTE ((off_t)FILE_SIZE)
#define LEADER_BYTE ((off_t)FILE_SIZE + 1)
#define ATTACH_BYTE ((off_t)FILE_SIZE + 2) /* read-locked by every process that has the file */
#define SLOT_BYTE(i) ((off_t)FILE_SIZE + 64 + (off_t)(i))

/* One shared file, as this process has it open. */
typedef struct sbf {
  struct sbf *next;
  char fp[24];
  char path[PATH_MAX];
  int fd;                 /* -1: not open (refused: tried again at retry_ns, see OPENING) */
  uint64_t retry_ns;      /* when a refused file is tried again */
  uint64_t busy_since_ns; /* the first of the refusals in a row for a busy INIT_BYTE (0: none) */
  int refusals;           /* refusals in a row */
  int said;               /* a refusal was said on stderr (once per file and process) */
  sb_header *h;
  sb_slot *slots;
  pthread_mutex_t mu;         /* mine[], leading, hint */
  unsigned char mine[NSLOTS]; /* slots whose byte this process holds */
  int leading;                /* a thread of this process holds LEADER_BYTE */
  unsigned hint;
  uint64_t ns_per_token;       /* of this process's last batch as leader (0: none yet) */
  _Atomic uint64_t stalled_at; /* progress+1 of a lead found stalled (0: none) */
  /* LINGER, under mu: the lingering thread of this file, started on first use */
  pthread_cond_t lt_cv; /* signalled when lt_owns or lt_stop is set */
  int lt_started;       /* the thread runs */
  int lt_owns;          /* it holds this process's lead (leading is 1 then) */
  int lt_busy;          /* it runs a batch now: the lead cannot be taken from it */
  int lt_stop;          /* the process exits: give the lead up, lead no more */
  uint64_t lt_last_ns;  /* its lead was handed to it, or its last batch ended */
  bf_model *lt_model;   /* retained: the model it runs batches on */
  /* WAKES, under mu: slots this process's leader marked DONE whose owners are
  ** not woken yet (the next batch is taken first) */
  unsigned short unwoken[NSLOTS];
  int n_unwoken;
} sbf;

static struct {
  pthread_once_t once;
  pthread_mutex_t mu; /* files */
  sbf *files;
  int on, gather, hold_ms;
  uint64_t linger_ns;       /* BERTFILL_SHARED_LINGER_MS (LINGER): 0 off */
  uint64_t key;             /* this process's key (a new one in a forked child) */
  char dir[PATH_MAX - 128]; /* room for the file name in sbf.path */
} sb = {.once = PTHREAD_ONCE_INIT, .mu = PTHREAD_MUTEX_INITIALIZER};

static uint64_t mix64(uint64_t x) { /* fmix64 */
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

static uint64_t new_key(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t x = mix64(((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_nsec ^
                     ((uint64_t)ts.tv_sec << 20) ^ bf_now_ns() ^ (uint64_t)(uintptr_t)&ts);
  return x ? x : 1;
}

/* A request's nonce: new for every request of every process. */
static uint64_t new_nonce(void) {
  static _Atomic uint64_t count;
  return mix64(sb.key ^ (atomic_fetch_add(&count, 1) + 1) * 0x9e3779b97f4a7c15ull);
}

/* What a leader echoes when it has run a request, and what its owner
** expects: the nonce and everything the answer depends on. */
static uint64_t request_digest(uint64_t nonce, const int32_t *ids, int n, int n_masks, int k) {
  uint64_t h = mix64(nonce ^ ((uint64_t)(uint32_t)n << 40 ^ (uint64_t)(uint32_t)n_masks << 20 ^
                              (uint64_t)(uint32_t)k));
  for (int i = 0; i < n; i++) h = mix64(h ^ (uint32_t)ids[i]);
  return h ? h : 1;
}

/* In a forked child: the parent's file descriptions (and their record
** locks) are not the child's.  Forget every file; reopen on first use.
** The parent's lingering thread is not the child's either: the model
** reference it held (LINGER) is let go here, or the child would keep the
** model mapped after its last connection closed. */
static void forget_in_child(void) {
  for (sbf *f = sb.files, *next; f; f = next) {
    next = f->next;
    if (f->lt_model) bf_model_release(f->lt_model);
    if (f->h) munmap(f->h, FILE_SIZE);
    if (f->fd >= 0) close(f->fd);
    free(f);
  }
  sb.files = NULL;
  pthread_mutex_init(&sb.mu, NULL);
  sb.key = new_key();
}

static void leave_all(void);

static void sb_init(void) {
  sb.on = bf_env_flag("BERTFILL_SHARED_BATCH", 1);
  sb.gather = (int)bf_env_int("BERTFILL_SHARED_GATHER", 0, BFX_BATCH_MAX_SEQS, 0);
  sb.hold_ms = (int)bf_env_int("BERTFILL_SHARED_HOLD_MS", 0, 60000, 0);
  sb.linger_ns = (uint64_t)bf_env_int("BERTFILL_SHARED_LINGER_MS", 0, 10000, LINGER_MS) *
                 1000000ull;
  sb.key = new_key();
  const char *d = getenv("BERTFILL_SHARED_BATCH_DIR");
  if (!d || !*d) d = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  snprintf(sb.dir, sizeof sb.dir, "%s", d);
  pthread_atfork(NULL, NULL, forget_in_child);
  if (sb.on) atexit(leave_all); /* a forked child's list is its own */
}

int bfx_shared_on(void) {
  pthread_once(&sb.once, sb_init);
  return sb.on;
}

/* ---- record locks and futexes ---- */

/* Take (F_WRLCK, or F_RDLCK shared with others; 1 when taken) or drop
** (F_UNLCK) the OFD lock on one byte. */
static int lock_byte(int fd, off_t at, short type) {
  struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = at, .l_len = 1};
  return fcntl(fd, F_OFD_SETLK, &fl) == 0;
}

/* 1 when another open file description (another process, or a forked
** child's own) holds a lock on the byte at that conflicts with a write
** lock: a lock of this description never does. */
static int held_elsewhere(int fd, off_t at) {
  struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = at, .l_len = 1};
  return fcntl(fd, F_OFD_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
}

/* Take INIT_BYTE (type F_WRLCK: alone; F_RDLCK: shared with the other
** openers of a ready file), waiting for a conflicting holder until
** until_ns: 0, or EAGAIN when it was still held then, or the errno.  The
** polls back off from 0.5 ms to 8 ms: a herd of waiters that poll every
** millisecond takes the CPU from the very process they wait for. */
static int lock_init(int fd, uint64_t until_ns, short type) {
  long pause_ns = 500000;
  while (!lock_byte(fd, INIT_BYTE, type)) {
    if (errno != EAGAIN && errno != EACCES) return errno;
    uint64_t now = bf_now_ns();
    if (now >= until_ns) return EAGAIN;
    if ((uint64_t)pause_ns > until_ns - now) pause_ns = (long)(until_ns - now);
    struct timespec ts = {0, pause_ns};
    nanosleep(&ts, NULL);
    if (pause_ns < 8000000) pause_ns *= 2;
  }
  return 0;
}

static void futex_wake(_Atomic uint32_t *w) {
#ifdef __linux__
  syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
#else
  (void)w;
#endif
}

/* Sleep while *w == seen, at most ns: 1 when woken (or *w had changed), 0
** when the time ran out. */
static int futex_wait(_Atomic uint32_t *w, uint32_t seen, uint64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
#ifdef __linux__
  return syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT, seen, &ts, NULL, 0) == 0 ||
         errno != ETIMEDOUT;
#else
  (void)w;
  (void)seen;
  if (ts.tv_sec || ts.tv_nsec > 1000000) ts = (struct timespec){0, 1000000};
  nanosleep(&ts, NULL);
  return 0;
#endif
}

/* ---- the file ---- */

/* 1 when the file st (fstat of an open descriptor) is the one at path: not
** removed meanwhile, nor replaced by another. */
static int at_path(const char *path, const struct stat *st) {
  struct stat now;
  return st->st_nlink >= 1 && lstat(path, &now) == 0 && now.st_dev == st->st_dev &&
         now.st_ino == st->st_ino;
}

/* A slot's texts gone: its token ids and its results zeroed, by the process
** that holds its byte, the slot FILLING or DONE (no leader writes it; one that
** took it before and still copies its ids gets garbage whose answer the
** CAS to WRITING keeps out).  A FREE slot holds nothing of its last request
** but its sizes, nonce, echo and pids. */
static void scrub(sb_slot *s) {
  memset(s->ids, 0, sizeof s->ids);
  memset(s->out, 0, sizeof s->out);
}

/* Why a file is refused: what passes by itself (tried again soon), what
** lasts until someone changes the file (tried again rarely), or its
** INIT_BYTE busy past the wait (tried again soon; said only when it lasts). */
enum { R_PASSING, R_LASTING, R_BUSY };

static void refuse(sbf *f, const char *why, int err, int kind) {
  uint64_t now = bf_now_ns();
  if (kind == R_BUSY && !f->busy_since_ns) f->busy_since_ns = now;
  if (kind != R_BUSY) f->busy_since_ns = 0;
  uint64_t wait = RETRY_MIN_NS << (f->refusals < 7 ? f->refusals : 7);
  if (wait > RETRY_MAX_NS) wait = RETRY_MAX_NS;
  if (kind == R_LASTING) wait = LASTING_RETRY_NS;
  f->refusals++;
  f->retry_ns = now + wait;
  if (!f->said && (kind != R_BUSY || now - f->busy_since_ns >= BUSY_SAY_NS)) {
    f->said = 1;
    fprintf(stderr, "bertfill: shared batching off for this model: %s %s%s%s (tried again %s)\n",
            f->path, why, err ? ": " : "", err ? strerror(err) : "",
            kind == R_LASTING ? "every 30 s" : "later");
  }
  if (f->h) munmap(f->h, FILE_SIZE);
  f->h = NULL;
  f->slots = NULL;
  if (f->fd >= 0) close(f->fd);
  f->fd = -1;
}

static void write_header(sb_header *h, const char *fp) {
  memcpy(h->magic, MAGIC, sizeof MAGIC);
  h->version = LAYOUT_VERSION;
  h->header_size = HEADER_SIZE;
  h->slot_size = (uint32_t)sizeof(sb_slot);
  h->nslots = NSLOTS;
  h->max_tokens = BFX_SHARED_MAX_TOKENS;
  h->max_masks = BFX_SHARED_MAX_MASKS;
  h->max_k = BFX_SHARED_MAX_K;
  h->cand_size = (uint32_t)sizeof(bf_cand);
  snprintf(h->fingerprint, sizeof h->fingerprint, "%s", fp);
  atomic_store(&h->ready, 1);
}

static int header_ok(const sb_header *h, const char *fp) {
  return memcmp(h->magic, MAGIC, sizeof MAGIC) == 0 && h->version == LAYOUT_VERSION &&
         h->header_size == HEADER_SIZE && h->slot_size == sizeof(sb_slot) && h->nslots == NSLOTS &&
         h->max_tokens == BFX_SHARED_MAX_TOKENS && h->max_masks == BFX_SHARED_MAX_MASKS &&
         h->max_k == BFX_SHARED_MAX_K && h->cand_size == sizeof(bf_cand) &&
         memchr(h->fingerprint, 0, sizeof h->fingerprint) && strcmp(h->fingerprint, fp) == 0 &&
         atomic_load(&h->ready) == 1;
}

/* 1 when the file (fstat st, the file at the path) must be made, replaced
** or repaired, which only the holder of the write lock on INIT_BYTE may
** do: new (empty), of another size, or of the right size with a blank
** header (its maker died before it wrote it: a maker holds the write lock
** until its header is written). */
static int needs_making(int fd, const struct stat *st) {
  if (!S_ISREG(st->st_mode) || st->st_nlink != 1 || st->st_uid != geteuid()) return 0;
  if ((size_t)st->st_size != FILE_SIZE) return 1;
  unsigned char hd[sizeof(sb_header)];
  if (pread(fd, hd, sizeof hd, 0) != (ssize_t)sizeof hd) return 0;
  uint32_t ready;
  memcpy(&ready, hd + offsetof(sb_header, ready), sizeof ready);
  return ready == 0 && hd[0] == 0;
}

/* An errno of open() that passes by itself (no descriptors or memory left
** for now), rather than one about the file (a link, no permission). */
static int passing_errno(int err) {
  return err == EMFILE || err == ENFILE || err == ENOMEM || err == ENOSPC || err == EINTR ||
         err == EAGAIN || err == EDQUOT;
}

/* Open, check (and create when new) the shared file of f->fp, and attach
** to it (ATTACH_BYTE read-locked, see LEAVING), waiting at most wait_ns for
** another process's INIT_BYTE (see OPENING).  A ready file of the right
** size is checked under a shared lock on INIT_BYTE, so that the processes
** of a herd do not open it one at a time; a file to make, replace or
** repair under the write lock.  Refused: f->fd is -1 and f->retry_ns says
** when to try again. */
static void open_file(sbf *f, uint64_t wait_ns) {
  snprintf(f->path, sizeof f->path, "%s/bertfill-%u-batch-%s", sb.dir, (unsigned)geteuid(), f->fp);
  uint64_t until = bf_now_ns() + wait_ns;
  struct stat st;
  short mode = F_RDLCK;
  for (int tries = 1;; tries++) {
    f->fd = open(f->path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0600);
    if (f->fd < 0) {
      int err = errno;
      refuse(f, "cannot be opened", err, passing_errno(err) ? R_PASSING : R_LASTING);
      return;
    }
    int err = lock_init(f->fd, until, mode);
    if (err) {
      refuse(f, err == EAGAIN ? "is locked by another process" : "cannot be locked",
             err == EAGAIN ? 0 : err, err == EAGAIN ? R_BUSY : R_PASSING);
      return;
    }
    if (fstat(f->fd, &st) != 0) {
      refuse(f, "cannot be read", errno, R_PASSING);
      return;
    }
    /* the file at the path, or something the checks below refuse; else
    ** the last process to leave it removed it between the open and the
    ** lock: the file at the path now (a new one) */
    int here = at_path(f->path, &st);
    if (mode == F_RDLCK && here && needs_making(f->fd, &st)) { /* again, alone */
      close(f->fd); /* the lock goes with the description */
      f->fd = -1;
      mode = F_WRLCK;
      tries--;
      continue;
    }
    /* a file of another size (another version of bertfill, or one cut
    ** short) that no process of this build is attached to: removed, and
    ** made again, rather than refused for good (an older build's processes
    ** may still use it: they keep the file they have open) */
    if (here && S_ISREG(st.st_mode) && st.st_nlink == 1 && st.st_uid == geteuid() &&
        (st.st_mode & 07777) == 0600 && st.st_size != 0 && (size_t)st.st_size != FILE_SIZE &&
        !held_elsewhere(f->fd, ATTACH_BYTE) && tries < OPEN_TRIES) {
      unlink(f->path);
      close(f->fd);
      f->fd = -1;
      continue;
    }
    if (!S_ISREG(st.st_mode) || st.st_nlink > 1 || here) break;
    if (tries == OPEN_TRIES) {
      refuse(f, "is removed by other processes as fast as it is opened", 0, R_PASSING);
      return;
    }
    close(f->fd);
    f->fd = -1;
  }
  const char *why = NULL;
  int err = 0, fresh = 0, kind = R_LASTING;
  if (!S_ISREG(st.st_mode) || st.st_nlink != 1) {
    why = "is not a plain file";
  } else if (st.st_uid != geteuid()) {
    why = "belongs to another user";
  } else if (st.st_size == 0) { /* new: make it (the write lock held) */
    fresh = 1;
    kind = R_PASSING;
    if (fchmod(f->fd, 0600) != 0) {
      why = "cannot be made";
      err = errno;
    } else if ((err = bf_reserve_file(f->fd, FILE_SIZE, 1)) != 0) {
      why = "cannot be given its memory (is its file system full?)";
    }
  } else if ((st.st_mode & 07777) != 0600) {
    why = "is not of mode 0600";
  } else if ((size_t)st.st_size != FILE_SIZE) { /* and in use: not replaced */
    why = "has the wrong size (another version of bertfill, or damaged) and is in use";
    kind = R_PASSING; /* until the processes that use it are gone */
  } else if ((err = bf_reserve_file(f->fd, FILE_SIZE, 0)) != 0) {
    why = "cannot be given its memory (is its file system full?)";
    kind = R_PASSING;
  }
  if (!why) {
    void *p = mmap(NULL, FILE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, f->fd, 0);
    if (p == MAP_FAILED) {
      why = "cannot be mapped";
      err = errno;
      kind = R_PASSING;
    } else {
      f->h = p;
      f->slots = (sb_slot *)((char *)p + HEADER_SIZE);
      /* new, or its maker died before writing the header (only under the
      ** write lock: needs_making sent a shared holder back for it) */
      int blank = st.st_size == 0 || (atomic_load(&f->h->ready) == 0 && f->h->magic[0] == 0);
      if (blank && mode == F_WRLCK) write_header(f->h, f->fp);
      else if (!header_ok(f->h, f->fp)) why = "has a header this build does not know (damaged?)";
    }
  }
  if (!why && !lock_byte(f->fd, ATTACH_BYTE, F_RDLCK)) {
    why = "cannot be locked";
    err = errno;
    kind = R_PASSING;
  }
  if (why) {
    /* a new file that could not be made is removed (INIT_BYTE held:
    ** nobody uses a file without its size): the next process tries anew */
    if (fresh && at_path(f->path, &st)) unlink(f->path);
    refuse(f, why, err, kind);
    return;
  }
  lock_byte(f->fd, INIT_BYTE, F_UNLCK);
  f->refusals = 0;
  f->busy_since_ns = 0;
}

/* ---- slots ---- */

/* Take slot i (f->mu held) when it is FREE, or a dead owner's (or an
** abandoned one) that no leader has (orphans: or a dead leader's, seen by
** the leader now): 1 when it is now FILLING with its byte held, scrubbed
** when it was not FREE. */
static int take_slot(sbf *f, unsigned i, int orphans) {
  if (f->mine[i]) return 0;
  sb_slot *s = &f->slots[i];
  uint32_t w = atomic_load(&s->state), st = STATE_OF(w);
  if (!orphans && (st == S_TAKEN || st == S_WRITING)) return 0; /* a leader may write it */
  /* a live owner has it */
  if (!lock_byte(f->fd, SLOT_BYTE(i), F_WRLCK)) return 0;
  if (!atomic_compare_exchange_strong(&s->state, &w, S_FILLING)) {
    lock_byte(f->fd, SLOT_BYTE(i), F_UNLCK);
    return 0;
  }
  if (st != S_FREE) { /* its owner died (or abandoned it): its texts go */
    scrub(s);
    bf_stats_add(BF_CT_SHARED_RECLAIMED, 1);
  }
  f->mine[i] = 1;
  return 1;
}

/* Claim a slot (FREE, or a dead owner's that no leader has): its index, in
** state FILLING with its byte held; -1 when every slot is in use. */
static int claim(sbf *f) {
  pthread_mutex_lock(&f->mu);
  unsigned start = f->hint;
  for (unsigned j = 0; j < NSLOTS; j++) {
    unsigned i = (start + j) % NSLOTS;
    if (!take_slot(f, i, 0)) continue;
    f->hint = i + 1;
    pthread_mutex_unlock(&f->mu);
    return (int)i;
  }
  pthread_mutex_unlock(&f->mu);
  return -1;
}

/* Give slot i back: scrubbed, FREE, then its byte (in that order: a slot
** that is not FREE with no lock behind it is a dead process's). */
static void release(sbf *f, int i) {
  scrub(&f->slots[i]);
  atomic_store(&f->slots[i].state, S_FREE);
  pthread_mutex_lock(&f->mu);
  lock_byte(f->fd, SLOT_BYTE(i), F_UNLCK);
  f->mine[i] = 0;
  pthread_mutex_unlock(&f->mu);
}

/* Abandon slot i without freeing it (a leader is writing it, or someone
** wrote over it): the byte is dropped, and the slot is reclaimed (and
** scrubbed) by whoever finds it neither TAKEN nor WRITING later. */
static void abandon(sbf *f, int i) {
  pthread_mutex_lock(&f->mu);
  lock_byte(f->fd, SLOT_BYTE(i), F_UNLCK);
  f->mine[i] = 0;
  pthread_mutex_unlock(&f->mu);
}

/* Let go of slot i, seen as w (the request's, POSTED, TAKEN or WRITING),
** whose leader seems stuck: taken back (scrubbed and FREE; a leader that
** took it finds it no longer TAKEN and writes nothing) unless a leader is
** writing it now, which abandons it.  0 when its state changed meanwhile
** (done, or being written): look again. */
static int let_go(sbf *f, int i, uint32_t w) {
  if (STATE_OF(w) == S_WRITING) {
    abandon(f, i);
    return 1;
  }
  if (!atomic_compare_exchange_strong(&f->slots[i].state, &w, S_FILLING)) return 0;
  release(f, i);
  return 1;
}

/* A newly opened file: the slots its dead processes left (not FREE, no
** lock behind them, no leader on them) taken over and scrubbed now rather
** than when a claim comes to them, so that their texts go at once. */
static void sweep_dead(sbf *f) {
  for (unsigned i = 0; i < NSLOTS; i++) {
    if (STATE_OF(atomic_load(&f->slots[i].state)) == S_FREE) continue;
    pthread_mutex_lock(&f->mu);
    int got = take_slot(f, i, 0);
    pthread_mutex_unlock(&f->mu);
    if (got) release(f, (int)i);
  }
}

/* A dead leader's slot (TAKEN or WRITING, seen by the leader now: nobody
** else may write it) whose owner is dead too: nobody waits for its answer,
** so it is scrubbed and FREE rather than run again.  1 when it was. */
static int reclaim_orphan(sbf *f, unsigned i) {
  pthread_mutex_lock(&f->mu);
  int got = take_slot(f, i, 1);
  pthread_mutex_unlock(&f->mu);
  if (got) release(f, (int)i);
  return got;
}

/* ---- attaching and leaving (LEAVING) ---- */

/* The shared file of fingerprint fp, opened on first use (waiting at most
** INIT_WAIT_NS for another process's INIT_BYTE); NULL when it is refused
** for now.  A refused file is tried again by the first call after its
** retry_ns, with a wait of at most RETRY_WAIT_NS (OPENING). */
static sbf *file_of(const char *fp) {
  pthread_mutex_lock(&sb.mu);
  sbf *f = sb.files;
  while (f && strcmp(f->fp, fp) != 0) f = f->next;
  if (!f && (f = calloc(1, sizeof *f)) != NULL) {
    snprintf(f->fp, sizeof f->fp, "%s", fp);
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->lt_cv, NULL);
    f->fd = -1;
    open_file(f, INIT_WAIT_NS);
    if (f->fd >= 0) sweep_dead(f);
    f->next = sb.files;
    sb.files = f;
  } else if (f && f->fd < 0 && bf_now_ns() >= f->retry_ns) {
    open_file(f, RETRY_WAIT_NS);
    if (f->fd >= 0) sweep_dead(f);
  }
  int usable = f && f->fd >= 0;
  pthread_mutex_unlock(&sb.mu);
  return usable ? f : NULL;
}

/* This process leaves file f (at its exit): its ATTACH_BYTE dropped; then,
** INIT_BYTE held (no opener between its open and its attach), the file
** removed when no other process is attached to it and it is still the one
** at the path.  The mapping stays (other threads may still be in a call). */
static void leave(sbf *f) {
  lock_byte(f->fd, ATTACH_BYTE, F_UNLCK);
  if (lock_init(f->fd, bf_now_ns() + INIT_WAIT_NS, F_WRLCK) != 0) return; /* the next to leave */
  struct stat st;
  if (!held_elsewhere(f->fd, ATTACH_BYTE) && fstat(f->fd, &st) == 0 && at_path(f->path, &st))
    unlink(f->path);
  lock_byte(f->fd, INIT_BYTE, F_UNLCK);
}

/* At exit (atexit): leave every file this process has.  Without the list's
** mutex (another thread stays in file_of) the files are left as they are,
** to the next process that leaves them. */
static void leave_all(void) {
  int locked = 0;
  for (int i = 0; i < 100 && !(locked = pthread_mutex_trylock(&sb.mu) == 0); i++) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  if (!locked) return;
  for (sbf *f = sb.files; f; f = f->next) {
    if (f->fd < 0) continue;
    pthread_mutex_lock(&f->mu); /* a lingering leader gives the lead up (LINGER) */
    f->lt_stop = 1;
    pthread_cond_signal(&f->lt_cv);
    pthread_mutex_unlock(&f->mu);
    atomic_fetch_add(&f->h->posts, 1);
    futex_wake(&f->h->posts);
    leave(f);
  }
  pthread_mutex_unlock(&sb.mu);
}

/* ---- leading ---- */

enum { LEAD_GOT, LEAD_HERE, LEAD_ELSEWHERE };
/* LEAD_GOT: this thread leads now; LEAD_HERE: another thread of this
** process leads; LEAD_ELSEWHERE: another process holds LEADER_BYTE. */
static int try_lead(sbf *f) {
  pthread_mutex_lock(&f->mu);
  int r;
  if (f->leading && f->lt_owns && !f->lt_busy) { /* from the lingering thread (LINGER) */
    f->lt_owns = 0;
    r = LEAD_GOT;
  } else {
    r = f->leading ? LEAD_HERE : lock_byte(f->fd, LEADER_BYTE, F_WRLCK) ? LEAD_GOT : LEAD_ELSEWHERE;
  }
  if (r == LEAD_GOT) f->leading = 1;
  pthread_mutex_unlock(&f->mu);
  if (r == LEAD_GOT) {
    atomic_store(&f->h->leader_pid, (uint32_t)getpid());
    uint64_t prev = atomic_exchange(&f->h->leader_key, sb.key);
    if (prev != sb.key) {
      atomic_fetch_add(&f->h->leader_changes, 1);
      bf_stats_add(BF_CT_SHARED_LEADER_CHANGES, 1);
    }
    atomic_fetch_add(&f->h->progress, 1);
  }
  return r;
}

/* Give up the lead, then wake the owners of what is still POSTED: one of
** them leads next.  (After the lock is dropped: a request posted meanwhile
** either sees no leader, or is seen here.) */
static void wake_posted(sbf *f);
static void wake_finished(sbf *f);
static void stop_leading(sbf *f) {
  atomic_store(&f->h->released_ns, bf_now_ns());
  pthread_mutex_lock(&f->mu);
  lock_byte(f->fd, LEADER_BYTE, F_UNLCK);
  f->leading = 0;
  bf_model *drop = f->lt_model; /* the lingering thread's, with the lead (LINGER) */
  f->lt_model = NULL;
  pthread_mutex_unlock(&f->mu);
  wake_finished(f);
  wake_posted(f);
  if (drop) bf_model_release(drop);
}

static void wake_posted(sbf *f) {
  for (int i = 0; i < NSLOTS; i++)
    if (STATE_OF(atomic_load(&f->slots[i].state)) == S_POSTED) futex_wake(&f->slots[i].state);
}

/* How many slots are in state st1 or st2 right now. */
static int count_states(sbf *f, uint32_t st1, uint32_t st2) {
  int n = 0;
  for (int i = 0; i < NSLOTS; i++) {
    uint32_t st = STATE_OF(atomic_load(&f->slots[i].state));
    n += st == st1 || st == st2;
  }
  return n;
}

/* A request, as the leader checks it before running it (from its own
** copies of the slot's fields: the file may change under it). */
static int request_valid(uint32_t n, uint32_t n_masks, uint32_t k, const bf_model *m) {
  const bf_config *cfg = bf_model_config(m);
  return n >= 1 && n <= BFX_SHARED_MAX_TOKENS && (int)n <= cfg->max_position_embeddings &&
         n_masks >= 1 && n_masks <= BFX_SHARED_MAX_MASKS && n_masks <= n && k >= 1 &&
         k <= BFX_SHARED_MAX_K && (int)k <= cfg->vocab_size;
}

/* The leader's right to write slot s, which it took as taken (TAKEN and
** the request's ticket): 1 when it is still so, now WRITING.  0: the slot
** is no longer that request (its owner gave up on a stalled leader and the
** slot was used again, or someone wrote over it): nothing may be written. */
static int begin_writing(sb_slot *s, uint32_t taken) {
  uint32_t w = taken;
  return atomic_compare_exchange_strong(&s->state, &w, S_WRITING | TICKET_OF(taken));
}

/* Mark slot s (WRITING, its results written before) DONE with rc and the
** echo of the request run; its owner is woken now (wake) or by
** wake_finished. */
static void finish(sb_slot *s, uint32_t taken, int rc, uint64_t echo, int wake) {
  atomic_store(&s->rc, rc);
  atomic_store(&s->echo, echo);
  uint32_t w = S_WRITING | TICKET_OF(taken);
  atomic_compare_exchange_strong(&s->state, &w, S_DONE | TICKET_OF(taken));
  if (wake) futex_wake(&s->state);
}

/* WAKES.  The owners of a batch are woken only after the leader has taken
** its next batch: woken at once, they (at a woken thread's priority) post
** their next requests before the leader looks again, and those join the
** next batch; then batches grow to everybody, a request that just misses
** one waits for a whole batch of everybody, and the latency spreads out
** (8 threads in a closed loop on 2 cores: P95 1.3-1.4x that of the
** in-process batcher, which takes its next batch the moment a run ends).
** So the requests posted during a run make the next batch, as in
** batcher.c.  An owner that is not woken still finds its answer within
** RECHECK_NS (a leader that dies between the two, too). */
static void defer_wake(sbf *f, int slot) {
  pthread_mutex_lock(&f->mu);
  if (f->n_unwoken < NSLOTS) f->unwoken[f->n_unwoken++] = (unsigned short)slot;
  else futex_wake(&f->slots[slot].state);
  pthread_mutex_unlock(&f->mu);
}

static void wake_finished(sbf *f) {
  unsigned short w[NSLOTS];
  pthread_mutex_lock(&f->mu);
  int n = f->n_unwoken;
  memcpy(w, f->unwoken, (size_t)n * sizeof *w);
  f->n_unwoken = 0;
  pthread_mutex_unlock(&f->mu);
  for (int i = 0; i < n; i++) futex_wake(&f->slots[w[i]].state);
}

typedef struct member {
  int slot;
  uint64_t taken_ns, handover_ns; /* its timeline (TIMELINE) */
  uint32_t taken;                 /* its state word as taken: TAKEN | ticket */
  uint64_t echo;                  /* what its owner expects back */
  bf_tokens t;
  int k;
  int foreign; /* owned by another process */
} member;

/* Take a batch (the leader's own slot me first): the members' ids are copied
** into ids (BFX_BATCH_MAX_TOKENS of them).  Every field of a slot is read
** once, after it is TAKEN, and only those copies are used.  Returns how
** many; *tokens: their tokens in all. */
static int take_batch(sbf *f, bf_model *m, int me, member *mb, int32_t *ids, int first,
                      uint64_t lead_ns, uint64_t released_ns, int *tokens_out) {
  int n = 0, tokens = 0;
  unsigned start = (unsigned)me;
  for (unsigned j = 0; j < NSLOTS && n < BFX_BATCH_MAX_SEQS; j++) {
    unsigned i = (start + j) % NSLOTS;
    sb_slot *s = &f->slots[i];
    uint32_t w = atomic_load(&s->state), st = STATE_OF(w);
    /* TAKEN or WRITING seen by a new leader before its first batch: an
    ** orphan of a dead leader (a leader gives up the lead only after its
    ** whole batch is DONE); freed rather than run when its owner is dead
    ** too */
    if (st != S_POSTED && !(first && (st == S_TAKEN || st == S_WRITING))) continue;
    if (st != S_POSTED && reclaim_orphan(f, i)) continue;
    uint32_t peek = atomic_load(&s->n); /* racy: read again once taken */
    if (peek <= BFX_SHARED_MAX_TOKENS && tokens + (int)peek > BFX_BATCH_MAX_TOKENS && n > 0)
      continue;
    uint32_t taken = S_TAKEN | TICKET_OF(w);
    if (!atomic_compare_exchange_strong(&s->state, &w, taken)) continue;
    atomic_store(&s->taker, sb.key);
    if (st != S_POSTED) bf_stats_add(BF_CT_SHARED_RERUN, 1);
    uint32_t len = atomic_load(&s->n), n_masks = atomic_load(&s->n_masks), k = atomic_load(&s->k);
    uint64_t nonce = atomic_load(&s->nonce);
    if (!request_valid(len, n_masks, k, m)) {
      if (begin_writing(s, taken)) finish(s, taken, SQLITE_ERROR, 0, 1);
      continue;
    }
    if (tokens + (int)len > BFX_BATCH_MAX_TOKENS) { /* grew after the peek: the next batch */
      uint32_t expect = taken;
      atomic_compare_exchange_strong(&s->state, &expect, S_POSTED | TICKET_OF(taken));
      continue;
    }
    member *x = &mb[n++];
    x->slot = (int)i;
    /* with no leader: from its posting, or the last leader's giving up when
    ** later, to this lead (read from the file: checked by bfx_timeline) */
    uint64_t posted = atomic_load(&s->posted_ns),
             from = posted > released_ns ? posted : released_ns;
    x->handover_ns = from < lead_ns ? lead_ns - from : 0;
    x->taken_ns = bf_now_ns();
    x->taken = taken;
    x->k = (int)k;
    x->foreign = atomic_load(&s->owner) != sb.key;
    x->t.ids = ids + tokens;
    x->t.n = (int)len;
    x->t.cap = x->t.n;
    x->t.n_masks = (int)n_masks;
    memcpy(x->t.ids, s->ids, (size_t)len * sizeof *ids);
    x->echo = request_digest(nonce, x->t.ids, x->t.n, x->t.n_masks, x->k);
    tokens += x->t.n;
  }
  *tokens_out = tokens;
  return n;
}

/* Run a batch on run and write each member's results into its slot (only
** into a slot still TAKEN by this batch). */
static void run_batch(sbf *f, bf_model *m, bf_run *run, member *mb, int n, int how) {
  bfx_err errs[BFX_BATCH_MAX_SEQS];
  bf_tokens seqs[BFX_BATCH_MAX_SEQS];
  size_t at[BFX_BATCH_MAX_SEQS + 1];
  int rc[BFX_BATCH_MAX_SEQS];
  int kmax = 0, foreign = 0;
  at[0] = 0;
  for (int i = 0; i < n; i++) {
    seqs[i] = mb[i].t;
    at[i + 1] = at[i] + (size_t)mb[i].t.n_masks;
    if (mb[i].k > kmax) kmax = mb[i].k;
    foreign += mb[i].foreign;
  }
  bfx_times times;
  memset(&times, 0, sizeof times);
  bf_cand *out = sqlite3_malloc64(at[n] * (size_t)kmax * sizeof *out);
  if (!out) {
    for (int i = 0; i < n; i++) rc[i] = SQLITE_NOMEM;
  }
  uint64_t run0 = bf_now_ns();
  if (out) {
    int all = bfx_encode_on(m, run, n, seqs, kmax, out, &times, &errs[0]);
    for (int i = 0; i < n; i++) rc[i] = all;
    if (all != SQLITE_OK && n > 1) /* one sequence must not fail the others */
      for (int i = 0; i < n; i++)
        rc[i] = bfx_encode_on(m, run, 1, &seqs[i], kmax, out + at[i] * (size_t)kmax, &times,
                              &errs[i]);
  }
  uint64_t run1 = bf_now_ns();
  for (int i = 0; i < n; i++) {
    sb_slot *s = &f->slots[mb[i].slot];
    if (!begin_writing(s, mb[i].taken)) continue; /* no longer this request's slot */
    atomic_store(&s->encode_ns, times.encode_ns);
    atomic_store(&s->topk_ns, times.topk_ns);
    atomic_store(&s->taken_ns, mb[i].taken_ns);
    atomic_store(&s->handover_ns, mb[i].handover_ns);
    atomic_store(&s->run0_ns, run0);
    atomic_store(&s->run1_ns, run1);
    atomic_store(&s->leader_pid, (uint32_t)getpid());
    atomic_store(&s->lead, (uint32_t)how);
    atomic_store(&s->seqs, (uint32_t)n);
    if (rc[i] == SQLITE_OK) {
      int k = mb[i].k;
      for (int j = 0; j < mb[i].t.n_masks; j++)
        memcpy(s->out + (size_t)j * (size_t)k, out + (at[i] + (size_t)j) * (size_t)kmax,
               (size_t)k * sizeof *out);
    }
    atomic_store(&s->done_ns, bf_now_ns());
    finish(s, mb[i].taken, rc[i], rc[i] == SQLITE_OK ? mb[i].echo : 0, 0);
    defer_wake(f, mb[i].slot);
  }
  sqlite3_free(out);
  if (foreign > 0) {
    bf_stats_add(BF_CT_SHARED_SERVED, (uint64_t)foreign);
    bf_stats_add(BF_CT_SHARED_BATCHES, 1);
  }
  if (foreign > 0) atomic_fetch_add(&f->h->batches, 1);
}

/* What the leader announces before a batch of tokens: how long it expects
** to run it (its last batch's time per token; unknown before its first:
** an eighth of the busy timeout), the test hook's hold included. */
static uint64_t batch_expect_ns(const sbf *f, int tokens) {
  uint64_t ns = f->ns_per_token ? f->ns_per_token * (uint64_t)tokens
                                : (uint64_t)bfx_guard_timeout_ms() * 1000000ull / 8;
  return ns + (uint64_t)sb.hold_ms * 1000000ull;
}

/* One batch of the leader on run (me: where its look for POSTED slots
** starts, its own slot first): taken, announced, run and written.  The
** header's progress is bumped when the batch is taken and when it is done,
** with the time announced in between.  Returns how many requests it held
** (0: nothing to take); ids: BFX_BATCH_MAX_TOKENS of room. */
static int lead_batch(sbf *f, bf_model *m, bf_run *run, int me, int32_t *ids, int first,
                      uint64_t lead_ns, uint64_t released, int how) {
  member mb[BFX_BATCH_MAX_SEQS];
  int tokens = 0;
  int n = take_batch(f, m, me, mb, ids, first, lead_ns, released, &tokens);
  wake_finished(f); /* the last batch's owners, now that this one is taken (WAKES) */
  if (n == 0) return 0;
  atomic_store(&f->h->expect_ns, batch_expect_ns(f, tokens));
  atomic_fetch_add(&f->h->progress, 1);
  if (sb.hold_ms > 0) { /* test hook: a batch in the middle of its run */
    struct timespec ts = {sb.hold_ms / 1000, (long)(sb.hold_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
  }
  uint64_t t0 = bf_now_ns();
  run_batch(f, m, run, mb, n, how);
  uint64_t per = (bf_now_ns() - t0) / (uint64_t)(tokens > 0 ? tokens : 1);
  f->ns_per_token = per ? per : 1;
  atomic_fetch_add(&f->h->progress, 1);
  return n;
}

static int linger_hand_over(sbf *f, bf_model *m);

/* The leader's part, on run (an encoder slot of this process, taken before
** the lead): batches until the leader's own slot me is DONE; then the slot
** is given back, and the lead handed to the lingering thread (LINGER) or
** given up. */
static void lead(sbf *f, bf_model *m, int me, bf_run *run, int how) {
  uint64_t lead_ns = bf_now_ns(), released = atomic_load(&f->h->released_ns);
  bf_stats_add(how == BFX_LEAD_WOKEN   ? BF_CT_SHARED_LEAD_WOKEN
               : how == BFX_LEAD_TIMER ? BF_CT_SHARED_LEAD_TIMER
               : how == BFX_LEAD_SLOT  ? BF_CT_SHARED_LEAD_SLOT
                                       : BF_CT_SHARED_LEAD_POST,
               1);
  if (sb.gather > 1) { /* test hook: wait for company */
    atomic_store(&f->h->expect_ns, GATHER_WAIT_NS);
    atomic_fetch_add(&f->h->progress, 1);
    uint64_t until = bf_now_ns() + GATHER_WAIT_NS;
    while (count_states(f, S_POSTED, S_POSTED) < sb.gather && bf_now_ns() < until) {
      struct timespec ts = {0, 1000000};
      nanosleep(&ts, NULL);
    }
  }
  int32_t *ids = malloc(BFX_BATCH_MAX_TOKENS * sizeof *ids);
  int first = 1;
  while (ids && STATE_OF(atomic_load(&f->slots[me].state)) != S_DONE) {
    int n = lead_batch(f, m, run, me, ids, first, lead_ns, released, how);
    first = 0;
    if (n == 0) break;
  }
  free(ids);
  /* nothing posted: nobody to take before the owners are woken (WAKES);
  ** else the lingering thread wakes them once it has taken the next batch */
  if (count_states(f, S_POSTED, S_POSTED) == 0) wake_finished(f);
  bfx_guard_release(run);
  if (!linger_hand_over(f, m)) stop_leading(f);
}

/* ---- LINGER: a leader that keeps the lead ----
**
** Why.  On a fast CPU a batch takes a few ms and requests of a service
** arrive tens of ms apart: the queue is empty when a batch ends, so without
** this the lead changed hands on every batch, to the process of the next
** request, and on some virtual machines an encoder run is much slower in a
** process that did not run the last one (docs/performance.md, issue 38).
**
** How.  A leader whose own request is DONE returns to its caller at once,
** but hands the lead (LEADER_BYTE stays locked: it belongs to the process's
** file description) to its process's lingering thread, one per file, made
** on first use.  That thread sleeps on the header's posts word (FUTEX_WAIT,
** no spinning), which a poster that finds the lead held bumps and wakes;
** with POSTED slots it takes an encoder slot of its process (free right now,
** or it gives the lead up: its process has work of its own), runs them as
** the leader's batch would (lead "kept" in bertfill_trace), and so on, for
** as long as requests keep coming: BERTFILL_SHARED_LINGER_MS (default
** LINGER_MS) after the hand-over or its last batch without a request, it
** gives the lead up (stop_leading: the owners of what is POSTED are woken).
** A thread of its own process that wants to lead takes the lead from it
** when it is not in a batch (try_lead; no system call), and hands it back
** when its own request is done.  A lingering leader is a leader: killed,
** its lock dies with it and the waiters' RECHECK_NS finds no leader;
** stopped, its progress stops and the waiters' stall rule applies (STALLS).
** At exit (leave_all) it gives the lead up.  It holds a reference to the
** model (bf_model_retain) while it has the lead, released when it gives it
** up.  A forked child has no lingering thread: it makes its own (and lets
** the parent's thread's model reference go: forget_in_child).
** BERTFILL_SHARED_LINGER_MS=0: the lead is given up with the own request,
** as before. */

static void *linger_main(void *arg);

/* Hand this thread's lead (its batches done, its encoder slot released) to
** the lingering thread of f: 1 when handed, 0 when not (lingering off or
** the thread could not be made): then the caller gives the lead up. */
static int linger_hand_over(sbf *f, bf_model *m) {
  if (sb.linger_ns == 0) return 0;
  bf_model *drop = NULL;
  pthread_mutex_lock(&f->mu);
  if (!f->lt_started && !f->lt_stop) {
    pthread_attr_t a;
    pthread_t th;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the thread inherits it: no signal goes there */
    if (pthread_attr_init(&a) == 0) {
      pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
      f->lt_started = pthread_create(&th, &a, linger_main, f) == 0;
      pthread_attr_destroy(&a);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
  }
  int handed = f->lt_started && !f->lt_stop;
  if (handed) {
    if (f->lt_model != m) {
      drop = f->lt_model;
      bf_model_retain(m);
      f->lt_model = m;
    }
    f->lt_owns = 1;
    f->lt_last_ns = bf_now_ns();
    /* no batch runs: a stopped lingering leader is stalled after STALL_MIN_NS */
    atomic_store(&f->h->expect_ns, 0);
    pthread_cond_signal(&f->lt_cv);
  }
  pthread_mutex_unlock(&f->mu);
  if (drop) bf_model_release(drop);
  return handed;
}

/* The lingering thread of f (LINGER).  It waits (on lt_cv) for a lead
** handed to it; then runs the POSTED requests until nothing is posted for
** linger_ns, the lead is taken back by a thread of its process, or the
** process exits. */
static void *linger_main(void *arg) {
  sbf *f = arg;
  int32_t *ids = malloc(BFX_BATCH_MAX_TOKENS * sizeof *ids);
  pthread_mutex_lock(&f->mu);
  for (;;) {
    while (!f->lt_owns && !f->lt_stop) pthread_cond_wait(&f->lt_cv, &f->mu);
    if (!f->lt_owns) break; /* stopping */
    int give_up = 0;
    while (f->lt_owns) {
      bf_model *m = f->lt_model;
      uint64_t now = bf_now_ns();
      if (f->lt_stop || !ids || now - f->lt_last_ns >= sb.linger_ns) {
        give_up = 1;
        break;
      }
      uint32_t seen = atomic_load(&f->h->posts);
      if (count_states(f, S_POSTED, S_POSTED) == 0) {
        uint64_t left = sb.linger_ns - (now - f->lt_last_ns);
        pthread_mutex_unlock(&f->mu);
        wake_finished(f); /* WAKES: no next batch to take first */
        futex_wait(&f->h->posts, seen, left);
        pthread_mutex_lock(&f->mu);
        continue;
      }
      int nomem = 0;
      bf_run *run = bfx_guard_try_acquire(&nomem);
      if (!run) { /* its process's own work has the encoder: the lead goes */
        give_up = 1;
        break;
      }
      f->lt_busy = 1;
      int from = (int)(f->hint % NSLOTS); /* read under mu: claim() writes it */
      pthread_mutex_unlock(&f->mu);
      /* lead_ns 0: the lead was held all along, no request waited without one */
      int n = lead_batch(f, m, run, from, ids, 0, 0, 0, BFX_LEAD_KEPT);
      bfx_guard_release(run);
      pthread_mutex_lock(&f->mu);
      f->lt_busy = 0;
      if (n > 0) f->lt_last_ns = bf_now_ns();
    }
    if (give_up) { /* still its lead (taken under mu): given up, the model with it */
      f->lt_owns = 0;
      pthread_mutex_unlock(&f->mu);
      stop_leading(f);
      pthread_mutex_lock(&f->mu);
    }
  }
  f->lt_started = 0;
  pthread_mutex_unlock(&f->mu);
  free(ids);
  return NULL;
}

/* Try to become the leader with an encoder slot of this process in hand.
** The lead is never held while waiting for that slot: a process whose
** encoder slots are all busy (its other threads run fill_rows, say) would
** otherwise stall every process of the machine.  So: the lead and a slot
** free right now, or else, without the lead, wait for a slot at most until
** until_ns and try the lead once more.  LED: led (the own slot is DONE or
** the batch ran out); NOT_LEADER: another thread or process leads (or took
** the lead while this one waited; *elsewhere: 1 when the lead is another
** process's); NO_SLOT: waited in the guard's queue for a slot until
** until_ns, in vain; -1: out of memory. */
enum { NOT_LEADER, LED, NO_SLOT };
static int lead_if_possible(sbf *f, bf_model *m, int me, uint64_t until_ns, int *elsewhere,
                            int how) {
  int got = try_lead(f);
  *elsewhere = got == LEAD_ELSEWHERE;
  if (got != LEAD_GOT) return NOT_LEADER; /* another leads: it will take the request */
  int nomem = 0;
  bf_run *run = bfx_guard_try_acquire(&nomem);
  if (run) {
    lead(f, m, me, run, how);
    return LED;
  }
  stop_leading(f);
  if (nomem) return -1;
  uint64_t waited = 0;
  bfx_err ignored = BFX_ERR_NONE;
  run = bfx_guard_acquire_until(until_ns, &waited, &ignored);
  if (!run && ignored.rc == SQLITE_NOMEM) return -1;
  /* NO_SLOT only after a real wait: a deadline already past returns at
  ** once, and its caller, going straight back, would spin. */
  if (!run) return waited >= RECHECK_NS / 2 ? NO_SLOT : NOT_LEADER;
  got = try_lead(f);
  *elsewhere = got == LEAD_ELSEWHERE;
  if (got == LEAD_GOT) {
    lead(f, m, me, run, BFX_LEAD_SLOT);
    return LED;
  }
  bfx_guard_release(run);
  return NOT_LEADER;
}

/* ---- a call ---- */

/* How long a lead held by another process may go without progress before
** it counts as stalled: STALL_FACTOR times the batch time it announced, at
** least STALL_MIN_NS (half the busy timeout when that is less), at most
** cap_ns (the header is not trusted for more). */
static uint64_t stall_limit_ns(sbf *f, uint64_t cap_ns) {
  uint64_t e = atomic_load(&f->h->expect_ns);
  uint64_t lim = e >= cap_ns / STALL_FACTOR ? cap_ns : e * STALL_FACTOR;
  uint64_t floor = (uint64_t)bfx_guard_timeout_ms() * 1000000ull / 2;
  if (floor > STALL_MIN_NS) floor = STALL_MIN_NS;
  if (floor < 2 * RECHECK_NS) floor = 2 * RECHECK_NS;
  return lim < floor ? floor : lim;
}

/* The busy error of a request that no batch took within the busy timeout
** (its slot already taken back): what it waited for.  The requests still
** waiting, the batch running and whose it is (or none, and who led last),
** this process's own encoder runs when they kept it from leading, and the
** machine-wide guard's slots when it is on (the lead waits for one of them):
**   bertfill: busy: waited 2000 ms in the machine-wide queue of this model:
**   3 other requests waiting, 12 in the batch that process 4242 is running */
static void queue_busy_error(sbf *f, bfx_err *e, uint64_t waited_ns) {
  int posted = count_states(f, S_POSTED, S_POSTED), taken = count_states(f, S_TAKEN, S_WRITING);
  unsigned pid = (unsigned)atomic_load(&f->h->leader_pid);
  pthread_mutex_lock(&f->mu);
  int here = f->leading;
  pthread_mutex_unlock(&f->mu);
  char batch[96], own[80] = "";
  if (here)
    snprintf(batch, sizeof batch, "%d in the batch that this process (%u) is running", taken,
             (unsigned)getpid());
  else if (held_elsewhere(f->fd, LEADER_BYTE))
    snprintf(batch, sizeof batch, "%d in the batch that process %u is running", taken, pid);
  else if (pid) snprintf(batch, sizeof batch, "no batch running (process %u led last)", pid);
  else snprintf(batch, sizeof batch, "no batch running");
  int mine = bfx_guard_in_flight(), slots = bfx_guard_machine_slots();
  if (mine > 0)
    snprintf(own, sizeof own, "; this process's encoder: %d run%s in progress", mine,
             mine == 1 ? "" : "s");
  char machine[48] = ""; /* a lead waits for one of these too: its taker may be any process */
  if (slots > 0) snprintf(machine, sizeof machine, " (machine-wide guard: %d slots)", slots);
  bfx_errf(e, SQLITE_ERROR, BF_CT_BUSY,
           "bertfill: busy: waited %d ms in the machine-wide queue of this model: %d other "
           "request%s waiting, %s%s%s",
           (int)(waited_ns / 1000000), posted, posted == 1 ? "" : "s", batch, own, machine);
}

int bfx_shared_encode(bf_model *m, const bf_tokens *t, int k, bf_cand *out, bfx_times *tm,
                      bfx_err *e, int *rc) {
  pthread_once(&sb.once, sb_init);
  if (!sb.on) return 0;
  if (t->n > BFX_SHARED_MAX_TOKENS || t->n_masks < 1 || t->n_masks > BFX_SHARED_MAX_MASKS ||
      k < 1 || k > BFX_SHARED_MAX_K) {
    bf_stats_add(BF_CT_SHARED_FALLBACK, 1);
    return 0;
  }
  const char *fp = bf_model_fingerprint(m);
  if (!fp || !fp[0]) return 0;
  sbf *f = file_of(fp);
  if (!f) return 0;
  /* a lead found stalled, still held and still without progress: the
  ** in-process path at once rather than a wait for the stall again */
  uint64_t stalled = atomic_load(&f->stalled_at);
  if (stalled) {
    if (stalled == atomic_load(&f->h->progress) + 1 && held_elsewhere(f->fd, LEADER_BYTE)) {
      bf_stats_add(BF_CT_SHARED_FALLBACK, 1);
      return 0;
    }
    atomic_compare_exchange_strong(&f->stalled_at, &stalled, 0);
  }
  uint64_t t0 = bf_now_ns();
  int i = claim(f);
  if (i < 0) { /* the queue is full: this process's own batcher */
    bf_stats_add(BF_CT_SHARED_FALLBACK, 1);
    return 0;
  }
  sb_slot *s = &f->slots[i];
  uint64_t nonce = new_nonce();
  uint32_t ticket = TICKET_OF((uint32_t)(nonce >> 32));
  if (!ticket) ticket = STATE_BITS + 1;
  uint64_t want = request_digest(nonce, t->ids, t->n, t->n_masks, k);
  atomic_store(&s->n, (uint32_t)t->n);
  atomic_store(&s->n_masks, (uint32_t)t->n_masks);
  atomic_store(&s->k, (uint32_t)k);
  atomic_store(&s->rc, RC_PENDING);
  atomic_store(&s->echo, 0);
  atomic_store(&s->nonce, nonce);
  atomic_store(&s->owner_pid, (uint32_t)getpid());
  atomic_store(&s->owner, sb.key);
  atomic_store(&s->taker, 0);
  memcpy(s->ids, t->ids, (size_t)t->n * sizeof *t->ids);
  uint64_t posted = bf_now_ns();
  atomic_store(&s->posted_ns, posted);
  atomic_store(&s->state, S_POSTED | ticket);

  uint64_t deadline = bfx_guard_deadline_ns(t0);
  uint64_t patience = (uint64_t)bfx_guard_timeout_ms() * 1000000ull;
  if (patience < 1000000000ull) patience = 1000000000ull;
  uint64_t give_up = deadline + ABANDON_FACTOR * patience;
  uint64_t progress = atomic_load(&f->h->progress), quiet_since = t0;
  int elsewhere = 0;       /* the lead was another process's when last tried */
  int how = BFX_LEAD_POST; /* what this thread did last: posted, woken, timed out, queued */
  int announced = 0;       /* the posts word bumped for this request */
  for (;;) {
    uint32_t w = atomic_load(&s->state), st = STATE_OF(w);
    if (w == (S_DONE | ticket)) break;
    if (TICKET_OF(w) != ticket || (st != S_POSTED && st != S_TAKEN && st != S_WRITING)) {
      abandon(f, i); /* someone wrote over the slot: computed here */
      bf_stats_add(BF_CT_SHARED_FALLBACK, 1);
      return 0;
    }
    uint64_t now = bf_now_ns();
    int led = lead_if_possible(f, m, i, now + RECHECK_NS < deadline ? now + RECHECK_NS : deadline,
                               &elsewhere, how);
    if (led == LED) continue;
    if (led == NOT_LEADER && !announced) { /* wake a lingering leader (LINGER) */
      announced = 1;
      atomic_fetch_add(&f->h->posts, 1);
      futex_wake(&f->h->posts);
    }
    int queued = led == NO_SLOT; /* this thread just waited in the guard's queue */
    if (led < 0) {
      /* out of memory: take the request back if no leader has it */
      uint32_t expect = S_POSTED | ticket;
      if (atomic_compare_exchange_strong(&s->state, &expect, S_FILLING)) {
        release(f, i);
        bfx_err_nomem(e);
        *rc = e->rc;
        return 1;
      }
    }
    now = bf_now_ns();
    w = atomic_load(&s->state);
    st = STATE_OF(w);
    if (w == (S_DONE | ticket) || TICKET_OF(w) != ticket) continue;
    uint64_t p = atomic_load(&f->h->progress);
    if (p != progress) {
      progress = p;
      quiet_since = now;
    }
    if (elsewhere && now - quiet_since >= stall_limit_ns(f, ABANDON_FACTOR * patience)) {
      /* another process holds the lead and does nothing (stopped,
      ** descheduled): the request is run here, and so are this process's
      ** next ones while that lasts */
      if (!let_go(f, i, w)) continue;
      atomic_store(&f->stalled_at, p + 1);
      bf_stats_add(BF_CT_SHARED_FALLBACK, 1);
      return 0;
    }
    if (st == S_POSTED && now >= deadline) {
      uint32_t expect = S_POSTED | ticket;
      if (atomic_compare_exchange_strong(&s->state, &expect, S_FILLING)) {
        /* the guard's message ("N encoder runs in progress") only when
        ** what kept it was this process's own runs, and no other process leads */
        int mine = bfx_guard_in_flight();
        if (elsewhere || mine == 0 || held_elsewhere(f->fd, LEADER_BYTE))
          queue_busy_error(f, e, now - t0);
        else bfx_guard_busy_error(e, mine, now - t0);
        release(f, i);
        bf_stats_time(BF_ST_QUEUE, now - t0);
        if (tm) tm->queue_ns += now - t0;
        *rc = e->rc;
        return 1;
      }
      continue;
    }
    if (st != S_POSTED && now >= give_up) { /* its leader is alive but never finishes */
      if (!let_go(f, i, w)) continue;
      bf_stats_add(BF_CT_SHARED_FALLBACK, 1);
      return 0;
    }
    /* Back into the guard's queue at once when that is where it waited: a
    ** sleep here would let a column's next run take the slot first. */
    if (queued) {
      how = BFX_LEAD_SLOT;
      continue;
    }
    uint64_t ns = RECHECK_NS;
    if (st == S_POSTED && deadline > now && deadline - now < ns) ns = deadline - now;
    how = futex_wait(&s->state, w, ns ? ns : 1) ? BFX_LEAD_WOKEN : BFX_LEAD_TIMER;
  }

  /* DONE: accepted only when a leader ran this very request (the echo),
  ** without an error, and the candidates are within the vocabulary */
  int32_t src = atomic_load(&s->rc);
  int vocab = bf_model_config(m)->vocab_size, good = src == 0 && atomic_load(&s->echo) == want;
  size_t nc = (size_t)t->n_masks * (size_t)k;
  for (size_t j = 0; good && j < nc; j++) {
    bf_cand c = s->out[j];
    good = c.id >= 0 && c.id < vocab && c.prob >= 0.0f && c.prob <= 1.0f;
    out[j] = c;
  }
  int remote = atomic_load(&s->taker) != sb.key;
  uint64_t enc = atomic_load(&s->encode_ns), topk = atomic_load(&s->topk_ns);
  uint32_t lead_how = atomic_load(&s->lead);
  bfx_stamps stamps = {.posted = posted,
                       .taken = atomic_load(&s->taken_ns),
                       .run0 = atomic_load(&s->run0_ns),
                       .run1 = atomic_load(&s->run1_ns),
                       .done = atomic_load(&s->done_ns),
                       .handover = atomic_load(&s->handover_ns),
                       .seqs = (int)atomic_load(&s->seqs),
                       .leader_pid = (int)atomic_load(&s->leader_pid),
                       .lead = lead_how <= BFX_LEAD_KEPT ? (int)lead_how : BFX_LEAD_NONE};
  /* the answer is read: the slot's texts go with it (release).  DONE but
  ** no leader's result in it (someone wrote the state): a leader may still
  ** be about to write; the slot is scrubbed and left to be reclaimed */
  if (src == RC_PENDING) {
    scrub(s);
    abandon(f, i);
  } else {
    release(f, i);
  }
  if (!good) { /* an error (or a damaged answer): computed again here */
    bf_stats_add(BF_CT_SHARED_FALLBACK, 1);
    return 0;
  }
  if (remote) bf_stats_add(BF_CT_SHARED_REMOTE, 1);
  stamps.back = bf_now_ns();
  bfx_timeline(tm, &stamps);
  uint64_t total = stamps.back - t0, q = total > enc + topk ? total - enc - topk : 0;
  bf_stats_time(BF_ST_QUEUE, q);
  if (tm) {
    tm->queue_ns += q;
    tm->encode_ns += enc;
    tm->topk_ns += topk;
  }
  *rc = SQLITE_OK;
  return 1;
}

void bfx_shared_info_of(bf_model *m, bfx_shared_info *info) {
  memset(info, 0, sizeof *info);
  info->path = "";
  info->on = bfx_shared_on();
  if (!info->on || !m) return;
  const char *fp = bf_model_fingerprint(m);
  if (!fp || !fp[0]) return;
  sbf *f = file_of(fp);
  if (!f) return;
  info->usable = 1;
  info->path = f->path;
  info->slots = NSLOTS;
  info->posted = count_states(f, S_POSTED, S_POSTED);
  info->taken = count_states(f, S_TAKEN, S_WRITING);
  info->leader_pid = (int)atomic_load(&f->h->leader_pid);
  info->leader_changes = atomic_load(&f->h->leader_changes);
  info->batches = atomic_load(&f->h->batches);
}
