# ./dev demo-mpi: examples/mpi_data_parallel, built quietly and run with 4 MPI ranks; or, with
# `torch`, examples/torch/train_digits_ddp --engine mpi (the libtorch MLP) the same way.

usage_demo-mpi() {
  cat <<'EOF_USAGE'
./dev demo-mpi [torch] [-- DEMO_ARG...]
  Build examples/mpi_data_parallel (g++, -Dmpi=enabled, build/demo-mpi; output in
  build/demo-mpi.log) and run it with 4 ranks: mpirun --oversubscribe -np 4 (and
  --allow-run-as-root as root). Without arguments it trains 20000 steps with checkpoints in a
  temporary directory, removed afterwards; arguments after -- replace those, e.g.
  ./dev demo-mpi -- --steps 40000 --checkpoint-dir /tmp/ckpt (run it again to resume).
  torch: the libtorch MLP of ./dev demo-torch-ddp instead, examples/torch/train_digits_ddp
  --engine mpi (build/demo-mpi-torch; libtorch and the digits as demo-torch-ddp gets them),
  its checkpoints in a new directory build/demo-mpi-torch/runs/run-YYYYMMDD-HHMMSS unless the
  arguments after -- name a --model-dir.
EOF_USAGE
}

DEMO_MPI_PACKAGES=("${BASE_PACKAGES[@]}" "${MPI_PACKAGES[@]}")
DEMO_MPI_DIR=build/demo-mpi
DEMO_MPI_TORCH_DIR=build/demo-mpi-torch

cmd_demo-mpi() {
  local variant=''
  if (($# > 0)) && [[ $1 == torch ]]; then
    variant=torch
    shift
  fi
  parse_demo_args demo-mpi "$@"
  local demo_args=("${DEMO_ARGS[@]}") tmp='' status=0 exe
  local mpirun_args=(--oversubscribe -np 4)
  ((EUID != 0)) || mpirun_args=(--allow-run-as-root "${mpirun_args[@]}")
  if [[ $variant == torch ]]; then
    ensure_packages "${DEMO_MPI_PACKAGES[@]}" "${TORCH_PACKAGES[@]}"
    command -v mpirun >/dev/null 2>&1 || die "mpirun not found (Debian package openmpi-bin)"
    exe=$(build_train_digits_ddp "$DEMO_MPI_TORCH_DIR" -Dmpi=enabled)
    ddp_demo_args "$ROOT/$DEMO_MPI_TORCH_DIR"
    note "OMP_NUM_THREADS=1 mpirun ${mpirun_args[*]} $exe --engine mpi --data $DIGITS_CSV ${DEMO_ARGS[*]}" >&2
    # Not exec'd: the TensorBoard line follows a run that ended well (demo-torch-ddp.sh).
    OMP_NUM_THREADS=1 mpirun "${mpirun_args[@]}" "$exe" --engine mpi --data "$DIGITS_CSV" \
      "${DEMO_ARGS[@]}" || status=$?
    ((status != 0)) || ddp_tensorboard_lines
    return "$status"
  fi
  ensure_packages "${DEMO_MPI_PACKAGES[@]}"
  command -v mpirun >/dev/null 2>&1 || die "mpirun not found (Debian package openmpi-bin)"
  local log=$DEMO_MPI_DIR.log
  exe=$DEMO_MPI_DIR/examples/mpi_data_parallel
  mkdir -p build
  pick_meson >"$log"
  note "building examples/mpi_data_parallel (output in $log)" >&2
  if ! { configure "$DEMO_MPI_DIR" g++ "${COMMON_SETUP[@]}" -Dbuildtype=debugoptimized \
    -Dexamples=enabled -Dtests=disabled -Dbenchmarks=disabled -Dmpi=enabled &&
    "$MESON" compile -C "$DEMO_MPI_DIR" mpi_data_parallel; } >>"$log" 2>&1; then
    cat "$log" >&2
    die "building the MPI demo failed; the output above is in $ROOT/$log"
  fi
  [[ -x $exe ]] || die "$exe was not built: is it listed in examples/meson.build?"
  if ((${#demo_args[@]} == 0)); then
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/runhooks-demo-mpi.XXXXXX")
    demo_args=(--steps 20000 --checkpoint-dir "$tmp/checkpoints")
  fi
  note "mpirun ${mpirun_args[*]} $exe ${demo_args[*]}" >&2
  mpirun "${mpirun_args[@]}" "$exe" "${demo_args[@]}" || status=$?
  [[ -z $tmp ]] || rm -rf "$tmp"
  return "$status"
}
