'use strict';
// index.js — bertfill for CommonJS: getLoadablePath() and load(db).  The
// extension lives in a platform package (bertfill-linux-x64, ...), an
// optional dependency of this one; require.resolve finds it where the
// package manager put it (platform.js holds what index.mjs shares).
const { loadablePath, loadInto } = require('./platform.js');

function getLoadablePath() {
  return loadablePath((spec) => require.resolve(spec));
}

function load(db) {
  loadInto(db, getLoadablePath());
}

module.exports = { getLoadablePath, load };
