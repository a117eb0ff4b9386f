/*
** safetensors.h — read-only, zero-copy reader for the safetensors format.
**
** A safetensors file is
**   [8 bytes: N, little-endian u64][N bytes: JSON header][data area]
** where the header maps each tensor name to
**   {"dtype": "F32", "shape": [768, 3072], "data_offsets": [begin, end]}
** (offsets relative to the start of the data area) plus an optional
** "__metadata__" object of strings.
**
**   st_file f;
**   char err[256];
**   if (st_open(&f, "dir/model.safetensors", err, sizeof err) != 0) {
**     fprintf(stderr, "%s\n", err); return;
**   }
**   const st_tensor *t = st_find(&f, "bert.embeddings.word_embeddings.weight");
**   if (t && t->dtype == ST_F32) use((const float *)t->data, t->shape[0], t->shape[1]);
**   st_close(&f);
**
** st_open maps the file read-only (MAP_SHARED, so processes share one copy
** in the page cache; from 2 MB on at a 2 MB boundary with MADV_HUGEPAGE:
** safetensors.c) and validates everything before returning: the header
** length against the file size and a 100 MB limit, the header is a JSON
** object, each entry's dtype is a known safetensors dtype, the shape is a
** list of non-negative integers, data_offsets is [begin, end] with
** begin <= end <= size of the data area and end - begin equal to the
** product of the shape times the element size (no overflow), no two
** tensors overlap, and no name appears twice.  It reads only the header:
** the weight pages are not touched.  Every message starts with the path.
**
** Any known dtype is accepted here (a checkpoint may carry an I64
** position_ids buffer nobody uses); whoever uses a tensor checks its dtype.
*/
#ifndef BERTFILL_SAFETENSORS_H
#define BERTFILL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define ST_MAX_HEADER (100u * 1000u * 1000u) /* bytes of JSON header */
#define ST_MAX_DIMS 8

typedef enum {
  ST_F32,
  ST_F16,
  ST_BF16, /* the ones the engine converts */
  ST_F64,
  ST_I64,
  ST_I32,
  ST_I16,
  ST_I8,
  ST_U64,
  ST_U32,
  ST_U16,
  ST_U8,
  ST_BOOL,
  ST_F8_E4M3,
  ST_F8_E5M2
} st_dtype;

typedef struct st_tensor {
  char *name;
  st_dtype dtype;
  const char *dtype_name; /* "F32", "I64", ... (static string) */
  size_t elem_size;       /* bytes per element */
  int ndim;
  int64_t shape[ST_MAX_DIMS];
  uint64_t n_elems;
  size_t begin, end; /* byte offsets in the data area */
  const void *data;  /* begin, inside the mapping */
} st_tensor;

typedef struct st_file {
  char *path; /* as given to st_open (used in messages) */
  void *map;
  size_t map_len;            /* the whole file, PROT_READ, MAP_SHARED */
  int fd;                    /* kept open (O_CLOEXEC) to notice changes on disk; -1 if none */
  int64_t mtime_ns;          /* modification time when mapped */
  size_t header_len;         /* N */
  const unsigned char *data; /* start of the data area */
  size_t data_len;
  st_tensor *tensors; /* sorted by name */
  int n;
} st_file;

/* Map and validate.  0 on success; else -1 with err set and f zeroed
** (st_close on it is harmless). */
int st_open(st_file *f, const char *path, char *err, size_t errlen);
/* st_open of a file in a folder of this user's (the per-user cache): not
** when path is a symbolic link (O_NOFOLLOW) or the file is another user's. */
int st_open_private(st_file *f, const char *path, char *err, size_t errlen);
/* Tensor by exact name, or NULL. */
const st_tensor *st_find(const st_file *f, const char *name);
/* A dtype's name as safetensors spells it ("F32", "BF16", ...; "?" for none). */
const char *st_dtype_name(st_dtype t);
/* Shape as text, e.g. "[768,3072]", into buf. */
const char *st_shape_str(const int64_t *shape, int ndim, char *buf, size_t buflen);
/* Unmap and free. */
void st_close(st_file *f);

/* Conversion of one element to float (exact: every F16/BF16 value,
** subnormals, infinities and NaNs included, is representable in F32). */
float st_f16_to_f32(uint16_t h);
float st_bf16_to_f32(uint16_t h);
/* n little-endian F16 / BF16 values at src (any alignment) to dst, with the
** same results as the functions above (F16 uses the CPU's F16C instructions
** when it has them). */
void st_f16_to_f32_n(const void *src, float *dst, size_t n);
void st_bf16_to_f32_n(const void *src, float *dst, size_t n);

#endif
