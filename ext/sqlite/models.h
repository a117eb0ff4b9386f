/*
** models.h — which model a connection uses, and the process-wide registry
** of loaded models that every connection shares (see models.c).
*/
#ifndef BERTFILL_SQLITE_MODELS_H
#define BERTFILL_SQLITE_MODELS_H

#include "bertfill.h"
#include "conn.h"
#include "errors.h"

/* The connection's model, loading it on first use; NULL with e set when
** there is none (the message says how to provide one) or out of memory. */
bf_model *bfx_model(bfx_conn *c, bfx_err *e);
/* Make the model in dir (NULL: back to BERTFILL_MODEL / the default model)
** the connection's model.  SQLITE_OK, or an error code with e set. */
int bfx_model_set(bfx_conn *c, const char *dir, bfx_err *e);
/* Release the connection's model (at connection close). */
void bfx_model_drop(bfx_conn *c);
/* "name: 12 layers, hidden 768, vocab 21128, F32" (sqlite3_malloc'ed). */
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
