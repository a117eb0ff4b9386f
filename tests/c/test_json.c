/*
** test_json.c — the strict JSON reader (ext/engine/json.c).
**
**   test_json [SHARED_DATA_DIR]
**
** Valid and invalid documents with the expected value or the expected
** error position; with SHARED_DATA_DIR, also parses bert-base-chinese's
** config.json and tokenizer.json and checks facts about them that were
** read with Python's json module (vocab entry "[MASK]" is 103, 21128
** entries, entry 343 is U+2028).  Run by tests/c/t_c.sh model.
*/
#include "json.h"
#include "testlib.h"

#include <math.h>

static json_value *P(const char *s, char *err, size_t n) {
  return json_parse(s, strlen(s), err, n);
}

/* Parses and is a string equal to want (wlen bytes). */
static int str_is(const char *doc, const char *want, size_t wlen) {
  char err[200];
  json_value *v = P(doc, err, sizeof err);
  int ok = v && v->type == JSON_STRING && v->len == wlen && memcmp(v->str, want, wlen) == 0 &&
           v->str[wlen] == 0;
  if (!v) printf("# %s -> %s\n", doc, err);
  json_free(v);
  return ok;
}

/* Fails, and the message contains want. */
static int fails_with(const char *doc, size_t len, const char *want) {
  char err[200];
  memset(err, 'x', sizeof err);
  json_value *v = json_parse(doc, len, err, sizeof err);
  int ok = !v && memchr(err, 0, sizeof err) && strstr(err, want);
  if (!ok) printf("# '%.40s' -> %s\n", doc, v ? "(parsed)" : err);
  json_free(v);
  return ok;
}
#define FAILS(name, doc, want) CHECK(name, fails_with(doc, strlen(doc), want))

int main(int argc, char **argv) {
  char err[200];

  /* scalars */
  json_value *v = P(" \t\r\n-12.5e1 ", err, sizeof err);
  CHECK("number_exp", v && v->type == JSON_NUMBER && v->num == -125.0 && v->is_int && v->i == -125);
  json_free(v);
  v = P("0.1", err, sizeof err);
  CHECK("number_fraction", v && v->num == 0.1 && !v->is_int);
  json_free(v);
  v = P("9223372036854775807", err, sizeof err);
  CHECK("int64_max_exact", v && v->is_int && v->i == INT64_MAX);
  json_free(v);
  v = P("9223372036854775808", err, sizeof err);
  CHECK("int64_overflow_not_int", v && !v->is_int && v->num == 9223372036854775808.0);
  json_free(v);
  v = P("-9223372036854775808", err, sizeof err);
  CHECK("int64_min_exact", v && v->is_int && v->i == INT64_MIN);
  json_free(v);
  v = P("1e-12", err, sizeof err);
  CHECK("layer_norm_eps_value", v && v->num == 1e-12);
  json_free(v);
  v = P("true", err, sizeof err);
  CHECK("true", v && v->type == JSON_BOOL && v->b == 1);
  json_free(v);
  v = P("null", err, sizeof err);
  CHECK("null", v && v->type == JSON_NULL);
  json_free(v);

  /* strings */
  CHECK("string_escapes", str_is("\"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\"", "a\"b\\c/d\b\f\n\r\t", 12));
  CHECK("string_u_bmp", str_is("\"\\u4e2d\\u00E9\"", "\xe4\xb8\xad\xc3\xa9", 5));
  CHECK("string_surrogate_pair", str_is("\"\\ud83d\\ude00\"", "\xf0\x9f\x98\x80", 4));
  CHECK("string_u2028", str_is("\"\\u2028\"", "\xe2\x80\xa8", 3));
  CHECK("string_nul_escape_kept", str_is("\"a\\u0000b\"", "a\0b", 3));
  CHECK("string_raw_utf8",
        str_is("\"\xe4\xbb\x8a\xf0\x9f\x98\x80\"", "\xe4\xbb\x8a\xf0\x9f\x98\x80", 7));
  CHECK("string_empty", str_is("\"\"", "", 0));

  /* containers and lookup */
  v = P("{\"a\": [1, 2.5, \"x\", null, {\"b\": false}], \"n\": null, \"a2\": 3, \"a2\": 4, "
        "\"s\": \"t\", \"f\": 2.5}",
        err, sizeof err);
  CHECKF("object_parses", v != NULL, "%s", err);
  if (v) {
    const json_value *a = json_get(v, "a");
    CHECK("array_len", json_len(a) == 5 && json_at(a, 5) == NULL);
    CHECK("array_items", json_at(a, 0)->i == 1 && json_at(a, 1)->num == 2.5 &&
                           strcmp(json_at(a, 2)->str, "x") == 0 &&
                           json_at(a, 3)->type == JSON_NULL);
    int b = 1;
    CHECK("nested_get_bool", json_get_bool(json_at(a, 4), "b", &b) == JSON_OK && b == 0);
    int64_t i = 0;
    CHECK("duplicate_key_last_wins", json_get_int(v, "a2", &i) == JSON_OK && i == 4);
    CHECK("get_int_absent", json_get_int(v, "zz", &i) == JSON_ABSENT);
    CHECK("get_int_null_is_absent", json_get_int(v, "n", &i) == JSON_ABSENT);
    CHECK("get_int_wrong_type", json_get_int(v, "s", &i) == JSON_WRONG);
    CHECK("get_int_fraction_wrong", json_get_int(v, "f", &i) == JSON_WRONG);
    double d = 0;
    CHECK("get_double", json_get_double(v, "f", &d) == JSON_OK && d == 2.5);
    CHECK("get_double_from_int", json_get_double(v, "a2", &d) == JSON_OK && d == 4);
    const char *s = NULL;
    CHECK("get_string", json_get_string(v, "s", &s) == JSON_OK && strcmp(s, "t") == 0);
    CHECK("get_string_wrong", json_get_string(v, "a", &s) == JSON_WRONG);
    size_t kl = 0;
    CHECK("keys_in_order", strcmp(json_key(v, 0, &kl), "a") == 0 && kl == 1 &&
                             strcmp(json_key(v, 4, NULL), "s") == 0 &&
                             json_key(v, 6, NULL) == NULL);
    CHECK("get_on_non_object", json_get(a, "x") == NULL && json_get(NULL, "x") == NULL &&
                                 json_len(NULL) == 0 && json_key(a, 0, NULL) == NULL);
  }
  json_free(v);
  v = P("[[[]], {}]", err, sizeof err);
  CHECK("empty_containers", v && json_len(v) == 2 && json_len(json_at(v, 1)) == 0);
  json_free(v);

  /* errors, with positions */
  FAILS("err_trailing_comma_object", "{\"a\":1,}", "trailing comma");
  FAILS("err_trailing_comma_array", "[1,\n2,\n]", "line 3, column 1");
  FAILS("err_unterminated_array", "[1,2", "unterminated array");
  FAILS("err_unterminated_string", "\"abc", "unterminated string");
  FAILS("err_leading_zero", "012", "leading zero");
  FAILS("err_plus_sign", "+1", "expected a value");
  FAILS("err_bare_dot", "1.", "digit expected");
  FAILS("err_exponent", "1e", "digit expected in exponent");
  FAILS("err_nan", "NaN", "expected a value");
  FAILS("err_infinity_literal", "-Infinity", "bad number");
  FAILS("err_huge_number", "1e999", "out of range");
  FAILS("err_single_quotes", "{'a':1}", "member name");
  FAILS("err_comment", "[1 /* c */]", "expected ',' or ']'");
  FAILS("err_missing_colon", "{\"a\" 1}", "expected ':'");
  FAILS("err_control_char", "\"a\tb\"", "control character 0x09");
  FAILS("err_bad_escape", "\"\\x41\"", "unknown escape \\x");
  FAILS("err_short_u_escape", "\"\\u12\"", "4 hex digits");
  FAILS("err_lone_high_surrogate", "\"\\ud800x\"", "not followed by a low surrogate");
  FAILS("err_lone_low_surrogate", "\"\\udc00\"", "lone low surrogate");
  FAILS("err_high_then_high", "\"\\ud800\\ud800\"", "not followed by a low surrogate");
  FAILS("err_invalid_utf8", "\"\xc3\x28\"", "invalid UTF-8");
  FAILS("err_overlong_utf8", "\"\xc0\xaf\"", "invalid UTF-8");
  FAILS("err_utf8_surrogate", "\"\xed\xa0\x80\"", "invalid UTF-8");
  FAILS("err_truncated_utf8", "\"\xe4\xb8\"", "invalid UTF-8");
  FAILS("err_trailing_garbage", "{} x", "after the JSON value");
  FAILS("err_two_values", "1 2", "line 1, column 3 (byte 2)");
  FAILS("err_empty", "", "end of input");
  FAILS("err_only_ws", "  \n ", "line 2, column 2");
  FAILS("err_bad_literal", "tru", "expected true");
  FAILS("err_bom", "\xef\xbb\xbf{}", "expected a value");
  CHECK("err_nul_inside", fails_with("[1,\0 2]", 7, "byte 0x00"));
  CHECK("err_len_respected", fails_with("[1,2]", 4, "unterminated array"));
  CHECK("null_text", json_parse(NULL, 0, err, sizeof err) == NULL && err[0]);

  /* depth limit: JSON_MAX_DEPTH levels parse, one more does not */
  char deep[2 * (JSON_MAX_DEPTH + 1) + 1];
  for (int d = JSON_MAX_DEPTH; d <= JSON_MAX_DEPTH + 1; d++) {
    memset(deep, '[', (size_t)d);
    memset(deep + d, ']', (size_t)d);
    deep[2 * d] = 0;
    v = P(deep, err, sizeof err);
    if (d == JSON_MAX_DEPTH) CHECKF("depth_limit_ok", v != NULL, "%s", err);
    else
      CHECKF("depth_limit_exceeded", !v && strstr(err, "nested deeper"), "%s", v ? "parsed" : err);
    json_free(v);
  }
  /* very deep input (no stack overflow) */
  size_t big = 1000000;
  char *huge = malloc(big);
  if (huge) {
    memset(huge, '[', big);
    CHECK("very_deep_input_rejected", fails_with(huge, big, "nested deeper"));
    free(huge);
  }
  /* tiny error buffers */
  char tiny[4];
  memset(tiny, 'x', sizeof tiny);
  v = json_parse("[", 1, tiny, sizeof tiny);
  CHECK("error_small_buffer", !v && tiny[3] == 0);
  CHECK("error_null_buffer", json_parse("[", 1, NULL, 0) == NULL);

  /* files */
  CHECK("file_missing", json_parse_file("/nonexistent/x.json", err, sizeof err) == NULL &&
                          strstr(err, "/nonexistent/x.json") && strstr(err, "No such file"));
  CHECK("file_directory",
        json_parse_file("/", err, sizeof err) == NULL && strstr(err, "not a regular file"));
  const char *shared = argc > 1 ? argv[1] : NULL;
  char path[1024];
  if (!shared) {
    SKIP("file_config_json", "no shared data dir given");
    SKIP("file_tokenizer_json", "no shared data dir given");
  } else {
    snprintf(path, sizeof path, "%s/bert-base-chinese/config.json", shared);
    v = json_parse_file(path, err, sizeof err);
    if (!v) SKIP("file_config_json", err);
    else {
      int64_t h = 0, V = 0;
      double eps = 0;
      const char *act = NULL;
      CHECK("file_config_json",
            json_get_int(v, "hidden_size", &h) == JSON_OK && h == 768 &&
              json_get_int(v, "vocab_size", &V) == JSON_OK && V == 21128 &&
              json_get_double(v, "layer_norm_eps", &eps) == JSON_OK && eps == 1e-12 &&
              json_get_string(v, "hidden_act", &act) == JSON_OK && strcmp(act, "gelu") == 0);
      json_free(v);
    }
    snprintf(path, sizeof path, "%s/bert-base-chinese/tokenizer.json", shared);
    v = json_parse_file(path, err, sizeof err);
    if (!v) SKIP("file_tokenizer_json", err);
    else {
      const json_value *voc = json_get(json_get(v, "model"), "vocab");
      int64_t mask = -1;
      size_t kl = 0;
      const char *k343 = json_key(voc, 343, &kl);
      CHECK("file_tokenizer_json", json_len(voc) == 21128 &&
                                     json_get_int(voc, "[MASK]", &mask) == JSON_OK && mask == 103 &&
                                     k343 && kl == 3 && memcmp(k343, "\xe2\x80\xa8", 3) == 0 &&
                                     json_at(voc, 343)->i == 343);
      json_free(v);
    }
  }
  TL_EXIT();
}
