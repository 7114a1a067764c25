// C10dCollective: a c10d process group (Gloo's, from C10dEnvironment) as a runhooks::Collective
// engine, so that the generic rules (<runhooks/distributed/...>) run under torchrun.
#pragma once

#include <runhooks/detail/config.hpp>

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>
#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <runhooks/distributed/collective.hpp>
#include <runhooks/torch/distributed/torchrun_environment.hpp>

namespace runhooks {

namespace detail {

// The job's identity for c10d_abort_job: set by C10dEnvironment once it knows it (-1: not yet).
inline constinit int c10d_rank = -1;
inline constinit int c10d_size = -1;
// C10dEnvironment objects alive, and whether a stop vote was left by an exception while one was
// (then ~C10dEnvironment ends the job instead of tearing down while the others wait).
inline constinit int c10d_environments = 0;
inline constinit bool c10d_vote_left_by_exception = false;

inline std::string c10d_who() {
  if (c10d_rank < 0) return "a process not yet in a c10d job";
  return "rank " + std::to_string(c10d_rank) + " of " + std::to_string(c10d_size);
}

// An exception's message without c10's C++ backtrace (which c10::Error::what() appends).
inline std::string c10d_message(const std::exception& error) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&error))
    return c10_error->what_without_backtrace();
  return error.what();
}

}  // namespace detail

// Prints "runhooks: rank R of N: <what>; ending the job" to stderr (and into torchrun's error
// file for this worker, which torchrun's failure report shows) and ends this process at once with
// exit status `code` (std::_Exit: no destructor may wait for a peer). The other ranks' next
// collective fails at once on the closed connection (or within the timeout), and torchrun, seeing
// a worker fail, stops the others and reports this rank and its exit status (or restarts the
// group, with --max-restarts).
[[noreturn]] inline void c10d_abort_job(std::string_view what, int code = 1) noexcept {
  std::fflush(stdout);
  std::fprintf(stderr, "runhooks: %s: %.*s; ending the job\n", detail::c10d_who().c_str(),
               static_cast<int>(what.size()), what.data());
  std::fflush(stderr);
  try {
    write_torchrun_error_file("runhooks: " + detail::c10d_who() + ": " + std::string(what));
  } catch (...) {  // no memory for the message: stderr has it
  }
  std::_Exit(code);
}

// A model of runhooks::Collective on a c10d backend (a process group: ProcessGroupGloo from
// C10dEnvironment; any c10d::Backend that takes CPU tensors). A handle: copies share the backend,
// so every hook may hold one. Each operation is one c10d collective on a CPU tensor:
//   allreduce_max        allreduce (ReduceOp::MAX) of an int64 tensor, waited for
//   start_allreduce_max  the same, the request holding c10d's Work
//   start_broadcast      broadcast of a uint8 tensor from rank 0, with max_wait plus the
//                        backend's timeout as this operation's timeout, so that the backend's
//                        (C10dOptions::timeout_secs) does not end a wait the caller allows
//   broadcast            broadcast of a uint8 tensor from rank 0, waited for (nothing for 0 bytes)
//   barrier              barrier, waited for
//   abandon              with a C10dEnvironment alive: ~C10dEnvironment ends the job, after the
//                        exception has been reported; without one: c10d_abort_job at once
// A peer that died fails the operation at once (its connection closes); one that hangs, after
// the backend's timeout (C10dOptions::timeout_secs). Either is a C10dError naming this rank, the
// operation and c10d's message. Tensors are copied in and out (a few bytes): the backend's
// threads never write into the caller's memory after an operation was given up.
class C10dCollective {
 public:
  using error_type = C10dError;

  class request_type {
   public:
    request_type() = default;

    bool test() { return !work_ || work_->isCompleted(); }
    void wait() {
      if (!work_) return;
      const c10::intrusive_ptr<c10d::Work> work = std::exchange(work_, {});
      try {
        work->wait();
      } catch (const std::exception& e) {
        throw C10dError("runhooks: " + who_ + ": " + operation_ + " failed: " +
                        detail::c10d_message(e));
      }
      if (!out_.empty()) std::memcpy(out_.data(), tensor_.const_data_ptr(), out_.size());
      tensor_ = at::Tensor();
    }

   private:
    friend class C10dCollective;
    c10::intrusive_ptr<c10d::Work> work_;
    at::Tensor tensor_;         // what the operation reads and writes, owned by it too
    std::span<std::byte> out_;  // where wait() copies the result
    std::string who_;
    std::string operation_;
  };

  // The chief is rank 0 of `backend`, whose collectives time out after `timeout` (the one it was
  // made with: C10dOptions::timeout_secs).
  C10dCollective(c10::intrusive_ptr<c10d::Backend> backend, std::chrono::milliseconds timeout)
      : backend_(std::move(backend)), timeout_(timeout), rank_(backend_->getRank()),
        size_(backend_->getSize()) {}

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  std::string describe() const {
    return "rank " + std::to_string(rank_) + " of " + std::to_string(size_);
  }

  void allreduce_max(std::span<std::int64_t> values) { start_allreduce_max(values).wait(); }
  request_type start_allreduce_max(std::span<std::int64_t> values) {
    request_type request = prepare(std::as_writable_bytes(values), at::kLong, "allreduce");
    std::vector<at::Tensor> tensors{request.tensor_};
    c10d::AllreduceOptions options;
    options.reduceOp = c10d::ReduceOp::MAX;
    request.work_ = run(request, [&] { return backend_->allreduce(tensors, options); });
    return request;
  }
  template <class Rep, class Period>
  request_type start_broadcast(std::span<std::byte> bytes,
                               std::chrono::duration<Rep, Period> max_wait) {
    request_type request = prepare(bytes, at::kByte, "broadcast from rank 0");
    std::vector<at::Tensor> tensors{request.tensor_};
    c10d::BroadcastOptions options;
    options.rootRank = 0;
    options.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(max_wait) + timeout_;
    request.work_ = run(request, [&] { return backend_->broadcast(tensors, options); });
    return request;
  }
  void broadcast(std::span<std::byte> bytes) {
    if (bytes.empty()) return;  // the same on every rank: the size is agreed beforehand
    request_type request = prepare(bytes, at::kByte, "broadcast from rank 0");
    std::vector<at::Tensor> tensors{request.tensor_};
    c10d::BroadcastOptions options;
    options.rootRank = 0;
    request.work_ = run(request, [&] { return backend_->broadcast(tensors, options); });
    request.wait();
  }
  void barrier() {
    request_type request;
    request.who_ = describe();
    request.operation_ = "barrier";
    request.work_ = run(request, [&] { return backend_->barrier(c10d::BarrierOptions{}); });
    request.wait();
  }

  void abandon(std::string_view rule) noexcept {
    if (detail::c10d_environments > 0) {
      detail::c10d_vote_left_by_exception = true;
    } else {
      c10d_abort_job(std::string(rule) +
                     ": the session ended without end() (by an exception?) while the other "
                     "ranks may wait for this one in a stop vote");
    }
  }

  const c10::intrusive_ptr<c10d::Backend>& backend() const noexcept { return backend_; }

 private:
  // A request whose tensor holds a copy of `bytes` (the operation's input on every rank; its
  // result is copied back by wait()).
  request_type prepare(std::span<std::byte> bytes, at::ScalarType type, const char* operation) {
    request_type request;
    request.who_ = describe();
    request.operation_ = operation;
    const auto element = static_cast<std::size_t>(c10::elementSize(type));
    request.tensor_ = at::empty({static_cast<std::int64_t>(bytes.size() / element)}, type);
    if (!bytes.empty()) std::memcpy(request.tensor_.mutable_data_ptr(), bytes.data(), bytes.size());
    request.out_ = bytes;
    return request;
  }

  // Issues the operation; a failure to issue it is a C10dError like a failure to complete it.
  template <class Issue>
  c10::intrusive_ptr<c10d::Work> run(const request_type& request, Issue&& issue) {
    try {
      return std::forward<Issue>(issue)();
    } catch (const std::exception& e) {
      throw C10dError("runhooks: " + request.who_ + ": " + request.operation_ +
                      " failed: " + detail::c10d_message(e));
    }
  }

  c10::intrusive_ptr<c10d::Backend> backend_;
  std::chrono::milliseconds timeout_;
  int rank_;
  int size_;
};

static_assert(Collective<C10dCollective>);

}  // namespace runhooks
