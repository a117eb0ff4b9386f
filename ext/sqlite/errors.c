/*
** errors.c — building and reporting the SQLite layer's errors (see errors.h).
** Every error is counted in the process-wide stats when it is reported.
** Every message is valid UTF-8: user input is quoted with bfx_quoted, and
** bfx_errf escapes any invalid byte that reaches it.
*/
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3
#include "errors.h"
#include "bertfill.h"
#include "stats.h"
#include "util.h"

/* Length of the UTF-8 character at p[0..n) (1 to 4), or 0 when p[0] does
** not start a valid one. */
static size_t char_len(const unsigned char *p, size_t n) {
  if (bf_utf8_invalid_at((const char *)p, n < 4 ? n : 4, NULL, 0) == 0) return 0;
  return p[0] < 0x80 ? 1 : p[0] < 0xE0 ? 2 : p[0] < 0xF0 ? 3 : 4;
}

/* Append s[0..n) to d (*len bytes so far, room for cap including the NUL),
** each invalid byte (and, with controls, each control character) as \xNN;
** stops before a character or escape that does not fit. */
static void append_escaped(char *d, size_t cap, size_t *len, const char *s, size_t n,
                           int controls) {
  const unsigned char *p = (const unsigned char *)s;
  for (size_t i = 0; i < n;) {
    size_t l = char_len(p + i, n - i);
    int esc = l == 0 || (controls && l == 1 && (p[i] < 0x20 || p[i] == 0x7F));
    size_t w = esc ? 4 : l;
    if (*len + w + 1 > cap) break;
    if (esc) snprintf(d + *len, 5, "\\x%02X", p[i]);
    else memcpy(d + *len, p + i, l);
    *len += w;
    i += esc ? 1 : l;
  }
  d[*len] = 0;
}

const char *bfx_quoted(bfx_quote *q, const char *s, long n) {
  size_t len = 0, cap = sizeof q->s;
  q->s[0] = 0;
  if (!s) return q->s;
  size_t sz = n < 0 ? strlen(s) : (size_t)n;
  if (sz <= BFX_QUOTE_MAX) {
    append_escaped(q->s, cap, &len, s, sz, 1);
    return q->s;
  }
  /* the start and the end, each cut between characters */
  const unsigned char *p = (const unsigned char *)s;
  size_t head = BFX_QUOTE_MAX / 2, tail = sz - BFX_QUOTE_MAX / 2;
  for (int i = 0; i < 3 && head > 0 && (p[head] & 0xC0) == 0x80; i++) head--;
  for (int i = 0; i < 3 && tail < sz && (p[tail] & 0xC0) == 0x80; i++) tail++;
  append_escaped(q->s, cap, &len, s, head, 1);
  append_escaped(q->s, cap, &len, "...", 3, 0);
  append_escaped(q->s, cap, &len, s + tail, sz - tail, 1);
  return q->s;
}

void bfx_errf(bfx_err *e, int rc, int kind, const char *fmt, ...) {
  char raw[sizeof e->msg];
  va_list ap;
  va_start(ap, fmt);
  e->rc = rc;
  e->kind = kind;
  int full = vsnprintf(raw, sizeof raw, fmt, ap);
  va_end(ap);
  size_t n = strlen(raw);
  if (full >= (int)sizeof raw) { /* cut: drop a character cut in two */
    size_t lead = n;
    while (lead > 0 && n - lead < 3 && ((unsigned char)raw[lead - 1] & 0xC0) == 0x80) lead--;
    if (lead > 0 && (unsigned char)raw[lead - 1] >= 0xC0 &&
        !char_len((unsigned char *)raw + lead - 1, n - lead + 1))
      n = lead - 1;
  }
  size_t len = 0;
  append_escaped(e->msg, sizeof e->msg, &len, raw, n, 0);
}

void bfx_err_nomem(bfx_err *e) { bfx_errf(e, SQLITE_NOMEM, BF_CT_ERR_NOMEM, "out of memory"); }

void bfx_err_engine(bfx_err *e, const char *fname, int rc, const char *msg) {
  int kind;
  switch (rc) {
    case BF_ERR_NOMEM: bfx_err_nomem(e); return;
    case BF_ERR_INPUT: kind = BF_CT_ERR_INPUT; break;
    case BF_ERR_TOOLONG: kind = BF_CT_ERR_TOOLONG; break;
    case BF_ERR_MODEL:
    case BF_ERR_IO: kind = BF_CT_ERR_MODEL; break;
    default: kind = BF_CT_ERR_OTHER; break;
  }
  bfx_errf(e, SQLITE_ERROR, kind, "%s: %s", fname, msg);
}

void bfx_err_count(const bfx_err *e) {
  if (e->kind >= 0) bf_stats_add((bf_counter)e->kind, 1);
}

void bfx_error(sqlite3_context *ctx, const bfx_err *e) {
  bfx_err_count(e);
  if (e->rc == SQLITE_NOMEM) sqlite3_result_error_nomem(ctx);
  else sqlite3_result_error(ctx, e->msg, -1);
}

int bfx_error_vtab(sqlite3_vtab *vt, const bfx_err *e) {
  bfx_err_count(e);
  if (e->rc == SQLITE_NOMEM) return SQLITE_NOMEM;
  sqlite3_free(vt->zErrMsg);
  vt->zErrMsg = sqlite3_mprintf("%s", e->msg);
  return SQLITE_ERROR;
}
