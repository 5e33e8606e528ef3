#!/usr/bin/env python3
"""The counts the docs quote, held to what they count (ctest repo.doc_figures).

Each claim is a doc, a pattern whose groups are the figures it quotes, and what those figures are: read off the
repository (the committed golden cases) or off the program (`moe-oracle check --dtype bf16`'s run count and
coverage line). A figure that drifted fails, naming the doc, the sentence and both numbers; a pattern that no
longer matches fails too (the sentence was rewritten: update the claim). Dated history (docs/performance-log.md)
is not held: it says what was.
Usage: doc_figures.py SOURCE_DIR MOE_ORACLE        doc_figures.py --self-test MOE_ORACLE
"""
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile


def golden_counts(root):
    layer = layer_v2 = model = 0
    cases = os.path.join(root, "golden", "cases")
    for name in sorted(os.listdir(cases)):
        with open(os.path.join(cases, name, "case.json"), encoding="utf-8") as f:
            fmt = json.load(f)["format"]
        if fmt.startswith("moe-golden-model/"):
            model += 1
        else:
            layer += 1
            layer_v2 += fmt == "moe-golden/2"
    return layer, layer_v2, model


@functools.lru_cache(maxsize=None)  # run once, however many times the self-test checks
def bf16_check(oracle):
    out = subprocess.run([oracle, "check", "--dtype", "bf16"], capture_output=True, text=True)
    runs = re.search(r"^(\d+) passed, (\d+) failed$", out.stdout, re.M)
    coverage = re.search(r"^coverage: (\d+) of (\d+) features", out.stdout, re.M)
    if out.returncode != 0 or not runs or not coverage:
        raise RuntimeError("moe-oracle check --dtype bf16 did not pass (exit %d)" % out.returncode)
    return int(runs.group(1)), int(coverage.group(2))


# (doc, pattern, the figures its groups must be)
CLAIMS = [
    ("docs/testing.md",
     r"golden regression over (\d+) committed numpy layer cases \((\d+) of them format 2",
     lambda root, oracle: golden_counts(root)[:2]),
    ("docs/testing.md", r"and (\d+) model cases \(one global step", lambda root, oracle: golden_counts(root)[2:]),
    ("docs/model.md", r"turns every row of the default set into bf16 \((\d+) runs, all (\d+) features\)",
     lambda root, oracle: bf16_check(oracle)),
]


def check(root, oracle):
    problems = []
    for doc, pattern, actual in CLAIMS:
        with open(os.path.join(root, doc), encoding="utf-8") as f:
            text = re.sub(r"\s+", " ", f.read())  # a sentence may wrap anywhere
        m = re.search(pattern, text)
        if not m:
            problems.append("%s: no sentence matches %r (rewritten? update tools/tests/doc_figures.py)"
                            % (doc, pattern))
            continue
        said = tuple(int(g) for g in m.groups())
        true = tuple(actual(root, oracle))
        if said != true:
            problems.append("%s: \"%s\" says %s, the repository has %s" % (doc, m.group(0), said, true))
    for p in problems:
        print(p)
    if problems:
        print("FAIL: %d figure(s) in the docs differ from what they count" % len(problems))
        return 1
    print("the docs' %d quoted figures are what they count" % len(CLAIMS))
    return 0


def self_test(oracle):
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.abspath(os.path.join(here, "..", ".."))
    with tempfile.TemporaryDirectory() as tmp:
        for doc in {c[0] for c in CLAIMS}:
            os.makedirs(os.path.join(tmp, os.path.dirname(doc)), exist_ok=True)
            shutil.copy(os.path.join(root, doc), os.path.join(tmp, doc))
        shutil.copytree(os.path.join(root, "golden", "cases"), os.path.join(tmp, "golden", "cases"))
        if check(tmp, oracle) != 0:
            print("FAIL: self-test: the copied docs were refused")
            return 1
        for doc, pattern, _ in CLAIMS:  # each claim in turn one off
            path = os.path.join(tmp, doc)
            with open(path, encoding="utf-8") as f:
                original = f.read()
            # the claim's first figure one higher (in the text with its wraps undone, which the check reads alike)
            flat = re.sub(r"\s+", " ", original)
            m = re.search(pattern, flat)
            number = m.group(1)
            planted = flat[:m.start(1)] + str(int(number) + 1) + flat[m.end(1):]
            with open(path, "w", encoding="utf-8") as f:
                f.write(planted)
            if check(tmp, oracle) == 0:
                print("FAIL: self-test: %s with %s made %d was not found" % (doc, number, int(number) + 1))
                return 1
            with open(path, "w", encoding="utf-8") as f:
                f.write(original)
    print("self-test: each quoted figure, one off, is found")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--self-test":
        sys.exit(self_test(sys.argv[2]))
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[-1])
        sys.exit(2)
    sys.exit(check(os.path.abspath(sys.argv[1]), sys.argv[2]))
