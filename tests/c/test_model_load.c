/*
** test_model_load.c — model directory loading (model.c, safetensors.c,
** blas.c).
**
**   test_model_load CASES_DIR
**
** CASES_DIR is made by tests/c/make_broken_models.py: good tiny models in every
** variant, broken copies, and cases.tsv (the expectations, computed by that
** script from the files, independently of this code).  Run by
** tests/c/t_c.sh model.
*/
#include "bertfill.h"
#include "blas.h"
#include "model.h"
#include "safetensors.h"
#include "util.h"
#include "testlib.h"

#include <math.h>
#include <stdint.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char root[1024];

static const char *J(const char *name) {
  static char buf[4][1200];
  static int k;
  k = (k + 1) % 4;
  snprintf(buf[k], sizeof buf[k], "%s/%s", root, name);
  return buf[k];
}

/* A bf_model weight by its member name ("word_emb", "1.q_w"); count in *n. */
static const float *field(const bf_model *m, const char *name, size_t *n) {
  const bf_config *c = &m->cfg;
  size_t V = (size_t)c->vocab_size, H = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
  size_t P = (size_t)c->max_position_embeddings, T = (size_t)c->type_vocab_size;
  struct {
    const char *n;
    const float *p;
    size_t len;
  } top[] = {
    {"word_emb", m->word_emb, V * H}, {"pos_emb", m->pos_emb, P * H},
    {"type_emb", m->type_emb, T * H}, {"emb_ln_g", m->emb_ln_g, H},
    {"emb_ln_b", m->emb_ln_b, H},     {"head_w", m->head_w, H * H},
    {"head_b", m->head_b, H},         {"head_ln_g", m->head_ln_g, H},
    {"head_ln_b", m->head_ln_b, H},   {"dec_w", m->dec_w, V * H},
    {"dec_b", m->dec_b, V},
  };
  for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
    if (strcmp(name, top[i].n) == 0) {
      *n = top[i].len;
      return top[i].p;
    }
  char *dot;
  long l = strtol(name, &dot, 10);
  if (*dot != '.' || l < 0 || l >= c->num_hidden_layers) return NULL;
  const bf_layer *y = &m->layers[l];
  const char *f = dot + 1;
  struct {
    const char *n;
    const float *p;
    size_t len;
  } lay[] = {
    {"q_w", y->q_w, H * H},   {"q_b", y->q_b, H},     {"k_w", y->k_w, H * H},
    {"k_b", y->k_b, H},       {"v_w", y->v_w, H * H}, {"v_b", y->v_b, H},
    {"ao_w", y->ao_w, H * H}, {"ao_b", y->ao_b, H},   {"aln_g", y->aln_g, H},
    {"aln_b", y->aln_b, H},   {"i_w", y->i_w, I * H}, {"i_b", y->i_b, I},
    {"o_w", y->o_w, H * I},   {"o_b", y->o_b, H},     {"oln_g", y->oln_g, H},
    {"oln_b", y->oln_b, H},
  };
  for (size_t i = 0; i < sizeof lay / sizeof lay[0]; i++)
    if (strcmp(f, lay[i].n) == 0) {
      *n = lay[i].len;
      return lay[i].p;
    }
  return NULL;
}

static const char *ALL_FIELDS[] = {"word_emb",  "pos_emb", "type_emb", "emb_ln_g",
                                   "emb_ln_b",  "head_w",  "head_b",   "head_ln_g",
                                   "head_ln_b", "dec_w",   "dec_b"};
static const char *LAYER_FIELDS[] = {"q_w",  "q_b",  "k_w",   "k_b",   "v_w", "v_b",
                                     "ao_w", "ao_b", "aln_g", "aln_b", "i_w", "i_b",
                                     "o_w",  "o_b",  "oln_g", "oln_b"};

/* Every weight of a and b bitwise equal?  Describes the first difference. */
static int same_weights(const bf_model *a, const bf_model *b, char *why, size_t wl) {
  if (memcmp(&a->cfg, &b->cfg, sizeof a->cfg) != 0) {
    snprintf(why, wl, "configs differ");
    return 0;
  }
  char name[64];
  int nf = (int)(sizeof ALL_FIELDS / sizeof ALL_FIELDS[0]);
  int total = nf + a->cfg.num_hidden_layers * 16;
  for (int i = 0; i < total; i++) {
    if (i < nf) snprintf(name, sizeof name, "%s", ALL_FIELDS[i]);
    else snprintf(name, sizeof name, "%d.%s", (i - nf) / 16, LAYER_FIELDS[(i - nf) % 16]);
    size_t na, nb;
    const float *pa = field(a, name, &na), *pb = field(b, name, &nb);
    if (!pa || !pb || na != nb) {
      snprintf(why, wl, "%s missing", name);
      return 0;
    }
    if (memcmp(pa, pb, na * sizeof(float)) != 0) {
      for (size_t k = 0; k < na; k++)
        if (memcmp(&pa[k], &pb[k], 4) != 0) {
          snprintf(why, wl, "%s[%zu]: %.9g vs %.9g", name, k, pa[k], pb[k]);
          break;
        }
      return 0;
    }
  }
  return 1;
}

static int in_map(const bf_model *m, const void *p) {
  const char *b = m->map;
  return (const char *)p >= b && (const char *)p < b + m->map_len;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ---- manifest ---- */

#define MAXF 16
static int split_tabs(char *line, char **f) {
  int n = 0;
  line[strcspn(line, "\r\n")] = 0;
  for (char *s = line; n < MAXF;) {
    f[n++] = s;
    char *t = strchr(s, '\t');
    if (!t) break;
    *t = 0;
    s = t + 1;
  }
  return n;
}

typedef struct cache_ent {
  char dir[1200];
  bf_model *m;
} cache_ent;
static cache_ent cache[64];
static int n_cache;

static bf_model *cached(const char *dir) {
  for (int i = 0; i < n_cache; i++)
    if (strcmp(cache[i].dir, dir) == 0) return cache[i].m;
  char err[512];
  bf_model *m = bf_model_load(dir, err, sizeof err);
  if (!m) {
    printf("# load %s: %s\n", dir, err);
    return NULL;
  }
  if (n_cache < 64) {
    snprintf(cache[n_cache].dir, sizeof cache[n_cache].dir, "%s", dir);
    cache[n_cache++].m = m;
  } else {
    bf_model_release(m);
    return NULL;
  }
  return m;
}

static void run_manifest(void) {
  FILE *f = fopen(J("cases.tsv"), "r");
  CHECK("manifest_present", f != NULL);
  if (!f) return;
  char line[4096], *F[MAXF], name[512];
  int n_val = 0, bad_val = 0;
  char first_bad[600] = "";
  while (fgets(line, sizeof line, f)) {
    int n = split_tabs(line, F);
    if (strcmp(F[0], "load") == 0 && n == 12) {
      char err[512] = "x";
      double t0 = now_s();
      bf_model *m = bf_model_load(F[2], err, sizeof err);
      double dt = now_s() - t0;
      snprintf(name, sizeof name, "load_%s", F[1]);
      CHECKF(name, m != NULL && err[0] == 0, "%s", err);
      if (!m) continue;
      const bf_config *c = bf_model_config(m);
      snprintf(name, sizeof name, "config_%s", F[1]);
      CHECKF(name,
             c->vocab_size == atoi(F[3]) && c->hidden_size == atoi(F[4]) &&
               c->num_hidden_layers == atoi(F[5]) && c->num_attention_heads == atoi(F[6]) &&
               c->intermediate_size == atoi(F[7]) && c->max_position_embeddings == atoi(F[8]) &&
               c->type_vocab_size == atoi(F[9]) && c->layer_norm_eps == (float)atof(F[10]),
             "got V=%d H=%d L=%d A=%d I=%d P=%d T=%d eps=%g", c->vocab_size, c->hidden_size,
             c->num_hidden_layers, c->num_attention_heads, c->intermediate_size,
             c->max_position_embeddings, c->type_vocab_size, c->layer_norm_eps);
      snprintf(name, sizeof name, "dtype_%s", F[1]);
      CHECKF(name, strcmp(bf_model_dtype(m), F[11]) == 0, "got %s want %s", bf_model_dtype(m),
             F[11]);
      snprintf(name, sizeof name, "dir_%s", F[1]);
      CHECK(name, strcmp(bf_model_dir(m), F[2]) == 0 && bf_model_tokenizer(m) == m->tok);
      printf("# loaded %s in %.2f ms\n", F[1], dt * 1e3);
      bf_model_release(m);
    } else if (strcmp(F[0], "err") == 0 && n >= 4) {
      char err[512];
      memset(err, 'x', sizeof err);
      bf_model *m = bf_model_load(F[2], err, sizeof err);
      snprintf(name, sizeof name, "error_%s", F[1]);
      if (m) {
        CHECKF(name, 0, "loaded, but an error was expected");
        bf_model_release(m);
        continue;
      }
      int ok = memchr(err, 0, sizeof err) != NULL && err[0] != 0;
      const char *missing = "";
      for (int i = 3; ok && i < n; i++)
        if (!strstr(err, F[i])) {
          ok = 0;
          missing = F[i];
        }
      CHECKF(name, ok, "message lacks \"%s\": %s", missing, err);
      printf("#   %s -> %s\n", F[1], err);
    } else if (strcmp(F[0], "val") == 0 && n == 5) {
      bf_model *m = cached(F[1]);
      size_t len;
      const float *p = m ? field(m, F[2], &len) : NULL;
      size_t idx = (size_t)strtoull(F[3], NULL, 10);
      uint32_t want = (uint32_t)strtoul(F[4], NULL, 16), got = 0;
      n_val++;
      if (p && idx < len) memcpy(&got, &p[idx], 4);
      if (!p || idx >= len || got != want) {
        if (!bad_val++)
          snprintf(first_bad, sizeof first_bad, "%s %s[%zu]: got %08x want %08x", F[1], F[2], idx,
                   got, want);
      }
    } else if (strcmp(F[0], "disp") == 0 && n == 4) {
      bf_model *m = cached(F[1]);
      const char *got = m ? bf_model_token(m, atoi(F[2])) : NULL;
      snprintf(name, sizeof name, "display_token_%s", F[2]);
      CHECKF(name, got && strcmp(got, F[3]) == 0, "got '%s' want '%s'", got ? got : "(null)", F[3]);
    } else if (strcmp(F[0], "same") == 0 && n == 4) {
      bf_model *a = cached(F[2]), *b = cached(F[3]);
      char why[256] = "not loaded";
      snprintf(name, sizeof name, "same_weights_%s", F[1]);
      CHECKF(name, a && b && same_weights(a, b, why, sizeof why), "%s", why);
    }
  }
  fclose(f);
  CHECKF("weight_values_match_independent_reader", n_val > 100 && bad_val == 0,
         "%d of %d differ; first: %s", bad_val, n_val, first_bad);
}

/* ---- specific properties ---- */

static void test_specifics(void) {
  char err[512];
  bf_model *base = cached(J("base"));
  bf_model *untied = cached(J("untied"));
  bf_model *f16 = cached(J("f16"));
  bf_model *unal = cached(J("unaligned"));
  CHECK("specific_models_load", base && untied && f16 && unal);
  if (!base || !untied || !f16 || !unal) return;

  /* F32 weights are used in place in the mapping; nothing is copied */
  CHECK("f32_in_place", in_map(base, base->word_emb) && in_map(base, base->layers[1].o_w) &&
                          in_map(base, base->dec_b) && base->n_owned == 0);
  CHECK("f16_converted_to_owned", !in_map(f16, f16->word_emb) && f16->n_owned > 0);
  CHECK("unaligned_f32_copied",
        !in_map(unal, unal->word_emb) && unal->n_owned > 0 && ((uintptr_t)unal->word_emb & 3) == 0);
  CHECK("tied_decoder_is_word_emb", base->dec_w == base->word_emb);
  CHECK("untied_decoder_separate",
        untied->dec_w != untied->word_emb &&
          memcmp(untied->dec_w, untied->word_emb, 4 * (size_t)untied->cfg.hidden_size) != 0);

  int V = base->cfg.vocab_size;
  CHECK("token_out_of_range_null",
        bf_model_token(base, -1) == NULL && bf_model_token(base, V) == NULL);

  /* refcount: retain + release keeps the model alive */
  bf_model *m = bf_model_load(J("base"), err, sizeof err);
  CHECK("refcount_load", m && atomic_load(&m->refcount) == 1);
  if (m) {
    bf_model_retain(m);
    CHECK("refcount_retain", atomic_load(&m->refcount) == 2);
    bf_model_release(m);
    CHECK("refcount_release_keeps",
          atomic_load(&m->refcount) == 1 && m->word_emb[0] == base->word_emb[0]);
    bf_model_release(m); /* frees; valgrind/ASan check that nothing leaks */
  }
  bf_model_release(NULL);

  /* fingerprint: computed by the warm-up thread each load starts, or on
  ** first request when that is off */
  {
    setenv("BERTFILL_WARM_UP", "1", 1);
    bf_model *w = bf_model_load(J("base"), err, sizeof err);
    setenv("BERTFILL_WARM_UP", "0", 1);
    int known = 0;
    for (int i = 0; w && i < 500 && !known; i++) {
      pthread_mutex_lock(&w->fp_mu);
      known = w->fingerprint[0] != 0;
      pthread_mutex_unlock(&w->fp_mu);
      if (!known) usleep(10000);
    }
    CHECK("fingerprint_by_warm_up", known);
    bf_model_release(w);
  }
  bf_model *a = bf_model_load(J("base"), err, sizeof err);
  bf_model *b = bf_model_load(J("base_copy"), err, sizeof err);
  bf_model *c = bf_model_load(J("onebyte"), err, sizeof err);
  bf_model *d = bf_model_load(J("config_extra"), err, sizeof err);
  CHECK("fingerprint_models_load", a && b && c && d);
  if (a && b && c && d) {
    pthread_mutex_lock(&a->fp_mu);
    CHECK("fingerprint_lazy (BERTFILL_WARM_UP=0)", a->fingerprint[0] == 0);
    pthread_mutex_unlock(&a->fp_mu);
    const char *fa = bf_model_fingerprint(a);
    char fa_copy[17];
    snprintf(fa_copy, sizeof fa_copy, "%s", fa);
    int hex = strlen(fa) == 16;
    for (int i = 0; i < 16 && hex; i++)
      hex = (fa[i] >= '0' && fa[i] <= '9') || (fa[i] >= 'a' && fa[i] <= 'f');
    CHECKF("fingerprint_16_hex", hex, "got '%s'", fa);
    CHECK("fingerprint_cached", bf_model_fingerprint(a) == fa && strcmp(fa, fa_copy) == 0);
    CHECKF("fingerprint_same_content_same", strcmp(fa, bf_model_fingerprint(b)) == 0, "%s vs %s",
           fa, bf_model_fingerprint(b));
    CHECKF("fingerprint_one_weight_byte_differs", strcmp(fa, bf_model_fingerprint(c)) != 0, "%s",
           fa);
    CHECKF("fingerprint_config_change_differs", strcmp(fa, bf_model_fingerprint(d)) != 0, "%s", fa);
    CHECK("fingerprint_f16_differs", strcmp(fa, bf_model_fingerprint(f16)) != 0);
    printf("# fingerprint base %s onebyte %s\n", fa, bf_model_fingerprint(c));
  }
  bf_model_release(a);
  bf_model_release(b);
  bf_model_release(c);
  bf_model_release(d);

  /* the fingerprint file: the weights' hash kept next to them, used by the
  ** next load only while model.safetensors is the very file it was made
  ** from (device, inode, size, mtime, ctime), and written only for a file
  ** that settled (2 s) before it was hashed */
  {
    char cmd[4096], fpath[1200], wpath[1200], line1[256] = "", line2[256] = "";
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s' && rm -f '%s/model.fingerprint'",
             J("fpfile"), J("base"), J("fpfile"), J("fpfile"));
    int copied = system(cmd) == 0;
    snprintf(fpath, sizeof fpath, "%s/model.fingerprint", J("fpfile"));
    snprintf(wpath, sizeof wpath, "%s/model.safetensors", J("fpfile"));
    bf_model *base_m = bf_model_load(J("base"), err, sizeof err);
    char fbase[17] = "";
    if (base_m) snprintf(fbase, sizeof fbase, "%s", bf_model_fingerprint(base_m));
    bf_model_release(base_m);

    bf_model *f1 = copied ? bf_model_load(J("fpfile"), err, sizeof err) : NULL;
    const char *fp1 = f1 ? bf_model_fingerprint(f1) : "";
    CHECKF("fpfile_fresh_file_hashed_not_kept",
           f1 && !strcmp(f1->fp_source, "hashed") && access(fpath, F_OK) != 0 &&
             !strcmp(fp1, fbase),
           "source %s, file %s, %s vs %s", f1 ? f1->fp_source : "-",
           access(fpath, F_OK) == 0 ? "written" : "absent", fp1, fbase);
    bf_model_release(f1);

    usleep(2200000); /* the copy settles */
    bf_model *f2 = bf_model_load(J("fpfile"), err, sizeof err);
    const char *fp2 = f2 ? bf_model_fingerprint(f2) : "";
    FILE *fl = fopen(fpath, "r");
    if (fl) {
      if (!fgets(line1, sizeof line1, fl)) line1[0] = 0;
      fclose(fl);
    }
    CHECKF("fpfile_written_after_hashing",
           f2 && !strcmp(f2->fp_source, "hashed") &&
             !strncmp(line1, "bertfill-fingerprint 1 ", 23) && !strcmp(fp2, fbase),
           "source %s, line '%s'", f2 ? f2->fp_source : "-", line1);
    bf_model_release(f2);

    bf_model *f3 = bf_model_load(J("fpfile"), err, sizeof err);
    int known_at_load = f3 && f3->weights_known;
    const char *fp3 = f3 ? bf_model_fingerprint(f3) : "";
    CHECKF("fpfile_used_by_next_load",
           known_at_load && !strcmp(f3->fp_source, "model.fingerprint") && !strcmp(fp3, fbase),
           "known %d, source %s, %s vs %s", known_at_load, f3 ? f3->fp_source : "-", fp3, fbase);
    bf_model *f3i = bf_model_load_as(J("fpfile"), BF_PRECISION_INT8, err, sizeof err);
    CHECKF("fpfile_int8_load_uses_it_other_fingerprint",
           f3i && f3i->weights_known && strcmp(bf_model_fingerprint(f3i), fbase) != 0, "%s",
           f3i ? bf_model_fingerprint(f3i) : err);
    bf_model_release(f3i);
    bf_model_release(f3);

    /* one weight byte changed in place, same size, mtime set back: only the
    ** change time tells */
    struct stat st0;
    int fd = open(wpath, O_RDWR);
    int changed = 0;
    if (fd >= 0 && fstat(fd, &st0) == 0) {
      unsigned char byte;
      off_t at = st0.st_size - 1;
      if (pread(fd, &byte, 1, at) == 1) {
        byte ^= 0x01;
        changed = pwrite(fd, &byte, 1, at) == 1;
      }
      struct timespec ts[2] = {st0.st_atim, st0.st_mtim};
      if (futimens(fd, ts) != 0) changed = 0;
      close(fd);
    }
    bf_model *f4 = changed ? bf_model_load(J("fpfile"), err, sizeof err) : NULL;
    /* (a load may hash the weights itself to check its packed file against
    ** them: what counts is that model.fingerprint did not give the hash) */
    int known4 = f4 && f4->weights_known && !strcmp(f4->weights_source, "model.fingerprint");
    const char *fp4 = f4 ? bf_model_fingerprint(f4) : "";
    fl = fopen(fpath, "r");
    if (fl) {
      if (!fgets(line2, sizeof line2, fl)) line2[0] = 0;
      fclose(fl);
    }
    CHECKF("fpfile_ignored_after_change_in_place",
           changed && f4 && !known4 && !strcmp(f4->fp_source, "hashed") && strcmp(fp4, fbase) != 0,
           "changed %d, known at load %d, source %s, %s vs %s", changed, known4,
           f4 ? f4->fp_source : "-", fp4, fbase);
    CHECK("fpfile_not_rewritten_for_an_unsettled_file", !strcmp(line1, line2));
    bf_model_release(f4);

    fl = fopen(fpath, "w"); /* garbage in the file: ignored */
    if (fl) {
      fputs("bertfill-fingerprint 1 nonsense\n", fl);
      fclose(fl);
    }
    bf_model *f5 = bf_model_load(J("fpfile"), err, sizeof err);
    CHECK("fpfile_garbage_ignored",
          f5 && !(f5->weights_known && !strcmp(f5->weights_source, "model.fingerprint")) &&
            strlen(bf_model_fingerprint(f5)) == 16);
    bf_model_release(f5);

    /* truncated after loading (cp over a loaded model does this): the
    ** fingerprint is not computed from the mapping (SIGBUS) but refused,
    ** and bf_fill gives the "changed on disk" error; both fp32 and int8 */
    for (int int8 = 0; int8 < 2; int8++) {
      bf_model *f6 = bf_model_load_as(J("fpfile"), int8 ? BF_PRECISION_INT8 : BF_PRECISION_FP32,
                                      err, sizeof err);
      unlink(fpath);
      int cut = f6 && truncate(wpath, 4096) == 0;
      if (f6) f6->weights_known = 0; /* as if no model.fingerprint had been read */
      const char *fp6 = f6 ? bf_model_fingerprint(f6) : "";
      char e6[512] = "";
      int checked = f6 ? bf_model_check(f6, e6, sizeof e6) : BF_OK;
      bf_tokens t6 = {0};
      bf_cand c6[5];
      char e7[512] = "";
      int filled = BF_OK;
      if (f6 && bf_tokenize(bf_model_tokenizer(f6), "[MASK]", -1, &t6, e7, sizeof e7) == BF_OK) {
        bf_run *r6 = bf_run_new();
        filled = r6 ? bf_fill(f6, r6, 1, &t6, 5, c6, e7, sizeof e7) : BF_ERR_NOMEM;
        bf_run_free(r6);
      }
      bf_tokens_free(&t6);
      CHECKF(int8 ? "truncated_int8_fingerprint_refused_fill_errors"
                  : "truncated_fingerprint_refused_fill_errors",
             cut && fp6 == NULL && checked == BF_ERR_MODEL && strstr(e6, "changed on disk") &&
               filled == BF_ERR_MODEL && strstr(e7, "changed on disk"),
             "cut %d, fingerprint %s, check %d '%s', fill %d '%s'", cut, fp6 ? fp6 : "NULL",
             checked, e6, filled, e7);
      bf_model_release(f6);
      snprintf(cmd, sizeof cmd, "cp '%s/model.safetensors' '%s'", J("base"), wpath);
      if (system(cmd) != 0) printf("# could not restore %s\n", wpath);
    }
  }

  /* error buffer handling: tiny and zero-length buffers never overflow */
  char small[8];
  memset(small, 'x', sizeof small);
  bf_model *z = bf_model_load(J("no_weights"), small, sizeof small);
  CHECK("error_small_buffer_terminated", !z && memchr(small, 0, sizeof small) != NULL);
  z = bf_model_load(J("no_weights"), NULL, 0);
  CHECK("error_null_buffer", z == NULL);
  z = bf_model_load(NULL, err, sizeof err);
  CHECK("error_null_dir", z == NULL && strstr(err, "directory"));
  z = bf_model_load("", err, sizeof err);
  CHECK("error_empty_dir", z == NULL && err[0]);
  /* trailing slash is fine */
  char slash[1300];
  snprintf(slash, sizeof slash, "%s/", J("base"));
  z = bf_model_load(slash, err, sizeof err);
  CHECKF("dir_with_trailing_slash", z != NULL, "%s", err);
  bf_model_release(z);
}

/* ---- F16 / BF16 conversion against the compiler's own conversion ---- */

static void test_half_conversion(void) {
  int bad = 0, nan_ok = 1;
  uint32_t first = 0;
  for (uint32_t u = 0; u < 65536; u++) {
    uint16_t h = (uint16_t)u;
    _Float16 x;
    memcpy(&x, &h, 2);
    float want = (float)x, got = st_f16_to_f32(h);
    if (isnan(want)) {
      if (!isnan(got)) nan_ok = 0;
      continue;
    }
    if (memcmp(&want, &got, 4) != 0) {
      if (!bad++) first = u;
    }
  }
  CHECKF("f16_all_65536_values_exact", bad == 0 && nan_ok, "%d differ, first 0x%04x", bad, first);
  /* bulk conversion (F16C when available), from a misaligned source */
  unsigned char *src = malloc(2 * 65536 + 1);
  float *dst = malloc(4 * 65536);
  if (src && dst) {
    for (uint32_t u = 0; u < 65536; u++) {
      src[1 + 2 * u] = (unsigned char)u;
      src[2 + 2 * u] = (unsigned char)(u >> 8);
    }
    st_f16_to_f32_n(src + 1, dst, 65536);
    int bad_n = 0;
    for (uint32_t u = 0; u < 65536; u++) {
      uint16_t h = (uint16_t)u;
      _Float16 x;
      memcpy(&x, &h, 2);
      float want = (float)x;
      if (isnan(want) ? !isnan(dst[u]) : memcmp(&want, &dst[u], 4) != 0) bad_n++;
    }
    CHECKF("f16_bulk_all_65536_values_exact", bad_n == 0, "%d differ", bad_n);
    st_bf16_to_f32_n(src + 1, dst, 65536);
    bad_n = 0;
    for (uint32_t u = 0; u < 65536; u++) {
      uint32_t want = u << 16, got;
      memcpy(&got, &dst[u], 4);
      if (got != want) bad_n++;
    }
    CHECKF("bf16_bulk_all_65536_values_exact", bad_n == 0, "%d differ", bad_n);
  }
  free(src);
  free(dst);
  CHECK("f16_subnormal_min", st_f16_to_f32(0x0001) == 0x1p-24f);
  CHECK("f16_subnormal_max", st_f16_to_f32(0x03FF) == 0x3FFp-24f);
  CHECK("f16_inf", isinf(st_f16_to_f32(0x7C00)) && st_f16_to_f32(0xFC00) < 0);
  CHECK("f16_nan", isnan(st_f16_to_f32(0x7E00)) && isnan(st_f16_to_f32(0x7C01)));
  CHECK("f16_neg_zero", st_f16_to_f32(0x8000) == 0 && signbit(st_f16_to_f32(0x8000)));
  CHECK("f16_max", st_f16_to_f32(0x7BFF) == 65504.0f);
  CHECK("bf16_values", st_bf16_to_f32(0x3F80) == 1.0f && st_bf16_to_f32(0xC040) == -3.0f &&
                         st_bf16_to_f32(0x0001) == 0x1p-133f && isinf(st_bf16_to_f32(0x7F80)) &&
                         isnan(st_bf16_to_f32(0x7FC0)));
}

/* ---- OpenBLAS ---- */

static void test_blas(void) {
  char err[256];
  int env_before = getenv("OPENBLAS_CORETYPE") != NULL;
  CHECKF("blas_init", bf_blas_init(err, sizeof err) == BF_OK, "%s", err);
  CHECK("blas_init_idempotent", bf_blas_init(err, sizeof err) == BF_OK);
  CHECKF("blas_core_named", bf_blas_core()[0] != 0, "core '%s'", bf_blas_core());
  CHECKF("blas_config_named", strstr(bf_blas_config(), "OpenBLAS") != NULL, "'%s'",
         bf_blas_config());
  printf("# OpenBLAS core %s, %d threads, config: %s\n", bf_blas_core(), bf_blas_threads(),
         bf_blas_config());
  CHECK("blas_environment_unchanged", (getenv("OPENBLAS_CORETYPE") != NULL) == env_before);
  int t0 = bf_blas_threads();
  bf_blas_set_threads(1);
  CHECK("blas_set_threads_1", bf_blas_threads() == 1);
  bf_blas_set_threads(0);
  /* the cores this process may run on (sched_getaffinity), not all the
  ** machine's: a process pinned to fewer (taskset) gets that many */
  long cores = bf_ncores();
  CHECKF("blas_set_threads_default_cores", bf_blas_threads() == (int)(cores < 64 ? cores : 64),
         "%d threads, %ld cores", bf_blas_threads(), cores);
  bf_blas_set_threads(t0);

  /* bf_sgemm against a plain triple loop, all four transpose combinations,
  ** with leading dimensions larger than the widths and beta != 0 */
  enum { M = 7, N = 5, K = 9, LD = 12 };
  float A[M * LD], At[K * LD], B[K * LD], Bt[N * LD], C[M * LD], R[M * LD];
  for (int i = 0; i < M * LD; i++) {
    A[i] = (float)((i * 7) % 11) - 5;
    C[i] = 0;
  }
  for (int i = 0; i < K * LD; i++) {
    B[i] = (float)((i * 5) % 13) - 6;
    At[i] = 0;
  }
  for (int i = 0; i < N * LD; i++) Bt[i] = 0;
  for (int i = 0; i < M; i++)
    for (int k = 0; k < K; k++) At[k * LD + i] = A[i * LD + k];
  for (int k = 0; k < K; k++)
    for (int j = 0; j < N; j++) Bt[j * LD + k] = B[k * LD + j];
  int bad = 0;
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      for (int i = 0; i < M * LD; i++) C[i] = R[i] = (float)(i % 3);
      for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
          double s = 0;
          for (int k = 0; k < K; k++) s += (double)A[i * LD + k] * B[k * LD + j];
          R[i * LD + j] = (float)(2.0 * s + 0.5 * R[i * LD + j]);
        }
      bf_sgemm(ta, tb, M, N, K, 2.0f, ta ? At : A, LD, tb ? Bt : B, LD, 0.5f, C, LD);
      for (int i = 0; i < M * LD; i++)
        if (C[i] != R[i]) bad++; /* small integers: exact */
    }
  CHECKF("sgemm_matches_loop", bad == 0, "%d entries differ", bad);
}

/* A safetensors file of one U8 tensor of n bytes, in the cases folder. */
static const char *write_u8_file(const char *name, size_t n) {
  const char *path = J(name);
  char hdr[128];
  int len = snprintf(hdr, sizeof hdr,
                     "{\"x\":{\"dtype\":\"U8\",\"shape\":[%zu],\"data_offsets\":[0,%zu]}}", n, n);
  while (len % 8) hdr[len++] = ' ';
  FILE *fp = fopen(path, "wb");
  if (!fp) return NULL;
  uint64_t hl = (uint64_t)len;
  unsigned char le[8];
  for (int i = 0; i < 8; i++) le[i] = (unsigned char)(hl >> (8 * i));
  int ok = fwrite(le, 1, 8, fp) == 8 && fwrite(hdr, 1, (size_t)len, fp) == (size_t)len;
  for (size_t i = 0; ok && i < n; i++) ok = fputc((int)(i * 7 & 0xff), fp) != EOF;
  return fclose(fp) == 0 && ok ? path : NULL;
}

/* The /proc/self/smaps entry that starts at p: its VmFlags line into flags
** (empty when there is none); returns the number of mappings listed. */
static int smaps_flags(const void *p, char *flags, size_t len) {
  FILE *fp = fopen("/proc/self/smaps", "r");
  char line[512];
  int n = 0, here = 0;
  flags[0] = 0;
  if (!fp) return -1;
  while (fgets(line, sizeof line, fp)) {
    unsigned long a, b;
    if (sscanf(line, "%lx-%lx ", &a, &b) == 2 && strchr(line, '-') < strchr(line, ' ')) {
      n++;
      here = (uintptr_t)a == (uintptr_t)p;
    } else if (here && strncmp(line, "VmFlags:", 8) == 0) {
      snprintf(flags, len, "%s", line + 8);
    }
  }
  fclose(fp);
  return n;
}

/* st_open maps a weights file of 2 MB or more at a 2 MB boundary, marked
** MADV_HUGEPAGE ("hg"), and leaves no reservation behind; a smaller file is
** mapped plainly (safetensors.c: map_read_only). */
static void test_huge_mapping(void) {
  if (access("/proc/self/smaps", R_OK) != 0) {
    SKIP("huge_mapping", "no /proc/self/smaps");
    return;
  }
  const size_t big_n = (5u << 20) + 123;
  const char *big = write_u8_file("huge-mapping.safetensors", big_n);
  const char *small = write_u8_file("small-mapping.safetensors", 4096);
  CHECK("huge_mapping_files_written", big && small);
  if (!big || !small) goto done;
  char err[512], flags[600], before_flags[8];
  int before = smaps_flags(NULL, before_flags, sizeof before_flags);
  st_file f;
  int rc = st_open(&f, big, err, sizeof err);
  CHECKF("huge_mapping_opens", rc == 0, "%s", err);
  if (rc != 0) goto done;
  int during = smaps_flags(f.map, flags, sizeof flags);
  CHECKF("huge_mapping_at_2mb_boundary", (uintptr_t)f.map % (2u << 20) == 0, "mapped at %p", f.map);
  CHECKF("huge_mapping_one_mapping_added", during == before + 1,
         "%d mappings before, %d with the file", before, during);
  const st_tensor *t = st_find(&f, "x");
  int bytes_ok = t && t->n_elems == big_n;
  for (uint64_t i = 0; bytes_ok && i < t->n_elems; i += 4093)
    bytes_ok = ((const unsigned char *)t->data)[i] == (unsigned char)(i * 7 & 0xff);
  CHECK("huge_mapping_reads_the_file", bytes_ok);
  if (access("/sys/kernel/mm/transparent_hugepage/enabled", R_OK) == 0)
    CHECKF("huge_mapping_marked_hugepage", strstr(flags, " hg") != NULL, "VmFlags:%s", flags);
  else SKIP("huge_mapping_marked_hugepage", "this kernel has no transparent huge pages");
  st_close(&f);
  int after = smaps_flags(NULL, flags, sizeof flags);
  CHECKF("huge_mapping_nothing_left_after_close", after == before, "%d mappings before, %d after",
         before, after);
  rc = st_open(&f, small, err, sizeof err);
  CHECKF("small_mapping_opens", rc == 0, "%s", err);
  if (rc != 0) goto done;
  smaps_flags(f.map, flags, sizeof flags);
  CHECKF("small_mapping_plain", flags[0] && strstr(flags, " hg") == NULL, "VmFlags:%s%s", flags,
         flags[0] ? "" : " (no mapping found at the file's address)");
  st_close(&f);
done:
  if (big) unlink(big);
  if (small) unlink(small);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s CASES_DIR\n", argv[0]);
    return 2;
  }
  snprintf(root, sizeof root, "%s", argv[1]);
  /* no warm-up thread (it holds a reference for a while, which the
  ** reference-count checks would see), except where a check turns it on */
  setenv("BERTFILL_WARM_UP", "0", 1);
  test_blas();
  test_half_conversion();
  run_manifest();
  test_specifics();
  test_huge_mapping();
  for (int i = 0; i < n_cache; i++) bf_model_release(cache[i].m);
  TL_EXIT();
}
