/*
** test_tokenizer.c — the tokenizer (ext/engine/tokenizer.c) against golden token ids
** made by an independent reference (tests/golden/tokenizer/make_golden.mjs,
** @huggingface/transformers reading tokenizer.json), plus load errors,
** invalid UTF-8, the tokens' byte spans (the rules of bertfill.h on every golden
** case, and spans written out by hand), reuse of bf_tokens, a random-input
** smoke test, and look-alikes of [MASK] (bf_mask_lookalike) against what the
** tokenizer reads as "[" "mask" "]", with each setting of the small tokenizer.
**
**   test_tokenizer GOLDEN.tsv SMALL_DIR ZH_DIR WORK_DIR
**
** GOLDEN.tsv  tests/golden/tokenizer_golden.tsv
** SMALL_DIR   tests/golden/tokenizer_small (vocab.txt + the reference's tokenizer.json per set)
** ZH_DIR      ../shared/data/bert-base-chinese (cases of set "zh" are skipped without it)
** WORK_DIR    an empty folder for the model directories this test writes
**
** Prints "ok NAME" / "FAIL NAME: why" / "skip NAME: why", and "# ..." notes
** (the tokenizing speed, measured, never asserted).
*/
#include <errno.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bertfill.h"
#include "json.h"
#include "testlib.h"

static char err[512];

/* ---------------------------------------------------------------- files */

static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 4096, n = 0;
  char *b = malloc(cap + 1);
  size_t got;
  while (b && (got = fread(b + n, 1, cap - n, f)) > 0) {
    n += got;
    if (n == cap) {
      cap *= 2;
      char *nb = realloc(b, cap + 1);
      if (!nb) {
        free(b);
        b = NULL;
      } else b = nb;
    }
  }
  fclose(f);
  if (!b) return NULL;
  b[n] = 0;
  if (len) *len = n;
  return b;
}

static void write_file(const char *path, const char *data, size_t len) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(data, 1, len, f) != len) {
    printf("FAIL write_file: %s: %s\n", path, strerror(errno));
    exit(1);
  }
  fclose(f);
}

static void write_str(const char *dir, const char *name, const char *s) {
  char p[8192];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  write_file(p, s, strlen(s));
}

static void make_dir(const char *dir) {
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
    printf("FAIL mkdir: %s: %s\n", dir, strerror(errno));
    exit(1);
  }
}

/* A model directory WORK/name with the given vocab.txt bytes and optional
** tokenizer_config.json / tokenizer.json contents. */
static const char *model_dir(const char *work, const char *name, const char *vocab,
                             size_t vocab_len, const char *config, const char *tokjson) {
  static char dir[4096];
  snprintf(dir, sizeof dir, "%s/%s", work, name);
  make_dir(dir);
  char p[4200];
  snprintf(p, sizeof p, "%s/vocab.txt", dir);
  if (vocab) write_file(p, vocab, vocab_len);
  if (config) write_str(dir, "tokenizer_config.json", config);
  if (tokjson) write_str(dir, "tokenizer.json", tokjson);
  return dir;
}

/* ---------------------------------------------------------------- golden */

/* Undo the golden file's escapes (\\ \t \n \r \u{HEX}) into UTF-8. */
static size_t unescape(const char *s, char *out) {
  size_t n = 0;
  while (*s) {
    if (*s != '\\') {
      out[n++] = *s++;
      continue;
    }
    s++;
    if (*s == 't') {
      out[n++] = '\t';
      s++;
    } else if (*s == 'n') {
      out[n++] = '\n';
      s++;
    } else if (*s == 'r') {
      out[n++] = '\r';
      s++;
    } else if (*s == '\\') {
      out[n++] = '\\';
      s++;
    } else if (*s == 'u' && s[1] == '{') {
      char *end;
      unsigned long c = strtoul(s + 2, &end, 16);
      s = end + 1;
      if (c < 0x80) out[n++] = (char)c;
      else if (c < 0x800) {
        out[n++] = (char)(0xC0 | (c >> 6));
        out[n++] = (char)(0x80 | (c & 0x3F));
      } else if (c < 0x10000) {
        out[n++] = (char)(0xE0 | (c >> 12));
        out[n++] = (char)(0x80 | ((c >> 6) & 0x3F));
        out[n++] = (char)(0x80 | (c & 0x3F));
      } else {
        out[n++] = (char)(0xF0 | (c >> 18));
        out[n++] = (char)(0x80 | ((c >> 12) & 0x3F));
        out[n++] = (char)(0x80 | ((c >> 6) & 0x3F));
        out[n++] = (char)(0x80 | (c & 0x3F));
      }
    } else {
      printf("FAIL golden_escape: bad escape \\%c\n", *s);
      exit(1);
    }
  }
  out[n] = 0;
  return n;
}

static int parse_ids(const char *s, int32_t *ids, int max) {
  int n = 0;
  while (*s && n < max) {
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s) break;
    ids[n++] = (int32_t)v;
    s = end;
  }
  return n;
}

typedef struct gline {
  char *kind, *set, *name, *input, *expect;
} gline;

static gline *G;
static int nG;
static char *golden_txt; /* G points into it */

static void load_golden(const char *path) {
  char *txt = golden_txt = read_file(path, NULL);
  if (!txt) {
    printf("FAIL golden_file: cannot read %s\n", path);
    exit(1);
  }
  int cap = 0;
  for (char *line = strtok(txt, "\n"); line; line = strtok(NULL, "\n")) {
    if (line[0] == '#' || !line[0]) continue;
    char *f[6] = {0};
    int k = 0;
    for (char *p = line; k < 6; k++) {
      f[k] = p;
      char *tab = strchr(p, '\t');
      if (!tab) {
        k++;
        break;
      }
      *tab = 0;
      p = tab + 1;
    }
    if (k < 5) {
      printf("FAIL golden_file: short line in %s\n", path);
      exit(1);
    }
    if (nG == cap) {
      cap = cap ? cap * 2 : 256;
      G = realloc(G, (size_t)cap * sizeof *G);
    }
    G[nG++] = (gline){f[0], f[1], f[2], f[3], f[4]};
  }
}

/* Compare a tokenization with the expected ids; on mismatch write why. */
static int same_ids(const bf_tokens *t, const char *expect, char *why, size_t whylen) {
  static int32_t ids[4096];
  int n = parse_ids(expect, ids, 4096);
  int ok = n == t->n;
  for (int i = 0; ok && i < n; i++) ok = ids[i] == t->ids[i];
  if (!ok) {
    size_t w = (size_t)snprintf(why, whylen, "got");
    for (int i = 0; i < t->n && i < 40 && w < whylen; i++)
      w += (size_t)snprintf(why + w, whylen - w, " %d", t->ids[i]);
    if (w < whylen) snprintf(why + w, whylen - w, " (%d ids), expected %s", t->n, expect);
  }
  return ok;
}

/* ---------------------------------------------------------------- spans */

/* The spans of t, tokenized from text[0..n), against the rules of
** bertfill.h: [CLS] [0, 0) and [SEP] [n, n); every other token a non-empty
** range of whole characters, in order (start and end never go back); two
** tokens overlap only when the second is a "##" piece of the same
** character; and a token that is no piece, tokenized from its span's bytes
** alone, is the same token first.  "" when they hold, else why. */
static const char *span_problem(const bf_tokenizer *tok, const char *text, size_t n,
                                const bf_tokens *t, char *why, size_t whylen) {
  if (!t->span) return "no spans";
  if (t->span[0].start != 0 || t->span[0].end != 0 || t->span[t->n - 1].start != (int)n ||
      t->span[t->n - 1].end != (int)n)
    return "[CLS] or [SEP] not the empty spans at 0 and at the end";
  bf_tokens alone = {0};
  char e2[256];
  for (int i = 1; i < t->n - 1; i++) {
    bf_span sp = t->span[i], pv = t->span[i - 1];
    const char *tx = bf_tokenizer_token(tok, t->ids[i]);
    int piece = tx && tx[0] == '#' && tx[1] == '#';
    if (sp.start < 0 || sp.end > (int)n || sp.start >= sp.end)
      snprintf(why, whylen, "token %d: span [%d, %d) is empty or outside the text", i, sp.start,
               sp.end);
    else if ((text[sp.start] & 0xC0) == 0x80 || (sp.end < (int)n && (text[sp.end] & 0xC0) == 0x80))
      snprintf(why, whylen, "token %d: span [%d, %d) cuts a character", i, sp.start, sp.end);
    else if (i > 1 && (sp.start < pv.start || sp.end < pv.end))
      snprintf(why, whylen, "token %d: span [%d, %d) goes back from [%d, %d)", i, sp.start, sp.end,
               pv.start, pv.end);
    else if (i > 1 && sp.start < pv.end && !piece)
      snprintf(why, whylen, "token %d (%s): span [%d, %d) overlaps [%d, %d) but is no piece", i,
               tx ? tx : "?", sp.start, sp.end, pv.start, pv.end);
    else if (!piece && (bf_tokenize(tok, text + sp.start, sp.end - sp.start, &alone, e2,
                                    sizeof e2) != BF_OK ||
                        alone.n < 3 || alone.ids[1] != t->ids[i]))
      snprintf(why, whylen, "token %d (%s): its span [%d, %d) alone does not give it first", i,
               tx ? tx : "?", sp.start, sp.end);
    else continue;
    bf_tokens_free(&alone);
    return why;
  }
  bf_tokens_free(&alone);
  return "";
}

/* Spans written out by hand, per set: "start-end" per token, [CLS] and
** [SEP] included. */
static const struct {
  const char *set, *name, *text, *spans;
} span_cases[] = {
  {"lower", "mask_glued", "HELLO[MASK]World", "0-0 0-5 5-11 11-16 16-16"},
  {"lower", "whitespace", "  Hello \t World ", "0-0 2-7 10-15 16-16"},
  {"lower", "accent_in_char", "Caf\xc3\xa9", "0-0 0-5 5-5"},
  {"lower", "accent_alone_dropped", "cafe\xcc\x81", "0-0 0-4 6-6"},
  {"lower", "dotted_i", "\xc4\xb0stanbul", "0-0 0-9 9-9"},
  {"lower", "pieces_split_chars", "UnAffable jumps", "0-0 0-2 2-5 5-9 10-14 14-15 15-15"},
  {"lower", "pieces_of_two_byte_chars", "\xc3\x84\xc3\x96\xc3\x9c", "0-0 0-2 2-4 4-6 6-6"},
  {"lower", "hangul_jamo_share_the_syllable", "\xed\x95\x9c \xea\xb5\xad",
   "0-0 0-3 0-3 0-3 4-7 4-7 4-7 7-7"},
  {"lower", "unknown_word_whole", "\xed\x95\x9c\xea\xb5\xad", "0-0 0-6 6-6"},
  {"lower", "cjk_and_unknown_punct",
   "\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c\xef\xbc\x8c\xe4\xb8\xad",
   "0-0 0-3 3-6 6-9 9-12 12-15 15-18 18-18"},
  {"lower", "control_chars_dropped", "\x01hello\x7f world\x02", "0-0 1-6 8-13 14-14"},
  {"lower", "too_long_word_unk",
   "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
   "aa"
   "aaaa b",
   "0-0 0-101 102-103 103-103"},
  {"zh", "sentence",
   "\xe4\xbb\x8a\xe5\xa4\xa9\xe5\xa4\xa9\xe6\xb0\x94\xe7\x9c\x9f[MASK]\xe5\x95\x8a",
   "0-0 0-3 3-6 6-9 9-12 12-15 15-21 21-24 24-24"},
  {"zh", "spaced_masks", " [MASK] \xe5\xa5\xbd[MASK]\n", "0-0 1-7 8-11 11-17 18-18"},
};

static void run_span_cases(const bf_tokenizer *tok, const char *set) {
  bf_tokens t = {0};
  char name[256], got[1024], why[512];
  for (size_t c = 0; c < sizeof span_cases / sizeof *span_cases; c++) {
    if (strcmp(span_cases[c].set, set)) continue;
    const char *text = span_cases[c].text;
    int rc = bf_tokenize(tok, text, -1, &t, err, sizeof err);
    size_t w = 0;
    got[0] = 0;
    for (int i = 0; rc == BF_OK && i < t.n && w < sizeof got; i++)
      w += (size_t)snprintf(got + w, sizeof got - w, "%s%d-%d", i ? " " : "", t.span[i].start,
                            t.span[i].end);
    snprintf(name, sizeof name, "spans_%s_%s", set, span_cases[c].name);
    const char *p = rc == BF_OK ? span_problem(tok, text, strlen(text), &t, why, sizeof why) : err;
    CHECKF(name, rc == BF_OK && !strcmp(got, span_cases[c].spans) && !p[0],
           "spans \"%s\", expected \"%s\" %s", got, span_cases[c].spans, p);
  }
  bf_tokens_free(&t);
}

/* Run every "case" line of one set through tok.  verbose: one ok/FAIL line
** per case; else a single line named label for the whole set. */
static int run_set(const bf_tokenizer *tok, const char *set, const char *label, int verbose) {
  bf_tokens t = {0};
  char buf[8192], why[1024], name[256];
  int fails = 0, count = 0, spans_ok = 0;
  char first_fail[1400] = "";
  for (int i = 0; i < nG; i++) {
    if (strcmp(G[i].kind, "case") || strcmp(G[i].set, set)) continue;
    count++;
    size_t n = unescape(G[i].input, buf);
    int rc = bf_tokenize(tok, buf, (long)n, &t, err, sizeof err);
    int ok = rc == BF_OK && same_ids(&t, G[i].expect, why, sizeof why);
    if (rc != BF_OK) snprintf(why, sizeof why, "rc %d: %s", rc, err);
    if (!ok) {
      fails++;
      if (!first_fail[0]) snprintf(first_fail, sizeof first_fail, "%s: %s", G[i].name, why);
    }
    if (verbose) {
      snprintf(name, sizeof name, "tok_%s_%s", set, G[i].name);
      CHECKF(name, ok, "%s", why);
    }
    /* the spans follow the rules of bertfill.h */
    if (ok) {
      char sw[512];
      const char *p = span_problem(tok, buf, n, &t, sw, sizeof sw);
      if (p[0]) {
        printf("FAIL spans_%s_%s: %s\n", set, G[i].name, p);
        tl_failed++;
      } else spans_ok++;
    }
    /* the counted masks agree with the ids */
    if (ok) {
      int m = 0;
      for (int j = 0; j < t.n; j++) m += t.ids[j] == bf_tokenizer_mask_id(tok);
      if (m != t.n_masks) {
        printf("FAIL n_masks_%s_%s: %d, counted %d\n", set, G[i].name, t.n_masks, m);
        tl_failed++;
      }
    }
  }
  if (!verbose)
    CHECKF(label, fails == 0 && count > 0, "%d of %d cases differ; first: %s", fails, count,
           first_fail);
  else {
    snprintf(name, sizeof name, "spans_rules_%s", set);
    CHECKF(name, spans_ok == count - fails, "%d of %d cases", spans_ok, count - fails);
    run_span_cases(tok, set);
  }
  bf_tokens_free(&t);
  return count;
}

/* ---------------------------------------------------------------- zh */

static void test_zh(const char *zhdir) {
  char p[4096];
  snprintf(p, sizeof p, "%s/vocab.txt", zhdir);
  if (access(p, R_OK) != 0) {
    SKIP("tokenizer_zh", "no bert-base-chinese vocabulary at ../shared/data/bert-base-chinese");
    return;
  }
  bf_tokenizer *tok = bf_tokenizer_load(zhdir, err, sizeof err);
  CHECKF("zh_load", tok != NULL, "%s", err);
  if (!tok) return;
  CHECK("zh_vocab_size_21128", bf_tokenizer_vocab_size(tok) == 21128);
  CHECK("zh_no_lowercase", bf_tokenizer_lowercase(tok) == 0);
  CHECK("zh_no_strip_accents", bf_tokenizer_strip_accents(tok) == 0);
  CHECK("zh_mask_id_103", bf_tokenizer_mask_id(tok) == 103);
  CHECK("zh_token_out_of_range",
        bf_tokenizer_token(tok, -1) == NULL && bf_tokenizer_token(tok, 21128) == NULL);

  /* vocab.txt read as tokenizer.json's vocabulary says (an independent copy
  ** of the same list): split on "\n" only, ids = line numbers */
  snprintf(p, sizeof p, "%s/tokenizer.json", zhdir);
  json_value *tj = json_parse_file(p, err, sizeof err);
  if (!tj) SKIP("zh_vocab_matches_tokenizer_json", err);
  else {
    const json_value *v = json_get(json_get(tj, "model"), "vocab");
    size_t bad = 0, n = json_len(v);
    for (size_t i = 0; i < n; i++) {
      const json_value *id = json_at(v, i);
      size_t kl;
      const char *key = json_key(v, i, &kl);
      const char *mine = id && id->is_int ? bf_tokenizer_token(tok, (int32_t)id->i) : NULL;
      if (!mine || strlen(mine) != kl || memcmp(mine, key, kl) != 0) bad++;
    }
    CHECKF("zh_vocab_matches_tokenizer_json", n == 21128 && bad == 0, "%zu entries, %zu differ", n,
           bad);
    json_free(tj);
  }

  /* vocab facts from the golden file (the reference's vocabulary) */
  char buf[8192], name[256];
  for (int i = 0; i < nG; i++) {
    if (strcmp(G[i].kind, "vocab")) continue;
    if (!strcmp(G[i].name, "size")) {
      CHECKF("zh_vocab_size_reference", bf_tokenizer_vocab_size(tok) == atoi(G[i].input), "%d",
             bf_tokenizer_vocab_size(tok));
      continue;
    }
    unescape(G[i].input, buf);
    int id = atoi(G[i].name);
    const char *mine = bf_tokenizer_token(tok, id);
    snprintf(name, sizeof name, "zh_vocab_entry_%d", id);
    if (id == 343) snprintf(name, sizeof name, "fact_vocab_split_on_newline_only_343_is_U+2028");
    CHECKF(name, mine && !strcmp(mine, buf), "token %d is \"%s\", reference \"%s\"", id,
           mine ? mine : "(null)", buf);
  }

  run_set(tok, "zh", NULL, 1);

  /* invalid (and valid) byte strings; offsets from the WHATWG decoder */
  bf_tokens t = {0};
  for (int i = 0; i < nG; i++) {
    if (strcmp(G[i].kind, "bytes")) continue;
    size_t n = 0;
    for (const char *h = G[i].input; h[0] && h[1]; h += 2) {
      unsigned v;
      sscanf(h, "%2x", &v);
      buf[n++] = (char)v;
    }
    int rc = bf_tokenize(tok, buf, (long)n, &t, err, sizeof err);
    snprintf(name, sizeof name, "tok_bytes_%s", G[i].name);
    if (!strncmp(G[i].expect, "ERR@", 4)) {
      char want[64];
      snprintf(want, sizeof want, "byte %s:", G[i].expect + 4);
      CHECKF(name,
             rc == BF_ERR_INPUT && strstr(err, "invalid UTF-8") && strstr(err, want) && t.n == 0 &&
               t.invalid_at == atoi(G[i].expect + 4),
             "rc %d, n %d, at %d, message \"%s\", expected \"%s\"", rc, t.n, t.invalid_at, err,
             want);
    } else {
      char why[1024] = "";
      int ok = rc == BF_OK && same_ids(&t, G[i].expect, why, sizeof why);
      CHECKF(name, ok, "rc %d %s %s", rc, err, why);
    }
  }

  /* reuse of one bf_tokens for a long then a short text; n_masks reset */
  {
    char big[20000];
    size_t n = 0;
    while (n + 40 < sizeof big) {
      memcpy(big + n, "今天天气真[MASK]啊，", 27);
      n += 27;
    }
    big[n] = 0;
    int rc1 = bf_tokenize(tok, big, -1, &t, err, sizeof err);
    int n1 = t.n, m1 = t.n_masks;
    int rc2 = bf_tokenize(tok, "[MASK]", -1, &t, err, sizeof err);
    CHECKF("zh_tokens_reused",
           rc1 == BF_OK && rc2 == BF_OK && n1 > 5000 && m1 == (int)(n / 27) && t.n == 3 &&
             t.n_masks == 1 && t.ids[1] == 103 && t.cap >= n1,
           "rc %d/%d n1 %d m1 %d n %d masks %d", rc1, rc2, n1, m1, t.n, t.n_masks);
  }
  /* NUL-terminated vs explicit length; NULL text */
  {
    int rc1 = bf_tokenize(tok, "中a\0b", 6, &t, err, sizeof err);
    int ok1 = rc1 == BF_OK && t.n == 4 && t.ids[1] == 704 &&
              t.ids[2] == 9386; /* 中 ab (NUL dropped) */
    int rc2 = bf_tokenize(tok, "中a\0b", -1, &t, err, sizeof err);
    int ok2 = rc2 == BF_OK && t.n == 4 && t.ids[2] == 143; /* 中 a */
    CHECKF("zh_length_argument", ok1 && ok2, "rc %d %d n %d", rc1, rc2, t.n);
    int rc3 = bf_tokenize(tok, NULL, 0, &t, err, sizeof err);
    int ok3 = rc3 == BF_OK && t.n == 2 && t.ids[0] == 101 && t.ids[1] == 102;
    int rc4 = bf_tokenize(tok, NULL, -1, &t, err, sizeof err);
    CHECKF("zh_null_text", ok3 && rc4 == BF_ERR_INPUT && t.n == 0, "rc %d %d", rc3, rc4);
    CHECK("zh_null_tokenizer",
          bf_tokenize(NULL, "a", 1, &t, err, sizeof err) == BF_ERR_INPUT && err[0]);
  }

  /* random input: never a crash; valid results are well formed */
  {
    uint64_t s = 12345;
    int bad = 0, valid = 0;
    static const char *pieces[] = {"中",
                                   "[MASK]",
                                   "a",
                                   "Z",
                                   " ",
                                   "\t",
                                   "\xe2\x80\xa8",
                                   "\xc3\xa9",
                                   "##",
                                   "\xf0\x9f\x98\x80",
                                   "\xe2\x80\x8b",
                                   "[",
                                   "]",
                                   "1",
                                   "\xef\xbc\x91",
                                   ".",
                                   "\xed\xa0\x80",
                                   "\xc0",
                                   "\x80"};
    for (int iter = 0; iter < 3000; iter++) {
      char b[256];
      size_t n = 0;
      int len = (int)((s >> 33) % 40);
      for (int k = 0; k < len; k++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        if ((s >> 60) < 3) b[n++] = (char)(s >> 40);
        else {
          const char *pc = pieces[(s >> 35) % (sizeof pieces / sizeof *pieces)];
          size_t l = strlen(pc);
          if (n + l < sizeof b) {
            memcpy(b + n, pc, l);
            n += l;
          }
        }
      }
      s = s * 6364136223846793005ULL + 1442695040888963407ULL;
      int rc = bf_tokenize(tok, b, (long)n, &t, err, sizeof err);
      if (rc == BF_OK) {
        valid++;
        if (t.n < 2 || t.ids[0] != 101 || t.ids[t.n - 1] != 102) bad++;
        for (int j = 0; j < t.n; j++)
          if (t.ids[j] < 0 || t.ids[j] >= 21128) bad++;
        char why[512];
        const char *p = span_problem(tok, b, n, &t, why, sizeof why);
        if (p[0] && bad++ == 0) printf("# random input %d: %s\n", iter, p);
      } else if (rc != BF_ERR_INPUT || !strstr(err, "invalid UTF-8 at byte") || t.invalid_at < 0 ||
                 t.invalid_at >= (int)n)
        bad++;
    }
    CHECKF("zh_random_input", bad == 0 && valid > 100, "%d bad results, %d valid inputs", bad,
           valid);
  }

  /* speed: a 100-character sentence (mixed Chinese, digits, Latin) */
  {
    const char *s100 = "北京时间2023年10月1日，iPhone "
                       "15在中国的售价是5999元。今天天气真[MASK]啊，我们一起去公园散步吧！"
                       "自然语言处理是人工智能的一个重要方向，BERT模型在很多任务上都取得了很好的效"
                       "果。";
    int chars = 0;
    for (const char *q = s100; *q; q++) chars += ((unsigned char)*q & 0xC0) != 0x80;
    struct timespec a, b;
    int iters = 0;
    double el = 0;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do {
      for (int k = 0; k < 100; k++) bf_tokenize(tok, s100, -1, &t, err, sizeof err);
      iters += 100;
      clock_gettime(CLOCK_MONOTONIC, &b);
      el = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
    } while (el < 0.2 && iters < 200000);
    printf("# speed: %.2f us per %d-character sentence (%d tokens), %d runs\n", 1e6 * el / iters,
           chars, t.n, iters);
  }
  bf_tokens_free(&t);
  bf_tokenizer_free(tok);
}

/* ---------------------------------------------------------------- small vocab */

/* ---------------------------------------------------------------- look-alikes of [MASK] */

/* Whether t holds the three tokens "[" "mask" "]" one after another. */
static int has_bracketed_mask(const bf_tokenizer *tok, const bf_tokens *t) {
  int32_t open = bf_tokenizer_find(tok, "[", 1), word = bf_tokenizer_find(tok, "mask", 4),
          close = bf_tokenizer_find(tok, "]", 1);
  for (int i = 0; i + 2 < t->n; i++)
    if (t->ids[i] == open && t->ids[i + 1] == word && t->ids[i + 2] == close) return 1;
  return 0;
}

/* The look-alikes of issue 41 (in 中华人民共 x 国): each one tokenizes as
** "[mask]" does with the uncased tokenizer (lower), and bf_mask_lookalike
** finds it whole, at byte 15, with the character that cannot be seen. */
static void lookalike_cases(const bf_tokenizer *lower) {
  static const struct {
    const char *name, *x;
    size_t len;
    uint32_t unplain;
  } c[] = {
    {"newline", "[MASK\n]", 7, 0x0A},
    {"zero_width_space", "[MA\xe2\x80\x8bSK]", 9, 0x200B},
    {"byte_order_mark", "[\xef\xbb\xbfMASK]", 9, 0xFEFF},
    {"word_joiner", "[MASK\xe2\x81\xa0]", 9, 0x2060},
    {"soft_hyphen", "[MA\xc2\xadSK]", 8, 0xAD},
    {"thin_space", "[\xe2\x80\x89MASK]", 9, 0x2009},
    {"accented_letter", "[M\xc3\x81SK]", 7, 0xC1},
    {"combining_accent", "[MASK\xcc\x81]", 8, 0x301},
    {"nul", "[MA\0SK]", 7, 0},
    {"kelvin_sign", "[MAS\xe2\x84\xaa]", 8, 0x212A},
  };
  bf_tokens t = {0}, want = {0};
  int rc = bf_tokenize(lower,
                       "\xe4\xb8\xad\xe5\x8d\x8e\xe4\xba\xba\xe6\xb0\x91\xe5\x85\xb1[mask]"
                       "\xe5\x9b\xbd",
                       -1, &want, err, sizeof err);
  CHECKF("lookalike_mask_lower_case", rc == BF_OK && has_bracketed_mask(lower, &want), "%s", err);
  for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
    char text[64], name[96];
    memcpy(text, "\xe4\xb8\xad\xe5\x8d\x8e\xe4\xba\xba\xe6\xb0\x91\xe5\x85\xb1", 15);
    memcpy(text + 15, c[i].x, c[i].len);
    memcpy(text + 15 + c[i].len, "\xe5\x9b\xbd", 3);
    size_t n = 15 + c[i].len + 3;
    rc = bf_tokenize(lower, text, (long)n, &t, err, sizeof err);
    snprintf(name, sizeof name, "lookalike_tokens_as_lower_mask_%s", c[i].name);
    CHECKF(name, rc == BF_OK && t.n == want.n && !memcmp(t.ids, want.ids, sizeof *t.ids * t.n),
           "not the tokens of [mask]: %s", err);
    bf_lookalike la;
    rc = bf_mask_lookalike(text, n, &la);
    snprintf(name, sizeof name, "lookalike_found_%s", c[i].name);
    CHECKF(name,
           rc == BF_OK && la.at == 15 && la.len == c[i].len && la.n_unplain == 1 &&
             la.unplain[0] == c[i].unplain,
           "at %ld len %zu, %d unplain (U+%04X)", la.at, la.len, la.n_unplain,
           la.n_unplain ? (unsigned)la.unplain[0] : 0u);
  }
  static const char *plain[] =
    {"[MASK]", "mask",     "[\xe9\x9d\xa2\xe5\x85\xb7]", "[M ASK]", "[MASKS]",
     "[MAS]",  "[[MASK]]", "\xe2\x80\x8b[MASK]\xcc\x81"};
  for (size_t i = 0; i < sizeof plain / sizeof *plain; i++) {
    bf_lookalike la;
    char name[96];
    snprintf(name, sizeof name, "lookalike_not_%zu", i);
    CHECKF(name, bf_mask_lookalike(plain[i], strlen(plain[i]), &la) == BF_OK && la.at < 0,
           "'%s' found at %ld", plain[i], la.at);
  }
  bf_tokens_free(&t);
  bf_tokens_free(&want);
}

/* A random number below n (a 64-bit LCG; the state in *seed). */
static int lcg_below(uint64_t *seed, int n) {
  *seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
  return (int)((*seed >> 33) % (uint64_t)n);
}

/* Random texts shaped like a look-alike (an opening bracket, fillers, the
** letters, fillers, a closing bracket, each part now and then something
** else): whenever the tokenizer reads "[" "mask" "]", the detector finds a
** look-alike, whatever the tokenizer's settings (tok, set); with every
** normalizer step on (exact: the "lower" set) it finds one only then, but
** for the full-width brackets (look-alikes the tokenizer reads otherwise). */
static void lookalike_random(const bf_tokenizer *tok, const char *set, int exact) {
  static const char *filler[] = {" ",
                                 "\n",
                                 "\t",
                                 "\xe2\x80\x8b",
                                 "\xcc\x81",
                                 "\xc2\xad",
                                 "\xef\xbb\xbf",
                                 "\xe2\x80\x89",
                                 "\xe2\x80\xa8",
                                 "\xe3\x80\x80",
                                 "\0",
                                 "x",
                                 "\xe4\xb8\xad",
                                 "[MASK]"};
  static const char *letters[] = {"mask", "MASK",        "Mask",
                                  "ma",   "MA",          "sk",
                                  "SK",   "M\xc3\x81SK", "MAS\xe2\x84\xaa",
                                  "m",    "ask",         "masks"};
  static const char *open[] = {"[", "[", "[", "\xef\xbc\xbb", "]", "x"};
  static const char *close[] = {"]", "]", "]", "\xe3\x80\x91", "[", "\xe4\xb8\xad"};
  const int nf = (int)(sizeof filler / sizeof *filler),
            nl = (int)(sizeof letters / sizeof *letters);
  uint64_t seed = 41;
  bf_tokens t = {0};
  int missed = 0, extra = 0, found = 0;
  char first_bad[160] = "";
  for (int iter = 0; iter < 20000; iter++) {
    const char *part[16];
    int np = 0;
    for (int j = lcg_below(&seed, 2); j > 0; j--) part[np++] = filler[lcg_below(&seed, nf)];
    int o = lcg_below(&seed, 6), c = lcg_below(&seed, 6);
    part[np++] = open[o];
    for (int j = lcg_below(&seed, 3); j > 0; j--) part[np++] = filler[lcg_below(&seed, nf)];
    for (int j = 1 + lcg_below(&seed, 2); j > 0; j--) part[np++] = letters[lcg_below(&seed, nl)];
    for (int j = lcg_below(&seed, 3); j > 0; j--) part[np++] = filler[lcg_below(&seed, nf)];
    part[np++] = close[c];
    for (int j = lcg_below(&seed, 2); j > 0; j--) part[np++] = filler[lcg_below(&seed, nf)];
    char text[160];
    size_t n = 0;
    for (int j = 0; j < np; j++) {
      size_t l = part[j][0] ? strlen(part[j]) : 1; /* "\0": one NUL */
      memcpy(text + n, part[j], l);
      n += l;
    }
    bf_lookalike la;
    if (bf_tokenize(tok, text, (long)n, &t, err, sizeof err) != BF_OK ||
        bf_mask_lookalike(text, n, &la) != BF_OK) {
      missed++;
      continue;
    }
    int reads = has_bracketed_mask(tok, &t);
    found += reads;
    int wide = o == 3 || c == 3; /* full-width brackets: look-alikes read as other tokens */
    if ((reads && la.at < 0) || (exact && !wide && !reads && la.at >= 0)) {
      if (reads) missed++;
      else extra++;
      if (!first_bad[0]) snprintf(first_bad, sizeof first_bad, "%.*s", (int)n, text);
    }
  }
  char name[96];
  snprintf(name, sizeof name, "lookalike_random_%s", set);
  CHECKF(name, missed == 0 && extra == 0 && found > 100,
         "%d texts read as [ mask ] not found, %d found but not read so, %d read so; first: '%s'",
         missed, extra, found, first_bad);
  bf_tokens_free(&t);
}

static void test_small(const char *small, const char *work) {
  char p[4096];
  size_t vlen;
  snprintf(p, sizeof p, "%s/vocab.txt", small);
  char *vocab = read_file(p, &vlen);
  if (!vocab) {
    printf("FAIL small_vocab: cannot read %s\n", p);
    tl_failed++;
    return;
  }
  char *tj[4] = {0};
  const char *sets[4] = {"lower", "nostrip", "cased", "added"};
  for (int k = 0; k < 4; k++) {
    snprintf(p, sizeof p, "%s/%s.json", small, sets[k]);
    tj[k] = read_file(p, NULL);
    if (!tj[k]) {
      printf("FAIL small_json: cannot read %s\n", p);
      tl_failed++;
      free(vocab);
      return;
    }
  }
  struct {
    const char *dir, *config;
    int tj, verbose;
    const char *set, *label;
    int lower, strip;
  } v[] = {
    {"lower_cfg", "{\"do_lower_case\": true}", -1, 1, "lower", NULL, 1, 1},
    {"lower_defaults", NULL, -1, 0, "lower", "small_defaults_lowercase_and_strip", 1, 1},
    {"lower_tj", NULL, 0, 0, "lower", "small_tokenizer_json_lowercase", 1, 1},
    {"lower_cfg_over_tj", "{\"do_lower_case\": true}", 2, 0, "lower",
     "small_config_overrides_tokenizer_json_true", 1, 1},
    {"nostrip_cfg", "{\"do_lower_case\": true, \"strip_accents\": false}", -1, 1, "nostrip", NULL,
     1, 0},
    {"nostrip_tj", NULL, 1, 0, "nostrip", "small_tokenizer_json_strip_accents_false", 1, 0},
    {"nostrip_mixed", "{\"do_lower_case\": true}", 1, 0, "nostrip",
     "small_strip_accents_from_normalizer", 1, 0},
    {"cased_cfg", "{\"do_lower_case\": false}", -1, 1, "cased", NULL, 0, 0},
    {"cased_tj", NULL, 2, 0, "cased", "small_tokenizer_json_cased", 0, 0},
    {"cased_cfg_over_tj", "{\"do_lower_case\": false, \"model_max_length\": 512}", 0, 0, "cased",
     "small_config_overrides_tokenizer_json_false", 0, 0},
    {"added_tj", NULL, 3, 1, "added", NULL, 1, 1},
  };
  for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
    const char *dir = model_dir(work, v[i].dir, vocab, vlen, v[i].config,
                                v[i].tj >= 0 ? tj[v[i].tj] : NULL);
    bf_tokenizer *tok = bf_tokenizer_load(dir, err, sizeof err);
    char name[256];
    snprintf(name, sizeof name, "small_load_%s", v[i].dir);
    CHECKF(name,
           tok && bf_tokenizer_lowercase(tok) == v[i].lower &&
             bf_tokenizer_strip_accents(tok) == v[i].strip,
           "%s lower %d strip %d", tok ? "" : err, tok ? bf_tokenizer_lowercase(tok) : -1,
           tok ? bf_tokenizer_strip_accents(tok) : -1);
    if (!tok) continue;
    run_set(tok, v[i].set, v[i].label, v[i].verbose);
    if (v[i].verbose) lookalike_random(tok, v[i].set, !strcmp(v[i].set, "lower"));
    if (!strcmp(v[i].dir, "lower_cfg")) lookalike_cases(tok);
    bf_tokenizer_free(tok);
  }

  /* CRLF line ends: the same ids as "\n" */
  {
    char *crlf = malloc(vlen * 2 + 1);
    size_t n = 0;
    for (size_t i = 0; i < vlen; i++) {
      if (vocab[i] == '\n') crlf[n++] = '\r';
      crlf[n++] = vocab[i];
    }
    const char *dir = model_dir(work, "crlf", crlf, n, "{\"do_lower_case\": true}", NULL);
    bf_tokenizer *tok = bf_tokenizer_load(dir, err, sizeof err);
    CHECKF("small_load_crlf", tok != NULL, "%s", err);
    if (tok) {
      run_set(tok, "lower", "small_vocab_crlf_line_ends", 0);
      bf_tokenizer_free(tok);
    }
    free(crlf);
  }
  for (int k = 0; k < 4; k++) free(tj[k]);
  free(vocab);
}

/* ---------------------------------------------------------------- vocab.txt details and errors */

static bf_tokenizer *load_vocab(const char *work, const char *name, const char *vocab, size_t len,
                                const char *config, const char *tokjson) {
  return bf_tokenizer_load(model_dir(work, name, vocab, len, config, tokjson), err, sizeof err);
}

#define SPECIALS "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n"

static void test_vocab_rules(const char *work) {
  bf_tokens t = {0};
  /* duplicates: the later line wins (Python's dict / Rust's HashMap built in
  ** file order); empty lines are entries; no final newline is fine */
  {
    const char v[] = SPECIALS
      "abc\n\nxyz\nabc\n##c\nab"; /* ids 5 abc, 6 "", 7 xyz, 8 abc, 9 ##c, 10 ab */
    bf_tokenizer *tok = load_vocab(work, "dup", v, sizeof v - 1, "{\"do_lower_case\": false}",
                                   NULL);
    CHECKF("vocab_dup_load", tok != NULL, "%s", err);
    if (tok) {
      CHECK("vocab_size_counts_empty_and_last_line", bf_tokenizer_vocab_size(tok) == 11);
      CHECK("vocab_empty_line_is_an_entry",
            !strcmp(bf_tokenizer_token(tok, 6), "") && !strcmp(bf_tokenizer_token(tok, 10), "ab"));
      CHECK("vocab_dup_token_strings_kept", !strcmp(bf_tokenizer_token(tok, 5), "abc") &&
                                              !strcmp(bf_tokenizer_token(tok, 8), "abc"));
      int rc = bf_tokenize(tok, "abc abcc", -1, &t, err, sizeof err);
      CHECKF("vocab_dup_later_line_wins",
             rc == BF_OK && t.n == 5 && t.ids[1] == 8 && t.ids[2] == 8 && t.ids[3] == 9,
             "rc %d n %d %d %d %d", rc, t.n, t.n > 1 ? t.ids[1] : -1, t.n > 2 ? t.ids[2] : -1,
             t.n > 3 ? t.ids[3] : -1);
      bf_tokenizer_free(tok);
    }
  }
  /* a U+2028 entry stays one entry; [MASK] etc. found anywhere in the file */
  {
    const char v[] = "a\xe2\x80\xa8"
                     "b\n"
                     "[MASK]\n[SEP]\n[CLS]\n[UNK]\n[PAD]\n";
    bf_tokenizer *tok = load_vocab(work, "u2028", v, sizeof v - 1, NULL, NULL);
    CHECKF("vocab_u2028_inside_entry",
           tok && bf_tokenizer_vocab_size(tok) == 6 &&
             !strcmp(bf_tokenizer_token(tok, 0), "a\xe2\x80\xa8"
                                                 "b") &&
             bf_tokenizer_mask_id(tok) == 1,
           "%s", tok ? "" : err);
    bf_tokenizer_free(tok);
  }
  /* load errors: one message naming the file and the problem */
  struct {
    const char *name, *vocab, *config, *tokjson, *want1, *want2;
  } e[] = {
    {"err_missing_mask", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n", NULL, NULL, "vocab.txt", "[MASK]"},
    {"err_missing_unk", "[PAD]\n[MASK]\n[CLS]\n[SEP]\n", NULL, NULL, "vocab.txt", "[UNK]"},
    {"err_empty_vocab", "", NULL, NULL, "vocab.txt", "[UNK]"},
    {"err_lone_cr", SPECIALS "a\rb\n", NULL, NULL, "vocab.txt", "line 6"},
    {"err_vocab_bad_utf8", SPECIALS "ok\nbad\xff\n", NULL, NULL, "vocab.txt", "line 7"},
    {"err_vocab_nul", SPECIALS "a\0b\n", NULL, NULL, "vocab.txt", "NUL"},
    {"err_config_syntax", SPECIALS, "{\"do_lower_case\": tru}", NULL, "tokenizer_config.json",
     "line 1"},
    {"err_config_type", SPECIALS, "{\"do_lower_case\": \"yes\"}", NULL, "tokenizer_config.json",
     "do_lower_case"},
    {"err_config_mask_token_type", SPECIALS, "{\"mask_token\": 5}", NULL, "tokenizer_config.json",
     "mask_token"},
    {"err_config_custom_mask_missing", SPECIALS, "{\"mask_token\": \"<mask>\"}", NULL, "vocab.txt",
     "<mask>"},
    {"err_tokjson_normalizer", SPECIALS, NULL, "{\"normalizer\": {\"type\": \"NFKC\"}}",
     "tokenizer.json", "NFKC"},
    {"err_tokjson_pretokenizer", SPECIALS, NULL, "{\"pre_tokenizer\": {\"type\": \"Whitespace\"}}",
     "tokenizer.json", "Whitespace"},
    {"err_tokjson_model", SPECIALS, NULL, "{\"model\": {\"type\": \"BPE\"}}", "tokenizer.json",
     "BPE"},
    {"err_tokjson_flag_type", SPECIALS, NULL,
     "{\"normalizer\": {\"type\": \"BertNormalizer\", \"lowercase\": 1}}", "tokenizer.json",
     "lowercase"},
    {"err_tokjson_max_chars", SPECIALS, NULL,
     "{\"model\": {\"type\": \"WordPiece\", \"max_input_chars_per_word\": 0}}", "tokenizer.json",
     "max_input_chars_per_word"},
    {"err_added_token_id_range", SPECIALS, NULL,
     "{\"added_tokens\": [{\"id\": 99, \"content\": \"<x>\"}]}", "tokenizer.json", "<x>"},
    {"err_added_token_no_content", SPECIALS, NULL, "{\"added_tokens\": [{\"id\": 1}]}",
     "tokenizer.json", "content"},
    {"err_tokjson_truncated", SPECIALS, NULL, "{\"added_tokens\": [", "tokenizer.json", "line 1"},
  };
  for (size_t i = 0; i < sizeof e / sizeof *e; i++) {
    size_t len = strlen(e[i].vocab);
    if (!strcmp(e[i].name, "err_vocab_nul")) len = sizeof SPECIALS - 1 + 4;
    bf_tokenizer *tok = load_vocab(work, e[i].name, e[i].vocab, len, e[i].config, e[i].tokjson);
    CHECKF(e[i].name, !tok && strstr(err, e[i].want1) && strstr(err, e[i].want2), "%s",
           tok ? "loaded" : err);
    bf_tokenizer_free(tok);
  }
  {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/no_such_dir", work);
    bf_tokenizer *tok = bf_tokenizer_load(dir, err, sizeof err);
    CHECKF("err_missing_dir", !tok && strstr(err, "no_such_dir/vocab.txt"), "%s", err);
  }
  /* settings read from tokenizer.json's model; a custom mask token */
  {
    const char v[] = SPECIALS "<mask>\nab\n##c\n";
    bf_tokenizer *tok =
      load_vocab(work, "custom", v, sizeof v - 1,
                 "{\"mask_token\": {\"content\": \"<mask>\"}, \"do_lower_case\": false}",
                 "{\"model\": {\"type\": \"WordPiece\", \"max_input_chars_per_word\": 3, "
                 "\"continuing_subword_prefix\": \"##\"}}");
    CHECKF("custom_mask_token_load", tok && bf_tokenizer_mask_id(tok) == 5, "%s",
           tok ? "wrong mask id" : err);
    if (tok) {
      int rc = bf_tokenize(tok, "abc x<mask>abcd", -1, &t, err, sizeof err);
      /* abc -> ab ##c; x -> [UNK]; <mask> never split; abcd (4 > 3 chars) -> [UNK] */
      CHECKF("custom_mask_token_and_max_chars",
             rc == BF_OK && t.n == 7 && t.ids[1] == 6 && t.ids[2] == 7 && t.ids[3] == 1 &&
               t.ids[4] == 5 && t.ids[5] == 1 && t.n_masks == 1,
             "rc %d n %d", rc, t.n);
      bf_tokenizer_free(tok);
    }
  }
  bf_tokens_free(&t);
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s GOLDEN.tsv SMALL_DIR ZH_DIR WORK_DIR\n", argv[0]);
    return 2;
  }
  load_golden(argv[1]);
  make_dir(argv[4]);
  int ncase = 0;
  for (int i = 0; i < nG; i++) ncase += !strcmp(G[i].kind, "case") || !strcmp(G[i].kind, "bytes");
  printf("# %d golden cases in %s\n", ncase, argv[1]);
  test_zh(argv[3]);
  test_small(argv[2], argv[4]);
  test_vocab_rules(argv[4]);
  free(G);
  free(golden_txt);
  TL_EXIT();
}
