#!/usr/bin/python3
"""t_structure.py — the shape of ext/, checked on the compiled objects.

The graph: one node per source file of ext/engine/**/*.c and ext/sqlite/**/*.c
(a file in a folder of a layer, ext/engine/kernels/avx2.c, is named by its
path in the layer: kernels/avx2); an
edge A -> B when A's object ($BUILD/obj/LAYER/A.o, made by `make all`) uses
a global symbol (nm type U) that B's object defines (T, D, B, R, ...).  Calls,
and uses of global data, are what the edges count; headers do not matter.

Checks (lines for tests/run.sh: "ok NAME" / "FAIL NAME: why"):
  objects      every source file has an object that is not older than it
  cycles       no cycle between files: a FAIL line for each group of files
               that reach each other (a strongly connected component of more
               than one file), naming every edge inside it and its symbols
  layers       no engine file uses a symbol that an ext/sqlite file defines
  engine-sqlite  no engine object names a sqlite3_* symbol (the engine also
               cannot include sqlite3.h: ext/engine/no_sqlite)
  map          ext/README.md is the map of ext/: its tables (sections
               "## ext/engine", "## ext/sqlite"; the names in backquotes of a
               row's first cell, relative to the layer's folder; a row's X.c
               stands for X.h too) name every ext/**/*.c and *.h, and every
               file they name exists
  order        the order ext/README.md states (a fenced block of lines
               "sqlite: a > b c > ..." and "engine: ...", continued on
               indented lines) names each .c file of a layer once, and every
               call inside a layer goes from a step to a later one
It then prints the call direction on one line: the layers, callers first,
and the files of each layer in steps, callers first; a file calls only files
to its right (the files of a cycle are one step, in braces).

Symbols named sqlite3_* belong to SQLite, not to the file that defines them:
sqlite3_api (the API routine table, defined by SQLITE_EXTENSION_INIT1 in the
entry file and declared by SQLITE_EXTENSION_INIT3 in the others) is how every
file of the layer calls SQLite, so it makes no edge.

  python3 tests/project/t_structure.py            the checks (BUILD=build by default)
  python3 tests/project/t_structure.py --edges    also every edge and its symbols
"""
import glob
import os
import re
import subprocess
import sys

# bftest (the check lines, where the build is) is in tests/python
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from bftest import BUILD, exit_code, fail, ok  # noqa: E402

LAYERS = ("engine", "sqlite")        # the engine is the lower layer
DEFINED = set("ABCDGRSTVWiu")        # nm types of a symbol an object defines
UNDEFINED = set("Uvw")               # ... and of one it uses from elsewhere


def sqlite_owned(sym):
    return sym.startswith("sqlite3_")


def load(build):
    """Source files, and for each one (defined symbols, used symbols)."""
    srcs, objs = [], []
    for layer in LAYERS:
        base = "ext/%s/" % layer
        for src in sorted(glob.glob(base + "**/*.c", recursive=True)):
            name = os.path.splitext(src[len(base):])[0]
            srcs.append("%s/%s.c" % (layer, name))
            objs.append(os.path.join(build, "obj", layer, name + ".o"))
    stale = []
    for src, obj in zip(srcs, objs):
        if not os.path.exists(obj):
            stale.append("%s (no %s)" % (src, obj))
        elif os.path.getmtime(obj) < os.path.getmtime("ext/" + src):
            stale.append("%s (older %s)" % (src, obj))
    if stale:
        return srcs, None, "run `make all`: " + ", ".join(stale)
    out = subprocess.run(["nm", "-P", "-A"] + objs, check=True,
                         capture_output=True, text=True).stdout
    of = dict(zip(objs, srcs))
    syms = {s: (set(), set()) for s in srcs}
    for line in out.splitlines():
        obj, _, rest = line.partition(": ")
        f = rest.split()
        if len(f) < 2 or obj not in of:
            continue
        sym, kind = f[0], f[1]
        if kind in DEFINED:
            syms[of[obj]][0].add(sym)
        elif kind in UNDEFINED:
            syms[of[obj]][1].add(sym)
    return srcs, syms, None


def edges_of(srcs, syms):
    """{(A, B): sorted symbols A uses that B defines}, A != B."""
    definer = {}
    for s in srcs:
        for sym in syms[s][0]:
            if not sqlite_owned(sym):
                definer.setdefault(sym, []).append(s)
    edges = {}
    for a in srcs:
        for sym in syms[a][1]:
            for b in definer.get(sym, ()):
                if b != a:
                    edges.setdefault((a, b), []).append(sym)
    return {e: sorted(v) for e, v in edges.items()}


def components(srcs, edges):
    """Strongly connected components (Tarjan), callees before callers."""
    succ = {s: sorted(b for (a, b) in edges if a == s) for s in srcs}
    index, low, stack, on, comps = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in succ[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            comps.append(sorted(comp, key=srcs.index))

    for s in srcs:
        if s not in index:
            visit(s)
    return comps


def call_direction(srcs, edges, comps):
    """One line: the layers, the SQLite layer first, and in each layer its
    files by height, callers first: a file's height is one more than the
    highest file of its own layer it calls (0 when it calls none)."""
    comp_of = {s: i for i, c in enumerate(comps) for s in c}
    height = [0] * len(comps)
    for i, c in enumerate(comps):     # callees come first in comps
        for (a, b) in edges:
            if comp_of[a] == i and comp_of[b] != i and a.split("/")[0] == b.split("/")[0]:
                height[i] = max(height[i], height[comp_of[b]] + 1)
    out = []
    for layer in reversed(LAYERS):
        mine = [i for i, c in enumerate(comps) if c[0].startswith(layer + "/")]
        steps = []
        for h in range(max((height[i] for i in mine), default=0), -1, -1):
            names = []
            for i in mine:
                if height[i] == h:
                    c = sorted(os.path.splitext(s.split("/", 1)[1])[0] for s in comps[i])
                    names.append("{%s}" % " ".join(c) if len(c) > 1 else c[0])
            if names:
                steps.append(" ".join(sorted(names, key=lambda n: n.strip("{"))))
        out.append("%s: %s" % (layer, " > ".join(steps)))
    return " > ".join(out)


MAP = "ext/README.md"


def map_files(text):
    """The files the tables of the map name, as ext/LAYER/NAME."""
    named, layer = set(), None
    for line in text.splitlines():
        m = re.match(r"## ext/(\w+)", line)
        if line.startswith("## "):
            layer = m.group(1) if m and m.group(1) in LAYERS else None
        elif layer and line.startswith("| `"):
            for name in re.findall(r"`([^`]+)`", line.split("|")[1]):
                named.add("ext/%s/%s" % (layer, name))
    return named


def check_map(text):
    named = map_files(text)
    have = set(glob.glob("ext/**/*.[ch]", recursive=True))
    covered = named | {n[:-2] + ".h" for n in named if n.endswith(".c")}
    missing = sorted(have - covered)
    absent = sorted(n for n in named if n not in have)
    if missing:
        fail("map", "%s does not list %s" % (MAP, ", ".join(missing)))
    if absent:
        fail("map", "%s lists files that do not exist: %s" % (MAP, ", ".join(absent)))
    if not missing and not absent:
        ok("map (%d files)" % len(have))


def stated_order(text):
    """{layer: [[stem, ...] step by step]} from the map's fenced order block."""
    block = re.search(r"^```\n((?:sqlite|engine):.*?)^```", text, re.S | re.M)
    if not block:
        return None
    order = {}
    for layer, steps in re.findall(r"(\w+):((?:[^:])*?)(?=\n\w+:|\Z)", block.group(1), re.S):
        order[layer] = [step.split() for step in steps.split(">")]
    return order


def check_order(text, srcs, edges):
    order = stated_order(text)
    if not order or set(order) != set(LAYERS):
        fail("order", "%s has no block of the order (lines \"sqlite: ...\", \"engine: ...\")" % MAP)
        return
    step, bad = {}, []
    for layer in LAYERS:
        for i, names in enumerate(order[layer]):
            for n in names:
                f = "%s/%s.c" % (layer, n)
                if f in step:
                    bad.append("%s is named twice" % f)
                step[f] = i
    for s in srcs:
        if s not in step:
            bad.append("%s is not in it" % s)
    for f in sorted(step):
        if f not in srcs:
            bad.append("%s does not exist" % f)
    for (a, b), syms in sorted(edges.items()):
        if a.split("/")[0] == b.split("/")[0] and a in step and b in step and step[a] >= step[b]:
            bad.append("%s calls %s (%s), which the order puts %s" %
                       (a, b, ", ".join(syms), "in the same step" if step[a] == step[b]
                        else "before it"))
    if bad:
        fail("order", "the order in %s: " % MAP + "; ".join(bad))
    else:
        ok("order (%d steps)" % sum(len(order[layer]) for layer in LAYERS))


def main():
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    srcs, syms, why = load(BUILD)
    if why:
        fail("objects", why)
        return exit_code()
    ok("objects (%d files)" % len(srcs))
    edges = edges_of(srcs, syms)
    comps = components(srcs, edges)

    cycles = [c for c in comps if len(c) > 1]
    for c in cycles:
        inside = ["%s -> %s (%s)" % (a, b, ", ".join(edges[(a, b)]))
                  for a in c for b in c if (a, b) in edges]
        fail("cycles", "%s call each other: %s" % (" ".join(c), "; ".join(inside)))
    if not cycles:
        ok("cycles (%d files, %d edges)" % (len(srcs), len(edges)))

    up = ["%s -> %s (%s)" % (a, b, ", ".join(v)) for (a, b), v in sorted(edges.items())
          if a.startswith("engine/") and b.startswith("sqlite/")]
    if up:
        fail("layers", "the engine uses the SQLite layer: " + "; ".join(up))
    else:
        ok("layers")

    named = ["%s (%s)" % (s, ", ".join(sorted(x for x in syms[s][0] | syms[s][1]
                                             if sqlite_owned(x))))
             for s in srcs if s.startswith("engine/")
             and any(sqlite_owned(x) for x in syms[s][0] | syms[s][1])]
    if named:
        fail("engine-sqlite", "engine objects name SQLite symbols: " + "; ".join(named))
    else:
        ok("engine-sqlite")

    with open(MAP, encoding="utf-8") as f:
        text = f.read()
    check_map(text)
    check_order(text, srcs, edges)

    print("call direction (a file calls only files to its right; {...} is a cycle): "
          + call_direction(srcs, edges, comps))
    if "--edges" in sys.argv[1:]:
        print("edges:")
        for (a, b), v in sorted(edges.items()):
            print("  %s -> %s: %s" % (a, b, ", ".join(v)))
    return exit_code()


if __name__ == "__main__":
    sys.exit(main())
