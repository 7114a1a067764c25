# ./dev demo-torch: examples/torch/train_digits, with libtorch and the digits data fetched when
# missing, built quietly and run.

usage_demo-torch() {
  cat <<'EOF'
./dev demo-torch [-- DEMO_ARG...]
  Train examples/torch/train_digits (a libtorch MLP on the 8x8 handwritten digits) under a
  MonitoredSession. Installs torch==2.13.0, the CPU build (about 750 MB), with
  `$TORCH_PYTHON -m pip` when $TORCH_PYTHON (default python3) cannot import torch, and says
  so; fetches the digits into build/data/ (tools/fetch_digits.py); builds with -Dtorch=enabled
  (g++, build/demo-torch; output in build/demo-torch.log) and runs it with --data. Its
  checkpoints and TensorBoard files are kept in a new directory per run,
  build/demo-torch/examples/torch/train_digits-runs/run-YYYYMMDD-HHMMSS; the last line
  printed is the command that shows them, `tensorboard --logdir DIR`. Arguments after -- go to
  the example, which refuses any it does not know (exit 2; --help lists them), e.g.
  ./dev demo-torch -- --steps 3000 --model-dir /tmp/digits (run it again to resume).
EOF
}

DEMO_TORCH_PACKAGES=("${BASE_PACKAGES[@]}" "${TORCH_PACKAGES[@]}")
DEMO_TORCH_DIR=build/demo-torch

cmd_demo-torch() {
  parse_demo_args demo-torch "$@"
  local demo_args=("${DEMO_ARGS[@]}")
  ensure_packages "${DEMO_TORCH_PACKAGES[@]}"
  if ! have_torch; then
    note "installing $TORCH_REQUIREMENT (the CPU build, about 750 MB): $TORCH_PYTHON -m pip install $TORCH_REQUIREMENT" >&2
    "$TORCH_PYTHON" -m pip install --disable-pip-version-check "$TORCH_REQUIREMENT" </dev/null ||
      die "installing $TORCH_REQUIREMENT failed"
  fi
  fetch_digits >&2 || die "fetching the digits data failed (tools/fetch_digits.py)"
  local log=$DEMO_TORCH_DIR.log exe=$DEMO_TORCH_DIR/examples/torch/train_digits
  mkdir -p build
  pick_meson >"$log"
  note "building examples/torch/train_digits (output in $log; a libtorch TU takes about 30 s)" >&2
  if ! { configure "$DEMO_TORCH_DIR" g++ "${COMMON_SETUP[@]}" -Dbuildtype=debugoptimized \
    -Dexamples=enabled -Dtests=disabled -Dbenchmarks=disabled -Dmpi=disabled -Dtorch=enabled \
    "-Dtorch_python=$TORCH_PYTHON" && "$MESON" compile -C "$DEMO_TORCH_DIR" train_digits; } \
    >>"$log" 2>&1; then
    cat "$log" >&2
    die "building the torch demo failed; the output above is in $ROOT/$log"
  fi
  [[ -x $exe ]] || die "$exe was not built: is it listed in examples/torch/meson.build?"
  # Later arguments win: a --data after -- replaces ours.
  note "$exe --data $DIGITS_CSV ${demo_args[*]}" >&2
  exec "$exe" --data "$DIGITS_CSV" "${demo_args[@]}"
}
