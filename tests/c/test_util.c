/*
** test_util.c — unit tests of ext/engine/util.c, the helpers every part of
** bertfill shares: the UTF-8 validator (valid text, and each kind of invalid
** sequence with its offset and its phrase) and encoder; the environment
** rule of bf_env_flag / bf_env_int (values taken, values ignored with the
** one stderr line, "12abc" among them); bf_path_join; bf_errf; the clock
** and the core count.
*/
#include <fcntl.h>
#include <stdint.h>
#include <unistd.h>

#include "testlib.h"
#include "util.h"

/* ---------------------------------------------------------------- UTF-8 */

/* bf_utf8_invalid_at on the n bytes of s: want_at (-1: valid) and, when
** invalid, want_why as the phrase. */
static void check_utf8(const char *name, const char *s, size_t n, long want_at,
                       const char *want_why) {
  char why[128] = "(unset)";
  long at = bf_utf8_invalid_at(s, n, why, sizeof why);
  if (want_at < 0) {
    CHECKF(name, at == -1, "invalid at %ld (%s), expected valid", at, why);
    return;
  }
  CHECKF(name, at == want_at && strcmp(why, want_why) == 0, "got %ld \"%s\", expected %ld \"%s\"",
         at, why, want_at, want_why);
}

static void test_utf8_valid(void) {
  check_utf8("utf8: empty text", "", 0, -1, NULL);
  check_utf8("utf8: NULL with n = 0", NULL, 0, -1, NULL);
  check_utf8("utf8: ASCII", "hello, world", 12, -1, NULL);
  check_utf8("utf8: NUL bytes are valid", "a\0b", 3, -1, NULL);
  check_utf8("utf8: 2, 3 and 4 bytes", "\xC2\xA9 \xE4\xB8\xAD \xF0\x9F\x98\x80", 11, -1, NULL);
  const char *zh = "今天天气真[MASK]啊";
  check_utf8("utf8: Chinese text", zh, strlen(zh), -1, NULL);
  check_utf8("utf8: U+0080 U+07FF U+0800", "\xC2\x80\xDF\xBF\xE0\xA0\x80", 7, -1, NULL);
  check_utf8("utf8: U+D7FF U+E000 around the surrogates", "\xED\x9F\xBF\xEE\x80\x80", 6, -1, NULL);
  check_utf8("utf8: U+FFFF U+10000 U+10FFFF", "\xEF\xBF\xBF\xF0\x90\x80\x80\xF4\x8F\xBF\xBF", 11,
             -1, NULL);
  check_utf8("utf8: only n bytes are read", "ab\xFF", 2, -1, NULL);
}

static void test_utf8_invalid(void) {
  check_utf8("utf8: stray continuation byte", "ab\x80z", 4, 2,
             "continuation byte 0x80 without a lead byte");
  check_utf8("utf8: continuation byte 0xBF first", "\xBF", 1, 0,
             "continuation byte 0xBF without a lead byte");
  check_utf8("utf8: overlong lead 0xC0", "x\xC0\xAF", 3, 1, "overlong encoding (lead byte 0xC0)");
  check_utf8("utf8: overlong lead 0xC1", "\xC1\xBF", 2, 0, "overlong encoding (lead byte 0xC1)");
  check_utf8("utf8: byte 0xF5", "\xF5\x80\x80\x80", 4, 0, "byte 0xF5 never appears in UTF-8");
  check_utf8("utf8: byte 0xFF", "ok\xFF", 3, 2, "byte 0xFF never appears in UTF-8");
  check_utf8("utf8: truncated by the end of the text", "x\xE4\xB8", 3, 1,
             "truncated sequence (lead byte 0xE4 needs 2 continuation bytes, the text ends)");
  check_utf8("utf8: truncated by n", "\xE4\xB8\xAD", 2, 0,
             "truncated sequence (lead byte 0xE4 needs 2 continuation bytes, the text ends)");
  check_utf8("utf8: 2-byte lead at the end", "ab\xC3", 3, 2,
             "truncated sequence (lead byte 0xC3 needs 1 continuation bytes, the text ends)");
  check_utf8("utf8: truncated by an ASCII byte", "\xE4\x41\x42", 3, 0,
             "truncated sequence (lead byte 0xE4 followed by 0x41)");
  check_utf8("utf8: 4-byte sequence cut by a lead byte", "\xF0\x9F\xE4\xB8\xAD", 5, 0,
             "truncated sequence (lead byte 0xF0 followed by 0xE4)");
  check_utf8("utf8: overlong 3-byte", "\xE0\x80\xAF", 3, 0, "overlong 3-byte encoding");
  check_utf8("utf8: overlong 3-byte U+07FF", "\xE0\x9F\xBF", 3, 0, "overlong 3-byte encoding");
  check_utf8("utf8: surrogate U+D800", "a\xED\xA0\x80", 4, 1, "UTF-16 surrogate U+D800");
  check_utf8("utf8: surrogate U+DFFF", "\xED\xBF\xBF", 3, 0, "UTF-16 surrogate U+DFFF");
  check_utf8("utf8: overlong 4-byte", "\xF0\x8F\xBF\xBF", 4, 0, "overlong 4-byte encoding");
  check_utf8("utf8: beyond U+10FFFF", "\xF4\x90\x80\x80", 4, 0, "code point beyond U+10FFFF");
  check_utf8("utf8: the first bad sequence counts", "\xE4\xB8\xAD\x80\xFF", 5, 3,
             "continuation byte 0x80 without a lead byte");

  CHECK("utf8: why may be NULL", bf_utf8_invalid_at("ab\x80", 3, NULL, 0) == 2);
  char small[8];
  memset(small, 'x', sizeof small);
  long at = bf_utf8_invalid_at("\xFF", 1, small, sizeof small);
  CHECKF("utf8: a short why buffer is cut and NUL-terminated",
         at == 0 && strcmp(small, "byte 0x") == 0, "got %ld \"%.8s\"", at, small);
}

static void test_utf8_put(void) {
  static const uint32_t cps[] = {0,      0x41,   0x7F,   0x80,    0x7FF,   0x800,   0x4E2D,
                                 0xD7FF, 0xE000, 0xFFFF, 0x10000, 0x1F600, 0x10FFFF};
  static const size_t lens[] = {1, 1, 1, 2, 2, 3, 3, 3, 3, 3, 4, 4, 4};
  int bad = 0;
  for (size_t i = 0; i < sizeof cps / sizeof cps[0]; i++) {
    char b[4];
    size_t n = bf_utf8_put(cps[i], b);
    if (n != lens[i] || bf_utf8_invalid_at(b, n, NULL, 0) != -1) bad++;
  }
  CHECKF("utf8: bf_utf8_put writes valid UTF-8 of the right length", bad == 0, "%d wrong", bad);
  char b[4];
  CHECK("utf8: bf_utf8_put U+4E2D is E4 B8 AD",
        bf_utf8_put(0x4E2D, b) == 3 && memcmp(b, "\xE4\xB8\xAD", 3) == 0);
  CHECK("utf8: bf_utf8_put U+1F600 is F0 9F 98 80",
        bf_utf8_put(0x1F600, b) == 4 && memcmp(b, "\xF0\x9F\x98\x80", 4) == 0);
}

/* ---------------------------------------------------------- environment */

/* Run fn; what it writes to stderr goes to captured (NUL-terminated). */
static char captured[512];
static int with_stderr_captured(int (*fn)(void)) {
  char path[] = "/tmp/bf_test_util_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) {
    captured[0] = 0;
    return fn();
  }
  unlink(path);
  fflush(stderr);
  int saved = dup(2);
  dup2(fd, 2);
  int v = fn();
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  ssize_t n = pread(fd, captured, sizeof captured - 1, 0);
  captured[n > 0 ? n : 0] = 0;
  close(fd);
  return v;
}

static int flag_default_7(void) { return bf_env_flag("BERTFILL_TEST_FLAG", 7); }
static int int_1_100_default_42(void) { return (int)bf_env_int("BERTFILL_TEST_INT", 1, 100, 42); }

/* BERTFILL_TEST_FLAG=value (NULL: unset) gives want, and writes to stderr
** the line of an ignored value (ignored) or nothing. */
static void check_flag(const char *value, int want, int ignored) {
  char name[96];
  snprintf(name, sizeof name, "env: BERTFILL_TEST_FLAG=%s%s%s", value ? "'" : "(unset)",
           value ? value : "", value ? "'" : "");
  if (value) setenv("BERTFILL_TEST_FLAG", value, 1);
  else unsetenv("BERTFILL_TEST_FLAG");
  int got = with_stderr_captured(flag_default_7);
  char line[256] = "";
  if (ignored)
    snprintf(line, sizeof line,
             "bertfill: ignoring BERTFILL_TEST_FLAG='%s': expected 1/on/true/yes or "
             "0/off/false/no\n",
             value);
  CHECKF(name, got == want && strcmp(captured, line) == 0,
         "got %d and stderr \"%s\", expected %d and \"%s\"", got, captured, want, line);
}

static void check_int(const char *value, int want, int ignored) {
  char name[96];
  snprintf(name, sizeof name, "env: BERTFILL_TEST_INT=%s%s%s", value ? "'" : "(unset)",
           value ? value : "", value ? "'" : "");
  if (value) setenv("BERTFILL_TEST_INT", value, 1);
  else unsetenv("BERTFILL_TEST_INT");
  int got = with_stderr_captured(int_1_100_default_42);
  char line[256] = "";
  if (ignored)
    snprintf(line, sizeof line,
             "bertfill: ignoring BERTFILL_TEST_INT='%s': expected a whole number from 1 to 100\n",
             value);
  CHECKF(name, got == want && strcmp(captured, line) == 0,
         "got %d and stderr \"%s\", expected %d and \"%s\"", got, captured, want, line);
}

static void test_env(void) {
  check_flag(NULL, 7, 0);
  check_flag("", 7, 0);
  check_flag("1", 1, 0);
  check_flag("on", 1, 0);
  check_flag("TRUE", 1, 0);
  check_flag("Yes", 1, 0);
  check_flag("0", 0, 0);
  check_flag("off", 0, 0);
  check_flag("False", 0, 0);
  check_flag("NO", 0, 0);
  check_flag("2", 7, 1);
  check_flag("12abc", 7, 1);
  check_flag("1 ", 7, 1);
  check_flag("enabled", 7, 1);
  unsetenv("BERTFILL_TEST_FLAG");

  check_int(NULL, 42, 0);
  check_int("", 42, 0);
  check_int("1", 1, 0);
  check_int("100", 100, 0);
  check_int("+7", 7, 0);
  check_int("12abc", 42, 1);
  check_int("abc", 42, 1);
  check_int("0", 42, 1);
  check_int("101", 42, 1);
  check_int("-5", 42, 1);
  check_int("1.5", 42, 1);
  check_int("0x10", 42, 1);
  check_int("99999999999999999999", 42, 1);
  unsetenv("BERTFILL_TEST_INT");

  setenv("BERTFILL_TEST_INT", "abc", 1); /* ignored above: said once, not again */
  int again = with_stderr_captured(int_1_100_default_42);
  CHECKF("env: the same ignored value is reported once per process",
         again == 42 && captured[0] == 0, "got %d and stderr \"%s\"", again, captured);
  setenv("BERTFILL_TEST_INT", "-5", 1);
  CHECK("env: bf_env_int takes a negative number inside the range",
        bf_env_int("BERTFILL_TEST_INT", -10, 10, 0) == -5);
  unsetenv("BERTFILL_TEST_INT");
}

/* ----------------------------------------------------------- path, errf */

static void check_join(const char *dir, const char *name, const char *want) {
  char label[128];
  snprintf(label, sizeof label, "path: bf_path_join(\"%s\", \"%s\") is \"%s\"", dir, name, want);
  char *p = bf_path_join(dir, name);
  CHECKF(label, p && strcmp(p, want) == 0, "got \"%s\"", p ? p : "(NULL)");
  free(p);
}

static void test_path_join(void) {
  check_join("models/base", "vocab.txt", "models/base/vocab.txt");
  check_join("models/base/", "vocab.txt", "models/base/vocab.txt");
  check_join("/", "config.json", "/config.json");
  check_join("", "config.json", "config.json");
  check_join("dir", "", "dir/");
  check_join("a//", "b", "a//b");
}

static void test_errf(void) {
  char err[16];
  bf_errf(err, sizeof err, "%s %d", "code", 42);
  CHECK("errf: formats", strcmp(err, "code 42") == 0);
  bf_errf(err, sizeof err, "%s", "a message longer than the buffer");
  CHECK("errf: cuts to the buffer, NUL-terminated", strcmp(err, "a message longe") == 0);
  memcpy(err, "unchanged", 10);
  bf_errf(err, 0, "%s", "x");
  CHECK("errf: errlen 0 writes nothing", strcmp(err, "unchanged") == 0);
  bf_errf(NULL, 64, "%s", "x");
  CHECK("errf: NULL err is fine", 1);
}

static void test_clock_and_cores(void) {
  uint64_t a = bf_now_ns(), b = bf_now_ns();
  usleep(2000);
  uint64_t c = bf_now_ns();
  CHECKF("clock: monotonic, 2 ms sleep seen", b >= a && c - b >= 2000000, "%llu %llu %llu",
         (unsigned long long)a, (unsigned long long)b, (unsigned long long)c);
  int n = bf_ncores();
  CHECKF("cores: at least 1", n >= 1, "%d", n);
}

int main(void) {
  test_utf8_valid();
  test_utf8_invalid();
  test_utf8_put();
  test_env();
  test_path_join();
  test_errf();
  test_clock_and_cores();
  TL_EXIT();
}
