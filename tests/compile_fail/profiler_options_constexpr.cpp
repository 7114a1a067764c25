// expect: Can not provide both every_secs and every_steps
// expect: ProfilerOptions
// Options declared constexpr are checked at compile time: save_steps and save_secs together do
// not compile.
#include <runhooks/hooks/profiler_hook.hpp>

constexpr runhooks::ProfilerOptions options{.save_steps = 100, .save_secs = 60.0};
static_assert((options.validate(), true));

int main() {}
