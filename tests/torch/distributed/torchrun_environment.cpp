// TorchrunEnvironment::parse: torchrun's variables read strictly. A complete set parses; each
// missing or malformed variable is one C10dError that names it, quotes its value and says to
// launch with torchrun; and, on random values for each variable in turn, the parse accepts exactly
// what a reference model (std::from_chars, written independently) accepts, with the same value.

#include <runhooks/torch/distributed/torchrun_environment.hpp>

#include <doctest/doctest.h>

#include <charconv>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <system_error>

namespace {

using Variables = std::map<std::string, std::string>;

Variables torchrun_variables() {
  return {{"RANK", "2"},
          {"WORLD_SIZE", "4"},
          {"LOCAL_RANK", "2"},
          {"MASTER_ADDR", "127.0.0.1"},
          {"MASTER_PORT", "29500"},
          {"TORCHELASTIC_RESTART_COUNT", "0"},
          {"TORCHELASTIC_RUN_ID", "5f0c0f5e-run"},
          {"TORCHELASTIC_USE_AGENT_STORE", "True"}};
}

runhooks::TorchrunEnvironment parse(const Variables& variables) {
  return runhooks::TorchrunEnvironment::parse([&](const char* name) -> const char* {
    const auto found = variables.find(name);
    return found == variables.end() ? nullptr : found->second.c_str();
  });
}

std::string error_of(const Variables& variables) {
  try {
    parse(variables);
  } catch (const runhooks::C10dError& e) {
    return e.what();
  }
  return {};
}

// The reference: a value in [min, max] written as decimal digits only.
std::optional<std::int64_t> reference_integer(const std::string& text, std::int64_t min,
                                              std::int64_t max) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) return {};
  std::int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return {};
  if (value < min || value > max) return {};
  return value;
}

std::string random_value(std::mt19937& random) {
  static const std::string alphabet = "0123456789 +-x.eE\t,:/'\\\x01\x7f\xff";
  static const std::string pool[] = {"",      "0",     "1",     "3",       "4",      "65535",
                                     "65536", "True",  "False", "true",    "eth0",   "-0",
                                     "007",   "2147483647", "2147483648", "9223372036854775807",
                                     "99999999999999999999"};
  std::uniform_int_distribution<int> kind(0, 2);
  if (kind(random) == 0) return pool[random() % std::size(pool)];
  std::string value;
  const int length = static_cast<int>(random() % 12);
  const bool digits_only = kind(random) == 0;
  for (int i = 0; i < length; ++i)
    value += digits_only ? static_cast<char>('0' + random() % 10)
                         : alphabet[random() % alphabet.size()];
  return value;
}

}  // namespace

TEST_CASE("torchrun's variables parse") {
  const runhooks::TorchrunEnvironment env = parse(torchrun_variables());
  CHECK(env.rank == 2);
  CHECK(env.world_size == 4);
  CHECK(env.local_rank == 2);
  CHECK(env.master_addr == "127.0.0.1");
  CHECK(env.master_port == 29500);
  CHECK(env.restart_count == 0);
  CHECK(env.run_id == "5f0c0f5e-run");
  CHECK(env.use_agent_store);
  CHECK(env.gloo_socket_ifnames.empty());

  Variables variables = torchrun_variables();
  variables["TORCHELASTIC_USE_AGENT_STORE"] = "False";
  variables["GLOO_SOCKET_IFNAME"] = "eth0,ib0";
  variables["TORCHELASTIC_RESTART_COUNT"] = "3";
  const runhooks::TorchrunEnvironment other = parse(variables);
  CHECK(!other.use_agent_store);
  CHECK(other.restart_count == 3);
  CHECK((other.gloo_socket_ifnames == std::vector<std::string>{"eth0", "ib0"}));
}

TEST_CASE("LOCAL_WORLD_SIZE is optional, and says whether other machines take part") {
  Variables variables = torchrun_variables();  // WORLD_SIZE 4, LOCAL_RANK 2
  CHECK(parse(variables).local_world_size == 0);
  CHECK(!parse(variables).spans_machines());
  variables["LOCAL_WORLD_SIZE"] = "4";
  CHECK(parse(variables).local_world_size == 4);
  CHECK(!parse(variables).spans_machines());
  variables["LOCAL_WORLD_SIZE"] = "3";
  CHECK(parse(variables).local_world_size == 3);
  CHECK(parse(variables).spans_machines());
  for (const char* bad : {"2", "5", "0", "", "x", "+3", "3 "}) {
    variables["LOCAL_WORLD_SIZE"] = bad;
    CAPTURE(bad);
    CHECK(error_of(variables) ==
          "runhooks: environment variable LOCAL_WORLD_SIZE='" + std::string(bad) +
              "' is not an integer from 3 (LOCAL_RANK=2 plus 1) to 4 (WORLD_SIZE); launch the "
              "program with torchrun, which sets it (e.g. `torchrun --standalone "
              "--nproc-per-node 4 --no-python PROGRAM ARGS...`)");
  }
}

TEST_CASE("a missing variable is one error naming it and saying to launch with torchrun") {
  CHECK(error_of({}) ==
        "runhooks: environment variable RANK is not set; launch the program with torchrun, which "
        "sets it (e.g. `torchrun --standalone --nproc-per-node 4 --no-python PROGRAM ARGS...`)");
  for (const auto& entry : torchrun_variables()) {
    const std::string name = entry.first;  // not a structured binding: CAPTURE is a lambda
    Variables variables = torchrun_variables();
    variables.erase(name);
    CAPTURE(name);
    CHECK(error_of(variables).starts_with("runhooks: environment variable " + name +
                                          " is not set; launch the program with torchrun"));
  }
}

TEST_CASE("a malformed variable is one error naming it, quoting its value") {
  const struct {
    const char* name;
    const char* value;
    const char* expected;
  } cases[] = {
      {"RANK", "abc", "RANK='abc' is not an integer from 0 to 3 (WORLD_SIZE=4 minus 1)"},
      {"RANK", "4", "RANK='4' is not an integer from 0 to 3"},
      {"RANK", "-1", "RANK='-1' is not an integer"},
      {"RANK", "+1", "RANK='+1' is not an integer"},
      {"RANK", "1 ", "RANK='1 ' is not an integer"},
      {"RANK", "", "RANK='' is not an integer"},
      {"WORLD_SIZE", "0", "WORLD_SIZE='0' is not an integer from 1 to 2147483647"},
      {"WORLD_SIZE", "2147483648", "WORLD_SIZE='2147483648' is not an integer"},
      {"LOCAL_RANK", "4", "LOCAL_RANK='4' is not an integer from 0 to 3"},
      {"MASTER_ADDR", "", "MASTER_ADDR='' is not a host name or address"},
      {"MASTER_ADDR", "local host", "MASTER_ADDR='local host' is not a host name or address"},
      {"MASTER_PORT", "0", "MASTER_PORT='0' is not an integer from 1 to 65535"},
      {"MASTER_PORT", "29500x", "MASTER_PORT='29500x' is not an integer from 1 to 65535"},
      {"TORCHELASTIC_RESTART_COUNT", "1.0",
       "TORCHELASTIC_RESTART_COUNT='1.0' is not an integer of at least 0"},
      {"TORCHELASTIC_RUN_ID", "a\nb",
       "TORCHELASTIC_RUN_ID='a\\x0ab' is not a run id (printable characters, no spaces)"},
      {"TORCHELASTIC_USE_AGENT_STORE", "1",
       "TORCHELASTIC_USE_AGENT_STORE='1' is not True or False"},
      {"GLOO_SOCKET_IFNAME", "eth0,", "GLOO_SOCKET_IFNAME='eth0,' is not a comma-separated list of "
                                      "network interfaces (it is optional"},
  };
  for (const auto& c : cases) {
    Variables variables = torchrun_variables();
    variables[c.name] = c.value;
    CAPTURE(c.name);
    CAPTURE(c.value);
    const std::string error = error_of(variables);
    CHECK(error.starts_with("runhooks: environment variable " + std::string(c.expected)));
    if (std::string(c.name) != "GLOO_SOCKET_IFNAME")
      CHECK(error.find("; launch the program with torchrun") != std::string::npos);
  }
  // A long or binary value is quoted shortened and escaped.
  Variables variables = torchrun_variables();
  variables["MASTER_ADDR"] = std::string(100, 'a') + " ";
  CHECK(error_of(variables).find("MASTER_ADDR='" + std::string(64, 'a') + "...' is not") !=
        std::string::npos);
}

TEST_CASE("on random values, the parse accepts exactly what the reference accepts") {
  std::mt19937 random(20);
  const auto names = torchrun_variables();
  int accepted = 0, rejected = 0;
  for (int i = 0; i < 20000; ++i) {
    auto it = names.begin();
    std::advance(it, static_cast<long>(random() % names.size()));
    const std::string name = it->first;
    const std::string value = random_value(random);
    Variables variables = torchrun_variables();
    variables[name] = value;
    CAPTURE(name);
    CAPTURE(value);
    // The reference, with the other variables as in torchrun_variables() (WORLD_SIZE 4).
    std::optional<std::int64_t> expected;
    const std::int64_t world =
        name == "WORLD_SIZE" ? reference_integer(value, 1, 2147483647).value_or(-1) : 4;
    if (name == "WORLD_SIZE") {
      // RANK=2 and LOCAL_RANK=2 must then be below it too.
      expected = world >= 3 ? std::optional<std::int64_t>(world) : std::nullopt;
    } else if (name == "RANK" || name == "LOCAL_RANK") {
      expected = reference_integer(value, 0, world - 1);
    } else if (name == "MASTER_PORT") {
      expected = reference_integer(value, 1, 65535);
    } else if (name == "TORCHELASTIC_RESTART_COUNT") {
      expected = reference_integer(value, 0, INT64_MAX);
      if (value.size() > 18) expected.reset();  // more digits than the parse reads
    } else if (name == "TORCHELASTIC_USE_AGENT_STORE") {
      if (value == "True" || value == "False") expected = value == "True";
    } else {  // MASTER_ADDR, TORCHELASTIC_RUN_ID: printable, no spaces
      bool token = !value.empty();
      for (const char c : value)
        token = token && static_cast<unsigned char>(c) > 0x20 &&
                static_cast<unsigned char>(c) < 0x7f;
      if (token) expected = 0;
    }
    const std::string error = error_of(variables);
    if (expected) {
      ++accepted;
      REQUIRE(error.empty());
      const runhooks::TorchrunEnvironment env = parse(variables);
      if (name == "RANK") CHECK(env.rank == *expected);
      if (name == "LOCAL_RANK") CHECK(env.local_rank == *expected);
      if (name == "WORLD_SIZE") CHECK(env.world_size == *expected);
      if (name == "MASTER_PORT") CHECK(env.master_port == *expected);
      if (name == "TORCHELASTIC_RESTART_COUNT") CHECK(env.restart_count == *expected);
      if (name == "TORCHELASTIC_USE_AGENT_STORE") CHECK(env.use_agent_store == (*expected != 0));
      if (name == "MASTER_ADDR") CHECK(env.master_addr == value);
      if (name == "TORCHELASTIC_RUN_ID") CHECK(env.run_id == value);
    } else {
      ++rejected;
      // WORLD_SIZE below 3 is valid itself, but then RANK=2 is not: the error names RANK.
      const std::string named = name == "WORLD_SIZE" && world >= 1 ? "RANK" : name;
      REQUIRE(error.starts_with("runhooks: environment variable " + named + "="));
      CHECK(error.find("; launch the program with torchrun") != std::string::npos);
    }
  }
  MESSAGE(accepted << " accepted, " << rejected << " rejected");
  CHECK(accepted > 1000);
  CHECK(rejected > 1000);
}
