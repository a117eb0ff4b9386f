/*
** bounds.h — the limits of the SQLite layer, one place for each: the size
** of one merged encoder run, the candidates kept per mask, and the range of
** every integer argument and setting (the SQL function and its environment
** variable take the same range).
*/
#ifndef BERTFILL_SQLITE_BOUNDS_H
#define BERTFILL_SQLITE_BOUNDS_H

/* Candidates computed per mask for every cache entry, so that bert_fill
** (k = 1) and fill_candidates (default k) share entries; fill_candidates'
** k when none is given.  The upper bound of k is BF_MAX_K (bertfill.h). */
#define BFX_MIN_K 5
#define BFX_DEFAULT_K 5

/* Whole-word fills (joint.c): the beam width k of fill_sequences is from 1
** to this (default BFX_DEFAULT_K, which bert_fill(text, 'joint') uses). */
#define BFX_SEQUENCES_MAX_K 100

/* One encoder run over merged sequences holds at most this many sequences
** and tokens: the batches of dynamic batching (batcher.c), of
** bert_prefill (prefill.c) and of a beam step or a bert_score (joint.c). */
#define BFX_BATCH_MAX_SEQS 32
#define BFX_BATCH_MAX_TOKENS 2048
/* The machine-wide batcher (shared_batch.c): request slots of one shared
** queue, and the largest request a slot holds (token ids, masks, candidates
** per mask); a call beyond them takes the in-process batcher.  With these
** the shared file is about 800 KB. */
#define BFX_SHARED_SLOTS 128
#define BFX_SHARED_MAX_TOKENS 512
#define BFX_SHARED_MAX_MASKS 32
#define BFX_SHARED_MAX_K 16
/* fill_rows (rows.c) reads at most this many rows of its query per batch
** (cache hits and texts without a mask need no sequence of the run). */
#define BFX_ROWS_BATCH_MAX_ROWS 256

/* An integer argument is an integer, or a float with an integral value
** within +-BFX_INT_ARG_FLOAT_BOUND (below 2^63, so the conversion is exact
** and defined); then it must lie in the argument's own range below. */
#define BFX_INT_ARG_FLOAT_BOUND 9e18

/* User input quoted in an error message (an argument, a path): at most
** this many bytes of it, its start and its end (errors.h, bfx_quote). */
#define BFX_QUOTE_MAX 160

/* Ranges of the settings. */
#define BFX_THREADS_MAX 1024              /* bert_threads (0: one per core) */
#define BFX_MAX_CONCURRENT_MAX (1 << 20)  /* bert_max_concurrent, BERTFILL_MAX_CONCURRENT */
#define BFX_BUSY_TIMEOUT_MAX_MS (1 << 30) /* bert_busy_timeout, BERTFILL_BUSY_TIMEOUT_MS */
#define BFX_MACHINE_SLOTS_MAX 1024        /* BERTFILL_MACHINE_SLOTS (machine_guard.c) */
#define BFX_DEFAULT_BUSY_TIMEOUT_MS 2000
#define BFX_CACHE_LIMIT_MAX ((long long)1 << 40) /* bert_cache_limit, BERTFILL_CACHE_LIMIT */
#define BFX_LRU_ENTRIES_MAX 100000000            /* bert_cache_lru */
#define BFX_TRACE_ROWS_MAX ((long long)1 << 40)  /* bert_trace(on, max_rows) */

#endif
