/*
** column_batch.h — the batch of a column's texts for one encoder run, as
** fill_rows (rows.c) and bert_prefill (prefill.c) read a column: each text
** is tokenized into the batch's next slot, then answered from the memo
** cache, found again among the batch's sequences (a repeat), or added as a
** new sequence while the run has room (BFX_BATCH_MAX_SEQS sequences,
** BFX_BATCH_MAX_TOKENS tokens, bounds.h).  A text that does not fit waits
** in its slot and becomes the first sequence of the next run.
**
**   bfx_column_batch b = {0};
**   for each text s[0..n):
**     bf_tokens *t;
**     if (bfx_column_batch_tokenize(&b, "fill_rows", m, s, n, &t, &why) != BFX_COLUMN_FILL) ...
**     int seq;
**     switch (bfx_column_batch_place(&b, c, m, k, how, &res, &seq)) {
**       case BFX_COLUMN_CACHED: ... res ...
**       case BFX_COLUMN_REPEAT: case BFX_COLUMN_NEW: ... sequence seq ...
**       case BFX_COLUMN_NO_ROOM: run the batch, bfx_column_batch_next, then the
**                                text is sequence 0
**     }
**     if (bfx_column_batch_full(&b)) run it:
**       bfx_column_batch_encode(&b, m, k_enc, &e), bfx_column_batch_cands(&b, seq),
**       bfx_column_batch_store(&b, c, m, room), bfx_column_batch_next(&b)
**   bfx_column_batch_free(&b);
*/
#ifndef BERTFILL_SQLITE_COLUMN_BATCH_H
#define BERTFILL_SQLITE_COLUMN_BATCH_H

#include <stddef.h>
#include <stdint.h>
#include "bertfill.h"
#include "bounds.h"
#include "conn.h"
#include "errors.h"
#include "lookup.h"

typedef struct bfx_column_batch {
  bf_tokens seqs[BFX_BATCH_MAX_SEQS + 1]; /* the run's sequences; seqs[n]: the text being read */
  int n, tokens;                          /* sequences in the run, and their tokens */
  int waiting; /* seqs[n] did not fit: it starts the next run (bfx_column_batch_next) */
  size_t at[BFX_BATCH_MAX_SEQS]; /* after a run: the first mask of each sequence in out */
  bf_cand *out;                  /* after a run: k candidates per mask */
  int k;
} bfx_column_batch;

/* What a text of the column is, once tokenized. */
typedef enum bfx_column_text {
  BFX_COLUMN_FILL,    /* it can be filled: its tokens are in the batch's next slot */
  BFX_COLUMN_NO_MASK, /* nothing to fill (bert_fill returns it as it is, at any length) */
  BFX_COLUMN_BAD,     /* bert_fill would reject it (invalid UTF-8, a look-alike of [MASK],
                      ** too long): why says so */
  BFX_COLUMN_TEXT_NOMEM = -1
} bfx_column_text;
/* Tokenize s[0..n) into the batch's next slot (*t).  fname prefixes
** messages. */
bfx_column_text bfx_column_batch_tokenize(bfx_column_batch *b, const char *fname, bf_model *m,
                                          const char *s, int n, bf_tokens **t, bfx_err *why);

/* Where the text just tokenized goes. */
typedef enum bfx_column_place {
  BFX_COLUMN_CACHED,  /* the memo cache has it: res (bfx_cache_get with how, k per mask) */
  BFX_COLUMN_REPEAT,  /* the same tokens as sequence *seq of this run */
  BFX_COLUMN_NEW,     /* added to the run as sequence *seq */
  BFX_COLUMN_NO_ROOM, /* the run has no room for it: it waits to be sequence 0 of the next */
  BFX_COLUMN_NOMEM = -1
} bfx_column_place;
bfx_column_place bfx_column_batch_place(bfx_column_batch *b, bfx_conn *c, bf_model *m, int k,
                                        int how, bfx_result *res, int *seq);

/* 1 when the run can take no more sequences. */
int bfx_column_batch_full(const bfx_column_batch *b);

/* Run the encoder once over the run's sequences (an encoder slot of the
** overload guard, bfx_encode): k candidates per mask, read with
** bfx_column_batch_cands.  SQLITE_OK (also for an empty run), or an error
** in e. */
int bfx_column_batch_encode(bfx_column_batch *b, bf_model *m, int k, bfx_err *e);
/* After bfx_column_batch_encode: the candidates of sequence seq, k per mask. */
const bf_cand *bfx_column_batch_cands(const bfx_column_batch *b, int seq);
/* Store what the run computed in the memo cache (bfx_cache_put_batch: at
** most room table rows, room < 0 no bound).  Returns the table rows written. */
int64_t bfx_column_batch_store(const bfx_column_batch *b, bfx_conn *c, bf_model *m, int64_t room);

/* Empty the run for the next; a text that waited (BFX_COLUMN_NO_ROOM)
** becomes its sequence 0. */
void bfx_column_batch_next(bfx_column_batch *b);
void bfx_column_batch_free(bfx_column_batch *b);

/* Progress lines on stderr while a column is read, at most one a second:
** on when stderr is a terminal or BERTFILL_PROGRESS=1 (BERTFILL_PROGRESS=0
** turns it off; read at bfx_column_progress_start).  The caller prints its
** own line when bfx_column_progress_due says one is due (final: the last
** line, always due when on), with the seconds since the start in *secs. */
typedef struct bfx_column_progress {
  int on;
  uint64_t t_start, t_last;
} bfx_column_progress;
void bfx_column_progress_start(bfx_column_progress *p);
int bfx_column_progress_due(bfx_column_progress *p, int final, double *secs);

#endif
