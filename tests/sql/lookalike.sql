-- Look-alikes of [MASK]: what a Chinese input method types (full-width
-- brackets and letters), other letter cases, spaces inside.  A fill
-- function never leaves them silently unfilled: it answers an error that
-- quotes what it found, where, and what to write.  bert_tokenize shows the
-- tokens as Hugging Face's tokenizer makes them (plain text).
-- model: tiny

-- error fullwidth_brackets: bert_fill: the text holds '［MASK］' at character 6, byte 15, which is not a mask and would be read as plain text: write [MASK] (ASCII brackets, capital letters, no spaces) where a token should be filled
select bert_fill('今天天气真［MASK］啊');
-- error lower_case: bert_fill: the text holds '[mask]' at character 6, byte 15
select bert_fill('今天天气真[mask]啊');
-- error mixed_case: the text holds '[Mask]' at character 1, byte 0
select bert_fill('[Mask]天');
-- error inner_spaces: the text holds '[ MASK ]' at character 2, byte 3
select bert_fill('我[ MASK ]你');
-- error ideographic_space_fullwidth_letters: the text holds '【　ｍａｓｋ　】' at character 1, byte 0
select bert_fill('【　ｍａｓｋ　】你');
-- error fullwidth_open_ascii_close: the text holds '［MASK]' at character 2, byte 3
select bert_fill('我［MASK]你');
-- error beside_a_real_mask: the text holds '[mask]' at character 8, byte 9
select bert_fill('[MASK]和[mask]');
-- error candidates: fill_candidates: the text holds '［MASK］' at character 1, byte 0
select * from fill_candidates('［MASK］好');
-- error sequences: fill_sequences: the text holds '[mask]' at character 2, byte 3
select * from fill_sequences('我[mask][MASK]');
-- error joint: bert_fill: the text holds '[mask]' at character 2, byte 3
select bert_fill('我[mask]你', 'joint');
-- error score: bert_score: the text holds '[mask]' at character 2, byte 3
select bert_score('我[mask]你', '爱');
-- error position_in_characters: the text holds '[mask]' at character 6, byte 10,
select bert_fill('😀ab 今[mask]');
-- Invisible look-alikes: read as the tokenizer reads the text (characters
-- clean_text drops, any White_Space a space, accents stripped, lower case),
-- each is "[" "mask" "]" like '[mask]'; the message lists what cannot be seen.
-- error newline_inside: the text holds '[MASK\x0A]' at character 6, byte 15 (it has U+000A: characters the tokenizer drops, or reads as a space or a plain letter), which is not a mask
select bert_fill('中华人民共[MASK' || char(10) || ']国');
-- error zero_width_space: at character 6, byte 15 (it has U+200B: characters the tokenizer drops
select bert_fill('中华人民共[MA' || char(0x200B) || 'SK]国');
-- error byte_order_mark: at character 6, byte 15 (it has U+FEFF: characters the tokenizer drops
select bert_fill('中华人民共[' || char(0xFEFF) || 'MASK]国');
-- error word_joiner: at character 6, byte 15 (it has U+2060: characters the tokenizer drops
select bert_fill('中华人民共[MASK' || char(0x2060) || ']国');
-- error soft_hyphen: at character 6, byte 15 (it has U+00AD: characters the tokenizer drops
select bert_fill('中华人民共[MA' || char(0xAD) || 'SK]国');
-- error thin_space: at character 6, byte 15 (it has U+2009: characters the tokenizer drops
select bert_fill('中华人民共[' || char(0x2009) || 'MASK]国');
-- error accented_letter: at character 6, byte 15 (it has U+00C1: characters the tokenizer drops
select bert_fill('中华人民共[M' || char(0xC1) || 'SK]国');
-- error combining_accent: at character 6, byte 15 (it has U+0301: characters the tokenizer drops
select bert_fill('中华人民共[MASK' || char(0x301) || ']国');
-- error nul_inside: the text holds '[MA\x00SK]' at character 6, byte 15 (it has U+0000: characters
select bert_fill('中华人民共[MA' || char(0) || 'SK]国');
-- error kelvin_sign: at character 6, byte 15 (it has U+212A: characters the tokenizer drops
select bert_fill('中华人民共[MAS' || char(0x212A) || ']国');
-- error spaces_of_every_kind: at character 6, byte 15 (it has U+000A U+0009 U+2028 U+00A0 U+2003 U+205F U+200B U+2060 ...: characters
select bert_fill('中华人民共[ ' || char(10, 9, 0x3000, 0x2028, 0xA0, 0x2003, 0x205F, 0x200B, 0x2060) || 'mask' || char(10) || ']国');
-- error candidates_invisible: fill_candidates: the text holds
select * from fill_candidates('[MA' || char(0x200B) || 'SK]好');
-- error invisible_beside_real_mask: bert_fill: the text holds '[MASK
select bert_fill('[MASK]和[MASK' || char(0x200B) || ']');
-- error invisible_beside_real_mask_where: ' at character 8, byte 9 (it has U+200B:
select bert_fill('[MASK]和[MASK' || char(0x200B) || ']');

select 'real_mask_beside_invisible', instr(bert_fill(char(0x200B) || '今天天气真[MASK]' || char(0x200B, 0x301) || '啊'), '[MASK]') = 0;
select 'mask_between_brackets_real', instr(bert_fill('[[MASK]]'), '[MASK]') = 0;
select 'not_lookalikes_invisible', bert_fill('[M' || char(0x200B) || ' ASK] [面具] mask [MAS' || char(0x200B) || 'KS]') = '[M' || char(0x200B) || ' ASK] [面具] mask [MAS' || char(0x200B) || 'KS]';
select 'real_mask_filled', instr(bert_fill('今天天气真[MASK]啊'), '[MASK]') = 0;
select 'not_lookalikes_unchanged', bert_fill('[MAS] [MASKS] [M ASK] MASK [] 【】') = '[MAS] [MASKS] [M ASK] MASK [] 【】';
select 'tokenize_as_plain_text', bert_tokenize('[mask]') = '["[CLS]","[","[UNK]","]","[SEP]"]' or json_array_length(bert_tokenize('[mask]')) > 3;
select 'rows_error_column', (select error from fill_rows('select 1, ''我[mask]你''')) like 'fill_rows: the text holds ''[mask]'' at character 2, byte 3, which is not a mask%';
select 'rows_other_rows_filled', (select filled from fill_rows('select 1, ''[mask]'' union all select 2, ''我[MASK]你''') where key = 2) not like '%[MASK]%';
create table la(x);
insert into la values ('我[mask]你'), ('我[MASK]你');
select 'prefill_no_error', (select count(*) from (select bert_prefill(x) from la)) = 1;
create temp view hits as select json_extract(bert_stats(), '$.counters.hit_lru') + json_extract(bert_stats(), '$.counters.hit_table') as n;
create temp table before as select n from hits;
select 'prefill_cached_the_real_one', bert_fill('我[MASK]你') is not null and (select n from hits) = (select n from before) + 1;
-- error prefill_update_reports_error: bert_fill: the text holds '[mask]' at character 2, byte 3
update la set x = bert_fill(x);
