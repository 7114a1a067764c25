# ./dev fuzz: the long fuzzing and property runs that ./dev test runs only briefly, one after
# another in one clang++ build; each failure says how to replay it.

usage_fuzz() {
  cat <<'EOF'
./dev fuzz [--seconds S] [--sequences N] [--cases C] [--kills K]
  The long runs kept out of ./dev test, one after another, in build/fuzz (clang++, debug;
  tests/fuzz/ under libFuzzer with ASan and UBSan):
    the event-file reader under libFuzzer for S seconds (default 600; ./dev test: 20),
      corpus and crashes in build/fuzz/tests/fuzz/event_reader;
    Histogram and the summary encoding under libFuzzer for S seconds too (./dev test: 20),
      corpus and crashes in build/fuzz/tests/fuzz/histogram;
    the protocol property test with N random fault sequences (default 1000000; ./dev test:
      10000);
    the checkpoint deletion-safety property test with C random directories, state files and
      kills (default 1000000; ./dev test: 4000 in gcc, 2000 in clang, 1000 in asan);
    the checkpoint crash-resume test with K SIGKILLs at random instants (default 1000;
      ./dev test: 50), RUNHOOKS_CRASH_SEED=N to vary the instants.
  Each failure is reported with how to replay it; the exit status is 1 if any run failed.
EOF
}

FUZZ_PACKAGES=("${BASE_PACKAGES[@]}" clang libclang-rt-dev doctest-dev librapidcheck-dev)
FUZZ_DIR=build/fuzz
# What it builds and runs, and where libFuzzer keeps corpora and crashes: paths inside $FUZZ_DIR
# (a program's path is also its `meson compile` target; usage_fuzz names the corpora too).
FUZZ_EVENT_READER=tests/fuzz/event_reader_fuzz
FUZZ_EVENT_SEEDS=tests/fuzz/make_event_seeds
FUZZ_EVENT_WORK=tests/fuzz/event_reader # its corpus and crashes
FUZZ_HISTOGRAM=tests/fuzz/histogram_fuzz
FUZZ_HISTOGRAM_SEEDS=tests/fuzz/make_histogram_seeds
FUZZ_HISTOGRAM_WORK=tests/fuzz/histogram # its corpus and crashes
FUZZ_PROTOCOL_PROPERTY=tests/property/test_protocol_property
FUZZ_DELETION_PROPERTY=tests/property/test_checkpoint_deletion_property
FUZZ_CHECKPOINT_FAULTS=tests/checkpoint/test_checkpoint_faults
FUZZ_CHECKPOINT_HELPER=tests/checkpoint/checkpoint_helper
# In the source tree: the libFuzzer driver and the histogram fuzzer's dictionary.
FUZZ_RUNNER=tests/fuzz/run_fuzz.py
FUZZ_HISTOGRAM_DICT=tests/fuzz/histogram.dict

cmd_fuzz() {
  local seconds=600 sequences=1000000 cases=1000000 kills=1000
  while (($# > 0)); do
    case $1 in
      --seconds | --sequences | --cases | --kills)
        (($# >= 2)) || bad_usage fuzz "$1 needs a value"
        [[ $2 =~ ^[1-9][0-9]*$ ]] || bad_usage fuzz "$1 must be a positive integer, got '$2'"
        case $1 in
          --seconds) seconds=$2 ;;
          --sequences) sequences=$2 ;;
          --cases) cases=$2 ;;
          --kills) kills=$2 ;;
        esac
        shift 2
        ;;
      *) bad_usage fuzz "unknown argument '$1'" ;;
    esac
  done
  ensure_packages "${FUZZ_PACKAGES[@]}"
  pick_meson
  local dir=$FUZZ_DIR
  configure "$dir" clang++ "${COMMON_SETUP[@]}" -Dbuildtype=debug -Dbenchmarks=disabled \
    -Dexamples=disabled -Dmpi=disabled -Dtorch=disabled || die "configuring $dir failed"
  "$MESON" compile -C "$dir" "$FUZZ_EVENT_READER" "$FUZZ_EVENT_SEEDS" \
    "$FUZZ_HISTOGRAM" "$FUZZ_HISTOGRAM_SEEDS" \
    "$FUZZ_PROTOCOL_PROPERTY" "$FUZZ_DELETION_PROPERTY" \
    "$FUZZ_CHECKPOINT_FAULTS" "$FUZZ_CHECKPOINT_HELPER" ||
    die "building the fuzz targets in $dir failed"

  note "[fuzz] event reader, $seconds s"
  python3 "$FUZZ_RUNNER" --fuzzer "$dir/$FUZZ_EVENT_READER" \
    --seed-maker "$dir/$FUZZ_EVENT_SEEDS" --work "$dir/$FUZZ_EVENT_WORK" \
    --max-total-time "$seconds" ||
    record_failure "fuzz: event reader (crashes in $dir/$FUZZ_EVENT_WORK)"

  note "[fuzz] histogram and summary encoding, $seconds s"
  python3 "$FUZZ_RUNNER" --fuzzer "$dir/$FUZZ_HISTOGRAM" \
    --seed-maker "$dir/$FUZZ_HISTOGRAM_SEEDS" --work "$dir/$FUZZ_HISTOGRAM_WORK" \
    --max-total-time "$seconds" -- "-dict=$FUZZ_HISTOGRAM_DICT" ||
    record_failure "fuzz: histogram (crashes in $dir/$FUZZ_HISTOGRAM_WORK)"

  note "[fuzz] protocol property test, $sequences sequences"
  RUNHOOKS_PROPERTY_SEQUENCES=$sequences "$dir/$FUZZ_PROTOCOL_PROPERTY" ||
    record_failure "fuzz: protocol property test (the failing sequence is printed above)"

  note "[fuzz] checkpoint deletion-safety property test, $cases cases"
  RUNHOOKS_PROPERTY_CASES=$cases "$dir/$FUZZ_DELETION_PROPERTY" ||
    record_failure "fuzz: checkpoint deletion property test (RC_PARAMS=\"reproduce=...\" above replays it)"

  note "[fuzz] checkpoint crash-resume, $kills kills"
  RUNHOOKS_CRASH_KILLS=$kills RUNHOOKS_CHECKPOINT_HELPER=$dir/$FUZZ_CHECKPOINT_HELPER \
    "$dir/$FUZZ_CHECKPOINT_FAULTS" --test-case='crash-resume*' ||
    record_failure "fuzz: checkpoint crash-resume (RUNHOOKS_CRASH_SEED replays its instants)"

  local failure
  for failure in "${FAILURES[@]}"; do
    echo "failed: $failure"
  done
  ((FAILED == 0)) || return 1
  echo "fuzz: every run passed"
}
