-- The shipped model model/bertfill-zh-tiny (second edition) fills these
-- sensibly: the expected character is among its top 5.  The cases were picked
-- after training ended, from what its evaluation (model/evaluate.py --solid,
-- see "Solid cases" in model/MODEL_CARD.md) and a probe found it gets right
-- as its first answer with a wide margin: items of the held-out everyday and
-- GSDSimp sets and of the idiom set, and hand-written probes.  The model was
-- not trained or tuned on this list (the held-out lines never enter training).
-- A retrained model that fails one of these is worse at them.
-- model: default
-- needs: model/bertfill-zh-tiny/model.safetensors

-- hand-written probes
select 'shipped_gongheguo', exists(select 1 from fill_candidates('中华人民共[MASK]国', 5) where token = '和');
select 'shipped_gongheguo_last', exists(select 1 from fill_candidates('中华人民共和[MASK]', 5) where token = '国');
select 'shipped_fuwu', exists(select 1 from fill_candidates('全心全意为人民服[MASK]', 5) where token = '务');
select 'shipped_guiding', exists(select 1 from fill_candidates('根据本法的规[MASK]', 5) where token = '定');
select 'shipped_chifan', exists(select 1 from fill_candidates('他们坐在一起吃[MASK]。', 5) where token = '饭');
select 'shipped_jiabaoyu', exists(select 1 from fill_candidates('贾宝[MASK]和林黛玉', 5) where token = '玉');
select 'shipped_jiudian', exists(select 1 from fill_candidates('这家酒[MASK]的价格是多少？', 5) where token = '店');
select 'shipped_mingzi', exists(select 1 from fill_candidates('请问你叫什么名[MASK]？', 5) where token = '字');
select 'shipped_fill_top1', bert_fill('中华人民共[MASK]国') = '中华人民共和国';
-- held-out everyday sentences (model/heldout.py), top 1 in the evaluation
select 'shipped_everyday_pengyou', exists(select 1 from fill_candidates('我在找我的朋[MASK]。', 5) where token = '友');
select 'shipped_everyday_jieshao', exists(select 1 from fill_candidates('请自我[MASK]绍一下。', 5) where token = '介');
select 'shipped_everyday_feichang', exists(select 1 from fill_candidates('这周我非[MASK]忙。', 5) where token = '常');
select 'shipped_everyday_duoshao', exists(select 1 from fill_candidates('这些要[MASK]少钱呢？', 5) where token = '多');
select 'shipped_everyday_gaosu', exists(select 1 from fill_candidates('谁能[MASK]诉我我该怎么办', 5) where token = '告');
-- GSDSimp sentences (Chinese Wikipedia), top 1 in the evaluation
select 'shipped_gsd_gongsi', exists(select 1 from fill_candidates('该[MASK]司总部设在德国汉诺威。', 5) where token = '公');
select 'shipped_gsd_yanse', exists(select 1 from fill_candidates('总之她对颜[MASK]的要求非常严格。', 5) where token = '色');
select 'shipped_gsd_yuyan', exists(select 1 from fill_candidates('对于语言学家来说一般这是区分两种[MASK]言的标志。', 5) where token = '语');
-- idioms, top 1 bare and in the carrier sentence in the evaluation
select 'shipped_idiom_congmingcaizhi', exists(select 1 from fill_candidates('聪[MASK]才智', 5) where token = '明');
select 'shipped_idiom_tanherongyi', exists(select 1 from fill_candidates('谈何[MASK]易', 5) where token = '容');
select 'shipped_idiom_xunlianyousu', exists(select 1 from fill_candidates('训[MASK]有素', 5) where token = '练');
select 'shipped_idiom_jieranbutong', exists(select 1 from fill_candidates('截然[MASK]同', 5) where token = '不');
select 'shipped_idiom_wukenaihe', exists(select 1 from fill_candidates('无可奈[MASK]', 5) where token = '何');
select 'shipped_idiom_buzhibujue', exists(select 1 from fill_candidates('[MASK]知不觉', 5) where token = '不');
