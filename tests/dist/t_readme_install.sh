#!/usr/bin/env bash
# t_readme_install.sh — README.md's install lines work when pasted into a new
# shell (issue 37's "done when"), with the packages `make dist` builds from
# this tree.
#
# README.md marks each block a user copies with an HTML comment on the line
# right before its fence: <!-- install:pip -->, <!-- install:npm -->,
# <!-- install:tarball --> (the install lines) and <!-- use:python -->,
# <!-- use:node -->, <!-- use:sqlite3 --> (the lines of use, whose last line
# ends with a comment, "# TEXT" or "// TEXT": what it prints).  The suite runs
# `make dist` into a scratch folder, then for each package, in a fresh folder
# holding that dist/ (as the README says: the checkout, or a project with
# dist/ copied in), runs the install block and then the use block, unchanged,
# in one new shell: `env -i HOME=<fresh> PATH=/usr/bin:/bin bash -c`:
#   pip      the block (it makes and activates a venv with /usr/bin/python3),
#            then `python3 use.py` with the Python lines;
#   npm      in a fresh npm project (a package.json of its own), the block,
#            then `node use.js`; better-sqlite3 is tests/clients/node's build,
#            linked into node_modules after the install (no download);
#   tarball  the block, then the sqlite3 line;
# each must exit 0 and print what its use block's comment says.  What the new
# shell gets besides HOME and PATH only keeps it offline, never changes a line:
# PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 (the wheel needs nothing from
# an index), npm_config_offline=true (the arm64 optional dependency is in no
# registry: npm passes over it), and the test run's BERTFILL_SHARED_BATCH_DIR.
# The from-source block (`make deps demo`, `make test`: apt-get as root) is not
# run; `make -n` checks that its targets exist.  Skipped with the reason: a
# machine that is not x86-64 (the lines name x86-64's files), no python3 venv
# module, no node/npm, no better-sqlite3 build.
set -u
cd "$(dirname "$0")/../.."
repo=$PWD
tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
suite=readme
. tests/dist/dist_lib.sh

# readme_block NAME: the lines of the fenced block on the line after <!-- NAME -->
readme_block() {
  awk -v m="<!-- $1 -->" '
    state == 0 && $0 == m { state = 1; next }
    state == 1 { if ($0 ~ /^```/) { state = 2; next } else exit }
    state == 2 { if ($0 ~ /^```/) exit; print }' README.md
}
# shown TEXT: what a use block says it prints (its last line's comment)
shown() { tail -n 1 <<<"$1" | sed -E 's@.*(#|//) +@@'; }

missing=""
for b in install:pip install:npm install:tarball use:python use:node use:sqlite3; do
  eval "block_${b/:/_}=\$(readme_block $b)"
  v=block_${b/:/_}
  [ -n "${!v}" ] || missing="$missing <!-- $b -->"
done
check blocks "$([ -z "$missing" ] && echo 1 || echo 0)" "README.md has no fenced block right after:$missing"
[ -z "$missing" ] || exit 0

for t in "deps demo" test; do
  check "source_make_$(tr ' ' _ <<<"$t")" "$(make -n $t >/dev/null 2>&1 && echo 1 || echo 0)" \
    "make -n $t failed: the README's from-source line names no such target"
done

if [ "$(uname -m)" != x86_64 ]; then
  echo "skip readme_install: this is $(uname -m); the README's lines name the x86-64 files"; exit 0
fi
dist_build HAVE_ARM64=   # the lines name x86-64's files: no arm64 build

# fresh NAME: a new folder $tmp/NAME holding dist/ (the packages just built) and a HOME
fresh() { mkdir -p "$tmp/$1/home" && ln -s "$tmp/dist" "$tmp/$1/dist"; }
# new_shell DIR SCRIPT: SCRIPT in a new shell in DIR, as pasted by a user; output in $out, status in $rc
new_shell() {
  local keep=()
  [ -n "${BERTFILL_SHARED_BATCH_DIR:-}" ] && keep+=("BERTFILL_SHARED_BATCH_DIR=$BERTFILL_SHARED_BATCH_DIR")
  out=$(cd "$1" && env -i HOME="$1/home" PATH=/usr/bin:/bin LANG=C.UTF-8 PIP_NO_INDEX=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 npm_config_offline=true npm_config_update_notifier=false \
    "${keep[@]}" bash -c "$2" 2>&1 </dev/null)
  rc=$?
}
# use_check NAME WANT: the last line printed is WANT, the status 0
use_check() {
  check "$1" "$([ "$rc" = 0 ] && [ "$(tail -n 1 <<<"$out")" = "$2" ] && echo 1 || echo 0)" \
    "status $rc, printed: $(tail -n 5 <<<"$out" | tr '\n' '|'); the README says: $2"
}

# pip: the block, then the Python lines, in one shell
if /usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null; then
  fresh pip
  printf '%s\n' "$block_use_python" >"$tmp/pip/use.py"
  new_shell "$tmp/pip" "set -e
$block_install_pip
python3 use.py"
  use_check pip "$(shown "$block_use_python")"
else
  echo "skip readme_pip: /usr/bin/python3 has no venv/ensurepip (apt-get install python3-venv)"
fi

# npm: a fresh project, the block, better-sqlite3 linked in, then the Node.js lines
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "skip readme_npm: no node/npm (make test-deps)"
else
  fresh npm
  echo '{ "name": "app", "version": "1.0.0", "private": true }' >"$tmp/npm/package.json"
  new_shell "$tmp/npm" "set -e
$block_install_npm"
  check npm_install "$([ "$rc" = 0 ] && [ -f "$tmp/npm/node_modules/bertfill/package.json" ] &&
    [ -f "$tmp/npm/node_modules/bertfill-linux-x64/bertfill.so" ] && echo 1 || echo 0)" \
    "status $rc: $(tail -n 5 <<<"$out" | tr '\n' '|')"
  if [ ! -f "$tmp/npm/node_modules/bertfill/package.json" ]; then
    echo "FAIL readme_node_use: not run: the npm install lines failed"
  elif ! bash tests/clients/node/install.sh 2>"$tmp/node-install.err"; then
    echo "skip readme_node_use: better-sqlite3 unavailable: $(tail -n 1 "$tmp/node-install.err")"
  else
    ln -s "$repo/tests/clients/node/node_modules/better-sqlite3" "$tmp/npm/node_modules/better-sqlite3"
    printf '%s\n' "$block_use_node" >"$tmp/npm/use.js"
    new_shell "$tmp/npm" "node use.js"
    use_check node_use "$(shown "$block_use_node")"
  fi
fi

# the release tarball: the block, then the sqlite3 line
fresh tarball
new_shell "$tmp/tarball" "set -e
$block_install_tarball
$block_use_sqlite3"
use_check tarball "$(shown "$block_use_sqlite3")"
exit 0
