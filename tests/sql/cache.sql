-- The memo cache: keys are the token ids the model sees plus the model's
-- fingerprint; the LRU sits in front of the bertfill_cache table.
-- Encoder runs are read from bert_stats() (process-wide counters), so each
-- check compares with a value saved just before.
-- model: tiny

create temp table runs(n integer);
create temp view encoder_runs as select json_extract(bert_stats(), '$.counters.encoder_runs') as n;
create temp view hits as select json_extract(bert_stats(), '$.counters.hit_lru') + json_extract(bert_stats(), '$.counters.hit_table') as n;
create temp table h(n integer);

select 'mode_default_on', bert_cache() = 'on';
select 'limit_default', bert_cache_limit() = 100000;
select 'no_table_before_first_write', (select count(*) from sqlite_schema where name = 'bertfill_cache') = 0;
select 'lookup_without_table', instr(bert_fill('今天天气真[MASK]啊'), '[MASK]') = 0;
select 'table_created', (select count(*) from bertfill_cache) = 1;

-- the row: model fingerprint, the token ids, k >= 5 candidates per mask
select 'row_model', (select model from bertfill_cache) = json_extract(bert_debug(), '$.model.fingerprint');
select 'row_key_len', (select length(key) from bertfill_cache) = 4 * json_array_length(bert_tokenize('今天天气真[MASK]啊'));
select 'row_k', (select k from bertfill_cache) = 5;
select 'row_result_len', (select length(result) from bertfill_cache) = 12 + 1 * 5 * 8;
select 'row_created', (select abs(created - strftime('%s', 'now')) < 100 from bertfill_cache);

-- a repeated text, and a text the model sees as the same tokens, do not run the encoder
delete from runs; insert into runs select n from encoder_runs;
delete from h; insert into h select n from hits;
select 'repeat_same_result', bert_fill('今天天气真[MASK]啊') = bert_fill('今天天气真[MASK]啊');
select 'spaced_same_result', bert_fill('今天 天气真[MASK]啊') = '今天 天气真' || (select token from fill_candidates('今天天气真[MASK]啊', 1)) || '啊';
select 'repeat_no_encoder', (select n from encoder_runs) = (select n from runs);
select 'repeat_counted_as_hits', (select n from hits) = (select n from h) + 4;
select 'spaced_shares_row', (select count(*) from bertfill_cache) = 1;

-- texts the model sees differently get their own rows
select 'ab_then_a_b', bert_fill('ab[MASK]') is not null and bert_fill('a b[MASK]') is not null;
select 'different_tokens_own_rows', (select count(*) from bertfill_cache) = 3;
select 'different_keys', (select count(distinct key) from bertfill_cache) = 3;

-- fill_candidates shares the entry up to k = 5; more candidates recompute and widen it
delete from runs; insert into runs select n from encoder_runs;
select 'candidates_k5_from_cache', (select count(*) from fill_candidates('今天天气真[MASK]啊', 5)) = 5 and (select n from encoder_runs) = (select n from runs);
select 'candidates_k20_recomputes', (select count(*) from fill_candidates('今天天气真[MASK]啊', 20)) = 20 and (select n from encoder_runs) = (select n from runs) + 1;
select 'row_widened', (select k from bertfill_cache where length(key) = 36) = 20 and (select count(*) from bertfill_cache) = 3;
select 'k20_prefix_is_k5', (select group_concat(token_id) from fill_candidates('今天天气真[MASK]啊', 5)) = (select group_concat(token_id) from (select token_id from fill_candidates('今天天气真[MASK]啊', 20) limit 5));
delete from runs; insert into runs select n from encoder_runs;
select 'k7_from_widened', (select count(*) from fill_candidates('今天天气真[MASK]啊', 7)) = 7 and (select n from encoder_runs) = (select n from runs);

-- the table alone (LRU evicted) answers, and a damaged row is recomputed, not trusted
create temp table before as select token_id, score from fill_candidates('我[MASK]你', 5);
select 'lru_shrunk', bert_cache_lru(1) = 1;
select 'evict_lru', bert_fill('他[MASK]') is not null;
delete from runs; insert into runs select n from encoder_runs;
select 'table_hit_no_encoder', (select group_concat(token_id) from fill_candidates('我[MASK]你', 5)) = (select group_concat(token_id) from before) and (select n from encoder_runs) = (select n from runs);
select 'evict_lru_again', bert_fill('他[MASK]') is not null;
update bertfill_cache set result = x'00' where key = (select key from bertfill_cache order by id limit 1 offset 3);
update bertfill_cache set result = substr(result, 1, 20) where length(key) = 16;
delete from runs; insert into runs select n from encoder_runs;
select 'damaged_row_recomputed', (select group_concat(token_id) from fill_candidates('我[MASK]你', 5)) = (select group_concat(token_id) from before) and (select n from encoder_runs) = (select n from runs) + 1;
select 'damaged_row_rewritten', (select count(*) from bertfill_cache where length(result) < 12) = 0;
select 'lru_restored', bert_cache_lru(10000) = 10000;

-- 'memory': the LRU only, no new rows
select 'mode_memory', bert_cache('memory') = 'memory' and bert_cache() = 'memory';
create temp table rows_before as select count(*) n from bertfill_cache;
select 'memory_fills', instr(bert_fill('我们应当尊老爱[MASK]'), '[MASK]') = 0;
select 'memory_no_new_row', (select count(*) from bertfill_cache) = (select n from rows_before);
delete from runs; insert into runs select n from encoder_runs;
select 'memory_hit', bert_fill('我们应当尊老爱[MASK]') = bert_fill('我们应当尊老爱[MASK]') and (select n from encoder_runs) = (select n from runs);

-- 'off': every call runs the encoder, same answers
select 'mode_off', bert_cache('off') = 'off';
delete from runs; insert into runs select n from encoder_runs;
select 'off_same_result', bert_fill('今天天气真[MASK]啊') = '今天天气真' || (select token from fill_candidates('今天天气真[MASK]啊', 1)) || '啊';
select 'off_runs_encoder', (select n from encoder_runs) = (select n from runs) + 2;
select 'off_same_scores', (select group_concat(token_id) from fill_candidates('我[MASK]你', 5)) = (select group_concat(token_id) from before) and (select max(abs(a.score - b.score)) < 1e-6 from fill_candidates('我[MASK]你', 5) a join before b using (token_id));
select 'mode_case_insensitive', bert_cache('ON') = 'on';

-- clear: returns the rows deleted; the LRU is emptied too
create temp table rows_now as select count(*) n from bertfill_cache;
select 'clear_returns_rows', bert_cache('clear') = (select n from rows_now);
select 'clear_empties_table', (select count(*) from bertfill_cache) = 0;
delete from runs; insert into runs select n from encoder_runs;
select 'clear_empties_lru', bert_fill('今天天气真[MASK]啊') is not null and (select n from encoder_runs) = (select n from runs) + 1;
select 'clear_mode_unchanged', bert_cache() = 'on';

-- the table is bounded: the oldest rows go first
select 'limit_set', bert_cache_limit(3) = 3 and bert_cache_limit() = 3;
select 'limit_fill_5', bert_fill('一[MASK]') || bert_fill('二[MASK]') || bert_fill('三[MASK]') || bert_fill('四[MASK]') || bert_fill('五[MASK]') is not null;
select 'limit_holds', (select count(*) from bertfill_cache) <= 3;
select 'limit_keeps_newest', (select key from bertfill_cache order by id desc limit 1) = (select key from bertfill_cache where length(key) = 16 order by id desc limit 1) and (select count(*) from bertfill_cache) >= 1;
select 'limit_lowered_trims', bert_cache_limit(1) = 1 and (select count(*) from bertfill_cache) = 1;
select 'limit_back', bert_cache_limit(100000) = 100000;

-- another model never sees this model's results
select 'cache_tiny', bert_fill('我[MASK]你') is not null;
select 'switch_model', bert_load('@MODELS@/tiny-bf16') like 'tiny-bf16:%';
create temp table other_cached as select token_id, score from fill_candidates('我[MASK]你', 5);
select 'two_models_two_rows', (select count(distinct model) from bertfill_cache) = 2;
select 'off_for_truth', bert_cache('off') = 'off';
create temp table other_truth as select token_id, score from fill_candidates('我[MASK]你', 5);
select 'on_again', bert_cache('on') = 'on';
select 'other_model_own_result', (select group_concat(token_id) from other_cached) = (select group_concat(token_id) from other_truth);
select 'other_model_differs', (select group_concat(token_id) || group_concat(score) from other_truth) <> (select group_concat(token_id) || group_concat(score) from before);
select 'back_to_tiny', bert_load('@MODELS@/tiny') like 'tiny:%' and (select group_concat(token_id) from fill_candidates('我[MASK]你', 5)) = (select group_concat(token_id) from before);

-- inside a transaction the cache write joins it (and rolls back with it)
select 'clear_again', bert_cache('clear') >= 0;
begin;
select 'in_tx_fill', bert_fill('学习要持之以恒，不能三天打鱼，两天[MASK]。') is not null;
select 'in_tx_row', (select count(*) from bertfill_cache) = 1;
rollback;
select 'rolled_back', (select count(*) from bertfill_cache) = 0;
select 'after_rollback_still_fills', bert_fill('学习要持之以恒，不能三天打鱼，两天[MASK]。') is not null;
create table t(id integer primary key, text text, filled text);
insert into t(text) values ('他说话总是模棱两可，让人捉摸不[MASK]。'), ('这件事已经[MASK]木难支，无法挽回了。'), (NULL);
update t set filled = bert_fill(text);
select 'update_filled', (select count(*) from t where filled is not null and instr(filled, '[MASK]') = 0) = 2 and (select filled from t where text is null) is null;
select 'update_cached', (select count(*) from bertfill_cache) = 2;

-- bert_prefill: batch over a column, then bert_fill answers from the cache
select 'prefill_clear', bert_cache('clear') = 2;
create table p(text text);
insert into p values ('今天天气真[MASK]啊'), ('今天 天气真[MASK]啊'), ('我[MASK]你'), (NULL), ('没有空'), ('我[MASK]你'), (x'ff'), ('[MASK][MASK]'), (printf('%.*c[MASK]', 80, '我'));
create temp view batches as select json_extract(bert_stats(), '$.counters.batches') as n;
create temp table b(n integer);
delete from runs; insert into runs select n from encoder_runs;
insert into b select n from batches;
select 'prefill_counts_distinct', (select bert_prefill(text) from p) = 3;
select 'prefill_rows', (select count(*) from bertfill_cache) = 3;
select 'prefill_one_batch', (select n from encoder_runs) = (select n from runs) + 1 and (select n from batches) = (select n from b) + 1;
delete from runs; insert into runs select n from encoder_runs;
select 'prefill_again_zero', (select bert_prefill(text) from p) = 0 and (select n from encoder_runs) = (select n from runs);
select 'after_prefill_no_encoder', (select count(bert_fill(text)) from p where text in ('今天天气真[MASK]啊', '我[MASK]你', '[MASK][MASK]')) = 4 and (select n from encoder_runs) = (select n from runs);
select 'prefill_empty', (select bert_prefill(text) from p where 0) = 0;
select 'prefill_null', (select bert_prefill(NULL)) = 0;
select 'prefill_group_by', (select count(*) from (select bert_prefill(text) from p group by length(text))) >= 1;
select 'prefill_clear_2', bert_cache('clear') = 3;
create table dest(n integer);
insert into dest select bert_prefill(text) from p;
select 'prefill_inside_insert', (select n from dest) = 3 and (select count(*) from bertfill_cache) = 3;
select 'prefill_clear_3', bert_cache('clear') = 3;
begin;
select 'prefill_in_transaction', (select bert_prefill(text) from p) = 3;
rollback;
select 'prefill_rolled_back_with_transaction', (select count(*) from bertfill_cache) = 0;
select 'integrity', (select * from pragma_integrity_check) = 'ok';
