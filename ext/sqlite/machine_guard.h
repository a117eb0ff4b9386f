/*
** machine_guard.h — encoder slots shared by every process of the machine
** that uses the same slot file (see machine_guard.c); guard.c takes one
** for each encoder run when the machine-wide guard is on.
*/
#ifndef BERTFILL_SQLITE_MACHINE_GUARD_H
#define BERTFILL_SQLITE_MACHINE_GUARD_H

#include <stdint.h>

/* Take one of slots slots (slot numbers 0..slots-1) of the machine, waiting
** at most until deadline_ns (CLOCK_MONOTONIC, bf_now_ns).  1: taken (give it
** back with bfx_machine_release); 0: all taken until the deadline; -1: no
** slot file (it could not be opened: one line on stderr, once), so there is
** no machine-wide bound. */
int bfx_machine_acquire_until(int slots, uint64_t deadline_ns);
/* The same without waiting. */
int bfx_machine_try_acquire(int slots);
/* Give back one slot this process holds (slots are interchangeable). */
void bfx_machine_release(void);
/* Slots this process holds now. */
int bfx_machine_held(void);
/* Slots of the first slots held by any process, this one included (a
** snapshot, for bert_debug); -1 without a slot file. */
int bfx_machine_busy(int slots);
/* The slot file ("" until opened or when it cannot be). */
const char *bfx_machine_path(void);

#endif
