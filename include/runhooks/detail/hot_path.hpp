// The attributes of the session's per-step path, which the instruction-count suite
// (tests/codegen/) holds at parity with a hand-written loop.
#pragma once

// The per-step path (run(), should_stop() and what they call) is forced inline: it is a few
// instructions once the hooks' calls are inlined, but its rare paths (recovery, errors) make it
// look large to the inliner, and clang otherwise leaves run() as a call on every step.
#if defined(__GNUC__) || defined(__clang__)
#define RUNHOOKS_DETAIL_HOT [[gnu::always_inline]] inline
#define RUNHOOKS_DETAIL_LAMBDA_HOT __attribute__((always_inline))
#else
#define RUNHOOKS_DETAIL_HOT inline
#define RUNHOOKS_DETAIL_LAMBDA_HOT
#endif
