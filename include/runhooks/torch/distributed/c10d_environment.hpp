// C10dEnvironment: makes a process a worker of a torchrun job (torchrun's variables read
// strictly, the job's c10d store reached, a Gloo process group whose timeout ends the job in about
// a minute when a peer is gone), and gives a rank that fails the one answer: report the error
// with its rank, then end the process, so that torchrun stops (or restarts) the group.
#pragma once

#include <runhooks/detail/config.hpp>

// ProcessGroupGloo.hpp declares nothing without USE_C10D_GLOO (libtorch's own switch), and it
// includes gloo's headers, which the torch wheel does not ship (Debian: libgloo-dev). Meson's
// torch_distributed feature passes both.
#if !defined(USE_C10D_GLOO)
#error "runhooks: <runhooks/torch/distributed/c10d_environment.hpp> needs c10d's Gloo: compile with -DUSE_C10D_GLOO and gloo's headers on the include path (Debian: apt-get install libgloo-dev)"
#endif

#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#if defined(__linux__)
#include <sys/prctl.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include <runhooks/detail/checked.hpp>
#include <runhooks/detail/describe_exception.hpp>
#include <runhooks/torch/distributed/c10d_collective.hpp>
#include <runhooks/torch/distributed/torchrun_environment.hpp>

namespace runhooks {

struct C10dOptions {
  // How long a rank waits for its peers: to reach the job's store, for every rank to join the
  // process group, and in every collective. A peer that died usually fails the collective at once
  // (its connection closes); one that hangs, or never comes, ends the job after this long. Gloo's
  // default is 30 minutes; 60 s ends a stuck job in about a minute. Greater than 0, at most 1e9.
  double timeout_secs = 60.0;

  const C10dOptions& validate() const {
    detail::checked_secs("C10dOptions::timeout_secs", timeout_secs, 0.0, /*min_exclusive=*/true);
    return *this;
  }
  std::chrono::milliseconds timeout() const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::duration<double>(timeout_secs));
  }
};

namespace detail {

#if defined(__linux__)
// What C10dEnvironment's launcher-death handler reads (set before it is installed): the
// launcher's pid, and the line to print before leaving the job (size 0: stop it with SIGTERM).
inline constinit std::atomic<pid_t> c10d_launcher_pid{0};
inline constinit char c10d_leave_line[512] = {};
inline constinit std::atomic<std::size_t> c10d_leave_line_size{0};
#endif

// The current exception's message for a report, without c10's C++ backtrace.
inline std::string describe_current_c10d_exception() {
  const std::exception_ptr error = std::current_exception();
  if (!error) return "no exception";
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return c10d_message(e);
  } catch (...) {
    return "an exception not derived from std::exception";
  }
}

}  // namespace detail

// Runs body() and returns what it returns. An exception leaving it is printed with this rank
// ("runhooks: rank 2 of 4: error: <what()>; ending the job") and ends the process with exit
// status 1 (c10d_abort_job): the other ranks' collectives then fail at once, and torchrun reports
// this rank as the first failure.
template <class Body>
decltype(auto) c10d_run_or_abort(Body&& body) noexcept {
  try {
    return std::forward<Body>(body)();
  } catch (...) {
    c10d_abort_job("error: " + detail::without_own_prefix(detail::describe_current_c10d_exception(),
                                                          detail::c10d_who()));
  }
}

// This worker's membership of the torchrun job, for the life of the object:
//   1. torchrun's variables (TorchrunEnvironment; a missing or malformed one is a C10dError that
//      names it and says to launch with torchrun);
//   2. the job's store, a TCPStore at MASTER_ADDR:MASTER_PORT: a client of torchrun's agent's
//      store when TORCHELASTIC_USE_AGENT_STORE is True (torchrun's default), else served by rank
//      0 and waiting for every rank, as torch.distributed's env:// does. Its keys are kept under
//      "runhooks/<TORCHELASTIC_RUN_ID>/<TORCHELASTIC_RESTART_COUNT>/", so that a group restarted
//      by torchrun never meets the keys of the attempt before it (the agent's store outlives it);
//   3. a Gloo process group over it (ProcessGroupGloo, one device: GLOO_SOCKET_IFNAME's
//      interfaces, or the host name's address), whose every collective times out after
//      C10dOptions::timeout_secs.
// A store that never answers (nothing listening, or a port that accepts and never answers), or
// ranks that never all join, is a C10dError naming this rank, the address and the timeout, after
// about timeout_secs (at most 2 s more: connect_store); a store this rank cannot serve (MASTER_PORT
// in use) is one at once, naming c10d's cause. collective() hands the group to runhooks'
// rules (StopVoteHook, ChiefOnly, ChiefStateHook); process_group() is for the program's own
// collectives (a gradient allreduce).
//
// On Linux, also acts when the launcher dies (prctl PR_SET_PDEATHSIG): torchrun starts its workers
// in sessions of their own, so a torchrun killed with SIGKILL (or by the OOM killer) would leave
// them training as orphans. With every worker under that launcher (one machine), the worker gets
// one SIGTERM, which stops the job as a SIGTERM to torchrun does: with Voted(SignalStopHook())
// every rank stops after the same step and the chief writes its final checkpoint. With agents on
// other machines (LOCAL_WORLD_SIZE < WORLD_SIZE), the worker leaves the job at once, as a lost
// machine would, so that their agents restart the group without it (end_with_launcher).
//
// Also makes std::terminate (an exception nobody caught) print the exception with this rank and
// end the process (c10d_abort_job). If a stop vote was left by an exception that the program
// caught while this object lives on, the destructor ends the process rather than leave the
// others waiting; destroyed by the exception itself (the object inside c10d_run_or_abort's
// body), it lets the exception be reported where it is caught; the process group is then left
// to the process's end, whose closed connections fail the others' collectives at once (a program
// that catches the exception and carries on leaves them to their timeout). Destruction is
// otherwise collective, as MPI_Finalize is: a barrier, so that no rank closes its connections
// while another still finishes the last collective.
//
// Only c10d's out-of-line functions are called (the constructors, createDefaultDevice, the
// virtual collectives): the gloo headers come from the system (libgloo-dev) and may not be the
// gloo compiled into libtorch, so no inline gloo code runs on gloo's objects.
class C10dEnvironment {
 public:
  explicit C10dEnvironment(C10dOptions options = {})
      : C10dEnvironment(TorchrunEnvironment::from_environment(), options) {}

  C10dEnvironment(TorchrunEnvironment variables, C10dOptions options)
      : variables_(std::move(variables)), options_(options.validate()) {
    end_with_launcher();
    detail::c10d_rank = variables_.rank;
    detail::c10d_size = variables_.world_size;
    store_ = c10::make_intrusive<c10d::PrefixStore>(
        "runhooks/" + variables_.run_id + "/" + std::to_string(variables_.restart_count),
        connect_store());
    process_group_ = connect_process_group();
    previous_terminate_ = std::set_terminate(&on_terminate);
    ++detail::c10d_environments;
  }
  C10dEnvironment(const C10dEnvironment&) = delete;
  C10dEnvironment& operator=(const C10dEnvironment&) = delete;

  ~C10dEnvironment() {
    --detail::c10d_environments;
    std::set_terminate(previous_terminate_);
    // Destroyed by an exception (the environment lived inside c10d_run_or_abort's body): the
    // exception reports itself where it is caught (c10d_run_or_abort, the program's handler),
    // and no barrier is attempted. The process group is left alive, deliberately: destroying
    // ProcessGroupGloo waits for its queued operations, and one the exception abandoned (a
    // broadcast from a chief that never came) may wait for its whole timeout. Its connections
    // close when the process ends, which fails the other ranks' collectives at once.
    if (std::uncaught_exceptions() > 0) {
      static_cast<void>(process_group_.release());
      return;
    }
    if (detail::c10d_vote_left_by_exception)
      c10d_abort_job("a session with a StopVoteHook was left by an exception before end(), and "
                     "the other ranks may wait for this one in a stop vote");
    try {
      collective().barrier();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "runhooks: %s: the final barrier failed: %s\n", describe().c_str(),
                   e.what());
    }
  }

  int rank() const noexcept { return variables_.rank; }
  int size() const noexcept { return variables_.world_size; }
  int local_rank() const noexcept { return variables_.local_rank; }
  // Rank 0 is the chief (TensorFlow's task 0): it restores, saves checkpoints, writes summaries.
  bool is_chief() const noexcept { return variables_.rank == 0; }
  std::string describe() const {
    return "rank " + std::to_string(rank()) + " of " + std::to_string(size());
  }

  const TorchrunEnvironment& variables() const noexcept { return variables_; }
  const C10dOptions& options() const noexcept { return options_; }

  // The process group as a runhooks::Collective, for StopVoteHook, ChiefOnly, ChiefStateHook.
  C10dCollective collective() const { return C10dCollective(process_group_, options_.timeout()); }
  // This attempt's store (its keys under this job's and attempt's prefix) and the Gloo process
  // group, for the program's own use.
  const c10::intrusive_ptr<c10d::Store>& store() const noexcept { return store_; }
  const c10::intrusive_ptr<c10d::ProcessGroupGloo>& process_group() const noexcept {
    return process_group_;
  }

 private:
  std::string timeout_text() const {
    return "C10dOptions::timeout_secs = " + detail::format_number(options_.timeout_secs) + " s";
  }

  // The job's store, bounded by a deadline of runhooks' own: c10d::TCPStore's constructor bounds
  // its connect and, as the server, its wait for the ranks, but a client's handshake (a ping) and
  // its count of itself (an add) wait for the answer without one, so a port that accepts and never
  // answers (a frozen agent, another program's port) would hang the worker for ever, as PyTorch's
  // own TCPStore(timeout=...) does. So the store is made on a thread of its own, waited for until
  // timeout_secs plus store_grace() (c10d's own timeouts, with their causes, come first). Past the
  // deadline the thread is detached, blocked on a socket that nobody answers: it owns all it
  // touches (the address, the options, the shared result), and ends with the process, which
  // c10d_run_or_abort ends at once. Rank 0 serving the store is made in two steps (the server,
  // then the wait for every rank), so that a server that cannot start (MASTER_PORT in use) is
  // reported as such, at once, and not as ranks that never joined.
  c10::intrusive_ptr<c10d::Store> connect_store() const {
    const bool serve = !variables_.use_agent_store && variables_.rank == 0;
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<std::uint16_t>(variables_.master_port);
    store_options.isServer = serve;
    store_options.numWorkers = static_cast<std::size_t>(variables_.world_size);
    store_options.waitWorkers = false;  // waitForWorkers() below: every rank counts itself in
    store_options.timeout = options_.timeout();
    store_options.multiTenant = true;

    struct Attempt {
      std::mutex mutex;
      std::condition_variable changed;
      bool constructed = false;  // the server listens, or the client connected
      bool done = false;
      c10::intrusive_ptr<c10d::TCPStore> store;
      std::exception_ptr error;
    };
    const auto attempt = std::make_shared<Attempt>();
    std::thread maker([attempt, host = variables_.master_addr, store_options] {
      c10::intrusive_ptr<c10d::TCPStore> store;
      std::exception_ptr error;
      try {
        store = c10::make_intrusive<c10d::TCPStore>(host, store_options);
        {
          const std::lock_guard<std::mutex> lock(attempt->mutex);
          attempt->constructed = true;
        }
        store->waitForWorkers();
      } catch (...) {
        error = std::current_exception();
      }
      const std::lock_guard<std::mutex> lock(attempt->mutex);
      if (!error) attempt->store = std::move(store);
      attempt->error = error;
      attempt->done = true;
      attempt->changed.notify_all();
    });
    std::unique_lock<std::mutex> lock(attempt->mutex);
    const bool done = attempt->changed.wait_until(
        lock, std::chrono::steady_clock::now() + options_.timeout() + store_grace(),
        [&] { return attempt->done; });
    const bool constructed = attempt->constructed;
    const std::exception_ptr error = attempt->error;  // read under the lock: a detached thread
    c10::intrusive_ptr<c10d::TCPStore> store = attempt->store;  // may still write them
    lock.unlock();
    if (done) {
      maker.join();
      if (!error) return store;
    } else {
      maker.detach();
    }

    const std::string where = "the job's store at MASTER_ADDR:MASTER_PORT = " +
                              variables_.master_addr + ":" +
                              std::to_string(variables_.master_port);
    std::string cause;
    if (error) {
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        cause = detail::c10d_message(e);
      } catch (...) {
        cause = "an exception not derived from std::exception";
      }
    }
    const std::string who = "runhooks: " + describe() + ": ";
    if (serve && !constructed && done)
      throw C10dError(who + "cannot serve " + where +
                      " (this rank serves it: TORCHELASTIC_USE_AGENT_STORE=False): " + cause +
                      "; is another program listening on MASTER_PORT?");
    if (serve)
      throw C10dError(who + where +
                      ", served by this rank (TORCHELASTIC_USE_AGENT_STORE=False), was not "
                      "joined by every rank within " + timeout_text() +
                      (done ? " (c10d: " + cause + ")" : std::string()));
    throw C10dError(
        who + "cannot reach " + where + " (served by " +
        (variables_.use_agent_store ? std::string("torchrun's agent") : "rank 0") + ") within " +
        timeout_text() + "; is the program launched by torchrun, and is MASTER_PORT its store's?" +
        (done ? " (c10d: " + cause + ")"
              : std::string(" (no answer: c10d's TCPStore was still waiting, as it does for ever "
                            "on a port that accepts and never answers, such as a frozen store's)")));
  }

  // How long after timeout_secs runhooks gives up on a store that c10d still waits for: c10d
  // counts its wait for the ranks in whole seconds (so it may end a second late) and retries a
  // connect after a jittered back-off (under ASan on 2 busy cores, its error for nothing
  // listening came 4 s after a 2 s timeout), and its error, which names the cause, should come
  // first where it can. Past the grace, the error says that c10d was still waiting, not why: a
  // port that accepts and never answers, or a connect still being retried, look the same.
  static constexpr std::chrono::seconds store_grace() { return std::chrono::seconds(2); }

  c10::intrusive_ptr<c10d::ProcessGroupGloo> connect_process_group() const {
    try {
      auto gloo = c10d::ProcessGroupGloo::Options::create(options_.timeout());
      for (const auto& name : variables_.gloo_socket_ifnames)
        gloo->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(name));
      if (gloo->devices.empty())
        gloo->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
      return c10::make_intrusive<c10d::ProcessGroupGloo>(store_, variables_.rank,
                                                         variables_.world_size, gloo);
    } catch (const std::exception& e) {
      throw C10dError("runhooks: " + describe() + ": the Gloo process group did not connect all " +
                      std::to_string(size()) + " ranks within " + timeout_text() + " (c10d: " +
                      detail::c10d_message(e) + ")");
    }
  }

  // Asks the kernel for a signal when this process's parent (torchrun's agent) dies: torchrun
  // starts its workers in sessions of their own, so a torchrun killed with SIGKILL (or by the OOM
  // killer) would leave them training as orphans. What the death means depends on where the job's
  // other workers run:
  //   - all under this agent (LOCAL_WORLD_SIZE = WORLD_SIZE, or not set): the job was stopped,
  //     as by a SIGTERM to torchrun: one SIGTERM to this process, which Voted(SignalStopHook())
  //     turns into a stop of every rank after the same step, the chief writing its checkpoint;
  //   - agents on other machines take part (LOCAL_WORLD_SIZE < WORLD_SIZE): this machine has left
  //     the job, as if it had died: the worker ends at once (exit status 1, one line on stderr),
  //     with no stop vote, so that the other ranks' collectives fail and their agents restart the
  //     group without it (torchrun's --nnodes MIN:MAX), from the chief's last checkpoint. A stop
  //     vote would end every machine's training, and each agent would take it for a success.
  // The kernel sends a signal of runhooks' own (launcher_death_signal), also when only the thread
  // of the launcher that started the worker ends, and once more for each thread a dying
  // multi-threaded launcher passes the worker on to; so the handler acts once, and only once the
  // parent is another process (getppid() changed): a second SIGTERM would end the process before
  // its final checkpoint (SignalStopHook's "send it again to terminate at once"). What it does is
  // async-signal-safe: getppid, kill, write, _exit.
  void end_with_launcher() const {
#if defined(__linux__)
    const pid_t launcher = ::getppid();
    detail::c10d_launcher_pid.store(launcher, std::memory_order_relaxed);
    std::size_t size = 0;
    if (variables_.spans_machines()) {
      const std::string line =
          "runhooks: " + describe() + ": its launcher (torchrun's agent, pid " +
          std::to_string(launcher) + ") died, and other machines take part in the job "
          "(LOCAL_WORLD_SIZE=" + std::to_string(variables_.local_world_size) + ", WORLD_SIZE=" +
          std::to_string(variables_.world_size) + "): leaving it as a lost machine does, without "
          "a stop vote, so that their agents go on without this one\n";
      size = std::min(line.size(), sizeof detail::c10d_leave_line);
      std::memcpy(detail::c10d_leave_line, line.data(), size);
    }
    detail::c10d_leave_line_size.store(size, std::memory_order_release);
    struct sigaction action {};
    action.sa_handler = [](int) {
      if (::getppid() == detail::c10d_launcher_pid.load(std::memory_order_relaxed)) return;
      static constinit std::atomic<bool> acted{false};
      if (acted.exchange(true)) return;
      const std::size_t leave = detail::c10d_leave_line_size.load(std::memory_order_acquire);
      if (leave == 0) {
        ::kill(::getpid(), SIGTERM);
        return;
      }
      [[maybe_unused]] const auto written = ::write(STDERR_FILENO, detail::c10d_leave_line, leave);
      ::_exit(1);
    };
    sigemptyset(&action.sa_mask);
    if (::sigaction(launcher_death_signal(), &action, nullptr) == 0 &&
        ::prctl(PR_SET_PDEATHSIG, launcher_death_signal()) == 0 && ::getppid() != launcher)
      ::raise(launcher_death_signal());
#endif
  }

#if defined(__linux__)
  // A real-time signal (glibc keeps the ones below SIGRTMIN for itself), which nothing else in a
  // training program is expected to send.
  static int launcher_death_signal() noexcept { return SIGRTMIN + 5; }
#endif

  [[noreturn]] static void on_terminate() noexcept {
    c10d_abort_job(std::current_exception()
                       ? "terminate called after an uncaught exception: " +
                             detail::without_own_prefix(detail::describe_current_c10d_exception(),
                                                        detail::c10d_who())
                       : std::string("terminate called without an active exception"));
  }

  TorchrunEnvironment variables_;
  C10dOptions options_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> process_group_;
  std::terminate_handler previous_terminate_ = nullptr;
};

}  // namespace runhooks
