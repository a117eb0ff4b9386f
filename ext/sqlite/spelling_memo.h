/*
** spelling_memo.h — the spelling checks of suspects.c in the memo cache
** (cache.h: the process-wide LRU, then the cache table), so that a text
** checked once is answered again without the encoder, as the fill
** functions' texts are.
**
** An entry is keyed by the model, BFC_TAG_SPELLING, the mode, the text's
** token ids and the sensitivity (cache.h): another mode or sensitivity is
** another entry.  Its value has the cache's shape, one list of k candidates
** (id, probability):
**   [0]               (number of findings n, 0)
**   [1 + 3i + 0]      (token index of finding i, kind / 4)
**   [1 + 3i + 1]      (the written character's id, its probability)
**   [1 + 3i + 2]      (the suggestion's id, its probability)
**   the rest, up to k (a batch's entries share one k): (0, 0)
** Everything else of a finding (position, bytes, characters, margin) is
** rebuilt from the text (bf_spell_restore, spelling.h), and an entry is used
** only when every finding checks out against the text as the check itself
** would have found it: a table row that does not (written by hand, or
** another version) is a miss, computed again and overwritten.
*/
#ifndef BERTFILL_SQLITE_SPELLING_MEMO_H
#define BERTFILL_SQLITE_SPELLING_MEMO_H

#include <stdint.h>

#include "bertfill.h"
#include "conn.h"
#include "encode.h"
#include "spelling.h"

/* The findings of x (x->found, x->n_found) from the memo: 1 on a hit (*from
** "lru" or "table"; counted as hit_lru or hit_table when count), 0 on a
** miss, -1 out of memory.  no_lru: an entry found in the table is not copied
** into the LRU (the column form, as fill_rows).  Read time added to tm. */
int bfx_spell_memo_get(bfx_conn *c, bf_model *m, bf_spell_text *x, int thorough, double sensitivity,
                       int count, int no_lru, const char **from, bfx_times *tm);

/* Store the checks of xs[0..n) (their findings), the table rows bounded by
** room as bfx_cache_put_batch (lookup.h); a text with more findings than an
** entry holds is not stored.  Returns the table rows written. */
int64_t bfx_spell_memo_put(bfx_conn *c, bf_model *m, int n, const bf_spell_text *xs, int thorough,
                           double sensitivity, int64_t room, bfx_times *tm);

#endif
