#!/usr/bin/env bash
# One GPU-machine session in one command: Release build (no LLVM), the GPU suite (models and kernels),
# the CUDA tests, and gpu_kernels.py. Run from the repository root; logs and JSON go to $OUT.
#   OUT=gpu_out bash benchmarks/gpu_session.sh
# Time limits (seconds) keep the whole session inside one machine lease: SUITE_S (GPU suite, default 240),
# TESTS_S (CUDA tests, 120), KERNELS_S (gpu_kernels.py, 60).
set -u
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
t0=$(date +%s)
stamp() { echo "## [$(( $(date +%s) - t0 )) s] $*"; }
stamp build
if ! { cmake -S . -B build/gpu -G Ninja -DPython_EXECUTABLE="$(which python3)" -DCMAKE_BUILD_TYPE=Release \
        -DFRAMEFUSE_WITH_LLVM=OFF -DFRAMEFUSE_BUILD_TESTS=OFF -DFRAMEFUSE_MODULE_DIR="$PWD/python/framefuse" &&
      ninja -C build/gpu -j"$(nproc)"; } >"$OUT/build.log" 2>&1; then
  tail -40 "$OUT/build.log"
  exit 1
fi
export PYTHONPATH="$PWD/python"
stamp "gpu suite"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
timeout "${SUITE_S:-240}" python3 -m benchmarks.gpu_suite --json "$OUT/gpu_suite.json" --cap 100 \
  --deadline $(( ${SUITE_S:-240} - 40 )) 2>&1 | tee "$OUT/gpu_suite.txt"
stamp "cuda tests"
timeout "${TESTS_S:-120}" python3 -m pytest -q -p no:cacheprovider -rfE tests/python/test_cuda_models.py \
  tests/python/test_cuda_codegen.py >"$OUT/tests.txt" 2>&1
echo "tests rc=$?"; grep -E "passed|failed|^FAILED|^ERROR|Fatal|Segmentation" "$OUT/tests.txt" | tail -25
stamp "gpu_kernels.py"
timeout "${KERNELS_S:-60}" python3 benchmarks/gpu_kernels.py --modes default,max-autotune \
  --json "$OUT/gpu_kernels.json" >"$OUT/gpu_kernels.txt" 2>&1
echo "gpu_kernels rc=$?"; tail -5 "$OUT/gpu_kernels.txt"
stamp "suite table again"
sed -n '/^| workload/,$p' "$OUT/gpu_suite.txt"
stamp done
