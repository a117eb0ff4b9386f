/* test_sqlite.h — for C tests that link the SQLite layer's objects
** (build/libbfsqlite.a) without loading the extension: those objects call
** SQLite through the pointer sqlite3_api (ext/sqlite/api.c), which a loaded
** extension gets from its entry point.  test_sqlite_api() fills it in from
** a real SQLite (-lsqlite3) the same way: an auto-extension receives the
** routines when a connection opens.  Define SQLITE_CORE before including
** any header of the layer, so that sqlite3ext.h leaves the SQLite calls of
** the test itself alone. */
#ifndef BF_TEST_SQLITE_H
#define BF_TEST_SQLITE_H
#ifndef SQLITE_CORE
#error "define SQLITE_CORE before including test_sqlite.h"
#endif
#include <sqlite3.h>

extern const sqlite3_api_routines *sqlite3_api; /* ext/sqlite/api.c */

static int test_grab_api(sqlite3 *db, char **err, const sqlite3_api_routines *api) {
  (void)db;
  (void)err;
  sqlite3_api = api;
  return SQLITE_OK;
}

/* 1 when sqlite3_api is set. */
static int test_sqlite_api(void) {
  sqlite3 *db = NULL;
  sqlite3_auto_extension((void (*)(void))test_grab_api);
  int rc = sqlite3_open(":memory:", &db);
  sqlite3_close(db);
  sqlite3_reset_auto_extension();
  return rc == SQLITE_OK && sqlite3_api != NULL;
}
#endif
