// bftest.js — what the Node.js test suites share (the counterpart of
// tests/python/bftest.py): where the repository, the build, the test models and the
// extension are, better-sqlite3 from tests/clients/node/node_modules, and the check
// lines tests/run.sh counts ("ok NAME", "FAIL NAME: why", "skip NAME: why").
'use strict';
const path = require('node:path');

const ROOT = path.resolve(__dirname, '..', '..', '..');
const BUILD = path.resolve(ROOT, process.env.BUILD || 'build');
const MODELS = path.join(BUILD, 'models');
const TINY = path.join(MODELS, 'tiny');
// The extension without .so, as sqlite3_load_extension takes it.
const EXT = path.resolve(ROOT, process.env.BERTFILL_EXT || './bertfill');

let failures = 0;
function ok(name) { console.log('ok ' + name); }
function fail(name, why) { failures++; console.log(`FAIL ${name}: ${why}`); }
function skip(name, why) { console.log(`skip ${name}: ${why}`); }
function check(name, cond, why) { if (cond) ok(name); else fail(name, why || 'condition is false'); }
// Runs fn; an exception it throws fails the check instead of ending the suite.
async function guarded(name, fn) {
  try { await fn(); } catch (e) { fail(name, `threw ${e && e.stack ? e.stack.split('\n').slice(0, 3).join(' | ') : e}`); }
}
function exitCode() { return failures ? 1 : 0; }

module.exports = { ROOT, BUILD, MODELS, TINY, EXT, ok, fail, skip, check, guarded, exitCode };
