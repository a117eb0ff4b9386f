/*
** jsonw.c — JSON strings for the functions' results (see jsonw.h).
*/
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3
#include "jsonw.h"

void bfx_json_string(sqlite3_str *out, const char *z) {
  sqlite3_str_appendchar(out, 1, '"');
  for (const unsigned char *p = (const unsigned char *)(z ? z : ""); *p; p++) {
    unsigned c = *p;
    if (c == '"' || c == '\\') {
      sqlite3_str_appendchar(out, 1, '\\');
      sqlite3_str_appendchar(out, 1, (char)c);
    } else if (c == '\n') sqlite3_str_appendall(out, "\\n");
    else if (c == '\r') sqlite3_str_appendall(out, "\\r");
    else if (c == '\t') sqlite3_str_appendall(out, "\\t");
    else if (c < 0x20 || c == 0x7f) sqlite3_str_appendf(out, "\\u%04x", c);
    else if (c == 0xE2 && p[1] == 0x80 && (p[2] == 0xA8 || p[2] == 0xA9)) {
      sqlite3_str_appendf(out, "\\u%04x", p[2] == 0xA8 ? 0x2028 : 0x2029);
      p += 2;
    } else sqlite3_str_appendchar(out, 1, (char)c);
  }
  sqlite3_str_appendchar(out, 1, '"');
}
