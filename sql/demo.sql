-- sql/demo.sql — a tour of bertfill in the sqlite3 shell (run by sql/demo.sh,
-- i.e. `make demo`).  Read top to bottom; every statement works as shown.
.load ./bertfill
.headers on
.mode list
.separator ' | '

.print
.print '-- Which model? (bert_load(NULL): BERTFILL_MODEL, else the shipped model)'
SELECT bert_load(NULL) AS model;

.print
.print '-- bert_fill: every [MASK] replaced by its best candidate'
SELECT bert_fill('今天天气真[MASK]啊，适合出去玩。') AS filled;
SELECT bert_fill('学习要持之以恒，不能三天打鱼，两天[MASK]。') AS filled;
SELECT bert_fill('这家酒[MASK]的价格是多少？') AS filled;
SELECT bert_fill('我喜欢听音[MASK]。') AS filled;
SELECT bert_fill('谈何[MASK]易') AS idiom;
SELECT bert_fill('根据本法的规[MASK]，自公布之日起施[MASK]。') AS two_masks;

.print
.print '-- fill_candidates: the top k candidates of each mask, with probabilities'
SELECT mask, rank, token, round(score, 4) AS score, sequence
  FROM fill_candidates('无可奈[MASK]', 5);

.print
.print '-- bert_tokenize: the tokens the model sees'
SELECT bert_tokenize('今天 天气真[MASK]啊') AS tokens;

.print
.print '-- A whole column: bert_prefill runs the encoder in batches, the UPDATE reads the cache'
CREATE TEMP TABLE sentences(id INTEGER PRIMARY KEY, text TEXT, filled TEXT);
INSERT INTO sentences(text) VALUES
  ('今天天气真[MASK]啊，适合出去玩。'),
  ('学习要持之以恒，不能三天打鱼，两天[MASK]。'),
  ('他说话总是模棱两可，让人捉摸不[MASK]。'),
  ('这件事已经[MASK]木难支，无法挽回了。'),
  ('我们应当尊老爱[MASK]，弘扬传统美德。');
SELECT bert_prefill(text) AS texts_computed FROM sentences;
UPDATE sentences SET filled = bert_fill(text);
SELECT id, filled FROM sentences;
.print '-- (a small offline model: it misses most idioms; see model/MODEL_CARD.md, and bert_load() for a real model)'

.print
.print '-- fill_candidates in a join: the top 3 for every sentence'
SELECT s.id, c.rank, c.token, round(c.score, 4) AS score
  FROM sentences s, fill_candidates(s.text, 3) c
 ORDER BY s.id, c.rank;

.print
.print '-- The memo cache: a table in the database plus an in-memory LRU'
SELECT bert_cache() AS mode, count(*) AS cached_rows FROM bertfill_cache;
SELECT json_extract(bert_stats(), '$.counters.calls') AS calls,
       json_extract(bert_stats(), '$.counters.hit_lru') + json_extract(bert_stats(), '$.counters.hit_table') AS cache_hits,
       json_extract(bert_stats(), '$.counters.encoder_runs') AS encoder_runs;

.print
.print '-- Where it runs: matrix kernels (avx512 = bertfill kernels, or openblas), BLAS core, threads'
SELECT json_extract(bert_debug(), '$.gemm') AS gemm,
       json_extract(bert_debug(), '$.blas_core') AS blas_core,
       json_extract(bert_debug(), '$.threads') AS threads,
       json_extract(bert_debug(), '$.model.dtype') AS dtype;
