/*
** spelling.c — the spelling check of spelling.h: eligible positions, the
** screening run, the verifying runs, the error model.
*/
#include "spelling.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

double bf_spell_cost(bf_confusion_kind kind) {
  switch (kind) {
    case BF_CONFUSE_SAME_SOUND: return BF_SPELL_COST_SAME_SOUND;
    case BF_CONFUSE_SIMILAR_SOUND: return BF_SPELL_COST_SIMILAR_SOUND;
    case BF_CONFUSE_SIMILAR_SHAPE: return BF_SPELL_COST_SIMILAR_SHAPE;
  }
  return BF_SPELL_COST_SIMILAR_SHAPE;
}

/* One eligible position: the written character and its confusables in the
** vocabulary, ids[0] the written one, ids[1..nids) the others (kind[j]). */
typedef struct site {
  int text, tok;
  int byte_off, byte_len, char_index;
  uint32_t cp;
  int nids;
  int32_t *ids;            /* into the pool of ids */
  bf_confusion_kind *kind; /* kind[j] of ids[j], j >= 1 */
  uint32_t *cps;           /* code point of ids[j] */
  float *score;            /* nids: logits (screen), then probabilities (verify) */
  double screen;           /* best screening margin */
  int verify;
} site;

typedef struct sites {
  site *v;
  int n, cap;
} sites;

/* The one code point of s[0..n), or -1 when it is not exactly one. */
static long one_codepoint(const char *s, int n) {
  const unsigned char *u = (const unsigned char *)s;
  if (n < 1 || n > 4) return -1;
  int len = u[0] < 0x80 ? 1 : u[0] < 0xE0 ? 2 : u[0] < 0xF0 ? 3 : 4;
  if (len != n) return -1;
  if (n == 1) return u[0];
  uint32_t c = u[0] & (0xFF >> (n + 1));
  for (int i = 1; i < n; i++) c = (c << 6) | (u[i] & 0x3F);
  return (long)c;
}

/* The vocabulary id of character c alone, -1 when it has none. */
static int32_t char_id(const bf_tokenizer *tok, uint32_t c) {
  char b[8];
  size_t n = bf_utf8_put(c, b);
  return bf_tokenizer_find(tok, b, n);
}

static void free_sites(sites *ss) {
  for (int i = 0; i < ss->n; i++) free(ss->v[i].ids);
  free(ss->v);
  memset(ss, 0, sizeof *ss);
}

/* The site of token i of text ti, when it is eligible (spelling.h): 1 with
** *s filled (s->ids malloc'ed; char_index left to the caller), 0 when it is
** not, -1 out of memory.  conf: room for BF_SPELL_MAX_CONFUSABLES. */
static int site_at(const bf_tokenizer *tok, int32_t unk, int ti, const bf_spell_text *x, int i,
                   bf_confusable *conf, site *out) {
  const bf_span *sp = &x->t->span[i];
  int32_t id = x->t->ids[i];
  if (id == unk || sp->end <= sp->start) return 0;
  long c = one_codepoint(x->s + sp->start, sp->end - sp->start);
  if (c < 0) return 0;
  const char *entry = bf_tokenizer_token(tok, id);
  if (!entry || strlen(entry) != (size_t)(sp->end - sp->start) ||
      memcmp(entry, x->s + sp->start, (size_t)(sp->end - sp->start)) != 0)
    return 0;
  size_t nc = bf_confusables((uint32_t)c, conf, BF_SPELL_MAX_CONFUSABLES);
  if (nc > BF_SPELL_MAX_CONFUSABLES) nc = BF_SPELL_MAX_CONFUSABLES;
  if (nc == 0) return 0;
  size_t per = 1 + nc;
  void *mem = malloc(
    per * (sizeof(int32_t) + sizeof(bf_confusion_kind) + sizeof(uint32_t) + sizeof(float)));
  if (!mem) return -1;
  site s = {.text = ti,
            .tok = i,
            .byte_off = sp->start,
            .byte_len = sp->end - sp->start,
            .cp = (uint32_t)c};
  s.ids = mem;
  s.score = (float *)(s.ids + per);
  s.cps = (uint32_t *)(s.score + per);
  s.kind = (bf_confusion_kind *)(s.cps + per);
  s.ids[0] = id;
  s.cps[0] = (uint32_t)c;
  s.kind[0] = BF_CONFUSE_SAME_SOUND;
  s.nids = 1;
  for (size_t j = 0; j < nc; j++) {
    int32_t cid = char_id(tok, conf[j].codepoint);
    if (cid < 0 || cid == unk || cid == id) continue;
    s.ids[s.nids] = cid;
    s.cps[s.nids] = conf[j].codepoint;
    s.kind[s.nids] = conf[j].kind;
    s.nids++;
  }
  if (s.nids < 2) {
    free(mem);
    return 0;
  }
  *out = s;
  return 1;
}

/* The eligible positions of text ti into ss.  0, or -1 out of memory. */
static int find_sites(const bf_model *m, int ti, const bf_spell_text *x, sites *ss) {
  const bf_tokenizer *tok = bf_model_tokenizer(m);
  int32_t unk = bf_tokenizer_find(tok, "[UNK]", 5);
  bf_confusable conf[BF_SPELL_MAX_CONFUSABLES];
  int chars = 0, at = 0; /* code points before byte at */
  for (int i = 1; i + 1 < x->t->n; i++) {
    site s;
    int got = site_at(tok, unk, ti, x, i, conf, &s);
    if (got < 0) return -1;
    if (got == 0) continue;
    chars += (int)bf_utf8_chars(x->s + at, (size_t)(s.byte_off - at));
    at = s.byte_off;
    s.char_index = chars;
    if (ss->n == ss->cap) {
      int cap = ss->cap ? 2 * ss->cap : 64;
      site *v = realloc(ss->v, (size_t)cap * sizeof *v);
      if (!v) {
        free(s.ids);
        return -1;
      }
      ss->v = v;
      ss->cap = cap;
    }
    ss->v[ss->n++] = s;
  }
  return 0;
}

/* The margin of y = ids[j] of a site from probabilities: what best_margin
** and bf_spell_restore compute, in the same operations. */
static double margin_of(double lx, float py, bf_confusion_kind kind) {
  return log((double)py) - lx - bf_spell_cost(kind);
}

/* The best margin of a site from its scores: logits (screen) or
** probabilities (verify, log taken); *best gets the index of that y. */
static double best_margin(const site *s, int probs, int *best) {
  double top = -INFINITY;
  *best = 0;
  double lx = probs ? log((double)s->score[0]) : (double)s->score[0];
  for (int j = 1; j < s->nids; j++) {
    double mg = probs ? margin_of(lx, s->score[j], s->kind[j])
                      : (double)s->score[j] - lx - bf_spell_cost(s->kind[j]);
    if (mg > top) {
      top = mg;
      *best = j;
    }
  }
  return top;
}

/* Step 1: the screening run over every text as written; marks the sites to
** verify, at most the cap of spelling.h per text, the best first. */
static int screen(const bf_model *m, bf_run *r, int ntext, const bf_spell_text *texts, sites *ss,
                  double threshold, char *err, size_t errlen) {
  if (ss->n == 0) return BF_OK;
  bf_tokens *seqs = malloc((size_t)ntext * sizeof *seqs);
  bf_probe *pr = malloc((size_t)ss->n * sizeof *pr);
  if (!seqs || !pr) {
    free(seqs);
    free(pr);
    bf_errf(err, errlen, "out of memory for the spelling check's screening run");
    return BF_ERR_NOMEM;
  }
  for (int i = 0; i < ntext; i++) {
    seqs[i] = *texts[i].t;
    seqs[i].n_masks = 0;
  }
  for (int i = 0; i < ss->n; i++)
    pr[i] = (bf_probe){ss->v[i].text, ss->v[i].tok, ss->v[i].nids, ss->v[i].ids, ss->v[i].score};
  int rc = bf_probe_run(m, r, ntext, seqs, ss->n, pr, BF_PROBE_LOGITS, err, errlen);
  free(seqs);
  free(pr);
  if (rc != BF_OK) return rc;
  for (int i = 0; i < ss->n; i++) {
    int b;
    ss->v[i].screen = best_margin(&ss->v[i], 0, &b);
    ss->v[i].verify = ss->v[i].screen >= threshold - BF_SPELL_SCREEN_SLACK;
  }
  /* at most the cap per text: drop the weakest beyond */
  for (int i0 = 0; i0 < ss->n;) {
    int i1 = i0;
    while (i1 < ss->n && ss->v[i1].text == ss->v[i0].text) i1++;
    for (;;) {
      int on = 0, weakest = -1;
      for (int i = i0; i < i1; i++)
        if (ss->v[i].verify) {
          on++;
          if (weakest < 0 || ss->v[i].screen < ss->v[weakest].screen) weakest = i;
        }
      int cap = BF_SPELL_VERIFY_BASE + texts[ss->v[i0].text].t->n / 16;
      if (cap > BF_SPELL_MAX_VERIFY) cap = BF_SPELL_MAX_VERIFY;
      if (on <= cap) break;
      ss->v[weakest].verify = 0;
    }
    i0 = i1;
  }
  return BF_OK;
}

/* Step 2: the sites to verify, each masked in a sequence of its own, in
** runs of at most max_tokens tokens (one sequence at least). */
static int verify(const bf_model *m, bf_run *r, const bf_spell_text *texts, sites *ss,
                  int max_tokens, char *err, size_t errlen) {
  int32_t mask_id = bf_tokenizer_mask_id(bf_model_tokenizer(m));
  int n = 0, longest = 0;
  for (int i = 0; i < ss->n; i++)
    if (ss->v[i].verify) {
      n++;
      if (texts[ss->v[i].text].t->n > longest) longest = texts[ss->v[i].text].t->n;
    }
  if (n == 0) return BF_OK;
  int per_run = max_tokens / (longest > 0 ? longest : 1);
  if (per_run < 1) per_run = 1;
  if (per_run > n) per_run = n;
  bf_tokens *seqs = calloc((size_t)per_run, sizeof *seqs);
  bf_probe *pr = malloc((size_t)per_run * sizeof *pr);
  int32_t *ids = malloc((size_t)per_run * (size_t)longest * sizeof *ids);
  int *which = malloc((size_t)per_run * sizeof *which);
  int rc = BF_OK;
  if (!seqs || !pr || !ids || !which) {
    bf_errf(err, errlen, "out of memory for the spelling check's verifying runs");
    rc = BF_ERR_NOMEM;
  }
  for (int i = 0; rc == BF_OK && i < ss->n;) {
    int k = 0;
    for (; i < ss->n && k < per_run; i++) {
      site *s = &ss->v[i];
      if (!s->verify) continue;
      const bf_tokens *t = texts[s->text].t;
      int32_t *d = ids + (size_t)k * longest;
      memcpy(d, t->ids, (size_t)t->n * sizeof *d);
      d[s->tok] = mask_id;
      seqs[k] = (bf_tokens){.ids = d, .n = t->n, .cap = t->n, .n_masks = 1, .invalid_at = -1};
      pr[k] = (bf_probe){k, s->tok, s->nids, s->ids, s->score};
      which[k++] = i;
    }
    if (k == 0) break;
    rc = bf_probe_run(m, r, k, seqs, k, pr, BF_PROBE_PROBS, err, errlen);
  }
  free(seqs);
  free(pr);
  free(ids);
  free(which);
  return rc;
}

/* The finding of a site with y = ids[j] (its probabilities in score[], its
** margin mg): what collect and bf_spell_restore give. */
static bf_suspect finding_of(const site *s, int j, double mg) {
  return (bf_suspect){.position = s->char_index,
                      .byte_offset = s->byte_off,
                      .byte_len = s->byte_len,
                      .token = s->tok,
                      .written = s->cp,
                      .suggestion = s->cps[j],
                      .written_id = s->ids[0],
                      .suggestion_id = s->ids[j],
                      .written_score = s->score[0],
                      .suggestion_score = s->score[j],
                      .margin = mg,
                      .kind = s->kind[j]};
}

/* Step 3: the findings of each text. */
static int collect(int ntext, bf_spell_text *texts, const sites *ss, double threshold, char *err,
                   size_t errlen) {
  for (int i = 0; i < ss->n; i++) {
    const site *s = &ss->v[i];
    if (!s->verify) continue;
    bf_spell_text *x = &texts[s->text];
    x->verified++;
    int b;
    double mg = best_margin(s, 1, &b);
    if (!(mg >= threshold)) continue;
    bf_suspect *f = realloc(x->found, (size_t)(x->n_found + 1) * sizeof *f);
    if (!f) {
      bf_errf(err, errlen, "out of memory for the spelling check's findings");
      return BF_ERR_NOMEM;
    }
    x->found = f;
    f[x->n_found++] = finding_of(s, b, mg);
  }
  (void)ntext;
  return BF_OK;
}

int bf_spell_check(const bf_model *m, bf_run *r, int ntext, bf_spell_text *texts,
                   const bf_spell_opts *o, char *err, size_t errlen) {
  if (err && errlen > 0) err[0] = 0;
  if (!m || !r || ntext < 0 || (ntext > 0 && !texts) || !o) {
    bf_errf(err, errlen, "bf_spell_check: bad arguments");
    return BF_ERR_INPUT;
  }
  if (!(o->sensitivity >= BF_SPELL_MIN_SENSITIVITY && o->sensitivity <= BF_SPELL_MAX_SENSITIVITY)) {
    bf_errf(err, errlen, "bf_spell_check: sensitivity %g is out of range", o->sensitivity);
    return BF_ERR_INPUT;
  }
  int32_t mask_id = bf_tokenizer_mask_id(bf_model_tokenizer(m));
  for (int i = 0; i < ntext; i++) {
    texts[i].found = NULL;
    texts[i].n_found = texts[i].verified = 0;
    const bf_tokens *t = texts[i].t;
    if (!t || !t->ids || !t->span || !texts[i].s) {
      bf_errf(err, errlen, "bf_spell_check: text %d has no tokens", i);
      return BF_ERR_INPUT;
    }
    for (int j = 0; j < t->n; j++)
      if (t->ids[j] == mask_id) {
        bf_errf(err, errlen, "bf_spell_check: text %d holds a [MASK]", i);
        return BF_ERR_INPUT;
      }
  }
  double threshold = log(1.0 / o->sensitivity);
  sites ss = {0};
  int rc = BF_OK;
  for (int i = 0; i < ntext && rc == BF_OK; i++)
    if (find_sites(m, i, &texts[i], &ss) != 0) {
      bf_errf(err, errlen, "out of memory for the spelling check's positions");
      rc = BF_ERR_NOMEM;
    }
  if (rc == BF_OK) {
    if (o->thorough)
      for (int i = 0; i < ss.n; i++) ss.v[i].verify = 1;
    else rc = screen(m, r, ntext, texts, &ss, threshold, err, errlen);
  }
  if (rc == BF_OK)
    rc = verify(m, r, texts, &ss, o->max_tokens > 0 ? o->max_tokens : 2048, err, errlen);
  if (rc == BF_OK) rc = collect(ntext, texts, &ss, threshold, err, errlen);
  free_sites(&ss);
  if (rc != BF_OK)
    for (int i = 0; i < ntext; i++) {
      free(texts[i].found);
      texts[i].found = NULL;
      texts[i].n_found = 0;
    }
  return rc;
}

int bf_spell_restore(const bf_model *m, const bf_spell_text *x, int tok_index,
                     int32_t suggestion_id, bf_confusion_kind kind, float written_score,
                     float suggestion_score, double sensitivity, bf_suspect *f) {
  if (!m || !x || !x->t || !x->s || !f || tok_index < 1 || tok_index + 1 >= x->t->n) return 0;
  if (!(written_score > 0.0f && written_score <= 1.0f && suggestion_score > 0.0f &&
        suggestion_score <= 1.0f))
    return 0;
  if (!(sensitivity >= BF_SPELL_MIN_SENSITIVITY && sensitivity <= BF_SPELL_MAX_SENSITIVITY))
    return 0;
  const bf_tokenizer *tok = bf_model_tokenizer(m);
  int32_t unk = bf_tokenizer_find(tok, "[UNK]", 5);
  bf_confusable conf[BF_SPELL_MAX_CONFUSABLES];
  site s;
  int got = site_at(tok, unk, 0, x, tok_index, conf, &s);
  if (got <= 0) return got;
  int j = 1;
  while (j < s.nids && !(s.ids[j] == suggestion_id && s.kind[j] == kind)) j++;
  int ok = 0;
  if (j < s.nids) {
    double mg = margin_of(log((double)written_score), suggestion_score, kind);
    if (mg >= log(1.0 / sensitivity)) {
      s.char_index = (int)bf_utf8_chars(x->s, (size_t)s.byte_off);
      s.score[0] = written_score;
      s.score[j] = suggestion_score;
      *f = finding_of(&s, j, mg);
      ok = 1;
    }
  }
  free(s.ids);
  return ok;
}
