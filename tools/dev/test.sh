# ./dev test: the suites CI runs (.ci/run), each configured, built and run in its own build
# directory, with the totals `N passed, N failed` at the end. The consumer suite, which builds
# tests/consumer/ as a user's project, is in test-consumer.sh.

usage_test() {
  cat <<'EOF'
./dev test [SUITE...]
  Build and run the given test suites, by default all of them, in this order:
    gcc       build/gcc    g++      debugoptimized, -Dmpi=enabled (suite mpi: tests/mpi/ and
                                            the MPI examples under mpirun -np 4), and
                                            -Dtorch=enabled when $TORCH_PYTHON (python3)
                                            can import torch (suite torch; else it says
                                            that it skipped them), with the c10d engine's
                                            torchrun tests when libgloo-dev is there
    clang     build/clang  clang++  debug
    asan      build/asan   clang++  debug, -Db_sanitize=address,undefined; MPI and torch
                                            as in gcc but c10d's. Every ASan, LeakSanitizer or UBSan
                                            report fails its test; LeakSanitizer ignores
                                            only Open MPI's own leaks in the MPI tests
                                            (tests/sanitizers/lsan-openmpi.supp). Not
                                            here: what a sanitizer cannot change (header
                                            checks, compile-fail cases, the docs' programs
                                            and links), which clang runs with the same
                                            compiler, and gcc with g++
    tsan      build/tsan   clang++  examples only, -Db_sanitize=thread
    consumer  tests/consumer/ built and run as a user's project, one test per way (in a
              temporary directory; runhooks installed there by meson install / cmake --install):
                consumer/meson-installed                   Meson, pkg-config
                consumer/pkg-config                        g++ with `pkg-config --cflags --libs`
                consumer/cmake-find-package-meson-install  CMake find_package
                consumer/meson-subproject                  Meson, runhooks in subprojects/
                consumer/cmake-find-package-cmake-install  CMake find_package
                consumer/cmake-add-subdirectory            CMake add_subdirectory
                consumer/cmake-fetchcontent                CMake FetchContent (SOURCE_DIR)
              The CMake ones (tests/consumer/cmake/) use the first cmake on PATH.
  The build suites use warning_level=3, werror=true, -g1 (line tables only) and
  `meson test --print-errorlogs` (benchmarks are built but not run). Prints the expected
  total first (from build/suite-times, the last run's, else typical times), each suite's
  wall time as it ends (`[k/N suites] NAME: ...`) and all of them at the end, before the
  line `N passed, N failed`; exits non-zero on any failure.
EOF
}

# libclang-rt-dev: clang's libFuzzer and sanitizer runtimes, without which the clang suite has
# no fuzz tests (clang alone, installed without recommends, cannot link -fsanitize=fuzzer).
TEST_PACKAGES=("${BASE_PACKAGES[@]}" clang libclang-rt-dev cmake doctest-dev libbenchmark-dev
  librapidcheck-dev valgrind "${MPI_PACKAGES[@]}" "${TORCH_PACKAGES[@]}")
# The suites, in the order they run; test_suite_NAME runs NAME.
TEST_SUITES=(gcc clang asan tsan consumer)
# shellcheck source=tools/dev/test-consumer.sh
source "$ROOT/tools/dev/test-consumer.sh" # test_suite_consumer
# Every build suite: our code with all warnings as errors, tests and examples. -g1 after the build
# type's -g keeps line tables only: backtraces and sanitizer reports still name file and line, but
# there are no variables for a debugger. Full -g made a libtorch TU take twice as long (50 s against
# 25 s) and every other -O2 TU a third longer (issue 21); to debug, set up a directory without it.
STRICT=(-Dwarning_level=3 -Dwerror=true -Dtests=enabled -Dexamples=enabled -Dcpp_args=-g1)

cmd_test() {
  local selected=() arg name
  for arg in "$@"; do
    case $arg in
      -*) bad_usage test "unknown option '$arg'" ;;
    esac
    contains "$arg" "${TEST_SUITES[@]}" ||
      bad_usage test "unknown suite '$arg' (suites: ${TEST_SUITES[*]})"
    selected+=("$arg")
  done
  ((${#selected[@]} > 0)) || selected=("${TEST_SUITES[@]}")

  ensure_packages "${TEST_PACKAGES[@]}"
  pick_meson
  local ordered=() start took total=0 k=0 times=()
  for name in "${TEST_SUITES[@]}"; do
    if contains "$name" "${selected[@]}"; then
      ordered+=("$name")
    fi
  done
  expect_suite_times "${ordered[@]}"
  for name in "${ordered[@]}"; do
    start=$(date +%s)
    "test_suite_$name"
    took=$(($(date +%s) - start))
    total=$((total + took))
    k=$((k + 1))
    times+=("  $name: $(duration $took)")
    record_suite_time "$name" "$took"
    note "[$k/${#ordered[@]} suites] $name: $(duration $took) (total so far $(duration $total))"
  done

  echo
  echo "wall time per suite:"
  printf '%s\n' "${times[@]}"
  echo "  all: $(duration $total)"
  [[ -z $TORCH_SKIPPED ]] || echo "$TORCH_SKIPPED"
  ((SKIPPED == 0)) || echo "$SKIPPED skipped"
  local failure
  for failure in "${FAILURES[@]}"; do
    echo "failed: $failure"
  done
  echo "$PASSED passed, $FAILED failed"
  ((FAILED == 0))
}

# ---- the build suites ---------------------------------------------------------------------------
# Set by the gcc and asan suites when torch is missing; printed above the totals.
TORCH_SKIPPED=''

# MPI and libtorch in this build and, sanitized, in asan (MPI's tests run 4 processes each; a
# torch TU takes about 30 s and 1.5 GB to compile). Without torch, the torch targets are not
# built and the totals say so.
test_suite_gcc() {
  local torch=(-Dtorch=disabled)
  if have_torch; then
    torch=(-Dtorch=enabled "-Dtorch_python=$TORCH_PYTHON" "-Ddigits_csv=$DIGITS_CSV")
    fetch_digits ||
      note "[gcc] the digits data could not be fetched: the train_digits tests will report SKIP"
  else
    TORCH_SKIPPED="skipped torch tests: torch not installed ($TORCH_PYTHON cannot import torch; pip install $TORCH_REQUIREMENT)"
    note "[gcc] $TORCH_SKIPPED"
  fi
  suite gcc build/gcc g++ "${STRICT[@]}" -Dbuildtype=debugoptimized -Dbenchmarks=enabled \
    -Dmpi=enabled "${torch[@]}"
}

test_suite_clang() {
  suite clang build/clang clang++ "${STRICT[@]}" -Dbuildtype=debug -Dbenchmarks=enabled \
    -Dmpi=disabled -Dtorch=disabled
}

# UBSan only reports unless told to stop (Meson 1.0.1 does not set this): make every finding a
# failing test. Sanitized tests run slower, so their timeouts are tripled. MPI and libtorch as
# in gcc (benchmarks excepted): the MPI tests add LeakSanitizer suppressions for Open MPI's own
# leaks (tests/mpi/meson.build); libtorch, not built with ASan, needs no exception.
# clang++: its ASan and UBSan instrument a translation unit in about half the time g++ 12 takes
# (the suite's build took 289 against 493 CPU seconds, issue 21), with the same runtime checks;
# g++ still builds and runs everything, optimised, in the gcc suite. b_lundef=false: Meson's
# advice for clang's sanitizers (it matters for shared libraries only; there are none).
# torch_distributed is off here: its tests are torchrun jobs of real processes that take about a
# minute and exercise libtorch's c10d (not built with ASan) through a thin layer of ours; the gcc
# suite runs them.
test_suite_asan() {
  local torch=(-Dtorch=disabled)
  if have_torch; then
    torch=(-Dtorch=enabled "-Dtorch_python=$TORCH_PYTHON" "-Ddigits_csv=$DIGITS_CSV")
    fetch_digits ||
      note "[asan] the digits data could not be fetched: the train_digits tests will report SKIP"
  else
    TORCH_SKIPPED="skipped torch tests: torch not installed ($TORCH_PYTHON cannot import torch; pip install $TORCH_REQUIREMENT)"
    note "[asan] $TORCH_SKIPPED"
  fi
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} \
    UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1} \
    MESON_TEST_ARGS=--timeout-multiplier=3 \
    suite asan build/asan clang++ "${STRICT[@]}" -Dbuildtype=debug -Db_sanitize=address,undefined \
    -Db_lundef=false -Dbenchmarks=disabled -Dmpi=enabled "${torch[@]}" -Dtorch_distributed=disabled
}

# The examples once more under ThreadSanitizer: staggered_workers shares a global step between
# threads.
test_suite_tsan() {
  suite tsan build/tsan clang++ "${STRICT[@]}" -Dbuildtype=debugoptimized -Db_sanitize=thread \
    -Dtests=disabled -Dbenchmarks=disabled -Dmpi=disabled -Dtorch=disabled
}

# ---- how long the suites take -------------------------------------------------------------------
# Wall seconds of each suite from scratch (fresh build directory) on a quiet 2-core machine with
# libtorch installed: the first line's estimate for a suite that $SUITE_TIMES does not know yet.
# From the CPU seconds of a fresh clone's run (issue 21): half the build's (two cores), the test
# phase's at about 1.1 times half its own (tests that run alone or wait), the configure's whole.
declare -gA TYPICAL_SECONDS=([gcc]=390 [clang]=235 [asan]=210 [tsan]=20 [consumer]=20)
# Each suite's wall seconds in the last run, `NAME SECONDS` a line; a rerun, which rebuilds only
# what changed, is usually faster than the first.
SUITE_TIMES=build/suite-times

# duration SECONDS: "X min Y s".
duration() {
  if (($1 >= 60)); then
    echo "$(($1 / 60)) min $(($1 % 60)) s"
  else
    echo "$1 s"
  fi
}

# expect_suite_times SUITE...: one line with the expected total and each suite's share.
expect_suite_times() {
  local -A last=()
  local name seconds total=0 parts='' source='typical times on a quiet 2-core machine'
  if [[ -f $SUITE_TIMES ]]; then
    while read -r name seconds; do
      if [[ $seconds =~ ^[0-9]+$ ]]; then
        last[$name]=$seconds
      fi
    done <"$SUITE_TIMES"
  fi
  for name in "$@"; do
    if [[ -n ${last[$name]:-} ]]; then
      seconds=${last[$name]}
      source="the last run's times in $SUITE_TIMES, where known"
    else
      seconds=${TYPICAL_SECONDS[$name]}
    fi
    total=$((total + seconds))
    parts+="${parts:+, }$name $(duration "$seconds")"
  done
  local suites=suites
  (($# > 1)) || suites=suite
  note "$# $suites, expected total about $(duration $total) ($parts; $source)"
}

# record_suite_time SUITE SECONDS: into $SUITE_TIMES, for the next run's estimate.
record_suite_time() {
  local name seconds lines=()
  if [[ -f $SUITE_TIMES ]]; then
    while read -r name seconds; do
      if [[ $name != "$1" ]]; then
        lines+=("$name $seconds")
      fi
    done <"$SUITE_TIMES"
  fi
  lines+=("$1 $2")
  mkdir -p "$(dirname "$SUITE_TIMES")"
  printf '%s\n' "${lines[@]}" >"$SUITE_TIMES"
}

# ---- configure, build, run and count ------------------------------------------------------------
# suite LABEL BUILD_DIR CXX [SETUP_ARG...]: configure, build everything, run the tests.
suite() {
  local label=$1 dir=$2 compiler=$3
  shift 3
  note "[$label] configure $dir (CXX=$compiler)"
  if ! configure "$dir" "$compiler" "${COMMON_SETUP[@]}" "$@"; then
    record_failure "$label: configure"
    return
  fi
  note "[$label] build"
  if ! "$MESON" compile -C "$dir"; then
    record_failure "$label: build"
    return
  fi
  run_tests "$label" "$dir"
}

# totals, read from meson-logs/testlog.json (one JSON object per test).
run_tests() {
  local label=$1 dir=$2
  shift 2
  local log=$dir/meson-logs/testlog.json status=0 counts passed failed skipped extra=()
  [[ -z ${MESON_TEST_ARGS:-} ]] || read -ra extra <<<"$MESON_TEST_ARGS"
  rm -f "$log"
  note "[$label] meson test"
  "$MESON" test -C "$dir" --no-rebuild --print-errorlogs "${extra[@]}" "$@" || status=$?
  counts=$(python3 - "$log" <<'EOF'
import json, sys
passed = failed = skipped = 0
names = []
try:
    with open(sys.argv[1], encoding="utf-8") as log:
        for line in log:
            if not line.strip():
                continue
            test = json.loads(line)
            result = test.get("result")
            if result in ("OK", "EXPECTEDFAIL"):
                passed += 1
            elif result == "SKIP":
                skipped += 1
            else:  # FAIL, UNEXPECTEDPASS, TIMEOUT, ERROR, INTERRUPT
                failed += 1
                names.append(test.get("name", "?"))
except FileNotFoundError:
    pass
print(passed, failed, skipped, ", ".join(names))
EOF
  )
  local names
  read -r passed failed skipped names <<<"$counts"
  PASSED=$((PASSED + passed))
  SKIPPED=$((SKIPPED + skipped))
  if ((failed > 0)); then
    FAILED=$((FAILED + failed))
    FAILURES+=("$label: $names")
  elif ((status != 0)); then
    record_failure "$label: meson test exited with $status"
  fi
}
