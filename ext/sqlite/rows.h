/*
** rows.h — fill_rows(sql [, k]), the table-valued function that fills a
** whole column at batch speed, in memory bounded by one batch (see
** rows.c).  Registered by sqlite3_bertfill_init (entry.c) with the
** connection's bfx_conn as its client data.
*/
#ifndef BERTFILL_SQLITE_ROWS_H
#define BERTFILL_SQLITE_ROWS_H

#include "sqlite3ext.h"

extern const sqlite3_module bfx_rows_module;

#endif
