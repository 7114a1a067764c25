# ./dev demo-gpt: examples/torch/train_gpt, nanoGPT's Shakespeare model, on one process or (with
# --ranks N) data-parallel under torchrun, with libtorch installed when missing.

usage_demo-gpt() {
  cat <<'EOF_USAGE'
./dev demo-gpt [-- [--ranks N] DEMO_ARG...]
  Train examples/torch/train_gpt: nanoGPT's character-level GPT on tiny Shakespeare with its CPU
  configuration, the full 2,000 steps (a few minutes on one core). Installs torch==2.13.0 (CPU)
  like demo-torch; needs ../shared/data/tinyshakespeare.txt beside the repository (the example
  says where the text comes from when it is missing; --data FILE names another place); builds
  with -Dtorch=enabled and c10d's Gloo (libgloo-dev; g++, build/demo-gpt; output in
  build/demo-gpt.log). Checkpoints and TensorBoard files go to a new directory
  build/demo-gpt/runs/run-YYYYMMDD-HHMMSS unless the arguments name a --checkpoint-dir. The last
  lines are the validation loss on 200 batches, a 200-character sample and
  `tensorboard --logdir DIR`. --ranks N (after --) runs N ranks under torchrun
  (`torchrun --standalone --nproc-per-node N --no-python train_gpt --engine c10d`), the global
  batch of 12 split over them; the other arguments go to the example, which refuses any it does
  not know (exit 2; --help lists them), e.g. ./dev demo-gpt -- --steps 500 --threads 2, or
  ./dev demo-gpt -- --ranks 2.
EOF_USAGE
}

DEMO_GPT_PACKAGES=("${BASE_PACKAGES[@]}" "${TORCH_PACKAGES[@]}")
DEMO_GPT_DIR=build/demo-gpt

cmd_demo-gpt() {
  parse_demo_args demo-gpt "$@"
  # --ranks N is ours; the rest is the example's.
  local ranks=1 args=() i
  for ((i = 0; i < ${#DEMO_ARGS[@]}; i++)); do
    if [[ ${DEMO_ARGS[i]} == --ranks ]]; then
      ((i + 1 < ${#DEMO_ARGS[@]})) || bad_usage demo-gpt "--ranks needs a value"
      ranks=${DEMO_ARGS[i + 1]}
      [[ $ranks =~ ^[1-9][0-9]*$ ]] || bad_usage demo-gpt "--ranks must be a positive integer, got '$ranks'"
      i=$((i + 1))
    else
      args+=("${DEMO_ARGS[i]}")
    fi
  done
  ensure_packages "${DEMO_GPT_PACKAGES[@]}"
  if ! have_torch; then
    note "installing $TORCH_REQUIREMENT (the CPU build, about 750 MB): $TORCH_PYTHON -m pip install $TORCH_REQUIREMENT" >&2
    "$TORCH_PYTHON" -m pip install --disable-pip-version-check "$TORCH_REQUIREMENT" </dev/null ||
      die "installing $TORCH_REQUIREMENT failed"
  fi
  local log=$DEMO_GPT_DIR.log exe=$DEMO_GPT_DIR/examples/torch/train_gpt
  mkdir -p build
  pick_meson >"$log"
  note "building examples/torch/train_gpt (output in $log; a libtorch TU takes about a minute)" >&2
  if ! { configure "$DEMO_GPT_DIR" g++ "${COMMON_SETUP[@]}" -Dbuildtype=debugoptimized \
    -Dexamples=enabled -Dtests=disabled -Dbenchmarks=disabled -Dmpi=disabled -Dtorch=enabled \
    -Dtorch_distributed=enabled "-Dtorch_python=$TORCH_PYTHON" &&
    "$MESON" compile -C "$DEMO_GPT_DIR" train_gpt; } >>"$log" 2>&1; then
    cat "$log" >&2
    die "building the GPT demo failed; the output above is in $ROOT/$log"
  fi
  [[ -x $exe ]] || die "$exe was not built: is it listed in examples/torch/meson.build?"
  local dir_given=0 arg
  for arg in "${args[@]}"; do
    [[ $arg != --checkpoint-dir ]] || dir_given=1
  done
  ((dir_given)) || args=(--checkpoint-dir "$DEMO_GPT_DIR/runs/run-$(date +%Y%m%d-%H%M%S)" "${args[@]}")
  if ((ranks == 1)); then
    note "$exe ${args[*]}" >&2
    exec "$exe" "${args[@]}"
  fi
  local torchrun=(torchrun)
  command -v torchrun >/dev/null 2>&1 || torchrun=("$TORCH_PYTHON" -m torch.distributed.run)
  local command=("${torchrun[@]}" --standalone --nproc-per-node "$ranks" --no-python "$exe"
    --engine c10d "${args[@]}")
  note "OMP_NUM_THREADS=1 ${command[*]}" >&2
  OMP_NUM_THREADS=1 exec "${command[@]}"
}
