// The directory's writer lock (checkpoint/detail/directory_lock.hpp, issue 29): a lock file planted
// as a symbolic link, a directory or a hard link to a file elsewhere is never followed, truncated
// or written; the lock is the process's, so a fork()ed child does not carry it (the parent closes
// and reopens while the child lives; a crashed writer's children do not keep it; the child's copy
// of a manager cannot write, and the message names the parent). Real processes, real links.
#include <doctest/doctest.h>

#include <csignal>
#include <cstdint>
#include <filesystem>
#include <string>

#include <sys/wait.h>
#include <unistd.h>

#include <runhooks/checkpoint/checkpoint_manager.hpp>

#include <support/checkpoint_backends.hpp>

namespace fs = std::filesystem;
using ckpt::TempDir;
using ckpt::put_text;
using runhooks::CheckpointError;
using runhooks::CheckpointManager;

namespace {

// A pipe whose read end a child blocks on until the parent closes the write end (or dies).
struct Pipe {
  int fds[2] = {-1, -1};
  Pipe() { REQUIRE(::pipe(fds) == 0); }
  ~Pipe() {
    close_read();
    close_write();
  }
  void close_read() {
    if (fds[0] >= 0) ::close(fds[0]);
    fds[0] = -1;
  }
  void close_write() {
    if (fds[1] >= 0) ::close(fds[1]);
    fds[1] = -1;
  }
  // In a child: waits for EOF.
  void wait_for_eof() {
    close_write();
    char c;
    while (::read(fds[0], &c, 1) > 0) {
    }
  }
  void send(char c) { (void)!::write(fds[1], &c, 1); }
  char receive() {
    char c = 0;
    return ::read(fds[0], &c, 1) == 1 ? c : '\0';
  }
};

int exit_code(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

TEST_CASE("directory lock: a lock file planted as a symbolic link is never followed") {
  TempDir outside;
  TempDir dir;
  put_text(outside / "precious", "the user's data");
  fs::create_symlink(outside / "precious", dir / ".runhooks-lock");
  CheckpointManager manager({.checkpoint_dir = dir.path});
  CHECK_THROWS_WITH_AS(manager.open(1000.0),
                       doctest::Contains(("the lock file '" + (dir / ".runhooks-lock").string() +
                                          "' is a symbolic link")
                                             .c_str()),
                       CheckpointError);
  CHECK(ckpt::read_text(outside / "precious") == "the user's data");
  CHECK(fs::is_symlink(fs::symlink_status(dir / ".runhooks-lock")));

  // A dangling link: nothing is created where it leads.
  fs::remove(dir / ".runhooks-lock");
  fs::create_symlink(outside / "created", dir / ".runhooks-lock");
  CHECK_THROWS_WITH_AS(manager.open(1000.0), doctest::Contains("is a symbolic link"), CheckpointError);
  CHECK_FALSE(fs::exists(fs::symlink_status(outside / "created")));
  // Nothing else happened in the directory either: no probe, no sweep.
  CHECK(ckpt::files_in(dir.path).empty());
}

TEST_CASE("directory lock: a lock file that is a hard link to a file elsewhere is never truncated") {
  TempDir outside;
  TempDir dir;
  put_text(outside / "precious", "the user's data");
  fs::create_hard_link(outside / "precious", dir / ".runhooks-lock");
  {
    CheckpointManager manager({.checkpoint_dir = dir.path});
    manager.save(1, 1000.0, ckpt::arrays_writer(1));
    CHECK(ckpt::read_text(outside / "precious") == "the user's data");
  }
  CHECK(ckpt::read_text(outside / "precious") == "the user's data");
  CHECK(ckpt::latest_step(dir.path) == 1);
}

TEST_CASE("directory lock: a lock file that is not a regular file is an error naming it") {
  TempDir dir;
  fs::create_directory(dir / ".runhooks-lock");
  CheckpointManager manager({.checkpoint_dir = dir.path});
  CHECK_THROWS_WITH_AS(manager.open(1000.0),
                       doctest::Contains(("the lock file '" + (dir / ".runhooks-lock").string() +
                                          "' is not a regular file")
                                             .c_str()),
                       CheckpointError);
}

TEST_CASE("directory lock: the parent closes and reopens while a fork()ed child lives") {
  TempDir dir;
  CheckpointManager manager({.checkpoint_dir = dir.path});
  manager.save(1, 1000.0, ckpt::arrays_writer(1));
  Pipe hold;
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // no exec: a copy of this process, the manager's open descriptor included
    hold.wait_for_eof();
    ::_exit(0);
  }
  hold.close_read();
  manager.close();
  // Before issue 29: "already has a writer (this process, pid N, through another
  // CheckpointManager ...)": the child's copy of the descriptor kept the flock.
  CHECK_NOTHROW(manager.open(1001.0));
  CHECK_NOTHROW(manager.save(2, 1001.0, ckpt::arrays_writer(2)));
  CHECK(ckpt::latest_step(dir.path) == 2);
  hold.close_write();
  CHECK(exit_code(child) == 0);
}

TEST_CASE("directory lock: a fork()ed child cannot write through its copy, and is told the parent holds it") {
  TempDir dir;
  CheckpointManager manager({.checkpoint_dir = dir.path});
  manager.save(1, 1000.0, ckpt::arrays_writer(1));
  const std::string parent = std::to_string(::getpid());
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // Exit codes: 0 as expected; 1 the copy saved; 2 a fresh manager opened; 3 a wrong message.
    int code = 0;
    const std::string expected = "already has a writer (process " + parent + ", the parent";
    try {
      manager.save(2, 1001.0, ckpt::arrays_writer(2));
      code = 1;
    } catch (const CheckpointError& e) {
      if (std::string(e.what()).find(expected) == std::string::npos) code = 3;
    }
    if (code == 0) {
      try {
        CheckpointManager fresh({.checkpoint_dir = dir.path});
        fresh.open(1001.0);
        code = 2;
      } catch (const CheckpointError& e) {
        if (std::string(e.what()).find(expected) == std::string::npos) code = 3;
      }
    }
    ::_exit(code);
  }
  CHECK(exit_code(child) == 0);
  // The parent's lock and state are as they were.
  CHECK(ckpt::latest_step(dir.path) == 1);
  manager.save(3, 1002.0, ckpt::arrays_writer(3));
  CHECK(ckpt::latest_step(dir.path) == 3);
  CheckpointManager second({.checkpoint_dir = dir.path});
  CHECK_THROWS_WITH_AS(second.open(1003.0), doctest::Contains("this process"), CheckpointError);
}

TEST_CASE("directory lock: a killed writer's fork()ed children do not keep its lock") {
  TempDir dir;
  Pipe ready;    // the writer says its child exists
  Pipe orphan;   // the grandchild lives until this test closes it
  const pid_t writer = ::fork();
  REQUIRE(writer >= 0);
  if (writer == 0) {
    ready.close_read();
    try {
      CheckpointManager manager({.checkpoint_dir = dir.path});
      manager.save(1, 1000.0, ckpt::arrays_writer(1));
      if (::fork() == 0) {  // a worker made without exec, which outlives its parent
        ready.close_write();
        orphan.wait_for_eof();
        ::_exit(0);
      }
      ready.send('y');
      ::pause();  // killed here, holding the lock
    } catch (...) {
    }
    ::_exit(1);
  }
  ready.close_write();
  REQUIRE(ready.receive() == 'y');
  ::kill(writer, SIGKILL);
  CHECK(exit_code(writer) == 128 + SIGKILL);
  // The orphan still lives (it waits for this test), with its copy of the lock file's descriptor.
  CheckpointManager restarted({.checkpoint_dir = dir.path});
  CHECK_NOTHROW(restarted.open(1001.0));
  CHECK(ckpt::latest_step(dir.path) == 1);
  orphan.close_write();  // the orphan ends
}

// The fresh temporaries runhooks writes whole (the write probe, the state file's temporary, a copy
// where hard links fail) are created new: a link or a file already at the name is an error, never
// followed, never truncated (detail::write_file_durably; before, it opened with O_CREAT | O_TRUNC).
TEST_CASE("a temporary's name already taken: refused, neither followed nor truncated") {
  TempDir dir;
  TempDir outside;
  const fs::path target = outside.path / "victim.txt";
  put_text(target, "the user's data");
  const fs::path link = dir.path / "checkpoint.tmp-0123456789abcdef";
  fs::create_symlink(target, link);
  CHECK_THROWS_WITH_AS(runhooks::detail::write_file_durably(link, "runhooks"),
                       doctest::Contains("File exists"), CheckpointError);
  CHECK(ckpt::read_text(target) == "the user's data");
  fs::remove(link);
  const fs::path dangling = dir.path / ".runhooks-probe-0123456789abcdef";
  fs::create_symlink(outside.path / "made-by-us", dangling);
  CHECK_THROWS_AS(runhooks::detail::write_file_durably(dangling, "runhooks"), CheckpointError);
  CHECK_FALSE(fs::exists(outside.path / "made-by-us"));
  const fs::path plain = dir.path / "checkpoint.tmp-fedcba9876543210";
  put_text(plain, "not ours");
  CHECK_THROWS_AS(runhooks::detail::write_file_durably(plain, "runhooks"), CheckpointError);
  CHECK(ckpt::read_text(plain) == "not ours");
  const fs::path fresh = dir.path / "checkpoint.tmp-00000000000000ff";
  runhooks::detail::write_file_durably(fresh, "runhooks");
  CHECK(ckpt::read_text(fresh) == "runhooks");
}
