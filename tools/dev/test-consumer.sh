# ./dev test consumer (sourced by test.sh): tests/consumer/ built and run as a user's project.
# Each way of getting runhooks is one counted test, named consumer/NAME in the totals and in the
# docs/building.md's "Using it from Meson, CMake and pkg-config", with its output in $CONSUMER_TMP/NAME.log.

test_suite_consumer() {
  local failed_before=$FAILED version='' have_cmake=true name
  CONSUMER_TMP=$(mktemp -d "${TMPDIR:-/tmp}/runhooks-consumer.XXXXXX")
  if command -v cmake >/dev/null 2>&1; then
    note "[consumer] using $(command -v cmake) ($(cmake --version | sed -n 1p))"
  else
    record_failure "consumer: cmake not found; the CMake tests did not run"
    have_cmake=false
  fi
  # The version both installs must report: meson.build's (CMakeLists.txt reads it from there).
  version=$("$MESON" introspect --projectinfo "$ROOT/meson.build" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["version"])') ||
    record_failure "consumer: meson introspect gave no version; versions not checked"

  # The Meson-installed and the CMake-installed ways side by side: each is a chain of short
  # steps that use one core at a time (configure, one compile, install), so two chains at once
  # take half the time on two cores (issue 21). Each step leaves NAME.status and NAME.log; the
  # totals and any failure's log are printed below, in this order, once both have ended.
  consumer_meson_chain "$have_cmake" "$version" &
  if $have_cmake; then
    consumer_cmake_chain "$version" &
  fi
  wait
  for name in meson-install meson-installed pkg-config cmake-find-package-meson-install \
    meson-subproject cmake-install cmake-find-package-cmake-install cmake-add-subdirectory \
    cmake-fetchcontent; do
    consumer_tally "$name"
  done

  if ((FAILED == failed_before)); then
    rm -rf "$CONSUMER_TMP"
  else
    note "[consumer] kept $CONSUMER_TMP for inspection"
  fi
}

# consumer_meson_chain HAVE_CMAKE VERSION: three tests against one Meson-installed prefix
# (pkg-config with Meson and with g++, and the CMake package that meson install writes,
# cmake/meson.build), then runhooks as a Meson subproject.
consumer_meson_chain() {
  local have_cmake=$1 version=$2 prefix=$CONSUMER_TMP/meson-prefix
  if prerequisite meson-install meson_install_runhooks "$prefix"; then
    consumer_case meson-installed meson_installed_consumer "$prefix"
    consumer_case pkg-config pkg_config_consumer "$prefix"
    if $have_cmake; then
      consumer_case cmake-find-package-meson-install cmake_consumer \
        "$CONSUMER_TMP/cmake-find-package-meson-install" -DCMAKE_PREFIX_PATH="$prefix" \
        -DRUNHOOKS_EXPECT_DIR="$prefix/share/cmake/runhooks" \
        ${version:+-DRUNHOOKS_EXPECT_VERSION="$version"}
    fi
  fi
  consumer_case meson-subproject meson_subproject_consumer
}

# consumer_cmake_chain VERSION: the CMake install (which must report Meson's version), then
# runhooks through add_subdirectory and FetchContent.
consumer_cmake_chain() {
  local version=$1 prefix=$CONSUMER_TMP/cmake-prefix
  if prerequisite cmake-install cmake_install_runhooks "$prefix"; then
    consumer_case cmake-find-package-cmake-install cmake_consumer \
      "$CONSUMER_TMP/cmake-find-package-cmake-install" -DCMAKE_PREFIX_PATH="$prefix" \
      -DRUNHOOKS_EXPECT_DIR="$prefix/share/cmake/runhooks" \
      ${version:+-DRUNHOOKS_EXPECT_VERSION="$version"}
  fi
  consumer_case cmake-add-subdirectory cmake_consumer "$CONSUMER_TMP/cmake-add-subdirectory" \
    -DRUNHOOKS_CONSUMER_MODE=add_subdirectory -DRUNHOOKS_SOURCE_DIR="$ROOT"
  consumer_case cmake-fetchcontent cmake_consumer "$CONSUMER_TMP/cmake-fetchcontent" \
    -DRUNHOOKS_CONSUMER_MODE=FetchContent -DRUNHOOKS_SOURCE_DIR="$ROOT"
}

# consumer_case NAME FUNCTION [ARG...]: runs FUNCTION (a chain of &&: errexit is off inside an
# `if`) with its output in NAME.log, and its verdict in NAME.status (`passed` or `failed`), for
# consumer_tally to count: a chain runs in a subshell, which cannot change the totals itself.
consumer_case() {
  local name=$1
  shift
  note "[consumer] $name"
  if "$@" >"$CONSUMER_TMP/$name.log" 2>&1; then
    echo passed >"$CONSUMER_TMP/$name.status"
  else
    echo failed >"$CONSUMER_TMP/$name.status"
  fi
}

# prerequisite NAME FUNCTION [ARG...]: an install the tests after it need; not a test itself,
# but a failure is counted (the tests that need it are then not run). Its verdict as in
# consumer_case, `prerequisite` when it succeeded.
prerequisite() {
  local name=$1
  shift
  note "[consumer] $name"
  if "$@" >"$CONSUMER_TMP/$name.log" 2>&1; then
    echo prerequisite >"$CONSUMER_TMP/$name.status"
    return 0
  fi
  echo failed >"$CONSUMER_TMP/$name.status"
  return 1
}

# consumer_tally NAME: counts NAME's verdict (nothing when it did not run) and prints the log
# of a failure.
consumer_tally() {
  local name=$1 log=$CONSUMER_TMP/$1.log status=''
  [[ ! -f $CONSUMER_TMP/$name.status ]] || status=$(<"$CONSUMER_TMP/$name.status")
  case $status in
    passed) PASSED=$((PASSED + 1)) ;;
    failed)
      cat "$log"
      if [[ $name == *-install ]]; then
        record_failure "consumer: $name (log: $log)"
      else
        record_failure "consumer/$name (log: $log)"
      fi
      ;;
  esac
}

# run_program PROGRAM: runs it and says how it failed.
run_program() {
  "$1" || {
    local status=$?
    echo "$1 exited with $status"
    return 1
  }
}

# meson_consumer BUILD_DIR SOURCE_DIR [SETUP_ARG...]: a Meson consumer configured, built, tested.
meson_consumer() {
  local dir=$1 source=$2
  shift 2
  CXX=g++ "$MESON" setup "$dir" "$source" "$@" &&
    "$MESON" compile -C "$dir" &&
    "$MESON" test -C "$dir" --no-rebuild --print-errorlogs
}

# cmake_consumer BUILD_DIR [CMAKE_ARG...]: tests/consumer/cmake configured, built, run. No
# CMAKE_PREFIX_PATH from the environment: only the prefix a test names may provide runhooks.
cmake_consumer() {
  local dir=$1
  shift
  env -u CMAKE_PREFIX_PATH CXX=g++ cmake -G Ninja -S "$ROOT/tests/consumer/cmake" -B "$dir" "$@" &&
    cmake --build "$dir" --verbose &&
    run_program "$dir/consumer"
}

# consumer/meson-installed: dependency('runhooks') through the installed runhooks.pc.
meson_installed_consumer() {
  PKG_CONFIG_PATH=$1/share/pkgconfig meson_consumer "$CONSUMER_TMP/meson-installed" \
    "$ROOT/tests/consumer" --wrap-mode=nofallback
}

# consumer/meson-subproject: a copy of tests/consumer/ with runhooks under subprojects/, and no
# PKG_CONFIG_PATH that could lead to an installed one.
meson_subproject_consumer() {
  local project=$CONSUMER_TMP/as-subproject
  mkdir -p "$project/subprojects" &&
    cp -R "$ROOT"/tests/consumer/. "$project/" &&
    ln -s "$ROOT" "$project/subprojects/runhooks" &&
    (
      unset PKG_CONFIG_PATH
      meson_consumer "$CONSUMER_TMP/meson-subproject" "$project" "${COMMON_SETUP[@]}" \
        --force-fallback-for=runhooks
    )
}

# consumer/pkg-config: docs/building.md's g++ command line, against the Meson-installed prefix. The
# $(pkg-config ...) are unquoted on purpose: their output is several words, as on that line.
# shellcheck disable=SC2046
pkg_config_consumer() {
  local out=$CONSUMER_TMP/pkg-config-consumer
  local -x PKG_CONFIG_PATH=$1/share/pkgconfig
  pkg-config --print-errors --exists runhooks &&
    echo "g++ -std=c++20 $(pkg-config --cflags runhooks) main.cpp $(pkg-config --libs runhooks)" &&
    g++ -std=c++20 -Wall -Wextra -Wpedantic -Werror $(pkg-config --cflags runhooks) \
      "$ROOT/tests/consumer/main.cpp" -o "$out" $(pkg-config --libs runhooks) &&
    run_program "$out"
}

# runhooks installed into PREFIX by Meson (docs/building.md's way), as a user would: no tests.
meson_install_runhooks() {
  CXX=g++ "$MESON" setup "$CONSUMER_TMP/meson-build" "$ROOT" "${COMMON_SETUP[@]}" \
    --prefix "$1" -Dtests=disabled -Dbenchmarks=disabled -Dexamples=disabled &&
    "$MESON" install -C "$CONSUMER_TMP/meson-build"
}

# runhooks installed into PREFIX by CMake (CMakeLists.txt).
cmake_install_runhooks() {
  env CXX=g++ cmake -G Ninja -S "$ROOT" -B "$CONSUMER_TMP/cmake-build" -DCMAKE_INSTALL_PREFIX="$1" &&
    cmake --build "$CONSUMER_TMP/cmake-build" &&
    cmake --install "$CONSUMER_TMP/cmake-build"
}
