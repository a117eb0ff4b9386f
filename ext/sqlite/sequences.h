/*
** sequences.h — fill_sequences(text [, k]), the table-valued function that
** lists the k best whole fills of a text by joint probability (see
** sequences.c).  Registered by sqlite3_bertfill_init (entry.c) with the
** connection's bfx_conn as its client data.
*/
#ifndef BERTFILL_SQLITE_SEQUENCES_H
#define BERTFILL_SQLITE_SEQUENCES_H

#include "sqlite3ext.h"

extern const sqlite3_module bfx_sequences_module;

#endif
