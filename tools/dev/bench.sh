# ./dev bench: the benchmarks in a release build, then docs/performance.md.

usage_bench() {
  cat <<'EOF'
./dev bench
  Release build (build/release), `meson test --benchmark --verbose`, then
  tools/bench_report.py regenerates docs/performance.md.
EOF
}

BENCH_PACKAGES=("${BASE_PACKAGES[@]}" clang libbenchmark-dev valgrind)
BENCH_DIR=build/release

cmd_bench() {
  (($# == 0)) || bad_usage bench "unknown argument '$1'"
  ensure_packages "${BENCH_PACKAGES[@]}"
  pick_meson
  configure "$BENCH_DIR" g++ "${COMMON_SETUP[@]}" -Dbuildtype=release \
    -Dbenchmarks=enabled -Dtests=disabled -Dexamples=disabled
  "$MESON" compile -C "$BENCH_DIR"
  "$MESON" test -C "$BENCH_DIR" --benchmark --verbose
  regenerate_bench_report
}

# Regenerates docs/performance.md and docs/bench_hooks.svg from fresh
# measurements: benchmarks, instruction counts and compile times (tools/bench_report.py).
regenerate_bench_report() {
  note "regenerating docs/performance.md (tools/bench_report.py)"
  python3 tools/bench_report.py
}
