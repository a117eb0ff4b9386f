/*
** text.h — text in and out of the SQL functions: reading arguments (text
** and integers), the positions of the literal "[MASK]"s, turning a text
** into the model's tokens, and returning built text as a result (JSON
** strings included: what bert_tokenize, bert_debug, bert_stats return is
** written with sqlite3_str and bfx_json_string).
*/
#ifndef BERTFILL_SQLITE_TEXT_H
#define BERTFILL_SQLITE_TEXT_H

#include <stdint.h>
#include "sqlite3ext.h"
#include "bertfill.h"
#include "errors.h"

/* The text of argument v as UTF-8 bytes: text as is, numbers as SQLite
** converts them, blobs as raw bytes.  Returns 1, or 0 for NULL (*p = NULL),
** or -1 when out of memory. */
int bfx_arg_text(sqlite3_value *v, const char **p, int *n);

/* 1 with *out when v is an integer from lo to hi (a float with an integral
** value counts, within +-BFX_INT_ARG_FLOAT_BOUND, bounds.h); 0 otherwise.
** The caller reports the error with bfx_int_arg_msg. */
int bfx_arg_int(sqlite3_value *v, sqlite3_int64 lo, sqlite3_int64 hi, sqlite3_int64 *out);

/* How argument v is shown in the "(got ...)" of an error message, in q:
** numbers and text as SQLite writes them, quoted with bfx_quoted (errors.h:
** invalid UTF-8 escaped, long text cut), "NULL", or "a blob".  Returns q->s. */
const char *bfx_arg_shown(sqlite3_value *v, bfx_quote *q);

/* The one shape of the error for an integer argument (or setting) that is
** out of range or not an integer, sqlite3_malloc'ed (NULL: out of memory):
**   FNAME: WHAT must be an integer from LO[ (LO_MEANS)] to HI[ (HI_MEANS)] (got V)
** e.g. "bert_threads: the number of threads must be an integer from 0 (one
** per core) to 64 (got 1000)".  lo_means and hi_means may be NULL. */
char *bfx_int_arg_msg(const char *fname, const char *what, sqlite3_int64 lo, const char *lo_means,
                      sqlite3_int64 hi, const char *hi_means, sqlite3_value *v);

/* The mode argument of bert_fill(text, 'joint') and bert_prefill(text,
** 'joint'): 1 for 'joint' (any letter case), 0 for NULL, -1 with e set
** ("fname: the second argument must be 'joint' ...") for anything else. */
int bfx_arg_joint(sqlite3_value *v, const char *fname, bfx_err *e);

/* Byte offsets of the literal "[MASK]" occurrences (left to right, not
** overlapping); writes at most max, returns how many there are. */
int bfx_mask_offsets(const char *s, int n, int *off, int max);

/* The byte offsets in s[0..n) of the t->n_masks mask tokens of t (its
** tokens for model m, bfx_tokenize) into off, from the tokens' spans: each must be a
** literal "[MASK]" of the text (else the error, prefixed "fname: ", says
** how many the text writes and how many the tokenizer found). */
int bfx_find_masks(const char *fname, bf_model *m, const char *s, int n, const bf_tokens *t,
                   int *off, bfx_err *e);

/* Tokenize s[0..n) for model m (the tokenizer is the one UTF-8 check:
** invalid UTF-8 is "fname: invalid UTF-8 at byte N of the text (byte value
** 0xFF)").  fname prefixes messages; the time taken is added to *ns (may be
** NULL) and to the tokenize stage. */
int bfx_tokenize(const char *fname, bf_model *m, const char *s, int n, bf_tokens *t, uint64_t *ns,
                 bfx_err *e);
/* bfx_tokenize for another part of a call than its text: part names it in
** the UTF-8 error ("the answer"). */
int bfx_tokenize_part(const char *fname, const char *part, bf_model *m, const char *s, int n,
                      bf_tokens *t, uint64_t *ns, bfx_err *e);
/* bfx_tokenize for the text of a fill function: also an error (counted as
** err_input) when the text holds a look-alike of [MASK] (bf_mask_lookalike:
** "［MASK］", "[mask]", "[ MASK ]", "[MA" U+200B "SK]", "[MÁSK]"...), which
** would otherwise be left silently unfilled; the message quotes it, gives its
** character position (from 1, as substr() counts) and byte offset, lists its
** characters that do not show as what they are ("it has U+200B") and says
** what to write.  And an error (counted as err_toolong) when the text has a
** mask and more tokens than the model takes (bfx_max_tokens): it gives both
** lengths, how many too many, and the part to keep as substr(text, FROM,
** LEN), the most tokens that fit around the masks (or, when the masks are
** further apart than that, says to fill them apart); the one length check of
** every fill function.  bert_tokenize uses bfx_tokenize: it shows tokens as
** they are, at any length. */
int bfx_tokenize_fill(const char *fname, bf_model *m, const char *s, int n, bf_tokens *t,
                      uint64_t *ns, bfx_err *e);
/* The model's limit on tokens per sequence ([CLS] and [SEP] included). */
int bfx_max_tokens(bf_model *m);

/* Append s[0..n) to out with its i-th "[MASK]" (at byte off[i]) replaced by
** token c[i * stride].id as displayed (bf_model_token), for i < n_masks. */
void bfx_append_filled(sqlite3_str *out, bf_model *m, const char *s, int n, const int *off,
                       int n_masks, const bf_cand *c, size_t stride);

/* The text built in s as the result of ctx (s is finished), or out of
** memory when building it failed. */
void bfx_result_str(sqlite3_context *ctx, sqlite3_str *s);

/* z (NULL: "") as a JSON string, quotes included: '"', '\\' and control
** characters escaped, U+2028 / U+2029 as \u escapes (safe in JavaScript). */
void bfx_json_string(sqlite3_str *out, const char *z);

#endif
