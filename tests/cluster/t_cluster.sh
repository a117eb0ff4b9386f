#!/usr/bin/env bash
# t_cluster.sh — bertfill in a three-node dqlite cluster on 127.0.0.1, and a
# leader killed in the middle of a column fill (examples/dqlite; README
# "Beyond one machine").
#
#   1. start three bfnode processes with examples/dqlite/start.sh; they join
#      one cluster; bert_fill and fill_candidates answer through Debian's
#      `dqlite` shell as in a single-node sqlite3 shell; and from a raw
#      client (tests/cluster/dqlite_wire.py) outside a transaction, after which the
#      leader still writes (bfnode's write guard)
#   2. fill a column in chunks with fill_rows, each chunk one UPDATE (one
#      transaction):
#        UPDATE t SET y = f.filled, n = n + 1 FROM fill_rows('SELECT id, x
#          FROM t WHERE id BETWEEN a AND b AND y IS NULL') AS f WHERE t.id = f.key
#      retrying a chunk until it succeeds; kill -9 the leader after a few
#      chunks; a new leader is elected and the fill finishes on it
#   3. every row filled exactly once (n = 1) with the value of bert_fill in a
#      single-node sqlite3 shell; the two live nodes' copies (.dump of each
#      node's own database) agree with it, bertfill_cache included
#   4. restart the killed node: it catches up and its copy agrees too
#   5. stop.sh ends every node; no node printed an assertion, a sanitizer
#      report or a crash
# Skips when libdqlite-dev or go-dqlite (the `dqlite` shell) is missing.
# BFNODE and BF_NODE_EXTENSION name another node program and extension for
# the nodes (an ASan build: see examples/dqlite/README.md); the single-node
# reference always uses $BERTFILL_EXT.
# Ports: three free ones from 25100 up, loopback only.  Every process it
# starts is ended by pid on exit, also on failure.
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
EXT=${BERTFILL_EXT:-./bertfill}
case "$EXT" in /*) ;; *) EXT=$PWD/$EXT ;; esac
[ -e "$EXT.so" ] && EXT=$EXT.so
BFNODE=${BFNODE:-$BUILD/bfnode}
NODE_EXT=${BF_NODE_EXTENSION:-$EXT}

if ! ${CC:-cc} -E -include dqlite.h -x c /dev/null >/dev/null 2>&1; then
  echo "skip cluster: libdqlite-dev is not installed (make test-deps, or apt-get install libdqlite-dev go-dqlite)"
  exit 0
fi
if ! command -v dqlite >/dev/null; then
  echo "skip cluster: no dqlite shell (make test-deps, or apt-get install go-dqlite)"; exit 0
fi
if ! command -v sqlite3 >/dev/null; then echo "skip cluster: no sqlite3 shell"; exit 0; fi
if [ ! -x "$BFNODE" ]; then echo "FAIL cluster: $BFNODE is not built (make test builds it)"; exit 1; fi

T=$BUILD/t_cluster
export BF_CLUSTER_DIR=$T BFNODE BF_EXTENSION=$NODE_EXT
bash examples/dqlite/stop.sh >/dev/null 2>&1  # nodes left by an interrupted run
rm -rf "$T"
mkdir -p "$T"
unset BERTFILL_MODEL  # the shipped model, in the nodes and in the reference

fill_pid=""
cleanup() {
  [ -n "$fill_pid" ] && kill "$fill_pid" 2>/dev/null
  bash examples/dqlite/stop.sh >/dev/null 2>&1
}
trap cleanup EXIT

fail=0
ok() { echo "ok cluster: $1"; }
bad() { echo "FAIL cluster: $1"; fail=1; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

# three free ports on 127.0.0.1
base=""
for b in $(seq 25100 3 25400); do
  busy=0
  for p in $b $((b + 1)) $((b + 2)); do (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null && busy=1; done
  if [ $busy = 0 ]; then base=$b; break; fi
done
[ -z "$base" ] && { echo "FAIL cluster: no three free ports in 25100..25402"; exit 1; }
export BF_CLUSTER_PORTS="$base $((base + 1)) $((base + 2))"
ADDR=(127.0.0.1:$base 127.0.0.1:$((base + 1)) 127.0.0.1:$((base + 2)))
S=$(IFS=,; echo "${ADDR[*]}")

# one statement through the dqlite shell (it waits for a leader: bounded)
dq() { timeout 15 dqlite -s "$S" demo "$1" 2>"$T/dq.err"; }
# the single-node answer: sqlite3 with the extension loaded
ref() { sqlite3 -batch :memory: -cmd ".load $EXT" "$@" 2>&1; }
# node K's own copy of the database (.dump asks that node, not the leader)
copy_of() {
  local d="$T/copy$1"
  rm -rf "$d" && mkdir -p "$d"
  (cd "$d" && timeout 15 dqlite -s "$S" demo ".dump ${ADDR[$1 - 1]} demo" >/dev/null 2>&1) || return 1
  sqlite3 -batch "$d/demo" "SELECT id, x, y, n FROM t ORDER BY id;
    SELECT model, hex(key), k, hex(result) FROM bertfill_cache ORDER BY id;" 2>&1
}
# wait (at most $2 s) until node $1's copy equals the file $3
copy_agrees() {
  local end=$(($(date +%s) + $2))
  while [ "$(date +%s)" -le $end ]; do
    copy_of "$1" >"$T/copy$1.txt" && cmp -s "$T/copy$1.txt" "$3" && return 0
    sleep 0.5
  done
  return 1
}

# --- 1. three nodes, one cluster ---------------------------------------------
if ! bash examples/dqlite/start.sh >"$T/start.log" 2>&1; then
  bad "start.sh failed: $(tail -n 3 "$T/start.log" | tr '\n' ' ')"; exit 1
fi
members=$(dq ".cluster")
if [ "$(grep -c '|voter$' <<<"$members")" = 3 ]; then ok "three nodes joined as voters"
else bad "cluster is: $(tr '\n' ' ' <<<"$members") $(cat "$T/dq.err")"; fi

want=$(ref "SELECT bert_fill('中华人民共[MASK]国')")
got=$(dq "SELECT bert_fill('中华人民共[MASK]国')")
if [ -n "$want" ] && [ "$got" = "$want" ]; then ok "bert_fill through the dqlite shell ($got)"
else bad "bert_fill: got '$got', single node '$want' $(cat "$T/dq.err")"; fi

q="SELECT mask, rank, token, token_id, printf('%.5f', score), sequence
   FROM fill_candidates('今天天气真[MASK]啊，适合出去[MASK]。', 3)"
want=$(ref "$q"); got=$(dq "$q")
if [ -n "$want" ] && [ "$got" = "$want" ]; then ok "fill_candidates through the dqlite shell"
else bad "fill_candidates: got '$got', single node '$want'"; fi

# a raw client's autocommit QUERY that would write bertfill's cache: bfnode's
# guard lets it compute without writing (dqlite 1.11 would not replicate the
# write and the leader would abort on its next write lock); then a write
wire() { timeout 30 "${PYTHON:-/usr/bin/python3}" tests/cluster/dqlite_wire.py "$S" "$@" 2>&1; }
was_leader=$(dq ".leader")
got="$(wire query "SELECT bert_fill('全心全意为人民服[MASK]')") / $(wire query \
  "SELECT key, filled FROM fill_rows('SELECT 7, ''中华人民共[MASK]国''')")"
after=$(wire exec "CREATE TABLE wire_probe(a)")
want="$(ref "SELECT bert_fill('全心全意为人民服[MASK]')") / 7|$(ref "SELECT bert_fill('中华人民共[MASK]国')")"
if [ "$got" = "$want" ] && [ "$after" = "changes 0" ] && [ "$(dq ".leader")" = "$was_leader" ]; then
  ok "autocommit queries from a raw client (bert_fill, fill_rows) answer; the leader writes next"
else
  bad "raw client: got '$got', want '$want'; then CREATE TABLE: '$after'; leader '$was_leader', now '$(dq .leader)'"
fi

# --- 2. a chunked column fill, leader killed in the middle ---------------------
ROWS=240 CHUNK=20
# texts of 10-23 characters cut from rotations of a few sentences, one [MASK]
# each (some repeat: the cache answers those)
texts=$(${PYTHON:-/usr/bin/python3} -c '
import sys
n = int(sys.argv[1])
s = "今天天气真好啊适合出去玩学习要持之以恒不能三天打鱼两天晒网北京是中国的首都我喜欢听音乐全心全意为人民服务"
rows = []
for i in range(n):
    r = s[i % len(s):] + s[:i % len(s)]
    m, p = 10 + (i * 7) % 14, (i * 5) % (10 + (i * 7) % 14)
    rows.append("(%d, \x27%s[MASK]%s\x27)" % (i + 1, r[:p], r[p + 1:m]))
print(",".join(rows))' $ROWS)
schema="CREATE TABLE t(id INTEGER PRIMARY KEY, x TEXT NOT NULL, y TEXT, n INTEGER NOT NULL DEFAULT 0)"
if ! dq "$schema" || ! dq "INSERT INTO t(id, x) VALUES $texts"; then
  bad "could not create the table: $(cat "$T/dq.err")"; exit 1
fi
ref "$schema; INSERT INTO t(id, x) VALUES $texts; SELECT bert_cache('memory');
     SELECT id, bert_fill(x) FROM t ORDER BY id;" | tail -n +2 >"$T/want.txt"
[ "$(wc -l <"$T/want.txt")" = $ROWS ] || { bad "reference run failed: $(head -n 2 "$T/want.txt")"; exit 1; }

# the leader, before the fill (no fault yet, so it stays the leader)
leader=$(dq ".leader")
k=""
for i in 1 2 3; do [ "${ADDR[i - 1]}" = "$leader" ] && k=$i; done
if [ -z "$k" ]; then bad "no leader before the fill ('$leader')"; exit 1; fi

# the fill: one line per attempt in fill.log: "chunk A-B ok|error SENT DONE"
(
  for ((a = 1; a <= ROWS; a += CHUNK)); do
    b=$((a + CHUNK - 1))
    end=$(($(date +%s) + 60))
    start=$(now)
    until timeout 15 dqlite -s "$S" demo "UPDATE t SET y = f.filled, n = n + 1
            FROM fill_rows('SELECT id, x FROM t WHERE id BETWEEN $a AND $b AND y IS NULL') AS f
            WHERE t.id = f.key" >/dev/null 2>&1; do
      echo "chunk $a-$b error $start $(now)"
      [ "$(date +%s)" -gt $end ] && exit 1
      sleep 0.1
      start=$(now)
    done
    echo "chunk $a-$b ok $start $(now)"
  done
) >"$T/fill.log" &
fill_pid=$!

# kill -9 the leader once 3 chunks are in
for _ in $(seq 3000); do
  [ "$(grep -c ' ok ' "$T/fill.log")" -ge 3 ] && break
  sleep 0.01
done
kill -9 "$(cat "$T/n$k.pid")"
killed_at=$(now)
done_before=$(grep -c ' ok ' "$T/fill.log")
echo "# killed the leader, node $k, after $done_before of $((ROWS / CHUNK)) chunks"
if [ "$done_before" -lt 3 ] || [ "$done_before" -ge $((ROWS / CHUNK)) ]; then
  bad "the leader was not killed in the middle of the fill ($done_before of $((ROWS / CHUNK)) chunks done)"
fi

waited=0
while kill -0 $fill_pid 2>/dev/null && [ $waited -lt 900 ]; do sleep 0.1; waited=$((waited + 1)); done
if kill -0 $fill_pid 2>/dev/null; then bad "the fill did not finish in 90 s"; exit 1; fi
wait $fill_pid; fill_rc=$?; fill_pid=""
# the first chunk sent after the kill and written (by the new leader)
first_ok=$(awk -v t="$killed_at" '$3 == "ok" && $4 > t { print $5; exit }' "$T/fill.log")
new_leader=$(dq ".leader")
if [ $fill_rc -eq 0 ] && [ "$(grep -c ' ok ' "$T/fill.log")" = $((ROWS / CHUNK)) ] &&
  [ -n "$first_ok" ] && [ -n "$new_leader" ] && [ "$new_leader" != "$leader" ]; then
  ok "leader $leader killed mid-fill; $new_leader took over; the fill finished"
  echo "# a chunk sent after the kill was written ${first_ok:+$(secs "$killed_at" "$first_ok") s}" \
    "after it; $(grep -c ' error ' "$T/fill.log") failed attempts retried"
else
  bad "fill rc $fill_rc, new leader '$new_leader': $(tail -n 3 "$T/fill.log" | tr '\n' ' ')"
fi

# --- 3. exactly once, the single-node values, copies agree ---------------------
dq "SELECT id, y FROM t ORDER BY id" >"$T/got.txt"
once=$(dq "SELECT count(*) || ' ' || sum(n = 1 AND y IS NOT NULL) FROM t")
if [ "$once" = "$ROWS $ROWS" ] && cmp -s "$T/got.txt" "$T/want.txt"; then
  ok "every row filled exactly once, with the single-node bert_fill value"
else
  bad "rows, rows filled once: '$once' of $ROWS; differences:" \
    "$(diff "$T/want.txt" "$T/got.txt" | head -n 4 | tr '\n' ' ')"
fi

# the leader's database, then each live node's own copy (a follower applies
# a commit when the next heartbeat tells it, so wait for it a little)
{ dq "SELECT id, x, y, n FROM t ORDER BY id"
  dq "SELECT model, hex(key), k, hex(result) FROM bertfill_cache ORDER BY id"; } >"$T/leader.txt"
cache_rows=$(($(wc -l <"$T/leader.txt") - ROWS))
agree=1 live=""
for i in 1 2 3; do
  [ "$i" = "$k" ] && continue
  live+=" $i"
  copy_agrees "$i" 20 "$T/leader.txt" || agree=0
done
if [ $agree = 1 ] && [ $cache_rows -gt 0 ]; then
  ok "the live nodes' copies (nodes$live) agree with the leader: t and $cache_rows bertfill_cache rows"
else
  bad "copies differ from the leader's: $(for i in $live; do
    echo "node $i: $(cmp "$T/copy$i.txt" "$T/leader.txt" 2>&1)"; done | tr '\n' ' ')"
fi

# --- 4. the killed node comes back and catches up -----------------------------
if bash examples/dqlite/start.sh >>"$T/start.log" 2>&1 && copy_agrees "$k" 30 "$T/leader.txt"; then
  ok "node $k restarted, caught up, its copy agrees"
else
  bad "node $k after restart: $(tail -n 1 "$T/start.log"); $(cmp "$T/copy$k.txt" "$T/leader.txt" 2>&1)"
fi

# --- 5. stop ------------------------------------------------------------------
pids=$(cat "$T"/n*.pid)
bash examples/dqlite/stop.sh >"$T/stop.log" 2>&1
left=""
for p in $pids; do grep -qs bfnode "/proc/$p/cmdline" && left+=" $p"; done
if [ -z "$left" ] && ! grep -q SIGKILL "$T/stop.log"; then ok "stop.sh ended every node (SIGTERM)"
else bad "still running after stop.sh:$left $(cat "$T/stop.log")"; fi
# what a node prints when it goes wrong: a failed assertion (dqlite aborts),
# a sanitizer report (an ASan/UBSan build of bfnode and the extension), a
# signal it died of
crash=$(grep -HE 'Assertion|Sanitizer|runtime error:|LeakSanitizer|Segmentation|Aborted' \
  "$T"/n*.log | head -n 3)
if [ -z "$crash" ]; then ok "no node printed an assertion, a sanitizer report or a crash"
else bad "a node's log: $(tr '\n' ' ' <<<"$crash")"; fi
exit $fail
