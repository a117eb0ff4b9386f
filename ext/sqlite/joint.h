/*
** joint.h — whole-word fills: the [MASK]s of a text decoded together by the
** chain rule, and the probability of a given answer (see joint.c).
**
** For the masks m_1..m_n of a text, in order of position,
**
**   P(t_1..t_n) = prod_i p_i(t_i)
**
** where p_i is the model's softmax at m_i on the text with m_1..m_{i-1}
** filled by t_1..t_{i-1} and m_i..m_n still [MASK].  With one mask, P(t) is
** the score fill_candidates gives t.
**
** Both results use bfx_result (lookup.h) with its per-mask layout, so that
** they live in the same memo cache as per-mask results (under other keys,
** cache.h): c[mask * k + row] is the token of that row at that mask
** together with its p_i; the P of a row is bfx_joint_p.
*/
#ifndef BERTFILL_SQLITE_JOINT_H
#define BERTFILL_SQLITE_JOINT_H

#include "bertfill.h"
#include "conn.h"
#include "errors.h"
#include "lookup.h"

/* Where a result is wanted: a call of a function (counted in joint_calls'
** hits and misses), or bert_prefill (not counted; read as BFX_GET_KEEP,
** lookup.h: in cache mode 'on' an entry found only in the LRU is written to
** the table too). */
enum { BFX_JOINT_CALL = 0, BFX_JOINT_PREFILL = 1 };

/* The k best whole fills of t by P (fill_sequences), found by beam search
** from the left: res->k rows (k capped at the vocabulary size), best first.
** Step i extends each hypothesis by its own top k tokens at m_i and keeps
** the k best by cumulative log-probability; ties go to the lower token ids,
** compared position by position.  Each step is one encoder run of the
** hypotheses (more only when they exceed BFX_BATCH_MAX_SEQS sequences or
** BFX_BATCH_MAX_TOKENS tokens, bounds.h).  From the memo cache when it can
** be, keyed by the model, the tokens and k.  A text without a mask gives
** no rows (res->n_masks = 0).  t comes from bfx_tokenize_fill (it fits the
** model). */
int bfx_joint_fill(bfx_conn *c, bf_model *m, const bf_tokens *t, int k, int why, bfx_result *res,
                   bfx_err *e);

/* P(answer) for t (bert_score): answer[0..t->n_masks) are token ids, one
** per mask (a [MASK] among them leaves its mask open).  res gets one row: res->c[mask] = the
** answer's token at that mask with its p_i.  The n texts of the chain rule
** are known in advance, so they run as one encoder run (or more, as
** above).  Memoized, keyed by the model, the tokens and the answer. */
int bfx_joint_score(bfx_conn *c, bf_model *m, const bf_tokens *t, const int32_t *answer,
                    bfx_result *res, bfx_err *e);

/* P of a row of a result: the product of its p_i (in double, left to right;
** for one mask exactly that mask's probability). */
double bfx_joint_p(const bfx_result *res, int row);

#endif
