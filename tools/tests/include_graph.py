#!/usr/bin/env python3
"""The whiteboard of components in docs/architecture.md is the include graph (ctest repo.include_graph).

Reads the plain-text edge lists of docs/architecture.md (lines "name/ ──► a/, b/ (note), ...") and the #include lines
of every C++/CUDA source outside tests/ folders, then fails, naming each, on an include edge the document does not
declare (a dependency running the wrong way) and on a declared edge no source uses (a stale picture).
Components are the top-level folders, and distributed/'s sub-folders (comm/, kernels/, dispatch/, train/, check/);
a sub-folder's edges out of distributed/ are also the folder's as a whole (the top-level picture draws distributed/
as one box).
Usage: include_graph.py [SOURCE_DIR]        include_graph.py --self-test
"""
import os
import re
import subprocess
import sys
import tempfile

ARROW = "──►"
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/(?:([a-z_]+)/)?')


def declared_edges(doc_text):
    edges = {}
    for line in doc_text.splitlines():
        if ARROW not in line:
            continue
        left, right = line.split(ARROW, 1)
        name = left.strip()
        if not re.fullmatch(r"[a-z_]+/([a-z_]+/)?", name):
            continue
        right = re.sub(r"\([^)]*\)", "", right)
        edges[name] = {t.strip() for t in right.split(",") if t.strip()}
    return edges


def component(path):
    parts = path.split("/")
    if len(parts) >= 3 and parts[0] == "distributed" and parts[1] != "tests":
        return "distributed/%s/" % parts[1]
    return parts[0] + "/"


def actual_edges(root, files):
    edges = {}
    for path in files:
        if "/tests/" in "/" + path or not path.endswith((".cpp", ".hpp", ".cu", ".cuh", ".h")):
            continue
        src = component(path)
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            for line in f:
                m = INCLUDE.match(line)
                if not m:
                    continue
                top, sub = m.group(1), m.group(2)
                if not os.path.isdir(os.path.join(root, top)):
                    continue  # a system or third-party header
                if top == "distributed" and src.startswith("distributed/"):
                    dst = "distributed/%s/" % sub if sub and sub != "tests" else "distributed/"
                else:
                    dst = top + "/"
                if dst != src:
                    edges.setdefault(src, {}).setdefault(dst, path)
                    if src.startswith("distributed/") and not dst.startswith("distributed/"):
                        edges.setdefault("distributed/", {}).setdefault(dst, path)  # the folder as a whole
    return edges


def check(root):
    with open(os.path.join(root, "docs/architecture.md"), encoding="utf-8") as f:
        declared = declared_edges(f.read())
    try:
        files = subprocess.check_output(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=root,
                                        stderr=subprocess.DEVNULL).decode().split("\n")
    except (subprocess.CalledProcessError, FileNotFoundError):
        files = [os.path.relpath(os.path.join(d, n), root) for d, _, ns in os.walk(root) for n in ns]
    actual = actual_edges(root, [f for f in files if f])
    problems = []
    for src, dsts in sorted(actual.items()):
        for dst, where in sorted(dsts.items()):
            if dst not in declared.get(src, set()):
                problems.append("undeclared: %s ──► %s (%s); docs/architecture.md does not allow it" % (src, dst, where))
    for src, dsts in sorted(declared.items()):
        for dst in sorted(dsts):
            if dst not in actual.get(src, {}):
                problems.append("stale: docs/architecture.md declares %s ──► %s, but no source includes it" % (src, dst))
    for p in problems:
        print(p)
    if problems:
        print("FAIL: %d difference(s) between the include graph and docs/architecture.md" % len(problems))
        return 1
    print("the include graph is the one docs/architecture.md draws (%d components)" % len(declared))
    return 0


def self_test():
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "docs"))
        for d in ("reference", "golden"):
            os.makedirs(os.path.join(root, d))
        with open(os.path.join(root, "docs/architecture.md"), "w") as f:
            f.write("golden/ ──► reference/\nreference/ ──► (nothing)\n")
        with open(os.path.join(root, "golden/a.cpp"), "w") as f:
            f.write('#include "reference/x.hpp"\n')
        with open(os.path.join(root, "reference/x.hpp"), "w") as f:
            f.write("#pragma once\n")
        if check(root) != 0:
            print("FAIL: self-test: a matching graph was refused")
            return 1
        with open(os.path.join(root, "reference/x.hpp"), "w") as f:
            f.write('#include "golden/a.hpp"\n')  # the wrong way
        if check(root) == 0:
            print("FAIL: self-test: reference/ ──► golden/ was not found")
            return 1
        with open(os.path.join(root, "reference/x.hpp"), "w") as f:
            f.write("#pragma once\n")
        os.remove(os.path.join(root, "golden/a.cpp"))
        if check(root) == 0:
            print("FAIL: self-test: a stale declared edge was not found")
            return 1
    print("self-test: a wrong-way include and a stale edge are both found")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--self-test":
        sys.exit(self_test())
    here = os.path.dirname(os.path.abspath(__file__))
    sys.exit(check(os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", ".."))))
