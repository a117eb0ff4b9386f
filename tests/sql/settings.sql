-- The settings functions: each one reads its setting without an argument
-- or with NULL, sets it with a value in range, and rejects a value out of
-- range or not an integer with the one error shape
--   FNAME: WHAT must be an integer from LO[ (meaning)] to HI[ (meaning)] (got VALUE)
-- never clamping it and never reading it as something else.  A whole
-- number written as text ('4') or as a real (4.0) counts as the integer.
-- model: tiny

-- bert_cache(mode): this connection's cache mode
select 'cache_read', bert_cache() = 'on';
select 'cache_null_reads', bert_cache(NULL) = 'on';
select 'cache_memory', bert_cache('memory') = 'memory' and bert_cache() = 'memory';
select 'cache_any_case', bert_cache('OFF') = 'off';
select 'cache_on', bert_cache('on') = 'on';
select 'cache_clear_returns_rows', bert_cache('clear') = 0 and bert_cache() = 'on';
-- error cache_word: bert_cache: the argument must be 'on', 'memory', 'off' or 'clear' (got sometimes)
select bert_cache('sometimes');
-- error cache_number: bert_cache: the argument must be 'on', 'memory', 'off' or 'clear' (got 1)
select bert_cache(1);
-- a blob is read as UTF-8 bytes, as every text argument of bertfill is
select 'cache_blob_as_text', bert_cache(x'6f6e') = 'on';
-- error cache_blob: bert_cache: the argument must be 'on', 'memory', 'off' or 'clear' (got a blob)
select bert_cache(x'ff');
select 'cache_unchanged_after_errors', bert_cache() = 'on';

-- bert_cache_limit(rows): this connection, 1 to 2^40
select 'cache_limit_read', bert_cache_limit() = 100000;
select 'cache_limit_null_reads', bert_cache_limit(NULL) = 100000;
select 'cache_limit_low', bert_cache_limit(1) = 1;
select 'cache_limit_high', bert_cache_limit(1099511627776) = 1099511627776;
select 'cache_limit_text_number', bert_cache_limit('500') = 500;
select 'cache_limit_whole_real', bert_cache_limit(600.0) = 600;
-- error cache_limit_zero: bert_cache_limit: the number of rows must be an integer from 1 to 1099511627776 (got 0)
select bert_cache_limit(0);
-- error cache_limit_above: bert_cache_limit: the number of rows must be an integer from 1 to 1099511627776 (got 1099511627777)
select bert_cache_limit(1099511627777);
-- error cache_limit_fraction: bert_cache_limit: the number of rows must be an integer from 1 to 1099511627776 (got 2.5)
select bert_cache_limit(2.5);
-- error cache_limit_text: bert_cache_limit: the number of rows must be an integer from 1 to 1099511627776 (got many)
select bert_cache_limit('many');
-- error cache_limit_blob: (got a blob)
select bert_cache_limit(x'01');
select 'cache_limit_unchanged_after_errors', bert_cache_limit() = 600;

-- bert_cache_lru(entries): process-wide, 1 to 10^8
select 'lru_read', bert_cache_lru() = 10000;
select 'lru_null_reads', bert_cache_lru(NULL) = 10000;
select 'lru_low', bert_cache_lru(1) = 1;
select 'lru_high', bert_cache_lru(100000000) = 100000000;
-- error lru_zero: bert_cache_lru: the number of entries must be an integer from 1 to 100000000 (got 0)
select bert_cache_lru(0);
-- error lru_above: bert_cache_lru: the number of entries must be an integer from 1 to 100000000 (got 100000001)
select bert_cache_lru(100000001);
-- error lru_text: bert_cache_lru: the number of entries must be an integer from 1 to 100000000 (got many)
select bert_cache_lru('many');
-- error lru_fraction: (got 0.5)
select bert_cache_lru(0.5);
select 'lru_unchanged_after_errors', bert_cache_lru() = 100000000;
select 'lru_back', bert_cache_lru(10000) = 10000;

-- bert_threads(n): process-wide, 0 (one per core) to OpenBLAS's MAX_THREADS
create temp table t0(cores integer, maxthreads integer);
insert into t0 select json_extract(bert_debug(), '$.cores'),
  cast(substr(json_extract(bert_debug(), '$.blas_config'), instr(json_extract(bert_debug(), '$.blas_config'), 'MAX_THREADS=') + 12) as integer);
select 'threads_read', bert_threads() >= 1;
select 'threads_null_reads', bert_threads(NULL) = bert_threads();
select 'threads_one', bert_threads(1) = 1;
select 'threads_zero_is_cores', bert_threads(0) = (select min(cores, maxthreads) from t0);
select 'threads_max_accepted', bert_threads((select maxthreads from t0)) = (select maxthreads from t0);
-- error threads_above_max: bert_threads: the number of threads must be an integer from 0 (one per core) to
select bert_threads(100000);
select 'threads_unchanged_after_error', bert_threads() = (select maxthreads from t0);
-- error threads_negative: bert_threads: the number of threads must be an integer from 0 (one per core) to
select bert_threads(-1);
-- error threads_text: (got four)
select bert_threads('four');
-- error threads_fraction: (got 1.5)
select bert_threads(1.5);
select 'threads_back', bert_threads(0) = (select min(cores, maxthreads) from t0);

-- bert_max_concurrent(n): process-wide, 0 (cores / threads per run) to 2^20
select 'max_concurrent_auto', bert_max_concurrent() = max(1, (select cores from t0) / bert_threads());
select 'max_concurrent_null_reads', bert_max_concurrent(NULL) = bert_max_concurrent();
select 'max_concurrent_set', bert_max_concurrent(3) = 3;
select 'max_concurrent_high', bert_max_concurrent(1048576) = 1048576;
select 'max_concurrent_zero_auto', bert_max_concurrent(0) = max(1, (select cores from t0) / bert_threads());
-- error max_concurrent_negative: bert_max_concurrent: the number of encoder runs at once must be an integer from 0 (cores / threads per run) to 1048576 (got -1)
select bert_max_concurrent(-1);
-- error max_concurrent_above: (got 1048577)
select bert_max_concurrent(1048577);
-- error max_concurrent_text: (got lots)
select bert_max_concurrent('lots');

-- bert_busy_timeout(ms): process-wide, 0 (never wait) to 2^30
select 'busy_timeout_read', bert_busy_timeout() = 2000;
select 'busy_timeout_null_reads', bert_busy_timeout(NULL) = 2000;
select 'busy_timeout_zero', bert_busy_timeout(0) = 0;
select 'busy_timeout_high', bert_busy_timeout(1073741824) = 1073741824;
-- error busy_timeout_negative: bert_busy_timeout: the wait in milliseconds must be an integer from 0 (never wait) to 1073741824 (got -5)
select bert_busy_timeout(-5);
-- error busy_timeout_above: (got 1073741825)
select bert_busy_timeout(1073741825);
-- error busy_timeout_fraction: (got 0.5)
select bert_busy_timeout(0.5);
select 'busy_timeout_back', bert_busy_timeout(2000) = 2000;

-- bert_batching(0|1): process-wide
select 'batching_read', bert_batching() = 1;
select 'batching_null_reads', bert_batching(NULL) = 1;
select 'batching_off', bert_batching(0) = 0 and bert_batching() = 0;
select 'batching_on', bert_batching(1) = 1;
-- error batching_two: bert_batching: the argument must be an integer from 0 (off) to 1 (on) (got 2)
select bert_batching(2);
-- error batching_word: bert_batching: the argument must be an integer from 0 (off) to 1 (on) (got yes)
select bert_batching('yes');
select 'batching_unchanged_after_errors', bert_batching() = 1;

-- bert_trace(on [, max_rows]): this connection; NULL keeps an argument as it is
select 'trace_read', bert_trace() = 0;
select 'trace_null_reads', bert_trace(NULL) = 0;
select 'trace_on', bert_trace(1) = 1 and bert_trace() = 1;
select 'trace_null_keeps_on', bert_trace(NULL, 10) = 1;
select 'trace_off', bert_trace(0) = 0;
-- error trace_text: bert_trace: on must be an integer from 0 (stop) to 1 (start tracing) (got x)
select bert_trace('x');
-- error trace_two: bert_trace: on must be an integer from 0 (stop) to 1 (start tracing) (got 2)
select bert_trace(2);
-- error trace_max_rows_zero: bert_trace: max_rows (the newest rows kept) must be an integer from 1 to 1099511627776 (got 0)
select bert_trace(1, 0);
-- error trace_max_rows_text: (got ten)
select bert_trace(1, 'ten');
select 'trace_off_after_errors', bert_trace() = 0;
-- error trace_three_args: bert_trace takes at most 2 arguments
select bert_trace(1, 2, 3);

-- bert_stats_reset() returns the statistics from before the reset
select 'stats_reset_returns_before', json_extract(bert_stats_reset(), '$.counters') is not null;
