#!/usr/bin/env bash
# tools/gpu_check.sh: issue 28's GPU path, checked on a machine with a CUDA device. Builds the GPT
# example (examples/torch/train_gpt.cpp, Meson + ninja, libtorch from the machine's PyTorch) and
# bench/torch_gpt.cpp (one compiler command: it needs no Google Benchmark), then checks, printing
# each check as `ok` or `FAIL`:
#   1. train_gpt --device cuda trains 300 steps: exit 0, and its validation loss at the end is
#      below 3.0 (the untrained model's is ln 65 = 4.17; 300 steps on the CPU reach about 2.4);
#   2. it wrote the checkpoint of step 300, and a second run on the same directory restores it
#      ("runhooks: restored checkpoint .../model.ckpt-300") and trains on to step 320;
#   3. bench_torch_gpt --sync-check --device cuda: 300 steps with the hooks a user attaches
#      (summaries and the loss every 50 steps, a checkpoint every 100, a progress bar), counting
#      every tensor-to-number conversion on the training thread (aten::_local_scalar_dense:
#      .item(), which waits for the device): none on the steps where no hook fetched a value,
#      none but the fetched values on the others; with CUDA's headers, also every host-device
#      synchronisation (c10's sync debug mode), those of drawing the batch counted apart: none
#      but those on the silent steps; the loss fell; the last checkpoint restores into a fresh
#      backend with every weight equal;
#   4. all of it within 5 minutes (the build included).
# Exit status 0 when every check passed.
#
#   tools/gpu_check.sh [--device cuda|cpu] [--steps N] [--python PY] [--data FILE]
#                      [--build-dir DIR]
#   tools/gpu_check.sh --stage
#
# --device cpu is a dry run of the same checks on the CPU (300 steps take about a minute on one
# core). --stage, on the machine that has the project's dependencies: copies Boost.Hana's headers
# (from /usr/include/boost) into subprojects/hana with the wrap's meson.build, and tiny
# Shakespeare into build/gpu-check-stage/, both ignored by git, so that a copy of the tree that
# carries them (subprojects/hana and build/gpu-check-stage) builds and runs on a machine that
# has neither and cannot download them. The GPU machine's image has PyTorch with CUDA, meson,
# ninja and a compiler; runhooks needs no doctest here (tests are not built).
#
# libtorch's CUDA half (libtorch_cuda.so) is loaded with LD_PRELOAD when the program was not
# linked against it: the project's torch dependency links libtorch_cpu and libc10, and without
# libtorch_cuda loaded libtorch reports no CUDA device.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STAGE=$ROOT/build/gpu-check-stage
DEVICE=cuda STEPS=300 PYTHON=${PYTHON:-python3} DATA="" BUILD=$ROOT/build/gpu-check
BUDGET_SECS=300

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }
die() { echo "gpu_check: $*" >&2; exit 2; }

stage() {
  [[ -f /usr/include/boost/hana.hpp ]] || die "--stage needs Boost.Hana in /usr/include/boost (libboost-dev)"
  rm -rf "$ROOT/subprojects/hana"
  mkdir -p "$ROOT/subprojects/hana/include/boost" "$STAGE"
  cp -r /usr/include/boost/hana /usr/include/boost/hana.hpp "$ROOT/subprojects/hana/include/boost/"
  cp "$ROOT/subprojects/packagefiles/hana/meson.build" "$ROOT/subprojects/hana/"
  local data=$ROOT/../shared/data/tinyshakespeare.txt
  [[ -f $data ]] || die "no $data to stage"
  cp "$data" "$STAGE/tinyshakespeare.txt"
  echo "staged subprojects/hana ($(du -sh "$ROOT/subprojects/hana" | cut -f1)) and $STAGE/tinyshakespeare.txt;"
  echo "carry both: subprojects/hana build/gpu-check-stage"
}

while (($# > 0)); do
  case $1 in
    --stage) stage; exit 0 ;;
    --device)
      (($# >= 2)) || die "--device needs a value"
      [[ $2 == cuda || $2 == cpu ]] || die "--device must be cuda or cpu, got '$2'"
      DEVICE=$2; shift 2 ;;
    --steps)
      (($# >= 2)) || die "--steps needs a value"
      [[ $2 =~ ^[1-9][0-9]*00$ ]] || die "--steps must be a positive multiple of 100, got '$2'"
      STEPS=$2; shift 2 ;;
    --python) (($# >= 2)) || die "--python needs a value"; PYTHON=$2; shift 2 ;;
    --data) (($# >= 2)) || die "--data needs a value"; DATA=$2; shift 2 ;;
    --build-dir) (($# >= 2)) || die "--build-dir needs a value"; BUILD=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done

STARTED=$SECONDS
FAILED=0
check() {  # check STATUS TEXT: prints ok or FAIL
  if (($1 == 0)); then echo "ok   $2"; else echo "FAIL $2"; FAILED=1; fi
}

if [[ -z $DATA ]]; then
  for candidate in "$STAGE/tinyshakespeare.txt" "$ROOT/../shared/data/tinyshakespeare.txt"; do
    if [[ -f $candidate ]]; then DATA=$candidate; break; fi
  done
fi
[[ -n $DATA && -f $DATA ]] ||
  die "no tiny Shakespeare: pass --data FILE (karpathy/char-rnn's data/tinyshakespeare/input.txt), or --stage it"
DATA=$(cd "$(dirname "$DATA")" && pwd)/$(basename "$DATA")

# ---- the machine -----------------------------------------------------------------------------
read -r TORCH_VERSION TORCH_CUDA TORCH_HAS_CUDA TORCH_LIB < <("$PYTHON" -c '
import os, torch
print(torch.__version__, torch.version.cuda or "none", int(torch.cuda.is_available()),
      os.path.join(os.path.dirname(torch.__file__), "lib"))') ||
  die "$PYTHON cannot import torch (--python PY names another interpreter)"
echo "torch $TORCH_VERSION (CUDA $TORCH_CUDA) from $PYTHON; libtorch in $TORCH_LIB"
if [[ $DEVICE == cuda ]]; then
  ((TORCH_HAS_CUDA == 1)) || die "torch sees no CUDA device (torch.cuda.is_available() is False)"
  [[ -f $TORCH_LIB/libtorch_cuda.so ]] || die "no $TORCH_LIB/libtorch_cuda.so: a CPU-only torch"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
fi

MESON=()
if [[ -x /usr/bin/meson ]]; then MESON=(/usr/bin/meson)
elif command -v meson >/dev/null; then MESON=(meson)
elif "$PYTHON" -c 'import mesonbuild' 2>/dev/null; then MESON=("$PYTHON" -m mesonbuild.mesonmain)
else die "no meson (pip install meson)"; fi
command -v ninja >/dev/null || die "no ninja (pip install ninja)"
CXX=${CXX:-c++}

# ---- build -----------------------------------------------------------------------------------
mkdir -p "$BUILD"
LOG=$BUILD/gpu-check.log
: >"$LOG"
echo "building train_gpt and bench_torch_gpt in $BUILD (output in $LOG)"
build_started=$SECONDS
# -Dtorch=auto: libtorch is required below by the target itself; the digits examples' zlib is not.
# -Dwerror=false: another compiler or torch version's warnings are not what this checks.
setup_args=(-Dbuildtype=release -Dwerror=false -Dtests=disabled -Dexamples=enabled -Dbenchmarks=disabled
  -Dtorch=auto "-Dtorch_python=$PYTHON" -Dtorch_distributed=disabled -Dmpi=disabled
  --wrap-mode=nodownload)
[[ -f $BUILD/meson-private/coredata.dat ]] && setup_args+=(--reconfigure)
"${MESON[@]}" setup "$BUILD" "$ROOT" "${setup_args[@]}" >>"$LOG" 2>&1 ||
  { tail -30 "$LOG"; die "meson setup failed (the whole log: $LOG)"; }
grep -q "^Message: libtorch " "$BUILD/meson-logs/meson-log.txt" ||
  { grep -n "libtorch" "$BUILD/meson-logs/meson-log.txt" | tail -5; die "meson did not find libtorch for $PYTHON"; }
TORCH_INCLUDE=$("$PYTHON" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "include"))')
HANA_INCLUDE=()
[[ -f /usr/include/boost/hana.hpp ]] || HANA_INCLUDE=(-isystem "$ROOT/subprojects/hana/include")
bench=$BUILD/bench_torch_gpt
(ninja -C "$BUILD" examples/torch/train_gpt >>"$LOG" 2>&1) &
ninja_pid=$!
bench_status=0
# On CUDA, with CUDA's headers, bench_torch_gpt also counts every host-device synchronisation
# (c10's sync debug mode, -DRUNHOOKS_BENCH_CUDA=1; -rdynamic so that libc10_cuda and the program
# share c10::cuda::warning_state()); without them, or if that build fails, only the .item() calls.
CUDA_ARGS=()
if [[ $DEVICE == cuda ]]; then
  for dir in ${CUDA_HOME:+"$CUDA_HOME/include"} /usr/local/cuda/include \
    "$(dirname "$(command -v nvcc || echo /none/bin/nvcc)")/../include"; do
    if [[ -f $dir/cuda_runtime_api.h ]]; then
      CUDA_ARGS=(-DRUNHOOKS_BENCH_CUDA=1 -isystem "$dir" -rdynamic -Wl,--no-as-needed -lc10_cuda)
      break
    fi
  done
  ((${#CUDA_ARGS[@]} > 0)) || echo "note: no cuda_runtime_api.h found (CUDA_HOME, /usr/local/cuda, nvcc's): synchronisations not counted"
fi
compile_bench() {
  "$CXX" -std=c++20 -O2 -DNDEBUG -pthread -I"$ROOT/include" "${HANA_INCLUDE[@]}" \
    -isystem "$TORCH_INCLUDE" -isystem "$TORCH_INCLUDE/torch/csrc/api/include" \
    "$ROOT/bench/torch_gpt.cpp" -o "$bench" -L"$TORCH_LIB" "$@" -ltorch_cpu -lc10 \
    -Wl,-rpath,"$TORCH_LIB" >>"$LOG" 2>&1
}
# Rebuilt when it is older than its source or any header it may include.
if [[ ! -x $bench ]] || [[ -n $(find "$ROOT/bench/torch_gpt.cpp" "$ROOT/include" "$ROOT/examples/torch" \
  -newer "$bench" -name '*.[ch]pp' -print -quit) ]]; then
  if ((${#CUDA_ARGS[@]} > 0)) && ! compile_bench "${CUDA_ARGS[@]}"; then
    echo "note: bench_torch_gpt with -DRUNHOOKS_BENCH_CUDA=1 did not build (see $LOG); built without: synchronisations not counted"
    compile_bench || bench_status=$?
  elif ((${#CUDA_ARGS[@]} == 0)); then
    compile_bench || bench_status=$?
  fi
fi
train_status=0
wait "$ninja_pid" || train_status=$?
train=$BUILD/examples/torch/train_gpt
((train_status == 0 && bench_status == 0)) || { tail -40 "$LOG"; }
check $((train_status + bench_status)) "built examples/torch/train_gpt (meson + ninja) and bench/torch_gpt.cpp in $((SECONDS - build_started)) s"
((FAILED == 0)) || exit 1

PRELOAD=""
if [[ $DEVICE == cuda ]] && ! ldd "$train" | grep -q libtorch_cuda; then
  PRELOAD=$TORCH_LIB/libtorch_cuda.so
  echo "loading $PRELOAD with LD_PRELOAD (the programs link libtorch_cpu and libc10 only)"
fi
with_cuda() { if [[ -n $PRELOAD ]]; then LD_PRELOAD=$PRELOAD "$@"; else "$@"; fi; }

# ---- 1, 2: the example, then its resume ------------------------------------------------------
RUN=$BUILD/run
rm -rf "$RUN" "$BUILD/sync-check"
common=(--data "$DATA" --device "$DEVICE" --checkpoint-dir "$RUN" --eval-every 100
  --save-steps 100 --eval-batches 20 --final-eval-batches 20 --sample-chars 100)
started=$SECONDS
status=0
with_cuda "$train" "${common[@]}" --steps "$STEPS" >"$BUILD/train.out" 2>&1 || status=$?
secs=$((SECONDS - started))
tail -12 "$BUILD/train.out" | sed 's/^/  | /'
check "$status" "train_gpt --device $DEVICE --steps $STEPS: exit $status in $secs s (output in $BUILD/train.out)"
val=$(sed -n 's/^validation loss: \([0-9.]*\) .*/\1/p' "$BUILD/train.out" | tail -1)
fell=1
[[ -n $val ]] && "$PYTHON" -c "import sys; sys.exit(0 if $val < 3.0 else 1)" && fell=0
check "$fell" "the loss fell: validation loss ${val:-(none printed)} at step $STEPS, below 3.0 (ln 65 = 4.17 untrained)"
written=1
[[ -f $RUN/model.ckpt-$STEPS.pt && -f $RUN/checkpoint ]] && written=0
check "$written" "checkpoint written: $RUN/model.ckpt-$STEPS.pt and $RUN/checkpoint"
status=0
with_cuda "$train" "${common[@]}" --steps $((STEPS + 20)) >"$BUILD/resume.out" 2>&1 || status=$?
resumed=1
grep -q "restored checkpoint .*model.ckpt-$STEPS\b" "$BUILD/resume.out" &&
  grep -q "trained to step $((STEPS + 20))" "$BUILD/resume.out" && resumed=0
((status == 0)) || resumed=1
check "$resumed" "restorable: a second run on $RUN restored model.ckpt-$STEPS and trained to step $((STEPS + 20)) (exit $status; $BUILD/resume.out)"

# ---- 3: host-device synchronisation on silent steps -----------------------------------------
status=0
with_cuda "$bench" --sync-check --data "$DATA" --device "$DEVICE" --steps "$STEPS" \
  --dir "$BUILD/sync-check" >"$BUILD/sync-check.out" 2>"$BUILD/sync-check.err" || status=$?
sed 's/^/  | /' "$BUILD/sync-check.out"
((status == 0)) || tail -5 "$BUILD/sync-check.err" | sed 's/^/  ! /'
check "$status" "bench_torch_gpt --sync-check --device $DEVICE: no conversion on silent steps, loss fell, checkpoint restored (exit $status)"

# ---- 4: time ---------------------------------------------------------------------------------
total=$((SECONDS - STARTED))
if [[ $DEVICE == cuda ]]; then
  ((total <= BUDGET_SECS)) && in_time=0 || in_time=1
  check "$in_time" "all of it in $total s (at most $BUDGET_SECS)"
else
  echo "note  a dry run on the CPU: $total s; the 5-minute bound is checked with --device cuda"
fi
if ((FAILED == 0)); then echo "gpu_check: every check passed ($DEVICE)"; else echo "gpu_check: FAILED ($DEVICE)"; fi
exit "$FAILED"
