#!/usr/bin/env bash
# stop.sh — stops the nodes examples/dqlite/start.sh started: for each pid
# file $BF_CLUSTER_DIR/nK.pid (default build/cluster) that names a running
# bfnode, SIGTERM (the node stops cleanly), then SIGKILL after 10 s.  Only
# those pids are signalled.  The data directories stay: start.sh brings the
# same cluster back; delete $BF_CLUSTER_DIR for a new one.
set -u
cd "$(dirname "$0")/../.."
DIR=${BF_CLUSTER_DIR:-build/cluster}
status=0
for f in "$DIR"/n*.pid; do
  [ -e "$f" ] || continue
  pid=$(cat "$f")
  if [ -n "$pid" ] && grep -qs bfnode "/proc/$pid/cmdline"; then
    kill -TERM "$pid"
    for _ in $(seq 100); do grep -qs bfnode "/proc/$pid/cmdline" || break; sleep 0.1; done
    if grep -qs bfnode "/proc/$pid/cmdline"; then
      echo "stop.sh: pid $pid did not stop in 10 s; SIGKILL" >&2
      kill -KILL "$pid"
      status=1
    fi
    echo "stopped $(basename "$f" .pid) (pid $pid)"
  fi
  rm -f "$f"
done
exit $status
