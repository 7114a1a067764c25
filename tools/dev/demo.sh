# ./dev demo: examples/demo, built quietly and run.

usage_demo() {
  cat <<'EOF'
./dev demo [-- DEMO_ARG...]
  Build examples/demo (g++, buildtype=debugoptimized, build/demo) and run it. The build is
  quiet: its output goes to build/demo.log, printed only if the build fails, so what follows
  is the demo's own output. Arguments after -- go to the demo: --logdir DIR keeps its
  TensorBoard files in DIR (tensorboard --logdir DIR), which it otherwise removes at the end.
EOF
}

DEMO_PACKAGES=("${BASE_PACKAGES[@]}")
DEMO_DIR=build/demo

# Only what the demo needs: no MPI or libtorch detection, and the one target (the other
# examples, a libtorch one among them, are for ./dev test).
build_demo() {
  configure "$DEMO_DIR" g++ "${COMMON_SETUP[@]}" -Dbuildtype=debugoptimized \
    -Dexamples=enabled -Dtests=disabled -Dbenchmarks=disabled -Dmpi=disabled -Dtorch=disabled &&
    "$MESON" compile -C "$DEMO_DIR" examples/demo
}

cmd_demo() {
  parse_demo_args demo "$@"
  local demo_args=("${DEMO_ARGS[@]}")
  ensure_packages "${DEMO_PACKAGES[@]}"
  local log=$DEMO_DIR.log exe=$DEMO_DIR/examples/demo
  mkdir -p build
  pick_meson >"$log"
  note "building examples/demo (output in $log)" >&2
  if ! build_demo >>"$log" 2>&1; then
    cat "$log" >&2
    die "building the demo failed; the output above is in $ROOT/$log"
  fi
  [[ -x $exe ]] || die "$exe was not built: is 'demo' listed in examples/meson.build?"
  exec "$exe" "${demo_args[@]}"
}
