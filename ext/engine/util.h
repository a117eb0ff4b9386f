/*
** util.h — the small helpers every part of bertfill shares, one copy each:
** a monotonic clock, the UTF-8 validator and encoder, the error formatter,
** the path join, the number of usable cores, and the one rule for reading
** settings from the environment, the per-user cache directory.  No SQLite, no model: plain C for engine and
** SQLite layer alike.
*/
#ifndef BERTFILL_UTIL_H
#define BERTFILL_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* Nanoseconds on CLOCK_MONOTONIC (never goes back; not wall-clock time). */
uint64_t bf_now_ns(void);
/* The wall clock (CLOCK_REALTIME), ns since 1970: for comparing with file times. */
uint64_t bf_wall_ns(void);

/* Offset of the first byte of s[0..n) that does not start a well-formed
** UTF-8 sequence (Unicode's definition: no overlong forms, no surrogates,
** nothing past U+10FFFF), or -1 when all n bytes are valid.  When why is
** not NULL it gets a short phrase for the error message, for example
** "continuation byte 0x80 without a lead byte". */
long bf_utf8_invalid_at(const char *s, size_t n, char *why, size_t whylen);

/* The characters (code points) of valid UTF-8 s[0..n): its bytes that are
** not continuation bytes.  A position in characters is what a user counts
** and what SQL's substr() and instr() take. */
static inline long bf_utf8_chars(const char *s, size_t n) {
  long chars = 0;
  for (size_t i = 0; i < n; i++) chars += ((unsigned char)s[i] & 0xC0) != 0x80;
  return chars;
}

/* Write code point c (at most U+10FFFF, not a surrogate) as UTF-8 into
** d[0..4); returns the bytes written (1 to 4).  Inline: the tokenizer calls
** it for every character of a word. */
static inline size_t bf_utf8_put(uint32_t c, char *d) {
  if (c < 0x80) {
    d[0] = (char)c;
    return 1;
  }
  if (c < 0x800) {
    d[0] = (char)(0xC0 | (c >> 6));
    d[1] = (char)(0x80 | (c & 0x3F));
    return 2;
  }
  if (c < 0x10000) {
    d[0] = (char)(0xE0 | (c >> 12));
    d[1] = (char)(0x80 | ((c >> 6) & 0x3F));
    d[2] = (char)(0x80 | (c & 0x3F));
    return 3;
  }
  d[0] = (char)(0xF0 | (c >> 18));
  d[1] = (char)(0x80 | ((c >> 12) & 0x3F));
  d[2] = (char)(0x80 | ((c >> 6) & 0x3F));
  d[3] = (char)(0x80 | (c & 0x3F));
  return 4;
}

/* Format a message into err[0..errlen) (always NUL-terminated when
** errlen > 0; nothing happens when err is NULL or errlen is 0). */
void bf_errf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* dir + "/" + name (no doubled slash), malloc'ed; NULL when out of memory. */
char *bf_path_join(const char *dir, const char *name);

/* Write the n parts (part[i], len[i] bytes) as the file path: into a
** temporary file in the same directory (O_EXCL, named after the process and
** thread), fsync, then rename() over path, so that readers never see half a
** file.  0, or -1 with nothing left behind (a read-only directory, disk
** full). */
int bf_write_file_replace(const char *path, int n, const void *const *part, const size_t *len);

/* Remove the temporary files of path that bf_write_file_replace left behind
** when its writer was killed (SIGKILL, a power cut): every directory entry
** named exactly PATH.tmp.PID.TID that is a regular file (not followed if a
** link) owned by this process's user, unchanged for BF_STALE_QUIET_NS, and
** whose writer is gone (no process PID, or one that started after the file
** was last written).  A live writer's file is left alone, and so is one a
** writer in another pid namespace may still be writing (it changes, or is
** renamed, within the quiet time).  Failures (a read-only directory) are
** silent. */
#define BF_STALE_QUIET_NS 60000000000ll
void bf_remove_stale_temps(const char *path);

/* Every byte of the open file fd's first size bytes backed by storage, so
** that no touch of a shared mapping of it can find a page missing (SIGBUS
** on a full tmpfs, /dev/shm included).  fresh: a file nobody has mapped
** yet, given its size by the reservation itself (or by writing zeros where
** the file system cannot reserve) and left empty again when that fails, so
** that the next process tries anew.  Otherwise an existing file of at least
** size bytes is reserved again (fallocate KEEP_SIZE: a no-op for pages that
** exist; its size never changes), or, where the file system cannot reserve,
** must already have a block for every byte.  0, or the errno (ENOSPC). */
int bf_reserve_file(int fd, size_t size, int fresh);

/* Open path (flags: O_RDONLY or O_RDWR, plus O_CREAT / O_NOFOLLOW) without
** ever blocking, and only if it is a regular file: the open itself is
** O_NONBLOCK (a FIFO or a device would otherwise block the caller until a
** writer comes, forever), then fstat decides, then O_NONBLOCK is cleared.
** The descriptor (O_CLOEXEC), with *st filled when st is not NULL; or -1
** with errno set: ENXIO for a FIFO, device or socket, EISDIR for a
** directory (bf_not_regular tells both from ENOENT, EACCES...).  st is a
** struct stat * (void * keeps <sys/stat.h> out of this header). */
int bf_open_regular(const char *path, int flags, unsigned mode, void *st);
/* 1 when errno (as left by bf_open_regular) means "not a regular file". */
int bf_not_regular(int err);
/* Why bf_open_regular failed with errno e, for a message "PATH: WHY": "not a
** regular file", or strerror(e). */
const char *bf_open_failure(int e);

/* CPUs this process may run on (sched_getaffinity), at least 1. */
int bf_ncores(void);

/* Settings from the environment: one rule for every BERTFILL_* variable.
**   - Unset or empty: the default.
**   - bf_env_flag: "1", "on", "true", "yes" mean on; "0", "off", "false",
**     "no" mean off (any letter case).
**   - bf_env_int: a whole decimal number (optional sign, nothing after it)
**     from lo to hi.
**   - bf_env_choice: one of the n words in choices (any letter case); the
**     result is its index.
**   - Anything else is ignored: the default is used and one line saying so
**     goes to stderr ("bertfill: ignoring BERTFILL_X='12abc': ..."), once
**     per process for each variable and value.
*/
int bf_env_flag(const char *name, int dflt);
long long bf_env_int(const char *name, long long lo, long long hi, long long dflt);
int bf_env_choice(const char *name, const char *const *choices, int n, int dflt);
/* bf_env_dir: a directory: an absolute path (returned), or one of the off
** words (NULL, *off = 1), or one of the on words (NULL: the default); the
** rest is ignored as above (NULL). */
const char *bf_env_dir(const char *name, int *off);

/* bertfill's per-user cache directory, malloc'd: BERTFILL_CACHE_DIR when it
** names one, else $XDG_CACHE_HOME/bertfill (an absolute XDG_CACHE_HOME),
** else $HOME/.cache/bertfill.  Nothing is made here.  NULL with why when
** there is none: BERTFILL_CACHE_DIR=0, HOME not set, out of memory. */
char *bf_user_cache_dir(char *why, size_t whylen);

/* A directory only this process's user can write: made when make is set
** and it is missing (mode 0700, and its missing parents 0700 too), then
** checked without following a link: a directory, not a symbolic link,
** owned by the process's effective user, not writable by group or others.
** 0, or -1 with errno (ENOENT: missing and not made) and why saying what is
** wrong ("PATH: is a symbolic link", ...). */
int bf_private_dir(const char *path, int make, char *why, size_t whylen);

#endif
