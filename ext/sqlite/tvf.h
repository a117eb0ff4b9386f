/*
** tvf.h — the query plan of bertfill's table-valued functions, whose
** arguments are the HIDDEN columns text (required) and k (optional), given
** by equality: fill_candidates(text [, k]), fill_sequences(text [, k]).
*/
#ifndef BERTFILL_SQLITE_TVF_H
#define BERTFILL_SQLITE_TVF_H

#include "sqlite3ext.h"

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

#endif
