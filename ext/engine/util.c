/*
** util.c — shared helpers (see util.h).
*/
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

uint64_t bf_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t bf_wall_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Why the sequence at s[0..n) (known to be invalid) is not UTF-8. */
static void utf8_why(const unsigned char *s, size_t n, char *buf, size_t len) {
  unsigned b = s[0];
  if (b >= 0x80 && b < 0xC0) {
    snprintf(buf, len, "continuation byte 0x%02X without a lead byte", b);
    return;
  }
  if (b == 0xC0 || b == 0xC1) {
    snprintf(buf, len, "overlong encoding (lead byte 0x%02X)", b);
    return;
  }
  if (b >= 0xF5) {
    snprintf(buf, len, "byte 0x%02X never appears in UTF-8", b);
    return;
  }
  size_t need = b < 0xE0 ? 1 : b < 0xF0 ? 2 : 3;
  for (size_t k = 1; k <= need; k++) {
    if (k >= n) {
      snprintf(buf, len,
               "truncated sequence (lead byte 0x%02X needs %zu continuation bytes, the text ends)",
               b, need);
      return;
    }
    if ((s[k] & 0xC0) != 0x80) {
      snprintf(buf, len, "truncated sequence (lead byte 0x%02X followed by 0x%02X)", b, s[k]);
      return;
    }
  }
  if (b == 0xE0 && s[1] < 0xA0) {
    snprintf(buf, len, "overlong 3-byte encoding");
    return;
  }
  if (b == 0xED && s[1] > 0x9F) {
    snprintf(buf, len, "UTF-16 surrogate U+%04X",
             ((b & 0xF) << 12) | ((s[1] & 0x3F) << 6) | (s[2] & 0x3F));
    return;
  }
  if (b == 0xF0 && s[1] < 0x90) {
    snprintf(buf, len, "overlong 4-byte encoding");
    return;
  }
  if (b == 0xF4 && s[1] > 0x8F) {
    snprintf(buf, len, "code point beyond U+10FFFF");
    return;
  }
  snprintf(buf, len, "invalid sequence");
}

long bf_utf8_invalid_at(const char *text, size_t n, char *why, size_t whylen) {
  const unsigned char *p = (const unsigned char *)text;
  size_t i = 0;
  while (i < n) {
    unsigned c = p[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    size_t len;
    unsigned cp, min;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2, cp = c & 0x1F, min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3, cp = c & 0x0F, min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4, cp = c & 0x07, min = 0x10000;
    } else {
      goto bad;
    }
    if (n - i < len) goto bad;
    for (size_t j = 1; j < len; j++) {
      if ((p[i + j] & 0xC0) != 0x80) goto bad;
      cp = cp << 6 | (p[i + j] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) goto bad;
    i += len;
  }
  return -1;
bad:
  if (why && whylen) utf8_why(p + i, n - i, why, whylen);
  return (long)i;
}

void bf_errf(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || !errlen) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

char *bf_path_join(const char *dir, const char *name) {
  size_t a = strlen(dir), b = strlen(name);
  int slash = a > 0 && dir[a - 1] != '/';
  char *p = malloc(a + (size_t)slash + b + 1);
  if (!p) return NULL;
  memcpy(p, dir, a);
  if (slash) p[a] = '/';
  memcpy(p + a + slash, name, b + 1);
  return p;
}

int bf_ncores(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

/* The line for an ignored value, once per process for each name and value
** (a variable read by every new connection would otherwise repeat it). */
static void env_ignored(const char *name, const char *value, const char *expected) {
  static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  static uint64_t said[32];
  static int nsaid;
  uint64_t h = 1469598103934665603ull; /* FNV-1a of name '=' value */
  for (const char *p = name; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
  h = (h ^ '=') * 1099511628211ull;
  for (const char *p = value; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
  int again = 0;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < nsaid && !again; i++) again = said[i] == h;
  if (!again && nsaid < (int)(sizeof said / sizeof said[0])) said[nsaid++] = h;
  pthread_mutex_unlock(&mu);
  if (!again) fprintf(stderr, "bertfill: ignoring %s='%s': expected %s\n", name, value, expected);
}

int bf_env_flag(const char *name, int dflt) {
  const char *s = getenv(name);
  if (!s || !*s) return dflt;
  static const char *const on[] = {"1", "on", "true", "yes"};
  static const char *const off[] = {"0", "off", "false", "no"};
  for (size_t i = 0; i < sizeof on / sizeof on[0]; i++) {
    if (strcasecmp(s, on[i]) == 0) return 1;
    if (strcasecmp(s, off[i]) == 0) return 0;
  }
  env_ignored(name, s, "1/on/true/yes or 0/off/false/no");
  return dflt;
}

long long bf_env_int(const char *name, long long lo, long long hi, long long dflt) {
  const char *s = getenv(name);
  if (!s || !*s) return dflt;
  char *end;
  long long v = strtoll(s, &end, 10);
  if (*end == '\0' && end != s && v >= lo && v <= hi) return v;
  char expected[96];
  snprintf(expected, sizeof expected, "a whole number from %lld to %lld", lo, hi);
  env_ignored(name, s, expected);
  return dflt;
}

int bf_env_choice(const char *name, const char *const *choices, int n, int dflt) {
  const char *s = getenv(name);
  if (!s || !*s) return dflt;
  char expected[128] = "";
  size_t at = 0;
  for (int i = 0; i < n; i++) {
    if (strcasecmp(s, choices[i]) == 0) return i;
    if (at < sizeof expected)
      at += (size_t)snprintf(expected + at, sizeof expected - at, "%s%s", i ? "/" : "", choices[i]);
  }
  env_ignored(name, s, expected);
  return dflt;
}

static int write_all(int fd, const void *p, size_t n) {
  const unsigned char *c = p;
  while (n > 0) {
    ssize_t w = write(fd, c, n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    c += w;
    n -= (size_t)w;
  }
  return 0;
}

int bf_open_regular(const char *path, int flags, unsigned mode, void *stp) {
  struct stat st;
  int fd = open(path, flags | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, (mode_t)mode);
  if (fd < 0) return -1;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    errno = S_ISDIR(st.st_mode) ? EISDIR : ENXIO;
    return -1;
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  if (stp) memcpy(stp, &st, sizeof st);
  return fd;
}

int bf_not_regular(int err) { return err == EISDIR || err == ENXIO; }

const char *bf_open_failure(int e) {
  return bf_not_regular(e) ? "not a regular file" : strerror(e);
}

int bf_write_file_replace(const char *path, int n, const void *const *part, const size_t *len) {
  size_t cap = strlen(path) + 64;
  char *tmp = malloc(cap);
  if (!tmp) return -1;
  snprintf(tmp, cap, "%s.tmp.%ld.%lx", path, (long)getpid(), (unsigned long)pthread_self());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  int rc = -1;
  if (fd >= 0) {
    rc = 0;
    for (int i = 0; i < n && rc == 0; i++) rc = write_all(fd, part[i], len[i]);
    if (rc == 0 && fsync(fd) != 0) rc = -1;
    if (close(fd) != 0) rc = -1;
    if (rc == 0 && rename(tmp, path) != 0) rc = -1;
    if (rc != 0) unlink(tmp);
  }
  free(tmp);
  return rc;
}
