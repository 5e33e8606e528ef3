#!/usr/bin/env python3
"""Every MOE_* environment variable the project reads is in docs/cli.md's table (ctest repo.env_table).

Reads are found in the tracked sources: getenv("MOE_…") in C++/CUDA, os.environ / os.getenv in Python, ${MOE_…} and
$MOE_… in shell scripts, $ENV{MOE_…} in CMake (whose ${MOE_…} are -D cache options, not the environment). A name
the table's first column does not hold fails, with the files that read it; so does a table row no source reads (a
stale row). --self-test plants an undocumented read and a stale row in a copy
and expects both to be named.
Usage: env_table.py [SOURCE_DIR]        env_table.py --self-test
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

TABLE = os.path.join("docs", "cli.md")
CXX = re.compile(r'getenv\(\s*"(MOE_[A-Z0-9_]+)"')
PYTHON = re.compile(r'os\.(?:environ(?:\.get\(|\[)|getenv\()\s*["\'](MOE_[A-Z0-9_]+)')
SHELL = re.compile(r'\$\{?(MOE_[A-Z0-9_]+)')
CMAKE = re.compile(r'\$ENV\{(MOE_[A-Z0-9_]+)\}')  # ${MOE_…} there is a cache option (-D), not the environment


def patterns(path):
    if path.endswith((".cpp", ".hpp", ".cu", ".cuh")):
        return [CXX]
    if path.endswith(".py"):
        return [PYTHON]
    if path.endswith((".cmake", "CMakeLists.txt")):
        return [CMAKE]
    return [SHELL]
SUFFIXES = (".cpp", ".hpp", ".cu", ".cuh", ".py", ".sh", ".cmake", "CMakeLists.txt")
SHELL_SCRIPTS = ("tools/test", "tools/sanitize", "tools/setup.sh", "tools/megatron-check", "tools/hf-check",
                 "tools/gpu-check", "tools/moe-oracle", ".ci/run")


def sources(root):
    listed = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True, text=True, check=True).stdout
    for path in listed.split():
        if path.endswith(SUFFIXES) or path in SHELL_SCRIPTS:
            yield path


def reads(root):
    found = {}
    for path in sources(root):
        try:
            text = open(os.path.join(root, path), encoding="utf-8").read()
        except (OSError, UnicodeDecodeError):
            continue
        for pattern in patterns(path):
            for name in pattern.findall(text):
                found.setdefault(name, set()).add(path)
    return found


def documented(root):
    names = set()
    for line in open(os.path.join(root, TABLE), encoding="utf-8"):
        if line.startswith("| `MOE_"):
            names.update(re.findall(r"`(MOE_[A-Z0-9_]+)`", line.split("|")[1]))
    return names


def check(root):
    found, table = reads(root), documented(root)
    problems = [f"{name} is read by {', '.join(sorted(found[name]))} but not in {TABLE}'s table"
                for name in sorted(set(found) - table)]
    problems += [f"{TABLE}'s table documents {name}, which no source reads" for name in sorted(table - set(found))]
    for p in problems:
        print("env_table: " + p, file=sys.stderr)
    if not problems:
        print(f"env_table: {len(found)} MOE_* variables read, each in {TABLE}")
    return 1 if problems else 0


def self_test(root):
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "repo")
        subprocess.run(["git", "clone", "-q", "--no-hardlinks", root, copy], check=True)
        with open(os.path.join(copy, "tools", "planted.py"), "w") as f:
            f.write('import os\nos.environ.get("MOE_' + 'PLANTED_UNDOCUMENTED")\n')  # split: not a read of this file
        with open(os.path.join(copy, TABLE), "a") as f:
            f.write("\n| `MOE_PLANTED_STALE` | nothing | a row no source reads |\n")
        subprocess.run(["git", "-C", copy, "add", "-A"], check=True)
        out = subprocess.run([sys.executable, __file__, copy], capture_output=True, text=True)
        ok = out.returncode == 1 and "MOE_PLANTED_UNDOCUMENTED" in out.stderr and "MOE_PLANTED_STALE" in out.stderr
        print("env_table self-test: " + ("both planted names found" if ok else "FAILED\n" + out.stderr))
        return 0 if ok else 1


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
    sys.exit(check(sys.argv[1] if len(sys.argv) > 1 else "."))
