-- Whole-word fills: fill_sequences, bert_fill(text, 'joint'), bert_score, bert_prefill(text,
-- 'joint') — the SQL surface, the rules of issue 12 and the exact error messages.  The
-- numbers against the reference are in tests/python/t_joint.py.
-- model: tiny

-- fill_sequences: rows, columns, k
select 'default_k_5', (select count(*) from fill_sequences('我们[MASK][MASK]好')) = 5;
select 'k_3', (select count(*) from fill_sequences('我们[MASK][MASK]好', 3)) = 3;
select 'k_1', (select count(*) from fill_sequences('[MASK][MASK]', 1)) = 1;
select 'k_100', (select count(*) from fill_sequences('[MASK][MASK]', 100)) = 100;
select 'k_null_is_default', (select count(*) from fill_sequences('[MASK][MASK]', NULL)) = 5;
select 'k_text_number', (select count(*) from fill_sequences('[MASK][MASK]', '2')) = 2;
select 'null_text_no_rows', (select count(*) from fill_sequences(NULL)) = 0;
select 'no_mask_no_rows', (select count(*) from fill_sequences('今天天气很好')) = 0;
select 'ranks', (select group_concat(rank) from fill_sequences('我[MASK]你[MASK]', 4)) = '1,2,3,4';
select 'types', (select group_concat(distinct typeof(rank) || typeof(fill) || typeof(tokens) || typeof(token_ids) || typeof(score) || typeof(sequence)) from fill_sequences('我[MASK]你[MASK]', 3)) = 'integertexttexttextrealtext';
select 'star_has_6_columns', (select count(*) from pragma_table_info('fill_sequences')) = 6;
select 'hidden_text_k', (select distinct text || '|' || k from fill_sequences('我[MASK]你[MASK]', 2)) = '我[MASK]你[MASK]|2';
select 'hidden_k_default', (select distinct k from fill_sequences('我[MASK]你[MASK]')) = 5;
select 'where_syntax', (select count(*) from fill_sequences where text = '我[MASK]你[MASK]' and k = 2) = 2;
select 'scores_descending', not exists (select 1 from fill_sequences('[MASK]天气[MASK][MASK]', 10) a, fill_sequences('[MASK]天气[MASK][MASK]', 10) b where b.rank = a.rank + 1 and b.score > a.score);
select 'scores_are_probabilities', (select min(score) > 0 and max(score) <= 1 from fill_sequences('[MASK]天气[MASK][MASK]', 10));
select 'scores_sum_at_most_1', (select sum(score) <= 1.0 + 1e-6 from fill_sequences('[MASK][MASK]', 100));
select 'fills_distinct', (select count(distinct token_ids) from fill_sequences('[MASK][MASK]', 50)) = 50;
select 'token_ids_json', (select json_array_length(token_ids) from fill_sequences('[MASK]好[MASK][MASK]', 1)) = 3;
select 'tokens_json', (select json_array_length(tokens) from fill_sequences('[MASK]好[MASK][MASK]', 1)) = 3;
select 'fill_is_tokens_joined', not exists (select 1 from fill_sequences('[MASK]好[MASK]', 5) where fill <> (select group_concat(value, '') from json_each(tokens)));
select 'sequence_fills_every_mask', not exists (select 1 from fill_sequences('我[MASK]你[MASK]吗', 5) where sequence <> '我' || json_extract(tokens, '$[0]') || '你' || json_extract(tokens, '$[1]') || '吗');
select 'ids_match_tokens', not exists (select 1 from fill_sequences('[MASK]好[MASK]', 5) f where json_extract(f.tokens, '$[0]') <> (select token from fill_candidates('[MASK]', 600) where token_id = json_extract(f.token_ids, '$[0]')));
select 'order_by_rank', (select group_concat(rank) from (select rank from fill_sequences('我[MASK]你[MASK]', 3) order by rank)) = '1,2,3';
select 'order_by_score', (select group_concat(rank) from (select rank, score from fill_sequences('我[MASK]你[MASK]', 3) order by score)) = '3,2,1';
select 'blob_text', (select count(*) from fill_sequences(cast('我[MASK]你[MASK]' as blob), 2)) = 2;
select 'masks_as_in_text', (select sequence from fill_sequences('a [MASK] b', 1)) = 'a ' || (select fill from fill_sequences('a [MASK] b', 1)) || ' b';

-- one mask: the rows of fill_candidates
select 'one_mask_is_fill_candidates', (select group_concat(token_id || ':' || score, ',') from fill_candidates('今天天气真[MASK]啊', 7)) = (select group_concat(json_extract(token_ids, '$[0]') || ':' || score, ',') from fill_sequences('今天天气真[MASK]啊', 7));
select 'one_mask_sequences_equal', (select group_concat(sequence) from fill_candidates('我[MASK]你', 5)) = (select group_concat(sequence) from fill_sequences('我[MASK]你', 5));

-- joins
create table s(id integer primary key, text text);
insert into s(text) values ('我们[MASK][MASK]好'), (NULL), ('没有空'), ('[MASK]天[MASK]'), ('今天[MASK]啊');
select 'join', (select count(*) from s, fill_sequences(s.text, 3) f) = 3 * 3;
select 'join_reversed', (select count(*) from fill_sequences(s.text, 2) f, s) = 3 * 2;
select 'join_rank1', (select group_concat(s.id) from s, fill_sequences(s.text, 3) f where f.rank = 1) = '1,4,5';
select 'left_join', (select count(*) from s left join fill_sequences(s.text, 1) f) = 5;
select 'join_k_from_table', (select count(*) from s, fill_sequences(s.text, s.id) f) = 1 + 4 + 5;

-- bert_fill(text, 'joint')
select 'joint_is_rank1', bert_fill('我们[MASK][MASK]好', 'joint') = (select sequence from fill_sequences('我们[MASK][MASK]好', 5) where rank = 1);
select 'joint_any_case', bert_fill('我们[MASK][MASK]好', 'JOINT') = bert_fill('我们[MASK][MASK]好', 'joint');
select 'joint_one_mask_is_bert_fill', bert_fill('今天天气真[MASK]啊', 'joint') = bert_fill('今天天气真[MASK]啊');
select 'joint_null_text', bert_fill(NULL, 'joint') is null;
select 'joint_null_mode', bert_fill('我[MASK]', NULL) is null;
select 'joint_no_mask', bert_fill('没有空', 'joint') = '没有空';
select 'joint_join', (select count(*) from s where bert_fill(text, 'joint') = (select sequence from fill_sequences(s.text) where rank = 1)) = 3;

-- bert_score
select 'score_is_real', typeof(bert_score('我们[MASK][MASK]好', '今天')) = 'real';
-- (the same numbers up to float32 rounding: the texts go through the encoder in other batches)
select 'score_of_rank1', (select abs(bert_score(text, tokens) - score) < 1e-4 * score from fill_sequences('我们[MASK][MASK]好', 5) where rank = 1);
select 'score_of_every_row', not exists (select 1 from fill_sequences('[MASK]天气[MASK][MASK]', 10) where abs(bert_score(text, tokens) - score) > 1e-4 * score);
select 'score_text_is_json', bert_score('我们[MASK][MASK]好', '今天') = bert_score('我们[MASK][MASK]好', '["今","天"]');
select 'score_json_blanks', bert_score('我们[MASK][MASK]好', ' [ "今" , "天" ] ') = bert_score('我们[MASK][MASK]好', '今天');
select 'score_one_mask_is_candidate', (select abs(bert_score('今天天气真[MASK]啊', token) - score) = 0 from fill_candidates('今天天气真[MASK]啊', 1));
select 'score_outside_top_k', bert_score('今天天气真[MASK]啊', '龙') < (select min(score) from fill_candidates('今天天气真[MASK]啊', 20));
select 'score_one_mask_sums_to_1', (select abs(sum(bert_score('[MASK]好', json_array(token))) - 1) < 1e-3 from fill_candidates('[MASK]好', 600));
select 'score_one_mask_every_token', not exists (select 1 from fill_candidates('[MASK]好', 600) where bert_score('[MASK]好', json_array(token)) <> score);
-- a [MASK] in the answer leaves its mask open: the chain rule goes on at the next mask
select 'score_mask_answer', (select abs(bert_score('[MASK][MASK]', '[MASK]好') - a.score * b.score) < 1e-4 * a.score * b.score from fill_candidates('[MASK][MASK]', 600) a, fill_candidates('[MASK][MASK]', 600) b where a.mask = 0 and a.token = '[MASK]' and b.mask = 1 and b.token = '好');
select 'score_null_text', bert_score(NULL, '好') is null;
select 'score_null_answer', bert_score('[MASK]', NULL) is null;
select 'score_text_looks_like_json', bert_score('[MASK][MASK]', '[好') > 0;
select 'score_ranks_answers', (select group_concat(a) from (select a from (select '好' a union all select '龙' union all select '天') order by bert_score('今天天气真[MASK]啊', a) desc)) = (select group_concat(token) from (select token from fill_candidates('今天天气真[MASK]啊', 600) where token in ('好', '龙', '天') order by score desc));

-- bert_prefill(text, 'joint')
create table p(text text);
insert into p values ('[MASK]水[MASK]'), ('[MASK]水[MASK]'), ('我[MASK]你[MASK]们'), (NULL), ('没有'), ('山[MASK]');
select 'prefill_joint_computes', bert_prefill(text, 'joint') = 3 from p;
select 'prefill_joint_again_nothing', bert_prefill(text, 'joint') = 0 from p;
select 'prefill_joint_null_mode', bert_prefill(text, NULL) = 0 from p;
create temp table r0 as select json_extract(bert_stats(), '$.counters.joint_runs') n;
create temp table filled as select bert_fill(text, 'joint') f from p;
select 'prefill_joint_then_hits', (select n from r0) = json_extract(bert_stats(), '$.counters.joint_runs');
select 'prefill_joint_fills', (select count(*) from filled where f is not null and instr(f, '[MASK]') = 0) = 5;

-- errors, word for word
-- error k_0: fill_sequences: k must be an integer from 1 to 100 (got 0)
select * from fill_sequences('[MASK][MASK]', 0);
-- error k_101: fill_sequences: k must be an integer from 1 to 100 (got 101)
select * from fill_sequences('[MASK][MASK]', 101);
-- error k_text: fill_sequences: k must be an integer from 1 to 100 (got abc)
select * from fill_sequences('[MASK][MASK]', 'abc');
-- error missing_text: fill_sequences: missing text argument; use fill_sequences(text [, k]), e.g. SELECT * FROM fill_sequences('两天[MASK][MASK]', 5)
select * from fill_sequences;
-- error invalid_utf8: fill_sequences: invalid UTF-8 at byte 0 of the text (byte value 0xFF)
select * from fill_sequences(x'ff5b4d41534b5d');
-- error too_long: fill_sequences: the text is 73 tokens long ([CLS] and [SEP] included) but the model takes at most 64 (max_position_embeddings)
select * from fill_sequences(printf('%.*c[MASK]', 70, '我'));
-- error mode: bert_fill: the second argument must be 'joint' (got 'each'); bert_fill(text) fills each [MASK] on its own
select bert_fill('[MASK]', 'each');
-- error prefill_mode: bert_prefill: the second argument must be 'joint' (got 'x'); bert_prefill(text) fills each [MASK] on its own
select bert_prefill(text, 'x') from p;
-- error score_count: bert_score: the answer '晒网了' is 3 tokens but the text has 2 [MASK]s
select bert_score('学习要持之以恒，不能三天打鱼，两天[MASK][MASK]。', '晒网了');
-- error score_count_one: bert_score: the answer '好' is 1 token but the text has 2 [MASK]s
select bert_score('[MASK][MASK]', '好');
-- error score_no_mask: bert_score: the answer '好' is 1 token but the text has 0 [MASK]s
select bert_score('今天天气很好', '好');
-- error score_empty: bert_score: the answer '' is 0 tokens but the text has 1 [MASK]
select bert_score('[MASK]', '');
-- error score_json_count: bert_score: the answer '["好"]' is 1 token but the text has 2 [MASK]s
select bert_score('[MASK][MASK]', '["好"]');
-- error score_not_json: bert_score: the answer '[好' is 2 tokens but the text has 1 [MASK] (the answer was read as text: as JSON, line 1, column 2 (byte 1): 
select bert_score('[MASK]', '[好');
-- error score_json_object: bert_score: the answer '[1' is 2 tokens but the text has 1 [MASK] (the answer was read as text
select bert_score('[MASK]', '[1');
-- error score_json_not_token: bert_score: item 2 of the answer, "天气", is not a token of the model's vocabulary (give tokens as bert_tokenize shows them, or the answer as text)
select bert_score('[MASK][MASK]', '["好","天气"]');
-- error score_json_number: bert_score: item 1 of the answer is a number, not a token (a string)
select bert_score('[MASK]', '[1]');
-- error score_invalid_utf8_answer: bert_score: invalid UTF-8 at byte 1 of the answer (byte value 0xFF)
select bert_score('[MASK][MASK]', x'41ff');
-- error score_invalid_utf8_text: bert_score: invalid UTF-8 at byte 0 of the text (byte value 0xFF)
select bert_score(x'ff', '好');
-- error score_too_long: bert_score: the text is 73 tokens long ([CLS] and [SEP] included) but the model takes at most 64 (max_position_embeddings)
select bert_score(printf('%.*c[MASK]', 70, '我'), '好');

-- DIRECTONLY: never from a view
create view v_seq as select f.* from s, fill_sequences(s.text) f;
create view v_score as select bert_score(text, '好') from s;
create view v_joint as select bert_fill(text, 'joint') from s;
-- error view_sequences: unsafe use of virtual table "fill_sequences"
select * from v_seq;
-- error view_score: unsafe use of bert_score()
select * from v_score;
-- error view_joint: unsafe use of bert_fill()
select * from v_joint;
