// MpiSessionCreator: TensorFlow's chief and worker session creators for an MPI job. Rank 0, the
// chief, creates its backend and restores or initializes it; every other rank waits for it, as
// WorkerSessionCreator does, and receives the chief's state by broadcast (no shared file system).
#pragma once

#include <runhooks/detail/config.hpp>

#include <mpi.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <runhooks/checkpoint/checkpointable.hpp>
#include <runhooks/concepts.hpp>
#include <runhooks/detail/checked.hpp>
#include <runhooks/log.hpp>
#include <runhooks/mpi/mpi_environment.hpp>
#include <runhooks/session_creator.hpp>

namespace runhooks {

struct MpiSessionOptions {
  // How long a worker waits for the chief's state before giving up with an MpiError
  // (TensorFlow's WorkerSessionCreator: max_wait_secs = 7200). At least 0, at most 1e9 s.
  double max_wait_secs = 7200.0;

  const MpiSessionOptions& validate() const {
    detail::checked_secs("MpiSessionOptions::max_wait_secs", max_wait_secs);
    return *this;
  }
};

namespace detail {

// The files of one saved state, by name relative to their directory, as one byte string: for
// each file, its name's length, the name, the content's length, the content (lengths as 8-byte
// integers in the machine's byte order: every rank runs the same program on the same kind of
// machine).
inline std::string pack_directory(const std::filesystem::path& directory) {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(directory))
    if (entry.is_regular_file()) files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  std::string packed;
  const auto put_size = [&packed](std::uint64_t n) {
    packed.append(reinterpret_cast<const char*>(&n), sizeof n);
  };
  for (const auto& file : files) {
    const std::string name = file.filename().string();
    std::ifstream in(file, std::ios::binary);
    const std::string content((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof())
      throw MpiError("runhooks: reading " + file.string() + " to send it failed");
    put_size(name.size());
    packed += name;
    put_size(content.size());
    packed += content;
  }
  return packed;
}

inline void unpack_directory(const std::string& packed, const std::filesystem::path& directory) {
  std::size_t at = 0;
  const auto get_size = [&]() {
    std::uint64_t n = 0;
    if (packed.size() - at < sizeof n) throw MpiError("runhooks: the chief's state is truncated");
    std::copy_n(packed.data() + at, sizeof n, reinterpret_cast<char*>(&n));
    at += sizeof n;
    if (packed.size() - at < n) throw MpiError("runhooks: the chief's state is truncated");
    return static_cast<std::size_t>(n);
  };
  while (at < packed.size()) {
    const std::size_t name_size = get_size();
    const std::string name = packed.substr(at, name_size);
    at += name_size;
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
      throw MpiError("runhooks: the chief's state names a bad file '" + name + "'");
    const std::size_t content_size = get_size();
    std::ofstream out(directory / name, std::ios::binary);
    out.write(packed.data() + at, static_cast<std::streamsize>(content_size));
    at += content_size;
    if (!out.flush())
      throw MpiError("runhooks: writing the chief's state to " + (directory / name).string() +
                     " failed");
  }
}

// A private directory under the system's temporary directory, removed with the object.
class TemporaryDirectory {
 public:
  TemporaryDirectory() {
    static std::atomic<int> counter{0};
    const std::filesystem::path base = std::filesystem::temp_directory_path();
    for (int attempt = 0;; ++attempt) {
      path_ = base / ("runhooks-mpi-" + std::to_string(::getpid()) + "-" +
                      std::to_string(counter.fetch_add(1)));
      std::error_code error;
      if (std::filesystem::create_directory(path_, error)) return;
      if (attempt > 100 || error)
        throw MpiError("runhooks: cannot create a temporary directory " + path_.string() +
                       (error ? ": " + error.message() : std::string()));
    }
  }
  TemporaryDirectory(const TemporaryDirectory&) = delete;
  TemporaryDirectory& operator=(const TemporaryDirectory&) = delete;
  ~TemporaryDirectory() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
};

// The one error for a backend that cannot be sent; the instantiation note names it.
template <class Backend>
struct check_sendable_backend {
  static_assert(Checkpointable<Backend>,
                "runhooks::MpiSessionCreator sends the chief's state to the other ranks with the "
                "backend's save() and restore(): add `void save(const std::filesystem::path& "
                "prefix) const` and `void restore(const std::filesystem::path& prefix)` to the "
                "backend type named in this instantiation (see "
                "<runhooks/checkpoint/checkpointable.hpp>).");
  static constexpr bool value = true;
};

// MPI_Bcast of any size, in pieces that fit an int count.
inline void broadcast_bytes(char* data, std::size_t size, MPI_Comm comm) {
  constexpr std::size_t piece = std::size_t{1} << 30;
  for (std::size_t at = 0; at < size; at += piece)
    mpi_check(MPI_Bcast(data + at, static_cast<int>(std::min(piece, size - at)), MPI_BYTE, 0, comm),
              "MPI_Bcast");
}

}  // namespace detail

namespace detail {

// Workers: the chief's header {1: state follows, 2: its error follows; bytes}, by a nonblocking
// broadcast polled every millisecond for at most max_wait_secs.
inline void receive_chief_header(std::int64_t (&header)[2], MPI_Comm comm, double max_wait_secs) {
  MPI_Request request = MPI_REQUEST_NULL;
  mpi_check(MPI_Ibcast(header, 2, MPI_INT64_T, 0, comm, &request), "MPI_Ibcast");
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                    std::chrono::duration<double>(max_wait_secs));
  bool logged = false;
  for (;;) {
    int done = 0;
    mpi_check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done) return;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline)
      throw MpiError("runhooks: " + mpi_who() +
                     ": the chief (rank 0) sent no initial state within "
                     "MpiSessionOptions::max_wait_secs = " +
                     format_number(max_wait_secs) + " s; is rank 0 alive and creating its session?");
    if (!logged && now - start > std::chrono::seconds(5)) {
      logged = true;
      log(Severity::info, "runhooks: " + mpi_who() +
                              ": waiting for the chief (rank 0) to create its session (at most " +
                              format_number(max_wait_secs) + " s)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// Collective over comm. On rank 0: prepare() (restore a checkpoint, ...), then the backend's state
// is saved into a private temporary directory and its files broadcast, or, if prepare() or the
// save threw, the error's message is, and rank 0 rethrows. On the other ranks: the files are
// restored into `backend`, or an MpiError quotes the chief's error.
template <class Backend, class Prepare>
void share_chief_state(Backend& backend, MPI_Comm comm, double max_wait_secs, Prepare&& prepare) {
  int rank = 0, size = 1;
  mpi_check(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  mpi_check(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  std::int64_t header[2] = {0, 0};
  std::string payload;
  std::exception_ptr chief_error;
  if (rank == 0) {
    try {
      prepare();
      if (size > 1) {
        const TemporaryDirectory directory;
        if constexpr (Checkpointable<Backend>)  // else check_sendable_backend said so
          backend.save(directory.path() / "state");
        payload = pack_directory(directory.path());
      }
      header[0] = 1;
    } catch (...) {
      chief_error = std::current_exception();
      payload = describe_current_exception();
      header[0] = 2;
    }
    header[1] = static_cast<std::int64_t>(payload.size());
    MPI_Request request = MPI_REQUEST_NULL;
    mpi_check(MPI_Ibcast(header, 2, MPI_INT64_T, 0, comm, &request), "MPI_Ibcast");
    mpi_check(MPI_Wait(&request, MPI_STATUS_IGNORE), "MPI_Wait");
  } else {
    receive_chief_header(header, comm, max_wait_secs);
    payload.resize(static_cast<std::size_t>(header[1]));
  }
  broadcast_bytes(payload.data(), payload.size(), comm);
  if (rank == 0) {
    if (chief_error) std::rethrow_exception(chief_error);
    return;
  }
  if (header[0] != 1)
    throw MpiError("runhooks: " + mpi_who() + ": the chief (rank 0) failed to create its session: " +
                   payload);
  const TemporaryDirectory directory;
  unpack_directory(payload, directory.path());
  if constexpr (Checkpointable<Backend>) backend.restore(directory.path() / "state");
}

}  // namespace detail

// A session creator for every rank of the communicator. Inner is a session creator (typically a
// ChiefSessionCreator restoring the latest checkpoint of a directory on rank 0's disk) or a
// factory; every rank calls its create_session(), but only rank 0 its initialize(). Then rank 0
// saves the state of its backend (Checkpointable::save, into a private temporary directory) and
// broadcasts the files; every other rank restores them into its fresh backend. So every rank
// starts from the chief's state: the checkpoint it restored, or the factory's initialization
// (random weights drawn once). An error on the chief is sent to the workers, and every rank
// throws (the chief its own error, a worker an MpiError quoting it).
//
// Workers wait for the chief at most max_wait_secs (polling a nonblocking broadcast every
// millisecond), then throw an MpiError naming the wait: TensorFlow's WorkerSessionCreator.
//
// Never recovers (policy NoRecovery): re-creating the backend on one rank would break the
// collective sequence of all. A lost backend ends the job, and a restart resumes every rank from
// the chief's last checkpoint.
template <class Inner>
class MpiSessionCreator {
 public:
  using inner_type = detail::source_of_t<Inner, NoRecovery>;
  static_assert(SessionCreatorType<inner_type>,
                "runhooks::MpiSessionCreator wraps a session creator or a factory returning a "
                "backend.");
  using backend_type = typename inner_type::backend_type;
  static_assert(detail::check_sendable_backend<backend_type>::value);

  explicit MpiSessionCreator(Inner inner, MpiSessionOptions options = {},
                             MPI_Comm comm = MPI_COMM_WORLD)
      : inner_(std::move(inner)), options_(options.validate()), comm_(comm),
        chief_(comm_.rank() == 0) {}

  backend_type create_session() { return inner_.create_session(); }

  void initialize(backend_type& backend) {
    detail::share_chief_state(backend, comm_.get(), options_.max_wait_secs, [&] {
      if constexpr (requires { inner_.initialize(backend); }) inner_.initialize(backend);
    });
  }

  const NoRecovery& policy() const noexcept { return policy_; }

  // Rank 0 of the communicator: it restores, saves checkpoints and writes summaries.
  bool is_chief() const noexcept { return chief_; }
  inner_type& inner() noexcept { return inner_; }
  const MpiSessionOptions& options() const noexcept { return options_; }

 private:
  inner_type inner_;
  MpiSessionOptions options_;
  detail::MpiComm comm_;
  bool chief_;
  [[no_unique_address]] NoRecovery policy_;
};

template <class Inner>
MpiSessionCreator(Inner) -> MpiSessionCreator<Inner>;
template <class Inner>
MpiSessionCreator(Inner, MpiSessionOptions) -> MpiSessionCreator<Inner>;
template <class Inner>
MpiSessionCreator(Inner, MpiSessionOptions, MPI_Comm) -> MpiSessionCreator<Inner>;

}  // namespace runhooks
