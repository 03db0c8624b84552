#!/usr/bin/env bash
# temporary device script (not committed)
set -u
mkdir -p "$OUT"
t0=$(date +%s); stamp() { echo "## [$(( $(date +%s) - t0 )) s] $*"; }
stamp build
cmake -S . -B build/gpu -G Ninja -DPython_EXECUTABLE="$(which python3)" -DCMAKE_BUILD_TYPE=Release \
  -DFRAMEFUSE_WITH_LLVM=OFF -DFRAMEFUSE_BUILD_TESTS=OFF -DFRAMEFUSE_MODULE_DIR="$PWD/python/framefuse" >build-gpu.log 2>&1 \
  && ninja -C build/gpu -j16 >>build-gpu.log 2>&1 || { tail -40 build-gpu.log; exit 1; }
export PYTHONPATH="$PWD/python"
nvidia-smi --query-gpu=name --format=csv,noheader
stamp "codegen fuzz cuda"
N=${N:-10000}; P=${P:-14}; per=$(( (N + P - 1) / P ))
for i in $(seq 0 $((P-1))); do
  timeout ${FUZZ_S:-300} python3 tests/fuzz/codegen_fuzz.py --count $per --start $((i*per)) --device cuda --out "$OUT/fuzz" >"$OUT/fuzz_$i.txt" 2>&1 &
done
wait
grep -h "summary\|FAIL\|mismatch" "$OUT"/fuzz_*.txt | sort | uniq -c | head -40
stamp "cuda tests"
for f in ${TESTS:-test_cuda_codegen.py test_cuda_models.py test_cuda_runtime_stub.py test_cuda_training_graphs.py test_cuda_attention.py test_fuse_attention.py test_codegen_fuzz.py test_inductor_exact.py test_compile_api.py}; do
  echo "### $f"; timeout ${TESTS_S:-200} python3 -m pytest -q -p no:cacheprovider -rfE -x "tests/python/$f" 2>&1 | tail -8
done
stamp done
