// expect: runhooks::LambdaHook: two lambdas for the same hook point
// One lambda per point: two for end() in one LambdaHook is an error, not a silent choice.
#include <runhooks/hooks/lambda_hook.hpp>

int main() {
  runhooks::LambdaHook hook{runhooks::on_end([](auto&) {}), runhooks::on_end([](auto&) {})};
  (void)hook;
}
