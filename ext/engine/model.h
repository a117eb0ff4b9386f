/*
** model.h — internal layout of a loaded model (engine-private; the SQLite
** extension uses only bertfill.h).
**
** Every weight pointer is F32, row-major, exactly as PyTorch stores it:
** a Linear's weight is [out_features, in_features], and forward.c computes
** y = x W^T + b with it in place (gemm.c's kernels, or bf_sgemm with W
** transposed on CPUs without AVX-512).
** F32 tensors point into the read-only mmap of model.safetensors; F16/BF16
** tensors (or misaligned F32 ones) are converted into owned buffers.
*/
#ifndef BERTFILL_MODEL_H
#define BERTFILL_MODEL_H

#include <stdatomic.h>
#include <pthread.h>
#include "bertfill.h"
#include "qgemm.h"

/* What identifies a file's contents without reading them: device, inode,
** size, modification and change times (ns).  The change time is set by the
** kernel on every write, rename or copy over the file and no tool sets it
** back, and a copy has another inode: a file with other bytes never has the
** identity another had, except for a change within the same clock tick as
** the one before (see fingerprint.c's settle rule). */
typedef struct bf_file_id {
  unsigned long long dev, ino, size;
  long long mtime_ns, ctime_ns;
} bf_file_id;

typedef struct bf_layer {
  const float *q_w, *q_b;     /* [H,H], [H]  attention.self.query */
  const float *k_w, *k_b;     /* attention.self.key */
  const float *v_w, *v_b;     /* attention.self.value */
  const float *ao_w, *ao_b;   /* [H,H], [H]  attention.output.dense */
  const float *aln_g, *aln_b; /* [H]         attention.output.LayerNorm */
  const float *i_w, *i_b;     /* [I,H], [I]  intermediate.dense */
  const float *o_w, *o_b;     /* [H,I], [H]  output.dense */
  const float *oln_g, *oln_b; /* [H]         output.LayerNorm */
  /* int8 copies of the six matrices (int8 loads only; quantized.c) */
  qg_weights q8, k8, v8, ao8, i8, o8;
  /* the same six as packed fp32 panels (fp32 loads with packed panels;
  ** packed.c, gemm.h's GEMM_PACK), else NULL */
  const float *q_p, *k_p, *v_p, *ao_p, *i_p, *o_p;
  /* the same six as bf16 panels (bf16 loads only; packed.c, gemm.h's
  ** gemm_pack_bf16) */
  const uint32_t *q_h, *k_h, *v_h, *ao_h, *i_h, *o_h;
} bf_layer;

struct bf_model {
  bf_config cfg;
  bf_tokenizer *tok;
  char *dir;
  char dtype[8]; /* "F32", "F16", "BF16" as stored */

  /* embeddings */
  const float *word_emb;            /* [V,H] */
  const float *pos_emb;             /* [P,H] */
  const float *type_emb;            /* [T,H] */
  const float *emb_ln_g, *emb_ln_b; /* [H] */

  bf_layer *layers; /* [num_hidden_layers] */

  /* MLM head: cls.predictions */
  const float *head_w, *head_b;       /* [H,H], [H]  transform.dense */
  const float *head_ln_g, *head_ln_b; /* [H]         transform.LayerNorm */
  const float *dec_w;                 /* [V,H]  decoder.weight (== word_emb when tied) */
  const float *dec_b;                 /* [V]    cls.predictions.bias (or decoder.bias) */
  qg_weights head8, dec8;             /* int8 copies (int8 loads only) */
  const uint32_t *head_h, *dec_h;     /* bf16 panels (bf16 loads only; packed.c) */

  bf_precision precision;
  const char *int8_source; /* "file", "memory" or "" (fp32) */
  void *own8; /* the quantized weights in private memory (int8; dir and cache not writable) */
  /* fp32 loads: the encoder's matrices as packed panels (packed.c), or
  ** "in place" (NULL panels: the kernels read the rows of W); bf16 loads:
  ** their bf16 panels, from the file or in private memory (own_h) */
  const char
    *packed_source; /* "file", "memory" (bf16), or why not: "in place (...)"; "" for int8 */
  void *own_h;      /* bf16 panels in private memory (bf16; dir and cache not writable) */

  /* the file of derived weights (derived.h): model.int8.safetensors of an
  ** int8 load, model.packed.safetensors of an fp32 load,
  ** model.bf16.safetensors of a bf16 load, or none */
  void *dmap;
  size_t dmap_len;
  int dmap_fd;           /* its descriptor (bf_model_check watches it too), or -1 */
  int64_t dmap_mtime_ns; /* its modification time when mapped */
  char *dmap_path;       /* its path: in dir, or in cache_dir */

  /* where the files a load derives (the derived file, model.fingerprint) go
  ** when dir cannot be written (fingerprint.c, bf_model_file): this model's
  ** folder of the per-user cache directory (made when first needed), or
  ** NULL; why it cannot be used, once known (first reason kept: written
  ** once, cache_error_state 0 none, 1 being written, 2 written) */
  char *cache_dir;
  atomic_int cache_error_state;
  char cache_error[384];

  /* display strings: vocab entries with a leading "##" removed */
  char **display; /* [V] */

  /* storage */
  void *map;
  size_t map_len;       /* mmap of model.safetensors */
  int map_fd;           /* its descriptor, kept to notice changes (bf_model_check) */
  int64_t map_mtime_ns; /* its modification time when mapped */
  bf_file_id map_id;    /* its identity when mapped (fingerprint.c) */
  int map_id_settled;   /* 1: it had not changed for FP_FILE_SETTLE_NS then */
  void **owned;
  int n_owned, cap_owned; /* converted tensors, freed at release */

  atomic_int refcount;
  pthread_mutex_t fp_mu;
  char fingerprint[17];       /* "" until computed */
  uint64_t weights_hash;      /* hash of model.safetensors's bytes (weights_known) */
  int weights_known;          /* 1: from dir/model.fingerprint at load, or hashed */
  const char *weights_source; /* "model.fingerprint" or "hashed" (weights_known) */
  const char *fp_source;      /* "model.fingerprint" or "hashed" once computed */
  uint64_t fp_files;          /* hash of config.json, vocab.txt and the tokenizer
                                       JSON files as read at load (model.c) */
};

/* model.c: an empty model of dir, reference count 1 (NULL when out of
** memory); and the freeing of one and all it owns, at its last release. */
bf_model *bf_model_new(const char *dir);
void bf_model_free(bf_model *m);

/* fingerprint.c: the 4-lane hash of n bytes from seed (config.json and the
** tokenizer files go into m->fp_files with it at load). */
uint64_t bf_fp_hash(const unsigned char *p, size_t n, uint64_t seed);
/* fingerprint.c: at load, the identity of the mapped model.safetensors
** (m->map_id, m->map_id_settled), the model's folder of the per-user cache
** (m->cache_dir, not made yet), and the weights' hash from model.fingerprint
** (next to the weights, else in that folder) when it was made from that very
** file (m->weights_known = 1). */
void bf_fp_read_file(bf_model *m);
/* fingerprint.c: where the file name of m is kept: BF_IN_DIR, next to the
** weights (dir/name), or BF_IN_CACHE, in the model's folder of the per-user
** cache directory (only when that folder and the cache directory are this
** user's, no links, and writable by nobody else; make: made first when
** missing).  The path, malloc'd, or NULL: no usable cache folder (why, in
** m->cache_error when something is wrong rather than simply missing). */
enum { BF_IN_DIR, BF_IN_CACHE };
char *bf_model_file(bf_model *m, const char *name, int where, int make);
/* fingerprint.c: say (once per model, first reason kept) why the per-user
** cache cannot be used, into m->cache_error. */
void bf_model_cache_refused(bf_model *m, const char *fmt, ...)
  __attribute__((format(printf, 2, 3)));
/* fingerprint.c: the weights' hash (what the fingerprint keys on): known
** since loading, else model.safetensors hashed now through its descriptor
** (and kept in dir/model.fingerprint).  0, or -1 when the file changed
** since loading or cannot be read. */
int bf_model_weights_hash(bf_model *m, uint64_t *out);
/* fingerprint.c: the identity of the file open as fd: 0, or -1. */
int bf_file_id_of(int fd, bf_file_id *id);
int bf_file_id_same(const bf_file_id *a, const bf_file_id *b);
/* fingerprint.c: the hash of n bytes as the fingerprint hashes a file
** (bf_fp_hash over chunks of BF_FP_CHUNK bytes, chained): of bytes in
** memory, and of the bytes [off, off + n) of the file open as fd, read with
** pread() into buf (BF_FP_CHUNK bytes) and never through a mapping (a file
** that shrank gives -1, not SIGBUS).  Both give the same value. */
#define BF_FP_CHUNK (1u << 20)
uint64_t bf_fp_hash_bytes(const unsigned char *p, size_t n);
int bf_fp_hash_file(int fd, uint64_t off, size_t n, unsigned char *buf, uint64_t *out);

/* warm_up.c: the last step of a load: bring the weights into the page
** tables (waiting until a bound after t0, when the load began) and compute
** the fingerprint in the background.  BERTFILL_WARM_UP=0 turns it off. */
void bf_model_warm_up(bf_model *m, uint64_t t0);

/* quantized.c: give an int8 load its quantized weights (m->layers[*].*8,
** head8, dec8, int8_source), from model.int8.safetensors (derived.h: next to
** the weights or in the cache) when it is there and was made from this very
** model.safetensors, else by quantizing now (and writing that file).  0, or -1 with err. */
int bf_quantized_attach(bf_model *m, char *err, size_t errlen);
/* Unmap / free what bf_quantized_attach set up. */
void bf_quantized_detach(bf_model *m);

/* packed.c: give an fp32 load the packed panels of its encoder's matrices
** (m->layers[*].*_p, packed_source) from dir/model.packed.safetensors when
** it is there and was made from this very model.safetensors, else by
** packing now and writing that file; when the kernels have no use for
** panels (no AVX-512), BERTFILL_PACKED=0 says no, or the file cannot be
** written, the products read W in place (packed_source says why).  Never
** fails: the panels only make the products faster. */
void bf_packed_attach(bf_model *m);
/* packed.c: give a bf16 load the bf16 panels of its encoder's matrices
** (m->layers[*].*_h) from dir/model.bf16.safetensors when it is there and
** was made from this very model.safetensors, else by packing now and writing
** that file, or, when it cannot be written, into private memory (own_h;
** packed_source "memory").  0, or -1 with err (out of memory). */
int bf_bf16_attach(bf_model *m, char *err, size_t errlen);

#endif
