// ThroughputMonitorHook: Lightning's rates and names over a window of report points, from
// constant options and from the backend's cumulative counters, read on report steps only; the
// counter and step rules; validation.
#include <runhooks/error.hpp>
#include <runhooks/hooks/throughput_monitor_hook.hpp>
#include <runhooks/manual_clock.hpp>
#include <runhooks/monitored_session.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "support/fakes.hpp"

namespace {

struct SamplesSeen : runhooks::Key<std::int64_t> {
  static constexpr std::string_view name = "samples_seen";
};
struct TokensSeen : runhooks::Key<std::int64_t> {
  static constexpr std::string_view name = "tokens_seen";
};

// Each step takes 0.5 s of the manual clock and sees batch_sizes[step % size] samples of
// 100 tokens each; fetches counts the counter reads.
struct ThroughputBackend {
  runhooks::ManualClock clock;
  std::vector<std::int64_t> batch_sizes{32};
  std::int64_t step = 0;
  std::int64_t samples = 0;
  std::int64_t tokens = 0;
  mutable std::int64_t fetches = 0;
  std::int64_t abort_at = -1;  // run() at this step throws AbortedError (a lost backend)
  void run() {
    if (step == abort_at) throw runhooks::AbortedError("lost at step " + std::to_string(step));
    const std::int64_t batch = batch_sizes[static_cast<std::size_t>(step) % batch_sizes.size()];
    samples += batch;
    tokens += 100 * batch;
    ++step;
    clock.advance(0.5);
  }
  std::int64_t global_step() const { return step; }
  std::int64_t fetch(SamplesSeen) const { return ++fetches, samples; }
  std::int64_t fetch(TokensSeen) const { return ++fetches, tokens; }
};

// "name@step" -> value, every record.
struct Records {
  std::map<std::string, double> values;
  std::vector<std::int64_t> steps;
  auto output() {
    return runhooks::CallbackOutput{[this](std::string_view tag, double value, std::int64_t step) {
      values[std::string(tag) + "@" + std::to_string(step)] = value;
      if (steps.empty() || steps.back() != step) steps.push_back(step);
    }};
  }
};

}  // namespace

TEST_CASE("ThroughputMonitorHook: Lightning's rates from constant options, once the window is full") {
  runhooks::ManualClock clock;
  Records records;
  runhooks::MonitoredSession session{
      ThroughputBackend{clock},
      runhooks::ThroughputMonitorHook{{.every_n_steps = 2,
                                       .window_size = 3,
                                       .samples_per_step = 32,
                                       .items_per_step = 3200,
                                       .flops_per_sample = 1e9,
                                       .available_flops = 1e12,
                                       .world_size = 2},
                                      records.output(), clock}};
  for (int i = 0; i < 7; ++i) session.run();
  // Points at steps 1, 3, 5, 7: the window of 3 is full at step 5 (steps 1..5, 2 s).
  CHECK(records.steps == std::vector<std::int64_t>{5, 7});
  CHECK(records.values.at("device/batches_per_sec@5") == doctest::Approx(2.0));
  CHECK(records.values.at("batches_per_sec@5") == doctest::Approx(4.0));
  CHECK(records.values.at("device/samples_per_sec@5") == doctest::Approx(64.0));
  CHECK(records.values.at("samples_per_sec@5") == doctest::Approx(128.0));
  CHECK(records.values.at("device/items_per_sec@5") == doctest::Approx(6400.0));
  CHECK(records.values.at("items_per_sec@5") == doctest::Approx(12800.0));
  CHECK(records.values.at("device/flops_per_sec@5") == doctest::Approx(64e9));
  CHECK(records.values.at("flops_per_sec@5") == doctest::Approx(128e9));
  CHECK(records.values.at("device/mfu@5") == doctest::Approx(0.064));
  CHECK(records.values.size() == 18);  // nine metrics at steps 5 and 7
}

TEST_CASE("ThroughputMonitorHook: counters read from the backend on report steps only") {
  runhooks::ManualClock clock;
  Records records;
  runhooks::MonitoredSession session{
      ThroughputBackend{clock, {10, 30}},
      runhooks::ThroughputMonitorHook{runhooks::throughput_keys<SamplesSeen, TokensSeen>,
                                      {.every_n_steps = 4, .flops_per_sample = 2.0},
                                      records.output(), clock}};
  for (int i = 0; i < 9; ++i) session.run();
  // Points at steps 1 (10 samples), 5 (90) and 9 (170), two counters each.
  CHECK(session.raw_session().fetches == 6);
  CHECK(records.steps == std::vector<std::int64_t>{5, 9});
  CHECK(records.values.at("device/samples_per_sec@5") == doctest::Approx(80.0 / 2.0));
  CHECK(records.values.at("device/items_per_sec@9") == doctest::Approx(8000.0 / 2.0));
  CHECK(records.values.at("device/flops_per_sec@9") == doctest::Approx(80.0));
  CHECK(records.values.count("device/mfu@9") == 0);  // no available_flops
}

TEST_CASE("ThroughputMonitorHook: a counter that goes down is an error naming it; a re-created backend restarts the window") {
  runhooks::ManualClock clock;
  Records records;
  runhooks::MonitoredSession session{
      ThroughputBackend{clock},
      runhooks::ThroughputMonitorHook{runhooks::throughput_keys<SamplesSeen>,
                                      {.every_n_steps = 1}, records.output(), clock}};
  session.run();
  session.run();
  CHECK(records.values.at("device/samples_per_sec@2") == doctest::Approx(64.0));
  session.raw_session().samples = 5;
  CHECK_THROWS_WITH_AS(session.run(),
                       "runhooks: ThroughputMonitorHook: the counter samples_seen went down from "
                       "64 to 37 at global step 3; it must count every sample or item seen since "
                       "the start.",
                       std::runtime_error);

  // A recovery: the backend is lost in its third run and re-created from an older state (step
  // 1), which takes 100 s. The window starts again with the new backend, so neither the old
  // points nor the recovery's time enter a rate.
  records.values.clear();
  int created = 0;
  runhooks::MonitoredSession restored{
      [&] {
        ThroughputBackend backend{clock};
        if (created++ == 0) {
          backend.abort_at = 2;
        } else {
          backend.step = 1;
          backend.samples = 32;
          clock.advance(100.0);
        }
        return backend;
      },
      runhooks::ThroughputMonitorHook{runhooks::throughput_keys<SamplesSeen>,
                                      {.every_n_steps = 1}, records.output(), clock}};
  for (int i = 0; i < 3; ++i) restored.run();  // the third: lost, re-created, run again (step 2)
  CHECK(created == 2);
  CHECK(records.values.size() == 4);  // the first backend's step 2
  records.values.clear();
  restored.run();
  CHECK(records.values.at("device/samples_per_sec@3") == doctest::Approx(64.0));
}

TEST_CASE("ThroughputMonitorHook: every option is checked, naming option and value") {
  using runhooks::ThroughputMonitorHook;
  using runhooks::ThroughputOptions;
  CHECK_THROWS_WITH_AS(ThroughputMonitorHook(ThroughputOptions{.window_size = 1}),
                       "runhooks: ThroughputOptions::window_size must be at least 2, got 1.",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(ThroughputMonitorHook(ThroughputOptions{.every_n_steps = 0}),
                       "runhooks: ThroughputOptions::every_n_steps must be at least 1, got 0.",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(ThroughputMonitorHook(ThroughputOptions{.world_size = 0}),
                       "runhooks: ThroughputOptions::world_size must be at least 1, got 0.",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(ThroughputMonitorHook(ThroughputOptions{.samples_per_step = -4}),
                       "runhooks: ThroughputOptions::samples_per_step must be finite and greater "
                       "than 0, got -4.",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(ThroughputMonitorHook(ThroughputOptions{.items_per_step = 0}),
                       "runhooks: ThroughputOptions::items_per_step must be finite and greater "
                       "than 0, got 0.",
                       std::invalid_argument);
  CHECK_THROWS_AS(ThroughputMonitorHook(ThroughputOptions{
                      .samples_per_step = 1, .flops_per_sample = std::numeric_limits<double>::infinity()}),
                  std::invalid_argument);
  CHECK_THROWS_WITH_AS(
      ThroughputMonitorHook(ThroughputOptions{.samples_per_step = 8, .flops_per_sample = 1e6,
                                              .available_flops = -1}),
      "runhooks: ThroughputOptions::available_flops must be finite and greater than 0, got -1.",
      std::invalid_argument);
  CHECK_THROWS_WITH_AS(
      ThroughputMonitorHook(ThroughputOptions{.samples_per_step = 8, .available_flops = 1e12}),
      "runhooks: ThroughputOptions::available_flops needs flops_per_sample (MFU is FLOP/s over "
      "available_flops), got 1e+12.",
      std::invalid_argument);
  CHECK_THROWS_WITH_AS(ThroughputMonitorHook(ThroughputOptions{.flops_per_sample = 1e6}),
                       "runhooks: ThroughputOptions::flops_per_sample needs samples, got 1e+06 "
                       "without samples_per_step or a samples key.",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(
      ThroughputMonitorHook(runhooks::throughput_keys<SamplesSeen>,
                            ThroughputOptions{.samples_per_step = 32}),
      "runhooks: ThroughputOptions::samples_per_step is given, got 32, and so is the samples key "
      "samples_seen: give one source.",
      std::invalid_argument);
  CHECK_NOTHROW(ThroughputMonitorHook(ThroughputOptions{}));
}
