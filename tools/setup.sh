#!/usr/bin/env bash
# Installs what MoE Oracle needs from Debian (only what is missing), then configures and builds it in build/.
# Idempotent: a second run installs nothing and rebuilds only what changed.
#   bash tools/setup.sh               everything (the tests, the property suite's seeded-bug variants, the fuzz
#                                     replays, the Python module)
#   bash tools/setup.sh moe-oracle    only these targets (tools/moe-oracle builds just the command line)
#   MOE_BUILD_DIR   build folder (default: build/ at the repository root)
#   MOE_BUILD_JOBS  parallel compile jobs (default: nproc)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${MOE_BUILD_DIR:-$root/build}"
jobs="${MOE_BUILD_JOBS:-$(nproc)}"

# pybind11-dev, python3-dev: the moe_oracle extension (python/); python3-pytest, python3-venv: its ctests.
# ccache: a compiler cache outside the clone (~/.cache/ccache), so that a fresh clone on a machine that built the
# project before compiles only what changed. patch: the build applies the property suite's seeded bugs with it
# (proptests/seeded_bugs/).
packages=(build-essential ccache cmake patch libeigen3-dev libgtest-dev librapidcheck-dev libopenmpi-dev openmpi-bin
          nlohmann-json3-dev libcli11-dev python3-numpy chromium pybind11-dev python3-dev python3-pytest python3-venv)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  if [[ $(id -u) -eq 0 ]]; then sudo=(); elif command -v sudo >/dev/null; then sudo=(sudo); else
    echo "setup: need root (or sudo) to install: ${missing[*]}" >&2; exit 1
  fi
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# With nvcc: CUTLASS's headers for the CUDA backend's one-launch grouped GEMM, cached outside the clone (optional:
# without them that GEMM runs on lanes, so a failed download only says so). Fetched for a full build (the tests
# compile its kernels, so they keep compiling) and wherever a GPU is visible; the quick start on a machine without a
# GPU leaves them out, as their one translation unit (~80 s of compiler time) buys nothing there.
cutlass=""
if { command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]]; } &&
   { (($# == 0)) || nvidia-smi -L >/dev/null 2>&1; }; then
  cutlass=$(bash "$root/tools/fetch-cutlass") || {
    cutlass=""
    echo "setup: no CUTLASS (tools/fetch-cutlass failed); building without it" >&2
  }
fi

# Paths under the clone are hashed relative to it, so two clones share the cache.
export CCACHE_BASEDIR="$root"
if [[ ! -f "$build/CMakeCache.txt" ]]; then
  echo "setup: configuring $build"
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release ${cutlass:+-DMOE_CUTLASS_DIR="$cutlass"} \
        $(bash "$root/tools/compiler-cache") >/dev/null
elif [[ -n "$cutlass" ]] && grep -q "^MOE_CUTLASS_INCLUDE_DIR:PATH=.*NOTFOUND" "$build/CMakeCache.txt"; then
  echo "setup: configuring $build again (CUTLASS is here now)"
  cmake -S "$root" -B "$build" -DMOE_CUTLASS_DIR="$cutlass" >/dev/null
fi
targets=()
(($#)) && targets=(--target "$@")
echo "setup: building ${*:-everything} with $jobs jobs"
cmake --build "$build" -j "$jobs" "${targets[@]}" 2>&1 | grep -v -E '^\[ *[0-9]+%\] (Built|Linking)|Consolidate compiler' || true
cmake --build "$build" -j "$jobs" "${targets[@]}" >/dev/null   # the real exit status (the filtered pass may have failed)
