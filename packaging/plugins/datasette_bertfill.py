"""datasette_bertfill — the Datasette plugin of bertfill: every connection
Datasette opens gets bert_fill, fill_candidates and the rest of bertfill's
SQL (docs/dist.md, Plugins).

    pip install bertfill-VERSION-…whl datasette_bertfill-VERSION-py3-none-any.whl
    datasette data.db      # then: select bert_fill('中华人民共[MASK]国')

Datasette finds it through the entry point group "datasette" (bertfill =
datasette_bertfill) and calls prepare_connection(conn) on each new sqlite3
connection; it loads the extension with bertfill.load(conn), which allows
extension loading for that call only.  The hook is a pluggy hookimpl of the
project "datasette": datasette.hookimpl when Datasette is installed, else
pluggy.HookimplMarker("datasette") — the same marker (Datasette defines its
hookimpl so), which lets a pluggy PluginManager("datasette") without
Datasette run the hook too.  Built by bertfill's `make dist`
(packaging/plugins.py); it requires exactly the bertfill of its own version.
"""
import bertfill

try:
    from datasette import hookimpl
except ImportError:
    try:
        import pluggy
    except ImportError:
        raise ImportError("datasette_bertfill is a Datasette plugin: it needs Datasette "
                          "(pip install datasette), or at least pluggy to be loaded") from None
    hookimpl = pluggy.HookimplMarker("datasette")

__version__ = "@VERSION@"


@hookimpl
def prepare_connection(conn):
    """Loads bertfill into conn, a new sqlite3 connection of Datasette."""
    bertfill.load(conn)
