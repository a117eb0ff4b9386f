#!/usr/bin/env node
// examples/web/server.js — the fill-mask service contract, as a few lines of
// Node.js over bertfill (node:http + better-sqlite3; no framework).
//
//   node examples/web/server.js [--port 8000] [--model DIR] [--ext PATH]
//                               [--workers N] [--db FILE]
//   (or: make web PORT=8000)
//
//   POST /predict   {"text": "今天天气真[MASK]啊", "top_k": 5}
//                -> {"results": [{"token": "好", "score": 0.93, "sequence": "今天天气真好啊"}, ...]}
//   GET  /          the WebUI (index.html): type a sentence, see the candidates
//   GET  /metrics   the Prometheus text of bert_stats('prometheus')
//
// `results` is the top `top_k` (default 5, 1..50) candidates of the first
// [MASK], best first; `sequence` is the text with that mask filled.  A text
// with several masks also gets `masks`: one such list per [MASK], in text
// order (`results` is masks[0]; in each sequence only that mask is filled,
// the others stay [MASK]).  Errors are {"error": "..."}: 400 for bad input
// (not JSON, no "text", no [MASK], too long for the model, bad top_k), 413
// for a body over 64 KiB, 503 with Retry-After when bertfill answers
// "bertfill: busy" (every encoder slot taken past the busy timeout), 500
// otherwise.  It listens on 127.0.0.1 only.
//
// Options (or environment): --port (PORT; default 8000; 0 = any free port),
// --model (a model directory; default: the extension's own choice,
// BERTFILL_MODEL or the shipped model), --ext (BERTFILL_EXT; default the
// repository's ./bertfill), --workers (WEB_WORKERS; default 1: one process;
// N > 1 forks N processes with node:cluster sharing the port, the "more
// workers" deployment), --db (the database holding the cache table
// bertfill_cache; default :memory:, the process-wide LRU still caches).
//
// better-sqlite3 is synchronous: one process runs one request at a time, and
// requests wait in the event loop meanwhile.  It comes from an npm install
// next to this file or above it, or else from tests/clients/node/node_modules, where
// `make test` (tests/clients/node/install.sh) builds it.
'use strict';
const cluster = require('node:cluster');
const fs = require('node:fs');
const http = require('node:http');
const path = require('node:path');

const ROOT = path.resolve(__dirname, '..', '..');
const HOST = '127.0.0.1';
const MAX_BODY = 64 * 1024;
const MAX_TOP_K = 50;

function loadBetterSqlite3() {
  for (const name of ['better-sqlite3', path.join(ROOT, 'tests/clients/node/node_modules/better-sqlite3')]) {
    try {
      return require(name);
    } catch (e) {
      if (e.code !== 'MODULE_NOT_FOUND') throw e;
    }
  }
  throw new Error('better-sqlite3 is not installed: run `bash tests/clients/node/install.sh` in the bertfill ' +
    'repository (or `npm install better-sqlite3@12` next to this file)');
}

function options(argv, env) {
  const o = {
    port: env.PORT || '8000',
    model: null,
    ext: env.BERTFILL_EXT || path.join(ROOT, 'bertfill'),
    workers: env.WEB_WORKERS || '1',
    db: ':memory:',
  };
  for (let i = 2; i < argv.length; i++) {
    const key = argv[i].replace(/^--/, '');
    if (!(key in o) || argv[i] === key || i + 1 >= argv.length) {
      throw new Error(`usage: server.js [--port N] [--model DIR] [--ext PATH] [--workers N] [--db FILE]` +
        ` (not understood: ${argv[i]})`);
    }
    o[key] = argv[++i];
  }
  o.port = Number(o.port);
  o.workers = Number(o.workers);
  if (!Number.isInteger(o.port) || o.port < 0 || o.port > 65535) throw new Error('--port: 0..65535');
  if (!Number.isInteger(o.workers) || o.workers < 1 || o.workers > 256) throw new Error('--workers: 1..256');
  o.ext = path.resolve(o.ext);
  return o;
}

// The HTTP status for an error message of bertfill.
function statusFor(message) {
  if (/^bertfill: busy\b/.test(message)) return 503;
  if (/invalid UTF-8|tokens long/.test(message)) return 400;   // the text itself
  return 500;
}

class HttpError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

// One connection and its statements; predict() answers a parsed request body.
function openService(o) {
  const Database = loadBetterSqlite3();
  const db = new Database(o.db);
  db.loadExtension(o.ext);
  // Load the model now, so that a missing model stops the server at start.
  const model = db.prepare('SELECT bert_load(?) AS d').get(o.model).d;
  const candidates = db.prepare(
    'SELECT mask, token, score, sequence FROM fill_candidates(?, ?) ORDER BY mask, rank');
  const prometheus = db.prepare("SELECT bert_stats('prometheus') AS p");

  function predict(body) {
    if (body === null || typeof body !== 'object' || Array.isArray(body)) {
      throw new HttpError(400, 'the body must be a JSON object: {"text": "...[MASK]..."}');
    }
    if (typeof body.text !== 'string' || body.text === '') {
      throw new HttpError(400, 'missing "text": a non-empty string with [MASK] in it');
    }
    const k = body.top_k === undefined ? 5 : body.top_k;
    if (!Number.isInteger(k) || k < 1 || k > MAX_TOP_K) {
      throw new HttpError(400, `"top_k" must be an integer from 1 to ${MAX_TOP_K}`);
    }
    let rows;
    try {
      rows = candidates.all(body.text, k);
    } catch (e) {
      throw new HttpError(statusFor(e.message), e.message);
    }
    if (rows.length === 0) throw new HttpError(400, 'the text has no [MASK] to fill');
    const masks = [];
    for (const r of rows) {
      (masks[r.mask] = masks[r.mask] || []).push({ token: r.token, score: r.score, sequence: r.sequence });
    }
    return masks.length > 1 ? { results: masks[0], masks } : { results: masks[0] };
  }

  function metrics() {
    return prometheus.get().p;
  }

  return { db, model, predict, metrics };
}

function send(res, status, type, body, headers = {}) {
  res.writeHead(status, { 'Content-Type': type, 'Content-Length': Buffer.byteLength(body),
    'Cache-Control': 'no-store', ...headers });
  res.end(body);
}
function sendJson(res, status, obj, headers) {
  send(res, status, 'application/json; charset=utf-8', JSON.stringify(obj), headers);
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let size = 0;
    req.on('data', (c) => {
      size += c.length;
      if (size <= MAX_BODY) return chunks.push(c);
      // Too big: drain the rest unread and answer (the connection then closes).
      req.removeAllListeners('data');
      req.resume();
      reject(new HttpError(413, `the body is over ${MAX_BODY} bytes`));
    });
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

function handler(service, page) {
  return async (req, res) => {
    const url = new URL(req.url, `http://${HOST}`);
    const route = { '/': ['GET'], '/index.html': ['GET'], '/predict': ['POST'], '/metrics': ['GET'] }[url.pathname];
    try {
      if (!route) throw new HttpError(404, `no such path: ${url.pathname}`);
      if (!route.includes(req.method)) {
        res.setHeader('Allow', route.join(', '));
        throw new HttpError(405, `${url.pathname} takes ${route.join(', ')}`);
      }
      if (url.pathname === '/predict') {
        const text = await readBody(req);
        let body;
        try { body = JSON.parse(text); } catch (e) { throw new HttpError(400, `invalid JSON: ${e.message}`); }
        sendJson(res, 200, service.predict(body));
      } else if (url.pathname === '/metrics') {
        send(res, 200, 'text/plain; version=0.0.4; charset=utf-8', service.metrics());
      } else {
        send(res, 200, 'text/html; charset=utf-8', page);
      }
    } catch (e) {
      const status = e instanceof HttpError ? e.status : 500;
      if (!res.headersSent) {
        const headers = status === 503 ? { 'Retry-After': '1' } : status === 413 ? { Connection: 'close' } : {};
        sendJson(res, status, { error: e.message }, headers);
      }
    }
  };
}

function serve(o) {
  const service = openService(o);
  const page = fs.readFileSync(path.join(__dirname, 'index.html'));
  const server = http.createServer(handler(service, page));
  server.listen(o.port, HOST, () => {
    if (!cluster.isWorker) {
      console.log(`bertfill web: http://${HOST}:${server.address().port}/ (${service.model}; 1 process)`);
    }
  });
  const stop = () => server.close(() => { service.db.close(); process.exit(0); });
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  return service;
}

function main() {
  let o;
  try {
    o = options(process.argv, process.env);
  } catch (e) {
    console.error(`bertfill web: ${e.message}`);
    process.exit(2);
  }
  if (o.workers === 1 || cluster.isWorker) {
    try {
      serve(o);
    } catch (e) {
      console.error(`bertfill web: ${e.message}`);
      process.exit(1);
    }
    return;
  }
  // The primary forks the workers; each opens its own connection and they
  // share the listening socket.  A worker that dies is not replaced.
  let announced = false;
  cluster.on('listening', (worker, address) => {
    if (announced) return;
    announced = true;
    console.log(`bertfill web: http://${HOST}:${address.port}/ (${o.workers} worker processes)`);
  });
  cluster.on('exit', (worker, code) => {
    if (code) console.error(`bertfill web: worker ${worker.process.pid} exited with status ${code}`);
    if (Object.keys(cluster.workers).length === 0) process.exit(code || 0);
  });
  for (let i = 0; i < o.workers; i++) cluster.fork();
  const stop = () => { for (const w of Object.values(cluster.workers)) w.kill('SIGTERM'); };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

if (require.main === module) main();
module.exports = { statusFor, options };
