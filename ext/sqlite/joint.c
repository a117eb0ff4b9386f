/*
** joint.c — whole-word fills (see joint.h for the definitions): the beam
** search of fill_sequences and bert_fill(text, 'joint'), the chain rule of
** bert_score, and their memo.
**
**   memo (LRU, table) -> hit: the rows as stored
**                     -> miss: beam search / chain rule on the encoder,
**                              then stored
**
** The beam search, for n masks and beam width k:
**
**   beam = { the empty fill, log P = 0 }
**   for i = 1..n:
**     texts  = the text of each hypothesis: m_1..m_{i-1} filled, the rest [MASK]
**     p      = one encoder run over those texts (encode_in_runs), top k at m_i
**     beam   = the k best of { (h, t) : h in beam, t in top k of h }
**              by log P(h) + log p_h(t), ties to the lower token ids
**
** so n encoder runs of at most k sequences each, not n x k.  bert_score
** needs no search: the n texts of the chain rule follow from the answer, so
** they go through the encoder together, and each one's probability of its
** answer token comes from the engine (bf_fill_scored), in or out of the
** top k.
*/
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3
#include "joint.h"
#include "bounds.h"
#include "cache.h"
#include "encode.h"
#include "stats.h"
#include "text.h"
#include "util.h"

double bfx_joint_p(const bfx_result *res, int row) {
  double p = 1.0;
  for (int i = 0; i < res->n_masks; i++) p *= (double)res->c[(size_t)i * res->k + row].prob;
  return p;
}

/* --------------------------------------------------------- encoder runs */

/* seqs[0..nseq) through the encoder in runs of at most BFX_BATCH_MAX_SEQS
** sequences and BFX_BATCH_MAX_TOKENS tokens (one run when they fit): k
** candidates per mask into out, sequence after sequence, as one bf_fill
** would write them; want / want_prob as bf_fill_scored's (may be NULL). */
static int encode_in_runs(bf_model *m, int nseq, const bf_tokens *seqs, int k, bf_cand *out,
                          const int32_t *want, float *want_prob, bfx_times *tm, bfx_err *e) {
  size_t mask0 = 0;
  for (int s0 = 0, s1; s0 < nseq; s0 = s1) {
    int tokens = 0;
    size_t masks = 0;
    for (s1 = s0; s1 < nseq && s1 - s0 < BFX_BATCH_MAX_SEQS; s1++) {
      if (s1 > s0 && tokens + seqs[s1].n > BFX_BATCH_MAX_TOKENS) break;
      tokens += seqs[s1].n;
      masks += (size_t)seqs[s1].n_masks;
    }
    int rc = bfx_encode_scored(m, s1 - s0, seqs + s0, k, out + mask0 * (size_t)k,
                               want ? want + mask0 : NULL, want ? want_prob + mask0 : NULL, tm, e);
    if (rc != SQLITE_OK) return rc;
    bf_stats_add(BF_CT_JOINT_RUNS, 1);
    mask0 += masks;
  }
  return SQLITE_OK;
}

/* The texts of hypotheses: seqs[h] = t with its first `filled` masks
** replaced by tok[h * n + 0..filled) (n = t->n_masks), the rest left as
** [MASK]; their ids live in ids[h * t->n ...].  pos: the mask positions.
** A fill may be the [MASK] token itself (nothing forbids the model to
** predict it): that position then stays a mask of the text. */
static void hypothesis_texts(const bf_tokens *t, const int *pos, int32_t mask_id, int nh,
                             const int32_t *tok, int filled, int32_t *ids, bf_tokens *seqs) {
  int n = t->n_masks;
  for (int h = 0; h < nh; h++) {
    int32_t *x = ids + (size_t)h * t->n;
    int masks = n - filled;
    memcpy(x, t->ids, (size_t)t->n * sizeof *x);
    for (int j = 0; j < filled; j++) {
      x[pos[j]] = tok[(size_t)h * n + j];
      masks += x[pos[j]] == mask_id;
    }
    seqs[h] = (bf_tokens){.ids = x, .n = t->n, .cap = t->n, .n_masks = masks};
  }
}

/* Which of its text's masks m_i is, for a fill whose first i tokens are
** tok[0..i): 0, unless some of those are the [MASK] token. */
static int open_mask(const int32_t *tok, int i, int32_t mask_id) {
  int before = 0;
  for (int j = 0; j < i; j++) before += tok[j] == mask_id;
  return before;
}

/* The positions of t's masks (n of them) into pos; returns the mask id. */
static int32_t mask_positions(bf_model *m, const bf_tokens *t, int *pos) {
  int32_t mask_id = bf_tokenizer_mask_id(bf_model_tokenizer(m));
  for (int i = 0, j = 0; i < t->n; i++)
    if (t->ids[i] == mask_id) pos[j++] = i;
  return mask_id;
}

/* --------------------------------------------------------- beam search */

/* A hypothesis extended by one token, under selection. */
typedef struct extension {
  double logp;           /* log P of the extended hypothesis */
  const int32_t *prefix; /* the tokens of the hypothesis it extends */
  int len;               /* how many */
  int from;              /* its index in the beam */
  int32_t id;            /* the token added */
  float p;               /* its probability there */
} extension;

/* Better first: higher log P, then the lower token ids position by position. */
static int extension_cmp(const void *pa, const void *pb) {
  const extension *a = pa, *b = pb;
  if (a->logp != b->logp) return a->logp > b->logp ? -1 : 1;
  for (int j = 0; j < a->len; j++)
    if (a->prefix[j] != b->prefix[j]) return a->prefix[j] < b->prefix[j] ? -1 : 1;
  return (a->id > b->id) - (a->id < b->id);
}

/* The beam: nh hypotheses of n tokens (the first `filled` of them set). */
typedef struct beam {
  int nh;
  int32_t *tok; /* [k, n] token ids */
  float *p;     /* [k, n] their probabilities */
  double *logp; /* [k]    log P so far */
} beam;

/* The beam search of joint.h for t (n = t->n_masks >= 1 masks) with width k
** (1 <= k <= vocabulary): rows into out[mask * k + row].  SQLITE_OK or an
** error. */
static int beam_search(bf_model *m, const bf_tokens *t, int k, bf_cand *out, bfx_times *tm,
                       bfx_err *e) {
  int n = t->n_masks, rc = SQLITE_OK;
  size_t kn = (size_t)k * (size_t)n;
  int *pos = sqlite3_malloc64((size_t)n * sizeof *pos);
  int32_t *ids = sqlite3_malloc64((size_t)k * (size_t)t->n * sizeof *ids);
  bf_tokens *seqs = sqlite3_malloc64((size_t)k * sizeof *seqs);
  bf_cand *top = sqlite3_malloc64(kn * (size_t)k * sizeof *top); /* k texts x n masks x k */
  extension *ext = sqlite3_malloc64((size_t)k * (size_t)k * sizeof *ext);
  beam b[2];
  for (int i = 0; i < 2; i++) {
    b[i].tok = sqlite3_malloc64(kn * sizeof *b[i].tok);
    b[i].p = sqlite3_malloc64(kn * sizeof *b[i].p);
    b[i].logp = sqlite3_malloc64((size_t)k * sizeof *b[i].logp);
  }
  if (!pos || !ids || !seqs || !top || !ext || !b[0].tok || !b[0].p || !b[0].logp || !b[1].tok ||
      !b[1].p || !b[1].logp) {
    bfx_err_nomem(e);
    rc = SQLITE_NOMEM;
    goto done;
  }
  int32_t mask_id = mask_positions(m, t, pos);
  beam *cur = &b[0], *next = &b[1];
  cur->nh = 1; /* the empty fill */
  cur->logp[0] = 0.0;

  for (int i = 0; i < n; i++) {
    /* 1. the text of every hypothesis through the encoder: top k at each mask */
    hypothesis_texts(t, pos, mask_id, cur->nh, cur->tok, i, ids, seqs);
    rc = encode_in_runs(m, cur->nh, seqs, k, top, NULL, NULL, tm, e);
    if (rc != SQLITE_OK) goto done;

    /* 2. every hypothesis extended by each of its top k at m_i (the first
    ** mask still open in its text) */
    int ne = 0;
    size_t at = 0; /* masks of the texts before h */
    for (int h = 0; h < cur->nh; h++) {
      const int32_t *prefix = cur->tok + (size_t)h * n;
      const bf_cand *c = top + (at + (size_t)open_mask(prefix, i, mask_id)) * (size_t)k;
      at += (size_t)seqs[h].n_masks;
      for (int r = 0; r < k; r++)
        ext[ne++] = (extension){.logp = cur->logp[h] + log((double)c[r].prob),
                                .prefix = prefix,
                                .len = i,
                                .from = h,
                                .id = c[r].id,
                                .p = c[r].prob};
    }

    /* 3. the k best become the next beam */
    qsort(ext, (size_t)ne, sizeof *ext, extension_cmp);
    next->nh = ne < k ? ne : k;
    for (int j = 0; j < next->nh; j++) {
      const extension *x = &ext[j];
      size_t to = (size_t)j * n, from = (size_t)x->from * n;
      memcpy(next->tok + to, cur->tok + from, (size_t)i * sizeof *next->tok);
      memcpy(next->p + to, cur->p + from, (size_t)i * sizeof *next->p);
      next->tok[to + i] = x->id;
      next->p[to + i] = x->p;
      next->logp[j] = x->logp;
    }
    beam *swap = cur;
    cur = next;
    next = swap;
  }
  /* k <= vocabulary: step 1 gives k hypotheses and every later step k x k
  ** extensions, so the beam is full */
  for (int row = 0; row < k; row++)
    for (int i = 0; i < n; i++)
      out[(size_t)i * k + row] = (bf_cand){.id = cur->tok[(size_t)row * n + i],
                                           .prob = cur->p[(size_t)row * n + i]};
done:
  sqlite3_free(pos);
  sqlite3_free(ids);
  sqlite3_free(seqs);
  sqlite3_free(top);
  sqlite3_free(ext);
  for (int i = 0; i < 2; i++) {
    sqlite3_free(b[i].tok);
    sqlite3_free(b[i].p);
    sqlite3_free(b[i].logp);
  }
  return rc;
}

/* ----------------------------------------------------------- chain rule */

/* p_i(answer_i) for i = 1..n (n = t->n_masks >= 1) into out[i]: text i has
** masks 1..i-1 filled with the answer, and the engine gives the
** probability of answer_i at its first open mask. */
static int chain_rule(bf_model *m, const bf_tokens *t, const int32_t *answer, bf_cand *out,
                      bfx_times *tm, bfx_err *e) {
  int n = t->n_masks, rc = SQLITE_OK;
  size_t total = (size_t)n * (size_t)n; /* at least the masks of all n texts */
  int *pos = sqlite3_malloc64((size_t)n * sizeof *pos);
  int32_t *ids = sqlite3_malloc64((size_t)n * (size_t)t->n * sizeof *ids);
  int32_t *tok = sqlite3_malloc64((size_t)n * (size_t)n * sizeof *tok);
  bf_tokens *seqs = sqlite3_malloc64((size_t)n * sizeof *seqs);
  int32_t *want = sqlite3_malloc64(total * sizeof *want);
  float *want_p = sqlite3_malloc64(total * sizeof *want_p);
  bf_cand *top1 = sqlite3_malloc64(total * sizeof *top1);
  if (!pos || !ids || !tok || !seqs || !want || !want_p || !top1) {
    bfx_err_nomem(e);
    rc = SQLITE_NOMEM;
    goto done;
  }
  int32_t mask_id = mask_positions(m, t, pos);
  for (int i = 0; i < n; i++) memcpy(tok + (size_t)i * n, answer, (size_t)n * sizeof *tok);
  for (int i = 0; i < n; i++)
    hypothesis_texts(t, pos, mask_id, 1, tok + (size_t)i * n, i, ids + (size_t)i * t->n, seqs + i);
  size_t at = 0; /* the masks of the texts before i */
  for (int i = 0; i < n; i++) {
    int open = open_mask(answer, i, mask_id);
    for (int j = 0; j < seqs[i].n_masks; j++) want[at + (size_t)j] = j == open ? answer[i] : -1;
    at += (size_t)seqs[i].n_masks;
  }
  rc = encode_in_runs(m, n, seqs, 1, top1, want, want_p, tm, e);
  if (rc != SQLITE_OK) goto done;
  at = 0;
  for (int i = 0; i < n; i++) {
    out[i] = (bf_cand){.id = answer[i], .prob = want_p[at + (size_t)open_mask(answer, i, mask_id)]};
    at += (size_t)seqs[i].n_masks;
  }
done:
  sqlite3_free(pos);
  sqlite3_free(ids);
  sqlite3_free(tok);
  sqlite3_free(seqs);
  sqlite3_free(want);
  sqlite3_free(want_p);
  sqlite3_free(top1);
  return rc;
}

/* ---------------------------------------------------------- the two calls */

/* res for t (rows per mask), empty; *key = t's memo key under tag and arg
** (followed by more[0..nmore)) when there is something to compute, else
** NULL (no mask).  SQLITE_OK or out of memory (a text too long for the model
** was refused when it was tokenized: bfx_tokenize_fill). */
static int start(const bf_tokens *t, int rows, int32_t tag, int32_t arg, const int32_t *more,
                 int nmore, bfx_result *res, bf_tokens *key, bfx_err *e) {
  memset(res, 0, sizeof *res);
  memset(key, 0, sizeof *key);
  res->k = rows;
  res->n_masks = t->n_masks;
  res->source = "none";
  if (t->n_masks == 0) return SQLITE_OK;
  key->ids = bfc_tagged_key(tag, arg, t->ids, t->n, more, nmore);
  if (!key->ids) {
    bfx_err_nomem(e);
    return SQLITE_NOMEM;
  }
  key->n = key->cap = t->n + nmore + 2;
  key->n_masks = t->n_masks;
  return SQLITE_OK;
}

/* The memo for key: SQLITE_OK with res->c set on a hit, res->c NULL and
** *cands (room for the result) on a miss. */
static int lookup(bfx_conn *c, bf_model *m, const bf_tokens *key, int rows, int why,
                  bfx_result *res, bf_cand **cands, bfx_err *e) {
  *cands = NULL;
  int hit = bfx_cache_get(c, m, key, rows, why == BFX_JOINT_PREFILL ? BFX_GET_KEEP : 0, res);
  if (hit == 1) res->k = rows; /* the key holds the rows: an entry never has more */
  if (hit == 1 && why == BFX_JOINT_CALL) bf_stats_add(BF_CT_JOINT_HITS, 1);
  if (hit == 0 && why == BFX_JOINT_CALL) bf_stats_add(BF_CT_JOINT_MISSES, 1);
  if (hit == 0) *cands = sqlite3_malloc64((size_t)key->n_masks * (size_t)rows * sizeof **cands);
  if (hit < 0 || (hit == 0 && !*cands)) {
    bfx_err_nomem(e);
    return SQLITE_NOMEM;
  }
  return SQLITE_OK;
}

/* After computing cands (rc): the result, stored in the memo. */
static int finish(bfx_conn *c, bf_model *m, const bf_tokens *key, int rows, bf_cand *cands, int rc,
                  bfx_result *res) {
  if (rc != SQLITE_OK) {
    sqlite3_free(cands);
    return rc;
  }
  res->source = "encoder";
  res->c = cands;
  bfx_cache_put(c, m, key, rows, cands, &res->times);
  return SQLITE_OK;
}

int bfx_joint_fill(bfx_conn *c, bf_model *m, const bf_tokens *t, int k, int why, bfx_result *res,
                   bfx_err *e) {
  int vocab = bf_model_config(m)->vocab_size;
  if (k > vocab) k = vocab;
  bf_tokens key;
  bf_cand *cands = NULL;
  int rc = start(t, k, BFC_TAG_SEQUENCES, k, NULL, 0, res, &key, e);
  if (rc == SQLITE_OK && key.ids) rc = lookup(c, m, &key, k, why, res, &cands, e);
  if (rc == SQLITE_OK && cands)
    rc = finish(c, m, &key, k, cands, beam_search(m, t, k, cands, &res->times, e), res);
  sqlite3_free(key.ids);
  return rc;
}

int bfx_joint_score(bfx_conn *c, bf_model *m, const bf_tokens *t, const int32_t *answer,
                    bfx_result *res, bfx_err *e) {
  bf_tokens key;
  bf_cand *cands = NULL;
  int rc = start(t, 1, BFC_TAG_SCORE, t->n, answer, t->n_masks, res, &key, e);
  if (rc == SQLITE_OK && key.ids) rc = lookup(c, m, &key, 1, BFX_JOINT_CALL, res, &cands, e);
  if (rc == SQLITE_OK && cands)
    rc = finish(c, m, &key, 1, cands, chain_rule(m, t, answer, cands, &res->times, e), res);
  sqlite3_free(key.ids);
  return rc;
}
