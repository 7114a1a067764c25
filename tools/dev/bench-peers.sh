# ./dev bench-peers: the same training loops in runhooks + libtorch, hand-written libtorch,
# PyTorch, Lightning, Keras and TensorFlow, interleaved in rounds (tools/bench_peers/run.py), and
# the data-parallel jobs of runhooks (Gloo, MPI) against PyTorch's DistributedDataParallel
# (tools/bench_peers/ddp.py), then their tables in docs/performance.md. Not part of CI: the Python
# frameworks are optional.

usage_bench-peers() {
  cat <<'EOF'
./dev bench-peers [peers|ddp|gpt] [--rounds N] [--quick]
  peers: runhooks + libtorch against a hand-written libtorch loop, plain PyTorch, PyTorch Lightning,
  Keras and TensorFlow (a tf.function loop, a Session loop, MonitoredTrainingSession) on the
  same loops, one thread each: time per step of the digits MLP with and without the usual
  callbacks, then of a trivial step (each framework's own cost), then the step that saves a
  64 MiB checkpoint. Every loop is set up and warmed up once, then run in N interleaved rounds
  (default 9), in a rotating order; the table gives medians and per-round ratios to the plain
  loop of the same language. Builds the libtorch worker (g++, -Dtorch=enabled, build/bench-peers;
  output in build/bench-peers.log) when $TORCH_PYTHON (default python3) has torch, and runs
  the Python frameworks that $TORCH_PYTHON has; it names the missing ones with the pip command
  that installs them (pinned versions) and skips them. Fetches the digits into build/data/.
  Writes the tables into docs/performance.md between its markers (a few minutes on 2 cores).
  ddp: data parallelism on 2 ranks, one thread each: train_digits_ddp's job (runhooks +
  libtorch) over Gloo under torchrun and over MPI under mpirun, against PyTorch's
  DistributedDataParallel under torchrun, and the gradients' allreduce alone on each engine;
  then the hooks' own cost per step on the empty step (bench/peers/ddp_peers.cpp,
  tools/bench_peers/ddp.py). Needs torch, libgloo-dev and Open MPI; builds its worker
  (build/bench-peers; output in build/bench-peers.log). Rounds of every job started afresh, in
  a rotating order; writes its tables into docs/performance.md (about 5 minutes on 2 cores).
  gpt: nanoGPT's character-level GPT (examples/torch/gpt.hpp, nanoGPT's CPU configuration on
  tiny Shakespeare, AdamW, clip 1.0, one thread) under runhooks' TorchStepBackend with and
  without the usual hooks, a hand-written libtorch loop, plain PyTorch and Lightning's Trainer
  (bench/torch_gpt.cpp, tools/bench_peers/gpt_peers.py), interleaved in rounds of 40 steps
  (default 5 rounds); then the hooks' share of a step and a background checkpoint's stall
  against a memcpy of the model and AdamW bytes (bench_torch_gpt --measure). Needs torch;
  Lightning's rows need lightning and tensorboard ($TORCH_PYTHON, e.g. a venv's python). Data:
  $GPT_DATA (default ../shared/data/tinyshakespeare.txt beside the repository). Writes its
  tables into docs/performance.md ("nanoGPT"; about 4 minutes on 2 cores).
  Without a section: peers then ddp (not gpt).
    --rounds N  N rounds per measurement (a positive integer)
    --quick     2 rounds of fewer steps, docs/performance.md untouched (about a minute each)
EOF
}

BENCH_PEERS_PACKAGES=("${BASE_PACKAGES[@]}" "${TORCH_PACKAGES[@]}" libbenchmark-dev)
BENCH_DDP_PACKAGES=("${BASE_PACKAGES[@]}" "${TORCH_PACKAGES[@]}" "${MPI_PACKAGES[@]}" libbenchmark-dev)
BENCH_PEERS_DIR=build/bench-peers

cmd_bench-peers() {
  local driver_args=() quick=0 sections=()
  while (($# > 0)); do
    case $1 in
      peers | ddp | gpt)
        ((${#sections[@]} == 0)) || bad_usage bench-peers "one section at most, got '${sections[0]}' and '$1'"
        sections=("$1")
        shift
        ;;
      --rounds)
        (($# >= 2)) || bad_usage bench-peers "--rounds needs a value"
        [[ $2 =~ ^[1-9][0-9]{0,3}$ ]] ||
          bad_usage bench-peers "--rounds must be a positive integer (at most 9999), got '$2'"
        driver_args+=(--rounds "$2")
        shift 2
        ;;
      --quick)
        ((quick == 0)) || bad_usage bench-peers "--quick given twice"
        quick=1
        driver_args+=(--quick)
        shift
        ;;
      *) bad_usage bench-peers "unknown argument '$1'" ;;
    esac
  done
  ((${#sections[@]} > 0)) || sections=(peers ddp)
  local section
  for section in "${sections[@]}"; do
    "bench_peers_$section" "${driver_args[@]}"
  done
}

# configure_bench_peers: configures $BENCH_PEERS_DIR (release, libtorch; MPI and c10d when found),
# its output appended to $BENCH_PEERS_DIR.log. Each section then compiles its own worker, named
# (tools/check_links.py reads the target names from the compile lines).
BENCH_PEERS_LOG=$BENCH_PEERS_DIR.log
configure_bench_peers() {
  pick_meson >"$BENCH_PEERS_LOG"
  configure "$BENCH_PEERS_DIR" g++ "${COMMON_SETUP[@]}" -Dbuildtype=release \
    -Dbenchmarks=enabled -Dtests=disabled -Dexamples=disabled -Dmpi=auto -Dtorch=enabled \
    -Dtorch_distributed=auto "-Dtorch_python=$TORCH_PYTHON" >>"$BENCH_PEERS_LOG" 2>&1
}

# bench_peers_built EXE STATUS: dies with the build's output unless STATUS is 0 and EXE was built.
bench_peers_built() {
  if (($2 != 0)); then
    cat "$BENCH_PEERS_LOG" >&2
    die "building ${1##*/} failed; the output above is in $ROOT/$BENCH_PEERS_LOG"
  fi
  [[ -x $1 ]] || die "$1 was not built: is it listed in bench/meson.build?"
}

bench_peers_peers() {
  local driver_args=("$@")
  ensure_packages "${BENCH_PEERS_PACKAGES[@]}"
  fetch_digits >&2 || die "fetching the digits data failed (tools/fetch_digits.py)"
  mkdir -p "$BENCH_PEERS_DIR"
  if have_torch; then
    local exe=$BENCH_PEERS_DIR/bench/bench_peers_libtorch status=0
    note "building the libtorch worker, bench/peers/libtorch_peers.cpp (output in $BENCH_PEERS_LOG)" >&2
    { configure_bench_peers &&
      "$MESON" compile -C "$BENCH_PEERS_DIR" bench_peers_libtorch >>"$BENCH_PEERS_LOG" 2>&1; } ||
      status=$?
    bench_peers_built "$exe" "$status"
    driver_args+=(--libtorch-worker "$exe")
  else
    note "skipping libtorch and runhooks: $TORCH_PYTHON cannot import torch (pip install $TORCH_REQUIREMENT)" >&2
  fi
  local driver=("$TORCH_PYTHON" tools/bench_peers/run.py --data "$DIGITS_CSV"
    --log-dir "$BENCH_PEERS_DIR/logs" --json "$BENCH_PEERS_DIR/peers.json" "${driver_args[@]}")
  note "${driver[*]}" >&2
  "${driver[@]}"
}

# Tiny Shakespeare for the gpt section (examples/torch/shakespeare.hpp says where it comes from).
GPT_DATA=${GPT_DATA:-$ROOT/../shared/data/tinyshakespeare.txt}

bench_peers_gpt() {
  ensure_packages "${BENCH_PEERS_PACKAGES[@]}"
  have_torch || die "bench-peers gpt needs torch: $TORCH_PYTHON cannot import it (pip install $TORCH_REQUIREMENT)"
  [[ -f $GPT_DATA ]] ||
    die "no tiny Shakespeare at $GPT_DATA: set GPT_DATA (karpathy/char-rnn's data/tinyshakespeare/input.txt)"
  mkdir -p "$BENCH_PEERS_DIR"
  local exe=$BENCH_PEERS_DIR/bench/bench_torch_gpt status=0
  note "building the GPT worker, bench/torch_gpt.cpp (output in $BENCH_PEERS_LOG)" >&2
  { configure_bench_peers &&
    "$MESON" compile -C "$BENCH_PEERS_DIR" bench_torch_gpt >>"$BENCH_PEERS_LOG" 2>&1; } ||
    status=$?
  bench_peers_built "$exe" "$status"
  local driver=("$TORCH_PYTHON" tools/bench_peers/gpt_run.py --data "$GPT_DATA" --worker "$exe"
    --log-dir "$BENCH_PEERS_DIR/gpt-logs" --json "$BENCH_PEERS_DIR/gpt.json" "$@")
  note "${driver[*]}" >&2
  "${driver[@]}"
}

bench_peers_ddp() {
  ensure_packages "${BENCH_DDP_PACKAGES[@]}"
  have_torch || die "bench-peers ddp needs torch: $TORCH_PYTHON cannot import it (pip install $TORCH_REQUIREMENT)"
  fetch_digits >&2 || die "fetching the digits data failed (tools/fetch_digits.py)"
  mkdir -p "$BENCH_PEERS_DIR"
  local exe=$BENCH_PEERS_DIR/bench/bench_peers_ddp status=0
  note "building the data-parallel worker, bench/peers/ddp_peers.cpp (output in $BENCH_PEERS_LOG)" >&2
  { configure_bench_peers &&
    "$MESON" compile -C "$BENCH_PEERS_DIR" bench_peers_ddp >>"$BENCH_PEERS_LOG" 2>&1; } ||
    status=$?
  bench_peers_built "$exe" "$status"
  local driver=("$TORCH_PYTHON" tools/bench_peers/ddp.py --data "$DIGITS_CSV"
    --worker "$exe" --log-dir "$BENCH_PEERS_DIR/ddp-logs"
    --json "$BENCH_PEERS_DIR/ddp.json" "$@")
  note "${driver[*]}" >&2
  "${driver[@]}"
}
