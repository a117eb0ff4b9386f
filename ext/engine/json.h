/*
** json.h — a small, strict JSON reader (RFC 8259) for config.json,
** tokenizer_config.json, tokenizer.json and safetensors headers.
**
**   char err[256];
**   json_value *cfg = json_parse_file("model/config.json", err, sizeof err);
**   if (!cfg) { fprintf(stderr, "%s\n", err); return; }
**   int64_t h;
**   switch (json_get_int(cfg, "hidden_size", &h)) {
**     case JSON_OK:     ...use h...                 break;
**     case JSON_ABSENT: ...key missing or null...   break;
**     case JSON_WRONG:  ...present, not an integer... break;
**   }
**   const json_value *vocab = json_get(json_get(tj, "model"), "vocab");
**   for (size_t i = 0; i < json_len(vocab); i++)
**     use(json_key(vocab, i, NULL), json_at(vocab, i));
**   json_free(cfg);
**
** Strict: no comments, no trailing commas, no leading zeros, no NaN, no
** control characters inside strings, input must be valid UTF-8, \u escapes
** must form valid code points (surrogate pairs are combined; a lone
** surrogate is an error), nesting deeper than JSON_MAX_DEPTH is an error,
** nothing but whitespace may follow the value.  Errors say where:
** "line 3, column 17 (byte 41): expected ',' or '}' in object".
**
** The result is a tree of json_value nodes owned by the root; free the root
** with json_free.  Strings are NUL-terminated UTF-8 (a \u0000 escape is kept,
** so also use the length when that matters).  Object members keep their
** order; duplicate keys are kept, and json_get returns the last one (as
** Python's json module does).  Numbers are doubles; is_int says whether the
** number is an exact integer that fits in int64 (then i holds it exactly,
** even beyond 2^53).  Number parsing does not depend on the C locale.
** Parsed trees are immutable and may be read from several threads.
*/
#ifndef BERTFILL_JSON_H
#define BERTFILL_JSON_H

#include <stddef.h>
#include <stdint.h>

#define JSON_MAX_DEPTH 64
#define JSON_MAX_FILE (512u << 20) /* json_parse_file refuses larger files */

typedef enum { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } json_type;

typedef struct json_value json_value;
struct json_value {
  json_type type;
  int b;              /* JSON_BOOL: 0 or 1 */
  int is_int;         /* JSON_NUMBER: exact integer within int64 */
  double num;         /* JSON_NUMBER */
  int64_t i;          /* JSON_NUMBER when is_int */
  char *str;          /* JSON_STRING: NUL-terminated UTF-8 */
  size_t len;         /* JSON_STRING: bytes; ARRAY/OBJECT: members */
  char **keys;        /* JSON_OBJECT: member names (NUL-terminated) */
  size_t *keylens;    /* JSON_OBJECT: member name lengths */
  json_value **items; /* JSON_ARRAY / JSON_OBJECT: members */
};

/* Parse len bytes.  NULL on error (err: where and what) or out of memory. */
json_value *json_parse(const char *text, size_t len, char *err, size_t errlen);
/* Read and parse a file; errors start with the path as given
** ("dir/config.json: line 1, column 2 (byte 1): ...", "...: No such file"). */
json_value *json_parse_file(const char *path, char *err, size_t errlen);
/* Parse the len bytes of text that were read from the file path (when the
** caller needs the bytes too); errors as json_parse_file's. */
json_value *json_parse_file_text(const char *path, const char *text, size_t len, char *err,
                                 size_t errlen);
/* Read a whole regular file of at most JSON_MAX_FILE bytes into a malloc'ed,
** NUL-terminated buffer.  1: read; 0: it does not exist; -1: error.  err is
** set (naming the file) for 0 and -1. */
int json_read_file(const char *path, unsigned char **out, size_t *len, char *err, size_t errlen);
void json_free(json_value *v);

/* Return codes of the typed getters. */
enum { JSON_OK = 0, JSON_ABSENT = 1, JSON_WRONG = 2 };

/* Member of an object by name (last one if duplicated); NULL when obj is
** NULL, not an object, or has no such key. */
const json_value *json_get(const json_value *obj, const char *key);
/* Typed getters.  JSON_OK: *out set.  JSON_ABSENT: obj is not an object, the
** key is missing, or its value is null.  JSON_WRONG: present with another
** type (json_get_int: not an integer, or does not fit in int64). */
int json_get_int(const json_value *obj, const char *key, int64_t *out);
int json_get_double(const json_value *obj, const char *key, double *out);
int json_get_bool(const json_value *obj, const char *key, int *out);
int json_get_string(const json_value *obj, const char *key, const char **out);

/* Iteration.  json_len: members of an array/object, else 0.  json_at: i-th
** member (NULL if out of range).  json_key: i-th member name of an object
** (NULL if out of range); its length goes to *len when len is not NULL. */
size_t json_len(const json_value *v);
const json_value *json_at(const json_value *v, size_t i);
const char *json_key(const json_value *v, size_t i, size_t *len);

/* A type with an article, for messages: "an array", "a string", "null". */
const char *json_type_a(json_type t);

#endif
