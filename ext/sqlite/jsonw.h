/*
** jsonw.h — the JSON the SQL functions return (bert_tokenize, bert_debug,
** bert_stats) is written with sqlite3_str; this is the one string writer
** they share.
*/
#ifndef BERTFILL_SQLITE_JSONW_H
#define BERTFILL_SQLITE_JSONW_H

#include "sqlite3ext.h"

/* z (NULL: "") as a JSON string, quotes included: '"', '\\' and control
** characters escaped, U+2028 / U+2029 as \u escapes (safe in JavaScript). */
void bfx_json_string(sqlite3_str *out, const char *z);

#endif
