/*
** test_forward.c — bf_fill against the reference goldens.
**
**   test_forward MODEL_DIR GOLDEN_JSON [MODEL_DIR GOLDEN_JSON ...]
**
** GOLDEN_JSON is a tests/golden/forward_NAME.json written by model/reference.py
** (an independent float64 PyTorch forward pass) for the random model in
** MODEL_DIR (model/make_test_models.py; tests/c/t_c.sh forward checks that its
** sha256 is the one the golden was made from).  For each model:
**   - the loaded config and dtype match the golden's;
**   - every sequence run alone (one bf_fill per sequence), and all of them in
**     ONE bf_fill batch, give for each [MASK] the reference's top-5: the same
**     token id at every rank whose reference probability differs from its
**     neighbours' by more than 1e-4, and every probability within 1e-4;
**   - the same batch twice gives bit-identical results; k = 1 and k = vocab
**     (a full sorted permutation summing to 1; k = BF_MAX_K for larger
**     vocabularies) agree;
** and, on the first model with vocab_size < BF_MAX_K, bf_fill's errors: k = 0, k > vocab, k > BF_MAX_K,
** an input longer than max_position_embeddings (message names the length and
** the limit), token ids out of range, n_masks that disagrees with the ids,
** a sequence with no [MASK].
** Prints "ok NAME" / "FAIL NAME: why" lines and "#" lines with the largest
** probability differences seen.
*/
#include <ctype.h>
#include <math.h>
#include "bertfill.h"
#include "testlib.h"

/* Probability tolerance: 1e-4 for the fp32 goldens; an int8 golden
** (model/reference.py --int8, "precision": "int8") says its own. */
static double TOL = 1e-4;

/* ---------------------------------------------------------------- a small JSON reader
** (enough for the goldens: objects, arrays, numbers, strings without escapes
** beyond \" and \\, true/false/null). */
typedef struct jv {
  enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ } t;
  double num;
  char *str;       /* J_STR value */
  char **keys;     /* J_OBJ */
  struct jv *kids; /* J_ARR / J_OBJ: n values */
  int n;
} jv;

typedef struct {
  const char *p, *end;
  int bad;
} jp;

static void jws(jp *s) {
  while (s->p < s->end && isspace((unsigned char)*s->p)) s->p++;
}

static char *jstr(jp *s) {
  if (s->p >= s->end || *s->p != '"') {
    s->bad = 1;
    return NULL;
  }
  s->p++;
  size_t cap = 16, n = 0;
  char *o = malloc(cap);
  while (s->p < s->end && *s->p != '"') {
    char c = *s->p++;
    if (c == '\\' && s->p < s->end) c = *s->p++;
    if (n + 2 > cap) o = realloc(o, cap *= 2);
    o[n++] = c;
  }
  if (s->p >= s->end) s->bad = 1;
  else s->p++;
  o[n] = 0;
  return o;
}

static void jparse(jp *s, jv *v, int depth) {
  memset(v, 0, sizeof *v);
  jws(s);
  if (s->p >= s->end || depth > 20) {
    s->bad = 1;
    return;
  }
  char c = *s->p;
  if (c == '{' || c == '[') {
    int obj = c == '{';
    v->t = obj ? J_OBJ : J_ARR;
    s->p++;
    int cap = 0;
    jws(s);
    if (s->p < s->end && *s->p == (obj ? '}' : ']')) {
      s->p++;
      return;
    }
    for (;;) {
      if (v->n == cap) {
        cap = cap ? 2 * cap : 8;
        v->kids = realloc(v->kids, cap * sizeof *v->kids);
        if (obj) v->keys = realloc(v->keys, cap * sizeof *v->keys);
      }
      if (obj) {
        jws(s);
        v->keys[v->n] = jstr(s);
        jws(s);
        if (s->bad || s->p >= s->end || *s->p != ':') {
          s->bad = 1;
          return;
        }
        s->p++;
      }
      jparse(s, &v->kids[v->n], depth + 1);
      v->n++;
      if (s->bad) return;
      jws(s);
      if (s->p < s->end && *s->p == ',') {
        s->p++;
        continue;
      }
      if (s->p < s->end && *s->p == (obj ? '}' : ']')) {
        s->p++;
        return;
      }
      s->bad = 1;
      return;
    }
  } else if (c == '"') {
    v->t = J_STR;
    v->str = jstr(s);
  } else if (!strncmp(s->p, "true", 4) || !strncmp(s->p, "false", 5)) {
    v->t = J_BOOL;
    v->num = *s->p == 't';
    s->p += *s->p == 't' ? 4 : 5;
  } else if (!strncmp(s->p, "null", 4)) {
    v->t = J_NULL;
    s->p += 4;
  } else {
    char *e;
    v->t = J_NUM;
    v->num = strtod(s->p, &e);
    if (e == s->p) s->bad = 1;
    s->p = e;
  }
}

static void jfree(jv *v) {
  for (int i = 0; i < v->n; i++) {
    jfree(&v->kids[i]);
    if (v->keys) free(v->keys[i]);
  }
  free(v->kids);
  free(v->keys);
  free(v->str);
}

static const jv *jget(const jv *o, const char *key) {
  if (!o || o->t != J_OBJ) return NULL;
  for (int i = 0; i < o->n; i++)
    if (!strcmp(o->keys[i], key)) return &o->kids[i];
  return NULL;
}

static int jload(const char *path, jv *v) {
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc(n + 1);
  size_t got = fread(b, 1, n, f);
  fclose(f);
  jp s = {b, b + got, 0};
  jparse(&s, v, 0);
  free(b);
  if (s.bad) {
    jfree(v);
    return 0;
  }
  return 1;
}

/* ---------------------------------------------------------------- golden data */
typedef struct gmask {
  int pos;
  int id[5];
  double p[5];
  double next;
} gmask;
typedef struct golden {
  int k, mask_id, nseq, nmask;
  bf_tokens *seqs;
  gmask *masks;   /* all masks of all sequences, in order */
  int *seq_mask0; /* index of the first mask of each sequence */
  const jv *config;
  const char *dtype, *name;
  int int8;   /* an int8 golden: the model is loaded as BF_PRECISION_INT8 */
  double tol; /* its probability tolerance */
  jv root;
} golden;

static int golden_load(const char *path, golden *g) {
  memset(g, 0, sizeof *g);
  if (!jload(path, &g->root)) return 0;
  const jv *k = jget(&g->root, "k"), *ids = jget(jget(&g->root, "ids"), "[MASK]");
  const jv *seqs = jget(&g->root, "sequences"), *dt = jget(&g->root, "dtype");
  const jv *nm = jget(&g->root, "model");
  const jv *prec = jget(&g->root, "precision"), *tol = jget(&g->root, "tolerance");
  g->int8 = prec && prec->str && !strcmp(prec->str, "int8");
  g->tol = g->int8 && tol ? tol->num : 1e-4;
  g->config = jget(&g->root, "config");
  if (!k || !ids || !seqs || seqs->t != J_ARR || !dt || !nm || !g->config) return 0;
  g->k = (int)k->num;
  if (g->k != 5) return 0;
  g->mask_id = (int)ids->num;
  g->dtype = dt->str;
  g->name = nm->str;
  g->nseq = seqs->n;
  g->seqs = calloc(g->nseq, sizeof *g->seqs);
  g->seq_mask0 = calloc(g->nseq + 1, sizeof *g->seq_mask0);
  for (int s = 0; s < g->nseq; s++) g->nmask += jget(&seqs->kids[s], "masks")->n;
  g->masks = calloc(g->nmask ? g->nmask : 1, sizeof *g->masks);
  int mi = 0;
  for (int s = 0; s < g->nseq; s++) {
    const jv *sq = &seqs->kids[s], *a = jget(sq, "ids"), *ms = jget(sq, "masks");
    if (!a || !ms) return 0;
    bf_tokens *t = &g->seqs[s];
    t->n = t->cap = a->n;
    t->ids = malloc((a->n ? a->n : 1) * sizeof *t->ids);
    for (int i = 0; i < a->n; i++) {
      t->ids[i] = (int32_t)a->kids[i].num;
      t->n_masks += t->ids[i] == g->mask_id;
    }
    if (t->n_masks != ms->n) return 0;
    g->seq_mask0[s] = mi;
    for (int j = 0; j < ms->n; j++, mi++) {
      const jv *top = jget(&ms->kids[j], "top"), *nx = jget(&ms->kids[j], "next_prob");
      const jv *pos = jget(&ms->kids[j], "pos");
      if (!top || top->n != 5 || !nx || !pos) return 0;
      g->masks[mi].pos = (int)pos->num;
      g->masks[mi].next = nx->num;
      for (int r = 0; r < 5; r++) {
        g->masks[mi].id[r] = (int)top->kids[r].kids[0].num;
        g->masks[mi].p[r] = top->kids[r].kids[1].num;
      }
    }
  }
  g->seq_mask0[g->nseq] = mi;
  return 1;
}

static void golden_free(golden *g) {
  for (int s = 0; s < g->nseq; s++) free(g->seqs[s].ids);
  free(g->seqs);
  free(g->masks);
  free(g->seq_mask0);
  jfree(&g->root);
}

/* Compare k (<= 5) candidates per mask for masks [m0, m1) of g with out.
** Returns the number of problems, describes the first in why; *maxd gets the
** largest probability difference. */
static int compare(const golden *g, int m0, int m1, const bf_cand *out, int k, double *maxd,
                   char *why, size_t whylen) {
  int bad = 0;
  for (int m = m0; m < m1; m++) {
    const gmask *gm = &g->masks[m];
    const bf_cand *c = out + (size_t)(m - m0) * k;
    for (int r = 0; r < k; r++) {
      double d = fabs((double)c[r].prob - gm->p[r]);
      if (d > *maxd) *maxd = d;
      double up = r > 0 ? gm->p[r - 1] - gm->p[r] : 1.0;
      double down = gm->p[r] - (r + 1 < 5 ? gm->p[r + 1] : gm->next);
      int must_match = up > TOL && down > TOL;
      const char *prob = d > TOL ? "probability" : NULL;
      const char *idw = must_match && c[r].id != gm->id[r] ? "token id" : NULL;
      const char *order = r > 0 && c[r].prob > c[r - 1].prob ? "order" : NULL;
      if (prob || idw || order) {
        if (!bad++)
          snprintf(why, whylen,
                   "mask %d (token %d) rank %d: %s differs: got id %d p %.7f, "
                   "reference id %d p %.7f",
                   m - m0, gm->pos, r,
                   prob  ? prob
                   : idw ? idw
                         : order,
                   c[r].id, c[r].prob, gm->id[r], gm->p[r]);
      }
    }
  }
  return bad;
}

static double g_maxd_all = 0;

/* ---------------------------------------------------------------- per model */
static int g_errors_done = 0;

static void test_model(const char *dir, const char *gpath, bf_run *r, int last) {
  char err[512] = "", name[300], why[1024];
  golden g;
  if (!golden_load(gpath, &g)) {
    printf("FAIL forward golden %s: cannot read or parse it\n", gpath);
    tl_failed++;
    return;
  }
  char mname[64];
  snprintf(mname, sizeof mname, "%s%s", g.name, g.int8 ? " int8" : "");
  const char *mn = mname;
  TOL = g.tol;
  bf_model *m = bf_model_load_as(dir, g.int8 ? BF_PRECISION_INT8 : BF_PRECISION_FP32, err,
                                 sizeof err);
  snprintf(name, sizeof name, "forward %s: load", mn);
  CHECKF(name, m != NULL, "%s", err);
  if (!m) {
    golden_free(&g);
    return;
  }

  /* config and dtype as the golden says */
  const bf_config *c = bf_model_config(m);
  static const char *keys[] = {"vocab_size",        "hidden_size",
                               "num_hidden_layers", "num_attention_heads",
                               "intermediate_size", "max_position_embeddings",
                               "type_vocab_size"};
  int cv[] = {c->vocab_size,          c->hidden_size,       c->num_hidden_layers,
              c->num_attention_heads, c->intermediate_size, c->max_position_embeddings,
              c->type_vocab_size};
  int cfg_ok = 1;
  for (int i = 0; i < 7; i++) {
    const jv *v = jget(g.config, keys[i]);
    if (!v || (int)v->num != cv[i]) {
      cfg_ok = 0;
      snprintf(why, sizeof why, "%s is %d, config.json says %d", keys[i], cv[i],
               v ? (int)v->num : -1);
    }
  }
  const jv *eps = jget(g.config, "layer_norm_eps");
  if (!eps || fabs(c->layer_norm_eps - eps->num) > 1e-6 * eps->num) {
    cfg_ok = 0;
    snprintf(why, sizeof why, "layer_norm_eps is %g, config.json says %g", c->layer_norm_eps,
             eps ? eps->num : -1);
  }
  snprintf(name, sizeof name, "forward %s: config", mn);
  CHECKF(name, cfg_ok, "%s", why);
  snprintf(name, sizeof name, "forward %s: dtype %s", mn, g.dtype);
  CHECKF(name, !strcmp(bf_model_dtype(m), g.dtype), "bf_model_dtype says %s", bf_model_dtype(m));
  snprintf(name, sizeof name, "forward %s: mask id", mn);
  CHECKF(name, bf_tokenizer_mask_id(bf_model_tokenizer(m)) == g.mask_id, "engine %d, golden %d",
         bf_tokenizer_mask_id(bf_model_tokenizer(m)), g.mask_id);

  const int k = 5;
  size_t nout = (size_t)(g.nmask ? g.nmask : 1) * k;
  bf_cand *out = calloc(nout, sizeof *out), *out2 = calloc(nout, sizeof *out2);
  bf_cand *single = calloc(nout, sizeof *single);

  /* (a) one sequence per call */
  int bad = 0, rc_bad = 0;
  double maxd_single = 0;
  why[0] = 0;
  for (int s = 0; s < g.nseq; s++) {
    int m0 = g.seq_mask0[s], m1 = g.seq_mask0[s + 1];
    bf_cand *o = single + (size_t)m0 * k;
    int rc = bf_fill(m, r, 1, &g.seqs[s], k, o, err, sizeof err);
    if (rc != BF_OK) {
      if (!rc_bad++)
        snprintf(why, sizeof why, "sequence %d (%d tokens): rc %d: %s", s, g.seqs[s].n, rc, err);
      continue;
    }
    char w[512];
    int b = compare(&g, m0, m1, o, k, &maxd_single, w, sizeof w);
    if (b && !bad && !rc_bad)
      snprintf(why, sizeof why, "sequence %d (%d tokens) %s", s, g.seqs[s].n, w);
    bad += b;
  }
  snprintf(name, sizeof name, "forward %s: %d sequences one by one (%d masks)", mn, g.nseq,
           g.nmask);
  CHECKF(name, !bad && !rc_bad, "%d calls failed, %d mismatches; first: %s", rc_bad, bad, why);
  printf("# %s single: max |p - reference| = %.3g over %d masks x top-%d\n", mn, maxd_single,
         g.nmask, k);

  /* (b) all sequences in one call */
  double maxd_batch = 0;
  int rc = bf_fill(m, r, g.nseq, g.seqs, k, out, err, sizeof err);
  snprintf(name, sizeof name, "forward %s: one batch of %d sequences", mn, g.nseq);
  if (rc != BF_OK) {
    CHECKF(name, 0, "rc %d: %s", rc, err);
  } else {
    bad = compare(&g, 0, g.nmask, out, k, &maxd_batch, why, sizeof why);
    CHECKF(name, !bad, "%d mismatches; first: %s", bad, why);
  }
  printf("# %s batch: max |p - reference| = %.3g\n", mn, maxd_batch);
  double sb = 0;
  for (size_t i = 0; i < (size_t)g.nmask * k; i++) {
    double d = fabs((double)single[i].prob - out[i].prob);
    if (single[i].id == out[i].id && d > sb) sb = d;
  }
  printf("# %s batch vs single: max |dp| (same id) = %.3g\n", mn, sb);
  if (maxd_single > g_maxd_all) g_maxd_all = maxd_single;
  if (maxd_batch > g_maxd_all) g_maxd_all = maxd_batch;

  /* timings of the last call report the masks */
  const bf_timings *tm = bf_run_timings(r);
  snprintf(name, sizeof name, "forward %s: timings count the masks", mn);
  CHECKF(name, tm && tm->masks == g.nmask, "masks %d, want %d", tm ? tm->masks : -1, g.nmask);

  /* determinism: the same batch again, bit for bit */
  rc = bf_fill(m, r, g.nseq, g.seqs, k, out2, err, sizeof err);
  snprintf(name, sizeof name, "forward %s: same batch twice is bit-identical", mn);
  CHECKF(name, rc == BF_OK && !memcmp(out, out2, (size_t)g.nmask * k * sizeof *out), "rc %d %s", rc,
         rc ? err : "results differ");

  /* k = 1 */
  bf_cand *o1 = calloc(g.nmask ? g.nmask : 1, sizeof *o1);
  double maxd1 = 0;
  rc = bf_fill(m, r, g.nseq, g.seqs, 1, o1, err, sizeof err);
  bad = rc == BF_OK ? compare(&g, 0, g.nmask, o1, 1, &maxd1, why, sizeof why) : 1;
  snprintf(name, sizeof name, "forward %s: k=1", mn);
  CHECKF(name, rc == BF_OK && !bad, "rc %d %s", rc, rc ? err : why);
  free(o1);

  /* k = vocab (or BF_MAX_K when the vocabulary is larger): distinct ids,
  ** sorted, summing to 1 (to at most 1), the top 5 as before */
  int V = c->vocab_size, kk = V < BF_MAX_K ? V : BF_MAX_K;
  snprintf(name, sizeof name, "forward %s: k=%d%s", mn, kk,
           kk == V ? " (vocab_size) gives the whole distribution"
                   : " (BF_MAX_K) gives distinct sorted ids");
  {
    int s = 0;
    while (s < g.nseq && g.seqs[s].n_masks == 0) s++;
    bf_cand *all = calloc((size_t)kk * g.seqs[s].n_masks, sizeof *all);
    char *seen = calloc(V, 1);
    rc = bf_fill(m, r, 1, &g.seqs[s], kk, all, err, sizeof err);
    int ok = rc == BF_OK;
    double sum = 0, md = 0;
    why[0] = 0;
    if (ok) {
      for (int i = 0; i < kk && ok; i++) {
        if (all[i].id < 0 || all[i].id >= V || seen[all[i].id]) ok = 0;
        else seen[all[i].id] = 1;
        if (i && all[i].prob > all[i - 1].prob) ok = 0;
        sum += all[i].prob;
      }
      ok = ok && (kk == V ? fabs(sum - 1.0) < 1e-4 : sum < 1.0 + 1e-4);
      ok = ok && !compare(&g, g.seq_mask0[s], g.seq_mask0[s] + 1, all, 5, &md, why, sizeof why);
    }
    CHECKF(name, ok, "rc %d %s; sum of probabilities %.6f; %s", rc, rc ? err : "", sum, why);
    free(all);
    free(seen);
  }

  /* bf_model_token strips "##" */
  snprintf(name, sizeof name, "forward %s: display tokens", mn);
  {
    const bf_tokenizer *tk = bf_model_tokenizer(m);
    int ok = 1;
    for (int i = 0; i < V && ok; i++) {
      const char *raw = bf_tokenizer_token(tk, i), *disp = bf_model_token(m, i);
      if (!raw || !disp) ok = 0;
      else if (!strncmp(raw, "##", 2) && strlen(raw) > 2) ok = !strcmp(disp, raw + 2);
      else ok = !strcmp(disp, raw);
      if (!ok)
        snprintf(why, sizeof why, "id %d: vocab %s, display %s", i, raw ? raw : "(null)",
                 disp ? disp : "(null)");
    }
    CHECKF(name, ok, "%s", why);
  }

  /* bf_tokenizer_find gives back the id of every vocabulary entry */
  snprintf(name, sizeof name, "forward %s: bf_tokenizer_find", mn);
  {
    const bf_tokenizer *tk = bf_model_tokenizer(m);
    int ok = bf_tokenizer_find(tk, "no such entry", 13) == -1 &&
             bf_tokenizer_find(tk, "", 0) == -1 && bf_tokenizer_find(NULL, "a", 1) == -1;
    why[0] = 0;
    for (int i = 0; i < V && ok; i++) {
      const char *raw = bf_tokenizer_token(tk, i);
      int32_t got = bf_tokenizer_find(tk, raw, strlen(raw));
      if (got != i && strcmp(bf_tokenizer_token(tk, got), raw) != 0) { /* duplicates: any one */
        ok = 0;
        snprintf(why, sizeof why, "entry %d \"%s\" found as %d", i, raw, (int)got);
      }
    }
    CHECKF(name, ok, "%s", why);
  }

  /* bf_fill_scored: the probability of given tokens, in or out of the top
  ** k, is the number the whole distribution (k = vocabulary, or BF_MAX_K)
  ** gives them, bit for bit; the top k are bf_fill's */
  snprintf(name, sizeof name, "forward %s: bf_fill_scored", mn);
  {
    int s = 0;
    while (s < g.nseq && g.seqs[s].n_masks < 2) s++;
    if (s == g.nseq) s = 0;
    while (s < g.nseq && g.seqs[s].n_masks == 0) s++;
    const bf_tokens *t = &g.seqs[s];
    int nm = t->n_masks;
    bf_cand *all = calloc((size_t)kk * nm, sizeof *all), *top = calloc((size_t)5 * nm, sizeof *top);
    bf_cand *top2 = calloc((size_t)5 * nm, sizeof *top2);
    int32_t *want = calloc(nm, sizeof *want);
    float *wp = calloc(nm, sizeof *wp);
    int ok = bf_fill(m, r, 1, t, kk, all, err, sizeof err) == BF_OK &&
             bf_fill(m, r, 1, t, 5, top, err, sizeof err) == BF_OK;
    why[0] = 0;
    for (int rank = 0; rank < kk && ok; rank += rank < 8 ? 1 : 97) {
      for (int j = 0; j < nm; j++) want[j] = j == 1 ? -1 : all[(size_t)j * kk + rank].id;
      rc = bf_fill_scored(m, r, 1, t, 5, top2, want, wp, err, sizeof err);
      ok = rc == BF_OK && !memcmp(top, top2, (size_t)5 * nm * sizeof *top);
      for (int j = 0; j < nm && ok; j++) {
        float expect = j == 1 ? 0.0f : all[(size_t)j * kk + rank].prob;
        if (memcmp(&wp[j], &expect, sizeof expect) != 0) {
          ok = 0;
          snprintf(why, sizeof why, "mask %d, token of rank %d: %.9g, distribution %.9g", j,
                   rank + 1, wp[j], expect);
        }
      }
    }
    want[0] = V;
    err[0] = 0;
    rc = bf_fill_scored(m, r, 1, t, 5, top2, want, wp, err, sizeof err);
    if (ok && !(rc == BF_ERR_INPUT && strstr(err, "out of range"))) {
      ok = 0;
      snprintf(why, sizeof why, "a wanted id = vocab_size gives rc %d '%s'", rc, err);
    }
    want[0] = -1;
    rc = bf_fill_scored(m, r, 1, t, 5, top2, want, NULL, err, sizeof err);
    if (ok && rc != BF_ERR_INPUT) {
      ok = 0;
      snprintf(why, sizeof why, "no want_prob array gives rc %d", rc);
    }
    CHECKF(name, ok, "%s %s", why, err);
    free(all);
    free(top);
    free(top2);
    free(want);
    free(wp);
  }

  if (!g_errors_done && (V < BF_MAX_K || last)) {
    /* ---- error cases, on the first model with vocab_size < BF_MAX_K ---- */
    g_errors_done = 1;
    int s = 0;
    while (s < g.nseq && g.seqs[s].n_masks == 0) s++;
    bf_tokens *t = &g.seqs[s];
    bf_cand *big = calloc((size_t)(BF_MAX_K + 2) * (t->n_masks + 3), sizeof *big);
    int P = c->max_position_embeddings;

    err[0] = 0;
    rc = bf_fill(m, r, 1, t, 0, big, err, sizeof err);
    CHECKF("forward error: k=0", rc == BF_ERR_INPUT && err[0], "rc %d err '%s'", rc, err);
    err[0] = 0;
    rc = bf_fill(m, r, 1, t, -3, big, err, sizeof err);
    CHECKF("forward error: k<0", rc == BF_ERR_INPUT && err[0], "rc %d err '%s'", rc, err);
    err[0] = 0;
    rc = bf_fill(m, r, 1, t, BF_MAX_K + 1, big, err, sizeof err);
    CHECKF("forward error: k>BF_MAX_K", rc == BF_ERR_INPUT && err[0], "rc %d err '%s'", rc, err);
    if (V < BF_MAX_K) {
      err[0] = 0;
      rc = bf_fill(m, r, 1, t, V + 1, big, err, sizeof err);
      CHECKF("forward error: k>vocab_size", rc == BF_ERR_INPUT && err[0], "rc %d err '%s'", rc,
             err);
    } else {
      SKIP("forward error: k>vocab_size", "vocab_size >= BF_MAX_K");
    }

    /* too long: P+1 tokens */
    bf_tokens lt = {0};
    lt.n = lt.cap = P + 1;
    lt.ids = malloc((P + 1) * sizeof *lt.ids);
    const bf_tokens *lg = &g.seqs[0]; /* content from the longest sequence */
    for (int i = 1; i < g.nseq; i++)
      if (g.seqs[i].n > lg->n) lg = &g.seqs[i];
    for (int i = 0; i < P + 1; i++) lt.ids[i] = lg->ids[1 + i % (lg->n - 2)];
    lt.ids[0] = lg->ids[0];
    lt.ids[P] = lg->ids[lg->n - 1];
    lt.ids[P / 2] = g.mask_id;
    for (int i = 0; i < P + 1; i++) lt.n_masks += lt.ids[i] == g.mask_id;
    err[0] = 0;
    rc = bf_fill(m, r, 1, &lt, k, big, err, sizeof err);
    char n1[32], n0[32];
    snprintf(n1, sizeof n1, "%d", P + 1);
    snprintf(n0, sizeof n0, "%d", P);
    CHECKF("forward error: input longer than max_position_embeddings",
           rc == BF_ERR_TOOLONG && strstr(err, n1) && strstr(err, n0),
           "rc %d err '%s' (want BF_ERR_TOOLONG naming %s and %s)", rc, err, n1, n0);
    /* ... also as the second sequence of a batch */
    bf_tokens two[2] = {*t, lt};
    err[0] = 0;
    rc = bf_fill(m, r, 2, two, k, big, err, sizeof err);
    CHECKF("forward error: too long inside a batch", rc == BF_ERR_TOOLONG && strstr(err, n1),
           "rc %d err '%s'", rc, err);
    free(lt.ids);

    /* ids out of range */
    bf_tokens bt = {0};
    bt.n = bt.cap = t->n;
    bt.ids = malloc(t->n * sizeof *bt.ids);
    memcpy(bt.ids, t->ids, t->n * sizeof *bt.ids);
    bt.n_masks = t->n_masks;
    int at = t->ids[1] == g.mask_id ? t->n - 2 : 1;
    if (bt.ids[at] == g.mask_id) at = 0; /* [CLS] */
    bt.ids[at] = V;
    err[0] = 0;
    rc = bf_fill(m, r, 1, &bt, k, big, err, sizeof err);
    CHECKF("forward error: token id = vocab_size", rc == BF_ERR_INPUT && err[0], "rc %d err '%s'",
           rc, err);
    bt.ids[at] = -1;
    err[0] = 0;
    rc = bf_fill(m, r, 1, &bt, k, big, err, sizeof err);
    CHECKF("forward error: token id -1", rc == BF_ERR_INPUT && err[0], "rc %d err '%s'", rc, err);
    /* n_masks that disagrees with the ids would make bf_fill write past out */
    memcpy(bt.ids, t->ids, t->n * sizeof *bt.ids);
    bt.n_masks = t->n_masks + 1;
    err[0] = 0;
    rc = bf_fill(m, r, 1, &bt, k, big, err, sizeof err);
    CHECKF("forward error: n_masks disagrees with the ids", rc == BF_ERR_INPUT && err[0],
           "rc %d err '%s'", rc, err);
    free(bt.ids);

    /* no mask: OK, nothing written */
    int sn = 0;
    while (sn < g.nseq && g.seqs[sn].n_masks != 0) sn++;
    if (sn < g.nseq) {
      for (int i = 0; i < 4; i++) big[i].id = -7, big[i].prob = -7;
      rc = bf_fill(m, r, 1, &g.seqs[sn], k, big, err, sizeof err);
      CHECKF("forward: a sequence without [MASK] is OK and writes nothing",
             rc == BF_OK && big[0].id == -7 && big[3].prob == -7, "rc %d %s", rc, rc ? err : "");
    }

    /* after all those errors the run still computes the right thing */
    double md = 0;
    memset(out2, 0, nout * sizeof *out2);
    rc = bf_fill(m, r, g.nseq, g.seqs, k, out2, err, sizeof err);
    bad = rc == BF_OK ? compare(&g, 0, g.nmask, out2, k, &md, why, sizeof why) : 1;
    CHECKF("forward: run still right after errors", rc == BF_OK && !bad, "rc %d %s", rc,
           rc ? err : why);
    free(big);
  }

  free(out);
  free(out2);
  free(single);
  bf_model_release(m);
  golden_free(&g);
}

int main(int argc, char **argv) {
  if (argc < 3 || argc % 2 == 0) {
    fprintf(stderr, "usage: %s MODEL_DIR GOLDEN_JSON [MODEL_DIR GOLDEN_JSON ...]\n", argv[0]);
    return 2;
  }
  bf_run *r = bf_run_new(); /* one run for every model: scratch must adapt */
  CHECK("forward: bf_run_new", r != NULL);
  if (!r) return 1;
  for (int i = 1; i + 1 < argc; i += 2) test_model(argv[i], argv[i + 1], r, i + 2 >= argc);
  bf_run_free(r);
  printf("# all models: max |p - reference| = %.3g (tolerance %g), %s kernels\n", g_maxd_all, TOL,
         bf_gemm_kernels());
  TL_EXIT();
}
