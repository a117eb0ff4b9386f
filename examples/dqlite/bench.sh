#!/usr/bin/env bash
# bench.sh — one model, one run: a column fill on a single node (sqlite3, no
# dqlite) against the three-node cluster (examples/dqlite), the time of one
# bert_fill call from each shell, and the time from kill -9 of the leader to
# the first write on the new leader.  Numbers in examples/dqlite/README.md.
#
#   bash examples/dqlite/bench.sh [MODEL_DIR]     (default: the shipped model)
#
# The column: the 256 sentences of 16-23 tokens of `make bench`
# (tests/bench/sentences.py, batch-256), filled in chunks of $CHUNK (32) rows,
# each chunk one statement and one transaction, the same statement on both:
#   UPDATE t SET y = f.filled FROM fill_rows('SELECT id, x FROM t
#     WHERE id BETWEEN a AND b AND y IS NULL') AS f WHERE t.id = f.key
# single node: all chunks in one sqlite3 process on a WAL database file;
# cluster: one `dqlite` shell call per chunk (a new process each).
# Per call: $CALLS texts never seen before (batch-2000), one new shell process
# per call: `sqlite3 DB -cmd '.load ...' "SELECT bert_fill(...)"` (extension
# and model load included), the same in one sqlite3 process (warm), and
# `dqlite -s ... "SELECT bert_fill(...)"`; and `dqlite ... "SELECT 1"`.
# Failover: another column filled the same way, the leader killed after 3
# chunks; the time from the kill to the end of the first chunk sent after it.
# Needs: make all build/bfnode, go-dqlite, sqlite3, python3.  Ports 24301-3.
set -eu
cd "$(dirname "$0")/../.."
MODEL=${1:-model/bertfill-zh-tiny}
CHUNK=${CHUNK:-32}
CALLS=${CALLS:-20}
EXT=$PWD/bertfill.so
OUT=build/dqlite-bench
export BF_CLUSTER_DIR=$OUT/cluster BF_CLUSTER_PORTS="24301 24302 24303" BERTFILL_MODEL=$MODEL
S=127.0.0.1:24301,127.0.0.1:24302,127.0.0.1:24303
rm -rf "$OUT" && mkdir -p "$OUT"
trap 'bash examples/dqlite/stop.sh >/dev/null 2>&1' EXIT
now() { date +%s.%N; }
dq() { timeout 30 dqlite -s "$S" demo "$1"; }
sq() { sqlite3 -batch "$OUT/single.db" -cmd ".load $EXT" "$@"; }

/usr/bin/python3 tests/bench/sentences.py "$MODEL" "$OUT/sentences.tsv"
values() {  # values SET FIRST COUNT: "(1,'text'),..." from sentences.tsv
  awk -F'\t' -v set="$1" -v from="$2" -v n="$3" '$1 == set && ++i >= from && i < from + n {
    printf "%s(%d,'\''%s'\'')", (c++ ? "," : ""), c, $2 }' "$OUT/sentences.tsv"
}
texts() { awk -F'\t' -v set="$1" -v from="$2" -v n="$3" \
  '$1 == set && ++i >= from && i < from + n { print $2 }' "$OUT/sentences.tsv"; }
ROWS=256
chunk_sql() {  # chunk_sql TABLE A B
  echo "UPDATE $1 SET y = f.filled FROM fill_rows('SELECT id, x FROM $1" \
    "WHERE id BETWEEN $2 AND $3 AND y IS NULL') AS f WHERE $1.id = f.key"
}
echo "model $MODEL; $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores;" \
  "load before: $(cut -d' ' -f1-3 /proc/loadavg)"

# ---- single node --------------------------------------------------------------
sq "PRAGMA journal_mode=WAL" >/dev/null
sq "CREATE TABLE t(id INTEGER PRIMARY KEY, x TEXT, y TEXT);
    INSERT INTO t(id, x) VALUES $(values batch-256 1 $ROWS)"
for ((a = 1; a <= ROWS; a += CHUNK)); do echo "$(chunk_sql t $a $((a + CHUNK - 1)));"; done >"$OUT/chunks.sql"
t0=$(now); sq <"$OUT/chunks.sql"; t1=$(now)
single_rate=$(awk -v a="$t0" -v b="$t1" -v n=$ROWS 'BEGIN { printf "%.1f", n / (b - a) }')
sq "SELECT id, y FROM t ORDER BY id" >"$OUT/single.txt"

texts batch-2000 1 "$CALLS" >"$OUT/calls-cold.txt"
texts batch-2000 $((CALLS + 1)) "$CALLS" >"$OUT/calls-warm.txt"
texts batch-2000 $((2 * CALLS + 1)) "$CALLS" >"$OUT/calls-cluster.txt"
t0=$(now)
while read -r x; do sq "SELECT bert_fill('$x')" >/dev/null; done <"$OUT/calls-cold.txt"
t1=$(now)
single_cold=$(awk -v a="$t0" -v b="$t1" -v n="$CALLS" 'BEGIN { printf "%.1f", 1000 * (b - a) / n }')
# warm: one process; the first call (model load) is not counted
{ echo "SELECT bert_fill('热身[MASK]');"; echo ".timer on"
  sed "s/.*/SELECT bert_fill('&');/" "$OUT/calls-warm.txt"; } | sq >"$OUT/warm.txt"
single_warm=$(awk '/^Run Time/ { s += $4; n++ } END { printf "%.1f", 1000 * s / n }' "$OUT/warm.txt")

# ---- cluster ------------------------------------------------------------------
bash examples/dqlite/start.sh >"$OUT/start.log"
dq "CREATE TABLE t(id INTEGER PRIMARY KEY, x TEXT, y TEXT)"
dq "CREATE TABLE u(id INTEGER PRIMARY KEY, x TEXT, y TEXT)"
dq "INSERT INTO t(id, x) VALUES $(values batch-256 1 $ROWS)"
dq "INSERT INTO u(id, x) VALUES $(values batch-2000 $((3 * CALLS + 1)) $ROWS)"
t0=$(now)
for ((a = 1; a <= ROWS; a += CHUNK)); do dq "$(chunk_sql t $a $((a + CHUNK - 1)))"; done
t1=$(now)
cluster_rate=$(awk -v a="$t0" -v b="$t1" -v n=$ROWS 'BEGIN { printf "%.1f", n / (b - a) }')
dq "SELECT id, y FROM t ORDER BY id" >"$OUT/cluster.txt"
same=$(cmp -s "$OUT/single.txt" "$OUT/cluster.txt" && echo "identical" || echo "DIFFERENT")

t0=$(now)
while read -r x; do dq "SELECT bert_fill('$x')" >/dev/null; done <"$OUT/calls-cluster.txt"
t1=$(now)
cluster_call=$(awk -v a="$t0" -v b="$t1" -v n="$CALLS" 'BEGIN { printf "%.1f", 1000 * (b - a) / n }')
t0=$(now)
for ((i = 0; i < CALLS; i++)); do dq "SELECT 1" >/dev/null; done
t1=$(now)
shell_call=$(awk -v a="$t0" -v b="$t1" -v n="$CALLS" 'BEGIN { printf "%.1f", 1000 * (b - a) / n }')

# ---- failover -----------------------------------------------------------------
leader=$(dq ".leader")
k=${leader##*:2430}
: >"$OUT/failover.log"
for ((a = 1; a <= ROWS; a += CHUNK)); do
  if [ $a -eq $((3 * CHUNK + 1)) ]; then
    killed_at=$(now); kill -9 "$(cat "$BF_CLUSTER_DIR/n$k.pid")"
  fi
  sent=$(now)
  until dq "$(chunk_sql u $a $((a + CHUNK - 1)))" >/dev/null 2>&1; do sleep 0.05; done
  echo "$a $sent $(now)" >>"$OUT/failover.log"
done
first=$(awk -v t="$killed_at" '$2 >= t { print $3; exit }' "$OUT/failover.log")
failover=$(awk -v a="$killed_at" -v b="$first" 'BEGIN { printf "%.2f", b - a }')
new_leader=$(dq ".leader")

echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| $(basename "$MODEL") | single node (sqlite3) | 3-node dqlite cluster |"
echo "|---|---|---|"
echo "| column fill, $ROWS sentences of 16-23 tokens, chunks of $CHUNK (sentences/s)" \
  "| $single_rate | $cluster_rate (column $same) |"
echo "| bert_fill from the shell, new process per call (ms) | $single_cold | $cluster_call |"
echo "| bert_fill, one sqlite3 process, model loaded (ms) | $single_warm | — |"
echo "| \`SELECT 1\` from the dqlite shell (ms) | — | $shell_call |"
echo "| kill -9 of the leader to the first chunk written by the new leader (s)" \
  "| — | $failover ($leader → $new_leader) |"
