// t_node.js — bertfill through Node.js and better-sqlite3 (run by
// tests/clients/t_node.sh, which builds better-sqlite3 first).  Environment: BUILD,
// BERTFILL_EXT (as tests/run.sh sets them) and BERTFILL_MODEL (the tiny test
// model).  Every answer is compared with the sqlite3 shell's for the same
// model, run with the cache off so that each side computes its own.
'use strict';
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { Worker, isMainThread, parentPort, workerData } = require('node:worker_threads');
const Database = require('better-sqlite3');
const { EXT, TINY, check, fail, guarded, exitCode } = require('./bftest');

function open(file = ':memory:') {
  const db = new Database(file);
  db.loadExtension(EXT);
  return db;
}

// ---- worker thread: its own connection, the given texts, answers back ----
if (!isMainThread) {
  const db = open();
  const st = db.prepare('SELECT bert_fill(?) AS f');
  parentPort.postMessage(workerData.texts.map((t) => st.get(t).f));
  db.close();
  return;
}

// Texts from the tiny model's vocabulary (other characters would all be [UNK]).
const vocab = fs.readFileSync(path.join(TINY, 'vocab.txt'), 'utf8').split('\n');
const cjk = vocab.filter((t) => t.length === 1 && t >= '\u4e00' && t <= '\u9fff');
function text(i) {   // a distinct sentence per i, with one [MASK] inside
  const a = cjk[i % cjk.length], b = cjk[(i * 7 + 3) % cjk.length], c = cjk[(i * 13 + 5) % cjk.length];
  return `${a}${b}天[MASK]${c}。`;
}
const TEXTS = Array.from({ length: 200 }, (_, i) => text(i));     // one prepared statement
const COLUMN = Array.from({ length: 100 }, (_, i) => text(200 + i));  // the column fill
const SENTENCE = '今天天气真[MASK]啊，适合出去玩。';
const TWO_MASKS = '根据本法的规[MASK]，自公布之日起施[MASK]。';

// The sqlite3 shell's answers: the texts go through a scratch database.
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'bf-node-'));
process.on('exit', () => fs.rmSync(tmp, { recursive: true, force: true }));
function shell(sql, texts) {
  const file = path.join(tmp, 'shell.db');
  fs.rmSync(file, { force: true });
  const db = new Database(file);
  db.exec('CREATE TABLE texts(id INTEGER PRIMARY KEY, text TEXT)');
  const ins = db.prepare('INSERT INTO texts(text) VALUES (?)');
  db.transaction(() => texts.forEach((t) => ins.run(t)))();
  db.close();
  const out = execFileSync('sqlite3', ['-bail', '-json', '-cmd', `.load ${EXT}`, file, sql],
    { env: { ...process.env, BERTFILL_CACHE: 'off' }, encoding: 'utf8' });
  return out.trim() ? JSON.parse(out) : [];
}

function expectError(name, fn, want) {
  try {
    const r = fn();
    fail(name, `no exception; got ${JSON.stringify(r)}`);
  } catch (e) {
    if (e instanceof Database.SqliteError && e.code === 'SQLITE_ERROR' && e.message === want) {
      check(name, true);
    } else {
      fail(name, `expected SqliteError SQLITE_ERROR ${JSON.stringify(want)}, ` +
        `got ${e && e.constructor && e.constructor.name} ${e && e.code} ${JSON.stringify(e && e.message)}`);
    }
  }
}

async function main() {
  const db = open();

  await guarded('node.scalar', () => {
    const want = shell('SELECT bert_fill(text) AS f FROM texts ORDER BY id', [SENTENCE, TWO_MASKS]);
    const st = db.prepare('SELECT bert_fill(?) AS f');
    const got = [SENTENCE, TWO_MASKS].map((t) => st.get(t).f);
    check('node.scalar', got[0] === want[0].f && got[1] === want[1].f && !got.join('').includes('[MASK]'),
      `node ${JSON.stringify(got)} vs sqlite3 shell ${JSON.stringify(want)}`);
  });

  await guarded('node.version', () => {
    const want = fs.readFileSync(path.join(__dirname, '../../../ext/sqlite/version.h'), 'utf8')
      .match(/#define BFX_VERSION "([^"]+)"/)[1];
    const v = db.prepare('SELECT bert_version() AS v').get().v;
    check('node.version', v === want && /^\d+\.\d+\.\d+/.test(v), `${v} vs version.h ${want}`);
  });

  await guarded('node.scalar_types', () => {
    const r = db.prepare('SELECT bert_fill(NULL) AS n, bert_fill(@t) AS same, typeof(bert_fill(@t)) AS ty')
      .get({ t: '没有空格' });
    check('node.scalar_types', r.n === null && r.same === '没有空格' && r.ty === 'text', JSON.stringify(r));
  });

  await guarded('node.table_valued', () => {
    const sql = 'SELECT mask, rank, token, token_id, score, sequence FROM fill_candidates(?, 5)';
    const got = db.prepare(sql).all(TWO_MASKS);
    const want = shell(sql.replace('?', '(SELECT text FROM texts)'), [TWO_MASKS]);
    const same = got.length === 10 && got.length === want.length && got.every((r, i) =>
      r.mask === want[i].mask && r.rank === want[i].rank && r.token === want[i].token &&
      r.token_id === want[i].token_id && r.sequence === want[i].sequence &&
      Math.abs(r.score - want[i].score) <= 1e-12 * Math.max(1, want[i].score));
    check('node.table_valued', same,
      `node ${JSON.stringify(got.slice(0, 2))} vs shell ${JSON.stringify(want.slice(0, 2))}`);
    check('node.table_valued_types', Number.isInteger(got[0].rank) && typeof got[0].score === 'number' &&
      got[0].score > 0 && got[0].score <= 1 && got[0].sequence.includes('[MASK]'), JSON.stringify(got[0]));
  });

  await guarded('node.table_valued_join', () => {
    db.exec('CREATE TEMP TABLE s(id INTEGER PRIMARY KEY, text TEXT)');
    const ins = db.prepare('INSERT INTO s(text) VALUES (?)');
    TEXTS.slice(0, 4).forEach((t) => ins.run(t));
    const rows = [...db.prepare(
      'SELECT s.id, c.rank, c.token FROM s, fill_candidates(s.text, 3) c ORDER BY s.id, c.rank').iterate()];
    check('node.table_valued_join', rows.length === 12 && rows[0].id === 1 && rows[11].rank === 3,
      `${rows.length} rows: ${JSON.stringify(rows.slice(0, 3))}`);
  });

  await guarded('node.error_exception', () => {
    expectError('node.error_exception', () => db.prepare('SELECT * FROM fill_candidates(?, 0)').all('好[MASK]'),
      'fill_candidates: k must be an integer from 1 to 1000 (got 0)');
    expectError('node.error_invalid_utf8', () => db.prepare('SELECT bert_fill(?) AS f').get(Buffer.from([0xff, 0x41])),
      'bert_fill: invalid UTF-8 at byte 0 of the text (byte value 0xFF)');
    expectError('node.error_too_long', () => db.prepare('SELECT bert_fill(?) AS f').get('我'.repeat(70) + '[MASK]'),
      'bert_fill: the text is 73 tokens long ([CLS] and [SEP] included) but the model takes at most 64 ' +
      '(max_position_embeddings): 9 too many; keep substr(text, 10, 67), the 62 tokens around its [MASK]');
    // invalid UTF-8 in the argument is escaped in the message (not U+FFFD)
    expectError('node.error_utf8_escaped',
      () => db.prepare('SELECT * FROM fill_candidates(?, CAST(? AS TEXT))').all('好[MASK]', Buffer.from([0xed, 0xa0, 0x80])),
      'fill_candidates: k must be an integer from 1 to 1000 (got \\xED\\xA0\\x80)');
    check('node.error_then_works', db.prepare('SELECT bert_fill(?) AS f').get(SENTENCE).f.startsWith('今天天气真'));
  });

  await guarded('node.directonly', () => {
    db.exec("CREATE VIEW v AS SELECT bert_fill('好[MASK]') AS f");
    try {
      db.prepare('SELECT f FROM v').get();
      fail('node.directonly', 'bert_fill ran inside a view');
    } catch (e) {
      check('node.directonly', /unsafe use of bert_fill/.test(e.message), e.message);
    }
  });

  await guarded('node.prepared_many_rows', () => {
    const want = shell('SELECT bert_fill(text) AS f FROM texts ORDER BY id', TEXTS).map((r) => r.f);
    const st = db.prepare('SELECT bert_fill(?) AS f');   // one statement, 200 rows
    const got = TEXTS.map((t) => st.get(t).f);
    const bad = got.findIndex((g, i) => g !== want[i]);
    check('node.prepared_many_rows', got.length === 200 && bad < 0,
      bad < 0 ? `${got.length} rows` : `row ${bad}: node ${got[bad]} vs sqlite3 shell ${want[bad]}`);

  });

  await guarded('node.column_fill', () => {
    // bert_prefill over the column, then one UPDATE statement run per row in a transaction.
    const want = shell('SELECT bert_fill(text) AS f FROM texts ORDER BY id', COLUMN).map((r) => r.f);
    const file = path.join(tmp, 'column.db');
    const fdb = open(file);
    fdb.exec('CREATE TABLE t(id INTEGER PRIMARY KEY, text TEXT, filled TEXT)');
    const ins = fdb.prepare('INSERT INTO t(text) VALUES (?)');
    fdb.transaction(() => COLUMN.forEach((t) => ins.run(t)))();
    const computed = fdb.prepare('SELECT bert_prefill(text) AS n FROM t').get().n;
    fdb.prepare('SELECT bert_stats_reset()').get();
    const upd = fdb.prepare('UPDATE t SET filled = bert_fill(text) WHERE id = ?');
    fdb.transaction(() => { for (let id = 1; id <= COLUMN.length; id++) upd.run(id); })();
    const filled = fdb.prepare('SELECT filled FROM t ORDER BY id').pluck().all();
    const c = JSON.parse(fdb.prepare('SELECT bert_stats() AS s').get().s).counters;
    check('node.column_fill', computed === COLUMN.length && filled.every((f, i) => f === want[i]),
      `prefill computed ${computed}; first row ${filled[0]} vs ${want[0]}`);
    check('node.column_fill_from_cache', c.hit_lru + c.hit_table === COLUMN.length && c.miss === 0,
      `counters ${JSON.stringify(c)}`);
    fdb.close();
  });

  await guarded('node.reopen', () => {
    db.close();
    const again = open();
    check('node.reopen', again.prepare('SELECT bert_fill(?) AS f').get(SENTENCE).f.startsWith('今天天气真'));
    again.close();
  });

  await guarded('node.worker_threads', async () => {
    const want = shell('SELECT bert_fill(text) AS f FROM texts ORDER BY id', TEXTS.slice(0, 40)).map((r) => r.f);
    const run = (texts) => new Promise((resolve, reject) => {
      const w = new Worker(__filename, { workerData: { texts } });
      w.once('message', resolve);
      w.once('error', reject);
    });
    const parts = await Promise.all([run(TEXTS.slice(0, 20)), run(TEXTS.slice(20, 40))]);
    const got = parts.flat();
    check('node.worker_threads', got.length === 40 && got.every((g, i) => g === want[i]),
      `got ${JSON.stringify(got.slice(0, 3))}, want ${JSON.stringify(want.slice(0, 3))}`);
  });

  process.exitCode = exitCode();
}

main();
