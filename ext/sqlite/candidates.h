/*
** candidates.h — fill_candidates(text [, k]), the table-valued function
** that lists the top-k candidates of every [MASK] (see candidates.c).
** Registered by sqlite3_bertfill_init (entry.c) with the connection's
** bfx_conn as its client data.
*/
#ifndef BERTFILL_SQLITE_CANDIDATES_H
#define BERTFILL_SQLITE_CANDIDATES_H

#include "sqlite3ext.h"

extern const sqlite3_module bfx_candidates_module;

#endif
