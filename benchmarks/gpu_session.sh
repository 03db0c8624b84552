#!/usr/bin/env bash
# One GPU-machine session in one command: Release build (no LLVM), the GPU suite (models and kernels),
# the CUDA tests, gpu_kernels.py and, when PRESET_S is set, `benchmarks.run --preset gpu` with that
# deadline. Run from the repository root; logs and JSON go to $OUT (at most 8 files).
#   OUT=gpu_out bash benchmarks/gpu_session.sh
# Time limits in seconds: SUITE_S (GPU suite, default 240), TESTS_S (CUDA tests, 120), KERNELS_S
# (gpu_kernels.py, 60), PRESET_S (the gpu preset's --deadline; 0 = not run).
set -u
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
t0=$(date +%s)
stamp() { echo "## [$(( $(date +%s) - t0 )) s] $*"; }
stamp build
mkdir -p build
if ! { cmake -S . -B build/gpu -G Ninja -DPython_EXECUTABLE="$(which python3)" -DCMAKE_BUILD_TYPE=Release \
        -DFRAMEFUSE_WITH_LLVM=OFF -DFRAMEFUSE_BUILD_TESTS=OFF -DFRAMEFUSE_MODULE_DIR="$PWD/python/framefuse" &&
      ninja -C build/gpu -j"$(nproc)"; } >build/gpu-build.log 2>&1; then
  cp build/gpu-build.log "$OUT/"
  tail -40 build/gpu-build.log
  exit 1
fi
export PYTHONPATH="$PWD/python"
stamp "gpu suite"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
timeout "${SUITE_S:-240}" python3 -m benchmarks.gpu_suite --json "$OUT/gpu_suite.json" --cap 100 \
  --deadline $(( ${SUITE_S:-240} - 40 )) 2>&1 | tee "$OUT/gpu_suite.txt"
stamp "cuda tests"
for f in test_cuda_codegen.py test_cuda_models.py test_cuda_runtime_stub.py test_cuda_training_graphs.py; do
  echo "### $f"
  timeout "${TESTS_S:-120}" python3 -m pytest -q -p no:cacheprovider -rfE "tests/python/cuda/$f"
  echo "rc=$?"
done >"$OUT/tests.txt" 2>&1
grep -E "^###|passed|failed|^FAILED|^ERROR|Fatal|Segmentation|^rc=" "$OUT/tests.txt" | tail -30
stamp "gpu_kernels.py"
{ echo "### benchmarks/gpu_kernels.py"; timeout "${KERNELS_S:-60}" python3 benchmarks/gpu_kernels.py \
    --modes default,max-autotune --json "$OUT/gpu_kernels.json"; echo "rc=$?"; } >>"$OUT/gpu_suite.txt" 2>&1
tail -6 "$OUT/gpu_suite.txt"
if [ "${PRESET_S:-0}" != 0 ]; then
  stamp "benchmarks.run --preset gpu --deadline $PRESET_S"
  mkdir -p "$OUT/preset"
  timeout $(( PRESET_S + 150 )) python3 -m benchmarks.run --preset gpu --deadline "$PRESET_S" --timeout 90 \
    --no-charts --out "$OUT/preset" >"$OUT/preset/log.txt" 2>&1
  echo "preset rc=$?"; grep -v "^\[" "$OUT/preset/log.txt" | tail -45
fi
stamp "suite table again"
sed -n '/^| workload/,/^note/p' "$OUT/gpu_suite.txt" | head -40
stamp done
