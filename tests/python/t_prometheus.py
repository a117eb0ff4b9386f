#!/usr/bin/python3
"""t_prometheus.py — SELECT bert_stats('prometheus') read by a real parser,
Debian's python3-prometheus-client (prometheus_client.parser, the text
format 0.0.4 that node_exporter's textfile collector and a Prometheus
scrape read), and compared with bertfill_stats:

  * every counter of bertfill_stats is bertfill_<name>_total, same value,
    with a HELP text of its own (prometheus.c's table);
  * bertfill_stage_seconds: one histogram per stage, buckets cumulative and
    non-decreasing in le, +Inf bucket = _count = the stage's count, _sum =
    its total in seconds, P95 as Prometheus' histogram_quantile() computes it
    within a bucket of bertfill_stats' p95;
  * bertfill_batch_size: _sum = seqs, _count = encoder_runs;
  * the format argument: 'json' (the default), 'prometheus', else an error;
  * with promtool (Debian's prometheus package; not installed by
    make test-deps, it is large): `promtool check metrics` finds nothing
    to lint, and the alert rule of docs/prometheus/bertfill-alerts.yml
    passes `promtool check rules` and its unit test
    tests/python/prometheus_alerts_test.yml (fires on P95 > 500 ms only).

Skipped with the reason when prometheus_client is missing (Debian:
apt-get install python3-prometheus-client; make test-deps does it).
"""
import json
import math
import os
import shutil
import sqlite3
import subprocess
import sys

from bftest import EXT, TINY, check, exit_code, skip

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError as e:
    skip("prometheus", "python3-prometheus-client is not installed (%s)" % e)
    sys.exit(0)


def connect():
    c = sqlite3.connect(":memory:", isolation_level=None)
    c.enable_load_extension(True)
    c.load_extension(EXT)
    c.enable_load_extension(False)
    c.execute("SELECT bert_load(?)", (TINY,))
    return c


def quantile(q, buckets):
    """histogram_quantile() of Prometheus over [(le, cumulative count)]."""
    total = buckets[-1][1]
    rank = q * total
    prev_le, prev_c = 0.0, 0
    for le, c in buckets:
        if c >= rank:
            if math.isinf(le):
                return prev_le
            return prev_le + (le - prev_le) * (rank - prev_c) / max(c - prev_c, 1e-300)
        prev_le, prev_c = le, c
    return prev_le


def main():
    c = connect()
    c.execute("SELECT bert_cache('memory')")
    texts = ["今天天气真[MASK]啊", "我们[MASK]去公园", "他[MASK]很高兴", "好[MASK]"]
    for i in range(30):
        c.execute("SELECT bert_fill(?)", (texts[i % len(texts)] + str(i % 7),)).fetchone()
    c.execute("WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r WHERE x < 12) "
              "SELECT bert_prefill('今[MASK]' || x) FROM r").fetchone()  # batched runs
    try:
        c.execute("SELECT bert_fill(?)", (b"\xff",)).fetchone()
    except sqlite3.OperationalError:
        pass

    text = c.execute("SELECT bert_stats('prometheus')").fetchone()[0]
    rows = {r[0]: r for r in c.execute("SELECT name, kind, count, total_ms, p95_ms, value "
                                       "FROM bertfill_stats")}
    check("prometheus_ends_with_newline", text.endswith("\n"))
    try:
        families = {f.name: f for f in text_string_to_metric_families(text)}
    except Exception as e:  # noqa: BLE001 - any parse error is the failure
        check("prometheus_parses", False, "%s: %s" % (type(e).__name__, e))
        return exit_code()
    check("prometheus_parses", len(families) > 10, "%d families" % len(families))

    # counters: the same names and values as bertfill_stats
    bad = []
    for name, (_, kind, count, _, _, value) in rows.items():
        if kind != "counter":
            continue
        f = families.get("bertfill_" + name)
        if not f or f.type != "counter" or not f.documentation or f.documentation == "A counter.":
            bad.append("%s: %s" % (name, f and f.type))
            continue
        v = [s.value for s in f.samples if s.name == "bertfill_%s_total" % name]
        if v != [value]:
            bad.append("%s: %s vs %s" % (name, v, value))
    check("prometheus_counters", not bad and rows["calls"][5] >= 30, "; ".join(bad[:5]))
    check("prometheus_err_input_counted", families["bertfill_err_input"].samples[0].value >= 1)
    age = families.get("bertfill_since_reset_seconds")
    check("prometheus_gauge_age", age is not None and age.type == "gauge" and age.samples[0].value > 0)

    # stage histograms
    h = families.get("bertfill_stage_seconds")
    check("prometheus_stage_histogram", h is not None and h.type == "histogram" and h.documentation)
    stages = [n for n, r in rows.items() if r[1] == "stage"]
    problems = []
    for st in stages:
        buckets = [(float(s.labels["le"]), s.value) for s in h.samples
                   if s.name.endswith("_bucket") and s.labels["stage"] == st]
        count = [s.value for s in h.samples if s.name.endswith("_count") and s.labels["stage"] == st]
        total = [s.value for s in h.samples if s.name.endswith("_sum") and s.labels["stage"] == st]
        les = [b[0] for b in buckets]
        if les != sorted(les) or not math.isinf(les[-1]) or len(les) != 56:
            problems.append("%s: le %s" % (st, les[:3]))
        if any(b2[1] < b1[1] for b1, b2 in zip(buckets, buckets[1:])):
            problems.append("%s: buckets decrease" % st)
        if count != [buckets[-1][1]] or count != [rows[st][2]]:
            problems.append("%s: count %s, +Inf %s, bertfill_stats %s" % (st, count, buckets[-1][1], rows[st][2]))
        if len(total) != 1 or abs(total[0] - rows[st][3] / 1000) > 1e-6 + 1e-6 * total[0]:
            problems.append("%s: sum %s vs total_ms %s" % (st, total, rows[st][3]))
        if rows[st][2]:
            # histogram_quantile interpolates inside a bucket of 2 per octave:
            # within a factor 1.5 of bertfill_stats' own p95 (8 per octave)
            p95 = quantile(0.95, buckets) * 1000
            if not (rows[st][4] / 1.5 - 1e-3 <= p95 <= rows[st][4] * 1.5 + 1e-3):
                problems.append("%s: histogram_quantile p95 %.4f ms vs p95_ms %.4f" % (st, p95, rows[st][4]))
    check("prometheus_stages", not problems and len(stages) >= 7 and "call" in stages,
          "; ".join(problems[:4]) or str(stages))

    b = families.get("bertfill_batch_size")
    bsum = [s.value for s in b.samples if s.name == "bertfill_batch_size_sum"] if b else None
    bcount = [s.value for s in b.samples if s.name == "bertfill_batch_size_count"] if b else None
    check("prometheus_batch_histogram", b is not None and b.type == "histogram" and
          bsum == [rows["seqs"][5]] and bcount == [rows["encoder_runs"][5]] and rows["batches"][5] >= 1,
          "sum %s count %s seqs %s runs %s" % (bsum, bcount, rows["seqs"][5], rows["encoder_runs"][5]))

    # the argument
    j = json.loads(c.execute("SELECT bert_stats('json')").fetchone()[0])
    j0 = json.loads(c.execute("SELECT bert_stats(NULL)").fetchone()[0])
    check("stats_format_json", "counters" in j and "stages" in j and "counters" in j0)
    try:
        c.execute("SELECT bert_stats('xml')").fetchone()
        check("stats_format_bad", False, "no error")
    except sqlite3.OperationalError as e:
        check("stats_format_bad", "'json' (the default) or 'prometheus'" in str(e), str(e))
    # same flags as bert_stats(): usable in a trusted view
    c.execute("CREATE TEMP VIEW v AS SELECT bert_stats('prometheus') AS p")
    check("prometheus_in_view", c.execute("SELECT p LIKE '# HELP %' FROM v").fetchone()[0] == 1)
    c.close()
    promtool(text)
    return exit_code()


def promtool(text):
    exe = shutil.which("promtool")
    if not exe:
        skip("promtool", "promtool not installed (Debian: apt-get install prometheus)")
        return
    r = subprocess.run([exe, "check", "metrics"], input=text, capture_output=True, text=True)
    check("promtool_check_metrics", r.returncode == 0 and not r.stdout.strip(), r.stdout + r.stderr)
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    r = subprocess.run([exe, "check", "rules", "docs/prometheus/bertfill-alerts.yml"], cwd=root,
                       capture_output=True, text=True)
    check("promtool_check_rules", r.returncode == 0, r.stdout + r.stderr)
    r = subprocess.run([exe, "test", "rules", "tests/python/prometheus_alerts_test.yml"], cwd=root,
                       capture_output=True, text=True)
    check("promtool_alert_p95_500ms", r.returncode == 0, r.stdout + r.stderr)


if __name__ == "__main__":
    sys.exit(main())
