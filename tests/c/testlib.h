/* testlib.h — tiny check macros for the C test programs.
** Each check prints "ok NAME" or "FAIL NAME: why" (read by tests/run.sh). */
#ifndef BF_TESTLIB_H
#define BF_TESTLIB_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static int tl_failed = 0;
#define CHECK(name, cond) \
  do { \
    if (cond) printf("ok %s\n", (name)); \
    else { \
      printf("FAIL %s: %s (%s:%d)\n", (name), #cond, __FILE__, __LINE__); \
      tl_failed++; \
    } \
  } while (0)
#define CHECKF(name, cond, ...) \
  do { \
    if (cond) printf("ok %s\n", (name)); \
    else { \
      printf("FAIL %s: ", (name)); \
      printf(__VA_ARGS__); \
      printf(" (%s:%d)\n", __FILE__, __LINE__); \
      tl_failed++; \
    } \
  } while (0)
#define SKIP(name, why) printf("skip %s: %s\n", (name), (why))
#define TL_EXIT() return tl_failed ? 1 : 0
#endif
