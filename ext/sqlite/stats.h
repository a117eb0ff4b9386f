/*
** stats.h — process-wide counters and stage-latency histograms of the SQLite
** layer (they use no SQLite: tests/c/test_stats.c runs them alone).
**
** Cheap under concurrency: counters are relaxed atomics; each stage has a
** fixed log-scale histogram of atomic buckets, so recording never allocates
** or locks.  The SQLite layer exposes them as bertfill_stats / bert_stats().
*/
#ifndef BERTFILL_STATS_H
#define BERTFILL_STATS_H
#include <stdint.h>
#include "util.h" /* bf_now_ns */

typedef enum bf_stage {
  BF_ST_CALL = 0, /* whole bert_fill / fill_candidates call */
  BF_ST_QUEUE,    /* waiting for an encoder slot (overload guard) */
  BF_ST_TOKENIZE,
  BF_ST_ENCODE,      /* embeddings + encoder layers + MLM head */
  BF_ST_TOPK,        /* softmax + top-k */
  BF_ST_CACHE_READ,  /* LRU + cache table lookup */
  BF_ST_CACHE_WRITE, /* cache table insert */
  BF_ST_JOINT,       /* whole fill_sequences / bert_fill(text, 'joint') / bert_score call */
  /* the timeline of a call through a batcher (encode.h: bfx_times) */
  BF_ST_BATCH_WAIT,    /* posted -> taken into a batch by its leader */
  BF_ST_BATCH_START,   /* taken -> the batch's encoder run starts */
  BF_ST_BATCH_WRITE,   /* the run ends -> its answer handed over */
  BF_ST_BATCH_WAKE,    /* answer handed over -> the caller runs again */
  BF_ST_LEAD_HANDOVER, /* of batch_wait: with no leader (lead given up -> taken) */
  BF_ST__N
} bf_stage;

typedef enum bf_counter {
  BF_CT_CALLS = 0,     /* calls of bert_fill / fill_candidates with non-NULL text */
  BF_CT_HIT_LRU,       /* answered from the in-memory LRU */
  BF_CT_HIT_TABLE,     /* answered from the cache table */
  BF_CT_MISS,          /* needed the encoder */
  BF_CT_ENCODER_RUNS,  /* bf_fill invocations */
  BF_CT_BATCHES,       /* encoder runs with more than one sequence */
  BF_CT_SEQS,          /* sequences encoded */
  BF_CT_TOKENS,        /* tokens encoded */
  BF_CT_MASKS,         /* masks filled by the encoder */
  BF_CT_CACHE_WRITES,  /* rows written to the cache table */
  BF_CT_CACHE_SKIPPED, /* cache writes skipped (read-only, busy, ...) */
  BF_CT_ERR_INPUT,     /* invalid UTF-8, bad arguments */
  BF_CT_ERR_TOOLONG,
  BF_CT_ERR_MODEL, /* no model / model could not be loaded */
  BF_CT_ERR_NOMEM,
  BF_CT_ERR_OTHER,
  BF_CT_BUSY,         /* rejected by the overload guard */
  BF_CT_ROWS,         /* rows fill_rows read from its query */
  BF_CT_ROWS_BATCHES, /* batches of rows fill_rows filled (at most one encoder run each) */
  BF_CT_ROWS_SEQS,    /* sequences fill_rows sent to the encoder (distinct texts of a batch) */
  BF_CT_JOINT_CALLS,  /* calls of fill_sequences, bert_fill(text, 'joint'), bert_score */
  BF_CT_JOINT_HITS,   /* ... answered from the memo cache (LRU or table) */
  BF_CT_JOINT_MISSES, /* ... that ran the encoder (chain rule, beam search) */
  BF_CT_JOINT_RUNS,   /* encoder runs of those (also counted in encoder_runs) */
  /* the machine-wide batcher (ext/sqlite/shared_batch.c) */
  BF_CT_SHARED_SERVED,         /* requests of other processes this process's encoder ran */
  BF_CT_SHARED_BATCHES,        /* encoder runs that held requests of other processes */
  BF_CT_SHARED_REMOTE,         /* calls answered by another process's encoder */
  BF_CT_SHARED_LEADER_CHANGES, /* times this process took the lead from another one */
  BF_CT_SHARED_FALLBACK,       /* calls that took the in-process path instead */
  BF_CT_SHARED_RERUN,          /* requests of a leader that died, run again */
  BF_CT_SHARED_RECLAIMED,      /* slots of dead processes taken over */
  /* leads of the machine-wide queue taken by this process, by how (encode.h: BFX_LEAD_*) */
  BF_CT_SHARED_LEAD_POST,  /* the lead free when it posted its request */
  BF_CT_SHARED_LEAD_WOKEN, /* woken by the leader before, which gave the lead up */
  BF_CT_SHARED_LEAD_TIMER, /* looked again after a recheck timeout and found no leader */
  BF_CT_SHARED_LEAD_SLOT,  /* after a wait for an encoder slot of its own process */
  BF_CT__N
} bf_counter;

const char *bf_stage_name(bf_stage s);     /* "call", "queue", "tokenize", ... */
const char *bf_counter_name(bf_counter c); /* "calls", "hit_lru", ... */

void bf_stats_add(bf_counter c, uint64_t n);
void bf_stats_time(bf_stage s, uint64_t ns);
void bf_stats_batch(int nseq); /* batch-size histogram */
void bf_stats_reset(void);

typedef struct bf_stage_summary {
  uint64_t count, total_ns, max_ns;
  uint64_t p50_ns, p95_ns, p99_ns; /* upper bound of the bucket holding the quantile */
} bf_stage_summary;
uint64_t bf_stats_counter(bf_counter c);
void bf_stats_stage(bf_stage s, bf_stage_summary *out);
/* Batch sizes: number of encoder runs whose batch size fell in [lo, hi].
** Writes the non-empty buckets in increasing order and returns how many
** (at most max; with max <= 0 it only counts them). */
int bf_stats_batch_buckets(int *lo, int *hi, uint64_t *count, int max);
/* The histogram of a stage: the count of every bucket (bf_hist_nbuckets()
** of them, bucket i holding durations below bf_hist_upper(i)) into
** count[0..max); returns how many were written. */
int bf_stats_stage_buckets(bf_stage s, uint64_t *count, int max);
/* Any quantile q in (0,1] of a stage, same rule as p50/p95/p99 (0 if empty). */
uint64_t bf_stats_stage_quantile(bf_stage s, double q);
/* Nanoseconds since the stats were last reset (or since the code was loaded). */
uint64_t bf_stats_since_reset_ns(void);
/* The histogram's bucket rule, exposed for tests: bucket index of a duration,
** exclusive upper edge of a bucket (UINT64_MAX for the last), bucket count. */
int bf_hist_bucket(uint64_t ns);
uint64_t bf_hist_upper(int i);
int bf_hist_nbuckets(void);

#endif
