/*
** tvf.h — what bertfill's table-valued functions share, whose arguments are
** the HIDDEN columns text (required) and k (optional), given by equality:
** fill_candidates(text [, k]), fill_sequences(text [, k]), and fill_rows(sql
** [, k]) with its query in the place of the text.  Their query plan
** (bfx_tvf_best_index), their k (bfx_tvf_k), and the xFilter of those of a
** text up to their rows (bfx_tvf_filter).
*/
#ifndef BERTFILL_SQLITE_TVF_H
#define BERTFILL_SQLITE_TVF_H

#include "sqlite3ext.h"
#include "bertfill.h"
#include "conn.h"
#include "errors.h"
#include "lookup.h"

/* idxNum bits of the plan: the text is argv[0], k (when given) argv[1]. */
enum { BFX_TVF_TEXT = 1, BFX_TVF_K = 2 };

/* The xBestIndex of such a function, columns col_text and col_k, ORDER BY
** left to the caller.  Returns SQLITE_CONSTRAINT when an argument's
** constraint exists but is not usable in this plan (its value comes from a
** table not yet joined at this point), so that SQLite picks a join order
** where it is.  Without any text constraint the plan costs 1e300 (SQLite
** also asks about each branch of an OR with only that branch's terms); if
** it is the only plan, xFilter sees no BFX_TVF_TEXT and reports the missing
** text. */
int bfx_tvf_best_index(sqlite3_index_info *info, int col_text, int col_k);

/* The k of an xFilter with that plan: dflt when not given or NULL, else an
** integer from 1 to max_k.  SQLITE_OK with *k, or the error ("fname: k must
** be an integer from 1 to max_k (got ...)") reported on vt and its code. */
int bfx_tvf_k(sqlite3_vtab *vt, const char *fname, int max_k, sqlite3_int64 dflt, int idxNum,
              int argc, sqlite3_value **argv, sqlite3_int64 *k);

/* What a cursor keeps of its text for its rows. */
typedef struct bfx_tvf_text {
  bf_model *m; /* retained for the life of the rows */
  char *text;  /* copy of the input (sqlite3_malloc), NUL-terminated */
  int n;       /* its length in bytes */
  int *off;    /* byte offset of each "[MASK]" in text */
} bfx_tvf_text;
void bfx_tvf_text_clear(bfx_tvf_text *x); /* frees and releases; all zero after */

/* One such function: its name, counter and stage (lookup.h's bfx_call_kind),
** the text of the example in its missing-argument message, the largest k
** (an integer from 1 to max_k, default BFX_DEFAULT_K), and how it makes its
** rows once the text is tokenized (call->t, at least one mask) and the
** masks are found (x->off): it fills res and its cursor's fields, or sets
** call->e and returns an SQLite error code. */
typedef struct bfx_tvf_fn {
  bfx_call_kind kind;
  const char *example;
  int max_k;
  int (*rows)(sqlite3_vtab_cursor *cursor, bfx_call *call, int k, bfx_result *res);
} bfx_tvf_fn;

/* The xFilter of such a function (its cursor reset before, and again when
** this fails), with the plan of bfx_tvf_best_index: the text and k read
** (a NULL text: no rows), the call begun (bfx_call), the text kept in x,
** its masks found, fn->rows run, the call ended (timed, traced with res).
** Errors are reported on the cursor's table. */
int bfx_tvf_filter(const bfx_tvf_fn *fn, bfx_conn *c, sqlite3_vtab_cursor *cursor, int idxNum,
                   int argc, sqlite3_value **argv, bfx_tvf_text *x, bfx_result *res);

#endif
