// TorchrunEnvironment: the variables torchrun gives each worker it starts (rank, world size, where
// the store is, which restart this is), read strictly, so that a program not started by torchrun,
// or started with a bad value, fails with one error that names the variable. Needs no torch
// header: the parse is tested on its own.
#pragma once

#include <runhooks/detail/config.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include <runhooks/error.hpp>

namespace runhooks {

// A c10d job failed: the environment, the store, the process group or a collective. The message
// names this rank ("rank R of N") once it is known, and the variable or option at fault.
class C10dError : public Error {
 public:
  using Error::Error;
};

// What torchrun (torch.distributed.run) sets for each worker, as runhooks uses it:
//   RANK                          this worker's rank, 0 .. WORLD_SIZE-1; rank 0 is the chief
//   WORLD_SIZE                    the number of workers in the job, at least 1
//   LOCAL_RANK                    this worker's rank on its machine, 0 .. WORLD_SIZE-1 (which
//                                 device to use; runhooks itself does not need it)
//   MASTER_ADDR, MASTER_PORT      where the job's c10d store (a TCPStore) listens: a host name or
//                                 address, and a port 1 .. 65535
//   TORCHELASTIC_RESTART_COUNT    how many times torchrun restarted the group so far (0, 1, ...):
//                                 each attempt keeps its store keys apart from the last one's
//   TORCHELASTIC_RUN_ID           the job's id (--rdzv-id; a random one with --standalone)
//   TORCHELASTIC_USE_AGENT_STORE  "True": torchrun's agent already serves the store at
//                                 MASTER_ADDR:MASTER_PORT, and every worker is its client;
//                                 "False": rank 0 serves it (as torch.distributed's env:// does)
//   LOCAL_WORLD_SIZE              optional: the number of workers on this machine (torchrun's
//                                 agent's), LOCAL_RANK+1 .. WORLD_SIZE; below WORLD_SIZE, other
//                                 machines' agents take part in the job (what a launcher's death
//                                 means depends on it: C10dEnvironment)
//   GLOO_SOCKET_IFNAME            optional, not set by torchrun: network interfaces for Gloo,
//                                 comma-separated (e.g. "eth0"), as torch.distributed reads it
// Each is required (LOCAL_WORLD_SIZE and GLOO_SOCKET_IFNAME aside), and each is parsed strictly: decimal digits only
// for numbers, no sign, no spaces, in range; the booleans exactly as Python's str(bool) writes
// them. A variable that is missing or malformed is a C10dError that names it, quotes its value
// and says to launch with torchrun.
struct TorchrunEnvironment {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 0;  // 0: LOCAL_WORLD_SIZE not set
  std::string master_addr;
  int master_port = 0;
  std::int64_t restart_count = 0;
  std::string run_id;
  bool use_agent_store = false;
  std::vector<std::string> gloo_socket_ifnames;  // empty: Gloo's default device

  // Whether agents on other machines take part in the job (LOCAL_WORLD_SIZE below WORLD_SIZE);
  // false without LOCAL_WORLD_SIZE.
  bool spans_machines() const noexcept {
    return local_world_size > 0 && local_world_size < world_size;
  }

  // Reads the variables through getenv(name), a callable returning the value or nullptr when the
  // variable is not set (std::getenv for the process's own: from_environment()).
  template <class Getenv>
  static TorchrunEnvironment parse(Getenv&& getenv);

  static TorchrunEnvironment from_environment() {
    return parse([](const char* name) -> const char* { return std::getenv(name); });
  }
};

// Writes `message` into torchrun's error file for this worker (the path in
// TORCHELASTIC_ERROR_FILE, which torchrun sets for each worker) as torch.distributed.elastic's
// @record writes it for a Python worker: {"message": ..., "timestamp": seconds}. torchrun's failure
// report then shows the message as the worker's traceback (instead of a link on how to record
// one), and names the earliest failure, to the second, as the root cause. Call it before a worker
// exits on an error of its own; c10d_abort_job does. Returns whether it wrote the file: false
// without the variable (not under torchrun) or when the file cannot be written.
inline bool write_torchrun_error_file(std::string_view message) noexcept {
  const char* path = std::getenv("TORCHELASTIC_ERROR_FILE");
  if (path == nullptr || *path == '\0') return false;
  std::FILE* file = std::fopen(path, "w");
  if (file == nullptr) return false;
  std::fputs("{\"message\": \"", file);
  for (const char c : message) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') std::fprintf(file, "\\%c", c);
    else if (u < 0x20) std::fprintf(file, "\\u%04x", u);
    else std::fputc(c, file);
  }
  std::fprintf(file, "\", \"timestamp\": %lld}\n", static_cast<long long>(std::time(nullptr)));
  return std::fclose(file) == 0;
}

namespace detail {

inline constexpr std::string_view launch_with_torchrun =
    "; launch the program with torchrun, which sets it (e.g. `torchrun --standalone "
    "--nproc-per-node 4 --no-python PROGRAM ARGS...`)";

// A value from the environment, quoted for an error message: at most 64 characters, anything
// but printable ASCII as \xNN (the value may be anything, even hostile).
inline std::string quote_variable_value(std::string_view value) {
  std::string quoted = "'";
  std::size_t shown = 0;
  for (const char c : value) {
    if (++shown > 64) {
      quoted += "...";
      break;
    }
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7f && c != '\'' && c != '\\') {
      quoted += c;
    } else {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", byte);
      quoted += escaped;
    }
  }
  return quoted + "'";
}

[[noreturn]] inline void throw_bad_variable(const char* name, std::string_view value,
                                            const std::string& expected,
                                            std::string_view hint = launch_with_torchrun) {
  throw C10dError("runhooks: environment variable " + std::string(name) + "=" +
                  quote_variable_value(value) + " is not " + expected + std::string(hint));
}

// A non-empty run of printable ASCII without spaces: a host name, an address, a run id, an
// interface name.
inline bool is_token(std::string_view value) {
  if (value.empty()) return false;
  for (const char c : value) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte <= 0x20 || byte >= 0x7f) return false;
  }
  return true;
}

// Decimal digits only, at most 18 of them (so no overflow), then checked against [min, max].
inline bool parse_decimal(std::string_view text, std::int64_t min, std::int64_t max,
                          std::int64_t& out) {
  if (text.empty() || text.size() > 18) return false;
  std::int64_t value = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + (c - '0');
  }
  if (value < min || value > max) return false;
  out = value;
  return true;
}

}  // namespace detail

template <class Getenv>
TorchrunEnvironment TorchrunEnvironment::parse(Getenv&& getenv) {
  const auto required = [&getenv](const char* name) -> std::string_view {
    const char* value = getenv(name);
    if (value == nullptr)
      throw C10dError("runhooks: environment variable " + std::string(name) + " is not set" +
                      std::string(detail::launch_with_torchrun));
    return value;
  };
  const auto integer = [&](const char* name, std::int64_t min, std::int64_t max,
                           const std::string& range, std::string_view text = {}) {
    if (text.data() == nullptr) text = required(name);
    std::int64_t value = 0;
    if (!detail::parse_decimal(text, min, max, value))
      detail::throw_bad_variable(name, text, "an integer " + range);
    return value;
  };
  constexpr std::int64_t int_max = std::numeric_limits<int>::max();

  TorchrunEnvironment env;
  const std::string_view rank = required("RANK");  // first: without torchrun, the error names it
  env.world_size =
      static_cast<int>(integer("WORLD_SIZE", 1, int_max, "from 1 to " + std::to_string(int_max)));
  const std::string ranks = "from 0 to " + std::to_string(env.world_size - 1) + " (WORLD_SIZE=" +
                            std::to_string(env.world_size) + " minus 1)";
  env.rank = static_cast<int>(integer("RANK", 0, env.world_size - 1, ranks, rank));
  env.local_rank = static_cast<int>(integer("LOCAL_RANK", 0, env.world_size - 1, ranks));
  if (const char* local_world_size = getenv("LOCAL_WORLD_SIZE")) {  // optional; torchrun sets it
    env.local_world_size = static_cast<int>(integer(
        "LOCAL_WORLD_SIZE", env.local_rank + 1, env.world_size,
        "from " + std::to_string(env.local_rank + 1) + " (LOCAL_RANK=" +
            std::to_string(env.local_rank) + " plus 1) to " + std::to_string(env.world_size) +
            " (WORLD_SIZE)",
        local_world_size));
  }
  const std::string_view addr = required("MASTER_ADDR");
  if (!detail::is_token(addr))
    detail::throw_bad_variable("MASTER_ADDR", addr, "a host name or address");
  env.master_addr = std::string(addr);
  env.master_port = static_cast<int>(integer("MASTER_PORT", 1, 65535, "from 1 to 65535"));
  env.restart_count = integer("TORCHELASTIC_RESTART_COUNT", 0,
                              std::numeric_limits<std::int64_t>::max(), "of at least 0");
  const std::string_view run_id = required("TORCHELASTIC_RUN_ID");
  if (!detail::is_token(run_id))
    detail::throw_bad_variable("TORCHELASTIC_RUN_ID", run_id,
                               "a run id (printable characters, no spaces)");
  env.run_id = std::string(run_id);
  const std::string_view agent = required("TORCHELASTIC_USE_AGENT_STORE");
  if (agent != "True" && agent != "False")
    detail::throw_bad_variable("TORCHELASTIC_USE_AGENT_STORE", agent, "True or False");
  env.use_agent_store = agent == "True";
  if (const char* ifname = getenv("GLOO_SOCKET_IFNAME")) {  // optional; torch.distributed's
    const std::string_view names = ifname;
    std::size_t at = 0;
    for (;;) {
      const std::size_t comma = names.find(',', at);
      const std::string_view name = names.substr(at, comma - at);
      if (!detail::is_token(name))
        detail::throw_bad_variable("GLOO_SOCKET_IFNAME", names,
                                   "a comma-separated list of network interfaces",
                                   " (it is optional: unset, Gloo uses the host name's interface)");
      env.gloo_socket_ifnames.emplace_back(name);
      if (comma == std::string_view::npos) break;
      at = comma + 1;
    }
  }
  return env;
}

}  // namespace runhooks
