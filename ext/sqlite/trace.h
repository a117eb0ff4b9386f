/*
** trace.h — the optional per-call trace: one row in the table
** bertfill_trace for each bert_fill / fill_candidates call of a connection
** that turned it on with bert_trace(1) (see trace.c).
*/
#ifndef BERTFILL_SQLITE_TRACE_H
#define BERTFILL_SQLITE_TRACE_H

#include <stdint.h>
#include "sqlite3ext.h"

struct bfx_result; /* lookup.h */

/* Record one call of func on db when db traces (a no-op otherwise): the
** text as given (text_len bytes, NUL bytes included), where the result
** came from and the time of each stage (r may be NULL), the call's start t0
** (bf_now_ns), tokenizing time and token count. */
void bfx_trace_call(sqlite3 *db, const char *func, const char *text, int text_len,
                    const struct bfx_result *r, uint64_t t0, uint64_t tok_ns, int tokens,
                    int is_error);

/* Trace rows that could not be written (the 'trace_skipped' counter). */
uint64_t bfx_trace_skipped(void);
void bfx_trace_skipped_reset(void);

/* bert_trace([on [, max_rows]]).  Its user data is the connection's trace
** state, made by bfx_trace_state_new and freed by bfx_trace_state_free
** (the xDestroy of the registration: at connection close). */
void bfx_fn_trace(sqlite3_context *ctx, int argc, sqlite3_value **argv);
void *bfx_trace_state_new(sqlite3 *db);
void bfx_trace_state_free(void *state);

#endif
