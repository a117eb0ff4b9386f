/*
** text.c — text in and out of the SQL functions (see text.h).
*/
#include <stdio.h>
#include <string.h>

#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3
#include "text.h"
#include "bounds.h"
#include "stats.h"
#include "util.h"

int bfx_arg_text(sqlite3_value *v, const char **p, int *n) {
  *p = NULL;
  *n = 0;
  switch (sqlite3_value_type(v)) {
    case SQLITE_NULL: return 0;
    case SQLITE_BLOB: /* raw bytes, validated as UTF-8 later */
      *p = sqlite3_value_blob(v);
      *n = sqlite3_value_bytes(v);
      if (!*p) *p = "";
      return 1;
    default: /* text, or a number as SQLite writes it */
      *p = (const char *)sqlite3_value_text(v);
      *n = sqlite3_value_bytes(v);
      return *p ? 1 : -1; /* NULL here: out of memory */
  }
}

int bfx_arg_int(sqlite3_value *v, sqlite3_int64 lo, sqlite3_int64 hi, sqlite3_int64 *out) {
  int t = sqlite3_value_numeric_type(v);
  double d = sqlite3_value_double(v);
  sqlite3_int64 x;
  if (t == SQLITE_INTEGER) x = sqlite3_value_int64(v);
  else if (t == SQLITE_FLOAT && d >= -BFX_INT_ARG_FLOAT_BOUND && d <= BFX_INT_ARG_FLOAT_BOUND &&
           d == (double)(sqlite3_int64)d) /* the bound first: no UB cast of inf/huge */
    x = (sqlite3_int64)d;
  else return 0;
  if (x < lo || x > hi) return 0;
  *out = x;
  return 1;
}

const char *bfx_arg_shown(sqlite3_value *v, bfx_quote *q) {
  switch (sqlite3_value_type(v)) {
    case SQLITE_NULL: return bfx_quoted(q, "NULL", -1);
    case SQLITE_BLOB: return bfx_quoted(q, "a blob", -1);
    default: break;
  }
  const char *z = (const char *)sqlite3_value_text(v);
  return bfx_quoted(q, z ? z : "", z ? sqlite3_value_bytes(v) : 0);
}

char *bfx_int_arg_msg(const char *fname, const char *what, sqlite3_int64 lo, const char *lo_means,
                      sqlite3_int64 hi, const char *hi_means, sqlite3_value *v) {
  bfx_quote q;
  const char *got = bfx_arg_shown(v, &q);
  return sqlite3_mprintf("%s: %s must be an integer from %lld%s%s%s to %lld%s%s%s (got %s)", fname,
                         what, (long long)lo, lo_means ? " (" : "", lo_means ? lo_means : "",
                         lo_means ? ")" : "", (long long)hi, hi_means ? " (" : "",
                         hi_means ? hi_means : "", hi_means ? ")" : "", got);
}

int bfx_arg_joint(sqlite3_value *v, const char *fname, bfx_err *e) {
  bfx_quote q;
  if (sqlite3_value_type(v) == SQLITE_NULL) return 0;
  const char *z = (const char *)sqlite3_value_text(v);
  if (z && sqlite3_stricmp(z, "joint") == 0) return 1;
  if (!z) bfx_err_nomem(e);
  else
    bfx_errf(e, SQLITE_ERROR, BF_CT_ERR_INPUT,
             "%s: the second argument must be 'joint' (got '%s'); %s(text) fills each "
             "[MASK] on its own",
             fname, bfx_quoted(&q, z, sqlite3_value_bytes(v)), fname);
  return -1;
}

int bfx_mask_offsets(const char *s, int n, int *off, int max) {
  int count = 0;
  for (int i = 0; i + BF_MASK_TEXT_LEN <= n;) {
    if (memcmp(s + i, BF_MASK_TEXT, BF_MASK_TEXT_LEN) == 0) {
      if (count < max) off[count] = i;
      count++;
      i += BF_MASK_TEXT_LEN;
    } else {
      i++;
    }
  }
  return count;
}

int bfx_find_masks(const char *fname, bf_model *m, const char *s, int n, const bf_tokens *t,
                   int *off, bfx_err *e) {
  int32_t mask_id = bf_tokenizer_mask_id(bf_model_tokenizer(m));
  int found = 0;
  for (int i = 0; i < t->n && found < t->n_masks; i++) {
    if (t->ids[i] != mask_id) continue;
    const bf_span *sp = &t->span[i];
    if (sp->end - sp->start != BF_MASK_TEXT_LEN || sp->end > n ||
        memcmp(s + sp->start, BF_MASK_TEXT, BF_MASK_TEXT_LEN) != 0)
      break; /* a mask token that is not a literal "[MASK]" of the text */
    off[found++] = sp->start;
  }
  if (found == t->n_masks) return SQLITE_OK;
  bfx_errf(e, SQLITE_ERROR, BF_CT_ERR_INPUT,
           "%s: the text has %d \"[MASK]\" but the tokenizer found %d mask tokens", fname,
           bfx_mask_offsets(s, n, NULL, 0), t->n_masks);
  return SQLITE_ERROR;
}

int bfx_max_tokens(bf_model *m) { return bf_model_config(m)->max_position_embeddings; }

/* The remedy of a text too long for the model, in buf: the part to keep,
** as SQL's substr(text, FROM, LEN) in characters, a window of the most
** tokens that fit (all but [CLS] and [SEP]) around its masks (centred on
** them, moved inside the text), starting on a word (not on a "##" piece);
** or, when its masks are further apart than that, to fill them apart. */
static void length_remedy(bf_model *m, const char *s, const bf_tokens *t, char *buf, size_t len) {
  int keep = bfx_max_tokens(m) - 2; /* text tokens that fit */
  int last = t->n - 2;              /* the text's tokens are 1..last */
  int32_t mask_id = bf_tokenizer_mask_id(bf_model_tokenizer(m));
  int first_mask = 0, last_mask = 0;
  for (int i = 1; i <= last; i++)
    if (t->ids[i] == mask_id) {
      if (!first_mask) first_mask = i;
      last_mask = i;
    }
  if (keep < 1) { /* a config that leaves no room: nothing to keep */
    snprintf(buf, len, "the model takes no text besides [CLS] and [SEP]");
    return;
  }
  if (first_mask && last_mask - first_mask + 1 > keep) {
    snprintf(buf, len, "its [MASK]s span %d tokens, more than %d: fill them in separate texts",
             last_mask - first_mask + 1, keep);
    return;
  }
  int from = 1;
  if (first_mask) from = first_mask - (keep - (last_mask - first_mask + 1)) / 2;
  if (from > last - keep + 1) from = last - keep + 1;
  if (from < 1) from = 1;
  int stop = first_mask ? first_mask : last;
  while (from < stop) { /* a word's continuation ("##ing") does not start a text */
    const char *tok = bf_tokenizer_token(bf_model_tokenizer(m), t->ids[from]);
    if (!tok || strncmp(tok, "##", 2) != 0) break;
    from++;
  }
  int to = from + keep - 1 < last ? from + keep - 1 : last;
  const bf_span *a = &t->span[from], *b = &t->span[to];
  snprintf(buf, len, "keep substr(text, %ld, %ld), the %d tokens around its [MASK]",
           1 + bf_utf8_chars(s, (size_t)a->start),
           bf_utf8_chars(s + a->start, (size_t)(b->end - a->start)), to - from + 1);
}

/* SQLITE_OK when t has no mask (nothing to compute) or fits the model's
** limit; else the error (counted as err_toolong when reported): both
** lengths, how many tokens too many and which part to keep. */
static int check_length(const char *fname, bf_model *m, const char *s, const bf_tokens *t,
                        bfx_err *e) {
  if (t->n_masks == 0 || t->n <= bfx_max_tokens(m)) return SQLITE_OK;
  char remedy[160];
  length_remedy(m, s, t, remedy, sizeof remedy);
  bfx_errf(e, SQLITE_ERROR, BF_CT_ERR_TOOLONG,
           "%s: the text is %d tokens long ([CLS] and [SEP] included) but the model "
           "takes at most %d (max_position_embeddings): %d too many; %s",
           fname, t->n, bfx_max_tokens(m), t->n - bfx_max_tokens(m), remedy);
  return SQLITE_ERROR;
}

void bfx_append_filled(sqlite3_str *out, bf_model *m, const char *s, int n, const int *off,
                       int n_masks, const bf_cand *c, size_t stride) {
  int at = 0;
  for (int i = 0; i < n_masks; i++) {
    sqlite3_str_append(out, s + at, off[i] - at);
    const char *tok = bf_model_token(m, c[(size_t)i * stride].id);
    sqlite3_str_appendall(out, tok ? tok : "");
    at = off[i] + BF_MASK_TEXT_LEN;
  }
  sqlite3_str_append(out, s + at, n - at);
}

int bfx_tokenize_part(const char *fname, const char *part, bf_model *m, const char *s, int n,
                      bf_tokens *t, uint64_t *ns, bfx_err *e) {
  uint64_t t0 = bf_now_ns();
  char msg[256] = "";
  int rc = bf_tokenize(bf_model_tokenizer(m), s, n, t, msg, sizeof msg);
  if (rc == BF_ERR_INPUT && t->invalid_at >= 0 && t->invalid_at < n) {
    bfx_errf(e, SQLITE_ERROR, BF_CT_ERR_INPUT,
             "%s: invalid UTF-8 at byte %d of %s (byte value 0x%02X)", fname, t->invalid_at, part,
             (unsigned char)s[t->invalid_at]);
    return SQLITE_ERROR; /* not timed: as a text refused before tokenizing */
  }
  uint64_t dt = bf_now_ns() - t0;
  bf_stats_time(BF_ST_TOKENIZE, dt);
  if (ns) *ns += dt;
  if (rc != BF_OK) {
    bfx_err_engine(e, fname, rc, msg);
    return e->rc;
  }
  return SQLITE_OK;
}

int bfx_tokenize(const char *fname, bf_model *m, const char *s, int n, bf_tokens *t, uint64_t *ns,
                 bfx_err *e) {
  return bfx_tokenize_part(fname, "the text", m, s, n, t, ns, e);
}

int bfx_tokenize_fill(const char *fname, bf_model *m, const char *s, int n, bf_tokens *t,
                      uint64_t *ns, bfx_err *e) {
  int rc = bfx_tokenize(fname, m, s, n, t, ns, e);
  if (rc != SQLITE_OK) return rc;
  bf_lookalike la;
  if (bf_mask_lookalike(s, (size_t)n, &la) != BF_OK) {
    bfx_err_nomem(e);
    return SQLITE_NOMEM;
  }
  if (la.at < 0) return check_length(fname, m, s, t, e);
  char unplain[16 * BF_LOOKALIKE_SHOWN + 128] = ""; /* " (it has U+200B: ...)" */
  if (la.n_unplain > 0) {
    size_t k = (size_t)snprintf(unplain, sizeof unplain, " (it has");
    for (int i = 0; i < la.n_unplain && i < BF_LOOKALIKE_SHOWN; i++)
      k += (size_t)snprintf(unplain + k, sizeof unplain - k, " U+%04X", (unsigned)la.unplain[i]);
    snprintf(unplain + k, sizeof unplain - k,
             "%s: characters the tokenizer drops, or reads as a space or a plain letter)",
             la.n_unplain > BF_LOOKALIKE_SHOWN ? " ..." : "");
  }
  bfx_quote q;
  bfx_errf(e, SQLITE_ERROR, BF_CT_ERR_INPUT,
           "%s: the text holds '%s' at character %ld, byte %ld%s, which is not a mask and "
           "would be read as plain text: write %s (ASCII brackets, capital letters, no spaces) "
           "where a token should be filled",
           fname, bfx_quoted(&q, s + la.at, (long)la.len), 1 + bf_utf8_chars(s, (size_t)la.at),
           la.at, unplain, BF_MASK_TEXT);
  return SQLITE_ERROR;
}

void bfx_result_str(sqlite3_context *ctx, sqlite3_str *s) {
  int rc = sqlite3_str_errcode(s);
  int n = sqlite3_str_length(s);
  char *z = sqlite3_str_finish(s);
  if (rc != SQLITE_OK || !z) {
    sqlite3_free(z);
    sqlite3_result_error_nomem(ctx);
    return;
  }
  sqlite3_result_text(ctx, z, n, sqlite3_free);
}

void bfx_json_string(sqlite3_str *out, const char *z) {
  sqlite3_str_appendchar(out, 1, '"');
  for (const unsigned char *p = (const unsigned char *)(z ? z : ""); *p; p++) {
    unsigned c = *p;
    if (c == '"' || c == '\\') {
      sqlite3_str_appendchar(out, 1, '\\');
      sqlite3_str_appendchar(out, 1, (char)c);
    } else if (c == '\n') sqlite3_str_appendall(out, "\\n");
    else if (c == '\r') sqlite3_str_appendall(out, "\\r");
    else if (c == '\t') sqlite3_str_appendall(out, "\\t");
    else if (c < 0x20 || c == 0x7f) sqlite3_str_appendf(out, "\\u%04x", c);
    else if (c == 0xE2 && p[1] == 0x80 && (p[2] == 0xA8 || p[2] == 0xA9)) {
      sqlite3_str_appendf(out, "\\u%04x", p[2] == 0xA8 ? 0x2028 : 0x2029);
      p += 2;
    } else sqlite3_str_appendchar(out, 1, (char)c);
  }
  sqlite3_str_appendchar(out, 1, '"');
}
