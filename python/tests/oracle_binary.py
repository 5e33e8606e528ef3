"""The moe-oracle binary for the tests that run a command (`compare` on a captured dump, `config` beside the binding):
$MOE_ORACLE_BIN, else `moe-oracle` on PATH, else this repository's build ($MOE_BUILD_DIR or build/, then
tools/moe-oracle); the test is skipped where there is none."""
import os
import pathlib
import shutil
import subprocess

import pytest


def oracle_or_skip():
    given = os.environ.get("MOE_ORACLE_BIN")
    if given:
        if not (os.path.isfile(given) and os.access(given, os.X_OK)):
            pytest.fail(f"MOE_ORACLE_BIN={given}: not an executable file")  # named, so not a reason to skip
        return given
    on_path = shutil.which("moe-oracle")
    if on_path:
        return on_path
    build = pathlib.Path(os.environ.get("MOE_BUILD_DIR") or pathlib.Path(__file__).resolve().parents[2] / "build")
    built = build / "tools" / "moe-oracle"
    if os.path.isfile(built) and os.access(built, os.X_OK):
        return str(built)
    pytest.skip(f"no moe-oracle binary: MOE_ORACLE_BIN is not set, none is on PATH, and none is at {built}")


def compare(out, *extra):
    """(exit status, stdout + stderr) of `moe-oracle compare OUT --json EXTRA…`."""
    result = subprocess.run([oracle_or_skip(), "compare", str(out), "--json", *extra], capture_output=True, text=True)
    return result.returncode, result.stdout + result.stderr
