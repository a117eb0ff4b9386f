/*
** fuzz_tokenizer.c — the WordPiece tokenizer (ext/engine/tokenizer.c) on arbitrary
** bytes, with every tokenizer we have: the genuine bert-base-chinese
** vocabulary ($BF_FUZZ_SHARED/bert-base-chinese, when present), and the test
** models tiny (synthetic vocab) and tiny-legacy.
**
** Invariants checked on every input, besides "no crash, no sanitizer report":
**   - BF_OK exactly when the bytes are valid UTF-8 (strict, RFC 3629);
**     otherwise BF_ERR_INPUT with a message;
**   - on BF_OK: [CLS] first, [SEP] last, every id in range, n_masks = the
**     number of [MASK] ids, and tokenizing again into the same (reused)
**     bf_tokens gives the same ids.
*/
#include "fuzz_common.h"
#include "bertfill.h"

static bf_tokenizer *toks[4];
static int ntoks;

static void add(const char *dir) {
  char err[512];
  if (!fuzz_is_dir(dir)) { fprintf(stderr, "fuzz_tokenizer: %s absent, not used\n", dir); return; }
  bf_tokenizer *t = bf_tokenizer_load(dir, err, sizeof err);
  if (!t) { fprintf(stderr, "fuzz_tokenizer: %s\n", err); abort(); }
  toks[ntoks++] = t;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  char buf[4096];
  snprintf(buf, sizeof buf, "%s/bert-base-chinese", fuzz_env("BF_FUZZ_SHARED", "../shared/data"));
  add(buf);
  add(fuzz_model_dir("tiny", buf, sizeof buf));
  add(fuzz_model_dir("tiny-legacy", buf, sizeof buf));
  if (ntoks == 0) { fprintf(stderr, "fuzz_tokenizer: no tokenizer (make models)\n"); abort(); }
  return 0;
}

static bf_tokens keep;   /* reused across inputs, as callers reuse theirs */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int valid = fuzz_utf8_valid(data, size);
  for (int k = 0; k < ntoks; k++) {
    const bf_tokenizer *tok = toks[k];
    char err[256];
    err[0] = 0;
    bf_tokens t = { 0 };
    int rc = bf_tokenize(tok, (const char *)data, (long)size, &t, err, sizeof err);
    if (rc == BF_ERR_NOMEM) { bf_tokens_free(&t); continue; }
    FUZZ_CHECK(rc == (valid ? BF_OK : BF_ERR_INPUT), "rc %d, valid UTF-8 %d, err '%s'", rc, valid, err);
    if (rc != BF_OK) {
      FUZZ_CHECK(err[0] != 0, "error without a message");
      bf_tokens_free(&t);
      continue;
    }
    int vocab = bf_tokenizer_vocab_size(tok);
    int32_t mask = bf_tokenizer_mask_id(tok);
    FUZZ_CHECK(t.n >= 2 && t.n <= t.cap, "n %d cap %d", t.n, t.cap);
    FUZZ_CHECK(strcmp(bf_tokenizer_token(tok, t.ids[0]), "[CLS]") == 0, "first token %d", t.ids[0]);
    FUZZ_CHECK(strcmp(bf_tokenizer_token(tok, t.ids[t.n - 1]), "[SEP]") == 0, "last token %d", t.ids[t.n - 1]);
    int masks = 0;
    for (int i = 0; i < t.n; i++) {
      FUZZ_CHECK(t.ids[i] >= 0 && t.ids[i] < vocab, "id %d out of range at %d", t.ids[i], i);
      FUZZ_CHECK(bf_tokenizer_token(tok, t.ids[i]) != NULL, "no string for id %d", t.ids[i]);
      masks += t.ids[i] == mask;
    }
    FUZZ_CHECK(masks == t.n_masks, "n_masks %d, counted %d", t.n_masks, masks);
    rc = bf_tokenize(tok, (const char *)data, (long)size, &keep, err, sizeof err);
    if (rc == BF_OK) {
      FUZZ_CHECK(keep.n == t.n && keep.n_masks == t.n_masks &&
                 memcmp(keep.ids, t.ids, (size_t)t.n * sizeof *t.ids) == 0,
                 "second tokenization differs (n %d vs %d)", keep.n, t.n);
    }
    bf_tokens_free(&t);
  }
  return 0;
}
