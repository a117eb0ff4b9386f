/*
** test_errors.c — unit tests of the messages of the SQLite layer
** (ext/sqlite/errors.c): bfx_quoted escapes invalid UTF-8 and control
** characters as \xNN and cuts long input to its start and end between
** characters; bfx_errf leaves valid UTF-8 alone, escapes invalid bytes
** that reach it, and cuts a message too long for its buffer between
** characters.  Every result must be valid UTF-8.
** Links the SQLite layer's objects (see test_sqlite.h).
*/
#define SQLITE_CORE 1
#include "testlib.h"
#include "test_sqlite.h"
#include "bounds.h"
#include "errors.h"
#include "util.h"

static int valid(const char *s) { return bf_utf8_invalid_at(s, strlen(s), NULL, 0) < 0; }

int main(void) {
  if (!test_sqlite_api()) {
    printf("FAIL errors: no SQLite API\n");
    return 1;
  }
  bfx_quote q;
  CHECK("quote_plain", strcmp(bfx_quoted(&q, "abc 好", -1), "abc 好") == 0);
  CHECK("quote_invalid", strcmp(bfx_quoted(&q, "\xed\xa0\x80", 3), "\\xED\\xA0\\x80") == 0);
  CHECK("quote_controls_and_nul",
        strcmp(bfx_quoted(&q, "a\nb\0c\x7f", 6), "a\\x0Ab\\x00c\\x7F") == 0);
  CHECK("quote_truncated_char", strcmp(bfx_quoted(&q, "好\xe5\xa5", 5), "好\\xE5\\xA5") == 0);
  CHECK("quote_null", strcmp(bfx_quoted(&q, NULL, 3), "") == 0);

  char big[3 * 400 + 1];
  for (int i = 0; i < 400; i++) memcpy(big + 3 * i, "好", 3);
  big[1200] = 0;
  const char *z = bfx_quoted(&q, big, -1);
  const char *dots = strstr(z, "...");
  CHECKF("quote_long_cut",
         valid(z) && dots && strlen(z) <= BFX_QUOTE_MAX + 3 && strncmp(z, "好好好", 9) == 0 &&
           strcmp(z + strlen(z) - 3, "好") == 0,
         "%zu bytes: %s", strlen(z), z);
  char inval[400];
  memset(inval, 0xff, sizeof inval);
  z = bfx_quoted(&q, inval, sizeof inval);
  CHECKF("quote_long_invalid", valid(z) && strlen(z) == 4 * BFX_QUOTE_MAX + 3, "%zu", strlen(z));

  bfx_err e = BFX_ERR_NONE;
  bfx_errf(&e, SQLITE_ERROR, -1, "f: %s (got %s)", "ok", "好");
  CHECK("errf_plain", strcmp(e.msg, "f: ok (got 好)") == 0 && e.rc == SQLITE_ERROR);
  bfx_errf(&e, SQLITE_ERROR, -1, "engine: %s", "/m/\xff/x");
  CHECK("errf_escapes", strcmp(e.msg, "engine: /m/\\xFF/x") == 0);
  /* longer than the buffer: cut between characters, whatever the offset */
  int all_valid = 1;
  for (int pad = 0; pad < 3; pad++) {
    bfx_errf(&e, SQLITE_ERROR, -1, "%.*s%s", pad, "xx", big);
    all_valid &= valid(e.msg) && strlen(e.msg) < sizeof e.msg && strlen(e.msg) >= sizeof e.msg - 4;
  }
  CHECK("errf_long_cut_between_chars", all_valid);
  memset(inval, 0xe5, sizeof inval);
  inval[sizeof inval - 1] = 0;
  bfx_errf(&e, SQLITE_ERROR, -1, "%s%s%s", inval, inval, inval);
  CHECK("errf_long_invalid", valid(e.msg) && strlen(e.msg) < sizeof e.msg);
  TL_EXIT();
}
