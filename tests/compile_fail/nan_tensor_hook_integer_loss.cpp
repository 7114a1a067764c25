// expect: runhooks::NanTensorHook watches a floating-point loss
// An integer cannot be NaN: NanTensorHook on an integer key is a mistake.
#include <runhooks/hooks/nan_tensor_hook.hpp>

struct Errors : runhooks::Key<int> {};

int main() {
  runhooks::NanTensorHook<Errors> hook;
  (void)hook;
}
