/*
** prometheus.c — the process's statistics (ext/sqlite/stats.h) in the
** Prometheus text exposition format, version 0.0.4: what a /metrics
** endpoint serves and what node_exporter's textfile collector reads.
**
**   SELECT bert_stats('prometheus');
**
**   # HELP bertfill_calls_total Calls of bert_fill and fill_candidates ...
**   # TYPE bertfill_calls_total counter
**   bertfill_calls_total 1200
**   ...
**   # HELP bertfill_stage_seconds Time spent in each stage ...
**   # TYPE bertfill_stage_seconds histogram
**   bertfill_stage_seconds_bucket{stage="call",le="1.024e-06"} 0
**   ...
**   bertfill_stage_seconds_bucket{stage="call",le="+Inf"} 1200
**   bertfill_stage_seconds_sum{stage="call"} 41.2
**   bertfill_stage_seconds_count{stage="call"} 1200
**
** Names: every counter of bertfill_stats as bertfill_<name>_total (the
** same names: hit_lru, miss, err_input, busy, ...); the stages as one
** histogram, bertfill_stage_seconds, labelled with the stage names of
** bertfill_stats (stage="call" | "queue" | "tokenize" | "encode" | ...); the batch
** sizes of encoder runs as bertfill_batch_size (sum = sequences encoded);
** bertfill_since_reset_seconds, the age of the statistics.  Units are
** seconds, as Prometheus wants.  P95 of whole calls over five minutes:
**
**   histogram_quantile(0.95,
**     sum by (le) (rate(bertfill_stage_seconds_bucket{stage="call"}[5m])))
**
** Bucket edges: the stage histograms of stats.c are log-linear with 250
** buckets; the exposition keeps two edges per octave, 2^e and 1.5 x 2^e ns
** for 1 us to 137 s (56 buckets with +Inf), each an edge of stats.c's own
** buckets, so every cumulative count is exact (a duration equal to an edge,
** to the nanosecond, counts in the bucket above it).  The edges never change:
** rate() and histogram_quantile() work across scrapes and processes.
**
** Statistics are per process: serve this from the process that does the
** work (a sqlite3 shell started for the purpose sees only its own, empty,
** counters).  bert_stats_reset() zeroes the counters; Prometheus treats
** that as a counter reset.
*/
#include <stdio.h>

#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3
#include "prometheus.h"
#include "stats.h"
#include "trace.h"

/* HELP text of each counter, in the order of bf_counter. */
static const char *const counter_help[BF_CT__N] = {
  [BF_CT_CALLS] = "Calls of bert_fill and fill_candidates with a non-NULL text.",
  [BF_CT_HIT_LRU] = "Calls answered from the in-memory LRU cache.",
  [BF_CT_HIT_TABLE] = "Calls answered from the bertfill_cache table.",
  [BF_CT_MISS] = "Calls that needed the encoder.",
  [BF_CT_ENCODER_RUNS] = "Encoder runs (each over one batch of sequences).",
  [BF_CT_BATCHES] = "Encoder runs over more than one sequence.",
  [BF_CT_SEQS] = "Sequences encoded.",
  [BF_CT_TOKENS] = "Tokens encoded.",
  [BF_CT_MASKS] = "Masks filled by the encoder.",
  [BF_CT_CACHE_WRITES] = "Rows written to the bertfill_cache table.",
  [BF_CT_CACHE_SKIPPED] = "Cache writes skipped (read-only or locked database, ...).",
  [BF_CT_ERR_INPUT] = "Errors: invalid input (invalid UTF-8, bad arguments).",
  [BF_CT_ERR_TOOLONG] = "Errors: a text longer than the model takes.",
  [BF_CT_ERR_MODEL] = "Errors: no model, or a model that cannot be loaded.",
  [BF_CT_ERR_NOMEM] = "Errors: out of memory.",
  [BF_CT_ERR_OTHER] = "Errors of other kinds.",
  [BF_CT_BUSY] = "Calls refused by the overload guard (bertfill: busy).",
  [BF_CT_ROWS] = "Rows fill_rows read from its query.",
  [BF_CT_ROWS_BATCHES] = "Batches of rows fill_rows filled (at most one encoder run each).",
  [BF_CT_ROWS_SEQS] = "Sequences fill_rows sent to the encoder (the distinct texts of a batch).",
  [BF_CT_JOINT_CALLS] = "Calls of fill_sequences, bert_fill(text, 'joint') and bert_score.",
  [BF_CT_JOINT_HITS] = "Joint calls answered from the memo cache (LRU or table).",
  [BF_CT_JOINT_MISSES] = "Joint calls that ran the encoder.",
  [BF_CT_JOINT_RUNS] = "Encoder runs of joint calls (also counted in encoder_runs).",
  [BF_CT_SHARED_SERVED] = "Requests of other processes this process's encoder ran (shared "
                          "batching).",
  [BF_CT_SHARED_BATCHES] = "Encoder runs that held requests of other processes.",
  [BF_CT_SHARED_REMOTE] = "Calls answered by another process's encoder.",
  [BF_CT_SHARED_LEADER_CHANGES] = "Times this process took the shared queue's lead from another.",
  [BF_CT_SHARED_FALLBACK] = "Calls that took the in-process batcher instead of the shared queue.",
  [BF_CT_SHARED_RERUN] = "Requests of a shared-queue leader that died, run again.",
  [BF_CT_SHARED_RECLAIMED] = "Shared-queue slots of dead processes taken over.",
  [BF_CT_SHARED_LEAD_POST] = "Shared-queue leads taken at once: the lead was free when posting.",
  [BF_CT_SHARED_LEAD_WOKEN] = "Shared-queue leads taken when woken by the leader before.",
  [BF_CT_SHARED_LEAD_TIMER] = "Shared-queue leads taken after a recheck timeout (no wake-up).",
  [BF_CT_SHARED_LEAD_SLOT] = "Shared-queue leads taken after a wait for an encoder slot.",
};

#define STAGE_MIN_EXP 10 /* first edge 2^10 ns, about 1 us */
#define STAGE_MAX_EXP 37 /* last edge 2^37 ns, about 137 s: stats.c's overflow bucket */
#define MAX_HIST_BUCKETS 512

static void family(sqlite3_str *s, const char *name, const char *type, const char *help) {
  sqlite3_str_appendf(s, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void counter(sqlite3_str *s, const char *name, const char *help, uint64_t v) {
  char full[64];
  snprintf(full, sizeof full, "bertfill_%s_total", name);
  family(s, full, "counter", help);
  sqlite3_str_appendf(s, "%s %llu\n", full, (unsigned long long)v);
}

/* One stage of bertfill_stage_seconds: the buckets, cumulative, at the
** chosen edges (see the header), then +Inf, sum and count. */
static void stage_histogram(sqlite3_str *s, bf_stage st) {
  uint64_t b[MAX_HIST_BUCKETS];
  int nb = bf_stats_stage_buckets(st, b, MAX_HIST_BUCKETS);
  const char *name = bf_stage_name(st);
  uint64_t cum = 0;
  int i = 0; /* the next stats.c bucket not yet added to cum */
  for (int e = STAGE_MIN_EXP; e <= STAGE_MAX_EXP; e++) {
    for (int half = 0; half < 2 && !(e == STAGE_MAX_EXP && half); half++) {
      uint64_t edge = ((uint64_t)1 << e) + (half ? (uint64_t)1 << (e - 1) : 0);
      while (i < nb && bf_hist_upper(i) <= edge) cum += b[i++];
      sqlite3_str_appendf(s, "bertfill_stage_seconds_bucket{stage=\"%s\",le=\"%.12g\"} %llu\n",
                          name, (double)edge / 1e9, (unsigned long long)cum);
    }
  }
  while (i < nb) cum += b[i++];
  bf_stage_summary sum;
  bf_stats_stage(st, &sum);
  sqlite3_str_appendf(s, "bertfill_stage_seconds_bucket{stage=\"%s\",le=\"+Inf\"} %llu\n", name,
                      (unsigned long long)cum);
  sqlite3_str_appendf(s, "bertfill_stage_seconds_sum{stage=\"%s\"} %.9f\n", name,
                      (double)sum.total_ns / 1e9);
  sqlite3_str_appendf(s, "bertfill_stage_seconds_count{stage=\"%s\"} %llu\n", name,
                      (unsigned long long)cum);
}

/* bertfill_batch_size: stats.c's batch buckets (1..8 exactly, then powers
** of two up to 1024, then more) at their own edges. */
static void batch_histogram(sqlite3_str *s) {
  static const int edges[] = {1, 2, 3, 4, 5, 6, 7, 8, 16, 32, 64, 128, 256, 512, 1024};
  enum { NE = sizeof edges / sizeof edges[0], MAXB = 32 };
  int lo[MAXB], hi[MAXB];
  uint64_t cnt[MAXB], cum[NE] = {0}, all = 0;
  int nb = bf_stats_batch_buckets(lo, hi, cnt, MAXB);
  for (int b = 0; b < nb; b++) {
    all += cnt[b];
    for (int j = 0; j < NE; j++)
      if (hi[b] <= edges[j]) cum[j] += cnt[b];
  }
  family(s, "bertfill_batch_size", "histogram",
         "Sequences per encoder run (dynamic batching and bert_prefill).");
  for (int j = 0; j < NE; j++)
    sqlite3_str_appendf(s, "bertfill_batch_size_bucket{le=\"%d\"} %llu\n", edges[j],
                        (unsigned long long)cum[j]);
  sqlite3_str_appendf(s, "bertfill_batch_size_bucket{le=\"+Inf\"} %llu\n", (unsigned long long)all);
  sqlite3_str_appendf(s, "bertfill_batch_size_sum %llu\n",
                      (unsigned long long)bf_stats_counter(BF_CT_SEQS));
  sqlite3_str_appendf(s, "bertfill_batch_size_count %llu\n", (unsigned long long)all);
}

void bfx_prometheus(sqlite3_str *s) {
  for (int c = 0; c < BF_CT__N; c++)
    counter(s, bf_counter_name((bf_counter)c), counter_help[c] ? counter_help[c] : "A counter.",
            bf_stats_counter((bf_counter)c));
  counter(s, "trace_skipped", "Trace rows not written (read-only or locked database, ...).",
          bfx_trace_skipped());
  family(s, "bertfill_since_reset_seconds", "gauge",
         "Seconds since the statistics were last reset (or since bertfill was loaded).");
  sqlite3_str_appendf(s, "bertfill_since_reset_seconds %.6f\n",
                      (double)bf_stats_since_reset_ns() / 1e9);
  family(s, "bertfill_stage_seconds", "histogram",
         "Time spent in each stage, in seconds: call (a whole bert_fill or fill_candidates "
         "call), queue (waiting for an encoder slot), tokenize, encode (per encoder run), topk, "
         "cache_read, cache_write, joint (a whole fill_sequences, bert_fill(text, 'joint') or "
         "bert_score call); the timeline of a call through a batcher: batch_wait (posted to "
         "taken into a batch), batch_start (taken to the run's start), batch_write (the run's "
         "end to the answer handed over), batch_wake (handed over to the caller running), "
         "lead_handover (of batch_wait, the time with no leader).");
  for (int st = 0; st < BF_ST__N; st++) stage_histogram(s, (bf_stage)st);
  batch_histogram(s);
}
