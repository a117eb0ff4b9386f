#!/usr/bin/python3
"""t_docs.py — the SQL, Python, Node.js and PHP examples of README.md and
docs/*.md are tests, and the error messages they quote are bertfill's.

An example is a fenced ```sql block written as a sqlite3 shell transcript:

    ```sql
    sqlite> .load ./bertfill
    sqlite> SELECT bert_fill('人民法[MASK]');
    人民法院
    sqlite> SELECT mask, rank, token
       ...>   FROM fill_candidates('谈何[MASK]易', 2);
    0|1|容
    0|2|交
    ```

A line starting with "sqlite> " begins a statement (or a dot-command),
"   ...> " continues it, and every other line up to the next prompt is the
output it must print, exactly (trailing spaces aside).  Errors are shown as
the interactive shell shows them: "Runtime error: MESSAGE".  A statement
whose output depends on the machine or on timing carries the visible mark
"-- output varies": it is run, its output is not compared, and the check is
reported as skipped.  A ```sql block without the prompt is plain SQL that
shows no output, and is not run.

Each file runs in one sqlite3 shell, block after block, as a reader would
type them, on a fresh database in a scratch directory, with the shipped
model (BERTFILL_MODEL unset) and "./bertfill" standing for the extension
under test ($BERTFILL_EXT).  Prints one line per statement:
ok/FAIL/skip docs.FILE:LINE.

    /usr/bin/python3 tests/clients/t_docs.py --update    # write the real outputs into the files

The Python, Node.js and PHP examples are tests too.  A ```python block
(```js for Node.js, ```php) that shows output is a program: its whole-line
comments at the start of a line ("# " in Python, "// " in JavaScript and PHP)
are what the code above them prints, exactly; a block without such comments
is a fragment, not run.  Each program runs on its own in a scratch directory,
with '"./bertfill"' ('bertfill.so' in PHP) standing for the extension under test
and the shipped model: Python with /usr/bin/python3 (which can load
extensions), Node.js with the better-sqlite3 of tests/clients/node (tests/clients/node/install.sh
builds it), PHP with sqlite3.extension_dir set to the extension's directory;
without node (or better-sqlite3) or php (or its SQLite3 class) those examples
are skipped with the reason.  Checks:
ok/FAIL/skip docs.FILE:LINE, LINE the first line of the shown output.

Shell transcripts are tests too: a ```sh block whose first line starts with
"$ " is a session typed at a shell.  "$ " begins a command, "> " continues it,
other lines are what it prints.  The commands run one after another in one
bash, in a scratch directory that holds ./bertfill.so (the extension under
test), without BERTFILL_MODEL; each must exit with status 0, and print what
is shown (trailing spaces aside).  The recipe of README.md that downloads
bert-base-chinese runs there too: `curl` is a stand-in that serves, for the
URLs of google-bert/bert-base-chinese on huggingface.co and on the mirror
hf-mirror.com, the files of the generated model build/models/base-layout
(make_test_models.py: bert-base-chinese's files and vocabulary layout, 2
layers of hidden size 64), and fails for any other URL or file, as a curl -f
without network would.  A command whose output is bert-base-chinese's, not
the generated model's, carries the mark "# (bert-base-chinese)": it must
succeed, its output is not compared.  A block that uses HF_ENDPOINT runs a
second time with HF_ENDPOINT=https://hf-mirror.com, and every download must
then come from the mirror (.mirror checks).  --update leaves shell
transcripts alone.

A ```sql block that is not a transcript may not show output as comments
("-- 1|..."): output is shown as a transcript, where it is checked
(docs.untested.FILE:LINE).

Every error message that README.md and docs/*.md quote outside transcripts
(a `code span`, or a line of a code block, that starts with "bertfill: ",
"bertfill needs " or a function's name and ": ") must exist in ext/
(docs.error.FILE:LINE).  The string literals of ext/ (adjacent literals
joined, comments skipped) are split at their printf conversions into
pieces; the quote is covered by whole pieces (or, next to a "…" or "...",
part of one), the messages of the C library (strerror) and the few of
SQLite's that the docs quote, with as little left over as possible.  What
is left over is what the conversions put in (numbers, quoted input, paths,
"s" of a plural): a run of two words or more left over fails the quote.  A
grep, not a proof: docs.error.checker checks that messages that are not in
ext/ are rejected.  A quote in a transcript is produced by its statement,
which is better.

A block whose first line is "$ make demo" shows what the demo prints:
sql/demo.sh runs (in a scratch copy, with the extension under test as
./bertfill.so) and its output must be the block's lines, exactly, but from
the first line that says "output varies" on (bert_debug's kernels and
threads), where only the number of lines counts (docs.FILE:LINE.make_demo).

docs/errors.md maps the errors of SQLite itself that users of bertfill meet
(`unsafe use of bert_fill()`, `database is locked`, ...) to what to do
(docs.errors_md.sqlite: MESSAGE).

The README says which SQLite bertfill needs: the version entry.c checks,
and in the same paragraph each newer version that an example needs (`UPDATE
… FROM`: 3.33), with what needs it (docs.sqlite_version.VERSION).

--update (after retraining the shipped model, say) replaces every shown output
that differs by what the shell (or the program) really printed, and reports
each statement it changed; read the diff: the prose around an example may
describe its output.
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.chdir(ROOT)
# bftest (the check lines, where the build is) is in tests/python
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
from bftest import EXT, MODELS, check, exit_code, fail, skip  # noqa: E402

PROMPT, MORE = "sqlite> ", "   ...> "
VARIES = "-- output varies"


def blocks(path):
    """(language, [(line number, line)]) of every fenced block of path."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    out, fence, body = [], None, []
    for i, line in enumerate(lines, 1):
        if line.startswith("```"):
            if fence is None:  # opening: note the language, collect the body
                fence, body = line[3:].strip(), []
                continue
            out.append((fence, body))
            fence = None
            continue
        if fence is not None:
            body.append((i, line))
    return out


def examples(path):
    """[line, statement, expected output lines] of every transcript in path."""
    out = []
    for lang, body in blocks(path):
        if lang.startswith("sql"):
            out.extend(transcript(body))
    return out


def transcript(body):
    """The statements of one ```sql block; none unless it is a transcript."""
    text = [line for _, line in body if line.strip()]
    if not text or not text[0].startswith(PROMPT):
        return []  # plain SQL, no output shown
    stmts = []
    for i, line in body:
        if line.startswith(PROMPT):
            stmts.append([i, line[len(PROMPT):], []])
        elif line.startswith(MORE) and not stmts[-1][2]:
            stmts[-1][1] += "\n" + line[len(MORE):]
        else:
            stmts[-1][2].append(line.rstrip())
    return stmts


def normalize(text):
    """Shell output as the interactive shell shows it."""
    lines = []
    for line in text.split("\n"):
        line = re.sub(r"^(Runtime|Parse) error near line \d+: ", r"\1 error: ", line)
        line = re.sub(r"^Error: near line \d+: ", "Error: ", line)
        lines.append(line.rstrip())
    while lines and lines[-1] == "":
        lines.pop()
    return lines


def update_file(path, fixes):
    """Replace the shown output of the statements at the given lines by real output."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for line, have in sorted(fixes, reverse=True):
        i = line  # 0-based index of the line after the statement's first line
        while i < len(lines) and lines[i].startswith(MORE):
            i += 1
        j = i
        while j < len(lines) and not lines[j].startswith((PROMPT, "```")):
            j += 1
        while j > i and lines[j - 1].strip() == "":
            j -= 1
        lines[i:j] = have
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))


def run_file(path, ext, update=False):
    name = os.path.relpath(path, ROOT)
    fixes = []
    ex = examples(path)
    if not ex:
        return
    tmp = tempfile.mkdtemp(prefix="bf_docs_")
    try:
        script = []
        for n, (line, stmt, _) in enumerate(ex):
            script.append(".print @@%d" % n)
            if stmt.strip() in (".load ./bertfill", ".load ./bertfill.so"):
                stmt = ".load " + ext
            elif stmt.startswith(".load ./bertfill "):  # another entry point
                stmt = ".load " + ext + stmt[len(".load ./bertfill"):]
            script.append(stmt)
        env = dict(os.environ)
        env.pop("BERTFILL_MODEL", None)
        env["BERTFILL_PROGRESS"] = "0"
        if os.environ.get("BF_PRELOAD"):
            env["LD_PRELOAD"] = os.environ["BF_PRELOAD"]
        r = subprocess.run(["stdbuf", "-oL", "-eL", "sqlite3", "-batch", os.path.join(tmp, "docs.db")],
                           input="\n".join(script) + "\n", stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, cwd=tmp, env=env, text=True, timeout=300)
        got, cur = {}, None
        for line in r.stdout.split("\n"):
            m = re.fullmatch(r"@@(\d+)", line)
            if m:
                cur = int(m.group(1))
                got[cur] = []
            elif cur is not None:
                got[cur].append(line)
        for n, (line, stmt, want) in enumerate(ex):
            label = "docs.%s:%d" % (name, line)
            if VARIES in stmt:
                skip(label, "output varies (marked in the text)")
                continue
            have = normalize("\n".join(got.get(n, ["<no output: did the shell stop?>"])))
            want = list(want)
            while want and want[-1] == "":
                want.pop()
            if update and have != want:
                fixes.append((line, have))
                print("updated %s: %s" % (label, stmt.split("\n")[0]))
                continue
            check(label, have == want, "%s\n      shown: %r\n      real:  %r" % (stmt, want, have))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if fixes:
        update_file(path, fixes)


# ---- shell transcripts ------------------------------------------------------

SH_PROMPT, SH_MORE = "$ ", "> "
REAL_MODEL = "# (bert-base-chinese)"
BASE_LAYOUT = os.path.join(MODELS, "base-layout")
MIRROR = "https://hf-mirror.com"

# curl without network: the files of $BF_DOCS_MODEL for the URLs of
# google-bert/bert-base-chinese on the hub and its mirror; each URL asked
# for is logged in $BF_DOCS_CURL_LOG.
FAKE_CURL = r"""#!/bin/bash
out= url= remote=0
while [ $# -gt 0 ]; do
  case "$1" in
    http://*|https://*) url=$1 ;;
    -o|--output) out=$2; shift ;;
    -O|--remote-name) remote=1 ;;
    --retry|--retry-delay|--connect-timeout|--max-time|-C) shift ;;
    --*) ;;
    -*) case "$1" in *O*) remote=1 ;; esac
        case "$1" in *o) out=$2; shift ;; esac ;;
  esac
  shift
done
echo "$url" >>"$BF_DOCS_CURL_LOG"
case "$url" in
  https://huggingface.co/google-bert/bert-base-chinese/resolve/main/*|\
  https://hf-mirror.com/google-bert/bert-base-chinese/resolve/main/*) f=${url##*/} ;;
  *) echo "curl: (6) Could not resolve host: ${url#*://} (t_docs serves only bert-base-chinese's files)" >&2; exit 6 ;;
esac
[ -f "$BF_DOCS_MODEL/$f" ] || { echo "curl: (22) The requested URL returned error: 404" >&2; exit 22; }
[ -n "$out" ] || { [ "$remote" = 1 ] && out=$f; }
[ -n "$out" ] || { cat "$BF_DOCS_MODEL/$f"; exit 0; }
cp "$BF_DOCS_MODEL/$f" "$out"
"""


def shell_transcripts(path):
    """[[line, command, expected output lines], ...] of every shell transcript of path."""
    out = []
    for lang, body in blocks(path):
        if lang not in ("sh", "bash", "console", "shell"):
            continue
        text = [line for _, line in body if line.strip()]
        if not text or not text[0].startswith(SH_PROMPT):
            continue
        cmds = []
        for i, line in body:
            if line.startswith(SH_PROMPT):
                cmds.append([i, line[len(SH_PROMPT):], []])
            elif line.startswith(SH_MORE) and not cmds[-1][2]:
                cmds[-1][1] += "\n" + line[len(SH_MORE):]
            else:
                cmds[-1][2].append(line.rstrip())
        out.append(cmds)
    return out


def run_shell(path, ext):
    name = os.path.relpath(path, ROOT)
    for cmds in shell_transcripts(path):
        first = "docs.%s:%d" % (name, cmds[0][0])
        if not os.path.isfile(os.path.join(BASE_LAYOUT, "model.safetensors")):
            skip(first, "no generated model %s (make models)" % BASE_LAYOUT)
            continue
        mirror = any("HF_ENDPOINT" in c for _, c, _ in cmds)
        for endpoint in ([None, MIRROR] if mirror else [None]):
            run_shell_once(name, cmds, ext, endpoint)


def run_shell_once(name, cmds, ext, endpoint):
    tmp = tempfile.mkdtemp(prefix="bf_docs_sh_")
    try:
        os.symlink(ext + ".so", os.path.join(tmp, "bertfill.so"))
        bindir = os.path.join(tmp, ".bin")
        os.mkdir(bindir)
        with open(os.path.join(bindir, "curl"), "w") as f:
            f.write(FAKE_CURL)
        os.chmod(os.path.join(bindir, "curl"), 0o755)
        log = os.path.join(bindir, "urls")
        script = []
        for n, (_, cmd, _) in enumerate(cmds):
            script += ["echo @@%d" % n, cmd, "echo \"@@rc $?\""]
        env = dict(os.environ, PATH=bindir + os.pathsep + os.environ.get("PATH", ""),
                   BF_DOCS_MODEL=BASE_LAYOUT, BF_DOCS_CURL_LOG=log, BERTFILL_PROGRESS="0")
        env.pop("BERTFILL_MODEL", None)
        env.pop("HF_ENDPOINT", None)
        if endpoint:
            env["HF_ENDPOINT"] = endpoint
        if os.environ.get("BF_PRELOAD"):
            env["LD_PRELOAD"] = os.environ["BF_PRELOAD"]
        with open(os.path.join(bindir, "session.sh"), "w", encoding="utf-8") as f:
            f.write("\n".join(script) + "\n")
        r = subprocess.run(["bash", os.path.join(bindir, "session.sh")], stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=tmp, env=env,
                           text=True, timeout=300)
        got, status, cur = {}, {}, None
        for line in r.stdout.split("\n"):
            m = re.fullmatch(r"@@(\d+)", line)
            rc = re.fullmatch(r"@@rc (\d+)", line)
            if m:
                cur = int(m.group(1))
                got[cur] = []
            elif rc and cur is not None:
                status[cur] = int(rc.group(1))
            elif cur is not None:
                got[cur].append(line.rstrip())
        suffix = ".mirror" if endpoint else ""
        for n, (line, cmd, want) in enumerate(cmds):
            label = "docs.%s:%d%s" % (name, line, suffix)
            have = got.get(n, ["<no output: did the shell stop?>"])
            while have and have[-1] == "":
                have.pop()
            want = list(want)
            while want and want[-1] == "":
                want.pop()
            if status.get(n) != 0:
                fail(label, "%s\n      exit status %s: %r" % (cmd, status.get(n), have[-8:]))
            elif REAL_MODEL in cmd:
                check(label, bool(have), "%s\n      printed nothing" % cmd)
            else:
                check(label, have == want, "%s\n      shown: %r\n      real:  %r" % (cmd, want, have))
        if endpoint:
            urls = open(log).read().split() if os.path.exists(log) else []
            check("docs.%s:%d.mirror_used" % (name, cmds[0][0]),
                  urls and all(u.startswith(endpoint + "/") for u in urls),
                  "with HF_ENDPOINT=%s the downloads were %r" % (endpoint, urls))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---- what `make demo` prints ------------------------------------------------

DEMO = "$ make demo"


def demo_transcripts(path):
    """(line, expected output lines) of every block of path whose first line
    is "$ make demo": the lines after it are what the demo prints."""
    out = []
    for _, body in blocks(path):
        if body and body[0][1] == DEMO:
            out.append((body[0][0], [line.rstrip() for _, line in body[1:]]))
    return out


def run_demo(path, ext, update=False):
    """A shown `make demo` is what sql/demo.sh prints on the shipped model,
    line for line; from the first line that says "output varies" on, only
    the number of lines is compared (bert_debug's kernels and threads)."""
    name = os.path.relpath(path, ROOT)
    shown = demo_transcripts(path)
    if not shown:
        return
    tmp = tempfile.mkdtemp(prefix="bf_demo_")
    try:  # the demo as `make demo` runs it, with the extension under test as ./bertfill.so
        os.mkdir(os.path.join(tmp, "sql"))
        for f in ("demo.sh", "demo.sql"):
            shutil.copy(os.path.join(ROOT, "sql", f), os.path.join(tmp, "sql", f))
        os.symlink(os.path.join(ROOT, "model"), os.path.join(tmp, "model"))
        os.symlink(os.path.realpath(ext + ".so"), os.path.join(tmp, "bertfill.so"))
        env = dict(os.environ, BERTFILL_PROGRESS="0")
        env.pop("BERTFILL_MODEL", None)
        if os.environ.get("BF_PRELOAD"):
            env["LD_PRELOAD"] = os.environ["BF_PRELOAD"]
        r = subprocess.run(["bash", os.path.join(tmp, "sql", "demo.sh")], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, env=env, text=True, timeout=300)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    have = [line.rstrip() for line in r.stdout.split("\n")]
    while have and have[-1] == "":
        have.pop()
    if r.returncode != 0:
        have.append("<exit status %d>" % r.returncode)
    for line, want in shown:
        label = "docs.%s:%d.make_demo" % (name, line)
        cut = next((i for i, w in enumerate(want) if "output varies" in w), len(want))
        same = have[:cut] == want[:cut] and len(have) == len(want)
        if update and not same and r.returncode == 0:
            update_demo(path, line, have[:cut] + want[cut:] if len(have) == len(want) else have)
            print("updated %s" % label)
            continue
        diff = next((i for i in range(min(len(have), len(want))) if have[i] != want[i] and i < cut),
                    min(len(have), len(want)))
        check(label, same, "the demo prints %d lines, %d shown; first difference at line %d:\n"
              "      shown: %r\n      real:  %r" % (len(have), len(want), line + 1 + diff,
                                                    want[diff] if diff < len(want) else None,
                                                    have[diff] if diff < len(have) else None))


def update_demo(path, line, have):
    """Replace the output of the `$ make demo` block at line by have."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    end = line
    while not lines[end].startswith("```"):
        end += 1
    lines[line:end] = have
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))


# ---- Python and Node.js programs ----------------------------------------

LANGS = {  # fence: (output comment, marker statement, file name)
    "python": ("# ", 'print("@@%d")', "example.py"),
    "js": ("// ", 'console.log("@@%d");', "example.js"),
    "php": ("// ", 'echo "@@%d\n";', "example.php"),
}


def programs(path):
    """(language, code segments, [(line, expected output lines)]) of every
    program of path: segment k is the code before output k."""
    out = []
    for lang, body in blocks(path):
        if lang not in LANGS:
            continue
        mark = LANGS[lang][0]
        segs, shown, code = [], [], []
        for i, line in body:
            if line.startswith(mark) or line == mark.rstrip():
                if code or not shown:
                    segs.append(code)
                    shown.append((i, []))
                    code = []
                shown[-1][1].append(line[len(mark):].rstrip())
            else:
                code.append(line)
        if shown:
            out.append((lang, segs + [code], shown))
    return out


def node_runner():
    """(argv, environment to add) that run a Node.js example, or (None, why not)."""
    if not shutil.which("node"):
        return None, "no node (Debian: make test-deps)"
    r = subprocess.run(["bash", "tests/clients/node/install.sh"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=600)
    if r.returncode != 0:
        return None, "better-sqlite3 unavailable: " + (r.stderr.strip().split("\n") or [""])[-1]
    return ["node"], {"NODE_PATH": os.path.join(ROOT, "tests", "clients", "node", "node_modules")}


def php_runner(ext):
    """(argv, environment to add) that run a PHP example, or (None, why not)."""
    if not shutil.which("php"):
        return None, "no php (Debian: make test-deps, or apt-get install php-cli php-sqlite3)"
    if subprocess.run(["php", "-r", "exit(class_exists('SQLite3') ? 0 : 1);"]).returncode != 0:
        return None, "PHP has no SQLite3 class (Debian: apt-get install php-sqlite3)"
    return ["php", "-d", "sqlite3.extension_dir=" + os.path.dirname(os.path.realpath(ext + ".so"))], {}


def run_program(path, lang, segs, shown, ext, runner, update, fixes):
    name = os.path.relpath(path, ROOT)
    labels = ["docs.%s:%d" % (name, line) for line, _ in shown]
    if runner[0] is None:
        for label in labels:
            skip(label, runner[1])
        return
    argv, env_add = runner
    mark, marker, fname = LANGS[lang]
    script = []
    for k, seg in enumerate(segs):
        script.extend(seg)
        if k < len(shown):
            script.append(marker % k)
    code = "\n".join(script) + "\n"
    code = code.replace('"./bertfill"', json.dumps(ext)).replace("'./bertfill'", json.dumps(ext))
    code = code.replace("'bertfill.so'", "'%s.so'" % os.path.basename(ext))  # PHP: in extension_dir
    tmp = tempfile.mkdtemp(prefix="bf_docs_")
    try:
        with open(os.path.join(tmp, fname), "w", encoding="utf-8") as f:
            f.write(code)
        env = dict(os.environ, BERTFILL_PROGRESS="0", **env_add)
        env.pop("BERTFILL_MODEL", None)
        if os.environ.get("BF_PRELOAD"):
            env["LD_PRELOAD"] = os.environ["BF_PRELOAD"]
        r = subprocess.run(argv + [fname], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           cwd=tmp, env=env, text=True, timeout=120)
        left = sorted(set(os.listdir(tmp)) - {fname})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    got, cur = [[] for _ in shown], None
    for line in r.stdout.split("\n"):
        m = re.fullmatch(r"@@(\d+)", line)
        if m:
            cur = int(m.group(1)) + 1
        elif cur is None or cur < len(shown):
            got[cur or 0].append(line.rstrip())
    for k, ((line, want), label) in enumerate(zip(shown, labels)):
        have = got[k]
        while have and have[-1] == "":
            have.pop()
        if k == len(shown) - 1 and r.returncode != 0:
            have = have + ["<exit status %d: %s>" % (r.returncode, r.stderr.strip()[-600:])]
        if update and have != want and r.returncode == 0:
            fixes.append((line, [(mark + h).rstrip() for h in have]))
            print("updated %s" % label)
            continue
        check(label, have == want, "%s example\n      shown: %r\n      real:  %r" % (lang, want, have))
    # an example leaves nothing behind where it runs (my.db in the reader's directory)
    check("docs.%s:%d.no_files_left" % (name, shown[0][0]), not left,
          "the example left %s in its directory" % ", ".join(left))


def update_lines(path, fixes):
    """Replace the output comment lines that start at the given lines."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for line, have in sorted(fixes, reverse=True):
        i = j = line - 1
        mark = "# " if lines[i].startswith("#") else "// "
        while j < len(lines) and (lines[j].startswith(mark) or lines[j] == mark.rstrip()):
            j += 1
        lines[i:j] = have
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))


def untested_output(path):
    """A plain ```sql block that shows output in comments is an output nobody checks."""
    name = os.path.relpath(path, ROOT)
    for lang, body in blocks(path):
        if not lang.startswith("sql") or transcript(body):
            continue
        rows = [i for i, line in body if re.match(r"--\s*\S*\|", line)]
        if rows:
            fail("docs.untested.%s:%d" % (name, rows[0]),
                 "output shown as comments of plain SQL is not checked; write the block as a "
                 "transcript (sqlite> ...)")


# ---- error messages quoted in the text -------------------------------------

def c_literals(src):
    """The string literals of C source src, adjacent ones joined (as the
    compiler does); comments and character constants are skipped."""
    out, cur, i, n = [], None, 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("/*", i):
            j = src.find("*/", i + 2)
            i = n if j < 0 else j + 2
        elif src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
        elif c in "'\"":
            j, buf = i + 1, []
            while j < n and src[j] != c:
                if src[j] == "\\":
                    m = re.match(r"x[0-9a-fA-F]+|[0-7]{1,3}", src[j + 1:j + 5])
                    if m:  # a byte: kept when ASCII
                        v = int(m.group(0)[1:], 16) if m.group(0)[0] == "x" else int(m.group(0), 8)
                        buf.append(chr(v) if v < 128 else "\ufffd")
                        j += 1 + len(m.group(0))
                    else:
                        buf.append({"n": "\n", "t": "\t", "r": "\r"}.get(src[j + 1], src[j + 1]))
                        j += 2
                else:
                    buf.append(src[j])
                    j += 1
            if c == '"':
                cur = "".join(buf) if cur is None else cur + "".join(buf)
            elif cur is not None:
                out.append(cur)
                cur = None
            i = j + 1
        else:
            if not c.isspace() and cur is not None:
                out.append(cur)
                cur = None
            i += 1
    if cur is not None:
        out.append(cur)
    return out


CONVERSION = re.compile(r"%[-+ #0]*(?:\*|\d+)?(?:\.(?:\*|\d+))?(?:hh|h|ll|l|z|j|t|L)?[diouxXeEfgGcsp]")
MIN_PIECE = 6      # shorter literal pieces (", ", " (") account for nothing
ELISION = re.compile(r"…|\.\.\.")
# What a conversion puts into bertfill's messages from elsewhere: the C
# library's strerror, and the messages of SQLite that docs quote.
OUTSIDE = [re.escape(os.strerror(e)) for e in range(1, 134)] + [
    r'near "[^"]*": syntax error', "integer overflow", r"no such table: \w+"]
WORD = re.compile(r"(?<![\w/.])[A-Za-z][a-z]+(?![\w/])")  # a word; hex (FF) and paths are values


def ext_pieces():
    """The literal pieces of every string literal of ext/: split at printf conversions."""
    pieces = set()
    for f in sorted(glob.glob(os.path.join(ROOT, "ext", "**", "*.[ch]"), recursive=True)):
        with open(f, encoding="utf-8") as fh:
            for lit in c_literals(fh.read()):
                for p in CONVERSION.split(lit):
                    p = p.replace("%%", "%")
                    if len(p) >= MIN_PIECE:
                        pieces.add(p)
    return pieces


def unexplained(msg, pieces):
    """The runs of msg that neither a piece of ext/, nor an elision, nor a text
    from outside accounts for, as few characters as possible (dynamic
    programming over the matches).  A piece matches whole; next to an elision
    its part may (the start of a piece before "…", its end after)."""
    n = len(msg)
    elided = [False] * n
    for m in ELISION.finditer(msg):
        elided[m.start():m.end()] = [True] * (m.end() - m.start())
    spans = set()
    for p in pieces:
        k = msg.find(p)
        while k >= 0:
            spans.add((k, k + len(p)))
            k = msg.find(p, k + 1)
    for pat in OUTSIDE:
        spans.update(m.span() for m in re.finditer(pat, msg))
    for a in range(n):  # parts of a piece against an elision
        for b in range(a + MIN_PIECE, n + 1):
            left, right = a > 0 and elided[a - 1], b < n and elided[b]
            if not (left or right) or any(elided[a:b]):
                continue
            sub = msg[a:b]
            if any((p.startswith(sub) and right) or (p.endswith(sub) and left) or
                   (sub in p and left and right) for p in pieces):
                spans.add((a, b))
    ends = {}
    for a, b in spans:
        ends.setdefault(a, []).append(b)
    # cost[i]: the fewest unexplained characters of msg[:i]; back[i]: the step
    # that reached i, (start, whether msg[start] is an unexplained character)
    cost, back = [0] + [None] * n, [None] * (n + 1)
    for i in range(n):
        steps = [(i + 1, not elided[i])] + [(b, False) for b in ends.get(i, [])]
        for b, bare in steps:
            c = cost[i] + bare
            if cost[b] is None or c < cost[b]:
                cost[b], back[b] = c, (i, bare)
    bare, i = [False] * n, n
    while i > 0:
        i, bare_char = back[i]
        bare[i] = bare_char
    return [run for run in "".join(ch if bare[k] else "\x00" for k, ch in enumerate(msg)).split("\x00")
            if run]


def rejected(msg, pieces):
    """Why msg is not a message of ext/, or None: a run of two words or more
    that no literal of ext/ holds."""
    for run in unexplained(msg, pieces):
        words = WORD.findall(run)
        if len(words) >= 2:
            return "not in ext/: %r" % run
    return None


QUOTED = re.compile(r"(?:bertfill|bert_[a-z_]+|fill_[a-z_]+): |bertfill needs ")


def quoted_errors(path):
    """(line, message) of the messages quoted outside transcripts."""
    out = []
    in_transcript = set()
    for lang, body in blocks(path):
        if lang.startswith("sql") and transcript(body):
            in_transcript.update(i for i, _ in body)
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f.read().split("\n"), 1):
            if i in in_transcript:
                continue
            for m in re.finditer(r"`([^`]+)`", line):
                if QUOTED.match(m.group(1)):
                    out.append((i, m.group(1)))
            if QUOTED.match(line.strip()) and "`" not in line:
                out.append((i, line.strip()))
    return out


# Messages that are not bertfill's: the checker must reject each.
NOT_IN_EXT = [
    "bert_score: the answer holds [MASK]; give the tokens that fill the masks",
    "bert_fill: the text has 133 tokens ([CLS] and [SEP] included) but the model takes at most 128",
    "fill_rows: the query writes to the database; it must be a SELECT that returns (key, text)",
    "bertfill: busy: 2 encoder runs in progress, waited for 2000 ms",
    "bertfill needs SQLite 3.31 or later",
]


def check_errors(paths):
    pieces = ext_pieces()
    missed = [m for m in NOT_IN_EXT if not rejected(m, pieces)]
    check("docs.error.checker", not missed, "accepted as messages of ext/: %r" % missed)
    for path in paths:
        name = os.path.relpath(path, ROOT)
        for line, msg in quoted_errors(path):
            why = rejected(msg, pieces)
            check("docs.error.%s:%d" % (name, line), why is None, "%s\n      quoted: %s" % (why, msg))


# SQL of newer SQLite than the extension needs (3.31): what it is called in
# the README, the version, and how to find it in an example.
SQLITE_FEATURES = [
    ("`UPDATE … FROM`", "3.33", re.compile(r"\bUPDATE\s+\w+\s+SET\b[^;]*?\bFROM\b", re.I | re.S)),
    ("`iif`", "3.32", re.compile(r"\biif\s*\(", re.I)),
    ("`RETURNING`", "3.35", re.compile(r"\bRETURNING\b", re.I)),
    ("`DROP COLUMN`", "3.35", re.compile(r"\bDROP\s+COLUMN\b", re.I)),
    ("`STRICT` tables", "3.37", re.compile(r"\)\s*STRICT\b", re.I)),
    ("`->>`", "3.38", re.compile(r"->>")),
    ("`unixepoch`", "3.38", re.compile(r"\bunixepoch\s*\(", re.I)),
    ("`format`", "3.38", re.compile(r"\bformat\s*\(", re.I)),
    ("`RIGHT` and `FULL JOIN`", "3.39", re.compile(r"\b(RIGHT|FULL)\s+(OUTER\s+)?JOIN\b", re.I)),
    ("`concat`", "3.44", re.compile(r"\bconcat(_ws)?\s*\(", re.I)),
]


def check_sqlite_versions(paths):
    """The README says which SQLite bertfill needs: the extension's minimum
    (entry.c's check, the version in its message), and, in the same
    paragraph, every newer version an example of README.md or docs/ needs,
    with what needs it (docs.sqlite_version)."""
    entry = open(os.path.join(ROOT, "ext", "sqlite", "entry.c"), encoding="utf-8").read()
    m = re.search(r"sqlite3_libversion_number\(\) < (\d)(\d{3})(\d{3})", entry)
    least = "%d.%d" % (int(m.group(1)), int(m.group(2))) if m else None
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    paras = [re.sub(r"\s+", " ", p) for p in readme.split("\n\n")]
    claim = [p for p in paras if "needs SQLite %s or later" % least in p]
    check("docs.sqlite_version.least", least is not None and claim,
          "README.md does not say \"needs SQLite %s or later\", the version entry.c checks" % least)
    used = {}
    for path in paths:
        for lang, body in blocks(path):
            code = "\n".join(line for _, line in body)
            for label, version, pat in SQLITE_FEATURES:
                if pat.search(code):
                    used.setdefault((label, version), os.path.relpath(path, ROOT))
    for (label, version), where in sorted(used.items()):
        said = any(label in p and version in p for p in claim)
        check("docs.sqlite_version.%s" % version, said,
              "%s (SQLite %s, used in %s) is not named with its version where README.md says which "
              "SQLite bertfill needs" % (label, version, where))


# SQLite's own messages that bertfill's users meet, and the words of the
# remedy docs/errors.md must give in the same section.
SQLITE_ERRORS = [
    ("unsafe use of bert_fill()", "sqlite3_bertfill_trusted_init"),
    ("database is locked", ".timeout"),
    ('near "FROM": syntax error', "3.33"),
    ("no such function: bert_fill", ".load ./bertfill"),
]


def check_sqlite_errors():
    """docs/errors.md maps SQLite's own errors to what to do (docs.errors_md.sqlite)."""
    text = open(os.path.join(ROOT, "docs", "errors.md"), encoding="utf-8").read()
    sections = text.split("\n## ")
    for msg, remedy in SQLITE_ERRORS:
        check("docs.errors_md.sqlite: " + msg, any(msg in sec and remedy in sec for sec in sections),
              "docs/errors.md has no section with %r and its remedy %r" % (msg, remedy))


def main():
    if not shutil.which("sqlite3"):
        skip("docs", "no sqlite3 shell (apt-get install sqlite3)")
        return exit_code()
    ext = os.path.abspath(EXT)
    update = "--update" in sys.argv[1:]
    files = ["README.md"] + sorted(glob.glob("docs/**/*.md", recursive=True))
    for path in files:
        run_file(path, ext, update)
        run_shell(path, ext)
        run_demo(path, ext, update)
    runners = {"python": ([sys.executable], {})}
    for path in files:
        fixes = []
        for lang, segs, shown in programs(path):
            if lang not in runners:
                runners[lang] = php_runner(ext) if lang == "php" else node_runner()
            run_program(path, lang, segs, shown, ext, runners[lang], update, fixes)
        if fixes:
            update_lines(path, fixes)
        untested_output(path)
    check_errors(files)
    check_sqlite_versions(files)
    check_sqlite_errors()
    return exit_code()


if __name__ == "__main__":
    sys.exit(main())
