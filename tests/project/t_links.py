#!/usr/bin/python3
"""t_links.py — every relative link of the project's Markdown files leads
somewhere: the file or folder exists, and an anchor (#part) is a heading of
the target as GitHub names it.

Files: every tracked *.md (README.md, docs/, tests/, model/, examples/,
packaging/ ...), read as GitHub renders them: links inside fenced code
blocks and `code spans` are text, not links.  A link is [text](target) or a
reference definition "[label]: target"; http(s):, mailto: and other schemes
are not checked (no network).  The target is taken relative to the file's
folder; "#part" alone is the file itself.  An anchor must be one GitHub
makes for a heading of the target (github-slugger: the heading's text as
rendered, lower-cased, every character but letters, digits, marks, "_",
"-" and spaces dropped, spaces made "-", "-1", "-2" ... after repeats) or an
HTML id/name attribute.  Prints ok/FAIL links.FILE:LINE per link, and
links.slug: the slug rule on headings whose GitHub anchors are known.

    /usr/bin/python3 tests/project/t_links.py
"""
import os
import re
import subprocess
import sys
import unicodedata
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
failed = 0


def check(name, ok, why=""):
    global failed
    if ok:
        print("ok " + name)
    else:
        failed += 1
        print("FAIL %s: %s" % (name, why))


def prose_lines(text):
    """(line number, line) of the lines outside fenced code blocks, with
    code spans blanked out."""
    out, fence = [], None
    for i, line in enumerate(text.split("\n"), 1):
        m = re.match(r"\s*(```+|~~~+)", line)
        if m:
            if fence is None:
                fence = m.group(1)[0] * 3
            elif m.group(1).startswith(fence):
                fence = None
            continue
        if fence is None:
            out.append((i, re.sub(r"(`+)(?:(?!\1).)+?\1", lambda c: " " * len(c.group(0)), line)))
    return out


def heading_text(raw):
    """A heading's text as GitHub renders it: code spans keep their text,
    links their text, emphasis and HTML tags go."""
    t = re.sub(r"`+([^`]*)`+", r"\1", raw)
    t = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", t)
    t = re.sub(r"<[^>]+>", "", t)
    t = re.sub(r"(\*\*|__|\*)", "", t)
    return t.strip()


def slug(text):
    """github-slugger's slug of a heading's rendered text."""
    keep = []
    for c in text.lower():
        cat = unicodedata.category(c)
        if c in " -" or cat[0] in "LMN" or cat == "Pc":
            keep.append(c)
    return "".join(keep).replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        text = open(path, encoding="utf-8").read()
        seen, out = {}, set()
        for _, line in prose_lines_keep_code(text):
            m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
            if m:
                s = slug(heading_text(m.group(1)))
                n = seen.get(s, 0)
                seen[s] = n + 1
                out.add(s if n == 0 else "%s-%d" % (s, n))
        out.update(re.findall(r"""<[a-zA-Z]+[^>]*\s(?:id|name)=["']([^"']+)["']""", text))
        cache[path] = out
    return cache[path]


def prose_lines_keep_code(text):
    """The lines outside fenced code blocks, code spans kept (headings)."""
    out, fence = [], None
    for i, line in enumerate(text.split("\n"), 1):
        m = re.match(r"\s*(```+|~~~+)", line)
        if m:
            if fence is None:
                fence = m.group(1)[0] * 3
            elif m.group(1).startswith(fence):
                fence = None
            continue
        if fence is None:
            out.append((i, line))
    return out


LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFDEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")


def links(path):
    text = open(path, encoding="utf-8").read()
    out = []
    for i, line in prose_lines(text):
        out += [(i, m.group(1)) for m in LINK.finditer(line)]
        m = REFDEF.match(line)
        if m:
            out.append((i, m.group(1)))
    return out


def main():
    os.chdir(ROOT)
    # The rule against anchors GitHub is known to make for such headings.
    known = [("Precision: fp32, int8 or bf16", "precision-fp32-int8-or-bf16"),
             ("convert_bin.py — pytorch_model.bin to model.safetensors (numpy only)",
              "convert_binpy--pytorch_modelbin-to-modelsafetensors-numpy-only"),
             ("The real model: bert-base-chinese", "the-real-model-bert-base-chinese"),
             ("Building the release files (`make dist`)", "building-the-release-files-make-dist"),
             ("2026-12-02 01:23 UTC, AMD EPYC (Zen 3), full run", "2026-12-02-0123-utc-amd-epyc-zen-3-full-run"),
             ("模型 中文", "模型-中文")]
    bad = [(h, slug(heading_text(h)), want) for h, want in known if slug(heading_text(h)) != want]
    check("links.slug", not bad, "; ".join("%r gives %r, GitHub %r" % b for b in bad))
    files = subprocess.run(["git", "ls-files", "*.md"], stdout=subprocess.PIPE, text=True).stdout.split()
    if not files:  # not a git checkout (a copy): every .md there
        files = sorted(os.path.relpath(os.path.join(d, f), ROOT) for d, _, fs in os.walk(ROOT)
                       for f in fs if f.endswith(".md") and "node_modules" not in d)
    for md in files:
        if not os.path.isfile(md):
            continue
        for line, target in links(md):
            if re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:", target):
                continue  # http:, https:, mailto: ...
            path, _, anchor = target.partition("#")
            anchor = urllib.parse.unquote(anchor)
            dest = os.path.normpath(os.path.join(os.path.dirname(md), path)) if path else md
            name = "links.%s:%d %s" % (md, line, target)
            if not os.path.exists(dest):
                check(name, False, "no such file or folder: %s" % dest)
            elif anchor and dest.endswith(".md"):
                check(name, anchor in anchors(dest), "%s has no heading whose anchor is #%s" % (dest, anchor))
            else:
                check(name, True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
