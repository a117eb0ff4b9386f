'use strict';
// platform.js — what bertfill's CJS (index.js) and ESM (index.mjs) entries
// share: which platform package holds the extension for this machine, the
// errors a user reads when there is none, and load(db) for the two SQLite
// bindings.  Each entry resolves the platform package's subpath
// "<package>/bertfill.so" with its own resolver (require.resolve,
// import.meta.resolve): the package manager's layout decides where it lies
// (npm, pnpm's symlinked store, a bundler), never a path built from this
// file's folder.  packaging/npm.sh writes this package (docs/dist.md).

// The platform packages that exist: "platform-arch" -> package name.
const PACKAGES = {
  'linux-x64': 'bertfill-linux-x64',
  'linux-arm64': 'bertfill-linux-arm64',
};
const SUBPATH = 'bertfill.so';

// glibc or musl on Linux: the packages hold glibc builds (their "libc"
// field).  Node.js's report says (about 20 ms to make: once per process).
let libc;
function linuxLibc() {
  if (libc === undefined) {
    try {
      libc = process.report.getReport().header.glibcVersionRuntime ? 'glibc' : 'musl';
    } catch (e) {
      libc = 'glibc';
    }
  }
  return libc;
}

function available() {
  return Object.keys(PACKAGES)
    .map((k) => `${PACKAGES[k]} (${k}, glibc)`)
    .join(', ');
}

const TARBALL_HINT =
  'Otherwise use the release tarball bertfill-<version>-linux-<arch>.tar.gz ' +
  '(make dist in the bertfill sources) and load its bertfill.so by path, ' +
  'or build bertfill from source (make).';

// The platform package for this process, or an Error that says why none.
function platformPackage() {
  const key = `${process.platform}-${process.arch}`;
  const name = PACKAGES[key];
  if (!name || (process.platform === 'linux' && linuxLibc() !== 'glibc')) {
    const what = process.platform === 'linux' ? `${key} (${linuxLibc()})` : key;
    throw new Error(
      `bertfill: no prebuilt extension for ${what}. ` +
        `The npm packages exist only for: ${available()}. ${TARBALL_HINT}`
    );
  }
  return name;
}

// The path of the extension, given a resolver of "<package>/bertfill.so".
function loadablePath(resolve) {
  const name = platformPackage();
  try {
    return resolve(`${name}/${SUBPATH}`);
  } catch (e) {
    const version = require('./package.json').version;
    throw new Error(
      `bertfill: the package ${name}, which holds the extension for ` +
        `${process.platform}-${process.arch}, is not installed (${e.code || e.message}). ` +
        `npm installs it with bertfill as an optional dependency: was it omitted ` +
        `(--omit=optional, --no-optional)? Install it: npm install ${name}@${version}. ` +
        TARBALL_HINT
    );
  }
}

// Loads the extension into db: better-sqlite3's Database (loadExtension), or
// node:sqlite's DatabaseSync (opened with { allowExtension: true }; loading
// is enabled only for this call).
function loadInto(db, path) {
  if (db && typeof db.enableLoadExtension === 'function') {
    try {
      db.enableLoadExtension(true);
    } catch (e) {
      throw new Error(
        'bertfill: this node:sqlite database cannot load extensions: open it with ' +
          `new DatabaseSync(file, { allowExtension: true }) (${e.message})`
      );
    }
    try {
      db.loadExtension(path);
    } finally {
      db.enableLoadExtension(false);
    }
  } else if (db && typeof db.loadExtension === 'function') {
    db.loadExtension(path);
  } else {
    throw new TypeError(
      'bertfill.load(db): db must be a better-sqlite3 Database or a node:sqlite DatabaseSync'
    );
  }
}

module.exports = { PACKAGES, loadablePath, loadInto };
