/*
** api.c — the pointer to SQLite's routines.  A loadable extension calls
** SQLite through the table SQLite hands to its entry point
** (sqlite3_bertfill_init, entry.c, stores it here); every file of the
** layer reaches it with SQLITE_EXTENSION_INIT3.  Its own file so that it
** sits below every other one.
*/
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT1
