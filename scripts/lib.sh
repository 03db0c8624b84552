# Shared steps of scripts/main.sh and scripts/test.sh. Source it; do not run it.
#
# Each step installs or builds only what is missing, so a second run is quick:
#   ff_apt_ensure   Debian packages (apt-get update + install, only when one is missing)
#   ff_main_venv    .venv from python3 with scripts/requirements-main.txt
#   ff_build_lane   one CMake build per interpreter in build/<lane>/
#   ff_lane_pythonpath  the lane's importable package folder
#
# NB: every lane has its own build folder and its own importable copy of the
# package (build/<lane>/site/framefuse: links to the .py sources plus that lane's
# _C*.so). The lanes' interpreters are all CPython 3.11 with one extension suffix,
# so a shared _C*.so in python/framefuse would import in the wrong interpreter
# without any error.

FF_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FF_VENV="${FRAMEFUSE_VENV:-$FF_ROOT/.venv}"
FF_JOBS="${FRAMEFUSE_JOBS:-$(nproc 2>/dev/null || echo 2)}"
FF_DEBIAN_PYTHON="${FRAMEFUSE_DEBIAN_PYTHON:-/usr/bin/python3}"
FF_BUILD_RECIPE=2

ff_log() { printf '[framefuse %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
ff_die() { printf '[framefuse] ERROR: %s\n' "$*" >&2; exit 1; }

# Runs "$@" as root: directly when we are root, else through sudo when it can
# run without a password prompt.
ff_as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"
  elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo -n "$@"
  else ff_die "need root to run: $*  (run this script as root, or install the packages yourself)"
  fi
}

# ff_apt_ensure SPEC...  where SPEC is a package name or alternatives "a|b":
# a SPEC is satisfied when any of its alternatives is installed; otherwise its
# first alternative is installed. apt-get update runs only when something is missing.
ff_apt_ensure() {
  local spec alt missing=()
  for spec in "$@"; do
    local ok=0
    IFS='|' read -r -a alts <<<"$spec"
    for alt in "${alts[@]}"; do
      if [ "$(dpkg-query -W -f='${db:Status-Status}' "$alt" 2>/dev/null)" = installed ]; then ok=1; break; fi
    done
    [ $ok = 1 ] || missing+=("${alts[0]}")
  done
  if [ ${#missing[@]} = 0 ]; then
    ff_log "apt: all ${#} packages present"
    return 0
  fi
  command -v apt-get >/dev/null || ff_die "missing packages ${missing[*]} and no apt-get to install them"
  ff_log "apt: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  ff_as_root apt-get update -q || ff_die "apt-get update failed"
  ff_as_root apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=600 "${missing[@]}" \
    || ff_die "apt-get install ${missing[*]} failed"
}

# Packages every build needs (the compiler, LLVM for the CPU code generator,
# GoogleTest for ctest, ccache) and the Debian lane's interpreter with its torch 1.13.
# NB: zlib1g-dev: LLVM's CMake package refers to ZLIB::ZLIB, and llvm-14-dev
# does not depend on it.
FF_APT_BUILD=(g++ "llvm-dev|llvm-14-dev" zlib1g-dev libgtest-dev ccache)
FF_APT_DEBIAN_LANE=(python3-dev python3-torch libtorch-dev python3-pytest python3-numpy python3-pybind11
                    python3-torchvision python3-matplotlib)

# The interpreter the main venv is made from: python3 on PATH (pyenv's 3.11 on
# the development machines), or FRAMEFUSE_PYTHON.
ff_base_python() {
  local py="${FRAMEFUSE_PYTHON:-python3}"
  command -v "$py" >/dev/null || ff_die "no $py on PATH (set FRAMEFUSE_PYTHON to a CPython 3.11 or 3.12)"
  local ver
  ver="$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" || ff_die "$py does not run"
  case "$ver" in
    3.11|3.12) ;;
    *) ff_die "$py is Python $ver; framefuse's main lane needs CPython 3.11 or 3.12 (set FRAMEFUSE_PYTHON)" ;;
  esac
  echo "$py"
}

# Creates or updates $FF_VENV. The stamp records what was installed, so a
# second run does not even start pip.
ff_main_venv() {
  local req="$FF_ROOT/scripts/requirements-main.txt"
  local stamp="$FF_VENV/.framefuse-requirements"
  if [ -x "$FF_VENV/bin/python" ] && ! "$FF_VENV/bin/python" -c '' 2>/dev/null; then
    ff_log "venv: $FF_VENV is broken (its base interpreter moved?); recreating it"
    rm -rf "$FF_VENV"
  fi
  if [ ! -x "$FF_VENV/bin/python" ]; then
    local base
    base="$(ff_base_python)"
    ff_log "venv: creating $FF_VENV from $base ($("$base" --version 2>&1))"
    "$base" -m venv "$FF_VENV" || ff_die "python -m venv failed"
  fi
  local want
  want="$("$FF_VENV/bin/python" --version 2>&1); $(cat "$req")"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    ff_log "venv: requirements already installed in $FF_VENV"
    return 0
  fi
  ff_log "venv: installing scripts/requirements-main.txt into $FF_VENV"
  # NB: torch==2.13.0 resolves to the CPU wheel that pip's find-links points at;
  # an unpinned torch would pull the CUDA build (gigabytes) from the index.
  "$FF_VENV/bin/python" -m pip install -q --progress-bar off --disable-pip-version-check -r "$req" \
    || ff_die "pip install -r scripts/requirements-main.txt failed"
  printf '%s' "$want" >"$stamp"
}

# Installs scripts/requirements-debian.txt into build/pydeps-debian with the main venv's pip (the
# packages are pure Python; Debian's python3 has no pip) and prints that folder. Stamped like the venv.
ff_debian_pydeps() {
  local req="$FF_ROOT/scripts/requirements-debian.txt" dir="$FF_ROOT/build/pydeps-debian"
  if [ "$(cat "$dir/.framefuse-requirements" 2>/dev/null)" != "$(cat "$req")" ]; then
    ff_log "debian: installing scripts/requirements-debian.txt into $dir"
    rm -rf "$dir"
    "$FF_VENV/bin/python" -m pip install -q --progress-bar off --disable-pip-version-check --no-deps \
      --target "$dir" -r "$req" >&2 || return 1
    cat "$req" >"$dir/.framefuse-requirements"
  fi
  echo "$dir"
}

# ff_build_lane LANE PYTHON [cmake -D args...]
# Configures (when the cache is missing or the arguments changed) and builds
# build/LANE with PYTHON's headers and pybind11; the module lands in
# build/LANE/site/framefuse next to links to the Python sources.
# Set FF_BUILD_TARGETS (array) to build only some targets.
ff_build_lane() {
  local lane="$1" py="$2"; shift 2
  local bdir="$FF_ROOT/build/$lane"
  local site="$bdir/site"
  local cmake="$FF_VENV/bin/cmake" ninja="$FF_VENV/bin/ninja"
  [ -x "$cmake" ] || ff_die "no cmake in $FF_VENV (run ff_main_venv first)"
  local args=(-G Ninja "-DCMAKE_MAKE_PROGRAM=$ninja" -DCMAKE_BUILD_TYPE=Release
              "-DPython_EXECUTABLE=$py" "-DFRAMEFUSE_MODULE_DIR=$site/framefuse")
  # NB: ccache lets the second lane reuse every object that does not include
  # Python headers (the graph IR, the code generator: most of the build): both
  # lanes compile them with the same command. No CCACHE_BASEDIR: it would turn
  # __FILE__ into a path relative to the build folder, which tests use to find
  # their golden files and error messages use to name our sources.
  if [ "${FRAMEFUSE_CCACHE:-1}" = 1 ] && command -v ccache >/dev/null; then
    args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
    export CCACHE_NOHASHDIR=1
  fi
  args+=("$@")
  # The stamp names the interpreter, the arguments and FF_BUILD_RECIPE (bump it
  # when objects built by an older version of this script must not be reused).
  local want
  want="recipe $FF_BUILD_RECIPE; $("$py" -c 'import sys; print(sys.executable, sys.version)' 2>&1) ${args[*]}"
  if [ ! -f "$bdir/CMakeCache.txt" ] || [ ! -f "$bdir/build.ninja" ] \
     || [ "$(cat "$bdir/.framefuse-configure" 2>/dev/null)" != "$want" ]; then
    # NB: a fresh folder, not a reconfigure: CMake keeps what FindPython found
    # in its cache, so a changed interpreter could leave stale paths behind.
    if [ -e "$bdir" ]; then
      ff_log "build[$lane]: interpreter or build settings changed; rebuilding build/$lane from scratch"
      rm -rf "$bdir"
    fi
    mkdir -p "$bdir"
    ff_log "build[$lane]: configuring build/$lane for $py"
    "$cmake" -S "$FF_ROOT" -B "$bdir" "${args[@]}" >"$bdir/configure.log" 2>&1 || {
      tail -n 40 "$bdir/configure.log" >&2
      ff_log "build[$lane]: configure FAILED (full log: build/$lane/configure.log)"
      return 1
    }
    grep -E '^-- framefuse:' "$bdir/configure.log" | sed "s/^/  [$lane] /" >&2
    printf '%s' "$want" >"$bdir/.framefuse-configure"
  fi
  ff_sync_package "$site/framefuse"
  local targets=()
  if [ -n "${FF_BUILD_TARGETS+x}" ]; then
    local t
    for t in "${FF_BUILD_TARGETS[@]}"; do targets+=(--target "$t"); done
  fi
  ff_log "build[$lane]: building (-j$FF_JOBS)"
  "$cmake" --build "$bdir" -j "$FF_JOBS" "${targets[@]}" || {
    ff_log "build[$lane]: build FAILED"
    return 1
  }
}

# Mirrors python/framefuse into DEST as relative links: every file except
# compiled modules and caches. Run before each build/test so new, moved or
# deleted sources are picked up.
ff_sync_package() {
  local dest="$1" src="$FF_ROOT/python/framefuse"
  mkdir -p "$dest"
  [ -d "$src" ] || { ff_log "note: python/framefuse is missing; only _C will be importable"; return 0; }
  # Drop links whose source went away (and links from an older layout).
  find "$dest" -xtype l -delete
  local rel f
  while IFS= read -r -d '' f; do
    rel="${f#"$src"/}"
    mkdir -p "$dest/$(dirname "$rel")"
    if [ ! -L "$dest/$rel" ]; then
      ln -sfn "$(realpath --relative-to="$dest/$(dirname "$rel")" "$f")" "$dest/$rel"
    fi
  done < <(find "$src" -type f ! -name '*.so' ! -name '*.pyc' ! -path '*/__pycache__/*' -print0)
  ff_dist_info "$(dirname "$dest")"
}

# Writes SITE/framefuse.dist-info: the package's name, version and entry points (pyproject.toml's
# [project.entry-points.*] tables), so that importlib.metadata finds the lane's framefuse as it
# finds an installed one (torch.compile(backend="framefuse") looks the name up there).
ff_dist_info() {
  local info="$1/framefuse.dist-info" version
  mkdir -p "$info"
  version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$FF_ROOT/pyproject.toml" | head -n 1)"
  printf 'Metadata-Version: 2.1\nName: framefuse\nVersion: %s\n' "$version" >"$info/METADATA"
  awk '/^\[project\.entry-points\./ { sub(/^\[project\.entry-points\./, "["); print; on = 1; next }
       /^\[/ { on = 0 } on && NF { gsub(/"/, ""); print }' "$FF_ROOT/pyproject.toml" >"$info/entry_points.txt"
}

# The PYTHONPATH that makes LANE's package the one `import framefuse` finds.
ff_lane_pythonpath() { echo "$FF_ROOT/build/$1/site"; }
