-- bert_fill and bert_tokenize on the random test model build/models/tiny.
-- Checks are consistency checks (they hold for any model): exact tokens are
-- checked against the reference implementation in tests/python/t_python.py.
-- model: tiny

-- NULL, numbers, blobs, texts without a mask
select 'null_in_null_out', bert_fill(NULL) is null;
select 'no_mask_unchanged', bert_fill('今天天气很好。') = '今天天气很好。';
select 'no_mask_spaces_kept', bert_fill('  a  b  ') = '  a  b  ';
select 'empty_text', bert_fill('') = '';
select 'integer_as_text', bert_fill(12) = '12';
select 'real_as_text', bert_fill(1.5) = '1.5';
select 'blob_as_utf8', bert_fill(cast('今天天气真[MASK]啊' as blob)) = bert_fill('今天天气真[MASK]啊');
select 'blob_result_is_text', typeof(bert_fill(cast('我[MASK]你' as blob))) = 'text';
-- (a lower-case [mask] is an error, not text: tests/sql/lookalike.sql)

-- the mask is filled, everything else stays as written
select 'mask_replaced', instr(bert_fill('今天天气真[MASK]啊'), '[MASK]') = 0;
select 'prefix_suffix_kept', bert_fill('今天天气真[MASK]啊') like '今天天气真_%啊';
select 'spacing_kept', bert_fill('今天  天气真[MASK]啊 ') like '今天  天气真_%啊 ';
select 'fill_is_rank1_sequence', bert_fill('今天天气真[MASK]啊') = (select sequence from fill_candidates('今天天气真[MASK]啊') where rank = 1);
select 'fill_is_rank1_token', bert_fill('[MASK]') = (select token from fill_candidates('[MASK]') where rank = 1);
select 'two_masks_in_order', bert_fill('我[MASK]你[MASK]') = '我' || (select token from fill_candidates('我[MASK]你[MASK]', 1) where mask = 0) || '你' || (select token from fill_candidates('我[MASK]你[MASK]', 1) where mask = 1);
select 'adjacent_masks', length(bert_fill('[MASK][MASK][MASK]')) between 3 and 30 and instr(bert_fill('[MASK][MASK][MASK]'), '[MASK]') = 0;
select 'mask_in_brackets', bert_fill('[[MASK]]') like '[%]' and instr(bert_fill('[[MASK]]'), '[MASK]') = 0;
select 'same_text_same_fill', bert_fill('学习要持之以恒[MASK]') = bert_fill('学习要持之以恒[MASK]');
select 'fill_equals_spaced', bert_fill('今天天气真[MASK]啊') = replace(bert_fill('今天 天气真[MASK]啊'), ' ', '');

-- bert_tokenize: what the model sees
select 'tokenize_null', bert_tokenize(NULL) is null;
select 'tokenize_json', json_valid(bert_tokenize('今天天气真[MASK]啊'));
select 'tokenize_count', json_array_length(bert_tokenize('今天天气真[MASK]啊')) = 9;
select 'tokenize_cls_sep', json_extract(bert_tokenize('今天'), '$[0]') = '[CLS]' and json_extract(bert_tokenize('今天'), '$[#-1]') = '[SEP]';
select 'tokenize_mask', json_extract(bert_tokenize('今天天气真[MASK]啊'), '$[6]') = '[MASK]';
select 'tokenize_chars', json_extract(bert_tokenize('今天天气真[MASK]啊'), '$[1]') = '今' and json_extract(bert_tokenize('今天天气真[MASK]啊'), '$[7]') = '啊';
select 'tokenize_empty', bert_tokenize('') = '["[CLS]","[SEP]"]';
select 'tokenize_spaces_ignored', bert_tokenize('今天 天气真[MASK]啊') = bert_tokenize('今天天气真[MASK]啊');
select 'tokenize_space_splits_words', bert_tokenize('ab[MASK]') <> bert_tokenize('a b[MASK]');
select 'tokenize_escapes_quote', json_extract(bert_tokenize('"'), '$[1]') = '"';
select 'tokenize_escapes_backslash', json_extract(bert_tokenize('\'), '$[1]') = '\';
select 'tokenize_number', bert_tokenize(12) = bert_tokenize('12');

-- the model
select 'load_describes', bert_load('@MODELS@/tiny') = 'tiny: 2 layers, hidden 32, vocab 600, F32, fp32';
select 'load_f16', bert_load('@MODELS@/tiny-f16') like 'tiny-f16: 2 layers, hidden 32, vocab 600, F16, fp32';
select 'load_relative_path_same_model', bert_load('@MODELS@/../models/tiny') = 'tiny: 2 layers, hidden 32, vocab 600, F32, fp32';
select 'debug_json', json_valid(bert_debug());
select 'debug_model_dir', json_extract(bert_debug(), '$.model.dir') like '%/models/tiny';
select 'debug_fingerprint', length(json_extract(bert_debug(), '$.model.fingerprint')) = 16;
select 'debug_blas_core', length(json_extract(bert_debug(), '$.blas_core')) > 0;
select 'debug_gemm_kernels', json_extract(bert_debug(), '$.gemm') in ('avx512', 'avx2', 'openblas');
select 'debug_cache', json_extract(bert_debug(), '$.cache.mode') = 'on';
select 'threads_default_cores', bert_threads() = json_extract(bert_debug(), '$.cores');
select 'threads_set', bert_threads(1) = 1 and json_extract(bert_debug(), '$.threads') = 1;
select 'threads_reset', bert_threads(0) = json_extract(bert_debug(), '$.cores');
select 'max_concurrent_set', bert_max_concurrent(3) = 3 and json_extract(bert_debug(), '$.guard.max_concurrent') = 3;
select 'guard_nobody_waiting', json_extract(bert_debug(), '$.guard.waiting') = 0 and json_extract(bert_debug(), '$.guard.in_flight') = 0;
select 'max_concurrent_default', bert_max_concurrent(0) = max(1, json_extract(bert_debug(), '$.cores') / bert_threads()) and json_extract(bert_debug(), '$.guard.max_concurrent_auto') = 1;
select 'max_concurrent_follows_threads', bert_threads(1) = 1 and bert_max_concurrent() = json_extract(bert_debug(), '$.cores') and bert_threads(0) > 0 and bert_max_concurrent() * bert_threads() <= json_extract(bert_debug(), '$.cores');
select 'batching_default_on', bert_batching() = 1 and json_extract(bert_debug(), '$.batching.on') = 1;
select 'batching_off', bert_batching(0) = 0 and bert_batching() = 0 and json_extract(bert_debug(), '$.batching.on') = 0;
select 'batching_off_fills', instr(bert_fill('今天天气真[MASK]啊'), '[MASK]') = 0;
select 'batching_on', bert_batching(1) = 1 and bert_batching(NULL) = 1;
select 'busy_timeout_set', bert_busy_timeout(150) = 150 and bert_busy_timeout() = 150;
select 'still_fills', instr(bert_fill('今天天气真[MASK]啊'), '[MASK]') = 0;
