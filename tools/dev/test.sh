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
                                            that it skipped them)
    clang     build/clang  clang++  debug
    asan      build/asan   g++      debug, -Db_sanitize=address,undefined; MPI and torch
                                            as in gcc. Every ASan, LeakSanitizer or UBSan
                                            report fails its test; LeakSanitizer ignores
                                            only Open MPI's own leaks in the MPI tests
                                            (tests/sanitizers/lsan-openmpi.supp)
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
  The build suites use warning_level=3 and werror=true and `meson test --print-errorlogs`
  (benchmarks are built but not run). Ends with the line `N passed, N failed`; exits
  non-zero on any failure.
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
# Every build suite: our code with all warnings as errors, tests and examples.
STRICT=(-Dwarning_level=3 -Dwerror=true -Dtests=enabled -Dexamples=enabled)

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
  for name in "${TEST_SUITES[@]}"; do
    if contains "$name" "${selected[@]}"; then
      "test_suite_$name"
    fi
  done

  echo
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
    suite asan build/asan g++ "${STRICT[@]}" -Dbuildtype=debug -Db_sanitize=address,undefined \
    -Dbenchmarks=disabled -Dmpi=enabled "${torch[@]}"
}

# The examples once more under ThreadSanitizer: staggered_workers shares a global step between
# threads.
test_suite_tsan() {
  suite tsan build/tsan clang++ "${STRICT[@]}" -Dbuildtype=debugoptimized -Db_sanitize=thread \
    -Dtests=disabled -Dbenchmarks=disabled -Dmpi=disabled -Dtorch=disabled
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
