// SpikeHook and SpikeDetector: the raise action, the warmup NaN that Lightning would keep,
// NanTensorHook's inf_too on a NaN-or-inf loss, and validation. Lightning's own decisions are
// replayed in tests/hooks/keras_lightning_reference.cpp.
#include <runhooks/hooks/nan_tensor_hook.hpp>
#include <runhooks/hooks/spike_hook.hpp>
#include <runhooks/monitored_session.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <stdexcept>
#include <vector>

#include "support/fakes.hpp"

namespace {
struct Loss : runhooks::Key<double> {
  static constexpr std::string_view name = "loss";
};
struct LossBackend {
  std::vector<double> values;
  std::int64_t step = 0;
  void run() { ++step; }
  std::int64_t global_step() const { return step; }
  double fetch(Loss) const { return values.at(static_cast<std::size_t>(step - 1)); }
};
constexpr double nan_value = std::numeric_limits<double>::quiet_NaN();
constexpr double inf_value = std::numeric_limits<double>::infinity();
}  // namespace

TEST_CASE("SpikeHook: Lightning's action raises TrainingSpikeError, naming the step, after the log line") {
  fakes::LogCapture capture;
  runhooks::MonitoredSession session{LossBackend{{1.0, 1.0, 1.0, 3.5}}, runhooks::SpikeHook<Loss>()};
  session.run();
  session.run();
  session.run();
  CHECK_THROWS_WITH_AS(session.run(), "Training spike detected at global step 4",
                       runhooks::TrainingSpikeError);
  CHECK(capture.lines() == std::vector<std::string>{
                               "SpikeHook: loss spike at global step 4: loss = 3.5, running mean "
                               "1 (rtol 2); steps 3 and 4 recorded as bad."});
}

TEST_CASE("SpikeDetector: a NaN in the warmup is not kept (Lightning would average it in)") {
  runhooks::SpikeDetector detector({.warmup = 2});
  CHECK_FALSE(detector.observe(1.0, 0));
  CHECK_FALSE(detector.observe(nan_value, 1));
  CHECK(detector.mean() == 1.0);
  CHECK(detector.observe(3.0, 2));  // Lightning: mean NaN, no spike for the next 10 values
}

TEST_CASE("NanTensorHook inf_too: +inf and -inf fail like NaN, with the value in the line") {
  fakes::LogCapture capture;
  runhooks::MonitoredSession session{LossBackend{{1.0, -inf_value}},
                                     runhooks::NanTensorHook<Loss>({.inf_too = true})};
  session.run();
  CHECK_THROWS_AS(session.run(), runhooks::NanLossDuringTrainingError);
  CHECK(capture.lines() == std::vector<std::string>{"Model diverged with loss = -inf."});
}

TEST_CASE("SpikeOptions are validated") {
  using O = runhooks::SpikeOptions;
  CHECK_THROWS_WITH_AS((O{.window = 0}.validate()),
                       "runhooks: SpikeOptions::window must be at least 1, got 0.", std::invalid_argument);
  CHECK_THROWS_WITH_AS((O{.warmup = -1}.validate()),
                       "runhooks: SpikeOptions::warmup must be at least 0, got -1.", std::invalid_argument);
  CHECK_THROWS_WITH_AS((O{.atol = nan_value}.validate()),
                       "runhooks: SpikeOptions::atol must be finite, got nan.", std::invalid_argument);
  CHECK_THROWS_WITH_AS((O{.rtol = inf_value}.validate()),
                       "runhooks: SpikeOptions::rtol must be finite, got inf.", std::invalid_argument);
  CHECK_THROWS_AS(runhooks::SpikeHook<Loss>({.window = -3}), std::invalid_argument);
}
