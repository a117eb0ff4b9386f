/*
** tokenizer.c — the Hugging Face BERT tokenizer (WordPiece) in C.
**
** Produces the same token ids as BertTokenizerFast — the tokenizer that
** AutoTokenizer gives for google-bert/bert-base-chinese, i.e. the pipeline
** described by the model's tokenizer.json — for any model directory with a
** vocab.txt:
**
**   char err[256];
**   bf_tokenizer *tok = bf_tokenizer_load("models/bert-base-chinese", err, sizeof err);
**   bf_tokens t = {0};
**   if (bf_tokenize(tok, "今天天气真[MASK]啊", -1, &t, err, sizeof err) == BF_OK)
**     for (int i = 0; i < t.n; i++) printf("%d %s\n", t.ids[i], bf_tokenizer_token(tok, t.ids[i]));
**   bf_tokens_free(&t);
**   bf_tokenizer_free(tok);
**
** prints 101 [CLS], 791 今, 1921 天, 1921 天, 3698 气, 4696 真, 103 [MASK],
** 1557 啊, 102 [SEP].
**
** The pipeline, one step per function below:
**   1. Added tokens.  The special tokens [PAD] [UNK] [CLS] [SEP] [MASK] and
**      every "added_tokens" entry of tokenizer.json are found in the raw text
**      (leftmost-longest, case-sensitive) and never split: "真[MASK]啊" gives
**      真 [MASK] 啊, while "[mask]" is the three tokens [ mask ].  Added
**      tokens marked "normalized": true are matched after step 2 instead.
**   2. Normalizer (BertNormalizer), on the text between added tokens:
**      clean_text: drop U+0000, U+FFFD and characters of category Cc, Cf, Co
**        (control, format such as zero-width space and soft hyphen, private
**        use) except \t \n \r; turn every White_Space character (\t \n \r,
**        U+3000, U+00A0, U+2028, ...) into a space.
**      handle_chinese_chars: put spaces around CJK ideographs (the exact
**        ranges of HF's _is_chinese_char), so each becomes its own word.
**      strip_accents: NFD, then drop category Mn.
**      lowercase: Unicode lower case (per character).
**   3. Pre-tokenizer (BertPreTokenizer): split on whitespace; every
**      punctuation character (ASCII !"#$%&'()*+,-./:;<=>?@[\]^_`{|}~ and
**      Unicode categories P*) is a word of its own.
**   4. WordPiece: greedy longest-match-first over the vocabulary, pieces
**      after the first carry the "##" prefix; a word that cannot be covered
**      completely, or is longer than max_input_chars_per_word (100)
**      characters, becomes a single [UNK].
**   5. [CLS] ... [SEP] around the result.
** Also bf_mask_lookalike (its section at the end of bf_tokenize): what a
** person meant as a blank but the tokenizer reads as text ("[mask]",
** "[MA" U+200B "SK]"), found by running the text through this normalizer.
** Each token also gets its bytes in the text (bf_span, bertfill.h): every
** code point carries the span of the character it came from through steps
** 2-4, and a token's span holds those of its code points.
**
** Settings, each from the first place that has it:
**   lowercase:     tokenizer_config.json "do_lower_case", tokenizer.json
**                  normalizer "lowercase", else true (HF's default);
**   strip_accents: tokenizer_config.json "strip_accents", the normalizer's
**                  "strip_accents", else the same as lowercase;
**   handle_chinese_chars: "tokenize_chinese_chars", the normalizer's
**                  "handle_chinese_chars", else true; clean_text: the
**                  normalizer's "clean_text", else true.
** bert-base-chinese has do_lower_case false: no lower-casing, no accent
** stripping, no NFC/NFKC, so "iPhone" and "café" are [UNK] and full-width
** "１２３" is "１２ ##３".
**
** vocab.txt: one entry per line, split on "\n" only (bert-base-chinese's
** entry 343 is U+2028 LINE SEPARATOR); a "\r" right before the "\n" is
** dropped (both Python's BertTokenizer and the tokenizers library do that);
** a "\r" anywhere else is an error, because the two disagree about it.  The
** id of an entry is its line number (from 0).  Empty lines are entries
** (they keep their id but can never match).  When an entry appears twice
** the later line's id wins for lookups, as in HF (a dict filled in file
** order); bf_tokenizer_token() still returns each line's own text.
**
** Where Hugging Face's own implementations disagree, this file follows the
** tokenizers library (Rust, used by BertTokenizerFast and AutoTokenizer),
** not the older pure-Python BertTokenizer:
**   - U+2028 / U+2029 are whitespace (Python: an ordinary character);
**   - unassigned code points (Cn) are kept (Python drops them);
**   - no NFC before tokenizing (recent Python versions apply NFC);
**   - lowercase is per character: final sigma is "σ" (Python: "ς");
**   - lower case is Unicode simple case mapping plus U+0130 -> "i̇",
**     the one unconditional multi-character mapping.
** Also: single_word added tokens use word characters = letters, marks,
** decimal digits, Nl, Pc, ZWJ/ZWNJ; lstrip/rstrip of added tokens change
** nothing here, since whitespace never becomes a token.
**
** Unicode tables come from utf8proc (categories, NFD, case mapping).
** Invalid UTF-8 (overlong forms, surrogates, truncated sequences, stray
** continuation bytes, code points beyond U+10FFFF) is an error that gives
** the byte offset (in the message and in out->invalid_at): the one check of
** a text's UTF-8, which the SQL layer does not repeat.  A loaded tokenizer is immutable and thread-safe;
** bf_tokenize allocates its scratch memory per call.
*/
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <utf8proc.h>

#include "bertfill.h"
#include "json.h"
#include "util.h"

#define MAX_CHARS_LIMIT 100000      /* sanity bound on max_input_chars_per_word */
#define MAX_VOCAB_FILE (256u << 20) /* vocab.txt larger than this is refused */

/* ------------------------------------------------------------------ */
/* Data                                                                */
/* ------------------------------------------------------------------ */

typedef struct added_tok {
  char *text;    /* UTF-8 content as written in the text */
  size_t len;    /* its length in bytes */
  uint32_t *cps; /* normalized: the content after normalization */
  size_t ncp;
  int32_t id;
  int normalized;  /* matched after normalization (else in raw text) */
  int single_word; /* only matched when not inside a word */
} added_tok;

/* The lookup key of a vocabulary entry: its text without the "##" prefix,
** and whether it had one. */
typedef struct key {
  uint32_t off, len_cont;
} key; /* len_cont = bytes << 1 | cont */
typedef struct slot {
  uint32_t hash;
  int32_t id;
} slot; /* id -1: empty */

struct bf_tokenizer {
  int n_vocab;
  char *vocab;   /* vocab.txt contents, each entry NUL-terminated */
  uint32_t *off; /* [n_vocab] start of entry i in vocab */
  uint32_t *len; /* [n_vocab] length of entry i in bytes */
  key *keys;     /* [n_vocab] lookup key of entry i */
  slot *slots;   /* hash table, size mask+1 */
  uint32_t mask;
  int32_t *single; /* [0x10000] id of the one-character entry c, or -1 */
  int max_piece;   /* most characters in any key (prefix excluded) */

  char prefix[32]; /* continuing_subword_prefix, "##" */
  int prefix_len;
  int max_chars; /* max_input_chars_per_word, 100 */

  int lowercase, strip_accents, clean_text, chinese;
  int32_t unk, cls, sep, mask_id, pad;

  added_tok *added; /* raw ones first, then normalized ones */
  int n_added, n_raw;
  unsigned char raw_first[32]; /* bitmap: first bytes of raw added tokens */
};

/* A growable array of code points, each with the bytes of the text it
** came from (bf_span, bertfill.h). */
typedef struct u32vec {
  uint32_t *v;
  bf_span *sp;
  size_t n, cap;
} u32vec;

/* Scratch memory of one bf_tokenize call. */
typedef struct work {
  const bf_tokenizer *tok;
  bf_tokens *out;
  u32vec seg, norm;
  char *wbuf;     /* UTF-8 bytes of the current word */
  uint32_t *woff; /* byte offset of each character in wbuf */
  char *err;
  size_t errlen;
} work;

static int u32_reserve(u32vec *a, size_t cap) {
  if (cap > SIZE_MAX / sizeof(bf_span)) return 0;
  uint32_t *v = realloc(a->v, cap * sizeof(uint32_t));
  if (v) a->v = v;
  bf_span *sp = v ? realloc(a->sp, cap * sizeof(bf_span)) : NULL;
  if (!sp) return 0;
  a->sp = sp;
  a->cap = cap;
  return 1;
}

static inline int u32_push(u32vec *a, uint32_t c, bf_span sp) {
  if (a->n == a->cap && !u32_reserve(a, a->cap ? a->cap * 2 : 64)) return 0;
  a->sp[a->n] = sp;
  a->v[a->n++] = c;
  return 1;
}

static void u32_free(u32vec *a) {
  free(a->v);
  free(a->sp);
  memset(a, 0, sizeof *a);
}

/* ------------------------------------------------------------------ */
/* Character classes                                                   */
/* ------------------------------------------------------------------ */

/* White_Space (Rust's char::is_whitespace, which the tokenizers library
** uses for clean_text and the pre-tokenizer). */
static inline int is_white(uint32_t c) {
  if (c < 0x80) return c == ' ' || (c >= 9 && c <= 13);
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
         c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/* Dropped by clean_text: categories Cc, Cf, Co, except \t \n \r. */
static inline int is_control(uint32_t c) {
  if (c < 0x80) return (c < 32 && c != '\t' && c != '\n' && c != '\r') || c == 127;
  utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
  return k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF || k == UTF8PROC_CATEGORY_CO;
}

/* HF's _is_chinese_char: the CJK Unified Ideographs blocks (not Japanese
** kana or Korean Hangul, which are words like any other). */
static inline int is_chinese(uint32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* All non-alphanumeric printable ASCII, plus Unicode categories P*. */
static inline int is_punct(uint32_t c) {
  if (c < 0x80)
    return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
           (c >= 123 && c <= 126);
  utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
  return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

/* A "word character" for single_word added tokens (regex \w). */
static int is_word_char(uint32_t c) {
  if (c < 0x80)
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  if (c == 0x200C || c == 0x200D) return 1;
  utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
  return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_ND) || k == UTF8PROC_CATEGORY_NL ||
         k == UTF8PROC_CATEGORY_PC;
}

/* ------------------------------------------------------------------ */
/* UTF-8                                                               */
/* ------------------------------------------------------------------ */

/* Valid UTF-8 is checked with bf_utf8_invalid_at (util.h) and written with
** bf_utf8_put; these read it. */

/* Decode one character of UTF-8 that bf_utf8_invalid_at has accepted. */
static inline uint32_t utf8_next(const unsigned char *s, size_t n, size_t *i) {
  size_t k = *i;
  uint32_t b = s[k];
  if (b < 0x80) {
    *i = k + 1;
    return b;
  }
  if (b < 0xE0 && k + 1 < n) {
    *i = k + 2;
    return ((b & 0x1F) << 6) | (s[k + 1] & 0x3F);
  }
  if (b < 0xF0 && k + 2 < n) {
    *i = k + 3;
    return ((b & 0x0F) << 12) | ((uint32_t)(s[k + 1] & 0x3F) << 6) | (s[k + 2] & 0x3F);
  }
  if (k + 3 < n) {
    *i = k + 4;
    return ((b & 0x07) << 18) | ((uint32_t)(s[k + 1] & 0x3F) << 12) |
           ((uint32_t)(s[k + 2] & 0x3F) << 6) | (s[k + 3] & 0x3F);
  }
  *i = n; /* not reached for checked text */
  return 0xFFFD;
}

/* The character that ends before s[i] (valid UTF-8). */
static uint32_t utf8_prev(const unsigned char *s, size_t n, size_t i) {
  size_t j = i;
  do { j--; } while (j > 0 && (s[j] & 0xC0) == 0x80 && i - j < 4);
  return utf8_next(s, n, &j);
}

/* ------------------------------------------------------------------ */
/* Vocabulary hash table                                               */
/* ------------------------------------------------------------------ */
/* The key of an entry is its text, or — for a continuation piece such as
** "##子" — the text after the prefix together with a "continuation" flag.
** WordPiece then looks up word[start:end] with cont = (start > 0) without
** building "##" + substring strings. */

static inline uint32_t key_hash(const char *s, size_t n, int cont) {
  uint32_t h = cont ? 0x9747b28cu : 2166136261u; /* FNV-1a, two seeds */
  for (size_t i = 0; i < n; i++) {
    h ^= (unsigned char)s[i];
    h *= 16777619u;
  }
  return h ^ (h >> 15);
}

static int entry_is_cont(const bf_tokenizer *t, int32_t id) {
  return t->prefix_len > 0 && t->len[id] >= (uint32_t)t->prefix_len &&
         memcmp(t->vocab + t->off[id], t->prefix, (size_t)t->prefix_len) == 0;
}

static inline int32_t vocab_find(const bf_tokenizer *t, const char *s, size_t n, int cont) {
  uint32_t h = key_hash(s, n, cont);
  uint32_t want = (uint32_t)(n << 1) | (uint32_t)cont;
  for (uint32_t i = h & t->mask;; i = (i + 1) & t->mask) {
    const slot *sl = &t->slots[i];
    if (sl->id < 0) return -1;
    if (sl->hash != h || t->keys[sl->id].len_cont != want) continue;
    const char *k = t->vocab + t->keys[sl->id].off;
    size_t j = 0;
    while (j < n && k[j] == s[j]) j++;
    if (j == n) return sl->id;
  }
}

static int build_table(bf_tokenizer *t) {
  uint32_t size = 16;
  while (size < 2u * (uint32_t)t->n_vocab + 16) size *= 2;
  t->slots = malloc(size * sizeof(slot));
  t->keys = malloc(((size_t)t->n_vocab + 1) * sizeof *t->keys);
  if (!t->slots || !t->keys) return 0;
  for (uint32_t i = 0; i < size; i++) t->slots[i].id = -1;
  t->mask = size - 1;
  t->max_piece = 1;
  for (int32_t id = 0; id < t->n_vocab; id++) {
    int cont = entry_is_cont(t, id);
    size_t skip = cont ? (size_t)t->prefix_len : 0;
    const char *s = t->vocab + t->off[id] + skip;
    size_t n = t->len[id] - skip;
    t->keys[id].off = t->off[id] + (uint32_t)skip;
    t->keys[id].len_cont = (uint32_t)(n << 1) | (uint32_t)cont;
    int chars = (int)bf_utf8_chars(s, n);
    if (chars > t->max_piece) t->max_piece = chars;
    uint32_t h = key_hash(s, n, cont);
    uint32_t i = h & t->mask;
    for (;; i = (i + 1) & t->mask) {
      int32_t o = t->slots[i].id;
      if (o < 0) break;
      if (t->slots[i].hash == h && t->keys[o].len_cont == t->keys[id].len_cont &&
          memcmp(t->vocab + t->keys[o].off, s, n) == 0)
        break; /* duplicate entry: the later line wins, as in HF */
    }
    t->slots[i].id = id;
    t->slots[i].hash = h;
  }
  /* direct table for one-character words (every ideograph in Chinese text) */
  t->single = malloc(0x10000 * sizeof(int32_t));
  if (!t->single) return 0;
  for (uint32_t c = 0; c < 0x10000; c++) t->single[c] = -1;
  for (int32_t id = 0; id < t->n_vocab; id++) {
    if (t->keys[id].len_cont & 1) continue;
    const unsigned char *s = (const unsigned char *)t->vocab + t->keys[id].off;
    size_t n = t->keys[id].len_cont >> 1, i = 0;
    if (n == 0 || n > 3) continue;
    uint32_t c = utf8_next(s, n, &i);
    if (i == n) t->single[c] = vocab_find(t, (const char *)s, n, 0); /* the id lookups give */
  }
  return 1;
}

/* ------------------------------------------------------------------ */
/* Normalizer (steps 2a-2d)                                            */
/* ------------------------------------------------------------------ */

/* clean_text and handle_chinese_chars for one character (bytes sp of the
** text), appended to seg. */
static inline int clean_push(const bf_tokenizer *t, u32vec *seg, uint32_t c, bf_span sp) {
  if (t->chinese && c >= 0x3400 && is_chinese(c)) /* never control or space */
    return u32_push(seg, ' ', sp) && u32_push(seg, c, sp) && u32_push(seg, ' ', sp);
  if (t->clean_text) {
    if (c == 0 || c == 0xFFFD || is_control(c)) return 1;
    if (is_white(c)) c = ' ';
  }
  return u32_push(seg, c, sp);
}

/* strip_accents (NFD, drop Mn) and lowercase, in that order (as the
** tokenizers library does), from in into out; a character's code points
** keep the span of the character they came from. */
static int case_and_accents(const bf_tokenizer *t, const u32vec *in, u32vec *out) {
  size_t n = in->n;
  out->n = 0;
  if (t->strip_accents) {
    for (size_t i = 0; i < n; i++) {
      uint32_t c = in->v[i];
      bf_span sp = in->sp[i];
      if (c < 0xC0) {
        if (!u32_push(out, c, sp)) return 0;
        continue;
      } /* nothing below U+00C0 decomposes */
      utf8proc_int32_t d[16];
      int bc = 0;
      utf8proc_ssize_t k = utf8proc_decompose_char((utf8proc_int32_t)c, d, 16, UTF8PROC_DECOMPOSE,
                                                   &bc);
      if (k <= 0 || k > 16) {
        d[0] = (utf8proc_int32_t)c;
        k = 1;
      }
      for (utf8proc_ssize_t j = 0; j < k; j++)
        if (!u32_push(out, (uint32_t)d[j], sp)) return 0;
    }
    /* canonical ordering: stable sort of each run of combining marks by class */
    for (size_t i = 1; i < out->n; i++) {
      uint32_t c = out->v[i];
      bf_span sp = out->sp[i];
      int cc = utf8proc_get_property((utf8proc_int32_t)c)->combining_class;
      if (cc == 0) continue;
      size_t j = i;
      while (j > 0) {
        int pc = utf8proc_get_property((utf8proc_int32_t)out->v[j - 1])->combining_class;
        if (pc <= cc) break;
        out->v[j] = out->v[j - 1];
        out->sp[j] = out->sp[j - 1];
        j--;
      }
      out->v[j] = c;
      out->sp[j] = sp;
    }
    size_t m = 0;
    for (size_t i = 0; i < out->n; i++)
      if (out->v[i] < 0x300 ||
          utf8proc_category((utf8proc_int32_t)out->v[i]) != UTF8PROC_CATEGORY_MN) {
        out->sp[m] = out->sp[i];
        out->v[m++] = out->v[i];
      }
    out->n = m;
  } else {
    for (size_t i = 0; i < n; i++)
      if (!u32_push(out, in->v[i], in->sp[i])) return 0;
  }
  if (t->lowercase) {
    size_t m = out->n;
    for (size_t i = 0; i < m; i++) {
      uint32_t c = out->v[i];
      if (c < 0x80) {
        if (c >= 'A' && c <= 'Z') out->v[i] = c + 32;
        continue;
      }
      if (c == 0x130) { /* İ -> i + COMBINING DOT ABOVE (SpecialCasing) */
        if (!u32_push(out, 0, out->sp[i])) return 0;
        memmove(out->v + i + 2, out->v + i + 1, (out->n - i - 2) * sizeof(uint32_t));
        memmove(out->sp + i + 2, out->sp + i + 1, (out->n - i - 2) * sizeof(bf_span));
        out->v[i] = 'i';
        out->v[i + 1] = 0x307;
        out->sp[i + 1] = out->sp[i];
        i++;
        m++;
        continue;
      }
      out->v[i] = (uint32_t)utf8proc_tolower((utf8proc_int32_t)c);
    }
  }
  return 1;
}

/* ------------------------------------------------------------------ */
/* Output                                                              */
/* ------------------------------------------------------------------ */

/* Room for cap tokens in out: ids and spans.  0 when out of memory. */
static int tokens_reserve(bf_tokens *o, int cap) {
  int32_t *ids = realloc(o->ids, (size_t)cap * sizeof(int32_t));
  if (ids) o->ids = ids;
  bf_span *sp = ids ? realloc(o->span, (size_t)cap * sizeof(bf_span)) : NULL;
  if (!sp) return 0;
  o->span = sp;
  o->cap = cap;
  return 1;
}

/* Token id from bytes [start, end) of the text. */
static int emit(work *w, int32_t id, int start, int end) {
  bf_tokens *o = w->out;
  if (o->n == o->cap) {
    if (o->cap >= INT_MAX / 2) {
      bf_errf(w->err, w->errlen, "text too long: more than %d tokens", o->cap);
      return BF_ERR_TOOLONG;
    }
    if (!tokens_reserve(o, o->cap < 64 ? 64 : o->cap * 2)) {
      bf_errf(w->err, w->errlen, "out of memory while tokenizing");
      return BF_ERR_NOMEM;
    }
  }
  o->span[o->n] = (bf_span){start, end};
  o->ids[o->n++] = id;
  o->n_masks += id == w->tok->mask_id;
  return BF_OK;
}

/* Token id from the characters with spans sp[0..n) (n >= 1): the smallest
** span that holds them all (a reordering of combining marks can put a
** later character's mark first). */
static int emit_chars(work *w, int32_t id, const bf_span *sp, size_t n) {
  int start = sp[0].start, end = sp[0].end;
  for (size_t i = 1; i < n; i++) {
    if (sp[i].start < start) start = sp[i].start;
    if (sp[i].end > end) end = sp[i].end;
  }
  return emit(w, id, start, end);
}

/* ------------------------------------------------------------------ */
/* WordPiece (step 4)                                                  */
/* ------------------------------------------------------------------ */

/* One word, cp[0..n) with spans sp[0..n), into its pieces or [UNK]. */
static int wordpiece(work *w, const uint32_t *cp, const bf_span *sp, size_t n) {
  const bf_tokenizer *t = w->tok;
  if (n > (size_t)t->max_chars) return emit_chars(w, t->unk, sp, n);
  if (n == 1) { /* the common case for Chinese: one ideograph */
    if (cp[0] < 0x10000) {
      int32_t id = t->single[cp[0]];
      return emit(w, id >= 0 ? id : t->unk, sp[0].start, sp[0].end);
    }
    char b[4];
    int32_t id = vocab_find(t, b, bf_utf8_put(cp[0], b), 0);
    return emit(w, id >= 0 ? id : t->unk, sp[0].start, sp[0].end);
  }
  uint32_t pos = 0;
  for (size_t i = 0; i < n; i++) {
    w->woff[i] = pos;
    pos += (uint32_t)bf_utf8_put(cp[i], w->wbuf + pos);
  }
  w->woff[n] = pos;
  int mark = w->out->n;
  size_t start = 0;
  while (start < n) {
    size_t end = n - start > (size_t)t->max_piece ? start + (size_t)t->max_piece : n;
    int32_t id = -1;
    for (; end > start; end--) {
      id = vocab_find(t, w->wbuf + w->woff[start], w->woff[end] - w->woff[start], start > 0);
      if (id >= 0) break;
    }
    if (id < 0) {
      while (w->out->n > mark) w->out->n_masks -= w->out->ids[--w->out->n] == t->mask_id;
      return emit_chars(w, t->unk, sp, n);
    }
    int rc = emit_chars(w, id, sp + start, end - start);
    if (rc) return rc;
    start = end;
  }
  return BF_OK;
}

/* ------------------------------------------------------------------ */
/* Pre-tokenizer (step 3) and normalized added tokens                  */
/* ------------------------------------------------------------------ */

enum { C_WORD, C_WHITE, C_PUNCT };

static inline int char_class(uint32_t c) {
  if (c >= 0x4E00 && c <= 0x9FFF) return C_WORD; /* the usual case in Chinese text */
  if (is_white(c)) return C_WHITE;
  return is_punct(c) ? C_PUNCT : C_WORD;
}

static int pretokenize(work *w, const uint32_t *cp, const bf_span *sp, size_t n) {
  size_t i = 0;
  while (i < n) {
    int k = char_class(cp[i]);
    if (k == C_WHITE) {
      i++;
      continue;
    }
    size_t j = i + 1;
    if (k == C_WORD)
      while (j < n && char_class(cp[j]) == C_WORD) j++;
    int rc = wordpiece(w, cp + i, sp + i, j - i);
    if (rc) return rc;
    i = j;
  }
  return BF_OK;
}

/* Leftmost-longest match of a normalized added token at cp[i]; -1 if none. */
static int match_norm(const bf_tokenizer *t, const uint32_t *cp, size_t n, size_t i) {
  int best = -1;
  size_t best_len = 0;
  for (int k = t->n_raw; k < t->n_added; k++) {
    const added_tok *a = &t->added[k];
    if (a->ncp <= best_len || a->ncp > n - i) continue;
    if (memcmp(cp + i, a->cps, a->ncp * sizeof(uint32_t)) != 0) continue;
    if (a->single_word &&
        ((i > 0 && is_word_char(cp[i - 1])) || (i + a->ncp < n && is_word_char(cp[i + a->ncp]))))
      continue;
    best = k;
    best_len = a->ncp;
  }
  return best;
}

/* Steps 2c-4 for one stretch of text between raw added tokens; seg holds
** it after clean_text and handle_chinese_chars. */
static int flush(work *w) {
  const bf_tokenizer *t = w->tok;
  const uint32_t *cp = w->seg.v;
  const bf_span *sp = w->seg.sp;
  size_t n = w->seg.n;
  if (n == 0) return BF_OK;
  if (t->lowercase || t->strip_accents) {
    if (!case_and_accents(t, &w->seg, &w->norm)) {
      bf_errf(w->err, w->errlen, "out of memory while tokenizing");
      return BF_ERR_NOMEM;
    }
    cp = w->norm.v;
    sp = w->norm.sp;
    n = w->norm.n;
  }
  w->seg.n = 0;
  if (t->n_added == t->n_raw) return pretokenize(w, cp, sp, n);
  size_t start = 0;
  for (size_t i = 0; i < n;) {
    int k = match_norm(t, cp, n, i);
    if (k < 0) {
      i++;
      continue;
    }
    int rc = pretokenize(w, cp + start, sp + start, i - start);
    if (!rc) rc = emit_chars(w, t->added[k].id, sp + i, t->added[k].ncp);
    if (rc) return rc;
    i += t->added[k].ncp;
    start = i;
  }
  return pretokenize(w, cp + start, sp + start, n - start);
}

/* Leftmost-longest match of a raw added token at s[i]; -1 if none. */
static int match_raw(const bf_tokenizer *t, const unsigned char *s, size_t n, size_t i) {
  int best = -1;
  size_t best_len = 0;
  for (int k = 0; k < t->n_raw; k++) {
    const added_tok *a = &t->added[k];
    if (a->len <= best_len || a->len > n - i || memcmp(s + i, a->text, a->len) != 0) continue;
    if (a->single_word) {
      if (i > 0 && is_word_char(utf8_prev(s, n, i))) continue;
      size_t j = i + a->len;
      if (j < n && is_word_char(utf8_next(s, n, &j))) continue;
    }
    best = k;
    best_len = a->len;
  }
  return best;
}

/* ------------------------------------------------------------------ */
/* bf_tokenize                                                         */
/* ------------------------------------------------------------------ */

int bf_tokenize(const bf_tokenizer *tok, const char *text, long len, bf_tokens *out, char *err,
                size_t errlen) {
  if (err && errlen) err[0] = 0;
  if (!tok || !out) {
    bf_errf(err, errlen, "bf_tokenize: no tokenizer or no output");
    return BF_ERR_INPUT;
  }
  if (!out->ids) out->cap = 0;
  out->n = 0;
  out->n_masks = 0;
  out->invalid_at = -1;
  if (out->cap > 0 && !out->span && !tokens_reserve(out, out->cap)) {
    bf_errf(err, errlen, "out of memory while tokenizing");
    return BF_ERR_NOMEM;
  }
  if (!text && len != 0) {
    bf_errf(err, errlen, "bf_tokenize: text is NULL");
    return BF_ERR_INPUT;
  }
  size_t n = len < 0 ? strlen(text) : (size_t)len;
  if (n > (size_t)INT_MAX - 16) {
    bf_errf(err, errlen, "text too long to tokenize: %zu bytes (at most %d)", n, INT_MAX - 16);
    return BF_ERR_TOOLONG;
  }
  const unsigned char *s = (const unsigned char *)text;
  char why[128];
  long bad = bf_utf8_invalid_at(text, n, why, sizeof why);
  if (bad >= 0) {
    bf_errf(err, errlen, "invalid UTF-8 at byte %ld: %s", bad, why);
    out->invalid_at = (int)bad;
    return BF_ERR_INPUT;
  }

  work w = {.tok = tok, .out = out, .err = err, .errlen = errlen};
  int rc = BF_OK;
  /* seg never needs more code points than the text has bytes (an ideograph
  ** is 3 or 4 bytes and becomes 3 code points); reserve that up front. */
  int seg_ok = u32_reserve(&w.seg, n + 1);
  w.wbuf = malloc((size_t)tok->max_chars * 4 + 4);
  w.woff = malloc(((size_t)tok->max_chars + 1) * sizeof(uint32_t));
  if (!seg_ok || !w.wbuf || !w.woff) {
    bf_errf(err, errlen, "out of memory while tokenizing");
    rc = BF_ERR_NOMEM;
    goto done;
  }

  if ((rc = emit(&w, tok->cls, 0, 0))) goto done;
  for (size_t i = 0; i < n;) {
    unsigned char b = s[i];
    if (tok->raw_first[b >> 3] & (1u << (b & 7))) {
      int k = match_raw(tok, s, n, i);
      if (k >= 0) {
        size_t end = i + tok->added[k].len;
        if ((rc = flush(&w)) || (rc = emit(&w, tok->added[k].id, (int)i, (int)end))) goto done;
        i = end;
        continue;
      }
    }
    size_t at = i;
    uint32_t c = utf8_next(s, n, &i);
    if (!clean_push(tok, &w.seg, c, (bf_span){(int)at, (int)i})) {
      bf_errf(err, errlen, "out of memory while tokenizing");
      rc = BF_ERR_NOMEM;
      goto done;
    }
  }
  if ((rc = flush(&w)) || (rc = emit(&w, tok->sep, (int)n, (int)n))) goto done;

done:
  if (rc) {
    out->n = 0;
    out->n_masks = 0;
  }
  u32_free(&w.seg);
  u32_free(&w.norm);
  free(w.wbuf);
  free(w.woff);
  return rc;
}

/* ---- look-alikes of [MASK] ---- */
/* A look-alike is read the way the tokenizer reads a text: each character
** through the normalizer (clean_push, case_and_accents) with every step on,
** whatever the model's settings (lookalike_view): U+200B, U+00AD, U+FEFF,
** U+2060, NUL and the other characters clean_text drops are not there; any
** White_Space (a newline, U+2009) is a space; accents and combining marks
** are stripped ("MÁSK", "MASK" + U+0301 are "mask"); the letters are lower
** case.  On that view the pattern is: an opening bracket ("[", "［", "【"),
** spaces or none, the letters m a s k (ASCII or full-width), spaces or none,
** a closing bracket ("]", "］", "】").  The pre-tokenizer splits the brackets
** off as punctuation and drops the spaces, so "[ mask ]" and "[\nMASK\n]"
** are the tokens "[" "mask" "]" like "[mask]": a look-alike; "[M ASK]" is
** four words and "[MASKS]", "mask", "[面具]" are text.  The view is the
** tokenizer's with every step on, not the model's own settings, so that a
** cased model (bert-base-chinese: no lower-casing, no accent stripping)
** refuses the same texts as an uncased one: whatever any BERT tokenizer reads
** as the word mask between brackets.  Each character is read on its own
** (one character in, its code points out): the canonical reordering of
** marks the tokenizer does across characters changes nothing here, since
** every Mn mark is dropped.  A scan from one opening bracket stops at the
** first code point that breaks the pattern, and that is never inside the
** scan from the next opening bracket, so a text is read once: O(n). */

static const bf_tokenizer lookalike_view = {.clean_text = 1, .strip_accents = 1, .lowercase = 1};

enum { LA_OPEN, LA_BEFORE_M, LA_AFTER_K = LA_BEFORE_M + 4, LA_CLOSED, LA_NO = -1 };

/* The ASCII capital of letter c, ASCII or full-width (U+FF21..U+FF5A); 0 for
** anything else. */
static int ascii_capital(uint32_t c) {
  if (c >= 0xFF21 && c <= 0xFF3A) return 'A' + (c - 0xFF21);
  if (c >= 0xFF41 && c <= 0xFF5A) return 'A' + (c - 0xFF41);
  if (c >= 'a' && c <= 'z') return 'A' + (c - 'a');
  if (c >= 'A' && c <= 'Z') return (int)c;
  return 0;
}

/* The pattern after code point c of the view, in state step: the next
** state, LA_CLOSED at the closing bracket, or LA_NO. */
static int lookalike_step(int step, uint32_t c) {
  if (step == LA_OPEN) return c == '[' || c == 0xFF3B || c == 0x3010 ? LA_BEFORE_M : LA_NO;
  if ((step == LA_BEFORE_M || step == LA_AFTER_K) && c == ' ') return step;
  if (step >= LA_BEFORE_M && step < LA_AFTER_K)
    return ascii_capital(c) == "MASK"[step - LA_BEFORE_M] ? step + 1 : LA_NO;
  if (step == LA_AFTER_K && (c == ']' || c == 0xFF3D || c == 0x3011)) return LA_CLOSED;
  return LA_NO;
}

/* The end (a byte offset) of the look-alike that starts at s[i] in *end, 0
** when there is none; one and view are scratch for one character's code
** points.  BF_OK or BF_ERR_NOMEM. */
static int lookalike_end(const char *s, size_t n, size_t i, u32vec *one, u32vec *view,
                         size_t *end) {
  int step = LA_OPEN;
  *end = 0;
  for (size_t at = i; at < n && step != LA_NO;) {
    size_t from = at;
    uint32_t c = utf8_next((const unsigned char *)s, n, &at);
    one->n = 0;
    if (!clean_push(&lookalike_view, one, c, (bf_span){(int)from, (int)at}) ||
        !case_and_accents(&lookalike_view, one, view))
      return BF_ERR_NOMEM;
    for (size_t k = 0; k < view->n && step != LA_NO; k++) {
      step = lookalike_step(step, view->v[k]);
      if (step == LA_CLOSED) {
        if (k + 1 == view->n) *end = at;
        return BF_OK;
      }
    }
    if (step == LA_OPEN) return BF_OK; /* s[i] is no bracket (U+FEFF also starts with 0xEF) */
  }
  return BF_OK;
}

/* Shown as what it is: printable ASCII, the ideographic space, 【 】 and
** the full-width forms; a look-alike's other characters are listed. */
static int shows_plainly(uint32_t c) {
  return (c >= 0x20 && c < 0x7F) || c == 0x3000 || c == 0x3010 || c == 0x3011 ||
         (c >= 0xFF01 && c <= 0xFF5E);
}

int bf_mask_lookalike(const char *s, size_t n, bf_lookalike *out) {
  memset(out, 0, sizeof *out);
  out->at = -1;
  if (n > (size_t)INT_MAX) n = (size_t)INT_MAX; /* spans are ints; bf_tokenize refuses more */
  u32vec one = {0}, view = {0};
  int rc = u32_reserve(&one, 4) && u32_reserve(&view, 32) ? BF_OK : BF_ERR_NOMEM;
  for (size_t i = 0; i < n && rc == BF_OK; i++) {
    unsigned char b = (unsigned char)s[i];
    if (b != '[' && b != 0xEF && b != 0xE3) continue; /* the first bytes of the brackets */
    size_t end = 0;
    rc = lookalike_end(s, n, i, &one, &view, &end);
    if (rc != BF_OK || end == 0) continue;
    if (end - i == (size_t)BF_MASK_TEXT_LEN && memcmp(s + i, BF_MASK_TEXT, BF_MASK_TEXT_LEN) == 0)
      continue; /* the real one */
    out->at = (long)i;
    out->len = end - i;
    for (size_t at = i; at < end;) {
      uint32_t c = utf8_next((const unsigned char *)s, end, &at);
      if (shows_plainly(c)) continue;
      if (out->n_unplain < BF_LOOKALIKE_SHOWN) out->unplain[out->n_unplain] = c;
      out->n_unplain++;
    }
    break;
  }
  u32_free(&one);
  u32_free(&view);
  return rc;
}

void bf_tokens_free(bf_tokens *t) {
  if (!t) return;
  free(t->ids);
  free(t->span);
  t->ids = NULL;
  t->span = NULL;
  t->n = t->cap = t->n_masks = 0;
}

/* ------------------------------------------------------------------ */
/* Loading                                                             */
/* ------------------------------------------------------------------ */

int bf_tokenizer_vocab_size(const bf_tokenizer *tok) { return tok ? tok->n_vocab : 0; }
int32_t bf_tokenizer_mask_id(const bf_tokenizer *tok) { return tok ? tok->mask_id : -1; }
int bf_tokenizer_lowercase(const bf_tokenizer *tok) { return tok ? tok->lowercase : 0; }
int bf_tokenizer_strip_accents(const bf_tokenizer *tok) { return tok ? tok->strip_accents : 0; }

const char *bf_tokenizer_token(const bf_tokenizer *tok, int32_t id) {
  if (!tok || id < 0 || id >= tok->n_vocab) return NULL;
  return tok->vocab + tok->off[id];
}

int32_t bf_tokenizer_find(const bf_tokenizer *tok, const char *entry, size_t len) {
  if (!tok || !entry) return -1;
  int cont = tok->prefix_len > 0 && len >= (size_t)tok->prefix_len &&
             memcmp(entry, tok->prefix, (size_t)tok->prefix_len) == 0;
  size_t skip = cont ? (size_t)tok->prefix_len : 0;
  return vocab_find(tok, entry + skip, len - skip, cont);
}

bf_json_tokens_status bf_tokens_from_json(const bf_tokenizer *tok, const char *s, size_t n,
                                          bf_json_tokens *out) {
  memset(out, 0, sizeof *out);
  json_value *v = json_parse(s, n, out->why, sizeof out->why);
  if (!v || v->type != JSON_ARRAY) {
    if (v) snprintf(out->why, sizeof out->why, "it is %s, not an array", json_type_a(v->type));
    json_free(v);
    return BF_JT_NOT_ARRAY;
  }
  bf_json_tokens_status st = BF_JT_OK;
  out->n = json_len(v);
  out->ids = malloc((out->n ? out->n : 1) * sizeof *out->ids);
  if (!out->ids) st = BF_JT_NOMEM;
  for (size_t i = 0; st == BF_JT_OK && i < out->n; i++) {
    const json_value *it = json_at(v, i);
    out->item = i + 1;
    if (it->type != JSON_STRING) {
      out->type = json_type_a(it->type);
      st = BF_JT_NOT_STRING;
    } else if ((out->ids[i] = bf_tokenizer_find(tok, it->str, it->len)) < 0) {
      out->token = malloc(it->len + 1);
      if (!out->token) st = BF_JT_NOMEM;
      else {
        memcpy(out->token, it->str, it->len);
        out->token[it->len] = 0;
        out->token_len = it->len;
        st = BF_JT_NOT_TOKEN;
      }
    }
  }
  json_free(v);
  return st;
}

void bf_json_tokens_free(bf_json_tokens *t) {
  free(t->ids);
  free(t->token);
  memset(t, 0, sizeof *t);
}

void bf_tokenizer_free(bf_tokenizer *tok) {
  if (!tok) return;
  for (int i = 0; i < tok->n_added; i++) {
    free(tok->added[i].text);
    free(tok->added[i].cps);
  }
  free(tok->added);
  free(tok->vocab);
  free(tok->off);
  free(tok->len);
  free(tok->slots);
  free(tok->keys);
  free(tok->single);
  free(tok);
}

/* Read vocab.txt into t->vocab / off / len.  Returns a BF_ code. */
static int load_vocab(bf_tokenizer *t, const char *path, char *err, size_t errlen) {
  int fd = bf_open_regular(path, O_RDONLY, 0, NULL);
  FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
  if (!f) {
    int e = errno;
    if (fd >= 0) close(fd);
    bf_errf(err, errlen, "%s: %s", path, bf_open_failure(e));
    return e == ENOENT || bf_not_regular(e) ? BF_ERR_MODEL : BF_ERR_IO;
  }
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap + 1);
  int rc = BF_OK;
  while (buf) {
    if (n == cap) {
      if (cap >= MAX_VOCAB_FILE) {
        bf_errf(err, errlen, "%s: larger than %u MiB, not a vocabulary", path,
                MAX_VOCAB_FILE >> 20);
        rc = BF_ERR_MODEL;
        break;
      }
      cap *= 2;
      char *nb = realloc(buf, cap + 1);
      if (!nb) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = nb;
    }
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (got == 0) {
      if (ferror(f)) {
        bf_errf(err, errlen, "%s: read error: %s", path, strerror(errno));
        rc = BF_ERR_IO;
      }
      break;
    }
  }
  fclose(f);
  if (!buf) {
    bf_errf(err, errlen, "%s: out of memory", path);
    return BF_ERR_NOMEM;
  }
  if (rc) {
    free(buf);
    return rc;
  }
  buf[n] = '\n'; /* sentinel: a last line without "\n" still counts */
  t->vocab = buf;

  size_t lines = 0;
  for (size_t i = 0; i < n; i++) lines += buf[i] == '\n';
  if (n > 0 && buf[n - 1] != '\n') lines++;
  if (lines > (size_t)INT32_MAX / 4) {
    bf_errf(err, errlen, "%s: too many lines", path);
    return BF_ERR_MODEL;
  }
  t->off = malloc((lines + 1) * sizeof(uint32_t));
  t->len = malloc((lines + 1) * sizeof(uint32_t));
  if (!t->off || !t->len) {
    bf_errf(err, errlen, "%s: out of memory", path);
    return BF_ERR_NOMEM;
  }
  size_t start = 0, id = 0;
  while (start < n) {
    char *nl = memchr(buf + start, '\n', n + 1 - start);
    size_t end = (size_t)(nl - buf), e = end;
    if (e > start && buf[e - 1] == '\r') e--;
    const char *bad_cr = memchr(buf + start, '\r', e - start);
    if (bad_cr) {
      bf_errf(err, errlen,
              "%s: line %zu contains a carriage return (\\r) that does not end the line; Hugging "
              "Face's tokenizers disagree about such a file (split the line or not), so it is "
              "refused",
              path, id + 1);
      return BF_ERR_MODEL;
    }
    if (memchr(buf + start, '\0', e - start)) {
      bf_errf(err, errlen, "%s: line %zu contains a NUL byte", path, id + 1);
      return BF_ERR_MODEL;
    }
    char why[128];
    long bad = bf_utf8_invalid_at(buf + start, e - start, why, sizeof why);
    if (bad >= 0) {
      bf_errf(err, errlen, "%s: line %zu is not valid UTF-8 (byte %ld of the line: %s)", path,
              id + 1, bad, why);
      return BF_ERR_MODEL;
    }
    buf[e] = 0;
    t->off[id] = (uint32_t)start;
    t->len[id] = (uint32_t)(e - start);
    id++;
    start = end + 1;
  }
  t->n_vocab = (int)id;
  return BF_OK;
}

/* A special token name from tokenizer_config.json: "name" or {"content": "name"}. */
static int config_token(const json_value *cfg, const char *key, const char **out, const char *file,
                        char *err, size_t errlen) {
  const json_value *v = json_get(cfg, key);
  if (!v || v->type == JSON_NULL) return BF_OK;
  if (v->type == JSON_OBJECT) v = json_get(v, "content");
  if (!v || v->type != JSON_STRING || v->len == 0 || strlen(v->str) != v->len) {
    bf_errf(err, errlen, "%s: \"%s\" must be a token string", file, key);
    return BF_ERR_MODEL;
  }
  *out = v->str;
  return BF_OK;
}

static int get_flag(const json_value *obj, const char *key, int *out, const char *file,
                    const char *where, char *err, size_t errlen) {
  int b;
  switch (json_get_bool(obj, key, &b)) {
    case JSON_OK: *out = b; return BF_OK;
    case JSON_ABSENT: return BF_OK;
    default:
      bf_errf(err, errlen, "%s: %s\"%s\" must be true, false or null", file, where, key);
      return BF_ERR_MODEL;
  }
}

static int add_token(bf_tokenizer *t, const char *text, size_t len, int32_t id, int normalized,
                     int single_word) {
  for (int k = 0; k < t->n_added; k++) /* same content again: the later one wins */
    if (t->added[k].len == len && memcmp(t->added[k].text, text, len) == 0) {
      t->added[k].id = id;
      t->added[k].normalized = normalized;
      t->added[k].single_word = single_word;
      return 1;
    }
  added_tok *a = realloc(t->added, (size_t)(t->n_added + 1) * sizeof *a);
  if (!a) return 0;
  t->added = a;
  a = &t->added[t->n_added];
  memset(a, 0, sizeof *a);
  a->text = malloc(len + 1);
  if (!a->text) return 0;
  memcpy(a->text, text, len);
  a->text[len] = 0;
  a->len = len;
  a->id = id;
  a->normalized = normalized;
  a->single_word = single_word;
  t->n_added++;
  return 1;
}

static int cmp_raw_first(const void *x, const void *y) {
  const added_tok *a = x, *b = y;
  return (a->normalized > b->normalized) - (a->normalized < b->normalized);
}

/* Sort raw added tokens before normalized ones, fill the first-byte bitmap
** and compute the normalized form of the normalized ones. */
static int finish_added(bf_tokenizer *t) {
  qsort(t->added, (size_t)t->n_added, sizeof *t->added, cmp_raw_first);
  t->n_raw = 0;
  for (int k = 0; k < t->n_added; k++) {
    added_tok *a = &t->added[k];
    if (!a->normalized) {
      t->n_raw++;
      unsigned char b = (unsigned char)a->text[0];
      t->raw_first[b >> 3] |= (unsigned char)(1u << (b & 7));
      continue;
    }
    u32vec seg = {0}, norm = {0};
    size_t i = 0;
    int ok = 1;
    while (ok && i < a->len) {
      size_t at = i;
      uint32_t c = utf8_next((const unsigned char *)a->text, a->len, &i);
      ok = clean_push(t, &seg, c, (bf_span){(int)at, (int)i});
    }
    if (ok && (t->lowercase || t->strip_accents)) {
      ok = case_and_accents(t, &seg, &norm);
      u32_free(&seg);
      seg = norm;
    }
    free(seg.sp);
    if (!ok) {
      free(seg.v);
      return 0;
    }
    a->cps = seg.v;
    a->ncp = seg.n;
  }
  /* a normalized token that normalizes to nothing can never match: drop it */
  int m = t->n_raw;
  for (int k = t->n_raw; k < t->n_added; k++) {
    if (t->added[k].ncp == 0) {
      free(t->added[k].text);
      free(t->added[k].cps);
      continue;
    }
    t->added[m++] = t->added[k];
  }
  t->n_added = m;
  return 1;
}

/* The files of a tokenizer being loaded and what they say.  The settings
** are -1 until a file gives them; names point into the JSON trees. */
typedef struct tok_files {
  char *vocab_path, *cfg_path, *tj_path;
  json_value *cfg, *tj; /* tokenizer_config.json, tokenizer.json; NULL if absent */
  int lower, strip, chinese, clean;
  const char *names[5]; /* texts of the special tokens, in special_ids order */
} tok_files;

/* The special tokens: the key of each in tokenizer_config.json, its text
** unless a file says otherwise, its use (for messages) and its id. */
static const char *const special_keys[5] = {"unk_token", "cls_token", "sep_token", "mask_token",
                                            "pad_token"};
static const char *const special_texts[5] = {"[UNK]", "[CLS]", "[SEP]", "[MASK]", "[PAD]"};
static const char *const special_uses[5] = {"unknown", "[CLS]", "[SEP]", "mask", "padding"};
static int32_t *special_ids(bf_tokenizer *t, int k) {
  int32_t *ids[5] = {&t->unk, &t->cls, &t->sep, &t->mask_id, &t->pad};
  return ids[k];
}

/* The JSON object in the file path into *out; *out stays NULL when there
** is no such file.  BF_OK, or BF_ERR_MODEL with err set. */
static int read_json_object(const char *path, json_value **out, char *err, size_t errlen) {
  if (access(path, F_OK) != 0) return BF_OK;
  *out = json_parse_file(path, err, errlen);
  if (!*out) return BF_ERR_MODEL;
  if ((*out)->type != JSON_OBJECT) {
    bf_errf(err, errlen, "%s: not a JSON object", path);
    return BF_ERR_MODEL;
  }
  return BF_OK;
}

/* tokenizer_config.json, when present: do_lower_case, strip_accents,
** tokenize_chinese_chars and the special token texts. */
static int read_tokenizer_config(tok_files *f, char *err, size_t errlen) {
  const char *path = f->cfg_path;
  if (read_json_object(path, &f->cfg, err, errlen)) return BF_ERR_MODEL;
  if (!f->cfg) return BF_OK;
  if (get_flag(f->cfg, "do_lower_case", &f->lower, path, "", err, errlen) ||
      get_flag(f->cfg, "strip_accents", &f->strip, path, "", err, errlen) ||
      get_flag(f->cfg, "tokenize_chinese_chars", &f->chinese, path, "", err, errlen))
    return BF_ERR_MODEL;
  for (int k = 0; k < 5; k++)
    if (config_token(f->cfg, special_keys[k], &f->names[k], path, err, errlen)) return BF_ERR_MODEL;
  return BF_OK;
}

/* tokenizer.json's "normalizer" (BertNormalizer): its flags fill the
** settings tokenizer_config.json left open; clean_text only comes from here. */
static int read_normalizer(tok_files *f, const json_value *nz, char *err, size_t errlen) {
  const char *path = f->tj_path, *type = NULL;
  if (!nz || nz->type == JSON_NULL) return BF_OK;
  if (json_get_string(nz, "type", &type) != JSON_OK || strcmp(type, "BertNormalizer") != 0) {
    bf_errf(err, errlen, "%s: normalizer type \"%s\" is not supported (only BertNormalizer)", path,
            type ? type : "?");
    return BF_ERR_MODEL;
  }
  int l = -1, s = -1, c = -1, k = -1;
  if (get_flag(nz, "lowercase", &l, path, "normalizer ", err, errlen) ||
      get_flag(nz, "strip_accents", &s, path, "normalizer ", err, errlen) ||
      get_flag(nz, "handle_chinese_chars", &c, path, "normalizer ", err, errlen) ||
      get_flag(nz, "clean_text", &k, path, "normalizer ", err, errlen))
    return BF_ERR_MODEL;
  if (f->lower < 0) f->lower = l;
  if (f->strip < 0) f->strip = s;
  if (f->chinese < 0) f->chinese = c;
  f->clean = k;
  return BF_OK;
}

/* tokenizer.json's "model" (WordPiece): max_input_chars_per_word,
** continuing_subword_prefix, and unk_token unless tokenizer_config.json
** names it. */
static int read_wordpiece(bf_tokenizer *t, tok_files *f, const json_value *model, char *err,
                          size_t errlen) {
  const char *path = f->tj_path, *type = NULL, *prefix = NULL, *unk = NULL;
  int64_t mc;
  if (!model || model->type == JSON_NULL) return BF_OK;
  if (json_get_string(model, "type", &type) == JSON_OK && strcmp(type, "WordPiece") != 0) {
    bf_errf(err, errlen, "%s: model type \"%s\" is not supported (only WordPiece)", path, type);
    return BF_ERR_MODEL;
  }
  switch (json_get_int(model, "max_input_chars_per_word", &mc)) {
    case JSON_OK:
      if (mc < 1 || mc > MAX_CHARS_LIMIT) {
        bf_errf(err, errlen, "%s: model max_input_chars_per_word %lld is out of range 1..%d", path,
                (long long)mc, MAX_CHARS_LIMIT);
        return BF_ERR_MODEL;
      }
      t->max_chars = (int)mc;
      break;
    case JSON_WRONG:
      bf_errf(err, errlen, "%s: model max_input_chars_per_word must be an integer", path);
      return BF_ERR_MODEL;
  }
  switch (json_get_string(model, "continuing_subword_prefix", &prefix)) {
    case JSON_OK:
      if (strlen(prefix) >= sizeof t->prefix) {
        bf_errf(err, errlen, "%s: model continuing_subword_prefix is too long", path);
        return BF_ERR_MODEL;
      }
      strcpy(t->prefix, prefix);
      t->prefix_len = (int)strlen(prefix);
      break;
    case JSON_WRONG:
      bf_errf(err, errlen, "%s: model continuing_subword_prefix must be a string", path);
      return BF_ERR_MODEL;
  }
  if (json_get_string(model, "unk_token", &unk) == JSON_OK && unk[0] &&
      !json_get(f->cfg, "unk_token"))
    f->names[0] = unk;
  return BF_OK;
}

/* tokenizer.json, when present: normalizer, pre_tokenizer and model (its
** added_tokens are read by add_json_tokens). */
static int read_tokenizer_json(bf_tokenizer *t, tok_files *f, char *err, size_t errlen) {
  const char *path = f->tj_path;
  if (read_json_object(path, &f->tj, err, errlen)) return BF_ERR_MODEL;
  if (!f->tj) return BF_OK;
  if (read_normalizer(f, json_get(f->tj, "normalizer"), err, errlen)) return BF_ERR_MODEL;
  const json_value *pt = json_get(f->tj, "pre_tokenizer");
  if (pt && pt->type != JSON_NULL) {
    const char *type = NULL;
    if (json_get_string(pt, "type", &type) != JSON_OK || strcmp(type, "BertPreTokenizer") != 0) {
      bf_errf(err, errlen, "%s: pre_tokenizer type \"%s\" is not supported (only BertPreTokenizer)",
              path, type ? type : "?");
      return BF_ERR_MODEL;
    }
  }
  return read_wordpiece(t, f, json_get(f->tj, "model"), err, errlen);
}

/* The special tokens: each must be an entry of the vocabulary; they are
** never split and are matched in the raw text. */
static int add_special_tokens(bf_tokenizer *t, const tok_files *f, char *err, size_t errlen) {
  for (int k = 0; k < 5; k++) {
    const char *name = f->names[k];
    size_t l = strlen(name);
    int32_t id = -1;
    for (int32_t i = 0; i < t->n_vocab; i++) /* exact entry text; the last one if repeated */
      if (t->len[i] == l && memcmp(t->vocab + t->off[i], name, l) == 0) id = i;
    if (id < 0) {
      bf_errf(err, errlen, "%s: no \"%s\" entry (needed as the %s token)", f->vocab_path, name,
              special_uses[k]);
      return BF_ERR_MODEL;
    }
    *special_ids(t, k) = id;
    if (!add_token(t, name, l, id, 0, 0)) {
      bf_errf(err, errlen, "out of memory loading the tokenizer");
      return BF_ERR_NOMEM;
    }
  }
  return BF_OK;
}

/* tokenizer.json's added_tokens (they may override the ids of the special
** tokens). */
static int add_json_tokens(bf_tokenizer *t, const tok_files *f, char *err, size_t errlen) {
  const char *path = f->tj_path;
  const json_value *at = json_get(f->tj, "added_tokens");
  if (at && at->type != JSON_NULL && at->type != JSON_ARRAY) {
    bf_errf(err, errlen, "%s: added_tokens must be an array", path);
    return BF_ERR_MODEL;
  }
  for (size_t i = 0; i < json_len(at); i++) {
    const json_value *a = json_at(at, i);
    const char *content = NULL;
    int64_t id;
    int normalized = 0, single_word = 0;
    if (json_get_string(a, "content", &content) != JSON_OK || !content[0] ||
        strlen(content) != json_get(a, "content")->len) {
      bf_errf(err, errlen, "%s: added_tokens[%zu] has no \"content\" string", path, i);
      return BF_ERR_MODEL;
    }
    if (json_get_int(a, "id", &id) != JSON_OK) {
      bf_errf(err, errlen, "%s: added token \"%s\" has no integer \"id\"", path, content);
      return BF_ERR_MODEL;
    }
    if (id < 0 || id >= t->n_vocab) {
      bf_errf(err, errlen, "%s: added token \"%s\" has id %lld, but %s has %d entries", path,
              content, (long long)id, f->vocab_path, t->n_vocab);
      return BF_ERR_MODEL;
    }
    if (get_flag(a, "normalized", &normalized, path, "added token ", err, errlen) ||
        get_flag(a, "single_word", &single_word, path, "added token ", err, errlen))
      return BF_ERR_MODEL;
    if (!add_token(t, content, strlen(content), (int32_t)id, normalized, single_word)) {
      bf_errf(err, errlen, "out of memory loading the tokenizer");
      return BF_ERR_NOMEM;
    }
    for (int k = 0; k < 5; k++)
      if (!normalized && strcmp(content, f->names[k]) == 0) *special_ids(t, k) = (int32_t)id;
  }
  return BF_OK;
}

bf_tokenizer *bf_tokenizer_load(const char *dir, char *err, size_t errlen) {
  if (err && errlen) err[0] = 0;
  if (!dir) {
    bf_errf(err, errlen, "bf_tokenizer_load: no directory");
    return NULL;
  }
  bf_tokenizer *t = calloc(1, sizeof *t);
  tok_files f = {.lower = -1, .strip = -1, .chinese = -1, .clean = -1};
  memcpy(f.names, special_texts, sizeof f.names);
  f.vocab_path = bf_path_join(dir, "vocab.txt");
  f.cfg_path = bf_path_join(dir, "tokenizer_config.json");
  f.tj_path = bf_path_join(dir, "tokenizer.json");
  int ok = t && f.vocab_path && f.cfg_path && f.tj_path;
  if (!ok) bf_errf(err, errlen, "out of memory loading the tokenizer");

  if (ok) ok = load_vocab(t, f.vocab_path, err, errlen) == BF_OK;
  if (ok) { /* the defaults tokenizer.json may change */
    memcpy(t->prefix, "##", 3);
    t->prefix_len = 2;
    t->max_chars = 100;
  }
  ok = ok && read_tokenizer_config(&f, err, errlen) == BF_OK &&
       read_tokenizer_json(t, &f, err, errlen) == BF_OK;
  if (ok) { /* each setting from the first file that gives it, else HF's default */
    t->lowercase = f.lower < 0 ? 1 : f.lower;
    t->strip_accents = f.strip < 0 ? t->lowercase : f.strip;
    t->chinese = f.chinese < 0 ? 1 : f.chinese;
    t->clean_text = f.clean < 0 ? 1 : f.clean;
    ok = build_table(t);
    if (!ok) bf_errf(err, errlen, "out of memory loading the tokenizer");
  }
  ok = ok && add_special_tokens(t, &f, err, errlen) == BF_OK &&
       add_json_tokens(t, &f, err, errlen) == BF_OK;
  if (ok && !finish_added(t)) {
    bf_errf(err, errlen, "out of memory loading the tokenizer");
    ok = 0;
  }

  json_free(f.cfg);
  json_free(f.tj);
  free(f.vocab_path);
  free(f.cfg_path);
  free(f.tj_path);
  if (!ok) {
    bf_tokenizer_free(t);
    return NULL;
  }
  return t;
}
