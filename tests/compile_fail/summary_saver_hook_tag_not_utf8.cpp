// expect: runhooks::SummarySaverHook: a key's name is its summary tag and must be UTF-8
// A Latin-1 key name (issue 29): protobuf's parsers refuse the event, TensorBoard reads nothing after.
#include <runhooks/hooks/summary_saver_hook.hpp>

#include <string_view>

struct Cafe : runhooks::Key<float> {
  static constexpr std::string_view name = "caf\xe9";
};

int main() {
  runhooks::SummarySaverHook hook{{.save_steps = 10}, "logs", runhooks::scalars<Cafe>};
  static_cast<void>(hook);
}
