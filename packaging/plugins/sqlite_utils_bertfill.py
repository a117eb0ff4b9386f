"""sqlite_utils_bertfill — the sqlite-utils plugin of bertfill: every
Database sqlite-utils opens gets bert_fill, fill_candidates and the rest of
bertfill's SQL (docs/dist.md, Plugins).

    pip install bertfill-VERSION-…whl sqlite_utils_bertfill-VERSION-py3-none-any.whl
    sqlite-utils data.db "select bert_fill('中华人民共[MASK]国')"

sqlite-utils 3.34 and later find it through the entry point group
"sqlite_utils" (bertfill = sqlite_utils_bertfill) and call
prepare_connection(conn) on each connection a Database wraps; it loads the
extension with bertfill.load(conn), which allows extension loading for that
call only.  The hook is a pluggy hookimpl of the project "sqlite_utils":
sqlite_utils.hookimpl where it exists (3.34+), else
pluggy.HookimplMarker("sqlite_utils") — the same marker.

Older sqlite-utils (Debian 12 has 3.30) has no plugin hooks: load the
extension by its path there, which needs only the bertfill wheel:
    sqlite-utils --load-extension "$(python3 -c 'import bertfill; print(bertfill.loadable_path())')" \\
        data.db "select bert_fill('中华人民共[MASK]国')"
or, in Python, bertfill.load(conn) then sqlite_utils.Database(conn).
Built by bertfill's `make dist` (packaging/plugins.py); it requires exactly
the bertfill of its own version.
"""
import bertfill

try:
    from sqlite_utils import hookimpl
except ImportError:  # sqlite-utils before 3.34, or none
    try:
        import pluggy
    except ImportError:
        raise ImportError("sqlite_utils_bertfill is a sqlite-utils plugin: it needs sqlite-utils 3.34 "
                          "or later (pip install sqlite-utils), or at least pluggy to be loaded") from None
    hookimpl = pluggy.HookimplMarker("sqlite_utils")

__version__ = "@VERSION@"


@hookimpl
def prepare_connection(conn):
    """Loads bertfill into conn, the sqlite3 connection of a new sqlite-utils Database."""
    bertfill.load(conn)
