-- The shipped model model/bertfill-zh-tiny fills common phrases sensibly:
-- the expected character is among its top 5.  The cases were picked after
-- training ended, from phrases its evaluation (model/evaluate.py, see
-- model/MODEL_CARD.md) and a probe showed it gets right with a wide margin;
-- the model was not trained or tuned on this list.  A retrained model that
-- fails one of these is worse at the demo, which is what this guards.
-- model: default
-- needs: model/bertfill-zh-tiny/model.safetensors

select 'shipped_gongheguo', exists(select 1 from fill_candidates('中华人民共[MASK]国', 5) where token = '和');
select 'shipped_gongheguo_last', exists(select 1 from fill_candidates('中华人民共和[MASK]', 5) where token = '国');
select 'shipped_fuwu', exists(select 1 from fill_candidates('全心全意为人民服[MASK]', 5) where token = '务');
select 'shipped_guiding', exists(select 1 from fill_candidates('根据本法的规[MASK]', 5) where token = '定');
select 'shipped_chifan', exists(select 1 from fill_candidates('他们坐在一起吃[MASK]。', 5) where token = '饭');
select 'shipped_bangzhu', exists(select 1 from fill_candidates('你好，请问有什么可以帮[MASK]的吗？', 5) where token = '助');
select 'shipped_sunwukong', exists(select 1 from fill_candidates('孙悟[MASK]', 5) where token = '空');
select 'shipped_fill_top1', bert_fill('中华人民共[MASK]国') = '中华人民共和国';
-- from the model card's solid list (model/evaluate.py --solid, and --probe)
select 'shipped_jiabaoyu', exists(select 1 from fill_candidates('贾宝[MASK]和林黛玉', 5) where token = '玉');
select 'shipped_fayuan', exists(select 1 from fill_candidates('人民法[MASK]', 5) where token = '院');
select 'shipped_yinyue', exists(select 1 from fill_candidates('我喜欢听音[MASK]。', 5) where token = '乐');
select 'shipped_idiom_tanherongyi', exists(select 1 from fill_candidates('谈何[MASK]易', 5) where token = '容');
select 'shipped_idiom_wukenaihe', exists(select 1 from fill_candidates('无可奈[MASK]', 5) where token = '何');
select 'shipped_idiom_buzeshouduan', exists(select 1 from fill_candidates('不择手[MASK]', 5) where token = '段');
select 'shipped_idiom_buzhibujue', exists(select 1 from fill_candidates('[MASK]知不觉', 5) where token = '不');
