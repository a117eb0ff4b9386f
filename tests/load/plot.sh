#!/usr/bin/env bash
# plot.sh OUTDIR [CAPTION] — draws OUTDIR/latency-vs-clients.png and
# OUTDIR/throughput-vs-clients.png from OUTDIR/results.csv (written by
# tests/load/run.sh; can be rerun on its own).  Needs gnuplot (Debian:
# gnuplot-nox); says so and exits 0 when it is missing.
set -euo pipefail
OUT=${1:?usage: plot.sh OUTDIR [CAPTION]}
CAPTION=${2:-}
CSV=$OUT/results.csv
[ -f "$CSV" ] || { echo "plot: $CSV not found" >&2; exit 1; }
if ! command -v gnuplot >/dev/null 2>&1; then
  echo "NOTE: no plots drawn: gnuplot is not installed (Debian: apt-get install gnuplot-nox)."
  echo "      The numbers are in $CSV."
  exit 0
fi
# One data file per scenario: clients rps mean p50 p95 p99 err% (the fields
# before the quoted error message at the end contain no commas).
for mode in threads procs; do for set in five unique; do for cache in on off; do
  awk -F, -v m="$mode" -v s="$set" -v c="\"$cache\"" \
    'NR > 1 && $1 == m && $2 == s && $3 == c { print $4, $8, $9, $10, $11, $12, $14 }' "$CSV" \
    > "$OUT/$mode-$set-$cache.dat"
done; done; done
# sanity: the columns used above
head -1 "$CSV" | awk -F, '$4 != "clients" || $8 != "rps" || $12 != "p99_ms" || $14 != "err_pct" {
  print "plot: unexpected columns in results.csv" > "/dev/stderr"; exit 1 }'

panels() {   # $1: latency | throughput
  for set in five unique; do for cache in on off; do
    if [ "$set" = five ]; then st="repeated texts"; else st="no repeats"; fi
    echo "set title '$st, cache $cache'"
    parts=()
    for mode in threads procs; do
      f="$OUT/$mode-$set-$cache.dat"
      [ -s "$f" ] || continue
      if [ "$mode" = threads ]; then dt=1; else dt=2; fi
      if [ "$1" = latency ]; then
        parts+=("'$f' using 1:4 with linespoints lc 1 dt $dt pt 7 title 'P50 $mode'")
        parts+=("'$f' using 1:5 with linespoints lc 2 dt $dt pt 7 title 'P95 $mode'")
        parts+=("'$f' using 1:6 with linespoints lc 7 dt $dt pt 7 title 'P99 $mode'")
      else
        parts+=("'$f' using 1:2 axes x1y1 with linespoints lc 3 dt $dt pt 7 title 'req/s $mode'")
        parts+=("'$f' using 1:7 axes x1y2 with linespoints lc 7 dt $dt pt 6 title 'errors % $mode'")
      fi
    done
    if [ ${#parts[@]} -eq 0 ]; then
      echo "set label 1 'not measured' at graph 0.4,0.5; plot [1:50][1:10] 1000 notitle; unset label 1"
    else (IFS=,; echo "plot ${parts[*]}"); fi
  done; done
}
{
  echo "set terminal pngcairo size 1400,1000 font 'sans,10'"
  echo "set output '$OUT/latency-vs-clients.png'"
  echo "set multiplot layout 2,2 title \"bertfill load test: latency of successful requests vs concurrent clients ($CAPTION)\\n(in threads mode a call that waits longer than the guard timeout for an encoder slot fails with 'busy': see the error rate)\""
  echo "set logscale xy 2; set logscale y 10; set xrange [0.8:64]; set xtics (1,2,4,8,16,32,50); set grid"
  echo "set xlabel 'clients'; set ylabel 'latency (ms)'; set key top left"
  panels latency
  echo "unset multiplot"
  echo "set output '$OUT/throughput-vs-clients.png'"
  echo "set multiplot layout 2,2 title 'bertfill load test: requests/s and error rate vs concurrent clients ($CAPTION)'"
  echo "set logscale y 10; set ylabel 'requests/s'; set y2label 'errors (%)'; set y2range [0:100]; set y2tics; set ytics nomirror"
  panels throughput
  echo "unset multiplot"
} > "$OUT/plot.gp"
if gnuplot "$OUT/plot.gp"; then
  echo "plots: $OUT/latency-vs-clients.png $OUT/throughput-vs-clients.png"
else
  echo "plot: gnuplot failed on $OUT/plot.gp" >&2
  exit 1
fi
