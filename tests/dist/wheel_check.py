"""tests/dist/wheel_check.py — run by t_wheel.sh with the venv's Python, in a
folder outside the repository, the wheel installed: fills through
bertfill.load() as a user would.  Prints one "ok NAME" / "FAIL NAME: why" /
"skip NAME: why" per check.  Parts (argv[1]):
  valid WHL  any wheel (t_wheel.sh, t_plugins.sh; any Python, nothing
             installed): its name NAME-VERSION-TAG.whl, one NAME-VERSION.dist-info
             with METADATA (Metadata-Version 2.x, Name and Version those of the
             file name), WHEEL (Wheel-Version 1.0, Root-Is-Purelib, Tag the file
             name's) and RECORD listing every other file once with its right
             sha256 and size.  Prints one line: "ok", or what is wrong (the
             suite makes it its check line)
  fills      sqlite3: load(), bert_fill, fill_candidates, extension loading
             forbidden again after load(); apsw the same where importable
  int8       bert_load(model_path(), 'int8') on the installed model, its
             directory made read-only by t_wheel.sh: the derived file must
             be in BERTFILL_CACHE_DIR (bert_debug's model) and the model's
             directory unchanged
  no_ext     a Python whose sqlite3 cannot load extensions: load() must
             raise bertfill.LoadError that says so and what to do
"""
import base64
import csv
import email.parser
import hashlib
import io
import json
import os
import re
import sys
import zipfile

TEXT = "中华人民共[MASK]国"


def check(name, good, why):
    print("ok wheel_%s" % name if good else "FAIL wheel_%s: %s" % (name, why))


def valid():
    path = sys.argv[2]
    m = re.fullmatch(r"([A-Za-z0-9_.]+)-([^-]+)-(py3-none-[a-z0-9_]+)\.whl", os.path.basename(path))
    if not m:
        return "not a wheel's name NAME-VERSION-py3-none-TAG.whl: %s" % os.path.basename(path)
    name, version, tag = m.groups()
    with zipfile.ZipFile(path) as whl:
        files = {i.filename: whl.read(i) for i in whl.infolist() if not i.is_dir()}
    dist_info = "%s-%s.dist-info" % (name, version)
    infos = sorted({f.split("/")[0] for f in files if f.split("/")[0].endswith(".dist-info")})
    if infos != [dist_info]:
        return "want one %s, have %s" % (dist_info, infos)
    for need in ("METADATA", "WHEEL", "RECORD"):
        if dist_info + "/" + need not in files:
            return "no %s/%s" % (dist_info, need)
    meta = email.parser.BytesParser().parsebytes(files[dist_info + "/METADATA"])
    if not re.fullmatch(r"2\.[0-9]+", meta.get("Metadata-Version", "")):
        return "METADATA: Metadata-Version %r" % meta.get("Metadata-Version")
    if re.sub(r"[-_.]+", "_", meta.get("Name", "")).lower() != name.lower() or meta.get("Version") != version:
        return "METADATA: Name %r, Version %r for %s" % (meta.get("Name"), meta.get("Version"), os.path.basename(path))
    wheel = email.parser.BytesParser().parsebytes(files[dist_info + "/WHEEL"])
    if (wheel.get("Wheel-Version") != "1.0" or wheel.get_all("Tag") != [tag]
            or wheel.get("Root-Is-Purelib") not in ("true", "false")):
        return "WHEEL: %r" % files[dist_info + "/WHEEL"].decode()
    rows = list(csv.reader(io.StringIO(files[dist_info + "/RECORD"].decode())))
    listed = [r[0] for r in rows]
    if sorted(listed) != sorted(files) or len(set(listed)) != len(listed):
        return "RECORD lists %s; the wheel has %s" % (sorted(listed), sorted(files))
    bad = [p for p, h, n in rows if p != dist_info + "/RECORD" and (h != "sha256=" + base64.urlsafe_b64encode(
           hashlib.sha256(files[p]).digest()).rstrip(b"=").decode() or n != str(len(files[p])))]
    return "wrong hash or size in RECORD: %s" % bad if bad else "ok"


def fills():
    import sqlite3

    conn = sqlite3.connect(":memory:")
    bertfill.load(conn)
    got = conn.execute("select bert_fill(?)", (TEXT,)).fetchone()[0]
    check("sqlite3_bert_fill", got == "中华人民共和国", "bert_fill(%s) = %r" % (TEXT, got))
    rows = conn.execute("select rank, token, score from fill_candidates(?)", (TEXT,)).fetchall()
    check("sqlite3_fill_candidates", len(rows) > 1 and rows[0][:2] == (1, "和") and 0 < rows[0][2] <= 1,
          "fill_candidates(%s) = %r" % (TEXT, rows[:3]))
    try:
        conn.load_extension(bertfill.loadable_path())
        forbidden = False
    except sqlite3.OperationalError as e:
        forbidden = "not authorized" in str(e)
    check("sqlite3_loading_off_again", forbidden, "after load(), the connection can still load extensions")
    check("version", bertfill.__version__ == sys.argv[2], "__version__ %r, want %r" % (bertfill.__version__, sys.argv[2]))
    try:
        import apsw
    except ImportError:
        print("skip wheel_apsw: no apsw in this Python (Debian: apt-get install python3-apsw)")
        return
    a = apsw.Connection(":memory:")
    bertfill.load(a)
    got = [r[0] for r in a.execute("select bert_fill(?)", (TEXT,))]
    check("apsw_bert_fill", got == ["中华人民共和国"], "apsw: bert_fill(%s) = %r" % (TEXT, got))
    try:
        a.loadextension(bertfill.loadable_path())
        forbidden = False
    except apsw.Error:
        forbidden = True
    check("apsw_loading_off_again", forbidden, "after load(), the apsw connection can still load extensions")


def int8():
    import sqlite3

    model = bertfill.model_path()
    before = sorted(os.listdir(model))
    cache = os.environ["BERTFILL_CACHE_DIR"]
    conn = sqlite3.connect(":memory:")
    bertfill.load(conn)
    loaded = conn.execute("select bert_load(?, 'int8')", (model,)).fetchone()[0]
    info = json.loads(conn.execute("select bert_debug()").fetchone()[0])["model"]
    derived = info["derived_file"]
    check("int8_load", info["precision"] == "int8" and info["dir"] == model, "bert_load: %r; model: %r" % (loaded, info))
    check("int8_cache_dir", info["cache_dir"].startswith(cache + "/") and derived.startswith(info["cache_dir"] + "/")
          and os.path.isfile(derived) and info["cache_dir_error"] == "",
          "the read-only model's int8 file is not in BERTFILL_CACHE_DIR=%s: %r" % (cache, info))
    check("int8_model_dir_unchanged", sorted(os.listdir(model)) == before,
          "files appeared in the read-only model directory: %r" % sorted(set(os.listdir(model)) - set(before)))
    rows = conn.execute("select rank, token from fill_candidates(?)", (TEXT,)).fetchall()
    check("int8_fill", rows[:1] == [(1, "和")], "int8 fill_candidates(%s) = %r" % (TEXT, rows[:3]))


def no_ext():
    import sqlite3

    conn = sqlite3.connect(":memory:")
    try:
        bertfill.load(conn)
        err = "no error"
    except bertfill.LoadError as e:
        err = str(e)
    except Exception as e:  # an AttributeError with no hint is what this test forbids
        err = "%s: %s" % (type(e).__name__, e)
    words = ["cannot load extensions", "--enable-loadable-sqlite-extensions", "/usr/bin/python3", "apsw"]
    check("no_extensions_error_" + sys.argv[2], all(w in err for w in words),
          "load() on a sqlite3 without enable_load_extension: %r (want bertfill.LoadError naming %s)" % (err, words))


if sys.argv[1] == "valid":
    print(valid())
else:
    import bertfill

    {"fills": fills, "int8": int8, "no_ext": no_ext}[sys.argv[1]]()
