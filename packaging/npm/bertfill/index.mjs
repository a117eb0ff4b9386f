// index.mjs — bertfill for ES modules: getLoadablePath() and load(db),
// resolved with import.meta.resolve (synchronous in Node.js 20.6+; a
// require.resolve from this module where it is absent).  platform.js holds
// what index.js shares.
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import platform from './platform.js';

function resolve(spec) {
  if (typeof import.meta.resolve === 'function') return fileURLToPath(import.meta.resolve(spec));
  return createRequire(import.meta.url).resolve(spec);
}

export function getLoadablePath() {
  return platform.loadablePath(resolve);
}

export function load(db) {
  platform.loadInto(db, getLoadablePath());
}

export default { getLoadablePath, load };
