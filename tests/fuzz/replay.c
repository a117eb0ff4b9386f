/*
** replay.c — a plain main() for the fuzz targets, so that their corpora and
** regression inputs can be replayed without libFuzzer (gcc, CI):
**
**   build/fuzz/gcc/fuzz_json tests/fuzz/corpus/json tests/fuzz/regressions/json
**
** Every argument is a file or a directory of files (sorted by name).  Each
** input is copied into a buffer of exactly its size (so AddressSanitizer sees
** any read past its end) and passed to LLVMFuzzerTestOneInput.  Prints
** "replayed N inputs"; a broken invariant or sanitizer report aborts.
*/
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static long replayed;

static void replay_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) { perror(path); exit(2); }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
  if (!buf || (n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n)) { perror(path); exit(2); }
  fclose(f);
  if (getenv("REPLAY_VERBOSE")) fprintf(stderr, "replay %s (%ld bytes)\n", path, n);
  LLVMFuzzerTestOneInput(buf, (size_t)n);
  free(buf);
  replayed++;
}

static int cmp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static void replay(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) return;             /* a missing directory: nothing */
  if (!S_ISDIR(st.st_mode)) { replay_file(path); return; }
  DIR *d = opendir(path);
  if (!d) { perror(path); exit(2); }
  char **names = NULL;
  size_t n = 0, cap = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    if (n == cap) { cap = cap ? 2 * cap : 64; names = realloc(names, cap * sizeof *names); }
    size_t len = strlen(path) + strlen(e->d_name) + 2;
    names[n] = malloc(len);
    snprintf(names[n], len, "%s/%s", path, e->d_name);
    n++;
  }
  closedir(d);
  qsort(names, n, sizeof *names, cmp);
  for (size_t i = 0; i < n; i++) { replay(names[i]); free(names[i]); }
  free(names);
}

int main(int argc, char **argv) {
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  for (int i = 1; i < argc; i++) replay(argv[i]);
  printf("replayed %ld inputs\n", replayed);
  return 0;
}
