# ./dev bench-peers: the same training loops in runhooks + libtorch, hand-written libtorch,
# PyTorch, Lightning, Keras and TensorFlow, interleaved in rounds (tools/bench_peers/run.py), then
# its tables in docs/performance.md. Not part of CI: the Python frameworks are optional.

usage_bench-peers() {
  cat <<'EOF'
./dev bench-peers [--rounds N] [--quick]
  runhooks + libtorch against a hand-written libtorch loop, plain PyTorch, PyTorch Lightning,
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
    --rounds N  N rounds per measurement (a positive integer)
    --quick     2 rounds of fewer steps, docs/performance.md untouched (about a minute)
EOF
}

BENCH_PEERS_PACKAGES=("${BASE_PACKAGES[@]}" "${TORCH_PACKAGES[@]}" libbenchmark-dev)
BENCH_PEERS_DIR=build/bench-peers

cmd_bench-peers() {
  local driver_args=() quick=0
  while (($# > 0)); do
    case $1 in
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
  ensure_packages "${BENCH_PEERS_PACKAGES[@]}"
  fetch_digits >&2 || die "fetching the digits data failed (tools/fetch_digits.py)"
  mkdir -p "$BENCH_PEERS_DIR"
  if have_torch; then
    local log=$BENCH_PEERS_DIR.log exe=$BENCH_PEERS_DIR/bench/bench_peers_libtorch
    pick_meson >"$log"
    note "building the libtorch worker, bench/peers/libtorch_peers.cpp (output in $log)" >&2
    if ! { configure "$BENCH_PEERS_DIR" g++ "${COMMON_SETUP[@]}" -Dbuildtype=release \
      -Dbenchmarks=enabled -Dtests=disabled -Dexamples=disabled -Dmpi=disabled -Dtorch=enabled \
      "-Dtorch_python=$TORCH_PYTHON" && "$MESON" compile -C "$BENCH_PEERS_DIR" bench_peers_libtorch; } \
      >>"$log" 2>&1; then
      cat "$log" >&2
      die "building the libtorch worker failed; the output above is in $ROOT/$log"
    fi
    [[ -x $exe ]] || die "$exe was not built: is it listed in bench/meson.build?"
    driver_args+=(--libtorch-worker "$exe")
  else
    note "skipping libtorch and runhooks: $TORCH_PYTHON cannot import torch (pip install $TORCH_REQUIREMENT)" >&2
  fi
  local driver=("$TORCH_PYTHON" tools/bench_peers/run.py --data "$DIGITS_CSV"
    --log-dir "$BENCH_PEERS_DIR/logs" --json "$BENCH_PEERS_DIR/peers.json" "${driver_args[@]}")
  note "${driver[*]}" >&2
  "${driver[@]}"
}
