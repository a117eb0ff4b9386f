"""tests/dist/plugin_check.py — run by t_plugins.sh with the venv's Python, in
a folder outside the repository, bertfill's wheel and both plugin wheels
installed: the plugins found and run as their hosts do.  Prints one
"ok NAME" / "FAIL NAME: why" / "skip NAME: why" per check.
    plugin_check.py TEXT WANT_FILL WANT_TOP
WANT_FILL is bert_fill(TEXT) and WANT_TOP fill_candidates' first row "token
score" (4 decimals), both from the release tarball's .so in the sqlite3 shell.
  hook, for GROUP datasette and sqlite_utils: importlib.metadata's entry
      points of the group name bertfill = GROUP_bertfill; its
      prepare_connection is a pluggy hookimpl of the project GROUP (the
      marker's GROUP_impl attribute); a pluggy PluginManager(GROUP) with the
      host's hookspec (Datasette's prepare_connection(conn, database,
      datasette), sqlite-utils' prepare_connection(conn)) loads the entry
      points (load_setuptools_entrypoints) and registers the module as
      "bertfill"; its hook called on a new sqlite3 connection makes it fill
      TEXT: WANT_FILL and WANT_TOP
  sqlite_utils: sqlite-utils' Python API on a connection bertfill.load()
      loaded, the way that works with every version (3.30: Debian 12's): a
      table written with insert_all, bert_fill over its column with query();
      with sqlite-utils 3.34+ also the plugin itself: a Database opened with
      nothing else fills (else a skip line: no plugin hooks)
  datasette: Datasette itself where it is installed (not in Debian 12: a
      skip line): a query of its in-memory database fills through the plugin
"""
import sqlite3
import sys
from importlib import metadata

MODULE = {"datasette": "datasette_bertfill", "sqlite_utils": "sqlite_utils_bertfill"}
TOP_SQL = "select token || ' ' || printf('%.4f', score) from fill_candidates(?) where rank = 1"


def check(name, good, why):
    print("ok plugins_%s" % name if good else "FAIL plugins_%s: %s" % (name, why))


def group_entry_points(group):
    eps = metadata.entry_points()
    if hasattr(eps, "select"):  # Python 3.10+
        return list(eps.select(group=group))
    return list(eps.get(group, []))  # 3.8, 3.9


def hook(group, text, want_fill, want_top):
    try:
        import pluggy
    except ImportError:
        print("skip plugins_%s_hook: no pluggy (Debian: apt-get install python3-pluggy)" % group)
        return
    module = MODULE[group]
    eps = [e for e in group_entry_points(group) if e.name == "bertfill"]
    check(group + "_entry_point", [e.value for e in eps] == [module],
          "entry points named bertfill in group %s: %r, want one, %s" % (group, [e.value for e in eps], module))
    if not eps:
        return
    plugin = eps[0].load()
    impl = getattr(plugin.prepare_connection, group + "_impl", None)
    check(group + "_hookimpl", isinstance(impl, dict),
          "%s.prepare_connection is not a pluggy hookimpl of project %s (no %s_impl)" % (module, group, group))

    spec = pluggy.HookspecMarker(group)
    if group == "datasette":
        class Spec:
            @spec
            def prepare_connection(conn, database, datasette):
                """Datasette's hookspec (datasette/hookspecs.py)"""
        args = {"database": "_memory", "datasette": None}
    else:
        class Spec:
            @spec
            def prepare_connection(conn):
                """sqlite-utils' hookspec (sqlite_utils/hookspecs.py)"""
        args = {}
    pm = pluggy.PluginManager(group)
    pm.add_hookspecs(Spec)
    pm.load_setuptools_entrypoints(group)
    check(group + "_plugin_manager", pm.get_plugin("bertfill") is plugin,
          "PluginManager(%r).load_setuptools_entrypoints registered %r" % (group, pm.list_name_plugin()))
    conn = sqlite3.connect(":memory:")
    try:
        pm.hook.prepare_connection(conn=conn, **args)
        got_fill = conn.execute("select bert_fill(?)", (text,)).fetchone()[0]
        got_top = conn.execute(TOP_SQL, (text,)).fetchone()[0]
    except Exception as e:
        got_fill = got_top = "%s: %s" % (type(e).__name__, e)
    check(group + "_hook_fills", (got_fill, got_top) == (want_fill, want_top),
          "after the hook: bert_fill %r, top %r; the sqlite3 shell: %r, %r" % (got_fill, got_top, want_fill, want_top))


def sqlite_utils_api(text, want_fill):
    try:
        import sqlite_utils
    except ImportError:
        print("skip plugins_sqlite_utils_api: no sqlite_utils (Debian: apt-get install sqlite-utils)")
        return
    import bertfill

    version = metadata.version("sqlite-utils")
    conn = sqlite3.connect("api.db")
    bertfill.load(conn)
    db = sqlite_utils.Database(conn)
    db["texts"].insert_all([{"id": 1, "text": text}], pk="id")
    try:
        got = list(db.query("select bert_fill(text) as filled from texts"))
    except Exception as e:
        got = "%s: %s" % (type(e).__name__, e)
    check("sqlite_utils_api", got == [{"filled": want_fill}],
          "sqlite-utils %s, Database(conn) after bertfill.load(conn): %r, want %r" % (version, got, want_fill))
    if not hasattr(sqlite_utils, "hookimpl"):
        print("skip plugins_sqlite_utils_plugin: sqlite-utils %s calls no plugin hooks (3.34+ does)" % version)
        return
    try:
        got = sqlite_utils.Database(memory=True).execute("select bert_fill(?)", [text]).fetchone()[0]
    except Exception as e:
        got = "%s: %s" % (type(e).__name__, e)
    check("sqlite_utils_plugin", got == want_fill,
          "sqlite-utils %s, Database(memory=True) through the plugin: %r, want %r" % (version, got, want_fill))


def datasette(text, want_fill):
    try:
        from datasette.app import Datasette
    except ImportError:
        print("skip plugins_datasette: no Datasette in this Python (not in Debian 12; pip install datasette)")
        return
    import asyncio

    async def fill():
        ds = Datasette(memory=True)
        result = await ds.get_database("_memory").execute("select bert_fill(?)", [text])
        return result.rows[0][0]

    try:
        got = asyncio.run(fill())
    except Exception as e:
        got = "%s: %s" % (type(e).__name__, e)
    check("datasette", got == want_fill, "Datasette's _memory database: bert_fill %r, want %r" % (got, want_fill))


if len(sys.argv) != 4:
    sys.exit("usage: plugin_check.py TEXT WANT_FILL WANT_TOP")
text, want_fill, want_top = sys.argv[1:]
for group in ("datasette", "sqlite_utils"):
    hook(group, text, want_fill, want_top)
sqlite_utils_api(text, want_fill)
datasette(text, want_fill)
