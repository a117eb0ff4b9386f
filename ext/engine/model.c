/*
** model.c — load a Hugging Face BERT masked-LM directory into a bf_model.
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
** The fingerprint (bf_model_fingerprint) hashes config.json, vocab.txt,
** tokenizer_config.json and tokenizer.json (as read at load; absent files
** count as absent) and every byte of model.safetensors, with a 4-lane
** multiply-rotate hash in which changing any single 8-byte word always
** changes the result, and the precision of the load.  The weights' part is
** kept in dir/model.fingerprint for the next loads of the same file (see
** "the fingerprint file").  It is computed on first request, or earlier by
** the warm-up that each load starts (start_warm_up: it also brings the
** weights into the page tables, so that the first call after loading runs
** about as fast as the next ones).
*/
#include "model.h"
#include "blas.h"
#include "json.h"
#include "safetensors.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
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

/* What identifies a file's contents without reading them: device, inode,
** size, modification and change times (ns). */
typedef struct file_id {
  unsigned long long dev, ino, size;
  long long mtime_ns, ctime_ns;
} file_id;

static int get_file_id(int fd, file_id *id) {
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) return -1;
  *id = (file_id){(unsigned long long)st.st_dev, (unsigned long long)st.st_ino,
                  (unsigned long long)st.st_size,
                  (long long)st.st_mtim.tv_sec * 1000000000ll + st.st_mtim.tv_nsec,
                  (long long)st.st_ctim.tv_sec * 1000000000ll + st.st_ctim.tv_nsec};
  return 0;
}

static int same_id(const file_id *a, const file_id *b) {
  return a->dev == b->dev && a->ino == b->ino && a->size == b->size && a->mtime_ns == b->mtime_ns &&
         a->ctime_ns == b->ctime_ns;
}

/* Read a whole small file.  1: read, 0: does not exist, -1: error (err set). */
static int read_small_file(const char *path, unsigned char **out, size_t *len, char *err,
                           size_t errlen) {
  int rc = json_read_file(path, out, len, err, errlen);
  if (rc == 0 && err && errlen) err[0] = 0; /* absent: the caller decides */
  return rc;
}

/* ---- fingerprint hash ---- */

#define P1 0x9E3779B97F4A7C15ull
#define P2 0xC2B2AE3D27D4EB4Full
#define P3 0x165667B19E3779F9ull
#define P4 0x85EBCA77C2B2AE63ull

static inline uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static inline uint64_t rd64(const unsigned char *p) {
  uint64_t w;
  memcpy(&w, p, 8);
  return w;
}
/* each step is a bijection of the lane for a fixed word and of the word
** for a fixed lane, so one changed word always changes the lane */
static inline uint64_t step(uint64_t lane, uint64_t w) { return rotl64(lane ^ (w * P1), 31) * P2; }
static inline uint64_t fmix64(uint64_t k) { /* bijective finaliser (MurmurHash3) */
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ull;
  k ^= k >> 33;
  return k;
}

static uint64_t fp_hash(const unsigned char *p, size_t n, uint64_t seed) {
  uint64_t a = seed ^ P3, b = seed + P4, c = seed ^ P2, d = seed - P1;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a = step(a, rd64(p + i));
    b = step(b, rd64(p + i + 8));
    c = step(c, rd64(p + i + 16));
    d = step(d, rd64(p + i + 24));
  }
  for (; i + 8 <= n; i += 8) a = step(a, rd64(p + i));
  if (i < n) {
    unsigned char last[8] = {0};
    memcpy(last, p + i, n - i);
    b = step(b, rd64(last));
  }
  uint64_t h = fmix64(a);
  h = fmix64(h ^ b);
  h = fmix64(h ^ c);
  h = fmix64(h ^ d);
  return fmix64(h ^ (uint64_t)n);
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

/* ---- load / release ---- */

static void start_warm_up(bf_model *m, uint64_t t0);
static void read_fp_file(bf_model *m);

static void model_free(bf_model *m) {
  if (!m) return;
  if (m->tok) bf_tokenizer_free(m->tok);
  free(m->display);
  for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
  free(m->owned);
  free(m->layers);
  bf_quantized_detach(m);
  if (m->map) {
    munmap(m->map, m->map_len);
    if (m->map_fd >= 0) close(m->map_fd);
  }
  pthread_mutex_destroy(&m->fp_mu);
  free(m->dir);
  free(m);
}

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

/* Step 2: an empty model of dir, reference count 1; NULL when out of memory. */
static bf_model *model_new(const char *dir) {
  bf_model *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  pthread_mutex_init(&m->fp_mu, NULL);
  m->int8_source = "";
  m->map8_fd = -1;
  atomic_init(&m->refcount, 1);
  m->dir = strdup(dir);
  if (!m->dir) {
    model_free(m);
    return NULL;
  }
  return m;
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
  m->fp_files = fp_hash(text, len, 1);
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
    m->fp_files = fp_hash((const unsigned char *)&m->fp_files, 8, (uint64_t)(i + 2) * 2 + (rc > 0));
    if (rc > 0) m->fp_files = fp_hash(text, len, m->fp_files);
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
              "%s: missing; pytorch_model.bin is not supported (it is a pickle): "
              "convert it with  python3 -c \"import torch; "
              "from safetensors.torch import save_file; "
              "sd = torch.load('pytorch_model.bin', map_location='cpu'); "
              "save_file({k: v.contiguous() for k, v in sd.items()}, 'model.safetensors', "
              "metadata={'format': 'pt'})\"",
              path);
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
  read_fp_file(m);
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

int bf_precision_parse(const char *name, bf_precision *out) {
  if (name && strcasecmp(name, "fp32") == 0) *out = BF_PRECISION_FP32;
  else if (name && strcasecmp(name, "int8") == 0) *out = BF_PRECISION_INT8;
  else return -1;
  return 0;
}

const char *bf_precision_name(bf_precision p) { return p == BF_PRECISION_INT8 ? "int8" : "fp32"; }

bf_model *bf_model_load(const char *dir, char *err, size_t errlen) {
  return bf_model_load_as(dir, BF_PRECISION_FP32, err, errlen);
}

bf_model *bf_model_load_as(const char *dir, bf_precision precision, char *err, size_t errlen) {
  if (err && errlen) err[0] = 0;
  if (precision != BF_PRECISION_FP32 && precision != BF_PRECISION_INT8) {
    bf_errf(err, errlen, "unknown precision %d", (int)precision);
    return NULL;
  }
  uint64_t t0 = bf_now_ns();
  if (check_dir(dir, err, errlen) != 0) return NULL;
  if (bf_blas_init(err, errlen) != BF_OK) return NULL;
  bf_model *m = model_new(dir);
  if (!m) {
    bf_errf(err, errlen, "out of memory");
    return NULL;
  }
  loader L = {.m = m, .err = err, .errlen = errlen};
  L.st.fd = -1;
  if (load_config(m, dir, err, errlen) != 0 || load_tokenizer(m, dir, err, errlen) != 0 ||
      map_weights(&L, dir) != 0 || load_tensors(&L) != 0 ||
      make_display_strings(m, err, errlen) != 0 ||
      (precision == BF_PRECISION_INT8 && bf_quantized_attach(m, err, errlen) != 0)) {
    if (L.st.map == m->map) {
      m->map = NULL;
      m->map_fd = -1;
    } /* st_close unmaps and closes */
    st_close(&L.st);
    model_free(m);
    return NULL;
  }
  snprintf(m->dtype, sizeof m->dtype, "%s", L.mixed ? "mixed" : L.dtype0);
  m->precision = precision;
  /* the header table is no longer needed; keep only the mapping */
  L.st.map = NULL;
  L.st.fd = -1;
  st_close(&L.st);
  start_warm_up(m, t0);
  return m;
}

void bf_model_retain(bf_model *m) {
  if (m) atomic_fetch_add_explicit(&m->refcount, 1, memory_order_relaxed);
}

void bf_model_release(bf_model *m) {
  if (!m) return;
  if (atomic_fetch_sub_explicit(&m->refcount, 1, memory_order_acq_rel) == 1) model_free(m);
}

const bf_config *bf_model_config(const bf_model *m) { return &m->cfg; }
const bf_tokenizer *bf_model_tokenizer(const bf_model *m) { return m->tok; }
const char *bf_model_dir(const bf_model *m) { return m->dir; }
const char *bf_model_dtype(const bf_model *m) { return m->dtype; }
bf_precision bf_model_precision(const bf_model *m) { return m->precision; }
const char *bf_model_int8_source(const bf_model *m) { return m->int8_source; }

const char *bf_model_token(const bf_model *m, int32_t id) {
  if (!m || id < 0 || id >= m->cfg.vocab_size) return NULL;
  return m->display[id];
}

/* One mapped file against what it was when mapped: BF_OK, or BF_ERR_MODEL
** with err saying how it changed. */
static int check_file(const bf_model *m, int fd, size_t len, int64_t mtime_then, const char *name,
                      char *err, size_t errlen) {
  file_id now;
  if (get_file_id(fd, &now) != 0) return BF_OK; /* cannot tell: keep going */
  if ((size_t)now.size == len && now.mtime_ns == mtime_then) return BF_OK;
  if ((size_t)now.size != len)
    bf_errf(err, errlen,
            "%s/%s changed on disk after it was loaded (%zu bytes then, %lld now): "
            "the model must be loaded again (replace model files with a new file and rename, "
            "never in place)",
            m->dir, name, len, (long long)now.size);
  else
    bf_errf(err, errlen,
            "%s/%s was rewritten in place after it was loaded: the model must be "
            "loaded again (replace model files with a new file and rename, never in place)",
            m->dir, name);
  return BF_ERR_MODEL;
}

int bf_model_check(const bf_model *m, char *err, size_t errlen) {
  if (!m || !m->map) return BF_OK;
  int rc = check_file(m, m->map_fd, m->map_len, m->map_mtime_ns, "model.safetensors", err, errlen);
  if (rc == BF_OK && m->map8)
    rc = check_file(m, m->map8_fd, m->map8_len, m->map8_mtime_ns, "model.int8.safetensors", err,
                    errlen);
  return rc;
}

int bf_model_is_current(const bf_model *m) {
  struct stat now, then;
  if (!m || !m->map || m->map_fd < 0 || fstat(m->map_fd, &then) != 0) return 1;
  char *p = bf_path_join(m->dir, "model.safetensors");
  int same = p && stat(p, &now) == 0 && now.st_dev == then.st_dev && now.st_ino == then.st_ino;
  free(p);
  return same && bf_model_check(m, NULL, 0) == BF_OK;
}

/* The hash of model.safetensors into *out, read with pread() through the
** descriptor kept since loading (the very file that was mapped): reading
** does not map the pages into this process, so hashing a file whose
** products run from its int8 copy costs no resident memory.  Never reads
** the mapping: a file that shrank would raise SIGBUS there.  0, or -1 when
** the file changed since loading (bf_model_check says how), when a read
** fails or comes back short, or when out of memory. */
static int hash_weights(const bf_model *m, uint64_t *out) {
  enum { CHUNK = 1 << 20 };
  if (m->map_fd < 0 || bf_model_check(m, NULL, 0) != BF_OK) return -1;
  unsigned char *b = malloc(CHUNK);
  if (!b) return -1;
  /* fp_hash over the whole file in one go equals this streamed form only
  ** if the chunking is part of the definition: so hash the chunk hashes */
  uint64_t h = 0;
  int rc = 0;
  for (size_t off = 0; off < m->map_len && rc == 0; off += CHUNK) {
    size_t n = m->map_len - off < CHUNK ? m->map_len - off : CHUNK, got = 0;
    while (got < n) {
      ssize_t r = pread(m->map_fd, b + got, n - got, (off_t)(off + got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      got += (size_t)r;
    }
    if (got != n) rc = -1; /* the file shrank while it was read */
    else h = fp_hash(b, n, h);
  }
  free(b);
  *out = fmix64(h ^ (uint64_t)m->map_len);
  return rc;
}

/* ---- the fingerprint file ----
**
** Hashing every byte of a 400 MB model takes 50-100 ms, and with the cache
** on the first call after each load needed it.  So the weights' hash is
** kept next to them, in dir/model.fingerprint (one line of text), with what
** identifies the very file it was computed from: device, inode, size,
** modification and change times (ns).  A load takes the hash from there
** only when all five match the model.safetensors it mapped.  The change
** time is set by the kernel on every write, rename or copy over the file
** (no tool sets it back), so a file with other bytes never matches; and a
** file changed less than FP_FILE_SETTLE_NS ago gets no fingerprint file (a
** change within the same clock tick could keep its times: git's "racy"
** index entries have the same cure).  Written like model.int8.safetensors
** (a temporary file renamed into place); a directory that cannot be written
** simply has none, and each load hashes. */
#define FP_FILE "model.fingerprint"
#define FP_FILE_FORMAT 1
#define FP_FILE_SETTLE_NS 2000000000ll

static int format_fp_line(char *buf, size_t n, const file_id *id, uint64_t h) {
  return snprintf(buf, n, "bertfill-fingerprint %d %llu %llu %llu %lld %lld %016llx\n",
                  FP_FILE_FORMAT, id->dev, id->ino, id->size, id->mtime_ns, id->ctime_ns,
                  (unsigned long long)h);
}

/* At load: the weights' hash from dir/model.fingerprint when it was made
** from the mapped file (m->weights_known = 1), else nothing. */
static void read_fp_file(bf_model *m) {
  file_id id;
  if (get_file_id(m->map_fd, &id) != 0) return;
  char *path = bf_path_join(m->dir, FP_FILE);
  int fd = path ? bf_open_regular(path, O_RDONLY, 0, NULL) : -1;
  FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
  free(path);
  if (!f) {
    if (fd >= 0) close(fd);
    return;
  }
  char line[256], want[256];
  int ok = fgets(line, sizeof line, f) != NULL;
  fclose(f);
  unsigned long long h = 0;
  int version = 0;
  if (!ok ||
      sscanf(line, "bertfill-fingerprint %d %*u %*u %*u %*d %*d %16llx", &version, &h) != 2 ||
      version != FP_FILE_FORMAT)
    return;
  format_fp_line(want, sizeof want, &id, h);
  if (strcmp(line, want) != 0) return; /* made from another file (or another version of it) */
  m->weights_hash = h;
  m->weights_known = 1;
}

/* After hashing: keep the hash in dir/model.fingerprint when the file did
** not change while it was hashed (before and after are its identity then)
** and had settled before.  Failures (a read-only directory) are silent. */
static void write_fp_file(const bf_model *m, const file_id *before, uint64_t h) {
  file_id after;
  if (get_file_id(m->map_fd, &after) != 0 || !same_id(before, &after)) return;
  long long now = (long long)bf_wall_ns();
  if (now - before->ctime_ns < FP_FILE_SETTLE_NS || now - before->mtime_ns < FP_FILE_SETTLE_NS)
    return;
  char *path = bf_path_join(m->dir, FP_FILE);
  char line[256];
  const void *part[1] = {line};
  size_t len[1] = {(size_t)format_fp_line(line, sizeof line, before, h)};
  if (path) (void)bf_write_file_replace(path, 1, part, len);
  free(path);
}

/* Computed outside the lock by whoever asks first: a caller never waits for
** the warm-up thread, which runs at the lowest priority (two may hash at
** once; both get the same value and the first one stored stays). */
const char *bf_model_fingerprint(bf_model *m) {
  pthread_mutex_lock(&m->fp_mu);
  int known = m->fingerprint[0] != 0, have_weights = m->weights_known;
  uint64_t w = m->weights_hash;
  pthread_mutex_unlock(&m->fp_mu);
  if (known) return m->fingerprint;
  const char *source = FP_FILE;
  if (!have_weights) {
    file_id before;
    int have_id = get_file_id(m->map_fd, &before) == 0;
    if (hash_weights(m, &w) != 0) return NULL; /* changed on disk: nothing to key on */
    if (have_id) write_fp_file(m, &before, w);
    source = "hashed";
  }
  /* the precision is part of it: int8 answers are not fp32 answers */
  uint64_t h = fmix64(w ^ fmix64(m->fp_files ^ (uint64_t)m->precision * P3));
  char fp[sizeof m->fingerprint];
  snprintf(fp, sizeof fp, "%016llx", (unsigned long long)h);
  pthread_mutex_lock(&m->fp_mu);
  if (!m->fingerprint[0]) {
    memcpy(m->fingerprint, fp, sizeof fp);
    m->weights_hash = w;
    m->weights_known = 1;
    m->fp_source = source;
  }
  pthread_mutex_unlock(&m->fp_mu);
  return m->fingerprint;
}

/* ---- warming up after load ---- */

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif

/* Bring the pages of a mapping into this process's page tables (they are in
** the page cache once any process has read the file): MADV_POPULATE_READ.
** Only a kernel that does not know it (EINVAL: before Linux 5.14) gets one
** read per page instead; any other failure (EFAULT: the file was truncated
** since loading) stops here, where reading would raise SIGBUS. */
static void populate(const bf_model *m, const void *p, size_t len) {
  if (!p || !len) return;
  if (madvise((void *)p, len, MADV_POPULATE_READ) == 0 || errno != EINVAL) return;
  if (bf_model_check(m, NULL, 0) != BF_OK) return; /* changed on disk: leave it */
  const volatile unsigned char *c = p;
  long page = sysconf(_SC_PAGESIZE);
  for (size_t i = 0; i < len; i += (size_t)(page > 0 ? page : 4096)) (void)c[i];
}

/* The warm-up: the weights the products use come into the page tables (an
** fp32 model's whole file; an int8 model's int8 file, its fp32 file holding
** only embeddings, LayerNorms and biases that the first calls bring in),
** then the fingerprint is computed, so that the first call after bert_load
** pays for neither.
**
** The pages come in WARM_CHUNK at a time from several threads (one per core,
** at most WARM_THREADS: measured on 2 cores, 409 MB in 31-34 ms with 2
** threads, 38-64 ms with one), and the load waits for them, but at most
** until WARM_WAIT_NS after the load began: a call right after loading then
** finds its pages mapped.  What is left after that, and the fingerprint,
** go on in the background at the lowest priority (nice 19), so that they do
** not take the cores from the first calls.  The threads are detached (a
** process that exits at once does not wait for them) and hold a reference
** to the model. */
#define WARM_CHUNK (4u << 20)
#define WARM_THREADS 4
#define WARM_WAIT_NS 40000000ull

typedef struct warm_job {
  bf_model *m;
  const char *p;
  size_t len;
  atomic_size_t next;  /* next chunk to populate */
  atomic_int left;     /* threads still populating */
  atomic_int detached; /* the load stopped waiting: lower the priority */
  atomic_int refs;     /* threads and the load holding the job */
  pthread_mutex_t mu;
  pthread_cond_t done; /* signalled when left reaches 0 */
} warm_job;

static void warm_job_release(warm_job *w) {
  if (atomic_fetch_sub(&w->refs, 1) != 1) return;
  bf_model_release(w->m);
  pthread_mutex_destroy(&w->mu);
  pthread_cond_destroy(&w->done);
  free(w);
}

/* This thread to nice 19 (Linux: the priority of one thread). */
static void lower_priority(void) { (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19); }

static void *warm_up(void *arg) {
  warm_job *w = arg;
  int lowered = 0;
  for (;;) {
    if (!lowered && atomic_load(&w->detached)) {
      lower_priority();
      lowered = 1;
    }
    size_t off = atomic_fetch_add(&w->next, WARM_CHUNK);
    if (off >= w->len) break;
    populate(w->m, w->p + off, w->len - off < WARM_CHUNK ? w->len - off : WARM_CHUNK);
  }
  pthread_mutex_lock(&w->mu);
  int last = atomic_fetch_sub(&w->left, 1) == 1;
  if (last) pthread_cond_broadcast(&w->done);
  pthread_mutex_unlock(&w->mu);
  if (last) { /* the fingerprint, in the background */
    if (!lowered) lower_priority();
    bf_model_fingerprint(w->m);
  }
  warm_job_release(w);
  return NULL;
}

/* Start the warm-up threads and wait for the pages until WARM_WAIT_NS after
** t0 (when the load began).  BERTFILL_WARM_UP=0 turns it off. */
static void start_warm_up(bf_model *m, uint64_t t0) {
  if (!bf_env_flag("BERTFILL_WARM_UP", 1)) return;
  warm_job *w = calloc(1, sizeof *w);
  if (!w) return;
  int int8 = m->precision == BF_PRECISION_INT8;
  w->m = m;
  w->p = int8 ? m->map8 : m->map;
  w->len = int8 ? m->map8_len : m->map_len;
  if (!w->p) w->len = 0;
  pthread_mutex_init(&w->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&w->done, &ca);
  pthread_condattr_destroy(&ca);
  int n = bf_ncores();
  n = n < 1 ? 1 : n > WARM_THREADS ? WARM_THREADS : n;
  bf_model_retain(m);
  atomic_init(&w->refs, 1); /* the load's */
  pthread_attr_t a;
  int started = 0;
  if (pthread_attr_init(&a) == 0) {
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    for (int i = 0; i < n; i++) {
      pthread_t t;
      atomic_fetch_add(&w->refs, 1);
      atomic_fetch_add(&w->left, 1);
      if (pthread_create(&t, &a, warm_up, w) != 0) {
        atomic_fetch_sub(&w->left, 1);
        atomic_fetch_sub(&w->refs, 1);
        break;
      }
      started++;
    }
    pthread_attr_destroy(&a);
  }
  if (started) {
    uint64_t end = t0 + WARM_WAIT_NS;
    struct timespec ts = {(time_t)(end / 1000000000ull), (long)(end % 1000000000ull)};
    pthread_mutex_lock(&w->mu);
    while (atomic_load(&w->left) > 0)
      if (pthread_cond_timedwait(&w->done, &w->mu, &ts) != 0) break; /* timed out */
    atomic_store(&w->detached, 1);
    pthread_mutex_unlock(&w->mu);
  }
  warm_job_release(w);
}
