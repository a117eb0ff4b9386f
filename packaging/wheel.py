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
A wheel is a zip with those three files in .dist-info: written here with
zipfile, no PyPI, no network.  Entries are sorted, dated by the tarball's
files (the last commit), modes 0644 / 0755 for the .so: one tarball gives the
same bytes.
"""
import base64
import hashlib
import io
import os
import sys
import tarfile
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))


def record_hash(data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + digest.decode()


def metadata(version, summary, readme):
    lines = [
        "Metadata-Version: 2.1",
        "Name: bertfill",
        "Version: " + version,
        "Summary: " + summary,
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
        "Description-Content-Type: text/markdown",
    ]
    return ("\n".join(lines) + "\n\n" + readme).encode()


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
    summary = "SQLite extension: fill [MASK] blanks of Chinese text with a BERT masked LM, in SQL"
    entries[dist_info + "/METADATA"] = metadata(version, summary, readme)
    entries[dist_info + "/WHEEL"] = ("Wheel-Version: 1.0\nGenerator: bertfill packaging/wheel.py\n"
                                     "Root-Is-Purelib: false\nTag: py3-none-%s\n" % tag).encode()
    entries[dist_info + "/top_level.txt"] = b"bertfill\n"
    record = "".join("%s,%s,%d\n" % (n, record_hash(d), len(d)) for n, d in sorted(entries.items()))
    entries[dist_info + "/RECORD"] = (record + dist_info + "/RECORD,,\n").encode()

    date = time.gmtime(max(mtime, 315532800))[:6]  # zip dates start in 1980
    name = "bertfill-%s-py3-none-%s.whl" % (version, tag)
    os.makedirs(outdir, exist_ok=True)
    path = os.path.join(outdir, name)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as whl:
        # RECORD last, as the wheel spec recommends
        for n in sorted(entries, key=lambda n: (n.endswith("/RECORD"), n)):
            zi = zipfile.ZipInfo(n, date)
            zi.compress_type = zipfile.ZIP_DEFLATED
            zi.external_attr = (0o100755 if n.endswith(".so") else 0o100644) << 16
            whl.writestr(zi, entries[n])
    with open(path + ".tmp", "wb") as f:
        f.write(buf.getvalue())
    os.replace(path + ".tmp", path)
    print("make dist: %s (%s)" % (path, tag))


if __name__ == "__main__":
    main()
