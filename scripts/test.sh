#!/usr/bin/env bash
# Sets up everything that is missing, builds incrementally and runs every test:
#   cpp     ctest over the GoogleTest binaries (tests/cpp), built in the main lane
#   main    pytest tests/python with the venv's Python and torch 2.13 (build/main)
#   debian  pytest tests/python with /usr/bin/python3 and Debian's torch 1.13 (build/debian)
#   pure    tests marked pure_python on pyenv's 3.12 / 3.13 where installed (no _C, no torch)
#   ruff    ruff check on python/, tests/, benchmarks/ and scripts/ (rules in pyproject.toml)
#   asan    a Debug build with AddressSanitizer and UBSan (build/asan; the debug-only verifiers run):
#           ctest, then the pytest subset in scripts/asan_tests.txt; FRAMEFUSE_ASAN_SCOPE=cpp stops
#           after ctest (and builds only its binaries), =full runs all of tests/python
#   format  scripts/check_format.sh (clang-format, pinned in scripts/requirements-main.txt) over the
#           C++ sources; FRAMEFUSE_FORMAT_GATE=0 leaves it out
#   py313full  (local only, not a default lane) all of tests/python on pyenv's 3.13 with torch from
#           PyPI: the first run downloads the CUDA build of torch and its NVIDIA packages (about 5 GB
#           in build/venv-py313-torch); run it as FRAMEFUSE_LANES=py313full bash scripts/test.sh
# Extra arguments go to every pytest run (e.g. `bash scripts/test.sh -k printer`).
# FRAMEFUSE_LANES="cpp main" picks lanes; FRAMEFUSE_JOBS sets build parallelism.
# Exit status: 0 only when every lane that ran passed.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$FF_ROOT"

DEFAULT_LANES="ruff cpp main debian pure asan"
[ "${FRAMEFUSE_FORMAT_GATE:-1}" = 1 ] && DEFAULT_LANES="format $DEFAULT_LANES"
LANES=" ${FRAMEFUSE_LANES:-$DEFAULT_LANES} "
LANE_TIMEOUT="${FRAMEFUSE_TEST_TIMEOUT:-900}"
RESULTS="${FRAMEFUSE_TEST_RESULTS:-$FF_ROOT/build/test-results}"
rm -rf "$RESULTS"
mkdir -p "$RESULTS"
START=$(date +%s)
FAILED=0
# One line per lane for the summary: "status|lane|description|junit xml|log".
SUMMARY=()

lane_on() { [[ "$LANES" == *" $1 "* ]]; }
record() { SUMMARY+=("$1|$2|$3|${4:-}|${5:-}"); [ "$1" = ok ] || [ "$1" = none ] || FAILED=1; }
has_pytests() { compgen -G "tests/python/test_*.py" >/dev/null || compgen -G "tests/python/**/test_*.py" >/dev/null; }

# ---- set-up ------------------------------------------------------------------
apt_specs=("${FF_APT_BUILD[@]}")
lane_on debian && apt_specs+=("${FF_APT_DEBIAN_LANE[@]}")
ff_apt_ensure "${apt_specs[@]}"
ff_main_venv
ff_log "set-up done after $(( $(date +%s) - START ))s"
"$FF_VENV/bin/python" scripts/size_report.py || true

# ---- ruff and format: checks that need no build ---------------------------------
if lane_on ruff; then
  ff_log "ruff: ruff check python tests benchmarks scripts"
  "$FF_VENV/bin/ruff" check --no-cache python tests benchmarks scripts 2>&1 | tee "$RESULTS/ruff.log"
  rc=${PIPESTATUS[0]}
  [ $rc = 0 ] && record ok ruff "ruff check (pyproject.toml's rules): clean" "" "$RESULTS/ruff.log" \
              || record fail ruff "ruff check exited $rc (see above or build/test-results/ruff.log)" "" "$RESULTS/ruff.log"
fi
if lane_on format; then
  ff_log "format: scripts/check_format.sh"
  FRAMEFUSE_FORMAT_DIFF=0 bash scripts/check_format.sh 2>&1 | tee "$RESULTS/format.log"
  rc=${PIPESTATUS[0]}
  [ $rc = 0 ] && record ok format "clang-format: every C++ file as .clang-format says" "" "$RESULTS/format.log" \
              || record fail format "clang-format would change files (bash scripts/check_format.sh shows how)" "" "$RESULTS/format.log"
fi

# ---- builds ------------------------------------------------------------------
MAIN_BUILT=0 DEBIAN_BUILT=0
if lane_on main || lane_on cpp; then
  if ff_build_lane main "$FF_VENV/bin/python" -DFRAMEFUSE_BUILD_TESTS=ON; then MAIN_BUILT=1
  else record fail main "build of build/main failed"; lane_on cpp && record fail cpp "not run: build/main failed"; fi
fi
if lane_on debian; then
  # NB: the GoogleTest binaries do not depend on the interpreter; ctest runs
  # them once, from the main lane's build.
  if ff_build_lane debian "$FF_DEBIAN_PYTHON" -DFRAMEFUSE_BUILD_TESTS=OFF; then DEBIAN_BUILT=1
  else record fail debian "build of build/debian failed"; fi
fi
ff_log "builds done after $(( $(date +%s) - START ))s"

# ---- cpp: ctest ----------------------------------------------------------------
if lane_on cpp && [ $MAIN_BUILT = 1 ]; then
  if compgen -G "tests/cpp/test_*.cpp" >/dev/null; then
    ff_log "cpp: ctest (build/main)"
    "$FF_VENV/bin/ctest" --test-dir build/main --output-on-failure -j "$FF_JOBS" --timeout 300 \
      --no-tests=error --output-junit "$RESULTS/cpp.xml" 2>&1 | tee "$RESULTS/cpp.log"
    rc=${PIPESTATUS[0]}
    [ $rc = 0 ] && record ok cpp "ctest, GoogleTest" "$RESULTS/cpp.xml" "$RESULTS/cpp.log" \
                || record fail cpp "ctest exited $rc" "$RESULTS/cpp.xml" "$RESULTS/cpp.log"
  else
    record none cpp "no tests/cpp/test_*.cpp yet"
  fi
fi

# run_pytest LANE PYTHON SITE PURE [pytest args...]
# FF_PYTEST_TARGETS (array) replaces tests/python; FF_PYTEST_ENV (array of NAME=VALUE) adds to the
# environment of pytest alone.
FF_PYTEST_TARGETS=(tests/python)
FF_PYTEST_ENV=()
run_pytest() {
  local lane="$1" py="$2" site="$3" pure="$4"; shift 4
  local xml="$RESULTS/$lane.xml" log="$RESULTS/$lane.log" desc
  desc="$("$py" -c 'import sys; print("Python %d.%d.%d" % sys.version_info[:3])' 2>&1)"
  ff_log "$lane: pytest with $py ($desc)"
  # NB: PYTHONNOUSERSITE: pyenv's 3.11 and /usr/bin/python3 share ~/.local's
  # site-packages folder, which would let one lane import the other's packages.
  env "${FF_PYTEST_ENV[@]}" PYTHONPATH="$site${FF_PYTEST_EXTRA_PATH:+:$FF_PYTEST_EXTRA_PATH}" PYTHONNOUSERSITE=1 \
      FRAMEFUSE_TEST_LANE="$lane" FRAMEFUSE_TEST_PURE="$pure" \
      FRAMEFUSE_EXPECT_MODULE_DIR="$([ "$pure" = 1 ] || echo "$site/framefuse")" \
      timeout --kill-after=30 "$LANE_TIMEOUT" \
      "$py" -m pytest "${FF_PYTEST_TARGETS[@]}" -ra -o faulthandler_timeout=300 --junitxml="$xml" "$@" \
      2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  case $rc in
    0) record ok "$lane" "$desc" "$xml" "$log" ;;
    5) if [ "$pure" = 1 ] || ! has_pytests; then record none "$lane" "$desc: no tests collected" "" "$log"
       else record fail "$lane" "$desc: pytest collected no tests although tests/python has test files" "" "$log"; fi ;;
    124|137) record fail "$lane" "$desc: timed out after ${LANE_TIMEOUT}s" "$xml" "$log" ;;
    *) record fail "$lane" "$desc: pytest exited $rc" "$xml" "$log" ;;
  esac
}

# ---- main and debian: pytest ---------------------------------------------------
if lane_on main && [ $MAIN_BUILT = 1 ]; then
  run_pytest main "$FF_VENV/bin/python" "$(ff_lane_pythonpath main)" 0 "$@"
fi
if lane_on debian && [ $DEBIAN_BUILT = 1 ]; then
  # The Debian interpreter cannot import the venv's nvidia-cuda-nvrtc wheel;
  # point framefuse at its library instead.
  if [ -z "${FRAMEFUSE_NVRTC_PATH:-}" ]; then
    nvrtc="$(ls "$FF_VENV"/lib/python3*/site-packages/nvidia/*/lib/libnvrtc.so.* 2>/dev/null | grep -v builtins | head -n 1)"
    [ -n "$nvrtc" ] && export FRAMEFUSE_NVRTC_PATH="$nvrtc"
  fi
  # Packages apt lacks (timm), from PyPI; the tests that need them fail on this lane without them.
  FF_PYTEST_EXTRA_PATH="$(ff_debian_pydeps)" \
    || { record fail debian-pydeps "pip could not install scripts/requirements-debian.txt"; FF_PYTEST_EXTRA_PATH=; }
  run_pytest debian "$FF_DEBIAN_PYTHON" "$(ff_lane_pythonpath debian)" 0 "$@"
  FF_PYTEST_EXTRA_PATH=
fi

# ---- asan: Debug + AddressSanitizer + UBSan ----------------------------------------
# NB: its own build folder and Debug, so NDEBUG is off and the debug-only verifiers run. Python
# itself is not instrumented: libasan must be the first library loaded (LD_PRELOAD), and leak
# checking is off (the interpreter and torch keep allocations to the end by design).
# FRAMEFUSE_ASAN_SCOPE: `cpp` builds only the GoogleTest binaries (target ff_cpp_tests) and runs
# them; `subset` (the default) also builds the extension and runs the pytest files in
# scripts/asan_tests.txt under ASan; `full` runs all of tests/python instead (FRAMEFUSE_ASAN_FULL=1
# is the same). A default lane: from a fresh clone on 2 cores the subset scope took 4 minutes (its
# cold Debug build about 3 of them).
if lane_on asan; then
  asan_scope="${FRAMEFUSE_ASAN_SCOPE:-subset}"
  [ "${FRAMEFUSE_ASAN_FULL:-0}" = 1 ] && asan_scope=full
  ff_log "asan: building build/asan (Debug, -fsanitize=address,undefined; scope $asan_scope)"
  san="-fsanitize=address,undefined -fno-omit-frame-pointer"
  unset FF_BUILD_TARGETS
  [ "$asan_scope" = cpp ] && FF_BUILD_TARGETS=(ff_cpp_tests)
  if ff_build_lane asan "$FF_VENV/bin/python" -DCMAKE_BUILD_TYPE=Debug -DFRAMEFUSE_BUILD_TESTS=ON \
       "-DCMAKE_CXX_FLAGS=$san" "-DCMAKE_C_FLAGS=$san" "-DCMAKE_EXE_LINKER_FLAGS=$san" \
       "-DCMAKE_SHARED_LINKER_FLAGS=$san" "-DCMAKE_MODULE_LINKER_FLAGS=$san"; then
    unset FF_BUILD_TARGETS
    export UBSAN_OPTIONS="print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
    ff_log "asan: ctest (build/asan)"
    ASAN_OPTIONS="detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}" \
      "$FF_VENV/bin/ctest" --test-dir build/asan --output-on-failure -j "$FF_JOBS" --timeout 600 \
      --no-tests=error --output-junit "$RESULTS/asan-cpp.xml" 2>&1 | tee "$RESULTS/asan-cpp.log"
    rc=${PIPESTATUS[0]}
    [ $rc = 0 ] && record ok asan-cpp "ctest under ASan/UBSan" "$RESULTS/asan-cpp.xml" "$RESULTS/asan-cpp.log" \
                || record fail asan-cpp "ctest under ASan/UBSan exited $rc" "$RESULTS/asan-cpp.xml" "$RESULTS/asan-cpp.log"
    if [ "$asan_scope" != cpp ]; then
      # NB: libstdc++ is preloaded too: the interpreter does not link it, and ASan's __cxa_throw
      # interceptor fails its start-up check when the real one is not loaded yet.
      preload="$("${CXX:-g++}" -print-file-name=libasan.so) $("${CXX:-g++}" -print-file-name=libstdc++.so)"
      if [ "$asan_scope" = full ]; then FF_PYTEST_TARGETS=(tests/python)
      else mapfile -t FF_PYTEST_TARGETS < <(grep -vE '^\s*(#|$)' scripts/asan_tests.txt); fi
      FF_PYTEST_ENV=("LD_PRELOAD=$preload" "ASAN_OPTIONS=detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}")
      run_pytest asan "$FF_VENV/bin/python" "$(ff_lane_pythonpath asan)" 0 "$@"
      FF_PYTEST_TARGETS=(tests/python) FF_PYTEST_ENV=()
    fi
    # NB: UBSan reports and goes on; a report anywhere fails the lane, with every report in the log.
    for log in "$RESULTS/asan-cpp.log" "$RESULTS/asan.log"; do
      n="$(grep -c 'runtime error:' "$log" 2>/dev/null)"
      [ "${n:-0}" = 0 ] || record fail ubsan "$n UBSan runtime errors in $log (grep 'runtime error:')"
    done
  else
    unset FF_BUILD_TARGETS
    record fail asan "build of build/asan failed"
  fi
fi

# ---- pure: pyenv 3.12 / 3.13 ----------------------------------------------------
# Tests marked pure_python need neither torch nor framefuse._C; they check the
# Python-level code on the interpreters the C++ engine does not target here.
if lane_on pure; then
  pyenv_root="${PYENV_ROOT:-$HOME/.pyenv}"
  for ver in 3.12 3.13; do
    lane="py${ver/./}"
    py="$(ls -d "$pyenv_root/versions/$ver".*/bin/python"$ver" 2>/dev/null | sort -V | tail -n 1)"
    if [ -z "$py" ]; then
      record none "$lane" "no pyenv Python $ver on this machine"; continue
    fi
    if ! grep -rqs --include='test_*.py' 'pure_python' tests/python; then
      record none "$lane" "no tests marked pure_python yet"; continue
    fi
    venv="$FF_ROOT/build/venv-$lane"  # NB: not inside build/$lane, which a rebuild wipes
    pins="$(grep -E '^(pytest|pybind11)==' scripts/requirements-main.txt | tr '\n' ' ')"
    if [ "$(cat "$venv/.framefuse-requirements" 2>/dev/null)" != "$pins" ]; then
      ff_log "$lane: creating $venv with $pins"
      rm -rf "$venv"
      # shellcheck disable=SC2086
      { "$py" -m venv "$venv" && "$venv/bin/python" -m pip install -q --progress-bar off $pins; } \
        || { record fail "$lane" "could not create its venv"; continue; }
      printf '%s' "$pins" >"$venv/.framefuse-requirements"
    fi
    # framefuse supports 3.12 (the GPU machines) and 3.13: build its _C here (no LLVM, no C++
    # tests) so the torch-free frontend tests (frame hook, interpreter, bytecode) run on them too.
    FF_BUILD_TARGETS=(_C)
    built=1
    ff_build_lane "$lane" "$venv/bin/python" \
      -DFRAMEFUSE_WITH_LLVM=OFF -DFRAMEFUSE_WITH_CUDA=OFF -DFRAMEFUSE_BUILD_TESTS=OFF || built=0
    unset FF_BUILD_TARGETS
    [ "$built" = 1 ] || { record fail "$lane" "build FAILED (see the output above)"; continue; }
    FRAMEFUSE_MODULE_DIR="$FF_ROOT/build/$lane/site/framefuse" \
      run_pytest "$lane" "$venv/bin/python" "$FF_ROOT/build/$lane/site" 1 -m pure_python "$@"
  done
fi

# ---- py313full: the whole suite on 3.13 with torch (local only) ------------------------
# NB: PyPI has no CPU-only torch wheel, so this venv gets the CUDA build (it runs on the CPU here) and
# gigabytes of NVIDIA packages: never a default lane, never in CI. Same pins as the main venv, minus
# the build and lint tools.
if lane_on py313full; then
  pyenv_root="${PYENV_ROOT:-$HOME/.pyenv}"
  py="$(ls -d "$pyenv_root/versions/3.13".*/bin/python3.13 2>/dev/null | sort -V | tail -n 1)"
  venv="$FF_ROOT/build/venv-py313-torch"
  pins="$(grep -vE '^\s*(#|$)|^(cmake|ninja|ruff|clang-format|scikit-build-core)==' scripts/requirements-main.txt | tr '\n' ' ')"
  if [ -z "$py" ]; then
    record fail py313full "no pyenv Python 3.13 on this machine"
  elif { [ "$(cat "$venv/.framefuse-requirements" 2>/dev/null)" = "$pins" ] || {
           ff_log "py313full: creating $venv with $pins"
           rm -rf "$venv" && "$py" -m venv "$venv" &&
             "$venv/bin/python" -m pip install -q --progress-bar off $pins && printf '%s' "$pins" >"$venv/.framefuse-requirements"
         }; } && ff_build_lane py313-torch "$venv/bin/python" -DFRAMEFUSE_BUILD_TESTS=OFF; then
    run_pytest py313full "$venv/bin/python" "$(ff_lane_pythonpath py313-torch)" 0 "$@"
  else
    record fail py313full "could not create its venv or build build/py313-torch (see above)"
  fi
fi

# ---- summary -------------------------------------------------------------------
# Printed last: each runner's own closing line, then one total line.
ff_log "all lanes done after $(( $(date +%s) - START ))s; logs and junit files in build/test-results/"
echo
"$FF_VENV/bin/python" "$FF_ROOT/scripts/summarize.py" "${SUMMARY[@]}" || FAILED=1
exit $FAILED
