#!/usr/bin/env python3
"""packaging/plugins.py — the plugin wheels of `make dist` (docs/dist.md, Plugins):
    packaging/plugins.py VERSION OUTDIR
writes, pure Python, one per host:
    OUTDIR/datasette_bertfill-VERSION-py3-none-any.whl
    OUTDIR/sqlite_utils_bertfill-VERSION-py3-none-any.whl
Each holds one module, packaging/plugins/HOST_bertfill.py (its __version__
filled in), whose prepare_connection(conn) hook calls bertfill.load(conn),
and a .dist-info: METADATA (Requires-Dist: bertfill==VERSION, an exact pin:
the plugin loads the extension of that wheel; and the host; the licence,
classifiers with Framework :: Datasette for Datasette's, the description
packaging/plugins/HOST_bertfill.md), entry_points.txt (group "datasette" or
"sqlite_utils": bertfill = HOST_bertfill, how the host finds the plugin),
WHEEL (py3-none-any, Root-Is-Purelib: true), LICENSE, top_level.txt, RECORD:
written by packaging/wheel_writer.py (zipfile, no PyPI, no network), dated
by the last commit (git log; the current time outside a checkout).
"""
import os
import subprocess
import sys
import time

from wheel_writer import metadata, wheel_file, write_wheel

HERE = os.path.dirname(os.path.abspath(__file__))

# name (the distribution), module, entry point group, what it requires besides
# bertfill, its own lines of METADATA
PLUGINS = [
    ("datasette-bertfill", "datasette_bertfill", "datasette", "datasette",
     ["Summary: Datasette plugin: bert_fill and the rest of bertfill's SQL in every Datasette connection",
      "Keywords: datasette,datasette-plugin,sqlite,bert,chinese,fill-mask",
      "Classifier: Framework :: Datasette"]),
    # sqlite-utils calls plugins' prepare_connection since 3.34
    ("sqlite-utils-bertfill", "sqlite_utils_bertfill", "sqlite_utils", "sqlite-utils>=3.34",
     ["Summary: sqlite-utils plugin: bert_fill and the rest of bertfill's SQL in every sqlite-utils Database",
      "Keywords: sqlite-utils,sqlite,bert,chinese,fill-mask"]),
]

COMMON = [
    "License: Apache-2.0",
    "Classifier: Development Status :: 4 - Beta",
    "Classifier: Intended Audience :: Developers",
    "Classifier: License :: OSI Approved :: Apache Software License",
    "Classifier: Natural Language :: Chinese (Simplified)",
    "Classifier: Operating System :: POSIX :: Linux",
    "Classifier: Programming Language :: Python :: 3",
    "Classifier: Topic :: Database",
    "Classifier: Topic :: Text Processing :: Linguistic",
    "Requires-Python: >=3.8",
]


def read(path, mode="r"):
    with open(path, mode) as f:
        return f.read()


def last_commit_time():
    try:
        out = subprocess.run(["git", "log", "-1", "--format=%ct"], cwd=HERE, capture_output=True, text=True)
        return int(out.stdout.strip())
    except (OSError, ValueError):
        return int(time.time())


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: packaging/plugins.py VERSION OUTDIR")
    version, outdir = sys.argv[1], sys.argv[2]
    if not version or any(c.isspace() for c in version):
        sys.exit("make dist: plugins: not a version: %r" % version)
    licence = read(os.path.join(HERE, "..", "LICENSE"), "rb")
    mtime = last_commit_time()
    for name, module, group, host, fields in PLUGINS:
        code = read(os.path.join(HERE, "plugins", module + ".py"))
        if '__version__ = "@VERSION@"' not in code:
            sys.exit("make dist: packaging/plugins/%s.py has no __version__ = \"@VERSION@\"" % module)
        readme = read(os.path.join(HERE, "plugins", module + ".md"))
        dist_info = "%s-%s.dist-info" % (module, version)
        lines = ["Name: " + name, "Version: " + version] + fields[:1] + COMMON[:1] + fields[1:] + COMMON[1:]
        lines += ["Requires-Dist: bertfill==" + version, "Requires-Dist: " + host]
        entries = {
            module + ".py": code.replace('"@VERSION@"', '"%s"' % version).encode(),
            dist_info + "/METADATA": metadata(lines, readme),
            dist_info + "/WHEEL": wheel_file("py3-none-any", purelib=True),
            dist_info + "/entry_points.txt": ("[%s]\nbertfill = %s\n" % (group, module)).encode(),
            dist_info + "/top_level.txt": (module + "\n").encode(),
            dist_info + "/LICENSE": licence,
        }
        path = write_wheel(outdir, "%s-%s-py3-none-any.whl" % (module, version), dist_info, entries, mtime)
        print("make dist: %s (requires bertfill==%s)" % (path, version))


if __name__ == "__main__":
    main()
