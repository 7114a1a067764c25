# ./dev demo-torch-ddp: examples/torch/train_digits_ddp, data-parallel on 4 processes under
# torchrun (c10d's Gloo), with libtorch and the digits data fetched when missing.

usage_demo-torch-ddp() {
  cat <<'EOF_USAGE'
./dev demo-torch-ddp [-- DEMO_ARG...]
  Train examples/torch/train_digits_ddp (train_digits' MLP, data-parallel: gradients averaged
  over the ranks as DDP does) on 4 processes: torchrun --standalone --nproc-per-node 4
  --no-python train_digits_ddp --engine c10d (torchrun is `$TORCH_PYTHON -m
  torch.distributed.run`). Installs torch==2.13.0 (CPU) like demo-torch, fetches the digits into
  build/data/, builds with -Dtorch=enabled and c10d's Gloo (libgloo-dev; g++,
  build/demo-torch-ddp; output in build/demo-torch-ddp.log). Checkpoints go to a new directory
  build/demo-torch-ddp/runs/run-YYYYMMDD-HHMMSS unless the arguments after -- name one (a run
  that ends well ends with `tensorboard --logdir DIR`, the command that shows it); those
  go to the example, which refuses any it does not know (exit 2; --help lists them), e.g.
  ./dev demo-torch-ddp -- --steps 3000 --model-dir /tmp/ddp (run it again to resume).
  The same model under mpirun: ./dev demo-mpi torch.
EOF_USAGE
}

DEMO_TORCH_DDP_PACKAGES=("${BASE_PACKAGES[@]}" "${TORCH_PACKAGES[@]}")
DEMO_TORCH_DDP_DIR=build/demo-torch-ddp

# Builds train_digits_ddp in $1 with the extra setup options after it (demo-mpi's torch variant
# adds -Dmpi=enabled); prints the executable's path.
build_train_digits_ddp() {
  local dir=$1 log=$1.log exe=$1/examples/torch/train_digits_ddp
  shift
  if ! have_torch; then
    note "installing $TORCH_REQUIREMENT (the CPU build, about 750 MB): $TORCH_PYTHON -m pip install $TORCH_REQUIREMENT" >&2
    "$TORCH_PYTHON" -m pip install --disable-pip-version-check "$TORCH_REQUIREMENT" </dev/null ||
      die "installing $TORCH_REQUIREMENT failed"
  fi
  fetch_digits >&2 || die "fetching the digits data failed (tools/fetch_digits.py)"
  mkdir -p build
  pick_meson >"$log"
  note "building examples/torch/train_digits_ddp (output in $log; a libtorch TU takes about 30 s)" >&2
  if ! { configure "$dir" g++ "${COMMON_SETUP[@]}" -Dbuildtype=debugoptimized \
    -Dexamples=enabled -Dtests=disabled -Dbenchmarks=disabled -Dtorch=enabled \
    -Dtorch_distributed=enabled "-Dtorch_python=$TORCH_PYTHON" "$@" &&
    "$MESON" compile -C "$dir" train_digits_ddp; } >>"$log" 2>&1; then
    cat "$log" >&2
    die "building train_digits_ddp failed; the output above is in $ROOT/$log"
  fi
  [[ -x $exe ]] || die "$exe was not built: is it listed in examples/torch/meson.build?"
  echo "$exe"
}

# DEMO_ARGS with --model-dir added (a new run directory under $1) unless they name one.
ddp_demo_args() {
  local arg
  for arg in "${DEMO_ARGS[@]}"; do
    [[ $arg != --model-dir ]] || return 0
  done
  DEMO_ARGS=(--model-dir "$1/runs/run-$(date +%Y%m%d-%H%M%S)" "${DEMO_ARGS[@]}")
}

# After a run that ended well, the lines every other demo ends with: the command that shows the
# chief's TensorBoard files (its --model-dir, the last one given, as the example reads them), a
# path below the current directory written relative to it.
ddp_tensorboard_lines() {
  local dir='' i
  for ((i = 0; i < ${#DEMO_ARGS[@]}; i++)); do
    [[ ${DEMO_ARGS[i]} != --model-dir ]] || dir=${DEMO_ARGS[i + 1]-}
  done
  [[ -n $dir ]] || return 0
  [[ $dir != "$PWD"/* ]] || dir=${dir#"$PWD"/}
  echo "TensorBoard shows the loss, the accuracy and the step rate (pip install tensorboard):"
  printf 'tensorboard --logdir %q\n' "$dir"
}

cmd_demo-torch-ddp() {
  parse_demo_args demo-torch-ddp "$@"
  ensure_packages "${DEMO_TORCH_DDP_PACKAGES[@]}"
  local exe
  exe=$(build_train_digits_ddp "$DEMO_TORCH_DDP_DIR" -Dmpi=disabled)
  ddp_demo_args "$ROOT/$DEMO_TORCH_DDP_DIR"
  local torchrun=(torchrun)
  command -v torchrun >/dev/null 2>&1 || torchrun=("$TORCH_PYTHON" -m torch.distributed.run)
  # Later arguments win: a --data after -- replaces ours.
  local command=("${torchrun[@]}" --standalone --nproc-per-node 4 --no-python "$exe"
    --engine c10d --data "$DIGITS_CSV" "${DEMO_ARGS[@]}")
  note "OMP_NUM_THREADS=1 ${command[*]}" >&2
  # Not exec'd: the TensorBoard line follows the run (a Ctrl-C that the job turns into a clean
  # stop, exit 0, included).
  local status=0
  OMP_NUM_THREADS=1 "${command[@]}" || status=$?
  ((status != 0)) || ddp_tensorboard_lines
  return "$status"
}
