# ./dev demo: examples/demo, built quietly and run.

usage_demo() {
  cat <<'EOF'
./dev demo [-- DEMO_ARG...]
  Build examples/demo and the other examples that need no MPI or libtorch (g++,
  buildtype=debugoptimized, build/demo/examples/) and run the demo. The build is
  quiet: its output goes to build/demo.log, printed only if the build fails, so what follows
  is the demo's own output. Its TensorBoard files are kept in a new directory per run,
  build/demo/examples/demo-runs/run-YYYYMMDD-HHMMSS; the last line printed is the command
  that shows them, `tensorboard --logdir DIR`. Arguments after -- go to the demo, which
  refuses any it does not know (exit 2): --steps N (default 3000), --logdir DIR (write there
  instead), --help; e.g. ./dev demo -- --steps 500.
EOF
}

DEMO_PACKAGES=("${BASE_PACKAGES[@]}")
DEMO_DIR=build/demo

# Only the examples that need nothing but runhooks: no MPI or libtorch detection (those examples
# are ./dev demo-mpi's and ./dev demo-torch's), so that a fresh clone builds and runs in seconds.
build_demo() {
  configure "$DEMO_DIR" g++ "${COMMON_SETUP[@]}" -Dbuildtype=debugoptimized \
    -Dexamples=enabled -Dtests=disabled -Dbenchmarks=disabled -Dmpi=disabled -Dtorch=disabled &&
    "$MESON" compile -C "$DEMO_DIR" examples/demo examples/resume examples/custom_hook \
      examples/custom_backend examples/fetch_and_feed examples/staggered_workers
}

cmd_demo() {
  parse_demo_args demo "$@"
  local demo_args=("${DEMO_ARGS[@]}")
  ensure_packages "${DEMO_PACKAGES[@]}"
  local log=$DEMO_DIR.log exe=$DEMO_DIR/examples/demo
  mkdir -p build
  pick_meson >"$log"
  note "building examples/demo and the other plain examples (output in $log)" >&2
  if ! build_demo >>"$log" 2>&1; then
    cat "$log" >&2
    die "building the demo failed; the output above is in $ROOT/$log"
  fi
  [[ -x $exe ]] || die "$exe was not built: is 'demo' listed in examples/meson.build?"
  exec "$exe" "${demo_args[@]}"
}
