#!/usr/bin/env python3
"""packaging/wheel.py — the Python wheel of `make dist` (docs/dist.md):
    packaging/wheel.py TARBALL OUTDIR
reads a release tarball of packaging/tarball.sh (bertfill-VERSION-linux-ARCH.tar.gz)
and writes OUTDIR/bertfill-VERSION-py3-none-TAG.whl, TAG being the tarball's
BUILDINFO manylinux tag (read there from the binary's highest GLIBC_x.y need:
never asserted here).  The wheel is built from the tarball, not from the tree,
so it holds the very files the tarball's checks passed:
    bertfill/__init__.py              packaging/python/bertfill/__init__.py, its
                                      __version__ filled in: loadable_path(),
                                      model_path(), load(conn), LoadError
    bertfill/bertfill.so              the tarball's .so
    bertfill/model/bertfill-zh-tiny/  the shipped model (found next to the .so,
    bertfill/model/MODEL_CARD.md      ext/sqlite/models.c), its card
    bertfill/BUILDINFO                the tarball's
    bertfill-VERSION.dist-info/       METADATA (licence, classifiers,
                                      Requires-Python, packaging/python/README.md
                                      as the description), WHEEL (the tag,
                                      Root-Is-Purelib: false), LICENSE,
                                      licenses/utf8proc, licenses/unicode, RECORD (sha256 of each)
A wheel is a zip with those three files in .dist-info: written by
packaging/wheel_writer.py (zipfile, no PyPI, no network; shared with
packaging/plugins.py), dated by the tarball's files (the last commit): one
tarball gives the same bytes.
"""
import os
import sys
import tarfile

from wheel_writer import metadata, wheel_file, write_wheel

HERE = os.path.dirname(os.path.abspath(__file__))

FIELDS = [
    "Name: bertfill",
    "Version: %(version)s",
    "Summary: SQLite extension: fill [MASK] blanks of Chinese text with a BERT masked LM, in SQL",
    "License: Apache-2.0",
    "Keywords: sqlite,sqlite-extension,bert,chinese,fill-mask",
    "Platform: Linux",
    "Classifier: Development Status :: 4 - Beta",
    "Classifier: License :: OSI Approved :: Apache Software License",
    "Classifier: Natural Language :: Chinese (Simplified)",
    "Classifier: Operating System :: POSIX :: Linux",
    "Classifier: Programming Language :: C",
    "Classifier: Programming Language :: Python :: 3",
    "Classifier: Topic :: Database",
    "Classifier: Topic :: Text Processing :: Linguistic",
    "Requires-Python: >=3.8",
]


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: packaging/wheel.py TARBALL OUTDIR")
    tarball, outdir = sys.argv[1], sys.argv[2]
    with tarfile.open(tarball) as tar:
        members = [m for m in tar.getmembers() if m.isfile()]
        root = members[0].name.split("/")[0]
        files = {m.name[len(root) + 1:]: tar.extractfile(m).read() for m in members}
        mtime = max(m.mtime for m in members)
    info = dict(line.split("=", 1) for line in files["BUILDINFO"].decode().splitlines() if "=" in line)
    version, tag = info["version"], info.get("manylinux", "")
    if not tag.startswith("manylinux_") or not tag.endswith("_" + info["arch"]):
        sys.exit("make dist: %s: BUILDINFO has no manylinux tag for %s: %r" % (tarball, info["arch"], tag))
    with open(os.path.join(HERE, "python", "bertfill", "__init__.py")) as f:
        init = f.read()
    if '"@VERSION@"' not in init:
        sys.exit("make dist: packaging/python/bertfill/__init__.py has no __version__ = \"@VERSION@\"")
    with open(os.path.join(HERE, "python", "README.md")) as f:
        readme = f.read()
    dist_info = "bertfill-%s.dist-info" % version
    entries = {"bertfill/__init__.py": init.replace('"@VERSION@"', '"%s"' % version).encode(),
               "bertfill/bertfill.so": files["bertfill.so"],
               "bertfill/BUILDINFO": files["BUILDINFO"]}
    for name, data in files.items():
        if name.startswith("model/"):
            entries["bertfill/" + name] = data
    entries[dist_info + "/LICENSE"] = files["LICENSE"]
    entries[dist_info + "/licenses/utf8proc"] = files["licenses/utf8proc"]
    entries[dist_info + "/licenses/unicode"] = files["licenses/unicode"]
    entries[dist_info + "/METADATA"] = metadata([f % {"version": version} for f in FIELDS], readme)
    entries[dist_info + "/WHEEL"] = wheel_file("py3-none-" + tag, purelib=False)
    entries[dist_info + "/top_level.txt"] = b"bertfill\n"
    path = write_wheel(outdir, "bertfill-%s-py3-none-%s.whl" % (version, tag), dist_info, entries, mtime)
    print("make dist: %s (%s)" % (path, tag))


if __name__ == "__main__":
    main()
