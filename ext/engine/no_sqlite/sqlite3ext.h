/* Put first on the engine's include path by the Makefile: the engine (ext/engine)
** never sees SQLite, so including <sqlite3ext.h> from it stops the build here. */
#error "ext/engine must not include SQLite (sqlite3ext.h): SQLite belongs in ext/sqlite"
