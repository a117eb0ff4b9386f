/*
** wholeword.c — the scalar SQL functions of whole-word fills, where the
** [MASK]s of a text are one blank (an idiom's missing characters, a word):
**
**   bert_score(text, answer)  the probability P that answer fills the masks,
**                             by the chain rule (joint.h): a REAL in [0, 1]
**   bert_fill(text, 'joint')  the text with every mask filled by the best
**                             whole fill: rank 1 of fill_sequences(text, 5)
**
**   SELECT bert_score('不能三天打鱼，两天[MASK][MASK]。', '晒网');
**   SELECT q.id, bert_score(q.text, q.answer) FROM quiz q;   -- an answer key
**   SELECT a, bert_score('这件事已经[MASK]木难支', a) AS p
**     FROM (VALUES ('独'), ('孤'), ('单')) ORDER BY p DESC;  -- rank answers
**
** The answer is either
**   - text, tokenized like the text (without [CLS] and [SEP]): '晒网' is
**     晒 then 网, 'running' may be run, ##ning; or
**   - a JSON array of tokens as the vocabulary has them (what
**     bert_tokenize and fill_sequences.tokens show): '["晒","网"]',
**     '["run","##ning"]'.  An answer whose first non-blank character is '['
**     and that is valid JSON is read this way; anything else is text.
** Its tokens fill the masks in order; their number must be the number of
** masks:  bert_score: the answer '晒网了' is 3 tokens but the text has 2 [MASK]s
** A NULL text or answer gives NULL; so does bert_fill(text, NULL).
** Results are memoized (cache.h) under the model, the tokens and the answer.
*/
#include <stdio.h>
#include <string.h>

#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3
#include "wholeword.h"
#include "bounds.h"
#include "conn.h"
#include "errors.h"
#include "joint.h"
#include "lookup.h"
#include "stats.h"
#include "text.h"
#include "util.h"

/* The answer s[0..n) as token ids (*ids, sqlite3_malloc'ed; *count of
** them), by the rule of the header.  *not_json: why an answer that starts
** with '[' was read as text (for the count error), else "". */
static int answer_tokens(bf_model *m, const char *s, int n, int32_t **ids, int *count,
                         char *not_json, size_t not_json_len, uint64_t *tok_ns, bfx_err *e) {
  *ids = NULL;
  *count = 0;
  not_json[0] = 0;
  int i = 0;
  while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) i++;
  if (i < n && s[i] == '[') {
    bf_json_tokens jt;
    int rc = SQLITE_ERROR, as_text = 0;
    bfx_quote q;
    switch (bf_tokens_from_json(bf_model_tokenizer(m), s, (size_t)n, &jt)) {
      case BF_JT_NOT_ARRAY: /* read as text, below */
        snprintf(not_json, not_json_len, "%s", jt.why);
        as_text = 1;
        break;
      case BF_JT_NOT_STRING:
        bfx_errf(e, SQLITE_ERROR, BF_CT_ERR_INPUT,
                 "bert_score: item %zu of the answer is %s, not a token (a string)", jt.item,
                 jt.type);
        break;
      case BF_JT_NOT_TOKEN:
        bfx_errf(e, SQLITE_ERROR, BF_CT_ERR_INPUT,
                 "bert_score: item %zu of the answer, \"%s\", is not a token of the model's "
                 "vocabulary (give tokens as bert_tokenize shows them, or the answer as text)",
                 jt.item, bfx_quoted(&q, jt.token, (long)jt.token_len));
        break;
      case BF_JT_NOMEM:
        bfx_err_nomem(e);
        rc = SQLITE_NOMEM;
        break;
      case BF_JT_OK:
        *ids = sqlite3_malloc64((jt.n ? jt.n : 1) * sizeof **ids);
        if (!*ids) {
          bfx_err_nomem(e);
          rc = SQLITE_NOMEM;
        } else {
          memcpy(*ids, jt.ids, jt.n * sizeof **ids);
          *count = (int)jt.n;
          rc = SQLITE_OK;
        }
        break;
    }
    bf_json_tokens_free(&jt);
    if (!as_text) return rc;
  }
  bf_tokens t = {0};
  int rc = bfx_tokenize_part("bert_score", "the answer", m, s, n, &t, tok_ns, e);
  if (rc == SQLITE_OK) { /* without [CLS] and [SEP] */
    *count = t.n - 2;
    *ids = sqlite3_malloc64((size_t)(*count > 0 ? *count : 1) * sizeof **ids);
    if (!*ids) {
      bfx_err_nomem(e);
      rc = SQLITE_NOMEM;
    } else if (*count > 0) memcpy(*ids, t.ids + 1, (size_t)*count * sizeof **ids);
  }
  bf_tokens_free(&t);
  return rc;
}

/* ---- bert_score(text, answer) ---- */

void bfx_fn_score(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  (void)argc;
  static const bfx_call_kind kind = {"bert_score", "bert_score", BF_CT_JOINT_CALLS, BF_ST_JOINT};
  bfx_conn *c = sqlite3_user_data(ctx);
  const char *s, *as;
  int n, an;
  int a = bfx_arg_text(argv[0], &s, &n), b = a > 0 ? bfx_arg_text(argv[1], &as, &an) : 0;
  if (a < 0 || b < 0) {
    sqlite3_result_error_nomem(ctx);
    return;
  }
  if (a == 0 || b == 0) {
    sqlite3_result_null(ctx);
    return;
  }
  bfx_call call;
  bfx_result res;
  memset(&res, 0, sizeof res);
  int32_t *ans = NULL;
  int nans = 0, failed = 1;
  char not_json[200];
  if (bfx_call_begin(&call, c, &kind, s, n) != SQLITE_OK) goto done;
  if (answer_tokens(call.m, as, an, &ans, &nans, not_json, sizeof not_json, &call.tok_ns,
                    &call.e) != SQLITE_OK)
    goto done;
  int n_masks = call.t.n_masks;
  if (nans != n_masks || n_masks == 0) {
    bfx_quote q;
    bfx_errf(&call.e, SQLITE_ERROR, BF_CT_ERR_INPUT,
             "bert_score: the answer '%s' is %d token%s but the text has %d [MASK]%s%s%s%s",
             bfx_quoted(&q, as, an), nans, nans == 1 ? "" : "s", n_masks, n_masks == 1 ? "" : "s",
             not_json[0] ? " (the answer was read as text: as JSON, " : "", not_json,
             not_json[0] ? ")" : "");
    goto done;
  }
  if (bfx_joint_score(c, call.m, &call.t, ans, &res, &call.e) != SQLITE_OK) goto done;
  sqlite3_result_double(ctx, bfx_joint_p(&res, 0));
  failed = 0;
done:
  if (failed) bfx_error(ctx, &call.e);
  bfx_call_end(&call, &res, failed);
  bfx_result_clear(&res);
  sqlite3_free(ans);
}

/* ---- bert_fill(text, 'joint') ---- */

/* The best whole fill: rank 1 of fill_sequences(text, BFX_DEFAULT_K). */
static int best_joint_fill(bfx_call *call, bfx_result *res) {
  return bfx_joint_fill(call->c, call->m, &call->t, BFX_DEFAULT_K, BFX_JOINT_CALL, res, &call->e);
}

void bfx_fn_fill_joint(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  (void)argc;
  static const bfx_call_kind kind = {"bert_fill", "bert_fill(joint)", BF_CT_JOINT_CALLS,
                                     BF_ST_JOINT};
  bfx_err e = BFX_ERR_NONE;
  const char *s;
  int n;
  int mode = bfx_arg_joint(argv[1], "bert_fill", &e);
  if (mode < 0) {
    bfx_error(ctx, &e);
    return;
  }
  int a = mode ? bfx_arg_text(argv[0], &s, &n) : 0;
  if (a < 0) {
    sqlite3_result_error_nomem(ctx);
    return;
  }
  if (a == 0) {
    sqlite3_result_null(ctx);
    return;
  }
  bfx_fill_text(ctx, sqlite3_user_data(ctx), &kind, s, n, best_joint_fill);
}
