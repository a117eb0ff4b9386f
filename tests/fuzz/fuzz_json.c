/*
** fuzz_json.c — the strict JSON reader (ext/engine/json.c) on arbitrary bytes.
**
** Invariants besides "no crash, no sanitizer report": an accepted document
** is valid UTF-8 and its tree respects the depth limit; every getter works
** on every node; and the tree written back as JSON (numbers as %.17g or as
** exact integers, strings escaped) parses again to an equal tree (numbers
** compared by value), and an exact integer's double equals the integer.
*/
#include <math.h>
#include "fuzz_common.h"
#include "json.h"

typedef struct { char *p; size_t n, cap; int oom; } buf;

static void put(buf *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->n + n + 1 > b->cap) {
    size_t cap = (b->cap + n + 1) * 2;
    char *p = realloc(b->p, cap);
    if (!p) { b->oom = 1; return; }
    b->p = p; b->cap = cap;
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = 0;
}

static void put_str(buf *b, const char *s, size_t n) {
  put(b, "\"", 1);
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    char e[8];
    if (c == '"' || c == '\\') { e[0] = '\\'; e[1] = (char)c; put(b, e, 2); }
    else if (c < 0x20) { snprintf(e, sizeof e, "\\u%04x", c); put(b, e, 6); }
    else put(b, (const char *)&c, 1);
  }
  put(b, "\"", 1);
}

static int finite_tree = 1;

static void write_value(buf *b, const json_value *v, int depth) {
  char num[64];
  FUZZ_CHECK(depth <= JSON_MAX_DEPTH + 1, "depth %d accepted", depth);
  switch (v->type) {
    case JSON_NULL: put(b, "null", 4); break;
    case JSON_BOOL: put(b, v->b ? "true" : "false", v->b ? 4 : 5); break;
    case JSON_NUMBER:
      FUZZ_CHECK(!v->is_int || v->num == (double)v->i, "is_int %lld but num %.17g", (long long)v->i, v->num);
      if (v->is_int) snprintf(num, sizeof num, "%lld", (long long)v->i);
      else { if (!isfinite(v->num)) finite_tree = 0; snprintf(num, sizeof num, "%.17g", v->num); }
      put(b, num, strlen(num));
      break;
    case JSON_STRING:
      FUZZ_CHECK(strlen(v->str) <= v->len && v->str[v->len] == 0, "string length %zu", v->len);
      put_str(b, v->str, v->len);
      break;
    case JSON_ARRAY:
      put(b, "[", 1);
      for (size_t i = 0; i < json_len(v); i++) {
        if (i) put(b, ",", 1);
        write_value(b, json_at(v, i), depth + 1);
      }
      FUZZ_CHECK(json_at(v, json_len(v)) == NULL, "json_at past the end");
      put(b, "]", 1);
      break;
    case JSON_OBJECT:
      put(b, "{", 1);
      for (size_t i = 0; i < json_len(v); i++) {
        size_t kl = 0;
        const char *k = json_key(v, i, &kl);
        FUZZ_CHECK(k != NULL, "no key %zu", i);
        if (i) put(b, ",", 1);
        put_str(b, k, kl);
        put(b, ":", 1);
        write_value(b, json_at(v, i), depth + 1);
        /* the getters must not crash whatever the member is */
        int64_t iv; double dv; int bv; const char *sv;
        if (strlen(k) == kl) {
          json_get_int(v, k, &iv); json_get_double(v, k, &dv);
          json_get_bool(v, k, &bv); json_get_string(v, k, &sv);
          FUZZ_CHECK(json_get(v, k) != NULL, "json_get misses key '%s'", k);
        }
      }
      FUZZ_CHECK(json_key(v, json_len(v), NULL) == NULL, "json_key past the end");
      put(b, "}", 1);
      break;
    default:
      FUZZ_CHECK(0, "bad type %d", (int)v->type);
  }
}

static int same(const json_value *a, const json_value *b) {
  if (a->type != b->type) return 0;
  switch (a->type) {
    case JSON_NULL: return 1;
    case JSON_BOOL: return a->b == b->b;
    case JSON_NUMBER:
      /* "-9223372036854775816" is no int64 (is_int 0) but its double, written
      ** back as -9.2233720368547758e+18, is exactly -2^63 (is_int 1): compare
      ** values, and the exact integers when both have one. */
      if (a->num != b->num) return 0;
      return !(a->is_int && b->is_int) || a->i == b->i;
    case JSON_STRING: return a->len == b->len && memcmp(a->str, b->str, a->len) == 0;
    case JSON_ARRAY: case JSON_OBJECT:
      if (json_len(a) != json_len(b)) return 0;
      for (size_t i = 0; i < json_len(a); i++) {
        if (a->type == JSON_OBJECT) {
          size_t la, lb;
          const char *ka = json_key(a, i, &la), *kb = json_key(b, i, &lb);
          if (la != lb || memcmp(ka, kb, la) != 0) return 0;
        }
        if (!same(json_at(a, i), json_at(b, i))) return 0;
      }
      return 1;
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char err[256];
  err[0] = 0;
  json_value *v = json_parse((const char *)data, size, err, sizeof err);
  if (!v) return 0;            /* rejected (or out of memory): fine */
  FUZZ_CHECK(fuzz_utf8_valid(data, size), "accepted invalid UTF-8");
  buf b = { 0 };
  finite_tree = 1;
  write_value(&b, v, 1);
  if (!b.oom && finite_tree) {
    char err2[256];
    json_value *w = json_parse(b.p, b.n, err2, sizeof err2);
    FUZZ_CHECK(w != NULL, "written-back JSON rejected: %s\n  text: %.300s", err2, b.p);
    FUZZ_CHECK(same(v, w), "written-back JSON parses to another tree\n  text: %.300s", b.p);
    json_free(w);
  }
  free(b.p);
  json_free(v);
  return 0;
}
