/*
** fuzz_model.c — the model loader (ext/engine/model.c: config.json checks, vocab,
** tensor lookup, shapes, dtype conversion) and the safetensors reader
** (ext/engine/safetensors.c: header length, JSON header, offsets, overlaps) on
** arbitrary files.
**
** An input is a whole model directory:
**   u16 LE  length of config.json
**   u16 LE  length of vocab.txt
**   u16 LE  length of tokenizer_config.json (0: the file is absent)
**   the three files' bytes, then everything left is model.safetensors.
** (Lengths longer than what is left are cut.)  Each input is written to a
** private scratch directory and loaded with bf_model_load.  A model that
** loads is then used: fingerprint, tokenize a text with a mask, and one
** bf_fill, whose candidates must be in range and sorted (NaN probabilities
** from NaN weights are allowed; crashes and out-of-bounds reads are not);
** then loaded again and its weights truncated to half under it: the
** fingerprint must be refused and bf_fill must say the file changed.
** Seeds: tests/fuzz/corpus/model (made by tests/fuzz/make_seeds.py).
*/
#include <math.h>
#include "fuzz_common.h"
#include "bertfill.h"

static char dir[256];
static bf_run *run;

static void cleanup(void) {
  static const char *files[] = { "config.json", "vocab.txt", "tokenizer_config.json", "model.safetensors" };
  char path[512];
  for (int i = 0; i < 4; i++) { snprintf(path, sizeof path, "%s/%s", dir, files[i]); unlink(path); }
  rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  snprintf(dir, sizeof dir, "%s/bf-fuzz-model-%d", fuzz_env("TMPDIR", "/tmp"), (int)getpid());
  mkdir(dir, 0700);
  atexit(cleanup);
  run = bf_run_new();
  return 0;
}

static void write_file(const char *name, const uint8_t *p, size_t n) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f) { perror(path); abort(); }
  if (n && fwrite(p, 1, n, f) != n) { perror(path); abort(); }
  fclose(f);
}

static void remove_file(const char *name) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  unlink(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 6) return 0;
  size_t len[3];
  for (int i = 0; i < 3; i++) len[i] = (size_t)data[2 * i] | ((size_t)data[2 * i + 1] << 8);
  const uint8_t *p = data + 6;
  size_t left = size - 6;
  static const char *names[3] = { "config.json", "vocab.txt", "tokenizer_config.json" };
  for (int i = 0; i < 3; i++) {
    if (len[i] > left) len[i] = left;
    if (i == 2 && len[i] == 0) remove_file(names[i]);
    else write_file(names[i], p, len[i]);
    p += len[i];
    left -= len[i];
  }
  write_file("model.safetensors", p, left);

  char err[512];
  err[0] = 0;
  bf_model *m = bf_model_load(dir, err, sizeof err);
  if (!m) {
    FUZZ_CHECK(err[0] != 0, "load failed without a message");
    return 0;
  }
  const bf_config *c = bf_model_config(m);
  FUZZ_CHECK(c->vocab_size > 0 && c->hidden_size > 0 && c->num_attention_heads > 0 &&
             c->hidden_size % c->num_attention_heads == 0 && c->max_position_embeddings > 0,
             "loaded an impossible config");
  const char *fp = bf_model_fingerprint(m);
  FUZZ_CHECK(fp && strlen(fp) == 16, "fingerprint '%s'", fp ? fp : "(null)");
  const bf_tokenizer *tok = bf_model_tokenizer(m);
  bf_tokens t = { 0 };
  if (bf_tokenize(tok, "ab[MASK]c d", -1, &t, err, sizeof err) == BF_OK && t.n_masks > 0) {
    int k = 3;
    bf_cand cand[3 * 4];
    if (t.n_masks <= 4) {
      int rc = bf_fill(m, run, 1, &t, k, cand, err, sizeof err);
      if (rc == BF_OK) {
        for (int i = 0; i < t.n_masks * k; i++) {
          FUZZ_CHECK(cand[i].id >= 0 && cand[i].id < c->vocab_size, "candidate id %d", cand[i].id);
          FUZZ_CHECK(isnan(cand[i].prob) || (cand[i].prob >= 0 && cand[i].prob <= 1.0001f),
                     "probability %g", (double)cand[i].prob);
        }
      } else {
        FUZZ_CHECK(err[0] != 0, "bf_fill failed without a message");
      }
    }
  }
  bf_tokens_free(&t);
  bf_model_release(m);

  /* The same weights truncated under a loaded model (cp over a loaded model
  ** does this) before its fingerprint is known: refused, never read through
  ** the mapping (that raised SIGBUS, issue #24); bf_fill says so too.  The
  ** warm-up is off for this load, so that it cannot hash the file first. */
  setenv("BERTFILL_WARM_UP", "0", 1);
  bf_model *m2 = bf_model_load(dir, err, sizeof err);
  unsetenv("BERTFILL_WARM_UP");
  char path[512];
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  if (m2 && truncate(path, (off_t)(left / 2)) == 0) {
    const char *fp2 = bf_model_fingerprint(m2);
    FUZZ_CHECK(fp2 == NULL, "fingerprint '%s' of a truncated file", fp2);
    bf_tokens t2 = { 0 };
    if (bf_tokenize(bf_model_tokenizer(m2), "ab[MASK]c", -1, &t2, err, sizeof err) == BF_OK &&
        t2.n_masks == 1) {
      bf_cand cand2[1];
      err[0] = 0;
      int rc = bf_fill(m2, run, 1, &t2, 1, cand2, err, sizeof err);
      FUZZ_CHECK(rc == BF_ERR_MODEL && strstr(err, "changed on disk"), "bf_fill on a truncated file: %d '%s'",
                 rc, err);
    }
    bf_tokens_free(&t2);
  }
  bf_model_release(m2);
  return 0;
}
