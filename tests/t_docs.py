#!/usr/bin/python3
"""t_docs.py — the SQL examples of README.md and docs/*.md are tests.

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

    /usr/bin/python3 tests/t_docs.py --update    # write the real outputs into the files

--update (after retraining the shipped model, say) replaces every shown output
that differs by what the shell really printed, and reports each statement it
changed; read the diff: the prose around an example may describe its output.
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.chdir(ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))
from bftest import EXT, check, exit_code, skip  # noqa: E402

PROMPT, MORE = "sqlite> ", "   ...> "
VARIES = "-- output varies"


def examples(path):
    """[line, statement, expected output lines] of every transcript in path."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    out, fence, body = [], None, []
    for i, line in enumerate(lines, 1):
        if line.startswith("```"):
            if fence is None:  # opening: note the language, collect the body
                fence, body = line[3:].strip(), []
                continue
            if fence.startswith("sql"):
                out.extend(transcript(body))
            fence = None
            continue
        if fence is not None:
            body.append((i, line))
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


def main():
    if not shutil.which("sqlite3"):
        skip("docs", "no sqlite3 shell (apt-get install sqlite3)")
        return exit_code()
    ext = os.path.abspath(EXT)
    files = ["README.md"] + sorted(glob.glob("docs/**/*.md", recursive=True))
    for path in files:
        run_file(path, ext, "--update" in sys.argv[1:])
    return exit_code()


if __name__ == "__main__":
    sys.exit(main())
