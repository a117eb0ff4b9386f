/*
** bertfill.h — the bertfill engine: a BERT masked language model in C.
**
** No SQLite in here.  The engine loads a Hugging Face model directory
** (config.json, vocab.txt, model.safetensors, optionally tokenizer_config.json
** and tokenizer.json), tokenizes text exactly like Hugging Face's BertTokenizer,
** runs the encoder on a batch of sequences and returns the top-k candidates for
** every [MASK].  The matrix products run on bertfill's own AVX-512 kernels
** (on CPUs without AVX-512: OpenBLAS, loaded at run time).
**
**   char err[256];
**   bf_model *m = bf_model_load("models/bert-base-chinese", err, sizeof err);
**   bf_tokens t = {0};
**   bf_tokenize(bf_model_tokenizer(m), "今天天气真[MASK]啊", -1, &t, err, sizeof err);
**   bf_run *r = bf_run_new();
**   bf_cand c[5 * t.n_masks];
**   bf_fill(m, r, 1, &t, 5, c, err, sizeof err);
**   printf("%s %.3f\n", bf_model_token(m, c[0].id), c[0].prob);
**   bf_run_free(r); bf_tokens_free(&t); bf_model_release(m);
**
** Thread safety: a bf_model and its bf_tokenizer are immutable after loading
** and may be used by any number of threads at once (reference counted).  A
** bf_run is scratch memory for one thread at a time.
*/
#ifndef BERTFILL_H
#define BERTFILL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Return codes.  Every function that can fail also writes a message for a
** user into err (always NUL-terminated when errlen > 0). */
enum {
  BF_OK = 0,
  BF_ERR_INPUT = 1,   /* bad text: invalid UTF-8, bad argument */
  BF_ERR_TOOLONG = 2, /* more tokens than max_position_embeddings */
  BF_ERR_NOMEM = 3,   /* an allocation failed */
  BF_ERR_MODEL = 4,   /* model directory missing or malformed */
  BF_ERR_IO = 5,      /* a file could not be read */
  BF_ERR_BLAS = 6     /* OpenBLAS could not be loaded */
};

#define BF_MAX_K 1000 /* upper bound on k for top-k */

/* The blank a user writes in a text, and its length in bytes. */
#define BF_MASK_TEXT "[MASK]"
#define BF_MASK_TEXT_LEN ((int)sizeof BF_MASK_TEXT - 1)

/* ---- configuration (from config.json) ---- */
typedef struct bf_config {
  int vocab_size;
  int hidden_size;
  int num_hidden_layers;
  int num_attention_heads;
  int intermediate_size;
  int max_position_embeddings;
  int type_vocab_size;
  float layer_norm_eps;
} bf_config;

/* ---- tokenizer ---- */
typedef struct bf_tokenizer bf_tokenizer;

/* Where a token came from: bytes [start, end) of the text given to
** bf_tokenize.  The smallest range that holds every character of the text
** that went into the token (the tokenizer lower-cases, strips accents and
** drops characters, so the token's text need not be those bytes):
**   - [CLS] is the empty span [0, 0), [SEP] the empty span [len, len);
**   - an added token ([MASK], ...) found in the raw text: exactly its bytes
**     ("[MASK]" for a mask);
**   - a word that becomes [UNK] (no pieces cover it, or too long): the word;
**   - the pieces of a word split its span at character boundaries, in
**     order; two pieces share a character's bytes only when that one
**     character became more than one piece (with strip_accents a Hangul
**     syllable decomposes into its jamo, each of which may be a piece;
**     lower case turns "İ" into "i" and U+0307);
**   - characters that make no token (whitespace, dropped controls, accents
**     standing alone) are in no span. */
typedef struct bf_span {
  int start, end;
} bf_span;

/* A token sequence as the model sees it: [CLS] ... [SEP]. */
typedef struct bf_tokens {
  int32_t *ids;   /* n token ids */
  int n;          /* number of tokens, [CLS] and [SEP] included */
  int cap;        /* allocated capacity of ids (owned by the struct) */
  int n_masks;    /* how many ids are the [MASK] id */
  bf_span *span;  /* bf_tokenize: each token's bytes in the text (cap entries, owned);
                 ** NULL in sequences built otherwise: the encoder never reads it */
  int invalid_at; /* bf_tokenize failed on invalid UTF-8: the offset of the first
                  ** invalid byte; else -1 */
} bf_tokens;

/* Load vocab.txt (+ tokenizer_config.json / tokenizer.json when present)
** from a model directory.  NULL on error with err set. */
bf_tokenizer *bf_tokenizer_load(const char *dir, char *err, size_t errlen);
void bf_tokenizer_free(bf_tokenizer *tok);

/* Tokenize len bytes of UTF-8 text (len < 0: NUL-terminated) into out
** (reused; grows as needed), adding [CLS] and [SEP], with each token's span
** and the number of masks.  The text's UTF-8 is checked here, the one
** check a text needs.  Returns BF_OK, or BF_ERR_INPUT for
** invalid UTF-8 (out->invalid_at says where), BF_ERR_NOMEM.  No length limit here: the
** caller (bf_fill) checks against the model's max_position_embeddings. */
int bf_tokenize(const bf_tokenizer *tok, const char *text, long len, bf_tokens *out, char *err,
                size_t errlen);
void bf_tokens_free(bf_tokens *t);

/* Something in s[0..n) that a person meant as a blank but that is not the
** exact text "[MASK]", and so is tokenized as plain text (as Hugging Face
** does).  It is read as the tokenizer reads a text, with every step of its
** normalizer on whatever the model's settings (tokenizer.c): characters
** clean_text drops (U+200B, U+00AD, U+FEFF, U+2060, NUL) are not there, any
** White_Space is a space, accents and combining marks are stripped, letters
** are lower-cased.  On that reading it is: an opening bracket "[", "［" or
** "【"; spaces or none; the letters m a s k, ASCII or full-width; spaces or
** none; a closing "]", "］" or "】".  For example "［MASK］", "[mask]",
** "[ MASK ]", "【ＭＡＳＫ】", "[MA" U+200B "SK]", "[MÁSK]", "[MASK\n]". */
#define BF_LOOKALIKE_SHOWN 8
typedef struct bf_lookalike {
  long at;    /* byte offset of the first one in s, -1 when there is none */
  size_t len; /* its length in bytes */
  /* Its characters that do not show as what they are (all but printable
  ** ASCII, the full-width forms, 【 】 and U+3000): U+200B, a newline, "Á",
  ** U+0301...; the first BF_LOOKALIKE_SHOWN of them, n_unplain in all. */
  uint32_t unplain[BF_LOOKALIKE_SHOWN];
  int n_unplain;
} bf_lookalike;
/* Finds the first look-alike in s[0..n) (valid UTF-8: bf_tokenize checks
** it first) into *out.  BF_OK, or BF_ERR_NOMEM. */
int bf_mask_lookalike(const char *s, size_t n, bf_lookalike *out);

int bf_tokenizer_vocab_size(const bf_tokenizer *tok);
const char *bf_tokenizer_token(const bf_tokenizer *tok, int32_t id); /* NULL if out of range */
/* The id of the vocabulary entry that is exactly entry[0..len) ("好",
** "##ing", "[UNK]"), or -1 when there is none. */
int32_t bf_tokenizer_find(const bf_tokenizer *tok, const char *entry, size_t len);
int32_t bf_tokenizer_mask_id(const bf_tokenizer *tok);

/* Tokens given as a JSON array of vocabulary entries ('["晒","网"]',
** '["run","##ning"]': what a tokenized text's entries look like), read by
** bf_tokens_from_json into a bf_json_tokens. */
typedef enum bf_json_tokens_status {
  BF_JT_OK = 0,     /* ids[0..n) */
  BF_JT_NOT_ARRAY,  /* not JSON, or JSON but not an array: why says which */
  BF_JT_NOT_STRING, /* item number item (from 1) is not a string; type says what it is */
  BF_JT_NOT_TOKEN,  /* item number item, token[0..token_len) decoded, is not in the vocabulary */
  BF_JT_NOMEM
} bf_json_tokens_status;
typedef struct bf_json_tokens {
  int32_t *ids;     /* n ids (malloc'ed, room for at least one) */
  size_t n;         /* the array's length */
  size_t item;      /* BF_JT_NOT_STRING, BF_JT_NOT_TOKEN: which item */
  const char *type; /* BF_JT_NOT_STRING: its JSON type with an article ("a number") */
  char *token;      /* BF_JT_NOT_TOKEN: the item (malloc'ed, NUL-terminated) */
  size_t token_len;
  char why[200]; /* BF_JT_NOT_ARRAY: the JSON error, or "it is a string, not an array" */
} bf_json_tokens;
/* Read s[0..n) into out (zeroed first); returns out's status.  Free out
** with bf_json_tokens_free whatever the status. */
bf_json_tokens_status bf_tokens_from_json(const bf_tokenizer *tok, const char *s, size_t n,
                                          bf_json_tokens *out);
void bf_json_tokens_free(bf_json_tokens *t);
int bf_tokenizer_lowercase(const bf_tokenizer *tok);     /* do_lower_case in effect */
int bf_tokenizer_strip_accents(const bf_tokenizer *tok); /* strip_accents in effect */

/* ---- model ---- */
typedef struct bf_model bf_model;

/* The arithmetic of the encoder's matrix products, chosen per load:
**   BF_PRECISION_FP32  exact: the weights as stored, in float (the default);
**   BF_PRECISION_INT8  every Linear of the encoder and of the MLM head with
**                      int8 weights (symmetric, per output row) and int8
**                      activations (per row, quantized at run time), summed
**                      exactly in int32 (qgemm.h).  Embeddings, LayerNorm,
**                      attention scores, softmax and GELU stay fp32.
** An int8 load keeps its quantized weights in dir/model.int8.safetensors,
** written on the first int8 load when dir is writable and mmapped (shared
** by every process) from then on; for a read-only dir that file goes to the
** model's folder of the per-user cache (bf_model_cache_dir), and only where
** that cannot be written either are they made at load into private memory
** (see bf_model_int8_source, bf_model_cache_error).  An fp32 load on a CPU
** with AVX-512 keeps the encoder's matrices, packed into the panels its
** products read, in dir/model.packed.safetensors (the same size as the
** matrices: 340 MB for bert-base), made the same way (read-only dir: in the
** cache); without it (neither writable, BERTFILL_PACKED=0) the products read
** the weights in place, a little slower (see bf_model_packed_source).
**   BF_PRECISION_BF16  every Linear of the encoder and of the MLM head with
**                      bf16 weights and bf16 activations (x rounded to bf16
**                      per product), summed in float as AVX512-BF16's
**                      vdpbf16ps does (kernels.h's bf16_kernel; on CPUs
**                      without it a portable loop gives the same bits, far
**                      slower).  Embeddings, LayerNorm, attention, softmax
**                      and GELU stay fp32.  Its panels are kept in
**                      dir/model.bf16.safetensors (half the matrices' size),
**                      made like the int8 file (private memory where
**                      neither the dir nor the cache can be written:
**                      bf_model_packed_source says "memory"). */
#define BF_HAVE_PRECISION 1
typedef enum { BF_PRECISION_FP32 = 0, BF_PRECISION_INT8 = 1, BF_PRECISION_BF16 = 2 } bf_precision;
/* "fp32", "int8" or "bf16" (any letter case) into *out: 0; anything else: -1. */
int bf_precision_parse(const char *name, bf_precision *out);
const char *bf_precision_name(bf_precision p); /* "fp32", "int8", "bf16" */

/* Load a Hugging Face model directory.  The safetensors file is mmapped
** read-only; F32 tensors are used in place, F16/BF16 are converted once.
** Returns a model with reference count 1, or NULL with err naming the file
** and the problem. */
bf_model *bf_model_load(const char *dir, char *err, size_t errlen);
/* bf_model_load in the given precision (bf_model_load is FP32).  Loads of
** one directory in different precisions are independent models. */
bf_model *bf_model_load_as(const char *dir, bf_precision precision, char *err, size_t errlen);
void bf_model_retain(bf_model *m);
void bf_model_release(bf_model *m); /* frees at zero */

const bf_config *bf_model_config(const bf_model *m);
const bf_tokenizer *bf_model_tokenizer(const bf_model *m);
const char *bf_model_dir(const bf_model *m);
const char *bf_model_dtype(const bf_model *m); /* "F32", "F16" or "BF16" as stored */
bf_precision bf_model_precision(const bf_model *m);
/* Where an int8 model's quantized weights are: "file" (mmapped
** model.int8.safetensors, shared between processes: bf_model_derived_file
** says where), "memory" (made at load, private to the process: neither the
** directory nor the per-user cache could be written); "" for fp32. */
const char *bf_model_int8_source(const bf_model *m);
/* Where an fp32 model's products read the encoder's matrices: "file"
** (packed panels, mmapped dir/model.packed.safetensors, shared between
** processes), or "in place (why)": the rows of model.safetensors, because
** the kernels have no use for panels (no AVX-512), BERTFILL_PACKED=0, or
** neither the directory nor the per-user cache could be written; "" for
** int8.  A bf16 load's bf16 panels: "file" or "memory" (neither could be
** written). */
const char *bf_model_packed_source(const bf_model *m);
/* The path of the file of derived weights this load maps (the int8, packed
** or bf16 file: next to the weights, or in the per-user cache directory when
** the model's directory cannot be written), or "" when none. */
const char *bf_model_derived_file(const bf_model *m);
/* This model's folder of the per-user cache directory ($XDG_CACHE_HOME/
** bertfill/NAME-HASH, ~/.cache/bertfill/..., or under BERTFILL_CACHE_DIR),
** where its derived files and model.fingerprint go when its directory cannot
** be written; "" when there is none (bf_model_cache_error says why). */
const char *bf_model_cache_dir(const bf_model *m);
/* Why the per-user cache directory cannot be used for this model (none, a
** symbolic link, another user's, writable by others, cannot be made,
** BERTFILL_CACHE_DIR=0, HOME not set), or "" when nothing is wrong. */
const char *bf_model_cache_error(const bf_model *m);
/* Token string for display: vocabulary entry with a leading "##" removed. */
const char *bf_model_token(const bf_model *m, int32_t id);
/* A 16-hex-digit fingerprint of config, vocabulary, every weight byte and
** the precision (an int8 load never shares a fingerprint with an fp32 one);
** computed on first call (reads the whole file with pread, never through
** the mapping), then cached. Thread-safe.  NULL while it is not known and
** cannot be computed: model.safetensors changed on disk since loading
** (bf_model_check says how), or out of memory. */
const char *bf_model_fingerprint(bf_model *m);

/* BF_OK while model.safetensors is the file that was loaded, unchanged;
** BF_ERR_MODEL with a message when it was truncated, grown or rewritten in
** place since (reading the mapping then gives other weights, or SIGBUS past
** a truncated end).  Replacing the file with rename() leaves the loaded
** model intact and is not reported.  One fstat(); bf_fill calls it. */
int bf_model_check(const bf_model *m, char *err, size_t errlen);

/* 1 if dir/model.safetensors is still the very file that was loaded (same
** inode, size and modification time); 0 if it was replaced (e.g. renamed
** over), changed or removed.  A registry of loaded models uses it to load
** the new version for new users while old users keep the old one. */
int bf_model_is_current(const bf_model *m);

/* ---- forward pass ---- */
typedef struct bf_cand {
  int32_t id; /* token id */
  float prob; /* softmax probability over the whole vocabulary */
} bf_cand;

/* Scratch memory and stage timings for one thread. */
typedef struct bf_run bf_run;
bf_run *bf_run_new(void);
void bf_run_free(bf_run *r);

/* Stage timings of the last bf_fill on this run, in nanoseconds. */
typedef struct bf_timings {
  uint64_t embed_ns, encode_ns, head_ns, topk_ns;
  int tokens, masks, seqs;
} bf_timings;
const bf_timings *bf_run_timings(const bf_run *r);

/* Run the encoder once over nseq sequences (no padding: all tokens of all
** sequences go through each GEMM together, attention is per sequence) and
** write, for each [MASK] of each sequence in order, k candidates sorted by
** probability (highest first) into out: out[(mask_index_overall)*k + rank].
** out must hold k * (sum of seqs[i].n_masks) entries.  Sequences without a
** mask are skipped cheaply.  Errors: BF_ERR_TOOLONG (message says the length
** and the limit), BF_ERR_INPUT (k out of 1..BF_MAX_K, ids out of range,
** n_masks that disagrees with the ids), BF_ERR_NOMEM, BF_ERR_MODEL (the
** weights file changed on disk since loading, or the model produced NaN). */
int bf_fill(const bf_model *m, bf_run *r, int nseq, const bf_tokens *seqs, int k, bf_cand *out,
            char *err, size_t errlen);

/* bf_fill, and also the probability of one given token at each [MASK]
** (what scoring a given answer needs, when it may be outside the top k):
** want[j] is a token id for the j-th mask overall (counted as out is), or -1
** for none; want_prob[j] gets its probability, the very number bf_fill gives
** that token when it is among the top k (0 for -1).  want NULL: bf_fill.
** Errors as bf_fill's, and BF_ERR_INPUT for a wanted id out of range. */
int bf_fill_scored(const bf_model *m, bf_run *r, int nseq, const bf_tokens *seqs, int k,
                   bf_cand *out, const int32_t *want, float *want_prob, char *err, size_t errlen);

/* The model's scores of chosen tokens at chosen positions: what a spelling
** check needs (ext/engine/spelling.h), where a position need not be a
** [MASK] and only a few tokens matter.  One probe: in sequence seq, at token
** index pos (0 is [CLS]), the scores of n_ids token ids written to out.
** Probes come ordered by sequence, then position, at most one per position;
** a sequence without a probe is skipped cheaply.
**   BF_PROBE_LOGITS  the MLM head's logit of each id: the head's dense layer
**                    and LayerNorm at the position, then one dot product per
**                    id with its row of the decoder (fp32 in every
**                    precision), never the whole vocabulary: differences of
**                    these are log-ratios of probabilities (the softmax's sum
**                    cancels).
**   BF_PROBE_PROBS   each id's probability, softmax over the whole
**                    vocabulary: the very number bf_fill gives that token.
** Errors as bf_fill's, and BF_ERR_INPUT for probes out of range or order. */
typedef struct bf_probe {
  int seq, pos;
  int n_ids;
  const int32_t *ids;
  float *out;
} bf_probe;
enum { BF_PROBE_LOGITS = 0, BF_PROBE_PROBS = 1 };
int bf_probe_run(const bf_model *m, bf_run *r, int nseq, const bf_tokens *seqs, int nprobe,
                 const bf_probe *probes, int what, char *err, size_t errlen);

/* ---- BLAS ---- */
/* Load OpenBLAS at run time (choosing fast kernels for CPUs the installed
** OpenBLAS does not know, e.g. SkylakeX kernels on Sapphire Rapids when it
** would fall back to Prescott).  Idempotent, thread-safe; called by
** bf_model_load.  No OpenBLAS on the machine is not an error: the products
** it would run use plain C loops (blas.c), core "builtin".  Fails only for a
** library that loads without cblas_sgemm.  */
int bf_blas_init(char *err, size_t errlen);
const char *bf_blas_core(void);   /* e.g. "SkylakeX", "builtin"; "" before init */
const char *bf_blas_config(void); /* openblas_get_config(), or why there is no OpenBLAS */
/* Which code does the encoder's matrix products: "avx512" or "avx2"
** (bertfill's own kernels, ext/engine/kernels/avx512.c and avx2.c: the best
** the CPU has, capped by BERTFILL_KERNELS; see kernels/kernels.h) or
** "openblas" (then the loops over rows are plain C too). */
const char *bf_gemm_kernels(void);
/* Which code does an int8 model's products: "avx512vnni", "avx2" or
** "portable" (qgemm.h; capped like bf_gemm_kernels). */
const char *bf_int8_kernels(void);
/* Which code does a bf16 model's products: "avx512bf16" (AVX512-BF16, where
** the CPU has it and the AVX-512 kernels run) or "portable" (the same bits,
** far slower; kernels/kernels.h's bf16_kernel). */
const char *bf_bf16_kernels(void);

/* ---- threads ---- */
/* The engine's thread setting: the threads of one encoder run (bertfill's
** own kernels use at most 16 of them, OpenBLAS all).  It is the engine's
** own (pool.h), and OpenBLAS is given it (blas.c), not the reverse; the
** names say "blas" for history.  Default: OPENBLAS_NUM_THREADS, else
** GOTO_NUM_THREADS, else OMP_NUM_THREADS, read as OpenBLAS reads them and at
** most the cores; else one per core. */
int bf_blas_threads(void);
/* Set it, for the engine and OpenBLAS (a number set wins over the
** environment): n <= 0: one per core. */
void bf_blas_set_threads(int n);
/* The most threads OpenBLAS accepts (MAX_THREADS in openblas_get_config(),
** 64 in Debian's build); 0 when it does not say.  A larger value given to
** bf_blas_set_threads is cut down to it (once OpenBLAS is loaded). */
int bf_blas_max_threads(void);

#ifdef __cplusplus
}
#endif
#endif /* BERTFILL_H */
