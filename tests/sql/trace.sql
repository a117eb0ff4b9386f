-- What the SQL layer hands to the per-call trace (bertfill_trace, written by
-- ext/sqlite/trace.c): one row per bert_fill / fill_candidates call, with where
-- the answer came from.
-- model: tiny

select 'trace_on', bert_trace(1) = 1;
select 'miss', bert_fill('我[MASK]') is not null;
select 'hit', bert_fill('我 [MASK]') is not null;
select 'candidates', (select count(*) from fill_candidates('你[MASK]')) = 5;
select 'lru_small', bert_cache_lru(1) = 1 and bert_fill('他[MASK]') is not null;
select 'table_hit', bert_fill('我[MASK]') is not null;
select 'lru_back', bert_cache_lru(10000) = 10000;
select 'rows', (select count(*) from bertfill_trace) = 5;
select 'sources', (select group_concat(source) from (select source from bertfill_trace order by id)) = 'encoder,lru,encoder,encoder,table';
select 'funcs', (select group_concat(func) from (select func from bertfill_trace order by id)) = 'bert_fill,bert_fill,fill_candidates,bert_fill,bert_fill';
select 'texts', (select text from bertfill_trace order by id limit 1 offset 1) = '我 [MASK]';
select 'tokens_masks', (select count(*) from bertfill_trace where tokens = 4 and masks = 1) = 5;
select 'encode_time_only_on_miss', (select count(*) from bertfill_trace where encode_ms > 0) = 3 and (select count(*) from bertfill_trace where source <> 'encoder' and encode_ms > 0) = 0;
select 'total_covers_stages', (select count(*) from bertfill_trace where total_ms + 1e-6 >= tokenize_ms + encode_ms + cache_read_ms + cache_write_ms) = 5;
-- error bad_text: invalid UTF-8
select bert_fill(x'ff');
select 'error_row', (select source from bertfill_trace order by id desc limit 1) = 'error';
select 'trace_off', bert_trace(0) = 0 and bert_fill('她[MASK]') is not null and (select count(*) from bertfill_trace) = 6;
