#!/usr/bin/python3
"""t_readme.py — the shape of README.md (issue 37): short, and its first
screen says how to get bertfill.

  readme.lines         at most 250 lines (the long parts live in docs/)
  readme.install_first the first section is "## Install", and every block a
                       user copies to install and try it (the comments
                       <!-- install:... --> and <!-- use:... --> that
                       tests/dist/t_readme_install.sh runs) is in the first 60
                       lines: pip, npm, the tarball; Python, Node.js, sqlite3

    /usr/bin/python3 tests/project/t_readme.py
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAX_LINES = 250
FIRST_SCREEN = 60
MARKS = ["install:pip", "install:npm", "install:tarball", "use:python", "use:node", "use:sqlite3"]


def main():
    lines = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read().rstrip("\n").split("\n")
    bad = 0

    def check(name, ok, why):
        nonlocal bad
        print("ok " + name if ok else "FAIL %s: %s" % (name, why))
        bad += not ok

    check("readme.lines", len(lines) <= MAX_LINES,
          "README.md has %d lines, more than %d: move a long part to docs/" % (len(lines), MAX_LINES))
    first = next((l for l in lines if re.match(r"## ", l)), None)
    where = {m: next((i for i, l in enumerate(lines, 1) if l.strip() == "<!-- %s -->" % m), None)
             for m in MARKS}
    late = ["%s (%s)" % (m, "line %d" % i if i else "missing") for m, i in where.items()
            if not i or i > FIRST_SCREEN]
    check("readme.install_first", first == "## Install" and not late,
          "the first section is %r; not in the first %d lines: %s" % (first, FIRST_SCREEN, ", ".join(late)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
