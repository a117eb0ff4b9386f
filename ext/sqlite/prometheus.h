/*
** prometheus.h — the process's statistics in the Prometheus text exposition
** format (version 0.0.4), for SELECT bert_stats('prometheus') (see
** prometheus.c).
*/
#ifndef BERTFILL_SQLITE_PROMETHEUS_H
#define BERTFILL_SQLITE_PROMETHEUS_H

#include "sqlite3ext.h"

/* Append every counter, the stage-latency histograms and the batch-size
** histogram to s. */
void bfx_prometheus(sqlite3_str *s);

#endif
