-- fill_candidates: columns, k, ordering, joins, NULLs (model: tiny, vocab 600).
-- model: tiny

select 'default_k_5', (select count(*) from fill_candidates('今天天气真[MASK]啊')) = 5;
select 'k_3', (select count(*) from fill_candidates('今天天气真[MASK]啊', 3)) = 3;
select 'two_masks_k_3', (select count(*) from fill_candidates('我[MASK]你[MASK]', 3)) = 6;
select 'k_1', (select count(*) from fill_candidates('[MASK]', 1)) = 1;
select 'k_max_is_vocab', (select count(*) from fill_candidates('[MASK]', 1000)) = 600;
select 'full_softmax_sums_to_1', (select abs(sum(score) - 1.0) < 1e-3 from fill_candidates('今天[MASK]', 1000));
select 'full_vocab_distinct_ids', (select count(distinct token_id) from fill_candidates('今天[MASK]', 1000)) = 600;
select 'null_text_no_rows', (select count(*) from fill_candidates(NULL)) = 0;
select 'no_mask_no_rows', (select count(*) from fill_candidates('今天天气很好')) = 0;
select 'k_null_is_default', (select count(*) from fill_candidates('[MASK]', NULL)) = 5;
select 'k_text_number', (select count(*) from fill_candidates('[MASK]', '3')) = 3;
select 'k_real_integral', (select count(*) from fill_candidates('[MASK]', 2.0)) = 2;

-- columns
select 'ranks_1_to_k', (select group_concat(rank) from fill_candidates('今天天气真[MASK]啊', 4)) = '1,2,3,4';
select 'masks_in_order', (select group_concat(mask) from fill_candidates('[MASK]好[MASK]', 2)) = '0,0,1,1';
select 'scores_descending', not exists (select 1 from fill_candidates('今天天气真[MASK]啊', 20) a, fill_candidates('今天天气真[MASK]啊', 20) b where b.mask = a.mask and b.rank = a.rank + 1 and b.score > a.score);
select 'scores_are_probabilities', (select min(score) > 0 and max(score) <= 1 from fill_candidates('我[MASK]你[MASK]', 10));
select 'topk_sum_at_most_1', not exists (select mask from fill_candidates('我[MASK]你[MASK]', 10) group by mask having sum(score) > 1.0 + 1e-6);
select 'ids_distinct_per_mask', (select count(distinct token_id) from fill_candidates('今天天气真[MASK]啊', 10)) = 10;
select 'types', (select group_concat(distinct typeof(mask) || typeof(rank) || typeof(token) || typeof(token_id) || typeof(score) || typeof(sequence)) from fill_candidates('我[MASK]你', 3)) = 'integerintegertextintegerrealtext';
select 'sequence_fills_this_mask', (select count(*) from fill_candidates('我[MASK]你', 5) where sequence = '我' || token || '你') = 5;
select 'sequence_keeps_other_masks', (select count(*) from fill_candidates('[MASK]好[MASK]', 3) where (mask = 0 and sequence = token || '好[MASK]') or (mask = 1 and sequence = '[MASK]好' || token)) = 6;
select 'hidden_text', (select distinct text from fill_candidates('我[MASK]你', 2)) = '我[MASK]你';
select 'hidden_k', (select distinct k from fill_candidates('我[MASK]你', 2)) = 2;
select 'hidden_k_default', (select distinct k from fill_candidates('我[MASK]你')) = 5;
select 'star_has_6_columns', (select count(*) from pragma_table_info('fill_candidates')) = 6;
select 'where_syntax', (select count(*) from fill_candidates where text = '我[MASK]你' and k = 2) = 2;
select 'token_matches_id_across_texts', (select token from fill_candidates('我[MASK]', 1)) = (select token from fill_candidates('[MASK]', 600) where token_id = (select token_id from fill_candidates('我[MASK]', 1)));
select 'rank_filter', (select count(*) from fill_candidates('我[MASK]你[MASK]', 5) where rank = 1) = 2;
select 'order_by_score', (select group_concat(rank) from (select rank from fill_candidates('我[MASK]', 3) order by score)) = '3,2,1';
select 'blob_text', (select count(*) from fill_candidates(cast('我[MASK]你' as blob), 2)) = 2;

-- joins
create table sentences(id integer primary key, text text);
insert into sentences(text) values ('今天天气真[MASK]啊'), (NULL), ('没有空'), ('[MASK]好[MASK]'), ('今天 天气真[MASK]啊');
select 'join', (select count(*) from sentences s, fill_candidates(s.text) c) = 5 * 4;
select 'join_reversed', (select count(*) from fill_candidates(s.text, 2) c, sentences s) = 2 * 4;
select 'join_k_from_table', (select count(*) from sentences s, fill_candidates(s.text, s.id) c) = 1 * 1 + 2 * 4 + 1 * 5;
select 'join_rows', (select group_concat(id) from (select distinct s.id from sentences s, fill_candidates(s.text) c order by s.id)) = '1,4,5';
select 'join_text_column', not exists (select 1 from sentences s, fill_candidates(s.text) c where c.text <> s.text);
select 'left_join', (select count(*) from sentences s left join fill_candidates(s.text, 1) c) = 1 + 1 + 1 + 2 + 1;
select 'left_join_nulls', (select count(*) from sentences s left join fill_candidates(s.text, 1) c where c.token is null) = 2;
select 'join_same_as_direct', (select group_concat(c.token) from sentences s, fill_candidates(s.text, 3) c where s.id = 1) = (select group_concat(token) from fill_candidates('今天天气真[MASK]啊', 3));
select 'subquery_arg', (select count(*) from fill_candidates((select text from sentences where id = 4), 2)) = 4;
select 'in_operator', (select count(*) from fill_candidates where text in ('我[MASK]', '[MASK]好[MASK]') and k = 1) = 3;
select 'rank1_is_fill_in_join', (select count(*) from sentences s, fill_candidates(s.text, 1) c where s.id in (1, 5) and c.sequence = bert_fill(s.text)) = 2;
