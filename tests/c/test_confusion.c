/*
** test_confusion.c — unit tests of ext/engine/confusion.c, bf_confusables:
** known confusions with their kinds (在/再, 的/地/得, 以/已 same sound; 己/已,
** 未/末, 拨/拔 similar shape; 四/是 similar sound), simplified/traditional pairs
** left out, the order of the kinds, the count when out is too small or NULL,
** characters outside the table (ASCII, kana, a Han character beyond the
** vocabulary, beyond U+FFFF and U+10FFFF), the kind names.
**
**   test_confusion          the checks
**   test_confusion --dump   every character's set, one line each ("U+5728\tU+518D:1 ..."),
**                           compared by tests/c/t_c.sh with model/build_confusion.py --dump
*/
#include <stdint.h>

#include "confusion.h"
#include "testlib.h"

/* The kind bf_confusables gives `meant` for `written`, or 0 when absent. */
static int kind_in(uint32_t written, uint32_t meant) {
  bf_confusable c[BF_CONFUSABLES_MAX];
  size_t n = bf_confusables(written, c, BF_CONFUSABLES_MAX);
  for (size_t i = 0; i < n && i < BF_CONFUSABLES_MAX; i++)
    if (c[i].codepoint == meant) return (int)c[i].kind;
  return 0;
}

static void check_pair(const char *name, uint32_t written, uint32_t meant, int want) {
  int got = kind_in(written, meant);
  CHECKF(name, got == want, "U+%04X for U+%04X: kind %d (%s), expected %d (%s)", (unsigned)meant,
         (unsigned)written, got, got ? bf_confusion_kind_name((bf_confusion_kind)got) : "absent",
         want, want ? bf_confusion_kind_name((bf_confusion_kind)want) : "absent");
}

static void test_known_pairs(void) {
  check_pair("confusables: 在 -> 再 same sound", 0x5728, 0x518D, BF_CONFUSE_SAME_SOUND);
  check_pair("confusables: 再 -> 在 same sound", 0x518D, 0x5728, BF_CONFUSE_SAME_SOUND);
  check_pair("confusables: 的 -> 地 same sound", 0x7684, 0x5730, BF_CONFUSE_SAME_SOUND);
  check_pair("confusables: 的 -> 得 same sound", 0x7684, 0x5F97, BF_CONFUSE_SAME_SOUND);
  check_pair("confusables: 地 -> 的 same sound", 0x5730, 0x7684, BF_CONFUSE_SAME_SOUND);
  check_pair("confusables: 得 -> 地 same sound", 0x5F97, 0x5730, BF_CONFUSE_SAME_SOUND);
  check_pair("confusables: 以 -> 已 same sound", 0x4EE5, 0x5DF2, BF_CONFUSE_SAME_SOUND);
  check_pair("confusables: 已 -> 以 same sound", 0x5DF2, 0x4EE5, BF_CONFUSE_SAME_SOUND);
  check_pair("confusables: 己 -> 已 similar shape", 0x5DF1, 0x5DF2, BF_CONFUSE_SIMILAR_SHAPE);
  check_pair("confusables: 已 -> 己 similar shape", 0x5DF2, 0x5DF1, BF_CONFUSE_SIMILAR_SHAPE);
  check_pair("confusables: 未 -> 末 similar shape", 0x672A, 0x672B, BF_CONFUSE_SIMILAR_SHAPE);
  check_pair("confusables: 拨 -> 拔 similar shape", 0x62E8, 0x62D4, BF_CONFUSE_SIMILAR_SHAPE);
  check_pair("confusables: 戊 -> 戌 similar shape", 0x620A, 0x620C, BF_CONFUSE_SIMILAR_SHAPE);
  /* 候 hòu / 侯 hóu: close in shape, and one syllable without tones: same sound wins */
  check_pair("confusables: 侯 -> 候 same sound (closest kind)", 0x4FAF, 0x5019,
             BF_CONFUSE_SAME_SOUND);
  check_pair("confusables: 四 -> 是 similar sound (s/sh)", 0x56DB, 0x662F,
             BF_CONFUSE_SIMILAR_SOUND);
  check_pair("confusables: 你 -> 里 similar sound (n/l)", 0x4F60, 0x91CC, BF_CONFUSE_SIMILAR_SOUND);
  check_pair("confusables: 今 -> 经 similar sound (in/ing)", 0x4ECA, 0x7ECF,
             BF_CONFUSE_SIMILAR_SOUND);
  /* simplified/traditional pairs are a choice of script */
  check_pair("confusables: 为 -> 為 left out (variants)", 0x4E3A, 0x70BA, 0);
  check_pair("confusables: 們 -> 们 left out (variants)", 0x5011, 0x4EEC, 0);
  check_pair("confusables: 在 -> 是 absent (unrelated)", 0x5728, 0x662F, 0);
}

static void test_order_and_counts(void) {
  bf_confusable c[BF_CONFUSABLES_MAX];
  size_t n = bf_confusables(0x7684, c, BF_CONFUSABLES_MAX); /* 的 */
  CHECKF("confusables: 的 has some, within BF_CONFUSABLES_MAX", n >= 3 && n <= BF_CONFUSABLES_MAX,
         "n = %zu", n);
  int sorted = 1, self = 0, dup = 0;
  for (size_t i = 0; i < n; i++) {
    if (i && c[i].kind < c[i - 1].kind) sorted = 0;
    if (c[i].codepoint == 0x7684) self = 1;
    for (size_t j = 0; j < i; j++) dup |= c[j].codepoint == c[i].codepoint;
  }
  CHECK("confusables: kinds in order (same sound, similar sound, similar shape)", sorted);
  CHECK("confusables: never the written character", !self);
  CHECK("confusables: each character once", !dup);
  CHECKF("confusables: 的's first is 地 or 得 (the most frequent de)",
         n > 0 && (c[0].codepoint == 0x5730 || c[0].codepoint == 0x5F97), "first U+%04X",
         n ? (unsigned)c[0].codepoint : 0u);

  CHECKF("confusables: out NULL, max 0 gives the count", bf_confusables(0x7684, NULL, 0) == n,
         "%zu vs %zu", bf_confusables(0x7684, NULL, 0), n);
  CHECKF("confusables: out NULL with max > 0 writes nothing, gives the count",
         bf_confusables(0x7684, NULL, 5) == n, "%zu", bf_confusables(0x7684, NULL, 5));
  bf_confusable small[3];
  memset(small, 0xAB, sizeof small);
  bf_confusable guard[2];
  memset(guard, 0xCD, sizeof guard);
  size_t m = bf_confusables(0x7684, small, 2);
  int untouched = small[2].codepoint == 0xABABABABu;
  CHECKF("confusables: max 2 writes 2, returns all",
         m == n && untouched && small[0].codepoint == c[0].codepoint &&
           small[1].codepoint == c[1].codepoint && small[1].kind == c[1].kind,
         "m %zu n %zu untouched %d", m, n, untouched);
  (void)guard;

  /* every character of the table: within the bound, sorted by kind, no self */
  size_t most = 0, chars = 0, bad = 0;
  for (uint32_t cp = 0x3400; cp <= 0x9FFF; cp++) {
    size_t k = bf_confusables(cp, c, BF_CONFUSABLES_MAX);
    if (!k) continue;
    chars++;
    if (k > most) most = k;
    for (size_t i = 0; i < k && i < BF_CONFUSABLES_MAX; i++)
      if (c[i].codepoint == cp || (i && c[i].kind < c[i - 1].kind) || c[i].kind < 1 ||
          c[i].kind > 3)
        bad++;
  }
  CHECKF("confusables: every character's set well formed", bad == 0 && most <= BF_CONFUSABLES_MAX,
         "%zu bad entries, the largest set %zu", bad, most);
  CHECKF("confusables: most of the 7,322 characters have a set", chars > 7000 && chars <= 7322,
         "%zu characters", chars);
}

static void test_outside(void) {
  bf_confusable c[4];
  CHECK("confusables: ASCII 'a' none", bf_confusables('a', c, 4) == 0);
  CHECK("confusables: NUL none", bf_confusables(0, c, 4) == 0);
  CHECK("confusables: kana あ none", bf_confusables(0x3042, c, 4) == 0);
  CHECK("confusables: fullwidth comma none", bf_confusables(0xFF0C, c, 4) == 0);
  CHECK("confusables: 𠀀 (U+20000, not in the vocab) none", bf_confusables(0x20000, c, 4) == 0);
  CHECK("confusables: U+10FFFF none", bf_confusables(0x10FFFF, c, 4) == 0);
  CHECK("confusables: beyond Unicode none", bf_confusables(0xFFFFFFFFu, c, 4) == 0);
  CHECK("confusables: a surrogate none", bf_confusables(0xD800, c, 4) == 0);
  CHECK("confusables: 龘 (U+9F98, not in the vocab) none", bf_confusables(0x9F98, c, 4) == 0);
}

static void test_names(void) {
  CHECK("kind name: same sound",
        strcmp(bf_confusion_kind_name(BF_CONFUSE_SAME_SOUND), "same sound") == 0);
  CHECK("kind name: similar sound",
        strcmp(bf_confusion_kind_name(BF_CONFUSE_SIMILAR_SOUND), "similar sound") == 0);
  CHECK("kind name: similar shape",
        strcmp(bf_confusion_kind_name(BF_CONFUSE_SIMILAR_SHAPE), "similar shape") == 0);
  CHECK("kind name: other values",
        strcmp(bf_confusion_kind_name((bf_confusion_kind)0), "unknown") == 0 &&
          strcmp(bf_confusion_kind_name((bf_confusion_kind)9), "unknown") == 0);
}

static int dump(void) {
  bf_confusable c[BF_CONFUSABLES_MAX];
  for (uint32_t cp = 0; cp <= 0xFFFF; cp++) {
    size_t n = bf_confusables(cp, c, BF_CONFUSABLES_MAX);
    if (!n) continue;
    printf("U+%04X\t", (unsigned)cp);
    for (size_t i = 0; i < n; i++)
      printf("%sU+%04X:%d", i ? " " : "", (unsigned)c[i].codepoint, (int)c[i].kind);
    printf("\n");
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--dump") == 0) return dump();
  test_known_pairs();
  test_order_and_counts();
  test_outside();
  test_names();
  TL_EXIT();
}
