// expect: runhooks::make_training_session's second argument makes a fresh backend
// max-lines: 16
// The backend itself where a factory belongs. Before issue 30's catch-all overload the compiler
// reported the unmet BackendFactory constraint; with it, this overload keeps the message about
// the factory instead of one about the options' fields.
#include <cstdint>

#include <runhooks/training_session.hpp>

struct Trainer {
  std::int64_t step = 0;
  void run() { ++step; }
  std::int64_t global_step() const { return step; }
};

int main() {
  runhooks::make_training_session({.checkpoint_dir = "ckpt"}, Trainer{});
}
