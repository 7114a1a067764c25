// Coordinator: the stop flag and first error shared by a session, its hooks and their threads
// (TensorFlow's tf.train.Coordinator as MonitoredSession uses it, sections 1.5-1.7 of
// tf-semantics.md; TF's own coordinator_test.py is not part of sections E-H).
//
// Deliberate differences: threads are std::jthreads started by the coordinator and receive a
// std::stop_token (TF registers Python threads and they poll coord.should_stop()); join() always
// joins them before returning, even past the grace period (a jthread cannot be abandoned), and
// then reports the live threads as UsageError unless ignore_live_threads is set.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <stop_token>
#include <thread>

#include <runhooks/coordinator.hpp>
#include <runhooks/error.hpp>

#include <support/fakes.hpp>

using namespace std::chrono_literals;

TEST_CASE("Coordinator: request_stop without an exception stops it and raises nothing") {
  runhooks::Coordinator coord;
  CHECK_FALSE(coord.should_stop());
  CHECK_FALSE(coord.stop_token().stop_requested());
  coord.request_stop();
  CHECK(coord.should_stop());
  CHECK(coord.stop_token().stop_requested());
  CHECK_NOTHROW(coord.raise_requested_exception());
  CHECK(coord.requested_exception() == nullptr);
  CHECK_NOTHROW(coord.join());
}

TEST_CASE("Coordinator: request_stop with an exception keeps it; raise_requested_exception and join re-throw it") {
  runhooks::Coordinator coord;
  coord.request_stop(std::make_exception_ptr(std::runtime_error("a thread wants to stop")));
  CHECK(coord.should_stop());
  CHECK_THROWS_WITH_AS(coord.raise_requested_exception(), "a thread wants to stop",
                       std::runtime_error);
  CHECK_THROWS_WITH_AS(coord.join(), "a thread wants to stop", std::runtime_error);
}

TEST_CASE("Coordinator: the first exception is kept, later ones are dropped") {
  runhooks::Coordinator coord;
  coord.request_stop(std::make_exception_ptr(runhooks::AbortedError("first")));
  coord.request_stop(std::make_exception_ptr(std::runtime_error("second")));
  coord.request_stop();
  CHECK_THROWS_WITH_AS(coord.raise_requested_exception(), "first", runhooks::AbortedError);
}

TEST_CASE("Coordinator: an exception after a clean stop is still kept") {
  // TF: request_stop(ex) after request_stop() records ex if none was recorded.
  runhooks::Coordinator coord;
  coord.request_stop();
  coord.request_stop(std::make_exception_ptr(std::runtime_error("late")));
  CHECK_THROWS_WITH_AS(coord.raise_requested_exception(), "late", std::runtime_error);
}

TEST_CASE("Coordinator: the stop_token reaches threads it started") {
  runhooks::Coordinator coord;
  std::atomic<int> stopped{0};
  std::atomic<int> started{0};
  for (int i = 0; i < 3; ++i) {
    coord.start([&](std::stop_token token) {
      ++started;
      std::mutex mutex;
      std::condition_variable_any cv;
      std::unique_lock lock(mutex);
      cv.wait(lock, token, [] { return false; });
      if (token.stop_requested()) ++stopped;
    });
  }
  while (started.load() < 3) std::this_thread::yield();
  CHECK(stopped.load() == 0);
  coord.request_stop();
  CHECK_NOTHROW(coord.join(10s));
  CHECK(stopped.load() == 3);
}

TEST_CASE("Coordinator: an exception escaping a started thread stops the coordinator and the other threads") {
  runhooks::Coordinator coord;
  std::atomic<bool> other_stopped{false};
  coord.start([&](std::stop_token token) {
    std::mutex mutex;
    std::condition_variable_any cv;
    std::unique_lock lock(mutex);
    cv.wait(lock, token, [] { return false; });
    other_stopped = token.stop_requested();
  });
  coord.start([](std::stop_token) { throw runhooks::AbortedError("thread failed"); });
  // The failing thread stops the coordinator by itself.
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!coord.should_stop() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  CHECK(coord.should_stop());
  CHECK_THROWS_WITH_AS(coord.join(10s), "thread failed", runhooks::AbortedError);
  CHECK(other_stopped.load());
}

TEST_CASE("Coordinator: join re-throws a thread's exception after joining every thread") {
  runhooks::Coordinator coord;
  std::atomic<bool> finished{false};
  coord.start([](std::stop_token) { throw std::runtime_error("boom"); });
  coord.start([&](std::stop_token) {
    std::this_thread::sleep_for(20ms);
    finished = true;
  });
  CHECK_THROWS_WITH_AS(coord.join(10s), "boom", std::runtime_error);
  CHECK(finished.load());
}

TEST_CASE("Coordinator: join with a grace period and live threads throws UsageError unless ignore_live_threads") {
  SUBCASE("live threads are an error") {
    runhooks::Coordinator coord;
    std::atomic<bool> release{false};
    coord.start([&](std::stop_token) {  // ignores the stop token
      while (!release.load()) std::this_thread::sleep_for(1ms);
    });
    std::thread releaser([&] {
      std::this_thread::sleep_for(200ms);
      release = true;
    });
    CHECK_THROWS_WITH_AS(coord.join(10ms), "Coordinator stopped with threads still running: 1",
                         runhooks::UsageError);
    releaser.join();
  }
  SUBCASE("ignore_live_threads") {
    runhooks::Coordinator coord;
    std::atomic<bool> release{false};
    coord.start([&](std::stop_token) {
      while (!release.load()) std::this_thread::sleep_for(1ms);
    });
    std::thread releaser([&] {
      std::this_thread::sleep_for(200ms);
      release = true;
    });
    CHECK_NOTHROW(coord.join(10ms, /*ignore_live_threads=*/true));
    releaser.join();
  }
  SUBCASE("a thread's exception wins over the live-thread error") {
    runhooks::Coordinator coord;
    std::atomic<bool> release{false};
    coord.start([&](std::stop_token) {
      while (!release.load()) std::this_thread::sleep_for(1ms);
    });
    coord.request_stop(std::make_exception_ptr(std::runtime_error("reported")));
    std::thread releaser([&] {
      std::this_thread::sleep_for(200ms);
      release = true;
    });
    CHECK_THROWS_WITH_AS(coord.join(10ms), "reported", std::runtime_error);
    releaser.join();
  }
}

TEST_CASE("Coordinator: the destructor stops and joins its threads") {
  std::atomic<bool> stopped{false};
  {
    runhooks::Coordinator coord;
    coord.start([&](std::stop_token token) {
      std::mutex mutex;
      std::condition_variable_any cv;
      std::unique_lock lock(mutex);
      cv.wait(lock, token, [] { return false; });
      stopped = token.stop_requested();
    });
  }
  CHECK(stopped.load());
}

TEST_CASE("G67 _CoordinatedSession: an exception in the main thread's run does not stop the coordinator") {
  fakes::FakeBackend backend;
  backend.throw_at(1, std::invalid_argument("None has invalid type"));
  runhooks::MonitoredSession session{std::move(backend)};
  CHECK_THROWS_WITH_AS(session.run(), "None has invalid type", std::invalid_argument);
  CHECK_FALSE(session.coordinator().should_stop());
  CHECK_FALSE(session.should_stop());
}

TEST_CASE("G67 _CoordinatedSession: close() stops and joins the started threads, even after an exception") {
  fakes::FakeBackend backend;
  backend.throw_at(1, std::invalid_argument("None has invalid type"));
  runhooks::MonitoredSession session{std::move(backend)};
  std::atomic<bool> stopped{false};
  session.coordinator().start([&](std::stop_token token) {
    std::mutex mutex;
    std::condition_variable_any cv;
    std::unique_lock lock(mutex);
    cv.wait(lock, token, [] { return false; });
    stopped = token.stop_requested();
  });
  CHECK_THROWS_AS(session.run(), std::invalid_argument);
  CHECK_FALSE(stopped.load());
  session.close();
  CHECK(stopped.load());
  CHECK(session.should_stop());
}
