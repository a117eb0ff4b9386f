-- The shipped model model/bertfill-zh-tiny, found next to bertfill.so when
-- neither bert_load nor BERTFILL_MODEL names a model.  Model-independent
-- checks only; the model's own test cases (known idioms in the top 5) live
-- with the model.
-- model: default
-- needs: model/bertfill-zh-tiny/model.safetensors

select 'default_model_lazy', json_extract(bert_debug(), '$.model') is null;
select 'default_model_fills', bert_fill('今天天气真[MASK]啊') like '今天天气真_%啊' and instr(bert_fill('今天天气真[MASK]啊'), '[MASK]') = 0;
select 'default_model_source', json_extract(bert_debug(), '$.model.source') = 'default';
select 'default_model_dir', json_extract(bert_debug(), '$.model.dir') like '%/model/bertfill-zh-tiny';
select 'default_model_describe', bert_load(NULL) like 'bertfill-zh-tiny: % layers, hidden %, vocab %';
select 'default_model_candidates', (select count(*) from fill_candidates('我们应当尊老爱[MASK]，弘扬传统美德。', 5)) = 5;
select 'default_model_probabilities', (select sum(score) <= 1.0 + 1e-6 and min(score) > 0 from fill_candidates('他说话总是模棱两可，让人捉摸不[MASK]。', 20));
