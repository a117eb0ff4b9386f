/*
** encode.c — one encoder run on a slot of the overload guard (see
** encode.h).  Every encoder run of the SQLite layer goes through
** bfx_encode_on, which counts it in the process-wide stats: runs, batches
** (runs of more than one sequence), sequences, tokens, masks, and the
** encode and topk stages.
*/
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3
#include "encode.h"
#include "bounds.h"
#include "guard.h"
#include "stats.h"

static int encode_on(bf_model *m, bf_run *run, int nseq, const bf_tokens *seqs, int k, bf_cand *out,
                     const int32_t *want, float *want_prob, bfx_times *tm, bfx_err *e);

int bfx_encode_scored(bf_model *m, int nseq, const bf_tokens *seqs, int k, bf_cand *out,
                      const int32_t *want, float *want_prob, bfx_times *tm, bfx_err *e) {
  uint64_t waited = 0;
  bf_run *run = bfx_guard_acquire(&waited, e);
  bf_stats_time(BF_ST_QUEUE, waited);
  if (tm) tm->queue_ns += waited;
  if (!run) return e->rc;
  int rc = encode_on(m, run, nseq, seqs, k, out, want, want_prob, tm, e);
  bfx_guard_release(run);
  return rc;
}

int bfx_encode(bf_model *m, int nseq, const bf_tokens *seqs, int k, bf_cand *out, bfx_times *tm,
               bfx_err *e) {
  return bfx_encode_scored(m, nseq, seqs, k, out, NULL, NULL, tm, e);
}

const char *bfx_lead_name(int lead) {
  static const char *const names[] = {NULL,    "alone", "queue", "post",
                                      "woken", "timer", "slot",  "kept"};
  return lead > 0 && lead < (int)(sizeof names / sizeof names[0]) ? names[lead] : NULL;
}

int bfx_timeline(bfx_times *tm, const bfx_stamps *st) {
  if (!(st->posted <= st->taken && st->taken <= st->run0 && st->run0 <= st->run1 &&
        st->run1 <= st->done && st->done <= st->back && st->handover <= st->taken - st->posted &&
        st->seqs >= 1 && st->seqs <= 1 << 20))
    return 0;
  uint64_t wait = st->taken - st->posted, start = st->run0 - st->taken, write = st->done - st->run1,
           wake = st->back - st->done;
  bf_stats_time(BF_ST_BATCH_WAIT, wait);
  bf_stats_time(BF_ST_BATCH_START, start);
  bf_stats_time(BF_ST_BATCH_WRITE, write);
  bf_stats_time(BF_ST_BATCH_WAKE, wake);
  bf_stats_time(BF_ST_LEAD_HANDOVER, st->handover);
  if (tm) {
    tm->wait_ns += wait;
    tm->start_ns += start;
    tm->write_ns += write;
    tm->wake_ns += wake;
    tm->handover_ns += st->handover;
    tm->batch_seqs = st->seqs;
    tm->leader_pid = st->leader_pid;
    tm->lead = st->lead;
  }
  return 1;
}

int bfx_encode_on(bf_model *m, bf_run *run, int nseq, const bf_tokens *seqs, int k, bf_cand *out,
                  bfx_times *tm, bfx_err *e) {
  return encode_on(m, run, nseq, seqs, k, out, NULL, NULL, tm, e);
}

static int encode_on(bf_model *m, bf_run *run, int nseq, const bf_tokens *seqs, int k, bf_cand *out,
                     const int32_t *want, float *want_prob, bfx_times *tm, bfx_err *e) {
  char msg[256] = "";
  int rc = bf_fill_scored(m, run, nseq, seqs, k, out, want, want_prob, msg, sizeof msg);
  if (rc != BF_OK) {
    bfx_err_engine(e, "bertfill", rc, msg);
    return e->rc;
  }
  const bf_timings *t = bf_run_timings(run);
  uint64_t enc = t->embed_ns + t->encode_ns + t->head_ns, topk = t->topk_ns;
  int tokens = t->tokens, masks = t->masks;
  if (tokens <= 0 || masks <= 0) { /* count from the input when the engine does not */
    tokens = masks = 0;
    for (int i = 0; i < nseq; i++)
      if (seqs[i].n_masks > 0) {
        tokens += seqs[i].n;
        masks += seqs[i].n_masks;
      }
  }
  bf_stats_add(BF_CT_ENCODER_RUNS, 1);
  if (nseq > 1) bf_stats_add(BF_CT_BATCHES, 1);
  bf_stats_add(BF_CT_SEQS, (uint64_t)nseq);
  bf_stats_add(BF_CT_TOKENS, (uint64_t)tokens);
  bf_stats_add(BF_CT_MASKS, (uint64_t)masks);
  bf_stats_batch(nseq);
  bf_stats_time(BF_ST_ENCODE, enc);
  bf_stats_time(BF_ST_TOPK, topk);
  if (tm) {
    tm->encode_ns += enc;
    tm->topk_ns += topk;
  }
  return SQLITE_OK;
}

int bfx_encode_spelling(bf_model *m, int ntext, bf_spell_text *texts, int thorough,
                        double sensitivity, bfx_times *tm, bfx_err *e) {
  uint64_t waited = 0;
  bf_run *run = bfx_guard_acquire(&waited, e);
  bf_stats_time(BF_ST_QUEUE, waited);
  if (tm) tm->queue_ns += waited;
  if (!run) return e->rc;
  int rc = bfx_encode_spelling_on(m, run, ntext, texts, thorough, sensitivity, tm, e);
  bfx_guard_release(run);
  return rc;
}

int bfx_encode_spelling_on(bf_model *m, bf_run *run, int ntext, bf_spell_text *texts, int thorough,
                           double sensitivity, bfx_times *tm, bfx_err *e) {
  bf_spell_opts o = {.thorough = thorough,
                     .sensitivity = sensitivity,
                     .max_tokens = BFX_BATCH_MAX_TOKENS};
  char msg[256] = "";
  uint64_t t0 = bf_now_ns();
  int rc = bf_spell_check(m, run, ntext, texts, &o, msg, sizeof msg);
  uint64_t dt = bf_now_ns() - t0;
  bf_stats_time(BF_ST_ENCODE, dt);
  if (tm) tm->encode_ns += dt;
  if (rc != BF_OK) {
    bfx_err_engine(e, "bertfill", rc, msg);
    return e->rc;
  }
  bf_stats_add(BF_CT_ENCODER_RUNS, 1);
  if (ntext > 1) bf_stats_add(BF_CT_BATCHES, 1);
  bf_stats_add(BF_CT_SEQS, (uint64_t)ntext);
  bf_stats_batch(ntext);
  return SQLITE_OK;
}
