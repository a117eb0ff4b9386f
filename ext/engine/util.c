/*
** util.c — shared helpers (see util.h).
*/
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
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

const char *bf_env_dir(const char *name, int *off) {
  const char *s = getenv(name);
  *off = 0;
  if (!s || !*s) return NULL;
  if (s[0] == '/') return s;
  static const char *const words[] = {"0", "off", "false", "no", "1", "on", "true", "yes"};
  for (int i = 0; i < 8; i++)
    if (strcasecmp(s, words[i]) == 0) {
      *off = i < 4;
      return NULL;
    }
  env_ignored(name, s, "an absolute path, or 0/off/false/no");
  return NULL;
}

char *bf_user_cache_dir(char *why, size_t whylen) {
  int off;
  const char *dir = bf_env_dir("BERTFILL_CACHE_DIR", &off);
  if (off) {
    bf_errf(why, whylen, "turned off by BERTFILL_CACHE_DIR=%s", getenv("BERTFILL_CACHE_DIR"));
    return NULL;
  }
  if (dir) {
    char *p = strdup(dir);
    if (!p) bf_errf(why, whylen, "out of memory");
    return p;
  }
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  char *p = NULL;
  if (xdg && xdg[0] == '/') p = bf_path_join(xdg, "bertfill");
  else if (home && home[0] == '/') p = bf_path_join(home, ".cache/bertfill");
  else {
    bf_errf(why, whylen, "no per-user cache directory: HOME is not set%s",
            xdg && *xdg ? " and XDG_CACHE_HOME is not an absolute path" : "");
    return NULL;
  }
  if (!p) bf_errf(why, whylen, "out of memory");
  return p;
}

int bf_private_dir(const char *path, int make, char *why, size_t whylen) {
  struct stat st;
  if (path[0] != '/') {
    bf_errf(why, whylen, "%s: not an absolute path", path);
    errno = EINVAL;
    return -1;
  }
  if (make && lstat(path, &st) != 0 && errno == ENOENT) {
    char *p = strdup(path);
    if (!p) {
      bf_errf(why, whylen, "out of memory");
      errno = ENOMEM;
      return -1;
    }
    for (char *c = strchr(p + 1, '/');; c = strchr(c + 1, '/')) { /* the parents, then path */
      if (c) *c = 0;
      int made = mkdir(p, 0700) == 0 || errno == EEXIST;
      int e = errno;
      if (!made || !c) {
        if (!made) bf_errf(why, whylen, "%s: cannot be made (%s)", p, strerror(e));
        free(p);
        if (!made) {
          errno = e;
          return -1;
        }
        break;
      }
      *c = '/';
    }
  }
  if (lstat(path, &st) != 0) {
    int e = errno;
    bf_errf(why, whylen, "%s: %s", path, strerror(e));
    errno = e;
    return -1;
  }
  errno = EPERM;
  if (S_ISLNK(st.st_mode)) bf_errf(why, whylen, "%s: is a symbolic link", path);
  else if (!S_ISDIR(st.st_mode)) bf_errf(why, whylen, "%s: not a directory", path);
  else if (st.st_uid != geteuid())
    bf_errf(why, whylen, "%s: belongs to another user (uid %u, not %u)", path, (unsigned)st.st_uid,
            (unsigned)geteuid());
  else if (st.st_mode & 022)
    bf_errf(why, whylen, "%s: group or others can write it (mode %04o)", path,
            (unsigned)(st.st_mode & 07777));
  else return 0;
  return -1;
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

/* The temporary name of bf_write_file_replace: PATH.tmp.PID.TID (the
** writer's process id in decimal, its pthread_self in hex), into buf. */
static int temp_name(char *buf, size_t n, const char *path, long pid, unsigned long tid) {
  return snprintf(buf, n, "%s.tmp.%ld.%lx", path, pid, tid);
}

int bf_write_file_replace(const char *path, int n, const void *const *part, const size_t *len) {
  size_t cap = strlen(path) + 64;
  char *tmp = malloc(cap);
  if (!tmp) return -1;
  temp_name(tmp, cap, path, (long)getpid(), (unsigned long)pthread_self());
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

/* When process pid started, in ns of the wall clock (its /proc/PID/stat
** start time after boot, plus /proc/stat's btime), or -1 when unknown. */
static long long process_start_ns(long pid) {
  char p[64], buf[1024];
  snprintf(p, sizeof p, "/proc/%ld/stat", pid);
  FILE *f = fopen(p, "re");
  if (!f) return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  const char *c = strrchr(buf, ')'); /* the command name may hold spaces and ')' */
  unsigned long long start = 0;
  /* after ") ": state, then fields 4..21, then 22 starttime */
  if (!c || sscanf(c + 2,
                   "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d "
                   "%*d %llu",
                   &start) != 1)
    return -1;
  f = fopen("/proc/stat", "re");
  if (!f) return -1;
  long long btime = -1;
  char line[256];
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "btime %lld", &btime) == 1) break;
  fclose(f);
  long hz = sysconf(_SC_CLK_TCK);
  if (btime < 0 || hz <= 0) return -1;
  return btime * 1000000000ll + (long long)(start / (unsigned long long)hz) * 1000000000ll +
         (long long)(start % (unsigned long long)hz) * (1000000000ll / hz);
}

/* 1 when the writer pid of a temporary file last written at mtime_ns is
** gone: no such process, or one that started after the file was last
** written (its pid was reused; BF_STALE_CLOCK_SLACK_NS allows for btime's
** whole seconds). */
#define BF_STALE_CLOCK_SLACK_NS 2000000000ll
static int writer_gone(long pid, long long mtime_ns) {
  if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) return 1;
  long long start = process_start_ns(pid);
  return start > 0 && start > mtime_ns + BF_STALE_CLOCK_SLACK_NS;
}

void bf_remove_stale_temps(const char *path) {
  const char *slash = strrchr(path, '/');
  char *dir = slash ? strndup(path, (size_t)(slash - path)) : strdup(".");
  const char *base = slash ? slash + 1 : path;
  size_t blen = strlen(base);
  DIR *d = dir ? opendir(dir[0] ? dir : "/") : NULL;
  free(dir);
  if (!d) return;
  long long now = (long long)bf_wall_ns();
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    const char *name = e->d_name;
    if (strncmp(name, base, blen) != 0 || strncmp(name + blen, ".tmp.", 5) != 0) continue;
    long pid = 0;
    unsigned long tid = 0;
    char again[512];
    /* the exact pattern: written back from what was read, it is the name */
    if (sscanf(name + blen + 5, "%ld.%lx", &pid, &tid) != 2 || pid <= 0 ||
        (size_t)temp_name(again, sizeof again, base, pid, tid) >= sizeof again ||
        strcmp(again, name) != 0)
      continue;
    struct stat st;
    if (fstatat(dirfd(d), name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
        st.st_uid != geteuid())
      continue;
    long long mtime = (long long)st.st_mtim.tv_sec * 1000000000ll + st.st_mtim.tv_nsec;
    if (now - mtime < BF_STALE_QUIET_NS || !writer_gone(pid, mtime)) continue;
    (void)unlinkat(dirfd(d), name, 0);
  }
  closedir(d);
}

int bf_reserve_file(int fd, size_t size, int fresh) {
  int err = EOPNOTSUPP;
#ifdef __linux__
  err = fallocate(fd, fresh ? 0 : FALLOC_FL_KEEP_SIZE, 0, (off_t)size) == 0 ? 0 : errno;
#endif
  if (err == EOPNOTSUPP || err == ENOSYS) {
    struct stat st;
    if (!fresh) return fstat(fd, &st) == 0 && (uint64_t)st.st_blocks * 512u >= size ? 0 : ENOSPC;
    static const char zeros[4096];
    err = 0;
    for (size_t at = 0; at < size && !err; at += sizeof zeros) {
      size_t len = size - at < sizeof zeros ? size - at : sizeof zeros;
      if (pwrite(fd, zeros, len, (off_t)at) != (ssize_t)len) err = errno ? errno : ENOSPC;
    }
  }
  if (err && fresh) (void)!ftruncate(fd, 0); /* empty again: the next process tries anew */
  return err;
}
