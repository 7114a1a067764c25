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
    clang     build/clang  clang++  debug; the header self-containment checks
                                            only in gcc (one standard library, issue 30)
    asan      build/asan   clang++  debug, -Db_sanitize=address,undefined; MPI and torch
                                            as in gcc (the slowest c10d cases left out:
                                            tests/torch/distributed/meson.build,
                                            examples/torch/meson.build).
                                            Every ASan, LeakSanitizer or UBSan
                                            report fails its test; LeakSanitizer ignores
                                            only Open MPI's own leaks in the MPI tests
                                            (tests/sanitizers/lsan-openmpi.supp). Not
                                            here: what a sanitizer cannot change
                                            (compile-fail cases, the docs' programs and
                                            links), which clang runs with the same
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
  `meson test --print-errorlogs` (benchmarks are built but not run). While one runs its
  tests, the next one is configured and built in the background at nice 19 (its output
  shown when its turn comes), on the cores the tests leave idle. Prints the expected
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
  if contains gcc "${ordered[@]}" || contains asan "${ordered[@]}"; then
    setup_torch
  fi
  trap stop_background_build EXIT
  local i following status cpu_start cpu took_cpu reports=()
  for ((i = 0; i < ${#ordered[@]}; i++)); do
    name=${ordered[i]} following=${ordered[i + 1]:-}
    start=$(date +%s)
    children_cpu_seconds
    cpu_start=$CPU_SECONDS
    if contains "$name" "${BUILD_SUITES[@]}"; then
      status=0
      if [[ $BACKGROUND_SUITE == "$name" ]]; then
        note "[$name] its build, started in the background while the previous suite's tests ran:"
        wait "$BACKGROUND_PID" || status=$?
        cat "$BACKGROUND_LOG"
        BACKGROUND_SUITE='' BACKGROUND_PID=''
      else
        SUITE_PHASE=build "test_suite_$name" || status=$?
      fi
      if [[ -n $following ]] && contains "$following" "${BUILD_SUITES[@]}"; then
        start_background_build "$following" "$name"
      fi
      SUITE_PHASE=test BUILD_STATUS=$status "test_suite_$name"
    else
      "test_suite_$name"
    fi
    took=$(($(date +%s) - start))
    children_cpu_seconds
    cpu=$CPU_SECONDS
    took_cpu=$((cpu - cpu_start))
    total=$((total + took))
    k=$((k + 1))
    times+=("  $name: $(duration $took) wall, $(duration $took_cpu) CPU")
    record_suite_time "$name" "$took"
    note "[$k/${#ordered[@]} suites] $name: $(duration $took) wall, $(duration $took_cpu) CPU" \
      "(total so far $(duration $total) wall, $(duration "$cpu") CPU)"
    if contains "$name" "${BUILD_SUITES[@]}"; then
      reports+=(--tests "$name=build/$name/meson-logs/testlog.json"
        --builds "$name=build/$name/.ninja_log:$(cat "build/$name-ninja-offset" 2>/dev/null || echo 0)")
    fi
  done

  echo
  ((${#reports[@]} == 0)) || python3 tools/dev/slowest.py "${reports[@]}" || true
  echo "time per suite (a suite's build ran in the background during the previous suite's tests,"
  echo "and its CPU seconds count where it ended, mostly in the previous suite's line):"
  printf '%s\n' "${times[@]}"
  children_cpu_seconds
  echo "  all: $(duration $total) wall, $(duration "$CPU_SECONDS") CPU"
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
# MPI and libtorch in gcc and, sanitized, in asan (MPI's tests run 4 processes each; a torch TU
# takes about 20 CPU seconds and 1.5 GB to compile). setup_torch sets TORCH_SETUP, their Meson
# options, once; without torch, the torch targets are not built and TORCH_SKIPPED, printed above
# the totals, says so. The digits data is fetched once, for both.
TORCH_SETUP=()
TORCH_SKIPPED=''
setup_torch() {
  TORCH_SETUP=(-Dtorch=disabled)
  if have_torch; then
    TORCH_SETUP=(-Dtorch=enabled "-Dtorch_python=$TORCH_PYTHON" "-Ddigits_csv=$DIGITS_CSV")
    fetch_digits ||
      note "the digits data could not be fetched: the train_digits tests will report SKIP"
  else
    TORCH_SKIPPED="skipped torch tests: torch not installed ($TORCH_PYTHON cannot import torch; pip install $TORCH_REQUIREMENT)"
    note "$TORCH_SKIPPED"
  fi
}

test_suite_gcc() {
  suite gcc build/gcc g++ "${STRICT[@]}" -Dbuildtype=debugoptimized -Dbenchmarks=enabled \
    -Dmpi=enabled "${TORCH_SETUP[@]}"
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
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} \
    UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1} \
    MESON_TEST_ARGS=--timeout-multiplier=3 \
    suite asan build/asan clang++ "${STRICT[@]}" -Dbuildtype=debug -Db_sanitize=address,undefined \
    -Db_lundef=false -Dbenchmarks=disabled -Dmpi=enabled "${TORCH_SETUP[@]}"
}

# The examples once more under ThreadSanitizer: staggered_workers shares a global step between
# threads.
test_suite_tsan() {
  suite tsan build/tsan clang++ "${STRICT[@]}" -Dbuildtype=debugoptimized -Db_sanitize=thread \
    -Dtests=disabled -Dbenchmarks=disabled -Dmpi=disabled -Dtorch=disabled
}

# ---- how long the suites take -------------------------------------------------------------------
# children_cpu_seconds: sets CPU_SECONDS to the user + system CPU seconds of every child of this
# shell that has ended (bash's `times`, second line: bash reaps a background job when it ends). A
# suite's build in the background is therefore counted in the turn during which it ended, mostly
# the previous suite's; the total is exact.
children_cpu_seconds() {
  # `times` in this shell itself: in a $(...) subshell it would count that subshell's children.
  local file line
  file=$(mktemp)
  times >"$file"
  line=$(sed -n 2p "$file") # "1m2.345s 0m6.789s"
  rm -f "$file"
  CPU_SECONDS=$(awk -v t="$line" 'BEGIN {
    split(t, f, " "); s = 0
    for (i = 1; i <= 2; i++) { split(f[i], p, "m"); sub("s", "", p[2]); s += p[1] * 60 + p[2] }
    printf "%d\n", s + 0.5 }')
}
# Wall seconds of each suite from scratch (fresh build directory) on a quiet 2-core machine with
# libtorch installed: the first line's estimate for a suite that $SUITE_TIMES does not know yet.
# From a fresh clone's run of .ci/run (issues 27 and 28, 15 min 16 s and 27 min 54 s of CPU in
# all, 576 tests), each suite counted from the end of the previous one: clang's and asan's builds
# ran mostly in the background during the previous suite's tests.
declare -gA TYPICAL_SECONDS=([gcc]=552 [clang]=125 [asan]=223 [tsan]=3 [consumer]=13)
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
# The suites that configure and build a directory (test_suite_NAME calls suite). While one runs its
# tests, the next one's configure and build run in the background at the lowest CPU priority
# (nice 19), on what the tests leave of the two cores: tests that run alone, wait for a process or
# use one core (issue 21). The tests keep their cores; the build's output is printed when its
# suite's turn comes, and a suite's wall time is counted from the end of the previous one.
BUILD_SUITES=(gcc clang asan tsan)
BACKGROUND_SUITE='' BACKGROUND_PID='' BACKGROUND_LOG=''

# start_background_build SUITE WHILE: SUITE's configure and build, in its own process group.
start_background_build() {
  BACKGROUND_SUITE=$1 BACKGROUND_LOG=build/$1-build.log
  mkdir -p build
  note "[$1] configure and build in the background at nice 19 while $2's tests run" \
    "(output: $BACKGROUND_LOG, shown when its turn comes)"
  set -m # job control: the job gets a process group of its own, which stop_background_build ends
  (
    renice -n 19 -p "$BASHPID" >/dev/null
    SUITE_PHASE=build "test_suite_$1"
  ) >"$BACKGROUND_LOG" 2>&1 &
  BACKGROUND_PID=$!
  set +m
}

# On exit (an interrupt, a failure of ./dev itself): no build is left running behind.
stop_background_build() {
  [[ -z $BACKGROUND_PID ]] || kill -- "-$BACKGROUND_PID" 2>/dev/null || true
}

# suite LABEL BUILD_DIR CXX [SETUP_ARG...]: configure and build (SUITE_PHASE=build: exits 1 when
# the configure failed, 2 when the build did), then run the tests (SUITE_PHASE=test, BUILD_STATUS
# the build's status: a failed build is counted as one failure and no test runs).
suite() {
  local label=$1 dir=$2 compiler=$3
  shift 3
  if [[ $SUITE_PHASE == build ]]; then
    note "[$label] configure $dir (CXX=$compiler)"
    configure "$dir" "$compiler" "${COMMON_SETUP[@]}" "$@" || return 1
    note "[$label] build"
    # Where this build's lines of ninja's log start, for the slowest build steps at the end.
    stat -c %s "$dir/.ninja_log" >"build/$label-ninja-offset" 2>/dev/null || echo 0 >"build/$label-ninja-offset"
    "$MESON" compile -C "$dir" || return 2
    return 0
  fi
  case $BUILD_STATUS in
    0) run_tests "$label" "$dir" ;;
    1) record_failure "$label: configure" ;;
    *) record_failure "$label: build" ;;
  esac
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
