#!/usr/bin/env bash
# t_sql.sh — runs every tests/sql/*.sql through the real sqlite3 shell with
# the extension loaded (.load $BERTFILL_EXT), in the style of sqlean's tests:
#
#   select 'name', <expression that must be 1>;
#
# prints "ok name" when the row is "name|1" and "FAIL name: ..." otherwise; a
# check that printed nothing (the shell died) fails too.  Expected errors:
#
#   -- error name: substring of the message
#   <the statement that must fail, on one line>
#
# Headers of a .sql file:
#   -- model: NAME    BERTFILL_MODEL=$BUILD/models/NAME (default: tiny);
#                     "default" leaves BERTFILL_MODEL unset (the shipped model)
#   -- needs: PATH    skip the file unless PATH (relative to the repo) exists
# In the file, @MODELS@ is replaced by $BUILD/models, @EXT@ by the extension
# and @TMP@ by a scratch directory.  Each file runs in one shell on a fresh database file
# @TMP@/test.db.  BF_PRELOAD=lib is put in LD_PRELOAD of the shell (ASan).
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
EXT=${BERTFILL_EXT:-./bertfill}
MODELS=$(cd "$BUILD/models" 2>/dev/null && pwd)
if ! command -v sqlite3 >/dev/null; then echo "skip sql: no sqlite3 shell (apt-get install sqlite3)"; exit 0; fi
if [ ! -e "$EXT.so" ] && [ ! -e "$EXT" ]; then echo "FAIL sql: extension $EXT.so not built"; exit 1; fi
if [ -z "$MODELS" ]; then echo "FAIL sql: no test models in $BUILD/models (make models)"; exit 1; fi
case "$EXT" in /*) ;; *) EXT=$PWD/$EXT ;; esac

status=0
for f in tests/sql/*.sql; do
  file=$(basename "$f" .sql)
  need=$(sed -n 's/^-- needs: *//p' "$f" | head -n1)
  if [ -n "$need" ] && [ ! -e "$need" ]; then
    grep -oE "^select '[^']+'" "$f" | sed "s/^select '//; s/'\$//" | while read -r n; do
      echo "skip $file.$n: $need is missing"; done
    grep -oE "^-- error [^:]+" "$f" | sed 's/^-- error //' | while read -r n; do
      echo "skip $file.$n: $need is missing"; done
    continue
  fi
  model=$(sed -n 's/^-- model: *//p' "$f" | head -n1)
  model=${model:-tiny}
  tmp=$(mktemp -d)
  # Expected errors become ".print @@error NAME", the statement,
  # ".print @@end" (the expected messages go to expect.txt); placeholders
  # are filled in.
  awk -v models="$MODELS" -v tmp="$tmp" -v ext="$EXT" -v expect="$tmp/expect.txt" '
    BEGIN { print ".load " ext; pending = 0; printf "" > expect }
    { gsub(/@MODELS@/, models); gsub(/@TMP@/, tmp); gsub(/@EXT@/, ext) }
    /^-- error [^:]+:/ {
      line = $0; sub(/^-- error /, "", line)
      i = index(line, ":"); name = substr(line, 1, i - 1); want = substr(line, i + 1)
      sub(/^ +/, "", want)
      print name "\t" want >> expect
      print ".print @@error " name; pending = 1; next
    }
    pending && /^[ \t]*$/ { next }
    pending && /^--/ { next }
    pending { print; print ".print @@end"; pending = 0; next }
    { print }
  ' "$f" >"$tmp/script.sql"
  envs=()
  if [ "$model" = default ]; then envs+=(-u BERTFILL_MODEL); else envs+=("BERTFILL_MODEL=$MODELS/$model"); fi
  [ -n "${BF_PRELOAD:-}" ] && envs+=("LD_PRELOAD=$BF_PRELOAD")
  out=$(cd "$tmp" && env "${envs[@]}" BERTFILL_PROGRESS=0 stdbuf -oL -eL sqlite3 -batch "$tmp/test.db" <"$tmp/script.sql" 2>&1)
  rc=$?
  printf '%s\n' "$out" >"$tmp/out.txt"
  awk -v file="$file" -v expectfile="$tmp/expect.txt" -v expected="$(grep -oE "^select '[^']+'" "$f" | sed "s/^select '//; s/'\$//"; grep -oE "^-- error [^:]+" "$f" | sed 's/^-- error //')" '
    BEGIN {
      n = split(expected, names, "\n"); for (i = 1; i <= n; i++) if (names[i] != "") want[names[i]] = 1
      while ((getline line < expectfile) > 0) { i = index(line, "\t"); msg[substr(line, 1, i - 1)] = substr(line, i + 1) }
    }
    /^@@error / { ename = substr($0, 9); esub = msg[ename]; buf = ""; collecting = 1; next }
    /^@@end$/ {
      collecting = 0; seen[ename] = 1
      if (index(buf, esub) > 0 && buf ~ /rror/) print "ok " file "." ename
      else { gsub(/\n/, " / ", buf); print "FAIL " file "." ename ": expected an error containing \"" esub "\", got: " (buf == "" ? "no error" : buf) }
      next
    }
    collecting { buf = buf $0 "\n"; next }
    {
      i = index($0, "|")
      name = i ? substr($0, 1, i - 1) : ""
      if (i && (name in want)) {
        seen[name] = 1; v = substr($0, i + 1)
        if (v == "1") print "ok " file "." name
        else print "FAIL " file "." name ": got " (v == "" ? "NULL" : v)
      } else if ($0 != "") print "FAIL " file ": unexpected output: " $0
    }
    END { for (k in want) if (!(k in seen)) print "FAIL " file "." k ": no result (did the shell stop?)" }
  ' "$tmp/out.txt"
  if [ "$rc" -ge 128 ]; then echo "FAIL $file: sqlite3 died with status $rc"; status=1; fi
  rm -rf "$tmp"
done
exit $status
