/*
** spelling.h — suspicious characters of a Chinese text and what they should
** be, from a masked language model and a confusion table (confusion.h); no
** fine-tuned spelling model.  What fill_suspects, bert_correct and
** fill_suspects_rows (ext/sqlite/suspects.c) run.
**
**   bf_spell_text x = {.s = text, .n = len, .t = &tokens};  // bf_tokenize'd, no [MASK]
**   bf_spell_opts o = {.sensitivity = BF_SPELL_DEFAULT_SENSITIVITY};
**   if (bf_spell_check(m, run, 1, &x, &o, err, sizeof err) == BF_OK)
**     for (int i = 0; i < x.n_found; i++) ... x.found[i] ...;
**   free(x.found);
**
** The recipe.  A position is eligible when its token is exactly one Han
** character of the text, a single entry of the vocabulary (not [UNK]), with
** confusables (confusion.h); names, numbers and Latin letters are never
** eligible, and a confusable outside the vocabulary is never suggested.
**   1. Screen (mode fast): one run of the text as written; at every eligible
**      position the MLM head's logits of the written character x and of its
**      confusables y only (bf_probe_run, BF_PROBE_LOGITS).  A position goes
**      on when some y has logit(y) - logit(x) - cost(kind) >= the threshold
**      minus BF_SPELL_SCREEN_SLACK (the model sees x there, which favours
**      it), at most BF_SPELL_VERIFY_BASE + 1 per 16 tokens of the text (and
**      never more than BF_SPELL_MAX_VERIFY), best first: a text costs at most
**      about three runs of itself however many characters look suspicious.
**   2. Verify: each position that went on (mode thorough: every eligible
**      position) masked in a sequence of its own, all of them in batched
**      runs: P(x | context) and P(y | context), softmax over the whole
**      vocabulary (BF_PROBE_PROBS).  margin(y) = ln P(y) - ln P(x) -
**      cost(kind): log P(y | context) + log P(x | y) against the same for x,
**      with the error model's P(x | y) relative to P(x | x) as e^-cost.
**   3. The best y of a position is a finding when margin >= threshold =
**      ln(1 / sensitivity): a higher sensitivity flags more.
** The error model prefers same sound over similar sound over similar shape
** (the costs below); the constants and the default sensitivity were chosen
** on the development set, every 4th everyday line held out of the shipped
** model's training (model/evaluate_spelling.py --sets everyday-dev), which
** no test set holds (docs/spelling-evaluation.md).
*/
#ifndef BERTFILL_SPELLING_H
#define BERTFILL_SPELLING_H

#include <stdint.h>

#include "bertfill.h"
#include "confusion.h"

/* The error model: ln P(x | x) - ln P(x | y) for a y of each kind, nats. */
#define BF_SPELL_COST_SAME_SOUND 0.0
#define BF_SPELL_COST_SIMILAR_SOUND 1.5
#define BF_SPELL_COST_SIMILAR_SHAPE 2.5
#define BF_SPELL_DEFAULT_SENSITIVITY 0.005 /* threshold ln 200 = 5.3 nats */
#define BF_SPELL_MIN_SENSITIVITY 1e-9
#define BF_SPELL_MAX_SENSITIVITY 1e9
#define BF_SPELL_SCREEN_SLACK 9.0    /* nats below the threshold that the screen lets through */
#define BF_SPELL_MAX_VERIFY 8        /* positions per text verified in mode fast: at most */
#define BF_SPELL_VERIFY_BASE 2       /* ... 2, and one more per 16 tokens of the text */
#define BF_SPELL_MAX_CONFUSABLES 512 /* confusables of one character considered */

typedef struct bf_suspect {
  int position;              /* 0-based index of the character in the text (code points) */
  int byte_offset, byte_len; /* its bytes in the text */
  int token;                 /* its token: the index into the text's bf_tokens */
  uint32_t written, suggestion;
  int32_t written_id, suggestion_id;
  float written_score;    /* P(written | context), the position masked */
  float suggestion_score; /* P(suggestion | context) */
  double margin;          /* ln suggestion_score - ln written_score - cost(kind) */
  bf_confusion_kind kind;
} bf_suspect;

typedef struct bf_spell_text {
  const char *s; /* the text: valid UTF-8 (bf_tokenize checked it) */
  int n;
  const bf_tokens *t; /* its tokens with their spans (bf_tokenize), no [MASK] */
  bf_suspect *found;  /* out: malloc'ed (free it), n_found, in order of position */
  int n_found;
  int verified; /* out: positions verified */
} bf_spell_text;

typedef struct bf_spell_opts {
  int thorough;       /* 1: verify every eligible position (no screen) */
  double sensitivity; /* BF_SPELL_MIN_SENSITIVITY..MAX; flag when margin >= ln(1/sensitivity) */
  int max_tokens;     /* tokens per verifying run (0: 2048) */
} bf_spell_opts;

/* The findings of each of ntext texts.  One screening run over all of them
** (the caller bounds their tokens), then the verifying runs.  BF_OK, or an
** error code of bf_fill's with err set (every found freed and NULL). */
int bf_spell_check(const bf_model *m, bf_run *r, int ntext, bf_spell_text *texts,
                   const bf_spell_opts *o, char *err, size_t errlen);

/* A finding of text x rebuilt from what a memo of the check keeps (the
** token, the suggestion's id and kind, the two probabilities; the SQL layer's
** cache, spelling_memo.c), checked as the check itself would have found it:
** 1 with *f filled when token tok_index of x is an eligible position, the
** suggestion one of its confusables of that kind in the vocabulary and the
** margin at least the threshold of sensitivity; 0 when not (a memo that does
** not belong to this text), -1 out of memory. */
int bf_spell_restore(const bf_model *m, const bf_spell_text *x, int tok_index,
                     int32_t suggestion_id, bf_confusion_kind kind, float written_score,
                     float suggestion_score, double sensitivity, bf_suspect *f);

/* cost(kind) above, nats. */
double bf_spell_cost(bf_confusion_kind kind);

#endif
