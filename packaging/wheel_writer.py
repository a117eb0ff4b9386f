"""packaging/wheel_writer.py — what every wheel of `make dist` shares
(docs/dist.md): packaging/wheel.py (bertfill itself) and packaging/plugins.py
(datasette-bertfill, sqlite-utils-bertfill) import it; it is not run.

    from wheel_writer import metadata, wheel_file, write_wheel
    entries = {"pkg/__init__.py": b"...", DIST_INFO + "/LICENSE": b"..."}
    entries[DIST_INFO + "/METADATA"] = metadata(["Name: pkg", "Version: 1.0", ...], readme)
    entries[DIST_INFO + "/WHEEL"] = wheel_file("py3-none-any", purelib=True)
    path = write_wheel(OUTDIR, "pkg-1.0-py3-none-any.whl", DIST_INFO, entries, mtime)

A wheel is a zip with METADATA, WHEEL and RECORD in its .dist-info: written
here with zipfile, no PyPI, no network.  write_wheel adds RECORD (the sha256
and size of every other file), sorts the entries (RECORD last, as the wheel
spec recommends), dates them all by mtime (a Unix time: the last commit's,
so one tree gives the same bytes), gives them modes 0644 (0755 for a .so)
and writes the file atomically (NAME.tmp, then renamed).
"""
import base64
import hashlib
import io
import os
import time
import zipfile


def record_hash(data):
    """RECORD's hash of data: sha256=, urlsafe base64 without padding."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + digest.decode()


def metadata(fields, readme):
    """METADATA: Metadata-Version 2.1, the "Key: value" lines of fields, then
    readme (markdown) as the description."""
    lines = ["Metadata-Version: 2.1"] + list(fields) + ["Description-Content-Type: text/markdown"]
    return ("\n".join(lines) + "\n\n" + readme).encode()


def wheel_file(tag, purelib):
    """WHEEL: the one tag (py3-none-any, py3-none-manylinux_2_34_x86_64) and
    Root-Is-Purelib (true for pure Python, false for a wheel with a .so)."""
    return ("Wheel-Version: 1.0\nGenerator: bertfill packaging/wheel_writer.py\n"
            "Root-Is-Purelib: %s\nTag: %s\n" % ("true" if purelib else "false", tag)).encode()


def write_wheel(outdir, name, dist_info, entries, mtime):
    """Writes outdir/name from entries ({path in the wheel: bytes}, without
    RECORD) and returns its path."""
    entries = dict(entries)
    record = "".join("%s,%s,%d\n" % (n, record_hash(d), len(d)) for n, d in sorted(entries.items()))
    entries[dist_info + "/RECORD"] = (record + dist_info + "/RECORD,,\n").encode()
    date = time.gmtime(max(mtime, 315532800))[:6]  # zip dates start in 1980
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as whl:
        for n in sorted(entries, key=lambda n: (n.endswith("/RECORD"), n)):
            zi = zipfile.ZipInfo(n, date)
            zi.compress_type = zipfile.ZIP_DEFLATED
            zi.external_attr = (0o100755 if n.endswith(".so") else 0o100644) << 16
            whl.writestr(zi, entries[n])
    os.makedirs(outdir, exist_ok=True)
    path = os.path.join(outdir, name)
    with open(path + ".tmp", "wb") as f:
        f.write(buf.getvalue())
    os.replace(path + ".tmp", path)
    return path
