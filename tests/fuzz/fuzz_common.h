/*
** fuzz_common.h — shared bits of the fuzz targets in tests/fuzz/.
**
** Each target defines LLVMFuzzerTestOneInput (and LLVMFuzzerInitialize).
** Built two ways by tests/fuzz/fuzz.mk:
**   clang -fsanitize=fuzzer,address,undefined    libFuzzer (make fuzz)
**   gcc -fsanitize=address,undefined + replay.c  replays files (CI smoke)
** Paths: BF_FUZZ_MODELS (default build/models) holds the generated test
** models; BF_FUZZ_SHARED (default ../shared/data) the reference data.
** A broken invariant calls FUZZ_CHECK, which prints what and aborts, so
** both libFuzzer and the replay driver report it as a crash.
*/
#ifndef BF_FUZZ_COMMON_H
#define BF_FUZZ_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <stddef.h>
#include <unistd.h>
#include <sys/stat.h>

#define FUZZ_CHECK(cond, ...) do { if (!(cond)) { \
  fprintf(stderr, "fuzz invariant broken at %s:%d: %s\n  ", __FILE__, __LINE__, #cond); \
  fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); abort(); } } while (0)

static inline const char *fuzz_env(const char *name, const char *dflt) {
  const char *s = getenv(name);
  return s && *s ? s : dflt;
}

/* $BF_FUZZ_MODELS/name into buf. */
static inline const char *fuzz_model_dir(const char *name, char *buf, size_t n) {
  snprintf(buf, n, "%s/%s", fuzz_env("BF_FUZZ_MODELS", "build/models"), name);
  return buf;
}

static inline int fuzz_is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Strict UTF-8 (RFC 3629: no overlongs, no surrogates, <= U+10FFFF). */
static inline int fuzz_utf8_valid(const unsigned char *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    unsigned c = s[i];
    if (c < 0x80) { i++; continue; }
    int len; unsigned cp, min;
    if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; min = 0x80; }
    else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; min = 0x800; }
    else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; min = 0x10000; }
    else return 0;
    if (i + (size_t)len > n) return 0;
    for (int j = 1; j < len; j++) {
      if ((s[i + j] & 0xC0) != 0x80) return 0;
      cp = (cp << 6) | (s[i + j] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    i += (size_t)len;
  }
  return 1;
}

#endif
