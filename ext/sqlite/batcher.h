/*
** batcher.h — dynamic batching of concurrent encoder calls (see the header
** comment of batcher.c for how it works and how to turn it off).  The
** limits of one merged batch are BFX_BATCH_MAX_SEQS / _TOKENS (bounds.h).
*/
#ifndef BERTFILL_SQLITE_BATCHER_H
#define BERTFILL_SQLITE_BATCHER_H

#include "bertfill.h"
#include "encode.h"
#include "errors.h"

/* k candidates for each mask of t into out (t->n_masks * k entries) from
** the encoder.  t must be valid for the model (checked by the caller: at
** least one mask, no longer than the model's limit, 1 <= k <= vocabulary).
** With batching on, a call that finds the encoder busy joins the queue of
** its model and is computed in the next batch; otherwise (batching off, or
** an encoder slot free and nobody queued) it runs alone right away.  Times
** are added to tm (may be NULL), stats counted.  Errors as bfx_encode: a
** "bertfill: busy: ..." error when no batch took the call within the busy
** timeout. */
int bfx_batch_encode(bf_model *m, const bf_tokens *t, int k, bf_cand *out, bfx_times *tm,
                     bfx_err *e);

/* The spelling check of one text x (bf_spell_check, spelling.h: x->found
** and n_found written) through the same queues: calls of one model, mode and
** sensitivity that find the encoder busy are checked together in one
** bf_spell_check (one screening run over all their texts, then the verifying
** runs), never merged with fill calls.  x->t as bfx_batch_encode's t (no
** [MASK], no longer than the model's limit).  In-process only: the
** machine-wide queue (shared_batch.c) holds candidate lists. */
int bfx_batch_spell(bf_model *m, bf_spell_text *x, int thorough, double sensitivity, bfx_times *tm,
                    bfx_err *e);

int bfx_batching(void); /* 1 when on */
void bfx_batching_set(int on);
int bfx_batch_queued(void); /* calls waiting in a queue right now */

#endif
