// t_web.js — the fill-mask service example (examples/web/server.js) and its
// WebUI (run by tests/clients/t_web.sh).  Starts the server on a free port of
// 127.0.0.1 with the shipped model, checks the HTTP contract against
// fill_candidates through better-sqlite3 and the requests examples/web/README.md
// shows (same tokens and sequences, scores to 1e-5, marked "output varies"
// where they are not this run's exactly), then drives headless Chromium over
// the DevTools protocol (--remote-debugging-pipe: no WebSocket, no npm
// package): loads the page, types a sentence, presses Enter, and checks the
// rendered candidates and their bars; clicks an example; submits a text
// without [MASK] and checks the error shown.  The screenshot goes to
// $BUILD/web/webui.png (and to $WEB_SCREENSHOT when set, e.g. docs/webui.png).
//
// Environment: BUILD, BERTFILL_EXT, CHROMIUM (the browser; "" skips the
// browser part with the reason in CHROMIUM_MISSING).
'use strict';
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const Database = require('better-sqlite3');
const { ROOT, BUILD, EXT, check, fail, skip, guarded, exitCode } = require('./bftest');
const { statusFor } = require(path.join(ROOT, 'examples/web/server.js'));

const MODEL = path.join(ROOT, 'model/bertfill-zh-tiny');
const SENTENCE = '这家酒[MASK]的价格是多少？';
const TWO_MASKS = '根据本法的规[MASK]，自公布之日起施[MASK]。';
const children = [];
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'bf-web-'));
function cleanup() {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  fs.rmSync(tmp, { recursive: true, force: true });
}
process.on('exit', cleanup);
const deadline = setTimeout(() => { fail('web', 'the suite took over 120 s'); cleanup(); process.exit(1); }, 120000);
deadline.unref();

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---- the server ----
function startServer() {
  return new Promise((resolve, reject) => {
    const srv = spawn(process.execPath, [path.join(ROOT, 'examples/web/server.js'), '--port', '0',
      '--model', MODEL, '--ext', EXT], { stdio: ['ignore', 'pipe', 'pipe'] });
    children.push(srv);
    let out = '';
    const onData = (d) => {
      out += d;
      const m = out.match(/http:\/\/127\.0\.0\.1:(\d+)\//);
      if (m) resolve({ srv, base: `http://127.0.0.1:${m[1]}`, port: Number(m[1]), line: out.trim() });
    };
    srv.stdout.on('data', onData);
    srv.stderr.on('data', (d) => { out += d; });
    srv.on('exit', (code) => reject(new Error(`server exited (${code}): ${out.trim()}`)));
    setTimeout(() => reject(new Error(`server did not start in 20 s: ${out.trim()}`)), 20000).unref();
  });
}

async function post(base, body, raw) {
  const res = await fetch(`${base}/predict`, { method: 'POST', body: raw ? body : JSON.stringify(body),
    headers: { 'Content-Type': 'application/json' } });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch (e) { json = null; }
  return { status: res.status, type: res.headers.get('content-type'), json, text, headers: res.headers };
}

// The candidates as fill_candidates gives them, through our own connection.
const db = new Database(':memory:');
db.loadExtension(EXT);
db.prepare('SELECT bert_load(?)').get(MODEL);
function direct(text, k = 5) {
  const rows = db.prepare('SELECT mask, token, score, sequence FROM fill_candidates(?, ?) ORDER BY mask, rank')
    .all(text, k);
  const masks = [];
  for (const r of rows) (masks[r.mask] = masks[r.mask] || []).push({ token: r.token, score: r.score, sequence: r.sequence });
  return masks;
}

// The requests of examples/web/README.md ("$ curl -s 127.0.0.1:8000/predict -d '...'" and the
// JSON shown after it, line breaks added): the same tokens and sequences, scores within 1e-5;
// shown scores that are not exactly this run's carry the mark "output varies".
function readmeExamples() {
  const text = fs.readFileSync(path.join(ROOT, 'examples/web/README.md'), 'utf8');
  const out = [];
  const lines = text.split('\n');
  lines.forEach((l, i) => {
    const m = l.match(/^\$ curl -s 127\.0\.0\.1:8000\/predict -d '([^']*)'(.*)$/);
    if (!m) return;
    let j = i + 1;
    const shown = [];
    while (j < lines.length && !lines[j].startsWith('```')) shown.push(lines[j++]);
    out.push({ line: i + 1, body: JSON.parse(m[1]), shown: JSON.parse(shown.join('')), marked: /output varies/.test(m[2]) });
  });
  return out;
}

function sameAnswer(a, b) {
  if (Array.isArray(a)) return Array.isArray(b) && a.length === b.length && a.every((x, i) => sameAnswer(x, b[i]));
  if (typeof a === 'number') return typeof b === 'number' && Math.abs(a - b) <= 1e-5;
  if (a && typeof a === 'object') {
    return b && typeof b === 'object' && Object.keys(a).join() === Object.keys(b).join() &&
      Object.keys(a).every((k) => sameAnswer(a[k], b[k]));
  }
  return a === b;
}

async function httpChecks(base, port, line) {
  await guarded('web.readme', async () => {
    const ex = readmeExamples();
    check('web.readme.examples', ex.length >= 2, `${ex.length} curl examples in examples/web/README.md`);
    for (const e of ex) {
      const r = await post(base, e.body);
      check(`web.readme:${e.line}`, r.status === 200 && sameAnswer(e.shown, r.json),
        `shown ${JSON.stringify(e.shown).slice(0, 300)} vs ${r.text.slice(0, 300)}`);
      check(`web.readme:${e.line}.marked`, e.marked || JSON.stringify(e.shown) === JSON.stringify(r.json),
        'the scores shown differ from a run in their last digits: mark the line "# output varies"');
    }
  });

  await guarded('web.predict', async () => {
    const r = await post(base, { text: SENTENCE });
    const want = direct(SENTENCE)[0];
    check('web.predict', r.status === 200 && /^application\/json/.test(r.type) &&
      JSON.stringify(r.json) === JSON.stringify({ results: want }),
      `${r.status} ${r.text.slice(0, 300)} vs ${JSON.stringify(want).slice(0, 200)}`);
    const res = r.json && r.json.results;
    check('web.predict_contract', Array.isArray(res) && res.length === 5 && res.every((c, i) =>
      Object.keys(c).join() === 'token,score,sequence' && typeof c.score === 'number' &&
      c.sequence === SENTENCE.replace('[MASK]', c.token) && (i === 0 || c.score <= res[i - 1].score)),
    r.text.slice(0, 300));
  });
  await guarded('web.predict_masks', async () => {
    const r = await post(base, { text: TWO_MASKS, top_k: 3 });
    const want = direct(TWO_MASKS, 3);
    check('web.predict_masks', r.status === 200 &&
      JSON.stringify(r.json) === JSON.stringify({ results: want[0], masks: want }), r.text.slice(0, 300));
  });
  const bad = [
    ['web.bad_json', '{"text": ', true, 400, /^invalid JSON/],
    ['web.not_object', '"text"', true, 400, /JSON object/],
    ['web.missing_text', { txt: SENTENCE }, false, 400, /missing "text"/],
    ['web.text_not_string', { text: 7 }, false, 400, /missing "text"/],
    ['web.no_mask', { text: '今天天气真好' }, false, 400, /no \[MASK\]/],
    ['web.bad_top_k', { text: SENTENCE, top_k: 0 }, false, 400, /top_k/],
    ['web.too_long', { text: '我'.repeat(200) + '[MASK]' }, false, 400, /^fill_candidates: the text is 203 tokens long/],
    ['web.too_big', JSON.stringify({ text: 'x'.repeat(70000) }), true, 413, /over 65536 bytes/],
  ];
  for (const [name, body, raw, status, re] of bad) {
    await guarded(name, async () => {
      const r = await post(base, body, raw);
      check(name, r.status === status && r.json && re.test(r.json.error) && /^application\/json/.test(r.type),
        `${r.status} ${r.text.slice(0, 200)}`);
    });
  }
  await guarded('web.routes', async () => {
    const nf = await fetch(`${base}/nope`);
    const get = await fetch(`${base}/predict`);
    const page = await fetch(`${base}/`);
    const html = await page.text();
    check('web.routes', nf.status === 404 && get.status === 405 && get.headers.get('allow') === 'POST' &&
      page.status === 200 && /text\/html/.test(page.headers.get('content-type')) && html.includes('id="text"'),
    `${nf.status} ${get.status} ${page.status}`);
  });
  await guarded('web.metrics', async () => {
    const m = await fetch(`${base}/metrics`);
    const body = await m.text();
    // bert_stats('prometheus') of the server's process: its calls so far
    const calls = /^bertfill_calls_total (\d+)$/m.exec(body);
    check('web.metrics', m.status === 200 && /^text\/plain; version=0\.0\.4/.test(m.headers.get('content-type')) &&
      /^# TYPE bertfill_stage_seconds histogram$/m.test(body) && calls && Number(calls[1]) > 0,
    `${m.status} ${body.slice(0, 200)}`);
  });
  check('web.busy_is_503', statusFor('bertfill: busy: 2 encoder runs in progress, waited 2000 ms') === 503 &&
    statusFor('bert_fill: invalid UTF-8 at byte 0 of the text (byte value 0xFF)') === 400 &&
    statusFor('bertfill: model.safetensors changed on disk after it was loaded') === 500, 'statusFor');
  // Listening on the loopback address only: the kernel's socket table.
  const hex = port.toString(16).toUpperCase().padStart(4, '0');
  const listening = ['/proc/net/tcp', '/proc/net/tcp6'].flatMap((f) => {
    try { return fs.readFileSync(f, 'utf8').split('\n').slice(1); } catch (e) { return []; }
  }).map((l) => l.trim().split(/\s+/)).filter((f) => f.length > 3 && f[3] === '0A' && f[1].endsWith(':' + hex))
    .map((f) => f[1]);
  check('web.loopback_only', line.includes('http://127.0.0.1:') && listening.length === 1 &&
    listening[0] === `0100007F:${hex}`, `listening sockets on port ${port}: ${JSON.stringify(listening)}`);
}

// ---- the browser: the DevTools protocol over a pipe ----
// Chromium reads commands from fd 3 and writes answers and events to fd 4,
// each a JSON message ended by a NUL byte.
class Browser {
  constructor(exe) {
    const args = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync',
      '--disable-extensions', '--mute-audio', '--hide-scrollbars', '--force-device-scale-factor=1',
      '--remote-debugging-pipe', `--user-data-dir=${path.join(tmp, 'profile')}`, 'about:blank'];
    this.proc = spawn(exe, args, { stdio: ['ignore', 'ignore', 'pipe', 'pipe', 'pipe'] });
    children.push(this.proc);
    this.log = '';
    this.proc.stderr.on('data', (d) => { this.log = (this.log + d).slice(-4000); });
    this.next = 1;
    this.pending = new Map();
    this.waiters = [];
    let buf = Buffer.alloc(0);
    this.proc.stdio[4].on('data', (chunk) => {
      buf = Buffer.concat([buf, chunk]);
      let z;
      while ((z = buf.indexOf(0)) >= 0) {
        const msg = JSON.parse(buf.subarray(0, z).toString('utf8'));
        buf = buf.subarray(z + 1);
        this.dispatch(msg);
      }
    });
    this.exited = new Promise((r) => this.proc.on('exit', r));
  }
  dispatch(msg) {
    if (msg.id !== undefined) {
      const p = this.pending.get(msg.id);
      this.pending.delete(msg.id);
      if (p) msg.error ? p.reject(new Error(`${p.method}: ${msg.error.message}`)) : p.resolve(msg.result);
    } else {
      this.waiters = this.waiters.filter((w) => !(w.method === msg.method && (w.resolve(msg.params), true)));
    }
  }
  send(method, params = {}, sessionId) {
    const id = this.next++;
    this.proc.stdio[3].write(JSON.stringify({ id, method, params, ...(sessionId && { sessionId }) }) + '\0');
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject, method });
      setTimeout(() => reject(new Error(`${method}: no answer in 20 s; chromium: ${this.log.slice(-500)}`)), 20000).unref();
    });
  }
  event(method) {
    return new Promise((resolve, reject) => {
      this.waiters.push({ method, resolve });
      setTimeout(() => reject(new Error(`no ${method} event in 20 s`)), 20000).unref();
    });
  }
  async close() {
    try { await this.send('Browser.close'); } catch (e) { /* it may be gone already */ }
    await Promise.race([this.exited, sleep(5000)]);
    if (this.proc.exitCode === null) this.proc.kill('SIGKILL');
  }
}

// A page: evaluate JavaScript, click and type like a user.
class Page {
  constructor(browser, sessionId) { this.b = browser; this.s = sessionId; }
  send(method, params) { return this.b.send(method, params, this.s); }
  async eval(expr) {
    const r = await this.send('Runtime.evaluate', { expression: expr, returnByValue: true, awaitPromise: true });
    if (r.exceptionDetails) throw new Error(`page: ${r.exceptionDetails.text} ${JSON.stringify(r.exceptionDetails.exception || {})}`);
    return r.result.value;
  }
  async waitFor(expr, what, ms = 15000) {
    const t0 = Date.now();
    for (;;) {
      const v = await this.eval(expr);
      if (v) return v;
      if (Date.now() - t0 > ms) throw new Error(`timed out waiting for ${what}`);
      await sleep(50);
    }
  }
  async click(selector) {
    const box = await this.eval(`(() => { const r = document.querySelector(${JSON.stringify(selector)})
      .getBoundingClientRect(); return { x: r.x + r.width / 2, y: r.y + r.height / 2 }; })()`);
    for (const type of ['mouseMoved', 'mousePressed', 'mouseReleased']) {
      await this.send('Input.dispatchMouseEvent', { type, x: box.x, y: box.y, button: 'left', clickCount: 1 });
    }
  }
  async type(text) { await this.send('Input.insertText', { text }); }   // as an input method commits it
  async key(key, code, keyCode) {
    await this.send('Input.dispatchKeyEvent', { type: 'keyDown', key, code, windowsVirtualKeyCode: keyCode,
      text: key === 'Enter' ? '\r' : undefined });
    await this.send('Input.dispatchKeyEvent', { type: 'keyUp', key, code, windowsVirtualKeyCode: keyCode });
  }
}

// What the page shows: one entry per mask box, one per candidate row.
const RENDERED = `[...document.querySelectorAll('#results .mask')].map((box) =>
  [...box.querySelectorAll('.cand')].map((row) => ({
    token: row.querySelector('.tok').textContent,
    pct: row.querySelector('.pct').textContent,
    bar: row.querySelector('.bar').getBoundingClientRect().width /
         row.querySelector('.track').getBoundingClientRect().width,
    sequence: row.querySelector('.seq').textContent,
    marked: (row.querySelector('.seq mark') || {}).textContent || null,
  })))`;

function sameAsService(shown, want) {
  return shown.length === want.length && shown.every((rows, m) => rows.length === want[m].length &&
    rows.every((r, i) => r.token === want[m][i].token && r.sequence === want[m][i].sequence &&
      r.marked === want[m][i].token && r.pct === (100 * want[m][i].score).toFixed(1) + '%' &&
      Math.abs(r.bar - Math.max(want[m][i].score, 0)) < 0.01 + 2 / 600));   // 2 px minimum bar
}

async function browserChecks(base, exe) {
  const b = new Browser(exe);
  try {
    const { targetId } = await b.send('Target.createTarget', { url: 'about:blank' });
    const { sessionId } = await b.send('Target.attachToTarget', { targetId, flatten: true });
    const page = new Page(b, sessionId);
    await page.send('Page.enable');
    await page.send('Runtime.enable');
    await page.send('Emulation.setDeviceMetricsOverride', { width: 820, height: 760, deviceScaleFactor: 1, mobile: false });
    const loaded = b.event('Page.loadEventFired');
    await page.send('Page.navigate', { url: `${base}/` });
    await loaded;
    check('web.ui_loads', await page.eval(`document.title.startsWith('bertfill') &&
      document.activeElement === document.getElementById('text') &&
      document.querySelectorAll('#examples button').length === 5`), 'title, focus or examples missing');

    // Type a sentence, press Enter.
    await page.click('#text');
    await page.type(SENTENCE);
    await page.key('Enter', 'Enter', 13);
    await page.waitFor(`document.querySelectorAll('#results .cand').length === 5 &&
      !document.getElementById('go').disabled`, 'five candidates');
    const shown = await page.eval(RENDERED);
    check('web.ui_typed', sameAsService(shown, direct(SENTENCE)),
      `shown ${JSON.stringify(shown).slice(0, 400)} vs ${JSON.stringify(direct(SENTENCE)).slice(0, 300)}`);
    check('web.ui_status', /^1 \[MASK\] filled in \d+ ms$/.test(await page.eval(`document.getElementById('status').textContent`)));
    const shot = await page.send('Page.captureScreenshot', { format: 'png' });
    const png = Buffer.from(shot.data, 'base64');
    fs.mkdirSync(path.join(BUILD, 'web'), { recursive: true });
    fs.writeFileSync(path.join(BUILD, 'web', 'webui.png'), png);
    if (process.env.WEB_SCREENSHOT) fs.writeFileSync(path.resolve(ROOT, process.env.WEB_SCREENSHOT), png);
    check('web.ui_screenshot', png.length > 10000 && png.subarray(1, 4).toString() === 'PNG', `${png.length} bytes`);

    // An example with two masks... typed; then an example button.
    await page.eval(`document.getElementById('text').value = ''`);
    await page.click('#text');
    await page.type(TWO_MASKS);
    await page.click('#go');
    await page.waitFor(`document.querySelectorAll('#results .mask').length === 2`, 'two mask boxes');
    check('web.ui_two_masks', sameAsService(await page.eval(RENDERED), direct(TWO_MASKS)), 'two masks rendered wrong');
    await page.click('#examples button:nth-child(3)');
    const third = '他说话总是模棱两可，让人捉摸不[MASK]。';
    await page.waitFor(`document.querySelectorAll('#results .mask').length === 1 &&
      document.querySelector('#results .seq').textContent.startsWith('他说话')`, 'the example\'s candidates');
    check('web.ui_example', sameAsService(await page.eval(RENDERED), direct(third)) &&
      await page.eval(`document.getElementById('text').value`) === third, 'example rendered wrong');

    // No [MASK]: the service's 400 message is shown, the old results cleared.
    await page.eval(`document.getElementById('text').value = ''`);
    await page.click('#text');
    await page.type('今天天气真好');
    await page.key('Enter', 'Enter', 13);
    const err = await page.waitFor(`(() => { const e = document.getElementById('error');
      return e.style.display === 'block' && e.textContent; })()`, 'the error box');
    check('web.ui_error', err === 'the text has no [MASK] to fill' &&
      await page.eval(`document.querySelectorAll('#results .cand').length`) === 0, `error box: ${err}`);
  } finally {
    await b.close();
  }
}

async function main() {
  let server;
  try {
    server = await startServer();
  } catch (e) {
    fail('web.start', e.message);
    process.exitCode = 1;
    return;
  }
  check('web.start', true);
  await httpChecks(server.base, server.port, server.line);
  const exe = process.env.CHROMIUM;
  if (!exe) skip('web.ui', process.env.CHROMIUM_MISSING || 'no Chromium');
  else await guarded('web.ui', () => browserChecks(server.base, exe));
  server.srv.kill('SIGTERM');
  const code = await new Promise((r) => server.srv.on('exit', (c, sig) => r(c === null ? sig : c)));
  check('web.stops', code === 0, `server exit: ${code}`);
  db.close();
  process.exitCode = exitCode();
}

main();
