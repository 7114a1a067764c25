// NanTensorHook: TensorFlow's rule (tf-semantics.md §2.5): the loss is fetched on every step; a
// NaN loss raises NanLossDuringTrainingError ("NaN loss during training."), or, with
// fail_on_nan_loss = false, logs "Model diverged with loss = NaN." and requests a stop.

#include <runhooks/error.hpp>
#include <runhooks/hooks/nan_tensor_hook.hpp>
#include <runhooks/monitored_session.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "support/fakes.hpp"

using runhooks::NanTensorHook;

namespace {

struct Loss : runhooks::Key<double> {};
struct Loss32 : runhooks::Key<float> {};

// The loss after step k is losses[k - 1]; counts the fetches.
struct LossBackend {
  std::vector<double> losses;
  std::int64_t step = 0;
  int fetches = 0;
  void run() { ++step; }
  std::int64_t global_step() const { return step; }
  double fetch(Loss) {
    ++fetches;
    return losses.at(static_cast<std::size_t>(step - 1));
  }
  float fetch(Loss32) { return static_cast<float>(fetch(Loss{})); }
};

// Notes that end() ran.
struct EndProbe {
  bool* ended;
  void end(auto&) { *ended = true; }
};

constexpr double not_a_number = std::numeric_limits<double>::quiet_NaN();
constexpr double infinity = std::numeric_limits<double>::infinity();

}  // namespace

TEST_CASE("NanTensorHook: fail_on_nan_loss (the default) throws NanLossDuringTrainingError") {
  fakes::LogCapture capture;
  runhooks::MonitoredSession session{LossBackend{{1.0, 0.5, not_a_number, 0.25}}, NanTensorHook<Loss>()};
  session.run();
  session.run();
  CHECK(capture.lines().empty());
  CHECK_THROWS_WITH_AS(session.run(), "NaN loss during training.",
                       runhooks::NanLossDuringTrainingError);
  CHECK(capture.contains("Model diverged with loss = NaN."));
  // A named error type, and one of runhooks' errors.
  CHECK(std::is_base_of_v<runhooks::Error, runhooks::NanLossDuringTrainingError>);
}

TEST_CASE("NanTensorHook: fail_on_nan_loss = false logs and requests a stop") {
  fakes::LogCapture capture;
  runhooks::MonitoredSession session{LossBackend{{1.0, not_a_number, 0.25}},
                                     NanTensorHook<Loss32>({.fail_on_nan_loss = false})};
  session.run();
  CHECK_FALSE(session.should_stop());
  session.run();
  CHECK(session.should_stop());
  CHECK(capture.lines() == std::vector<std::string>{"Model diverged with loss = NaN."});
  CHECK(session.raw_session().step == 2);
}

TEST_CASE("NanTensorHook checks every step, and only NaN (as np.isnan)") {
  fakes::LogCapture capture;
  runhooks::MonitoredSession session{LossBackend{{infinity, -infinity, 3.0, 1e300}}, NanTensorHook<Loss>()};
  for (int i = 0; i < 4; ++i) session.run();
  CHECK_FALSE(session.should_stop());
  CHECK(session.raw_session().fetches == 4);  // one fetch per step
  CHECK(capture.lines().empty());
}

TEST_CASE("NanTensorHook shares its fetch with the caller's: one backend read per step") {
  runhooks::MonitoredSession session{LossBackend{{2.0, 1.0}}, NanTensorHook<Loss>()};
  const auto values = session.run(runhooks::SessionRunArgs{runhooks::fetch<Loss>()});
  CHECK(*values[Loss{}] == 2.0);
  CHECK(session.raw_session().fetches == 1);
}

TEST_CASE("NanTensorHook: the NaN stop is a clean end, the NaN failure is not") {
  SUBCASE("stop: run_loop ends and every end() runs") {
    bool ended = false;
    runhooks::MonitoredSession session{LossBackend{{1.0, not_a_number, 0.5}},
                                       NanTensorHook<Loss>({.fail_on_nan_loss = false}),
                                       EndProbe{&ended}};
    runhooks::run_loop(session);
    CHECK(ended);
    CHECK(session.raw_session().step == 2);
  }
  SUBCASE("failure: the error leaves run_loop and no end() runs") {
    bool ended = false;
    runhooks::MonitoredSession session{LossBackend{{not_a_number}}, NanTensorHook<Loss>(),
                                       EndProbe{&ended}};
    CHECK_THROWS_AS(runhooks::run_loop(session), runhooks::NanLossDuringTrainingError);
    CHECK_FALSE(ended);
  }
}
