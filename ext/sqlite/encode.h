/*
** encode.h — one encoder run (bf_fill) as the SQLite layer makes it: on an
** encoder slot of the overload guard, with its stats counted and its times
** added to the caller's, engine errors turned into SQL errors.
*/
#ifndef BERTFILL_SQLITE_ENCODE_H
#define BERTFILL_SQLITE_ENCODE_H

#include <stdint.h>
#include "bertfill.h"
#include "spelling.h"
#include "errors.h"

/* Where the time of one call went, in nanoseconds, added up on the way. */
typedef struct bfx_times {
  uint64_t queue_ns;  /* waiting for an encoder slot or a batch */
  uint64_t encode_ns; /* embeddings, encoder layers, MLM head */
  uint64_t topk_ns;
  uint64_t cache_read_ns, cache_write_ns;
  /* The timeline of a call that went through a batcher (batcher.c or
  ** shared_batch.c; all 0 otherwise): posted -> taken into a batch (wait,
  ** of which handover with no leader) -> the batch's encoder run starts
  ** (start) -> runs (encode + topk) -> its answer handed over (write) ->
  ** the caller runs again (wake). */
  uint64_t wait_ns, start_ns, write_ns, wake_ns, handover_ns;
  int batch_seqs; /* sequences in its batch */
  int leader_pid; /* the process whose encoder ran the batch */
  int lead;       /* how that batch's leader got the lead: BFX_LEAD_* */
} bfx_times;

/* How the leader of a batch got the lead (bfx_times.lead, bertfill_trace's
** lead column: bfx_lead_name). */
enum {
  BFX_LEAD_NONE = 0,
  BFX_LEAD_ALONE, /* "alone": an encoder slot free and nobody queued: ran at once */
  BFX_LEAD_QUEUE, /* "queue": first in its process's queue (batcher.c) */
  BFX_LEAD_POST,  /* "post": the machine-wide lead free when it posted its request */
  BFX_LEAD_WOKEN, /* "woken": woken by the previous leader, which gave the lead up */
  BFX_LEAD_TIMER, /* "timer": looked again after RECHECK_NS asleep, found no leader */
  BFX_LEAD_SLOT,  /* "slot": after a wait for an encoder slot of its own process */
  BFX_LEAD_KEPT,  /* "kept": a leader that kept the lead after its own request (shared_batch.c) */
};
const char *bfx_lead_name(int lead); /* NULL for BFX_LEAD_NONE or unknown */

/* The moments (bf_now_ns, one clock for every process of the machine) of
** one request through a batcher, and its batch. */
typedef struct bfx_stamps {
  uint64_t posted, taken, run0, run1, done, back; /* run0, run1: the encoder run */
  uint64_t handover;                              /* of taken - posted: with no leader */
  int seqs, leader_pid, lead;
} bfx_stamps;
/* Adds the timeline of st into tm (may be NULL) and the batch_* and
** lead_handover stages; nothing when the moments are out of order (another
** process's, read from shared memory: never trusted).  1 when added. */
int bfx_timeline(bfx_times *tm, const bfx_stamps *st);

/* Run the encoder once over nseq sequences, taking an encoder slot first
** (waiting at most the busy timeout): out gets k candidates per mask (see
** bf_fill).  Times are added to tm (may be NULL); stats are counted. */
int bfx_encode(bf_model *m, int nseq, const bf_tokens *seqs, int k, bf_cand *out, bfx_times *tm,
               bfx_err *e);
/* bfx_encode, and the probability of one given token at each mask
** (bf_fill_scored: want[j] a token id or -1, want_prob[j] its probability). */
int bfx_encode_scored(bf_model *m, int nseq, const bf_tokens *seqs, int k, bf_cand *out,
                      const int32_t *want, float *want_prob, bfx_times *tm, bfx_err *e);
/* The same on a run the caller holds (no slot taken or given back). */
int bfx_encode_on(bf_model *m, bf_run *run, int nseq, const bf_tokens *seqs, int k, bf_cand *out,
                  bfx_times *tm, bfx_err *e);

/* The spelling check of ntext texts (bf_spell_check, spelling.h: one
** screening run and the verifying runs, of at most BFX_BATCH_MAX_TOKENS
** tokens each) on an encoder slot (waiting at most the busy timeout), its
** time in the encode stage and tm (may be NULL), counted as one encoder run
** of ntext sequences. */
int bfx_encode_spelling(bf_model *m, int ntext, bf_spell_text *texts, int thorough,
                        double sensitivity, bfx_times *tm, bfx_err *e);
/* The same on a run the caller holds (the batcher's leader). */
int bfx_encode_spelling_on(bf_model *m, bf_run *run, int ntext, bf_spell_text *texts, int thorough,
                           double sensitivity, bfx_times *tm, bfx_err *e);
#endif
