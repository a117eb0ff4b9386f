/*
** json.c — strict recursive-descent JSON parser.  See json.h for the API.
**
** The parser walks the input once with an explicit bounds check on every
** read (p < end), building json_value nodes as it goes.  On any error the
** partial tree is freed and err says where ("line L, column C (byte B)")
** and what went wrong.  Recursion depth is limited by JSON_MAX_DEPTH.
*/
#include "json.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
  const unsigned char *start, *p, *end;
  int depth;
  int oom;
  char *err;
  size_t errlen;
  int failed;
} parser;

static void fail_at(parser *ps, const unsigned char *at, const char *fmt, ...) {
  if (ps->failed) return;
  ps->failed = 1;
  if (!ps->err || ps->errlen == 0) return;
  /* line and column (in bytes, 1-based) of the offending position */
  size_t line = 1, col = 1;
  for (const unsigned char *q = ps->start; q < at; q++) {
    if (*q == '\n') {
      line++;
      col = 1;
    } else col++;
  }
  int n = snprintf(ps->err, ps->errlen, "line %zu, column %zu (byte %zu): ", line, col,
                   (size_t)(at - ps->start));
  if (n < 0 || (size_t)n >= ps->errlen) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ps->err + n, ps->errlen - (size_t)n, fmt, ap);
  va_end(ap);
}

static void fail_oom(parser *ps) {
  if (ps->failed) return;
  ps->failed = 1;
  ps->oom = 1;
  bf_errf(ps->err, ps->errlen, "out of memory while parsing JSON");
}

/* Describe the byte at p for error messages. */
static const char *what_at(parser *ps, const unsigned char *p, char buf[16]) {
  if (p >= ps->end) return "end of input";
  if (*p >= 0x20 && *p < 0x7f) {
    snprintf(buf, 16, "'%c'", *p);
    return buf;
  }
  snprintf(buf, 16, "byte 0x%02x", *p);
  return buf;
}

static void skip_ws(parser *ps) {
  while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
    ps->p++;
}

void json_free(json_value *v) {
  if (!v) return;
  if (v->type == JSON_ARRAY || v->type == JSON_OBJECT) {
    for (size_t i = 0; i < v->len; i++) {
      json_free(v->items[i]);
      if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->keylens);
  }
  free(v->str);
  free(v);
}

static json_value *new_value(parser *ps, json_type t) {
  json_value *v = calloc(1, sizeof *v);
  if (!v) {
    fail_oom(ps);
    return NULL;
  }
  v->type = t;
  return v;
}

/* ---- strings ---- */

/* Length of a valid UTF-8 sequence starting at p (p < end), or 0 if the
** bytes there are not valid UTF-8 (bf_utf8_invalid_at's rule: no overlongs,
** surrogates or code points beyond U+10FFFF). */
static int utf8_valid_len(const unsigned char *p, const unsigned char *end) {
  unsigned c = p[0];
  if (c < 0x80) return 1;
  int n = c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4; /* the length its lead byte says, if it is one */
  if (end - p < n) return 0;
  return bf_utf8_invalid_at((const char *)p, (size_t)n, NULL, 0) < 0 ? n : 0;
}

static int hex4(const unsigned char *p, unsigned *out) {
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    unsigned c = p[i], d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else return 0;
    v = v * 16 + d;
  }
  *out = v;
  return 1;
}

/* Parse a string at ps->p (which is at the opening quote).  The decoded
** bytes are never longer than the encoded ones, so one allocation of the
** raw length suffices. */
static char *parse_string(parser *ps, size_t *outlen) {
  const unsigned char *open = ps->p;
  ps->p++; /* the opening quote */
  /* find the closing quote first to size the buffer */
  const unsigned char *q = ps->p;
  while (q < ps->end && *q != '"') {
    if (*q == '\\') q++;
    q++;
  }
  if (q >= ps->end) {
    fail_at(ps, open, "unterminated string");
    return NULL;
  }
  unsigned char *buf = malloc((size_t)(q - ps->p) + 1), *o = buf;
  if (!buf) {
    fail_oom(ps);
    return NULL;
  }
  while (ps->p < ps->end && *ps->p != '"') {
    unsigned c = *ps->p;
    if (c < 0x20) {
      fail_at(ps, ps->p, "control character 0x%02x inside a string (must be escaped)", c);
      goto bad;
    }
    if (c == '\\') {
      const unsigned char *esc = ps->p;
      if (ps->end - ps->p < 2) {
        fail_at(ps, esc, "unterminated escape");
        goto bad;
      }
      unsigned e = ps->p[1];
      ps->p += 2;
      switch (e) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '/': *o++ = '/'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
          unsigned cp;
          if (ps->end - ps->p < 4 || !hex4(ps->p, &cp)) {
            fail_at(ps, esc, "bad \\u escape (need 4 hex digits)");
            goto bad;
          }
          ps->p += 4;
          if (cp >= 0xDC00 && cp <= 0xDFFF) {
            fail_at(ps, esc, "lone low surrogate \\u%04X", cp);
            goto bad;
          }
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            unsigned lo;
            if (ps->end - ps->p < 6 || ps->p[0] != '\\' || ps->p[1] != 'u' ||
                !hex4(ps->p + 2, &lo) || lo < 0xDC00 || lo > 0xDFFF) {
              fail_at(ps, esc, "high surrogate \\u%04X not followed by a low surrogate", cp);
              goto bad;
            }
            ps->p += 6;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          /* a \uXXXX escape is 6 bytes (12 for a pair) and decodes to at
          ** most 3 (4) bytes, so the buffer cannot overflow */
          o += bf_utf8_put(cp, (char *)o);
          break;
        }
        default:
          fail_at(ps, esc, "unknown escape \\%c", e >= 0x20 && e < 0x7f ? (int)e : '?');
          goto bad;
      }
      continue;
    }
    int n = utf8_valid_len(ps->p, ps->end);
    if (!n) {
      fail_at(ps, ps->p, "invalid UTF-8 inside a string");
      goto bad;
    }
    memcpy(o, ps->p, (size_t)n);
    o += n;
    ps->p += n;
  }
  ps->p++; /* closing quote */
  *o = 0;
  *outlen = (size_t)(o - buf);
  return (char *)buf;
bad:
  free(buf);
  return NULL;
}

/* ---- numbers ---- */

static locale_t c_locale;
static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;
static void make_c_locale(void) { c_locale = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0); }

static json_value *parse_number(parser *ps) {
  const unsigned char *s = ps->p, *p = s, *e = ps->end;
  int neg = 0, integral = 1;
  if (p < e && *p == '-') {
    neg = 1;
    p++;
  }
  if (p >= e || *p < '0' || *p > '9') {
    fail_at(ps, s, "bad number");
    return NULL;
  }
  if (*p == '0') {
    p++;
    if (p < e && *p >= '0' && *p <= '9') {
      fail_at(ps, s, "number with a leading zero");
      return NULL;
    }
  } else {
    while (p < e && *p >= '0' && *p <= '9') p++;
  }
  const unsigned char *int_end = p;
  if (p < e && *p == '.') {
    integral = 0;
    p++;
    if (p >= e || *p < '0' || *p > '9') {
      fail_at(ps, s, "bad number: digit expected after '.'");
      return NULL;
    }
    while (p < e && *p >= '0' && *p <= '9') p++;
  }
  if (p < e && (*p == 'e' || *p == 'E')) {
    integral = 0;
    p++;
    if (p < e && (*p == '+' || *p == '-')) p++;
    if (p >= e || *p < '0' || *p > '9') {
      fail_at(ps, s, "bad number: digit expected in exponent");
      return NULL;
    }
    while (p < e && *p >= '0' && *p <= '9') p++;
  }
  size_t n = (size_t)(p - s);
  if (integral && int_end - s - neg <= 15) {
    /* fast path: up to 15 digits is exact in a double and in int64 */
    int64_t acc = 0;
    for (const unsigned char *dg = s + neg; dg < int_end; dg++) acc = acc * 10 + (*dg - '0');
    json_value *v = new_value(ps, JSON_NUMBER);
    if (!v) return NULL;
    v->i = neg ? -acc : acc;
    v->num = neg ? (acc ? -(double)acc : -0.0) : (double)acc;
    v->is_int = 1;
    ps->p = p;
    return v;
  }
  char small[64], *tmp = n < sizeof small ? small : malloc(n + 1);
  if (!tmp) {
    fail_oom(ps);
    return NULL;
  }
  memcpy(tmp, s, n);
  tmp[n] = 0;
  pthread_once(&c_locale_once, make_c_locale);
  double d = c_locale ? strtod_l(tmp, NULL, c_locale) : strtod(tmp, NULL);
  if (tmp != small) free(tmp);
  if (!isfinite(d)) {
    fail_at(ps, s, "number out of range");
    return NULL;
  }
  json_value *v = new_value(ps, JSON_NUMBER);
  if (!v) return NULL;
  v->num = d;
  if (integral) {
    /* exact int64 from the digits, with overflow check */
    const unsigned char *dg = s + neg;
    uint64_t acc = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    int ok = 1;
    for (; dg < int_end; dg++) {
      unsigned dd = *dg - '0';
      if (acc > (lim - dd) / 10) {
        ok = 0;
        break;
      }
      acc = acc * 10 + dd;
    }
    if (ok) {
      v->is_int = 1;
      v->i = neg ? (acc == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)acc) : (int64_t)acc;
    }
  } else if (d == floor(d) && fabs(d) <= 9007199254740992.0) {
    v->is_int = 1; /* 768.0 or 7.68e2: an exact integer */
    v->i = (int64_t)d;
  }
  ps->p = p;
  return v;
}

/* ---- values ---- */

static json_value *parse_value(parser *ps);

static int push_item(parser *ps, json_value *c, size_t *cap, json_value *item, char *key,
                     size_t keylen) {
  if (c->len == *cap) {
    size_t nc = *cap ? *cap * 2 : 8;
    json_value **ni = realloc(c->items, nc * sizeof *ni);
    if (!ni) {
      fail_oom(ps);
      return 0;
    }
    c->items = ni;
    if (c->type == JSON_OBJECT) {
      char **nk = realloc(c->keys, nc * sizeof *nk);
      if (!nk) {
        fail_oom(ps);
        return 0;
      }
      c->keys = nk;
      size_t *nl = realloc(c->keylens, nc * sizeof *nl);
      if (!nl) {
        fail_oom(ps);
        return 0;
      }
      c->keylens = nl;
    }
    *cap = nc;
  }
  c->items[c->len] = item;
  if (c->type == JSON_OBJECT) {
    c->keys[c->len] = key;
    c->keylens[c->len] = keylen;
  }
  c->len++;
  return 1;
}

static json_value *parse_container(parser *ps, int is_obj) {
  const unsigned char *open = ps->p;
  if (++ps->depth > JSON_MAX_DEPTH) {
    fail_at(ps, open, "nested deeper than %d levels", JSON_MAX_DEPTH);
    return NULL;
  }
  json_value *c = new_value(ps, is_obj ? JSON_OBJECT : JSON_ARRAY);
  if (!c) return NULL;
  size_t cap = 0;
  char close = is_obj ? '}' : ']';
  char wb[16];
  ps->p++;
  skip_ws(ps);
  if (ps->p < ps->end && *ps->p == close) {
    ps->p++;
    ps->depth--;
    return c;
  }
  for (;;) {
    char *key = NULL;
    size_t keylen = 0;
    skip_ws(ps);
    if (is_obj) {
      if (ps->p >= ps->end || *ps->p != '"') {
        fail_at(ps, ps->p, "expected a member name (string) in object, found %s",
                what_at(ps, ps->p, wb));
        goto bad;
      }
      key = parse_string(ps, &keylen);
      if (!key) goto bad;
      skip_ws(ps);
      if (ps->p >= ps->end || *ps->p != ':') {
        fail_at(ps, ps->p, "expected ':' after member name, found %s", what_at(ps, ps->p, wb));
        free(key);
        goto bad;
      }
      ps->p++;
      skip_ws(ps);
    }
    json_value *item = parse_value(ps);
    if (!item) {
      free(key);
      goto bad;
    }
    if (!push_item(ps, c, &cap, item, key, keylen)) {
      json_free(item);
      free(key);
      goto bad;
    }
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == ',') {
      ps->p++;
      skip_ws(ps);
      if (ps->p < ps->end && *ps->p == close) {
        fail_at(ps, ps->p, "trailing comma before '%c'", close);
        goto bad;
      }
      continue;
    }
    if (ps->p < ps->end && *ps->p == close) {
      ps->p++;
      break;
    }
    if (ps->p >= ps->end)
      fail_at(ps, open, "unterminated %s (input ends before its '%c')", is_obj ? "object" : "array",
              close);
    else
      fail_at(ps, ps->p, "expected ',' or '%c' in %s, found %s", close, is_obj ? "object" : "array",
              what_at(ps, ps->p, wb));
    goto bad;
  }
  ps->depth--;
  return c;
bad:
  json_free(c);
  return NULL;
}

static json_value *parse_literal(parser *ps, const char *word, json_type t, int b) {
  size_t n = strlen(word);
  if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0) {
    fail_at(ps, ps->p, "invalid literal (expected %s)", word);
    return NULL;
  }
  ps->p += n;
  json_value *v = new_value(ps, t);
  if (v) v->b = b;
  return v;
}

static json_value *parse_value(parser *ps) {
  char wb[16];
  skip_ws(ps);
  if (ps->p >= ps->end) {
    fail_at(ps, ps->p, "expected a value, found end of input");
    return NULL;
  }
  switch (*ps->p) {
    case '{': return parse_container(ps, 1);
    case '[': return parse_container(ps, 0);
    case '"': {
      size_t len;
      char *s = parse_string(ps, &len);
      if (!s) return NULL;
      json_value *v = new_value(ps, JSON_STRING);
      if (!v) {
        free(s);
        return NULL;
      }
      v->str = s;
      v->len = len;
      return v;
    }
    case 't': return parse_literal(ps, "true", JSON_BOOL, 1);
    case 'f': return parse_literal(ps, "false", JSON_BOOL, 0);
    case 'n': return parse_literal(ps, "null", JSON_NULL, 0);
    default:
      if (*ps->p == '-' || (*ps->p >= '0' && *ps->p <= '9')) return parse_number(ps);
      fail_at(ps, ps->p, "expected a value, found %s", what_at(ps, ps->p, wb));
      return NULL;
  }
}

json_value *json_parse(const char *text, size_t len, char *err, size_t errlen) {
  parser ps = {0};
  ps.start = ps.p = (const unsigned char *)text;
  ps.end = ps.start + len;
  ps.err = err;
  ps.errlen = errlen;
  if (err && errlen) err[0] = 0;
  if (!text) {
    bf_errf(err, errlen, "no JSON text");
    return NULL;
  }
  /* a UTF-8 byte order mark is not JSON (RFC 8259 §8.1: MUST NOT add one) */
  json_value *v = parse_value(&ps);
  if (!v) return NULL;
  skip_ws(&ps);
  if (ps.p < ps.end) {
    char wb[16];
    fail_at(&ps, ps.p, "unexpected %s after the JSON value", what_at(&ps, ps.p, wb));
    json_free(v);
    return NULL;
  }
  return v;
}

int json_read_file(const char *path, unsigned char **out, size_t *len, char *err, size_t errlen) {
  *out = NULL;
  *len = 0;
  if (err && errlen) err[0] = 0;
  struct stat st;
  int fd = bf_open_regular(path, O_RDONLY, 0, &st);
  if (fd < 0) {
    int e = errno;
    bf_errf(err, errlen, "%s: %s", path, bf_open_failure(e));
    return e == ENOENT ? 0 : -1;
  }
  if ((uint64_t)st.st_size > JSON_MAX_FILE) {
    bf_errf(err, errlen, "%s: file too large (%lld bytes; limit %u)", path, (long long)st.st_size,
            JSON_MAX_FILE);
    close(fd);
    return -1;
  }
  size_t n = (size_t)st.st_size, got = 0;
  unsigned char *buf = malloc(n + 1);
  if (!buf) {
    bf_errf(err, errlen, "%s: out of memory", path);
    close(fd);
    return -1;
  }
  while (got < n) {
    ssize_t r = read(fd, buf + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  close(fd);
  if (got != n) {
    bf_errf(err, errlen, "%s: read error", path);
    free(buf);
    return -1;
  }
  buf[n] = 0;
  *out = buf;
  *len = n;
  return 1;
}

json_value *json_parse_file_text(const char *path, const char *text, size_t len, char *err,
                                 size_t errlen) {
  char msg[256];
  json_value *v = json_parse(text, len, msg, sizeof msg);
  if (!v) {
    if (len == 0) bf_errf(err, errlen, "%s: empty file (not JSON)", path);
    else bf_errf(err, errlen, "%s: not valid JSON: %s", path, msg);
  }
  return v;
}

json_value *json_parse_file(const char *path, char *err, size_t errlen) {
  unsigned char *buf;
  size_t n;
  if (json_read_file(path, &buf, &n, err, errlen) != 1) return NULL;
  json_value *v = json_parse_file_text(path, (const char *)buf, n, err, errlen);
  free(buf);
  return v;
}

/* ---- lookup ---- */

const json_value *json_get(const json_value *obj, const char *key) {
  if (!obj || obj->type != JSON_OBJECT || !key) return NULL;
  size_t kl = strlen(key);
  for (size_t i = obj->len; i-- > 0;)
    if (obj->keylens[i] == kl && memcmp(obj->keys[i], key, kl) == 0) return obj->items[i];
  return NULL;
}

static const json_value *get_present(const json_value *obj, const char *key) {
  const json_value *v = json_get(obj, key);
  return (v && v->type != JSON_NULL) ? v : NULL;
}

int json_get_int(const json_value *obj, const char *key, int64_t *out) {
  const json_value *v = get_present(obj, key);
  if (!v) return JSON_ABSENT;
  if (v->type != JSON_NUMBER || !v->is_int) return JSON_WRONG;
  *out = v->i;
  return JSON_OK;
}

int json_get_double(const json_value *obj, const char *key, double *out) {
  const json_value *v = get_present(obj, key);
  if (!v) return JSON_ABSENT;
  if (v->type != JSON_NUMBER) return JSON_WRONG;
  *out = v->num;
  return JSON_OK;
}

int json_get_bool(const json_value *obj, const char *key, int *out) {
  const json_value *v = get_present(obj, key);
  if (!v) return JSON_ABSENT;
  if (v->type != JSON_BOOL) return JSON_WRONG;
  *out = v->b;
  return JSON_OK;
}

int json_get_string(const json_value *obj, const char *key, const char **out) {
  const json_value *v = get_present(obj, key);
  if (!v) return JSON_ABSENT;
  if (v->type != JSON_STRING) return JSON_WRONG;
  *out = v->str;
  return JSON_OK;
}

size_t json_len(const json_value *v) {
  return (v && (v->type == JSON_ARRAY || v->type == JSON_OBJECT)) ? v->len : 0;
}

const json_value *json_at(const json_value *v, size_t i) {
  return i < json_len(v) ? v->items[i] : NULL;
}

const char *json_key(const json_value *v, size_t i, size_t *len) {
  if (!v || v->type != JSON_OBJECT || i >= v->len) return NULL;
  if (len) *len = v->keylens[i];
  return v->keys[i];
}

const char *json_type_a(json_type t) {
  switch (t) {
    case JSON_NULL: return "null";
    case JSON_BOOL: return "a boolean";
    case JSON_NUMBER: return "a number";
    case JSON_STRING: return "a string";
    case JSON_ARRAY: return "an array";
    case JSON_OBJECT: return "an object";
  }
  return "?";
}
