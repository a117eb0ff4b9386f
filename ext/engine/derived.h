/*
** derived.h — a file of weights made from a model's model.safetensors and
** kept next to it, or in the per-user cache (engine-internal): the int8 copies of an int8 load
** (quantized.c, model.int8.safetensors) and the packed fp32 panels of an
** fp32 load (packed.c, model.packed.safetensors).
**
** Such a file is a deterministic function of model.safetensors, so it is
** made once, written under a temporary name and renamed into place (readers
** never see half a file; two processes making it at once are harmless), and
** mapped read-only by every later load (MAP_SHARED: processes share one copy
** in the page cache).  It is a safetensors file:
**   "<source>"   I64 [7 + n]  the record: {format version, weights hash
**                             (bf_fp_hash_bytes of the model.safetensors it
**                             was made from), that file's device, inode,
**                             size, mtime and ctime (ns; all 0 when not
**                             recorded), then the checksum of each of the n
**                             tensors (bf_fp_hash_bytes of its bytes)}
**   then the tensors of the spec, in its order, each at an offset that is a
**   multiple of its alignment (the header is padded so that the data area
**   starts on a multiple of 64 bytes too).
** A file is used only when it is laid out as the spec says, its record
** proves it was made from the weights just loaded (the same file by its
** identity, or the same bytes by their hash) and every tensor has the
** checksum recorded (derived.c says why and what it costs); anything else
** (stale, another model's, damaged; files from before issue 41 have a
** 3-element record) is made again.
**
**   derived_spec d = {.file = "model.int8.safetensors", .format = "bertfill int8 weights",
**                     .source = "bertfill.int8.source", .version = 2, .t = t, .n = n};
**   derived_layout(&d);                            // t[i].off, d.data_len
**   const unsigned char *data;
**   if (derived_map(m, &d, &data)) ...use data + t[i].off...
**   else { make d.data_len bytes (derived_zero_gaps, the tensors),
**          derived_write (the record, then the file), derived_map }
** The mapping goes to the model (m->dmap ...: a model has at most one such
** file), which bf_model_check watches and derived_unmap releases.
*/
#ifndef BERTFILL_DERIVED_H
#define BERTFILL_DERIVED_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "safetensors.h"

#define DERIVED_MAX_DIMS 4

typedef struct derived_tensor {
  char name[128];
  st_dtype dtype;
  int ndim;
  int64_t shape[DERIVED_MAX_DIMS];
  size_t bytes; /* its size */
  size_t align; /* its offset is a multiple of this (a power of two) */
  size_t off;   /* derived_layout: its offset in the data area */
} derived_tensor;

typedef struct derived_spec {
  const char *file;   /* its name (in the model's directory or its cache folder) */
  const char *format; /* the header's __metadata__ "format" */
  const char *source; /* the name of the source entry */
  int version;        /* bump when what the file holds changes */
  derived_tensor *t;
  int n;
  size_t data_len; /* derived_layout: the size of the data area */
} derived_spec;

/* The offsets of d's tensors (after the record) and the size of the data
** area. */
void derived_layout(derived_spec *d);

/* Zero the bytes between d's tensors in a data area laid out as d says
** (the alignment gaps: the file holds no stray heap bytes), so that whoever
** fills the tensors writes each byte once. */
void derived_zero_gaps(const derived_spec *d, unsigned char *data);

/* Map m's file of d (next to the weights, else in the model's folder of
** the per-user cache) and, if it was made from m's weights and is whole,
** hand the mapping to m (m->dmap ..., m->dmap_path) and its data area to
** *data: 1.  Not there, not a match or damaged: 0 (nothing changed in m but,
** perhaps, its weights' hash, computed to check the file).  First removes
** the temporary files of d's file left by a writer that was killed, in each
** place it looks. */
int derived_map(bf_model *m, const derived_spec *d, const unsigned char **data);

/* Write d's file in m's directory, else (it cannot be written) in the
** model's folder of the per-user cache (fingerprint.c's bf_model_file), data
** being its data area with the tensors in place: the record goes into data's
** first bytes (the weights' hash, computed now if not known; the tensors'
** checksums), then the file replaces any old one whole.  0, or -1 (nothing
** left behind: neither can be written, or the weights changed since
** loading). */
int derived_write(bf_model *m, const derived_spec *d, unsigned char *data);

/* Unmap and close what derived_map gave m (nothing if none). */
void derived_unmap(bf_model *m);

#endif
