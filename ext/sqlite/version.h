/*
** version.h — the version of bertfill, in one place.  SELECT bert_version()
** returns it and bert_debug() shows it (scalars.c).  Change it here and
** nowhere else.
*/
#ifndef BERTFILL_SQLITE_VERSION_H
#define BERTFILL_SQLITE_VERSION_H

#define BFX_VERSION "0.1.0"

#endif
