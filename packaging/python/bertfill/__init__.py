"""bertfill: a SQLite extension that fills [MASK] blanks of Chinese text with
a BERT masked language model, inside the database process.

    import sqlite3, bertfill
    conn = sqlite3.connect(":memory:")
    bertfill.load(conn)
    conn.execute("select bert_fill('中华人民共[MASK]国')").fetchone()

The wheel holds the extension (bertfill.so, needing only the C library) and
the shipped model (model/bertfill-zh-tiny, its card model/MODEL_CARD.md) next
to it, where the extension finds it.  Built by bertfill's `make dist`
(packaging/wheel.py; docs/dist.md).
"""
import os

__version__ = "@VERSION@"
__all__ = ["__version__", "loadable_path", "model_path", "load", "LoadError"]

_HERE = os.path.dirname(os.path.abspath(__file__))


class LoadError(RuntimeError):
    """This Python cannot load SQLite extensions (its sqlite3 module was
    built without them)."""


def loadable_path():
    """The extension's path without its .so suffix, as sqlite3's
    load_extension, apsw's loadextension and the sqlite3 shell's .load take
    it (SQLite adds the suffix itself; the entry point is
    sqlite3_bertfill_init)."""
    return os.path.join(_HERE, "bertfill")


def model_path():
    """The directory of the shipped model, bertfill-zh-tiny (the extension
    uses it by default; bert_load(model_path(), 'int8') loads it in int8).
    It may be read-only: derived files then go to the per-user cache,
    $XDG_CACHE_HOME/bertfill (BERTFILL_CACHE_DIR)."""
    return os.path.join(_HERE, "model", "bertfill-zh-tiny")


_NO_EXTENSIONS = (
    "bertfill.load: this Python's sqlite3 module cannot load extensions "
    "(sqlite3.Connection has no enable_load_extension: Python was built "
    "without --enable-loadable-sqlite-extensions, as pyenv and macOS builds "
    "often are).  Use a Python that can: Debian's and Ubuntu's /usr/bin/python3, "
    "or one built with ./configure --enable-loadable-sqlite-extensions "
    "(pyenv: PYTHON_CONFIGURE_OPTS=--enable-loadable-sqlite-extensions "
    "pyenv install VERSION); or use apsw (pip install apsw) and pass its "
    "Connection to bertfill.load."
)


def load(conn):
    """Loads bertfill into conn, a sqlite3 or an apsw Connection: allows
    extension loading, loads, then forbids it again (so SQL cannot load
    another).  Raises LoadError when this Python's sqlite3 cannot load
    extensions at all, with what to do."""
    if hasattr(conn, "enable_load_extension"):  # sqlite3
        conn.enable_load_extension(True)
        try:
            conn.load_extension(loadable_path())
        finally:
            conn.enable_load_extension(False)
    elif hasattr(conn, "enableloadextension"):  # apsw
        conn.enableloadextension(True)
        try:
            conn.loadextension(loadable_path())
        finally:
            conn.enableloadextension(False)
    else:
        import sqlite3

        if isinstance(conn, sqlite3.Connection):
            raise LoadError(_NO_EXTENSIONS)
        raise TypeError(
            "bertfill.load: expected a sqlite3 or apsw Connection, got %s" % type(conn).__name__
        )
