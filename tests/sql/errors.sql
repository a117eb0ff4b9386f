-- Errors: each must be an SQL error with a message a user can act on.
-- model: tiny

-- error invalid_utf8: bert_fill: invalid UTF-8 at byte 0 of the text (byte value 0xFF)
select bert_fill(x'ff41');
-- error invalid_utf8_offset: invalid UTF-8 at byte 3
select bert_fill(cast('今' as blob) || x'e4bb');
-- error invalid_utf8_surrogate: invalid UTF-8 at byte 1
select bert_fill(x'41eda080');
-- error invalid_utf8_overlong: invalid UTF-8 at byte 0
select bert_fill(x'c0af');
-- error invalid_utf8_candidates: fill_candidates: invalid UTF-8 at byte 0
select * from fill_candidates(x'ff');
-- error invalid_utf8_tokenize: bert_tokenize: invalid UTF-8 at byte 2
select bert_tokenize(x'4142ff');
-- error too_long: but the model takes at most 64 (max_position_embeddings)
select bert_fill(printf('%.*c[MASK]', 70, '我'));
-- error too_long_tokens: the text is 73 tokens long
select bert_fill(printf('%.*c[MASK]', 70, '我'));
-- error too_long_candidates: fill_candidates: the text is 73 tokens long
select * from fill_candidates(printf('%.*c[MASK]', 70, '我'));
select 'too_long_without_mask_unchanged', bert_fill(printf('%.*c', 100, '我')) = printf('%.*c', 100, '我');
select 'longest_allowed', instr(bert_fill(printf('%.*c[MASK]', 61, '我')), '[MASK]') = 0;
-- error one_too_many: the text is 65 tokens long
select bert_fill(printf('%.*c[MASK]', 62, '我'));
-- The remedy: how many tokens too many, and the part to keep (substr, in
-- characters): the 62 tokens that fit, around the masks, inside the text.
-- error too_long_remedy: bert_fill: the text is 73 tokens long ([CLS] and [SEP] included) but the model takes at most 64 (max_position_embeddings): 9 too many; keep substr(text, 10, 67), the 62 tokens around its [MASK]
select bert_fill(printf('%.*c[MASK]', 70, '我'));
-- error too_long_remedy_centred: 39 too many; keep substr(text, 21, 67), the 62 tokens around its [MASK]
select bert_fill(printf('%.*c[MASK]%.*c', 50, '我', 50, '你'));
-- error too_long_remedy_start: 9 too many; keep substr(text, 1, 67), the 62 tokens around its [MASK]
select bert_fill(printf('[MASK]%.*c', 70, '我'));
-- error too_long_masks_apart: 10 too many; its [MASK]s span 72 tokens, more than 62: fill them in separate texts
select bert_fill(printf('[MASK]%.*c[MASK]', 70, '我'));
select 'too_long_remedy_fits', instr(bert_fill(substr(printf('%.*c[MASK]%.*c', 50, '我', 50, '你'), 21, 67)), '[MASK]') = 0;

-- error missing_text: fill_candidates: missing text argument
select * from fill_candidates;
-- error missing_text_where: fill_candidates: missing text argument
select * from fill_candidates where k = 3;
-- error k_zero: fill_candidates: k must be an integer from 1 to 1000 (got 0)
select * from fill_candidates('[MASK]', 0);
-- error k_negative: fill_candidates: k must be an integer from 1 to 1000 (got -1)
select * from fill_candidates('[MASK]', -1);
-- error k_huge: fill_candidates: k must be an integer from 1 to 1000 (got 1001)
select * from fill_candidates('[MASK]', 1001);
-- error k_very_huge: fill_candidates: k must be an integer from 1 to 1000 (got 9223372036854775807)
select * from fill_candidates('[MASK]', 9223372036854775807);
-- error k_text: fill_candidates: k must be an integer from 1 to 1000 (got abc)
select * from fill_candidates('[MASK]', 'abc');
-- error k_fraction: fill_candidates: k must be an integer from 1 to 1000 (got 2.5)
select * from fill_candidates('[MASK]', 2.5);
-- error k_blob: fill_candidates: k must be an integer from 1 to 1000 (got a blob)
select * from fill_candidates('[MASK]', x'01');
-- error k_invalid_utf8: fill_candidates: k must be an integer from 1 to 1000 (got \xED\xA0\x80)
select * from fill_candidates('好[MASK]', cast(x'eda080' as text));
-- error no_create: fill_candidates
create virtual table fc using fill_candidates;

-- error load_missing: bertfill: cannot open model directory '/nonexistent/model': No such file or directory
select bert_load('/nonexistent/model');
-- error load_missing_says_how: BERTFILL_MODEL
select bert_load('/nonexistent/model');
-- error load_not_a_model: config.json
select bert_load('@TMP@');
-- error load_empty: bert_load: empty directory name
select bert_load('');
select 'model_kept_after_failed_load', json_extract(bert_debug(), '$.model.dir') like '%/models/tiny';
-- error cache_bad_mode: bert_cache: the argument must be 'on', 'memory', 'off' or 'clear'
select bert_cache('sometimes');
-- error cache_limit_zero: bert_cache_limit: the number of rows must be an integer from 1
select bert_cache_limit(0);
-- error cache_lru_text: bert_cache_lru: the number of entries must be an integer
select bert_cache_lru('many');
-- error threads_negative: bert_threads: the number of threads must be an integer from 0 (one per core) to
select bert_threads(-2);
-- error max_concurrent_negative: bert_max_concurrent
select bert_max_concurrent(-1);
-- error batching_two: bert_batching: the argument must be an integer from 0 (off) to 1 (on) (got 2)
select bert_batching(2);
-- error busy_timeout_negative: bert_busy_timeout: the wait in milliseconds must be an integer from 0
select bert_busy_timeout(-5);
-- error wrong_arg_count: wrong number of arguments to function bert_fill()
select bert_fill('a', 'joint', 'b');

-- DIRECTONLY: never from a view or a trigger (whatever trusted_schema says)
create table t(x text);
insert into t values ('我[MASK]你');
create view v_fill as select bert_fill(x) f from t;
create view v_cand as select c.* from t, fill_candidates(t.x) c;
create view v_tok as select bert_tokenize(x) f from t;
create table log(y text);
create trigger tr after insert on t begin insert into log select bert_fill(new.x); end;
pragma trusted_schema = off;
-- error view_fill: unsafe use of bert_fill()
select * from v_fill;
-- error view_candidates: unsafe use of virtual table "fill_candidates"
select * from v_cand;
-- error view_tokenize: unsafe use of bert_tokenize()
select * from v_tok;
-- error trigger_fill: unsafe use of bert_fill()
insert into t values ('[MASK]');
pragma trusted_schema = on;
-- error view_fill_trusted: unsafe use of bert_fill()
select * from v_fill;
-- error trigger_fill_trusted: unsafe use of bert_fill()
insert into t values ('[MASK]');
-- error generated_column: non-deterministic functions prohibited in generated columns
create table g(x text, y text as (bert_fill(x)));
-- error expression_index: non-deterministic functions prohibited in index expressions
create index ix on t(bert_fill(x));
create table d(x text, y text default (bert_fill('[MASK]')));
select 'direct_still_works', (select count(*) from t, fill_candidates(t.x) c) = 5;
select 'nothing_logged', (select count(*) from log) = 0;

-- The same schema read back from the file by a new connection.  (SQLite
-- 3.40 itself still runs a CHECK constraint that calls a DIRECTONLY
-- function; views, triggers and DEFAULT clauses are refused.)
.open @TMP@/test.db
.load @EXT@
pragma trusted_schema = off;
-- error reopened_view: unsafe use of bert_fill()
select * from v_fill;
-- error reopened_trigger: unsafe use of bert_fill()
insert into t values ('[MASK]');
-- error reopened_default: unsafe use of bert_fill()
insert into d(x) values ('a');
select 'reopened_direct_works', (select count(*) from t, fill_candidates(t.x) c) = 5;
