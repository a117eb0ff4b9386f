#!/usr/bin/env bash
# t_install.sh — `make install` and `make uninstall` into a temporary DESTDIR:
#   $(DESTDIR)$(PREFIX)/lib/bertfill.so
#   $(DESTDIR)$(PREFIX)/share/bertfill/bertfill-zh-tiny/{config.json,vocab.txt,...,MODEL_CARD.md}
# with the default PREFIX (/usr/local) and another one; the installed extension
# loads from another directory and fills masks with the installed model (named
# in BERTFILL_MODEL, and found by itself without it), answers bert_version();
# the uninstall removes every installed file.  The model's card
# (model/MODEL_CARD.md, the attribution its CC BY training texts require)
# is installed into the model's directory, byte for byte.  The model files installed are
# exactly those git tracks: never the files a load wrote next to the weights
# of this checkout (model.fingerprint, model.int8.safetensors,
# model.packed.safetensors, model.bf16.safetensors, and the
# NAME.tmp.PID.THREAD an interrupted write leaves), which are put there for
# the test when missing; uninstall removes those the installed model got
# from its own loads.  The same from a copy without .git (a tarball):
# Makefile, model card and model directory only, where the checkout has none of them.
set -u
cd "$(dirname "$0")/../.."
EXT=${BERTFILL_EXT:-./bertfill}
case "$EXT" in /*) ;; *) EXT=$PWD/$EXT ;; esac
if ! command -v make >/dev/null; then echo "skip install: no make"; exit 0; fi
if [ ! -f "$EXT.so" ]; then echo "FAIL install: $EXT.so not built"; exit 1; fi
tmp=$(mktemp -d)
model=model/bertfill-zh-tiny
load_files="model.fingerprint model.int8.safetensors model.packed.safetensors model.bf16.safetensors
  model.fingerprint.tmp.1.1"
made=()   # the load files this test put into the checkout, removed at exit
for f in $load_files; do
  [ -e "$model/$f" ] || { echo "written by t_install.sh" >"$model/$f" && made+=("$model/$f"); }
done
trap 'rm -rf "$tmp"; for f in "${made[@]}"; do rm -f "$f"; done' EXIT
status=0
ok() { echo "ok install.$1"; }
fail() { echo "FAIL install.$1: $2"; status=1; }
check() { if [ "$2" == "$3" ]; then ok "$1"; else fail "$1" "got [$2], want [$3]"; fi; }
mk() { make --no-print-directory -s EXTENSION="$EXT.so" "$@" 2>&1; }
# Every file under a directory with its mode, relative and sorted.
listing() { (cd "$1" && find . -type f -printf '%m %P\n' | LC_ALL=C sort); }
# What a load may leave in the installed model's directory.
leave_load_files() { for f in $load_files model.int8.safetensors.tmp.9.9 model.packed.safetensors.tmp.9.9 model.bf16.safetensors.tmp.9.9; do echo x >"$1/$f"; done; }

# The model's files: those git tracks (without git, all but the load files).
if model_files=$(git ls-files -- "$model" 2>/dev/null) && [ -n "$model_files" ]; then
  model_files=$(echo "$model_files" | sed 's,.*/,,' | LC_ALL=C sort)
else
  model_files=$(cd "$model" && LC_ALL=C ls | grep -vE '^model\.(fingerprint|int8\.safetensors|packed\.safetensors)($|\.tmp\.)')
fi
for prefix in /usr/local /opt/bertfill; do
  name=${prefix//\//_}
  dest=$tmp/dest$name
  if [ "$prefix" = /usr/local ]; then out=$(mk install DESTDIR="$dest")
  else out=$(mk install DESTDIR="$dest" PREFIX="$prefix"); fi
  [ $? -eq 0 ] || { fail "make$name" "make install failed: $out"; continue; }
  want=$(echo "755 ${prefix#/}/lib/bertfill.so"
         for f in $model_files MODEL_CARD.md; do echo "644 ${prefix#/}/share/bertfill/bertfill-zh-tiny/$f"; done)
  check "files$name" "$(listing "$dest")" "$(echo "$want" | LC_ALL=C sort)"
  same=1
  cmp -s "$EXT.so" "$dest$prefix/lib/bertfill.so" || same=0
  for f in $model_files; do
    cmp -s "model/bertfill-zh-tiny/$f" "$dest$prefix/share/bertfill/bertfill-zh-tiny/$f" || same=0
  done
  cmp -s model/MODEL_CARD.md "$dest$prefix/share/bertfill/bertfill-zh-tiny/MODEL_CARD.md" || same=0
  check "same_bytes$name" "$same" 1

  # Loaded by its installed path from an unrelated directory, with the
  # installed model named in BERTFILL_MODEL.
  lib=$dest$prefix/lib/bertfill
  share=$dest$prefix/share/bertfill/bertfill-zh-tiny
  got=$(cd / && BERTFILL_MODEL=$share sqlite3 :memory: -cmd ".load $lib" \
        "select bert_fill('今天天气真[MASK]啊') like '今天天气真_%啊', json_extract(bert_debug(), '\$.model.dir')" 2>&1)
  check "loads$name" "$got" "1|$(cd "$share" && pwd -P)"

  # The installed extension finds its model by itself, from any directory:
  # no BERTFILL_MODEL, model.dir = $share (../share/bertfill/bertfill-zh-tiny
  # from the directory of the loaded bertfill.so); and says its version.
  got=$(cd / && env -u BERTFILL_MODEL sqlite3 :memory: -cmd ".load $lib" \
        "select bert_fill('今天天气真[MASK]啊') like '今天天气真_%啊', json_extract(bert_debug(), '\$.model.dir'), json_extract(bert_debug(), '\$.model.source')" 2>&1)
  check "finds_model$name" "$got" "1|$(cd "$share" && pwd -P)|default"
  want_version=$(sed -n 's/^#define BFX_VERSION "\(.*\)"$/\1/p' ext/sqlite/version.h)
  got=$(cd / && sqlite3 :memory: -cmd ".load $lib" "select bert_version()" 2>&1)
  check "version$name" "$got" "$want_version"
  # an int8 load of the installed model writes model.int8.safetensors next
  # to it (the directory is writable here); uninstall removes that too
  got=$(cd / && env -u BERTFILL_MODEL sqlite3 :memory: -cmd ".load $lib" \
        "select bert_load(NULL, 'int8') like '%, int8', json_extract(bert_debug(), '\$.model.int8_weights')" 2>&1)
  check "int8$name" "$got" "1|file"

  leave_load_files "$share"
  if [ "$prefix" = /usr/local ]; then out=$(mk uninstall DESTDIR="$dest")
  else out=$(mk uninstall DESTDIR="$dest" PREFIX="$prefix"); fi
  [ $? -eq 0 ] || fail "uninstall$name" "make uninstall failed: $out"
  check "uninstall$name" "$(listing "$dest"; [ -e "$dest$prefix/share/bertfill" ] && echo "share/bertfill is left")" ""
done

# A copy without .git (a tarball): the Makefile and the model directory with
# the load files in it; the extension is taken as built (make -o).
copy=$tmp/tarball
mkdir -p "$copy/model" && cp Makefile "$copy/" && cp -r "$model" model/MODEL_CARD.md "$copy/model/"
tmk() { GIT_CEILING_DIRECTORIES=$tmp make --no-print-directory -s -C "$copy" -o "$EXT.so" \
          EXTENSION="$EXT.so" DESTDIR="$tmp/dest_tarball" "$@" 2>&1; }
out=$(tmk install) || fail "tarball_make" "make install failed: $out"
want=$(echo "755 usr/local/lib/bertfill.so"
       for f in $model_files MODEL_CARD.md; do echo "644 usr/local/share/bertfill/bertfill-zh-tiny/$f"; done)
check "files_tarball" "$(listing "$tmp/dest_tarball")" "$(echo "$want" | LC_ALL=C sort)"
# uninstall removes the load files of the installed model, also where the
# copy has none of its own
share=$tmp/dest_tarball/usr/local/share/bertfill/bertfill-zh-tiny
leave_load_files "$share"
(cd "$copy/$model" && rm -f $load_files)
out=$(tmk uninstall) || fail "tarball_uninstall" "make uninstall failed: $out"
check "uninstall_tarball" "$(listing "$tmp/dest_tarball"; [ -e "$tmp/dest_tarball/usr/local/share/bertfill" ] && echo "share/bertfill is left")" ""
exit $status
