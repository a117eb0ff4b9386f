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
} bfx_times;

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
** tokens each) on an encoder slot, its time in the encode stage, counted as
** one encoder run. */
int bfx_encode_spelling(bf_model *m, int ntext, bf_spell_text *texts, int thorough,
                        double sensitivity, bfx_err *e);
#endif
