#!/usr/bin/env bash
# t_wheel.sh — the Python wheels of `make dist` (docs/dist.md, packaging/wheel.py),
# built into a temporary folder from this tree (the .so of build/dist/ARCH is
# reused when t_dist.sh built it), then checked as a user gets them:
#   per architecture: the wheel's name carries the tarball's BUILDINFO
#   manylinux tag (read from the binary by packaging/tarball.sh) and WHEEL says
#   the same; its files are exactly the promised ones; RECORD lists every
#   other file with its right sha256 and size (wheel_check.py valid, which
#   also matches METADATA's name and version, and WHEEL, to the file name);
#   METADATA has the licence, classifiers, Requires-Python and the
#   description; `file` says the .so's architecture (x86-64 / ARM aarch64);
#   `twine check` passes where Debian's twine is installed;
#   x86_64, in a fresh folder outside the repository: a new venv
#   (/usr/bin/python3 -m venv, with the system's packages for apsw), `pip
#   install --no-index` the wheel, then tests/dist/wheel_check.py fills through
#   bertfill.load(): bert_fill, fill_candidates, extension loading off again,
#   apsw (python3-apsw) the same; an int8 load of the installed model with its
#   directory read-only (a read-only bind mount in a mount namespace as root,
#   chmod a-w otherwise): the derived file goes to BERTFILL_CACHE_DIR
#   (bert_debug's model says so) and nothing is written next to the weights;
#   load() on a Python whose sqlite3 cannot load extensions raises
#   bertfill.LoadError saying what to do: a stand-in sqlite3 module whose
#   Connection has no enable_load_extension, and every python3 on PATH built
#   without loadable extensions (a pyenv build, where there is one).
# Skipped with the reason: without python3-venv, apsw, twine, unshare rights
# (as root) or the cross compiler.
set -u
cd "$(dirname "$0")/../.."
repo=$PWD
tmp=$(mktemp -d)
ro_model=""
cleanup() { [ -n "$ro_model" ] && chmod -R u+w "$ro_model" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
suite=wheel
. tests/dist/dist_lib.sh

dist_build
dist_arches

for arch in $arches; do
  tag=$(tar xzf "$tmp/dist/bertfill-$version-linux-$arch.tar.gz" -O "bertfill-$version-linux-$arch/BUILDINFO" |
        sed -n 's/^manylinux=//p')
  whl=$tmp/dist/bertfill-$version-py3-none-$tag.whl
  check "${arch}_tag" "$([ -n "$tag" ] && [ -f "$whl" ] && echo 1 || echo 0)" \
    "no wheel tagged with BUILDINFO's $tag: $(cd "$tmp/dist" && ls | tr '\n' ' ')"
  [ -f "$whl" ] || whl=$(ls "$tmp"/dist/bertfill-"$version"-*_"$arch".whl 2>/dev/null | head -1)
  [ -f "$whl" ] || continue   # its other checks on a wrongly tagged one
  x=$tmp/x/$arch; mkdir -p "$x" && (cd "$x" && /usr/bin/python3 -m zipfile -e "$whl" .)
  di=bertfill-$version.dist-info
  got=$(cd "$x" && find . -type f | sed 's|^\./||' | LC_ALL=C sort | tr '\n' ' ')
  want=$( (echo bertfill/__init__.py bertfill/bertfill.so bertfill/BUILDINFO bertfill/model/MODEL_CARD.md
           git ls-files model/bertfill-zh-tiny | sed 's|^|bertfill/|'
           echo $di/METADATA $di/WHEEL $di/RECORD $di/LICENSE $di/licenses/utf8proc $di/licenses/unicode $di/top_level.txt) |
         tr ' ' '\n' | grep . | LC_ALL=C sort | tr '\n' ' ')
  check "${arch}_contents" "$([ "$got" = "$want" ] && echo 1 || echo 0)" "got: $got; want: $want"
  check "${arch}_wheel_tag" "$(grep -qx "Tag: py3-none-$tag" "$x/$di/WHEEL" && grep -qx 'Root-Is-Purelib: false' "$x/$di/WHEEL" && echo 1 || echo 0)" \
    "WHEEL: $(tr '\n' '|' <"$x/$di/WHEEL")"
  record=$(/usr/bin/python3 tests/dist/wheel_check.py valid "$whl" 2>&1)
  check "${arch}_record" "$([ "$record" = ok ] && echo 1 || echo 0)" "wheel_check.py valid: $record"
  meta=$x/$di/METADATA
  check "${arch}_metadata" "$(grep -qx "Version: $version" "$meta" && grep -qx 'License: Apache-2.0' "$meta" &&
    grep -q '^Classifier: License :: OSI Approved :: Apache Software License$' "$meta" &&
    grep -q '^Requires-Python: >=' "$meta" && grep -q 'bertfill.load(conn)' "$meta" && echo 1 || echo 0)" \
    "METADATA: $(head -20 "$meta" | tr '\n' '|')"
  case $arch in x86_64) want_file="x86-64" ;; aarch64) want_file="ARM aarch64" ;; esac
  check "${arch}_file" "$(file -b "$x/bertfill/bertfill.so" | grep -q "ELF 64-bit LSB shared object, $want_file," && echo 1 || echo 0)" \
    "file says: $(file -b "$x/bertfill/bertfill.so")"
  if command -v twine >/dev/null; then
    check "${arch}_twine" "$(twine check --strict "$whl" >"$tmp/twine.out" 2>&1 && echo 1 || echo 0)" "$(tr '\n' ' ' <"$tmp/twine.out")"
  else echo "skip wheel_${arch}_twine: no twine (apt-get install twine)"; fi
done

whl=$(ls "$tmp"/dist/bertfill-"$version"-py3-none-manylinux_*_x86_64.whl 2>/dev/null | head -1)
[ -n "$whl" ] || exit 0
venv=$tmp/venv
if ! /usr/bin/python3 -m venv --system-site-packages "$venv" >"$tmp/venv.log" 2>&1; then
  echo "skip wheel_venv: /usr/bin/python3 -m venv failed (apt-get install python3-venv): $(tail -1 "$tmp/venv.log")"; exit 0
fi
if ! "$venv/bin/pip" install -q --no-index --no-deps "$whl" >"$tmp/pip.log" 2>&1; then
  echo "FAIL wheel_pip_install: $(tail -3 "$tmp/pip.log" | tr '\n' ' ')"; exit 0
fi
echo "ok wheel_pip_install"
# Every Python runs in $work, outside the repository: a checkout's ./bertfill.so
# in the current folder would be taken for the package by `python -c 'import bertfill'`.
work=$tmp/work; mkdir -p "$work"
# run_check CMD...: wheel_check.py's lines; a check that stops with an error is a FAIL
run_check() {
  (cd "$work" && env -u BERTFILL_MODEL -u PYTHONPATH BERTFILL_CACHE_DIR="$tmp/cache" "$@") 2>"$tmp/check.err" ||
    echo "FAIL wheel_check: ${*: -2}: stopped: $(tail -3 "$tmp/check.err" | tr '\n' ' ')"
}
run_check "$venv/bin/python" "$repo/tests/dist/wheel_check.py" fills "$version"

model=$(cd "$work" && "$venv/bin/python" -c 'import bertfill; print(bertfill.model_path())')
if [ "$(id -u)" = 0 ]; then
  if unshare -m true 2>/dev/null; then
    run_check unshare -m sh -c 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" "$1" && shift && exec "$@"' \
      ro "$model" "$venv/bin/python" "$repo/tests/dist/wheel_check.py" int8
  else echo "skip wheel_int8_readonly: root without unshare -m rights cannot make the model read-only"; fi
else
  ro_model=$model; chmod -R a-w "$model"
  run_check "$venv/bin/python" "$repo/tests/dist/wheel_check.py" int8
fi

# A Python whose sqlite3 cannot load extensions: a stand-in sqlite3 module
# (Connection without enable_load_extension, as such a build has), then the
# real ones on PATH (pyenv builds often are), the installed package on PYTHONPATH.
mkdir -p "$tmp/fake/sqlite3"
cat >"$tmp/fake/sqlite3/__init__.py" <<'PY'
class Connection:  # what sqlite3 of a Python built without --enable-loadable-sqlite-extensions has
    def execute(self, *args):
        raise AssertionError("no SQL expected")
def connect(*args, **kwargs):
    return Connection()
PY
run_check env PYTHONPATH="$tmp/fake" "$venv/bin/python" "$repo/tests/dist/wheel_check.py" no_ext stand_in
site=$(cd "$work" && "$venv/bin/python" -c 'import bertfill, os; print(os.path.dirname(os.path.dirname(bertfill.__file__)))')
for py in $(type -ap python3 | sort -u); do
  [ "$("$py" -c 'import sqlite3; print(hasattr(sqlite3.Connection, "enable_load_extension"))' 2>/dev/null)" = False ] || continue
  run_check env PYTHONPATH="$site" PYTHONNOUSERSITE=1 "$py" "$repo/tests/dist/wheel_check.py" no_ext "$(echo "$py" | tr -c 'a-zA-Z0-9\n' _)"
done
exit 0
