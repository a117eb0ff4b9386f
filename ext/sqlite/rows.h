/*
** rows.h — fill_rows(sql [, k]), the table-valued function that fills a
** whole column at batch speed, in memory bounded by one batch (see
** rows.c).  Registered by sqlite3_bertfill_init (entry.c) with the
** connection's bfx_conn as its client data.
*/
#ifndef BERTFILL_SQLITE_ROWS_H
#define BERTFILL_SQLITE_ROWS_H

#include "sqlite3ext.h"
#include "errors.h"

extern const sqlite3_module bfx_rows_module;

/* The query of a column form (fill_rows, fill_suspects_rows) prepared into
** *query: one read-only SELECT of two columns (key, text) without
** parameters, else the error, prefixed "fname: ", in e. */
int bfx_prepare_key_text_query(sqlite3 *db, const char *fname, const char *sql,
                               sqlite3_stmt **query, bfx_err *e);

#endif
