// expect: Can not provide both every_secs and every_steps
// expect: SummarySaverOptions
// Options declared constexpr are checked at compile time: save_steps and save_secs together do
// not compile (TensorFlow's ValueError; MonitoredTrainingSession's documented doc/code mismatch).
#include <runhooks/hooks/summary_saver_hook.hpp>

constexpr runhooks::SummarySaverOptions options{.save_steps = 100, .save_secs = 60.0};
static_assert((options.validate(), true));

int main() {}
