"""The moe-oracle binary for the capture tests: found as moe_capture_hf finds it, the test skipped where there is
none; and `compare --json` run on a dump."""
import subprocess

import pytest

import moe_capture_hf
from moe_capture import CaptureError


def oracle_or_skip():
    try:
        return moe_capture_hf.find_oracle()
    except CaptureError as e:
        pytest.skip(f"no moe-oracle binary: {e}")


def compare(out, *extra):
    """(exit status, stdout + stderr) of `moe-oracle compare OUT --json EXTRA…`."""
    result = subprocess.run([oracle_or_skip(), "compare", str(out), "--json", *extra], capture_output=True, text=True)
    return result.returncode, result.stdout + result.stderr
