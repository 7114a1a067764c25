# Shared by every ./dev command (sourced by ./dev after `cd "$ROOT"`): messages and usage
# errors, Debian packages, Meson (which one, configuring a build directory), libtorch and the
# digits data, and the pass/fail totals that `./dev test` and `./dev fuzz` report.

# ---- Debian packages (dpkg names); each command's file adds its own -----------------------------
BASE_PACKAGES=(g++ libboost-dev meson ninja-build pkg-config python3)
# Open MPI: the mpi feature (tests/mpi/, the MPI examples), on in the gcc suite.
MPI_PACKAGES=(libopenmpi-dev openmpi-bin)
# libtorch: the torch feature (examples/torch/, tests/torch/, bench/torch_loop.cpp), on in the
# gcc suite when $TORCH_PYTHON can import torch; zlib reads the digits data; libgloo-dev has gloo's
# headers, which c10d's ProcessGroupGloo.hpp includes and the torch wheel lacks (the
# torch_distributed feature: include/runhooks/torch/distributed/, tests/torch/distributed/).
TORCH_PACKAGES=(zlib1g-dev libgloo-dev)

# Every configure: a missing system package must fail loudly, never start a download.
COMMON_SETUP=(--wrap-mode=nodownload)

# libtorch is the torch Python package's (the CPU build of exactly this version: an unpinned
# `pip install torch` pulls several GB of CUDA packages), found through this interpreter.
TORCH_PYTHON=${TORCH_PYTHON:-python3}
TORCH_REQUIREMENT=torch==2.13.0
# The 8x8 digits examples/torch/train_digits trains on (tools/fetch_digits.py).
DIGITS_CSV=$ROOT/build/data/digits.csv.gz

# ---- messages and usage errors ------------------------------------------------------------------
note() { printf '==> %s\n' "$*"; }
die() {
  printf 'dev: %s\n' "$*" >&2
  exit 1
}

# bad_usage COMMAND MESSAGE: a mistake on the command line (COMMAND empty: no command yet):
# one line naming it and where the usage is, exit 2.
bad_usage() {
  if [[ -n $1 && $1 != help ]]; then
    printf 'dev %s: %s; see ./dev %s --help\n' "$1" "$2" "$1" >&2
  else
    printf 'dev%s: %s; see ./dev help\n' "${1:+ $1}" "$2" >&2
  fi
  exit 2
}

# contains WORD LIST...: whether WORD is one of LIST.
contains() {
  local word=$1 item
  shift
  for item in "$@"; do
    [[ $item == "$word" ]] && return 0
  done
  return 1
}
# ---- packages and Meson -------------------------------------------------------------------------
ensure_packages() {
  if ! command -v dpkg-query >/dev/null 2>&1; then
    echo "dev: dpkg-query not found (not Debian?); not checking packages: $*" >&2
    return 0
  fi
  local package missing=()
  for package in "$@"; do
    if ! dpkg-query -W -f='${db:Status-Status}\n' "$package" 2>/dev/null | grep -qx installed; then
      missing+=("$package")
    fi
  done
  ((${#missing[@]} == 0)) && return 0
  if ((EUID == 0)); then
    note "installing missing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update && apt-get install -y --no-install-recommends "${missing[@]}" </dev/null
  else
    echo "dev: missing Debian packages: ${missing[*]}" >&2
    echo "Install them with:" >&2
    echo "  sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
}

pick_meson() {
  if [[ -x /usr/bin/meson ]]; then
    MESON=/usr/bin/meson
  elif command -v meson >/dev/null 2>&1; then
    MESON=meson
  else
    die "meson not found"
  fi
  note "using $MESON $("$MESON" --version)"
}

# configure BUILD_DIR CXX [SETUP_ARG...]: setup, or reconfigure an existing build directory.
# A directory made by another Meson version (e.g. a pip one) cannot be reconfigured, and a
# reconfigure keeps the compiler it was made with: wipe it in either case.
configure() {
  local dir=$1 compiler=$2
  shift 2
  if [[ -f $dir/meson-private/coredata.dat ]]; then
    local made_by made_with version name=${compiler##*/}
    version=$("$MESON" --version)
    made_by=$(python3 -c 'import json, sys
print(json.load(open(sys.argv[1]))["meson_version"]["full"])' "$dir/meson-info/meson-info.json" \
      2>/dev/null || true)
    # The C++ compiler of its first C++ target (the last word: after a launcher such as ccache).
    made_with=$(python3 -c 'import json, os, sys
print(next(os.path.basename(s["compiler"][-1]) for t in json.load(open(sys.argv[1]))
           for s in t["target_sources"] if s["language"] == "cpp"))' \
      "$dir/meson-info/intro-targets.json" 2>/dev/null || true)
    if [[ $made_by == "$version" && ${made_with:-$name} == "$name" ]]; then
      CXX=$compiler "$MESON" setup --reconfigure "$dir" "$ROOT" "$@"
      return
    fi
    if [[ $made_by != "$version" ]]; then
      note "$dir was configured by Meson ${made_by:-unknown}; wiping it"
    else
      note "$dir was configured for $made_with, not $compiler; wiping it"
    fi
    rm -rf "$dir"
  fi
  CXX=$compiler "$MESON" setup "$dir" "$ROOT" "$@"
}

# ---- libtorch and the digits data (the gcc and asan suites, ./dev demo-torch) -------------------
# Whether $TORCH_PYTHON has the torch package (found without importing it: fast).
have_torch() {
  "$TORCH_PYTHON" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("torch") is None)' \
    >/dev/null 2>&1
}

# Fetches the digits data into $DIGITS_CSV unless it is there (pip download of scikit-learn's
# wheel, 13 MB; nothing is installed).
fetch_digits() {
  python3 tools/fetch_digits.py "$DIGITS_CSV"
}

# ---- totals over every `meson test` run and every fuzz run --------------------------------------
PASSED=0
FAILED=0
SKIPPED=0
FAILURES=()

record_failure() {
  FAILED=$((FAILED + 1))
  FAILURES+=("$1")
  echo "dev: FAILED: $1" >&2
}

# The demos' arguments: everything after `--` goes to the demo, anything before it is refused.
# Sets DEMO_ARGS.
parse_demo_args() {
  local command=$1
  shift
  DEMO_ARGS=()
  while (($# > 0)); do
    case $1 in
      --)
        shift
        DEMO_ARGS=("$@")
        return
        ;;
      *) bad_usage "$command" "unknown argument '$1' (arguments for the demo go after --)" ;;
    esac
  done
}
