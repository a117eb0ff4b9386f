/*
** confusion.c — bf_confusables: the confusion sets of confusion.h, read from
** the generated table confusion_table.inc (model/build_confusion.py; data
** from Unicode's Unihan, ext/engine/LICENSE-Unicode.txt).
**
** The table stores each character's syllables, each syllable's most frequent
** characters, each syllable's similar syllables and each character's shape
** neighbours, as uint16 indices (about 110 KB in the .so).  A character's
** set is assembled on each call, in three passes (same sound, similar sound,
** similar shape); a candidate gets the closest kind any of its readings
** gives it, so a shape neighbour that shares a syllable is "same sound".
** model/build_confusion.py --show prints the same sets from Python (the C
** test's reference).
*/
#include "confusion.h"

#include <string.h>

#include "confusion_table.inc"

_Static_assert(BF_CONF_MAX_COUNT <= BF_CONFUSABLES_MAX, "BF_CONFUSABLES_MAX is too small");

/* The index of code point c in bf_conf_char, or -1. */
static long char_index(uint32_t c) {
  if (c > 0xFFFF) return -1;
  long lo = 0, hi = BF_CONF_NCHARS - 1;
  while (lo <= hi) {
    long mid = lo + (hi - lo) / 2;
    if (bf_conf_char[mid] == c) return mid;
    if (bf_conf_char[mid] < c) lo = mid + 1;
    else hi = mid - 1;
  }
  return -1;
}

/* Whether (a, b) is a simplified/traditional pair (bf_conf_excluded, sorted pairs). */
static int excluded(unsigned a, unsigned b) {
  uint32_t key = (uint32_t)a << 16 | b;
  long lo = 0, hi = BF_CONF_NEXCLUDED - 1;
  while (lo <= hi) {
    long mid = lo + (hi - lo) / 2;
    uint32_t k = (uint32_t)bf_conf_excluded[2 * mid] << 16 | bf_conf_excluded[2 * mid + 1];
    if (k == key) return 1;
    if (k < key) lo = mid + 1;
    else hi = mid - 1;
  }
  return 0;
}

/* Whether character o has one of the syllables in syl[0..n). */
static int reads_one_of(unsigned o, const uint16_t *syl, size_t n) {
  for (unsigned r = bf_conf_reading_start[o]; r < bf_conf_reading_start[o + 1]; r++)
    for (size_t k = 0; k < n; k++)
      if (bf_conf_reading[r] == syl[k]) return 1;
  return 0;
}

/* What one call collects: the written character's syllables and their similar
** syllables, the characters already given, the output. */
typedef struct {
  unsigned written;
  uint16_t mine[32], near[128];
  size_t n_mine, n_near;
  uint8_t seen[(BF_CONF_NCHARS + 7) / 8];
  bf_confusable *out;
  size_t max, count;
} collect;

static bf_confusion_kind kind_of(const collect *c, unsigned o) {
  if (reads_one_of(o, c->mine, c->n_mine)) return BF_CONFUSE_SAME_SOUND;
  if (reads_one_of(o, c->near, c->n_near)) return BF_CONFUSE_SIMILAR_SOUND;
  return BF_CONFUSE_SIMILAR_SHAPE;
}

/* Offer character o for kind want: taken when new, not excluded and of that kind. */
static void offer(collect *c, unsigned o, bf_confusion_kind want) {
  if (c->seen[o / 8] & (1u << (o % 8))) return;
  if (kind_of(c, o) != want || excluded(c->written, o)) return;
  c->seen[o / 8] |= (uint8_t)(1u << (o % 8));
  if (c->count < c->max) {
    c->out[c->count].codepoint = bf_conf_char[o];
    c->out[c->count].kind = want;
  }
  c->count++;
}

/* The first keep characters of syllable s, for kind want. */
static void offer_syllable(collect *c, unsigned s, size_t keep, bf_confusion_kind want) {
  unsigned from = bf_conf_member_start[s], to = bf_conf_member_start[s + 1];
  if (to - from > keep) to = from + (unsigned)keep;
  for (unsigned m = from; m < to; m++) offer(c, bf_conf_member[m], want);
}

static void offer_shapes(collect *c, bf_confusion_kind want) {
  for (unsigned k = bf_conf_shape_start[c->written]; k < bf_conf_shape_start[c->written + 1]; k++)
    offer(c, bf_conf_shape[k], want);
}

size_t bf_confusables(uint32_t written, bf_confusable *out, size_t max) {
  long w = char_index(written);
  if (w < 0) return 0;
  collect c;
  memset(&c, 0, sizeof c);
  c.written = (unsigned)w;
  c.out = out;
  c.max = out ? max : 0;
  c.seen[w / 8] |= (uint8_t)(1u << (w % 8));
  for (unsigned r = bf_conf_reading_start[w]; r < bf_conf_reading_start[w + 1]; r++) {
    uint16_t s = bf_conf_reading[r];
    if (c.n_mine < sizeof c.mine / sizeof c.mine[0]) c.mine[c.n_mine++] = s;
    for (unsigned k = bf_conf_similar_start[s]; k < bf_conf_similar_start[s + 1]; k++)
      if (c.n_near < sizeof c.near / sizeof c.near[0]) c.near[c.n_near++] = bf_conf_similar[k];
  }
  for (size_t k = 0; k < c.n_mine; k++)
    offer_syllable(&c, c.mine[k], BF_CONF_SAME_SOUND_KEEP, BF_CONFUSE_SAME_SOUND);
  offer_shapes(&c, BF_CONFUSE_SAME_SOUND);
  for (size_t k = 0; k < c.n_near; k++)
    offer_syllable(&c, c.near[k], BF_CONF_SIMILAR_SOUND_KEEP, BF_CONFUSE_SIMILAR_SOUND);
  offer_shapes(&c, BF_CONFUSE_SIMILAR_SOUND);
  offer_shapes(&c, BF_CONFUSE_SIMILAR_SHAPE);
  return c.count;
}

const char *bf_confusion_kind_name(bf_confusion_kind kind) {
  switch (kind) {
    case BF_CONFUSE_SAME_SOUND: return "same sound";
    case BF_CONFUSE_SIMILAR_SOUND: return "similar sound";
    case BF_CONFUSE_SIMILAR_SHAPE: return "similar shape";
  }
  return "unknown";
}
