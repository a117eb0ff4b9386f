-- Look-alikes of [MASK]: what a Chinese input method types (full-width
-- brackets and letters), other letter cases, spaces inside.  A fill
-- function never leaves them silently unfilled: it answers an error that
-- quotes what it found, where, and what to write.  bert_tokenize shows the
-- tokens as Hugging Face's tokenizer makes them (plain text).
-- model: tiny

-- error fullwidth_brackets: bert_fill: the text holds '［MASK］' at byte 15, which is not a mask and would be read as plain text: write [MASK] (ASCII brackets, capital letters, no spaces) where a token should be filled
select bert_fill('今天天气真［MASK］啊');
-- error lower_case: bert_fill: the text holds '[mask]' at byte 15
select bert_fill('今天天气真[mask]啊');
-- error mixed_case: the text holds '[Mask]' at byte 0
select bert_fill('[Mask]天');
-- error inner_spaces: the text holds '[ MASK ]' at byte 3
select bert_fill('我[ MASK ]你');
-- error ideographic_space_fullwidth_letters: the text holds '【　ｍａｓｋ　】' at byte 0
select bert_fill('【　ｍａｓｋ　】你');
-- error fullwidth_open_ascii_close: the text holds '［MASK]' at byte 3
select bert_fill('我［MASK]你');
-- error beside_a_real_mask: the text holds '[mask]' at byte 9
select bert_fill('[MASK]和[mask]');
-- error candidates: fill_candidates: the text holds '［MASK］' at byte 0
select * from fill_candidates('［MASK］好');
-- error sequences: fill_sequences: the text holds '[mask]' at byte 3
select * from fill_sequences('我[mask][MASK]');
-- error joint: bert_fill: the text holds '[mask]' at byte 3
select bert_fill('我[mask]你', 'joint');
-- error score: bert_score: the text holds '[mask]' at byte 3
select bert_score('我[mask]你', '爱');

select 'real_mask_filled', instr(bert_fill('今天天气真[MASK]啊'), '[MASK]') = 0;
select 'not_lookalikes_unchanged', bert_fill('[MAS] [MASKS] [M ASK] MASK [] 【】') = '[MAS] [MASKS] [M ASK] MASK [] 【】';
select 'tokenize_as_plain_text', bert_tokenize('[mask]') = '["[CLS]","[","[UNK]","]","[SEP]"]' or json_array_length(bert_tokenize('[mask]')) > 3;
select 'rows_error_column', (select error from fill_rows('select 1, ''我[mask]你''')) like 'fill_rows: the text holds ''[mask]'' at byte 3, which is not a mask%';
select 'rows_other_rows_filled', (select filled from fill_rows('select 1, ''[mask]'' union all select 2, ''我[MASK]你''') where key = 2) not like '%[MASK]%';
create table la(x);
insert into la values ('我[mask]你'), ('我[MASK]你');
select 'prefill_no_error', (select count(*) from (select bert_prefill(x) from la)) = 1;
create temp view hits as select json_extract(bert_stats(), '$.counters.hit_lru') + json_extract(bert_stats(), '$.counters.hit_table') as n;
create temp table before as select n from hits;
select 'prefill_cached_the_real_one', bert_fill('我[MASK]你') is not null and (select n from hits) = (select n from before) + 1;
-- error prefill_update_reports_error: bert_fill: the text holds '[mask]' at byte 3
update la set x = bert_fill(x);
