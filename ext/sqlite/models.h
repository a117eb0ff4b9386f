/*
** models.h — the process-wide registry of loaded models that every
** connection shares, and where a connection's model comes from when it
** names none (see models.c).
*/
#ifndef BERTFILL_SQLITE_MODELS_H
#define BERTFILL_SQLITE_MODELS_H

#include "bertfill.h"
#include "errors.h"

/* The model in dir, loaded or shared with the connections already using
** it; give it back with bfx_model_put.  NULL with e set when it cannot be
** loaded or out of memory. */
bf_model *bfx_model_get(const char *dir, bf_precision precision, bfx_err *e);
/* The same for a connection that named no model: BERTFILL_MODEL, else the
** shipped default model; *source says which ("BERTFILL_MODEL" or
** "default").  Without either the message says how to provide a model. */
bf_model *bfx_model_get_default(bf_precision precision, const char **source, bfx_err *e);
/* The precision of loads that name none: BERTFILL_PRECISION ("fp32" or
** "int8"; anything else is warned about once and ignored), else fp32. */
bf_precision bfx_default_precision(void);
/* A connection lets go of m (NULL: nothing); the last one unloads it. */
void bfx_model_put(bf_model *m);
/* "name: 12 layers, hidden 768, vocab 21128, F32, fp32" (sqlite3_malloc'ed):
** the stored dtype, then the precision of the products. */
char *bfx_model_describe(bf_model *m);
/* Where the default model is looked for (sqlite3_malloc'ed, for messages). */
char *bfx_default_model_paths(void);
/* Number of models loaded in the process right now. */
int bfx_models_loaded(void);
/* The path of the loaded extension file ("" if unknown). */
const char *bfx_extension_path(void);
/* Never unload the extension (dlopen RTLD_NODELETE), whatever SQLite does. */
void bfx_pin_library(void);

#endif
