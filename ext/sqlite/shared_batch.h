/*
** shared_batch.h — the machine-wide batcher: processes of one user that run
** the same model share one queue of encoder requests in shared memory, and
** whichever of them holds the encoder runs everybody's requests as one batch
** (see the header comment of shared_batch.c for how it works).
*/
#ifndef BERTFILL_SQLITE_SHARED_BATCH_H
#define BERTFILL_SQLITE_SHARED_BATCH_H

#include <stdint.h>
#include "bertfill.h"
#include "encode.h"
#include "errors.h"

/* k candidates for each mask of t into out through the machine's shared
** queue of m's model (same contract as bfx_batch_encode).  Returns 1 when the
** call was handled here, its result in *rc (SQLITE_OK, or an error in e:
** "bertfill: busy: ..." when no batch took it within the busy timeout);
** returns 0, having touched nothing, when the caller must use the
** in-process path: shared batching off, the call beyond the shared bounds
** (bounds.h: BFX_SHARED_*), no fingerprint, no usable shared file, a full
** queue, or a result that came back as an error (run again locally, so that
** the caller gets its own error message). */
int bfx_shared_encode(bf_model *m, const bf_tokens *t, int k, bf_cand *out, bfx_times *tm,
                      bfx_err *e, int *rc);

/* 1 when shared batching is on (BERTFILL_SHARED_BATCH, default 1). */
int bfx_shared_on(void);

/* What bert_debug shows of the shared queue of m's model. */
typedef struct bfx_shared_info {
  int on;                  /* shared batching on in this process */
  int usable;              /* the shared file of m's model is open and valid */
  const char *path;        /* its path ("" when none) */
  int slots;               /* request slots of the queue */
  int posted;              /* requests waiting right now (POSTED), machine-wide */
  int taken;               /* requests in a leader's batch right now */
  int leader_pid;          /* the last process that led (0: none yet) */
  uint64_t leader_changes; /* machine-wide, since the file was made */
  uint64_t batches;        /* machine-wide shared batches (more than one process) */
} bfx_shared_info;
/* Fills *info; opens the shared file when it is not yet open (only when on
** and m has a fingerprint). */
void bfx_shared_info_of(bf_model *m, bfx_shared_info *info);

#endif
