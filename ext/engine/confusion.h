/*
** confusion.h — which characters a writer of a Chinese character may have
** meant: the confusion sets of fill_suspects and bert_correct (docs/spelling.md).
**
**   bf_confusable c[64];
**   size_t n = bf_confusables(0x5728, c, 64);     // 在
**   if (n > 64) { ...call again with room for n... }
**   for (size_t i = 0; i < n && i < 64; i++)
**     printf("U+%04X %s\n", c[i].codepoint, bf_confusion_kind_name(c[i].kind));
**   // 再 same sound, 載 same sound, ..., 摘 similar sound, ...
**
** The sets come from Unicode's Unihan database (kMandarin, kTGHZ2013,
** kHanyuPinlu; kCangjie, kFourCornerCode, kTotalStrokes), built into
** confusion_table.inc by model/build_confusion.py, for the 7,322 Han
** characters of bert-base-chinese's vocabulary (the shipped model's are
** among them).  Three kinds:
**   same sound     a shared toneless syllable (any modern reading of either
**                  character: 的 de/dì, 地 de/dì, 得 de/děi);
**   similar sound  syllables one "fuzzy pinyin" step apart: z/zh c/ch s/sh
**                  n/l r/l f/h, an/ang en/eng in/ing (and ian/iang, uan/uang);
**   similar shape  close Cangjie codes and/or the same four-corner code, at
**                  most 2 strokes apart (己/已/巳, 未/末, 拨/拔, 侯/候, 戊/戌).
** Each syllable offers its 24 most frequent characters, a similar syllable
** its 6, a character at most 6 shape neighbours.  Simplified/traditional
** pairs (为/為) are a choice of script, never confusables.  The table is
** constant data: every function here is thread-safe and allocates nothing.
*/
#ifndef BERTFILL_CONFUSION_H
#define BERTFILL_CONFUSION_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
  BF_CONFUSE_SAME_SOUND = 1, /* same toneless pinyin (any reading of either character) */
  BF_CONFUSE_SIMILAR_SOUND =
    2, /* pinyin one edit apart: zh/z ch/c sh/s n/l r/l f/h in/ing en/eng an/ang */
  BF_CONFUSE_SIMILAR_SHAPE = 3 /* similar shape (Cangjie / four-corner / strokes based) */
} bf_confusion_kind;

typedef struct {
  uint32_t codepoint;
  bf_confusion_kind kind;
} bf_confusable;

/* The characters a writer of `written` may have meant, each once with its
** closest kind (same sound before similar sound before similar shape), in a
** fixed order: every same-sound one (the written character's most used
** reading first, each syllable's characters most frequent first), then the
** similar-sound ones, then the similar-shape ones (most similar first).
** Writes at most max into out (out may be NULL when max is 0) and returns how
** many there are in all (call again with more room when larger; never more
** than BF_CONFUSABLES_MAX).  0 for a character not in the table (not a Han
** character, or none known).  Never includes `written` itself. */
size_t bf_confusables(uint32_t written, bf_confusable *out, size_t max);

/* An upper bound of bf_confusables' count for any character: room for this
** many always suffices. */
#define BF_CONFUSABLES_MAX 512

/* "same sound", "similar sound", "similar shape"; "unknown" for any other value. */
const char *bf_confusion_kind_name(bf_confusion_kind kind);

#endif
