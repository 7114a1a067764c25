// ChiefStateHook: every rank starts from the chief's state, on any Collective engine. The chief
// (rank 0) saves its backend's state after its session creator restored or initialized it, and
// broadcasts the files; every other rank restores them (TensorFlow's chief and worker session
// creators, with no shared file system).
#pragma once

#include <runhooks/detail/config.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include <runhooks/checkpoint/checkpointable.hpp>
#include <runhooks/detail/checked.hpp>
#include <runhooks/detail/describe_exception.hpp>
#include <runhooks/detail/packed_directory.hpp>
#include <runhooks/distributed/collective.hpp>
#include <runhooks/log.hpp>

namespace runhooks {

struct ChiefStateOptions {
  // How long a worker waits for the chief's state before giving up with the engine's error
  // (TensorFlow's WorkerSessionCreator: max_wait_secs = 7200). At least 0, at most 1e9 s.
  double max_wait_secs = 7200.0;

  const ChiefStateOptions& validate() const {
    detail::checked_secs("ChiefStateOptions::max_wait_secs", max_wait_secs);
    return *this;
  }
};

namespace detail {

// Workers: the chief's header {1: state follows, 2: its error follows; bytes}, by a nonblocking
// broadcast polled every millisecond for at most max_wait_secs (`option` names that setting in
// the error).
template <Collective C>
void receive_chief_header(std::int64_t (&header)[2], C& collective, double max_wait_secs,
                          std::string_view option) {
  const auto max_wait = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::duration<double>(max_wait_secs));
  auto request = collective.start_broadcast(std::as_writable_bytes(std::span(header)), max_wait);
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                    std::chrono::duration<double>(max_wait_secs));
  bool logged = false;
  for (;;) {
    if (request.test()) {
      request.wait();  // at once; reports a failed broadcast
      return;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline)
      throw typename C::error_type("runhooks: " + std::string(collective.describe()) +
                                   ": the chief (rank 0) sent no initial state within " +
                                   std::string(option) + " = " + format_number(max_wait_secs) +
                                   " s; is rank 0 alive and creating its session?");
    if (!logged && now - start > std::chrono::seconds(5)) {
      logged = true;
      log(Severity::info, "runhooks: " + std::string(collective.describe()) +
                              ": waiting for the chief (rank 0) to create its session (at most " +
                              format_number(max_wait_secs) + " s)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// Collective over the group. On rank 0: prepare() (restore a checkpoint, ...), then the backend's
// state is saved into a private temporary directory and its files broadcast, or, if prepare() or
// the save threw, the error's message is, and rank 0 rethrows. On the other ranks: the files are
// restored into `backend`, or the engine's error_type quotes the chief's error. A backend that is
// not Checkpointable keeps its own state (the callers say whether that is an error).
template <Collective C, class Backend, class Prepare>
void share_chief_state(Backend& backend, C& collective, double max_wait_secs,
                       std::string_view max_wait_option, Prepare&& prepare) {
  using Error = typename C::error_type;
  const int rank = collective.rank(), size = collective.size();
  std::int64_t header[2] = {0, 0};
  std::string payload;
  std::exception_ptr chief_error;
  if (rank == 0) {
    try {
      prepare();
      if (size > 1) {
        const TemporaryDirectory<Error> directory;
        if constexpr (Checkpointable<Backend>) backend.save(directory.path() / "state");
        payload = pack_directory<Error>(directory.path());
      }
      header[0] = 1;
    } catch (...) {
      chief_error = std::current_exception();
      payload = describe_current_exception();
      header[0] = 2;
    }
    header[1] = static_cast<std::int64_t>(payload.size());
    // Nonblocking on rank 0 too: the workers' side is, and a blocking collective never matches a
    // nonblocking one (MPI-3.1 §5.12).
    auto request = collective.start_broadcast(
        std::as_writable_bytes(std::span(header)),
        std::chrono::duration_cast<std::chrono::milliseconds>(
            std::chrono::duration<double>(max_wait_secs)));
    request.wait();
  } else {
    receive_chief_header(header, collective, max_wait_secs, max_wait_option);
    if (header[1] < 0) throw Error("runhooks: the chief's state has a negative size");
    payload.resize(static_cast<std::size_t>(header[1]));
  }
  collective.broadcast(std::as_writable_bytes(std::span(payload.data(), payload.size())));
  if (rank == 0) {
    if (chief_error) std::rethrow_exception(chief_error);
    return;
  }
  if (header[0] != 1)
    throw Error("runhooks: " + std::string(collective.describe()) +
                ": the chief (rank 0) failed to create its session: " + payload);
  const TemporaryDirectory<Error> directory;
  unpack_directory<Error>(payload, directory.path());
  if constexpr (Checkpointable<Backend>) backend.restore(directory.path() / "state");
}

}  // namespace detail

// Sends the chief's state to the other ranks when the session is created: in
// after_create_session, after the chief's session creator restored its checkpoint and before any
// step. Put it first among the hooks every rank runs, so that each of them sees the chief's state
// in its own after_create_session (StopAtStepHook's num_steps then counts from the restored
// step). Collective: every rank's session has it. The backend should be Checkpointable (its
// save() and restore() carry the state); one that is not keeps its factory's state on every rank.
// A second creation (a recovery, which would happen on one rank alone) is the engine's error: a
// job of many processes does not recover one rank; it ends, and its rerun resumes.
template <Collective C>
class ChiefStateHook {
 public:
  explicit ChiefStateHook(C collective, ChiefStateOptions options = {})
      : ChiefStateHook(std::move(collective), options.validate().max_wait_secs,
                       "ChiefStateOptions::max_wait_secs") {}

  template <class Backend>
  void after_create_session(Backend& session) {
    if (created_)
      throw typename C::error_type(
          "runhooks: " + std::string(collective_.describe()) +
          ": the backend was re-created on this rank alone (a recovery), which would break every "
          "rank's sequence of collectives; rerun the job to resume from the chief's checkpoint.");
    created_ = true;
    detail::share_chief_state(session, collective_, max_wait_secs_, max_wait_option_, [] {});
  }

  C& collective() noexcept { return collective_; }

 protected:
  // For an engine's named form (MpiChiefStateHook): `max_wait_option` names the setting of
  // max_wait_secs in the timeout's error. max_wait_secs must already be valid.
  ChiefStateHook(C collective, double max_wait_secs, std::string_view max_wait_option)
      : collective_(std::move(collective)), max_wait_secs_(max_wait_secs),
        max_wait_option_(max_wait_option) {}

 private:
  C collective_;
  double max_wait_secs_;
  std::string_view max_wait_option_;
  bool created_ = false;
};

}  // namespace runhooks
