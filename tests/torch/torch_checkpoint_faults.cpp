// What a TorchBackend's `.pt` checkpoint can be trusted with (issue 29, items 5 and 6):
//   - every flipped bit of the file, wherever it is, is an error naming the file at restore, and
//     the backend is left as it was (libtorch's reader checks none of the zip's own CRC-32s: a
//     corrupted parameter was restored silently); the file written by save(), by a snapshot, and
//     by the snapshot of an optimizer the backend does not copy tensor by tensor;
//   - the archive stays a zip that Python's zipfile reads, every CRC-32 right, and an archive
//     written before the checksum existed still restores;
//   - a file-size limit (RLIMIT_FSIZE in a child process, SIGXFSZ ignored) during a synchronous or
//     a background save is a CheckpointError naming the checkpoint, the file and the cause, and
//     the previous checkpoint stays the latest, intact (libtorch's writer ended the process
//     through std::terminate: "[enforce fail at inline_container.cc:672] unexpected pos").
#include <runhooks/checkpoint/checkpoint_error.hpp>
#include <runhooks/checkpoint/checkpoint_saver_hook.hpp>
#include <runhooks/checkpoint/checkpoint_state.hpp>
#include <runhooks/core.hpp>
#include <runhooks/log.hpp>
#include <runhooks/torch/tensor_batches.hpp>
#include <runhooks/torch/torch_backend.hpp>

#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/output-archive.h>
#include <torch/utils.h>

#include <doctest/doctest.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <type_traits>
#include <vector>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace {

using Model = torch::nn::Sequential;

constexpr std::int64_t rows = 200, features = 8, classes = 3;

runhooks::TensorBatches toy_batches() {
  torch::manual_seed(11);
  torch::Tensor x = torch::randn({rows, features});
  torch::Tensor y = x.narrow(1, 0, classes).argmax(1);
  return runhooks::TensorBatches(x, y, /*batch_size=*/16, /*seed=*/7);
}

// An optimizer TorchBackend does not know: its snapshot is the archive serialized into memory.
struct PlainSGD : torch::optim::SGD {
  using SGD::SGD;
};

template <class Optimizer>
runhooks::TorchBackend<Model, Optimizer> make_toy(std::uint64_t weight_seed = 3) {
  torch::set_num_threads(1);
  torch::manual_seed(weight_seed);
  return runhooks::TorchBackend<Model, Optimizer>(
      Model(torch::nn::Linear(features, 16), torch::nn::ReLU(), torch::nn::Linear(16, classes)),
      toy_batches(), torch::optim::SGDOptions(0.1).momentum(0.9));
}

template <class B>
std::vector<torch::Tensor> parameters_of(B& backend) {
  std::vector<torch::Tensor> copies;
  for (const torch::Tensor& p : backend.model()->parameters()) copies.push_back(p.detach().clone());
  return copies;
}

bool same_bytes(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const torch::Tensor x = a[i].contiguous(), y = b[i].contiguous();
    if (x.sizes() != y.sizes() || std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) != 0)
      return false;
  }
  return true;
}

struct TempDir {
  fs::path path;
  TempDir() {
    std::string templ = (fs::temp_directory_path() / "runhooks-torch-faults-XXXXXX").string();
    REQUIRE(::mkdtemp(templ.data()) != nullptr);
    path = templ;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

std::string read_bytes(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const fs::path& file, const std::string& bytes) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

TEST_CASE_TEMPLATE("every flipped bit of a .pt checkpoint is an error naming the file; the backend "
                   "is left as it was",
                   Optimizer, torch::optim::SGD, PlainSGD) {
  TempDir dir;
  auto backend = make_toy<Optimizer>();
  for (int i = 0; i < 12; ++i) backend.run();
  // The three writers: save(), a snapshot's write(), and (PlainSGD) the bytes serialized in the
  // snapshot.
  backend.save(dir.path / "saved");
  typename decltype(backend)::Snapshot snapshot;
  backend.snapshot(snapshot);
  snapshot.write(dir.path / "snapshot");

  auto target = make_toy<Optimizer>(99);
  for (int i = 0; i < 3; ++i) target.run();
  const std::vector<torch::Tensor> before = parameters_of(target);
  std::mt19937 random(29);
  for (const char* name : {"saved", "snapshot"}) {
    CAPTURE(name);
    const fs::path prefix = dir.path / name;
    const fs::path file = runhooks::TorchBackend<Model, Optimizer>::checkpoint_file(prefix);
    const std::string good = read_bytes(file);
    REQUIRE(good.size() > 1000);
    // Every byte of save()'s file with SGD (about 20 KB); elsewhere the first and last 256 bytes
    // (the zip's headers, its end record, the checksum) and 1,500 bytes at random, each writer
    // its own file.
    std::vector<std::size_t> offsets;
    const bool every = std::is_same_v<Optimizer, torch::optim::SGD> && std::string_view(name) == "saved";
    for (std::size_t at = 0; at < good.size(); ++at)
      if (every || at < 256 || at + 256 >= good.size()) offsets.push_back(at);
    if (!every)
      for (int i = 0; i < 1500; ++i)
        offsets.push_back(std::uniform_int_distribution<std::size_t>(0, good.size() - 1)(random));
    // One byte changed in place and put back: two pwrite calls a flip.
    const int fd = ::open(file.c_str(), O_WRONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    const auto put = [&](std::size_t at, char byte) {
      REQUIRE(::pwrite(fd, &byte, 1, static_cast<off_t>(at)) == 1);
    };
    std::vector<std::size_t> undetected;
    bool named = true;
    for (const std::size_t at : offsets) {
      put(at, static_cast<char>(good[at] ^ (1 << (at % 8))));
      try {
        target.restore(prefix);
        undetected.push_back(at);
      } catch (const std::exception& e) {
        named = named && std::string_view(e.what()).find(file.string()) != std::string_view::npos;
      }
      put(at, good[at]);
    }
    ::close(fd);
    CHECK_MESSAGE(undetected.empty(), undetected.size() << " of " << offsets.size()
                                                        << " flipped bits restored, the first at byte "
                                                        << (undetected.empty() ? 0 : undetected[0])
                                                        << " of " << good.size());
    CHECK(named);
    CHECK(target.global_step() == 3);
    CHECK(same_bytes(parameters_of(target), before));
    // The good file restores.
    REQUIRE(read_bytes(file) == good);
    target.restore(prefix);
    CHECK(target.global_step() == 12);
    CHECK(same_bytes(parameters_of(target), parameters_of(backend)));
    target = make_toy<Optimizer>(99);
    for (int i = 0; i < 3; ++i) target.run();
  }
}

TEST_CASE("a checksum mismatch names the file and both checksums") {
  TempDir dir;
  auto backend = make_toy<torch::optim::SGD>();
  backend.save(dir.path / "model.ckpt-0");
  const fs::path file = dir.path / "model.ckpt-0.pt";
  std::string bytes = read_bytes(file);
  // A byte in the middle: a tensor's data or the zip's structure, either way under the checksum.
  bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x10);
  write_bytes(file, bytes);
  const std::string expected = "runhooks: '" + file.string() + "' fails its checksum (CRC-32C ";
  CHECK_THROWS_WITH_AS(backend.restore(dir.path / "model.ckpt-0"),
                       doctest::Contains(expected.c_str()), runhooks::CheckpointError);
}

TEST_CASE("the .pt archive stays a zip that Python reads, every CRC-32 right; an archive without "
          "the checksum (an earlier version's) still restores") {
  TempDir dir;
  auto backend = make_toy<torch::optim::SGD>();
  for (int i = 0; i < 5; ++i) backend.run();
  backend.save(dir.path / "model.ckpt-5");
  const fs::path file = dir.path / "model.ckpt-5.pt";
  if (std::system("python3 -c 'import zipfile' > /dev/null 2>&1") == 0) {
    const fs::path out = dir.path / "zip.out";
    const std::string command =
        "python3 -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); "
        "assert z.testzip() is None; print(z.comment.decode())' '" +
        file.string() + "' > '" + out.string() + "' 2>&1";
    INFO(read_bytes(out));
    REQUIRE(std::system(command.c_str()) == 0);
    CHECK(read_bytes(out).rfind("runhooks-crc32c:", 0) == 0);
  } else {
    MESSAGE("skipped the zipfile check: no python3");
  }

  // What TorchBackend wrote before the checksum: libtorch's own file writer, no zip comment.
  torch::serialize::OutputArchive archive, model_archive, optimizer_archive;
  backend.model()->save(model_archive);
  backend.optimizer().save(optimizer_archive);
  archive.write("model", model_archive);
  archive.write("optimizer", optimizer_archive);
  archive.write("global_step", c10::IValue(std::int64_t{5}));
  const fs::path old = dir.path / "old.pt";
  archive.save_to(old.string());
  auto restored = make_toy<torch::optim::SGD>(99);
  restored.restore(dir.path / "old");
  CHECK(restored.global_step() == 5);
  CHECK(same_bytes(parameters_of(restored), parameters_of(backend)));
  // Cut short, it is refused naming the file (it has no zip end record at its end).
  fs::resize_file(old, fs::file_size(old) - 7);
  CHECK_THROWS_WITH(restored.restore(dir.path / "old"), doctest::Contains(old.string().c_str()));
}

namespace {

// The child's part: trains with a CheckpointSaverHook saving every 5 steps; once the checkpoint of
// step 0 is durable, RLIMIT_FSIZE (the soft limit) goes below a checkpoint's size, so the save at
// step 5 fails. Writes what it caught to `outcome` and exits: 3 for a CheckpointError, 4 for no
// error, 5 for another exception. Never returns (doctest must not report twice).
template <class Optimizer>
[[noreturn]] void train_under_file_size_limit(const fs::path& dir, bool async, const fs::path& outcome) {
  runhooks::set_log_sink([](runhooks::Severity, std::string_view) {});
  std::string caught = "no error";
  int code = 4;
  rlimit original{};
  ::getrlimit(RLIMIT_FSIZE, &original);
  try {
    runhooks::MonitoredSession session{
        make_toy<Optimizer>(),
        runhooks::CheckpointSaverHook({.checkpoint_dir = dir.string(), .save_steps = 5,
                                       .async_save = async})};
    for (int i = 0; i < 3; ++i) session.run();
    // A background save of step 0 may still be writing: the limit comes after it.
    for (int i = 0; i < 3000 && !fs::exists(dir / "model.ckpt-0.pt"); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const auto size = static_cast<rlim_t>(fs::file_size(dir / "model.ckpt-0.pt"));
    std::signal(SIGXFSZ, SIG_IGN);  // a write past the limit fails with EFBIG instead
    const rlimit limited{size / 2, original.rlim_max};
    ::setrlimit(RLIMIT_FSIZE, &limited);
    for (int i = 0; i < 20; ++i) session.run();
    session.close();
  } catch (const runhooks::CheckpointError& e) {
    caught = std::string("CheckpointError: ") + e.what();
    code = 3;
  } catch (const std::exception& e) {
    caught = std::string("other: ") + e.what();
    code = 5;
  }
  ::setrlimit(RLIMIT_FSIZE, &original);
  std::ofstream(outcome) << caught;
  std::_Exit(code);
}

}  // namespace

TEST_CASE_TEMPLATE("a file-size limit during a synchronous or background save: a CheckpointError "
                   "naming the checkpoint, the file and the cause; the previous checkpoint intact",
                   Optimizer, torch::optim::SGD, PlainSGD) {
  for (const bool async : {false, true}) {
    CAPTURE(async);
    TempDir dir;
    const fs::path checkpoints = dir.path / "checkpoints";
    const fs::path outcome = dir.path / "outcome";
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) train_under_file_size_limit<Optimizer>(checkpoints, async, outcome);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    INFO("the child wrote: ", read_bytes(outcome));
    REQUIRE_MESSAGE(WIFEXITED(status), "the child died of signal "
                                           << WTERMSIG(status) << " (std::terminate raises SIGABRT, "
                                           << SIGABRT << ")");
    CHECK(WEXITSTATUS(status) == 3);
    const std::string caught = read_bytes(outcome);
    CHECK(caught.find("CheckpointError: runhooks: saving checkpoint '" +
                      (checkpoints / "model.ckpt-5").string() + "' failed: runhooks: writing '" +
                      (checkpoints / ".model.ckpt-5.tmp-").string()) != std::string::npos);
    CHECK(caught.find(".pt': File too large") != std::string::npos);

    // The state file still names step 0's checkpoint as the latest, which restores; no staging
    // file is left.
    const auto state = runhooks::read_checkpoint_state(checkpoints);
    REQUIRE(state.has_value());
    CHECK(state->model_checkpoint_path == "model.ckpt-0");
    auto restored = make_toy<Optimizer>(99);
    restored.restore(checkpoints / "model.ckpt-0");
    CHECK(restored.global_step() == 0);
    auto fresh = make_toy<Optimizer>();
    CHECK(same_bytes(parameters_of(restored), parameters_of(fresh)));
    for (const auto& entry : fs::directory_iterator(checkpoints))
      CHECK_MESSAGE(entry.path().filename().string().find(".tmp-") == std::string::npos,
                    entry.path());
  }
}
