/*
** conn.c — the state of one database connection (see conn.h).
*/
#include <string.h>

#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3
#include "conn.h"
#include "cache.h"
#include "bounds.h"
#include "models.h"
#include "spelling.h"
#include "util.h"

static const char *const cache_modes[] = {"off", "memory", "on"}; /* by BFX_CACHE_* */

int bfx_cache_mode_parse(const char *s) {
  for (int m = 0; s && m < 3; m++)
    if (sqlite3_stricmp(s, cache_modes[m]) == 0) return m;
  return -1;
}

const char *bfx_cache_mode_name(int mode) {
  return mode >= 0 && mode < 3 ? cache_modes[mode] : "off";
}

static const char *const rows_cache_modes[] = {"none", "room", "all"}; /* BFX_ROWS_CACHE_* */

int bfx_rows_cache_parse(const char *s) {
  for (int m = 0; s && m < 3; m++)
    if (sqlite3_stricmp(s, rows_cache_modes[m]) == 0) return m;
  return -1;
}

const char *bfx_rows_cache_name(int mode) {
  return mode >= 0 && mode < 3 ? rows_cache_modes[mode] : "none";
}

bfx_conn *bfx_conn_new(sqlite3 *db) {
  bfx_conn *c = sqlite3_malloc(sizeof *c);
  if (!c) return NULL;
  memset(c, 0, sizeof *c);
  c->db = db;
  c->refs = 1;
  c->cache_mode = bf_env_choice("BERTFILL_CACHE", cache_modes, 3, BFX_CACHE_ON);
  c->cache_limit = bf_env_int("BERTFILL_CACHE_LIMIT", 1, BFX_CACHE_LIMIT_MAX,
                              BFC_DEFAULT_TABLE_LIMIT);
  c->rows_cache = BFX_ROWS_CACHE_ROOM;
  c->spelling_sensitivity = BF_SPELL_DEFAULT_SENSITIVITY;
  return c;
}

void bfx_conn_ref(bfx_conn *c) { c->refs++; }

void bfx_conn_unref(void *p) {
  bfx_conn *c = p;
  if (c && --c->refs == 0) {
    bfx_model_put(c->model);
    sqlite3_free(c);
  }
}

bf_model *bfx_conn_model(bfx_conn *c, bfx_err *e) {
  if (c->model) return c->model;
  const char *source = NULL;
  bf_model *m = bfx_model_get_default(bfx_default_precision(), &source, e);
  if (m) {
    c->model = m;
    c->model_source = source;
  }
  return m;
}

bf_model *bfx_conn_model_current(bfx_conn *c, bfx_err *e) {
  bf_model *m = bfx_conn_model(c, e);
  char msg[512] = "";
  int rc = m ? bf_model_check(m, msg, sizeof msg) : BF_OK;
  if (rc == BF_OK) return m;
  bfx_err_engine(e, "bertfill", rc, msg);
  return NULL;
}

int bfx_conn_set_model(bfx_conn *c, const char *dir, bf_precision precision, bfx_err *e) {
  const char *source = "bert_load";
  bf_model *m = dir ? bfx_model_get(dir, precision, e)
                    : bfx_model_get_default(precision, &source, e);
  if (!m) return e->rc;
  bfx_model_put(c->model);
  c->model = m;
  c->model_source = source;
  return SQLITE_OK;
}
