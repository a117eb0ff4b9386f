#!/usr/bin/env bash
# start.sh — a three-node bertfill cluster on this machine: dqlite nodes
# (examples/dqlite/bfnode.c) on 127.0.0.1, data under build/cluster.
#
#   make cluster                          build, then run this script
#   bash examples/dqlite/start.sh         start every node that is not running
#   dqlite -s 127.0.0.1:24101,127.0.0.1:24102,127.0.0.1:24103 demo \
#     "SELECT bert_fill('中华人民共[MASK]国')"
#   bash examples/dqlite/stop.sh          stop every node it started (by pid)
#
# Node 1 bootstraps the cluster the first time (empty data directory); nodes
# 2 and 3 join it (bfnode --join: ADD and ASSIGN voter, sent to the leader).
# Run again after a node died: it starts only the nodes that are not running,
# with their old data, and they catch up.  Waits until each node it starts
# says "ready" (at most 60 s each).
#
# Environment:
#   BF_CLUSTER_DIR      data directories nK/, logs nK.log, pid files nK.pid
#                       (default build/cluster)
#   BF_CLUSTER_PORTS    three ports on 127.0.0.1 (default "24101 24102 24103")
#   BF_CLUSTER_LATENCY_MS  bfnode --latency-ms (default: dqlite's timings)
#   BF_EXTENSION        the extension (default ./bertfill.so)
#   BFNODE              the node program (default build/bfnode)
#   BERTFILL_MODEL      the model every node uses (default: the shipped one);
#                       the nodes must all use the same model
set -u
cd "$(dirname "$0")/../.."
DIR=${BF_CLUSTER_DIR:-build/cluster}
read -r -a PORTS <<<"${BF_CLUSTER_PORTS:-24101 24102 24103}"
BFNODE=${BFNODE:-build/bfnode}
EXTENSION=${BF_EXTENSION:-./bertfill.so}
HOST=127.0.0.1

if [ ! -x "$BFNODE" ]; then echo "start.sh: $BFNODE is not built (make cluster)" >&2; exit 1; fi
if [ "${#PORTS[@]}" -ne 3 ]; then echo "start.sh: BF_CLUSTER_PORTS needs three ports" >&2; exit 1; fi
mkdir -p "$DIR"

# is node $1 running? (its pid file names a live bfnode)
running() {
  local pid
  pid=$(cat "$DIR/n$1.pid" 2>/dev/null) || return 1
  [ -n "$pid" ] && grep -qs bfnode "/proc/$pid/cmdline"
}

addresses=""
for i in 1 2 3; do addresses+="${addresses:+,}$HOST:${PORTS[i-1]}"; done

for i in 1 2 3; do
  if running "$i"; then echo "node $i: already running (pid $(cat "$DIR/n$i.pid"))"; continue; fi
  args=(--id "$i" --address "$HOST:${PORTS[i-1]}" --dir "$DIR/n$i" --extension "$EXTENSION")
  if [ "$i" -gt 1 ]; then  # join through every other node
    others=""
    for j in 1 2 3; do [ "$j" -ne "$i" ] && others+="${others:+,}$HOST:${PORTS[j-1]}"; done
    args+=(--join "$others")
  fi
  [ -n "${BF_CLUSTER_LATENCY_MS:-}" ] && args+=(--latency-ms "$BF_CLUSTER_LATENCY_MS")
  log="$DIR/n$i.log"
  touch "$log"
  before=$(wc -l <"$log")
  setsid "$BFNODE" "${args[@]}" >>"$log" 2>&1 </dev/null &
  pid=$!
  echo "$pid" >"$DIR/n$i.pid"
  for _ in $(seq 600); do  # 60 s
    if tail -n +"$((before + 1))" "$log" | grep -q ": ready$"; then break; fi
    if ! kill -0 "$pid" 2>/dev/null; then break; fi
    sleep 0.1
  done
  if ! tail -n +"$((before + 1))" "$log" | grep -q ": ready$"; then
    echo "start.sh: node $i did not get ready; last lines of $log:" >&2
    tail -n 5 "$log" >&2
    exit 1
  fi
  echo "node $i: $HOST:${PORTS[i-1]}, pid $pid, data $DIR/n$i, log $log"
done
echo "cluster: dqlite -s $addresses demo \"SELECT bert_fill('中华人民共[MASK]国')\""
