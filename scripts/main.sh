#!/usr/bin/env bash
# The main job: sets up what is missing (apt packages, the venv with torch 2.13),
# builds framefuse's modules incrementally in build/main, and runs the quick benchmark
# from the repository root with the main lane's interpreter.
# Extra arguments go to the benchmark; `--preset quick` is added unless they
# name a preset themselves.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$FF_ROOT"
START=$(date +%s)

ff_apt_ensure "${FF_APT_BUILD[@]}"
ff_main_venv
# Every module (_C, and _torch_native / _torch_replay where torch's headers are there: the cached
# calls' fast guards); the GoogleTest binaries are scripts/test.sh's business.
FF_BUILD_TARGETS=(framefuse_modules)
ff_build_lane main "$FF_VENV/bin/python" -DFRAMEFUSE_BUILD_TESTS=ON || ff_die "build failed"
ff_log "set-up and build done after $(( $(date +%s) - START ))s"

[ -f benchmarks/run.py ] || ff_die \
  "benchmarks/run.py is missing: the benchmark suite is not in this tree yet"

args=("$@")
[[ " ${args[*]-} " == *" --preset"* ]] || args=(--preset quick "${args[@]}")
ff_log "running: python -m benchmarks.run ${args[*]}"
export PYTHONPATH="$(ff_lane_pythonpath main)" PYTHONNOUSERSITE=1
exec "$FF_VENV/bin/python" -m benchmarks.run "${args[@]}"
