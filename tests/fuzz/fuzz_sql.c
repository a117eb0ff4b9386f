/*
** fuzz_sql.c — the SQL surface of the extension: bert_fill, fill_candidates,
** bert_tokenize, bert_prefill, bert_load and the settings functions, called
** with arguments of every type the fuzzer can think of (NULL, integers,
** floats, text, blobs, invalid UTF-8, huge strings, zeroblobs, k = 0 /
** negative / huge / fractional / text) on an in-memory database, with the
** extension linked in (ext/sqlite/*.c, registered with sqlite3_auto_extension
** so that SQLite hands it its API table as to a loaded extension) and the
** tiny test model ($BF_FUZZ_MODELS/tiny) as BERTFILL_MODEL.
**
** An input is a little program: up to 24 operations, each one opcode byte
** followed by its arguments, each argument a type byte plus payload (see
** arg() below).  Invariants besides "no crash, no sanitizer report":
**   - a statement ends in SQLITE_ROW/SQLITE_DONE or an error with a message,
**     never SQLITE_MISUSE, SQLITE_CORRUPT or SQLITE_INTERNAL;
**   - every error message is valid UTF-8 (user input in it escaped);
**   - after an error the connection still works (SELECT 1 gives 1);
**   - fill_candidates rows: rank 1..k, mask 0.., score in [0,1] and not
**     increasing with rank, token_id in range;
**   - bert_fill(t) equals the sequence of rank 1 for a text with one mask;
**   - at the end PRAGMA integrity_check is ok and sqlite3_close succeeds
**     (no statement left open by the virtual table).
*/
#include <math.h>
#include <sqlite3.h>
#include "fuzz_common.h"

int sqlite3_bertfill_init(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi);

static char tiny[1024], legacy[1024];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  fuzz_model_dir("tiny", tiny, sizeof tiny);
  fuzz_model_dir("tiny-legacy", legacy, sizeof legacy);
  if (!fuzz_is_dir(tiny)) { fprintf(stderr, "fuzz_sql: %s missing (make models)\n", tiny); abort(); }
  setenv("BERTFILL_MODEL", tiny, 1);
  setenv("OPENBLAS_NUM_THREADS", "1", 1);
  setenv("BERTFILL_PROGRESS", "0", 1);
  sqlite3_auto_extension((void (*)(void))sqlite3_bertfill_init);
  return 0;
}

/* ---- reading the input ---- */
typedef struct { const uint8_t *p; size_t n; } in_t;

static unsigned byte(in_t *in) {
  if (!in->n) return 0;
  in->n--;
  return *in->p++;
}
static uint64_t u64(in_t *in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)byte(in) << (8 * i);
  return v;
}
/* Up to max bytes: a length byte, then that many bytes. */
/* Two bytes, little-endian (in sequence: the order of two byte() calls in
** one expression is unspecified, and gcc and clang differ). */
static unsigned u16(in_t *in) {
  unsigned lo = byte(in);
  unsigned hi = byte(in);
  return lo | (hi << 8);
}
static const uint8_t *bytes(in_t *in, size_t *len) {
  size_t l = byte(in);
  if (l > in->n) l = in->n;
  const uint8_t *p = in->p;
  in->p += l;
  in->n -= l;
  *len = l;
  return p;
}

static const char *const words[] = {
  "今天天气真[MASK]啊", "[MASK]", "[MASK][MASK][MASK]", "ab[MASK]c", "a b[MASK]", "AB[MASK]",
  "[mask]", " [MASK] ", "[MASK", "MASK]", "[[MASK]]", "\xe2\x80\xa8[MASK]", "", " ", "x",
  "[CLS][SEP][PAD][UNK]", "[MASK]\xc3\xa9\xcc\x81", "\xef\xbc\xbb" "MASK\xef\xbc\xbd",
  "1.5", "-0", "on", "off", "memory", "clear", "k", "text", "ÄÖÜ[MASK]ß",
};
#define NWORDS (sizeof words / sizeof words[0])

/* Bind argument i of st from the input. */
static void arg(sqlite3_stmt *st, int i, in_t *in) {
  unsigned t = byte(in) % 13;
  size_t len;
  const uint8_t *p;
  switch (t) {
    case 0: sqlite3_bind_null(st, i); break;
    case 1: sqlite3_bind_int64(st, i, (sqlite3_int64)u64(in)); break;
    case 2: sqlite3_bind_int64(st, i, (int)u16(in) - 8); break;   /* -8 .. 65527 */
    case 3: { uint64_t b = u64(in); double d; memcpy(&d, &b, sizeof d); sqlite3_bind_double(st, i, d); break; }
    case 4: p = bytes(in, &len); sqlite3_bind_text(st, i, (const char *)p, (int)len, SQLITE_TRANSIENT); break;
    case 5: p = bytes(in, &len); sqlite3_bind_blob(st, i, p, (int)len, SQLITE_TRANSIENT); break;
    case 6: {                        /* text with byte 0x01 turned into [MASK] */
      p = bytes(in, &len);
      char *s = malloc(len * 6 + 1);
      size_t o = 0;
      for (size_t j = 0; j < len; j++) {
        if (p[j] == 1) { memcpy(s + o, "[MASK]", 6); o += 6; } else s[o++] = (char)p[j];
      }
      sqlite3_bind_text(st, i, s, (int)o, SQLITE_TRANSIENT);
      free(s);
      break;
    }
    case 7: {                        /* a huge string: a piece repeated */
      unsigned r = u16(in) * 4u;  /* up to 262140 times, 256 kB at most */
      const char *piece = words[byte(in) % NWORDS];
      size_t pl = strlen(piece);
      if (pl == 0) pl = 1, piece = "a";
      size_t total = pl * r;
      if (total > (1u << 18)) total = 1u << 18;   /* 256 kB: longer only slows the fuzzer */
      char *s = malloc(total + 1);
      for (size_t o = 0; o < total; o++) s[o] = piece[o % pl];
      sqlite3_bind_text(st, i, s, (int)total, SQLITE_TRANSIENT);
      free(s);
      break;
    }
    case 8: sqlite3_bind_zeroblob(st, i, (int)(byte(in) * 97)); break;
    case 9: case 10: case 11: sqlite3_bind_text(st, i, words[byte(in) % NWORDS], -1, SQLITE_STATIC); break;
    default: {                       /* interesting integers for k and settings */
      static const sqlite3_int64 ks[] = { 0, -1, 1, 2, 5, 999, 1000, 1001, 600, 601, 100000,
                                          2147483647LL, -2147483648LL, 9223372036854775807LL,
                                          (-9223372036854775807LL - 1) };
      sqlite3_bind_int64(st, i, ks[byte(in) % (sizeof ks / sizeof ks[0])]);
    }
  }
}

/* ---- running statements ---- */

static void check_usable(sqlite3 *db) {
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(db, "SELECT 1", -1, &st, NULL);
  FUZZ_CHECK(rc == SQLITE_OK, "SELECT 1 does not prepare: %s", sqlite3_errmsg(db));
  rc = sqlite3_step(st);
  FUZZ_CHECK(rc == SQLITE_ROW && sqlite3_column_int(st, 0) == 1, "SELECT 1 gives rc %d: %s", rc, sqlite3_errmsg(db));
  sqlite3_finalize(st);
}

static void check_end(sqlite3 *db, int rc, const char *sql) {
  if (rc == SQLITE_DONE) return;
  int prim = rc & 0xff;
  FUZZ_CHECK(prim != SQLITE_MISUSE && prim != SQLITE_CORRUPT && prim != SQLITE_INTERNAL,
             "%s: rc %d (%s)", sql, rc, sqlite3_errmsg(db));
  const char *m = sqlite3_errmsg(db);
  FUZZ_CHECK(m && *m, "%s: error %d without a message", sql, rc);
  /* clients decode messages as UTF-8 (Python: UnicodeDecodeError instead
  ** of the error), so user input in them must be escaped */
  if (!fuzz_utf8_valid((const unsigned char *)m, strlen(m))) {
    fprintf(stderr, "message:");
    for (const char *p = m; *p; p++) fprintf(stderr, " %02x", (unsigned char)*p);
    fputc('\n', stderr);
  }
  FUZZ_CHECK(fuzz_utf8_valid((const unsigned char *)m, strlen(m)), "%s: message not valid UTF-8",
             sql);
}

/* Step st to the end, reading every column; returns the final rc. */
static int drain(sqlite3_stmt *st) {
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    for (int c = 0; c < sqlite3_column_count(st); c++) {
      (void)sqlite3_column_text(st, c);
      (void)sqlite3_column_bytes(st, c);
    }
  }
  return rc;
}

static sqlite3_stmt *prep(sqlite3 *db, const char *sql) {
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
  FUZZ_CHECK(rc == SQLITE_OK, "prepare %s: %s", sql, sqlite3_errmsg(db));
  return st;
}

/* Generic: prepare, bind nargs arguments from the input, run, check. */
static void run_sql(sqlite3 *db, const char *sql, int nargs, in_t *in) {
  sqlite3_stmt *st = prep(db, sql);
  for (int i = 1; i <= nargs; i++) arg(st, i, in);
  int rc = drain(st);
  check_end(db, rc, sql);
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) check_usable(db);
}

/* fill_candidates with the row invariants; for one-mask texts also compare
** with bert_fill. */
static void candidates(sqlite3 *db, in_t *in, int with_k) {
  const char *sql = with_k
    ? "SELECT mask, rank, token, token_id, score, sequence, text, k FROM fill_candidates(?1, ?2)"
    : "SELECT mask, rank, token, token_id, score, sequence, text, k FROM fill_candidates(?1)";
  sqlite3_stmt *st = prep(db, sql);
  arg(st, 1, in);
  if (with_k) arg(st, 2, in);
  int rc, rows = 0, last_mask = -1, last_rank = 0, masks = 0;
  double last_score = 2;
  char *seq1 = NULL, *text1 = NULL;
  int text1_len = 0, seq1_len = 0;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    int mask = sqlite3_column_int(st, 0), rank = sqlite3_column_int(st, 1);
    sqlite3_int64 id = sqlite3_column_int64(st, 3);
    double score = sqlite3_column_double(st, 4);
    sqlite3_int64 k = sqlite3_column_int64(st, 7);
    (void)sqlite3_column_text(st, 2);
    (void)sqlite3_column_text(st, 6);
    FUZZ_CHECK(mask >= 0 && rank >= 1 && rank <= k && k >= 1 && k <= 1000, "mask %d rank %d k %lld", mask, rank, (long long)k);
    FUZZ_CHECK(id >= 0 && id < 100000, "token_id %lld", (long long)id);
    FUZZ_CHECK(score >= 0 && score <= 1.0001, "score %g", score);
    if (mask != last_mask) {
      FUZZ_CHECK(mask == last_mask + 1 && rank == 1, "mask %d after %d, rank %d", mask, last_mask, rank);
      last_mask = mask; masks++;
    } else {
      FUZZ_CHECK(rank == last_rank + 1 && score <= last_score + 1e-6, "rank %d after %d, score %g after %g",
                 rank, last_rank, score, last_score);
    }
    if (rank == 1 && mask == 0) {
      free(seq1);
      free(text1);
      text1 = NULL;
      const unsigned char *tx = sqlite3_column_text(st, 6);
      text1_len = sqlite3_column_bytes(st, 6);
      if (tx) { text1 = malloc((size_t)text1_len + 1); memcpy(text1, tx, (size_t)text1_len + 1); }
      const char *s = (const char *)sqlite3_column_text(st, 5);
      seq1_len = sqlite3_column_bytes(st, 5);
      seq1 = NULL;
      if (s) { seq1 = malloc((size_t)seq1_len + 1); memcpy(seq1, s, (size_t)seq1_len + 1); }
    }
    last_rank = rank; last_score = score;
    rows++;
  }
  check_end(db, rc, sql);
  if (rc == SQLITE_DONE && masks == 1 && seq1 && text1) {
    /* bert_fill of the same text must give the rank-1 sequence */
    sqlite3_stmt *f = prep(db, "SELECT bert_fill(?1)");
    sqlite3_bind_text(f, 1, text1, text1_len, SQLITE_STATIC);
    int frc = sqlite3_step(f);
    FUZZ_CHECK(frc == SQLITE_ROW, "bert_fill after fill_candidates: %s", sqlite3_errmsg(db));
    const char *filled = (const char *)sqlite3_column_text(f, 0);
    int flen = sqlite3_column_bytes(f, 0);
    if (!(filled && flen == seq1_len && memcmp(filled, seq1, (size_t)flen) == 0)) {
      fprintf(stderr, "text (%d bytes):", text1_len);
      for (int i = 0; i < text1_len; i++) fprintf(stderr, " %02x", (unsigned char)text1[i]);
      fprintf(stderr, "\nbert_fill (%d bytes):", flen);
      for (int i = 0; filled && i < flen; i++) fprintf(stderr, " %02x", (unsigned char)filled[i]);
      fprintf(stderr, "\nsequence (%d bytes):", seq1_len);
      for (int i = 0; i < seq1_len; i++) fprintf(stderr, " %02x", (unsigned char)seq1[i]);
      fputc('\n', stderr);
    }
    FUZZ_CHECK(filled && flen == seq1_len && memcmp(filled, seq1, (size_t)flen) == 0,
               "bert_fill '%s' but rank-1 sequence '%s'", filled ? filled : "(null)", seq1);
    sqlite3_finalize(f);
  }
  free(text1);
  free(seq1);
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) check_usable(db);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  in_t in = { data, size };
  sqlite3 *db = NULL;
  int rc = sqlite3_open(":memory:", &db);
  FUZZ_CHECK(rc == SQLITE_OK, "open");
  for (int op = 0; op < 24 && in.n > 0; op++) {
    switch (byte(&in) % 16) {
      case 0: case 1: run_sql(db, "SELECT bert_fill(?1)", 1, &in); break;
      case 2: case 3: candidates(db, &in, 1); break;
      case 4: candidates(db, &in, 0); break;
      case 5: run_sql(db, "SELECT bert_tokenize(?1)", 1, &in); break;
      case 6: run_sql(db, "SELECT bert_prefill(x) FROM (SELECT ?1 AS x UNION ALL SELECT ?2 UNION ALL SELECT ?3)", 3, &in); break;
      case 7: run_sql(db, "SELECT count(*), sum(score) FROM fill_candidates WHERE text = ?1 AND k = ?2", 2, &in); break;
      case 8: run_sql(db, "SELECT * FROM fill_candidates WHERE k = ?1", 1, &in); break;
      case 9:
        run_sql(db, "CREATE TEMP TABLE IF NOT EXISTS t(x)", 0, &in);
        run_sql(db, "INSERT INTO t VALUES (?1), (?2)", 2, &in);
        run_sql(db, "SELECT t.rowid, c.* FROM t, fill_candidates(t.x, ?1) c", 1, &in);
        break;
      case 10: {
        /* bert_load: the test models, NULL, '' or a bad directory */
        sqlite3_stmt *st = prep(db, "SELECT bert_load(?1)");
        unsigned w = byte(&in) % 6;
        if (w == 0) sqlite3_bind_text(st, 1, tiny, -1, SQLITE_STATIC);
        else if (w == 1) sqlite3_bind_text(st, 1, legacy, -1, SQLITE_STATIC);
        else if (w == 2) sqlite3_bind_null(st, 1);
        else if (w == 3) sqlite3_bind_text(st, 1, "", 0, SQLITE_STATIC);
        else if (w == 4) sqlite3_bind_text(st, 1, "/nonexistent/bertfill-fuzz", -1, SQLITE_STATIC);
        else arg(st, 1, &in);
        rc = drain(st);
        check_end(db, rc, "bert_load");
        sqlite3_finalize(st);
        if (rc != SQLITE_DONE) check_usable(db);
        break;
      }
      case 11: run_sql(db, "SELECT bert_cache(?1)", 1, &in); break;
      case 12: run_sql(db, "SELECT bert_cache_limit(?1), bert_cache_lru(?2)", 2, &in); break;
      case 13: run_sql(db, "SELECT bert_max_concurrent(?1), bert_busy_timeout(?2)", 2, &in);
               run_sql(db, "SELECT bert_max_concurrent(0), bert_busy_timeout(2000)", 0, &in); break;
      case 14: run_sql(db, "SELECT bert_fill(?1), bert_fill(?2) FROM (SELECT 1 UNION ALL SELECT 2)", 2, &in); break;
      case 15: run_sql(db, "SELECT sum(length(bert_fill(value))) FROM json_each(json_array(?1, ?2, ?3))", 3, &in); break;
    }
  }
  sqlite3_stmt *st = prep(db, "PRAGMA integrity_check");
  rc = sqlite3_step(st);
  FUZZ_CHECK(rc == SQLITE_ROW && strcmp((const char *)sqlite3_column_text(st, 0), "ok") == 0, "integrity_check");
  sqlite3_finalize(st);
  rc = sqlite3_close(db);
  FUZZ_CHECK(rc == SQLITE_OK, "close: %d (a statement left open?)", rc);
  return 0;
}
