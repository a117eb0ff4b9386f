#!/usr/bin/env bash
# t_plugins.sh — the Datasette and sqlite-utils plugin wheels of `make dist`
# (docs/dist.md, Plugins; packaging/plugins.py), built into a temporary folder
# from this tree (dist_lib.sh), then checked as a user gets them:
#   each wheel: valid (wheel_check.py valid: METADATA, WHEEL, RECORD against
#   its name), exactly its files, METADATA's exact pin Requires-Dist:
#   bertfill==VERSION and its host, licence, classifiers (Framework ::
#   Datasette for Datasette's), entry_points.txt's group and the module's
#   hook; `twine check --strict` where Debian's twine is installed;
#   in a fresh folder outside the repository, a new `/usr/bin/python3 -m venv
#   --system-site-packages` (Debian's pluggy and sqlite_utils visible), pip
#   offline (--no-index, no configuration): each plugin refused while the
#   bertfill wheel is missing and only another version of it (99.0.0, made
#   here) can be found, naming the pin (pip's resolver); then bertfill's
#   x86-64 wheel and both plugins installed (--no-deps: Datasette and
#   sqlite-utils 3.34 are not in Debian 12) and `pip check` finds the pin
#   satisfied;
#   tests/dist/plugin_check.py: the entry points through importlib.metadata,
#   pluggy's PluginManager("datasette") / ("sqlite_utils") loading them and
#   calling prepare_connection on a real sqlite3 connection, which then fills
#   as the release tarball's .so does in the sqlite3 shell; sqlite-utils'
#   Python API after bertfill.load(conn) (and its plugin on 3.34+), Datasette
#   where installed; Debian's sqlite-utils 3.30 CLI with --load-extension
#   "$(python -c 'import bertfill; print(bertfill.loadable_path())')".
# Skipped with the reason: without python3-venv, pip, pluggy, twine, the
# sqlite3 shell, sqlite-utils or Datasette (each the checks that need it).
set -u
cd "$(dirname "$0")/../.."
repo=$PWD
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
suite=plugins
. tests/dist/dist_lib.sh
if ! command -v sqlite3 >/dev/null; then echo "skip plugins: no sqlite3 shell to compare with"; exit 0; fi
export BERTFILL_SHARED_BATCH_DIR=${BERTFILL_SHARED_BATCH_DIR:-$tmp} BERTFILL_CACHE_DIR=$tmp/cache
unset BERTFILL_MODEL PYTHONPATH

dist_build
text='中华人民共[MASK]国'
declare -A host=([datasette]=datasette [sqlite_utils]='sqlite-utils>=3.34')
for group in datasette sqlite_utils; do
  module=${group}_bertfill
  whl=$tmp/dist/$module-$version-py3-none-any.whl
  if [ ! -f "$whl" ]; then check "${group}_wheel" 0 "make dist wrote no $whl: $(cd "$tmp/dist" && ls | tr '\n' ' ')"; continue; fi
  valid=$(/usr/bin/python3 tests/dist/wheel_check.py valid "$whl" 2>&1)
  check "${group}_valid" "$([ "$valid" = ok ] && echo 1 || echo 0)" "wheel_check.py valid: $valid"
  x=$tmp/x/$module; mkdir -p "$x" && (cd "$x" && /usr/bin/python3 -m zipfile -e "$whl" .)
  di=$module-$version.dist-info
  got=$(cd "$x" && find . -type f | sed 's|^\./||' | LC_ALL=C sort | tr '\n' ' ')
  want="$di/LICENSE $di/METADATA $di/RECORD $di/WHEEL $di/entry_points.txt $di/top_level.txt $module.py "
  check "${group}_contents" "$([ "$got" = "$want" ] && echo 1 || echo 0)" "got: $got; want: $want"
  meta=$x/$di/METADATA
  check "${group}_metadata" "$(grep -qx "Requires-Dist: bertfill==$version" "$meta" &&
    grep -qx "Requires-Dist: ${host[$group]}" "$meta" && [ "$(grep -c '^Requires-Dist:' "$meta")" = 2 ] &&
    grep -qx 'License: Apache-2.0' "$meta" && grep -qx 'Classifier: License :: OSI Approved :: Apache Software License' "$meta" &&
    { [ $group != datasette ] || grep -qx 'Classifier: Framework :: Datasette' "$meta"; } &&
    grep -q '^Requires-Python: >=' "$meta" && grep -qx 'Description-Content-Type: text/markdown' "$meta" &&
    grep -q 'bertfill.load(conn)' "$meta" && echo 1 || echo 0)" "METADATA: $(sed '/^$/q' "$meta" | tr '\n' '|')"
  check "${group}_entry_points" "$([ "$(cat "$x/$di/entry_points.txt")" = "$(printf '[%s]\nbertfill = %s' $group $module)" ] &&
    grep -qx 'Root-Is-Purelib: true' "$x/$di/WHEEL" && grep -qx '^def prepare_connection(conn):' "$x/$module.py" &&
    grep -qx "__version__ = \"$version\"" "$x/$module.py" && echo 1 || echo 0)" \
    "entry_points.txt: $(tr '\n' '|' <"$x/$di/entry_points.txt"); WHEEL: $(tr '\n' '|' <"$x/$di/WHEEL")"
done
if ! command -v twine >/dev/null; then echo "skip plugins_twine: no twine (apt-get install twine)"
else
  twine check --strict "$tmp"/dist/*_bertfill-"$version"-py3-none-any.whl >"$tmp/twine.out" 2>&1
  for group in datasette sqlite_utils; do   # one line per wheel: "Checking PATH: PASSED"
    check "${group}_twine" "$(sed 's/\x1b\[[0-9;]*m//g' "$tmp/twine.out" | grep -qx "Checking .*/${group}_bertfill-$version-py3-none-any.whl: PASSED" && echo 1 || echo 0)" \
      "twine check --strict: $(tr '\n' ' ' <"$tmp/twine.out")"
  done
fi

# What the release tarball's .so gives in the sqlite3 shell: what the plugins must give.
mkdir -p "$tmp/tar" && tar xzf "$tmp/dist/bertfill-$version-linux-x86_64.tar.gz" -C "$tmp/tar"
want=$(cd "$tmp" && sqlite3 -batch -cmd ".load $tmp/tar/bertfill-$version-linux-x86_64/bertfill" :memory: \
       "select bert_fill('$text'); select token || ' ' || printf('%.4f', score) from fill_candidates('$text') where rank = 1" 2>&1)
want_fill=$(echo "$want" | sed -n 1p) want_top=$(echo "$want" | sed -n 2p)
case "$want_fill" in *MASK*|''|*rror*) echo "FAIL plugins_shell: the release tarball's .so in sqlite3: $want_fill"; exit 1 ;; esac

bertfill_whl=$(ls "$tmp"/dist/bertfill-"$version"-py3-none-manylinux_*_x86_64.whl 2>/dev/null | head -1)
[ -n "$bertfill_whl" ] || { echo "FAIL plugins_bertfill_wheel: make dist wrote no x86-64 bertfill wheel"; exit 1; }
venv=$tmp/venv
# Debian's pip is shared through --system-site-packages (0.2 s); ensurepip (10 s) only without it.
if ! { /usr/bin/python3 -m venv --without-pip --system-site-packages "$venv" && "$venv/bin/python" -c "import pip"; } >"$tmp/venv.log" 2>&1 &&
   ! { rm -rf "$venv" && /usr/bin/python3 -m venv --system-site-packages "$venv"; } >>"$tmp/venv.log" 2>&1; then
  echo "skip plugins_venv: /usr/bin/python3 -m venv failed (apt-get install python3-venv python3-pip): $(tail -1 "$tmp/venv.log")"; exit 0
fi
work=$tmp/work; mkdir -p "$work"
# pip offline, whatever the machine's pip configuration says (PIP_FIND_LINKS, an index)
pip() {
  (cd "$work" && env -u PIP_FIND_LINKS -u PIP_INDEX_URL -u PIP_EXTRA_INDEX_URL PIP_CONFIG_FILE=/dev/null \
     PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 "$venv/bin/python" -m pip "$@")
}

# The exact pin: with only another version of bertfill (99.0.0, made here) to
# be found, pip's resolver refuses each plugin, naming the pin.
mkdir -p "$tmp/other"
/usr/bin/python3 - "$repo/packaging" "$tmp/other" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
from wheel_writer import metadata, wheel_file, write_wheel
di = "bertfill-99.0.0.dist-info"
write_wheel(sys.argv[2], "bertfill-99.0.0-py3-none-any.whl", di,
            {"bertfill/__init__.py": b"", di + "/METADATA": metadata(["Name: bertfill", "Version: 99.0.0"], ""),
             di + "/WHEEL": wheel_file("py3-none-any", purelib=True)}, 0)
PY
for group in datasette sqlite_utils; do
  whl=$tmp/dist/${group}_bertfill-$version-py3-none-any.whl
  [ -f "$whl" ] || continue
  pip install --no-cache-dir --no-index --find-links "$tmp/other" "$whl" >"$tmp/pin.out" 2>&1; rc=$?
  check "${group}_pin" "$([ $rc != 0 ] && grep -q "requirement bertfill==$version (from ${group/_/-}-bertfill) (from versions: 99.0.0)" "$tmp/pin.out" &&
    grep -q "No matching distribution found for bertfill==$version" "$tmp/pin.out" && echo 1 || echo 0)" \
    "pip install --no-index, only bertfill 99.0.0 to be found: rc $rc: $(tail -3 "$tmp/pin.out" | tr '\n' ' ')"
done

if ! pip install -q --no-cache-dir --no-index --no-deps "$bertfill_whl" \
     "$tmp"/dist/{datasette,sqlite_utils}_bertfill-"$version"-py3-none-any.whl >"$tmp/pip.log" 2>&1; then
  echo "FAIL plugins_pip_install: $(tail -3 "$tmp/pip.log" | tr '\n' ' ')"; exit 0
fi
echo "ok plugins_pip_install"
# pip check: the hosts may be missing here (not in Debian 12), never bertfill's pin
pip check >"$tmp/check.out" 2>&1
# ("X requires bertfill, which is not installed." / "X has requirement bertfill==V, but you have ...")
check pip_check_pin "$(grep -q 'datasette-bertfill\|sqlite-utils-bertfill\|No broken requirements' "$tmp/check.out" &&
  ! grep -q 'requires bertfill,\|requirement bertfill==' "$tmp/check.out" && echo 1 || echo 0)" \
  "pip check: $(tr '\n' ' ' <"$tmp/check.out")"

(cd "$work" && "$venv/bin/python" "$repo/tests/dist/plugin_check.py" "$text" "$want_fill" "$want_top") 2>"$tmp/check.err" ||
  echo "FAIL plugins_check: plugin_check.py stopped: $(tail -3 "$tmp/check.err" | tr '\n' ' ')"

# sqlite-utils before 3.34 (Debian 12's 3.30): the extension by its path, as docs/dist.md shows.
if command -v sqlite-utils >/dev/null; then
  got=$(cd "$work" && sqlite-utils --load-extension "$("$venv/bin/python" -c 'import bertfill; print(bertfill.loadable_path())')" \
        db.sqlite "select bert_fill('$text') as filled" --raw 2>&1)
  check sqlite_utils_cli_load_extension "$([ "$got" = "$want_fill" ] && echo 1 || echo 0)" \
    "$(sqlite-utils --version): --load-extension bertfill.loadable_path(): [$got], want [$want_fill]"
else echo "skip plugins_sqlite_utils_cli_load_extension: no sqlite-utils (apt-get install sqlite-utils)"; fi
exit 0
