/*
** load.c — load a Hugging Face BERT masked-LM directory into a bf_model
** (bf_model_load_as; the model object itself is model.c's).
**
**   dir/config.json          architecture (every number used comes from here)
**   dir/vocab.txt            vocabulary (+ tokenizer_config.json / tokenizer.json),
**                            read by bf_tokenizer_load (tokenizer.c)
**   dir/model.safetensors    weights, mmapped read-only (safetensors.c)
**
** Loading reads config.json, the tokenizer files and the safetensors header,
** and checks every tensor the forward pass uses: present (with or without
** the "bert." prefix; LayerNorm as weight/bias or the legacy gamma/beta),
** F32/F16/BF16, and shaped as config.json says.  F32 tensors are used in
** place in the mapping — loading does not touch their pages, so a 400 MB
** model loads in milliseconds and processes share one copy in the page
** cache.  F16/BF16 tensors (and F32 ones that are not 4-byte aligned in the
** file) are converted once into owned F32 buffers.
**
** The decoder of the MLM head is cls.predictions.decoder.weight when the
** file has it, else the word embeddings (tied, as in bert-base-chinese); its
** bias is cls.predictions.bias (or cls.predictions.decoder.bias).  The pooler
** and the next-sentence head (cls.seq_relationship) are ignored.
**
** Loading also hashes the small files into the fingerprint (fingerprint.c,
** which also watches the mapped files for changes and keeps the weights'
** hash in dir/model.fingerprint) and ends by starting the warm-up
** (warm_up.c).
*/
#include "model.h"
#include "blas.h"
#include "json.h"
#include "safetensors.h"
#include "util.h"
#include "kernels/kernels.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- small helpers ---- */

/* 1: exists, 0: does not, -1: out of memory. */
static int file_exists(const char *dir, const char *name) {
  char *p = bf_path_join(dir, name);
  if (!p) return -1;
  struct stat st;
  int ok = stat(p, &st) == 0;
  free(p);
  return ok;
}

/* Read a whole small file.  1: read, 0: does not exist, -1: error (err set). */
static int read_small_file(const char *path, unsigned char **out, size_t *len, char *err,
                           size_t errlen) {
  int rc = json_read_file(path, out, len, err, errlen);
  if (rc == 0 && err && errlen) err[0] = 0; /* absent: the caller decides */
  return rc;
}

/* ---- config.json ---- */

static int cfg_int(const json_value *cfg, const char *path, const char *key, int has_default,
                   int64_t dflt, int64_t lo, int64_t hi, int *out, char *err, size_t errlen) {
  int64_t v;
  int rc = json_get_int(cfg, key, &v);
  if (rc == JSON_ABSENT) {
    if (!has_default) {
      bf_errf(err, errlen, "%s: missing \"%s\"", path, key);
      return -1;
    }
    v = dflt;
  } else if (rc == JSON_WRONG) {
    bf_errf(err, errlen, "%s: \"%s\" must be an integer", path, key);
    return -1;
  }
  if (v < lo || v > hi) {
    bf_errf(err, errlen, "%s: \"%s\" is %lld, outside the supported range %lld..%lld", path, key,
            (long long)v, (long long)lo, (long long)hi);
    return -1;
  }
  *out = (int)v;
  return 0;
}

static int config_from_json(const json_value *cfg, const char *path, bf_config *c, char *err,
                            size_t errlen) {
  if (cfg->type != JSON_OBJECT) {
    bf_errf(err, errlen, "%s: expected a JSON object, found %s", path, json_type_a(cfg->type));
    return -1;
  }
  const char *s;
  int rc = json_get_string(cfg, "model_type", &s);
  if (rc == JSON_OK && strcmp(s, "bert") != 0) {
    bf_errf(err, errlen, "%s: model_type is \"%.40s\"; bertfill runs BERT models (\"bert\")", path,
            s);
    return -1;
  }
  rc = json_get_string(cfg, "hidden_act", &s);
  if (rc == JSON_WRONG) {
    bf_errf(err, errlen, "%s: \"hidden_act\" must be a string", path);
    return -1;
  }
  if (rc == JSON_OK && strcmp(s, "gelu") != 0 && strcmp(s, "gelu_python") != 0) {
    bf_errf(err, errlen,
            "%s: hidden_act \"%.40s\" is not supported (only the exact erf GELU: "
            "\"gelu\")",
            path, s);
    return -1;
  }
  rc = json_get_string(cfg, "position_embedding_type", &s);
  if (rc == JSON_OK && strcmp(s, "absolute") != 0) {
    bf_errf(err, errlen,
            "%s: position_embedding_type \"%.40s\" is not supported (only \"absolute\")", path, s);
    return -1;
  }
  int b;
  if (json_get_bool(cfg, "is_decoder", &b) == JSON_OK && b) {
    bf_errf(err, errlen, "%s: is_decoder is true; bertfill needs a bidirectional encoder", path);
    return -1;
  }
  if (cfg_int(cfg, path, "vocab_size", 0, 0, 5, 4000000, &c->vocab_size, err, errlen) ||
      cfg_int(cfg, path, "hidden_size", 0, 0, 1, 65536, &c->hidden_size, err, errlen) ||
      cfg_int(cfg, path, "num_hidden_layers", 0, 0, 1, 1000, &c->num_hidden_layers, err, errlen) ||
      cfg_int(cfg, path, "num_attention_heads", 0, 0, 1, 65536, &c->num_attention_heads, err,
              errlen) ||
      cfg_int(cfg, path, "intermediate_size", 0, 0, 1, 1 << 20, &c->intermediate_size, err,
              errlen) ||
      cfg_int(cfg, path, "max_position_embeddings", 0, 0, 3, 1 << 20, &c->max_position_embeddings,
              err, errlen) ||
      cfg_int(cfg, path, "type_vocab_size", 1, 2, 1, 1 << 16, &c->type_vocab_size, err, errlen))
    return -1;
  if (c->hidden_size % c->num_attention_heads != 0) {
    bf_errf(err, errlen, "%s: hidden_size %d is not divisible by num_attention_heads %d", path,
            c->hidden_size, c->num_attention_heads);
    return -1;
  }
  double eps = 1e-12;
  rc = json_get_double(cfg, "layer_norm_eps", &eps);
  if (rc == JSON_WRONG) {
    bf_errf(err, errlen, "%s: \"layer_norm_eps\" must be a number", path);
    return -1;
  }
  if (!(eps > 0 && eps < 1) || !((float)eps > 0)) {
    bf_errf(err, errlen, "%s: layer_norm_eps %g is outside (0, 1)", path, eps);
    return -1;
  }
  c->layer_norm_eps = (float)eps;
  return 0;
}

/* ---- tensors ---- */

typedef struct loader {
  bf_model *m;
  st_file st;
  const char *dtype0; /* dtype of the first tensor used */
  int mixed;
  char *err;
  size_t errlen;
} loader;

/* m frees p at release. */
static int own(bf_model *m, void *p) {
  if (m->n_owned == m->cap_owned) {
    int nc = m->cap_owned ? m->cap_owned * 2 : 16;
    void **no = realloc(m->owned, (size_t)nc * sizeof *no);
    if (!no) return -1;
    m->owned = no;
    m->cap_owned = nc;
  }
  m->owned[m->n_owned++] = p;
  return 0;
}

/* Convert / place one tensor (already shape-checked) as F32. */
static const float *as_f32(loader *L, const st_tensor *t) {
  if (!L->dtype0) L->dtype0 = t->dtype_name;
  else if (strcmp(L->dtype0, t->dtype_name) != 0) L->mixed = 1;
  if (t->dtype == ST_F32 && ((uintptr_t)t->data & 3) == 0) return (const float *)t->data;
  size_t n = (size_t)t->n_elems, bytes = n ? n * sizeof(float) : 64;
  float *out = NULL;
  /* (MADV_HUGEPAGE on these buffers was tried: fewer page faults, but the
  ** first load in a process got slower, from the kernel finding huge pages) */
  if (posix_memalign((void **)&out, 64, bytes) != 0) out = NULL;
  if (!out || own(L->m, out) != 0) {
    free(out);
    bf_errf(L->err, L->errlen, "%s: out of memory converting tensor '%s' (%zu values)", L->st.path,
            t->name, n);
    return NULL;
  }
  const unsigned char *src = t->data;
  if (t->dtype == ST_F32) {
    memcpy(out, src, n * sizeof(float)); /* misaligned in the file */
  } else if (t->dtype == ST_F16) {
    st_f16_to_f32_n(src, out, n);
  } else {
    st_bf16_to_f32_n(src, out, n);
  }
  return out;
}

/* Find a tensor under any of the names (first match), check dtype and
** shape, and return it as F32.  what: how the expected shape follows from
** config.json, for the message. */
static const float *get_tensor(loader *L, const char *const *names, int n_names, int ndim,
                               int64_t d0, int64_t d1, const char *what, int optional,
                               const char *hint) {
  const st_tensor *t = NULL;
  for (int i = 0; i < n_names && !t; i++) t = st_find(&L->st, names[i]);
  if (!t) {
    if (optional) return NULL;
    char also[300] = "";
    size_t o = 0;
    for (int i = 1; i < n_names && o < sizeof also; i++)
      o += (size_t)snprintf(also + o, sizeof also - o, "%s'%s'", i > 1 ? ", " : "", names[i]);
    bf_errf(L->err, L->errlen, "%s: missing tensor '%s'%s%s%s%s", L->st.path, names[0],
            n_names > 1 ? " (also tried " : "", also, n_names > 1 ? ")" : "", hint ? hint : "");
    return NULL;
  }
  if (t->dtype != ST_F32 && t->dtype != ST_F16 && t->dtype != ST_BF16) {
    bf_errf(L->err, L->errlen,
            "%s: unsupported dtype %s for tensor '%s' (supported: F32, F16, BF16)", L->st.path,
            t->dtype_name, t->name);
    return NULL;
  }
  int64_t want[2] = {d0, d1};
  if (t->ndim != ndim || t->shape[0] != d0 || (ndim == 2 && t->shape[1] != d1)) {
    char has[128], exp[64];
    bf_errf(L->err, L->errlen, "%s: tensor '%s' has shape %s, expected %s = %s in config.json",
            L->st.path, t->name, st_shape_str(t->shape, t->ndim, has, sizeof has),
            st_shape_str(want, ndim, exp, sizeof exp), what);
    return NULL;
  }
  return as_f32(L, t);
}

/* A tensor of the encoder ("bert." prefix optional). */
static const float *bert_tensor(loader *L, const char *name, int ndim, int64_t d0, int64_t d1,
                                const char *what) {
  char a[256], b[256];
  snprintf(a, sizeof a, "bert.%s", name);
  snprintf(b, sizeof b, "%s", name);
  const char *names[2] = {a, b};
  return get_tensor(L, names, 2, ndim, d0, d1, what, 0, NULL);
}

/* LayerNorm weight (gamma) or bias (beta) of base, prefix optional when
** bert is set. */
static const float *ln_tensor(loader *L, const char *base, int is_bias, int bert, int64_t H) {
  char n[4][256];
  const char *modern = is_bias ? "bias" : "weight", *legacy = is_bias ? "beta" : "gamma";
  int k = 0;
  if (bert) {
    snprintf(n[k++], 256, "bert.%s.%s", base, modern);
    snprintf(n[k++], 256, "%s.%s", base, modern);
    snprintf(n[k++], 256, "bert.%s.%s", base, legacy);
    snprintf(n[k++], 256, "%s.%s", base, legacy);
  } else {
    snprintf(n[k++], 256, "%s.%s", base, modern);
    snprintf(n[k++], 256, "%s.%s", base, legacy);
  }
  const char *names[4] = {n[0], n[1], n[2], n[3]};
  return get_tensor(L, names, k, 1, H, 0, "[hidden_size]", 0, NULL);
}

static const char *NO_HEAD_HINT = "; is this a BertModel checkpoint without the masked-LM head? "
                                  "bertfill needs "
                                  "BertForMaskedLM weights (cls.predictions.*)";

/* Step 6: every tensor the forward pass uses, found, checked against
** config.json and placed as F32 (see the top of this file). */
static int load_tensors(loader *L) {
  bf_model *m = L->m;
  const bf_config *c = &m->cfg;
  int64_t V = c->vocab_size, H = c->hidden_size, I = c->intermediate_size;
  int64_t P = c->max_position_embeddings, T = c->type_vocab_size;

  if (!(m->word_emb = bert_tensor(L, "embeddings.word_embeddings.weight", 2, V, H,
                                  "[vocab_size, hidden_size]")) ||
      !(m->pos_emb = bert_tensor(L, "embeddings.position_embeddings.weight", 2, P, H,
                                 "[max_position_embeddings, hidden_size]")) ||
      !(m->type_emb = bert_tensor(L, "embeddings.token_type_embeddings.weight", 2, T, H,
                                  "[type_vocab_size, hidden_size]")) ||
      !(m->emb_ln_g = ln_tensor(L, "embeddings.LayerNorm", 0, 1, H)) ||
      !(m->emb_ln_b = ln_tensor(L, "embeddings.LayerNorm", 1, 1, H)))
    return -1;

  m->layers = calloc((size_t)c->num_hidden_layers, sizeof *m->layers);
  if (!m->layers) {
    bf_errf(L->err, L->errlen, "out of memory");
    return -1;
  }
  for (int l = 0; l < c->num_hidden_layers; l++) {
    bf_layer *y = &m->layers[l];
    char p[128], nm[192];
#define LIN(field_w, field_b, sub, o, i, what_w, what_b) \
  snprintf(nm, sizeof nm, "%s%s.weight", p, sub); \
  if (!(y->field_w = bert_tensor(L, nm, 2, o, i, what_w))) return -1; \
  snprintf(nm, sizeof nm, "%s%s.bias", p, sub); \
  if (!(y->field_b = bert_tensor(L, nm, 1, o, 0, what_b))) return -1;
    snprintf(p, sizeof p, "encoder.layer.%d.", l);
    LIN(q_w, q_b, "attention.self.query", H, H, "[hidden_size, hidden_size]", "[hidden_size]")
    LIN(k_w, k_b, "attention.self.key", H, H, "[hidden_size, hidden_size]", "[hidden_size]")
    LIN(v_w, v_b, "attention.self.value", H, H, "[hidden_size, hidden_size]", "[hidden_size]")
    LIN(ao_w, ao_b, "attention.output.dense", H, H, "[hidden_size, hidden_size]", "[hidden_size]")
    LIN(i_w, i_b, "intermediate.dense", I, H, "[intermediate_size, hidden_size]",
        "[intermediate_size]")
    LIN(o_w, o_b, "output.dense", H, I, "[hidden_size, intermediate_size]", "[hidden_size]")
#undef LIN
    snprintf(nm, sizeof nm, "%sattention.output.LayerNorm", p);
    if (!(y->aln_g = ln_tensor(L, nm, 0, 1, H)) || !(y->aln_b = ln_tensor(L, nm, 1, 1, H)))
      return -1;
    snprintf(nm, sizeof nm, "%soutput.LayerNorm", p);
    if (!(y->oln_g = ln_tensor(L, nm, 0, 1, H)) || !(y->oln_b = ln_tensor(L, nm, 1, 1, H)))
      return -1;
  }

  /* an extra layer beyond num_hidden_layers means config and weights disagree */
  char extra[96];
  snprintf(extra, sizeof extra, "encoder.layer.%d.attention.self.query.weight",
           c->num_hidden_layers);
  char extra_b[112];
  snprintf(extra_b, sizeof extra_b, "bert.%s", extra);
  if (st_find(&L->st, extra) || st_find(&L->st, extra_b)) {
    bf_errf(L->err, L->errlen,
            "%s: has weights for encoder layer %d but config.json says "
            "num_hidden_layers is %d",
            L->st.path, c->num_hidden_layers, c->num_hidden_layers);
    return -1;
  }

  /* MLM head */
  const char *dw[] = {"cls.predictions.transform.dense.weight"};
  const char *db[] = {"cls.predictions.transform.dense.bias"};
  if (!(m->head_w = get_tensor(L, dw, 1, 2, H, H, "[hidden_size, hidden_size]", 0, NO_HEAD_HINT)) ||
      !(m->head_b = get_tensor(L, db, 1, 1, H, 0, "[hidden_size]", 0, NO_HEAD_HINT)))
    return -1;
  if (!(m->head_ln_g = ln_tensor(L, "cls.predictions.transform.LayerNorm", 0, 0, H)) ||
      !(m->head_ln_b = ln_tensor(L, "cls.predictions.transform.LayerNorm", 1, 0, H)))
    return -1;
  const char *decw[] = {"cls.predictions.decoder.weight"};
  m->dec_w = get_tensor(L, decw, 1, 2, V, H, "[vocab_size, hidden_size]", 1, NULL);
  if (!m->dec_w) {
    if (st_find(&L->st, decw[0])) return -1; /* present but bad: error set */
    m->dec_w = m->word_emb;                  /* tied */
  }
  const char *bias[] = {"cls.predictions.bias", "cls.predictions.decoder.bias"};
  if (!(m->dec_b = get_tensor(L, bias, 2, 1, V, 0, "[vocab_size]", 0, NO_HEAD_HINT))) return -1;
  return 0;
}

/* ---- the steps of a load ---- */

/* Step 1: dir is an existing directory. */
static int check_dir(const char *dir, char *err, size_t errlen) {
  struct stat st;
  if (!dir || !*dir) {
    bf_errf(err, errlen, "no model directory given");
    return -1;
  }
  if (stat(dir, &st) != 0) {
    bf_errf(err, errlen, "%s: model directory not found (%s)", dir, strerror(errno));
    return -1;
  }
  if (!S_ISDIR(st.st_mode)) {
    bf_errf(err, errlen,
            "%s: not a directory (give the model directory holding config.json, "
            "vocab.txt and model.safetensors)",
            dir);
    return -1;
  }
  return 0;
}

/* Step 3: config.json into m->cfg (and into the fingerprint). */
static int load_config(bf_model *m, const char *dir, char *err, size_t errlen) {
  char *path = bf_path_join(dir, "config.json");
  if (!path) {
    bf_errf(err, errlen, "out of memory");
    return -1;
  }
  unsigned char *text = NULL;
  size_t len = 0;
  int rc = read_small_file(path, &text, &len, err, errlen);
  if (rc == 0)
    bf_errf(err, errlen,
            "%s: missing (a Hugging Face model directory needs config.json, "
            "vocab.txt and model.safetensors)",
            path);
  if (rc <= 0) {
    free(path);
    return -1;
  }
  m->fp_files = bf_fp_hash(text, len, 1);
  json_value *cfg = json_parse_file_text(path, (const char *)text, len, err, errlen);
  free(text);
  if (!cfg) {
    free(path);
    return -1;
  }
  rc = config_from_json(cfg, path, &m->cfg, err, errlen);
  json_free(cfg);
  free(path);
  return rc;
}

/* Step 4: the tokenizer (tokenizer.c), whose vocabulary must have
** vocab_size entries; its files go into the fingerprint. */
static int load_tokenizer(bf_model *m, const char *dir, char *err, size_t errlen) {
  m->tok = bf_tokenizer_load(dir, err, errlen);
  if (!m->tok) return -1;
  static const char *tok_files[] = {"vocab.txt", "tokenizer_config.json", "tokenizer.json"};
  for (int i = 0; i < 3; i++) {
    char *p = bf_path_join(dir, tok_files[i]);
    if (!p) {
      bf_errf(err, errlen, "out of memory");
      return -1;
    }
    unsigned char *text = NULL;
    size_t len = 0;
    int rc = read_small_file(p, &text, &len, err, errlen);
    free(p);
    if (rc < 0) return -1;
    m->fp_files = bf_fp_hash((const unsigned char *)&m->fp_files, 8,
                             (uint64_t)(i + 2) * 2 + (rc > 0));
    if (rc > 0) m->fp_files = bf_fp_hash(text, len, m->fp_files);
    free(text);
  }
  int tv = bf_tokenizer_vocab_size(m->tok);
  if (tv != m->cfg.vocab_size) {
    char *vp = bf_path_join(dir, "vocab.txt");
    bf_errf(err, errlen, "%s has %d tokens but config.json says vocab_size is %d",
            vp ? vp : "vocab.txt", tv, m->cfg.vocab_size);
    free(vp);
    return -1;
  }
  return 0;
}

/* Step 5: map model.safetensors and read its header into L->st; the model
** owns the mapping and its descriptor from here on.  A missing file gets a
** message saying what to do about the files that are there instead. */
static int map_weights(loader *L, const char *dir) {
  bf_model *m = L->m;
  char *err = L->err;
  size_t errlen = L->errlen;
  char *path = bf_path_join(dir, "model.safetensors");
  int have = path ? file_exists(dir, "model.safetensors") : -1;
  if (have < 0) {
    free(path);
    bf_errf(err, errlen, "out of memory");
    return -1;
  }
  if (!have) {
    if (file_exists(dir, "model.safetensors.index.json") > 0)
      bf_errf(err, errlen,
              "%s: missing; the model is split into several safetensors files "
              "(model.safetensors.index.json), which bertfill does not read: merge them into one "
              "model.safetensors",
              path);
    else if (file_exists(dir, "pytorch_model.bin") > 0)
      bf_errf(err, errlen,
              "%s: missing; pytorch_model.bin is not supported (it is a pickle): convert it with "
              "bertfill's model/convert_bin.py (python3 and numpy; torch is not needed):  "
              "python3 model/convert_bin.py %s",
              path, dir);
    else bf_errf(err, errlen, "%s: missing (the weights must be in safetensors format)", path);
    free(path);
    return -1;
  }
  int rc = st_open(&L->st, path, err, errlen);
  free(path);
  if (rc != 0) return -1;
  m->map = L->st.map;
  m->map_len = L->st.map_len;
  m->map_fd = L->st.fd;
  m->map_mtime_ns = L->st.mtime_ns;
  bf_fp_read_file(m);
  return 0;
}

/* Step 7: the display strings, which point into the tokenizer's vocabulary:
** each entry with a leading "##" removed. */
static int make_display_strings(bf_model *m, char *err, size_t errlen) {
  m->display = malloc((size_t)m->cfg.vocab_size * sizeof *m->display);
  if (!m->display) {
    bf_errf(err, errlen, "out of memory");
    return -1;
  }
  for (int i = 0; i < m->cfg.vocab_size; i++) {
    const char *s = bf_tokenizer_token(m->tok, i);
    if (!s) s = "";
    if (s[0] == '#' && s[1] == '#' && s[2]) s += 2;
    m->display[i] = (char *)s;
  }
  return 0;
}

/* A bf16 load where the bf16 products run the portable loop (no AVX512-BF16,
** or BERTFILL_KERNELS below avx512): it works, with the same results, but
** far slower than fp32 (bert-base: ~50x); said once per process on stderr. */
static void warn_portable_bf16(void) {
  static atomic_int said;
  if (kernels_bf16_chosen() != &bf16_portable || atomic_exchange(&said, 1)) return;
  fprintf(stderr,
          "bertfill: bf16 runs a portable loop here (%s), far slower than fp32 (for "
          "bert-base ~50x): use fp32 or int8 on this machine\n",
          kernels_bf16_supported() ? "BERTFILL_KERNELS leaves out the AVX-512 kernels"
                                   : "this CPU has no AVX512-BF16");
}

bf_model *bf_model_load(const char *dir, char *err, size_t errlen) {
  return bf_model_load_as(dir, BF_PRECISION_FP32, err, errlen);
}

bf_model *bf_model_load_as(const char *dir, bf_precision precision, char *err, size_t errlen) {
  if (err && errlen) err[0] = 0;
  if (precision != BF_PRECISION_FP32 && precision != BF_PRECISION_INT8 &&
      precision != BF_PRECISION_BF16) {
    bf_errf(err, errlen, "unknown precision %d", (int)precision);
    return NULL;
  }
  uint64_t t0 = bf_now_ns();
  if (check_dir(dir, err, errlen) != 0) return NULL;
  if (bf_blas_init(err, errlen) != BF_OK) return NULL;
  bf_model *m = bf_model_new(dir); /* step 2: an empty model (model.c) */
  if (!m) {
    bf_errf(err, errlen, "out of memory");
    return NULL;
  }
  loader L = {.m = m, .err = err, .errlen = errlen};
  L.st.fd = -1;
  if (load_config(m, dir, err, errlen) != 0 || load_tokenizer(m, dir, err, errlen) != 0 ||
      map_weights(&L, dir) != 0 || load_tensors(&L) != 0 ||
      make_display_strings(m, err, errlen) != 0 ||
      (precision == BF_PRECISION_INT8 && bf_quantized_attach(m, err, errlen) != 0) ||
      (precision == BF_PRECISION_BF16 && bf_bf16_attach(m, err, errlen) != 0)) {
    if (L.st.map == m->map) {
      m->map = NULL;
      m->map_fd = -1;
    } /* st_close unmaps and closes */
    st_close(&L.st);
    bf_model_free(m);
    return NULL;
  }
  snprintf(m->dtype, sizeof m->dtype, "%s", L.mixed ? "mixed" : L.dtype0);
  m->precision = precision;
  if (precision == BF_PRECISION_BF16) warn_portable_bf16();
  if (precision == BF_PRECISION_FP32) bf_packed_attach(m);
  /* the header table is no longer needed; keep only the mapping */
  L.st.map = NULL;
  L.st.fd = -1;
  st_close(&L.st);
  bf_model_warm_up(m, t0);
  return m;
}
