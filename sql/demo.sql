-- sql/demo.sql — a tour of bertfill in the sqlite3 shell (run by sql/demo.sh,
-- i.e. `make demo`).  Read top to bottom; every statement works as shown.
-- On the shipped model it shows first what that small model does well, then
-- what it misses and why, and says what every number it prints means.  The
-- README shows its output (t_docs checks that it is what the demo prints).
.load ./bertfill
.headers on
.mode list
.separator ' | '

.print '-- Which model? (bert_load(NULL): BERTFILL_MODEL, else the shipped model)'
SELECT bert_load(NULL) AS model;
.print '-- (its size: layers, hidden size, tokens in its vocabulary: the shipped model has 4, 256, 5701,'
.print '--  bert-base-chinese 12, 768, 21128; then how its weights are stored (F16: 16-bit floats) and the'
.print '--  precision it computes in: fp32, or int8 or bf16 with bert_load(dir, precision))'

.print
.print '-- What the shipped model does well: everyday sentences, common phrases, legal and technical text'
.print '-- (bert_fill: every [MASK] replaced by its most likely token)'
SELECT bert_fill('全心全意为人民服[MASK]') AS filled
UNION ALL SELECT bert_fill('请自我[MASK]绍一下。')
UNION ALL SELECT bert_fill('我们明天去北[MASK]旅游。')
UNION ALL SELECT bert_fill('祝你生日快[MASK]！')
UNION ALL SELECT bert_fill('根据本法的规[MASK]，自公布之日起施[MASK]。')
UNION ALL SELECT bert_fill('Java 是一种面向对象的编程语[MASK]。')
UNION ALL SELECT bert_fill('谈何[MASK]易');

.print
.print '-- fill_candidates: the top k candidates of each mask (mask 0 is the first); score is the probability'
.print '-- (a softmax over the whole vocabulary); sequence is the text with that candidate filled in'
SELECT mask, rank, token, round(score, 3) AS score, sequence
  FROM fill_candidates('今天天气真[MASK]啊', 3);

.print
.print '-- bert_tokenize: the tokens the model sees ([CLS] and [SEP] around the text)'
SELECT bert_tokenize('今天 天气真[MASK]啊') AS tokens;

.print
.print '-- A whole column: bert_prefill runs the encoder over its texts in batches, the UPDATE reads the cache'
CREATE TEMP TABLE sentences(id INTEGER PRIMARY KEY, text TEXT, filled TEXT);
INSERT INTO sentences(text) VALUES
  ('我喜欢听音[MASK]。'),
  ('请问你叫什么名[MASK]？'),
  ('这家酒[MASK]的价格是多少？'),
  ('我喜欢听音[MASK]。'),
  ('全心全意为人民服[MASK]');
SELECT bert_prefill(text) AS texts_computed FROM sentences;
.print '-- (3 for 5 rows: row 4 repeats row 1, computed once; row 5 was filled above, so it is in the cache)'
UPDATE sentences SET filled = bert_fill(text);
SELECT id, filled FROM sentences;

.print
.print '-- What it misses: the five example sentences of the usual fill-mask web service (examples/web),'
.print '-- four idioms and an everyday sentence, with the answer a Chinese reader expects and where the'
.print '-- shipped model ranks it'
CREATE TEMP TABLE hard(id INTEGER PRIMARY KEY, text TEXT, expected TEXT);
INSERT INTO hard(text, expected) VALUES
  ('今天天气真[MASK]啊，适合出去玩。', '好'),
  ('学习要持之以恒，不能三天打鱼，两天[MASK]。', '晒'),
  ('他说话总是模棱两可，让人捉摸不[MASK]。', '透'),
  ('这件事已经[MASK]木难支，无法挽回了。', '独'),
  ('我们应当尊老爱[MASK]，弘扬传统美德。', '幼');
SELECT h.id, bert_fill(h.text) AS filled, h.expected,
       CASE WHEN c.rank = 1 THEN 'right' WHEN c.rank IS NULL THEN 'wrong: not in its top 1000'
            ELSE 'wrong: rank ' || c.rank END AS verdict
  FROM hard h LEFT JOIN fill_candidates(h.text, 1000) c ON c.token = h.expected
 ORDER BY h.id;
.print "-- (rank: where the expected token is among the model's 1000 best.  The shipped model is small and"
.print '--  trained on far less text than bert-base-chinese: its first guess is right for about half of'
.print '--  everyday sentences but for only about 4% of idioms (in its top 5 for about 11%: model/MODEL_CARD.md).'
.print '--  Row 1, the everyday sentence, it gets right; the four idioms it misses.'
.print '--  For idioms and real work load bert-base-chinese (see the README), then run this demo on it:'
.print '--  BERTFILL_MODEL=/path/to/bert-base-chinese make demo)'

.print
.print '-- The memo cache: a table in the database plus an in-memory LRU'
SELECT bert_cache() AS mode, count(*) AS cached_rows FROM bertfill_cache;
SELECT json_extract(bert_stats(), '$.counters.calls') AS calls,
       json_extract(bert_stats(), '$.counters.hit_lru') + json_extract(bert_stats(), '$.counters.hit_table') AS cache_hits,
       json_extract(bert_stats(), '$.counters.encoder_runs') AS encoder_runs;
.print '-- (cached_rows: one row per text the encoder computed: the 7 above, 今天天气真[MASK]啊, the column'
.print "--  3, the 5 sentences.  calls: this process's bert_fill and fill_candidates calls, 7 + 1 + 5 (the"
.print "--  UPDATE) + 5 + 5 (each sentence twice; bert_prefill counts none); cache_hits: the UPDATE's 5 and"
.print '--  the second look at each sentence, 5; encoder_runs: one per text computed, 7 + 1 + 5, and one'
.print "--  batch for bert_prefill's 3 texts)"

.print
.print '-- Where it runs (output varies with the machine): matrix kernels (avx512, avx2 or openblas), BLAS core, threads'
SELECT json_extract(bert_debug(), '$.gemm') AS gemm,
       json_extract(bert_debug(), '$.blas_core') AS blas_core,
       json_extract(bert_debug(), '$.threads') AS threads,
       json_extract(bert_debug(), '$.model.dtype') AS dtype;
