/*
** spelling_memo.c — the spelling checks in the memo cache: the entry's
** layout and its checks are in spelling_memo.h.
*/
#include <stdlib.h>
#include <string.h>

#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3
#include "spelling_memo.h"
#include "cache.h"
#include "lookup.h"

#define PER_FINDING 3
#define MAX_FINDINGS ((BF_MAX_K - 1) / PER_FINDING) /* what one entry holds */

/* The memo key of a check of x: a bf_tokens of one "mask" whose ids are
** sqlite3_malloc'ed (NULL when out of memory). */
static int memo_key(const bf_spell_text *x, int thorough, double sensitivity, bf_tokens *key) {
  int32_t more[2];
  memcpy(more, &sensitivity, sizeof more);
  memset(key, 0, sizeof *key);
  key->ids = bfc_tagged_key(BFC_TAG_SPELLING, thorough, x->t->ids, x->t->n, more, 2);
  if (!key->ids) return -1;
  key->n = key->cap = x->t->n + 2 + 2;
  key->n_masks = 1;
  key->invalid_at = -1;
  return 0;
}

/* The findings of x from an entry c[0..k): 1 when it checks out (x->found
** malloc'ed), 0 when not, -1 out of memory. */
static int unpack(const bf_model *m, const bf_cand *c, int k, bf_spell_text *x,
                  double sensitivity) {
  x->found = NULL;
  x->n_found = 0;
  if (k < 1 || c[0].prob != 0.0f || c[0].id < 0 || c[0].id > MAX_FINDINGS) return 0;
  int n = c[0].id;
  if (1 + PER_FINDING * n > k) return 0;
  for (int i = 1 + PER_FINDING * n; i < k; i++)
    if (c[i].id != 0 || c[i].prob != 0.0f) return 0;
  if (n == 0) return 1;
  bf_suspect *f = malloc((size_t)n * sizeof *f);
  if (!f) return -1;
  int last_tok = 0;
  for (int i = 0; i < n; i++) {
    const bf_cand *at = c + 1 + PER_FINDING * i;
    int tok = at[0].id;
    float kind4 = at[0].prob * 4.0f;
    bf_confusion_kind kind = kind4 == 1.0f   ? BF_CONFUSE_SAME_SOUND
                             : kind4 == 2.0f ? BF_CONFUSE_SIMILAR_SOUND
                             : kind4 == 3.0f ? BF_CONFUSE_SIMILAR_SHAPE
                                             : 0;
    int got = kind && tok > last_tok && tok < x->t->n
                ? bf_spell_restore(m, x, tok, at[2].id, kind, at[1].prob, at[2].prob, sensitivity,
                                   &f[i])
                : 0;
    if (got == 1 && f[i].written_id != at[1].id) got = 0;
    if (got != 1) {
      free(f);
      return got;
    }
    last_tok = tok;
  }
  x->found = f;
  x->n_found = n;
  return 1;
}

typedef struct unpack_arg {
  const bf_model *m;
  bf_spell_text *x;
  double sensitivity;
} unpack_arg;

static int unpack_check(void *arg, const bf_cand *c, int k) {
  unpack_arg *a = arg;
  return unpack(a->m, c, k, a->x, a->sensitivity);
}

int bfx_spell_memo_get(bfx_conn *c, bf_model *m, bf_spell_text *x, int thorough, double sensitivity,
                       int count, int no_lru, const char **from, bfx_times *tm) {
  bf_tokens key;
  if (memo_key(x, thorough, sensitivity, &key) != 0) return -1;
  bfx_result res = {0};
  unpack_arg a = {m, x, sensitivity};
  int how = (count ? BFX_GET_COUNT : 0) | (no_lru ? BFX_GET_NO_LRU : 0);
  int hit = bfx_cache_get_checked(c, m, &key, 1, how, unpack_check, &a, &res);
  if (hit == 1 && from) *from = res.source;
  if (tm) tm->cache_read_ns += res.times.cache_read_ns;
  bfx_result_clear(&res);
  sqlite3_free(key.ids);
  return hit;
}

int64_t bfx_spell_memo_put(bfx_conn *c, bf_model *m, int n, const bf_spell_text *xs, int thorough,
                           double sensitivity, int64_t room, bfx_times *tm) {
  if (c->cache_mode == BFX_CACHE_OFF || n < 1) return 0;
  int k = 1, nkeys = 0;
  for (int i = 0; i < n; i++)
    if (xs[i].n_found <= MAX_FINDINGS && 1 + PER_FINDING * xs[i].n_found > k)
      k = 1 + PER_FINDING * xs[i].n_found;
  bf_tokens *keys = sqlite3_malloc64((size_t)n * sizeof *keys);
  bf_cand *cands = sqlite3_malloc64((size_t)n * (size_t)k * sizeof *cands);
  int64_t written = 0;
  if (!keys || !cands) goto done;
  for (int i = 0; i < n; i++) {
    const bf_spell_text *x = &xs[i];
    if (x->n_found > MAX_FINDINGS) continue;
    if (memo_key(x, thorough, sensitivity, &keys[nkeys]) != 0) goto done;
    bf_cand *v = cands + (size_t)nkeys * (size_t)k;
    memset(v, 0, (size_t)k * sizeof *v);
    v[0].id = x->n_found;
    for (int j = 0; j < x->n_found; j++) {
      const bf_suspect *f = &x->found[j];
      bf_cand *at = v + 1 + PER_FINDING * j;
      at[0] = (bf_cand){.id = f->token, .prob = (float)f->kind / 4.0f};
      at[1] = (bf_cand){.id = f->written_id, .prob = f->written_score};
      at[2] = (bf_cand){.id = f->suggestion_id, .prob = f->suggestion_score};
    }
    nkeys++;
  }
  written = bfx_cache_put_batch(c, m, nkeys, keys, k, cands, room, tm);
done:
  if (keys)
    for (int i = 0; i < nkeys; i++) sqlite3_free(keys[i].ids);
  sqlite3_free(keys);
  sqlite3_free(cands);
  return written;
}
