#!/usr/bin/env bash
# t_deps.sh — what `make deps` and `make test-deps` install (issue 40, item 6).
# `make deps` (.ci/install-deps) installs what building and using bertfill
# needs, and what make test's own suites need (python3, numpy), and names
# each package as it installs it; the full test suite's peers (Node.js, PHP,
# Chromium, dqlite, clang-format, sqlite-utils, fonts...) are `make
# test-deps` (.ci/install-test-deps), which .ci/run calls too; `make test`
# installs nothing.  make test-deps also runs tests/dist/npm-tools/install.sh
# (npm ci from the npm registry).  The scripts run with apt-get, sudo and npm
# replaced by stand-ins that record their arguments: nothing is installed.
set -u
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/bin"
cat >"$tmp/bin/apt-get" <<'SH'
#!/bin/sh
echo "$*" >>"$APT_LOG"
SH
printf '#!/bin/sh\nexec "$@"\n' >"$tmp/bin/sudo"
cp "$tmp/bin/apt-get" "$tmp/bin/npm"
chmod +x "$tmp/bin/apt-get" "$tmp/bin/sudo" "$tmp/bin/npm"
check() { if [ "$2" = 1 ]; then echo "ok deps.$1"; else echo "FAIL deps.$1: $3"; fi; }

# installed SCRIPT: runs it with the stand-ins; prints the packages it installed, one a line
installed() {
  : >"$tmp/apt.log"
  APT_LOG="$tmp/apt.log" PATH="$tmp/bin:$PATH" bash "$1" >"$tmp/out" 2>&1
  sed -n 's/^install //p' "$tmp/apt.log" | tr ' ' '\n' | grep -v '^-' | grep . | LC_ALL=C sort -u
}

build_use="build-essential libopenblas-dev libsqlite3-dev libutf8proc-dev python3 python3-numpy sqlite3"
peers="chromium clang-format fonts-wqy-microhei go-dqlite libdqlite-dev php-cli php-sqlite3
       python3-prometheus-client sqlite-utils unicode-data"
got=$(installed .ci/install-deps)
check make_deps_build_and_use_only "$([ "$(echo $got)" = "$build_use" ] && echo 1)" \
  "make deps installs: $(echo $got); expected only: $build_use"
unlisted=""
for p in $got; do grep -qw -- "$p" "$tmp/out" || unlisted="$unlisted $p"; done
check make_deps_lists_them "$([ -z "$unlisted" ] && echo 1)" "not named in its output:$unlisted ($(cat "$tmp/out"))"

got=$(installed .ci/install-test-deps)
missing=""
for p in $peers; do echo "$got" | grep -qx -- "$p" || missing="$missing $p"; done
check test_deps_installs_the_peers "$([ -z "$missing" ] && echo 1)" "make test-deps does not install:$missing"
unlisted=""
for p in $got; do grep -qw -- "$p" "$tmp/out" || unlisted="$unlisted $p"; done
check test_deps_lists_them "$([ -z "$unlisted" ] && echo 1)" "not named in its output:$unlisted"
check test_deps_npm_tools "$(grep -q 'tests/dist/npm-tools/install.sh' "$tmp/out" && echo 1)" \
  "make test-deps does not run tests/dist/npm-tools/install.sh: $(tail -3 "$tmp/out" | tr '\n' ' ')"

ci=$(grep -v '^ *#' .ci/run)
check ci_runs_both "$(echo "$ci" | grep -q 'install-deps' && echo "$ci" | grep -q 'install-test-deps' && echo 1)" \
  ".ci/run must call .ci/install-deps and .ci/install-test-deps"
check make_targets "$(make -s -n deps | grep -q 'ci/install-deps' && make -s -n test-deps | grep -q 'ci/install-test-deps' && echo 1)" \
  "make deps / make test-deps do not run .ci/install-deps / .ci/install-test-deps"
check make_test_installs_nothing "$(make -s -n test 2>/dev/null | grep -q -E 'apt-get|install-(test-)?deps' || echo 1)" \
  "make test runs apt-get or an install script"
