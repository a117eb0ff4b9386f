#!/usr/bin/python3
"""t_model_search.py — where the extension looks for its default model
(ext/sqlite/models.c), and what it passes over.

A copy of bertfill.so in a scratch folder: <tmp>/a/b/bertfill.so, and a
model planted two levels up, <tmp>/model/bertfill-zh-tiny (where a checkout's
build/asan/bertfill.so finds the shipped model), or beside the folder above,
<tmp>/a/share/bertfill/bertfill-zh-tiny (where an installed
$PREFIX/lib/bertfill.so finds it).  Without BERTFILL_MODEL:
  * planted by the owner of bertfill.so, writable by it alone: used
    (model.source "default", model.dir the planted directory);
  * a directory on the way group- or world-writable, or (as root only: the
    test gives it to user 65534) owned by another user: passed over, and the
    "no model" error names the directory and says why.
Before this check, a copy of the .so in a world-writable folder (/tmp/x)
took a model any user could plant in /tmp/model or /tmp/share/bertfill.
"""
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bftest import EXT, TINY, check, exit_code, skip  # noqa: E402

CLIENT = r"""
import json, sqlite3, sys
c = sqlite3.connect(':memory:'); c.enable_load_extension(True); c.load_extension(sys.argv[1])
try:
    c.execute('select bert_load(NULL)')
    d = json.loads(c.execute('select bert_debug()').fetchone()[0])['model']
    print('MODEL', d['source'], d['dir'])
except sqlite3.OperationalError as e:
    print('ERROR', e)
"""


def client(so):
    env = dict(os.environ, BERTFILL_PROGRESS="0")
    env.pop("BERTFILL_MODEL", None)
    r = subprocess.run([sys.executable, "-c", CLIENT, so[:-3]], env=env, capture_output=True,
                       text=True, timeout=120)
    return (r.stdout + r.stderr).strip()


def plant(tmp, rel):
    """A copy of the tiny test model at tmp/rel; every directory 0755."""
    d = os.path.join(tmp, rel)
    shutil.copytree(TINY, d)
    for root, dirs, files in os.walk(tmp):
        os.chmod(root, 0o755)
    return d


def chown_tree(top, uid):
    for root, dirs, files in os.walk(top):
        os.chown(root, uid, uid)
        for f in files:
            os.chown(os.path.join(root, f), uid, uid)


def case(name, so_rel, model_rel, first_dir_rel, spoil, prepare=None):
    """spoil(first directory below the base): None keeps the planted model as
    its owner made it; else a function that makes it untrusted, and the
    words the error must hold."""
    with tempfile.TemporaryDirectory() as tmp:
        so = os.path.join(tmp, so_rel)
        os.makedirs(os.path.dirname(so))
        shutil.copy(EXT + ".so" if os.path.exists(EXT + ".so") else EXT, so)
        model = plant(tmp, model_rel)
        first = os.path.join(tmp, first_dir_rel)
        if prepare:
            prepare(first)
        if spoil is None:
            got = client(so)
            check("search.%s" % name, got == "MODEL default %s" % os.path.realpath(model), got)
            return
        words = spoil(first)
        got = client(so)
        want = ["no model", os.path.realpath(model) + " not used", os.path.realpath(first)] + words
        check("search.%s" % name, got.startswith("ERROR") and all(w in got for w in want),
              "want an error with %r, got %r" % (want, got))


def main():
    if not os.path.isdir(TINY):
        skip("search", "no test models (make models)")
        return exit_code()
    checkout = ("a/b/bertfill.so", "model/bertfill-zh-tiny", "model")
    install = ("a/lib/bertfill.so", "a/share/bertfill/bertfill-zh-tiny", "a/share")
    for layout, (so, model, first) in (("two_up", checkout), ("installed", install)):
        case("%s_own" % layout, so, model, first, None)
        case("%s_world_writable" % layout, so, model, first,
             lambda d: (os.chmod(d, 0o777), ["writable by every user"])[1])
        # group-writable (umask 002) in the owner's own group (a user private
        # group: root's here, and every Debian user's): used
        case("%s_group_writable_private_group" % layout, so, model, first, None,
             prepare=lambda d: os.chmod(d, 0o775))
        if os.geteuid() == 0:
            case("%s_group_writable" % layout, so, model, first,
                 lambda d: (os.chmod(d, 0o775), os.chown(d, -1, 65534), ["writable by its group"])[2])
            case("%s_other_owner" % layout, so, model, first,
                 lambda d: (chown_tree(d, 65534), ["belongs to user 65534", "owner of bertfill.so"])[1])
        else:
            skip("search.%s_other_owner" % layout, "needs root to plant a model of another user")
            skip("search.%s_group_writable" % layout, "needs root to give a folder another group")
    return exit_code()


if __name__ == "__main__":
    sys.exit(main())
