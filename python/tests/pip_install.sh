#!/usr/bin/env bash
# ctest python.pip_install: `pip install <repository root>` into a fresh venv, then import the installed module from
# outside the build tree and check that it reports the CMake project version.
# Usage: pip_install.sh PYTHON REPO_ROOT WORK_DIR EXPECTED_VERSION
# The venv sees the system site-packages (Debian's numpy satisfies the runtime dependency without a download);
# pip fetches the build requirements (scikit-build-core, pybind11) from PyPI or its cache.
set -euo pipefail
python="$1" root="$2" work="$3" expected="$4"
rm -rf "$work"
mkdir -p "$work"
"$python" -m venv --system-site-packages "$work/venv"
start=$(date +%s)
CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}" "$work/venv/bin/pip" install --quiet "$root"
echo "pip install took $(( $(date +%s) - start )) s"
cd "$work"  # not the build tree: the installed module must be the one imported
version="$(env -u PYTHONPATH "$work/venv/bin/python" -c "import moe_oracle; print(moe_oracle.__version__)")"
where="$(env -u PYTHONPATH "$work/venv/bin/python" -c "import moe_oracle; print(moe_oracle.__file__)")"
echo "imported moe_oracle $version from $where"
[[ "$where" == "$work/venv/"* ]] || { echo "FAIL: moe_oracle was not imported from the venv" >&2; exit 1; }
[[ "$version" == "$expected" ]] || { echo "FAIL: version $version, expected $expected" >&2; exit 1; }
# the pure-Python captures installed beside it (moe_capture imports the other two)
env -u PYTHONPATH "$work/venv/bin/python" -c "import moe_capture, moe_capture_hf, moe_capture_write" ||
  { echo "FAIL: the capture modules (moe_capture*.py) were not installed beside moe_oracle" >&2; exit 1; }
